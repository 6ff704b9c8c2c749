"""The driver-call structures of programmatic dependent launch (backends/driver.py):
their layout must be cuda.h's, and arguments must pack as the kernels declare them. No GPU."""

import ctypes

import numpy as np
import pytest

from gpt2block.backends.cuda import driver


def test_structures_have_cuda_h_layout():
    # CUlaunchAttribute: id (4) + pad (4) + a 64-byte union; CUlaunchConfig: 7 uints, then
    # the stream at offset 32, the attribute pointer at 40, their count at 48, size 56
    assert ctypes.sizeof(driver.LaunchAttribute) == 72
    assert driver.LaunchAttribute.value.offset == 8
    assert ctypes.sizeof(driver.LaunchConfig) == 56
    assert driver.LaunchConfig.hStream.offset == 32
    assert driver.LaunchConfig.attrs.offset == 40
    assert driver.LaunchConfig.numAttrs.offset == 48


class _Dev:  # stands for a device array: only .data.ptr is read
    class data:
        ptr = 0x7F0012345600


def test_pack_args_types_and_values():
    values, params = driver.pack_args(
        (_Dev(), np.int32(-3), np.int64(1 << 40), np.uint64(0), np.float32(0.5)))
    assert [type(v) for v in values] == [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64,
                                         ctypes.c_float]
    assert values[0].value == 0x7F0012345600 and values[1].value == -3 and values[2].value == 1 << 40
    assert values[4].value == 0.5
    for v, p in zip(values, params):
        assert p == ctypes.addressof(v)


@pytest.mark.parametrize("bad", [3, 2.0, np.float64(1.0), np.int16(1), "x", None])
def test_pack_args_refuses_what_the_kernels_do_not_declare(bad):
    with pytest.raises(TypeError, match="kernel argument 1"):
        driver.pack_args((np.int32(1), bad))


def test_launch_pads_grid_and_block_to_three_dimensions(monkeypatch):
    """A (x,) or (x, y) grid / block is launched as (x, 1, 1) / (x, y, 1); the driver is faked."""
    seen = {}

    class FakeLib:
        def cuLaunchKernelEx(self, cfg, func, params, extra):
            c = cfg._obj
            seen["dims"] = (c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY, c.blockDimZ)
            seen["smem"], seen["n_attrs"] = c.sharedMemBytes, c.numAttrs
            seen["attr"] = (c.attrs[0].id, c.attrs[0].value[0])
            return 0

    monkeypatch.setattr(driver, "_lib", lambda: FakeLib())
    driver.launch_programmatic(0x1234, "k", (5, 2), (128,), (np.int32(1),), 640, 0)
    assert seen["dims"] == (5, 2, 1, 128, 1, 1)
    assert seen["smem"] == 640 and seen["n_attrs"] == 1
    assert seen["attr"] == (driver.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 1)


def test_launch_error_names_the_kernel(monkeypatch):
    class FakeLib:
        def cuLaunchKernelEx(self, *a):
            return 1  # CUDA_ERROR_INVALID_VALUE

        def cuGetErrorName(self, rc, out):
            out._obj.value = b"CUDA_ERROR_INVALID_VALUE"
            return 0

    monkeypatch.setattr(driver, "_lib", lambda: FakeLib())
    with pytest.raises(RuntimeError, match="my_kernel: cuLaunchKernelEx failed with CUDA_ERROR_INVALID_VALUE"):
        driver.launch_programmatic(0x1234, "my_kernel", (1,), (32,), (), 0, 0)


def test_max_active_clusters_asks_the_driver_with_the_launch_shape(monkeypatch):
    """cuOccupancyMaxActiveClusters gets the padded grid and block, the shared memory and no attributes;
    its count is returned, and an error code is raised with its name."""
    seen = {}

    class Occupancy:  # a driver entry point: argtypes / restype are set on it
        rc = 0

        def __call__(self, n, func, cfg):
            c = cfg._obj
            seen["dims"] = (c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY, c.blockDimZ)
            seen["smem"], seen["n_attrs"] = c.sharedMemBytes, c.numAttrs
            n._obj.value = 15
            return self.rc

    class FakeLib:
        cuOccupancyMaxActiveClusters = Occupancy()

        def cuGetErrorName(self, rc, out):
            out._obj.value = b"CUDA_ERROR_INVALID_CLUSTER_SIZE"
            return 0

    lib = FakeLib()
    monkeypatch.setattr(driver, "_lib", lambda: lib)
    assert driver.max_active_clusters(0x1234, (96,), (256,), 199216) == 15
    assert seen == {"dims": (96, 1, 1, 256, 1, 1), "smem": 199216, "n_attrs": 0}
    lib.cuOccupancyMaxActiveClusters.rc = 912
    with pytest.raises(RuntimeError, match="cuOccupancyMaxActiveClusters failed with CUDA_ERROR_INVALID_CLUSTER_SIZE"):
        driver.max_active_clusters(0x1234, (96,), (256,), 199216)
