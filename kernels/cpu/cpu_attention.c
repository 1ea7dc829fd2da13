/*
 * cpu_attention.c — causal grouped-query attention over a KV cache, fp32, one softmax per query row.
 *
 * q[nq, hq, hd] are the new tokens at absolute positions q_pos0 .. q_pos0+nq-1; k, v[nkv, hkv, hd] hold every
 * cached position including the new ones (nkv >= q_pos0 + nq). Query head h reads KV head h / (hq / hkv).
 * Work is split over (head, query) pairs; each thread keeps its score row in its own slice of scratch.
 * Matches HF eager attention: softmax((q.k) * scale) in fp32, then the weighted sum of v.
 * With lse non-NULL the row's log-sum-exp, max + log(sum exp(s - max)), is saved for the backward twin
 * (cpu_attention_backward.c), which rebuilds each probability as exp(s - lse) without a second softmax.
 */
#include <math.h>
#include <omp.h>

#include "cpu_ops.h"

int kern_cpu_attention(kern_ctx *kc, float *out, float *lse, const float *q, const float *k, const float *v,
                       int64_t nq, int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale) {
    if (nq < 0 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0 || q_pos0 < 0 || q_pos0 + nq > nkv)
        return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    int nt = kc->n_threads;
    float *scores = kern_cpu_scratch(kc, (size_t)nt * (size_t)nkv);
    if (!scores) return KERN_ENOMEM;
    int64_t group = hq / hkv, kv_stride = hkv * hd;

#pragma omp parallel for collapse(2) num_threads(nt) schedule(dynamic, 4)
    for (int64_t i = 0; i < nq; i++) {
        for (int64_t h = 0; h < hq; h++) {
            float *s = scores + (size_t)omp_get_thread_num() * (size_t)nkv;
            const float *qv = q + (i * hq + h) * hd;
            const float *kh = k + (h / group) * hd, *vh = v + (h / group) * hd;
            int64_t lim = q_pos0 + i + 1;
            float mx = -INFINITY;
            for (int64_t j = 0; j < lim; j++) {
                s[j] = kern_dot_f32(qv, kh + j * kv_stride, hd) * scale;
                if (s[j] > mx) mx = s[j];
            }
            float sum = 0.f;
            for (int64_t j = 0; j < lim; j++) {
                s[j] = expf(s[j] - mx);
                sum += s[j];
            }
            float inv = 1.0f / sum;
            if (lse) lse[i * hq + h] = mx + logf(sum);
            float *o = out + (i * hq + h) * hd;
            for (int64_t d = 0; d < hd; d++) o[d] = 0.f;
            for (int64_t j = 0; j < lim; j++) kern_axpy_f32(o, s[j] * inv, vh + j * kv_stride, hd);
        }
    }
    return KERN_OK;
}
