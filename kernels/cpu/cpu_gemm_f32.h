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

#endif
