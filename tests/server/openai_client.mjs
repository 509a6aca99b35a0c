// The official openai npm client against mk-server (ctest server_openai_client): chat and text
// completions, streamed and not, multi-turn prefix reuse, stop strings, the API key, and an abort
// mid-stream. Every generated text must equal what mk-run generates for the prompt that
// @huggingface/jinja + @huggingface/tokenizers make of the same request (common.mjs: Reference), for the
// same sampling parameters and seed.
//   node openai_client.mjs --server MK_SERVER --run MK_RUN --make-model MK_TINY_CHAT_MODEL [--work DIR]
// MK_SERVER_TEST_GPU=1: the server runs without --emulator (the GPU on a GPU machine); the expected
// outputs still come from mk-run on the emulator, so greedy requests are compared there and sampled ones
// only for their shape (the GPU's floating-point order differs from the emulator's).
import assert from "node:assert/strict";
import path from "node:path";
import OpenAI from "openai";
import { parseArgs, test, run, Server, Reference, makeModel, sleep } from "./common.mjs";

const args = parseArgs();
const gpu = process.env.MK_SERVER_TEST_GPU === "1";
const KEY = "sk-test-0123456789";
const CONTEXT = 2048;
const modelDir = makeModel(args["make-model"], path.join(args.work, "model"));
const ref = new Reference(modelDir, args.run, CONTEXT);
const extra = ["-c", String(CONTEXT), "--api-key", KEY, "--seed", "1"];
const server = await Server.start(args.server, modelDir, extra, { emulator: !gpu });
console.log(server.log.split("\n").filter((l) => l.startsWith("mk-server:")).join("\n"));
if (gpu && !/mk-server: backend gpu monokernel/.test(server.log)) {
  console.log(`FAIL MK_SERVER_TEST_GPU=1 but mk-server is not on the GPU:\n${server.log}`);
  await server.stop();
  process.exit(1);
}
const client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 120000 });

const SAMPLED = { temperature: 0.9, top_k: 40, top_p: 0.95, min_p: 0.05, seed: 1234 };
const GREEDY = { temperature: 0, top_k: 0, top_p: 1, min_p: 0, seed: 0 };
const sampling = gpu ? GREEDY : SAMPLED;  // on a GPU, only greedy output can be compared with the emulator
const user = (content) => ({ role: "user", content });

async function collectStream(stream) {
  let text = "", finish = null, usage = null, chunks = 0, roles = 0, id = null;
  for await (const chunk of stream) {
    id ??= chunk.id;
    assert.equal(chunk.id, id, "every chunk of a stream carries the same id");
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.role) roles++;
      text += c.delta?.content ?? c.text ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
    chunks++;
  }
  return { text, finish, usage, chunks, roles };
}

test("models.list names the model", async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.equal(models.length, 1);
  assert.equal(models[0].id, "model");
  assert.equal(models[0].object, "model");
  assert.equal((await client.models.retrieve("model")).id, "model");
});

const messages = [{ role: "system", content: "You are terse." }, user("Hello there, who are you?")];
const chatPrompt = ref.chatPrompt(messages);
const chatExpected = ref.reply(chatPrompt, { max_tokens: 24, ...sampling });

test("chat.completions.create (not streamed) equals mk-run", async () => {
  const r = await client.chat.completions.create({ model: "model", messages, max_tokens: 24, ...sampling });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(r.choices[0].message.content, chatExpected.text);
  assert.equal(r.choices[0].finish_reason, chatExpected.finish);
  assert.equal(r.usage.prompt_tokens, chatPrompt.length);
  assert.equal(r.usage.completion_tokens, chatExpected.tokens.length);
  assert.equal(r.usage.total_tokens, chatPrompt.length + chatExpected.tokens.length);
  assert.equal(r.model, "model");
});

