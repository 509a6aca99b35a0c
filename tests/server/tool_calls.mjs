// Tool calls through the official openai client (ctest server_tool_calls), on the emulator, with the
// shipped model (its template is Qwen2.5's, <tool_call> blocks): with tool_choice "required" every call
// parses and its arguments validate against the function's parameters with ajv (not this project's
// code); a named function is the one called; streamed calls (id, name, argument deltas) add up to the
// unstreamed reply; tools and tool results reach the prompt as the model's own template renders them
// (@huggingface/jinja, @huggingface/tokenizers); what cannot be done is a 400 naming it.
//   node tool_calls.mjs --server MK_SERVER --run MK_RUN --make-model MK_TINY_CHAT_MODEL --model SHIPPED_MODEL_DIR [--work DIR]
// MK_SERVER_TEST_GPU=1: the shipped model's server runs without --emulator (the GPU on a GPU machine).
import assert from "node:assert/strict";
import path from "node:path";
import OpenAI from "openai";
import Ajv2020 from "ajv/dist/2020.js";
import { parseArgs, test, run, Server, makeModel, Reference } from "./common.mjs";

const args = parseArgs();
if (!args.model) throw new Error("missing --model (the shipped model's directory)");
const gpu = process.env.MK_SERVER_TEST_GPU === "1";
const server = await Server.start(args.server, args.model, ["-c", "2048", "--seed", "1", "-q"], { emulator: !gpu });
if (gpu && !/mk-server: backend gpu monokernel/.test(server.log)) {
  console.log(`FAIL MK_SERVER_TEST_GPU=1 but mk-server is not on the GPU:\n${server.log}`);
  await server.stop();
  process.exit(1);
}
const client = new OpenAI({ apiKey: "none", baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 120000 });
const ajv = new Ajv2020({ strict: false });

const fn = (name, description, parameters) => ({ type: "function", function: { name, description, ...(parameters ? { parameters } : {}) } });
const tools = [
  fn("get_weather", "Current weather in a city", {
    type: "object",
    properties: { city: { type: "string", maxLength: 20 }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
    required: ["city", "unit"],
    additionalProperties: false,
  }),
  fn("search_files", "Find files by name", {
    type: "object",
    properties: {
      pattern: { type: "string", pattern: "^[a-z_*.]{1,16}$" },
      limit: { type: "integer" },
      recursive: { type: "boolean" },
      exclude: { type: "array", items: { type: "string", maxLength: 10 }, maxItems: 3 },
    },
    required: ["pattern", "limit", "recursive", "exclude"],
    additionalProperties: false,
  }),
  fn("now", "The current time", null),
];
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters ?? { type: "object", maxProperties: 0 })]));
const messages = [{ role: "user", content: "What is the weather in Paris, and which Python files are here?" }];

