/*
 * context_snapshot.c — mnemo_context_save / mnemo_context_load: a context's whole state in one snapshot file
 * (container/include/snapshot.h: magic, version, model fingerprint, tagged sections, CRC-32, written to a unique
 * path.tmp.XXXXXX and renamed).
 *
 * Sections:
 *   CTXH  the header below (which memory, how many rows, the memory's settings)
 *   KVK_, KVV_  keys (after RoPE) and values of the cached rows, layer after layer: n_past rows for plain LLaMA, the
 *         local window's rows (the memory's next_row) with memory; fp32 as the cache holds them
 *   ...   the memory's own sections (memory_ops.save; LongLLaMA: longllama_snapshot.c)
 *   LGTS  the logits of the last decoded token, when the context has them (so generation can continue at once)
 *   ADPT  u64: the fingerprint of the LoRA adapter the cache was computed with (mnemo_context_set_adapter), when
 *         there was one: a snapshot loads only into a context with the same adapter (or none for none), since
 *         its keys and values depend on the weights
 * The fingerprint hashes the config and samples of the embedding and output weights, so a snapshot never loads
 * into another model. Load reads and checks everything into fresh buffers before it touches the context: a refused
 * file leaves the context as it was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "lora.h"
#include "snapshot.h"
#include "snapshot_values.h"
#include "uio_weights.h"

#define TAG_HEADER SNAP_TAG('C', 'T', 'X', 'H')
#define TAG_KEYS SNAP_TAG('K', 'V', 'K', '_')
#define TAG_VALUES SNAP_TAG('K', 'V', 'V', '_')
#define TAG_LOGITS SNAP_TAG('L', 'G', 'T', 'S')
#define TAG_ADAPTER SNAP_TAG('A', 'D', 'P', 'T')
#define FORMAT 1
#define SAMPLE_BYTES 4096

typedef struct {
    uint32_t format, memory; /* memory: memory_ops.snapshot_kind, 0 for none (LongLLaMA's 1 was a flag before) */
    int32_t n_layer, kv_dim, n_rows, n_past, last_token;
    int32_t mem_settings[MEMORY_SNAP_SETTINGS]; /* memory_ops.snapshot_settings (LongLLaMA: window, lcl, ...) */
} snap_header;

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* First and last SAMPLE_BYTES of a weight (host or device memory). */
static uint64_t hash_weight(uint64_t h, const mnemo_model *m, const weight_ref *w, size_t elems) {
    size_t bytes = kern_dtype_bytes(w->dt, (int64_t)elems), n = bytes < SAMPLE_BYTES ? bytes : SAMPLE_BYTES;
    unsigned char buf[SAMPLE_BYTES];
    const char *base = w->data;
    if (m->be->mem_copy(NULL, buf, base, n, KERN_D2H) == KERN_OK) h = fnv(h, buf, n);
    if (m->be->mem_copy(NULL, buf, base + bytes - n, n, KERN_D2H) == KERN_OK) h = fnv(h, buf, n);
    return h;
}

uint64_t model_fingerprint(const mnemo_model *m) {
    const model_config *c = &m->cfg;
    int32_t shape[] = {c->hidden_size, c->intermediate_size, c->num_hidden_layers, c->num_attention_heads,
                       c->num_key_value_heads, c->head_dim, c->max_position_embeddings, c->vocab_size,
                       c->is_longllama, c->n_mem_layers, c->mem_positionals};
    float f[] = {c->rms_norm_eps, c->rope_theta, c->rope_scaling_factor};
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, c->architecture, strlen(c->architecture));
    h = fnv(h, shape, sizeof shape);
    h = fnv(h, f, sizeof f);
    h = fnv(h, c->mem_layers, sizeof c->mem_layers);
    if (c->qk_norm) h = fnv(h, "qk_norm", 7); /* only then: earlier snapshots keep their fingerprints */
    size_t vd = (size_t)c->vocab_size * (size_t)c->hidden_size;
    h = hash_weight(h, m, &m->w.tok_embd, vd);
    h = hash_weight(h, m, &m->w.lm_head, vd);
    if (m->uio) { /* a UIO model: its settings and samples of its weights (one block: tokens first, last LoRA last) */
        const uio_weights *u = m->uio;
        int32_t us[] = {u->chunk_size, u->num_memory, u->lora_rank};
        double alpha = u->lora_alpha;
        h = fnv(h, us, sizeof us);
        h = fnv(h, &alpha, sizeof alpha);
        weight_ref block = {.data = u->block, .dt = KERN_F32};
        h = hash_weight(h, m, &block, (size_t)(u->block_bytes / sizeof(float)));
    }
    return h;
}

