// A bounded load test on loopback (ctest server_load): 8 concurrent clients send 200 requests to one
// mk-server whose queue holds 5: streamed and not, some aborted by the client mid-way, some with prompts
// longer than the context. Every request must end in exactly one of: a complete answer (one finish
// reason, one [DONE] for a stream), 400 for the over-long ones, 429 (queue full), or the client's own
// abort; no response id may appear twice; the server's counters must agree with what the clients saw;
// and the server's resident memory must stay flat from the first quarter of the run to the end.
//   node load.mjs --server MK_SERVER --run MK_RUN --make-model MK_TINY_CHAT_MODEL [--work DIR]
import assert from "node:assert/strict";
import http from "node:http";
import path from "node:path";
import { parseArgs, test, run, Server, makeModel, sleep } from "./common.mjs";

const args = parseArgs();
const CLIENTS = 8, REQUESTS = 200, QUEUE = 5, CONTEXT = 256;
const RSS_GROWTH_LIMIT_KIB = 4096;
const modelDir = makeModel(args["make-model"], path.join(args.work, "model"));
const server = await Server.start(args.server, modelDir, ["-c", String(CONTEXT), "--queue", String(QUEUE), "--temp", "0.8", "-q"]);

// A fixed mix, shuffled with a fixed seed: the run is the same every time (up to timing).
let seed = 12345;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const kinds = [];
for (let i = 0; i < REQUESTS; i++) {
  const r = i % 20;
  kinds.push(r < 3 ? "too-long" : r < 6 ? "abort-stream" : r < 8 ? "abort-wait" : r < 14 ? "stream" : "plain");
}
for (let i = kinds.length - 1; i > 0; i--) {
  const j = Math.floor(random() * (i + 1));
  [kinds[i], kinds[j]] = [kinds[j], kinds[i]];
}

// The clients speak HTTP through node:http, one connection per request, not through fetch: a fetch whose
// signal aborts while its body is being read can stay pending for ever (nodejs/node#56917,
// nodejs/undici#4089), and this test is about the server, not a client's state machine. An http request
// ends in exactly one of its events - the response's 'end', an 'error', or the socket's 'close' - so
// every request below settles; an abort is req.destroy(), which closes the connection as a client that
// goes away does.
//
// A request that has not ended this long after it was sent fails the test naming where it stands, rather
// than hanging until ctest's timeout (a generation here takes milliseconds; the queue holds 5).
const REQUEST_DEADLINE_MS = 60000;

function send(i, kind) {
  const endpoint = i % 2 ? "chat/completions" : "completions";
  const stream = kind === "stream" || kind === "abort-stream";
  const max_tokens = kind.startsWith("abort") ? 2000 : 8 + (i * 37) % 120;
  const text = kind === "too-long" ? "word ".repeat(CONTEXT) : `request ${i} says hello`;
  const body = JSON.stringify({
    max_tokens, stream, seed: i, ...(stream ? { stream_options: { include_usage: true } } : {}),
    ...(endpoint === "completions" ? { prompt: text } : { messages: [{ role: "user", content: text }] }) });
  const result = { i, kind, endpoint, ids: [], done: 0, finishes: [], aborted: false, stage: "sending" };
  return new Promise((resolve, reject) => {
    let settled = false, abortTimer = null;
    const settle = (error) => {
      if (settled) return;
      settled = true;
      clearTimeout(abortTimer);
      clearTimeout(deadline);
      if (error) reject(error);
      else resolve(result);
    };
    const deadline = setTimeout(() => {
      req.destroy();
      settle(new Error(`request ${i} (${kind}, ${endpoint}) did not end within ${REQUEST_DEADLINE_MS / 1000} s: ${result.stage}`));
    }, REQUEST_DEADLINE_MS);
    const abort = () => {
      result.aborted = true;
      req.destroy();
      settle();
    };
    const req = http.request(`${server.url}/v1/${endpoint}`, {
      method: "POST", agent: false,
      headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) },
    });
    if (kind === "abort-wait") abortTimer = setTimeout(abort, 1 + (i * 7) % 30);
    req.on("error", (e) => settle(result.aborted ? null : e));
    req.on("response", (res) => {
      result.status = res.statusCode;
      result.stage = `reading the ${res.statusCode} response`;
      res.setEncoding("utf8");
      let buffer = "";
      res.on("data", (data) => {
        buffer += data;
        if (res.statusCode !== 200 || !stream) return;
        try {
          for (let at; (at = buffer.indexOf("\n\n")) >= 0;) {
            const event = buffer.slice(0, at);
            buffer = buffer.slice(at + 2);
            assert.ok(event.startsWith("data: "), `not an SSE data line: ${event}`);
            const data = event.slice(6);
            if (data === "[DONE]") {
              result.done++;
              continue;
            }
            const chunk = JSON.parse(data);
            assert.ok(!chunk.error, `an error event: ${data}`);
            if (!result.ids.includes(chunk.id)) result.ids.push(chunk.id);
            for (const c of chunk.choices) if (c.finish_reason) result.finishes.push(c.finish_reason);
            if (chunk.usage) result.usage = chunk.usage;
          }
        } catch (e) {
          req.destroy();
          settle(e);
          return;
        }
        // The client hangs up after the first event; the server notices at its next token.
        if (kind === "abort-stream" && result.ids.length) abort();
      });
      res.on("end", () => {
        try {
          if (res.statusCode !== 200 || !stream) {
            result.body = JSON.parse(buffer);
            if (res.statusCode === 200) {
              result.ids.push(result.body.id);
              result.finishes.push(result.body.choices[0].finish_reason);
              result.usage = result.body.usage;
            }
          } else {
            assert.equal(buffer, "", "the stream ended in the middle of an event");
          }
          settle();
        } catch (e) {
          settle(e);
        }
      });
      // The connection closed before the response's end: the server cut it (an abort settled earlier).
      res.on("close", () => settle(res.complete ? null : new Error(`request ${i} (${kind}, ${endpoint}): the server ` +
                                                                    `closed the connection ${result.stage}`)));
    });
    req.end(body);
  });
}

