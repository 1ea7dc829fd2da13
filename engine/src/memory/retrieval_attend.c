/*
 * retrieval_attend.c — retrieval memory's attention at one layer for one forward step (memory_ops.attend): the
 * step's query sums are kept for the representatives of the blocks they will join, the top-k blocks of each KV head
 * are retrieved (their keys lie rotated at the memory's position already), and the queries attend to them and to the cache (sinks +
 * local window, causal) in one softmax. Shapes: q, out [nq][hq][hd] (q rotated at rows q_pos0 ..); k, v the
 * layer's cache [nkv][hkv][hd] (retrieval_memory.h for the layout and the choices).
 */
#include <stdlib.h>
#include <string.h>

#include "retrieval_memory.h"

static int cmp_id(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* ids[0..kk) of one KV head: the blocks to attend, ascending, each once. An approximate index may return fewer than
 * kk (-1 ids): the earliest blocks not chosen fill in. */
static void settle_ids(int64_t *ids, int32_t kk, int64_t n_blocks) {
    for (int32_t j = 0; j < kk; j++) {
        if (ids[j] >= 0 && ids[j] < n_blocks) continue;
        for (int64_t b = 0; b < n_blocks; b++) {
            bool used = false;
            for (int32_t i = 0; i < kk && !used; i++) used = ids[i] == b;
            if (!used) {
                ids[j] = b;
                break;
            }
        }
    }
    qsort(ids, (size_t)kk, sizeof *ids, cmp_id);
}

int retrieval_attend(void *st, int32_t l, const kern_backend *be, kern_ctx *kc, float *out, const float *q,
                     const float *k, const float *v, int64_t nq, int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv,
                     int64_t hd, float scale) {
    retrieval_state *s = st;
    const int64_t grp = hq / hkv, kvd = s->kv_dim, rows = s->S + s->W;
    /* 1. per query and KV head, the sum of its query heads, rotated back to before RoPE (rope is linear) */
    float *rq = s->raw_q + ((size_t)l * (size_t)rows + (size_t)q_pos0) * (size_t)kvd;
    for (int64_t i = 0; i < nq; i++) {
        for (int64_t g = 0; g < hkv; g++) {
            float *dst = rq + i * kvd + g * hd;
            memset(dst, 0, (size_t)hd * sizeof(float));
            for (int64_t h = g * grp; h < (g + 1) * grp; h++) {
                const float *src = q + (i * hq + h) * hd;
                for (int64_t j = 0; j < hd; j++) dst[j] += src[j];
            }
        }
        s->pos[i] = (int32_t)(q_pos0 + i);
    }
    int rc = be->rope_backward(kc, rq, nq, hkv, hd, s->pos, s->cfg->rope_theta, s->cfg->rope_scaling_factor);
    if (rc != KERN_OK) return rc;
    if (s->n_blocks == 0) /* nothing in memory: the plain attention over the cache */
        return be->attention(kc, out, NULL, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale);

    /* 2. per KV head: the step's summed query, seen from the memory's position, scores every block by its
     * representatives; the top kk are read and their keys rotated at that position */
    const int32_t kk = s->k < s->n_blocks ? s->k : (int32_t)s->n_blocks, B = s->B;
    const void *mk[hkv], *mv[hkv];
    for (int64_t g = 0; g < hkv; g++) {
        float *qs = s->qsum + g * hd;
        memset(qs, 0, (size_t)hd * sizeof(float));
        for (int64_t i = 0; i < nq; i++)
            for (int64_t h = g * grp; h < (g + 1) * grp; h++) {
                const float *src = q + (i * hq + h) * hd;
                for (int64_t j = 0; j < hd; j++) qs[j] += src[j];
            }
        retrieval_rotate(qs, s->mem_pos_cs, (int32_t)hd, -1.f);
        int64_t *ids = s->ids + g * s->k;
        if (mem_store_search(s->reps[l], (int)g, 1, qs, (size_t)hd, kk, ids, s->scores) != 0) return KERN_EBACKEND;
        settle_ids(ids, kk, s->n_blocks);
        if (nq == 1) { /* one query (generation): attention_mem reads the chosen rows where they lie */
            mk[g] = mem_store_raw_keys(s->tokens[l], (int)g);
            mv[g] = mem_store_raw_values(s->tokens[l], (int)g);
            for (int64_t h = g * grp; h < (g + 1) * grp; h++)
                for (int32_t j = 0; j < kk; j++)
                    for (int32_t m = 0; m < B; m++) s->sel[(h * kk + j) * B + m] = ids[j] * B + m;
            continue;
        }
        /* many queries: the chosen rows gathered (widened) once for all of them */
        float *gk = s->gk + g * (int64_t)kk * B * hd, *gv = s->gv + g * (int64_t)kk * B * hd;
        for (int32_t j = 0; j < kk; j++) {
            mem_store_read_keys(s->tokens[l], (int)g, (size_t)(ids[j] * B), (size_t)B, gk + (int64_t)j * B * hd);
            mem_store_read_values(s->tokens[l], (int)g, (size_t)(ids[j] * B), (size_t)B, gv + (int64_t)j * B * hd);
        }
        mk[g] = gk;
        mv[g] = gv;
    }
    /* 3. one softmax over [cache (causal) | retrieved tokens] */
    if (nq == 1) {
        mem_dtype dt = mem_store_dtype(s->tokens[l]);
        kern_dtype kdt = dt == MEM_DTYPE_BF16 ? KERN_BF16 : dt == MEM_DTYPE_F16 ? KERN_F16 : KERN_F32;
        return be->attention_mem(kc, out, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale, mk, mv, kdt,
                                 (int64_t)mem_store_size(s->tokens[l]), s->sel, (int64_t)kk * B);
    }
    return be->attention_mem(kc, out, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale, mk, mv, KERN_F32,
                             (int64_t)kk * B, NULL, 0);
}
