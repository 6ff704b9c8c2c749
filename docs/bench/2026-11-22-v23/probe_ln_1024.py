"""Probe: the LayerNorm at solve()'s shape (1024 x 768), kernel durations from the profiler, each call
behind a torch matmul (as in solve, the kernel runs after a GEMM), for several grids."""
import sys, json, tempfile
from pathlib import Path
ROOT = Path.cwd(); sys.path.insert(0, str(ROOT))
import cupy as cp, numpy as np, torch
from gpt2block.backends import cuda_ops

rows, d = 1024, 768
x = torch.randn(rows, d, device="cuda"); y = torch.empty_like(x)
g = torch.rand(d, device="cuda") + 0.5; b = torch.randn(d, device="cuda")
xc, yc, gc, bc = (cp.asarray(t) for t in (x, y, g, b))
a = torch.randn(1024, 3072, device="cuda"); w = torch.randn(3072, 768, device="cuda")
ref = torch.nn.functional.layer_norm(x.double(), (d,), g.double(), b.double(), 1e-5)

def durs(fn, name, n=30):
    for _ in range(3): torch.matmul(a, w, out=x.new_empty(0) if False else None); fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            torch.matmul(a, w); fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as t:
        p = Path(t) / "t.json"; prof.export_chrome_trace(str(p)); ev = json.loads(p.read_text())
    ev = ev.get("traceEvents", ev)
    ks = sorted((e["ts"], e["dur"], e["name"]) for e in ev if e.get("cat") == "kernel")
    ds = [k[1] for k in ks if name in k[2]]
    gaps = [ks[i][0] - (ks[i-1][0] + ks[i-1][1]) for i in range(1, len(ks)) if name in ks[i][2]]
    return np.median(ds), np.median(gaps)

saved = (cuda_ops.LN_WARPS, cuda_ops.LN_BLOCKS_PER_SM)
print("torch layer_norm: %.2f us (gap after the matmul %.2f)" % durs(lambda: torch.nn.functional.layer_norm(x, (d,), g, b, 1e-5), "layer_norm"))
for warps in (1, 2, 4, 8):
    most = -(-rows // warps)
    for blocks in sorted({most, most // 2, most // 4} - {0}):
        cuda_ops.LN_WARPS = warps
        yc.fill(cp.nan)
        cuda_ops.layernorm(xc, gc, bc, yc, 1e-5, blocks=blocks)
        err = (torch.as_tensor(yc, device="cuda").double() - ref).abs().max().item()
        dd, gap = durs(lambda: cuda_ops.layernorm(xc, gc, bc, yc, 1e-5, blocks=blocks), "layernorm_f32")
        print(f"warps {warps}, {blocks} blocks ({rows / (warps * blocks):.1f} rows a warp): {dd:.2f} us, gap {gap:.2f}, err {err:.2e}", flush=True)
cuda_ops.LN_WARPS, cuda_ops.LN_BLOCKS_PER_SM = saved
