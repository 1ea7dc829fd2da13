/*
 * gguf_kquants.c — dequantization of the GGML block types mnemo has no matmul kernels for: q4_K and q6_K (256
 * weights per super-block: what llama.cpp's quantizer picks for a q4_0 model's output matrix and in its Q4_K_M
 * files) and q4_1, q5_0, q5_1 (32-blocks: its fallbacks for rows that are not whole 256-blocks, e.g. LongLLaMA-3B's
 * 3200). The loader converts such tensors to q8_0 once at load (gguf_llama.c); this is the arithmetic of
 * ggml-quants.c's dequantize_row_*, checked against gguf-py's numpy port in test_gguf.
 */
#include <string.h>

#include "gguf.h"
#include "kernels.h"

#define QK_K 256

/* q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32, 128 bytes of nibbles. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void dequant_q4_K(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 144) {
        uint16_t hd, hm;
        memcpy(&hd, b, 2);
        memcpy(&hm, b + 2, 2);
        const float d = kern_f16_to_f32(hd), min = kern_f16_to_f32(hm);
        const uint8_t *scales = b + 4, *q = b + 16;
        for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, q += 32) {
            uint8_t sc, m;
            scale_min_k4(is, scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* q6_K: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales (sub-blocks of 16), f16 d. */
static void dequant_q6_K(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 210) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        uint16_t hd;
        memcpy(&hd, b + 208, 2);
        const float d = kern_f16_to_f32(hd);
        for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * (float)q1;
                y[l + 32] = d * sc[is + 2] * (float)q2;
                y[l + 64] = d * sc[is + 4] * (float)q3;
                y[l + 96] = d * sc[is + 6] * (float)q4;
            }
    }
}

/* q4_1 (f16 d, f16 m, 16 nibble bytes), q5_0 (f16 d, 32 high bits, 16 nibble bytes: value - 16), q5_1 (d, m, high
 * bits, nibbles): element j in the low nibble of byte j, element j + 16 in the high one. */
static void dequant_q4_1_q5(uint32_t type, const uint8_t *b, float *y, int64_t nb) {
    const size_t bs = type == GGML_Q4_1 ? 20 : type == GGML_Q5_0 ? 22 : 24;
    for (int64_t i = 0; i < nb; i++, b += bs, y += 32) {
        uint16_t hd, hm = 0;
        uint32_t qh = 0;
        memcpy(&hd, b, 2);
        if (type != GGML_Q5_0) memcpy(&hm, b + 2, 2);
        const uint8_t *qs = b + (type == GGML_Q4_1 ? 4 : type == GGML_Q5_0 ? 6 : 8);
        if (type != GGML_Q4_1) memcpy(&qh, b + (type == GGML_Q5_0 ? 2 : 4), 4);
        const float d = kern_f16_to_f32(hd), m = type == GGML_Q5_0 ? 0.f : kern_f16_to_f32(hm);
        const int off = type == GGML_Q5_0 ? 16 : 0;
        for (int j = 0; j < 16; j++) {
            int h0 = type == GGML_Q4_1 ? 0 : (int)(((qh >> j) << 4) & 0x10);
            int h1 = type == GGML_Q4_1 ? 0 : (int)((qh >> (j + 12)) & 0x10);
            y[j] = (float)(((qs[j] & 0x0F) | h0) - off) * d + m;
            y[j + 16] = (float)(((qs[j] >> 4) | h1) - off) * d + m;
        }
    }
}

int gguf_dequantize_row(uint32_t ggml_type, const void *src, float *dst, int64_t n) {
    if (ggml_type == GGML_Q4_K || ggml_type == GGML_Q6_K) {
        if (n % QK_K) return -1;
        if (ggml_type == GGML_Q4_K) dequant_q4_K(src, dst, n / QK_K);
        else dequant_q6_K(src, dst, n / QK_K);
        return 0;
    }
    if ((ggml_type == GGML_Q4_1 || ggml_type == GGML_Q5_0 || ggml_type == GGML_Q5_1) && n % 32 == 0) {
        dequant_q4_1_q5(ggml_type, src, dst, n / 32);
        return 0;
    }
    return -1;
}
