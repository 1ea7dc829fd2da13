/*
 * cpu_matmul.c — y[m,n] = x[m,k] . w[n,k]^T + beta*y, weights in their stored dtype (f32, bf16, f16).
 *
 * Two regimes:
 *   - few rows (decode, m <= GEMV_MAX_ROWS): memory-bound. Each weight row is streamed once, widened to fp32
 *     in registers (bf16 -> f32 is an exact shift) and dotted with all m activation rows. Threads split the
 *     output columns. This path decides decode speed, so it is measured against copy bandwidth in tests/bench.
 *   - many rows (prefill): compute-bound. bf16 weights on a CPU with AVX512_BF16: the CPU's bf16 dot products
 *     (cpu_gemm_bf16dot.c; activations rounded to bf16, fp32 sums, twice the fp32 FMA peak); fp32 weights on an
 *     AVX-512 CPU: mnemo's own FMA tiles (cpu_gemm_f32.c, faster than Debian's OpenBLAS there). Otherwise
 *     OpenBLAS sgemm; bf16/f16 weights are widened panel by panel into scratch first (O(n*k) work against
 *     O(m*n*k) flops) so activations keep full fp32 precision.
 * Decode keeps exact widening: it is bandwidth-bound, so rounding the activations would buy nothing.
 *
 * Backward twins (training), one GEMM per call (training batches have many rows): on an AVX-512 CPU mnemo's fp32
 * tiles with the operands read k-major (kern_cpu_gemm_f32_strided), else OpenBLAS sgemm:
 *   matmul_backward_x  dx[m,k] = dy[m,n] . w[n,k] + beta*dx; bf16/f16 weights widened as the tiles pack them (for
 *                      sgemm, and q8_0/q4_0 always, panel by panel: each panel of rows j0.. of w multiplies the
 *                      matching columns of dy, accumulating into dx).
 *   matmul_backward_w  dw[n,k] += dy[m,n]^T . x[m,k], fp32 (the master weights' or an adapter's gradient).
 */
#include <cblas.h>
#include <stdlib.h>

#include "cpu_gemm_bf16dot.h"
#include "cpu_gemm_f32.h"
#include "cpu_ops.h"
#include "quant.h"

#define GEMV_MAX_ROWS 8
#define PANEL_FLOATS (32u << 20) /* 128 MB of widened weights per sgemm call: fewer calls = fewer repacks of x */

