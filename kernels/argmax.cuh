// argmax.cuh: the (value, index) rule of the greedy decode's argmax and its block reduction, shared
// by argmax_rows_f32 (sampling.cu) and the one-token LM head's own argmax (gemv.cu, gemv_*_nt_ln_m1).
// The first index of the largest value wins (np.argmax's tie rule); a NaN never wins (comparisons
// with NaN are false), and a row with no winner (all NaN) gives index 0.
#pragma once

#define NEG_INF_F32 __int_as_float(0xff800000)  // -inf without host math headers (NVRTC)
#define ARGMAX_NONE 0x7fffffff                  // index of "no value yet"

// (value, index) pair that wins: larger value, or the same value at a smaller index. A total order
// on the pairs (NaN values aside, which never win), so any order of reduction gives the same winner.
__device__ __forceinline__ bool argmax_better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

// The winner over the lanes xor-reachable by offsets below `width` (a power of two up to 32):
// every lane of each such group gets its group's winner.
__device__ __forceinline__ void argmax_lanes(float& bv, int& bi, int width) {
    for (int o = width >> 1; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (argmax_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
    }
}

// The winner over the block; thread 0 gets it. sv, si: __shared__ [32].
__device__ __forceinline__ void argmax_block(float& bv, int& bi, float* sv, int* si) {
    argmax_lanes(bv, bi, 32);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x >> 5;
        bv = lane < nw ? sv[lane] : NEG_INF_F32;
        bi = lane < nw ? si[lane] : ARGMAX_NONE;
        argmax_lanes(bv, bi, 32);
    }
    __syncthreads();  // sv, si free for a second call
}

// Row r's winner bi -> out[r] (all logits NaN: index 0 rather than an out-of-range sentinel), to
// host_out[r] too when given (mapped host memory), and when step is given (a decode step's ints
// [4, rows]: ids, seq, pos, lengths) the next greedy step's: ids[r] = the winner, pos[r] + 1,
// lengths[r] + 1 (seq unchanged).
__device__ __forceinline__ void argmax_write(int* out, int* step, int* host_out, int r, int rows, int bi) {
    const int id = bi == ARGMAX_NONE ? 0 : bi;
    out[r] = id;
    if (host_out != nullptr) host_out[r] = id;
    if (step != nullptr) {
        step[r] = id;
        step[2 * rows + r] += 1;
        step[3 * rows + r] += 1;
    }
}
