#!/usr/bin/env bash
# Session 10: the final tree's GPU check (93c9a3e): test_gpu, test_gpu_api, real shapes, mk-bench record.
set -u
B=.carry/ab/final
export MK_FIXTURES=$PWD/tests/fixtures
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 200 $B/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
timeout 120 $B/test_gpu_api > $OUT/test_gpu_api.log 2>&1; echo "test_gpu_api rc=$?" | tee -a $OUT/gpu.txt
tail -1 $OUT/test_gpu.log; tail -1 $OUT/test_gpu_api.log
timeout 420 python3 scripts/gpu_check_real_shapes.py $B $OUT/real > $OUT/real_shapes.log 2>&1; echo "real shapes rc=$?" | tee -a $OUT/gpu.txt
grep -E "rel_err|PASS|FAIL|greedy" $OUT/real_shapes.log | cut -c1-400
find $OUT/real -name "*.safetensors" -delete 2>/dev/null; tar czf $OUT/real.tgz -C $OUT real 2>/dev/null; rm -rf $OUT/real
mkdir -p $OUT/bench
$B/mk-bench --preset llama-3.2-1b --depths 128,1024,4096,16384 -n 128 -r 3 --json > $OUT/bench/llama-3.2-1b.json 2> $OUT/bench/llama-3.2-1b.err
$B/mk-bench --preset qwen2.5-0.5b --depths 1024,16384 -n 128 -r 3 --json > $OUT/bench/qwen2.5-0.5b.json 2> $OUT/bench/qwen2.5-0.5b.err
$B/mk-bench --preset llama-3.1-8b --depths 1024 -n 128 -r 3 --json > $OUT/bench/llama-3.1-8b.json 2> $OUT/bench/llama-3.1-8b.err
python3 - $OUT/bench <<'PY'
import json, glob, sys, os
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    d = json.load(open(f))
    for r in d.get("depths", []): print(os.path.basename(f)[:-5], r["depth"], r["median_ms"], r["pct_read_ceiling"])
PY
tar czf $OUT/bench.tgz -C $OUT bench; rm -rf $OUT/bench
