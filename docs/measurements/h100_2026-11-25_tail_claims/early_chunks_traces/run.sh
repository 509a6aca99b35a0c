#!/usr/bin/env bash
# Twelfth session, last call: does a waiting workgroup see its inputs late because its early weight chunks
# are still landing? main's build (01c700e = b999b3d's kernel) with 2 (the default), 1 and 0 chunks issued
# before the wait: two rounds of Llama-3.2-1B and Qwen2.5-0.5B, then one traced step of 1B at depth 1024
# each, analysed by traces_b999b3d/tails.py. Binary in .carry/ab/main.
set -u
M=.carry/ab/main/mk-bench
nvidia-smi -L > $OUT/gpu.txt
mkdir -p $OUT/ab
for r in 1 2; do
  for preset in llama-3.2-1b qwen2.5-0.5b; do
    for e in 2 1 0; do
      timeout 120 $M --early $e --preset $preset --depths 128,1024 -n 128 -r 3 --json > $OUT/ab/e${e}_${preset}_r$r.json 2> $OUT/ab/e${e}_${preset}_r$r.err || echo "FAILED e$e $preset r$r"
    done
  done
done
python3 - $OUT/ab <<'PY'
import json, glob, os, sys, collections
rows = collections.defaultdict(dict)
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    name, rest = os.path.basename(f)[:-5].split("_", 1)
    preset, r = rest.rsplit("_r", 1)
    for x in json.load(open(f))["depths"]: rows[(preset, x["depth"], r)][name] = x["median_ms"]
print(f"{'preset':<14}{'depth':>6}{'r':>3} {'early 2':>10} {'early 1':>14} {'early 0':>14}")
for k in sorted(rows):
    v = rows[k]; o = v["e2"]
    print(f"{k[0]:<14}{k[1]:>6}{k[2]:>3} {o:>10.4f} " + " ".join(f"{v[n]:.4f} {v[n]/o:.3f}".rjust(14) for n in ("e1", "e0")))
PY
for e in 2 1 0; do
  $M --early $e --preset llama-3.2-1b --depths 1024 -n 64 -r 1 --trace 40 --trace-csv $OUT/ab/trace_e$e.csv > $OUT/ab/trace_e$e.txt 2>&1
done
python3 docs/measurements/h100_2026-11-25_group_combine/traces_b999b3d/tails.py $OUT/ab/trace_e2.csv $OUT/ab/trace_e1.csv $OUT/ab/trace_e0.csv
for e in 2 1 0; do echo "== early $e"; grep -A9 "^trace of step" $OUT/ab/trace_e$e.txt; done
tar czf $OUT/data.tgz -C $OUT ab 2>/dev/null; rm -rf $OUT/ab
