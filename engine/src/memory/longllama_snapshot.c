/*
 * longllama_snapshot.c — LongLLaMA's part of a context snapshot (context_snapshot.c writes the header, the local
 * cache rows and the logits around it):
 *   header settings  window, last_context_length, knn_k, mem_dtype, 0
 *   RAWK  the memory layers' local keys before RoPE (what a flush moves to memory), layer after layer
 *   M<l>  memory layer l's store (mem_store_save: rows in their storage dtype; the index is rebuilt on load)
 * Loading checks and builds everything aside (load_check) before anything of the context changes (load_commit).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "longllama_memory.h"
#include "snapshot.h"
#include "snapshot_values.h"

#define TAG_RAWK SNAP_TAG('R', 'A', 'W', 'K')
#define TAG_MEM(l) SNAP_TAG('M', (l) & 0xff, ((l) >> 8) & 0xff, 0x7f)

enum { SET_WINDOW, SET_LAST_CONTEXT_LENGTH, SET_KNN_K, SET_MEM_DTYPE }; /* memory_snap.settings[] */

void longllama_snapshot_settings(const void *st, int32_t out[MEMORY_SNAP_SETTINGS]) {
    const longllama_state *ll = st;
    memset(out, 0, MEMORY_SNAP_SETTINGS * sizeof *out);
    out[SET_WINDOW] = ll->window;
    out[SET_LAST_CONTEXT_LENGTH] = ll->last_context_length;
    out[SET_KNN_K] = ll->knn_k;
    out[SET_MEM_DTYPE] = (int32_t)ll->mem_dt;
}

int longllama_save(const void *st, snap_writer *w, int32_t n_rows) {
    const longllama_state *ll = st;
    int rc = snap_section_begin(w, TAG_RAWK);
    for (int32_t l = 0; rc == 0 && l < ll->n_layer; l++)
        if (ll->raw_k[l]) rc = snap_write(w, ll->raw_k[l], (uint64_t)n_rows * (uint64_t)ll->kv_dim * sizeof(float));
    if (rc == 0) rc = snap_section_end(w);
    for (int32_t l = 0; rc == 0 && l < ll->n_layer; l++)
        if (ll->mem[l]) rc = mem_store_save(ll->mem[l], w, TAG_MEM(l));
    return rc;
}

/* What load_check builds and load_commit installs. */
typedef struct {
    mem_store **stores; /* [n_layer], loaded from the file */
    const float *rawk;  /* the RAWK section (the reader's memory, alive until it closes) */
} staged_load;

void longllama_load_discard(const void *st, void *staged) {
    const longllama_state *ll = st;
    staged_load *sl = staged;
    if (!sl) return;
    for (int32_t l = 0; sl->stores && l < ll->n_layer; l++) mem_store_free(sl->stores[l]);
    free(sl->stores);
    free(sl);
}

static mnemo_status refuse(char *err, size_t errlen, mnemo_status st, const char *problem) {
    snprintf(err, errlen, "%s", problem);
    return st;
}

