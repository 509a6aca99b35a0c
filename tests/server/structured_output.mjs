// response_format through the official openai client (ctest server_structured_output), on the emulator:
// json_schema replies validate against their schema with ajv (not this project's code), streamed or not,
// with the properties in the schema's order; json_object replies parse as objects; what is unsupported
// is a 400 naming it. The validity over 1,006 schemas is tests/constraint's (structured_output_validity).
//   node structured_output.mjs --server MK_SERVER --run MK_RUN --make-model MK_TINY_CHAT_MODEL [--work DIR]
import assert from "node:assert/strict";
import path from "node:path";
import OpenAI from "openai";
import Ajv2020 from "ajv/dist/2020.js";
import { parseArgs, test, run, Server, makeModel } from "./common.mjs";

const args = parseArgs();
const modelDir = makeModel(args["make-model"], path.join(args.work, "model"));
const server = await Server.start(args.server, modelDir, ["-c", "1024", "--seed", "1", "-q"]);
const client = new OpenAI({ apiKey: "none", baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 120000 });
const messages = [{ role: "user", content: "Describe a person as JSON." }];
const ajv = new Ajv2020({ strict: false });
const person = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer" },
    role: { enum: ["admin", "user", null] },
    tags: { type: "array", items: { type: "string", pattern: "^[a-z]{1,6}$" }, maxItems: 3 },
  },
  required: ["name", "age", "role", "tags"],
  additionalProperties: false,
};
const format = (schema) => ({ type: "json_schema", json_schema: { name: "person", schema, strict: true } });

test("json_schema: each reply validates and its properties come in the schema's order", async () => {
  const check = ajv.compile(person);
  for (const seed of [1, 2, 3, 4, 5]) {
    const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 200, temperature: 0.8, seed,
                                                     response_format: format(person) });
    const text = r.choices[0].message.content;
    assert.equal(r.choices[0].finish_reason, "stop", text);
    const value = JSON.parse(text);
    assert.ok(check(value), `${text}: ${ajv.errorsText(check.errors)}`);
    assert.deepEqual(Object.keys(value), ["name", "age", "role", "tags"]);
  }
});

test("json_schema, streamed: the deltas make a reply that validates", async () => {
  const stream = await client.chat.completions.create({ model: "m", messages, max_tokens: 200, temperature: 0.8, seed: 7,
                                                        response_format: format(person), stream: true });
  let text = "", finish = null;
  for await (const chunk of stream)
    for (const c of chunk.choices) {
      text += c.delta.content ?? "";
      finish = c.finish_reason ?? finish;
    }
  assert.equal(finish, "stop");
  assert.ok(ajv.validate(person, JSON.parse(text)), text);
});

test("json_object: the reply is a JSON object; completions take response_format too", async () => {
  const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 300, temperature: 0.7, seed: 2,
                                                   response_format: { type: "json_object" } });
  const text = r.choices[0].message.content;
  assert.equal(r.choices[0].finish_reason, "stop", text);
  const v = JSON.parse(text);
  assert.ok(v !== null && typeof v === "object" && !Array.isArray(v), text);
  const c = await client.completions.create({ model: "m", prompt: "x =", max_tokens: 100, temperature: 0, seed: 1,
                                             response_format: format({ type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] }) });
  assert.match(c.choices[0].text, /^\{"ok": ?(true|false)\}$/);
});

test("logprobs under a constraint list only tokens it allows", async () => {
  const schema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };
  const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 50, temperature: 0, logprobs: true, top_logprobs: 20,
                                                   response_format: format(schema) });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.map((e) => e.token).join(""), r.choices[0].message.content);
  const first = content[0];  // `{` is the only way to start: its probability is 1, and there are no alternatives but those it allows
  assert.ok(first.token.startsWith("{"), first.token);
  for (const t of first.top_logprobs) assert.ok(t.token.startsWith("{") || "{".startsWith(t.token), JSON.stringify(first.top_logprobs));
  const mass = first.top_logprobs.reduce((s, t) => s + Math.exp(t.logprob), 0);
  assert.ok(mass <= 1 + 1e-4);
});

test("unsupported keywords, recursion and malformed response_format are 400s naming them", async () => {
  const refused = async (response_format, pattern) =>
    assert.rejects(client.chat.completions.create({ model: "m", messages, max_tokens: 5, response_format }),
                   (e) => e.status === 400 && pattern.test(e.message) && e.param === "response_format");
  await refused(format({ type: "integer", minimum: 3 }), /json_schema at \/minimum: the keyword "minimum" is not supported/);
  await refused(format({ $defs: { n: { type: "array", items: { $ref: "#/$defs/n" } } }, $ref: "#/$defs/n" }), /recursive/);
  await refused({ type: "json_schema" }, /needs a 'json_schema' object/);
  await refused({ type: "xml" }, /type 'xml' is not supported/);
  await refused(format({ type: "string", pattern: "(a)\\1" }), /back-references are not supported/);
});

await run(async () => {
  const status = await server.stop();
  if (status.code !== 0) {
    console.log(`FAIL the server did not stop cleanly: ${JSON.stringify(status)}\n${server.log}`);
    process.exitCode = 1;
  }
});
