// Reasoning apart from the answer (ctest server_reasoning): a Qwen3-style chat model's <think> block comes
// back as message.reasoning_content (and as delta.reasoning_content when streamed), through the official
// openai client. The model is mk-tiny-chat-model --scripted-thinking, whose every reply is
// "<think>Plan</think>OK" whatever the prompt and the sampling (its weights fix each token's successor), so
// the expected parts are known without the server: reasoning "Plan", content "OK".
//   node reasoning.mjs --server MK_SERVER --run MK_RUN --make-model MK_TINY_CHAT_MODEL [--work DIR]
import assert from "node:assert/strict";
import path from "node:path";
import OpenAI from "openai";
import { parseArgs, test, run, Server, makeModel } from "./common.mjs";

const args = parseArgs();
const REPLY = "<think>Plan</think>OK";
const modelDir = makeModel(args["make-model"], path.join(args.work, "model"), ["--scripted-thinking"]);
const server = await Server.start(args.server, modelDir, ["-q"]);
const client = new OpenAI({ apiKey: "none", baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 60000 });
const messages = [{ role: "user", content: "What is the plan?" }];

test("the raw reply, through /v1/completions, is the scripted one", async () => {
  const r = await client.completions.create({ model: "m", prompt: "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", max_tokens: 20 });
  assert.equal(r.choices[0].text, REPLY);
  assert.equal(r.choices[0].finish_reason, "stop");
});

for (const temperature of [0, 0.8]) {
  test(`chat at temperature ${temperature}: reasoning_content "Plan", content "OK"`, async () => {
    const r = await client.chat.completions.create({ model: "m", messages, temperature, max_tokens: 20 });
    assert.equal(r.choices[0].message.reasoning_content, "Plan");
    assert.equal(r.choices[0].message.content, "OK");
    assert.equal(r.choices[0].finish_reason, "stop");
    assert.equal(r.usage.completion_tokens, 8);  // the whole reply, reasoning included (not the end-of-turn token)
  });
}

test("streamed: reasoning deltas first, then content deltas, role in the first chunk", async () => {
  const stream = await client.chat.completions.create({ model: "m", messages, stream: true, max_tokens: 20 });
  const deltas = [];
  let finish = null;
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      if (choice.finish_reason) finish = choice.finish_reason;
      if (choice.delta.reasoning_content !== undefined || choice.delta.content !== undefined) deltas.push(choice.delta);
    }
  }
  assert.equal(deltas[0].role, "assistant");
  const reasoning = deltas.map((d) => d.reasoning_content ?? "").join("");
  const content = deltas.map((d) => d.content ?? "").join("");
  assert.equal(reasoning, "Plan");
  assert.equal(content, "OK");
  const lastReasoning = deltas.findLastIndex((d) => d.reasoning_content !== undefined);
  const firstContent = deltas.findIndex((d) => d.content !== undefined && d.content !== "");
  assert.ok(lastReasoning < firstContent, JSON.stringify(deltas));
  assert.ok(deltas.every((d) => !(d.reasoning_content ?? "").includes("think>") && !(d.content ?? "").includes("think>")));
  assert.equal(finish, "stop");
});

test("a max_tokens that cuts the thinking: all reasoning, no content", async () => {
  const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 4 });
  assert.equal(r.choices[0].message.reasoning_content, "Pla");
  assert.equal(r.choices[0].message.content, "");
  assert.equal(r.choices[0].finish_reason, "length");
});

test("enable_thinking false: no split (the reply is content as it came)", async () => {
  const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 20,
                                                   chat_template_kwargs: { enable_thinking: false } });
  assert.equal(r.choices[0].message.content, REPLY);
  assert.equal(r.choices[0].message.reasoning_content, undefined);
});

await run(async () => {
  const status = await server.stop();
  if (status.code !== 0) {
    console.log(`FAIL the server did not stop cleanly: ${JSON.stringify(status)}\n${server.log}`);
    process.exitCode = 1;
  }
});
