/*
 * cuda_common.cuh — what every kernels/cuda file shares: the CUDA context layout, error and launch helpers,
 * weight-element loads, warp/block reductions.
 *
 * Design choices
 *   - One kern_ctx per engine context: its own stream (ops are asynchronous and ordered on it), a cuBLAS handle
 *     bound to that stream, one growable device scratch buffer (safe to reuse from op to op because ops on one
 *     stream run in order), and a deferred-error word in mapped pinned host memory: a kernel that meets a bad
 *     token id or position writes KERN_ERANGE there (a plain store, no atomics needed: any writer's code will
 *     do) and the next sync or device-to-host copy reports it without an extra transfer.
 *   - Launchers never abort: they check shapes (KERN_ESHAPE), then the launch (cudaGetLastError ->
 *     KERN_EBACKEND). A sticky device fault shows up at the next sync as KERN_EBACKEND.
 *   - Launches go through MN_LAUNCH, dynamic shared memory through MN_DYN_SMEM, 16-bit floats are handled as
 *     raw uint16_t bits through the helpers below (weights stay in their stored dtype, bit-exact with the CPU).
 */
#ifndef MNEMO_CUDA_COMMON_CUH
#define MNEMO_CUDA_COMMON_CUH

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

#ifdef MNEMO_CUDA_EMU
#include "cuda_emu.h" /* tests/cuda/emu: the same source runs on a CPU emulator in tests */
#else
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
/* kernel<<<grid, block, smem, stream>>>(args); `kernel` is a plain name or a function pointer variable. */
#define MN_LAUNCH(kernel, grid, block, smem, stream) kernel<<<(grid), (block), (smem), (stream)>>>
/* Dynamic shared memory as a T* called name (16-byte aligned, so float4 accesses are legal). */
#define MN_DYN_SMEM(T, name)                                                                                    \
    extern __shared__ __align__(16) unsigned char mn_dyn_smem_[];                                               \
    T *name = reinterpret_cast<T *>(mn_dyn_smem_)
#endif

#define KERN_CUDA_MAGIC 0x41445543u /* "CUDA": first word of a CUDA kern_ctx, checked by every launcher */

struct kern_ctx {
    uint32_t magic;
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    int sm_count;
    size_t smem_optin;        /* most dynamic shared memory a block may ask for on this device */
    kern_cuda_gemm gemm;      /* bf16/f16 GEMM precision, see kernels.h (cuda.gemm) */
    int attn;                 /* prefill attention kernel: CUDA_ATTN_* (cuda.attn) */
    int gemv_split;           /* decode GEMV warps per row group; 0 = by rows (cuda.gemv_split) */
    int dec_blocks_per_sm;    /* decode attention's split-KV blocks per SM; 0 = the measured default */
    void *scratch;            /* device, grown on demand by kc_scratch */
    size_t scratch_cap;       /* bytes */
    volatile int *err_host;   /* mapped pinned word: deferred KERN_ERANGE from kernels */
    int *err_dev;             /* the same word as kernels see it */
};

enum { CUDA_ATTN_SIMT = 0, CUDA_ATTN_TC = 1, CUDA_ATTN_MMA = 2 };

/* The op entry points (one per KERN_OPS entry), defined in the per-family .cu files. */
#define KERN_CUDA_DECL(name, params, doc) int kern_cuda_##name params;
KERN_OPS(KERN_CUDA_DECL)
#undef KERN_CUDA_DECL

/* Merges split-KV partials part[((qi * hq + h) * nsplit + s) * (hd + 2) + ...] = (o[hd], m, l) into
 * out[nq][hq][hd] and, when lse is not NULL, the rows' log-sum-exp into lse[nq][hq] (cuda_attention.cu; decode
 * attention and attention_mem). what names the launch in errors. */
int cuda_split_combine(kern_ctx *kc, float *out, float *lse, const float *part, int64_t nq, int64_t hq, int64_t hd,
                       int nsplit, const char *what);

/* Tensor-core flash prefill (cuda_attention_tc.cu: TF32 wmma, no lse; cuda_attention_mma.cu: bf16 mma.sync, lse
 * when not NULL): KERN_OK after a launch, KERN_ESHAPE when it does not apply. */
int cuda_attention_prefill_tc(kern_ctx *kc, float *out, const float *q, const float *k, const float *v, int nq,
                              int nkv, int q_pos0, int hq, int hkv, int hd, float scale);
int cuda_attention_prefill_mma(kern_ctx *kc, float *out, float *lse, const float *q, const float *k, const float *v,
                               int nq, int nkv, int q_pos0, int hq, int hkv, int hd, float scale);

/* ---- host-side helpers (cuda_backend.cu) */

/* 1 when kc is a CUDA context. */
static inline bool kc_ok(const kern_ctx *kc) { return kc && kc->magic == KERN_CUDA_MAGIC; }
/* Device scratch of at least `bytes`, valid until the next op on kc; NULL when out of memory. */
void *kc_scratch(kern_ctx *kc, size_t bytes);
/* KERN_OK, or KERN_EBACKEND when the last launch failed (the error is consumed). */
int kc_check_launch(const char *what);

/* ---- device-side helpers */

/* 16-bit float bits -> fp32 (exact), fp32 -> 16-bit bits (round to nearest even). */
__device__ __forceinline__ float mn_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
#ifdef MNEMO_CUDA_EMU
__device__ __forceinline__ float mn_f16_to_f32(uint16_t h) { return kern_f16_to_f32(h); }
__device__ __forceinline__ uint16_t mn_f32_to_bf16(float f) { return kern_f32_to_bf16(f); }
__device__ __forceinline__ uint16_t mn_f32_to_f16(float f) { return kern_f32_to_f16(f); }
#else
__device__ __forceinline__ float mn_f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t mn_f32_to_bf16(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
__device__ __forceinline__ uint16_t mn_f32_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }
#endif

/* Element i of a weight tensor stored as DT (a kern_dtype value), widened to fp32. */
template <int DT> __device__ __forceinline__ float mn_load_w(const void *w, int64_t i) {
    if (DT == KERN_F32) return static_cast<const float *>(w)[i];
    uint16_t h = static_cast<const uint16_t *>(w)[i];
    return DT == KERN_BF16 ? mn_bf16_to_f32(h) : mn_f16_to_f32(h);
}

/* float -> uint32 with the same order (larger float, larger image), and back: radix selection over scores. */
__device__ __forceinline__ uint32_t mn_order_bits(float f) {
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float mn_order_bits_inv(uint32_t u) {
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

/* Sum over the 32 lanes of a warp; every lane gets the result. */
__device__ __forceinline__ float mn_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float mn_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets the result.
 * red: __shared__ float[32]. Contains __syncthreads: call it from all threads. */
__device__ __forceinline__ float mn_block_sum(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = mn_warp_sum(v);
    __syncthreads(); /* red may still be read by a previous call */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.f;
    return mn_warp_sum(v);
}

__device__ __forceinline__ float mn_block_max(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = mn_warp_max(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : -INFINITY;
    return mn_warp_max(v);
}

static inline int64_t mn_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Dynamic shared memory of a split-combine kernel: nsplit weights, rounded up to whole 16-byte words plus one
 * spare word, because compute-sanitizer saw the combine loop read 12 bytes past an nsplit-float array on sm_90
 * (nsplit 1); the spare words are zeroed by the kernel, so such a read never meets garbage. */
static inline size_t mn_combine_smem(int64_t nsplit) { return (size_t)(mn_cdiv(nsplit, 4) * 4 + 4) * sizeof(float); }

#endif
