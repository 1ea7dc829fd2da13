/*
 * retrieval_ops.c — retrieval memory's row of the memory table (memory.h): a context's state built and checked
 * from its parameters, and the small ops the forward pass and the context API call. The layout and the choices
 * are in retrieval_memory.h; the work itself in retrieval_store.c (moving blocks to memory), retrieval_attend.c and
 * retrieval_snapshot.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retrieval_memory.h"

/* Sinks + window, when they make sense (create refuses the rest with a message: the cache must not be sized by
 * options it is about to refuse). */
static int32_t cache_rows(const model_config *cfg, const mnemo_context_params *p, int32_t n_ctx) {
    (void)n_ctx;
    int64_t rows = (int64_t)p->ret_sinks + p->ret_window;
    return p->ret_sinks >= 0 && p->ret_window > 0 && rows <= cfg->max_position_embeddings ? (int32_t)rows : 1;
}

static void destroy(void *st) {
    retrieval_state *s = st;
    if (!s) return;
    for (int32_t l = 0; l < s->n_layer; l++) {
        if (s->tokens) mem_store_free(s->tokens[l]);
        if (s->reps) mem_store_free(s->reps[l]);
    }
    free(s->tokens);
    free(s->reps);
    free(s->layer_flags);
    free(s->raw_k);
    free(s->raw_q);
    free(s->pos);
    free(s->mem_pos_cs);
    free(s->rel_cs);
    free(s->gk);
    free(s->gv);
    free(s->sel);
    free(s->rotk);
    free(s->qsum);
    free(s->ids);
    free(s->scores);
    free(s->zeros);
    free(s->rep_score);
    free(s->rot);
    free(s->rsum);
    free(s);
}

static mnemo_status invalid(char *err, size_t errlen, const char *what) {
    snprintf(err, errlen, "retrieval memory: %s", what);
    return MNEMO_ERR_INVALID_ARG;
}

/* The options against each other and the model; MNEMO_OK or INVALID_ARG with the message. */
static mnemo_status check_options(const memory_args *a, char *err, size_t errlen) {
    const model_config *cfg = a->cfg;
    const mnemo_context_params *p = a->params;
    char why[320];
    if (cfg->is_longllama || a->uio)
        return invalid(err, errlen, "it is for plain LLaMA models; this one has its own memory (LongLLaMA memory "
                                    "layers or UIO weights): use --memory model");
    if (!a->be->host_memory) {
        snprintf(why, sizeof why, "it runs on the CPU backend only for now (this model runs on %s): use --device cpu",
                 a->be->name);
        return invalid(err, errlen, why);
    }
    if (p->ret_block < 1) {
        snprintf(why, sizeof why, "block size %d: a block holds at least one token", p->ret_block);
        return invalid(err, errlen, why);
    }
    if (p->ret_topk < 1) {
        snprintf(why, sizeof why, "top-k %d: each step must retrieve at least one block", p->ret_topk);
        return invalid(err, errlen, why);
    }
    if (p->ret_reps < 1 || p->ret_reps > p->ret_block) {
        snprintf(why, sizeof why, "%d representatives per block: must be 1 .. the block size %d", p->ret_reps,
                 p->ret_block);
        return invalid(err, errlen, why);
    }
    if (p->ret_window < 2 * (int64_t)p->ret_block) {
        snprintf(why, sizeof why, "window %d is shorter than two blocks of %d tokens (a block moves to memory while "
                 "the window keeps a step's tokens)", p->ret_window, p->ret_block);
        return invalid(err, errlen, why);
    }
    if (p->ret_sinks < 0 || p->ret_sinks > p->ret_window) {
        snprintf(why, sizeof why, "%d sink tokens: must be 0 .. the window %d", p->ret_sinks, p->ret_window);
        return invalid(err, errlen, why);
    }
    if ((int64_t)p->ret_sinks + p->ret_window > cfg->max_position_embeddings) {
        snprintf(why, sizeof why, "sinks %d + window %d = %lld positions, past the %d this model was trained on",
                 p->ret_sinks, p->ret_window, (long long)p->ret_sinks + p->ret_window, cfg->max_position_embeddings);
        return invalid(err, errlen, why);
    }
    if ((int64_t)p->ret_topk * p->ret_block > (1 << 24)) {
        snprintf(why, sizeof why, "top-k %d blocks of %d tokens: more than 2^24 retrieved tokens per step", p->ret_topk,
                 p->ret_block);
        return invalid(err, errlen, why);
    }
    if ((unsigned)p->ret_dtype > MNEMO_MEM_F16) return invalid(err, errlen, "unknown dtype (f32, bf16 or f16)");
    if (cfg->head_dim % 2) return invalid(err, errlen, "the model's head_dim is odd: it has no RoPE pairs");
    return MNEMO_OK;
}

