// attention_qkv.cu: ln_1, the QKV product and the decode attention of one token in one kernel
// (batch 1, bf16 weights), so that a decode layer has four kernels instead of five: no kernel
// boundary between the QKV product and the attention, and q and the new key and value go from the
// ranks that form them to the ranks that use them through distributed shared memory, not through
// the L2 after a boundary.
//
// attention_decode_qkv_bf16(x, w, bias, ln_g, ln_b, eps, k_cache, v_cache, cache_batch_stride,
//                           step, out, D, max_len)
//     x [1, D] the residual stream; w [3D, D] W_qkv transposed, bf16 bits (row n is output n: q at
//     0 .. D-1, k at D .. 2D-1, v at 2D .. 3D-1); bias [3D]; ln_g, ln_b [D] ln_1; k_cache, v_cache: key
//     t of cache row r at k_cache + r * cache_batch_stride + t * D (v likewise); step int32 [4, 1]
//     the decode step's ints (id, cache row r, position p, length len); out [1, D].
//     Writes the token's key and value to position p of row r and out = attention of q over keys
//     0 .. len - 1 of row r, as gemv_bf16_nt_ln_bias_kv_m1 then attention_decode_f32 do.
//     len must be p + 1 and in 1 .. max_len; otherwise out is NaN and the cache is not written.
//     grid (8, H, 1), clusters of 8 (compiled in), block 256; dynamic shared memory
//     AQ_SMEM_BYTES(D) = (3 D + 2 * 64 * 64) floats.
//     Requirements: sm_90; D = 256 AQ_CHUNKS (the build's define: 16-byte pieces per weight row per lane),
//     H = D / 64; every pointer 16-byte aligned.
//
// The cluster of head h: rank r (0..7) forms 24 of the head's 192 QKV outputs, warp w rows
// w, w + 8, w + 16 of them (head output j = 24 r + that: part j / 64 (q, k, v), dim j % 64), each
// row's D weights split over the warp's lanes in 16-byte pieces (lane l: pieces l, l + 32, ...), all
// loaded into registers before pdl_wait, evict-first as the GEMVs' (gemv.cu). LN(x) is staged in
// shared memory by the whole block exactly as the one-token GEMVs stage it (gemv_ln_row_block: the
// same bits). Each row's sum goes to every rank's copy of the head's q, k, v (qkv_s); the key and
// value rows also to the cache. After a cluster barrier each rank runs attention_decode_f32's rounds
// (attention_decode.cuh, 16 groups of 16 lanes here) on its chunks of 64 keys, the new key taken from
// qkv_s, and the ranks' partials meet in rank 0 as there (distributed shared memory, rank order:
// bit-exact run to run). The older keys of the first round are loaded before pdl_wait, as
// attention_decode_f32 loads them (the decode step's positions below p were written by earlier steps).
// The sums are added in another order than the GEMV's (whole rows per warp, not K split between two
// warps), so q, k and v are not the two-kernel path's bits; the tests judge both against float64.
#define GEMV_DEVICE_ONLY
#include "gemv.cu"                // gemv_ln_stage_gb, gemv_ln_row_block, GemvRaw, l2_policy, unpack16
#include "attention_decode.cuh"  // the rounds and the cluster helpers

#define AQ_THREADS GEMV_NT_THREADS  // 256: gemv_ln_row_block's block
#define AQ_WARPS (AQ_THREADS / 32)
#define AQ_GROUPS (AQ_THREADS / 16)  // attention groups of 16 lanes
#define AQ_RANKS 8
#define AQ_RANK_ROWS (3 * HEAD_DIM / AQ_RANKS)   // 24 of the head's 192 outputs per rank
#define AQ_WARP_ROWS (AQ_RANK_ROWS / AQ_WARPS)   // 3 per warp
#define AQ_SMEM_BYTES(D) ((3 * (D) + 2 * ATTN_DEC_CHUNK * HEAD_DIM) * 4)
#ifndef AQ_CHUNKS
#define AQ_CHUNKS 3  // 16-byte pieces of a weight row per lane: D = 256 AQ_CHUNKS (gpt2 3, gpt2-medium 4)
#endif

// At most 96 registers a thread (no spills at gpt2's and gpt2-medium's widths, nvcc 13.0), so that a block
// fits beside two blocks of the MLP projection's GEMV (80 registers) while they run: 2 x 20,480 + 24,576 of
// the 65,536 registers a SM. The block then starts, and loads its weights, before the projection ends.
#ifndef AQ_MAX_REGS
#define AQ_MAX_REGS __maxnreg__(96)
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define AQ_CLUSTER_DIMS __cluster_dims__(AQ_RANKS, 1, 1)
#else
#define AQ_CLUSTER_DIMS
#endif

