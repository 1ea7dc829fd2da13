/* cpu_gemm_bf16dot.h — the AVX512_BF16 prefill GEMM (cpu_gemm_bf16dot.c), called by cpu_matmul.c. */
#ifndef MNEMO_CPU_GEMM_BF16DOT_H
#define MNEMO_CPU_GEMM_BF16DOT_H

#include <stdint.h>

#include "kernels.h"
#include "kernels_cpu_paths.h"

/* y[m,n] = x[m,k] . w[n,k]^T + beta*y (beta 0 or 1), w bf16, q8_0 or q4_0 (wdt; quantized: k a multiple of 32,
 * each panel dequantized to bf16), x rounded to bf16 for the products (error bounds in the .c file).
 * KERN_EUNSUPPORTED when the CPU lacks AVX512_BF16, kc is EXACT or wdt is another dtype (caller falls back),
 * KERN_ENOMEM, KERN_ESHAPE. */
int kern_cpu_gemm_bf16dot(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype wdt, int64_t m,
                          int64_t n, int64_t k, float beta);

#endif
