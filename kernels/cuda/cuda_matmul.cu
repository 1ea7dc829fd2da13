/*
 * cuda_matmul.cu — y[m, n] = x[m, k] . w[n, k]^T + beta * y (beta 0 or 1: 1 fuses a residual add). x and y are
 * fp32; w keeps its stored dtype (f32, bf16, f16) and the Hugging Face layout [out, in].
 *
 * Two regimes, as on the CPU:
 *   - m <= 8 (decode, small batched decode): memory-bound. gemv_kernel streams each weight row once with
 *     16-byte loads, widens it in registers (bf16 -> f32 is an exact shift) and dots it with all m activation
 *     rows in fp32. One warp owns R = 1, 2 or 4 weight rows (more rows per warp as m grows, so each activation
 *     value loaded from L1 serves R rows); for m >= 6, two warps share a row group and split k, so enough
 *     loads are in flight. tests/bench/bench_cuda.c compares its speed
 *     with the copy bandwidth.
 *   - m > 8 (prefill): compute-bound, cuBLAS.
 *       f32 weights: cublasGemmEx in CUBLAS_COMPUTE_32F (true fp32, no TF32).
 *       bf16/f16 weights, kern_cuda_gemm SPLIT (default): the activations are split x = x0 + x1 (+ x2) into
 *         parts in the weights' 16-bit type (x0 = round(x), x1 = round(x - x0), ...), then y = w.x0 + w.x1 (+ w.x2)
 *         with tensor-core GEMMs accumulating in fp32. A 16-bit x 16-bit product is exact in fp32; three bf16
 *         parts (8+8+8 significant bits) or two f16 parts (11+11) carry all of x's 24, so the result matches an
 *         fp32 GEMM over widened weights (two bf16 parts were measured at 1.3e-4 max |dlogit| on the bf16 fixture:
 *         not enough). Costs 3x (bf16) / 2x (f16) the tensor-core work of one GEMM, still far above fp32 SIMT.
 *       bf16/f16 weights, FAST: one GEMM on hi only. Each activation carries a relative rounding error up to
 *         2^-9 (bf16) / 2^-12 (f16): normalized MSE ~1e-6 / ~2e-8 against fp32. Opt-in (cuda.gemm=fast)
 *         because the whole-model fixtures require fp32-level agreement with transformers.
 *     f16 has a narrow range: an activation with |x| > 65504 would become Inf in the split, so the conversion
 *     kernel reports it as a deferred KERN_ERANGE instead of computing a silently wrong product.
 *
 * Backward twins (training), cuBLAS for every m:
 *   matmul_backward_x  dx[m,k] = dy[m,n] . w[n,k] + beta*dx: the same GEMM with w not transposed; bf16/f16
 *                      weights split dy exactly as the forward splits x (SPLIT / FAST per context).
 *   matmul_backward_w  dw[n,k] += dy[m,n]^T . x[m,k], fp32 in CUBLAS_COMPUTE_32F (no TF32).
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_common.cuh"

#define GEMV_MAX_ROWS 8
#define GEMV_WARPS 8 /* warps per block */

/* ---- kernels */

/* Eight consecutive weights from element i (16-byte aligned) widened to fp32. */
template <int DT> __device__ __forceinline__ void load8(const void *w, int64_t i, float *f) {
    if (DT == KERN_F32) {
        const float4 *p = reinterpret_cast<const float4 *>(static_cast<const float *>(w) + i);
        float4 a = p[0], b = p[1];
        f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
        f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    } else {
        uint4 u = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(w) + i);
        uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int q = 0; q < 4; q++) { /* little-endian: element 2q in the low half */
            if (DT == KERN_BF16) {
                f[2 * q] = __uint_as_float(words[q] << 16);
                f[2 * q + 1] = __uint_as_float(words[q] & 0xffff0000u);
            } else {
                f[2 * q] = mn_f16_to_f32((uint16_t)(words[q] & 0xffffu));
                f[2 * q + 1] = mn_f16_to_f32((uint16_t)(words[q] >> 16));
            }
        }
    }
}

template <int M> struct gemv_shape {
    static constexpr int R = M >= 4 ? 4 : M >= 2 ? 2 : 1; /* weight rows per warp */
};

/* y[r, j] (+)= sum_i x[r, i] * w[j, i] for r < M. A block's GEMV_WARPS warps form GEMV_WARPS / S groups; group g
 * of block b owns rows j0 .. j0+R-1, j0 = (b * GEMV_WARPS / S + g) * R, and its S warps split k (interleaved in
 * 256-element steps), their partial sums added in shared memory in a fixed order (deterministic). S > 1 puts more
 * warps, hence more loads, in flight when n is small (d x d and d x ff projections: 3200 rows on 132 SMs).
 * Lanes split k inside a warp. vec: k % 8 == 0 and w, x 16-byte aligned. */