test("chat.completions.create (streamed) equals mk-run; the same prompt again reuses the cache", async () => {
  const stream = await client.chat.completions.create({
    model: "model", messages, max_tokens: 24, stream: true, stream_options: { include_usage: true }, ...sampling,
  });
  const s = await collectStream(stream);
  assert.equal(s.text, chatExpected.text);
  assert.equal(s.finish, chatExpected.finish);
  assert.equal(s.roles, 1, "the role comes in the first delta only");
  assert.ok(s.chunks >= 3, `${s.chunks} chunks: expected one per token or so`);
  assert.equal(s.usage.prompt_tokens, chatPrompt.length);
  assert.equal(s.usage.completion_tokens, chatExpected.tokens.length);
  // The previous request had this very prompt: all but its last token was in the cache.
  assert.equal(s.usage.prompt_tokens_details.cached_tokens, chatPrompt.length - 1);
});

test("a conversation that goes on ingests only the new turn and still equals mk-run", async () => {
  const first = await client.chat.completions.create({ model: "model", messages, max_tokens: 12, ...GREEDY });
  const next = [...messages, { role: "assistant", content: first.choices[0].message.content }, user("And then?")];
  const prompt = ref.chatPrompt(next);
  const expected = ref.reply(prompt, { max_tokens: 12, ...GREEDY });
  const r = await client.chat.completions.create({ model: "model", messages: next, max_tokens: 12, ...GREEDY });
  assert.equal(r.choices[0].message.content, expected.text);
  assert.equal(r.usage.prompt_tokens, prompt.length);
  // At least the previous prompt is reused (re-encoding the reply's text may split it differently from
  // how the model generated it, which ends the shared prefix inside the reply).
  const cached = r.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= chatPrompt.length - 1 && cached < prompt.length, `cached ${cached} of ${prompt.length} (previous prompt ${chatPrompt.length})`);
});

test("completions.create with a text prompt, streamed and not, equals mk-run", async () => {
  const prompt = "Once upon a time";
  const ids = ref.textPrompt(prompt);
  const expected = ref.reply(ids, { max_tokens: 20, ...sampling });
  const r = await client.completions.create({ model: "model", prompt, max_tokens: 20, ...sampling });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices[0].text, expected.text);
  assert.equal(r.choices[0].finish_reason, expected.finish);
  assert.equal(r.usage.prompt_tokens, ids.length);
  const s = await collectStream(await client.completions.create({ model: "model", prompt, max_tokens: 20, stream: true, ...sampling }));
  assert.equal(s.text, expected.text);
  assert.equal(s.finish, expected.finish);
  // Token ids as the prompt.
  const byIds = await client.completions.create({ model: "model", prompt: ids, max_tokens: 20, ...sampling });
  assert.equal(byIds.choices[0].text, expected.text);
});

test("a stop string ends the reply before it, and no streamed chunk holds part of it", async () => {
  const full = ref.reply(chatPrompt, { max_tokens: 40, ...GREEDY });
  assert.ok(full.text.length > 20, `reply too short to pick a stop string from: ${JSON.stringify(full.text)}`);
  const stop = full.text.slice(12, 15);
  const cut = full.text.slice(0, full.text.indexOf(stop));
  const r = await client.chat.completions.create({ model: "model", messages, max_tokens: 40, stop: [stop, "\u00e9t\u00e9"], ...GREEDY });
  assert.equal(r.choices[0].message.content, cut);
  assert.equal(r.choices[0].finish_reason, "stop");
  const stream = await client.chat.completions.create({ model: "model", messages, max_tokens: 40, stop, stream: true, ...GREEDY });
  let text = "";
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? "";
    assert.ok(cut.startsWith(text), `streamed text ${JSON.stringify(text)} is not a prefix of ${JSON.stringify(cut)}`);
  }
  assert.equal(text, cut);
});

