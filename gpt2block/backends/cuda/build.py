"""Every build parameter of kernels/*.cu: the one owner of each ``-D NAME=VALUE``.

A kernel carries no default for what is set here (``#ifndef NAME`` / ``#error "NAME is set by
gpt2block/backends/cuda/build.py"``), and the host code that plans a launch (grids, shared memory,
plans) reads the same values from here, so the two cannot drift apart (tests/test_build_params.py).
Each function returns one module's defines, ``((NAME, VALUE), ...)``, the key under which
modules.py builds and caches it. Plain Python, no CuPy: the CPU tests import it.

    attention(ranks)                      kernels/attention.cu (prefill, and decode with ranks blocks a cluster)
    attention_wgmma()                     kernels/attention_wgmma.cu
    decode_cluster()                      kernels/decode_cluster.cu
    gemm(tile, variant)                   kernels/gemm.cu
    gemm_wgmma(tile, variant)             kernels/gemm_wgmma.cu's GEMMs; gemm_wgmma_planes(variant) its planes
    gemv_kmajor()                         kernels/gemv.cu's k-major kernels
    gemv_nt(n, k, mp, bf16, ln)           kernels/gemv.cu's nt kernels of mp tokens for an [n, k] product
    lm_screen(n, k, bf16)                 kernels/lm_screen.cu for an LM head [n, k]
    layernorm(d, depth)                   kernels/layernorm.cu for rows of width d
    sampling()                            kernels/sampling.cu
    sampler()                             kernels/sampler.cu
    solve()                               kernels/solve.cu (the export: written at the top of solution.cu)
    MODULES                               each kernels/<name>.cu with the builds the product makes of it
"""

from __future__ import annotations

# ---- attention.cu / attention_wgmma.cu ---------------------------------------------------------
ATTN_LDS = 68  # shared row stride (floats) of a 64-wide prefill tile: 16-byte rows, no bank conflicts
ATTN_DEC_THREADS = 128  # the decode kernel's block
ATTN_VARLEN_FIELDS = 5  # ints per entry of the packed prefill's tile table (q_row0, len, past, row, qt)
ATTN_DEC_MAX_CLUSTER = 8  # the decode kernel's blocks (one cluster) per (row, head) on sm_90, at most
ATTN_WG_THREADS = 288  # attention_wgmma: two consumer warpgroups and the producer warp
ATTN_WG_TILE_FLOATS = 16384  # attention_wgmma: one key tile's K / V^T planes (64 KB)

# ---- decode_cluster.cu ----------------------------------------------------------------------------
DC_D = 768  # the width the kernel is built for (gpt2)
DC_C = 8  # blocks per cluster (one cluster per head)
DC_THREADS = 256
DC_PART = 68  # floats of an attention partial: acc[64], m, l (and padding)

# ---- gemm.cu / gemm_wgmma.cu -------------------------------------------------------------------------
GEMM_BK = 32  # k per shared-memory stage
GEMM_STAGES = 3  # cp.async pipeline depth
GEMM_VARIANTS = {"tf32": (("GEMM_WITH_TF32", 1), ("GEMM_WITH_TF32X3", 0)),
                 "tf32x3": (("GEMM_WITH_TF32", 0), ("GEMM_WITH_TF32X3", 1))}
GW_PLANES_N = 64  # W's columns per block of gemm_wg_split_planes_kn (32: slower, docs/PERFORMANCE.md version 17)
GW_PLANES_TILE = (2, 128, 4, 1)  # (GW_WG, GW_BN, GW_STAGES, GW_SPLITK) of the planes kernels' build (its GEMMs unused)

# ---- gemv.cu -----------------------------------------------------------------------------------------
GEMV_MAX_M = 8  # tokens the GEMVs take at most (decode batches beyond run the GEMMs)
GEMV_THREADS = 256  # the k-major kernels' block
GEMV_TPR = 8  # threads across one weight row's strip
GEMV_RPP = GEMV_THREADS // GEMV_TPR  # weight rows per pass (derived in the kernel alike)
GEMV_UNROLL = 4  # 16-byte weight loads in flight per thread
GEMV_NT_THREADS = 256  # the nt kernels' block
# GemvNt: weight rows per warp at a time (at 8 tokens by weight type, the float32 LM head apart) and the
# resident blocks per SM the registers must allow (3; the kernel takes 2 at 4 rows); more rows loop in a warp
GEMV_NT = {"GEMV_NT_ROWS": 2, "GEMV_NT_ROWS_M8_F32": 2, "GEMV_NT_ROWS_M8_LM": 4, "GEMV_NT_ROWS_M8_BF16": 4,
           "GEMV_NT_MIN_BLOCKS": 3}
