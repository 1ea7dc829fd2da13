/*
 * longllama_ops.c — LongLLaMA's row of the memory table (memory.h): a context's memory state built from the
 * context parameters (the kNN index, where the search runs), and the small ops the forward pass and the context
 * API call. The work itself is in longllama_memory.c (flush, attention), longllama_device.c (the device copy),
 * longllama_decode.c (long inputs) and longllama_snapshot.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "longllama_memory.h"

static int32_t cache_rows(const model_config *cfg, const mnemo_context_params *p, int32_t n_ctx) {
    (void)p;
    (void)n_ctx;
    return cfg->max_position_embeddings; /* the local window, whatever the caller asked */
}

static void destroy(void *st) {
    if (!st) return;
    longllama_free(st);
    free(st);
}

static mnemo_status invalid(char *err, size_t errlen, const char *fmt, long long v) {
    snprintf(err, errlen, fmt, v);
    return MNEMO_ERR_INVALID_ARG;
}

static mnemo_status create(void **state, const memory_args *a, char *err, size_t errlen) {
    const model_config *cfg = a->cfg;
    const mnemo_context_params *p = a->params;
    *state = NULL;
    if (p->mem_knn_k < 0) return invalid(err, errlen, "mem_knn_k must be >= 0 (got %lld)", p->mem_knn_k);
    if (p->mem_dense_rows < 0) return invalid(err, errlen, "mem_dense_rows must be >= 0 (got %lld)", p->mem_dense_rows);
    mem_params mp = mem_default_params();
    switch (p->mem_index) {
    case MNEMO_MEM_INDEX_FLAT: mp.index = MEM_INDEX_FLAT; break;
    case MNEMO_MEM_INDEX_BRUTE: mp.index = MEM_INDEX_NONE; break;
    case MNEMO_MEM_INDEX_IVF: mp.index = MEM_INDEX_IVF; break;
    case MNEMO_MEM_INDEX_HNSW: mp.index = MEM_INDEX_HNSW; break;
    case MNEMO_MEM_INDEX_IVF_GROW: mp.index = MEM_INDEX_IVF_GROW; break;
    default: return invalid(err, errlen, "unknown mem_index %lld", (long long)p->mem_index);
    }
    int max_nprobe = mp.index == MEM_INDEX_IVF ? mp.ivf_nlist : 65536; /* IVF: its cells; memstore's own bound */
    if (p->mem_nprobe < 0 || p->mem_nprobe > max_nprobe) {
        snprintf(err, errlen, "mem_nprobe must be in 0..%d for this index (got %d)", max_nprobe, p->mem_nprobe);
        return MNEMO_ERR_INVALID_ARG;
    }
    if (p->mem_nprobe > 0) mp.ivf_nprobe = p->mem_nprobe;
    if (p->mem_knn_k == 0) mp.index = MEM_INDEX_NONE; /* dense attention never searches: no index to keep */
    /* On a GPU kNN searches the device copy of the keys (memstore's choice): no host index, except IVF-grow's,
     * whose cells the host trains for the device's mirror */
    const kern_backend *be = a->be;
    bool knn_on_device = mem_device_searches(be, mp.index, p->mem_knn_k);
    if (knn_on_device) mp.index = mem_device_host_index(mp.index);
    longllama_state *ll = calloc(1, sizeof *ll);
    if (!ll) {
        snprintf(err, errlen, "out of memory");
        return MNEMO_ERR_NOMEM;
    }
    char why[256];
    if (longllama_init(ll, cfg, &mp, p->mem_knn_k, why, sizeof why) != 0) {
        free(ll);
        snprintf(err, errlen, "LongLLaMA memory: %s", why);
        return MNEMO_ERR_NOMEM;
    }
    ll->knn_on_device = knn_on_device;
    ll->dense_rows = p->mem_dense_rows;
    ll->mem_max_bytes = p->mem_max_bytes;
    if (longllama_device_init(ll, be, cfg->num_key_value_heads, cfg->head_dim) != 0) {
        destroy(ll);
        snprintf(err, errlen, "out of memory");
        return MNEMO_ERR_NOMEM;
    }
    *state = ll;
    return MNEMO_OK;
}

static void reset(void *st) { longllama_clear(st); }

static int64_t keep_prefix(void *st, int64_t keep) { return longllama_keep_prefix(st, keep); }

