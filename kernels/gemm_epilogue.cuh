// gemm_epilogue.cuh: what the GEMM files (gemm.cu on mma.sync, gemm_wgmma.cu on wgmma) share: the
// kernels' parameter list, which arithmetic variants a compilation holds, and the epilogues
// C = acc + bias, gelu_tanh(acc + bias), R + acc + bias, or acc, stored one or two outputs at a time.
// Device code only; needs common.cuh (gelu_tanh).
#pragma once

// Which arithmetic variants this compilation holds (build.py: one module per variant and tile, so a
// process compiles only what it runs; the export one, for its precision).
#ifndef GEMM_WITH_TF32
#error "GEMM_WITH_TF32 is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_WITH_TF32X3
#error "GEMM_WITH_TF32X3 is set by gpt2block/backends/cuda/build.py"
#endif

// Every GEMM kernel's parameters (see gemm.cu's header).
#define GEMM_PARAMS                                                                                    \
    const float *__restrict__ A, const float *__restrict__ B, const float *__restrict__ bias, const float *R, \
        float *C, int M, int N, int K

#define GEMM_EPI_BIAS 0
#define GEMM_EPI_GELU 1
#define GEMM_EPI_RESIDUAL 2
#define GEMM_EPI_NONE 3
#define GEMM_EPI_RUNTIME 4  // any of the above, given at run time (the bodies' `epi` argument): one kernel for all

// ---------------------------------------------------------------------------------------------
// Epilogue: one or two adjacent outputs (row, col), (row, col + 1), each read and written here.

// The epilogue in effect: EPI, or at GEMM_EPI_RUNTIME the run-time `epi`.
template <int EPI>
__device__ __forceinline__ int gemm_epi(int epi) {
    return EPI == GEMM_EPI_RUNTIME ? epi : EPI;
}

template <int EPI>
__device__ __forceinline__ float gemm_epi_value(float acc, const float* bias, const float* R,
                                                long long idx, int col, int epi = EPI) {
    const int e = gemm_epi<EPI>(epi);
    if (e == GEMM_EPI_NONE) return acc;
    float v = acc + __ldg(bias + col);
    if (e == GEMM_EPI_GELU) v = gelu_tanh(v);
    if (e == GEMM_EPI_RESIDUAL) v += R[idx];
    return v;
}

// v0 -> C[row, col], v1 -> C[row, col + 1], the latter only where col + 1 < N.
// pair: N even and C (and R) 8-byte aligned, so (col even) the two form one float2.
template <int EPI>
__device__ __forceinline__ void gemm_store2(float* C, const float* bias, const float* R, int row, int col,
                                            int N, bool pair, float v0, float v1, int epi = EPI) {
    const long long idx = (long long)row * N + col;
    const int e = gemm_epi<EPI>(epi);
    if (pair && col + 1 < N) {
        float2 o;
        if (e == GEMM_EPI_RESIDUAL) {
            const float2 r = *reinterpret_cast<const float2*>(R + idx);
            o.x = v0 + __ldg(bias + col) + r.x;
            o.y = v1 + __ldg(bias + col + 1) + r.y;
        } else {
            o.x = gemm_epi_value<EPI>(v0, bias, R, idx, col, e);
            o.y = gemm_epi_value<EPI>(v1, bias, R, idx + 1, col + 1, e);
        }
        *reinterpret_cast<float2*>(C + idx) = o;
        return;
    }
    if (col < N) C[idx] = gemm_epi_value<EPI>(v0, bias, R, idx, col, e);
    if (col + 1 < N) C[idx + 1] = gemm_epi_value<EPI>(v1, bias, R, idx + 1, col + 1, e);
}

__device__ __forceinline__ bool gemm_aligned(const void* p, int bytes) {
    return (reinterpret_cast<unsigned long long>(p) & (unsigned long long)(bytes - 1)) == 0;
}