mnemo_status longllama_load_check(const void *st, const snap_reader *r, const memory_snap *sn, void **staged,
                                  char *err, size_t errlen) {
    const longllama_state *ll = st;
    const int32_t *set = sn->settings;
    *staged = NULL;
    if (set[SET_WINDOW] != ll->window || set[SET_LAST_CONTEXT_LENGTH] < 1 ||
        set[SET_LAST_CONTEXT_LENGTH] > ll->window || set[SET_KNN_K] < 0 || set[SET_MEM_DTYPE] != (int32_t)ll->mem_dt ||
        sn->n_rows > ll->window)
        return refuse(err, errlen, MNEMO_ERR_FORMAT, "its LongLLaMA settings do not fit this context");
    const void *rawk;
    uint64_t len;
    if (snap_reader_find(r, TAG_RAWK, &rawk, &len) != 0)
        return refuse(err, errlen, MNEMO_ERR_FORMAT, "a section is missing");
    if (len != (uint64_t)ll->n_mem_layers * (uint64_t)sn->n_rows * (uint64_t)ll->kv_dim * sizeof(float))
        return refuse(err, errlen, MNEMO_ERR_FORMAT, "a section has the wrong size");
    if (!snap_floats_ok(rawk, (size_t)(len / sizeof(float))))
        return refuse(err, errlen, MNEMO_ERR_FORMAT, "a local key is not finite or out of range");
    staged_load *sl = calloc(1, sizeof *sl);
    if (sl) sl->stores = calloc((size_t)ll->n_layer, sizeof *sl->stores);
    if (!sl || !sl->stores) {
        free(sl);
        return refuse(err, errlen, MNEMO_ERR_NOMEM, "out of memory");
    }
    sl->rawk = rawk;
    mnemo_status status = MNEMO_ERR_FORMAT;
    uint64_t mem_rows = UINT64_MAX;
    for (int32_t l = 0; l < ll->n_layer; l++) {
        if (!ll->mem[l]) continue;
        const void *data;
        if (snap_reader_find(r, TAG_MEM(l), &data, &len) != 0) {
            refuse(err, errlen, status, "a memory layer's store is missing");
            goto fail;
        }
        char why[256];
        sl->stores[l] = mem_store_load(data, len, why, sizeof why);
        if (!sl->stores[l]) {
            refuse(err, errlen, status, why);
            goto fail;
        }
        const mem_store *got = sl->stores[l], *have = ll->mem[l];
        if (mem_store_n_heads(got) != mem_store_n_heads(have) || mem_store_head_dim(got) != mem_store_head_dim(have) ||
            mem_store_dtype(got) != mem_store_dtype(have) || (mem_rows != UINT64_MAX && mem_store_size(got) != mem_rows)) {
            refuse(err, errlen, status, "a memory store does not match this context's memory layers");
            goto fail;
        }
        mem_rows = mem_store_size(got);
    }
    if (mem_rows != UINT64_MAX && (uint64_t)sn->n_past != mem_rows + (uint64_t)sn->n_rows) {
        refuse(err, errlen, status, "its token count does not match its memory and window");
        goto fail;
    }
    uint64_t total = 0; /* the limit is this context's own */
    for (int32_t l = 0; l < ll->n_layer; l++)
        if (sl->stores[l]) {
            mem_bytes b = mem_store_bytes(sl->stores[l]);
            total += b.keys + b.values + b.index;
        }
    if (ll->mem_max_bytes && total > ll->mem_max_bytes) {
        refuse(err, errlen, MNEMO_ERR_CONTEXT_FULL, "its memory exceeds this context's mem_max_bytes");
        status = MNEMO_ERR_CONTEXT_FULL;
        goto fail;
    }
    *staged = sl;
    return MNEMO_OK;
fail:
    longllama_load_discard(ll, sl);
    return status;
}

void longllama_load_commit(void *st, void *staged, const memory_snap *sn) {
    longllama_state *ll = st;
    staged_load *sl = staged;
    size_t per = (size_t)sn->n_rows * (size_t)ll->kv_dim;
    for (int32_t l = 0, i = 0; l < ll->n_layer; l++) {
        if (ll->raw_k[l]) memcpy(ll->raw_k[l], sl->rawk + (size_t)(i++) * per, per * sizeof(float));
        if (ll->mem[l]) {
            mem_store_free(ll->mem[l]);
            ll->mem[l] = sl->stores[l];
            sl->stores[l] = NULL;
        }
    }
    ll->n_local = sn->n_rows;
    ll->last_context_length = sn->settings[SET_LAST_CONTEXT_LENGTH];
    ll->n_marks = 0; /* where the loaded memory's windows began is not known: it can be cut only whole */
    longllama_device_invalidate(ll); /* new stores: the device copy is rebuilt at the next attention */
    longllama_load_discard(ll, sl);
}
