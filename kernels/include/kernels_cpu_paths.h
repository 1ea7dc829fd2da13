/*
 * kernels_cpu_paths.h — the CPU backend's GEMM precision per context, and which optional instruction-set paths
 * it takes (tests and benchmarks switch them off to check the fallback on the same machine, or to compare).
 *
 * How matmul treats bf16 weights when m > 8 (m <= 8, decode, always runs the exact fp32 GEMV):
 *   FAST (default):  on a CPU with AVX512_BF16, activations rounded once to bf16 (nearest even) and multiplied
 *                    on the CPU's bf16 dot products (vdpbf16ps), fp32 sums: ~2x the fp32 FMA peak; error per
 *                    output <= 2^-9 * sum|x w| (what llama.cpp and PyTorch's CPU bf16 paths do). Other CPUs: EXACT.
 *   EXACT:           weights widened to fp32, fp32 GEMM: fp32-accurate. Training contexts use it (gradients are
 *                    checked against fp32 references), as do the whole-model tests.
 * The kernel setting cpu.gemm=fast|exact chooses it per context (as cuda.gemm does on the GPU). fp32 weights are
 * exact either way. Attention (activations against activations) is fp32 in both modes.
 *
 * cpu.f32gemm=off (or kern_cpu_f32gemm_allow(0), for the whole process) makes fp32-weight GEMMs use OpenBLAS
 * sgemm instead of mnemo's AVX-512 FMA tiles.
 */
#ifndef MNEMO_KERNELS_CPU_PATHS_H
#define MNEMO_KERNELS_CPU_PATHS_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KERN_CPU_GEMM_EXACT = 0, KERN_CPU_GEMM_FAST = 1 } kern_cpu_gemm;
/* kc must come from kern_cpu_ctx_new (the CPU backend's ctx_new). KERN_OK, or KERN_ESHAPE for another mode. */
int kern_cpu_set_gemm(kern_ctx *kc, kern_cpu_gemm mode);

/* 1 when the CPU has AVX512_BF16 (FAST contexts then use it for bf16 weights). */
int kern_cpu_bf16dot_available(void);

/* 1 when fp32-weight GEMMs (m > 8 rows) use mnemo's AVX-512 FMA tiles (cpu_gemm_f32.c) rather than OpenBLAS:
 * the CPU has AVX-512 and the path is allowed. allow(0/1) overrides the environment from then on; not
 * thread-safe against running ops: call it between them. */
int kern_cpu_f32gemm_available(void);
void kern_cpu_f32gemm_allow(int on);

/* Which instruction set the blocked attention's tiles use (cpu_attn_tiles.h): the best this CPU has (default), or a
 * lower one (tests run every path: AVX-512, AVX2, scalar). Returns the path now in force (one the CPU lacks is
 * lowered). Not thread-safe against running ops. kern_cpu_attn_exp is that path's vector exp, for tests: error
 * <= 2 ulp on [-87.3, 88], exactly 0 below -87.33 (-inf included), NaN kept. */
typedef enum { KERN_APATH_SCALAR = 0, KERN_APATH_AVX2 = 1, KERN_APATH_AVX512 = 2, KERN_APATH_BEST = 3 } kern_apath;
kern_apath kern_cpu_attn_path(kern_apath want);
const char *kern_apath_name(kern_apath p);
void kern_cpu_attn_exp(float *y, const float *x, int64_t n);
/* attention and attention_mem take the blocked tiles from nq new queries on (default 16; fewer: a per-row loop, cheaper
 * than packing the cache for one decode token). Tests set 1 to run the tiles on every shape; < 1 restores 16. */
void kern_cpu_attn_tile_min(int nq);

/* q8_0 / q4_0 weights, by rows m (all on AVX-512 CPUs; elsewhere the integer tiles do every m):
 *   m < KERN_CPU_QGEMM_MIN_ROWS (decode): the integer tiles (quant_dot_*.c), activations rounded to int8 per block;
 *   FAST, VNNI: the int8 GEMM on weights packed per call (quant_gemm_vnni.c): the same arithmetic as the tiles
 *               (exact integer sums, fp32 scaling per block, what llama.cpp does), at GEMM speed;
 *   EXACT, m >= KERN_CPU_QPANEL_F32_MIN_ROWS: each weight panel dequantized into the fp32 FMA tiles (exact
 *               dequantized weights, fp32 activations; quant_panel.c; with those tiles disallowed,
 *               cpu.f32gemm=off, the int8 paths); fewer rows as FAST;
 *   FAST without VNNI (the integer path forced below it, or such a CPU): panels dequantized to bf16 for the bf16
 *               dot-product tiles (AVX512_BF16, m >= KERN_CPU_QPANEL_BF16_MIN_ROWS: weights and activations
 *               rounded to bf16, error <= 2^-8 * sum|x w|), else the fp32 panels from KERN_CPU_QPANEL_F32_MIN_ROWS.
 * The other quantized types (q6_K, q4_1, q5_0, q5_1, q2_K, q3_K, q5_K) have no int8 GEMM: on AVX-512 their FAST
 * prefill takes the bf16 panels (or fp32 without AVX512_BF16) from the same thresholds, their decode the tiles.
 * The thresholds are where each path overtook the integer tiles (bench_gemm_quant, tests/bench/RESULTS.md).
 * One activation row of q4_0 / q4_1 / q5_0 / q5_1 / q8_0 on AVX-512 VBMI takes the decode GEMV (quant_gemv_vbmi.c)
 * instead of the tiles. cpu.qpanel=off (a context) or kern_cpu_qpanel_allow(0) (the process) keeps every m on the integer
 * tiles; allow has kern_cpu_f32gemm_allow's threading rule. */
#define KERN_CPU_QGEMM_MIN_ROWS 8
#define KERN_CPU_QPANEL_BF16_MIN_ROWS 16
#define KERN_CPU_QPANEL_F32_MIN_ROWS 64
int kern_cpu_qpanel_available(void);
void kern_cpu_qpanel_allow(int on);

#ifdef __cplusplus
}
#endif
#endif
