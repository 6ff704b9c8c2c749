"""The cluster decode kernel's host side without a GPU (gpt2block/backends/cuda/decode_paths.py): CuPy, the
kernel build and the driver's cluster count are stood in for (NumPy arrays, a recording launch), so
that what DecodeClusters decides and passes can be checked: it packs the weights only where the kernel
runs (compute capability 9.0, enough shared memory, every cluster resident), and its launch passes the
kernel's parameters in the order and types decode_cluster.cu declares them."""

import re
import sys
import types

import numpy as np
import pytest

from gpt2block.backends.cuda import decode_paths

from gpt2block.backends.cuda import driver
from gpt2block.config import GPT2Config
from gpt2block.kernel_source import kernels_dir
from gpt2block.layout import block_layout


class _Array(np.ndarray):
    """A NumPy array with CuPy's ``.data.ptr`` (what driver.pack_args reads of a device array)."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


def _fake_cupy(capability="90", smem=232448):
    cp = types.ModuleType("cupy")
    for name in ("float32", "uint32", "int32"):
        setattr(cp, name, getattr(np, name))
    wrap = lambda f: lambda *a, **k: np.asarray(f(*a, **k)).view(_Array)  # noqa: E731
    cp.empty, cp.zeros, cp.stack, cp.concatenate = (wrap(f) for f in (np.empty, np.zeros, np.stack, np.concatenate))
    device = types.SimpleNamespace(compute_capability=capability,
                                   attributes={"MaxSharedMemoryPerBlockOptin": smem})
    cp.cuda = types.SimpleNamespace(Device=lambda *a: device)
    return cp


@pytest.fixture
def host(monkeypatch):
    """Installs the stand-ins; returns (set_device(capability, smem, clusters), launches)."""
    launches = []
    state = {"clusters": 15}
    modules = types.ModuleType("gpt2block.backends.cuda.modules")
    modules.kernel = lambda name, fn, defines=(): types.SimpleNamespace(
        name=fn, kernel=types.SimpleNamespace(ptr=1), max_dynamic_shared_size_bytes=0)
    modules.launch = lambda k, grid, block, args, smem, stream=None, programmatic=False: launches.append(
        (k.name, grid, block, args, smem, programmatic))
    monkeypatch.setitem(sys.modules, "gpt2block.backends.cuda.modules", modules)
    monkeypatch.setattr(driver, "max_active_clusters", lambda *a: state["clusters"])

    def set_device(capability="90", smem=232448, clusters=15):
        monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(capability, smem))
        state["clusters"] = clusters

    set_device()
    return set_device, launches


def _model(d=768, n_layer=2, bf16=True):
    c = GPT2Config(n_layer=n_layer, n_embd=d, n_head=d // 64, vocab_size=64)
    lay = block_layout(d)
    blocks = np.random.default_rng(0).standard_normal((n_layer, lay.numel)).astype(np.float32)
    views = [lay.views(b) for b in blocks]
    dt = np.uint16 if bf16 else np.float32
    mats = [{k: np.ascontiguousarray(v[k].T).astype(dt) for k in ("w_qkv", "w_attn", "w_fc", "w_proj")}
            for v in views]
    return views, mats, c


@pytest.mark.parametrize("device, shape, want", [
    ({}, {}, True),
    ({"capability": "80"}, {}, False), ({"capability": "100"}, {}, False), ({"capability": "120"}, {}, False),
    ({"smem": 160 * 1024}, {}, False), ({"clusters": 11}, {}, False), ({"clusters": 12}, {}, True),
    ({}, {"d": 1024}, False), ({}, {"bf16": False}, False),
])
def test_packs_only_where_the_kernel_runs(host, device, shape, want):
    set_device, _ = host
    set_device(**device)
    dc = decode_paths.DecodeClusters(*_model(**shape))
    assert dc.fits() == want
    assert hasattr(dc, "wpk") == want, "the packed copy (170 MB at gpt2) must be made exactly where it is used"
    if want:
        assert dc.wpk.shape == (2, 12, decode_paths.CLUSTER, decode_paths.block_share(768))
        assert dc.vecs.shape == (2, 6, 768) and dc.bqf.shape == (2, 7 * 768)


def _kernel_params():
    """decode_cluster_bf16's parameters as the .cu declares them: 'ptr', 'int', 'long long' or 'float'."""
    text = (kernels_dir() / "decode_cluster.cu").read_text()
    sig = re.search(r"decode_cluster_bf16\(([^)]*)\)\s*\{", text).group(1)
    kinds = []
    for p in sig.split(","):
        p = " ".join(p.split())
        kinds.append("ptr" if "*" in p else "long long" if "long long" in p else p.rsplit(" ", 1)[0])
    return kinds


def test_launch_passes_the_kernels_parameters(host):
    _, launches = host
    views, mats, c = _model()
    dc = decode_paths.DecodeClusters(views, mats, c)
    x = np.zeros((1, 768), np.float32).view(_Array)
    kv = np.zeros((1, 2, 2, c.n_positions, 768), np.float32).view(_Array)
    ints = [np.zeros(1, np.int32).view(_Array) for _ in range(3)]
    dc.launch(x, kv, *ints)
    (name, grid, block, args, smem, programmatic), = launches
    assert (name, grid, block, smem, programmatic) == ("decode_cluster_bf16", (96, 1, 1), (256, 1, 1),
                                                       decode_paths.smem_bytes(), True)
    want = {"ptr": None, "int": np.int32, "long long": np.int64, "float": np.float32}
    params = _kernel_params()
    assert len(args) == len(params) == 16
    for i, (a, kind) in enumerate(zip(args, params)):
        if want[kind] is None:
            assert hasattr(a, "data"), f"argument {i} should be a device array"
        else:
            assert isinstance(a, want[kind]), f"argument {i} should be {kind}, got {type(a).__name__}"
    driver.pack_args(args)  # every argument is one the driver launch takes


@pytest.mark.parametrize("bad", ["x_shape", "x_dtype", "kv_shape", "kv_dtype", "pos_dtype", "len_shape"])
def test_launch_refuses_bad_arguments(host, bad):
    views, mats, c = _model()
    dc = decode_paths.DecodeClusters(views, mats, c)
    x = np.zeros((2, 768) if bad == "x_shape" else (1, 768), np.float64 if bad == "x_dtype" else np.float32)
    kv = np.zeros((1, 2, 2, c.n_positions, 512 if bad == "kv_shape" else 768),
                  np.float16 if bad == "kv_dtype" else np.float32)
    seq = np.zeros(1, np.int32)
    pos = np.zeros(1, np.int64 if bad == "pos_dtype" else np.int32)
    lengths = np.zeros(2 if bad == "len_shape" else 1, np.int32)
    with pytest.raises(ValueError, match=r"x must|kv must|pos must|lengths must"):
        dc.launch(x.view(_Array), kv.view(_Array), seq.view(_Array), pos.view(_Array), lengths.view(_Array))


def test_launch_refuses_where_the_kernel_does_not_run(host):
    set_device, launches = host
    set_device(capability="89")
    views, mats, c = _model()
    dc = decode_paths.DecodeClusters(views, mats, c)
    with pytest.raises(ValueError, match="does not run"):
        dc.launch(None, None, None, None, None)
    assert not launches
