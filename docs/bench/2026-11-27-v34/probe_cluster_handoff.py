"""Version 34 probe: what a handoff of a 768-float row costs inside a thread block cluster, through distributed
shared memory and one cluster barrier, against version 32's kernel boundary under programmatic launch (1.47 us
for a kernel that reads the row the kernel before wrote, sums it and writes its share: probe_pdl_floor.py).

Each phase, every block of a cluster (256 threads) sums the row it holds in shared memory (a warp sum, then the
block's eight in order: the LayerNorm GEMVs' statistics), then writes its 768 / C elements of the next row,
each from the row and the sum, into every block of the cluster (st.shared::cluster), and the cluster meets at
barrier.cluster (arrive.release, wait.acquire). The time of a phase is (t(N + 1 phases) - t(1 phase)) / N, the
medians of 7 launches between CUDA events. Grids of one cluster and of as many as fill the GPU (clusters of C
at one block a SM), C = 2, 4, 8. The rows of every block are checked against the same recurrence in NumPy."""
import cupy as cp
import numpy as np

SRC = r"""
#define D 768
extern "C" __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(256)
chain(int phases, float* out) {
    __shared__ __align__(16) float buf[2][D];
    __shared__ float part[8];
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    const int tid = threadIdx.x;
    for (int i = tid; i < D; i += 256) buf[0][i] = (float)(i % 7) * 0.25f;
    asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
    for (int p = 0; p < phases; ++p) {
        const float* src = buf[p & 1];
        float* dst = buf[(p + 1) & 1];
        float s = 0.f;
        for (int i = tid; i < D; i += 256) s += src[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if ((tid & 31) == 0) part[tid >> 5] = s;
        __syncthreads();
        float tot = 0.f;
#pragma unroll
        for (int w = 0; w < 8; ++w) tot += part[w];
        constexpr int SLICE = D / CL;
        for (int i = tid; i < SLICE; i += 256) {
            const int k = rank * SLICE + i;
            const float v = src[k] * 0.5f + tot * (1.0f / 1024.0f);
            const unsigned local = (unsigned)__cvta_generic_to_shared(dst + k);
#pragma unroll
            for (int q = 0; q < CL; ++q) {
                unsigned remote;
                asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(q));
                asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
            }
        }
        __syncthreads();  // part free again (every thread has read it)
        asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
    }
    for (int i = tid; i < D; i += 256) out[(size_t)blockIdx.x * D + i] = buf[phases & 1][i];
}
"""


def reference(phases):
    x = (np.arange(768) % 7).astype(np.float32) * np.float32(0.25)
    for _ in range(phases):
        x = x * np.float32(0.5) + np.float32(x.sum(dtype=np.float32)) * np.float32(1 / 1024)
    return x


def time_ms(k, grid, phases, out, reps=7):
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        k((grid,), (256,), (np.int32(phases), out))
        b.record()
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(ts))


sms = cp.cuda.Device().attributes["MultiProcessorCount"]
N = 2000
for cl in (2, 4, 8):
    k = cp.RawModule(code=SRC, options=("-std=c++17", f"-DCL={cl}")).get_function("chain")
    for clusters in (1, sms // cl):
        grid = cl * clusters
        out = cp.full((grid, 768), cp.nan, cp.float32)
        k((grid,), (256,), (np.int32(5), out))
        got = cp.asnumpy(out)
        ok = np.allclose(got, reference(5)[None], rtol=1e-5, atol=1e-5)
        t1, tn = time_ms(k, grid, 1, out), time_ms(k, grid, N + 1, out)
        print(f"cluster {cl}, {clusters} clusters ({grid} blocks): {(tn - t1) / N * 1e3:.3f} us a phase "
              f"(1 phase {t1 * 1e3:.1f} us, {N + 1} phases {tn:.3f} ms); rows as NumPy's: {ok}", flush=True)
