/*
 * quant_xquantize.c — quantizers for q4_1, q5_0, q5_1, q2_K, q3_K and q5_K (layouts: quant.h, quant_xblocks.c).
 *   q4_1, q5_0, q5_1: bit for bit ggml's quantize_row_*_ref (and gguf-py's numpy port): q4_1 / q5_1 span the
 *     block's [min, max] in 15 / 31 steps; q5_0 maps the value of largest magnitude to -16 (the sign trick).
 *   q2_K, q3_K, q5_K: round-to-nearest with the scales taken directly, not ggml's iterative search
 *     (make_qkx2_quants, make_q3_quants, which lower the error further): q2_K / q5_K span each group's
 *     [min(0, lowest), highest] in 3 / 31 steps, the super-block's d and dmin putting the largest scale and min at
 *     15 / 63; q3_K maps each group's value of largest magnitude to -4 and the largest group scale to -32. The
 *     weights are then rounded with the stored (f16, integer-rounded) scales. Enough for tests and
 *     `mnemo quantize`; the blocks are GGML's, so llama.cpp reads what they write.
 * Scalar on purpose: these run once per weight at quantize time.
 */
#include <math.h>
#include <string.h>

#include "quant.h"

/* v rounded to nearest and clamped to [lo, hi]; NaN gives 0 clamped into range. */
static inline int round_clamp(float v, int lo, int hi) {
    if (!(v == v)) return lo > 0 ? lo : hi < 0 ? hi : 0;
    return v <= (float)lo ? lo : v >= (float)hi ? hi : (int)lrintf(v);
}

/* ggml's (int8_t) truncation of an already rounded-up level, at most hi; NaN and negatives give 0. */
static inline int trunc_level(float t, int hi) {
    return t == t ? (t >= (float)hi ? hi : t <= 0.f ? 0 : (int)t) : 0;
}

/* q4_1 / q5_1: levels 0..15 / 0..31 over [min, max]. */
static void quantize_q41_q51(void *dst, const float *x, int64_t nb, int five) {
    const int top = five ? 31 : 15;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float lo = INFINITY, hi = -INFINITY;
        for (int e = 0; e < 32; e++) lo = fminf(lo, x[e]), hi = fmaxf(hi, x[e]);
        if (!(lo <= hi)) lo = hi = 0.f; /* all NaN */
        const float d = (hi - lo) / (float)top, id = d ? 1.f / d : 0.f;
        uint8_t q[32];
        for (int e = 0; e < 32; e++) q[e] = (uint8_t)trunc_level((x[e] - lo) * id + 0.5f, top);
        uint8_t *qs;
        if (five) {
            kq_block_q5_1 *y = (kq_block_q5_1 *)dst + i;
            y->d = kern_f32_to_f16(d), y->m = kern_f32_to_f16(lo);
            uint32_t h = 0;
            for (int e = 0; e < 32; e++) h |= (uint32_t)(q[e] >> 4) << e;
            for (int t = 0; t < 4; t++) y->qh[t] = (uint8_t)(h >> (8 * t));
            qs = y->qs;
        } else {
            kq_block_q4_1 *y = (kq_block_q4_1 *)dst + i;
            y->d = kern_f32_to_f16(d), y->m = kern_f32_to_f16(lo);
            qs = y->qs;
        }
        for (int e = 0; e < 16; e++) qs[e] = (uint8_t)((q[e] & 15) | (q[e + 16] & 15) << 4);
    }
}

static void quantize_q5_0(kq_block_q5_0 *y, const float *x, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0.f, max = 0.f;
        for (int e = 0; e < 32; e++)
            if (amax < fabsf(x[e])) amax = fabsf(x[e]), max = x[e];
        const float d = max / -16.f, id = d ? 1.f / d : 0.f;
        y[i].d = kern_f32_to_f16(d);
        uint32_t h = 0;
        uint8_t q[32];
        for (int e = 0; e < 32; e++) {
            q[e] = (uint8_t)trunc_level(x[e] * id + 16.5f, 31);
            h |= (uint32_t)(q[e] >> 4) << e;
        }
        for (int t = 0; t < 4; t++) y[i].qh[t] = (uint8_t)(h >> (8 * t));
        for (int e = 0; e < 16; e++) y[i].qs[e] = (uint8_t)((q[e] & 15) | (q[e + 16] & 15) << 4);
    }
}

/* Shared by q2_K and q5_K: per group of gs elements, scale (hi - lo) / top and min -lo over [min(0, lo), hi]. */
static void group_ranges(const float *x, int groups, int gs, int top, float *scale, float *min, float *max_scale,
                         float *max_min) {
    *max_scale = *max_min = 0.f;
    for (int g = 0; g < groups; g++) {
        float lo = 0.f, hi = -INFINITY;
        for (int e = 0; e < gs; e++) lo = fminf(lo, x[gs * g + e]), hi = fmaxf(hi, x[gs * g + e]);
        scale[g] = hi > lo ? (hi - lo) / (float)top : 0.f;
        min[g] = -lo;
        *max_scale = fmaxf(*max_scale, scale[g]);
        *max_min = fmaxf(*max_min, min[g]);
    }
}

