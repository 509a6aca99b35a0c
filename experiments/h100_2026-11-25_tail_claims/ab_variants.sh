#!/usr/bin/env bash
# Twelfth session: one call on the GPU machine for one version (v1-v5, each folder's what.txt gives the
# exact invocation): test_gpu on the new build (all 23 tests must pass); then, interleaved round by round
# (two rounds), b999b3d's build (`old`) and the new build with each setting, every mk-bench --json kept, and
# a table of ratios to `old`. Binaries in .carry/ab/{old,new}; run with carry [".carry"].
#   bash ab_variants.sh 'NAME|MK-BENCH ARGS' ...   (the new build with those arguments; "off|" for none)
#   CASES="llama-3.2-1b:128,1024 ..." overrides the presets and depths.
set -u
B=.carry/ab
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 240 $B/new/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
grep -E "^\[  (PASSED|FAILED) " $OUT/test_gpu.log
grep -q "\[  PASSED  \] 23 tests" $OUT/test_gpu.log || { tail -60 $OUT/test_gpu.log; exit 1; }
mkdir -p $OUT/ab
variants=("old|")
names=(old)
for v in "$@"; do variants+=("$v"); names+=("${v%%|*}"); done
read -r -a cases <<< "${CASES:-llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 llama-3.1-8b:1024}"
for r in 1 2; do
  for c in "${cases[@]}"; do
    preset=${c%%:*} depths=${c#*:}
    for v in "${variants[@]}"; do
      name=${v%%|*} args=${v#*|}
      bin=$B/new/mk-bench; [[ $name == old ]] && bin=$B/old/mk-bench
      timeout 120 $bin $args --preset $preset --depths $depths -n 128 -r 3 --json > $OUT/ab/${name}_${preset}_r$r.json 2> $OUT/ab/${name}_${preset}_r$r.err || echo "FAILED $name $preset r$r"
    done
  done
done
python3 - $OUT/ab "${names[@]}" <<'PY'
import json, glob, os, sys, collections
rows = collections.defaultdict(dict)
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    name, rest = os.path.basename(f)[:-5].split("_", 1)
    preset, r = rest.rsplit("_r", 1)
    try: d = json.load(open(f))
    except Exception as e: print("unreadable", f, e); continue
    for x in d["depths"]: rows[(preset, x["depth"], r)][name] = (x["median_ms"], x["pct_read_ceiling"])
names = sys.argv[2:]
print(f"{'preset':<14}{'depth':>6}{'r':>3} " + " ".join(f"{n:>14}" for n in names))
for k in sorted(rows):
    v = rows[k]; o = v.get("old", (None,))[0]
    cell = lambda n: f"{v[n][0]:.4f} {v[n][0]/o:.3f}" if n in v and o else "-"
    print(f"{k[0]:<14}{k[1]:>6}{k[2]:>3} " + " ".join(f"{cell(n):>14}" for n in names))
PY
tar czf $OUT/data.tgz -C $OUT ab test_gpu.log 2>/dev/null; rm -rf $OUT/ab
