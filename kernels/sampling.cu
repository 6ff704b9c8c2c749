// sampling.cu: on-device support for choosing the next token.
//
// argmax_rows_f32: out[r] = the first index of the largest value of logits[r, :] (np.argmax's
// tie rule; argmax.cuh). Greedy decoding then copies B ints to the host instead of B x vocab floats.
// NaN logits: a NaN never wins (comparisons with NaN are false); an all-NaN row gives 0.
// (A batch-1 decode step takes its argmax in the LM head itself, gemv.cu's gemv_*_nt_ln_m1 with
// GemvArgmax; this kernel serves the other batch sizes.)
//
// A row is split into gridDim.x chunks of `chunk` values, one block each, so that the 50257
// logits of a decode row are read by many SMs at once. Each block writes its (value, index)
// to part_v / part_i [rows, gridDim.x]; the last block of the row to finish (an integer ticket
// on counters[row], which it puts back to zero) reduces the partials in chunk order.
//
// step (optional, NULL for none): a decode step's ints [4, rows] (ids, seq, pos, lengths). The
// kernel advances them to the next step, fed by its own argmax: ids[r] = out[r], pos[r] + 1,
// lengths[r] + 1 (seq unchanged), so a greedy decode can run its next step with no host round
// trip. Nothing else reads them by then: every kernel before this one has finished at pdl_wait().
//
// host_out (optional, NULL for none): [rows] int32 in mapped, page-locked host memory (its
// device address); the winners are written there too, so that a greedy decode step needs no
// copy after its kernels (the copy engine's own start cost about 9 us a step on the H200,
// docs/PERFORMANCE.md version 12). The host reads them once an event after this kernel completes.
//
// Launch: grid = (ceil(V / chunk), rows), block = ARGMAX_THREADS, no dynamic shared memory;
// counters [rows] zero before the first launch (left zero by every launch).
// Takes part in programmatic dependent launch (common.cuh): reads nothing before pdl_wait().
#include "common.cuh"
#include "argmax.cuh"  // argmax_better, argmax_block, argmax_write; NEG_INF_F32, ARGMAX_NONE

// Build parameters (build.py; the host sizes the grid by them): ARGMAX_THREADS a block, ARGMAX_UNROLL
// loads in flight per thread.
#ifndef ARGMAX_THREADS
#error "ARGMAX_THREADS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef ARGMAX_UNROLL
#error "ARGMAX_UNROLL is set by gpt2block/backends/cuda/build.py"
#endif

extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS) argmax_rows_f32(
    const float* __restrict__ logits,  // [rows, V], row stride ld
    int* __restrict__ out,             // [rows]
    int V, int ld, int chunk,
    float* __restrict__ part_v,        // [rows, gridDim.x]
    int* __restrict__ part_i,          // [rows, gridDim.x]
    int* __restrict__ counters,        // [rows]
    int* __restrict__ step,            // [4, rows] or NULL
    int* __restrict__ host_out) {      // [rows] mapped host memory, or NULL
    __shared__ float sv[32];
    __shared__ int si[32];
    __shared__ int is_last;
    pdl_trigger();
    pdl_wait();
    const int r = blockIdx.y, c = blockIdx.x, n_chunks = gridDim.x;
    const float* row = logits + (long long)r * ld;
    const int v0 = c * chunk, v1 = min(V, v0 + chunk);
    float bv = NEG_INF_F32;
    int bi = ARGMAX_NONE;
    // ARGMAX_UNROLL independent loads in flight per thread, then their comparisons in index order
    for (int i0 = v0 + threadIdx.x; i0 < v1; i0 += ARGMAX_UNROLL * ARGMAX_THREADS) {
        float v[ARGMAX_UNROLL];
#pragma unroll
        for (int u = 0; u < ARGMAX_UNROLL; ++u) {
            const int i = i0 + u * ARGMAX_THREADS;
            v[u] = i < v1 ? __ldcg(row + i) : NEG_INF_F32;
        }
#pragma unroll
        for (int u = 0; u < ARGMAX_UNROLL; ++u) {
            const int i = i0 + u * ARGMAX_THREADS;
            if (i < v1 && argmax_better(v[u], i, bv, bi)) { bv = v[u]; bi = i; }
        }
    }
    argmax_block(bv, bi, sv, si);
    if (n_chunks == 1) {
        if (threadIdx.x == 0) argmax_write(out, step, host_out, r, gridDim.y, bi);
        return;
    }
    if (threadIdx.x == 0) {
        part_v[(long long)r * n_chunks + c] = bv;
        part_i[(long long)r * n_chunks + c] = bi;
        __threadfence();  // the partial visible device-wide before the ticket is taken
        const int ticket = atomicAdd(&counters[r], 1);
        is_last = ticket == n_chunks - 1;
        if (is_last) counters[r] = 0;  // ready for the next launch
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    bv = NEG_INF_F32;
    bi = ARGMAX_NONE;
    for (int q = threadIdx.x; q < n_chunks; q += ARGMAX_THREADS) {
        const float qv = __ldcg(part_v + (long long)r * n_chunks + q);
        const int qi = __ldcg(part_i + (long long)r * n_chunks + q);
        if (argmax_better(qv, qi, bv, bi)) { bv = qv; bi = qi; }
    }
    argmax_block(bv, bi, sv, si);
    if (threadIdx.x == 0) argmax_write(out, step, host_out, r, gridDim.y, bi);
}