test("errors arrive as the client's error classes with OpenAI's fields", async () => {
  const bad = new OpenAI({ apiKey: "wrong", baseURL: `${server.url}/v1`, maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === "invalid_api_key");
  await assert.rejects(client.chat.completions.create({ model: "model", messages, n: 3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "n" && /must be 1/.test(e.message));
  const long = "word ".repeat(CONTEXT);
  await assert.rejects(client.completions.create({ model: "model", prompt: long, max_tokens: 1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded");
});

test("an abort mid-stream cancels the generation within a token, and the next request starts at once", async () => {
  // A slower model: tokens ~20 ms apart on the emulator, far more than the time a disconnect takes to
  // reach the server, so "within a token" is a count, not a race.
  const slowDir = makeModel(args["make-model"], path.join(args.work, "slow-model"),
    ["--layers", "8", "--hidden", "256", "--intermediate", "768", "--heads", "8", "--kv-heads", "4", "--head-dim", "32"]);
  const slow = await Server.start(args.server, slowDir, ["-c", "512", "--temp", "0"]);
  try {
    const c = new OpenAI({ apiKey: "none", baseURL: `${slow.url}/v1`, maxRetries: 0 });
    const stream = await c.chat.completions.create({ model: "m", messages, max_tokens: 400, stream: true });
    let received = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) received++;
      if (received === 5) break;  // leaving the loop aborts the request (closes the connection)
    }
    const t0 = Date.now();
    const next = await c.chat.completions.create({ model: "m", messages: [user("next")], max_tokens: 2 });
    const waited = Date.now() - t0;
    assert.equal(next.choices[0].finish_reason, "length");
    // The log line of the cancelled generation: "... N generated, ... cancelled".
    const line = slow.log.split("\n").find((l) => / generated, .*cancelled$/.test(l));
    assert.ok(line, `no cancelled generation in the log:\n${slow.log}`);
    const generated = Number(line.match(/(\d+) generated/)[1]);
    // Received 5; the 6th was being generated when the connection closed; the 7th at most if the close
    // arrived just after the server's check on the 6th.
    assert.ok(generated <= received + 2, `generated ${generated} tokens for a client that left after ${received}`);
    assert.ok(next.timings.queue_ms < 1000, `the next request waited ${next.timings.queue_ms} ms for the generator`);
    console.log(`  abort: ${received} tokens received, ${generated} generated; next request queued ${next.timings.queue_ms.toFixed(1)} ms, answered in ${waited} ms`);
    const m = await slow.metrics();
    assert.equal(m['mk_generations_total{endpoint="chat",finish_reason="cancelled"}'], 1);
  } finally {
    const status = await slow.stop();
    assert.equal(status.code, 0, `the slow server did not stop cleanly: ${JSON.stringify(status)}\n${slow.log}`);
  }
});

if (gpu) {
  // The count above is for the emulator's slow model; on the GPU, check the cancel and the next start.
  test("(GPU) an abort mid-stream cancels the generation, and the next request starts at once", async () => {
    const before = (await server.metrics({ Authorization: `Bearer ${KEY}` }))['mk_generations_total{endpoint="chat",finish_reason="cancelled"}'] ?? 0;
    const stream = await client.chat.completions.create({ model: "model", messages, max_tokens: 2000, stream: true, ...GREEDY });
    let received = 0;
    for await (const chunk of stream) if (chunk.choices[0]?.delta?.content && ++received === 5) break;
    const next = await client.chat.completions.create({ model: "model", messages: [user("next")], max_tokens: 2, ...GREEDY });
    assert.ok(next.timings.queue_ms < 50, `the next request waited ${next.timings.queue_ms} ms for the generator`);
    const after = (await server.metrics({ Authorization: `Bearer ${KEY}` }))['mk_generations_total{endpoint="chat",finish_reason="cancelled"}'];
    assert.equal(after, before + 1);
  });
}

test("the server stops cleanly on SIGTERM", async () => {
  const status = await server.stop();
  assert.equal(status.code, 0, `exit ${JSON.stringify(status)}\n${server.log}`);
});

await run(async () => {
  if (server.alive()) await server.stop();
});