const results = [];
const rss = [];
test(`${CLIENTS} clients send ${REQUESTS} requests; each ends exactly once`, async () => {
  let next = 0;
  const t0 = Date.now();
  await Promise.all(Array.from({ length: CLIENTS }, async () => {
    while (next < REQUESTS) {
      const i = next++;
      results[i] = await send(i, kinds[i]);
      if (results[i].status === 429) await sleep(20);  // as a client honouring Retry-After would, briefly
      if (i % 25 === 24) rss.push({ after: i + 1, kib: server.rssKiB() });
    }
  }));
  const seconds = (Date.now() - t0) / 1000;
  const count = (f) => results.filter(f).length;
  const ok = count((r) => r.status === 200 && !r.aborted), busy = count((r) => r.status === 429);
  const aborted = count((r) => r.aborted), tooLong = count((r) => r.status === 400);
  console.log(`  ${REQUESTS} requests in ${seconds.toFixed(1)} s: ${ok} answered, ${busy} refused with 429, ` +
              `${aborted} aborted by the client, ${tooLong} too long (400)`);

  assert.equal(results.filter(Boolean).length, REQUESTS, "a request has no result");
  const ids = new Map();
  for (const r of results) {
    const what = `request ${r.i} (${r.kind}, ${r.endpoint}): ${JSON.stringify(r.body ?? r.finishes)}`;
    if (r.kind === "too-long") {
      assert.equal(r.status, 400, what);
      assert.equal(r.body.error.code, "context_length_exceeded", what);
      continue;
    }
    // A client that aborts may have seen the status line already (a 429 whose body it never read).
    if (r.aborted) continue;
    if (r.status === 429) {
      assert.equal(r.body.error.code, "queue_full", what);
      continue;
    }
    assert.equal(r.status, 200, what);
    assert.equal(r.ids.length, 1, `${what}: ids ${r.ids}`);
    assert.equal(r.finishes.length, 1, `${what}: finish reasons ${r.finishes}`);
    assert.ok(["stop", "length"].includes(r.finishes[0]), what);
    if (r.kind === "stream") assert.equal(r.done, 1, `${what}: ${r.done} [DONE]`);
    assert.ok(r.usage.completion_tokens >= 1, what);
    for (const id of r.ids) {
      assert.ok(!ids.has(id), `response id ${id} answered requests ${ids.get(id)} and ${r.i}`);
      ids.set(id, r.i);
    }
  }
  assert.ok(busy > 0, "no request was refused with 429: the queue limit was not exercised");
  assert.ok(aborted > 0, "no request was aborted");
});