/* One section holding rows [0, n_rows) of every layer of a (n_layer, n_ctx, kv_dim) backend buffer. */
static int save_rows(snap_writer *w, uint32_t tag, const mnemo_context *ctx, const float *buf, int32_t n_rows) {
    size_t row_bytes = (size_t)ctx->kv.kv_dim * sizeof(float), layer_bytes = (size_t)n_rows * row_bytes;
    float *host = malloc(layer_bytes ? layer_bytes : 1);
    int rc = host && snap_section_begin(w, tag) == 0 ? 0 : -1;
    for (int32_t l = 0; rc == 0 && l < ctx->kv.n_layer; l++) {
        const float *src = buf + (size_t)l * (size_t)ctx->kv.n_ctx * (size_t)ctx->kv.kv_dim;
        if (ctx->model->be->mem_copy(ctx->kc, host, src, layer_bytes, KERN_D2H) != KERN_OK ||
            snap_write(w, host, layer_bytes) != 0)
            rc = -1;
    }
    if (rc == 0) rc = snap_section_end(w);
    free(host);
    return rc;
}

mnemo_status mnemo_context_save(mnemo_context *ctx, const char *path) {
    if (!ctx || ctx->failed) return MNEMO_ERR_MISUSE;
    if (!path || !*path) return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "snapshot path is empty");
    const memory_ops *mem = ctx->mem;
    snap_header hd = {.format = FORMAT, .memory = mem ? mem->snapshot_kind : 0, .n_layer = ctx->kv.n_layer,
                      .kv_dim = ctx->kv.kv_dim, .n_rows = mem ? mem->next_row(ctx->mem_state) : ctx->n_past,
                      .n_past = ctx->n_past, .last_token = ctx->last_token};
    if (mem) mem->snapshot_settings(ctx->mem_state, hd.mem_settings);
    char err[256];
    snap_writer *w = snap_writer_open(path, model_fingerprint(ctx->model), err, sizeof err);
    if (!w) return ctx_fail(ctx, MNEMO_ERR_IO, "%s", err);
    int rc = snap_section(w, TAG_HEADER, &hd, sizeof hd);
    if (rc == 0) rc = save_rows(w, TAG_KEYS, ctx, ctx->kv.k, hd.n_rows);
    if (rc == 0) rc = save_rows(w, TAG_VALUES, ctx, ctx->kv.v, hd.n_rows);
    if (rc == 0 && mem) rc = mem->save(ctx->mem_state, w, hd.n_rows);
    if (rc == 0 && ctx->lora) rc = snap_section(w, TAG_ADAPTER, &ctx->lora->fingerprint, sizeof ctx->lora->fingerprint);
    const float *last = mnemo_get_logits(ctx, -1);
    if (rc == 0 && last)
        rc = snap_section(w, TAG_LOGITS, last, (uint64_t)ctx->model->cfg.vocab_size * sizeof(float));
    if (rc != 0) {
        snprintf(err, sizeof err, "%s", snap_writer_error(w));
        snap_writer_close(w, 0, NULL, 0);
        return ctx_fail(ctx, MNEMO_ERR_IO, "snapshot %s: %s", path, err);
    }
    if (snap_writer_close(w, 1, err, sizeof err) != 0) return ctx_fail(ctx, MNEMO_ERR_IO, "snapshot %s: %s", path, err);
    return MNEMO_OK;
}

/* A section's bytes, which must be exactly want long. */
static const void *section(const snap_reader *r, uint32_t tag, uint64_t want, const char **problem) {
    const void *data;
    uint64_t len;
    if (snap_reader_find(r, tag, &data, &len) != 0) {
        *problem = "a section is missing";
        return NULL;
    }
    if (len != want) {
        *problem = "a section has the wrong size";
        return NULL;
    }
    return data;
}

