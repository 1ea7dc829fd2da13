/*
 * cuda_loss.cu — cross-entropy over the vocabulary fused with its softmax and gradient (contract in kernels.h,
 * reference kernels/cpu/cpu_loss.c). dlogits may be the logits buffer: each row is read whole before it is
 * overwritten, so training holds one [tokens, vocab] buffer.
 *
 * Three launches on the context's stream:
 *   count_kernel  one block: rows with a target (a float block sum: exact below 2^24 rows, larger n refused);
 *                 a target outside [-1, vocab) stores a deferred KERN_ERANGE (its row is then treated as ignored,
 *                 never read out of bounds; the CPU refuses before writing anything);
 *   row_kernel    one block per row: max and exp-sum reductions, row loss lse - l[target] into scratch, then
 *                 dloss / count * (exp(l - lse) - onehot) over the row (zeros on ignored rows);
 *   mean_kernel   one thread sums the row losses in row order in double, as the CPU does (deterministic).
 */
#include <math.h>

#include "cuda_common.cuh"

#define CE_THREADS 256

__global__ void ce_count_kernel(float *count, const int32_t *__restrict__ targets, int64_t n, int64_t vocab,
                                int *err) {
    __shared__ float red[32];
    float c = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        int32_t t = targets[i];
        if (t < -1 || t >= vocab) *err = KERN_ERANGE;
        else c += t != -1 ? 1.f : 0.f;
    }
    c = mn_block_sum(c, red);
    if (threadIdx.x == 0) *count = c;
}

__global__ void ce_row_kernel(float *row_loss, float *dlogits, const float *logits, const int32_t *__restrict__ targets,
                              int64_t vocab, const float *__restrict__ count, float dloss) {
    __shared__ float red[32];
    int64_t row = blockIdx.x;
    const float *l = logits + row * vocab;
    float *d = dlogits ? dlogits + row * vocab : NULL;
    int32_t t = targets[row];
    if (t < 0 || t >= vocab) { /* ignored (-1) or refused: zero loss and gradient */
        if (threadIdx.x == 0) row_loss[row] = 0.f;
        if (d)
            for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) d[j] = 0.f;
        return;
    }
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) mx = fmaxf(mx, l[j]);
    mx = mn_block_max(mx, red);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) s += expf(l[j] - mx);
    float lt = l[t]; /* read before the reduction's barrier: nothing is overwritten yet */
    s = mn_block_sum(s, red);
    float lse = mx + logf(s);
    if (threadIdx.x == 0) row_loss[row] = lse - lt;
    if (!d) return;
    float sc = dloss / *count;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) d[j] = sc * expf(l[j] - lse);
    __syncthreads();
    if (threadIdx.x == 0) d[t] -= sc;
}

__global__ void ce_mean_kernel(float *loss, const float *row_loss, int64_t n, const float *count) {
    if (threadIdx.x != 0) return;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += row_loss[i];
    loss[0] = *count > 0.f ? (float)(s / (double)*count) : __int_as_float(0x7fc00000); /* NaN, as torch */
}

int kern_cuda_cross_entropy(kern_ctx *kc, float *loss, float *dlogits, const float *logits, const int32_t *targets,
                            int64_t n, int64_t vocab, float dloss) {
    if (!kc_ok(kc) || n < 0 || vocab <= 0 || vocab > INT32_MAX || n > (1 << 24)) return KERN_ESHAPE;
    if (n == 0) {
        if (!loss) return KERN_OK;
        const float nan = NAN;
        cudaError_t e = cudaMemcpyAsync(loss, &nan, sizeof nan, cudaMemcpyHostToDevice, kc->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(kc->stream); /* &nan is on this stack frame */
        return e == cudaSuccess ? KERN_OK : KERN_EBACKEND;
    }
    float *scratch = (float *)kc_scratch(kc, ((size_t)n + 1) * sizeof(float)); /* count, then row losses [n] */
    if (!scratch) return KERN_ENOMEM;
    MN_LAUNCH(ce_count_kernel, 1, CE_THREADS, 0, kc->stream)(scratch, targets, n, vocab, kc->err_dev);
    int rc = kc_check_launch("cross_entropy (count)");
    if (rc != KERN_OK) return rc;
    MN_LAUNCH(ce_row_kernel, (unsigned)n, CE_THREADS, 0, kc->stream)(scratch + 1, dlogits, logits, targets, vocab,
                                                                     scratch, dloss);
    rc = kc_check_launch("cross_entropy (rows)");
    if (rc != KERN_OK || !loss) return rc;
    MN_LAUNCH(ce_mean_kernel, 1, 32, 0, kc->stream)(loss, scratch + 1, n, scratch);
    return kc_check_launch("cross_entropy (mean)");
}
