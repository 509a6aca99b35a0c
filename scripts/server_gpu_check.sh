#!/usr/bin/env bash
# mk-server on the GPU, run on a GPU machine with a -DMK_GPU=nvidia build made here and carried:
#
#   here:  scripts/server_gpu_bundle.sh .carry/server-gpu build-nv   (node, the npm clients, the binaries and
#                                                                     the libraries a bare machine lacks)
#   there: scripts/server_gpu_check.sh .carry/server-gpu/build OUT_DIR .carry/server-gpu
#          (generally: scripts/server_gpu_check.sh BUILD_DIR OUT_DIR [BUNDLE_DIR])
#
# 1. The openai client test (tests/server/openai_client.mjs) against mk-server on the GPU backend
#    (MK_SERVER_TEST_GPU=1: greedy replies must equal mk-run's on the emulator; the abort test runs on the
#    emulator's slow model, where "within a token" is a count).
# 2. Time to first token and tokens/s over HTTP (tests/server/bench.mjs: streamed, greedy, 128 prompt
#    tokens, 256 generated, median of 5) next to the engine's own timings of the same requests and to
#    mk-bench on the same model directory at depth 128, for two models with the tiny chat model's
#    tokenizer: its own tiny shape (tokens microseconds apart: the HTTP path's cost shows most) and
#    Llama-3.2-1B's layer shapes (16 layers, hidden 2048, random weights).
# MK_SERVER_BENCH_SHAPES="tiny" skips the 1B shape (its 2 GB of weights take a while to write).
# Writes four files to OUT_DIR (the device tool brings back at most eight): summary.md (the table),
# openai_client.log, bench.json (per shape: the HTTP benchmark and mk-bench's JSON), logs.txt (GPU, server
# and mk-bench logs). Builds nothing. Exit status: 1 if the client test failed.
set -uo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR [BUNDLE_DIR]" >&2
  exit 2
fi
build="$(cd "$1" && pwd)"
mkdir -p "$2"
out="$(cd "$2" && pwd)"
bundle="${3:-.server-gpu}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

server="$build/host/server/mk-server"
mkrun="$build/host/tools/mk-run"
bench="$build/bench/mk-bench"
make_model="$build/tests/mk-tiny-chat-model"
for tool in "$server" "$mkrun" "$bench" "$make_model"; do
  [[ -f "$tool" ]] || { echo "server_gpu_check: missing $tool (build the nvidia configuration with its tests)" >&2; exit 2; }
  chmod +x "$tool"  # a carried binary may arrive without its execute bit
done

# xz may be missing on the GPU machine; its python3 reads xz too.
unxz_to_stdout() {
  if command -v xz >/dev/null; then xz -dc "$1"; else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"; fi
}
# node and the clients: from the bundle (or a node on PATH and the clients of a local setup).
if [[ -f "$bundle/libs.tar.xz" ]]; then  # PCRE2 and ICU as linked here (scripts/server_gpu_bundle.sh)
  unxz_to_stdout "$bundle/libs.tar.xz" | tar -C "$work" -xf -
  export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
node=node
if ! command -v node >/dev/null; then
  [[ -f "$bundle/node.xz" ]] || { echo "server_gpu_check: no node on PATH and no $bundle/node.xz (scripts/server_gpu_bundle.sh)" >&2; exit 2; }
  unxz_to_stdout "$bundle/node.xz" >"$work/node" && chmod +x "$work/node"
  node="$work/node"
fi
if [[ -f "$bundle/clients.tar.xz" ]]; then
  unxz_to_stdout "$bundle/clients.tar.xz" | tar -C "$work" -xf -
else
  bash "$root/scripts/server_test_setup.sh" "$work/clients" || exit 2
fi
cp "$root"/tests/server/*.mjs "$work/clients/"  # this checkout's tests, over the bundle's copies
logs="$work/logs"
mkdir -p "$logs"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$logs/gpu.txt"

echo "== 1. openai client test on the GPU backend"
rc=0
MK_SERVER_TEST_GPU=1 "$node" "$work/clients/openai_client.mjs" --server "$server" --run "$mkrun" \
  --make-model "$make_model" --work "$work/client-test" 2>&1 | tee "$out/openai_client.log" || rc=1

echo "== 2. TTFT and tok/s over HTTP, next to the engine's and mk-bench's"
start_server() {  # DIR LOG -> sets port, pid
  "$server" -m "$1" --port 0 -c 2048 -q 2>"$2" &
  pid=$!
  port=""
  for _ in $(seq 1 600); do
    port="$(grep -so 'listening on http://127.0.0.1:[0-9]*' "$2" | grep -o '[0-9]*$')" && [[ -n "$port" ]] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "server_gpu_check: mk-server did not start:" >&2
  cat "$2" >&2
  return 1
}
for shape in ${MK_SERVER_BENCH_SHAPES:-tiny 1b}; do
  dir="$work/model-$shape"
  if [[ "$shape" == 1b ]]; then
    "$make_model" "$dir" --layers 16 --hidden 2048 --intermediate 8192 --heads 32 --kv-heads 8 --head-dim 64 >/dev/null
  else
    "$make_model" "$dir" >/dev/null
  fi
  if start_server "$dir" "$logs/server_$shape.log"; then
    "$node" "$work/clients/bench.mjs" --url "http://127.0.0.1:$port" --vocab 110 --prompt-tokens 128 --max-tokens 256 \
      --reps 5 >"$logs/bench_$shape.json" || echo "server_gpu_check: the benchmark failed ($shape)" >&2
    kill -TERM "$pid"
    wait "$pid"
  fi
  "$bench" -m "$dir" --depths 128 -n 256 -r 5 --json >"$logs/mk_bench_$shape.json" 2>"$logs/mk_bench_$shape.err" ||
    echo "server_gpu_check: mk-bench failed ($shape): $(tail -3 "$logs/mk_bench_$shape.err")" >&2
done

"$node" -e '
  const fs = require("fs"), [logs, out, shapes] = process.argv.slice(1);
  const read = (f) => { try { return JSON.parse(fs.readFileSync(`${logs}/${f}`, "utf8")); } catch { return null; } };
  const f = (x, d = 3) => (x === undefined || x === null ? "-" : Number(x).toFixed(d));
  let md = "| model | HTTP first token ms | engine first token ms | HTTP tok/s | engine tok/s | mk-bench tok/s (depth 128) | HTTP overhead ms/token |\n|---|---|---|---|---|---|---|\n";
  const all = {};
  for (const shape of shapes.split(/\s+/).filter(Boolean)) {
    const b = read(`bench_${shape}.json`), m = read(`mk_bench_${shape}.json`);
    all[shape] = { http: b, mk_bench: m };
    const mb = m?.depths?.[0]?.tok_per_s;
    md += `| ${shape} | ${f(b?.http_first_token_ms)} | ${f(b?.engine_first_token_ms)} | ${f(b?.http_tokens_per_second, 1)} | ${f(b?.engine_tokens_per_second, 1)} | ${f(mb, 1)} | ${f(b?.http_overhead_ms_per_token, 4)} |\n`;
  }
  fs.writeFileSync(`${out}/summary.md`, md);
  fs.writeFileSync(`${out}/bench.json`, JSON.stringify(all, null, 1));
  process.stdout.write(md);
' "$logs" "$out" "${MK_SERVER_BENCH_SHAPES:-tiny 1b}"
for f in "$logs"/*.txt "$logs"/*.log "$logs"/*.err; do
  [[ -f "$f" ]] && { echo "==== $(basename "$f")"; cat "$f"; }
done >"$out/logs.txt"
exit $rc
