#!/usr/bin/env bash
# Review mends: SASS of every kernel against 93c9a3e's build, and test_gpu.
set -u
B=.carry/ab
export MK_FIXTURES=$PWD/tests/fixtures
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi -L > $OUT/gpu.txt
for w in final review; do
  cuobjdump -sass $B/$w/mk-bench 2>/dev/null | grep -E 'Function :|^\s+/\*[0-9a-f]+\*/' | sed -E 's@/\*[0-9a-f]+\*/@@; s@/\* 0x[0-9a-f]+ \*/@@; s/ +/ /g' > $OUT/sass_$w.txt
done
wc -l $OUT/sass_*.txt | tee -a $OUT/gpu.txt
diff $OUT/sass_final.txt $OUT/sass_review.txt > $OUT/sass.diff; echo "SASS diff lines: $(wc -l < $OUT/sass.diff)" | tee -a $OUT/gpu.txt
awk '/Function :/{f=$0} {print > "/dev/null"}' $OUT/sass_final.txt
python3 - $OUT/sass_final.txt $OUT/sass_review.txt <<'PY2' | tee -a $OUT/gpu.txt
import sys
def funcs(p):
    d = {}; cur = None
    for line in open(p):
        if 'Function :' in line: cur = line.split('Function :')[1].strip(); d[cur] = []
        elif cur: d[cur].append(line)
    return d
a, b = funcs(sys.argv[1]), funcs(sys.argv[2])
print(len(a), "kernels;", sum(a[k] != b.get(k) for k in a), "differ:", [k for k in a if a[k] != b.get(k)][:8])
PY2
rm -f $OUT/sass_final.txt $OUT/sass_review.txt
timeout 200 $B/review/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?" | tee -a $OUT/gpu.txt
tail -1 $OUT/test_gpu.log
