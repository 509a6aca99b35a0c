#!/usr/bin/env python3
"""The diagnostic trace whose four columns hold, for each instruction, thread 0's time at the start of the
weight stream's top-up, after it settled its cursor (the instruction loads), after its first chunk was
issued, and at its end: medians per op (us)."""
import collections, csv, statistics as st, sys
for path in sys.argv[1:]:
    g = collections.defaultdict(list)
    for r in csv.DictReader(open(path)):
        a, b, c, d = (float(r[k]) for k in ('start_us', 'ready_us', 'prologue_end_us', 'done_us'))
        if a > 0: g[r['op']].append((b - a, c - b, d - c, d - a))
    print(path)
    for op, v in sorted(g.items()):
        m = [st.median(x[i] for x in v) for i in range(4)]
        print(f"  {op:9s} n={len(v):4d} settle {m[0]:5.2f}  first chunk {m[1]:5.2f}  rest {m[2]:5.2f}  top_up {m[3]:5.2f}")
