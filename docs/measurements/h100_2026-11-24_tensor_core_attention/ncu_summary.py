#!/usr/bin/env python3
"""Sums ncu's per-source-line warp samples (--page source --csv --print-source cuda,sass) by file and
lists the top lines: python3 ncu_summary.py src_mixed.csv [N]"""
import csv, sys, collections
path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
by_file = collections.Counter(); by_line = collections.Counter(); text = {}
cur = None; total = 0
with open(path, newline="") as f:
    for row in csv.reader(f):
        if not row: continue
        if row[0] == "File Path": cur = row[1]; continue
        if row[0] in ("Function Name", "Line No"): continue
        if row[0] == "" or cur is None: continue  # SASS rows
        try: n = int(row[4])
        except (ValueError, IndexError): continue
        by_file[cur] += n; by_line[(cur, int(row[0]))] += n; text[(cur, int(row[0]))] = row[1][:110]; total += n
print(f"total samples {total}")
for fpath, n in by_file.most_common(15): print(f"{100*n/total:6.2f}%  {fpath}")
print()
for (fpath, ln), n in by_line.most_common(top): print(f"{100*n/total:6.2f}%  {fpath.split('/')[-1]}:{ln}  {text[(fpath, ln)]}")