extern "C" __global__ void AQ_MAX_REGS AQ_CLUSTER_DIMS
attention_decode_qkv_bf16(const float* __restrict__ x, const unsigned short* __restrict__ w,
                          const float* __restrict__ bias, const float* __restrict__ ln_g,
                          const float* __restrict__ ln_b, float eps, float* __restrict__ k_cache,
                          float* __restrict__ v_cache, long long cache_batch_stride, const int* __restrict__ step,
                          float* __restrict__ out, int D, int max_len) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ float4 aq_smem4[];  // LN(x) [D], ln_g, ln_b [2 D], the first round's keys, values [2][64][64]
    __shared__ __align__(16) float qkv_s[3 * HEAD_DIM];       // the head's q, k, v (every rank's copy)
    __shared__ __align__(16) float sc[ATTN_DEC_CHUNK];        // a round's scores, then probabilities
    __shared__ __align__(16) float red[AQ_GROUPS][HEAD_DIM];  // per-group P V, for the final sum
    __shared__ float stat[AQ_WARPS];
    __shared__ float scratch[32];
    __shared__ float part[AQ_RANKS][HEAD_DIM + 2];  // rank 0's: each rank's (P V [64], m, l)
#if ATTN_DEC_GROUP_SOFTMAX
    __shared__ float ml[AQ_GROUPS][2];  // each group's (m, l)
#endif

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, lane16 = tid & 15, grp = tid >> 4;
    const int rank = blockIdx.x, h = blockIdx.y;
    float* xs = reinterpret_cast<float*>(aq_smem4);
    if (D != 256 * AQ_CHUNKS || gridDim.x != AQ_RANKS || blockDim.x != AQ_THREADS) __trap();  // a wrong build

    // First half of the barrier's first phase: once every block has arrived, all have started, so
    // every rank's shared memory exists before anyone stores into it.
    cluster_arrive_relaxed();
    pdl_trigger();

    // Before the wait: this warp's weight rows, their biases, ln_1's g and b (weights), the step's
    // ints and the older keys of the first round (written before the step began).
    const unsigned long long pol = l2_policy(false);
    uint4 wv[AQ_WARP_ROWS][AQ_CHUNKS];
    float b_row[AQ_WARP_ROWS];
    int n_row[AQ_WARP_ROWS];  // the rows' head outputs j
#pragma unroll
    for (int t = 0; t < AQ_WARP_ROWS; ++t) {
        const int j = rank * AQ_RANK_ROWS + warp + AQ_WARPS * t;
        const long long n = (long long)(j / HEAD_DIM) * D + h * HEAD_DIM + j % HEAD_DIM;
        n_row[t] = j;
#pragma unroll
        for (int c = 0; c < AQ_CHUNKS; ++c)
            wv[t][c] = GemvRaw<true>::template load<true>(w + n * D + (c * 32 + lane) * 8, pol);
        b_row[t] = ld_pre_wait(bias + n);
    }
    gemv_ln_stage_gb(ln_g, ln_b, xs + D, D);
    const int row = step[1], p = step[2], len = step[3];
    const bool bad = len < 1 || len > max_len || p != len - 1;
    const int n_chunks = (len + ATTN_DEC_CHUNK - 1) / ATTN_DEC_CHUNK;
    const int n_active = bad ? 1 : min(AQ_RANKS, n_chunks);
    const size_t row_off = (size_t)row * (size_t)cache_batch_stride + (size_t)h * HEAD_DIM + lane16 * 4;
    const float* krow = k_cache + row_off;
    const float* vrow = v_cache + row_off;
    const int k0 = rank * ATTN_DEC_CHUNK;
    const int n0 = bad || rank >= n_active ? 0 : min(ATTN_DEC_CHUNK, len - k0);
    const int i_new = len - 1 - k0;  // this step's key in the first round (if < n0)
    // The keys and values before the new one into shared memory, each thread the float4s it reads back
    // (group grp: keys grp, grp + 16, ...; zeros in the slots a short round leaves, since attn_dec_fold
    // scores every slot): not into registers, which would keep the block from fitting beside the MLP
    // projection's blocks before it.
    constexpr int PER = ATTN_DEC_CHUNK / AQ_GROUPS;
    float4* ks = reinterpret_cast<float4*>(xs + 3 * D);  // [ATTN_DEC_CHUNK][16]
    float4* vs = ks + ATTN_DEC_CHUNK * 16;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int i = grp + AQ_GROUPS * j;
        const bool old_key = i < min(n0, i_new);
        const size_t off = old_key ? (size_t)(k0 + i) * D : 0;
        cp_async16(ks + i * 16 + lane16, krow + off, old_key ? 16 : 0);
        cp_async16(vs + i * 16 + lane16, vrow + off, old_key ? 16 : 0);
    }
    cp_async_commit();
    pdl_wait();

    gemv_ln_row_block(x, xs + D, xs, D, eps);  // xs = LN(x), the one-token GEMVs' bits; ends with a barrier

    // The warp's rows: lane l's pieces l, l + 32, ... in order, then the warp's butterfly.
    float acc[AQ_WARP_ROWS];
