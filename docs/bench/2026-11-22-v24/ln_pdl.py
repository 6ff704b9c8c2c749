"""LayerNorm bursts at 8192 x 768: the kept launch against the same kernel with pdl_trigger + pdl_wait
at its top, launched plainly and with programmatic dependent launch (each call still waits for the
one before it before it reads anything)."""
import sys
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import cupy as cp, numpy as np, torch  # noqa: E401
from gpt2block.backends import cuda_ops, cuda_modules, cuda_launch
from gpt2block.bench import _burst_median, layernorm_sets, measure_ceilings
from gpt2block.kernel_source import read_source

OLD = "    if (row >= rows) return;\n#if LN_DEPTH == 3"
def build(tag):
    src = read_source("layernorm.cu")
    assert src.count(OLD) == 1
    if tag == "top":
        src = src.replace(OLD, "    pdl_trigger();\n    pdl_wait();\n" + OLD)
    defs = (("LN_WARPS", cuda_ops.LN_WARPS), ("LN_MAX_VEC", 6), ("LN_DEPTH", 3)) + cuda_ops.LN_DEFINES
    head = "".join(f"#define {k} {v}\n" for k, v in defs)
    m = cp.RawModule(code=head + src, options=cuda_modules.NVRTC_OPTIONS)
    return m.get_function("layernorm_f32")

def main():
    rows, d, sets = 8192, 768, 4
    s = torch.cuda.Stream()
    with torch.cuda.stream(s), cp.cuda.ExternalStream(s.cuda_stream):
        ceil = measure_ceilings(torch, 20)["copy_TBps"]
        xs, ys, g, b, xc, yc, gc, bc = layernorm_sets(torch, rows, d, sets)
        k = build("top")
        grid = min(-(-rows // cuda_ops.LN_WARPS), cuda_ops.LN_BLOCKS_PER_SM * cuda_modules.sm_count())
        blk = 32 * cuda_ops.LN_WARPS
        def args(i):
            return (xc[i % sets], gc, bc, yc[i % sets], cp.int32(rows), cp.int32(d), cp.int32(d), cp.int32(d), cp.float32(1e-5))
        kept = lambda i: cuda_ops.layernorm(xc[i % sets], gc, bc, yc[i % sets], 1e-5)
        plain = lambda i: k((grid,), (blk,), args(i))
        prog = lambda i: cuda_launch.launch_programmatic(k.kernel.ptr, "ln", (grid,), (blk,), args(i), 0, s.cuda_stream)
        copy = lambda i: ys[i % sets].copy_(xs[i % sets])
        ref = []
        for name, f in (("kept", kept), ("top, plain", plain), ("top, programmatic", prog)):
            for i in range(sets):
                yc[i][:] = cp.nan
                f(i)
            s.synchronize()
            ref.append(cp.stack(yc).view(cp.uint32).copy())
        print("bits equal:", all(bool((r == ref[0]).all()) for r in ref), flush=True)
        nbytes = 2 * rows * d * 4
        res = {n: [] for n in ("copy", "kept", "top, plain", "top, programmatic")}
        for rnd in range(3):
            for n, f in (("copy", copy), ("kept", kept), ("top, plain", plain), ("top, programmatic", prog)):
                res[n].append(_burst_median(torch, f, 40) * 1e3)
        print(f"copy ceiling {ceil:.3f} TB/s; us per call in bursts of 10, three rounds")
        for n, t in res.items():
            print(f"  {n:>18}: " + " ".join(f"{v:.2f}" for v in t) + f"  -> {nbytes / min(t) / 1e6 / ceil * 100:.1f}-{nbytes / max(t) / 1e6 / ceil * 100:.1f}% of copy ceiling")
main()
