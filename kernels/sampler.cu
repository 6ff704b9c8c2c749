// sampler.cu: the sampling contract of gpt2block/sampler.py on the device, one thread block per row.
//
// sample_rows_f32: row r of logits [B, V] -> the id drawn from exactly sampler.distribution() (up to
// float rounding at the kept set's and the CDF's boundaries), without sorting:
//   1. penalties from the row's history (history [B, V], below), float32 arithmetic in the reference's
//      order (repetition, then presence, then frequency), each operation rounded on its own (no FMA);
//   2. temperature T (the host writes 0 for a greedy row): greedy = the argmax of the penalised logits,
//      the lowest id among equal maxima; else e = exp(l / T - max(l) / T) (float64, stored as float32);
//   3. top_k: the k-th largest penalised logit found by a radix select over the order-preserving bits
//      of the float values (four 8-bit digit passes, histograms in shared memory); ties all kept; the
//      select runs on the candidates alone (the keys at or above the least of the thread groups' largest
//      keys, below) where they number at least k and fit SAMPLER_CANDIDATES: the same k-th key;
//   4. top_p: on the masses of what top-k kept, the largest e threshold whose kept mass reaches
//      top_p x the total, by the same radix select over the bits of e weighted by mass;
//   5. min_p: e >= min_p (e is p / max(p));
//   6. the inverse-CDF draw in id order: the first id whose cumulative kept mass exceeds u x total,
//      u = (x0 >> 8) 2^-24, x0 the first word of Philox-4x32-10 keyed by the row's seed (low word,
//      high word), counter (position, sample_index, 0, 0): sampler.philox_uniform bit for bit.
// Masses are 64-bit fixed point (e x 2^MASS_SHIFT, every sum below 2^63), so the sums, the thresholds
// and the draw are exact integer arithmetic: the same inputs give the same id whatever the schedule.
// An e below 2^-MASS_SHIFT (about 1e-14 at V = 50257) has mass 0 and is never drawn.
//
// Per row, from params [SW_WORDS, B] (uint32 words; the layout below, mirrored by
// gpt2block/backends/cuda/sampler.py): temperature, top_p, min_p as float64 (two words, low first),
// the three penalties as float32, top_k, the seed (two words), position and sample index.
//
// history [B, V] int32, or NULL (no penalties): bits 0-29 count how often id t was generated (the
// presence and frequency penalties' history), bit 30 (HISTORY_PROMPT) marks an id of the prompt; an
// id is "seen" (the repetition penalty's prompt + output) where the word is non-zero. The host writes
// it when a batch starts (prompt marks, and counts of any ids already generated); after that the
// history grows on the device: the row's SW_APPEND word names the id the generation loop took since
// the last launch (-1: none; a finished row takes none), and the kernel adds it before the penalties.
//
// Outputs: ids [B] int32 (-1 for a row whose logits hold NaN or +inf, or are all -inf, or whose
// penalised logits overflowed: the host raises), and when given logprob [B] (log_softmax of the raw
// logits at the drawn id), the top_n raw log-probabilities [B, top_n] with their ids (most likely
// first, lower id first among ties), u [B]
// (the uniform used; for the tests).
//
// Chained steps (step != NULL: a decode step's ints [4, B] = ids, seq, pos, lengths on the device, already
// moved on by the step's argmax): the row's Philox position is pos (the drawn token's), not SW_POSITION;
// the drawn id replaces the argmax in ids (0 for a row that draws -1, so the next step's embedding reads a
// valid row; the host raises on the -1 it finds in host_ids), the history counts it (the next step's
// penalties see it without the host), and host_ids [B] (mapped host memory, or NULL) gets it. SW_APPEND is
// reset to -1 once applied, so a graph that replays the launch never adds it again.
//
// Top-k's candidates: the block's threads in groups of SAMPLER_THREADS / G consecutive threads, G the least
// power of two >= k and >= SAMPLER_MIN_GROUPS (no groups where G would exceed SAMPLER_THREADS: the whole row);
// t0 = the least of the groups' largest keys (thread t holds ids t, t + SAMPLER_THREADS, ...). The keys >= t0
// (n of them, at least one per group that holds ids) are copied to shared memory; where k <= n <=
// SAMPLER_CANDIDATES the k-th largest of them is the row's k-th largest key (were that below t0, all n >= k
// keys >= t0 would lie above it), else the select runs on the whole row.
//
// Launch: grid = B, block = SAMPLER_THREADS, dynamic shared memory 4 V bytes (the row's values). Registers
// for one block an SM (__launch_bounds__'s 1: nvcc 13 for sm_80 otherwise keeps to 32 a thread and spills).
// No allocation, no host synchronisation: a launch may be captured in a CUDA graph.
#include "common.cuh"
#include "argmax.cuh"  // NEG_INF_F32

