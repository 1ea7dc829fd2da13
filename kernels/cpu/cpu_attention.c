/*
 * cpu_attention.c — causal grouped-query attention over a KV cache, fp32, one softmax per query row.
 *
 * q[nq, hq, hd] are the new tokens at absolute positions q_pos0 .. q_pos0+nq-1; k, v[nkv, hkv, hd] hold every
 * cached position including the new ones (nkv >= q_pos0 + nq; keys past q_pos0 + nq are never read). Query i sees
 * keys 0 .. q_pos0 + i; query head h reads KV head h / (hq / hkv). Matches HF eager attention: softmax((q.k) *
 * scale) in fp32, then the weighted sum of v. With lse non-NULL the row's log-sum-exp, max + log(sum exp(s - max)),
 * is saved for the backward twin (cpu_attention_backward.c), which rebuilds each probability as exp(s - lse).
 *
 * Blocked (flash attention 2's forward), for nq >= TILE_MIN_Q:
 *   - keys of each KV head are packed once per call into panels of ATT_BK keys, k-major ([hd][ATT_BK]), so the
 *     scores of a block of queries x a block of keys are one small GEMM (cpu_attn_tiles.h); values are gathered
 *     per KV head (rows hd apart: a block spans a few pages, not one per row; ~5% at 32 heads x 100);
 *   - one work item per (query head, block of ATT_BK queries); it walks the key blocks up to its last query's
 *     diagonal, folds each score tile into a running max / sum per row with the vector exp (online softmax) and
 *     adds P.V into its output rows, rescaled when the max grows; the diagonal block masks per row;
 *   - items go longest first (the last query blocks see the most keys) to threads, dynamically.
 * Short query runs (decode: one token per sequence) would pay more for the packing than for the attention: they
 * take the per-row loop (attention_rows: each KV head read once for its query heads, long key ranges split over
 * the threads and merged).
 * Results equal the two-pass softmax up to fp32 rounding; both paths are checked against fp64 in tests.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu_attn_tiles.h"
#include "cpu_ops.h"

#define TILE_MIN_Q 16 /* fewer new queries: the per-row loop (kern_cpu_attn_tile_min changes it for tests) */

static int tile_min_q = TILE_MIN_Q;

void kern_cpu_attn_tile_min(int nq) { tile_min_q = nq < 1 ? TILE_MIN_Q : nq; }
int att_tile_min_q(void) { return tile_min_q; }

void att_pack(float *pt, const float *x, int64_t n, int64_t heads, int64_t hd, int nt) {
    int64_t nb = (n + ATT_BK - 1) / ATT_BK, stride = heads * hd;
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
    for (int64_t g = 0; g < heads; g++)
        for (int64_t b = 0; b < nb; b++) {
            float *p = pt + (g * nb + b) * hd * ATT_BK;
            int64_t j0 = b * ATT_BK, cnt = n - j0 < ATT_BK ? n - j0 : ATT_BK;
            if (cnt < ATT_BK) memset(p, 0, (size_t)(hd * ATT_BK) * sizeof(float));
            for (int64_t c = 0; c < cnt; c++) {
                const float *xr = x + (j0 + c) * stride + g * hd;
                for (int64_t d = 0; d < hd; d++) p[d * ATT_BK + c] = xr[d];
            }
        }
}

void att_gather_heads(float *dst, const float *x, int64_t n, int64_t heads, int64_t hd, int nt) {
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
    for (int64_t g = 0; g < heads; g++)
        for (int64_t j = 0; j < n; j++) memcpy(dst + (g * n + j) * hd, x + (j * heads + g) * hd, (size_t)hd * sizeof(float));
}

/* Both paths: query i sees keys j <= q_pos0 + i with j < nkeys (the keys that exist: q_pos0 + nq for the causal
 * op, nkv with q_pos0 = nkv - 1 for attention_cross, where every query sees every key). */