static void quantize_q2_K(kq_block_q2_K *y, const float *x, int64_t nsb) {
    for (int64_t i = 0; i < nsb; i++, x += KERN_QK_K) {
        float scale[16], min[16], max_scale, max_min;
        group_ranges(x, 16, 16, 3, scale, min, &max_scale, &max_min);
        y[i].d = kern_f32_to_f16(max_scale / 15.f);
        y[i].dmin = kern_f32_to_f16(max_min / 15.f);
        const float d = kern_f16_to_f32(y[i].d), dmin = kern_f16_to_f32(y[i].dmin);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int g = 0; g < 16; g++) {
            int ls = d > 0.f ? round_clamp(scale[g] / d, 0, 15) : 0;
            int lm = dmin > 0.f ? round_clamp(min[g] / dmin, 0, 15) : 0;
            y[i].scales[g] = (uint8_t)(ls | lm << 4);
            const float d1 = d * (float)ls, m1 = dmin * (float)lm;
            for (int e = 0; e < 16; e++) {
                int el = 16 * g + e, l = d1 > 0.f ? round_clamp((x[el] + m1) / d1, 0, 3) : 0;
                y[i].qs[32 * (el / 128) + el % 32] |= (uint8_t)(l << (2 * ((el % 128) / 32)));
            }
        }
    }
}

static void quantize_q3_K(kq_block_q3_K *y, const float *x, int64_t nsb) {
    for (int64_t i = 0; i < nsb; i++, x += KERN_QK_K) {
        float scale[16];
        const float max_scale = kq_signed_group_scales(x, 4.f, scale);
        const float iscale = max_scale != 0.f ? -32.f / max_scale : 0.f;
        y[i].d = kern_f32_to_f16(iscale != 0.f ? 1.f / iscale : 0.f);
        const float d = kern_f16_to_f32(y[i].d);
        memset(y[i].scales, 0, sizeof y[i].scales);
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int g = 0; g < 16; g++) {
            int ls = round_clamp(iscale * scale[g], -32, 31), l = ls + 32;
            if (g < 8) y[i].scales[g] = (uint8_t)(l & 15);
            else y[i].scales[g - 8] |= (uint8_t)((l & 15) << 4);
            y[i].scales[8 + g % 4] |= (uint8_t)((l >> 4) << (2 * (g / 4)));
            const float dg = d * (float)ls;
            for (int e = 0; e < 16; e++) {
                int el = 16 * g + e, q = dg != 0.f ? round_clamp(x[el] / dg, -4, 3) : 0;
                int j = el / 32, o = el % 32;
                if (q >= 0) y[i].hmask[o] |= (uint8_t)(1u << j);
                y[i].qs[32 * (j / 4) + o] |= (uint8_t)((q & 3) << (2 * (j % 4))); /* q + 4 and q agree mod 4 */
            }
        }
    }
}

static void quantize_q5_K(kq_block_q5_K *y, const float *x, int64_t nsb) {
    for (int64_t i = 0; i < nsb; i++, x += KERN_QK_K) {
        float scale[8], min[8], max_scale, max_min;
        group_ranges(x, 8, 32, 31, scale, min, &max_scale, &max_min);
        y[i].d = kern_f32_to_f16(max_scale / 63.f);
        y[i].dmin = kern_f32_to_f16(max_min / 63.f);
        const float d = kern_f16_to_f32(y[i].d), dmin = kern_f16_to_f32(y[i].dmin);
        memset(y[i].scales, 0, sizeof y[i].scales);
        memset(y[i].qh, 0, sizeof y[i].qh);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < 8; j++) {
            int ls = d > 0.f ? round_clamp(scale[j] / d, 0, 63) : 0;
            int lm = dmin > 0.f ? round_clamp(min[j] / dmin, 0, 63) : 0;
            if (j < 4) { /* q4_K's packing (get_scale_min_k4 reversed) */
                y[i].scales[j] = (uint8_t)ls;
                y[i].scales[j + 4] = (uint8_t)lm;
            } else {
                y[i].scales[j + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
                y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                y[i].scales[j] |= (uint8_t)((lm >> 4) << 6);
            }
            const float d1 = d * (float)ls, m1 = dmin * (float)lm;
            for (int e = 0; e < 32; e++) {
                int l = d1 > 0.f ? round_clamp((x[32 * j + e] + m1) / d1, 0, 31) : 0;
                y[i].qs[32 * (j / 2) + e] |= (uint8_t)((l & 15) << (4 * (j % 2)));
                y[i].qh[e] |= (uint8_t)((l >> 4) << j);
            }
        }
    }
}

void kq_quantize_x(void *dst, const float *src, kern_dtype dt, int64_t n) {
    switch (dt) {
    case KERN_Q4_1: quantize_q41_q51(dst, src, n / 32, 0); break;
    case KERN_Q5_1: quantize_q41_q51(dst, src, n / 32, 1); break;
    case KERN_Q5_0: quantize_q5_0(dst, src, n / 32); break;
    case KERN_Q2_K: quantize_q2_K(dst, src, n / KERN_QK_K); break;
    case KERN_Q3_K: quantize_q3_K(dst, src, n / KERN_QK_K); break;
    case KERN_Q5_K: quantize_q5_K(dst, src, n / KERN_QK_K); break;
    default: break;
    }
}
