/*
 * gguf_kquants.c — dequantization of GGML block types for the loader and tests: q4_1, q5_0, q5_1 (32-blocks, which
 * mnemo has no matmul kernels for: llama.cpp's fallbacks for rows that are not whole 256-blocks, e.g.
 * LongLLaMA-3B's 3200; the loader converts them to q8_0 once at load, gguf_llama.c), and q4_K / q6_K, which the
 * kernels read natively (kern_dequantize_row, quant_kblocks.c). The arithmetic of ggml-quants.c's
 * dequantize_row_*, checked against gguf-py's numpy port in test_gguf.
 */
#include <string.h>

#include "gguf.h"
#include "kernels.h"

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
        if (n % KERN_QK_K) return -1;
        kern_dequantize_row(dst, src, ggml_type == GGML_Q4_K ? KERN_Q4_K : KERN_Q6_K, n);
        return 0;
    }
    if ((ggml_type == GGML_Q4_1 || ggml_type == GGML_Q5_0 || ggml_type == GGML_Q5_1) && n % 32 == 0) {
        dequant_q4_1_q5(ggml_type, src, dst, n / 32);
        return 0;
    }
    return -1;
}
