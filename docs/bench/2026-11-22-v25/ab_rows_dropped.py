import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpt2block.backends import cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate

print("# gpt2 bf16 one-token builds: 4 rows per warp, 2 blocks per SM (version 18's choice at 768) vs 2 rows, 3 blocks per SM (QKV 288 blocks, FC 384, more even over 132 SMs); one process; decode_rate.rate, tok/s")
for n, d in (("QKV", 3 * 768), ("FC", 4 * 768), ("proj", 768)):
    for rows in (4, 2):
        dd = (("GEMV_NT_ROWS_M1_BF16", rows),)
        print(n, "rows", rows, "(wpr, grid) =", cuda_linear.gemv_nt_plan(d, 768 if n != "proj" else 3072, 8, 1, True, False, defines=dd))
variants = (("4 rows", ()), ("2 rows", (("GEMV_NT_ROWS_M1_BF16", 2),)))
w = ModelWeights.random(SIZES["gpt2"], seed=0)
r = make_runner(w, "cuda", "bf16")
for rnd in range(3):
    for name, d in variants:
        cuda_linear.NT_DEFINES = d
        print(f"round {rnd} {name}: gpt2 bf16 b1 {rate(r, 1, 128):,.0f} tok/s", flush=True)