static const uint8_t *layers(const void *st) { return ((const longllama_state *)st)->layer_flags; }

/* Memory layers keep their keys before RoPE: what moves to memory when the local window is flushed. raw_k is host
 * memory; the values are read from the cache at flush. */
static int on_layer_kv(void *st, int32_t l, const kern_backend *be, kern_ctx *kc, const float *k, const float *v,
                       int32_t pos0, int32_t n) {
    (void)v;
    longllama_state *ll = st;
    const size_t kvd = (size_t)ll->kv_dim;
    float *dst = ll->raw_k[l] + (size_t)pos0 * kvd;
    if (be->host_memory) {
        memcpy(dst, k, (size_t)n * kvd * sizeof(float));
        return KERN_OK;
    }
    return be->mem_copy(kc, dst, k, (size_t)n * kvd * sizeof(float), KERN_D2H);
}

static int attend(void *st, int32_t l, const kern_backend *be, kern_ctx *kc, float *out, const float *q,
                  const float *k, const float *v, int64_t nq, int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv,
                  int64_t hd, float scale) {
    return longllama_attention(st, l, be, kc, out, q, k, v, nq, nkv, q_pos0, hq, hkv, hd, scale);
}

static int32_t next_row(const void *st) { return ((const longllama_state *)st)->n_local; }

/* A batch entry must fit the window beside what stays local; longer inputs need decode's prefix handling. */
static mnemo_status check_step(const void *st, int32_t n, char *err, size_t errlen) {
    const longllama_state *ll = st;
    if (n <= ll->last_context_length) return MNEMO_OK;
    snprintf(err, errlen,
             "a LongLLaMA entry of %d tokens is longer than last_context_length %d: decode long inputs with "
             "mnemo_decode, which moves their prefix to memory",
             n, ll->last_context_length);
    return MNEMO_ERR_INVALID_ARG;
}

static mnemo_status make_room(void *st, const memory_host *h, int32_t n) {
    longllama_state *ll = st;
    return ll->n_local + n > ll->window ? longllama_flush_checked(ll, h) : MNEMO_OK;
}

static void advance(void *st, const int32_t *tokens, int32_t n) {
    (void)tokens;
    ((longllama_state *)st)->n_local += n;
}

static mnemo_status set_local_tail(void *st, int32_t n, char *err, size_t errlen) {
    longllama_state *ll = st;
    if (n == 0) n = ll->config_last_context_length;
    if (n < 1 || n > ll->window) {
        snprintf(err, errlen, "last_context_length %d outside 1..%d (max_position_embeddings)", n, ll->window);
        return MNEMO_ERR_INVALID_ARG;
    }
    ll->last_context_length = n;
    return MNEMO_OK;
}

static int32_t local_tail(const void *st) { return ((const longllama_state *)st)->last_context_length; }

static void stats(const void *st, mnemo_memory_stats *out) {
    const longllama_state *ll = st;
    mem_bytes b = longllama_mem_bytes(ll);
    out->local_tokens = ll->n_local;
    out->mem_tokens = longllama_mem_tokens(ll);
    out->mem_entries = out->mem_tokens;
    out->mem_key_bytes = b.keys;
    out->mem_value_bytes = b.values;
    out->mem_index_bytes = b.index;
    /* memory layers also keep their local keys before RoPE */
    out->local_kv_bytes += (uint64_t)ll->n_mem_layers * (uint64_t)ll->window * (uint64_t)ll->kv_dim * 4u;
}

const memory_ops longllama_memory_ops = {
    .name = "LongLLaMA",
    .snapshot_kind = 1, /* the header's old "longllama" flag: snapshots written before this table still load */
    .cache_rows = cache_rows,
    .create = create,
    .free = destroy,
    .reset = reset,
    .keep_prefix = keep_prefix,
    .layers = layers,
    .on_layer_kv = on_layer_kv,
    .attend = attend,
    .next_row = next_row,
    .check_step = check_step,
    .make_room = make_room,
    .advance = advance,
    .decode = longllama_decode,
    .set_local_tail = set_local_tail,
    .local_tail = local_tail,
    .stats = stats,
    .snapshot_settings = longllama_snapshot_settings,
    .save = longllama_save,
    .load_check = longllama_load_check,
    .load_commit = longllama_load_commit,
    .load_discard = longllama_load_discard,
};
