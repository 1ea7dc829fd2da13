/*
 * cuda_topk.cu — exact kNN by inner product on the GPU (the search of FoT memory attention, with the memory keys
 * already on the device): cuBLAS GEMM for the scores, then a k-selection kernel. Semantics as the CPU reference
 * (kernels/cpu/cpu_topk.c): best first, ties to the lower id, -1 / -inf past n_keys.
 *
 *   1. Keys in bf16/f16 are widened once into scratch (exact), so the GEMM is a true fp32 one (CUBLAS_COMPUTE_32F,
 *      no TF32): the scores differ from the CPU's only by summation order.
 *   2. Scores S[rows][n_keys] for a chunk of queries (bounded scratch: ~256 MB), one cublasGemmEx.
 *   3. Selection, one block per query: a radix select on the scores' order-preserving 32-bit images finds the
 *      k-th largest value T in four 8-bit passes (a shared histogram per pass over the rows that match the prefix
 *      found so far); then one pass in id order takes every score > T and the lowest-id scores == T until k are
 *      taken (a block-wide ordered scan, so ties go to the lower id), and a bitonic sort in shared memory puts
 *      the k (<= 1024) in order. Memory traffic: the scores are read five times.
 * Limits (KERN_ESHAPE): k <= 1024, hd <= 65535, n_keys < 2^31.
 */
#include <math.h>
#include <stdio.h>

#include "cuda_common.cuh"

#define TOPK_THREADS 256
#define TOPK_WARPS (TOPK_THREADS / 32)
#define TOPK_MAX 1024
#define SCORES_BYTES ((size_t)256 << 20)

template <int DT> __global__ void widen_kernel(float *dst, const void *src, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = mn_load_w<DT>(src, i);
}

/* "a better than b": higher score, or the same score and a lower id. */
__device__ __forceinline__ bool better(float sa, int64_t ia, float sb, int64_t ib) {
    return sa > sb || (sa == sb && ia < ib);
}

__global__ void __launch_bounds__(TOPK_THREADS)
    select_kernel(int64_t *ids, float *scores, int64_t ldo, const float *S, int64_t n, int k) {
    __shared__ uint32_t hist[256];
    __shared__ uint32_t sh_prefix, sh_need, sh_gt, sh_eq_base;
    __shared__ uint32_t warp_eq[TOPK_WARPS];
    __shared__ float ss[TOPK_MAX];
    __shared__ int64_t si[TOPK_MAX];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float *s = S + (int64_t)blockIdx.x * n;
    const int kk = (int64_t)k < n ? k : (int)n; /* rows to select */

    /* 1. the kk-th largest image T, 8 bits at a time from the top */
    uint32_t prefix = 0, mask = 0, need = (uint32_t)kk;
    for (int shift = 24; kk > 0 && shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += TOPK_THREADS) hist[b] = 0;
        __syncthreads();
        for (int64_t j = tid; j < n; j += TOPK_THREADS) {
            uint32_t u = mn_order_bits(s[j]);
            if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            uint32_t above = 0;
            int b = 255;
            for (; b > 0 && above + hist[b] < need; b--) above += hist[b];
            sh_prefix = prefix | ((uint32_t)b << shift);
            sh_need = need - above;
        }
        __syncthreads();
        prefix = sh_prefix;
        need = sh_need; /* how many rows equal to the prefix (so far) are still to take */
        mask |= 255u << shift;
    }

    /* 2. gather in id order: all > T, the first `need` == T */
    if (tid == 0) sh_gt = sh_eq_base = 0;
    const uint32_t n_gt = (uint32_t)kk - need;
    __syncthreads();
    for (int64_t base = 0; kk > 0 && base < n; base += TOPK_THREADS) {
        int64_t j = base + tid;
        uint32_t u = j < n ? mn_order_bits(s[j]) : 0u;
        bool gt = j < n && u > prefix, eq = j < n && u == prefix;
        unsigned vote = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) warp_eq[warp] = (uint32_t)__popc(vote);
        __syncthreads();
        uint32_t before = sh_eq_base;
        for (int w = 0; w < warp; w++) before += warp_eq[w];
        before += (uint32_t)__popc(vote & ((1u << lane) - 1u));
        if (gt) {
            uint32_t at = atomicAdd(&sh_gt, 1u);
            ss[at] = s[j], si[at] = j;
        } else if (eq && before < need) {
            ss[n_gt + before] = s[j], si[n_gt + before] = j;
        }
        __syncthreads();
        if (tid == 0)
            for (int w = 0; w < TOPK_WARPS; w++) sh_eq_base += warp_eq[w];
        __syncthreads();
    }

    /* 3. bitonic sort of the kk taken (padded to a power of two), best first */
    int p2 = 1;
    while (p2 < kk) p2 <<= 1;
    for (int i = kk + tid; i < p2; i += TOPK_THREADS) ss[i] = -INFINITY, si[i] = INT64_MAX;
    __syncthreads();
    for (int size = 2; size <= p2; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = tid; i < p2; i += TOPK_THREADS) {
                int j = i ^ stride;
                if (j > i) {
                    bool first_better = ((i & size) == 0); /* ascending "badness" in this half */
                    bool swap = first_better ? better(ss[j], si[j], ss[i], si[i]) : better(ss[i], si[i], ss[j], si[j]);
                    if (swap) {
                        float ts = ss[i];
                        int64_t ti = si[i];
                        ss[i] = ss[j], si[i] = si[j], ss[j] = ts, si[j] = ti;
                    }
                }
            }
            __syncthreads();
        }
    }
    int64_t *oi = ids + (int64_t)blockIdx.x * ldo;
    float *os = scores ? scores + (int64_t)blockIdx.x * ldo : NULL;
    for (int i = tid; i < k; i += TOPK_THREADS) {
        oi[i] = i < kk ? si[i] : -1;
        if (os) os[i] = i < kk ? ss[i] : -INFINITY;
    }
}

