/*
 * cpu_attention_mem.c — Focused Transformer memory attention: each query attends, in ONE softmax, to its causal
 * local keys (as kern_cpu_attention) and to memory rows of its KV head: all of them (dense, what the released
 * LongLLaMA checkpoints do) or a per-query selection (kNN: the top-k ids a memstore search returned).
 *
 * Memory rows stay in their stored dtype (bf16 by default) and are widened tile by tile. Dense memory can be
 * hundreds of thousands of rows per head, so queries of one head are processed in blocks against tiles of rows
 * that stay in L1/L2: memory traffic is n_mem * hd * 2 bytes per block of queries, not per query. The softmax is
 * computed online (running max, running sum, rescaled accumulator), which equals the two-pass softmax up to fp32
 * rounding. Two forms, as kern_cpu_attention: from 16 new queries on the blocked tiles of cpu_attn_tiles.h (blocks
 * of 64 queries, scores and P.V as small GEMMs), below that (decode) a per-row loop over blocks of QB queries.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu_attn_tiles.h"
#include "cpu_ops.h"

#define QB 16    /* queries of one head per work item */
#define TILE 128 /* memory rows widened at once */
#define PF_ROWS 16 /* selected rows prefetched ahead of the one being widened (8-16 best, measured) */

/* Asks for every cache line of a row ahead of its use: a selection's rows are scattered over a store of hundreds of
 * MB, so each is a DRAM miss, and the widen loop alone keeps only a few of them in flight. */
static inline void prefetch_row(const char *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o);
}

typedef struct {
    float m, l;   /* running max and sum of exp(score - m) */
    float *acc;   /* hd: sum of exp(score - m) * v */
} online_row;

/* Folds scores s[0..n) with value rows v (row stride ldv) into r; s is overwritten. */
static void fold(online_row *r, float *s, int64_t n, const float *v, int64_t ldv, int64_t hd) {
    float mx = r->m;
    for (int64_t j = 0; j < n; j++)
        if (s[j] > mx) mx = s[j];
    if (mx == -INFINITY) return; /* nothing visible yet */
    if (mx > r->m) {
        float c = r->m == -INFINITY ? 0.f : expf(r->m - mx);
        r->l *= c;
        for (int64_t d = 0; d < hd; d++) r->acc[d] *= c;
        r->m = mx;
    }
    for (int64_t j = 0; j < n; j++) s[j] -= r->m;
    att_tiles_get()->vexp(s, s, n);
    for (int64_t j = 0; j < n; j++) {
        r->l += s[j];
        kern_axpy_f32(r->acc, s[j], v + j * ldv, hd);
    }
}

