#!/usr/bin/env python3
"""Splits thread 0's start -> ready of every instruction in the diagnostic trace, whose CSV columns
prologue_end_us and done_us hold the time after the prestage and after the stream's top-up (bit 0 of the
latter in ns: the inputs were already complete then; the timer's values are even, so the bit survives the
CSV's relative times), per op, for late workgroups (inputs complete) and waiting ones."""
import collections, csv, statistics as st, sys
for path in sys.argv[1:]:
    groups = collections.defaultdict(list)
    for r in csv.DictReader(open(path)):
        s, ready, a, b = (float(r[k]) for k in ('start_us', 'ready_us', 'prologue_end_us', 'done_us'))
        complete = round(b * 1000) % 2 == 1
        groups[(r['op'], 'late' if complete else 'waiting')].append((s, ready, a, b))
    print(path, '(medians, us)')
    for (op, kind), v in sorted(groups.items()):
        def med(f): return st.median([f(*x) for x in v])
        print(f"  {op:9s} {kind:8s} n={len(v):4d} prestage {med(lambda s, r, a, b: a - s):6.2f}  current+top_up {med(lambda s, r, a, b: b - a):6.2f}"
              f"  polls {med(lambda s, r, a, b: r - b):6.2f}  start->ready {med(lambda s, r, a, b: r - s):6.2f}")
