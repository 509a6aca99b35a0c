// Log-probabilities and logit_bias through the official openai client (ctest server_logprobs), on the
// emulator: each token's entry names the token the model generated (the expected tokens come from mk-run
// and the tokenizer of @huggingface/tokenizers, not from the server), streamed entries equal the whole
// response's, the legacy completions form lines up with the text, and a bias moves the choice as the
// returned log-probabilities say it must. The values themselves are checked against the fp32 reference in
// tests/test_logit_requests.cpp.
//   node logprobs.mjs --server MK_SERVER --run MK_RUN --make-model MK_TINY_CHAT_MODEL [--work DIR]
import assert from "node:assert/strict";
import path from "node:path";
import OpenAI from "openai";
import { parseArgs, test, run, Server, Reference, makeModel } from "./common.mjs";

const args = parseArgs();
const CONTEXT = 1024;
const modelDir = makeModel(args["make-model"], path.join(args.work, "model"));
const ref = new Reference(modelDir, args.run, CONTEXT);
const server = await Server.start(args.server, modelDir, ["-c", String(CONTEXT), "--seed", "1", "-q"]);
const client = new OpenAI({ apiKey: "none", baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 120000 });
const messages = [{ role: "user", content: "Tell me about the sea." }];
const MAX = 24;

function checkEntry(e, top) {
  assert.ok(e.logprob <= 0, JSON.stringify(e));
  assert.deepEqual(e.bytes, [...Buffer.from(e.token, "utf8")]);
  assert.equal(e.top_logprobs.length, top);
  for (let i = 1; i < e.top_logprobs.length; i++) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob, JSON.stringify(e));
  const mass = e.top_logprobs.reduce((s, t) => s + Math.exp(t.logprob), 0);
  assert.ok(mass <= 1 + 1e-4, `the alternatives' probabilities add up to ${mass}`);
}

let greedyEntries;
test("chat, greedy: an entry per generated token, the token first among its alternatives", async () => {
  const r = await client.chat.completions.create({ model: "m", messages, max_tokens: MAX, temperature: 0, logprobs: true, top_logprobs: 20 });
  const expected = ref.reply(ref.chatPrompt(messages), { max_tokens: MAX });
  const content = r.choices[0].logprobs.content;
  assert.deepEqual(content.map((e) => e.token), expected.tokens.map((id) => ref.decode([id])));
  assert.equal(content.map((e) => e.token).join(""), r.choices[0].message.content);
  for (const e of content) {
    checkEntry(e, 20);
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
  }
  greedyEntries = content;
});

test("chat, streamed: the chunks' entries are the whole response's, each chunk's with its text", async () => {
  const stream = await client.chat.completions.create({ model: "m", messages, max_tokens: MAX, temperature: 0, logprobs: true,
                                                        top_logprobs: 20, stream: true });
  const entries = [];
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      const part = choice.logprobs?.content ?? [];
      if (choice.delta.content) assert.equal(part.map((e) => e.token).join(""), choice.delta.content);
      entries.push(...part);
    }
  }
  assert.deepEqual(entries, greedyEntries);
});

test("sampled chat: the sampled token is among the model's tokens with its own log-probability", async () => {
  const sampling = { temperature: 1, top_k: 0, top_p: 1, min_p: 0, seed: 3 };  // all given: not the server's defaults
  const r = await client.chat.completions.create({ model: "m", messages, max_tokens: MAX, ...sampling, logprobs: true, top_logprobs: 3 });
  const expected = ref.reply(ref.chatPrompt(messages), { max_tokens: MAX, ...sampling });
  const content = r.choices[0].logprobs.content;
  assert.deepEqual(content.map((e) => e.token), expected.tokens.map((id) => ref.decode([id])));
  for (const e of content) {
    checkEntry(e, 3);
    const listed = e.top_logprobs.find((t) => t.token === e.token);
    if (listed) assert.equal(listed.logprob, e.logprob);
    else assert.ok(e.logprob <= e.top_logprobs[2].logprob);
  }
});

test("completions: the legacy form lines up with the text", async () => {
  const r = await client.completions.create({ model: "m", prompt: "The sea is", max_tokens: MAX, temperature: 0, logprobs: 2 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.join(""), r.choices[0].text);
  let offset = 0;
  for (let i = 0; i < lp.tokens.length; i++) {
    assert.equal(lp.text_offset[i], offset);
    offset += Buffer.byteLength(lp.tokens[i], "utf8");
    assert.ok(Object.keys(lp.top_logprobs[i]).length <= 2);
    assert.equal(lp.top_logprobs[i][lp.tokens[i]], lp.token_logprobs[i]);  // greedy: the token is the first
  }
});

test("logit_bias: -100 on the greedy first token gives its runner-up; +100 on a token gives only it", async () => {
  const first = greedyEntries[0];
  const [id] = ref.tokenizer.encode(first.token, { add_special_tokens: false }).ids;
  assert.equal(ref.decode([id]), first.token);
  const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 1, temperature: 0, logprobs: true,
                                                   logit_bias: { [id]: -100 } });
  assert.equal(r.choices[0].logprobs.content[0].token, first.top_logprobs[1].token);
  const [z] = ref.tokenizer.encode("z", { add_special_tokens: false }).ids;
  const forced = await client.completions.create({ model: "m", prompt: "The sea is", max_tokens: 6, temperature: 0.8, logprobs: 0,
                                                   logit_bias: { [z]: 100 } });
  assert.equal(forced.choices[0].text, "z".repeat(6));
  for (const v of forced.choices[0].logprobs.token_logprobs) assert.ok(v > -1e-3, `logprob ${v} of a token biased by +100`);
});

test("a logit_bias token outside the vocabulary is a 400 naming it", async () => {
  await assert.rejects(client.chat.completions.create({ model: "m", messages, max_tokens: 2, logit_bias: { 1000000: 1 } }),
                       (e) => e.status === 400 && /logit_bias: token 1000000 is outside the vocabulary/.test(e.message) &&
                              e.param === "logit_bias");
});

await run(async () => {
  const status = await server.stop();
  if (status.code !== 0) {
    console.log(`FAIL the server did not stop cleanly: ${JSON.stringify(status)}\n${server.log}`);
    process.exitCode = 1;
  }
});