#ifdef __AVX512F__
static inline __m512 load16(const void *w, kern_dtype dt, int64_t i) {
    if (dt == KERN_F32) return _mm512_loadu_ps((const float *)w + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    if (dt == KERN_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}
static inline __m512 load16_tail(const void *w, kern_dtype dt, int64_t i, __mmask16 m) {
    if (dt == KERN_F32) return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
    if (dt == KERN_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}
#define BF16_PAIR 32 /* bf16 weights per load in gemv_row_bf16 */
/* gemv_row_bf16 prefetches its row this far ahead: its seven uops per 64-byte line leave the out-of-order window
 * too few lines in flight to reach the read bandwidth on hardware prefetch alone (one thread on the Zen 5 here,
 * 2026-11-25: 78-84% of the read-only bound without, 85-89% at 1-2 KiB, 95-100% at 4 KiB, 86% at 16 KiB). f32 rows
 * (two uops a line) and the q8_0 tiles gained nothing from it. */
#define GEMV_PREFETCH 4096
#elif defined(__AVX2__) && defined(__FMA__)
static inline __m256 load8(const void *w, kern_dtype dt, int64_t i) {
    if (dt == KERN_F32) return _mm256_loadu_ps((const float *)w + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (dt == KERN_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}
#define BF16_PAIR 16
#endif

static inline float weight_at(const void *w, kern_dtype dt, int64_t i) {
    if (dt == KERN_F32) return ((const float *)w)[i];
    uint16_t h = ((const uint16_t *)w)[i];
    return dt == KERN_BF16 ? kern_bf16_to_f32(h) : kern_f16_to_f32(h);
}

/* One output column j for m (<= GEMV_MAX_ROWS) activation rows: out[r] = x[r,:] . wrow. */
static void gemv_column(float *out, const float *x, const void *wrow, kern_dtype dt, int64_t m, int64_t k) {
    int64_t i = 0;
#ifdef __AVX512F__
    __m512 acc[GEMV_MAX_ROWS];
    for (int64_t r = 0; r < m; r++) acc[r] = _mm512_setzero_ps();
    for (; i + 16 <= k; i += 16) {
        __m512 wv = load16(wrow, dt, i);
        for (int64_t r = 0; r < m; r++) acc[r] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + r * k + i), acc[r]);
    }
    if (i < k) {
        __mmask16 msk = (__mmask16)((1u << (k - i)) - 1u);
        __m512 wv = load16_tail(wrow, dt, i, msk);
        for (int64_t r = 0; r < m; r++)
            acc[r] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(msk, x + r * k + i), acc[r]);
        i = k;
    }
    for (int64_t r = 0; r < m; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 acc[GEMV_MAX_ROWS];
    for (int64_t r = 0; r < m; r++) acc[r] = _mm256_setzero_ps();
    for (; i + 8 <= k; i += 8) {
        __m256 wv = load8(wrow, dt, i);
        for (int64_t r = 0; r < m; r++) acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * k + i), acc[r]);
    }
    for (int64_t r = 0; r < m; r++) out[r] = kern_hsum256(acc[r]);
#else
    for (int64_t r = 0; r < m; r++) out[r] = 0.f;
#endif
    for (; i < k; i++) {
        float wv = weight_at(wrow, dt, i);
        for (int64_t r = 0; r < m; r++) out[r] += wv * x[r * k + i];
    }
}

#ifdef __AVX512F__
/* x split per 32-block into its 16 even then 16 odd elements, to match how gemv_row_bf16 unpacks weights. */
static void split_even_odd(float *xp, const float *x, int64_t k32) {
    for (int64_t i = 0; i < k32; i += 32)
        for (int j = 0; j < 16; j++) {
            xp[i + j] = x[i + 2 * j];
            xp[i + 16 + j] = x[i + 2 * j + 1];
        }
}

/* m == 1, bf16: one weight row read front to back. 32 weights per 64-byte load viewed as 16 dwords: the low
 * halves (even elements) become fp32 by a shift, the high halves (odd elements) by a mask, so no shuffle is
 * needed; xp is x split to match. Four accumulator pairs hide the FMA latency. */
static float gemv_row_bf16(const float *xp, const float *x, const uint16_t *r, int64_t k) {
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 e[4], o[4];
    for (int u = 0; u < 4; u++) e[u] = o[u] = _mm512_setzero_ps();
    int64_t i = 0;
#define BF16_STEP(u, off)                                                                                      \
    do {                                                                                                       \
        __m512i v = _mm512_loadu_si512((const void *)(r + i + (off)));                                         \
        __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), wo = _mm512_castsi512_ps(_mm512_and_si512(v, hi)); \
        e[u] = _mm512_fmadd_ps(we, _mm512_loadu_ps(xp + i + (off)), e[u]);                                    \
        o[u] = _mm512_fmadd_ps(wo, _mm512_loadu_ps(xp + i + (off) + 16), o[u]);                               \
    } while (0)
    for (; i + 128 <= k; i += 128) {
        _mm_prefetch((const char *)(r + i) + GEMV_PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *)(r + i) + GEMV_PREFETCH + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(r + i) + GEMV_PREFETCH + 128, _MM_HINT_T0);
        _mm_prefetch((const char *)(r + i) + GEMV_PREFETCH + 192, _MM_HINT_T0);
        BF16_STEP(0, 0);
        BF16_STEP(1, 32);
        BF16_STEP(2, 64);
        BF16_STEP(3, 96);
    }
    for (; i + 32 <= k; i += 32) BF16_STEP(0, 0);
#undef BF16_STEP
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(e[0], e[1]), _mm512_add_ps(e[2], e[3])),
                                                 _mm512_add_ps(_mm512_add_ps(o[0], o[1]), _mm512_add_ps(o[2], o[3]))));
    for (; i < k; i++) s += kern_bf16_to_f32(r[i]) * x[i];
    return s;
}

/* m == 1, f32 or f16: one weight row read front to back, four accumulators. */
static float gemv_row(const float *x, const void *r, kern_dtype dt, int64_t k) {
    __m512 a[4];
    for (int u = 0; u < 4; u++) a[u] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= k; i += 64)
        for (int u = 0; u < 4; u++)
            a[u] = _mm512_fmadd_ps(load16(r, dt, i + 16 * u), _mm512_loadu_ps(x + i + 16 * u), a[u]);
    for (; i + 16 <= k; i += 16) a[0] = _mm512_fmadd_ps(load16(r, dt, i), _mm512_loadu_ps(x + i), a[0]);
    if (i < k) {
        __mmask16 msk = (__mmask16)((1u << (k - i)) - 1u);
        a[1] = _mm512_fmadd_ps(load16_tail(r, dt, i, msk), _mm512_maskz_loadu_ps(msk, x + i), a[1]);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}
#elif defined(__AVX2__) && defined(__FMA__)
/* The AVX2 forms of the three above: 8 lanes, so x is split per 16-block and a tail is summed in scalar. */
static void split_even_odd(float *xp, const float *x, int64_t k16) {
    for (int64_t i = 0; i < k16; i += 16)
        for (int j = 0; j < 8; j++) {
            xp[i + j] = x[i + 2 * j];
            xp[i + 8 + j] = x[i + 2 * j + 1];
        }
}