#pragma unroll
    for (int t = 0; t < AQ_WARP_ROWS; ++t) acc[t] = 0.0f;
#pragma unroll
    for (int c = 0; c < AQ_CHUNKS; ++c) {
        const float4* xp = reinterpret_cast<const float4*>(xs + (c * 32 + lane) * 8);
        const float4 xa = xp[0], xb = xp[1];
        const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
        for (int t = 0; t < AQ_WARP_ROWS; ++t) {  // each piece's 8 products summed, then added to the row's
            float wf[8];
            unpack16(wv[t][c], wf);
            float piece = xv[0] * wf[0];
#pragma unroll
            for (int e = 1; e < 8; ++e) piece = fmaf(xv[e], wf[e], piece);
            acc[t] += piece;
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int t = 0; t < AQ_WARP_ROWS; ++t) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], off);

    cluster_wait_acquire();  // the first phase: every rank has started
#pragma unroll
    for (int t = 0; t < AQ_WARP_ROWS; ++t) {
        const int j = n_row[t];
        const float v = acc[t] + b_row[t];
        if (lane < AQ_RANKS) st_cluster_f32(&qkv_s[j], lane, v);
        if (lane == AQ_RANKS && j >= HEAD_DIM && !bad) {
            float* dst = j >= 2 * HEAD_DIM ? v_cache : k_cache;
            dst[(size_t)row * (size_t)cache_batch_stride + (size_t)p * D + h * HEAD_DIM + j % HEAD_DIM] = v;
        }
    }
    __syncwarp();              // the warps converged again before the .aligned barrier instruction
    cluster_arrive_release();  // the second phase: the head's q, k, v in every rank
    cluster_wait_acquire();

    float* orow = out + h * HEAD_DIM;
    if (bad) {
        if (rank == 0 && tid < HEAD_DIM) orow[tid] = __int_as_float(0x7fc00000);
        return;
    }
    if (rank >= n_active) return;  // no chunk (the cluster barrier waits only for threads still running)
    float4 kr[PER], vr[PER];  // this thread's keys and values of the first round (its own copies: landed
#pragma unroll                // by gemv_ln_row_block's cp_async_wait)
    for (int j = 0; j < PER; ++j) {
        kr[j] = ks[(grp + AQ_GROUPS * j) * 16 + lane16];
        vr[j] = vs[(grp + AQ_GROUPS * j) * 16 + lane16];
    }
    const float4 kn = *reinterpret_cast<const float4*>(&qkv_s[HEAD_DIM + lane16 * 4]);
    const float4 vn = *reinterpret_cast<const float4*>(&qkv_s[2 * HEAD_DIM + lane16 * 4]);
    if (i_new < n0 && i_new % AQ_GROUPS == grp) {
#pragma unroll
        for (int j = 0; j < PER; ++j)
            if (grp + AQ_GROUPS * j == i_new) { kr[j] = kn; vr[j] = vn; }
    }
    float4 qv = *reinterpret_cast<const float4*>(&qkv_s[lane16 * 4]);
    qv.x *= ATTN_SCALE; qv.y *= ATTN_SCALE; qv.z *= ATTN_SCALE; qv.w *= ATTN_SCALE;

