/*
 * quant_gemm_vnni.c — prefill GEMM for q8_0 / q4_0 weights on AVX-512 VNNI: y[m,n] = x[m,k] . w[n,k]^T + beta*y
 * with x already rounded to int8 per 32-block (kq_quantize_act: the integer tiles' contract, exact integer sums,
 * fp32 scaling per block). vpdpbusd does 64 multiply-adds per instruction where vdpbf16ps does 32, so on q4_0 /
 * q8_0 this can pass the bf16 GEMM the dequantized panels feed (quant_panel.c), as llama.cpp's repacked q4_0 does.
 *
 * Layout (as cpu_gemm_bf16dot.c, with 4-byte quads for pairs):
 *   - w is packed per call, per thread, per panel of NR = 32 columns over the whole k (k bytes per column + its
 *     scales, in L2): p[(b*8 + t) * NR + c] = the dword of weights 32b + 4t .. +3 of column c as unsigned bytes
 *     (q8_0: q + 128, by flipping the sign bit; q4_0: the raw nibble q + 8), and s[b * NR + c] its block's scale.
 *     16 columns x 2 blocks are one 16 x 16 dword transpose in registers (avx512_transpose16.h), stored whole.
 *   - the microkernel keeps MR x NR = 6 x 32 outputs in 12 fp32 accumulators and, per block, 12 int32 ones started
 *     at minus the offset's share (-128 or -8 times the activation block's sum), so 8 vpdpbusd per row and
 *     16-column group give the exact integer dot product; then one convert and one FMA by d_w * d_x.
 *   - loops: threads split n in whole panels; per panel, rows by MR.
 * q4_K packs the same way: its nibbles as they are (q, 0..15), the sub-block's scale d * sc as s, and its min
 * dmin * m as a third array, taken off once per block and row as min * d_x * sum(x) (one FMA per 16 columns);
 * its scales are unpacked once per super-block and column. q6_K is not packed here: its scales are per 16
 * elements, so a block takes two passes of 4 quads, each started at -32 x a 16-element activation sum and
 * scaled on its own; measured (one thread, k256 shape) that was 0.9x the bf16 panels at 512 rows (1.06x at 128),
 * so q6_K takes the float panels.
 * Compiled with target attributes; quant_matmul.c calls it only on CPUs with AVX-512 VNNI.
 */
#include <omp.h>
#include <string.h>

#include "quant.h"

#define NR 32 /* columns per panel: two zmm of 16 */
#define MR 6  /* rows per microkernel tile */

size_t kq_gemm_vnni_panel_bytes(int64_t k) {
    int64_t nb = k / KERN_QBLOCK;
    return (size_t)nb * (8 * NR * 4 + 2 * NR * 4); /* quads, scales, mins (q4_K) */
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "avx512_transpose16.h"
#include "quant_kpair_avx512.h"

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c")))
#define VNNI_INLINE static inline __attribute__((always_inline))

/* One block's 32 weights as unsigned bytes in element order (q8_0: q + 128; q4_0: the nibble q + 8). */
VNNI VNNI_INLINE __m256i block_u8(const char *blk, kern_dtype dt) {
    if (dt == KERN_Q8_0)
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), _mm256_set1_epi8((char)0x80));
    __m128i q = _mm_loadu_si128((const __m128i *)(blk + 2)), m4 = _mm_set1_epi8(15);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(q, m4)),
                                   _mm_and_si128(_mm_srli_epi16(q, 4), m4), 1);
}

