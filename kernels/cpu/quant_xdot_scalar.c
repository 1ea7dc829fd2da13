/*
 * quant_xdot_scalar.c — the plain-C tile kernel for q4_1, q5_0, q5_1, q2_K, q3_K and q5_K weights against the int8
 * activation blocks of kq_quantize_act (one fp32 scale per 32 elements, as for every quantized type): the readable
 * reference the vector paths (quant_xdot_avx2.c, quant_xdot_avx512.c) must match, and the fallback without AVX2.
 * Per 32-block b of the row, with the weight block's integers, scales and mins per half (kq_xblock_ints):
 *   w . x_b = d_x(b) * sum_h (sc_h * sum_{e in h} q_e x_e - mn_h * sum_{e in h} x_e)
 * the integer sums exact.
 */
#include "quant.h"

static void tile(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0, int nx,
                 int64_t nb, kern_dtype dt) {
    for (int i = 0; i < nw; i++) {
        const char *wr = (const char *)w + (size_t)i * wrb;
        for (int j = 0; j < nx; j++) {
            int64_t r = x0 + j;
            const int8_t *xq = a->qs + r * nb * KERN_QBLOCK;
            float s = 0.f;
            for (int64_t b = 0; b < nb; b++) {
                int8_t q[32];
                float sc[2], mn[2];
                kq_xblock_ints(wr, dt, b, q, sc, mn);
                int32_t p[2] = {0, 0}, sx[2] = {0, 0};
                for (int e = 0; e < 32; e++) p[e / 16] += q[e] * xq[b * 32 + e], sx[e / 16] += xq[b * 32 + e];
                s += a->d[r * nb + b] *
                     (sc[0] * (float)p[0] + sc[1] * (float)p[1] - mn[0] * (float)sx[0] - mn[1] * (float)sx[1]);
            }
            out[j * ldo + i] = s;
        }
    }
}

#define XTILE(name, DT)                                                                                              \
    static void name(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0,     \
                     int nx, int64_t nb) {                                                                           \
        tile(out, ldo, w, wrb, nw, a, x0, nx, nb, DT);                                                              \
    }
XTILE(tile_q4_1, KERN_Q4_1)
XTILE(tile_q5_0, KERN_Q5_0)
XTILE(tile_q5_1, KERN_Q5_1)
XTILE(tile_q2_K, KERN_Q2_K)
XTILE(tile_q3_K, KERN_Q3_K)
XTILE(tile_q5_K, KERN_Q5_K)

kq_tile_fn kq_xtile_scalar(kern_dtype dt) {
    switch (dt) {
    case KERN_Q4_1: return tile_q4_1;
    case KERN_Q5_0: return tile_q5_0;
    case KERN_Q5_1: return tile_q5_1;
    case KERN_Q2_K: return tile_q2_K;
    case KERN_Q3_K: return tile_q3_K;
    case KERN_Q5_K: return tile_q5_K;
    default: return NULL;
    }
}