/* The per-row path reads each KV head once for all the query heads sharing it (GQA: hq / hkv of them), one key and
 * one value row at a time, and splits long key ranges into chunks (flash-decoding) so that a decode step with few
 * KV heads still has work for every thread; each chunk's partial softmax (max, sum, unnormalised output) is merged
 * per row at the end. ROWS_CHUNK_MIN keys at least per chunk: below that the merge costs more than it spreads. */
#define ROWS_CHUNK_MIN 128

/* Query row i, KV head g, keys [j0, j1): the group's scores, their max m[r] and sum l[r], and o[r] = sum_j
 * exp(s_rj - m_r) v_j, unnormalised. s: group x (j1 - j0) floats. */
#ifdef __AVX512F__
/* The four lane sums of a, b, c, d in the low 128 bits (a transpose-add: 10 instructions for four dots instead of
 * four full reductions). */
static inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b)); /* a01 b01 a23 b23 per lane */
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    __m512 x = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))));
    __m256 y = _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
    return _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
}

/* rows_chunk's two passes for head sizes that are whole vectors (NV of 16 floats, NV <= 8) and groups of at most 4
 * query heads: the group's queries and outputs stay in registers, each key and value row is loaded once. */
static inline void rows_chunk_v(float *m, float *s, const float *qg, int group, const float *kh,
                                const float *vh, int64_t kv_stride, int64_t j0, int64_t n, int nv, float scale) {
    __m512 qv[4][8];
    for (int r = 0; r < 4; r++)
        for (int v = 0; v < nv; v++) qv[r][v] = r < group ? _mm512_loadu_ps(qg + r * nv * 16 + v * 16) : _mm512_setzero_ps();
    __m128 mx = _mm_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j++) {
        const float *kr = kh + (j0 + j) * kv_stride;
        __m512 d[4];
        for (int r = 0; r < 4; r++) d[r] = _mm512_setzero_ps();
        for (int v = 0; v < nv; v++) {
            __m512 kv = _mm512_loadu_ps(kr + v * 16);
            for (int r = 0; r < group; r++) d[r] = _mm512_fmadd_ps(qv[r][v], kv, d[r]);
        }
        __m128 sc = _mm_mul_ps(reduce4(d[0], d[1], d[2], d[3]), _mm_set1_ps(scale));
        mx = _mm_max_ps(mx, sc);
        float t[4];
        _mm_storeu_ps(t, sc);
        for (int r = 0; r < group; r++) s[r * n + j] = t[r];
    }
    float mt[4];
    _mm_storeu_ps(mt, mx);
    for (int r = 0; r < group; r++) m[r] = mt[r];
}

static inline void rows_chunk_pv(float *o, const float *s, int group, const float *vh, int64_t kv_stride, int64_t j0,
                                 int64_t n, int nv) {
    __m512 acc[4][8];
    for (int r = 0; r < group; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j++) {
        const float *vr = vh + (j0 + j) * kv_stride;
        for (int v = 0; v < nv; v++) {
            __m512 x = _mm512_loadu_ps(vr + v * 16);
            for (int r = 0; r < group; r++) acc[r][v] = _mm512_fmadd_ps(_mm512_set1_ps(s[r * n + j]), x, acc[r][v]);
        }
    }
    for (int r = 0; r < group; r++)
        for (int v = 0; v < nv; v++) _mm512_storeu_ps(o + r * nv * 16 + v * 16, acc[r][v]);
}
#endif

