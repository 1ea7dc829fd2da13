/*
 * quant_matmul.c — y[m,n] = x[m,k] . w[n,k]^T + beta*y for block-quantized weights (every kern_dtype_is_quant
 * type) on the CPU, decode and prefill alike:
 * x is quantized once per call to int8 blocks (kq_quantize_act), then tiles of KQ_TILE weight rows x KQ_TILE
 * activation rows are computed by the best tile kernel this CPU runs (AVX-512 VNNI, AVX2, scalar; tests force each).
 *   - decode (m small): threads take contiguous runs of weight rows, each row streamed once from memory.
 *   - prefill: activation rows go in chunks of ACT_CHUNK (their int8 blocks stay in L2) and each thread sweeps its
 *     weight rows over the chunk, so every weight block loaded feeds KQ_TILE activation rows from registers.
 * Weights stay in the mapped GGUF file: nothing is dequantized, so memory traffic is 1.06 (q8_0), 0.56 (q4_0,
 * q4_K) or 0.82 (q6_K) bytes per weight.
 * On AVX-512 CPUs more rows take GEMMs instead (kernels_cpu_paths.h has the rule): from KERN_CPU_QGEMM_MIN_ROWS
 * the int8 VNNI GEMM on per-call packed weight panels (quant_gemm_vnni.c: the tiles above convert and scale per
 * weight row x activation row every two blocks, the GEMM per 16 columns x row once a block); in EXACT contexts
 * the weights dequantized panel by panel into the fp32 GEMM (cpu_gemm_f32.c, quant_panel.c), and without VNNI
 * into the bf16 one (cpu_gemm_bf16dot.c).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm_bf16dot.h"
#include "cpu_gemm_f32.h"
#include "cpu_ops.h"
#include "quant.h"

#define ACT_CHUNK 64 /* activation rows per sweep over the weights: 64 x k bytes of int8 blocks */

static atomic_int g_path = -1; /* kern_qpath in force; -1 until first asked (contexts may ask at once) */

static kern_qpath best_path(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni"))
        return kq_gemv_vbmi_available() ? KERN_QPATH_AVX512_VBMI : KERN_QPATH_AVX512_VNNI;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return KERN_QPATH_AVX2;
#endif
    return KERN_QPATH_SCALAR;
}

kern_qpath kern_cpu_quant_path(kern_qpath want) {
    kern_qpath best = best_path(), p = want > best ? best : want;
    atomic_store(&g_path, (int)p);
    return p;
}

static int g_panel_allowed = 1; /* kern_cpu_qpanel_allow (the process); a context's cpu.qpanel is checked apart */

int kern_cpu_qpanel_available(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return g_panel_allowed && __builtin_cpu_supports("avx512f"); /* both panel packers are AVX-512 code */
#else
    return 0;
#endif
}

void kern_cpu_qpanel_allow(int on) {
    g_panel_allowed = on != 0;
}

const char *kern_qpath_name(kern_qpath p) {
    switch (p) {
    case KERN_QPATH_SCALAR: return "scalar";
    case KERN_QPATH_AVX2: return "avx2";
    case KERN_QPATH_AVX512_VNNI: return "avx512_vnni";
    case KERN_QPATH_AVX512_VBMI: return "avx512_vbmi";
    case KERN_QPATH_BEST: return "best";
    }
    return "?";
}

static kq_tile_fn tile_for(kern_dtype dt) {
    int path = atomic_load(&g_path);
    if (path < 0) path = (int)kern_cpu_quant_path(KERN_QPATH_BEST);
    kq_tile_fn f = NULL;
    if (path >= KERN_QPATH_AVX512_VNNI) f = kq_tile_avx512vnni(dt);
    if (!f && path >= KERN_QPATH_AVX2) f = kq_tile_avx2(dt);
    return f ? f : kq_tile_scalar(dt);
}

/* One tile into y: y[r, j] = tile + beta * y[r, j]. */
static void run_tile(kq_tile_fn f, float *y, const void *w, size_t wrb, const kq_act *a, int64_t j0, int nw, int64_t r0,
                     int nx, int64_t n, int64_t nb, float beta) {
    float t[KQ_TILE * KQ_TILE];
    f(t, KQ_TILE, (const char *)w + (size_t)j0 * wrb, wrb, nw, a, r0, nx, nb);
    for (int j = 0; j < nx; j++)
        for (int i = 0; i < nw; i++) {
            float *yr = y + (r0 + j) * n + j0 + i;
            *yr = t[j * KQ_TILE + i] + (beta != 0.f ? *yr : 0.f);
        }
}

