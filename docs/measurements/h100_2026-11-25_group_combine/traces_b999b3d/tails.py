#!/usr/bin/env python3
"""Where a stage's tail comes from, from mk-bench --trace-csv files (one traced step each).

For every GEMV stage (op, layer): the workgroup that signals last, whether it started the stage late
(busy with its previous instruction when the stage's inputs were complete) or worked longer, and how long
workgroups that were busy when the inputs became available take from starting the instruction to having
their inputs ("start -> ready": instruction fetch, prestage, the stream's set-up and one counter poll).
  tails.py TRACE.csv...
"""
import collections
import csv
import statistics as st
import sys

ORDER = ['qkv', 'attention', 'o_proj', 'gate_up', 'down']

for path in sys.argv[1:]:
    rows = list(csv.DictReader(open(path)))
    for r in rows:
        for k in ('start_us', 'ready_us', 'prologue_end_us', 'done_us'):
            r[k] = float(r[k])
    stages = collections.defaultdict(list)
    for r in rows:
        stages[(r['op'], int(r['layer']))].append(r)
    layers = max(l for (_, l) in stages) + 1
    agg = collections.defaultdict(lambda: collections.defaultdict(list))
    busy_start_to_ready = collections.defaultdict(list)
    for l in range(layers):
        for k, op in enumerate(ORDER):
            rs = stages[(op, l)]
            prev = (stages[('down', l - 1)] if l > 0 else stages[('embed', 0)]) if op == 'qkv' else stages[(ORDER[k - 1], l)]
            avail = max(r['done_us'] for r in prev)  # the stage's inputs are complete (attention: an upper bound)
            last = max(rs, key=lambda r: r['done_us'])
            lastprev = max(prev, key=lambda r: r['done_us'])
            a = agg[op]
            a['tail'].append(last['done_us'] - st.median(r['done_us'] for r in rs))
            a['last started after inputs'].append(last['start_us'] - avail)
            a['last ready after inputs'].append(last['ready_us'] - avail)
            a['median ready after inputs'].append(st.median(r['ready_us'] for r in rs) - avail)
            a['last work'].append(last['done_us'] - last['ready_us'])
            a['median work'].append(st.median(r['done_us'] - r['ready_us'] for r in rs))
            a['last = previous stage last'].append(1.0 if lastprev['workgroup'] == last['workgroup'] else 0.0)
            if op != 'attention':
                busy_start_to_ready[op] += [r['ready_us'] - r['start_us'] for r in rs if r['start_us'] > avail]
    print(path, '(us, means over layers)')
    for op in ORDER:
        print(f"  {op:9s} " + "  ".join(f"{k} {st.mean(v):.2f}" for k, v in agg[op].items()))
    for op in ORDER:
        v = busy_start_to_ready[op]
        if v:
            print(f"  {op:9s} workgroups busy when the inputs completed: {len(v)}, start -> ready median {st.median(v):.2f}, max {max(v):.2f}")
