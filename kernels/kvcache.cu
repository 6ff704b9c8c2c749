// kvcache.cu: writing new keys and values into the preallocated KV cache.
//
// The cache of one layer: key p of sequence s at k_cache + s * batch_stride + p * D,
// value at v_cache + the same offset. The T new tokens' K and V come out of the QKV GEMM:
// token t's K is qkv[t, D:2D], its V qkv[t, 2D:3D].
//
//   k_cache[seq[t], pos[t], :] = qkv[t, D:2D];   v_cache[seq[t], pos[t], :] = qkv[t, 2D:3D]
//
// Launch: grid = T, block = 128. Requires D % 4 == 0.
#include "common.cuh"

extern "C" __global__ void kvcache_store_f32(
    const float* __restrict__ qkv,  // [T, 3D]
    const int* __restrict__ seq,    // [T] cache row (sequence) of each token
    const int* __restrict__ pos,    // [T] position of each token in its sequence
    float* __restrict__ k_cache,    // this layer's keys:   [batch][n_ctx, D] at batch_stride
    float* __restrict__ v_cache,    // this layer's values: [batch][n_ctx, D] at batch_stride
    long long batch_stride, int D) {
    const int t = blockIdx.x;
    const float4* k = reinterpret_cast<const float4*>(qkv + (long long)t * 3 * D + D);
    const float4* v = reinterpret_cast<const float4*>(qkv + (long long)t * 3 * D + 2 * D);
    const long long dst = seq[t] * batch_stride + (long long)pos[t] * D;
    float4* kd = reinterpret_cast<float4*>(k_cache + dst);
    float4* vd = reinterpret_cast<float4*>(v_cache + dst);
    for (int c = threadIdx.x; c < (D >> 2); c += blockDim.x) {
        kd[c] = k[c];
        vd[c] = v[c];
    }
}
