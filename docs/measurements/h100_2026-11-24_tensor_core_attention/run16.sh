#!/usr/bin/env bash
set -u
B=.carry/api
export MK_FIXTURES=$PWD/tests/fixtures
export LD_LIBRARY_PATH=$PWD/$B
nvidia-smi -L > $OUT/gpu.txt
timeout 120 $B/test_gpu_api > $OUT/test_gpu_api.log 2>&1; echo "test_gpu_api rc=$?" | tee -a $OUT/gpu.txt
tail -3 $OUT/test_gpu_api.log