static void rows_chunk(const att_tiles *T, float *o, float *m, float *l, float *s, const float *qg, int64_t group,
                       const float *kh, const float *vh, int64_t kv_stride, int64_t j0, int64_t j1, int64_t hd,
                       float scale) {
    const int64_t n = j1 - j0;
#ifdef __AVX512F__
    if (hd % 16 == 0 && hd <= 128 && group <= 4) {
        const int nv = (int)(hd / 16);
        /* NV as a constant in each branch: the register arrays then unroll fully */
        if (nv == 4) rows_chunk_v(m, s, qg, (int)group, kh, vh, kv_stride, j0, n, 4, scale);
        else if (nv == 8) rows_chunk_v(m, s, qg, (int)group, kh, vh, kv_stride, j0, n, 8, scale);
        else rows_chunk_v(m, s, qg, (int)group, kh, vh, kv_stride, j0, n, nv, scale);
        for (int64_t r = 0; r < group; r++) {
            float *sr = s + r * n, sum = 0.f;
            for (int64_t j = 0; j < n; j++) sr[j] -= m[r];
            T->vexp(sr, sr, n);
            for (int64_t j = 0; j < n; j++) sum += sr[j];
            l[r] = sum;
        }
        if (nv == 4) rows_chunk_pv(o, s, (int)group, vh, kv_stride, j0, n, 4);
        else if (nv == 8) rows_chunk_pv(o, s, (int)group, vh, kv_stride, j0, n, 8);
        else rows_chunk_pv(o, s, (int)group, vh, kv_stride, j0, n, nv);
        return;
    }
#endif
    for (int64_t r = 0; r < group; r++) m[r] = -INFINITY;
    for (int64_t j = 0; j < n; j++) { /* one pass over K: each key row serves the whole group */
        const float *kr = kh + (j0 + j) * kv_stride;
        for (int64_t r = 0; r < group; r++) {
            float x = kern_dot_f32(qg + r * hd, kr, hd) * scale;
            s[r * n + j] = x;
            if (x > m[r]) m[r] = x;
        }
    }
    for (int64_t r = 0; r < group; r++) {
        float *sr = s + r * n, sum = 0.f;
        for (int64_t j = 0; j < n; j++) sr[j] -= m[r];
        T->vexp(sr, sr, n);
        for (int64_t j = 0; j < n; j++) sum += sr[j];
        l[r] = sum;
        memset(o + r * hd, 0, (size_t)hd * sizeof(float));
    }
    for (int64_t j = 0; j < n; j++) { /* one pass over V */
        const float *vr = vh + (j0 + j) * kv_stride;
        for (int64_t r = 0; r < group; r++) kern_axpy_f32(o + r * hd, s[r * n + j], vr, hd);
    }
}

static int attention_rows(kern_ctx *kc, const att_tiles *T, float *out, float *lse, const float *q, const float *k,
                          const float *v, int64_t nq, int64_t nkeys, int64_t q_pos0, int64_t hq, int64_t hkv,
                          int64_t hd, float scale) {
    const int nt = kc->n_threads;
    const int64_t group = hq / hkv, kv_stride = hkv * hd;
    /* chunks per (row, KV head): enough items for every thread, none shorter than ROWS_CHUNK_MIN keys */
    int64_t split = (4 * (int64_t)nt + nq * hkv - 1) / (nq * hkv), most = (nkeys + ROWS_CHUNK_MIN - 1) / ROWS_CHUNK_MIN;
    if (split > most) split = most;
    if (split < 1) split = 1;
    const int64_t chunk = (nkeys + split - 1) / split;
    const int64_t items = nq * hkv * split, part = group * (hd + 2); /* per item: o[group][hd], m[group], l[group] */
    float *scratch = kern_cpu_scratch(kc, (size_t)nt * (size_t)(group * chunk) + (size_t)(items * part));
    if (!scratch) return KERN_ENOMEM;
    float *parts = scratch + (size_t)nt * (size_t)(group * chunk);

#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
        const int64_t c = it % split, g = (it / split) % hkv, i = it / (split * hkv);
        const int64_t lim = q_pos0 + i + 1 < nkeys ? q_pos0 + i + 1 : nkeys;
        int64_t j0 = c * chunk, j1 = j0 + chunk < lim ? j0 + chunk : lim;
        float *p = parts + it * part, *m = p + group * hd, *l = m + group;
        if (j0 >= j1) { /* a chunk past this row's last key: nothing, weight 0 in the merge */
            for (int64_t r = 0; r < group; r++) m[r] = -INFINITY, l[r] = 0.f;
            continue;
        }
        float *s = scratch + (size_t)omp_get_thread_num() * (size_t)(group * chunk);
        rows_chunk(T, p, m, l, s, q + (i * hq + g * group) * hd, group, k + g * hd, v + g * hd, kv_stride, j0, j1, hd,
                   scale);
    }
    /* merge the chunks of each (row, query head): rescale to the largest max, normalise */
