/*
 * cpu_elementwise.c — the row-wise ops of a LLaMA block on the CPU: embedding gather, RMSNorm, RoPE, SwiGLU,
 * residual add. Each matches Hugging Face's LlamaModel in fp32 (variance in fp32, rotate_half RoPE).
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_ops.h"

int kern_cpu_embed(kern_ctx *kc, float *out, const void *table, kern_dtype dt, int64_t vocab, int64_t d,
                   const int32_t *ids, int64_t n) {
    if (vocab <= 0 || d <= 0 || n < 0) return KERN_ESHAPE;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) return KERN_ERANGE;
    size_t es = kern_dtype_size(dt);
    for (int64_t i = 0; i < n; i++)
        kern_cpu_widen(out + i * d, (const char *)table + (size_t)ids[i] * (size_t)d * es, dt, d);
    return KERN_OK;
}

int kern_cpu_rmsnorm(kern_ctx *kc, float *y, float *rstd, const float *x, const void *w, kern_dtype wdt,
                     int64_t n, int64_t d, float eps) {
    if (n < 0 || d <= 0) return KERN_ESHAPE;
    float *wf = kern_cpu_scratch(kc, (size_t)d);
    if (!wf) return KERN_ENOMEM;
    kern_cpu_widen(wf, w, wdt, d);
#pragma omp parallel for num_threads(kc->n_threads) if (n * d > 65536) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * d;
        float *yi = y + i * d;
        float r = 1.0f / sqrtf(kern_dot_f32(xi, xi, d) / (float)d + eps);
        if (rstd) rstd[i] = r;
        for (int64_t j = 0; j < d; j++) yi[j] = wf[j] * (xi[j] * r);
    }
    return KERN_OK;
}

int kern_cpu_rope(kern_ctx *kc, float *x, int64_t n, int64_t heads, int64_t hd, const int32_t *pos, float theta,
                  float pos_scale) {
    if (n < 0 || heads <= 0 || hd <= 0 || (hd & 1) || theta <= 0.f || pos_scale <= 0.f) return KERN_ESHAPE;
    int64_t half = hd / 2;
    float *cs = kern_cpu_scratch(kc, (size_t)(n * hd));
    if (!cs) return KERN_ENOMEM;
    /* cos/sin once per token, shared by every head. The frequency follows HF's fp32 arithmetic:
     * inv_freq = 1 / theta^(2j/hd), divided by the linear scaling factor, times the position. */
    for (int64_t i = 0; i < n; i++) {
        if (pos[i] < 0) return KERN_ERANGE;
        for (int64_t j = 0; j < half; j++) {
            float inv = (float)(1.0 / (double)powf(theta, (float)(2 * j) / (float)hd)) / pos_scale;
            float ang = inv * (float)pos[i];
            cs[i * hd + j] = cosf(ang);
            cs[i * hd + half + j] = sinf(ang);
        }
    }
#pragma omp parallel for num_threads(kc->n_threads) if (n * heads * hd > 65536) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *c = cs + i * hd, *s = c + half;
        for (int64_t h = 0; h < heads; h++) {
            float *v = x + (i * heads + h) * hd;
            for (int64_t j = 0; j < half; j++) {
                float a = v[j], b = v[j + half];
                v[j] = a * c[j] - b * s[j];
                v[j + half] = b * c[j] + a * s[j];
            }
        }
    }
    return KERN_OK;
}

int kern_cpu_swiglu(kern_ctx *kc, float *h, const float *gate, const float *up, int64_t n) {
    if (n < 0) return KERN_ESHAPE;
#pragma omp parallel for num_threads(kc->n_threads) if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        h[i] = g / (1.0f + expf(-g)) * up[i];
    }
    return KERN_OK;
}

int kern_cpu_add(kern_ctx *kc, float *y, const float *x, int64_t n) {
    if (n < 0) return KERN_ESHAPE;
#pragma omp parallel for num_threads(kc->n_threads) if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
    return KERN_OK;
}
