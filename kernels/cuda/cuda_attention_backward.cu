/*
 * cuda_attention_backward.cu — the backward twin of kern_cuda_attention (causal GQA over a KV cache), fp32.
 * Contract in kernels.h; the same algorithm as the CPU reference (kernels/cpu/cpu_attention_backward.c):
 *   s_ij = scale q_i.k_j   p_ij = exp(s_ij - lse_i)   D_i = dout_i.out_i   ds_ij = p_ij (dout_i.v_j - D_i)
 *   dq_i = scale sum_j ds_ij k_j (=)      dk_j += scale sum ds_ij q_i      dv_j += sum p_ij dout_i
 * Two kernels, no atomics, each output element owned by one block with a fixed summation order (deterministic):
 *   dq_kernel    one block per (query, head) row, a warp per key (lanes over head_dim), per-warp accumulators
 *                reduced through shared memory; it also writes D_i to scratch for the next kernel;
 *   dkv_kernel   one block per (key, KV head), a warp per (query, head of the group) pair that sees the key.
 * Scores and dout.v are recomputed in each kernel instead of stored ([nq, nkv] never exists). This is a plain
 * SIMT version for correctness first; a tiled flash-attention-2 backward (Q/K/V tiles in shared memory) is the
 * step for speed. Limits: head_dim <= 256 (KERN_ESHAPE), lse required (KERN_ESHAPE when NULL, as on the CPU).
 */
#include <math.h>

#include "cuda_common.cuh"

#define AB_THREADS 128 /* 4 warps */
#define AB_WARPS (AB_THREADS / 32)
#define AB_MAX_HD 256
#define AB_E (AB_MAX_HD / 32) /* head_dim values per lane */

/* lane's elements d = lane + 32 e of a row, zero past hd */
__device__ __forceinline__ void ab_load(float *r, const float *p, int lane, int hd) {
#pragma unroll
    for (int e = 0; e < AB_E; e++) {
        int d = lane + 32 * e;
        r[e] = d < hd ? p[d] : 0.f;
    }
}

__device__ __forceinline__ float ab_dot(const float *a, const float *b) {
    float s = 0.f;
#pragma unroll
    for (int e = 0; e < AB_E; e++) s = fmaf(a[e], b[e], s);
    return mn_warp_sum(s);
}

/* Sums the AB_WARPS per-warp rows acc into dst[0..hd) (+= when accumulate), through red[AB_WARPS][AB_MAX_HD]. */
__device__ __forceinline__ void ab_reduce_store(float *dst, const float *acc, float *red, int hd, bool accumulate) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int e = 0; e < AB_E; e++) red[warp * AB_MAX_HD + lane + 32 * e] = acc[e];
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += AB_THREADS) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < AB_WARPS; w++) s += red[w * AB_MAX_HD + d];
        dst[d] = accumulate ? dst[d] + s : s;
    }
    __syncthreads(); /* red is reused by the caller's next reduction */
}

__global__ void __launch_bounds__(AB_THREADS)
    ab_dq_kernel(float *__restrict__ dq, float *__restrict__ D, const float *__restrict__ dout,
                 const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
                 const float *__restrict__ out, const float *__restrict__ lse, int nkeys, int q_pos0, int hq, int hkv, int hd,
                 float scale) {
    __shared__ float red[AB_WARPS * AB_MAX_HD];
    const int64_t r = blockIdx.x; /* i * hq + h */
    const int i = (int)(r / hq), h = (int)(r % hq), g = h / (hq / hkv);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t ks = (int64_t)hkv * hd;
    float qr[AB_E], dor[AB_E], acc[AB_E], t[AB_E];
    ab_load(qr, q + r * hd, lane, hd);
    ab_load(dor, dout + r * hd, lane, hd);
    ab_load(t, out + r * hd, lane, hd);
    const float Di = ab_dot(dor, t), l = lse[r];
    if (threadIdx.x == 0) D[r] = Di;
#pragma unroll
    for (int e = 0; e < AB_E; e++) acc[e] = 0.f;
    const float *kb = k + (int64_t)g * hd, *vb = v + (int64_t)g * hd;
    const int lim = min(q_pos0 + i + 1, nkeys); /* attention_cross: q_pos0 = nkeys - 1, every key */
    for (int j = warp; j < lim; j += AB_WARPS) {
        float kr[AB_E], vr[AB_E];
        ab_load(kr, kb + (int64_t)j * ks, lane, hd);
        ab_load(vr, vb + (int64_t)j * ks, lane, hd);
        const float p = expf(ab_dot(qr, kr) * scale - l);
        const float ds = p * (ab_dot(dor, vr) - Di);
#pragma unroll
        for (int e = 0; e < AB_E; e++) acc[e] = fmaf(scale * ds, kr[e], acc[e]);
    }
    ab_reduce_store(dq + r * hd, acc, red, hd, false);
}

