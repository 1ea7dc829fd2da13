/*
 * cuda_optim.cu — the AdamW step of torch.optim.AdamW on fp32 params, moments and grads (contract in kernels.h,
 * reference kernels/cpu/cpu_optim.c). The scalars are computed on the host with the CPU's double arithmetic and
 * rounded once; the per-element expression order is the CPU's (sqrtf and the division are IEEE-rounded on the
 * device by default), so the two backends agree to fp32 rounding. Then axpby and sumsq, the vector ops of a device
 * training step (LoRA's scale, clipping, SGD; the gradient norm read back as one float).
 */
#include <math.h>

#include "cuda_common.cuh"

struct adamw_scalars {
    float grad_scale, decay, w1, b2, c2, neg_step, bc2_sqrt, eps;
};

__global__ void adamw_kernel(float *__restrict__ p, float *__restrict__ m, float *__restrict__ v,
                             const float *__restrict__ g, int64_t n, adamw_scalars s) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float gi = g[i] * s.grad_scale, mi = m[i], vi = v[i];
        float pi = p[i] * s.decay;
        mi = s.w1 < 0.5f ? mi + s.w1 * (gi - mi) : gi - (gi - mi) * (1.0f - s.w1);
        vi = vi * s.b2;
        vi = vi + s.c2 * gi * gi;
        float denom = sqrtf(vi) / s.bc2_sqrt + s.eps;
        p[i] = pi + s.neg_step * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

int kern_cuda_adamw(kern_ctx *kc, float *p, float *m, float *v, const float *g, int64_t n, float grad_scale,
                    double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step) {
    if (!kc_ok(kc) || n < 0 || step < 1 || !(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0) ||
        !(eps >= 0.0))
        return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    adamw_scalars s;
    s.grad_scale = grad_scale;
    s.decay = (float)(1.0 - lr * weight_decay);
    s.w1 = (float)(1.0 - beta1);
    s.b2 = (float)beta2;
    s.c2 = (float)(1.0 - beta2);
    s.neg_step = (float)(-(lr / (1.0 - pow(beta1, (double)step))));
    s.bc2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)step));
    s.eps = (float)eps;
    int64_t blocks = mn_cdiv(n, 256), cap = (int64_t)kc->sm_count * 8;
    MN_LAUNCH(adamw_kernel, (unsigned)(blocks < cap ? blocks : cap), 256, 0, kc->stream)(p, m, v, g, n, s);
    return kc_check_launch("adamw");
}

/* ---- axpby: a grid-stride loop; b == 0 never reads y */

__global__ void axpby_kernel(float *y, const float *x, int64_t n, float a, float b) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = b == 0.f ? a * x[i] : a * x[i] + b * y[i];
}

int kern_cuda_axpby(kern_ctx *kc, float *y, const float *x, int64_t n, float a, float b) {
    if (!kc_ok(kc) || n < 0) return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    int64_t blocks = mn_cdiv(n, 256), cap = (int64_t)kc->sm_count * 8;
    MN_LAUNCH(axpby_kernel, (unsigned)(blocks < cap ? blocks : cap), 256, 0, kc->stream)(y, x, n, a, b);
    return kc_check_launch("axpby");
}

/* ---- sumsq: two launches, deterministic (no atomics): each block sums its grid-stride share in double into
 * partial[block]; one block then sums the partials in block order and adds the result to out[0]. */

#define SUMSQ_THREADS 256
#define SUMSQ_MAX_BLOCKS 1024

/* Sum of v over the block (SUMSQ_THREADS threads) in a shared-memory tree; thread 0 gets the result. */
__device__ double sumsq_block_reduce(double v, double *red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = SUMSQ_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    return red[0];
}

__global__ void sumsq_partial_kernel(double *partial, const float *x, int64_t n) {
    __shared__ double red[SUMSQ_THREADS];
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    double s = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) s += (double)x[i] * x[i];
    s = sumsq_block_reduce(s, red);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sumsq_final_kernel(float *out, const double *partial, int nb) {
    __shared__ double red[SUMSQ_THREADS];
    double s = 0;
    for (int i = threadIdx.x; i < nb; i += blockDim.x) s += partial[i];
    s = sumsq_block_reduce(s, red);
    if (threadIdx.x == 0) out[0] += (float)s;
}

int kern_cuda_sumsq(kern_ctx *kc, float *out, const float *x, int64_t n) {
    if (!kc_ok(kc) || n < 0) return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    int64_t want = mn_cdiv(n, SUMSQ_THREADS * 4), cap = (int64_t)kc->sm_count * 4;
    if (cap > SUMSQ_MAX_BLOCKS) cap = SUMSQ_MAX_BLOCKS;
    int nb = (int)(want < cap ? want : cap);
    if (nb < 1) nb = 1;
    double *partial = (double *)kc_scratch(kc, (size_t)nb * sizeof(double));
    if (!partial) return KERN_ENOMEM;
    MN_LAUNCH(sumsq_partial_kernel, (unsigned)nb, SUMSQ_THREADS, 0, kc->stream)(partial, x, n);
    int rc = kc_check_launch("sumsq (partials)");
    if (rc != KERN_OK) return rc;
    MN_LAUNCH(sumsq_final_kernel, 1, SUMSQ_THREADS, 0, kc->stream)(out, partial, nb);
    return kc_check_launch("sumsq (total)");
}