static float gemv_row_bf16(const float *xp, const float *x, const uint16_t *r, int64_t k) {
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 e[4], o[4];
    for (int u = 0; u < 4; u++) e[u] = o[u] = _mm256_setzero_ps();
    int64_t i = 0;
#define BF16_STEP(u, off)                                                                                      \
    do {                                                                                                       \
        __m256i v = _mm256_loadu_si256((const __m256i *)(r + i + (off)));                                      \
        __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi)); \
        e[u] = _mm256_fmadd_ps(we, _mm256_loadu_ps(xp + i + (off)), e[u]);                                    \
        o[u] = _mm256_fmadd_ps(wo, _mm256_loadu_ps(xp + i + (off) + 8), o[u]);                                \
    } while (0)
    for (; i + 64 <= k; i += 64) {
        BF16_STEP(0, 0);
        BF16_STEP(1, 16);
        BF16_STEP(2, 32);
        BF16_STEP(3, 48);
    }
    for (; i + 16 <= k; i += 16) BF16_STEP(0, 0);
#undef BF16_STEP
    float s = kern_hsum256(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(e[0], e[1]), _mm256_add_ps(e[2], e[3])),
                                         _mm256_add_ps(_mm256_add_ps(o[0], o[1]), _mm256_add_ps(o[2], o[3]))));
    for (; i < k; i++) s += kern_bf16_to_f32(r[i]) * x[i];
    return s;
}

static float gemv_row(const float *x, const void *r, kern_dtype dt, int64_t k) {
    __m256 a[4];
    for (int u = 0; u < 4; u++) a[u] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= k; i += 32)
        for (int u = 0; u < 4; u++) a[u] = _mm256_fmadd_ps(load8(r, dt, i + 8 * u), _mm256_loadu_ps(x + i + 8 * u), a[u]);
    for (; i + 8 <= k; i += 8) a[0] = _mm256_fmadd_ps(load8(r, dt, i), _mm256_loadu_ps(x + i), a[0]);
    float s = kern_hsum256(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
    for (; i < k; i++) s += weight_at(r, dt, i) * x[i];
    return s;
}
#endif

static void matmul_gemv(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype dt, int64_t m,
                        int64_t n, int64_t k, float beta) {
    size_t es = kern_dtype_size(dt);
    int64_t n_done = 0; /* output columns the m == 1 path wrote */
#ifdef BF16_PAIR
    /* m == 1 (decode): each thread gets one contiguous run of rows and reads it front to back. A single
     * sequential stream per core is what the hardware prefetchers follow best: measured on the developers'
     * machine (2026-11-23, tests/bench/RESULTS.md) it reads at the read-only rate, where 8 interleaved row
     * streams lost 20-40%. */
    if (m == 1) {
        float *xp = dt == KERN_BF16 && k >= BF16_PAIR ? kern_cpu_scratch(kc, (size_t)k) : NULL;
        if (xp) split_even_odd(xp, x, k / BF16_PAIR * BF16_PAIR);
        n_done = n;
#pragma omp parallel for num_threads(kc->n_threads) schedule(static)
        for (int64_t j = 0; j < n; j++) {
            const char *r = (const char *)w + (size_t)j * (size_t)k * es;
            float o = xp ? gemv_row_bf16(xp, x, (const uint16_t *)r, k) : gemv_row(x, r, dt, k);
            y[j] = o + (beta != 0.f ? beta * y[j] : 0.f);
        }
    }
#endif
#pragma omp parallel for num_threads(kc->n_threads) schedule(static)
    for (int64_t j = n_done; j < n; j++) {
        float o[GEMV_MAX_ROWS];
        gemv_column(o, x, (const char *)w + (size_t)j * (size_t)k * es, dt, m, k);
        for (int64_t r = 0; r < m; r++) {
            float *yr = y + r * n + j;
            *yr = o[r] + (beta != 0.f ? beta * *yr : 0.f);
        }
    }
}

/* 16-bit weights go through sgemm as fp32 panels of at most PANEL_FLOATS: rows [j0, j0 + nb) of w[n, k]. */
static int64_t panel_rows(int64_t n, int64_t k) {
    int64_t rows = (int64_t)(PANEL_FLOATS / (size_t)k);
    if (rows < 16) rows = 16;
    return rows > n ? n : rows;
}

static void widen_panel(kern_ctx *kc, float *panel, const void *w, kern_dtype dt, int64_t j0, int64_t nb, int64_t k) {
    size_t row = kern_dtype_bytes(dt, k); /* q8_0/q4_0 rows too: kern_cpu_widen dequantizes them */
#pragma omp parallel for num_threads(kc->n_threads) schedule(static)
    for (int64_t j = 0; j < nb; j++)
        kern_cpu_widen(panel + j * k, (const char *)w + (size_t)(j0 + j) * row, dt, k);
}

