/*
 * retrieval_store.c — retrieval memory's block store: the oldest blocks of the local window move to memory (their
 * tokens' keys rotated at the memory position and values, and one representative row per block), and the window shifts down to the
 * row after the sinks, its keys rotated again at their new positions (retrieval_memory.h for the layout).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "retrieval_memory.h"

int32_t retrieval_blocks_due(const retrieval_state *s, int32_t n) {
    int64_t over = (int64_t)s->n_rows + n - (s->S + s->W);
    return over > 0 ? (int32_t)((over + s->B - 1) / s->B) : 0;
}

mem_bytes retrieval_mem_bytes(const retrieval_state *s) {
    mem_bytes t = {0, 0, 0};
    for (int32_t l = 0; l < s->n_layer; l++) {
        mem_bytes a = mem_store_bytes(s->tokens[l]), b = mem_store_bytes(s->reps[l]);
        t.keys += a.keys + b.keys;
        t.values += a.values + b.values;
        t.index += a.index + b.index;
    }
    return t;
}

static uint64_t bytes_after(const retrieval_state *s, int32_t e) {
    uint64_t t = 0;
    for (int32_t l = 0; l < s->n_layer; l++) {
        mem_bytes a = mem_store_bytes_after(s->tokens[l], (size_t)e * (size_t)s->B);
        mem_bytes b = mem_store_bytes_after(s->reps[l], (size_t)e);
        t += a.keys + a.values + a.index + b.keys + b.values + b.index;
    }
    return t;
}

/* The block at rows m0 .. m0+B-1 of layer l: per KV head, the sum of the keys (before RoPE) of its r tokens with
 * the largest logits from the B queries that follow each (itself included, as far as they are in the cache), into
 * s->rsum. Ties go to the earlier token. */
static void representatives(retrieval_state *s, int32_t l, int32_t m0) {
    const int32_t B = s->B, hd = s->hd, kvd = s->kv_dim, rows = s->S + s->W;
    const float *rk = s->raw_k + ((size_t)l * rows + (size_t)m0) * kvd;
    const float *rq = s->raw_q + ((size_t)l * rows + (size_t)m0) * kvd;
    const int32_t n_q = s->n_rows - m0 < 2 * B - 1 ? s->n_rows - m0 : 2 * B - 1; /* queries at rows m0 .. */
    float *rot_k = s->rot, *rot_q = s->rot + (size_t)B * hd;
    for (int32_t g = 0; g < s->hkv; g++) {
        for (int32_t m = 0; m < B; m++) { /* relative positions: only distances matter */
            memcpy(rot_k + (size_t)m * hd, rk + (size_t)m * kvd + (size_t)g * hd, (size_t)hd * sizeof(float));
            retrieval_rotate(rot_k + (size_t)m * hd, s->rel_cs + (size_t)m * hd, hd, 1.f);
        }
        for (int32_t t = 0; t < n_q; t++) {
            memcpy(rot_q + (size_t)t * hd, rq + (size_t)t * kvd + (size_t)g * hd, (size_t)hd * sizeof(float));
            retrieval_rotate(rot_q + (size_t)t * hd, s->rel_cs + (size_t)t * hd, hd, 1.f);
        }
        for (int32_t m = 0; m < B; m++) {
            const int32_t t_end = m + B < n_q ? m + B : n_q;
            double sc = 0;
            for (int32_t t = m; t < t_end; t++) {
                float d = 0;
                for (int32_t j = 0; j < hd; j++) d += rot_q[(size_t)t * hd + j] * rot_k[(size_t)m * hd + j];
                sc += d;
            }
            s->rep_score[m] = (float)sc;
        }
        float *out = s->rsum + (size_t)g * hd;
        memset(out, 0, (size_t)hd * sizeof(float));
        for (int32_t i = 0; i < s->r; i++) {
            int32_t best = -1;
            for (int32_t m = 0; m < B; m++)
                if (s->rep_score[m] != -INFINITY && (best < 0 || s->rep_score[m] > s->rep_score[best])) best = m;
            s->rep_score[best] = -INFINITY;
            const float *key = rk + (size_t)best * kvd + (size_t)g * hd;
            for (int32_t j = 0; j < hd; j++) out[j] += key[j];
        }
    }
}

