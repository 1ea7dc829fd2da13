/*
 * cpu_gemm_bf16dot.c — prefill GEMM for bf16 weights on the CPU's own bf16 dot products (AVX512_BF16
 * vdpbf16ps): y[m,n] = x[m,k] . w[n,k]^T + beta*y, w bf16 [n,k] as stored, x fp32 rounded to bf16 (nearest even)
 * for the products, every sum in fp32.
 *
 * Precision: each product x*w is exact in fp32 once x is rounded, so the only new error is x's rounding,
 * |dx| <= 2^-9 |x|: |y - y_f32| <= 2^-9 * sum_k |x_k w_k| (+ fp32 summation error). test_kernels_cpu checks
 * 2^-8 * sum|x w| elementwise against an fp64 reference. This is what llama.cpp's and PyTorch's bf16 CPU paths do.
 *
 * Layout (BLIS-style, one level):
 *   - x is rounded once into bf16 rows of kp = ceil(k/2) pairs (a zero pads an odd k), shared by the threads.
 *   - w is packed per (K block of KCP pairs) x (panel of NR = 64 columns) into [pair][column] dwords, each dword
 *     the two bf16 weights (2p, 2p+1) of one column: one 64-byte load gives vdpbf16ps 16 columns of one pair.
 *   - the microkernel keeps an MR x NR = 6 x 64 tile of y in 24 zmm accumulators; per pair it loads 4 B vectors
 *     and broadcasts one x dword per row (24 dot products, 10 loads).
 *   - loops: K blocks outermost (each thread's slice of x[:, block] stays in L2 across its panels), then the
 *     thread's panels (threads split the n columns in whole panels, no write sharing), then rows by MR.
 * Compiled for AVX512_BF16 by function attributes and chosen at run time (kern_cpu_bf16dot_available), so a
 * build for an older CPU keeps this file and simply never takes it: the caller falls back to widening + sgemm.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm_bf16dot.h"
#include "cpu_ops.h"

#define NR 64   /* columns per packed panel: 4 zmm of 16 fp32 */
#define MR 6    /* rows per microkernel tile: 6 x 4 = 24 accumulators of 32 zmm */
#define KCP 256 /* pairs (512 k) per K block: a packed panel is 64 KB, in L2 beside the x block */

static int allowed = -1; /* -1: not decided yet; else 0/1 (MNEMO_CPU_BF16DOT=0 in the environment disables) */

int kern_cpu_bf16dot_available(void) {
    if (allowed < 0) {
        const char *e = getenv("MNEMO_CPU_BF16DOT");
        allowed = !(e && e[0] == '0');
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return allowed && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}

void kern_cpu_bf16dot_allow(int on) {
    allowed = on != 0;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BF16DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* x[m,k] fp32 -> a[m,kp] dwords of two bf16 each (round to nearest even; an odd k's last high half is 0). */
BF16DOT static void round_rows(uint32_t *a, const float *x, int64_t m, int64_t k, int64_t kp, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < m; r++) {
        const float *xr = x + r * k;
        uint16_t *ar = (uint16_t *)(a + r * kp);
        int64_t i = 0;
        for (; i + 16 <= k; i += 16)
            _mm256_storeu_si256((__m256i *)(ar + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(xr + i)));
        for (; i < k; i++) ar[i] = kern_f32_to_bf16(xr[i]);
        if (k & 1) ar[k] = 0;
    }
}

/* Panel of columns [j0, j0 + NR) (zeros past n), pairs [p0, p0 + kcp): b[p * NR + c] = pair p of column c. */
static void pack_panel(uint32_t *b, const uint16_t *w, int64_t n, int64_t k, int64_t j0, int64_t p0, int64_t kcp) {
    for (int c = 0; c < NR; c++) {
        if (j0 + c >= n) {
            for (int64_t p = 0; p < kcp; p++) b[p * NR + c] = 0;
            continue;
        }
        const uint16_t *wr = w + (j0 + c) * k + 2 * p0;
        int64_t full = kcp;
        if (2 * (p0 + kcp) > k) full = kcp - 1; /* odd k: the last pair has one weight */
        for (int64_t p = 0; p < full; p++) {
            uint32_t v;
            memcpy(&v, wr + 2 * p, 4);
            b[p * NR + c] = v;
        }
        if (full < kcp) b[full * NR + c] = wr[2 * full];
    }
}

/* y tile [mr, NR] (+)= a[mr rows, kcp pairs] . b: `add` 1 adds to y, 0 overwrites it; `mask` the columns
 * (of 64) that exist. mr is a constant at each call site so the tile is fully unrolled. */
BF16DOT static inline __attribute__((always_inline)) void tile(int mr, const uint32_t *a, int64_t lda,
                                                                const uint32_t *b, int64_t kcp, float *y,
                                                                int64_t ldy, int add, uint64_t mask) {
    __m512 acc[MR][4];
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < 4; q++) acc[r][q] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kcp; p++) {
        const uint32_t *bp = b + p * NR;
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp), b1 = (__m512bh)_mm512_loadu_si512(bp + 16);
        __m512bh b2 = (__m512bh)_mm512_loadu_si512(bp + 32), b3 = (__m512bh)_mm512_loadu_si512(bp + 48);
        for (int r = 0; r < mr; r++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r * lda + p]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
            acc[r][2] = _mm512_dpbf16_ps(acc[r][2], av, b2);
            acc[r][3] = _mm512_dpbf16_ps(acc[r][3], av, b3);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < 4; q++) {
            __mmask16 mk = (__mmask16)(mask >> (16 * q));
            float *yq = y + r * ldy + 16 * q;
            if (!mk) continue;
            __m512 v = add ? _mm512_add_ps(acc[r][q], _mm512_maskz_loadu_ps(mk, yq)) : acc[r][q];
            _mm512_mask_storeu_ps(yq, mk, v);
        }
}

