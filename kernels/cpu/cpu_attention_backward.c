/*
 * cpu_attention_backward.c — the backward twin of kern_cpu_attention (causal GQA over a KV cache), fp32.
 *
 * Forward (per query row i, head h, KV head g = h / (hq / hkv), keys j <= q_pos0 + i):
 *   s_ij = scale * q_i.k_j     p_ij = exp(s_ij - lse_i)     out_i = sum_j p_ij v_j
 * Backward, with D_i = dout_i.out_i (= sum_j p_ij dp_ij, as flash attention computes it):
 *   dp_ij = dout_i.v_j    ds_ij = p_ij (dp_ij - D_i)
 *   dq_i  = scale sum_j ds_ij k_j          (overwritten)
 *   dk_j += scale sum_{i,h in g} ds_ij q_i  dv_j += sum_{i,h in g} p_ij dout_i   (accumulated)
 * The probabilities are rebuilt from the forward's log-sum-exp, so no [nq, nkv] matrix is ever stored.
 *
 * Work split without atomics or per-thread copies of dk/dv (which would cost threads x the KV size):
 *   pass 1  D[nq, hq] into scratch, one work item per (query, head);
 *   pass 2  dq: one work item per (query, head), over its visible keys;
 *   pass 3  dk, dv: one work item per (KV head, key), over the queries that see the key and the heads of the
 *           group. Scores and dp are recomputed here (two extra dot products per pair) instead of stored.
 * Each output element has one owner and a fixed summation order, so results do not depend on scheduling.
 * A blocked GEMM formulation (S = Q.K^T per tile through OpenBLAS) would be faster at long sequence lengths;
 * this is the readable reference the CUDA backend is checked against.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu_ops.h"

int kern_cpu_attention_backward(kern_ctx *kc, float *dq, float *dk, float *dv, const float *dout, const float *q,
                                const float *k, const float *v, const float *out, const float *lse, int64_t nq,
                                int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale) {
    if (nq < 0 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0 || q_pos0 < 0 || q_pos0 + nq > nkv || !lse)
        return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    int nt = kc->n_threads;
    float *D = kern_cpu_scratch(kc, (size_t)(nq * hq)); /* [nq, hq] */
    if (!D) return KERN_ENOMEM;
    int64_t group = hq / hkv, kv_stride = hkv * hd, nkeys = q_pos0 + nq; /* keys past q_pos0 + nq get nothing */

#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < nq * hq; r++) D[r] = kern_dot_f32(dout + r * hd, out + r * hd, hd);

    /* pass 2: dq[i, h] */
#pragma omp parallel for collapse(2) num_threads(nt) schedule(dynamic, 4)
    for (int64_t i = 0; i < nq; i++) {
        for (int64_t h = 0; h < hq; h++) {
            int64_t r = i * hq + h, lim = q_pos0 + i + 1;
            const float *qi = q + r * hd, *doi = dout + r * hd;
            const float *kh = k + (h / group) * hd, *vh = v + (h / group) * hd;
            float *dqi = dq + r * hd, l = lse[r], Di = D[r];
            memset(dqi, 0, (size_t)hd * sizeof(float));
            for (int64_t j = 0; j < lim; j++) {
                float p = expf(kern_dot_f32(qi, kh + j * kv_stride, hd) * scale - l);
                float ds = p * (kern_dot_f32(doi, vh + j * kv_stride, hd) - Di);
                kern_axpy_f32(dqi, scale * ds, kh + j * kv_stride, hd);
            }
        }
    }

    /* pass 3: dk[j, g], dv[j, g]; key j is seen by queries i >= j - q_pos0 */
#pragma omp parallel for collapse(2) num_threads(nt) schedule(dynamic, 8)
    for (int64_t g = 0; g < hkv; g++) {
        for (int64_t j = 0; j < nkeys; j++) {
            const float *kj = k + j * kv_stride + g * hd, *vj = v + j * kv_stride + g * hd;
            float *dkj = dk + j * kv_stride + g * hd, *dvj = dv + j * kv_stride + g * hd;
            for (int64_t i = j > q_pos0 ? j - q_pos0 : 0; i < nq; i++) {
                for (int64_t h = g * group; h < (g + 1) * group; h++) {
                    int64_t r = i * hq + h;
                    const float *qi = q + r * hd, *doi = dout + r * hd;
                    float p = expf(kern_dot_f32(qi, kj, hd) * scale - lse[r]);
                    float ds = p * (kern_dot_f32(doi, vj, hd) - D[r]);
                    kern_axpy_f32(dkj, scale * ds, qi, hd);
                    kern_axpy_f32(dvj, p, doi, hd);
                }
            }
        }
    }
    return KERN_OK;
}