static int matmul_gemm(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype dt, int64_t m, int64_t n,
                       int64_t k, float beta) {
    if (dt == KERN_F32) {
        int rc = kern_cpu_gemm_f32(kc, y, x, w, KERN_F32, m, n, k, beta);
        if (rc != KERN_EUNSUPPORTED) return rc;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, x, (int)k, w, (int)k,
                    beta, y, (int)n);
        return KERN_OK;
    }
    if (dt == KERN_BF16) {
        int rc = kern_cpu_gemm_bf16dot(kc, y, x, w, KERN_BF16, m, n, k, beta);
        if (rc != KERN_EUNSUPPORTED) return rc;
    }
    int64_t rows = panel_rows(n, k);
    float *panel = kern_cpu_scratch(kc, (size_t)rows * (size_t)k);
    if (!panel) return KERN_ENOMEM;
    for (int64_t j0 = 0; j0 < n; j0 += rows) {
        int64_t nb = n - j0 < rows ? n - j0 : rows;
        widen_panel(kc, panel, w, dt, j0, nb, k);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)nb, (int)k, 1.0f, x, (int)k, panel,
                    (int)k, beta, y + j0, (int)n);
    }
    return KERN_OK;
}

int kern_cpu_matmul(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype wdt, int64_t m, int64_t n,
                    int64_t k, float beta) {
    if (kern_dtype_is_quant(wdt)) return kern_cpu_matmul_quant(kc, y, x, w, wdt, m, n, k, beta); /* quant_matmul.c */
    if (m < 0 || n <= 0 || k <= 0 || (beta != 0.f && beta != 1.f)) return KERN_ESHAPE;
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return KERN_ESHAPE; /* BLAS takes int */
    if (m == 0) return KERN_OK;
    if (m <= GEMV_MAX_ROWS) {
        matmul_gemv(kc, y, x, w, wdt, m, n, k, beta);
        return KERN_OK;
    }
    return matmul_gemm(kc, y, x, w, wdt, m, n, k, beta);
}

int kern_cpu_matmul_backward_x(kern_ctx *kc, float *dx, const float *dy, const void *w, kern_dtype wdt, int64_t m,
                               int64_t n, int64_t k, float beta) {
    if (m < 0 || n <= 0 || k <= 0 || (beta != 0.f && beta != 1.f)) return KERN_ESHAPE;
    if (kern_dtype_is_quant(wdt) && k % kern_dtype_block(wdt)) return KERN_ESHAPE; /* dequantized panel by panel */
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return KERN_ESHAPE; /* BLAS takes int */
    if (m == 0) return KERN_OK;
    /* dx[m,k] = dy[m,n] . W[n,k]: W is B^T, k-major; 16-bit weights widened as the tiles pack them */
    int rc = kern_cpu_gemm_f32_strided(kc, dx, dy, n, 0, w, wdt, k, m, k, n, beta);
    if (rc != KERN_EUNSUPPORTED) return rc;
    if (wdt == KERN_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)k, (int)n, 1.0f, dy, (int)n, w, (int)k,
                    beta, dx, (int)k);
        return KERN_OK;
    }
    int64_t rows = panel_rows(n, k);
    float *panel = kern_cpu_scratch(kc, (size_t)rows * (size_t)k);
    if (!panel) return KERN_ENOMEM;
    for (int64_t j0 = 0; j0 < n; j0 += rows) {
        int64_t nb = n - j0 < rows ? n - j0 : rows;
        widen_panel(kc, panel, w, wdt, j0, nb, k);
        /* dx (+)= dy[:, j0:j0+nb] . panel[nb,k] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)k, (int)nb, 1.0f, dy + j0, (int)n, panel,
                    (int)k, j0 == 0 ? beta : 1.0f, dx, (int)k);
    }
    return KERN_OK;
}

int kern_cpu_matmul_backward_w(kern_ctx *kc, float *dw, const float *dy, const float *x, int64_t m, int64_t n,
                               int64_t k) {
    if (m < 0 || n <= 0 || k <= 0) return KERN_ESHAPE;
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return KERN_ESHAPE;
    if (m == 0) return KERN_OK;
    /* dW[n,k] += dy^T . x: A = dy^T (k-major: dy itself), B^T = x (k-major) */
    int rc = kern_cpu_gemm_f32_strided(kc, dw, dy, n, 1, x, KERN_F32, k, n, k, m, 1.0f);
    if (rc != KERN_EUNSUPPORTED) return rc;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)k, (int)m, 1.0f, dy, (int)n, x, (int)k, 1.0f, dw,
                (int)k);
    return KERN_OK;
}