static int mem_rows(kern_ctx *kc, float *out, const float *q, const float *k, const float *v, int64_t nq, int64_t nkv,
                    int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale, const void *const *mem_k,
                    const void *const *mem_v, kern_dtype mem_dt, int64_t n_mem, const int64_t *sel, int64_t n_sel) {
    int nt = kc->n_threads;
    int64_t tile_rows = TILE > nkv ? TILE : nkv; /* a thread's score row: the local keys or one memory tile */
    size_t per_thread = (size_t)QB * (size_t)tile_rows + (size_t)QB * (size_t)hd + 2 * (size_t)TILE * (size_t)hd;
    float *scratch = kern_cpu_scratch(kc, (size_t)nt * per_thread);
    if (!scratch) return KERN_ENOMEM;
    int64_t group = hq / hkv, kv_stride = hkv * hd, nblk = (nq + QB - 1) / QB;
    size_t esz = kern_dtype_size(mem_dt);

#pragma omp parallel for collapse(2) num_threads(nt) schedule(dynamic, 1)
    for (int64_t h = 0; h < hq; h++) {
        for (int64_t b = 0; b < nblk; b++) {
            float *ws = scratch + (size_t)omp_get_thread_num() * per_thread;
            float *s = ws, *accs = s + (size_t)QB * (size_t)tile_rows, *kt = accs + (size_t)QB * (size_t)hd;
            float *vt = kt + (size_t)TILE * (size_t)hd;
            int64_t g = h / group, i0 = b * QB, nb = nq - i0 < QB ? nq - i0 : QB;
            online_row rows[QB];
            for (int64_t r = 0; r < nb; r++) {
                rows[r] = (online_row){.m = -INFINITY, .l = 0.f, .acc = accs + r * hd};
                memset(rows[r].acc, 0, (size_t)hd * sizeof(float));
            }
            /* local keys, causal */
            const float *kh = k + g * hd, *vh = v + g * hd;
            for (int64_t r = 0; r < nb; r++) {
                const float *qv = q + ((i0 + r) * hq + h) * hd;
                int64_t lim = q_pos0 + i0 + r + 1;
                float *sr = s + r * tile_rows;
                for (int64_t j = 0; j < lim; j++) sr[j] = kern_dot_f32(qv, kh + j * kv_stride, hd) * scale;
                fold(&rows[r], sr, lim, vh, kv_stride, hd);
            }
            if (n_mem > 0 && !sel) { /* dense memory: every row, tile by tile, shared by the block's queries */
                const char *mk = mem_k[g], *mv = mem_v[g];
                for (int64_t t0 = 0; t0 < n_mem; t0 += TILE) {
                    int64_t nt_rows = n_mem - t0 < TILE ? n_mem - t0 : TILE;
                    kern_cpu_widen(kt, mk + (size_t)t0 * (size_t)hd * esz, mem_dt, nt_rows * hd);
                    kern_cpu_widen(vt, mv + (size_t)t0 * (size_t)hd * esz, mem_dt, nt_rows * hd);
                    for (int64_t r = 0; r < nb; r++) {
                        const float *qv = q + ((i0 + r) * hq + h) * hd;
                        float *sr = s + r * tile_rows;
                        for (int64_t j = 0; j < nt_rows; j++) sr[j] = kern_dot_f32(qv, kt + j * hd, hd) * scale;
                        fold(&rows[r], sr, nt_rows, vt, hd, hd);
                    }
                }
            } else if (n_mem > 0) { /* selected rows, per query */
                const char *mk = mem_k[g], *mv = mem_v[g];
                for (int64_t r = 0; r < nb; r++) {
                    const float *qv = q + ((i0 + r) * hq + h) * hd;
                    const int64_t *ids = sel + ((i0 + r) * hq + h) * n_sel;
                    for (int64_t t0 = 0; t0 < n_sel; t0 += TILE) {
                        int64_t cnt = 0, lim = n_sel - t0 < TILE ? n_sel - t0 : TILE;
                        for (int64_t j = 0; j < lim; j++) {
                            int64_t id = ids[t0 + j];
                            if (t0 + j + PF_ROWS < n_sel && ids[t0 + j + PF_ROWS] >= 0) {
                                size_t ahead = (size_t)ids[t0 + j + PF_ROWS] * (size_t)hd * esz;
                                prefetch_row(mk + ahead, (size_t)hd * esz);
                                prefetch_row(mv + ahead, (size_t)hd * esz);
                            }
                            if (id < 0) continue;
                            kern_cpu_widen(kt + cnt * hd, mk + (size_t)id * (size_t)hd * esz, mem_dt, hd);
                            kern_cpu_widen(vt + cnt * hd, mv + (size_t)id * (size_t)hd * esz, mem_dt, hd);
                            cnt++;
                        }
                        float *sr = s + r * tile_rows;
                        for (int64_t j = 0; j < cnt; j++) sr[j] = kern_dot_f32(qv, kt + j * hd, hd) * scale;
                        fold(&rows[r], sr, cnt, vt, hd, hd);
                    }
                }
            }
            for (int64_t r = 0; r < nb; r++) {
                float *o = out + ((i0 + r) * hq + h) * hd, inv = 1.0f / rows[r].l;
                for (int64_t d = 0; d < hd; d++) o[d] = rows[r].acc[d] * inv;
            }
        }
    }
    return KERN_OK;
}

/* Widens rows t0 .. t0 + n - 1 of one KV head's memory into kw, vw [n][hd]. */
static void widen_rows(float *kw, float *vw, const char *mk, const char *mv, kern_dtype dt, int64_t hd, int64_t t0,
                       int64_t n) {
    size_t row = (size_t)hd * kern_dtype_size(dt);
    kern_cpu_widen(kw, mk + (size_t)t0 * row, dt, n * hd);
    kern_cpu_widen(vw, mv + (size_t)t0 * row, dt, n * hd);
}

