"""Version 32: knobs last swept several versions ago, re-measured on today's code at gpt2 bf16 b1 (decode_rate.rate,
one process, each variant beside the kept setting, two rounds): the decode attention's blocks per (row, head)
(cuda_attention.DECODE_MAX_CLUSTER: 8 kept; version 16), the screen's table bytes kept in the L2
(LM_SCREEN_PIN_BYTES: 16 MB kept; version 28), and the one-token bf16 GEMVs' rows per warp and blocks per SM
(GEMV_NT_ROWS_M1_BF16 4 kept at width 768, version 18; with 2 rows, GEMV_NT_MIN_BLOCKS_M1_BF16 3 or 4)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_attention, cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", "bf16")


def setter(kind, value):
    def apply():
        cuda_attention.DECODE_MAX_CLUSTER = value if kind == "ranks" else 8
        cuda_linear.SCREEN_DEFINES = (("LM_SCREEN_PIN_BYTES", value << 20),) if kind == "pin" else ()
        cuda_linear.NT_DEFINES = value if kind == "nt" else ()
    return apply


SWEEPS = [("ranks", [8, 4, 2, 1]), ("pin", [16, 8, 24, 32]),
          ("nt", [(("GEMV_NT_ROWS_M1_BF16", 4),), (("GEMV_NT_ROWS_M1_BF16", 2), ("GEMV_NT_MIN_BLOCKS_M1_BF16", 3)),
                  (("GEMV_NT_ROWS_M1_BF16", 2), ("GEMV_NT_MIN_BLOCKS_M1_BF16", 4)), (("GEMV_NT_ROWS_M1_BF16", 8),)])]
for kind, values in SWEEPS:
    for rnd in range(2):
        for v in values:
            setter(kind, v)()
            print(f"round {rnd} gpt2 bf16 b1 {kind} {v}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
setter("none", None)()
