/*
 * retrieval_rotate.c — RoPE rotations retrieval memory applies itself (retrieval_memory.h): retrieved keys at the
 * memory's one position, and keys and queries of a block at their relative distances for its representatives.
 * The angles are computed as the CPU rope op computes them (HF's fp32 inv_freq, the linear scaling factor), so a
 * key rotated here equals one the forward pass rotated at the same position.
 */
#include <math.h>

#include "retrieval_memory.h"

void retrieval_rope_table(const model_config *cfg, int32_t p, float *cs) {
    const int32_t hd = cfg->head_dim, half = hd / 2;
    const float theta = cfg->rope_theta, pos_scale = cfg->rope_scaling_factor;
    for (int32_t j = 0; j < half; j++) {
        float inv = (float)(1.0 / (double)powf(theta, (float)(2 * j) / (float)hd)) / pos_scale;
        float ang = inv * (float)p;
        cs[j] = cosf(ang);
        cs[half + j] = sinf(ang);
    }
}

void retrieval_rotate(float *x, const float *cs, int32_t hd, float sign) {
    const int32_t half = hd / 2;
    const float *c = cs, *s = cs + half;
    for (int32_t j = 0; j < half; j++) {
        float a = x[j], b = x[j + half], sn = sign * s[j];
        x[j] = a * c[j] - b * sn;
        x[j + half] = b * c[j] + a * sn;
    }
}
