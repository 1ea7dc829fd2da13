/*
 * cpu_gemm_f32.c — prefill GEMM for fp32 weights on AVX-512 FMA: y[m,n] = x[m,k] . w[n,k]^T + beta*y, all fp32
 * (exact to fp32 summation order, like sgemm).
 *
 * Why not OpenBLAS: Debian's 0.3.21 sgemm reached 45-60% of the AVX-512 FMA peak on the prefill shapes of this
 * machine (AMD EPYC, Zen 5 class, 2 threads; tests/bench/bench_gemm_bf16), where llama.cpp's own tiles run
 * f32 prefill ~1.5x faster. The same layout as cpu_gemm_bf16dot.c, with single floats for pairs:
 *   - x copied once into tiles of MR rows, k-major (the MR floats of one k adjacent), shared by the threads;
 *   - w packed per (K block) x (panel of NR = 64 columns) into [k][column] floats (one 64-byte load = 16
 *     columns of one k);
 *   - a 6 x 64 tile of y in 24 zmm accumulators: per k, 4 loads of w and 6 broadcasts of x for 24 FMAs;
 *   - K blocks outermost, then the thread's panels (threads split n in whole panels), then rows by MR.
 * q8_0 / q4_0 weights (EXACT contexts' prefill, or FAST ones without AVX512_BF16) take the same tiles: their
 * panels are dequantized straight into this layout (quant_panel.c; exact: the same values as kern_dequantize_row),
 * K blocks then a whole number of 32-weight blocks.
 * The training backward runs on the same tiles (kern_cpu_gemm_f32_strided): its operands come k-major (dx = dy . W
 * reads W as B^T, dW += dy^T . x reads dy as A^T and x as B^T), which only changes how A is tiled and B packed
 * (a row copy instead of a gather), measured 2026-11-25 against OpenBLAS's Haswell sgemm that ran it before.
 * Compiled for AVX-512F by function attributes and chosen at run time (kern_cpu_f32gemm_available); the caller
 * falls back to OpenBLAS elsewhere.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm_f32.h"
#include "cpu_ops.h"
#include "quant.h"

#define NQ 4         /* zmm of 16 columns per panel */
#define NR (16 * NQ) /* columns per packed panel */
#define MR 6         /* rows per microkernel tile: MR x NQ accumulators of 32 zmm */
#define KC 1024      /* most k per K block (blocks split evenly): a packed panel of 256 KB, in L2 */

static int allowed = 1; /* kern_cpu_f32gemm_allow (the process); a context's cpu.f32gemm is checked by the caller */