static mnemo_status upload_rows(mnemo_context *ctx, float *buf, const float *rows, int32_t n_rows) {
    size_t layer = (size_t)n_rows * (size_t)ctx->kv.kv_dim;
    for (int32_t l = 0; l < ctx->kv.n_layer; l++)
        if (ctx->model->be->mem_copy(ctx->kc, buf + (size_t)l * (size_t)ctx->kv.n_ctx * (size_t)ctx->kv.kv_dim,
                                     rows + (size_t)l * layer, layer * sizeof(float), KERN_H2D) != KERN_OK)
            return MNEMO_ERR_BACKEND;
    return MNEMO_OK;
}

/* A snapshot refused for its model fingerprint may come from the same base model with another memory (UIO weights
 * change the fingerprint): then the memory kinds say more than two hashes. Reads the file's own fingerprint, opens
 * it under that (fully checked) and, when its context's memory differs from `kind`, rewrites err to say so. */
static void explain_other_memory(const char *path, uint32_t kind, char *err, size_t errlen) {
    unsigned char head[24];
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    if (got != sizeof head) return;
    uint64_t fp;
    memcpy(&fp, head + 16, sizeof fp); /* snapshot.h: magic, version, 0, fingerprint */
    char ignored[256];
    snap_reader *r = snap_reader_open(path, fp, ignored, sizeof ignored);
    if (!r) return;
    const char *problem = NULL;
    const void *hp = section(r, TAG_HEADER, sizeof(snap_header), &problem);
    snap_header hd;
    if (hp) memcpy(&hd, hp, sizeof hd);
    if (hp && hd.format == FORMAT && hd.memory != kind) {
        char was[512];
        snprintf(was, sizeof was, "%s", err);
        snprintf(err, errlen, "%s; it holds a %s context and this model's is %s", was, memory_kind_name(hd.memory),
                 memory_kind_name(kind));
    }
    snap_reader_close(r);
}

