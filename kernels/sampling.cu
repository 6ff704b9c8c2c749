// sampling.cu: on-device support for choosing the next token.
//
// argmax_rows: out[r] = the first index of the largest value of logits[r, :] (np.argmax's
// tie rule). Greedy decoding then copies B ints to the host instead of B x vocab floats.
// NaN logits: a NaN never wins (comparisons with NaN are false).
//
// Launch: grid = rows, block = ARGMAX_THREADS (1024), no dynamic shared memory.
#include "common.cuh"

#define NEG_INF_F32 __int_as_float(0xff800000)  // -inf without host math headers (NVRTC)

#ifndef ARGMAX_THREADS
#define ARGMAX_THREADS 1024
#endif
#define ARGMAX_UNROLL 8  // loads in flight per thread

// (value, index) pair that wins: larger value, or the same value at a smaller index.
__device__ __forceinline__ bool argmax_better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS) argmax_rows_f32(
    const float* __restrict__ logits,  // [rows, V], row stride ld
    int* __restrict__ out,             // [rows]
    int V, int ld) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const float* row = logits + (long long)blockIdx.x * ld;
    float bv = NEG_INF_F32;
    int bi = 0x7fffffff;
    // ARGMAX_UNROLL independent loads in flight per thread, then their comparisons in index order
    for (int i0 = threadIdx.x; i0 < V; i0 += ARGMAX_UNROLL * blockDim.x) {
        float v[ARGMAX_UNROLL];
#pragma unroll
        for (int u = 0; u < ARGMAX_UNROLL; ++u) {
            const int i = i0 + u * blockDim.x;
            v[u] = i < V ? __ldg(row + i) : NEG_INF_F32;
        }
#pragma unroll
        for (int u = 0; u < ARGMAX_UNROLL; ++u) {
            const int i = i0 + u * blockDim.x;
            if (i < V && argmax_better(v[u], i, bv, bi)) { bv = v[u]; bi = i; }
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (argmax_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x >> 5;
        bv = lane < nw ? sv[lane] : NEG_INF_F32;
        bi = lane < nw ? si[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (argmax_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
        // all logits NaN: report index 0 rather than an out-of-range sentinel
        if (lane == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
    }
}
