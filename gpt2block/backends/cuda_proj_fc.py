"""One token's attention projection, residual add, ln_2 and FC + GELU in one kernel (kernels/proj_fc.cu):
the bf16 batch-1 decode step's third and fourth kernels as one.

    x1 = x + a @ Wo^T + bo;  f = gelu(LayerNorm(x1; g, b) @ Wf^T + bf)

The blocks form thread block clusters, each of which computes the whole projection and shares its rows
through distributed shared memory, so no kernel boundary stands between the projection and the FC
product's LayerNorm. A build exists per width in PROJ_FC_BY_WIDTH; it runs only on sm_90 and where the
device holds its whole grid at once (proj_fc_plan). The decode step uses it where it does
(cuda.PROJ_FC) and the two GEMVs otherwise.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from . import cuda_launch
from .cuda_linear import _check_array, _check_out, _check_shape, _check_weights
from .cuda_modules import kernel, launch

# n_embd -> (cluster size, warps per block, grid, Wo in shared memory): warp w of a block takes
# D / (cluster warps) rows of Wo and 4D / (grid warps) rows of Wf (powers of two; kernels/proj_fc.cu)
PROJ_FC_BY_WIDTH: dict = {768: (16, 12, 128, 1)}
_plans: dict = {}  # (device, d, build) -> the build where the device holds its grid, else None


def _build(d: int, cfg: tuple):
    cluster, warps, grid, wo_smem = cfg
    defines = (("PF_D", d), ("PF_CLUSTER", cluster), ("PF_WARPS", warps), ("PF_GRID", grid),
               ("PF_WO_SMEM", wo_smem))
    smem = 2 * d * d // cluster if wo_smem else 0
    return kernel("proj_fc", "proj_fc_bf16_m1", defines), smem


def proj_fc_plan(d: int):
    """The (cluster, warps, grid, wo_smem) build for width d, or None: no build for d, a device before
    sm_90 (no clusters), or one that cannot hold the whole grid at once (the driver's count of active
    clusters)."""
    cfg = PROJ_FC_BY_WIDTH.get(d)
    if cfg is None:
        return None
    dev = cp.cuda.Device().id
    key = (dev, d, cfg)
    if key not in _plans:
        plan = None
        if int(cp.cuda.Device(dev).compute_capability) >= 90:
            cluster, warps, grid, _ = cfg
            k, smem = _build(d, cfg)
            if smem > 48 * 1024:
                k.max_dynamic_shared_size_bytes = smem
            if cluster > 8:
                cuda_launch.allow_non_portable_clusters(k.kernel.ptr, k.name)
            held = cuda_launch.max_active_clusters(k.kernel.ptr, k.name, (grid,), (32 * warps,), smem)
            plan = cfg if held >= grid // cluster else None
        _plans[key] = plan
    return _plans[key]


def proj_fc(a, x, wo, bo, x1, ln, wf, bf, f, stream=None) -> None:
    """x1 = x + a @ wo^T + bo and f = gelu(LayerNorm(x1; g, b, eps) @ wf^T + bf) for one token: a, x,
    x1 float32 [1, D]; wo uint16 bf16 bits [D, D] and wf [4D, D] (one row per output, as the decode
    GEMVs read them); bo [D], bf [4D]; ``ln = (g, b, eps)``, g and b [D]; f float32 [1, 4D]. x1 and
    f are outputs, separate from every input. Launched as programmatic (it reads the weights and
    g, b before the kernels ahead finish; a and x after). Needs proj_fc_plan(D)."""
    for name, arr in (("a", a), ("x", x), ("x1", x1)):
        _check_array(arr, name, 2)
    d = a.shape[1]
    for name, arr in (("a", a), ("x", x), ("x1", x1)):
        _check_shape(arr, name, (1, d))
    _check_array(f, "f", 2)
    _check_shape(f, "f", (1, 4 * d))
    for name, arr, shape in (("wo", wo, (d, d)), ("wf", wf, (4 * d, d))):
        _check_weights(arr, name, "[N, K]")
        if arr.dtype != np.uint16:
            raise ValueError(f"{name} must be bf16 bits (uint16), got {arr.dtype}")
        _check_shape(arr, name, shape)
    g, b, eps = ln
    for name, arr, n in (("bo", bo, d), ("bf", bf, 4 * d), ("ln gain", g, d), ("ln bias", b, d)):
        _check_array(arr, name, 1)
        _check_shape(arr, name, (n,))
    for name, arr in (("a", a), ("x", x), ("x1", x1), ("f", f), ("ln gain", g), ("ln bias", b)):
        if arr.data.ptr % 16:
            raise ValueError(f"{name} must be 16-byte aligned; got address {arr.data.ptr:#x}")
    inputs = {"a": a, "x": x, "wo": wo, "bo": bo, "ln gain": g, "ln bias": b, "wf": wf, "bf": bf}
    _check_out(x1, "x1", inputs)
    _check_out(f, "f", {**inputs, "x1": x1})
    plan = proj_fc_plan(d)
    if plan is None:
        raise ValueError(f"proj_fc has no build for D = {d} on this device (needs sm_90, a width in "
                         f"PROJ_FC_BY_WIDTH {sorted(PROJ_FC_BY_WIDTH)} and room for the whole grid)")
    cluster, warps, grid, _ = plan
    k, smem = _build(d, plan)
    launch(k, (grid, 1, 1), (32 * warps, 1, 1), (a, x, wo, bo, x1, g, b, np.float32(eps), wf, bf, f), smem,
           stream, programmatic=True)
