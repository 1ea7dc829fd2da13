/*
 * cpu_elementwise.c — the row-wise ops of a LLaMA block on the CPU: embedding gather, RMSNorm, RoPE, SwiGLU,
 * residual add, each followed by its backward twin. Forwards match Hugging Face's LlamaModel in fp32 (variance in
 * fp32, rotate_half RoPE). Backwards follow the gradient rule of kernels.h: parameter grads (embedding table,
 * norm weight) accumulate in fp32, activation grads are overwritten unless beta says otherwise. Threads never
 * share an output element, so every result is deterministic for a given thread count: the norm weight's grad is
 * reduced from per-thread partial rows in thread order, the embedding grad is split by columns.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_attn_tiles.h"
#include "cpu_ops.h"

int kern_cpu_embed(kern_ctx *kc, float *out, const void *table, kern_dtype dt, int64_t vocab, int64_t d,
                   const int32_t *ids, int64_t n) {
    if (vocab <= 0 || d <= 0 || n < 0 || (kern_dtype_is_quant(dt) && d % kern_dtype_block(dt))) return KERN_ESHAPE;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) return KERN_ERANGE;
    size_t row = kern_dtype_bytes(dt, d); /* quantized tables: rows of d/32 blocks, dequantized */
    for (int64_t i = 0; i < n; i++) kern_cpu_widen(out + i * d, (const char *)table + (size_t)ids[i] * row, dt, d);
    return KERN_OK;
}

int kern_cpu_embed_backward(kern_ctx *kc, float *dtable, const float *dout, int64_t vocab, int64_t d,
                            const int32_t *ids, int64_t n) {
    if (vocab <= 0 || d <= 0 || n < 0) return KERN_ESHAPE;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) return KERN_ERANGE;
    /* threads own column slices, so repeated ids never race and rows are summed in order i = 0..n-1 */
    int64_t nt = n * d > 65536 ? kc->n_threads : 1, cols = (d + nt - 1) / nt;
#pragma omp parallel for num_threads((int)nt) schedule(static)
    for (int64_t t = 0; t < nt; t++) {
        int64_t c0 = t * cols, c1 = c0 + cols < d ? c0 + cols : d;
        for (int64_t i = 0; i < n && c0 < c1; i++) {
            float *dst = dtable + (int64_t)ids[i] * d + c0;
            const float *src = dout + i * d + c0;
            for (int64_t j = 0; j < c1 - c0; j++) dst[j] += src[j];
        }
    }
    return KERN_OK;
}

int kern_cpu_scatter_i32(kern_ctx *kc, int32_t *dst, int64_t n_dst, const int32_t *idx, const int32_t *src,
                         int64_t n) {
    if (n_dst < 0 || n < 0 || (n > 0 && (!dst || !idx || !src))) return KERN_ESHAPE;
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= n_dst) return KERN_ERANGE; /* refused before writing anything */
    for (int64_t i = 0; i < n; i++) dst[idx[i]] = src[i];
    return KERN_OK;
}

int kern_cpu_rmsnorm(kern_ctx *kc, float *y, float *rstd, const float *x, const void *w, kern_dtype wdt,
                     int64_t n, int64_t d, float eps) {
    if (n < 0 || d <= 0 || kern_dtype_is_quant(wdt)) return KERN_ESHAPE;
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

/* y = w * x * r with r = (mean(x^2) + eps)^-1/2, so with g = dy * w:
 *   dx_j = r * g_j - r^3 / d * x_j * sum_k g_k x_k        dw_j += sum_i dy_ij * x_ij * r_i */
int kern_cpu_rmsnorm_backward(kern_ctx *kc, float *dx, float *dw, const float *dy, const float *x, const void *w,
                              kern_dtype wdt, const float *rstd, int64_t n, int64_t d, float beta) {
    if (n < 0 || d <= 0 || (beta != 0.f && beta != 1.f) || kern_dtype_is_quant(wdt)) return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    int nt = n * d > 65536 ? kc->n_threads : 1;
    /* scratch: the widened weight [d], then one partial dw row [d] per thread */
    float *wf = kern_cpu_scratch(kc, (size_t)d * (size_t)(1 + (dw ? nt : 0)));
    if (!wf) return KERN_ENOMEM;
    kern_cpu_widen(wf, w, wdt, d);
    float *part = wf + d;
    if (dw) memset(part, 0, (size_t)nt * (size_t)d * sizeof(float)); /* all rows: OpenMP may start fewer threads */
#pragma omp parallel num_threads(nt)
    {
        float *pdw = dw ? part + (size_t)omp_get_thread_num() * (size_t)d : NULL;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            const float *xi = x + i * d, *gi = dy + i * d;
            float *dxi = dx + i * d, r = rstd[i], s = 0.f;
            for (int64_t j = 0; j < d; j++) s += gi[j] * wf[j] * xi[j];
            float c = s * r * r * r / (float)d;
            for (int64_t j = 0; j < d; j++) {
                float gj = gi[j], xj = xi[j];
                if (pdw) pdw[j] += gj * xj * r;
                float v = r * (gj * wf[j]) - c * xj;
                dxi[j] = beta != 0.f ? dxi[j] + v : v;
            }
        }
    }
    if (dw) /* partial rows summed in thread order: deterministic for a given thread count */
        for (int t = 0; t < nt; t++)
            for (int64_t j = 0; j < d; j++) dw[j] += part[(size_t)t * (size_t)d + j];
    return KERN_OK;
}

