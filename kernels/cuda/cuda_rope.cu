/*
 * cuda_rope.cu — in-place RoPE on x[n, heads, hd], Hugging Face rotate_half convention:
 *   (a, b) = (x[j], x[j + hd/2]) -> (a cos - b sin, b cos + a sin), angle = pos[i] * inv_freq[j].
 *
 * inv_freq[j] = (1 / theta^(2j/hd)) / pos_scale is computed on the host with exactly the CPU reference's
 * float/double steps and passed by value (a 1 KB parameter block, hd <= 512), so both backends multiply the same
 * fp32 frequency by the same fp32 position; only cosf/sinf (CUDA's full-range versions, <= 2 ulp) differ.
 * One thread per (token, head, j < hd/2) pair. A negative position cannot be refused before the launch (pos is
 * in device memory): its rows are left untouched and KERN_ERANGE is deferred to the next sync.
 * rope_backward is the same kernel with sin negated: the transposed rotation, i.e. the inverse.
 */
#include <math.h>

#include "cuda_common.cuh"

#define ROPE_MAX_HALF 256

struct rope_freqs {
    float inv[ROPE_MAX_HALF];
};

__global__ void rope_kernel(float *__restrict__ x, int64_t total, int64_t heads, int64_t hd,
                            const int32_t *__restrict__ pos, rope_freqs f, float sign, int *err) {
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* (token, head, j) flattened */
    if (t >= total) return;
    int64_t half = hd / 2, j = t % half, th = t / half, i = th / heads;
    int32_t p = pos[i];
    if (p < 0) {
        *err = KERN_ERANGE;
        return;
    }
    float ang = f.inv[j] * (float)p;
    float c = cosf(ang), s = sign * sinf(ang);
    float *v = x + th * hd;
    float a = v[j], b = v[j + half];
    v[j] = a * c - b * s;
    v[j + half] = b * c + a * s;
}

static int rope_launch(kern_ctx *kc, float *x, int64_t n, int64_t heads, int64_t hd, const int32_t *pos,
                       float theta, float pos_scale, float sign, const char *what) {
    if (!kc_ok(kc) || n < 0 || heads <= 0 || hd <= 0 || (hd & 1) || hd / 2 > ROPE_MAX_HALF || theta <= 0.f ||
        pos_scale <= 0.f)
        return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    rope_freqs f;
    int64_t half = hd / 2;
    for (int64_t j = 0; j < half; j++) /* the CPU reference's arithmetic, step for step */
        f.inv[j] = (float)(1.0 / (double)powf(theta, (float)(2 * j) / (float)hd)) / pos_scale;
    int64_t total = n * heads * half;
    int64_t blocks = mn_cdiv(total, 256);
    if (blocks > INT32_MAX) return KERN_ESHAPE;
    MN_LAUNCH(rope_kernel, (unsigned)blocks, 256, 0, kc->stream)(x, total, heads, hd, pos, f, sign, kc->err_dev);
    return kc_check_launch(what);
}

int kern_cuda_rope(kern_ctx *kc, float *x, int64_t n, int64_t heads, int64_t hd, const int32_t *pos, float theta,
                   float pos_scale) {
    return rope_launch(kc, x, n, heads, hd, pos, theta, pos_scale, 1.f, "rope");
}

int kern_cuda_rope_backward(kern_ctx *kc, float *dx, int64_t n, int64_t heads, int64_t hd, const int32_t *pos,
                            float theta, float pos_scale) {
    return rope_launch(kc, dx, n, heads, hd, pos, theta, pos_scale, -1.f, "rope_backward");
}
