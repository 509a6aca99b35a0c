// Malformed and refused requests, sent with curl (ctest server_malformed): each must get the status and
// OpenAI error object that docs/server.md documents, and the server must then answer a valid request.
//   node malformed.mjs --server MK_SERVER --run MK_RUN --make-model MK_TINY_CHAT_MODEL [--work DIR]
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { parseArgs, test, run, Server, makeModel } from "./common.mjs";

const args = parseArgs();
const KEY = "secret-key";
const MAX_BODY = 8192;
const CONTEXT = 64;
const modelDir = makeModel(args["make-model"], path.join(args.work, "model"));
const server = await Server.start(args.server, modelDir,
  ["-c", String(CONTEXT), "--api-key", KEY, "--max-body", String(MAX_BODY), "--temp", "0", "--queue", "2"]);
const auth = ["-H", `Authorization: Bearer ${KEY}`];
const json = ["-H", "Content-Type: application/json"];

// curl ARGS... -> {status, body (parsed JSON or text), headers}
function curl(args, { input } = {}) {
  const headerFile = path.join(args_work(), "headers.txt");
  const out = execFileSync("curl", ["-sS", "-D", headerFile, "-w", "\n%{http_code}", ...args],
    { encoding: "utf8", input, maxBuffer: 1 << 26, stdio: [input === undefined ? "ignore" : "pipe", "pipe", "pipe"] });
  const at = out.lastIndexOf("\n");
  const status = Number(out.slice(at + 1));
  const text = out.slice(0, at);
  let body = text;
  try {
    body = JSON.parse(text);
  } catch {}
  return { status, body, headers: fs.readFileSync(headerFile, "utf8").toLowerCase() };
}
function args_work() {
  return args.work;
}

const chatUrl = `${server.url}/v1/chat/completions`;
const completionUrl = `${server.url}/v1/completions`;
const validChat = JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 3 });

// The check after every refusal: the server is up and answers a valid request.
function answersAValidRequest() {
  const r = curl([chatUrl, ...auth, ...json, "-d", validChat]);
  assert.equal(r.status, 200, `the valid request after it got ${r.status}: ${JSON.stringify(r.body)}`);
  assert.equal(r.body.choices[0].finish_reason, "length");
  assert.ok(server.alive(), "the server exited");
}

// Each refusal: curl arguments, the status, and the error fields (message is a regular expression).
function refused(name, curlArgs, { status, type = "invalid_request_error", code = null, param = null, message }, opts) {
  test(name, () => {
    const r = curl(curlArgs, opts);
    assert.equal(r.status, status, `status ${r.status}, body ${JSON.stringify(r.body)}`);
    assert.equal(typeof r.body, "object", `not a JSON body: ${r.body}`);
    assert.deepEqual(Object.keys(r.body), ["error"]);
    const e = r.body.error;
    assert.equal(e.type, type);
    assert.equal(e.code, code);
    assert.equal(e.param, param);
    assert.match(e.message, message);
    assert.match(r.headers, /content-type: application\/json/);
    answersAValidRequest();
  });
}

test("a valid request, for reference", answersAValidRequest);

refused("malformed JSON -> 400", [chatUrl, ...auth, ...json, "-d", '{"messages": [}'],
  { status: 400, message: /not valid JSON/ });
refused("an empty body -> 400", [chatUrl, ...auth, ...json, "-d", ""], { status: 400, message: /not valid JSON/ });
refused("JSON that is not an object -> 400", [chatUrl, ...auth, ...json, "-d", "[1, 2]"],
  { status: 400, message: /must be a JSON object \(got an array\)/ });
refused("a number out of range -> 400", [chatUrl, ...auth, ...json, "-d", '{"messages": [], "top_k": 1e999}'],
  { status: 400, message: /not valid JSON.*number overflow/ });
refused("invalid UTF-8 in a string -> 400", [chatUrl, ...auth, ...json, "--data-binary", "@-"],
  { status: 400, message: /not valid JSON/ }, { input: Buffer.from('{"messages": [{"role": "user", "content": "\xff"}]}', "latin1") });
refused("deeply nested JSON -> 400, no crash", [chatUrl, ...auth, ...json, "--data-binary", "@-"],
  { status: 400, message: /must be a JSON object/ }, { input: "[".repeat(3000) + "]".repeat(3000) });
refused("messages missing -> 400", [chatUrl, ...auth, ...json, "-d", '{"model": "m"}'],
  { status: 400, param: "messages", message: /'messages' is required/ });
refused("messages of the wrong type -> 400", [chatUrl, ...auth, ...json, "-d", '{"messages": "hi"}'],
  { status: 400, param: "messages", message: /'messages' must be an array \(got a string\)/ });
refused("a message without content -> 400", [chatUrl, ...auth, ...json, "-d", '{"messages": [{"role": "user"}]}'],
  { status: 400, param: "messages[0].content", message: /'messages\[0\]\.content' is required/ });