#pragma omp parallel for num_threads(nt) schedule(static) if (nq * hq * split > 64)
    for (int64_t rh = 0; rh < nq * hq; rh++) {
        const int64_t i = rh / hq, h = rh % hq, g = h / group, r = h % group;
        const float *base = parts + ((i * hkv + g) * split) * part;
        float mx = -INFINITY;
        for (int64_t c = 0; c < split; c++) {
            float mc = base[c * part + group * hd + r];
            if (mc > mx) mx = mc;
        }
        float *o = out + rh * hd, sum = 0.f;
        memset(o, 0, (size_t)hd * sizeof(float));
        for (int64_t c = 0; c < split; c++) {
            const float *pc = base + c * part, mc = pc[group * hd + r], lc = pc[group * hd + group + r];
            if (lc == 0.f) continue;
            float w = expf(mc - mx);
            sum += w * lc;
            kern_axpy_f32(o, w, pc + r * hd, hd);
        }
        float inv = 1.0f / sum;
        for (int64_t d = 0; d < hd; d++) o[d] *= inv;
        if (lse) lse[rh] = mx + logf(sum);
    }
    return KERN_OK;
}

static int attention_tiles(kern_ctx *kc, const att_tiles *T, float *out, float *lse, const float *q, const float *k,
                           const float *v, int64_t nq, int64_t nkeys, int64_t q_pos0, int64_t hq, int64_t hkv,
                           int64_t hd, float scale) {
    const int nt = kc->n_threads;
    const int64_t nkb = (nkeys + ATT_BK - 1) / ATT_BK, nqb = (nq + ATT_BK - 1) / ATT_BK;
    const int64_t group = hq / hkv, q_stride = hq * hd, panel = hd * ATT_BK;
    const size_t kt_floats = (size_t)(hkv * nkb * panel), per_thread = ATT_BK * ATT_BK + 3 * ATT_BK;
    const size_t vh_floats = (size_t)(hkv * nkeys * hd);
    float *kt = kern_cpu_scratch(kc, kt_floats + vh_floats + (size_t)nt * per_thread);
    if (!kt) return KERN_ENOMEM;
    float *vh = kt + kt_floats, *thr = vh + vh_floats; /* vh: v per KV head, [hkv][nkeys][hd] */
    att_pack(kt, k, nkeys, hkv, hd, nt);
    att_gather_heads(vh, v, nkeys, hkv, hd, nt);

#pragma omp parallel for collapse(2) num_threads(nt) schedule(dynamic, 1)
    for (int64_t qbr = 0; qbr < nqb; qbr++) {
        for (int64_t h = 0; h < hq; h++) {
            float *s = thr + (size_t)omp_get_thread_num() * per_thread; /* [ATT_BK][ATT_BK] */
            float *corr = s + ATT_BK * ATT_BK, *m = corr + ATT_BK, *l = m + ATT_BK;
            const int64_t qb = nqb - 1 - qbr, i0 = qb * ATT_BK, g = h / group;
            const int nb = (int)(nq - i0 < ATT_BK ? nq - i0 : ATT_BK);
            const float *qr = q + i0 * q_stride + h * hd;
            float *o = out + i0 * q_stride + h * hd; /* [nb] rows, q_stride apart */
            for (int r = 0; r < nb; r++) {
                m[r] = -INFINITY, l[r] = 0.f;
                memset(o + r * q_stride, 0, (size_t)hd * sizeof(float));
            }
            const int64_t last_kb = (q_pos0 + i0 + nb - 1) / ATT_BK < nkb ? (q_pos0 + i0 + nb - 1) / ATT_BK : nkb - 1;
            for (int64_t kb = 0; kb <= last_kb; kb++) {
                const int64_t j0 = kb * ATT_BK;
                T->scores(s, qr, q_stride, nb, kt + (g * nkb + kb) * panel, hd);
                int max_nv = 0;
                for (int r = 0; r < nb; r++) { /* query i0 + r sees keys j0 .. q_pos0 + i0 + r of this block */
                    int64_t nv = q_pos0 + i0 + r - j0 + 1;
                    if (nv > nkeys - j0) nv = nkeys - j0;
                    int nvi = nv < 0 ? 0 : nv > ATT_BK ? ATT_BK : (int)nv;
                    corr[r] = T->fold(s + r * ATT_BK, nvi, scale, &m[r], &l[r]);
                    if (nvi > max_nv) max_nv = nvi;
                }
                T->pv(o, q_stride, corr, s, nb, max_nv, vh + (g * nkeys + j0) * hd, hd, hd);
            }
            for (int r = 0; r < nb; r++) {
                float inv = 1.0f / l[r], *orow = o + r * q_stride;
                for (int64_t d = 0; d < hd; d++) orow[d] *= inv;
                if (lse) lse[(i0 + r) * hq + h] = m[r] + logf(l[r]);
            }
        }
    }
    return KERN_OK;
}

