"""Version 30: the stamped step's time, kernel by kernel, from trace_decode_step.py --save records (one .npy per
build): each step runs from one embedding block's wait to the next; inside it, every launch (in wait order) is
given as the median over steps of (its last block's end - the launch before's last end), so that the rows add
up to the step. Usage: python3 trace_steps.py A.npy B.npy (columns side by side)."""
import sys

import numpy as np


def launches(a):
    """(grid x, grid y, first wait, last end, blocks) of each launch: blocks in wait order, a new launch where the
    grid changes or a block index comes again (late blocks of one launch stay in it)."""
    a = a[a[:, 4] > 0]
    a = a[np.argsort(a[:, 4], kind="stable")]
    out, cur, seen = [], [], set()
    for row in a:
        if cur and (row[0] != cur[0][0] or int(row[1]) in seen):
            out.append(cur)
            cur, seen = [], set()
        cur.append(row)
        seen.add(int(row[1]))
    if cur:
        out.append(cur)
    res = []
    for g in out:
        g = np.array(g)
        ends = g[:, 14][g[:, 14] > 0]
        res.append((int(g[0, 0] & 0xFFFF), int((g[0, 0] >> 16) & 0xFFFF), int(g[:, 4].min()),
                    int(ends.max()) if len(ends) else int(g[:, 4].max()), len(g)))
    return res


def steps(a):
    ls = launches(a)
    starts = [i for i, l in enumerate(ls) if l[0] == 1 and l[1] == 1]  # the embedding's one block
    rows, spans = [], []
    for s0, s1 in zip(starts, starts[1:]):
        st = ls[s0:s1]
        spans.append((ls[s1][2] - ls[s0][2]) / 1e3)
        row, prev = [], st[0][3]
        for l in st[1:]:
            row.append((f"{l[0]}x{l[1]}", (l[3] - prev) / 1e3))
            prev = l[3]
        rows.append(row)
    return np.array(spans), rows


cols = [steps(np.load(p)) for p in sys.argv[1:]]
for p, (sp, _) in zip(sys.argv[1:], cols):
    print(f"{p}: {len(sp)} steps, median step {np.median(sp):.2f} us (min {sp.min():.2f})")
n = min(min(len(r) for r in rows) for _, rows in cols)
print("launch | " + " | ".join(f"median end - previous end, {p}" for p in sys.argv[1:]))
for i in range(n):
    cells = []
    for _, rows in cols:
        vals = [r[i][1] for r in rows if len(r) > i]
        names = {r[i][0] for r in rows if len(r) > i}
        cells.append(f"{'/'.join(sorted(names))} {np.median(vals):6.2f}")
    print(f"{i:3d} | " + " | ".join(cells))
