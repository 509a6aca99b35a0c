#!/usr/bin/env bash
# Twelfth session: early chunks paced (one at a time between polls, the next once the last has landed)
# against main's build (old = 630aa54, b999b3d's kernel) in one call: test_gpu on the new build, then two
# interleaved rounds of old, new (early 2, the default) and new --early 3, and one traced step of 1B at
# depth 1024 from old and new, analysed by traces_b999b3d/tails.py. Binaries in .carry/ab/{old,new}.
set -u
B=.carry/ab
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi -L > $OUT/gpu.txt
timeout 200 $B/new/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
grep -E "^\[  (PASSED|FAILED) " $OUT/test_gpu.log
grep -q "\[  PASSED  \] 18 tests" $OUT/test_gpu.log || { tail -40 $OUT/test_gpu.log; exit 1; }
mkdir -p $OUT/ab
for r in 1 2; do
  for c in llama-3.2-1b:128,1024 qwen2.5-0.5b:1024 llama-3.2-3b:1024 llama-3.1-8b:1024; do
    preset=${c%%:*} depths=${c#*:}
    for v in "old|$B/old/mk-bench" "new|$B/new/mk-bench" "new3|$B/new/mk-bench --early 3"; do
      name=${v%%|*} cmd=${v#*|}
      timeout 120 $cmd --preset $preset --depths $depths -n 128 -r 3 --json > $OUT/ab/${name}_${preset}_r$r.json 2> $OUT/ab/${name}_${preset}_r$r.err || echo "FAILED $name $preset r$r"
    done
  done
done
python3 - $OUT/ab <<'PY'
import json, glob, os, sys, collections
rows = collections.defaultdict(dict)
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    name, rest = os.path.basename(f)[:-5].split("_", 1)
    preset, r = rest.rsplit("_r", 1)
    for x in json.load(open(f))["depths"]: rows[(preset, x["depth"], r)][name] = (x["median_ms"], x["pct_read_ceiling"])
print(f"{'preset':<14}{'depth':>6}{'r':>3} {'old':>14} {'new':>14} {'new early 3':>14}")
for k in sorted(rows):
    v = rows[k]; o = v["old"][0]
    print(f"{k[0]:<14}{k[1]:>6}{k[2]:>3} {o:>8.4f} {v['old'][1]:4.1f}% " + " ".join(f"{v[n][0]:.4f} {v[n][0]/o:.3f}".rjust(14) for n in ("new", "new3")))
PY
for w in old new; do
  $B/$w/mk-bench --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 --trace-csv $OUT/ab/trace_$w.csv > $OUT/ab/trace_$w.txt 2>&1
done
python3 docs/measurements/h100_2026-11-25_group_combine/traces_b999b3d/tails.py $OUT/ab/trace_old.csv $OUT/ab/trace_new.csv
for w in old new; do echo "== $w"; grep -A9 "^trace of step" $OUT/ab/trace_$w.txt; done
tar czf $OUT/data.tgz -C $OUT ab test_gpu.log 2>/dev/null; rm -rf $OUT/ab
