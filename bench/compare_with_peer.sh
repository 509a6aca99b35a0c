#!/usr/bin/env bash
# mk-bench and the PyTorch peer (bench/pytorch_peer.py) on the same GPU, same shape and depth, one after
# the other in one run; prints both and our speed-up. Needs a GPU build and python3 with torch.
#   bench/compare_with_peer.sh [MK_BENCH_BINARY] [PRESET] [DEPTH]
set -euo pipefail
bench=${1:-build-nvidia/bench/mk-bench}
preset=${2:-llama-3.2-1b}
depth=${3:-1024}
here="$(cd "$(dirname "$0")" && pwd)"
ours=$("$bench" --preset "$preset" --depths "$depth" -n 128 -r 3 --json)
peer=$(python3 "$here/pytorch_peer.py" --preset "$preset" --depth "$depth" --tokens 128 --reps 3 | tail -n 1)
python3 - "$ours" "$peer" <<'PY'
import json, sys
ours, peer = json.loads(sys.argv[1]), json.loads(sys.argv[2])
d = ours["depths"][0]
print(f"device {ours['device']['name']}: read ceiling {ours['device']['read_gbps']:.0f} GB/s (measured in this run)")
print(f"{ours['model']}, depth {d['depth']}, batch 1, greedy")
print(f"  monokernel   {d['median_ms']:.4f} ms/token  ({d['pct_read_ceiling']:.1f}% of the read ceiling, commit {ours['commit']})")
print(f"  pytorch peer {peer['median_ms']:.4f} ms/token  (torch {peer['torch']}, {peer['peer']})")
print(f"  speed-up     {peer['median_ms'] / d['median_ms']:.2f}x")
PY
