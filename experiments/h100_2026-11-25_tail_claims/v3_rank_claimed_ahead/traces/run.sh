#!/usr/bin/env bash
# Twelfth session, fourth call (v3 build, .carry/ab/new): more shrink / late settings, interleaved with
# old (b999b3d) and claims off, two rounds; then one traced step (step 40, depth 1024) of Llama-3.2-1B and
# Qwen2.5-0.5B with claims off and on, analysed by traces_b999b3d/tails.py (who ends each stage last and why).
set -u
B=.carry/ab
nvidia-smi -L > $OUT/gpu.txt
mkdir -p $OUT/ab
variants=("old|$B/old/mk-bench" "off|$B/new/mk-bench" "s30l16|$B/new/mk-bench --tail-shrink 30 --tail-late 16"
          "s30l32|$B/new/mk-bench --tail-shrink 30 --tail-late 32" "s50l16|$B/new/mk-bench --tail-shrink 50 --tail-late 16"
          "s15l32|$B/new/mk-bench --tail-shrink 15 --tail-late 32")
cases=("llama-3.2-1b:128,1024" "qwen2.5-0.5b:1024")
for r in 1 2; do
  for c in "${cases[@]}"; do
    preset=${c%%:*} depths=${c#*:}
    for v in "${variants[@]}"; do
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
    d = json.load(open(f))
    for x in d["depths"]: rows[(preset, x["depth"], r)][name] = x["median_ms"]
names = ["old", "off", "s30l16", "s30l32", "s50l16", "s15l32"]
print(f"{'preset':<14}{'depth':>6}{'r':>3} " + " ".join(f"{n:>14}" for n in names))
for k in sorted(rows):
    v = rows[k]; o = v.get("old")
    print(f"{k[0]:<14}{k[1]:>6}{k[2]:>3} " + " ".join(f"{v[n]:.4f} {v[n]/o:.3f}".rjust(14) if n in v and o else "-".rjust(14) for n in names))
PY
for m in llama-3.2-1b qwen2.5-0.5b; do
  for v in "off|" "s30l16|--tail-shrink 30 --tail-late 16" "s60|--tail-shrink 60"; do
    name=${v%%|*} args=${v#*|}
    $B/new/mk-bench --preset $m --depths 1024 -n 64 -r 1 --trace 40 --trace-csv $OUT/ab/trace_${name}_$m.csv $args > $OUT/ab/trace_${name}_$m.txt 2>&1
  done
done
python3 docs/measurements/h100_2026-11-25_group_combine/traces_b999b3d/tails.py $OUT/ab/trace_*_llama-3.2-1b.csv $OUT/ab/trace_*_qwen2.5-0.5b.csv
for f in $OUT/ab/trace_*.txt; do echo "== $f"; grep -A9 "^trace of step" $f; done
tar czf $OUT/data.tgz -C $OUT ab 2>/dev/null; rm -rf $OUT/ab
