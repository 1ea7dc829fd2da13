/*
 * quant_dot_scalar.c — the plain-C tile kernel for q8_0 / q4_0 weights against int8 activation blocks: the
 * readable reference the vector paths (quant_dot_avx2.c, quant_dot_avx512.c) must match, and the fallback on CPUs
 * without AVX2. Per block: an exact int32 sum of products, times the weight's f16 scale and the activation's scale.
 */
#include "quant.h"

static int32_t block_dot(const void *wb, kern_dtype dt, const int8_t *x) {
    int32_t s = 0;
    if (dt == KERN_Q8_0) {
        const kq_block_q8_0 *b = wb;
        for (int t = 0; t < KERN_QBLOCK; t++) s += b->qs[t] * x[t];
    } else {
        const kq_block_q4_0 *b = wb;
        for (int t = 0; t < KERN_QBLOCK / 2; t++)
            s += ((b->qs[t] & 15) - 8) * x[t] + ((b->qs[t] >> 4) - 8) * x[t + KERN_QBLOCK / 2];
    }
    return s;
}

static void tile(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0, int nx,
                 int64_t nb, kern_dtype dt) {
    size_t bs = kern_dtype_bytes(dt, KERN_QBLOCK);
    for (int i = 0; i < nw; i++) {
        const char *wr = (const char *)w + (size_t)i * wrb;
        for (int j = 0; j < nx; j++) {
            int64_t r = x0 + j;
            const int8_t *q = a->qs + r * nb * KERN_QBLOCK;
            const float *d = a->d + r * nb;
            float s = 0.f;
            for (int64_t b = 0; b < nb; b++) {
                const char *wb = wr + (size_t)b * bs;
                float dw = kern_f16_to_f32(*(const uint16_t *)wb); /* d is each block's first field */
                s += dw * d[b] * (float)block_dot(wb, dt, q + b * KERN_QBLOCK);
            }
            out[j * ldo + i] = s;
        }
    }
}

static void tile_q8(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0, int nx,
                    int64_t nb) {
    tile(out, ldo, w, wrb, nw, a, x0, nx, nb, KERN_Q8_0);
}
static void tile_q4(float *out, int64_t ldo, const void *w, size_t wrb, int nw, const kq_act *a, int64_t x0, int nx,
                    int64_t nb) {
    tile(out, ldo, w, wrb, nw, a, x0, nx, nb, KERN_Q4_0);
}

kq_tile_fn kq_tile_scalar(kern_dtype dt) {
    /* k-quants: quant_kdot_scalar.c; q4_1, q5_0, q5_1, q2_K, q3_K, q5_K: quant_xdot_scalar.c */
    if (kq_is_x(dt)) return kq_xtile_scalar(dt);
    return dt == KERN_Q8_0 ? tile_q8 : dt == KERN_Q4_0 ? tile_q4 : kq_ktile_scalar(dt);
}