# One float32 token: resident blocks per SM (GEMV_NT_MIN_BLOCKS_M1_F32) by the product's width min(N, K), the
# model's n_embd for every decode product; 3 where not listed. Measured best per GPT-2 size, not monotonic in
# the width (docs/PERFORMANCE.md version 18, b1 tok/s at 3 / 4: gpt2 4,426 / 4,291, medium 1,565 / 1,697,
# large 894 / 854, xl 424 / 473). (At 4 the LayerNorm builds spill 4-8 bytes under nvcc 13.0; measured
# faster all the same.)
GEMV_NT_MIN_BLOCKS_M1_F32 = 3
GEMV_NT_M1_F32_BLOCKS_BY_WIDTH = {1024: 4, 1600: 4}
# One bf16 token likewise: rows per warp and blocks per SM by width (version 18, b1 tok/s: gpt2 5,280 -> 5,460
# with 4 rows per warp (2 blocks per SM), medium 2,167 -> 2,369 with 4 blocks per SM; large best as it was);
# elsewhere GEMV_NT_ROWS and GEMV_NT_MIN_BLOCKS.
GEMV_NT_M1_BF16_BY_WIDTH = {768: {"GEMV_NT_ROWS_M1_BF16": 4}, 1024: {"GEMV_NT_MIN_BLOCKS_M1_BF16": 4}}
GEMV_NT_TOKENS = (1, 2, 4, 8)  # the nt builds' token counts (GEMV_BUILD_MP; 0 is the k-major build)

# ---- lm_screen.cu --------------------------------------------------------------------------------------
LM_SCREEN_MAX_J = 8  # the screen's builds: K <= 256 LM_SCREEN_J, J up to 8
LM_SCREEN_MAX_K = 256 * LM_SCREEN_MAX_J
# Table rows a warp loads at once, for J <= 4 and wider (8 rows' loads spill from J = 5 on); resident blocks
# per SM (docs/PERFORMANCE.md version 28: 8 rows bf16 6,415-6,421 tok/s against 4 rows' 6,204-6,213 at gpt2)
LM_SCREEN_ROWS = 8
LM_SCREEN_ROWS_WIDE = 4
LM_SCREEN_MIN_BLOCKS = 2

# ---- layernorm.cu ---------------------------------------------------------------------------------------
LN_WARPS = 4  # warps per block (one row each at a time)
LN_MAX_VEC = 13  # float4 per lane at most: D <= 128 LN_MAX_VEC = 1664 (gpt2-xl: 1600)
LN_MAX_D = 128 * LN_MAX_VEC
LN_DEPTH3_VEC = (4, 5, 6)  # float4 per lane (D 385 to 768) at which a warp may hold three rows (LN_DEPTH 3)

# ---- sampling.cu ---------------------------------------------------------------------------------------
ARGMAX_THREADS = 256
ARGMAX_UNROLL = 8  # loads in flight per thread
ARGMAX_CHUNK = ARGMAX_UNROLL * ARGMAX_THREADS  # logits per block

# ---- sampler.cu ----------------------------------------------------------------------------------------
SAMPLER_THREADS = 1024  # one block per row (its dynamic shared memory holds the row's V floats)
SAMPLER_CANDIDATES = 4096  # top-k's candidate keys in static shared memory (16 KB; sampler.py's shared memory sum)
SAMPLER_MIN_GROUPS = 64  # the fewest thread groups whose largest keys bound top-k's candidates (k <= 64: 64 groups)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def attention(ranks: int = ATTN_DEC_MAX_CLUSTER) -> tuple:
    """attention.cu: the prefill kernels and attention_decode_f32 with ``ranks`` blocks (one cluster) per
    (row, head); the prefill launches take the module of the most ranks."""
    if not 1 <= ranks <= ATTN_DEC_MAX_CLUSTER:
        raise ValueError(f"attention_decode runs 1 to {ATTN_DEC_MAX_CLUSTER} blocks per (row, head); got {ranks}")
    return (("ATTN_LDS", ATTN_LDS), ("ATTN_DEC_THREADS", ATTN_DEC_THREADS), ("ATTN_DEC_CLUSTER", ranks),
            ("ATTN_VARLEN_FIELDS", ATTN_VARLEN_FIELDS))