/* Undoes the appends of layers 0 .. upto-1 (a later layer failed): the memory is as before the move. */
static void roll_back(retrieval_state *s, int32_t upto) {
    for (int32_t l = 0; l < upto; l++) {
        mem_store_truncate(s->tokens[l], (size_t)s->n_blocks * (size_t)s->B);
        mem_store_truncate(s->reps[l], (size_t)s->n_blocks);
    }
}

mnemo_status retrieval_evict(retrieval_state *s, kern_ctx *kc, const kv_cache *kv, int32_t e, char *err,
                             size_t errlen) {
    const int32_t S = s->S, B = s->B, rows = S + s->W, moved = e * B, keep = s->n_rows - S - moved;
    const size_t kvd = (size_t)s->kv_dim;
    if (s->mem_max_bytes) {
        uint64_t after = bytes_after(s, e);
        if (after > s->mem_max_bytes) {
            mem_bytes b = retrieval_mem_bytes(s);
            snprintf(err, errlen, "memory limit reached: %lld tokens held in %llu bytes; %d more would take it to %llu "
                     "bytes, past the limit of %llu", (long long)(s->n_blocks * B),
                     (unsigned long long)(b.keys + b.values + b.index), moved, (unsigned long long)after,
                     (unsigned long long)s->mem_max_bytes);
            return MNEMO_ERR_CONTEXT_FULL;
        }
    }
    for (int32_t l = 0; l < s->n_layer; l++) {
        const float *rk = s->raw_k + ((size_t)l * rows + (size_t)S) * kvd;
        const float *v = kv->v + ((size_t)l * (size_t)kv->n_ctx + (size_t)S) * kvd;
        int rc = 0;
        for (int32_t j = 0; rc == 0 && j < e; j++) { /* keys rotated at P once here, not at every read */
            memcpy(s->rotk, rk + (size_t)j * B * kvd, (size_t)B * kvd * sizeof(float));
            for (int32_t m = 0; m < B * s->hkv; m++) retrieval_rotate(s->rotk + (size_t)m * s->hd, s->mem_pos_cs, s->hd, 1.f);
            rc = mem_store_append(s->tokens[l], (size_t)B, s->rotk, v + (size_t)j * B * kvd, kvd);
        }
        for (int32_t j = 0; rc == 0 && j < e; j++) {
            representatives(s, l, S + j * B);
            rc = mem_store_append(s->reps[l], 1, s->rsum, s->zeros, kvd);
        }
        if (rc != 0) {
            snprintf(err, errlen, "retrieval memory of layer %d: %s", l,
                     mem_store_error(mem_store_size(s->tokens[l]) % (size_t)B ? s->tokens[l] : s->reps[l]));
            roll_back(s, l + 1);
            return MNEMO_ERR_NOMEM;
        }
    }
    s->n_rows -= moved; /* moved: from here on a failure leaves a broken window, and the caller resets */
    s->n_blocks += e;
    /* the window shifts down to row S: values and the saved keys and query sums move, the cache keys are the saved
     * keys rotated again at their new rows */
    for (int32_t i = 0; i < keep; i++) s->pos[i] = S + i;
    for (int32_t l = 0; l < s->n_layer; l++) {
        float *rk = s->raw_k + ((size_t)l * rows + (size_t)S) * kvd;
        float *rq = s->raw_q + ((size_t)l * rows + (size_t)S) * kvd;
        float *k = kv->k + ((size_t)l * (size_t)kv->n_ctx + (size_t)S) * kvd;
        float *v = kv->v + ((size_t)l * (size_t)kv->n_ctx + (size_t)S) * kvd;
        const size_t bytes = (size_t)keep * kvd * sizeof(float), off = (size_t)moved * kvd;
        memmove(rk, rk + off, bytes);
        memmove(rq, rq + off, bytes);
        memmove(v, v + off, bytes);
        memcpy(k, rk, bytes);
        if (keep > 0) {
            int rc = s->be->rope(kc, k, keep, s->hkv, s->hd, s->pos, s->cfg->rope_theta, s->cfg->rope_scaling_factor);
            if (rc != KERN_OK) {
                snprintf(err, errlen, "retrieval memory: rotating the window failed (kernel error %d)", rc);
                return MNEMO_ERR_BACKEND;
            }
        }
    }
    return MNEMO_OK;
}
