#!/usr/bin/env bash
# A/B runs of mk-bench on the GPU machine, for comparing builds or settings in one call (machines differ
# from call to call, so only numbers of one call compare). Each variant is NAME=MK_BENCH_BINARY|ARGS;
# the variants run interleaved, case by case and round by round, every `mk-bench --json` is kept under
# $OUT/ab (tarred into $OUT/data.tgz), and a table gives each variant's median ms per token and its ratio
# to the first variant's in the same round.
#   OUT=... bench/ab.sh 'old=.carry/ab/old/mk-bench|' 'new=.carry/ab/new/mk-bench|' 'new-early1=.carry/ab/new/mk-bench|--early 1'
# Environment: CASES ("preset:depths ..."; default below), ROUNDS (default 2), TOKENS (-n, default 128),
# REPS (-r, default 3); TEST_GPU=BINARY and TEST_COUNT=N run a GPU test binary first and stop unless all N
# tests passed (its log is kept).
set -u
: "${OUT:?set OUT to the folder for the results}"
export MK_FIXTURES=${MK_FIXTURES:-$PWD/tests/fixtures}
nvidia-smi -L > "$OUT/gpu.txt" 2>&1
if [[ -n ${TEST_GPU:-} ]]; then
  timeout 300 "$TEST_GPU" > "$OUT/test_gpu.log" 2>&1
  echo "test_gpu rc=$?" | tee -a "$OUT/gpu.txt"
  grep -E "^\[  (PASSED|FAILED) " "$OUT/test_gpu.log"
  grep -q "\[  PASSED  \] ${TEST_COUNT:-0} tests" "$OUT/test_gpu.log" || { tail -80 "$OUT/test_gpu.log"; exit 1; }
fi
mkdir -p "$OUT/ab"
names=()
for v in "$@"; do names+=("${v%%=*}"); done
read -r -a cases <<< "${CASES:-llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 llama-3.1-8b:1024}"
for ((r = 1; r <= ${ROUNDS:-2}; ++r)); do
  for c in "${cases[@]}"; do
    preset=${c%%:*} depths=${c#*:}
    for v in "$@"; do
      name=${v%%=*} rest=${v#*=}
      bin=${rest%%|*} args=${rest#*|}
      # shellcheck disable=SC2086 # the variant's arguments are words
      timeout 150 "$bin" $args --preset "$preset" --depths "$depths" -n "${TOKENS:-128}" -r "${REPS:-3}" --json \
        > "$OUT/ab/${name}_${preset}@${depths//,/-}_r$r.json" 2> "$OUT/ab/${name}_${preset}@${depths//,/-}_r$r.err" ||
        echo "FAILED $name $preset $depths r$r"
    done
  done
done
python3 - "$OUT/ab" "${names[@]}" <<'PY' | tee "$OUT/table.txt"
import collections, glob, json, os, sys
folder, names = sys.argv[1], sys.argv[2:]
rows = collections.defaultdict(dict)
for f in glob.glob(os.path.join(folder, "*.json")):
    base = os.path.basename(f)[:-5]
    name = max((n for n in names if base.startswith(n + "_")), key=len, default=None)  # names may hold "_"
    if name is None:
        continue
    preset, r = base[len(name) + 1:].rsplit("_r", 1)
    preset = preset.split("@")[0]  # the file names carry the case's depths too: one preset may be two cases
    try:
        d = json.load(open(f))
    except Exception as e:
        print("unreadable", f, e)
        continue
    for x in d["depths"]:
        rows[(preset, x["depth"], r)][name] = (x["median_ms"], x["pct_read_ceiling"])
print(f"{'preset':<14}{'depth':>6}{'r':>3} " + " ".join(f"{n:>20}" for n in names))
for k in sorted(rows):
    v = rows[k]
    base = v.get(names[0], (None,))[0]
    cell = lambda n: f"{v[n][0]:.4f} {v[n][1]:.1f}% {v[n][0] / base:.3f}" if n in v and base else "-"
    print(f"{k[0]:<14}{k[1]:>6}{k[2]:>3} " + " ".join(f"{cell(n):>20}" for n in names))
PY
tar czf "$OUT/data.tgz" -C "$OUT" ab $( [[ -f $OUT/test_gpu.log ]] && echo test_gpu.log ) 2>/dev/null && rm -rf "$OUT/ab"