def attention_wgmma() -> tuple:
    return (("ATTN_WG_TILE_FLOATS", ATTN_WG_TILE_FLOATS), ("ATTN_WG_THREADS", ATTN_WG_THREADS))


def decode_cluster() -> tuple:
    return (("DC_D", DC_D), ("DC_C", DC_C), ("DC_THREADS", DC_THREADS), ("DC_PART", DC_PART))


def _variant(variant: str) -> tuple:
    if variant not in GEMM_VARIANTS:
        raise ValueError(f"GEMM variant must be one of {', '.join(GEMM_VARIANTS)}; got {variant!r}")
    return GEMM_VARIANTS[variant]


def gemm(tile, variant: str) -> tuple:
    """gemm.cu for ``tile`` (bm, bn, warps_m, warps_n: linear.Tile) and one variant."""
    return ((("GEMM_BM", tile.bm), ("GEMM_BN", tile.bn), ("GEMM_WARPS_M", tile.warps_m),
             ("GEMM_WARPS_N", tile.warps_n), ("GEMM_BK", GEMM_BK), ("GEMM_STAGES", GEMM_STAGES))
            + _variant(variant))


def _gw(wg: int, bn: int, stages: int, splitk: int, variant: str) -> tuple:
    if GW_PLANES_N not in (32, 64, 96, 128):
        raise ValueError(f"GW_PLANES_N must be 32, 64, 96 or 128 (the planes kernel's tile); got {GW_PLANES_N}")
    return ((("GW_WG", wg), ("GW_BN", bn), ("GW_STAGES", stages), ("GW_SPLITK", splitk),
             ("GW_PLANES_N", GW_PLANES_N)) + _variant(variant))


GW_SMEM_PER_BLOCK = 232448  # the largest dynamic shared memory one block may opt into on sm_90
GW_MAX_STAGES = 8


def gw_planes(variant: str) -> int:
    """Weight planes a variant reads: tf32 hi and lo (tf32x3), or hi alone (tf32)."""
    _variant(variant)
    return 2 if variant == "tf32x3" else 1


def gw_smem_bytes(variant: str, wg: int, bn: int, stages: int) -> int:
    """GW_SMEM_BYTES of kernels/gemm_wgmma.cu: the ring's stages (A's 64 wg rows, the planes' bn rows, 128
    bytes each), the barriers and 1024 bytes of alignment."""
    return stages * (64 * wg + gw_planes(variant) * bn) * 128 + 16 * stages + 1024


def gw_stages(variant: str, wg: int, bn: int) -> int:
    """The most ring stages (at most GW_MAX_STAGES) that fit one block's shared memory."""
    s = GW_MAX_STAGES
    while s > 2 and gw_smem_bytes(variant, wg, bn, s) > GW_SMEM_PER_BLOCK:
        s -= 1
    return s


def gemm_wgmma(tile, variant: str) -> tuple:
    """gemm_wgmma.cu's GEMMs for ``tile`` (wg, bn, splitk: linear.WgTile), with the most ring stages
    that fit (gw_stages)."""
    return _gw(tile.wg, tile.bn, gw_stages(variant, tile.wg, tile.bn), tile.splitk, variant)


def gemm_wgmma_planes(variant: str) -> tuple:
    """gemm_wgmma.cu's weight-plane kernels (gemm_wg_split_planes_*) of one variant."""
    return _gw(*GW_PLANES_TILE, variant)


def _gemv_common(mp: int) -> tuple:
    return (("GEMV_BUILD_MP", mp), ("GEMV_MAX_M", GEMV_MAX_M), ("GEMV_THREADS", GEMV_THREADS),
            ("GEMV_TPR", GEMV_TPR), ("GEMV_UNROLL", GEMV_UNROLL), ("GEMV_NT_THREADS", GEMV_NT_THREADS))