static mem_index_kind index_kind(mnemo_mem_index i) {
    switch (i) {
    case MNEMO_MEM_INDEX_BRUTE: return MEM_INDEX_NONE;
    case MNEMO_MEM_INDEX_IVF: return MEM_INDEX_IVF;
    case MNEMO_MEM_INDEX_HNSW: return MEM_INDEX_HNSW;
    case MNEMO_MEM_INDEX_IVF_GROW: return MEM_INDEX_IVF_GROW;
    default: return MEM_INDEX_FLAT;
    }
}

static mnemo_status create(void **state, const memory_args *a, char *err, size_t errlen) {
    *state = NULL;
    mnemo_status st = check_options(a, err, errlen);
    if (st != MNEMO_OK) return st;
    const model_config *cfg = a->cfg;
    const mnemo_context_params *p = a->params;
    retrieval_state *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->cfg = cfg;
    s->be = a->be;
    s->S = p->ret_sinks, s->W = p->ret_window, s->k = p->ret_topk, s->B = p->ret_block, s->r = p->ret_reps;
    s->dtype = p->ret_dtype;
    s->mem_max_bytes = p->mem_max_bytes;
    s->n_layer = cfg->num_hidden_layers;
    s->hq = cfg->num_attention_heads, s->hkv = cfg->num_key_value_heads, s->hd = cfg->head_dim;
    s->kv_dim = s->hkv * s->hd;
    int32_t n_batch = p->n_batch > 0 ? p->n_batch : 512; /* as the context clamps it: a step is one forward */
    if (n_batch > a->n_ctx) n_batch = a->n_ctx;
    s->step_max = n_batch < s->W - s->B + 1 ? n_batch : s->W - s->B + 1;
    s->mem_pos = s->S > 0 ? s->S - 1 : 0;
    const size_t L = (size_t)s->n_layer, rows = (size_t)(s->S + s->W), kvd = (size_t)s->kv_dim, hd = (size_t)s->hd;
    const size_t kB = (size_t)s->k * (size_t)s->B;
    s->tokens = calloc(L, sizeof *s->tokens);
    s->reps = calloc(L, sizeof *s->reps);
    s->layer_flags = malloc(L);
    s->raw_k = malloc(L * rows * kvd * sizeof(float));
    s->raw_q = malloc(L * rows * kvd * sizeof(float));
    s->pos = malloc(rows * sizeof(int32_t));
    s->mem_pos_cs = malloc(hd * sizeof(float));
    s->rel_cs = malloc(2 * (size_t)s->B * hd * sizeof(float));
    s->gk = malloc((size_t)s->hkv * kB * hd * sizeof(float));
    s->gv = malloc((size_t)s->hkv * kB * hd * sizeof(float));
    s->sel = malloc((size_t)s->hq * kB * sizeof(int64_t));
    s->rotk = malloc((size_t)s->B * kvd * sizeof(float));
    s->qsum = malloc(kvd * sizeof(float));
    s->ids = malloc((size_t)s->hkv * (size_t)s->k * sizeof(int64_t));
    s->scores = malloc((size_t)s->k * sizeof(float));
    s->zeros = calloc(kvd, sizeof(float));
    s->rep_score = malloc((size_t)s->B * sizeof(float));
    s->rot = malloc(3 * (size_t)s->B * hd * sizeof(float));
    s->rsum = malloc(kvd * sizeof(float));
    if (!s->tokens || !s->reps || !s->layer_flags || !s->raw_k || !s->raw_q || !s->pos || !s->mem_pos_cs ||
        !s->rel_cs || !s->gk || !s->gv || !s->sel || !s->rotk || !s->qsum || !s->ids || !s->scores || !s->zeros || !s->rep_score || !s->rot ||
        !s->rsum)
        goto oom;
    memset(s->layer_flags, MEMORY_LAYER_KV | MEMORY_LAYER_ATTEND, L);
    retrieval_rope_table(cfg, s->mem_pos, s->mem_pos_cs);
    for (int32_t i = 0; i < 2 * s->B; i++) retrieval_rope_table(cfg, i, s->rel_cs + (size_t)i * hd);
    mem_params tp = mem_default_params(), rp = mem_default_params();
    tp.index = MEM_INDEX_NONE; /* the tokens are read by block id, never searched */
    tp.dtype = s->dtype == MNEMO_MEM_BF16 ? MEM_DTYPE_BF16 : s->dtype == MNEMO_MEM_F16 ? MEM_DTYPE_F16 : MEM_DTYPE_F32;
    rp.dtype = MEM_DTYPE_F32;
    rp.index = index_kind(p->mem_index);
    if (p->mem_nprobe > 0) rp.ivf_nprobe = p->mem_nprobe;
    char why[256];
    for (size_t l = 0; l < L; l++) {
        s->tokens[l] = mem_store_new(s->hkv, s->hd, &tp, why, sizeof why);
        s->reps[l] = s->tokens[l] ? mem_store_new(s->hkv, s->hd, &rp, why, sizeof why) : NULL;
        if (!s->reps[l]) {
            destroy(s);
            snprintf(err, errlen, "retrieval memory: %s", why);
            return MNEMO_ERR_NOMEM;
        }
    }
    *state = s;
    return MNEMO_OK;
oom:
    destroy(s);
    snprintf(err, errlen, "out of memory for the retrieval memory's state (window %d, %d blocks of %d)",
             p->ret_window, p->ret_topk, p->ret_block);
    return MNEMO_ERR_NOMEM;
}

