#!/usr/bin/env bash
# Tile path vs warp path (tensor-core form) by depth, same binary, interleaved.
set -u
B=.carry/ab/new
nvidia-smi -L > $OUT/gpu.txt
mkdir -p $OUT/paths
for r in 1 2; do
  for preset in llama-3.2-1b qwen2.5-0.5b; do
    for path in tiles warps; do
      $B/mk-bench --preset $preset --depths 512,1024,2048,4096,8192 -n 128 -r 3 --attention-path $path --json > $OUT/paths/${preset}_${path}_r$r.json 2> $OUT/paths/${preset}_${path}_r$r.err
    done
  done
done
python3 - $OUT/paths <<'PY'
import json, glob, os, sys, collections
d = sys.argv[1]
rows = collections.defaultdict(dict)
for f in sorted(glob.glob(os.path.join(d, "*.json"))):
    preset, path, r = os.path.basename(f)[:-5].rsplit("_", 2)
    for res in json.load(open(f)).get("depths", []):
        rows[(preset, res["depth"], r)][path] = res["median_ms"]
print(f"{'preset':<14} {'depth':>6} {'round':>5} {'tiles':>8} {'warps':>8} {'w/t':>7}")
for k in sorted(rows):
    v = rows[k]; t, w = v.get("tiles"), v.get("warps")
    print(f"{k[0]:<14} {k[1]:>6} {k[2]:>5} {t:>8.4f} {w:>8.4f} {w/t:>7.4f}")
PY