def gemv_nt_settings(n: int, k: int, mp: int, bf16: bool, ln: bool = False) -> dict:
    """The nt kernels' settings for an [n, k] product at mp tokens (``ln``: with its LayerNorm): GEMV_NT, the
    one-token knobs by width, and GEMV_LN_K: for one token the build's LayerNorm is made for its K (no loop
    over the row's pieces left on its path), the launch's K where it has a LayerNorm, else the product's width
    min(N, K), so that a model's one-token products (n_embd wide, every LayerNorm of K = n_embd) share one
    build; 0 (any K) for more tokens."""
    if mp not in GEMV_NT_TOKENS:
        raise ValueError(f"the nt GEMVs are built for {GEMV_NT_TOKENS} tokens; got {mp}")
    d = dict(GEMV_NT)
    d["GEMV_NT_ROWS_M1_BF16"] = d["GEMV_NT_ROWS"]
    d["GEMV_NT_MIN_BLOCKS_M1_BF16"] = d["GEMV_NT_MIN_BLOCKS"]
    d["GEMV_NT_MIN_BLOCKS_M1_F32"] = GEMV_NT_MIN_BLOCKS_M1_F32
    d["GEMV_LN_K"] = 0
    if mp == 1:
        width = min(n, k)
        if bf16:
            d.update(GEMV_NT_M1_BF16_BY_WIDTH.get(width, {}))
        elif width in GEMV_NT_M1_F32_BLOCKS_BY_WIDTH:
            d["GEMV_NT_MIN_BLOCKS_M1_F32"] = GEMV_NT_M1_F32_BLOCKS_BY_WIDTH[width]
        d["GEMV_LN_K"] = k if ln else width
    return d


def gemv_nt(n: int, k: int, mp: int, bf16: bool, ln: bool = False) -> tuple:
    """gemv.cu's nt kernels of mp tokens (1, 2, 4 or 8) for an [n, k] product (gemv_nt_settings)."""
    return _gemv_common(mp) + tuple(gemv_nt_settings(n, k, mp, bf16, ln).items())


def gemv_nt_build(mp: int, bf16: bool, lm_head: bool, settings: dict) -> tuple[int, int]:
    """(rows per warp, resident blocks per SM) of an nt build with ``settings`` (gemv_nt_settings), as
    GemvNt in kernels/gemv.cu works them out."""
    d = settings
    key = ("GEMV_NT_ROWS_M1_BF16" if mp == 1 and bf16 else "GEMV_NT_ROWS" if mp < 8 else "GEMV_NT_ROWS_M8_BF16"
           if bf16 else "GEMV_NT_ROWS_M8_LM" if lm_head else "GEMV_NT_ROWS_M8_F32")
    rows = d[key]
    per_sm = (2 if rows >= 4 else d["GEMV_NT_MIN_BLOCKS_M1_F32"] if mp == 1 and not bf16
              else d["GEMV_NT_MIN_BLOCKS_M1_BF16"] if mp == 1 else d["GEMV_NT_MIN_BLOCKS"])
    return rows, per_sm


def gemv_kmajor() -> tuple:
    """gemv.cu's k-major kernels (gemv_{f32,bf16}_*): GEMV_BUILD_MP 0 and the nt settings' defaults (unused)."""
    return _gemv_common(0) + tuple(gemv_nt_settings(0, 0, 8, False).items())


def lm_screen_j(k: int) -> int:
    """The screen build's J for heads of width K: ceil(K / 256)."""
    if not 0 < k <= LM_SCREEN_MAX_K:
        raise ValueError(f"the LM head screen takes K up to {LM_SCREEN_MAX_K}; got {k}")
    return _cdiv(k, 256)


def lm_screen(n: int, k: int, bf16: bool, j: int | None = None) -> tuple:
    """lm_screen.cu for an LM head [n, k]: the full head's one-token build (its LayerNorm and lanes), its J
    (default lm_screen_j(k); a wider J is correct, slower) and the screen's own settings. One build a model:
    its table, screen and rescore."""
    j = lm_screen_j(k) if j is None else j
    if not 256 * j >= k or not 1 <= j <= LM_SCREEN_MAX_J:
        raise ValueError(f"LM_SCREEN_J = {j} takes K up to {256 * j} (J 1 to {LM_SCREEN_MAX_J}); the head has K = {k}")
    return gemv_nt(n, k, 1, bf16, ln=True) + (
        ("LM_SCREEN_J", j), ("LM_SCREEN_ROWS", LM_SCREEN_ROWS), ("LM_SCREEN_ROWS_WIDE", LM_SCREEN_ROWS_WIDE),
        ("LM_SCREEN_MIN_BLOCKS", LM_SCREEN_MIN_BLOCKS))