static void reset(void *st) {
    retrieval_state *s = st;
    for (int32_t l = 0; l < s->n_layer; l++) {
        mem_store_clear(s->tokens[l]);
        mem_store_clear(s->reps[l]);
    }
    s->n_rows = 0;
    s->n_blocks = 0;
}

/* The cache rows after the memory can be cut (they are in order); a cut into the memory or the sinks with memory
 * behind them forgets everything. */
static int64_t keep_prefix(void *st, int64_t keep) {
    retrieval_state *s = st;
    const int64_t mem = s->n_blocks * s->B;
    if (mem == 0 || keep >= mem + s->S) {
        int64_t rows = mem == 0 ? keep : keep - mem;
        if (rows < s->n_rows) s->n_rows = (int32_t)rows;
        return mem + s->n_rows;
    }
    reset(s);
    return 0;
}

static const uint8_t *layers(const void *st) { return ((const retrieval_state *)st)->layer_flags; }

/* Keys before RoPE, kept beside the cache: what a block takes to memory, and what the window's shift rotates. */
static int on_layer_kv(void *st, int32_t l, const kern_backend *be, kern_ctx *kc, const float *k, const float *v,
                       int32_t pos0, int32_t n) {
    (void)be, (void)kc, (void)v;
    retrieval_state *s = st;
    const size_t kvd = (size_t)s->kv_dim;
    float *dst = s->raw_k + ((size_t)l * (size_t)(s->S + s->W) + (size_t)pos0) * kvd;
    memcpy(dst, k, (size_t)n * kvd * sizeof(float));
    return KERN_OK;
}

static int32_t next_row(const void *st) { return ((const retrieval_state *)st)->n_rows; }

