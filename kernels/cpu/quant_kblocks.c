/*
 * quant_kblocks.c — GGML's k-quant formats q4_K and q6_K (super-blocks of 256 weights): where each weight's bits
 * and scales sit (kq_kblock_ints, the reference every k-quant kernel follows), dequantization (the arithmetic of
 * ggml-quants.c's dequantize_row_q4_K / q6_K, so a GGUF file's weights mean here what they mean in llama.cpp), and
 * simple quantizers.
 * The quantizers are not ggml's: ggml searches each sub-block's scale and min iteratively (make_qkx2_quants) for
 * a lower error; these take the sub-block's min/max (q4_K) or largest magnitude (q6_K) directly, then round the
 * sub-block scales to 6 / 8 bits of the super-block scale. Enough for tests and `mnemo quantize`; the blocks are
 * GGML's, so llama.cpp reads what they write.
 * Scalar on purpose: these run once per weight at quantize time, per gathered embedding row, or as the reference.
 */
#include <math.h>
#include <string.h>

#include "quant.h"

void kq_kblock_ints(const void *row, kern_dtype dt, int64_t b, int8_t q[32], float sc[2], float *mn) {
    int64_t sb = b / 8, j = b % 8; /* super-block, sub-block of 32 in it */
    if (dt == KERN_Q4_K) {
        const kq_block_q4_K *x = (const kq_block_q4_K *)row + sb;
        uint8_t s[8], m[8];
        kq_q4k_scales(x->scales, s, m);
        const float d = kern_f16_to_f32(x->d), dmin = kern_f16_to_f32(x->dmin);
        const uint8_t *qs = x->qs + 32 * (j / 2); /* sub-block 2p: low nibbles of qs[32p..], 2p+1: high ones */
        for (int e = 0; e < 32; e++) q[e] = (int8_t)(j % 2 ? qs[e] >> 4 : qs[e] & 15);
        sc[0] = sc[1] = d * (float)s[j];
        *mn = dmin * (float)m[j];
        return;
    }
    /* q6_K: each half of 128 elements (h) takes 64 bytes of ql and 32 of qh; in it, 32-block t reads ql[32 (t % 2)
     * + e]'s low (t < 2) or high (t >= 2) nibble and bits 2t, 2t+1 of qh[e] as bits 4-5, minus 32. */
    const kq_block_q6_K *x = (const kq_block_q6_K *)row + sb;
    int64_t h = j / 4, t = j % 4;
    const uint8_t *ql = x->ql + 64 * h + 32 * (t % 2), *qh = x->qh + 32 * h;
    for (int e = 0; e < 32; e++) {
        int lo = t < 2 ? ql[e] & 15 : ql[e] >> 4, hi = (qh[e] >> (2 * t)) & 3;
        q[e] = (int8_t)((lo | hi << 4) - 32);
    }
    const float d = kern_f16_to_f32(x->d);
    sc[0] = d * (float)x->scales[8 * h + 2 * t]; /* the 16-element groups' scales are in element order */
    sc[1] = d * (float)x->scales[8 * h + 2 * t + 1];
    *mn = 0.f;
}

void kq_dequantize_k(float *dst, const void *src, kern_dtype dt, int64_t n) {
    int8_t q[32];
    float sc[2], mn;
    for (int64_t b = 0; b < n / 32; b++) {
        kq_kblock_ints(src, dt, b, q, sc, &mn);
        for (int e = 0; e < 32; e++) dst[b * 32 + e] = sc[e / 16] * (float)q[e] - mn;
    }
}

/* v rounded to the nearest integer and clamped to [lo, hi]; NaN gives lo. */
static inline int round_clamp(float v, int lo, int hi) {
    if (!(v == v) || v <= (float)lo) return lo;
    return v >= (float)hi ? hi : (int)lrintf(v);
}

/* q4_K: each sub-block of 32 spans [min(0, lowest), highest] in 15 steps: scale (max - min) / 15 and min -min;
 * the super-block's d and dmin put the largest scale and min at 63; weights are rounded with the stored (f16 and
 * 6-bit rounded) values, so the error is that of the stored scales, clamped to the nibble's range. */
