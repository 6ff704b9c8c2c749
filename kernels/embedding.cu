// embedding.cu: the first step of the model, token + position embeddings.
//
//   x[t, :] = wte[ids[t], :] + wpe[pos[t], :]
//
// Launch: grid = T, block = 128 (threads stride over D / 4 float4s). Requires D % 4 == 0.
// ids and pos were checked on the host (0 <= id < vocab, 0 <= pos < n_ctx).
// Lets the next kernel launch early (pdl_trigger; common.cuh) and reads after pdl_wait(). gpt2block
// launches it plainly, never programmatically: a decode step's later kernels rely on everything
// before the step having finished (attention_decode_f32 reads lengths and older keys before its wait).
#include "common.cuh"

extern "C" __global__ void embedding_f32(
    const int* __restrict__ ids,    // [T] token ids
    const int* __restrict__ pos,    // [T] positions (each sequence's first real token is 0)
    const float* __restrict__ wte,  // [vocab, D]
    const float* __restrict__ wpe,  // [n_ctx, D]
    float* __restrict__ x,          // [T, D]
    int D) {
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.x;
    const float4* e = reinterpret_cast<const float4*>(wte + (long long)ids[t] * D);
    const float4* p = reinterpret_cast<const float4*>(wpe + (long long)pos[t] * D);
    float4* o = reinterpret_cast<float4*>(x + (long long)t * D);
    for (int c = threadIdx.x; c < (D >> 2); c += blockDim.x) {
        const float4 a = e[c], b = p[c];
        o[c] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    }
}