template <int DT, int M, int S>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_kernel(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ w, int64_t n, int64_t k,
                int beta1, int vec) {
    constexpr int R = gemv_shape<M>::R;
    __shared__ float red[S > 1 ? GEMV_WARPS * R * M : 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % S;
    const int64_t j0 = ((int64_t)blockIdx.x * (GEMV_WARPS / S) + warp / S) * R;
    if (S == 1 && j0 >= n) return; /* whole warp: j0 does not depend on the lane (S > 1: the barrier below) */
    float acc[R][M];
#pragma unroll
    for (int q = 0; q < R; q++)
#pragma unroll
        for (int r = 0; r < M; r++) acc[q][r] = 0.f;

    if (j0 >= n) {
        /* S > 1: rows past the end, nothing to load; still reaches the barrier */
    } else if (vec) {
        /* several iterations in flight where registers allow (small m); for m > 2 the R*M accumulators and the
         * M*8 activation values already take ~100 registers */
#pragma unroll(M == 1 ? 4 : M == 2 ? 2 : 1)
        for (int64_t i = ((int64_t)part * 32 + lane) * 8; i < k; i += 256 * S) {
            float xv[M][8];
#pragma unroll
            for (int r = 0; r < M; r++) {
                const float4 *p = reinterpret_cast<const float4 *>(x + r * k + i);
                float4 a = p[0], b = p[1];
                xv[r][0] = a.x; xv[r][1] = a.y; xv[r][2] = a.z; xv[r][3] = a.w;
                xv[r][4] = b.x; xv[r][5] = b.y; xv[r][6] = b.z; xv[r][7] = b.w;
            }
#pragma unroll
            for (int q = 0; q < R; q++) {
                if (j0 + q >= n) break;
                float wv[8];
                load8<DT>(w, (j0 + q) * k + i, wv);
#pragma unroll
                for (int r = 0; r < M; r++)
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[q][r] = fmaf(wv[e], xv[r][e], acc[q][r]);
            }
        }
    } else {
        for (int64_t i = (int64_t)part * 32 + lane; i < k; i += 32 * S) {
            float xv[M];
#pragma unroll
            for (int r = 0; r < M; r++) xv[r] = x[r * k + i];
#pragma unroll
            for (int q = 0; q < R; q++) {
                if (j0 + q >= n) break;
                float wv = mn_load_w<DT>(w, (j0 + q) * k + i);
#pragma unroll
                for (int r = 0; r < M; r++) acc[q][r] = fmaf(wv, xv[r], acc[q][r]);
            }
        }
    }
#pragma unroll
    for (int q = 0; q < R; q++)
#pragma unroll
        for (int r = 0; r < M; r++) acc[q][r] = mn_warp_sum(acc[q][r]);
    if (S > 1) { /* every lane holds the warp's sums; part 0 adds the other parts' */
        if (lane == 0)
#pragma unroll
            for (int q = 0; q < R; q++)
#pragma unroll
                for (int r = 0; r < M; r++) red[(warp * R + q) * M + r] = acc[q][r];
        __syncthreads();
        if (part != 0 || j0 >= n) return;
#pragma unroll
        for (int q = 0; q < R; q++)
#pragma unroll
            for (int r = 0; r < M; r++)
#pragma unroll
                for (int t = 1; t < S; t++) acc[q][r] += red[((warp + t) * R + q) * M + r];
    }
    /* lane q*M + r writes y[r, j0+q] (R*M <= 32) */
#pragma unroll
    for (int q = 0; q < R; q++)
#pragma unroll
        for (int r = 0; r < M; r++)
            if (lane == q * M + r && j0 + q < n) {
                float *o = y + r * n + j0 + q;
                *o = acc[q][r] + (beta1 ? *o : 0.f);
            }
}

/* parts[p][i], p < np: part p of x[i] = sum of the parts, each rounded to the 16-bit type DT (KERN_BF16 or
 * KERN_F16); parts are `stride` elements apart. */
template <int DT>
__global__ void split16_kernel(uint16_t *__restrict__ parts, int np, int64_t stride, const float *__restrict__ x,
                               int64_t n, int *err) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        float r = x[i];
        if (DT == KERN_F16 && fabsf(r) > 65504.f && fabsf(r) <= 3.4e38f) *err = KERN_ERANGE; /* finite, too big */
        for (int p = 0; p < np; p++) {
            uint16_t h = DT == KERN_BF16 ? mn_f32_to_bf16(r) : mn_f32_to_f16(r);
            parts[p * stride + i] = h;
            float rest = r - (DT == KERN_BF16 ? mn_bf16_to_f32(h) : mn_f16_to_f32(h));
            r = isfinite(rest) || isnan(r) ? rest : 0.f; /* +-Inf stays in part 0 (inf - inf would be NaN) */
        }
    }
}