int kern_cpu_attention(kern_ctx *kc, float *out, float *lse, const float *q, const float *k, const float *v,
                       int64_t nq, int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale) {
    if (nq < 0 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0 || q_pos0 < 0 || q_pos0 + nq > nkv)
        return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    const att_tiles *T = att_tiles_get();
    if (nq < tile_min_q) return attention_rows(kc, T, out, lse, q, k, v, nq, q_pos0 + nq, q_pos0, hq, hkv, hd, scale);
    return attention_tiles(kc, T, out, lse, q, k, v, nq, q_pos0 + nq, q_pos0, hq, hkv, hd, scale);
}

int kern_cpu_attention_cross(kern_ctx *kc, float *out, float *lse, const float *q, const float *k, const float *v,
                             int64_t nq, int64_t nkv, int64_t hq, int64_t hkv, int64_t hd, float scale) {
    if (nq < 0 || nkv < 1 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0) return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    const att_tiles *T = att_tiles_get();
    if (nq < tile_min_q) return attention_rows(kc, T, out, lse, q, k, v, nq, nkv, nkv - 1, hq, hkv, hd, scale);
    return attention_tiles(kc, T, out, lse, q, k, v, nq, nkv, nkv - 1, hq, hkv, hd, scale);
}

/* Two softmaxes over disjoint key sets into one: with m = max(lse, lse2), lse' = m + log(e^(lse-m) + e^(lse2-m)).
 * A set with no visible key (lse = -inf) takes weight 0. */
int kern_cpu_attention_merge(kern_ctx *kc, float *out, float *lse, const float *out2, const float *lse2, int64_t n,
                             int64_t hq, int64_t hd) {
    if (n < 0 || hq <= 0 || hd <= 0) return KERN_ESHAPE;
#pragma omp parallel for num_threads(kc->n_threads) schedule(static)
    for (int64_t r = 0; r < n * hq; r++) {
        const float a = lse[r], b = lse2[r], m = a > b ? a : b;
        if (m == -INFINITY) continue; /* neither set has a key: leave the row */
        const float wa = expf(a - m), wb = expf(b - m), sum = wa + wb, ca = wa / sum, cb = wb / sum;
        float *o = out + r * hd;
        const float *o2 = out2 + r * hd;
        for (int64_t d = 0; d < hd; d++) o[d] = ca * o[d] + cb * o2[d];
        lse[r] = m + logf(sum);
    }
    return KERN_OK;
}
