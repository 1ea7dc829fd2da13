/*
 * uio_ops.c — UIO's row of the memory table (memory.h): a context's state (the accumulator, the encoder's
 * workspace) and the cache layout [memory | raw] the decoder runs over (uio_memory.h). The forward pass needs no
 * hook beyond attend: every layer is a plain one over the cache, and attend (uio_knn.c) is that plain attention
 * until a memory budget (option (b)) has moved entries to its stores. Every layer asks for attend in every UIO
 * context, budget or not: the forward pass takes one model's layer flags from the first context of a batch, so
 * they must not depend on a context's options.
 * The work itself: uio_encoder.c, uio_transfer.c, uio_decode.c, uio_knn.c, uio_snapshot.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uio_memory.h"

/* The cache holds memory + raw: the caller's n_ctx (0: max_position_embeddings) is that bound, as the reference's
 * RoPE table of 4096 positions is. */
static int32_t cache_rows(const model_config *cfg, const mnemo_context_params *p, int32_t n_ctx) {
    (void)cfg;
    (void)p;
    return n_ctx;
}

static void destroy(void *st) {
    uio_state *s = st;
    if (!s) return;
    const kern_backend *be = s->be;
    uio_knn_free(s);
    forward_buffers_free(&s->fb);
    if (be) {
        be->mem_free(s->kscr);
        be->mem_free(s->vscr);
        be->mem_free(s->h);
        be->mem_free(s->tpos);
        be->mem_free(s->kpos);
        if (!be->host_memory) free(s->tpos_host), free(s->kpos_host);
    }
    free(s->acc);
    free(s->layer_flags);
    free(s);
}

static mnemo_status create(void **state, const memory_args *a, char *err, size_t errlen) {
    const model_config *cfg = a->cfg;
    const uio_weights *u = a->uio;
    const kern_backend *be = a->be;
    *state = NULL;
    if (!u || !a->w) {
        snprintf(err, errlen, "a UIO context needs the model's UIO weights");
        return MNEMO_ERR_MISUSE;
    }
    const int32_t W = a->params->uio_keep_raw;
    if (W < 0 || W > u->chunk_size) {
        snprintf(err, errlen, "uio_keep_raw %d outside 0..%d (chunk_size): the raw tokens kept after a compression "
                 "are the end of the segment compressed", W, u->chunk_size);
        return MNEMO_ERR_INVALID_ARG;
    }
    /* option (a) is not combined with (b) or (c): the budget's shift would have to move and re-rotate the kept raw
     * rows too, and the batched encoder skips the decoder passes whose raw rows option (a) keeps */
    if (W > 0 && a->params->uio_mem_budget > 0) {
        snprintf(err, errlen, "uio_keep_raw (%d) cannot be combined with a memory budget (uio_mem_budget %d): use one "
                 "of the two", W, a->params->uio_mem_budget);
        return MNEMO_ERR_INVALID_ARG;
    }
    if (W > 0 && a->params->uio_encode_batch > 1) {
        snprintf(err, errlen, "uio_keep_raw (%d) cannot be combined with batched compression (uio_encode_batch %d): "
                 "the kept raw rows come from the decoder passes it skips", W, a->params->uio_encode_batch);
        return MNEMO_ERR_INVALID_ARG;
    }
    /* (with a memory budget, uio_knn_init checks n_ctx >= budget + chunk_size instead) */
    if (a->params->uio_mem_budget <= 0 && a->n_ctx < u->chunk_size + u->num_memory + W) {
        snprintf(err, errlen,
                 "n_ctx %d is too small for this UIO model: a segment of chunk_size %d tokens, its %d <mem> "
                 "entries and %d kept raw tokens need %d positions",
                 a->n_ctx, u->chunk_size, u->num_memory, W, u->chunk_size + u->num_memory + W);
        return MNEMO_ERR_INVALID_ARG;
    }
    if (a->params->uio_encode_batch < 0 || a->params->uio_encode_batch > 4096) {
        snprintf(err, errlen, "uio_encode_batch must be in 0..4096 segments (got %d)", a->params->uio_encode_batch);
        return MNEMO_ERR_INVALID_ARG;
    }
    uio_state *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return MNEMO_ERR_NOMEM;
    }
    s->cfg = cfg;
    s->w = a->w;
    s->u = u;
    s->be = be;
    s->C = u->chunk_size;
    s->M = u->num_memory;
    s->c = u->chunk_size / u->num_memory;
    s->n_ctx = a->n_ctx;
    s->enc_batch = a->params->uio_encode_batch > 1 ? a->params->uio_encode_batch : 1;
    s->logits_all = a->params->logits_all;
    s->W = W;
    const size_t L = (size_t)cfg->num_hidden_layers, d = (size_t)cfg->hidden_size;
    const size_t kvd = (size_t)cfg->num_key_value_heads * (size_t)cfg->head_dim, M = (size_t)s->M;
    s->acc = malloc((size_t)s->C * sizeof *s->acc);
    s->layer_flags = malloc(L);
    if (s->layer_flags) memset(s->layer_flags, MEMORY_LAYER_ATTEND, L);
    const size_t nb = (size_t)s->enc_batch;
    bool ok = s->acc && s->layer_flags && forward_buffers_init(&s->fb, cfg, s->enc_batch * (s->C + s->M), be) == 0 &&
              forward_buffers_reserve_lora(&s->fb, u->lora_rank) == 0;
    if (ok) {
        s->kscr = be->mem_alloc(((size_t)s->C + 1) * kvd * sizeof(float));
        s->vscr = be->mem_alloc(((size_t)s->C + 1) * kvd * sizeof(float));
        s->h = be->mem_alloc(nb * L * M * d * sizeof(float));
        s->tpos = be->mem_alloc(M * sizeof(int32_t));
        s->tpos_host = be->host_memory ? s->tpos : malloc(M * sizeof(int32_t));
        ok = s->kscr && s->vscr && s->h && s->tpos && s->tpos_host;
        if (ok && W > 0) {
            s->kpos = be->mem_alloc((size_t)W * sizeof(int32_t));
            s->kpos_host = be->host_memory ? s->kpos : malloc((size_t)W * sizeof(int32_t));
            ok = s->kpos && s->kpos_host;
        }
    }
    if (!ok) {
        const int32_t rows = s->enc_batch * (u->chunk_size + u->num_memory);
        destroy(s);
        snprintf(err, errlen, "out of %s memory for the UIO encoder's workspace (%d rows)", be->name, rows);
        return MNEMO_ERR_NOMEM;
    }
    mnemo_status st = uio_knn_init(s, a, err, errlen);
    if (st != MNEMO_OK) {
        destroy(s);
        return st;
    }
    *state = s;
    return MNEMO_OK;
}