// Build parameter (build.py; the host launches blocks of this size): threads per block.
#ifndef SAMPLER_THREADS
#error "SAMPLER_THREADS is set by gpt2block/backends/cuda/build.py"
#endif

// Build parameters: top-k's candidate list (keys), and the fewest thread groups it is chosen by (above).
#ifndef SAMPLER_CANDIDATES
#error "SAMPLER_CANDIDATES is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef SAMPLER_MIN_GROUPS
#error "SAMPLER_MIN_GROUPS is set by gpt2block/backends/cuda/build.py"
#endif

#define SAMPLER_WARPS (SAMPLER_THREADS / 32)
static_assert((SAMPLER_MIN_GROUPS & (SAMPLER_MIN_GROUPS - 1)) == 0 && SAMPLER_MIN_GROUPS <= SAMPLER_THREADS &&
                  SAMPLER_THREADS / SAMPLER_MIN_GROUPS <= 32,
              "SAMPLER_MIN_GROUPS: a power of two, a group within a warp");

// The word layout of params [SW_WORDS, B] (row b's word w at params[w * B + b]).
enum SamplerWord {
    SW_TEMPERATURE = 0,  // float64, 2 words; 0 = greedy
    SW_TOP_P = 2,        // float64, 2 words; 1 = off
    SW_MIN_P = 4,        // float64, 2 words; 0 = off
    SW_REPETITION = 6,   // float32; 1 = off
    SW_PRESENCE = 7,     // float32; 0 = off
    SW_FREQUENCY = 8,    // float32; 0 = off
    SW_TOP_K = 9,        // int32; 0 = off
    SW_SEED = 10,        // uint64, 2 words
    SW_POSITION = 12,    // uint32: Philox counter word 0
    SW_SAMPLE = 13,      // uint32: Philox counter word 1
    SW_APPEND = 14,      // int32: the id to add to the history before the penalties; -1 none
    SW_WORDS = 15
};

// history words: the generated count in bits 0-29, the prompt mark in bit 30.
enum SamplerHistory { HISTORY_COUNT_MASK = 0x3fffffff, HISTORY_PROMPT = 0x40000000 };

typedef unsigned long long u64;

// Philox-4x32-10 (Salmon et al., SC11): the first output word of counter (c0, c1, c2, c3), key (k0, k1).
__device__ __forceinline__ unsigned philox_x0(unsigned c0, unsigned c1, unsigned c2, unsigned c3, unsigned k0,
                                              unsigned k1) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        const unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    return c0;
}

// A float's bits as an unsigned key in the floats' order (-inf lowest); -0 and +0 must be one value
// before (the caller adds +0.0f).
__device__ __forceinline__ unsigned float_key(float v) {
    const unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ double param_f64(const unsigned* params, int w, int row, int B) {
    return __hiloint2double((int)params[(w + 1) * B + row], (int)params[w * B + row]);
}

__device__ __forceinline__ float param_f32(const unsigned* params, int w, int row, int B) {
    return __uint_as_float(params[w * B + row]);
}

// Block reductions (every thread gets the result); scratch: __shared__ [SAMPLER_WARPS] of the type.
__device__ __forceinline__ float block_max(float v, float* sh) {
    v = warp_max(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = sh[0];
    for (int w = 1; w < SAMPLER_WARPS; ++w) m = fmaxf(m, sh[w]);
    __syncthreads();
    return m;
}

__device__ __forceinline__ double block_sum(double v, double* sh) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < SAMPLER_WARPS; ++w) s += sh[w];  // one order for every thread: the same sum
    __syncthreads();
    return s;
}