static mnemo_status check_step(const void *st, int32_t n, char *err, size_t errlen) {
    const retrieval_state *s = st;
    if (n <= s->step_max) return MNEMO_OK;
    snprintf(err, errlen, "a retrieval-memory entry of %d tokens is longer than one step (%d: the window %d less a "
             "block of %d, and n_batch): decode long inputs with mnemo_decode, which cuts them", n, s->step_max, s->W,
             s->B);
    return MNEMO_ERR_INVALID_ARG;
}

static mnemo_status make_room(void *st, const memory_host *h, int32_t n) {
    retrieval_state *s = st;
    int32_t e = retrieval_blocks_due(s, n);
    return e > 0 ? retrieval_evict(s, h->kc, h->kv, e, h->err, h->errlen) : MNEMO_OK;
}

static void advance(void *st, const int32_t *tokens, int32_t n) {
    (void)tokens;
    ((retrieval_state *)st)->n_rows += n;
}

/* A call of any length: steps of step_max tokens, each after the blocks it pushes out have moved to memory. */
static mnemo_status decode(void *st, const memory_host *h, const int32_t *tokens, int32_t n, bool *was_reset) {
    retrieval_state *s = st;
    const int32_t rows0 = s->n_rows;
    const int64_t blocks0 = s->n_blocks;
    mnemo_status r = MNEMO_OK;
    *was_reset = false;
    for (int32_t done = 0; r == MNEMO_OK && done < n;) {
        int32_t m = n - done < s->step_max ? n - done : s->step_max;
        r = make_room(s, h, m);
        if (r == MNEMO_OK) r = h->forward(h->self, tokens + done, done, m, s->n_rows);
        if (r == MNEMO_OK) s->n_rows += m, done += m;
        if (r == MNEMO_OK && done < n && !h->progress(h->self, done, n)) {
            snprintf(h->err, h->errlen, "cancelled by the progress callback after %d of %d tokens", done, n);
            r = MNEMO_ERR_CANCELLED;
        }
    }
    if (r == MNEMO_OK) {
        if (n > s->step_max) h->progress(h->self, n, n); /* the last report: nothing left to stop */
        return MNEMO_OK;
    }
    if (s->n_blocks == blocks0) {
        s->n_rows = rows0; /* nothing moved to memory: the rows past rows0 are simply forgotten */
        return r;
    }
    reset(s); /* memory holds part of the input: never leave a half-updated session */
    *was_reset = true;
    size_t len = strnlen(h->err, h->errlen);
    if (len + 1 < h->errlen) snprintf(h->err + len, h->errlen - len, " (the session was reset)");
    return r;
}

static void stats(const void *st, mnemo_memory_stats *out) {
    const retrieval_state *s = st;
    mem_bytes b = retrieval_mem_bytes(s);
    out->local_tokens = s->n_rows;
    out->mem_tokens = (uint64_t)s->n_blocks * (uint64_t)s->B;
    out->mem_entries = out->mem_tokens;
    out->mem_key_bytes = b.keys;
    out->mem_value_bytes = b.values;
    out->mem_index_bytes = b.index;
    /* the cache rows' keys and query sums before RoPE, kept beside the cache */
    out->local_kv_bytes += 2ull * (uint64_t)s->n_layer * (uint64_t)(s->S + s->W) * (uint64_t)s->kv_dim * 4u;
}

const memory_ops retrieval_memory_ops = {
    .name = "retrieval memory",
    .snapshot_kind = 3,
    .cache_rows = cache_rows,
    .create = create,
    .free = destroy,
    .reset = reset,
    .keep_prefix = keep_prefix,
    .layers = layers,
    .on_layer_kv = on_layer_kv,
    .attend = retrieval_attend,
    .next_row = next_row,
    .check_step = check_step,
    .make_room = make_room,
    .advance = advance,
    .decode = decode,
    .set_local_tail = NULL,
    .local_tail = NULL,
    .stats = stats,
    .snapshot_settings = retrieval_snapshot_settings,
    .save = retrieval_save,
    .load_check = retrieval_load_check,
    .load_commit = retrieval_load_commit,
    .load_discard = retrieval_load_discard,
};