def lm_screen_fits(n: int, k: int) -> bool:
    """Whether lm_screen.cu takes an LM head of N rows of width K (K a multiple of 8 up to LM_SCREEN_MAX_K,
    N K below 2^31)."""
    return 0 < k <= LM_SCREEN_MAX_K and k % 8 == 0 and 0 < n < 2**31 // max(k, 1)


def lm_screen_rows(j: int) -> int:
    """Table rows a warp of the screen takes at once in a build of J (LM_SCREEN_ROWS_J in the kernel)."""
    return LM_SCREEN_ROWS if j <= 4 else LM_SCREEN_ROWS_WIDE


def layernorm(d: int, depth: int = 2) -> tuple:
    """layernorm.cu for rows of width d (LN_MAX_VEC = ceil(d / 128)), holding ``depth`` rows a warp (2; 3 only
    at LN_DEPTH3_VEC)."""
    if not 0 < d <= LN_MAX_D:
        raise ValueError(f"layernorm runs D up to {LN_MAX_D}; got {d}")
    vec = _cdiv(d, 128)
    if depth not in (2, 3) or (depth == 3 and vec not in LN_DEPTH3_VEC):
        raise ValueError(f"LN_DEPTH 3 is built for {LN_DEPTH3_VEC} float4 a lane only, else 2; got {depth} at D = {d}")
    return (("LN_WARPS", LN_WARPS), ("LN_MAX_VEC", vec), ("LN_DEPTH", depth))


def sampling() -> tuple:
    return (("ARGMAX_THREADS", ARGMAX_THREADS), ("ARGMAX_UNROLL", ARGMAX_UNROLL))


def sampler() -> tuple:
    return (("SAMPLER_THREADS", SAMPLER_THREADS), ("SAMPLER_CANDIDATES", SAMPLER_CANDIDATES),
            ("SAMPLER_MIN_GROUPS", SAMPLER_MIN_GROUPS))


# gemm.cu's tiles (cuda/linear.TILES): (bm, bn, warps_m, warps_n, per_sm,
# speed): blocks resident per SM (registers of the tf32x3 kernels on sm_90: 143-161, 109-138, 112-142) and
# relative throughput per SM (a bigger warp tile reuses operands more)
GEMM_TILES = ((128, 128, 2, 4, 1, 1.0),  # warp tile 64 x 32
              (128, 64, 4, 2, 1, 0.9),  # warp tile 32 x 32
              (64, 64, 2, 2, 3, 0.8))  # warp tile 32 x 32, 128 threads
# gemm_mma_f16.cuh's tiles per export precision (the export's mma.sync path): (bm, bn, warps_m, warps_n,
# stages, speed): relative throughput per SM of a wave (the blocks an SM holds come from the occupancy
# calculator at run time), from the H200's fastest tiles on the block's four products at seq_len 1024
# (dev/tune_gemm_mma.py variant 03; docs/PERFORMANCE.md, version 41)
F16_TILE_TABLE = {
    "fp32": ((64, 128, 1, 4, 4, 1.0), (64, 64, 2, 2, 4, 0.85)),
    "tf32": ((64, 128, 2, 2, 4, 1.0), (128, 64, 2, 2, 4, 0.95)),
}
F16_SPLITK_MAX = 8  # the export's split K on the mma.sync path, for GEMMs of less than a wave (solve.cu: pick_f16)
# gemm_wgmma.cu's tiles per variant (cuda/linear.WG_TILES): (wg, bn, speed,
# splitk); the measurements behind the speeds: cuda/linear.py, above WG_TILES
WG_TILE_TABLE = {
    "tf32x3": ((2, 128, 1.0, 1), (2, 64, 0.79, 1), (2, 48, 0.73, 1), (1, 128, 0.75, 1), (1, 64, 0.66, 1)),
    "tf32": ((2, 192, 1.08, 1), (2, 128, 1.0, 1), (2, 64, 0.80, 1), (2, 48, 0.64, 1), (1, 128, 0.81, 1),
             (1, 64, 0.62, 1), (2, 192, 1.08, 3)),
}
SOLVE_PRECISIONS = {"fp32": "tf32x3", "tf32": "tf32"}  # export precision -> GEMM variant (SOLVE_TF32X3, GEMM_WITH_*)


