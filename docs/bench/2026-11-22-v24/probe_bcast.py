"""After pdl_wait, how long until one warp of each of G blocks has a 3 KB vector that the kernel before
wrote (cp.async into shared memory, as gemv_ln_rows stages x)? R copies of the vector (block b reads
copy b % R) against one; the clock64 from the wait to the data landing, per block, 40 launches."""
import sys
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import cupy as cp, numpy as np  # noqa: E401
from gpt2block.backends import cuda_launch, cuda_modules
from gpt2block.kernel_source import read_source

SRC = read_source("common.cuh") + read_source("mma.cuh") + r'''
extern "C" __global__ void producer(float* x, int n, int R, int stride, float seed) {
    pdl_trigger();
    pdl_wait();
    const int per = (n + gridDim.x - 1) / gridDim.x;
    for (int i = blockIdx.x * per + threadIdx.x; i < min(n, (blockIdx.x + 1) * per); i += blockDim.x)
        for (int r = 0; r < R; ++r) x[(long long)r * stride + i] = seed + i;
}
extern "C" __global__ void __launch_bounds__(256) consumer(const float* x, int n, int R, int stride, long long* out, int mode) {
    __shared__ float4 xs[1024];
    pdl_trigger();
    pdl_wait();
    const long long t0 = clock64();
    const float4* src = reinterpret_cast<const float4*>(x + (long long)(blockIdx.x % R) * stride);
    const int n4 = n >> 2, lane = threadIdx.x & 31;
    float acc = 0.f;
    if (mode == 0) {          // warp 0: cp.async, as gemv_ln_rows
        if (threadIdx.x < 32) {
            for (int k = lane; k < n4; k += 32) cp_async16(xs + k, src + k, 16);
            cp_async_commit();
            cp_async_wait<0>();
            acc = xs[lane].x;
        }
    } else if (mode == 1) {   // warp 0: plain loads into registers
        if (threadIdx.x < 32) {
            for (int k = lane; k < n4; k += 32) { float4 v = src[k]; acc += v.x + v.w; }
        }
    } else {                  // every warp its share (8 warps)
        for (int k = threadIdx.x; k < n4; k += blockDim.x) cp_async16(xs + k, src + k, 16);
        cp_async_commit();
        cp_async_wait<0>();
        acc = xs[threadIdx.x % n4].x;
    }
    if (acc == 12345.678f) out[gridDim.x] = 1;  // a use of the data before the clock
    const long long t1 = clock64();
    if (threadIdx.x == 0) out[blockIdx.x] = t1 - t0;
}
'''

def main():
    mod = cp.RawModule(code=SRC, options=cuda_modules.NVRTC_OPTIONS)
    prod, cons = mod.get_function("producer"), mod.get_function("consumer")
    s = cp.cuda.Stream(non_blocking=True)
    stride = 1 << 14
    x = cp.zeros(16 * stride, cp.float32)
    out = cp.zeros(1024, cp.int64)
    print(f"{'n':>5} {'G':>4} {'R':>3} {'mode':>9}: cycles wait -> data landed, over blocks and 40 launches: p10 p50 p90 max (us at 1.98 GHz: p50)")
    for n in (768, 3072):
        for G in (48, 144, 192, 264):
            for R in (1, 2, 4, 8, 16):
                for mode, mname in ((0, "cp.async"), (1, "ld"), (2, "all warps")):
                    if mode == 1 and n == 3072:
                        continue
                    res = []
                    with s:
                        for it in range(42):
                            cuda_launch.launch_programmatic(prod.kernel.ptr, "producer", (192,), (128,),
                                                            (x, cp.int32(n), cp.int32(R), cp.int32(stride), cp.float32(it)), 0, s.ptr)
                            cuda_launch.launch_programmatic(cons.kernel.ptr, "consumer", (G,), (256,),
                                                            (x, cp.int32(n), cp.int32(R), cp.int32(stride), out, cp.int32(mode)), 0, s.ptr)
                            if it >= 2:
                                res.append(out[:G].get())
                    s.synchronize()
                    r = np.concatenate(res)
                    p = np.percentile(r, [10, 50, 90, 100])
                    print(f"{n:>5} {G:>4} {R:>3} {mname:>9}: {p[0]:7.0f} {p[1]:7.0f} {p[2]:7.0f} {p[3]:7.0f}   ({p[1] / 1980:.2f} us)", flush=True)
main()
