#!/usr/bin/env bash
# A/B of two mk-bench builds in one call on a GPU machine: the same presets and depths, the two binaries
# interleaved round by round (so drift hits both alike), every run's --json kept, and a table printed
# last. Each mk-bench run measures the read ceiling itself.
#   bench/ab_kernels.sh OLD_MK_BENCH NEW_MK_BENCH OUT_DIR [ROUNDS] [CASES...]
# A case is PRESET:DEPTHS, e.g. llama-3.2-1b:128,1024 (default: the issue-13 set).
set -uo pipefail
old=$1 new=$2 out=$3 rounds=${4:-2}
shift $(( $# >= 4 ? 4 : $# ))
cases=("$@")
((${#cases[@]})) || cases=(llama-3.2-1b:128,1024,16384 qwen2.5-0.5b:1024 llama-3.1-8b:1024)
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for c in "${cases[@]}"; do
    preset=${c%%:*} depths=${c#*:}
    for which in old new; do
      bin=$old; [[ $which == new ]] && bin=$new
      f="$out/${which}_${preset}_r${r}.json"
      "$bin" --preset "$preset" --depths "$depths" -n 128 -r 3 --json > "$f" 2> "$out/${which}_${preset}_r${r}.err" || echo "FAILED: $which $preset round $r" >&2
    done
  done
done
python3 - "$out" <<'PY'
import json, glob, os, sys, collections
out = sys.argv[1]
rows = collections.defaultdict(dict)
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    which, rest = os.path.basename(f).split("_", 1)
    preset, r = rest[:-5].rsplit("_r", 1)
    try:
        d = json.load(open(f))
    except Exception as e:
        print("unreadable", f, e); continue
    for res in d.get("depths", []):
        key = (preset, res.get("depth"), r)
        rows[key][which] = (res.get("median_ms"), res.get("pct_read_ceiling"))
print(f"{'preset':<14} {'depth':>6} {'round':>5} {'old ms':>9} {'new ms':>9} {'new/old':>8} {'old %':>6} {'new %':>6}")
for (preset, depth, r), v in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0, kv[0][2])):
    o, n = v.get("old", (None, None)), v.get("new", (None, None))
    ratio = f"{n[0] / o[0]:.4f}" if o[0] and n[0] else "-"
    fmt = lambda x, p: f"{x:.{p}f}" if isinstance(x, (int, float)) else "-"
    print(f"{preset:<14} {depth!s:>6} {r:>5} {fmt(o[0],4):>9} {fmt(n[0],4):>9} {ratio:>8} {fmt(o[1],1):>6} {fmt(n[1],1):>6}")
PY