/* Columns [j0, j0 + NR) of w (zeros past n) into p (quads), s (scales) and, for q4_K, mn (mins), all nb blocks. */
VNNI static void pack_panel(uint32_t *p, float *s, float *mn, const void *w, kern_dtype dt, int64_t n, int64_t k,
                            int64_t j0) {
    size_t rb = kern_dtype_bytes(dt, k), bs = dt == KERN_Q4_K ? 0 : kern_dtype_bytes(dt, KERN_QBLOCK);
    int64_t nb = k / KERN_QBLOCK;
    for (int c0 = 0; c0 < NR; c0 += 16) {
        const char *rows[16];
        int live = 0;
        for (int i = 0; i < 16; i++) {
            rows[i] = j0 + c0 + i < n ? (const char *)w + (size_t)(j0 + c0 + i) * rb : NULL;
            live += rows[i] != NULL;
        }
        for (int64_t b = 0; b < nb; b += 2) { /* two blocks = 16 quads per column */
            int two = b + 1 < nb;
            __m512i r[16];
            for (int i = 0; i < 16; i++) {
                if (i >= live) {
                    r[i] = _mm512_setzero_si512();
                    continue;
                }
                if (dt == KERN_Q4_K) { /* nb is a multiple of 8: always two */
                    r[i] = kq_pair_u8(rows[i] + (size_t)(b / 8) * sizeof(kq_block_q4_K), dt, (int)(b % 8) / 2);
                    continue;
                }
                const char *blk = rows[i] + (size_t)b * bs;
                __m256i lo = block_u8(blk, dt), hi = two ? block_u8(blk + bs, dt) : _mm256_setzero_si256();
                r[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            }
            transpose16(r); /* r[j]: quad j of the block pair, 16 columns */
            uint32_t *pb = p + b * 8 * NR + c0;
            for (int j = 0; j < (two ? 16 : 8); j++) _mm512_storeu_si512(pb + (int64_t)j * NR, r[j]);
        }
        if (dt == KERN_Q4_K) { /* per sub-block: d * scale and dmin * min, unpacked once per super-block */
            for (int i = 0; i < 16; i++)
                for (int64_t sb = 0; sb < nb / 8; sb++) {
                    uint8_t sc[8], m[8];
                    float d = 0.f, dmin = 0.f;
                    if (i < live) {
                        const kq_block_q4_K *x = (const kq_block_q4_K *)rows[i] + sb;
                        kq_q4k_scales(x->scales, sc, m);
                        d = _cvtsh_ss(x->d), dmin = _cvtsh_ss(x->dmin);
                    }
                    for (int j = 0; j < 8; j++) {
                        s[(sb * 8 + j) * NR + c0 + i] = i < live ? d * (float)sc[j] : 0.f;
                        mn[(sb * 8 + j) * NR + c0 + i] = i < live ? dmin * (float)m[j] : 0.f;
                    }
                }
            continue;
        }
        for (int i = 0; i < 16; i++)
            for (int64_t b = 0; b < nb; b++)
                s[b * NR + c0 + i] = i < live ? _cvtsh_ss(*(const uint16_t *)(rows[i] + (size_t)b * bs)) : 0.f;
    }
}

/* y rows [r0, r0 + mr), columns [j0, j0 + NR) masked to `mask`, (+)= the panel . activation rows. */
VNNI VNNI_INLINE void tile(const int mr, float *y, int64_t ldy, const uint32_t *p, const float *s, const float *mn,
                           const kq_act *a, int64_t r0, int64_t k, int32_t off, int add, uint32_t mask) {
    int64_t nb = k / KERN_QBLOCK;
    __m512 acc[MR][2];
    for (int r = 0; r < mr; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i ia[MR][2];
        for (int r = 0; r < mr; r++) ia[r][0] = ia[r][1] = _mm512_set1_epi32(off * a->sum[(r0 + r) * nb + b]);
        const uint32_t *pb = p + b * 8 * NR;
        for (int t = 0; t < 8; t++) {
            __m512i w0 = _mm512_loadu_si512(pb + t * NR), w1 = _mm512_loadu_si512(pb + t * NR + 16);
            for (int r = 0; r < mr; r++) {
                int32_t q4;
                memcpy(&q4, a->qs + (r0 + r) * k + b * KERN_QBLOCK + 4 * t, 4); /* 4 activation bytes */
                __m512i xv = _mm512_set1_epi32(q4);
                ia[r][0] = _mm512_dpbusd_epi32(ia[r][0], w0, xv);
                ia[r][1] = _mm512_dpbusd_epi32(ia[r][1], w1, xv);
            }
        }
        __m512 s0 = _mm512_loadu_ps(s + b * NR), s1 = _mm512_loadu_ps(s + b * NR + 16);
        for (int r = 0; r < mr; r++) {
            __m512 dx = _mm512_set1_ps(a->d[(r0 + r) * nb + b]);
            acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r][0]), _mm512_mul_ps(s0, dx), acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r][1]), _mm512_mul_ps(s1, dx), acc[r][1]);
        }
        if (mn) { /* q4_K: minus min * d_x * sum(x) */
            __m512 m0 = _mm512_loadu_ps(mn + b * NR), m1 = _mm512_loadu_ps(mn + b * NR + 16);
            for (int r = 0; r < mr; r++) {
                int64_t o = (r0 + r) * nb + b;
                __m512 xs = _mm512_set1_ps(a->d[o] * (float)a->sum[o]);
                acc[r][0] = _mm512_fnmadd_ps(m0, xs, acc[r][0]);
                acc[r][1] = _mm512_fnmadd_ps(m1, xs, acc[r][1]);
            }
        }
    }
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < 2; q++) {
            __mmask16 mk = (__mmask16)(mask >> (16 * q));
            if (!mk) continue;
            float *yq = y + (r0 + r) * ldy + 16 * q;
            __m512 v = add ? _mm512_add_ps(acc[r][q], _mm512_maskz_loadu_ps(mk, yq)) : acc[r][q];
            _mm512_mask_storeu_ps(yq, mk, v);
        }
}