int kern_cpu_f32gemm_available(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return allowed && __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

void kern_cpu_f32gemm_allow(int on) {
    allowed = on != 0;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define F32GEMM __attribute__((target("avx512f")))

/* A [m, k] -> a[t][i][r] = A[t*MR + r, i] (rows past m are 0). A is x row-major (row stride lda), or with a_kmajor
 * stored k-major: A[r, i] = x[i * lda + r] (the backward's dy^T). */
static void tile_rows(float *a, const float *x, int64_t lda, int a_kmajor, int64_t m, int64_t k, int threads) {
    int64_t tiles = (m + MR - 1) / MR;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        float *at = a + t * k * MR;
        int rows = m - t * MR < MR ? (int)(m - t * MR) : MR;
        if (a_kmajor) {
            for (int64_t i = 0; i < k; i++) {
                const float *xi = x + i * lda + t * MR;
                for (int r = 0; r < MR; r++) at[i * MR + r] = r < rows ? xi[r] : 0.f;
            }
            continue;
        }
        for (int r = 0; r < MR; r++) {
            const float *xr = x + (t * MR + r) * lda;
            if (r >= rows)
                for (int64_t i = 0; i < k; i++) at[i * MR + r] = 0.f;
            else
                for (int64_t i = 0; i < k; i++) at[i * MR + r] = xr[i];
        }
    }
}

/* Panel of columns [j0, j0 + NR) (zeros past n), k [i0, i0 + kc): b[i * NR + c] = w[j0 + c, i0 + i]. k-major:
 * each step writes 256 contiguous bytes and reads 4 from each of 64 rows. */
static void pack_panel(float *b, const float *w, int64_t n, int64_t k, int64_t j0, int64_t i0, int64_t kc) {
    int cols = n - j0 < NR ? (int)(n - j0) : NR;
    const float *w0 = w + j0 * k + i0;
    for (int64_t i = 0; i < kc; i++) {
        float *bp = b + i * NR;
        for (int c = 0; c < cols; c++) bp[c] = w0[(int64_t)c * k + i];
        for (int c = cols; c < NR; c++) bp[c] = 0.f;
    }
}

/* The same panel from a B stored k-major, w[i * ldb + j] in f32, bf16 or f16 (the backward's weights and
 * activations): row copies, 16-bit ones widened on the way. */
static void pack_panel_kmajor(float *b, const void *w, kern_dtype wdt, int64_t ldb, int64_t n, int64_t j0, int64_t i0,
                              int64_t kc) {
    int cols = n - j0 < NR ? (int)(n - j0) : NR;
    const size_t es = kern_dtype_size(wdt);
    for (int64_t i = 0; i < kc; i++) {
        float *bp = b + i * NR;
        const char *src = (const char *)w + ((size_t)(i0 + i) * (size_t)ldb + (size_t)j0) * es;
        if (wdt == KERN_F32)
            memcpy(bp, src, (size_t)cols * sizeof(float));
        else
            kern_cpu_widen(bp, src, wdt, cols);
        for (int c = cols; c < NR; c++) bp[c] = 0.f;
    }
}

/* y tile [mr, NR] (+)= a[mr rows, kc] . b; `add` 1 adds to y, 0 overwrites; `mask` the columns that exist. */
F32GEMM static inline __attribute__((always_inline)) void tile(int mr, const float *a, const float *b, int64_t kc,
                                                                float *y, int64_t ldy, int add, uint64_t mask) {
    __m512 acc[MR][NQ];
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < NQ; q++) acc[r][q] = _mm512_setzero_ps();
    for (int64_t i = 0; i < kc; i++) {
        const float *bp = b + i * NR;
        __m512 bq[NQ];
        for (int q = 0; q < NQ; q++) bq[q] = _mm512_loadu_ps(bp + 16 * q);
        for (int r = 0; r < mr; r++) {
            __m512 av = _mm512_set1_ps(a[i * MR + r]);
            for (int q = 0; q < NQ; q++) acc[r][q] = _mm512_fmadd_ps(av, bq[q], acc[r][q]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < NQ; q++) {
            __mmask16 mk = (__mmask16)(mask >> (16 * q));
            float *yq = y + r * ldy + 16 * q;
            if (!mk) continue;
            __m512 v = add ? _mm512_add_ps(acc[r][q], _mm512_maskz_loadu_ps(mk, yq)) : acc[r][q];
            _mm512_mask_storeu_ps(yq, mk, v);
        }
}

/* Rows [0, m) of one panel; a: the K block's first k of row tile 0, tiles k * MR floats apart. */
F32GEMM static void panel_rows(const float *a, int64_t k, const float *b, int64_t kc, float *y, int64_t ldy, int64_t m,
                               int add, uint64_t mask) {
    int64_t i = 0;
    for (; i + MR <= m; i += MR) tile(MR, a + i * k, b, kc, y + i * ldy, ldy, add, mask);
#define TAIL(r)                                                                                                \
    case r: tile(r < MR ? r : MR, a + i * k, b, kc, y + i * ldy, ldy, add, mask); break;
    switch (m - i) { /* m - i < MR */
        TAIL(5) TAIL(4) TAIL(3) TAIL(2) TAIL(1)
    default: break;
    }
#undef TAIL
}

/* The one GEMM behind both entry points: y[m,n] (+)= A . B^T, A [m,k] and B [n,k] as the flags say. */
static int gemm_f32(kern_ctx *kc, float *y, const float *x, int64_t lda, int a_kmajor, const void *w, kern_dtype wdt,
                    int64_t ldb, int b_kmajor, int64_t m, int64_t n, int64_t k, float beta) {
    const int quant = kern_dtype_is_quant(wdt);
    /* a GEMM of a few hundred microseconds or less stays on one thread: a parallel region costs more there, and
     * far more when a thread waits for a core (small test models on a busy machine); results are the same bits */
    int threads = (double)m * (double)n * (double)k < 4e6 ? 1 : kc->n_threads;
    int64_t n_panels = (n + NR - 1) / NR;
    size_t a_floats = (size_t)((m + MR - 1) / MR * MR) * (size_t)k, b_floats = (size_t)KC * NR;
    size_t a_pad = (a_floats + 15) & ~(size_t)15; /* scratch: x tiled, then one packed panel per thread */
    float *s = kern_cpu_scratch(kc, a_pad + b_floats * (size_t)threads);
    if (!s) return KERN_ENOMEM;
    tile_rows(s, x, lda, a_kmajor, m, k, threads);
#pragma omp parallel num_threads(threads)
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t pa = n_panels * id / nt, pb = n_panels * (id + 1) / nt;
        float *b = s + a_pad + b_floats * (size_t)id;
        int64_t blocks = (k + KC - 1) / KC, kcb = (k + blocks - 1) / blocks; /* even K blocks */
        if (quant) kcb = (kcb + KERN_QBLOCK - 1) / KERN_QBLOCK * KERN_QBLOCK; /* whole quant blocks, still <= KC */
        for (int64_t i0 = 0; i0 < k; i0 += kcb) {
            int64_t kcs = k - i0 < kcb ? k - i0 : kcb;
            int add = i0 > 0 || beta != 0.f;
            for (int64_t pn = pa; pn < pb; pn++) {
                int64_t j0 = pn * NR, cols = n - j0 < NR ? n - j0 : NR;
                uint64_t mask = cols == 64 ? ~0ull : ((1ull << cols) - 1);
                if (quant)
                    kq_panel_f32(b, NR, w, wdt, n, k, j0, i0, kcs);
                else if (b_kmajor)
                    pack_panel_kmajor(b, w, wdt, ldb, n, j0, i0, kcs);
                else
                    pack_panel(b, (const float *)w, n, k, j0, i0, kcs);
                panel_rows(s + i0 * MR, k, b, kcs, y + j0, n, m, add, mask);
            }
        }
    }
    return KERN_OK;
}

int kern_cpu_gemm_f32(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype wdt, int64_t m, int64_t n,
                      int64_t k, float beta) {
    if (!kc->f32gemm || !kern_cpu_f32gemm_available() || (wdt != KERN_F32 && !kern_dtype_is_quant(wdt)))
        return KERN_EUNSUPPORTED;
    if (m <= 0 || n <= 0 || k <= 0 || (kern_dtype_is_quant(wdt) && k % kern_dtype_block(wdt))) return KERN_ESHAPE;
    return gemm_f32(kc, y, x, k, 0, w, wdt, k, 0, m, n, k, beta);
}

int kern_cpu_gemm_f32_strided(kern_ctx *kc, float *y, const float *a, int64_t lda, int a_kmajor, const void *b,
                              kern_dtype bdt, int64_t ldb, int64_t m, int64_t n, int64_t k, float beta) {
    if (!kc->f32gemm || !kern_cpu_f32gemm_available() || (bdt != KERN_F32 && bdt != KERN_BF16 && bdt != KERN_F16))
        return KERN_EUNSUPPORTED;
    if (m <= 0 || n <= 0 || k <= 0) return KERN_ESHAPE;
    return gemm_f32(kc, y, a, lda, a_kmajor, b, bdt, ldb, 1, m, n, k, beta);
}
#else
int kern_cpu_gemm_f32(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype wdt, int64_t m, int64_t n,
                      int64_t k, float beta) {
    return KERN_EUNSUPPORTED;
}

int kern_cpu_gemm_f32_strided(kern_ctx *kc, float *y, const float *a, int64_t lda, int a_kmajor, const void *b,
                              kern_dtype bdt, int64_t ldb, int64_t m, int64_t n, int64_t k, float beta) {
    return KERN_EUNSUPPORTED;
}
#endif
