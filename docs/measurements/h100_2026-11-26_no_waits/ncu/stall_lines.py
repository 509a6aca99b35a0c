# Warp-stall samples of the decode kernel by source: ncu's per-SASS source page (CSV) joined with
# nvdisasm's line table of the same cubin. Prints the totals by stall reason, by op file (the outermost
# device/ops/ file of the inline chain) and the 40 source lines with the most samples.
import collections, csv, gzip, re, subprocess, sys
cubin, kernel, ncu_csv = sys.argv[1:4]
rows = list(csv.reader(gzip.open(ncu_csv, 'rt')))
hdr = rows[1]
ix = {h: i for i, h in enumerate(hdr)}
reasons = [h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
data = [r for r in rows[2:] if len(r) >= len(hdr)]
base = int(data[0][0], 16)
def num(s):
    try: return float(s)
    except ValueError: return 0.0
per_addr = {int(r[0], 16) - base: [num(r[ix[h]]) for h in reasons] for r in data}
out = subprocess.run(['nvdisasm', '-gi', '-c', cubin], capture_output=True, text=True).stdout.splitlines()
inside, prev_comment, group, loc = False, False, [], ('?', '?', '?')
by_reason = collections.Counter(); by_op = collections.defaultdict(collections.Counter); by_line = collections.defaultdict(collections.Counter)
line_op = {}
for line in out:
    if line.startswith('.text.') or line.startswith('\t.section') or line.startswith('.section'):
        inside = line.startswith('.text.' + kernel + ':')
        continue
    if not inside: continue
    m = re.search(r'//## File "([^"]+)", line (\d+)(.*)', line)
    if m:
        files = [m.group(1)] + re.findall(r'inlined at "([^"]+)", line \d+', m.group(3))
        if not prev_comment: group = []
        group.append((m.group(1), m.group(2), files))
        prev_comment = True
        chain = [f for g in group for f in g[2]]
        op = next((c for c in chain if '/device/ops/' in c), next((c for c in chain if '/device/' in c), chain[-1]))
        loc = (group[0][0].split('/device/')[-1], group[0][1], op.split('/device/')[-1])
        continue
    prev_comment = False
    m = re.match(r'\s*/\*([0-9a-f]{4,})\*/', line)
    if not m: continue
    v = per_addr.get(int(m.group(1), 16))
    if not v: continue
    for h, x in zip(reasons, v):
        if x:
            by_reason[h] += x; by_op[loc[2]][h] += x; by_line[(loc[0], loc[1])][h] += x
            line_op[(loc[0], loc[1])] = loc[2]
S = sum(by_reason.values())
print('kernel', kernel, 'samples', int(S))
print('by reason: ' + '  '.join(f'{h[6:]} {100 * x / S:.1f}%' for h, x in by_reason.most_common(12)))
print('\nby op file: % of samples, top reasons')
for op, c in sorted(by_op.items(), key=lambda kv: -sum(kv[1].values())):
    t = sum(c.values())
    print(f'{100 * t / S:6.2f}%  {op:28s} ' + '  '.join(f'{h[6:]} {100 * x / S:.2f}' for h, x in c.most_common(4)))
print('\nsource lines with the most samples (% of all; op file; top reasons)')
for (f, l), c in sorted(by_line.items(), key=lambda kv: -sum(kv[1].values()))[:45]:
    t = sum(c.values())
    print(f'{100 * t / S:6.2f}%  {f}:{l:5s} [{line_op[(f, l)]}] ' + '  '.join(f'{h[6:]} {100 * x / S:.2f}' for h, x in c.most_common(3)))
