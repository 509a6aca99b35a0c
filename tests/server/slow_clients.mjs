// Slow and incomplete requests (ctest server_slow_clients). mk-server reads every request whole before a
// worker thread sees it (host/server/request_gate.h), so:
// - 64 clients that each send their request one byte a second leave /health answering within 100 ms and a
//   completion starting within its usual time, and each of them gets 408 once 5 s have passed;
// - a body that arrives in pieces, and a client that waits for "100 Continue", are served;
// - headers that never end get 431, and a connection that sends nothing is closed after 2 s.
//   node slow_clients.mjs --server MK_SERVER --run MK_RUN --make-model MK_TINY_CHAT_MODEL [--work DIR]
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { parseArgs, test, run, Server, makeModel, sleep } from "./common.mjs";

const args = parseArgs();
const SLOW_CLIENTS = 64;
const WHOLE_REQUEST_MS = 5000, FIRST_BYTE_MS = 2000;  // GateLimits' defaults
const modelDir = makeModel(args["make-model"], path.join(args.work, "model"));
const server = await Server.start(args.server, modelDir, ["-c", "256", "-q"]);

// One request on a connection of its own; resolves with the status, the body and the time to the
// response's headers (ms).
function request(method, route, body) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request(`${server.url}${route}`, {
      method, agent: false,
      headers: body ? { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) } : {},
    });
    req.setTimeout(30000, () => req.destroy(new Error(`${method} ${route}: no answer in 30 s`)));
    req.on("error", reject);
    req.on("response", (res) => {
      const headersMs = performance.now() - t0;
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d) => (text += d));
      res.on("end", () => resolve({ status: res.statusCode, text, headersMs, ms: performance.now() - t0 }));
    });
    req.end(body);
  });
}

const completionBody = JSON.stringify({ messages: [{ role: "user", content: "hello there" }], max_tokens: 8, seed: 1 });
const completion = () => request("POST", "/v1/chat/completions", completionBody);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// A raw connection: what it received, and when it closed (ms after opening).
function rawConnection() {
  const c = { data: "", opened: performance.now(), closedMs: null };
  c.sock = net.connect(server.port, "127.0.0.1");
  c.sock.setEncoding("latin1");
  c.sock.on("data", (d) => (c.data += d));
  c.sock.on("error", () => {});
  c.closed = new Promise((resolve) => c.sock.on("close", () => resolve((c.closedMs = performance.now() - c.opened))));
  c.connected = new Promise((resolve) => c.sock.on("connect", resolve));
  return c;
}

let usual;  // the completion's time without slow clients

test("a completion's usual time, without slow clients", async () => {
  const times = [];
  for (let i = 0; i < 3; i++) {
    const r = await completion();
    assert.equal(r.status, 200, r.text);
    times.push(r.ms);
  }
  usual = median(times);
  console.log(`  completion: ${times.map((t) => t.toFixed(1)).join(" / ")} ms`);
});