refused("temperature of the wrong type -> 400", [chatUrl, ...auth, ...json, "-d", '{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}'],
  { status: 400, param: "temperature", message: /'temperature' must be a number \(got a string\)/ });
refused("max_tokens out of range -> 400", [completionUrl, ...auth, ...json, "-d", '{"prompt": "x", "max_tokens": -5}'],
  { status: 400, param: "max_tokens", message: /'max_tokens' must be a positive integer/ });
refused("max_tokens past 2^31-1 -> 400 naming the limit", [completionUrl, ...auth, ...json, "-d", '{"prompt": "x", "max_tokens": 1099511627776}'],
  { status: 400, param: "max_tokens", message: /^'max_tokens' is too large: at most 2147483647 \(got 1099511627776\)$/ });
refused("a 22-digit seed -> 400 too large, not 'a fraction'",
  [completionUrl, ...auth, ...json, "-d", '{"prompt": "x", "seed": 1234567890123456789012}'],
  { status: 400, param: "seed", message: /^'seed' is too large: at most 18446744073709551615 \(got 1\.2345678901234568e\+21\)$/ });
refused("a negative seed other than -1 -> 400", [completionUrl, ...auth, ...json, "-d", '{"prompt": "x", "seed": -2}'],
  { status: 400, param: "seed", message: /'seed' must be -1 \(a random seed\) or an integer from 0 to 18446744073709551615 \(got -2\)/ });
test('"seed": -1 draws a random seed; a given seed repeats its text', () => {
  const texts = (seed) => [0, 1, 2].map(() => {
    const body = JSON.stringify({ prompt: "x", seed, temperature: 1, max_tokens: 16 });
    const r = curl([completionUrl, ...auth, ...json, "-d", body]);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.choices[0].text;
  });
  const fixed = texts(7);
  assert.ok(fixed.every((t) => t === fixed[0]), `seed 7 gave different texts: ${JSON.stringify(fixed)}`);
  const random = texts(-1);
  assert.ok(random.some((t) => t !== random[0]), `three requests with seed -1 gave the same text: ${JSON.stringify(random)}`);
});
refused("stream of the wrong type -> 400", [completionUrl, ...auth, ...json, "-d", '{"prompt": "x", "stream": 1}'],
  { status: 400, param: "stream", message: /'stream' must be a boolean/ });
refused("n = 2 -> 400", [chatUrl, ...auth, ...json, "-d", '{"messages": [{"role": "user", "content": "x"}], "n": 2}'],
  { status: 400, param: "n", message: /'n' must be 1/ });
refused("tools with a template that renders none -> 400", [chatUrl, ...auth, ...json, "-d", '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]}'],
  { status: 400, param: "tools", message: /has no tool-call format/ });
refused("a prompt longer than the context -> 400 context_length_exceeded",
  [completionUrl, ...auth, ...json, "-d", JSON.stringify({ prompt: "word ".repeat(200) })],
  { status: 400, param: "prompt", code: "context_length_exceeded", message: /the prompt is \d+ tokens long, but the context holds 64 tokens/ });
refused("a chat longer than the context -> 400 context_length_exceeded",
  [chatUrl, ...auth, ...json, "-d", JSON.stringify({ messages: [{ role: "user", content: "word ".repeat(200) }] })],
  { status: 400, param: "messages", code: "context_length_exceeded", message: /context holds 64 tokens/ });
