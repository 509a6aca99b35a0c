# Attributes the decode kernel's SASS to source files (innermost, and the first device/ops/ file of the
# inline chain), split into code that ran in an ncu launch and code that did not.
import collections, csv, gzip, re, subprocess, sys
cubin, kernel, ncu_csv = sys.argv[1:4]
executed = {}
rows = list(csv.reader(gzip.open(ncu_csv, 'rt')))
hdr = rows[1]
ix = {h: i for i, h in enumerate(hdr)}
data = [r for r in rows[2:] if len(r) >= len(hdr)]
base = int(data[0][0], 16)
for r in data:
    try: n = float(r[ix['Instructions Executed']])
    except ValueError: n = 0.0
    try: ni = float(r[ix['stall_no_inst']])
    except ValueError: ni = 0.0
    executed[int(r[0], 16) - base] = (n, ni)
out = subprocess.run(['nvdisasm', '-gi', '-c', cubin], capture_output=True, text=True).stdout.splitlines()
inside = False
prev_comment = False
group = []
samples = []
loc = ('?', '?')
by_inner = collections.Counter(); by_op = collections.Counter(); ni_op = collections.Counter(); by_line = collections.Counter(); by_op_line = collections.Counter()
total = 0
for line in out:
    if line.startswith('.text.') or line.startswith('\t.section') or line.startswith('.section'):
        inside = line.startswith('.text.' + kernel + ':')
        continue
    if not inside: continue
    m = re.search(r'//## File "([^"]+)", line (\d+)(.*)', line)
    if m:
        # A location is printed as consecutive comment lines, innermost first (each may also name the
        # line it is inlined at).
        files = [m.group(1)] + re.findall(r'inlined at "([^"]+)", line \d+', m.group(3))
        if not prev_comment: group = []
        group.append((m.group(1), m.group(2), files))
        prev_comment = True
        chain = [f for g in group for f in g[2]]
        op = next((c for c in chain if '/device/ops/' in c), next((c for c in chain if '/device/' in c), chain[-1]))
        loc = (group[0][0].split('/work/main/')[-1], op.split('/work/main/')[-1], group[0][1])
        if len(samples) < 6: samples.append(line.strip())
        continue
    prev_comment = False
    m = re.match(r'\s*/\*([0-9a-f]{4,})\*/', line)
    if not m: continue
    off = int(m.group(1), 16)
    n, ni = executed.get(off, (0.0, 0.0))
    ran = 'ran' if n > 0 else 'not'
    by_inner[(loc[0], ran)] += 16
    by_op[(loc[1] if len(loc) > 2 else '?', ran)] += 16
    ni_op[loc[1] if len(loc) > 2 else '?'] += ni
    if n > 0: by_line[(loc[0], loc[2] if len(loc) > 2 else '?')] += 16
    if n > 0: by_op_line[(loc[1] if len(loc) > 2 else '?', loc[0], loc[2] if len(loc) > 2 else '?')] += 16
    total += 16
print('kernel', kernel, 'bytes', total, 'disassembly lines', len(out))
print('\n'.join(samples))
if total == 0:
    hits = [i for i, l in enumerate(out) if kernel in l][:5]
    print('kernel mentioned at lines', hits)
    for i in hits[:2]: print('\n'.join(out[i:i + 30]))
print('\nby op file (outermost device/ops/ file of the inline chain): bytes that ran / did not / no_inst samples')
ops = sorted({k[0] for k in by_op}, key=lambda f: -by_op[(f, 'ran')])
for f in ops: print(f'{by_op[(f, "ran")]:8d} {by_op[(f, "not")]:8d} {ni_op[f]:8.0f}  {f}')
print('\nby innermost file: bytes that ran / did not')
files = sorted({k[0] for k in by_inner}, key=lambda f: -by_inner[(f, 'ran')])
for f in files: print(f'{by_inner[(f, "ran")]:8d} {by_inner[(f, "not")]:8d}  {f}')
print('\nlargest source lines among the code that ran (bytes)')
for (f, l), b in by_line.most_common(40): print(f'{b:7d}  {f}:{l}')

print('\nper op file, its largest source lines among the code that ran (bytes)')
for f in ops[:9]:
    top = sorted(((b, k) for k, b in by_op_line.items() if k[0] == f), reverse=True)[:12]
    print(f, ' '.join(f'{k[1].split("/")[-1]}:{k[2]}={b}' for b, k in top))