/* Blocked form (cpu_attn_tiles.h), for nq >= TILE_MIN_Q: one work item per (query head, block of ATT_BK queries),
 * online softmax over (1) the causal local keys, packed once per call as attention does; (2) dense memory in tiles
 * of ATT_BK rows, widened and transposed per tile and shared by the block's queries (one pass over the memory per
 * ATT_BK queries); (3) selected rows per query (each query its own rows: dot products, then the same fold and pv). */
static int mem_tiles(kern_ctx *kc, const att_tiles *T, float *out, const float *q, const float *k, const float *v,
                     int64_t nq, int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale,
                     const void *const *mem_k, const void *const *mem_v, kern_dtype mem_dt, int64_t n_mem,
                     const int64_t *sel, int64_t n_sel) {
    const int nt = kc->n_threads;
    const int64_t nkeys = q_pos0 + nq, nkb = (nkeys + ATT_BK - 1) / ATT_BK, nqb = (nq + ATT_BK - 1) / ATT_BK;
    const int64_t group = hq / hkv, kv_stride = hkv * hd, q_stride = hq * hd, panel = hd * ATT_BK;
    const size_t kt_floats = (size_t)(hkv * nkb * panel);
    const size_t per_thread = ATT_BK * ATT_BK + 3 * ATT_BK + 3 * (size_t)panel; /* s, corr/m/l, kw, vw, kpanel */
    float *kt = kern_cpu_scratch(kc, kt_floats + (size_t)nt * per_thread);
    if (!kt) return KERN_ENOMEM;
    att_pack(kt, k, nkeys, hkv, hd, nt);
    const size_t esz = kern_dtype_size(mem_dt);

#pragma omp parallel for collapse(2) num_threads(nt) schedule(dynamic, 1)
    for (int64_t qbr = 0; qbr < nqb; qbr++) {
        for (int64_t h = 0; h < hq; h++) {
            float *s = kt + kt_floats + (size_t)omp_get_thread_num() * per_thread; /* [ATT_BK][ATT_BK] */
            float *corr = s + ATT_BK * ATT_BK, *m = corr + ATT_BK, *l = m + ATT_BK;
            float *kw = l + ATT_BK, *vw = kw + panel, *kp = vw + panel; /* [ATT_BK][hd] x 2, [hd][ATT_BK] */
            const int64_t qb = nqb - 1 - qbr, i0 = qb * ATT_BK, g = h / group;
            const int nb = (int)(nq - i0 < ATT_BK ? nq - i0 : ATT_BK);
            const float *qr = q + i0 * q_stride + h * hd;
            float *o = out + i0 * q_stride + h * hd;
            for (int r = 0; r < nb; r++) {
                m[r] = -INFINITY, l[r] = 0.f;
                memset(o + r * q_stride, 0, (size_t)hd * sizeof(float));
            }
            const int64_t last_kb = (q_pos0 + i0 + nb - 1) / ATT_BK;
            for (int64_t kb = 0; kb <= last_kb; kb++) { /* local keys, causal */
                const int64_t j0 = kb * ATT_BK;
                T->scores(s, qr, q_stride, nb, kt + (g * nkb + kb) * panel, hd);
                int max_nv = 0;
                for (int r = 0; r < nb; r++) {
                    int64_t nv = q_pos0 + i0 + r - j0 + 1;
                    int nvi = nv < 0 ? 0 : nv > ATT_BK ? ATT_BK : (int)nv;
                    corr[r] = T->fold(s + r * ATT_BK, nvi, scale, &m[r], &l[r]);
                    if (nvi > max_nv) max_nv = nvi;
                }
                T->pv(o, q_stride, corr, s, nb, max_nv, v + j0 * kv_stride + g * hd, kv_stride, hd);
            }
            if (n_mem > 0 && !sel) { /* dense memory, no mask */
                for (int64_t t0 = 0; t0 < n_mem; t0 += ATT_BK) {
                    const int nr = (int)(n_mem - t0 < ATT_BK ? n_mem - t0 : ATT_BK);
                    widen_rows(kw, vw, mem_k[g], mem_v[g], mem_dt, hd, t0, nr);
                    if (nr < ATT_BK) memset(kp, 0, (size_t)panel * sizeof(float));
                    for (int c = 0; c < nr; c++)
                        for (int64_t d = 0; d < hd; d++) kp[d * ATT_BK + c] = kw[c * hd + d];
                    T->scores(s, qr, q_stride, nb, kp, hd);
                    for (int r = 0; r < nb; r++) corr[r] = T->fold(s + r * ATT_BK, nr, scale, &m[r], &l[r]);
                    T->pv(o, q_stride, corr, s, nb, nr, vw, hd, hd);
                }
            } else if (n_mem > 0) { /* selected rows, per query */
                const char *mk = mem_k[g], *mv = mem_v[g];
                for (int r = 0; r < nb; r++) {
                    const float *qv = qr + r * q_stride;
                    const int64_t *ids = sel + ((i0 + r) * hq + h) * n_sel;
                    for (int64_t t0 = 0; t0 < n_sel; t0 += ATT_BK) {
                        int64_t lim = n_sel - t0 < ATT_BK ? n_sel - t0 : ATT_BK;
                        int cnt = 0;
                        for (int64_t j = 0; j < lim; j++) {
                            int64_t id = ids[t0 + j];
                            if (t0 + j + PF_ROWS < n_sel && ids[t0 + j + PF_ROWS] >= 0) {
                                size_t ahead = (size_t)ids[t0 + j + PF_ROWS] * (size_t)hd * esz;
                                prefetch_row(mk + ahead, (size_t)hd * esz);
                                prefetch_row(mv + ahead, (size_t)hd * esz);
                            }
                            if (id < 0) continue;
                            widen_rows(kw + cnt * hd, vw + cnt * hd, mk, mv, mem_dt, hd, id, 1);
                            cnt++;
                        }
                        for (int j = 0; j < cnt; j++) s[j] = kern_dot_f32(qv, kw + j * hd, hd);
                        float c = T->fold(s, cnt, scale, &m[r], &l[r]);
                        T->pv(o + r * q_stride, q_stride, &c, s, 1, cnt, vw, hd, hd);
                    }
                }
            }
            for (int r = 0; r < nb; r++) {
                float inv = 1.0f / l[r], *orow = o + r * q_stride;
                for (int64_t d = 0; d < hd; d++) orow[d] *= inv;
            }
        }
    }
    return KERN_OK;
}