#if ATTN_DEC_GROUP_SOFTMAX
    float m_g = attn_neg_inf(), l_g = 0.f;        // this group's running max and sum (attention_decode.cuh)
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);   // this group's P V over its keys, dims 4 lane16 ..
    attn_dec_fold_group<AQ_GROUPS>(qv, kr, vr, n0, m_g, l_g, o);
    for (int c = rank + AQ_RANKS; c < n_chunks; c += AQ_RANKS) {  // rows longer than 512 keys
        const int n = min(ATTN_DEC_CHUNK, len - c * ATTN_DEC_CHUNK);
        attn_dec_load<false, AQ_GROUPS>(krow, vrow, D, c * ATTN_DEC_CHUNK, n, kr, vr);
        const int i_c = len - 1 - c * ATTN_DEC_CHUNK;  // the new key from qkv_s, not the cache
        if (i_c < n && i_c % AQ_GROUPS == grp) {
#pragma unroll
            for (int j = 0; j < PER; ++j)
                if (grp + AQ_GROUPS * j == i_c) { kr[j] = kn; vr[j] = vn; }
        }
        attn_dec_fold_group<AQ_GROUPS>(qv, kr, vr, n, m_g, l_g, o);
    }
    float A, M, L;  // the rank's partial (dim tid < 64): its groups met
    attn_dec_groups_meet<AQ_GROUPS>(m_g, l_g, o, red, ml, A, M, L);
    if (n_active == 1) {
        if (tid < HEAD_DIM) orow[tid] = A / L;
        return;
    }
    if (tid < HEAD_DIM) st_cluster_f32(&part[rank][tid], 0, A);
    if (tid == 0) {
        st_cluster_f32(&part[rank][HEAD_DIM], 0, M);
        st_cluster_f32(&part[rank][HEAD_DIM + 1], 0, L);
    }
    __syncwarp();
    cluster_arrive_release();  // the third phase: the partials are rank 0's to read; the others are done
    if (rank != 0) return;
    cluster_wait_acquire();
    if (tid < HEAD_DIM) orow[tid] = attn_dec_ranks_meet(part, n_active, tid);
#else
    float m_run = attn_neg_inf(), l_run = 0.f;   // the rank's running max and sum (block-uniform)
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);  // this group's P V over the rank's keys, dims 4 lane16 ..
    attn_dec_fold<AQ_GROUPS>(qv, kr, vr, n0, sc, scratch, stat, m_run, l_run, o);
    for (int c = rank + AQ_RANKS; c < n_chunks; c += AQ_RANKS) {  // rows longer than 512 keys
        const int n = min(ATTN_DEC_CHUNK, len - c * ATTN_DEC_CHUNK);
        attn_dec_load<false, AQ_GROUPS>(krow, vrow, D, c * ATTN_DEC_CHUNK, n, kr, vr);
        const int i_c = len - 1 - c * ATTN_DEC_CHUNK;  // the new key from qkv_s, not the cache
        if (i_c < n && i_c % AQ_GROUPS == grp) {
#pragma unroll
            for (int j = 0; j < PER; ++j)
                if (grp + AQ_GROUPS * j == i_c) { kr[j] = kn; vr[j] = vn; }
        }
        attn_dec_fold<AQ_GROUPS>(qv, kr, vr, n, sc, scratch, stat, m_run, l_run, o);
    }

    // the groups' P V added in group order; lane16 of group grp owns dims 4 lane16 .. + 3
    *reinterpret_cast<float4*>(&red[grp][lane16 * 4]) = o;
    __syncthreads();
    float a = 0.f;
    if (tid < HEAD_DIM) {
#pragma unroll
        for (int gi = 0; gi < AQ_GROUPS; ++gi) a += red[gi][tid];
    }
    if (n_active == 1) {
        if (tid < HEAD_DIM) orow[tid] = a / l_run;
        return;
    }
    if (tid < HEAD_DIM) st_cluster_f32(&part[rank][tid], 0, a);
    if (tid == HEAD_DIM) st_cluster_f32(&part[rank][HEAD_DIM], 0, m_run);
    if (tid == HEAD_DIM + 1) st_cluster_f32(&part[rank][HEAD_DIM + 1], 0, l_run);
    __syncwarp();
    cluster_arrive_release();  // the third phase: the partials are rank 0's to read; the others are done
    if (rank != 0) return;
    cluster_wait_acquire();
    if (tid < HEAD_DIM) {
        float mm = attn_neg_inf();
        for (int s = 0; s < n_active; ++s) mm = fmaxf(mm, part[s][HEAD_DIM]);
        const float base = attn_safe_max(mm);
        float L = 0.f, A = 0.f;
        for (int s = 0; s < n_active; ++s) {
            const float wgt = part[s][HEAD_DIM] == attn_neg_inf() ? 0.f : expf(part[s][HEAD_DIM] - base);
            L = fmaf(part[s][HEAD_DIM + 1], wgt, L);
            A = fmaf(part[s][tid], wgt, A);
        }
        orow[tid] = A / L;
    }
#endif
#else
    __trap();  // clusters: sm_90 and later only (gpt2block launches it only there)
#endif
}
