/*
 * cuda_rmsnorm.cu — y[n, d] = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps), in fp32; rstd is saved per
 * row when asked (for the backward twin). y may alias x.
 *
 * One block per row: the sum of squares is a block reduction in fp32, then each thread scales its elements.
 * The expression order, w * (x * rstd), is the CPU reference's, so the two differ only by the summation order
 * of mean(x^2).
 *
 * rmsnorm_backward, with g = dy * w: dx_j = r g_j - r^3/d x_j sum_k g_k x_k (+ beta * dx), dw_j += sum_i dy x r.
 * dx: one block per row (a block reduction, then each thread its elements). dw without atomics, independent of
 * scheduling: blocks of 32 columns x 8 row lanes each sum a fixed chunk of rows into a partial (coalesced rows),
 * then one thread per column adds the partials in order. The chunks matter for qk_norm's head norms: d = head_dim
 * columns over n = tokens x heads rows, where one thread per column would be a few dozen threads walking millions
 * of rows.
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

template <int DT>
__global__ void rmsnorm_backward_dx_kernel(float *dx, const float *dy, const float *__restrict__ x,
                                           const void *__restrict__ w, const float *__restrict__ rstd, int64_t d,
                                           bool beta1) {
    __shared__ float red[32];
    int64_t row = blockIdx.x;
    const float *xr = x + row * d, *gr = dy + row * d;
    float *dxr = dx + row * d;
    float s = 0.f, r = rstd[row];
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += gr[j] * mn_load_w<DT>(w, j) * xr[j];
    s = mn_block_sum(s, red);
    float c = s * r * r * r / (float)d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        float v = r * (gr[j] * mn_load_w<DT>(w, j)) - c * xr[j];
        dxr[j] = beta1 ? dxr[j] + v : v;
    }
}

enum { DW_COLS = 32, DW_LANES = 8, DW_MIN_ROWS = 256, DW_MAX_CHUNKS = 1024 };

/* part[c, j] = sum over chunk c's rows of dy x r (block (32, 8): lane ty takes every 8th row of the chunk) */
__global__ void rmsnorm_backward_dw_part_kernel(float *__restrict__ part, const float *__restrict__ dy,
                                                const float *__restrict__ x, const float *__restrict__ rstd,
                                                int64_t n, int64_t d, int64_t chunk) {
    __shared__ float red[DW_LANES][DW_COLS];
    const int64_t j = (int64_t)blockIdx.x * DW_COLS + threadIdx.x, c = blockIdx.y;
    const int64_t r0 = c * chunk, r1 = r0 + chunk < n ? r0 + chunk : n;
    float s = 0.f;
    if (j < d)
        for (int64_t i = r0 + threadIdx.y; i < r1; i += DW_LANES) s += dy[i * d + j] * x[i * d + j] * rstd[i];
    red[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < d) {
        float t = 0.f;
        for (int l = 0; l < DW_LANES; l++) t += red[l][threadIdx.x];
        part[c * d + j] = t;
    }
}

__global__ void rmsnorm_backward_dw_sum_kernel(float *__restrict__ dw, const float *__restrict__ part, int64_t chunks,
                                               int64_t d) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d) return;
    float s = 0.f;
    for (int64_t c = 0; c < chunks; c++) s += part[c * d + j];
    dw[j] += s;
}

int kern_cuda_rmsnorm_backward(kern_ctx *kc, float *dx, float *dw, const float *dy, const float *x, const void *w,
                               kern_dtype wdt, const float *rstd, int64_t n, int64_t d, float beta) {
    if (!kc_ok(kc) || n < 0 || d <= 0 || n > INT32_MAX || (beta != 0.f && beta != 1.f)) return KERN_ESHAPE;
    if (wdt != KERN_F32 && wdt != KERN_BF16 && wdt != KERN_F16) return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    if (dw) { /* before dx: dx may alias dy. Chunks of >= 256 rows, at most 1024 of them: a function of n alone */
        int64_t chunks = mn_cdiv(n, DW_MIN_ROWS);
        if (chunks > DW_MAX_CHUNKS) chunks = DW_MAX_CHUNKS;
        const int64_t chunk = mn_cdiv(n, chunks);
        chunks = mn_cdiv(n, chunk);
        float *part = (float *)kc_scratch(kc, (size_t)(chunks * d) * sizeof(float));
        if (!part) return KERN_ENOMEM;
        MN_LAUNCH(rmsnorm_backward_dw_part_kernel, dim3((unsigned)mn_cdiv(d, DW_COLS), (unsigned)chunks),
                  dim3(DW_COLS, DW_LANES), 0, kc->stream)(part, dy, x, rstd, n, d, chunk);
        int rc = kc_check_launch("rmsnorm_backward (dw partials)");
        if (rc != KERN_OK) return rc;
        MN_LAUNCH(rmsnorm_backward_dw_sum_kernel, (unsigned)mn_cdiv(d, 128), 128, 0, kc->stream)(dw, part, chunks, d);
        rc = kc_check_launch("rmsnorm_backward (dw)");
        if (rc != KERN_OK) return rc;
    }
    void (*k)(float *, const float *, const float *, const void *, const float *, int64_t, bool) =
        wdt == KERN_F32 ? rmsnorm_backward_dx_kernel<KERN_F32>
        : wdt == KERN_BF16 ? rmsnorm_backward_dx_kernel<KERN_BF16>
                           : rmsnorm_backward_dx_kernel<KERN_F16>;
    int threads = d >= 2048 ? 512 : d >= 512 ? 256 : 128;
    MN_LAUNCH(k, (unsigned)n, threads, 0, kc->stream)(dx, dy, x, w, rstd, d, beta != 0.f);
    return kc_check_launch("rmsnorm_backward (dx)");
}
