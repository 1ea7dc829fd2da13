/*
 * quant_kdot_scalar.c — the plain-C tile kernel for q4_K / q6_K weights against the int8 activation blocks of
 * kq_quantize_act (one fp32 scale per 32 elements, the same rounding as for q8_0 / q4_0): the readable reference
 * the vector paths (quant_kdot_avx2.c, quant_kdot_avx512.c) must match, and the fallback without AVX2.
 * Per 32-block b of the row: the weight block's integers q and scales (kq_kblock_ints) against x's int8 values:
 *   w . x_b = d_x(b) * (sc_0 * sum_{e<16} q_e x_e + sc_1 * sum_{e>=16} q_e x_e - mn * sum_e x_e)
 * the integer sums exact; sum_e x_e is the activation block's stored sum (the min term needs nothing else).
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
                float sc[2], mn;
                kq_kblock_ints(wr, dt, b, q, sc, &mn);
                int32_t s0 = 0, s1 = 0;
                for (int e = 0; e < 16; e++) s0 += q[e] * xq[b * 32 + e];
                for (int e = 16; e < 32; e++) s1 += q[e] * xq[b * 32 + e];
                s += a->d[r * nb + b] * (sc[0] * (float)s0 + sc[1] * (float)s1 - mn * (float)a->sum[r * nb + b]);
            }
            out[j * ldo + i] = s;
        }
    }
}

static void tile_q4k(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0, int nx,
                     int64_t nb) {
    tile(out, ldo, w, wrb, nw, a, x0, nx, nb, KERN_Q4_K);
}
static void tile_q6k(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0, int nx,
                     int64_t nb) {
    tile(out, ldo, w, wrb, nw, a, x0, nx, nb, KERN_Q6_K);
}

kq_tile_fn kq_ktile_scalar(kern_dtype dt) { return dt == KERN_Q4_K ? tile_q4k : dt == KERN_Q6_K ? tile_q6k : NULL; }
