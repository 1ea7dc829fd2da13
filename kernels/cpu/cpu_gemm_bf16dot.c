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
 *   - x is rounded once into bf16 pairs, kp = ceil(k/2) per row (a zero pads an odd k), stored by tiles of MR rows
 *     pair-major (the MR dwords of one pair adjacent), shared by the threads.
 *   - w is packed per (K block of KCP pairs) x (panel of NR = 64 columns) into [pair][column] dwords, each dword
 *     the two bf16 weights (2p, 2p+1) of one column: one 64-byte load gives vdpbf16ps 16 columns of one pair.
 *   - the microkernel keeps an MR x NR = 6 x 64 tile of y in 24 zmm accumulators; per pair it loads 4 B vectors
 *     and broadcasts one x dword per row (24 dot products, 10 loads).
 *   - loops: K blocks outermost (each thread's slice of x[:, block] stays in L2 across its panels), then the
 *     thread's panels (threads split the n columns in whole panels, no write sharing), then rows by MR.
 * q8_0 / q4_0 weights take the same tiles: their panels are dequantized straight into this layout (quant_panel.c,
 * each weight rounded to bf16, so the bound above doubles: 2^-8 * sum_k |x_k w_k|), K blocks then a whole number
 * of 32-weight blocks.
 * Compiled for AVX512_BF16 by function attributes and taken at run time by FAST contexts on CPUs that have it
 * (kernels_cpu_paths.h), so a build for an older CPU keeps this file and simply never takes it: the caller falls
 * back to widening + sgemm, as it does for EXACT contexts.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm_bf16dot.h"
#include "cpu_ops.h"
#include "quant.h"

#define NQ 4          /* zmm of 16 columns per panel */
#define NR (16 * NQ)  /* columns per packed panel */
#define MR 6          /* rows per microkernel tile: MR x NQ accumulators of 32 zmm */
#define KCP 2048 /* most pairs per K block (blocks split evenly): fewer passes over y measured faster than an L1-sized panel */

int kern_cpu_bf16dot_available(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BF16DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* x[m,k] fp32 -> bf16 pairs in row tiles: a[t][p][r] = the dword of x[t*MR + r, 2p..2p+1] (round to nearest
 * even; an odd k's last high half and the rows past m are 0), so the microkernel's MR broadcasts per pair read
 * one contiguous 24 bytes. */
BF16DOT static void round_rows(uint32_t *a, const float *x, int64_t m, int64_t k, int64_t kp, int threads) {
    int64_t tiles = (m + MR - 1) / MR;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        uint32_t *at = a + t * kp * MR;
        for (int r = 0; r < MR; r++) {
            int64_t row = t * MR + r;
            if (row >= m) {
                for (int64_t p = 0; p < kp; p++) at[p * MR + r] = 0;
                continue;
            }
            const float *xr = x + row * k;
            int64_t p = 0;
            for (; 2 * p + 32 <= k; p += 16) { /* 32 floats -> 16 dwords, scattered MR apart */
                __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + 2 * p + 16), _mm512_loadu_ps(xr + 2 * p));
                _mm512_i32scatter_epi32(at + p * MR + r, _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10,
                                        9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(MR)), (__m512i)h, 4);
            }
            for (; p < kp; p++) {
                uint32_t lo = kern_f32_to_bf16(xr[2 * p]), hi = 2 * p + 1 < k ? kern_f32_to_bf16(xr[2 * p + 1]) : 0;
                at[p * MR + r] = lo | hi << 16;
            }
        }
    }
}

/* Panel of columns [j0, j0 + NR) (zeros past n), pairs [p0, p0 + kcp): b[p * NR + c] = pair p of column c.
 * Pair-major: each step writes 256 contiguous bytes and reads 4 from each of 64 rows (64 lines in L1). */
static void pack_panel(uint32_t *b, const uint16_t *w, int64_t n, int64_t k, int64_t j0, int64_t p0, int64_t kcp) {
    int cols = n - j0 < NR ? (int)(n - j0) : NR;
    int64_t full = 2 * (p0 + kcp) > k ? kcp - 1 : kcp; /* odd k: the last pair has one weight */
    const uint16_t *w0 = w + j0 * k + 2 * p0;
    for (int64_t p = 0; p < full; p++) {
        uint32_t *bp = b + p * NR;
        const uint16_t *wp = w0 + 2 * p;
        for (int c = 0; c < cols; c++) memcpy(bp + c, wp + (int64_t)c * k, 4);
        for (int c = cols; c < NR; c++) bp[c] = 0;
    }
    if (full < kcp)
        for (int c = 0; c < NR; c++) b[full * NR + c] = c < cols ? w0[(int64_t)c * k + 2 * full] : 0;
}

