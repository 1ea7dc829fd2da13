/*
 * cuda_embed.cu — embedding gather: out[n, d] = table[ids[i], :] widened to fp32 (exact for bf16/f16).
 *
 * One block per token row, threads stride over d. ids live in device memory, so a bad id cannot be refused
 * before the launch: the kernel fills that row with NaN (never reading outside the table) and stores
 * KERN_ERANGE in the context's deferred-error word, which the next sync / device-to-host copy reports.
 *
 * embed_backward: dtable[ids[i], :] += dout[i, :]. One thread per column walks the rows in order i = 0..n-1, so
 * repeated ids never race and sums come in the CPU's order (no atomics, deterministic). A bad id is skipped and
 * reported as a deferred KERN_ERANGE (the CPU refuses before writing anything).
 */
#include "cuda_common.cuh"

template <int DT>
__global__ void embed_kernel(float *__restrict__ out, const void *__restrict__ table, int64_t vocab, int64_t d,
                             const int32_t *__restrict__ ids, int *err) {
    int64_t row = blockIdx.x;
    int32_t id = ids[row];
    float *o = out + row * d;
    if (id < 0 || id >= vocab) {
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = __int_as_float(0x7fc00000); /* NaN */
        if (threadIdx.x == 0) *err = KERN_ERANGE;
        return;
    }
    int64_t base = (int64_t)id * d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = mn_load_w<DT>(table, base + j);
}

int kern_cuda_embed(kern_ctx *kc, float *out, const void *table, kern_dtype dt, int64_t vocab, int64_t d,
                    const int32_t *ids, int64_t n) {
    if (!kc_ok(kc) || vocab <= 0 || d <= 0 || n < 0 || n > INT32_MAX) return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    void (*k)(float *, const void *, int64_t, int64_t, const int32_t *, int *) =
        dt == KERN_F32 ? embed_kernel<KERN_F32> : dt == KERN_BF16 ? embed_kernel<KERN_BF16> : embed_kernel<KERN_F16>;
    int threads = d >= 1024 ? 256 : 128;
    MN_LAUNCH(k, (unsigned)n, threads, 0, kc->stream)(out, table, vocab, d, ids, kc->err_dev);
    return kc_check_launch("embed");
}

__global__ void embed_backward_kernel(float *__restrict__ dtable, const float *__restrict__ dout, int64_t vocab,
                                      int64_t d, const int32_t *__restrict__ ids, int64_t n, int *err) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= d) return;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= vocab) {
            *err = KERN_ERANGE;
            continue;
        }
        dtable[(int64_t)id * d + c] += dout[i * d + c];
    }
}

int kern_cuda_embed_backward(kern_ctx *kc, float *dtable, const float *dout, int64_t vocab, int64_t d,
                             const int32_t *ids, int64_t n) {
    if (!kc_ok(kc) || vocab <= 0 || d <= 0 || n < 0 || mn_cdiv(d, 128) > INT32_MAX) return KERN_ESHAPE;
    if (n == 0) return KERN_OK;
    MN_LAUNCH(embed_backward_kernel, (unsigned)mn_cdiv(d, 128), 128, 0, kc->stream)(dtable, dout, vocab, d, ids, n,
                                                                                    kc->err_dev);
    return kc_check_launch("embed_backward");
}
