"""Version 27, visit 1: one process, decode_rate.rate (greedy_steps, 128 steps after a 16-token prompt,
median of 5), tok/s. The LM head's rows fetched into the L2 by the ln_1 + QKV kernel of the last layer
(or the one before), cuda.LM_L2_AHEAD_BYTES = the LM head's first bytes by gemv_lm_keep's spread rule
(the bf16 build keeps 24 MB itself, so 40 MB fetches about 16 MB more); 0 = none (version 26)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

MB = 1 << 20


def run(size, prec, batch, steps, variants, rounds):
    w = ModelWeights.random(SIZES[size], seed=0)
    r = make_runner(w, "cuda", prec)
    for rnd in range(rounds):
        for nbytes, layer, defines in variants:
            cuda.LM_L2_AHEAD_BYTES[prec], cuda.LM_L2_AHEAD_LAYER = nbytes, layer
            cuda_linear.NT_DEFINES = defines
            tag = f"ahead {nbytes // MB:3d} MB layer -{layer}" + (f" {dict(defines)}" if defines else "")
            print(f"round {rnd} {size} {prec} b{batch} {tag}: {rate(r, batch, steps):,.0f} tok/s", flush=True)
    cuda_linear.NT_DEFINES = ()
    del r, w


pin16 = (("GEMV_LM_PIN_BYTES_BF16", 16 * MB),)
run("gpt2", "bf16", 1, 128, [(0, 1, ()), (32 * MB, 1, ()), (40 * MB, 1, ()), (48 * MB, 1, ()), (56 * MB, 1, ()),
                             (48 * MB, 2, ()), (0, 1, pin16), (40 * MB, 1, pin16)], 3)
run("gpt2", "fp32", 1, 128, [(0, 1, ()), (16 * MB, 1, ()), (32 * MB, 1, ()), (48 * MB, 2, ())], 2)
run("gpt2", "bf16", 8, 128, [(0, 1, ()), (40 * MB, 1, ())], 2)
run("gpt2-medium", "bf16", 1, 64, [(0, 1, ()), (40 * MB, 1, ()), (48 * MB, 1, ())], 2)
run("gpt2-xl", "fp32", 1, 48, [(0, 1, ()), (32 * MB, 1, ())], 2)