/* y tile [mr, NR] (+)= a[mr rows, kcp pairs] . b: `add` 1 adds to y, 0 overwrites it; `mask` the columns
 * (of 64) that exist. mr is a constant at each call site so the tile is fully unrolled. */
BF16DOT static inline __attribute__((always_inline)) void tile(int mr, const uint32_t *a, const uint32_t *b,
                                                                int64_t kcp, float *y, int64_t ldy, int add,
                                                                uint64_t mask) {
    __m512 acc[MR][NQ];
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < NQ; q++) acc[r][q] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kcp; p++) {
        const uint32_t *bp = b + p * NR;
        __m512bh bq[NQ];
        for (int q = 0; q < NQ; q++) bq[q] = (__m512bh)_mm512_loadu_si512(bp + 16 * q);
        for (int r = 0; r < mr; r++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[p * MR + r]);
            for (int q = 0; q < NQ; q++) acc[r][q] = _mm512_dpbf16_ps(acc[r][q], av, bq[q]);
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

/* Rows [0, m) of one panel: full MR tiles, then the remainder with its own unrolled tile. a: the K block's first
 * pair of row tile 0; tiles are kp * MR dwords apart. */
BF16DOT static void panel_rows(const uint32_t *a, int64_t kp, const uint32_t *b, int64_t kcp, float *y, int64_t ldy,
                               int64_t m, int add, uint64_t mask) {
    int64_t i = 0;
    for (; i + MR <= m; i += MR) tile(MR, a + i * kp, b, kcp, y + i * ldy, ldy, add, mask);
#define TAIL(r)                                                                                                \
    case r: tile(r < MR ? r : MR, a + i * kp, b, kcp, y + i * ldy, ldy, add, mask); break;
    switch (m - i) { /* m - i < MR: the cases r >= MR never run */
        TAIL(13) TAIL(12) TAIL(11) TAIL(10) TAIL(9) TAIL(8) TAIL(7) TAIL(6) TAIL(5) TAIL(4) TAIL(3) TAIL(2) TAIL(1)
    default: break;
    }
#undef TAIL
}

int kern_cpu_gemm_bf16dot(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype wdt, int64_t m,
                          int64_t n, int64_t k, float beta) {
    if (!kc->gemm_fast || !kern_cpu_bf16dot_available()) return KERN_EUNSUPPORTED;
    if (wdt != KERN_BF16 && !kern_dtype_is_quant(wdt)) return KERN_EUNSUPPORTED;
    if (m <= 0 || n <= 0 || k <= 0 || (kern_dtype_is_quant(wdt) && k % kern_dtype_block(wdt))) return KERN_ESHAPE;
    const int quant = kern_dtype_is_quant(wdt);
    int threads = kc->n_threads;
    int64_t kp = (k + 1) / 2, n_panels = (n + NR - 1) / NR;
    size_t a_words = (size_t)((m + MR - 1) / MR * MR) * (size_t)kp, b_words = (size_t)KCP * NR;
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
        int64_t blocks = (kp + KCP - 1) / KCP, kcb = (kp + blocks - 1) / blocks; /* even K blocks */
        if (quant) kcb = (kcb + 15) / 16 * 16; /* whole quant blocks (16 pairs); k % 32 == 0 keeps the last whole */
        for (int64_t p0 = 0; p0 < kp; p0 += kcb) {
            int64_t kcp = kp - p0 < kcb ? kp - p0 : kcb;
            int add = p0 > 0 || beta != 0.f;
            for (int64_t pn = pa; pn < pb; pn++) {
                int64_t j0 = pn * NR, cols = n - j0 < NR ? n - j0 : NR;
                uint64_t mask = cols == 64 ? ~0ull : ((1ull << cols) - 1);
                if (quant)
                    kq_panel_bf16(b, NR, w, wdt, n, k, j0, p0, kcp);
                else
                    pack_panel(b, (const uint16_t *)w, n, k, j0, p0, kcp);
                panel_rows(a + p0 * MR, kp, b, kcp, y + j0, n, m, add, mask);
            }
        }
    }
    return KERN_OK;
}
#else
int kern_cpu_gemm_bf16dot(kern_ctx *kc, float *y, const float *x, const void *w, kern_dtype wdt, int64_t m,
                          int64_t n, int64_t k, float beta) {
    return KERN_EUNSUPPORTED;
}
#endif
