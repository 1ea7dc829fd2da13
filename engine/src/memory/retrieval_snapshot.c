/*
 * retrieval_snapshot.c — retrieval memory's part of a context snapshot (context_snapshot.c writes the header, the
 * cache rows and the logits around it):
 *   header settings  sinks, window, block size, representatives, dtype: the layout of the state, so a snapshot
 *                    loads only into a context with the same five (top-k may differ: it is read at each step)
 *   RRWK, RRWQ  the cache rows' keys and query sums before RoPE, layer after layer
 *   RT<l>, RR<l>  layer l's token store and representative store (mem_store_save; indexes rebuilt on load)
 * Loading checks and builds everything aside (load_check) before anything of the context changes (load_commit).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retrieval_memory.h"
#include "snapshot.h"
#include "snapshot_values.h"

#define TAG_RAWK SNAP_TAG('R', 'R', 'W', 'K')
#define TAG_RAWQ SNAP_TAG('R', 'R', 'W', 'Q')
#define TAG_TOKENS(l) SNAP_TAG('T', (l) & 0xff, ((l) >> 8) & 0xff, 0x7e)
#define TAG_REPS(l) SNAP_TAG('R', (l) & 0xff, ((l) >> 8) & 0xff, 0x7e)

enum { SET_SINKS, SET_WINDOW, SET_BLOCK, SET_REPS, SET_DTYPE }; /* memory_snap.settings[] */

void retrieval_snapshot_settings(const void *st, int32_t out[MEMORY_SNAP_SETTINGS]) {
    const retrieval_state *s = st;
    out[SET_SINKS] = s->S;
    out[SET_WINDOW] = s->W;
    out[SET_BLOCK] = s->B;
    out[SET_REPS] = s->r;
    out[SET_DTYPE] = (int32_t)s->dtype;
}

static int save_rows(const retrieval_state *s, snap_writer *w, uint32_t tag, const float *buf, int32_t n_rows) {
    int rc = snap_section_begin(w, tag);
    const size_t per = (size_t)(s->S + s->W) * (size_t)s->kv_dim;
    for (int32_t l = 0; rc == 0 && l < s->n_layer; l++)
        rc = snap_write(w, buf + (size_t)l * per, (uint64_t)n_rows * (uint64_t)s->kv_dim * sizeof(float));
    return rc == 0 ? snap_section_end(w) : rc;
}

int retrieval_save(const void *st, snap_writer *w, int32_t n_rows) {
    const retrieval_state *s = st;
    int rc = save_rows(s, w, TAG_RAWK, s->raw_k, n_rows);
    if (rc == 0) rc = save_rows(s, w, TAG_RAWQ, s->raw_q, n_rows);
    for (int32_t l = 0; rc == 0 && l < s->n_layer; l++) {
        rc = mem_store_save(s->tokens[l], w, TAG_TOKENS(l));
        if (rc == 0) rc = mem_store_save(s->reps[l], w, TAG_REPS(l));
    }
    return rc;
}

typedef struct {
    mem_store **tokens, **reps; /* [n_layer], loaded from the file */
    const float *rawk, *rawq;   /* the reader's memory, alive until it closes */
    int64_t n_blocks;
} staged_load;

void retrieval_load_discard(const void *st, void *staged) {
    const retrieval_state *s = st;
    staged_load *sl = staged;
    if (!sl) return;
    for (int32_t l = 0; l < s->n_layer; l++) {
        if (sl->tokens) mem_store_free(sl->tokens[l]);
        if (sl->reps) mem_store_free(sl->reps[l]);
    }
    free(sl->tokens);
    free(sl->reps);
    free(sl);
}

static mnemo_status refuse(char *err, size_t errlen, mnemo_status st, const char *problem) {
    snprintf(err, errlen, "%s", problem);
    return st;
}

static const float *rows_section(const retrieval_state *s, const snap_reader *r, uint32_t tag, int32_t n_rows,
                                 const char **problem) {
    const void *data;
    uint64_t len;
    if (snap_reader_find(r, tag, &data, &len) != 0) return *problem = "a section is missing", NULL;
    if (len != (uint64_t)s->n_layer * (uint64_t)n_rows * (uint64_t)s->kv_dim * sizeof(float))
        return *problem = "a section has the wrong size", NULL;
    if (!snap_floats_ok(data, (size_t)(len / sizeof(float))))
        return *problem = "a key or query before RoPE is not finite or out of range", NULL;
    return data;
}

