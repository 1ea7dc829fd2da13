/*
 * quant_xunpack.h — one 32-block of a q4_1, q5_0, q5_1, q2_K, q3_K or q5_K row as 32 unsigned bytes u = q + off in
 * element order (off: kq_xoff; the layouts of kq_xblock_ints), and its scales and mins per half, with AVX2
 * integer ops and F16C conversions. Shared by the tile kernels (quant_xdot_tile.h) and the panel packers
 * (quant_panel.c); included inside code compiled for AVX2 or more.
 */
#ifndef MNEMO_QUANT_XUNPACK_H
#define MNEMO_QUANT_XUNPACK_H

#include <immintrin.h>
#include <string.h>

#include "quant.h"

#define XU_FN __attribute__((target("avx2,f16c"))) static inline __attribute__((always_inline))

/* Byte e = 16 where bit e of bits is set, else 0. */
XU_FN __m256i xu_bits16(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(16));
}

/* 16 bytes of q4_0-order nibbles: elements 0-15 the low nibbles, 16-31 the high ones. */
XU_FN __m256i xu_nibbles(const uint8_t *qs) {
    __m128i q = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

/* Bits of 32 bytes at p shifted right by s, masked. */
XU_FN __m256i xu_field(const uint8_t *p, int s, int mask) {
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(s)), _mm256_set1_epi8((char)mask));
}

/* u of 32-block b of row (counted from the row's start). */
XU_FN __m256i xu_block(const char *row, kern_dtype dt, int64_t b) {
    int64_t sb = b / 8;
    int j = (int)(b % 8);
    uint32_t h;
    switch (dt) {
    case KERN_Q4_1: return xu_nibbles(((const kq_block_q4_1 *)row)[b].qs);
    case KERN_Q5_0: {
        const kq_block_q5_0 *x = (const kq_block_q5_0 *)row + b;
        memcpy(&h, x->qh, 4);
        return _mm256_or_si256(xu_nibbles(x->qs), xu_bits16(h));
    }
    case KERN_Q5_1: {
        const kq_block_q5_1 *x = (const kq_block_q5_1 *)row + b;
        memcpy(&h, x->qh, 4);
        return _mm256_or_si256(xu_nibbles(x->qs), xu_bits16(h));
    }
    case KERN_Q2_K: return xu_field(((const kq_block_q2_K *)row)[sb].qs + 32 * (j / 4), 2 * (j % 4), 3);
    case KERN_Q3_K: {
        const kq_block_q3_K *x = (const kq_block_q3_K *)row + sb;
        __m256i lo = xu_field(x->qs + 32 * (j / 4), 2 * (j % 4), 3), hb = xu_field(x->hmask, j, 1);
        return _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2)); /* bytes <= 1 shifted by 2 stay in their byte */
    }
    case KERN_Q5_K: {
        const kq_block_q5_K *x = (const kq_block_q5_K *)row + sb;
        __m256i lo = xu_field(x->qs + 32 * (j / 2), 4 * (j % 2), 15), hb = xu_field(x->qh, j, 1);
        return _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
    }
    default: return _mm256_setzero_si256();
    }
}

/* q4_K / q5_K's 6-bit scale and min of sub-block j (ggml's get_scale_min_k4). */
XU_FN void xu_scale_min_k4(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63, *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* kq_xscales with F16C, inlined so the type's branch folds away: the same values. */
XU_FN void xu_scales(const char *row, kern_dtype dt, int64_t b, float sc[2], float mn[2]) {
    int64_t sb = b / 8;
    int j = (int)(b % 8);
    switch (dt) {
    case KERN_Q4_1:
    case KERN_Q5_1: {
        const uint16_t *h = (const uint16_t *)(row + (size_t)b * (dt == KERN_Q4_1 ? 20 : 24));
        sc[0] = sc[1] = _cvtsh_ss(h[0]);
        mn[0] = mn[1] = -_cvtsh_ss(h[1]);
        return;
    }
    case KERN_Q5_0:
        sc[0] = sc[1] = _cvtsh_ss(((const kq_block_q5_0 *)row)[b].d);
        mn[0] = mn[1] = 0.f;
        return;
    case KERN_Q2_K: {
        const kq_block_q2_K *x = (const kq_block_q2_K *)row + sb;
        const float d = _cvtsh_ss(x->d), dmin = _cvtsh_ss(x->dmin);
        for (int h = 0; h < 2; h++) {
            uint8_t s = x->scales[2 * j + h];
            sc[h] = d * (float)(s & 15), mn[h] = dmin * (float)(s >> 4);
        }
        return;
    }
    case KERN_Q3_K: {
        const kq_block_q3_K *x = (const kq_block_q3_K *)row + sb;
        const float d = _cvtsh_ss(x->d);
        for (int h = 0; h < 2; h++) {
            int g = 2 * j + h, lo = g < 8 ? x->scales[g] & 15 : x->scales[g - 8] >> 4;
            int hi = (x->scales[8 + g % 4] >> (2 * (g / 4))) & 3;
            sc[h] = d * (float)((lo | hi << 4) - 32);
        }
        mn[0] = mn[1] = 0.f;
        return;
    }
    case KERN_Q5_K: {
        const kq_block_q5_K *x = (const kq_block_q5_K *)row + sb;
        int s, m;
        xu_scale_min_k4(x->scales, j, &s, &m);
        sc[0] = sc[1] = _cvtsh_ss(x->d) * (float)s;
        mn[0] = mn[1] = _cvtsh_ss(x->dmin) * (float)m;
        return;
    }
    default: sc[0] = sc[1] = mn[0] = mn[1] = 0.f;
    }
}

#endif
