/*
 * kernels_cpu_paths.h — which optional instruction-set paths the CPU backend takes, for tests and benchmarks.
 * Each path is chosen at run time from the CPU's flags; a test turns one off to check the fallback on the same
 * machine, a benchmark to compare. The environment can also turn a path off before the first call:
 *   MNEMO_CPU_BF16DOT=0   bf16-weight prefill GEMMs widen to fp32 + OpenBLAS sgemm instead of vdpbf16ps tiles
 *   MNEMO_CPU_F32GEMM=0   fp32-weight prefill GEMMs use OpenBLAS sgemm instead of mnemo's AVX-512 FMA tiles
 */
#ifndef MNEMO_KERNELS_CPU_PATHS_H
#define MNEMO_KERNELS_CPU_PATHS_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when bf16-weight GEMMs (m > 8 rows) use AVX512_BF16 dot products: the CPU has them and they are allowed. */
int kern_cpu_bf16dot_available(void);
/* Allows (1) or forbids (0) that path from now on, whatever the environment said. Not thread-safe against
 * running ops: call it between them. */
void kern_cpu_bf16dot_allow(int on);

/* 1 when fp32-weight GEMMs (m > 8 rows) use mnemo's AVX-512 FMA tiles (cpu_gemm_f32.c) rather than OpenBLAS. */
int kern_cpu_f32gemm_available(void);
void kern_cpu_f32gemm_allow(int on);

#ifdef __cplusplus
}
#endif
#endif
