// Time to first token and tokens/s over HTTP, next to the server's own (engine) timings of the same
// requests: what the HTTP path adds. Used by scripts/server_gpu_check.sh; not a ctest.
//   node bench.mjs --url http://127.0.0.1:PORT --vocab V [--prompt-tokens 128] [--max-tokens 256] [--reps 5]
// Each repetition streams a /v1/completions request whose prompt is fresh random token ids (so no prefix
// is reused), greedy, with a fixed length; the client timestamps every event. Prints one JSON object:
//   http_first_token_ms       request sent -> first token's event received (median)
//   engine_first_token_ms     the server's generate() call -> first token (median; timings.engine_first_token_ms)
//   http_tokens_per_second    tokens after the first over the time between the first and last events
//   engine_tokens_per_second  the engine's decode rate for the same tokens (timings.predicted_per_second)
//   http_overhead_ms_per_token  1000/http - 1000/engine (median over repetitions)
const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const url = args.url, vocab = Number(args.vocab);
const promptTokens = Number(args["prompt-tokens"] ?? 128), maxTokens = Number(args["max-tokens"] ?? 256), reps = Number(args.reps ?? 5);
if (!url || !vocab) {
  console.error("usage: node bench.mjs --url URL --vocab V [--prompt-tokens N] [--max-tokens N] [--reps N]");
  process.exit(2);
}

let seed = 99;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function once() {
  const prompt = Array.from({ length: promptTokens }, () => Math.floor(random() * vocab));
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/completions`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const reader = r.body.getReader(), decoder = new TextDecoder();
  let buffer = "", first = 0, last = 0, timings = null, usage = null, events = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const now = performance.now();
    buffer += decoder.decode(value, { stream: true });
    for (let at; (at = buffer.indexOf("\n\n")) >= 0;) {
      const data = buffer.slice(6, at);
      buffer = buffer.slice(at + 2);
      if (data === "[DONE]") continue;
      const chunk = JSON.parse(data);
      if (chunk.usage) usage = chunk.usage;
      if (chunk.timings) timings = chunk.timings;
      if (chunk.choices?.[0]?.text) {
        events++;
        if (!first) first = now;
        last = now;
      }
    }
  }
  const n = usage.completion_tokens;
  const httpRate = (n - 1) / ((last - first) / 1000);
  return {
    tokens: n, events,
    http_first_token_ms: first - t0,
    engine_first_token_ms: timings.engine_first_token_ms,
    http_tokens_per_second: httpRate,
    engine_tokens_per_second: timings.predicted_per_second,
    http_overhead_ms_per_token: 1000 / httpRate - 1000 / timings.predicted_per_second,
  };
}

await once();  // warm-up: first use of the kernel, the sockets, the allocator
const runs = [];
for (let i = 0; i < reps; i++) runs.push(await once());
const summary = { prompt_tokens: promptTokens, max_tokens: maxTokens, reps };
for (const k of ["http_first_token_ms", "engine_first_token_ms", "http_tokens_per_second", "engine_tokens_per_second",
                 "http_overhead_ms_per_token", "tokens", "events"])
  summary[k] = median(runs.map((r) => r[k]));
summary.runs = runs;
console.log(JSON.stringify(summary, null, 1));