// A call parses, names a given function and its arguments validate.
function checkCall(call, where) {
  assert.equal(call.type, "function", where);
  assert.match(call.id, /^call_/, where);
  const check = validators[call.function.name];
  assert.ok(check, `${where}: unknown function ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  assert.ok(check(args), `${where}: ${call.function.arguments}: ${ajv.errorsText(check.errors)}`);
}

test('tool_choice "required": 40 replies at temperature 0.8, every call parses and validates', async () => {
  let calls = 0;
  for (let seed = 1; seed <= 40; ++seed) {
    // Half of them with the two functions that take arguments, one call each; the others one to eight calls.
    const some = seed % 2 === 0 ? { tools: tools.slice(0, 2), parallel_tool_calls: false } : { tools };
    const r = await client.chat.completions.create({ model: "m", messages, ...some, tool_choice: "required", temperature: 0.8, seed,
                                                     max_tokens: 1000 });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls", `seed ${seed}: ${JSON.stringify(c.message)}`);
    assert.equal(c.message.content, null, `seed ${seed}`);
    assert.ok(c.message.tool_calls.length >= 1, `seed ${seed}`);
    c.message.tool_calls.forEach((call, i) => checkCall(call, `seed ${seed} call ${i}`));
    assert.equal(new Set(c.message.tool_calls.map((t) => t.id)).size, c.message.tool_calls.length, "ids are unique");
    calls += c.message.tool_calls.length;
  }
  console.log(`  40 replies, ${calls} calls, all valid`);
});

test("a named function is the one called, once; parallel_tool_calls false gives one call", async () => {
  for (const seed of [3, 4, 5]) {
    for (const name of ["search_files", "get_weather"]) {
      const r = await client.chat.completions.create({ model: "m", messages, tools, temperature: 0.8, seed, max_tokens: 300,
                                                       tool_choice: { type: "function", function: { name } } });
      assert.equal(r.choices[0].finish_reason, "tool_calls");
      const calls = r.choices[0].message.tool_calls;
      assert.equal(calls.length, 1);
      assert.equal(calls[0].function.name, name);
      checkCall(calls[0], `seed ${seed}`);
    }
    const one = await client.chat.completions.create({ model: "m", messages, tools, tool_choice: "required", parallel_tool_calls: false,
                                                       temperature: 0.8, seed, max_tokens: 1000 });
    assert.equal(one.choices[0].message.tool_calls.length, 1);
  }
});

test("streamed: the first delta of a call has its index, id, type and name; the argument deltas add up to the unstreamed reply", async () => {
  for (const seed of [7, 8]) {
    const request = { model: "m", messages, tools, tool_choice: "required", temperature: 0.8, seed, max_tokens: 1000 };
    const whole = (await client.chat.completions.create(request)).choices[0];
    const stream = await client.chat.completions.create({ ...request, stream: true });
    const calls = [];
    let finish = null, content = "";
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        content += c.delta.content ?? "";
        finish = c.finish_reason ?? finish;
        for (const d of c.delta.tool_calls ?? []) {
          if (d.id !== undefined) {
            assert.equal(d.index, calls.length, "calls start in order");
            assert.equal(d.type, "function");
            assert.ok(d.function.name);
            calls.push({ id: d.id, type: d.type, function: { name: d.function.name, arguments: d.function.arguments ?? "" } });
          } else {
            assert.ok(d.index < calls.length, "arguments come after their call's start");
            assert.equal(d.function.name, undefined);
            calls[d.index].function.arguments += d.function.arguments;
          }
        }
      }
    }
    assert.equal(finish, "tool_calls");
    assert.equal(content, "");
    // The ids are the response's own.
    const withoutIds = (list) => list.map(({ id, ...rest }) => rest);
    calls.forEach((c, i) => assert.match(c.id, new RegExp(`^call_.*_${i}$`)));
    assert.deepEqual(withoutIds(calls), withoutIds(whole.message.tool_calls));
  }
});

test('tool_choice "auto": the shipped model (which was never taught tools) answers in text', async () => {
  const r = await client.chat.completions.create({ model: "m", messages, tools, temperature: 0, max_tokens: 40 });
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.choices[0].finish_reason === "stop" || r.choices[0].finish_reason === "length", true);
});

test("tools, a call and the tool's result reach the prompt as the model's template renders them", async () => {
  const ref = new Reference(args.model, args.run, 2048);
  const conversation = [
    ...messages,
    { role: "assistant", content: null,
      tool_calls: [{ id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' } },
                   { id: "call_b", type: "function", function: { name: "now", arguments: "{}" } }] },
    { role: "tool", tool_call_id: "call_a", content: '{"temperature": 21}' },
    { role: "tool", tool_call_id: "call_b", content: "12:00" },
  ];
  const r = await client.chat.completions.create({ model: "m", messages: conversation, tools, temperature: 0, max_tokens: 1 });
  // The template takes the arguments as objects (as transformers and vLLM hand them to it).
  const rendered = conversation.map((m) => m.tool_calls ? { ...m, content: "", tool_calls: m.tool_calls.map((c) => ({ ...c, function: { ...c.function, arguments: JSON.parse(c.function.arguments) } })) } : m);
  assert.equal(r.usage.prompt_tokens, ref.chatPrompt(rendered, tools).length);
  const none = await client.chat.completions.create({ model: "m", messages, tools, tool_choice: "none", temperature: 0, max_tokens: 1 });
  assert.equal(none.usage.prompt_tokens, ref.chatPrompt(messages).length, 'tool_choice "none": the model is not shown the tools');
});

test("what cannot be done is a 400 naming it", async () => {
  const bad = [fn("f", "", { type: "object", properties: { n: { type: "integer", minimum: 1 } } })];
  await assert.rejects(client.chat.completions.create({ model: "m", messages, tools: bad, tool_choice: "required" }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "tools");
    assert.match(e.message, /tools\[0\]\.function\.parameters.*minimum/);
    return true;
  });
  // auto does not constrain, so its schema is not compiled: the same tools are fine.
  const ok = await client.chat.completions.create({ model: "m", messages, tools: bad, max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
  const tiny = await Server.start(args.server, makeModel(args["make-model"], path.join(args.work, "model")), ["-c", "256", "-q"]);
  try {
    const c = new OpenAI({ apiKey: "none", baseURL: `${tiny.url}/v1`, maxRetries: 0 });
    await assert.rejects(c.chat.completions.create({ model: "m", messages, tools }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, "tools");
      assert.match(e.message, /has no tool-call format/);
      return true;
    });
  } finally {
    await tiny.stop();
  }
});

await run(async () => {
  const status = await server.stop();
  assert.equal(status.code, 0, server.log);
});