/* Rows [0, m) of one panel: full MR tiles, then the remainder with its own unrolled tile. */
BF16DOT static void panel_rows(const uint32_t *a, int64_t lda, const uint32_t *b, int64_t kcp, float *y, int64_t ldy,
                               int64_t m, int add, uint64_t mask) {
    int64_t i = 0;
    for (; i + MR <= m; i += MR) tile(MR, a + i * lda, lda, b, kcp, y + i * ldy, ldy, add, mask);
    switch (m - i) {
    case 5: tile(5, a + i * lda, lda, b, kcp, y + i * ldy, ldy, add, mask); break;
    case 4: tile(4, a + i * lda, lda, b, kcp, y + i * ldy, ldy, add, mask); break;
    case 3: tile(3, a + i * lda, lda, b, kcp, y + i * ldy, ldy, add, mask); break;
    case 2: tile(2, a + i * lda, lda, b, kcp, y + i * ldy, ldy, add, mask); break;
    case 1: tile(1, a + i * lda, lda, b, kcp, y + i * ldy, ldy, add, mask); break;
    default: break;
    }
}

int kern_cpu_gemm_bf16dot(kern_ctx *kc, float *y, const float *x, const uint16_t *w, int64_t m, int64_t n,
                          int64_t k, float beta) {
    if (!kern_cpu_bf16dot_available()) return KERN_EUNSUPPORTED;
    if (m <= 0 || n <= 0 || k <= 0) return KERN_ESHAPE;
    int threads = kc->n_threads;
    int64_t kp = (k + 1) / 2, n_panels = (n + NR - 1) / NR;
    size_t a_words = (size_t)m * (size_t)kp, b_words = (size_t)KCP * NR;
    /* scratch (in 4-byte words): x rounded, then one packed panel per thread, each 64-byte aligned */
    size_t a_pad = (a_words + 15) & ~(size_t)15;
    uint32_t *s = (uint32_t *)kern_cpu_scratch(kc, a_pad + b_words * (size_t)threads);
    if (!s) return KERN_ENOMEM;
    uint32_t *a = s;
    round_rows(a, x, m, k, kp, threads);
#pragma omp parallel num_threads(threads)
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t pa = n_panels * id / nt, pb = n_panels * (id + 1) / nt;
        uint32_t *b = s + a_pad + b_words * (size_t)id;
        for (int64_t p0 = 0; p0 < kp; p0 += KCP) {
            int64_t kcp = kp - p0 < KCP ? kp - p0 : KCP;
            int add = p0 > 0 || beta != 0.f;
            for (int64_t pn = pa; pn < pb; pn++) {
                int64_t j0 = pn * NR, cols = n - j0 < NR ? n - j0 : NR;
                uint64_t mask = cols == 64 ? ~0ull : ((1ull << cols) - 1);
                pack_panel(b, w, n, k, j0, p0, kcp);
                panel_rows(a + p0, kp, b, kcp, y + j0, n, m, add, mask);
            }
        }
    }
    return KERN_OK;
}
#else
int kern_cpu_gemm_bf16dot(kern_ctx *kc, float *y, const float *x, const uint16_t *w, int64_t m, int64_t n,
                          int64_t k, float beta) {
    return KERN_EUNSUPPORTED;
}
#endif