__global__ void __launch_bounds__(AB_THREADS)
    ab_dkv_kernel(float *__restrict__ dk, float *__restrict__ dv, const float *__restrict__ D,
                  const float *__restrict__ dout, const float *__restrict__ q, const float *__restrict__ k,
                  const float *__restrict__ v, const float *__restrict__ lse, int nq, int q_pos0, int hq, int hkv,
                  int hd, float scale) {
    __shared__ float red[AB_WARPS * AB_MAX_HD];
    const int64_t kr_idx = blockIdx.x; /* j * hkv + g */
    const int j = (int)(kr_idx / hkv), g = (int)(kr_idx % hkv);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = hq / hkv;
    float kr[AB_E], vr[AB_E], dk_acc[AB_E], dv_acc[AB_E];
    ab_load(kr, k + kr_idx * hd, lane, hd);
    ab_load(vr, v + kr_idx * hd, lane, hd);
#pragma unroll
    for (int e = 0; e < AB_E; e++) dk_acc[e] = dv_acc[e] = 0.f;
    const int i0 = j > q_pos0 ? j - q_pos0 : 0; /* first query that sees key j */
    const int64_t pairs = (int64_t)(nq - i0) * group;
    for (int64_t t = warp; t < pairs; t += AB_WARPS) {
        const int i = i0 + (int)(t / group), h = g * group + (int)(t % group);
        const int64_t r = (int64_t)i * hq + h;
        float qr[AB_E], dor[AB_E];
        ab_load(qr, q + r * hd, lane, hd);
        ab_load(dor, dout + r * hd, lane, hd);
        const float p = expf(ab_dot(qr, kr) * scale - lse[r]);
        const float ds = p * (ab_dot(dor, vr) - D[r]);
#pragma unroll
        for (int e = 0; e < AB_E; e++) {
            dk_acc[e] = fmaf(scale * ds, qr[e], dk_acc[e]);
            dv_acc[e] = fmaf(p, dor[e], dv_acc[e]);
        }
    }
    ab_reduce_store(dk + kr_idx * hd, dk_acc, red, hd, true);
    ab_reduce_store(dv + kr_idx * hd, dv_acc, red, hd, true);
}

/* Query i sees keys j <= q_pos0 + i with j < nkeys (q_pos0 + nq: causal; nkv with q_pos0 = nkv - 1: cross). */
static int backward(kern_ctx *kc, float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                    const float *v, const float *out, const float *lse, int64_t nq, int64_t nkeys, int64_t q_pos0,
                    int64_t hq, int64_t hkv, int64_t hd, float scale) {
    if (hd > AB_MAX_HD || nkeys > INT32_MAX / 2 || nq * hq > INT32_MAX || nkeys * hkv > INT32_MAX) return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    float *D = (float *)kc_scratch(kc, (size_t)(nq * hq) * sizeof(float)); /* [nq, hq] */
    if (!D) return KERN_ENOMEM;
    MN_LAUNCH(ab_dq_kernel, (unsigned)(nq * hq), AB_THREADS, 0, kc->stream)(
        dq, D, dout, q, k, v, out, lse, (int)nkeys, (int)q_pos0, (int)hq, (int)hkv, (int)hd, scale);
    int rc = kc_check_launch("attention_backward (dq)");
    if (rc != KERN_OK) return rc;
    MN_LAUNCH(ab_dkv_kernel, (unsigned)(nkeys * hkv), AB_THREADS, 0, kc->stream)(
        dk, dv, D, dout, q, k, v, lse, (int)nq, (int)q_pos0, (int)hq, (int)hkv, (int)hd, scale);
    return kc_check_launch("attention_backward (dkv)");
}

int kern_cuda_attention_backward(kern_ctx *kc, float *dq, float *dk, float *dv, const float *dout, const float *q,
                                 const float *k, const float *v, const float *out, const float *lse, int64_t nq,
                                 int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale) {
    if (!kc_ok(kc) || nq < 0 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0 || q_pos0 < 0 || q_pos0 + nq > nkv ||
        !lse)
        return KERN_ESHAPE;
    return backward(kc, dq, dk, dv, dout, q, k, v, out, lse, nq, q_pos0 + nq, q_pos0, hq, hkv, hd, scale);
}

int kern_cuda_attention_cross_backward(kern_ctx *kc, float *dq, float *dk, float *dv, const float *dout,
                                       const float *q, const float *k, const float *v, const float *out,
                                       const float *lse, int64_t nq, int64_t nkv, int64_t hq, int64_t hkv, int64_t hd,
                                       float scale) {
    if (!kc_ok(kc) || nq < 0 || nkv < 1 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0 || !lse)
        return KERN_ESHAPE;
    return backward(kc, dq, dk, dv, dout, q, k, v, out, lse, nq, nkv, nkv - 1, hq, hkv, hd, scale);
}