test(`${SLOW_CLIENTS} clients sending a byte a second leave /health and a completion on time, then get 408`, async () => {
  const line = "POST /v1/chat/completions HTTP/1.1\r\n";
  const slow = [];
  for (let i = 0; i < SLOW_CLIENTS; i++) {
    const c = rawConnection();
    await c.connected;
    let sent = 0;
    const send = () => {
      if (!c.sock.destroyed && sent < line.length) c.sock.write(line[sent++]);
    };
    send();
    c.timer = setInterval(send, 1000);
    slow.push(c);
  }
  await sleep(1500);  // every slow client is mid-request now

  const health = [];
  for (let i = 0; i < 5; i++) {
    const r = await request("GET", "/health");
    assert.equal(r.status, 200, r.text);
    health.push(r.ms);
  }
  const r = await completion();
  assert.equal(r.status, 200, r.text);
  console.log(`  /health: ${health.map((t) => t.toFixed(1)).join(" / ")} ms; completion ${r.ms.toFixed(1)} ms (usual ${usual.toFixed(1)})`);
  assert.ok(median(health) <= 100, `/health took ${health.map((t) => t.toFixed(1)).join(", ")} ms with slow clients`);
  assert.ok(Math.max(...health) <= 1000, `/health took ${Math.max(...health).toFixed(1)} ms once`);
  assert.ok(r.ms <= 3 * usual + 200, `the completion took ${r.ms.toFixed(1)} ms, against ${usual.toFixed(1)} without slow clients`);

  const closed = await Promise.all(slow.map((c) => c.closed));
  for (const c of slow) clearInterval(c.timer);
  for (const [i, c] of slow.entries()) {
    assert.match(c.data, /^HTTP\/1\.1 408 /, `slow client ${i} got: ${JSON.stringify(c.data.slice(0, 80))}`);
    assert.equal(JSON.parse(c.data.slice(c.data.indexOf("\r\n\r\n") + 4)).error.code, "request_timeout");
  }
  assert.ok(Math.min(...closed) >= WHOLE_REQUEST_MS - 50, `a slow client was closed after ${Math.min(...closed).toFixed(0)} ms`);
  assert.ok(Math.max(...closed) <= WHOLE_REQUEST_MS + 2000, `a slow client was closed only after ${Math.max(...closed).toFixed(0)} ms`);
});

test("a body that arrives in pieces is served", async () => {
  const c = rawConnection();
  await c.connected;
  c.sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n`);
  await sleep(300);
  c.sock.write(`Content-Length: ${Buffer.byteLength(completionBody)}\r\n\r\n`);
  for (let at = 0; at < completionBody.length; at += 20) {
    await sleep(100);
    c.sock.write(completionBody.slice(at, at + 20));
  }
  await c.closed;
  assert.match(c.data, /^HTTP\/1\.1 200 /, c.data.slice(0, 200));
  assert.match(c.data, /"finish_reason"/);
});

test("a client that waits for 100 Continue gets it once, then its answer", async () => {
  const c = rawConnection();
  await c.connected;
  c.sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
               `Expect: 100-continue\r\nContent-Length: ${Buffer.byteLength(completionBody)}\r\n\r\n`);
  for (let waited = 0; !c.data.includes("\r\n\r\n"); waited += 10) {
    assert.ok(waited < 5000, `no 100 Continue: ${JSON.stringify(c.data)}`);
    await sleep(10);
  }
  assert.equal(c.data, "HTTP/1.1 100 Continue\r\n\r\n");
  c.sock.write(completionBody);
  await c.closed;
  assert.match(c.data, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /, c.data.slice(0, 200));
  assert.equal(c.data.split("100 Continue").length, 2);
});

test("headers that never end get 431", async () => {
  const c = rawConnection();
  await c.connected;
  c.sock.write("GET /health HTTP/1.1\r\n");
  for (let i = 0; i < 1100 && !c.sock.destroyed && c.closedMs === null; i++) c.sock.write(`X-Filler-${i}: ${"y".repeat(50)}\r\n`);
  await c.closed;
  assert.match(c.data, /^HTTP\/1\.1 431 /, c.data.slice(0, 200));
});

test("a connection that sends nothing is closed after 2 s, without an answer", async () => {
  const c = rawConnection();
  await c.connected;
  const ms = await c.closed;
  assert.equal(c.data, "");
  assert.ok(ms >= FIRST_BYTE_MS - 50 && ms <= FIRST_BYTE_MS + 2000, `closed after ${ms.toFixed(0)} ms`);
});

test("/metrics counts the gate's refusals", async () => {
  const m = await server.metrics();
  assert.equal(m['mk_http_requests_total{path="other",status="408"}'], SLOW_CLIENTS);
  assert.equal(m['mk_http_requests_total{path="other",status="431"}'], 1);
});

await run(async () => {
  const status = await server.stop();
  if (status.code !== 0) {
    console.log(`FAIL the server did not stop cleanly: ${JSON.stringify(status)}\n${server.log}`);
    process.exitCode = 1;
  }
});