/* Rotates x[n,heads,hd] by +angle (forward) or -angle (backward: the rotation's transpose is its inverse). */
static int rope_apply(kern_ctx *kc, float *x, int64_t n, int64_t heads, int64_t hd, const int32_t *pos,
                      float theta, float pos_scale, float sign) {
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
            cs[i * hd + half + j] = sign * sinf(ang);
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

int kern_cpu_rope(kern_ctx *kc, float *x, int64_t n, int64_t heads, int64_t hd, const int32_t *pos, float theta,
                  float pos_scale) {
    return rope_apply(kc, x, n, heads, hd, pos, theta, pos_scale, 1.f);
}

int kern_cpu_rope_backward(kern_ctx *kc, float *dx, int64_t n, int64_t heads, int64_t hd, const int32_t *pos,
                           float theta, float pos_scale) {
    return rope_apply(kc, dx, n, heads, hd, pos, theta, pos_scale, -1.f);
}

/* swiglu and its backward take exp(-g) from the attention tiles' vector exp (cpu_attn_tiles.h, <= 1 ulp), in
 * chunks of EXP_CHUNK on the stack. That exp saturates at 1.6e38 where expf overflows; above EXP_OVERFLOW the chunk
 * takes inf instead, as expf and the CUDA twin do, so silu(-inf) stays NaN and silu(g < -88.7) -0 (test_ops
 * compares the two backends NaN for NaN). Every element is read before its outputs are written: outputs may alias
 * inputs. */
#define EXP_CHUNK 256
#define EXP_OVERFLOW 88.7228394f /* ln(FLT_MAX): expf of anything larger is inf */

static void neg_exp_chunk(const att_tiles *T, float *e, const float *gate, int64_t m) {
    for (int64_t j = 0; j < m; j++) e[j] = -gate[j];
    T->vexp(e, e, m);
    for (int64_t j = 0; j < m; j++)
        if (-gate[j] > EXP_OVERFLOW) e[j] = INFINITY;
}

int kern_cpu_swiglu(kern_ctx *kc, float *h, const float *gate, const float *up, int64_t n) {
    if (n < 0) return KERN_ESHAPE;
    const att_tiles *T = att_tiles_get();
    const int64_t chunks = (n + EXP_CHUNK - 1) / EXP_CHUNK;
#pragma omp parallel for num_threads(kc->n_threads) if (n > 65536) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        float e[EXP_CHUNK];
        const int64_t i0 = c * EXP_CHUNK, m = n - i0 < EXP_CHUNK ? n - i0 : EXP_CHUNK;
        neg_exp_chunk(T, e, gate + i0, m);
        for (int64_t j = 0; j < m; j++) {
            float g = gate[i0 + j];
            h[i0 + j] = g / (1.0f + e[j]) * up[i0 + j];
        }
    }
    return KERN_OK;
}

/* h = silu(g) * u with silu(g) = g * sig(g), sig' = sig (1 - sig): silu'(g) = sig(g) * (1 + g * (1 - sig(g))). */
int kern_cpu_swiglu_backward(kern_ctx *kc, float *dgate, float *dup, const float *dh, const float *gate,
                             const float *up, int64_t n) {
    if (n < 0) return KERN_ESHAPE;
    const att_tiles *T = att_tiles_get();
    const int64_t chunks = (n + EXP_CHUNK - 1) / EXP_CHUNK;
#pragma omp parallel for num_threads(kc->n_threads) if (n > 65536) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        float e[EXP_CHUNK];
        const int64_t i0 = c * EXP_CHUNK, m = n - i0 < EXP_CHUNK ? n - i0 : EXP_CHUNK;
        neg_exp_chunk(T, e, gate + i0, m);
        for (int64_t j = 0; j < m; j++) {
            int64_t i = i0 + j;
            float g = gate[i], u = up[i], d = dh[i]; /* read everything before writing: outputs may alias inputs */
            float sg = 1.0f / (1.0f + e[j]);
            dgate[i] = d * u * (sg * (1.0f + g * (1.0f - sg)));
            dup[i] = d * (g * sg);
        }
    }
    return KERN_OK;
}

int kern_cpu_add(kern_ctx *kc, float *y, const float *x, int64_t n) {
    if (n < 0) return KERN_ESHAPE;
#pragma omp parallel for num_threads(kc->n_threads) if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
    return KERN_OK;
}