template <class T>
__device__ __forceinline__ T block_min(T v, T* sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    T m = sh[0];
    for (int w = 1; w < SAMPLER_WARPS; ++w) m = min(m, sh[w]);
    __syncthreads();
    return m;
}

// Inclusive scan of v over the block (thread order); *total gets the block's sum. sh: [SAMPLER_WARPS].
__device__ __forceinline__ u64 block_scan(u64 v, u64* sh, u64* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const u64 n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += n;
    }
    if (lane == 31) sh[warp] = v;
    __syncthreads();
    u64 before = 0, all = 0;
    for (int w = 0; w < SAMPLER_WARPS; ++w) {
        if (w < warp) before += sh[w];
        all += sh[w];
    }
    __syncthreads();
    *total = all;
    return before + v;
}

// The winner of (value desc, id asc) among the raw logits that come after (pv, pi) in that order.
__device__ __forceinline__ void block_next_best(const float* row, int V, float pv, int pi, float& bv, int& bi,
                                                float* shv, int* shi) {
    bv = NEG_INF_F32;
    bi = 0x7fffffff;
    for (int i = threadIdx.x; i < V; i += SAMPLER_THREADS) {
        const float v = row[i];
        const bool after = v < pv || (v == pv && i > pi);
        if (after && (v > bv || (v == bv && i < bi))) { bv = v; bi = i; }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if ((threadIdx.x & 31) == 0) { shv[threadIdx.x >> 5] = bv; shi[threadIdx.x >> 5] = bi; }
    __syncthreads();
    bv = shv[0];
    bi = shi[0];
    for (int w = 1; w < SAMPLER_WARPS; ++w)
        if (shv[w] > bv || (shv[w] == bv && shi[w] < bi)) { bv = shv[w]; bi = shi[w]; }
    __syncthreads();
}

// Shared state of the radix select.
struct RadixScratch {
    u64 hist[256];  // weight per digit
    u64 warp_tot[8];  // the digit scan's warp totals (256 digits: 8 warps)
    u64 above;  // weight of the keys above the chosen prefix
    unsigned digit;
};

// The largest key K with W(key >= K) >= target, over the V elements whose (key, weight) key_w(i) gives
// (W(all) >= target >= 1 assumed). Four passes of 8 bits, most significant first: each histograms the
// weight of the keys that share the prefix chosen so far, and picks the digit where the weight from the
// top reaches the target. A warp adds its lanes of one digit together first (__match_any_sync), so that
// one lane per digit and warp updates the shared histogram (UNIT: every weight is 1, a count).
template <bool UNIT, class KeyWeight>
__device__ unsigned radix_select(KeyWeight key_w, int V, u64 target, RadixScratch& rs) {
    const int lane = threadIdx.x & 31;
    unsigned prefix = 0;
    u64 above = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < 256; d += SAMPLER_THREADS) rs.hist[d] = 0;
        __syncthreads();
        const unsigned hi_mask = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
        for (int base = 0; base < V; base += SAMPLER_THREADS) {  // the same trips for every thread: warps converged
            const int i = base + threadIdx.x;
            unsigned key = 0;
            u64 w = 0;
            if (i < V) key_w(i, key, w);
            const bool in = w != 0 && (key & hi_mask) == prefix;
            if (!__any_sync(0xffffffffu, in)) continue;
            const unsigned digit = in ? (key >> shift) & 255u : 256u;
            const unsigned peers = __match_any_sync(0xffffffffu, digit);
            u64 sum;
            if (UNIT) {
                sum = (u64)__popc(peers);
            } else {
                sum = 0;
                for (int src = 0; src < 32; ++src) {
                    const u64 v = __shfl_sync(0xffffffffu, w, src);
                    if ((peers >> src) & 1u) sum += v;
                }
            }
            if (in && __ffs(peers) - 1 == lane) atomicAdd(&rs.hist[digit], sum);
        }
        __syncthreads();
        // suffix sums over the digits, largest digit first: thread t < 256 holds digit 255 - t
        const int t = threadIdx.x, warp = t >> 5;
        u64 h = 0, incl = 0;
        if (t < 256) {
            h = rs.hist[255 - t];
            incl = h;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const u64 n = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += n;
            }
            if (lane == 31) rs.warp_tot[warp] = incl;
        }
        __syncthreads();
        if (t < 256) {
            for (int w = 0; w < warp; ++w) incl += rs.warp_tot[w];
            const u64 reach = above + incl;  // the weight of the keys from digit 255 - t up
            if (reach >= target && reach - h < target) {  // exactly one digit: where the weight reaches it
                rs.digit = 255u - t;
                rs.above = reach - h;
            }
        }
        __syncthreads();
        prefix |= rs.digit << shift;
        above = rs.above;
        __syncthreads();
    }
    return prefix;
}