static void reset(void *st) { uio_clear(st); }

static const uint8_t *layers(const void *st) { return ((const uio_state *)st)->layer_flags; }

static int32_t next_row(const void *st) {
    const uio_state *s = st;
    return s->n_mem + s->n_kept + s->n_raw;
}

/* A batch entry must not cross a segment boundary (one piece, see uio_decode.c) and must fit the cache. */
static mnemo_status check_step(const void *st, int32_t n, char *err, size_t errlen) {
    const uio_state *s = st;
    int32_t room = s->n_raw == s->C ? s->C : s->C - s->n_raw;
    if (n > room) {
        snprintf(err, errlen,
                 "a UIO entry of %d tokens crosses a segment boundary (%d tokens until the next compression, "
                 "chunk_size %d): decode longer inputs with mnemo_decode, which cuts them there",
                 n, room, s->C);
        return MNEMO_ERR_INVALID_ARG;
    }
    return uio_fits(s, n, err, errlen);
}

/* A segment completed by the previous step is compressed before the next one runs. */
static mnemo_status make_room(void *st, const memory_host *h, int32_t n) {
    (void)n;
    uio_state *s = st;
    if (s->n_raw < s->C) return MNEMO_OK;
    mnemo_status r = uio_compress(s, h);
    if (r != MNEMO_OK) uio_clear(s);
    return r;
}

static void advance(void *st, const int32_t *tokens, int32_t n) {
    uio_state *s = st;
    memcpy(s->acc + s->n_raw, tokens, (size_t)n * sizeof(int32_t)); /* check_step: n_raw + n <= C */
    s->n_raw += n;
}

static void stats(const void *st, mnemo_memory_stats *out) {
    const uio_state *s = st;
    const uint64_t row = (uint64_t)s->cfg->num_hidden_layers * (uint64_t)s->cfg->num_key_value_heads *
                         (uint64_t)s->cfg->head_dim * sizeof(float);
    mem_bytes b = uio_knn_bytes(s); /* option (b): entries past the budget, in the stores */
    out->local_tokens = s->n_kept + s->n_raw;
    out->mem_tokens = (uint64_t)s->segments * (uint64_t)s->C;
    out->mem_entries = (uint64_t)s->n_mem + uio_knn_entries(s);
    out->mem_key_bytes = (uint64_t)s->n_mem * row + b.keys;
    out->mem_value_bytes = (uint64_t)s->n_mem * row + b.values;
    out->mem_index_bytes = b.index;
    /* the <mem> entries live in the cache's first rows: local_kv_bytes counts the rest of it; with a budget the
     * entries' pre-RoPE keys are kept beside them (host) */
    out->local_kv_bytes -= 2 * (uint64_t)s->n_mem * row;
    if (s->knn.budget) out->mem_key_bytes += (uint64_t)s->n_mem * row;
}

const memory_ops uio_memory_ops = {
    .name = "UIO",
    .snapshot_kind = 2,
    .cache_rows = cache_rows,
    .create = create,
    .free = destroy,
    .reset = reset,
    .layers = layers,
    .on_layer_kv = NULL, /* no layer asks */
    .attend = uio_knn_attend, /* every layer: the plain attention op while no entry is stored */
    .next_row = next_row,
    .check_step = check_step,
    .make_room = make_room,
    .advance = advance,
    .decode = uio_decode,
    .set_local_tail = NULL,
    .local_tail = NULL,
    .stats = stats,
    .snapshot_settings = uio_snapshot_settings,
    .save = uio_save,
    .load_check = uio_load_check,
    .load_commit = uio_load_commit,
    .load_discard = uio_load_discard,
};