mnemo_status mnemo_context_load(mnemo_context *ctx, const char *path) {
    if (!ctx || ctx->failed) return MNEMO_ERR_MISUSE;
    if (!path || !*path) return ctx_fail(ctx, MNEMO_ERR_INVALID_ARG, "snapshot path is empty");
    char err[512];
    const memory_ops *mem = ctx->mem;
    const uint32_t kind = mem ? mem->snapshot_kind : 0;
    snap_reader *r = snap_reader_open(path, model_fingerprint(ctx->model), err, sizeof err);
    if (!r && strstr(err, "different model")) explain_other_memory(path, kind, err, sizeof err);
    if (!r) return ctx_fail(ctx, MNEMO_ERR_FORMAT, "%s", err);
    const char *problem = NULL;
    char why[256], mismatch[128];
    mnemo_status st = MNEMO_ERR_FORMAT;
    void *staged = NULL; /* the memory's part, checked and built aside (memory_ops.load_check) */
    snap_header hd;
    const void *hp = section(r, TAG_HEADER, sizeof hd, &problem);
    if (!hp) goto fail;
    memcpy(&hd, hp, sizeof hd);
    if (hd.format != FORMAT) { problem = "unknown context format"; goto fail; }
    if (hd.memory != kind) {
        snprintf(mismatch, sizeof mismatch, "it holds a %s context, this is a %s one", memory_kind_name(hd.memory),
                 memory_kind_name(kind));
        problem = mismatch;
        st = MNEMO_ERR_INVALID_ARG;
        goto fail;
    }
    const void *ap = NULL;
    uint64_t alen = 0, saved_adapter = 0, this_adapter = ctx->lora ? ctx->lora->fingerprint : 0;
    if (snap_reader_find(r, TAG_ADAPTER, &ap, &alen) == 0) {
        if (alen != sizeof saved_adapter) { problem = "its adapter section has the wrong size"; goto fail; }
        memcpy(&saved_adapter, ap, sizeof saved_adapter);
    }
    if (saved_adapter != this_adapter) {
        snprintf(mismatch, sizeof mismatch, "it was computed %s, this context runs %s",
                 saved_adapter ? "with a LoRA adapter" : "without an adapter",
                 this_adapter ? "with another adapter (or none)" : "without one: set the same adapter first");
        if (saved_adapter && this_adapter) snprintf(mismatch, sizeof mismatch, "it was computed with another LoRA "
                                                    "adapter than the one this context runs");
        problem = mismatch;
        st = MNEMO_ERR_INVALID_ARG;
        goto fail;
    }
    /* plain LLaMA: every past token has its cache row in the file; with memory the rest is there (its check) */
    if (hd.n_layer != ctx->kv.n_layer || hd.kv_dim != ctx->kv.kv_dim || hd.n_rows < 0 || hd.n_past < hd.n_rows ||
        (!mem && hd.n_past != hd.n_rows) || hd.last_token < -1 || hd.last_token >= ctx->model->cfg.vocab_size ||
        (hd.n_past == 0) != (hd.last_token == -1)) { /* a context's last token is -1 exactly while it is empty */
        problem = "its header does not describe a context of this model";
        goto fail;
    }
    if (hd.n_rows > ctx->kv.n_ctx || (!mem && hd.n_past > ctx->n_ctx)) {
        problem = "it holds more tokens than this context's n_ctx";
        st = MNEMO_ERR_CONTEXT_FULL;
        goto fail;
    }
    uint64_t rows_bytes = (uint64_t)hd.n_layer * (uint64_t)hd.n_rows * (uint64_t)hd.kv_dim * sizeof(float);
    const float *keys = section(r, TAG_KEYS, rows_bytes, &problem);
    const float *values = keys ? section(r, TAG_VALUES, rows_bytes, &problem) : NULL;
    if (!values) goto fail;
    size_t n_floats = (size_t)(rows_bytes / sizeof(float));
    if (!snap_floats_ok(keys, n_floats) || !snap_floats_ok(values, n_floats)) {
        problem = "a cached key or value is not finite or out of range";
        goto fail;
    }
    memory_snap ms = {.n_rows = hd.n_rows, .n_past = hd.n_past};
    memcpy(ms.settings, hd.mem_settings, sizeof ms.settings);
    if (mem && (st = mem->load_check(ctx->mem_state, r, &ms, &staged, why, sizeof why)) != MNEMO_OK) {
        problem = why;
        goto fail;
    }
    st = MNEMO_ERR_FORMAT;

    const float *logits = NULL;
    uint64_t logits_len = 0;
    if (snap_reader_find(r, TAG_LOGITS, (const void **)&logits, &logits_len) == 0 &&
        logits_len != (uint64_t)ctx->model->cfg.vocab_size * sizeof(float)) {
        problem = "its logits section has the wrong size";
        goto fail;
    }
    if (logits && !snap_floats_ok(logits, (size_t)ctx->model->cfg.vocab_size)) {
        problem = "a logit is not finite or out of range";
        goto fail;
    }
    if (logits && ctx->logits_cap < (size_t)ctx->model->cfg.vocab_size) { /* logits are allocated at first decode */
        float *p = realloc(ctx->logits, (size_t)logits_len);
        if (!p) { st = MNEMO_ERR_NOMEM; problem = "out of memory"; goto fail; }
        ctx->logits = p;
        ctx->logits_cap = (size_t)ctx->model->cfg.vocab_size;
    }

    /* everything checked: replace the state */
    st = upload_rows(ctx, ctx->kv.k, keys, hd.n_rows);
    if (st == MNEMO_OK) st = upload_rows(ctx, ctx->kv.v, values, hd.n_rows);
    if (st != MNEMO_OK) {
        mnemo_context_reset(ctx);
        problem = "the upload to the device failed (the context was reset)";
        goto fail;
    }
    if (mem) mem->load_commit(ctx->mem_state, staged, &ms); /* (frees what was staged) */
    ctx->n_past = hd.n_past;
    ctx->last_token = hd.last_token;
    ctx->logits_rows = 0;
    ctx->last_n = 0;
    if (logits && hd.n_past > 0) { /* the last token's logits, as mnemo_get_logits(ctx, -1) */
        memcpy(ctx->logits, logits, (size_t)logits_len);
        ctx->logits_rows = 1;
        ctx->last_n = 1;
        ctx->logits_first = 0;
    }
    snap_reader_close(r);
    return MNEMO_OK;

fail:
    if (staged) mem->load_discard(ctx->mem_state, staged);
    snap_reader_close(r);
    return ctx_fail(ctx, st == MNEMO_OK ? MNEMO_ERR_FORMAT : st, "snapshot %s refused: %s", path, problem);
}
