/* cpu_gemm_f32.h — the AVX-512 fp32 prefill GEMM (cpu_gemm_f32.c), called by cpu_matmul.c. */
#ifndef MNEMO_CPU_GEMM_F32_H
#define MNEMO_CPU_GEMM_F32_H

#include <stdint.h>

#include "kernels.h"
#include "kernels_cpu_paths.h"

/* y[m,n] = x[m,k] . w[n,k]^T + beta*y (beta 0 or 1), all fp32; w fp32, or q8_0 / q4_0 (wdt; k a multiple of 32)
 * dequantized panel by panel. KERN_EUNSUPPORTED when the path is unavailable or wdt another dtype (caller falls
 * back), KERN_ENOMEM, KERN_ESHAPE. */
int kern_cpu_gemm_f32(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype wdt, int64_t m, int64_t n,
                      int64_t k, float beta);

/* y[m,n] = A . B^T + beta*y (beta 0 or 1), fp32 arithmetic, for the training backward: A [m,k] fp32 row-major with
 * row stride lda, or with a_kmajor given k-major (A[r,i] = a[i*lda + r]); B [n,k] given k-major (B[j,i] =
 * b[i*ldb + j]) in f32, bf16 or f16 (widened exactly as it is packed). KERN_EUNSUPPORTED without AVX-512 or for
 * another dtype (caller falls back), KERN_ENOMEM, KERN_ESHAPE. */
int kern_cpu_gemm_f32_strided(kern_ctx *kc, float *y, const float *a, int64_t lda, int a_kmajor, const void *b,
                              kern_dtype bdt, int64_t ldb, int64_t m, int64_t n, int64_t k, float beta);

#endif