int kern_cpu_matmul_quant(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype dt, int64_t m, int64_t n,
                          int64_t k, float beta) {
    if (m < 0 || n <= 0 || k <= 0 || k % kern_dtype_block(dt) || (beta != 0.f && beta != 1.f)) return KERN_ESHAPE;
    if (m == 0) return KERN_OK;
    int path = atomic_load(&g_path);
    if (path < 0) path = (int)kern_cpu_quant_path(KERN_QPATH_BEST);
    int panels = kc->qpanel && kern_cpu_qpanel_available(), rc = KERN_EUNSUPPORTED;
    /* EXACT prefill: the exact dequantized weights on the fp32 tiles */
    if (panels && !kc->gemm_fast && m >= KERN_CPU_QPANEL_F32_MIN_ROWS)
        rc = kern_cpu_gemm_f32(kc, y, x, w, dt, m, n, k, beta);
    if (rc != KERN_EUNSUPPORTED) return rc;
    /* the int8 GEMM packs q8_0 / q4_0 / q4_K; the other types take the float panels */
    int vnni_gemm = panels && path >= KERN_QPATH_AVX512_VNNI && m >= KERN_CPU_QGEMM_MIN_ROWS &&
                    (dt == KERN_Q8_0 || dt == KERN_Q4_0 || dt == KERN_Q4_K);
    if (panels && !vnni_gemm && m >= KERN_CPU_QPANEL_BF16_MIN_ROWS) { /* no VNNI: the float panels */
        rc = kern_cpu_gemm_bf16dot(kc, y, x, w, dt, m, n, k, beta); /* FAST contexts on AVX512_BF16 */
        if (rc == KERN_EUNSUPPORTED && m >= KERN_CPU_QPANEL_F32_MIN_ROWS)
            rc = kern_cpu_gemm_f32(kc, y, x, w, dt, m, n, k, beta);
        if (rc != KERN_EUNSUPPORTED) return rc;
    }
    int64_t nb = k / KERN_QBLOCK;
    /* scratch: int8 blocks (m*k bytes, rounded to floats), scales and sums (m*nb each), then for the VNNI GEMM one
     * packed weight panel per thread (64-byte aligned) */
    size_t qfl = ((size_t)m * (size_t)k + 63) / 64 * 16, afl = (qfl + 2 * (size_t)m * (size_t)nb + 15) / 16 * 16;
    size_t pfl = vnni_gemm ? (kq_gemm_vnni_panel_bytes(k) + 63) / 64 * 16 : 0;
    /* the decode GEMV's activation (kq_gemv_act): k permuted bytes, then nb floats */
    size_t gfl_x = ((size_t)k + 63) / 64 * 16, gfl = m == 1 ? gfl_x + ((size_t)nb + 15) / 16 * 16 : 0;
    size_t extra = pfl * (size_t)kc->n_threads > gfl ? pfl * (size_t)kc->n_threads : gfl;
    float *s = kern_cpu_scratch(kc, afl + extra);
    if (!s) return KERN_ENOMEM;
    kq_act a = {.qs = (int8_t *)s, .d = s + qfl, .sum = (int32_t *)(s + qfl + (size_t)m * (size_t)nb)};
    kq_quantize_act(&a, x, m, k, kc->n_threads);
    if (m == 1 && path >= KERN_QPATH_AVX512_VBMI && kq_gemv_vbmi_supports(dt)) { /* decode */
        kq_gemv_act g = {.xp = (int8_t *)(s + afl), .c = s + afl + gfl_x};
        kq_gemv_prepare(&g, &a, dt, nb);
        kq_gemv_vbmi(y, w, dt, n, nb, &g, beta, kc->n_threads);
        return KERN_OK;
    }
    if (vnni_gemm) {
        rc = kq_gemm_vnni(y, &a, w, dt, m, n, k, beta, s + afl, kc->n_threads);
        if (rc != KERN_EUNSUPPORTED) return rc;
    }
    kq_tile_fn f = tile_for(dt);
    size_t wrb = kern_dtype_bytes(dt, k);
    int64_t ntiles = (n + KQ_TILE - 1) / KQ_TILE;
    for (int64_t c0 = 0; c0 < m; c0 += ACT_CHUNK) {
        int64_t c1 = c0 + ACT_CHUNK < m ? c0 + ACT_CHUNK : m;
#pragma omp parallel for num_threads(kc->n_threads) schedule(static)
        for (int64_t t = 0; t < ntiles; t++) {
            int64_t j0 = t * KQ_TILE;
            int nw = (int)(n - j0 < KQ_TILE ? n - j0 : KQ_TILE);
            for (int64_t r0 = c0; r0 < c1; r0 += KQ_TILE) {
                int nx = (int)(c1 - r0 < KQ_TILE ? c1 - r0 : KQ_TILE);
                run_tile(f, y, w, wrb, &a, j0, nw, r0, nx, n, nb, beta);
            }
        }
    }
    return KERN_OK;
}
