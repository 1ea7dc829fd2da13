/*
 * cuda_rmsnorm.cu — y[n, d] = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps), in fp32; rstd is saved per
 * row when asked (for the backward twin). y may alias x.
 *
 * One block per row: the sum of squares is a block reduction in fp32, then each thread scales its elements.
 * The expression order, w * (x * rstd), is the CPU reference's, so the two differ only by the summation order
 * of mean(x^2).
 */
#include "cuda_common.cuh"

template <int DT>
__global__ void rmsnorm_kernel(float *y, float *__restrict__ rstd, const float *x, const void *__restrict__ w,
                               int64_t d, float eps) {
    __shared__ float red[32];
    int64_t row = blockIdx.x;
    const float *xr = x + row * d;
    float *yr = y + row * d;
    float ss = 0.f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) ss += xr[j] * xr[j];
    ss = mn_block_sum(ss, red);
    float r = 1.0f / sqrtf(ss / (float)d + eps);
    if (rstd && threadIdx.x == 0) rstd[row] = r;
    /* every thread read its own elements of x above, so writing y in place cannot race */
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = mn_load_w<DT>(w, j) * (xr[j] * r);
}

int kern_cuda_rmsnorm(kern_ctx *kc, float *y, float *rstd, const float *x, const void *w, kern_dtype wdt,
                      int64_t n, int64_t d, float eps) {
    if (!kc_ok(kc) || n < 0 || d <= 0 || n > INT32_MAX) return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    void (*k)(float *, float *, const float *, const void *, int64_t, float) =
        wdt == KERN_F32 ? rmsnorm_kernel<KERN_F32> : wdt == KERN_BF16 ? rmsnorm_kernel<KERN_BF16>
                                                                      : rmsnorm_kernel<KERN_F16>;
    int threads = d >= 2048 ? 512 : d >= 512 ? 256 : 128;
    MN_LAUNCH(k, (unsigned)n, threads, 0, kc->stream)(y, rstd, x, w, d, eps);
    return kc_check_launch("rmsnorm");
}