/* ---- launchers */

typedef void (*gemv_fn)(float *, const float *, const void *, int64_t, int64_t, int, int);

template <int DT, int S> static gemv_fn pick_gemv_s(int64_t m) {
    switch (m) {
    case 1: return gemv_kernel<DT, 1, S>;
    case 2: return gemv_kernel<DT, 2, S>;
    case 3: return gemv_kernel<DT, 3, S>;
    case 4: return gemv_kernel<DT, 4, S>;
    case 5: return gemv_kernel<DT, 5, S>;
    case 6: return gemv_kernel<DT, 6, S>;
    case 7: return gemv_kernel<DT, 7, S>;
    default: return gemv_kernel<DT, 8, S>;
    }
}

template <int DT> static gemv_fn pick_gemv(int64_t m, int s) {
    return s == 4 ? pick_gemv_s<DT, 4>(m) : s == 2 ? pick_gemv_s<DT, 2>(m) : pick_gemv_s<DT, 1>(m);
}

static int rows_per_warp(int64_t m) { return m >= 4 ? 4 : m >= 2 ? 2 : 1; }

/* Warps per row group (k split S ways). Measured on an H100 (test_ops --perf, 2026-11-22): for m <= 4 one warp
 * per row group streaming four 16-byte loads ahead is best on every LLaMA-3B shape (splitting k cost 3-25%);
 * for m = 8, two warps per group (more loads in flight for the R*M accumulators) were 15% faster.
 * The setting cuda.gemv_split=1|2|4 forces it (for tuning with test_ops --perf). */
static int gemv_split(const kern_ctx *kc, int64_t m) {
    if (kc->gemv_split) return kc->gemv_split;
    return m >= 6 ? 2 : 1;
}

static int matmul_gemv(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype dt, int64_t m, int64_t n,
                       int64_t k, float beta) {
    int s = gemv_split(kc, m);
    gemv_fn f = dt == KERN_F32 ? pick_gemv<KERN_F32>(m, s) : dt == KERN_BF16 ? pick_gemv<KERN_BF16>(m, s)
                                                                             : pick_gemv<KERN_F16>(m, s);
    int vec = k % 8 == 0 && ((uintptr_t)w & 15) == 0 && ((uintptr_t)x & 15) == 0;
    int64_t blocks = mn_cdiv(n, (int64_t)(GEMV_WARPS / s) * rows_per_warp(m));
    MN_LAUNCH(f, (unsigned)blocks, GEMV_WARPS * 32, 0, kc->stream)(y, x, w, n, k, beta != 0.f, vec);
    return kc_check_launch("matmul (gemv)");
}

static int blas_status(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return KERN_OK;
    fprintf(stderr, "mnemo cuda: %s: cuBLAS status %d\n", what, (int)s);
    return KERN_EBACKEND;
}

/* Row-major y[m,n] = x[m,k] . w[n,k]^T is column-major y^T[n,m] = (w^T)^T[n,k] . x^T[k,m]: A = w (op T, lda k),
 * B = x (op N, ldb k), C = y (ldc n). */