refused("a prompt the model's vocabulary does not cover -> 400",
  [completionUrl, ...auth, ...json, "-d", JSON.stringify({ prompt: "caf\u00e9" })],
  { status: 400, param: "prompt", message: /outside the model's vocabulary/ });
refused("an empty prompt -> 400", [completionUrl, ...auth, ...json, "-d", '{"prompt": ""}'],
  { status: 400, param: "prompt", message: /the prompt is empty/ });
refused("a body over the limit -> 413", [completionUrl, ...auth, ...json, "-H", "Expect:", "--data-binary", "@-"],
  { status: 413, code: "request_too_large", message: /larger than the limit of 8192 bytes/ },
  { input: JSON.stringify({ prompt: "x".repeat(MAX_BODY) }) });
refused("a body over the limit, announced with Expect: 100-continue -> 413 before it is sent",
  [completionUrl, ...auth, ...json, "-H", "Expect: 100-continue", "--data-binary", "@-"],
  { status: 413, code: "request_too_large", message: /larger than the limit/ }, { input: JSON.stringify({ prompt: "x".repeat(MAX_BODY) }) });
refused("a chunked body -> 411", [completionUrl, ...auth, ...json, "-H", "Transfer-Encoding: chunked", "-d", '{"prompt": "x"}'],
  { status: 411, code: "length_required", message: /Content-Length/ });
refused("no API key -> 401", [chatUrl, ...json, "-d", validChat], { status: 401, code: "invalid_api_key", message: /no API key/ });
refused("a wrong API key -> 401", [chatUrl, "-H", "Authorization: Bearer nope", ...json, "-d", validChat],
  { status: 401, code: "invalid_api_key", message: /not valid/ });
refused("a key that is not a bearer token -> 401", [chatUrl, "-H", `Authorization: ${KEY}`, ...json, "-d", validChat],
  { status: 401, code: "invalid_api_key", message: /not valid/ });
refused("the key on /v1/models too -> 401", [`${server.url}/v1/models`], { status: 401, code: "invalid_api_key", message: /no API key/ });
refused("an unknown path -> 404", [`${server.url}/v1/embeddings`, ...auth, "-d", "{}"],
  { status: 404, code: "unknown_url", message: /unknown endpoint POST \/v1\/embeddings/ });
refused("GET on a POST route -> 404", [chatUrl, ...auth], { status: 404, code: "unknown_url", message: /unknown endpoint GET/ });
refused("an unknown model id -> 404", [`${server.url}/v1/models/nope`, ...auth],
  { status: 404, param: "model", code: "model_not_found", message: /the model 'nope' does not exist/ });

test("unknown fields are ignored", () => {
  const r = curl([chatUrl, ...auth, ...json, "-d", JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 2,
    frobnicate: { deeply: [1, 2, 3] }, user: "someone", metadata: {} })]);
  assert.equal(r.status, 200);
  assert.equal(r.body.usage.completion_tokens, 2);
});

test("/health needs no key; /metrics counts the refusals by status", () => {
  const h = curl([`${server.url}/health`]);
  assert.equal(h.status, 200);
  assert.equal(h.body.status, "ok");
  const m = curl([`${server.url}/metrics`, ...auth]);
  assert.equal(m.status, 200);
  assert.match(m.headers, /content-type: text\/plain; version=0\.0\.4/);
  assert.match(m.body, /mk_http_requests_total\{path="\/v1\/chat\/completions",status="400"\} \d+/);
  assert.match(m.body, /mk_http_requests_total\{path="\/v1\/completions",status="413"\} 2/);
  assert.match(m.body, /mk_http_requests_total\{path="\/v1\/completions",status="411"\} 1/);
  assert.match(m.body, /mk_http_requests_total\{path="other",status="404"\} 1/);
});

test("garbage instead of HTTP -> 400, the server lives on", async () => {
  const reply = await new Promise((resolve, reject) => {
    // write, not end: a client that half-closes its side is taken for gone (docs/server.md).
    const sock = net.connect(server.port, "127.0.0.1", () => sock.write("\x00\x01 not http at all\r\n\r\n"));
    let data = "";
    sock.on("data", (d) => (data += d));
    sock.on("end", () => resolve(data));
    sock.on("error", reject);
  });
  assert.match(reply, /^HTTP\/1\.1 400/);
  answersAValidRequest();
});

test("a client that connects and sends nothing does not block others", async () => {
  const idle = net.connect(server.port, "127.0.0.1");
  await new Promise((r) => idle.on("connect", r));
  answersAValidRequest();
  idle.destroy();
});

test("invalid flags stop mk-server with a message naming the flag", () => {
  const cases = [
    [[], /--model is required/],
    [["-m", path.join(args.work, "none")], /--model: Directory does not exist/],
    [["-m", modelDir, "--port", "70000"], /--port: Value 70000 not in range/],
    [["-m", modelDir, "--temp", "-1"], /--temp: Value -1 not in range/],
    [["-m", modelDir, "--top-p", "0"], /--top-p must be in \(0, 1\]/],
    [["-m", modelDir, "-n", "0"], /-n must be positive/],
    [["-m", modelDir, "--queue", "-1"], /--queue: Value -1 not in range/],
    [["-m", modelDir, "--max-body", "10"], /--max-body: Value 10 not in range/],
    [["-m", modelDir, "--frobnicate"], /--frobnicate/],
    [["-m", modelDir, "--api-key-file", path.join(args.work, "none")], /--api-key-file: cannot read/],
    [["-m", modelDir, "--port", String(server.port)], new RegExp(`cannot listen on 127\\.0\\.0\\.1:${server.port}: Address already in use`)],
  ];
  for (const [flags, message] of cases) {
    const r = spawnSync(args.server, [...flags, "--emulator"], { encoding: "utf8", timeout: 30000 });
    assert.notEqual(r.status, 0, `${flags.join(" ")}: exit ${r.status}`);
    assert.match(r.stderr, message, flags.join(" "));
  }
  answersAValidRequest();
});

await run(async () => {
  const status = await server.stop();
  if (status.code !== 0) {
    console.log(`FAIL the server did not stop cleanly: ${JSON.stringify(status)}\n${server.log}`);
    process.exitCode = 1;
  }
});