static int blas_status(cublasStatus_t st) {
    if (st == CUBLAS_STATUS_SUCCESS) return KERN_OK;
    fprintf(stderr, "mnemo cuda: topk_ip (cublasGemmEx): cuBLAS status %d\n", (int)st);
    return KERN_EBACKEND;
}

int kern_cuda_topk_ip(kern_ctx *kc, int64_t *ids, float *scores, int64_t ldo, const float *q, int64_t nq, int64_t ldq,
                      const void *keys, kern_dtype dt, int64_t n_keys, int64_t hd, int64_t k) {
    if (!kc_ok(kc) || nq < 0 || n_keys < 0 || hd <= 0 || k <= 0 || ldo < k || ldq < hd || !ids || (nq > 0 && !q) ||
        (n_keys > 0 && !keys))
        return KERN_ESHAPE;
    if (dt != KERN_F32 && dt != KERN_BF16 && dt != KERN_F16) return KERN_ESHAPE;
    if (k > TOPK_MAX || hd > 65535 || n_keys > INT32_MAX || ldq > INT32_MAX) return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    /* rows of scores per chunk, and scratch = widened keys (16-bit dtypes) + the chunk's scores */
    const size_t wide = dt == KERN_F32 ? 0 : (((size_t)n_keys * (size_t)hd * sizeof(float) + 255) & ~(size_t)255);
    int64_t rows = n_keys > 0 ? (int64_t)(SCORES_BYTES / ((size_t)n_keys * sizeof(float))) : nq;
    if (rows < 1) rows = 1;
    if (rows > nq) rows = nq;
    if (rows > 65535) rows = 65535;
    char *scratch = (char *)kc_scratch(kc, wide + (size_t)rows * (size_t)(n_keys > 0 ? n_keys : 1) * sizeof(float));
    if (!scratch) return KERN_ENOMEM;
    const float *kf = (const float *)keys;
    if (wide) {
        int64_t n = n_keys * hd;
        unsigned blocks = (unsigned)mn_cdiv(n, (int64_t)256);
        if (dt == KERN_BF16) MN_LAUNCH(widen_kernel<KERN_BF16>, blocks, 256, 0, kc->stream)((float *)scratch, keys, n);
        else MN_LAUNCH(widen_kernel<KERN_F16>, blocks, 256, 0, kc->stream)((float *)scratch, keys, n);
        int rc = kc_check_launch("topk_ip (widen)");
        if (rc != KERN_OK) return rc;
        kf = (const float *)scratch;
    }
    float *S = (float *)(scratch + wide);
    const float one = 1.f, zero = 0.f;
    for (int64_t r0 = 0; r0 < nq; r0 += rows) {
        int64_t m = nq - r0 < rows ? nq - r0 : rows;
        if (n_keys > 0) { /* row-major S[m][n_keys] = q[m][hd] . keys[n_keys][hd]^T (see cuda_matmul.cu) */
            int rc = blas_status(cublasGemmEx(kc->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_keys, (int)m, (int)hd, &one,
                                              kf, CUDA_R_32F, (int)hd, q + r0 * ldq, CUDA_R_32F, (int)ldq, &zero, S,
                                              CUDA_R_32F, (int)n_keys, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            if (rc != KERN_OK) return rc;
        }
        MN_LAUNCH(select_kernel, (unsigned)m, TOPK_THREADS, 0, kc->stream)(ids + r0 * ldo,
                                                                            scores ? scores + r0 * ldo : NULL, ldo, S,
                                                                            n_keys, (int)k);
        int rc = kc_check_launch("topk_ip (select)");
        if (rc != KERN_OK) return rc;
    }
    return KERN_OK;
}