static int gemm_ex(kern_ctx *kc, float *y, const void *x, const void *w, cudaDataType t, int m, int n, int k,
                   float beta) {
    const float one = 1.f;
    return blas_status(cublasGemmEx(kc->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, t, k, x, t, k, &beta, y,
                                    CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "matmul (cublasGemmEx)");
}

static int matmul_gemm(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype dt, int64_t m, int64_t n,
                       int64_t k, float beta) {
    if (dt == KERN_F32) return gemm_ex(kc, y, x, w, CUDA_R_32F, (int)m, (int)n, (int)k, beta);
    int np = kc->gemm != KERN_CUDA_GEMM_SPLIT ? 1 : dt == KERN_BF16 ? 3 : 2;
    int64_t stride = ((m * k * (int64_t)sizeof(uint16_t) + 255) & ~(int64_t)255) / (int64_t)sizeof(uint16_t);
    uint16_t *parts = (uint16_t *)kc_scratch(kc, (size_t)(np * stride) * sizeof(uint16_t));
    if (!parts) return KERN_ENOMEM;
    int64_t blocks = mn_cdiv(m * k, 256);
    if (blocks > (int64_t)kc->sm_count * 16) blocks = (int64_t)kc->sm_count * 16;
    void (*conv)(uint16_t *, int, int64_t, const float *, int64_t, int *) =
        dt == KERN_BF16 ? split16_kernel<KERN_BF16> : split16_kernel<KERN_F16>;
    MN_LAUNCH(conv, (unsigned)blocks, 256, 0, kc->stream)(parts, np, stride, x, m * k, kc->err_dev);
    int rc = kc_check_launch("matmul (split)");
    cudaDataType t = dt == KERN_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    for (int p = 0; p < np && rc == KERN_OK; p++)
        rc = gemm_ex(kc, y, parts + p * stride, w, t, (int)m, (int)n, (int)k, p ? 1.f : beta);
    return rc;
}

int kern_cuda_matmul(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype wdt, int64_t m, int64_t n,
                     int64_t k, float beta) {
    if (!kc_ok(kc) || m < 0 || n <= 0 || k <= 0 || (beta != 0.f && beta != 1.f)) return KERN_ESHAPE;
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return KERN_ESHAPE; /* cuBLAS takes int */
    if (wdt != KERN_F32 && wdt != KERN_BF16 && wdt != KERN_F16) return KERN_ESHAPE;
    if (m == 0) return KERN_OK;
    if (m <= GEMV_MAX_ROWS) return matmul_gemv(kc, y, x, w, wdt, m, n, k, beta);
    return matmul_gemm(kc, y, x, w, wdt, m, n, k, beta);
}

/* ---- backward twins */

/* Row-major dx[m,k] = dy[m,n] . w[n,k] is column-major dx^T[k,m] = w^T[k,n] . dy^T[n,m]: A = w (op N, lda k),
 * B = dy (op N, ldb n), C = dx (ldc k). */
static int gemm_dx(kern_ctx *kc, float *dx, const void *dy, const void *w, cudaDataType t, int m, int n, int k,
                   float beta) {
    const float one = 1.f;
    return blas_status(cublasGemmEx(kc->blas, CUBLAS_OP_N, CUBLAS_OP_N, k, m, n, &one, w, t, k, dy, t, n, &beta, dx,
                                    CUDA_R_32F, k, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "matmul_backward_x (cublasGemmEx)");
}

int kern_cuda_matmul_backward_x(kern_ctx *kc, float *dx, const float *dy, const void *w, kern_dtype wdt, int64_t m,
                                int64_t n, int64_t k, float beta) {
    if (!kc_ok(kc) || m < 0 || n <= 0 || k <= 0 || (beta != 0.f && beta != 1.f)) return KERN_ESHAPE;
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return KERN_ESHAPE;
    if (wdt != KERN_F32 && wdt != KERN_BF16 && wdt != KERN_F16) return KERN_ESHAPE;
    if (m == 0) return KERN_OK;
    if (wdt == KERN_F32) return gemm_dx(kc, dx, dy, w, CUDA_R_32F, (int)m, (int)n, (int)k, beta);
    int np = kc->gemm != KERN_CUDA_GEMM_SPLIT ? 1 : wdt == KERN_BF16 ? 3 : 2;
    int64_t stride = ((m * n * (int64_t)sizeof(uint16_t) + 255) & ~(int64_t)255) / (int64_t)sizeof(uint16_t);
    uint16_t *parts = (uint16_t *)kc_scratch(kc, (size_t)(np * stride) * sizeof(uint16_t));
    if (!parts) return KERN_ENOMEM;
    int64_t blocks = mn_cdiv(m * n, 256);
    if (blocks > (int64_t)kc->sm_count * 16) blocks = (int64_t)kc->sm_count * 16;
    void (*conv)(uint16_t *, int, int64_t, const float *, int64_t, int *) =
        wdt == KERN_BF16 ? split16_kernel<KERN_BF16> : split16_kernel<KERN_F16>;
    MN_LAUNCH(conv, (unsigned)blocks, 256, 0, kc->stream)(parts, np, stride, dy, m * n, kc->err_dev);
    int rc = kc_check_launch("matmul_backward_x (split)");
    cudaDataType t = wdt == KERN_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    for (int p = 0; p < np && rc == KERN_OK; p++)
        rc = gemm_dx(kc, dx, parts + p * stride, w, t, (int)m, (int)n, (int)k, p ? 1.f : beta);
    return rc;
}

/* Row-major dw[n,k] += dy[m,n]^T . x[m,k] is column-major dw^T[k,n] += x^T[k,m] . dy[m,n]: A = x (op N, lda k),
 * B = dy seen column-major as [n,m] (op T, ldb n), C = dw (ldc k). */
int kern_cuda_matmul_backward_w(kern_ctx *kc, float *dw, const float *dy, const float *x, int64_t m, int64_t n,
                                int64_t k) {
    if (!kc_ok(kc) || m < 0 || n <= 0 || k <= 0) return KERN_ESHAPE;
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return KERN_ESHAPE;
    if (m == 0) return KERN_OK;
    const float one = 1.f;
    return blas_status(cublasGemmEx(kc->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)k, (int)n, (int)m, &one, x, CUDA_R_32F,
                                    (int)k, dy, CUDA_R_32F, (int)n, &one, dw, CUDA_R_32F, (int)k, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT),
                       "matmul_backward_w (cublasGemmEx)");
}