/* A store from the file that fits this context's: shape, dtype, and `rows` rows. */
static mem_store *load_store(const snap_reader *r, uint32_t tag, const mem_store *like, uint64_t rows, char *why,
                             size_t whylen) {
    const void *data;
    uint64_t len;
    if (snap_reader_find(r, tag, &data, &len) != 0) return snprintf(why, whylen, "a memory store is missing"), NULL;
    mem_store *m = mem_store_load(data, len, why, whylen);
    if (m && (mem_store_n_heads(m) != mem_store_n_heads(like) || mem_store_head_dim(m) != mem_store_head_dim(like) ||
              mem_store_dtype(m) != mem_store_dtype(like) || mem_store_size(m) != rows)) {
        snprintf(why, whylen, "a memory store does not match this context's retrieval memory");
        mem_store_free(m);
        return NULL;
    }
    return m;
}

mnemo_status retrieval_load_check(const void *st, const snap_reader *r, const memory_snap *sn, void **staged,
                                  char *err, size_t errlen) {
    const retrieval_state *s = st;
    const int32_t *set = sn->settings;
    *staged = NULL;
    if (set[SET_SINKS] != s->S || set[SET_WINDOW] != s->W || set[SET_BLOCK] != s->B || set[SET_REPS] != s->r ||
        set[SET_DTYPE] != (int32_t)s->dtype) {
        snprintf(err, errlen, "its retrieval memory has sinks %d, window %d, block %d, %d representatives, %s; this "
                 "context has sinks %d, window %d, block %d, %d representatives, %s", set[SET_SINKS], set[SET_WINDOW],
                 set[SET_BLOCK], set[SET_REPS], mnemo_mem_dtype_name((mnemo_mem_dtype)set[SET_DTYPE]), s->S, s->W,
                 s->B, s->r, mnemo_mem_dtype_name(s->dtype));
        return MNEMO_ERR_INVALID_ARG;
    }
    const int64_t mem = (int64_t)sn->n_past - sn->n_rows;
    if (sn->n_rows > s->S + s->W || mem < 0 || mem % s->B != 0 || (mem > 0 && sn->n_rows < s->S))
        return refuse(err, errlen, MNEMO_ERR_FORMAT, "its token count does not match its memory and window");
    const char *problem = NULL;
    const float *rawk = rows_section(s, r, TAG_RAWK, sn->n_rows, &problem);
    const float *rawq = rawk ? rows_section(s, r, TAG_RAWQ, sn->n_rows, &problem) : NULL;
    if (!rawq) return refuse(err, errlen, MNEMO_ERR_FORMAT, problem);
    staged_load *sl = calloc(1, sizeof *sl);
    if (sl) sl->tokens = calloc((size_t)s->n_layer, sizeof *sl->tokens);
    if (sl) sl->reps = calloc((size_t)s->n_layer, sizeof *sl->reps);
    if (!sl || !sl->tokens || !sl->reps) {
        retrieval_load_discard(s, sl);
        return refuse(err, errlen, MNEMO_ERR_NOMEM, "out of memory");
    }
    sl->rawk = rawk, sl->rawq = rawq, sl->n_blocks = mem / s->B;
    uint64_t total = 0;
    for (int32_t l = 0; l < s->n_layer; l++) {
        sl->tokens[l] = load_store(r, TAG_TOKENS(l), s->tokens[l], (uint64_t)mem, err, errlen);
        sl->reps[l] =
            sl->tokens[l] ? load_store(r, TAG_REPS(l), s->reps[l], (uint64_t)sl->n_blocks, err, errlen) : NULL;
        if (!sl->reps[l]) {
            retrieval_load_discard(s, sl);
            return MNEMO_ERR_FORMAT;
        }
        mem_bytes a = mem_store_bytes(sl->tokens[l]), b = mem_store_bytes(sl->reps[l]);
        total += a.keys + a.values + a.index + b.keys + b.values + b.index;
    }
    if (s->mem_max_bytes && total > s->mem_max_bytes) {
        retrieval_load_discard(s, sl);
        return refuse(err, errlen, MNEMO_ERR_CONTEXT_FULL, "its memory exceeds this context's mem_max_bytes");
    }
    *staged = sl;
    return MNEMO_OK;
}

void retrieval_load_commit(void *st, void *staged, const memory_snap *sn) {
    retrieval_state *s = st;
    staged_load *sl = staged;
    const size_t per = (size_t)(s->S + s->W) * (size_t)s->kv_dim, n = (size_t)sn->n_rows * (size_t)s->kv_dim;
    for (int32_t l = 0; l < s->n_layer; l++) {
        memcpy(s->raw_k + (size_t)l * per, sl->rawk + (size_t)l * n, n * sizeof(float));
        memcpy(s->raw_q + (size_t)l * per, sl->rawq + (size_t)l * n, n * sizeof(float));
        mem_store_free(s->tokens[l]);
        mem_store_free(s->reps[l]);
        s->tokens[l] = sl->tokens[l], s->reps[l] = sl->reps[l];
        sl->tokens[l] = sl->reps[l] = NULL;
    }
    s->n_rows = sn->n_rows;
    s->n_blocks = sl->n_blocks;
    retrieval_load_discard(s, sl);
}
