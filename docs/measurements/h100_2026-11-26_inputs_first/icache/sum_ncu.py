import csv, gzip, sys, collections
def num(s):
    try: return float(s)
    except: return 0.0
for path in sys.argv[1:]:
    rows = list(csv.reader(gzip.open(path, 'rt')))
    hdr = rows[1]; data = [r for r in rows[2:] if len(r) >= len(hdr)]
    ix = {h: i for i, h in enumerate(hdr)}
    reasons = [h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
    tot = collections.Counter()
    executed = 0
    for r in data:
        if num(r[ix['Instructions Executed']]) > 0: executed += 1
        for h in reasons: tot[h] += num(r[ix[h]])
    S = sum(tot.values())
    print(path, 'SASS bytes', 16 * len(data), 'executed bytes', 16 * executed, 'samples', int(S))
    print('   ' + '  '.join(f'{h[6:]} {100 * v / S:.1f}%' for h, v in tot.most_common(9)))
