#!/usr/bin/env bash
# Twelfth session: the chunks issued before an instruction's wait (--early), 1 / 2 (the default) / 3, on
# every preset at depth 1024, main's build (01c700e = b999b3d's kernel), two interleaved rounds. Binary in
# .carry/ab/main.
set -u
M=.carry/ab/main/mk-bench
nvidia-smi -L > $OUT/gpu.txt
mkdir -p $OUT/ab
for r in 1 2; do
  for preset in qwen2.5-0.5b llama-3.2-1b qwen3-1.7b llama-3.2-3b llama-3.1-8b; do
    for e in 2 1 3; do
      timeout 120 $M --early $e --preset $preset --depths 1024 -n 128 -r 3 --json > $OUT/ab/e${e}_${preset}_r$r.json 2> $OUT/ab/e${e}_${preset}_r$r.err || echo "FAILED e$e $preset r$r"
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
print(f"{'preset':<14}{'depth':>6}{'r':>3} {'early 2':>14} {'early 1':>14} {'early 3':>14}")
for k in sorted(rows):
    v = rows[k]; o = v["e2"][0]
    print(f"{k[0]:<14}{k[1]:>6}{k[2]:>3} {o:>8.4f} {v['e2'][1]:4.1f}% " + " ".join(f"{v[n][0]:.4f} {v[n][0]/o:.3f}".rjust(14) for n in ("e1", "e3")))
PY
tar czf $OUT/data.tgz -C $OUT ab 2>/dev/null; rm -rf $OUT/ab
