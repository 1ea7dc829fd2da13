/*
 * cpu_attention_backward.c — the backward twin of kern_cpu_attention (causal GQA over a KV cache), fp32,
 * blocked as flash attention 2's backward.
 *
 * Forward (per query row i, head h, KV head g = h / (hq / hkv), keys j <= q_pos0 + i):
 *   s_ij = scale * q_i.k_j     p_ij = exp(s_ij - lse_i)     out_i = sum_j p_ij v_j
 * Backward, with D_i = dout_i.out_i (= sum_j p_ij dp_ij, as flash attention computes it):
 *   dp_ij = dout_i.v_j    ds_ij = p_ij (dp_ij - D_i)
 *   dq_i  = scale sum_j ds_ij k_j          (overwritten)
 *   dk_j += scale sum_{i,h in g} ds_ij q_i  dv_j += sum_{i,h in g} p_ij dout_i   (accumulated)
 * P is rebuilt tile by tile from the forward's log-sum-exp, so no [nq, nkv] matrix is ever stored.
 *
 * Blocks of ATT_BK queries x ATT_BK keys, each product a small GEMM on the tiles of cpu_attn_tiles.h:
 *   setup   k, v packed per KV head and q, dout per query head into k-major panels; D and lse per head,
 *           contiguous;
 *   pass 1  dq: one work item per (query head, query block), over its key blocks: S = Q.K^T, dP = dO.V^T,
 *           dS = P (dP - D), dQ += scale dS.K;
 *   pass 2  dk, dv: one work item per (KV head, key block), over the query blocks that see it and the heads of
 *           the group, in transposed form (keys as rows): S^T = K.Q^T, dP^T = V.dO^T, dV += P^T.dO,
 *           dK += scale dS^T.Q.
 * S and dP are computed twice (once per pass) instead of shared through atomics or per-thread copies of dq or
 * dk/dv; every output element has one owner and a fixed summation order, so results do not depend on the
 * schedule. Scratch: the packed copies, 2 x (nq hq + nkeys hkv) x hd floats, plus two tiles per thread.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu_attn_tiles.h"
#include "cpu_ops.h"

/* D_i = dout_i.out_i summed as the score tiles sum dp_ij = dout_i.v_j (one FMA chain over d, in order), so that
 * dp - D is exactly 0 where out_i = v_j (a query with one visible key): its dq and dk are then exactly 0. */
static float dot_chain(const float *a, const float *b, int64_t n) {
    float s = 0.f;
    for (int64_t d = 0; d < n; d++) s = fmaf(a[d], b[d], s);
    return s;
}

/* Query i sees keys j <= q_pos0 + i with j < nkeys: q_pos0 + nq for the causal op (keys past it get nothing),
 * nkv with q_pos0 = nkv - 1 for attention_cross (every key). */
static int backward(kern_ctx *kc, float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                    const float *v, const float *out, const float *lse, int64_t nq, int64_t nkeys, int64_t q_pos0,
                    int64_t hq, int64_t hkv, int64_t hd, float scale) {
    const att_tiles *T = att_tiles_get();
    const int nt = kc->n_threads;
    const int64_t nkb = (nkeys + ATT_BK - 1) / ATT_BK, nqb = (nq + ATT_BK - 1) / ATT_BK;
    const int64_t group = hq / hkv, kv_stride = hkv * hd, q_stride = hq * hd, panel = hd * ATT_BK;
    const size_t kf = (size_t)(hkv * nkb * panel), qf = (size_t)(hq * nqb * panel), lf = (size_t)(hq * nqb * ATT_BK);
    const size_t per_thread = 2 * ATT_BK * ATT_BK;
    float *kt = kern_cpu_scratch(kc, 2 * kf + 2 * qf + 2 * lf + (size_t)nt * per_thread);
    if (!kt) return KERN_ENOMEM;
    float *vt = kt + kf, *qt = vt + kf, *dot = qt + qf, *lset = dot + qf, *Dt = lset + lf, *tiles = Dt + lf;
    att_pack(kt, k, nkeys, hkv, hd, nt);
    att_pack(vt, v, nkeys, hkv, hd, nt);
    att_pack(qt, q, nq, hq, hd, nt);
    att_pack(dot, dout, nq, hq, hd, nt);
    const int64_t lrow = nqb * ATT_BK; /* lset, Dt: [hq][lrow], zeros past nq */
    memset(lset, 0, 2 * lf * sizeof(float));
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < nq * hq; r++) {
        int64_t i = r / hq, h = r % hq;
        Dt[h * lrow + i] = dot_chain(dout + r * hd, out + r * hd, hd);
        lset[h * lrow + i] = lse[r];
    }

    /* pass 1: dq[i, h] */