static void quantize_q4_K(kq_block_q4_K *y, const float *x, int64_t nsb) {
    for (int64_t i = 0; i < nsb; i++, x += KERN_QK_K) {
        float scale[8], min[8], max_scale = 0.f, max_min = 0.f;
        for (int j = 0; j < 8; j++) {
            float lo = 0.f, hi = -INFINITY;
            for (int e = 0; e < 32; e++) {
                lo = fminf(lo, x[32 * j + e]);
                hi = fmaxf(hi, x[32 * j + e]);
            }
            scale[j] = hi > lo ? (hi - lo) / 15.f : 0.f;
            min[j] = -lo;
            max_scale = fmaxf(max_scale, scale[j]);
            max_min = fmaxf(max_min, min[j]);
        }
        y[i].d = kern_f32_to_f16(max_scale / 63.f);
        y[i].dmin = kern_f32_to_f16(max_min / 63.f);
        const float d = kern_f16_to_f32(y[i].d), dmin = kern_f16_to_f32(y[i].dmin);
        memset(y[i].scales, 0, sizeof y[i].scales);
        uint8_t L[KERN_QK_K];
        for (int j = 0; j < 8; j++) {
            int ls = d > 0.f ? round_clamp(scale[j] / d, 0, 63) : 0;
            int lm = dmin > 0.f ? round_clamp(min[j] / dmin, 0, 63) : 0;
            if (j < 4) {
                y[i].scales[j] = (uint8_t)ls;
                y[i].scales[j + 4] = (uint8_t)lm;
            } else {
                y[i].scales[j + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
                y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                y[i].scales[j] |= (uint8_t)((lm >> 4) << 6);
            }
            const float d1 = d * (float)ls, m1 = dmin * (float)lm;
            for (int e = 0; e < 32; e++)
                L[32 * j + e] = (uint8_t)(d1 > 0.f ? round_clamp((x[32 * j + e] + m1) / d1, 0, 15) : 0);
        }
        for (int p = 0; p < 4; p++)
            for (int e = 0; e < 32; e++) y[i].qs[32 * p + e] = (uint8_t)(L[64 * p + e] | L[64 * p + 32 + e] << 4);
    }
}

/* q6_K: each group of 16 maps its value of largest magnitude to -32 (ggml's sign trick: one more level); the
 * super-block's d puts the largest group scale at -128 (int8), as ggml's quantize_row_q6_K_ref does. */
static void quantize_q6_K(kq_block_q6_K *y, const float *x, int64_t nsb) {
    for (int64_t i = 0; i < nsb; i++, x += KERN_QK_K) {
        float scale[16];
        const float max_scale = kq_signed_group_scales(x, 32.f, scale);
        float id = max_scale != 0.f ? -128.f / max_scale : 0.f;
        y[i].d = kern_f32_to_f16(id != 0.f ? 1.f / id : 0.f);
        const float d = kern_f16_to_f32(y[i].d);
        int8_t L[KERN_QK_K];
        for (int g = 0; g < 16; g++) {
            y[i].scales[g] = (int8_t)round_clamp(id * scale[g], -128, 127);
            const float dg = d * (float)y[i].scales[g];
            for (int e = 0; e < 16; e++)
                L[16 * g + e] = (int8_t)(dg != 0.f ? round_clamp(x[16 * g + e] / dg, -32, 31) : 0);
        }
        for (int h = 0; h < 2; h++) {
            const int8_t *l = L + 128 * h;
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            for (int e = 0; e < 32; e++) {
                int u0 = l[e] + 32, u1 = l[e + 32] + 32, u2 = l[e + 64] + 32, u3 = l[e + 96] + 32;
                ql[e] = (uint8_t)((u0 & 15) | (u2 & 15) << 4);
                ql[e + 32] = (uint8_t)((u1 & 15) | (u3 & 15) << 4);
                qh[e] = (uint8_t)((u0 >> 4) | (u1 >> 4) << 2 | (u2 >> 4) << 4 | (u3 >> 4) << 6);
            }
        }
    }
}

void kq_quantize_k(void *dst, const float *src, kern_dtype dt, int64_t n) {
    if (dt == KERN_Q4_K) quantize_q4_K(dst, src, n / KERN_QK_K);
    if (dt == KERN_Q6_K) quantize_q6_K(dst, src, n / KERN_QK_K);
}
