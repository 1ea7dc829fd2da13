/*
 * cpu_optim.c — the AdamW step of torch.optim.AdamW (amsgrad off, maximize off), fp32 params, moments, grads.
 *
 * Same arithmetic as torch's single-tensor implementation, step for step: scalars computed in double as Python
 * does (1 - lr*wd, 1 - beta^t, lr / bias_correction1, sqrt(bias_correction2)) and rounded to fp32 where torch
 * hands them to a float tensor op; per element, in fp32:
 *   g = grad * grad_scale                      (torch.nn.utils.clip_grad_norm_ scales grads in place first)
 *   p = p * (1 - lr*wd)                        param.mul_(1 - lr * weight_decay): decoupled weight decay
 *   m = lerp(m, g, 1 - beta1)                  exp_avg.lerp_(grad, 1 - beta1), torch's two-branch lerp
 *   v = v * beta2 + (1 - beta2) * g * g        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
 *   denom = sqrt(v) / sqrt(1 - beta2^t) + eps  eps outside the square root
 *   p = p + (-lr / (1 - beta1^t)) * m / denom  param.addcdiv_(exp_avg, denom, value=-step_size)
 * (The compiler may contract a multiply-add into an FMA, so agreement with torch is to fp32 rounding, not bits.)
 * Beside it the two vector ops a training step needs on any backend: axpby (LoRA's scale, clipping, SGD) and sumsq
 * (the squared gradient norm).
 */
#include <math.h>
#include <omp.h>

#include "cpu_ops.h"

int kern_cpu_adamw(kern_ctx *kc, float *p, float *m, float *v, const float *g, int64_t n, float grad_scale,
                   double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step) {
    if (n < 0 || step < 1 || !(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0) || !(eps >= 0.0))
        return KERN_ESHAPE;
    const float decay = (float)(1.0 - lr * weight_decay), w1 = (float)(1.0 - beta1), b2 = (float)beta2,
                c2 = (float)(1.0 - beta2);
    const float neg_step = (float)(-(lr / (1.0 - pow(beta1, (double)step))));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)step)), e = (float)eps;
#pragma omp parallel for num_threads(kc->n_threads) if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale, mi = m[i], vi = v[i];
        float pi = p[i] * decay;
        mi = w1 < 0.5f ? mi + w1 * (gi - mi) : gi - (gi - mi) * (1.0f - w1);
        vi = vi * b2;
        vi = vi + c2 * gi * gi;
        float denom = sqrtf(vi) / bc2_sqrt + e;
        p[i] = pi + neg_step * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
    return KERN_OK;
}

/* y = a x + b y. b == 0 writes a * x without reading y (y may hold anything, NaN included), so the product is
 * the same fp32 multiply the callers' own loops did. */
int kern_cpu_axpby(kern_ctx *kc, float *y, const float *x, int64_t n, float a, float b) {
    if (n < 0) return KERN_ESHAPE;
    if (b == 0.f) {
#pragma omp parallel for num_threads(kc->n_threads) if (n > 65536) schedule(static)
        for (int64_t i = 0; i < n; i++) y[i] = a * x[i];
    } else {
#pragma omp parallel for num_threads(kc->n_threads) if (n > 65536) schedule(static)
        for (int64_t i = 0; i < n; i++) y[i] = a * x[i] + b * y[i];
    }
    return KERN_OK;
}

/* out[0] += sum x^2: one double sum in index order (single-threaded: the order is the reference's). */
int kern_cpu_sumsq(kern_ctx *kc, float *out, const float *x, int64_t n) {
    (void)kc;
    if (n < 0) return KERN_ESHAPE;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    out[0] += (float)s;
    return KERN_OK;
}