extern "C" __global__ void __launch_bounds__(SAMPLER_THREADS, 1) sample_rows_f32(
    const float* __restrict__ logits,    // [B, V], row stride ld
    int V, int ld,
    unsigned* __restrict__ params,        // [SW_WORDS, B] (SW_APPEND reset to -1 once applied)
    int* __restrict__ history,            // [B, V] or NULL
    int* __restrict__ ids,                // [B]
    float* __restrict__ logprob,          // [B] or NULL
    int top_n,                            // 0 to 20
    int* __restrict__ top_ids,            // [B, top_n] or NULL (top_n 0)
    float* __restrict__ top_logprobs,     // [B, top_n] or NULL (top_n 0)
    float* __restrict__ u_out,            // [B] or NULL
    int* __restrict__ step,               // [4, B] or NULL: a chained decode step's ints (above)
    int* __restrict__ host_ids) {         // [B] mapped host memory or NULL
    extern __shared__ float s[];  // [V]: the row's penalised logits, then its e values
    __shared__ float shf[SAMPLER_WARPS];
    __shared__ int shi[SAMPLER_WARPS];
    __shared__ double shd[SAMPLER_WARPS];
    __shared__ u64 shu[SAMPLER_WARPS];
    __shared__ RadixScratch rs;
    __shared__ int chosen;
    __shared__ unsigned shk[SAMPLER_WARPS];
    __shared__ unsigned cand[SAMPLER_CANDIDATES];  // top-k's candidate keys
    __shared__ int n_cand;

    const int row = blockIdx.x, B = gridDim.x, tid = threadIdx.x;
    const float* lg = logits + (long long)row * ld;
    int* hist = history == nullptr ? nullptr : history + (long long)row * V;

    // the raw row: checked, its maximum, and (for log-probabilities) its log-sum-exp
    bool bad = false;
    float rmax = NEG_INF_F32;
    for (int i = tid; i < V; i += SAMPLER_THREADS) {
        const float v = lg[i];
        bad |= (v != v) || v == __int_as_float(0x7f800000);
        rmax = fmaxf(rmax, v);
        s[i] = v + 0.0f;  // -0 -> +0: one key per value
    }
    bad = __syncthreads_or(bad);
    rmax = block_max(rmax, shf);
    if (bad || rmax == NEG_INF_F32) {  // the same for every thread of the block
        if (tid == 0) {
            ids[row] = -1;
            if (host_ids != nullptr) host_ids[row] = -1;  // step's ids keep the argmax: a valid id
            if (logprob != nullptr) logprob[row] = __int_as_float(0x7fc00000);
        }
        return;
    }
    const bool want_lp = logprob != nullptr || top_n > 0;
    double lse = 0.0;
    if (want_lp) {
        double acc = 0.0;
        for (int i = tid; i < V; i += SAMPLER_THREADS) acc += exp((double)s[i] - (double)rmax);
        lse = (double)rmax + log(block_sum(acc, shd));
    }

    // 1. penalties
    const float rep = param_f32(params, SW_REPETITION, row, B), pres = param_f32(params, SW_PRESENCE, row, B),
                freq = param_f32(params, SW_FREQUENCY, row, B);
    if (hist != nullptr) {
        const int add = (int)params[SW_APPEND * B + row];
        if (tid == 0 && add >= 0 && add < V) hist[add] += 1;
        if (tid == 0) params[SW_APPEND * B + row] = 0xffffffffu;  // applied once (a replayed launch adds nothing)
        __syncthreads();  // the block's own write: visible to its threads after the barrier
    }
    if (hist != nullptr && (rep != 1.0f || pres != 0.0f || freq != 0.0f)) {
        for (int i = tid; i < V; i += SAMPLER_THREADS) {
            const int h = hist[i];
            if (h == 0) continue;
            float v = s[i];
            if (rep != 1.0f) v = v > 0.0f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep);
            const int c = h & HISTORY_COUNT_MASK;
            if (c != 0) {
                v = __fsub_rn(v, pres);
                v = __fsub_rn(v, __fmul_rn(freq, (float)c));
            }
            s[i] = v + 0.0f;
        }
    }
    __syncthreads();
    float pmax = NEG_INF_F32;
    unsigned kmax = 0;  // the thread's largest key, for top-k's candidates (0: a thread without ids)
    for (int i = tid; i < V; i += SAMPLER_THREADS) {
        const float v = s[i];
        pmax = fmaxf(pmax, v);
        kmax = max(kmax, float_key(v));
    }
    pmax = block_max(pmax, shf);

    const double T = param_f64(params, SW_TEMPERATURE, row, B);
    const unsigned position = step != nullptr ? (unsigned)step[2 * B + row] : params[SW_POSITION * B + row];
    const unsigned x0 = philox_x0(position, params[SW_SAMPLE * B + row], 0u, 0u,
                                  params[SW_SEED * B + row], params[(SW_SEED + 1) * B + row]);
    const unsigned k24 = x0 >> 8;
    int id;
    if (!(T > 0.0)) {  // 2. greedy: the lowest id of the maximum
        int best = 0x7fffffff;
        for (int i = tid; i < V; i += SAMPLER_THREADS)
            if (s[i] == pmax) { best = i; break; }  // a thread's ids ascend: its first is its lowest
        id = block_min(best, shi);
    } else {
        // 3. top_k: keep the keys >= the k-th largest
        const int k = (int)params[SW_TOP_K * B + row];
        unsigned kth = 0;
        if (k > 0 && k < V) {
            int groups = SAMPLER_MIN_GROUPS;  // the least power of two >= k (above), up to past SAMPLER_THREADS
            while (groups < k && groups <= SAMPLER_THREADS) groups <<= 1;
            bool on_candidates = false;
            if (groups <= SAMPLER_THREADS) {  // the candidates (above); the same for every thread
                const int gsize = SAMPLER_THREADS / groups;  // 1 to 32: a group within a warp
                unsigned g = kmax;
                for (int o = 1; o < gsize; o <<= 1) g = max(g, __shfl_xor_sync(0xffffffffu, g, o));
                const unsigned t0 = block_min(g == 0u ? 0xffffffffu : g, shk);  // groups without ids left out
                if (tid == 0) n_cand = 0;
                __syncthreads();
                const int lane = tid & 31;
                for (int base = 0; base < V; base += SAMPLER_THREADS) {  // the same trips for every thread
                    const int i = base + tid;
                    const unsigned key = i < V ? float_key(s[i]) : 0u;
                    const bool c = i < V && key >= t0;
                    const unsigned ballot = __ballot_sync(0xffffffffu, c);
                    if (ballot == 0u) continue;
                    int at = 0;
                    if (lane == 0) at = atomicAdd(&n_cand, __popc(ballot));
                    at = __shfl_sync(0xffffffffu, at, 0) + __popc(ballot & ((1u << lane) - 1u));
                    if (c && at < SAMPLER_CANDIDATES) cand[at] = key;
                }
                __syncthreads();
                const int n = n_cand;
                on_candidates = n >= k && n <= SAMPLER_CANDIDATES;
                if (on_candidates) {
                    auto by_cand = [&](int i, unsigned& key, u64& w) { key = cand[i]; w = 1; };
                    kth = radix_select<true>(by_cand, n, (u64)k, rs);
                }
            }
            if (!on_candidates) {
                auto by_value = [&](int i, unsigned& key, u64& w) { key = float_key(s[i]); w = 1; };
                kth = radix_select<true>(by_value, V, (u64)k, rs);
            }
        }
        // 2. e = p / max(p), 0 outside the top-k set, over s in place
        const double zmax = (double)pmax / T;
        for (int i = tid; i < V; i += SAMPLER_THREADS) {
            const float v = s[i];
            s[i] = (float_key(v) >= kth && v != NEG_INF_F32) ? (float)exp((double)v / T - zmax) : 0.0f;
        }
        __syncthreads();
        const int mass_shift = 62 - (32 - __clz(V));  // V 2^MASS_SHIFT < 2^62
        const double scale = ldexp(1.0, mass_shift);
        auto mass = [&](float e) -> u64 { return __double2ull_rn((double)e * scale); };
        u64 total = 0;
        {
            u64 part = 0;
            for (int i = tid; i < V; i += SAMPLER_THREADS) part += mass(s[i]);
            block_scan(part, shu, &total);
        }
        // 4. top_p: the largest e threshold whose kept mass reaches top_p x total
        const double P = param_f64(params, SW_TOP_P, row, B);
        unsigned pkey = 0;
        if (P < 1.0) {
            u64 target = (u64)ceil(P * (double)total);
            target = target < 1 ? 1 : (target > total ? total : target);
            auto by_mass = [&](int i, unsigned& key, u64& w) { key = __float_as_uint(s[i]); w = mass(s[i]); };
            pkey = radix_select<false>(by_mass, V, target, rs);
        }
        // 5. min_p on e = p / max(p); 6. the draw: the first id whose cumulative kept mass exceeds u x total
        const double M = param_f64(params, SW_MIN_P, row, B);
        auto kept = [&](int i) -> u64 {
            const float e = s[i];
            return (__float_as_uint(e) >= pkey && (double)e >= M) ? mass(e) : 0ull;
        };
        if (tid == 0) chosen = -1;  // stays -1 only where the masses are not numbers (a penalty overflowed)
        const int chunk = (V + SAMPLER_THREADS - 1) / SAMPLER_THREADS;  // thread t: ids [t chunk, (t + 1) chunk)
        const int lo = min(V, tid * chunk), hi = min(V, lo + chunk);
        u64 part = 0;
        for (int i = lo; i < hi; ++i) part += kept(i);
        u64 kept_total;
        const u64 incl = block_scan(part, shu, &kept_total);
        // threshold = floor(k24 x kept_total / 2^24): cum > u x total <=> cum > threshold (cum an integer)
        const u64 prod_hi = __umul64hi((u64)k24, kept_total), prod_lo = (u64)k24 * kept_total;
        const u64 thr = (prod_hi << 40) | (prod_lo >> 24);
        u64 cum = incl - part;
        if (cum <= thr && thr < incl) {  // exactly one thread's ids hold the crossing
            for (int i = lo; i < hi; ++i) {
                cum += kept(i);
                if (cum > thr) { chosen = i; break; }
            }
        }
        __syncthreads();
        id = chosen;
    }

    if (tid == 0) {
        ids[row] = id;
        if (step != nullptr) {
            step[row] = id >= 0 ? id : 0;
            if (hist != nullptr && id >= 0) hist[id] += 1;  // after every thread's last read of the row (barriers above)
        }
        if (host_ids != nullptr) host_ids[row] = id;
        if (u_out != nullptr) u_out[row] = (float)k24 * 0x1p-24f;
        if (logprob != nullptr) logprob[row] = id >= 0 ? (float)((double)lg[id] - lse) : __int_as_float(0x7fc00000);
    }
    // the top_n of the raw distribution
    float pv = __int_as_float(0x7f800000);
    int pi = -1;
    for (int j = 0; j < top_n; ++j) {
        float bv;
        int bi;
        block_next_best(lg, V, pv, pi, bv, bi, shf, shi);
        if (tid == 0) {
            top_ids[(long long)row * top_n + j] = bi;
            top_logprobs[(long long)row * top_n + j] = (float)((double)bv - lse);
        }
        pv = bv;
        pi = bi;
    }
}