test("the server's counters agree with the clients", async () => {
  // Wait for the aborted requests' cancellations to land.
  let m;
  for (let tries = 0; tries < 100; tries++) {
    m = await server.metrics();
    if (m.mk_generating === 0 && m.mk_queue_length === 0) break;
    await sleep(50);
  }
  assert.equal(m.mk_generating, 0);
  assert.equal(m.mk_queue_length, 0);
  const sum = (prefix) => Object.entries(m).filter(([k]) => k.startsWith(prefix)).reduce((a, [, v]) => a + v, 0);
  const http = (p, status) => m[`mk_http_requests_total{path="${p}",status="${status}"}`] ?? 0;
  const both = (status) => http("/v1/completions", status) + http("/v1/chat/completions", status);
  // What the clients saw is what the server answered; a request the client aborted may have been
  // answered (200 or 429) before the abort, or not seen at all if it was aborted while being sent.
  const seen = (status) => results.filter((r) => r.status === status && !r.aborted).length;
  const aborted = results.filter((r) => r.aborted).length;
  assert.equal(both(400), seen(400));
  const extra200 = both(200) - seen(200), extra429 = both(429) - seen(429);
  assert.ok(extra200 >= 0 && extra429 >= 0 && extra200 + extra429 <= aborted,
            `server: ${both(200)} x 200, ${both(429)} x 429; clients: ${seen(200)} x 200, ${seen(429)} x 429, ${aborted} aborted`);
  // Every request the server admitted (200) ended in exactly one generation record.
  assert.equal(sum("mk_generations_total{"), both(200));
  const cancelled = sum('mk_generations_total{endpoint="chat",finish_reason="cancelled"}') +
                    sum('mk_generations_total{endpoint="completion",finish_reason="cancelled"}');
  // (How many aborts reach a running generation depends on timing; openai_client.mjs tests that path.)
  assert.ok(cancelled <= aborted, `${cancelled} generations cancelled for ${aborted} aborted requests`);
  console.log(`  ${cancelled} generations cancelled by ${aborted} client aborts`);
});

test(`resident memory stays flat (growth under ${RSS_GROWTH_LIMIT_KIB} KiB after the first quarter)`, () => {
  console.log(`  RSS (KiB) after n requests: ${rss.map((s) => `${s.after}: ${s.kib}`).join(", ")}`);
  const warm = rss.find((s) => s.after >= REQUESTS / 4), last = rss[rss.length - 1];
  assert.ok(warm && last.after > warm.after);
  assert.ok(last.kib - warm.kib < RSS_GROWTH_LIMIT_KIB, `RSS grew ${last.kib - warm.kib} KiB from ${warm.after} to ${last.after} requests`);
});

// Connections that arrive while the server cannot accept them (a stalled machine; here SIGSTOP) wait in
// the kernel's listen queue until it resumes. A queue too small for the burst makes the kernel drop
// handshakes, and those clients wait for retransmissions (with httplib's own backlog of 5 the kernel
// counted 1,001 listen-queue overflows in one such run here, and the last answer came ~1 s after the
// resume instead of ~0.1 s). Every connection must be answered, and within 2 s of the resume.
const BURST = 200, STOPPED_MS = 3000, AFTER_RESUME_MS = 2000;
test(`${BURST} connections opened while the server is stopped for ${STOPPED_MS / 1000} s are all answered`, async () => {
  const health = () => new Promise((resolve, reject) => {
    const req = http.get(`${server.url}/health`, { agent: false }, (res) => {
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode, at: Date.now() }));
    });
    req.on("error", reject);
    req.setTimeout(30000, () => req.destroy(new Error("no answer to /health in 30 s")));
  });
  process.kill(server.proc.pid, "SIGSTOP");
  let answers;
  try {
    answers = Array.from({ length: BURST }, health);
    await sleep(STOPPED_MS);
  } finally {
    process.kill(server.proc.pid, "SIGCONT");
  }
  const resumed = Date.now();
  const done = await Promise.all(answers);
  const late = done.filter((a) => a.at - resumed > AFTER_RESUME_MS).length;
  console.log(`  ${BURST} answers, the last ${Math.max(...done.map((a) => a.at)) - resumed} ms after the resume`);
  assert.ok(done.every((a) => a.status === 200), "a /health answer was not 200");
  assert.equal(late, 0, `${late} of ${BURST} connections were answered more than ${AFTER_RESUME_MS} ms after the resume`);
});

test("the server answers after the load and stops cleanly", async () => {
  const r = await fetch(`${server.url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt: "after", max_tokens: 2 }) });
  assert.equal(r.status, 200);
  const status = await server.stop();
  assert.equal(status.code, 0, `exit ${JSON.stringify(status)}\n${server.log}`);
});

await run(async () => {
  if (server.alive()) await server.stop();
});