VNNI static void panel_rows(float *y, int64_t ldy, const uint32_t *p, const float *s, const float *mn, const kq_act *a,
                            int64_t m, int64_t k, int32_t off, int add, uint32_t mask) {
    int64_t r = 0;
    for (; r + MR <= m; r += MR) tile(MR, y, ldy, p, s, mn, a, r, k, off, add, mask);
#define TAIL(t)                                                                                                \
    case t: tile(t, y, ldy, p, s, mn, a, r, k, off, add, mask); break;
    switch (m - r) {
        TAIL(5) TAIL(4) TAIL(3) TAIL(2) TAIL(1)
    default: break;
    }
#undef TAIL
}

int kq_gemm_vnni(float *y, const kq_act *a, const void *w, kern_dtype dt, int64_t m, int64_t n, int64_t k, float beta,
                 void *panels, int threads) {
    if (dt != KERN_Q8_0 && dt != KERN_Q4_0 && dt != KERN_Q4_K) return KERN_EUNSUPPORTED; /* q6_K: the float panels */
    int64_t n_panels = (n + NR - 1) / NR, nb = k / KERN_QBLOCK;
    size_t pbytes = (kq_gemm_vnni_panel_bytes(k) + 63) / 64 * 64; /* quant_matmul.c's spacing */
    const int32_t off = dt == KERN_Q8_0 ? -128 : dt == KERN_Q4_0 ? -8 : 0; /* q4_K: its min instead */
#pragma omp parallel num_threads(threads)
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t pa = n_panels * id / nt, pz = n_panels * (id + 1) / nt;
        uint32_t *p = (uint32_t *)((char *)panels + pbytes * (size_t)id);
        float *s = (float *)(p + nb * 8 * NR), *mn = dt == KERN_Q4_K ? s + nb * NR : NULL;
        for (int64_t pn = pa; pn < pz; pn++) {
            int64_t j0 = pn * NR, cols = n - j0 < NR ? n - j0 : NR;
            uint32_t mask = cols == NR ? 0xFFFFFFFFu : ((1u << cols) - 1);
            pack_panel(p, s, mn, w, dt, n, k, j0);
            panel_rows(y + j0, n, p, s, mn, a, m, k, off, beta != 0.f, mask);
        }
    }
    return KERN_OK;
}
#else
int kq_gemm_vnni(float *y, const kq_act *a, const void *w, kern_dtype dt, int64_t m, int64_t n, int64_t k, float beta,
                 void *panels, int threads) {
    (void)y, (void)a, (void)w, (void)dt, (void)m, (void)n, (void)k, (void)beta, (void)panels, (void)threads;
    return KERN_EUNSUPPORTED;
}
#endif
