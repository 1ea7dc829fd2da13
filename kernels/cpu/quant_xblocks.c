/*
 * quant_xblocks.c — where the bits and scales of GGML's q4_1, q5_0, q5_1, q2_K, q3_K and q5_K blocks sit, read
 * per 32-block as integers with a scale and a min per 16 elements (kq_xblock_ints: the reference the tile kernels
 * and panel packers follow), and their dequantization: ggml-quants.c's dequantize_row_* arithmetic, equal bit for
 * bit to gguf-py's numpy port (tests/fixtures/quant_x_fixtures.bin, made by tests/reference/make_quant_fixtures.py).
 * Scalar on purpose: these run per gathered embedding row, at load or upload time, or as the reference.
 */
#include <string.h>

#include "quant.h"

/* q4_K / q5_K's 6-bit scale and min of sub-block j (ggml's get_scale_min_k4). */
static inline void scale_min_k4(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63, *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* q3_K's scale of 16-element group g: low nibbles in bytes 0-7 (groups 8-15 in the high ones), the top 2 bits in
 * bytes 8-11, then minus 32. */
static inline int q3k_scale(const uint8_t *s, int g) {
    int lo = g < 8 ? s[g] & 15 : s[g - 8] >> 4, hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    return (lo | hi << 4) - 32;
}

void kq_xscales(const void *row, kern_dtype dt, int64_t b, float sc[2], float mn[2]) {
    int64_t sb = b / 8, j = b % 8; /* k-quants: super-block, 32-block in it */
    switch (dt) {
    case KERN_Q4_1:
    case KERN_Q5_1: { /* d and m lead both layouts */
        const uint16_t *h = (const void *)((const char *)row + (size_t)b * (dt == KERN_Q4_1 ? 20 : 24));
        sc[0] = sc[1] = kern_f16_to_f32(h[0]);
        mn[0] = mn[1] = -kern_f16_to_f32(h[1]); /* x - (-m) is x + m exactly */
        return;
    }
    case KERN_Q5_0:
        sc[0] = sc[1] = kern_f16_to_f32(((const kq_block_q5_0 *)row)[b].d);
        mn[0] = mn[1] = 0.f;
        return;
    case KERN_Q2_K: {
        const kq_block_q2_K *x = (const kq_block_q2_K *)row + sb;
        const float d = kern_f16_to_f32(x->d), dmin = kern_f16_to_f32(x->dmin);
        for (int h = 0; h < 2; h++) {
            uint8_t s = x->scales[2 * j + h];
            sc[h] = d * (float)(s & 15);
            mn[h] = dmin * (float)(s >> 4);
        }
        return;
    }
    case KERN_Q3_K: {
        const kq_block_q3_K *x = (const kq_block_q3_K *)row + sb;
        const float d = kern_f16_to_f32(x->d);
        for (int h = 0; h < 2; h++) sc[h] = d * (float)q3k_scale(x->scales, (int)(2 * j + h));
        mn[0] = mn[1] = 0.f;
        return;
    }
    case KERN_Q5_K: {
        const kq_block_q5_K *x = (const kq_block_q5_K *)row + sb;
        int s, m;
        scale_min_k4(x->scales, (int)j, &s, &m);
        sc[0] = sc[1] = kern_f16_to_f32(x->d) * (float)s;
        mn[0] = mn[1] = kern_f16_to_f32(x->dmin) * (float)m;
        return;
    }
    default: sc[0] = sc[1] = mn[0] = mn[1] = 0.f;
    }
}

void kq_xblock_ints(const void *row, kern_dtype dt, int64_t b, int8_t q[32], float sc[2], float mn[2]) {
    int64_t sb = b / 8, j = b % 8;
    kq_xscales(row, dt, b, sc, mn);
    if (dt == KERN_Q4_1 || dt == KERN_Q5_0 || dt == KERN_Q5_1) { /* element e < 16: low nibble of qs[e], else high */
        const uint8_t *qs, *qh = NULL;
        if (dt == KERN_Q4_1) qs = ((const kq_block_q4_1 *)row)[b].qs;
        else if (dt == KERN_Q5_0) qs = ((const kq_block_q5_0 *)row)[b].qs, qh = ((const kq_block_q5_0 *)row)[b].qh;
        else qs = ((const kq_block_q5_1 *)row)[b].qs, qh = ((const kq_block_q5_1 *)row)[b].qh;
        uint32_t h = 0;
        if (qh) h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
        for (int e = 0; e < 32; e++) {
            int v = (e < 16 ? qs[e] & 15 : qs[e - 16] >> 4) | (int)((h >> e) & 1) << 4;
            q[e] = (int8_t)(v - kq_xoff(dt));
        }
        return;
    }
    if (dt == KERN_Q2_K || dt == KERN_Q3_K) { /* 2-bit fields: qs[32 (j / 4) + e] >> 2 (j % 4) */
        const uint8_t *qs = dt == KERN_Q2_K ? ((const kq_block_q2_K *)row)[sb].qs : ((const kq_block_q3_K *)row)[sb].qs;
        qs += 32 * (j / 4);
        for (int e = 0; e < 32; e++) q[e] = (int8_t)((qs[e] >> (2 * (j % 4))) & 3);
        if (dt == KERN_Q3_K) {
            const uint8_t *hm = ((const kq_block_q3_K *)row)[sb].hmask;
            for (int e = 0; e < 32; e++) q[e] = (int8_t)(q[e] - ((hm[e] >> j) & 1 ? 0 : 4));
        }
        return;
    }
    if (dt == KERN_Q5_K) { /* nibble of qs[32 (j / 2) + e] (low for even j), bit j of qh[e] */
        const kq_block_q5_K *x = (const kq_block_q5_K *)row + sb;
        const uint8_t *qs = x->qs + 32 * (j / 2);
        for (int e = 0; e < 32; e++) q[e] = (int8_t)((j % 2 ? qs[e] >> 4 : qs[e] & 15) | ((x->qh[e] >> j) & 1) << 4);
        return;
    }
    memset(q, 0, 32);
}

void kq_dequantize_x(float *dst, const void *src, kern_dtype dt, int64_t n) {
    int8_t q[32];
    float sc[2], mn[2];
    for (int64_t b = 0; b < n / 32; b++) {
        kq_xblock_ints(src, dt, b, q, sc, mn);
        for (int e = 0; e < 32; e++) dst[b * 32 + e] = sc[e / 16] * (float)q[e] - mn[e / 16];
    }
}