def solve(precision: str = "fp32") -> tuple:
    """kernels/solve.cu, the one-file export (gpt2block export-cuda) of one precision: the GEMM variant
    (SOLVE_TF32X3 1: fp32-level accuracy, three fp16 products on the mma.sync path; 0: TF32-level, one),
    gemm_mma_f16.cuh's tiles for the mma.sync path (SOLVE_F16_TILES: SOLVE_F16_TILE(index, bm, bn, warps_m,
    warps_n, stages, speed) each) and its most K splits, attention.cu (for the sm_75 path's FFMA kernel;
    clusters of one) and LayerNorm (768 wide)."""
    if precision not in SOLVE_PRECISIONS:
        raise ValueError(f"the export's precision is one of {', '.join(SOLVE_PRECISIONS)}; got {precision!r}")
    variant = SOLVE_PRECISIONS[precision]
    # (no spaces: one shell word on an nvcc command line, where nvcc_define escapes the commas)
    f16 = "".join(f"SOLVE_F16_TILE({i},{bm},{bn},{wm},{wn},{stages},{speed}f)"
                  for i, (bm, bn, wm, wn, stages, speed) in enumerate(F16_TILE_TABLE[precision]))
    return ((("SOLVE_TF32X3", int(variant == "tf32x3")), ("SOLVE_F16_TILES", f16),
             ("SOLVE_F16_SPLITK_MAX", F16_SPLITK_MAX))
            + _variant(variant) + attention(1) + layernorm(768))


class _Tile:  # the product's GEMM tiles, without importing linear (CuPy) here
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _modules() -> dict:
    """kernels/<name>.cu -> a few builds the product makes of it (each GEMM tile once, both variants, every
    nt token count, a narrow and a wide screen...): what the compile tests build, each once."""
    gemm_tiles = [(_Tile(bm=128, bn=128, warps_m=2, warps_n=4), "tf32x3"), (_Tile(bm=128, bn=64, warps_m=4, warps_n=2),
                  "tf32"), (_Tile(bm=64, bn=64, warps_m=2, warps_n=2), "tf32x3")]
    wg_tiles = [(_Tile(wg=2, bn=128, splitk=1), "tf32x3"), (_Tile(wg=1, bn=64, splitk=1), "tf32x3"),
                (_Tile(wg=2, bn=192, splitk=3), "tf32")]
    builds = {
        "attention": [attention(), attention(1)],
        "attention_wgmma": [attention_wgmma()],
        "decode_cluster": [decode_cluster()],
        "embedding": [()],
        "kvcache": [()],
        "gemm": [gemm(t, v) for t, v in gemm_tiles],
        "gemm_wgmma": [gemm_wgmma(t, v) for t, v in wg_tiles] + [gemm_wgmma_planes(v) for v in GEMM_VARIANTS],
        "gemv": [gemv_kmajor()] + [gemv_nt(3 * d, d, mp, bf16, True) for d, mp, bf16 in
                                   ((768, 1, True), (1600, 1, False), (768, 2, True), (768, 8, False))],
        "layernorm": [layernorm(768, 3), layernorm(1600)],
        "lm_screen": [lm_screen(50257, 768, True), lm_screen(50257, 1600, False)],
        "sampling": [sampling()],
        "sampler": [sampler()],
        "solve": [solve(p) for p in SOLVE_PRECISIONS],
    }
    return {name: list(dict.fromkeys(b)) for name, b in builds.items()}  # each build once


MODULES = _modules()


def nvcc_flags(name: str, build: int = 0) -> str:
    """``-D`` flags of one of a module's product builds (MODULES[name][build]), for compiling a kernel
    by hand: ``nvcc -std=c++17 -arch=sm_90a -Ikernels -cubin $(python -m gpt2block.backends.cuda.build
    layernorm) kernels/layernorm.cu``."""
    if name not in MODULES:
        raise ValueError(f"no kernels/{name}.cu module; one of {', '.join(sorted(MODULES))}")
    return " ".join(nvcc_define(k, v) for k, v in MODULES[name][build])


def nvcc_define(name: str, value) -> str:
    """The nvcc option defining one build parameter: ``-DNAME=VALUE``, VALUE's commas escaped (nvcc reads
    an unescaped comma in an option's value as a list separator)."""
    return f"-D{name}={str(value).replace(',', chr(92) + ',')}"


if __name__ == "__main__":
    import sys

    print(nvcc_flags(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0))