int kern_cpu_attention_mem(kern_ctx *kc, float *out, const float *q, const float *k, const float *v, int64_t nq,
                           int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv, int64_t hd, float scale,
                           const void *const *mem_k, const void *const *mem_v, kern_dtype mem_dt, int64_t n_mem,
                           const int64_t *sel, int64_t n_sel) {
    if (nq < 0 || hq <= 0 || hkv <= 0 || hd <= 0 || hq % hkv != 0 || q_pos0 < 0 || q_pos0 + nq > nkv || n_mem < 0 ||
        n_sel < 0 || (n_mem > 0 && (!mem_k || !mem_v)) || (sel && n_sel == 0 && n_mem > 0))
        return KERN_ESHAPE;
    if (mem_dt != KERN_F32 && mem_dt != KERN_BF16 && mem_dt != KERN_F16) return KERN_ESHAPE;
    if (nq == 0) return KERN_OK;
    if (sel) /* ids must be -1 or valid rows: check up front, no partial output on error */
        for (int64_t i = 0; i < nq * hq * n_sel; i++)
            if (sel[i] < -1 || sel[i] >= n_mem) return KERN_ERANGE;
    if (nq < att_tile_min_q())
        return mem_rows(kc, out, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale, mem_k, mem_v, mem_dt, n_mem, sel,
                        n_sel);
    return mem_tiles(kc, att_tiles_get(), out, q, k, v, nq, q_pos0, hq, hkv, hd, scale, mem_k, mem_v, mem_dt, n_mem,
                     sel, n_sel);
}