#pragma omp parallel for collapse(2) num_threads(nt) schedule(dynamic, 1)
    for (int64_t qbr = 0; qbr < nqb; qbr++) {
        for (int64_t h = 0; h < hq; h++) {
            float *s = tiles + (size_t)omp_get_thread_num() * per_thread, *dp = s + ATT_BK * ATT_BK;
            const int64_t qb = nqb - 1 - qbr, i0 = qb * ATT_BK, g = h / group; /* longest items first */
            const int nb = (int)(nq - i0 < ATT_BK ? nq - i0 : ATT_BK);
            float *dqr = dq + i0 * q_stride + h * hd;
            for (int r = 0; r < nb; r++) memset(dqr + r * q_stride, 0, (size_t)hd * sizeof(float));
            const int64_t last_kb = (q_pos0 + i0 + nb - 1) / ATT_BK < nkb ? (q_pos0 + i0 + nb - 1) / ATT_BK : nkb - 1;
            for (int64_t kb = 0; kb <= last_kb; kb++) {
                const int64_t j0 = kb * ATT_BK;
                T->scores(s, q + i0 * q_stride + h * hd, q_stride, nb, kt + (g * nkb + kb) * panel, hd);
                T->scores(dp, dout + i0 * q_stride + h * hd, q_stride, nb, vt + (g * nkb + kb) * panel, hd);
                int max_hi = 0;
                for (int r = 0; r < nb; r++) { /* query i0 + r sees keys j0 .. q_pos0 + i0 + r of this block */
                    int64_t hi = q_pos0 + i0 + r - j0 + 1;
                    if (hi > nkeys - j0) hi = nkeys - j0;
                    int hii = hi < 0 ? 0 : hi > ATT_BK ? ATT_BK : (int)hi;
                    T->p_ds(s + r * ATT_BK, dp + r * ATT_BK, scale, lset + h * lrow + i0 + r, Dt + h * lrow + i0 + r, 0,
                            0, hii);
                    if (hii > max_hi) max_hi = hii;
                }
                T->pv(dqr, q_stride, NULL, dp, nb, max_hi, k + j0 * kv_stride + g * hd, kv_stride, hd);
            }
        }
    }

    /* pass 2: dk[j, g], dv[j, g]; key j is seen by queries i >= j - q_pos0 */
#pragma omp parallel for collapse(2) num_threads(nt) schedule(dynamic, 1)
    for (int64_t kb = 0; kb < nkb; kb++) { /* the first key blocks are seen by the most queries: longest first */
        for (int64_t g = 0; g < hkv; g++) {
            float *s = tiles + (size_t)omp_get_thread_num() * per_thread, *dp = s + ATT_BK * ATT_BK;
            const int64_t j0 = kb * ATT_BK, i_first = j0 > q_pos0 ? j0 - q_pos0 : 0;
            const int nk = (int)(nkeys - j0 < ATT_BK ? nkeys - j0 : ATT_BK);
            const float *kr = k + j0 * kv_stride + g * hd, *vr = v + j0 * kv_stride + g * hd;
            float *dkr = dk + j0 * kv_stride + g * hd, *dvr = dv + j0 * kv_stride + g * hd;
            for (int64_t qb = i_first / ATT_BK; qb < nqb; qb++) {
                const int64_t i0 = qb * ATT_BK;
                const int nb = (int)(nq - i0 < ATT_BK ? nq - i0 : ATT_BK);
                for (int64_t h = g * group; h < (g + 1) * group; h++) {
                    T->scores(s, kr, kv_stride, nk, qt + (h * nqb + qb) * panel, hd);
                    T->scores(dp, vr, kv_stride, nk, dot + (h * nqb + qb) * panel, hd);
                    for (int r = 0; r < nk; r++) { /* key j0 + r is seen by queries i0 + c, c >= j0 + r - q_pos0 - i0 */
                        int64_t lo = j0 + r - q_pos0 - i0;
                        int loi = lo < 0 ? 0 : lo > ATT_BK ? ATT_BK : (int)lo;
                        T->p_ds(s + r * ATT_BK, dp + r * ATT_BK, scale, lset + h * lrow + i0, Dt + h * lrow + i0, 1, loi,
                                nb);
                    }
                    T->pv(dvr, kv_stride, NULL, s, nk, nb, dout + i0 * q_stride + h * hd, q_stride, hd);
                    T->pv(dkr, kv_stride, NULL, dp, nk, nb, q + i0 * q_stride + h * hd, q_stride, hd);
                }
            }
        }
    }
    return KERN_OK;
}

int kern_cpu_attention_backward(kern_ctx *kc, float *dq, float *dk, float *dv, const float *dout, const float *q,
                                const float *k, const float *v, const float *out, const float *lse, int64_t nq,
                                int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale) {
    if (nq < 0 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0 || q_pos0 < 0 || q_pos0 + nq > nkv || !lse)
        return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    return backward(kc, dq, dk, dv, dout, q, k, v, out, lse, nq, q_pos0 + nq, q_pos0, hq, hkv, hd, scale);
}

int kern_cpu_attention_cross_backward(kern_ctx *kc, float *dq, float *dk, float *dv, const float *dout,
                                      const float *q, const float *k, const float *v, const float *out,
                                      const float *lse, int64_t nq, int64_t nkv, int64_t hq, int64_t hkv, int64_t hd,
                                      float scale) {
    if (nq < 0 || nkv < 1 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0 || !lse) return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    return backward(kc, dq, dk, dv, dout, q, k, v, out, lse, nq, nkv, nkv - 1, hq, hkv, hd, scale);
}
