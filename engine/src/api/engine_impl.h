/*
 * engine_impl.h — the layout of the public handles, shared by the api/ files and nothing else.
 */
#ifndef MNEMO_ENGINE_IMPL_H
#define MNEMO_ENGINE_IMPL_H

#include <stdbool.h>

#include "engine.h"
#include "kernels.h"
#include "llama_forward.h"
#include "llama_weights.h"
#include "memory.h"
#include "model_config.h"
#include "tensor_index.h"
#include "tokenizer.h"

#define MNEMO_ERRLEN 1024

struct mnemo_model {
    bool failed;              /* load failed: only _error and _free are allowed */
    bool vocab_only;          /* tokenizer (and what config there was) only: no weights, no backend, no contexts */
    char err[MNEMO_ERRLEN];
    char *dir;                /* the checkpoint directory it was loaded from (tokenizer_config.json: chat template) */
    model_config cfg;
    weight_store *ws;
    tokenizer *tok;
    llama_weights w;          /* pointers into the mapped files (CPU) or into dev_weights (CUDA) */
    const kern_backend *be;   /* where the forward pass runs; every context of this model uses it */
    void *dev_weights;        /* device backends: the one allocation holding all weights; NULL on the CPU */
    struct uio_weights *uio;  /* mnemo_model_params.uio_dir's weights (memory/uio_weights.h); NULL without */
    int32_t n_threads;
    char desc[256];
};

struct mnemo_context {
    bool failed;
    char err[MNEMO_ERRLEN];
    mnemo_model *model;
    kern_ctx *kc;
    kv_cache kv;
    forward_buffers fb;
    int32_t n_ctx, n_batch, n_past;
    bool logits_all;
    mnemo_token last_token;   /* last token in the cache (-1 when empty): context for detokenization */
    float *logits;            /* (logits_cap / n_vocab, n_vocab) */
    size_t logits_cap;        /* floats */
    int32_t logits_first;     /* position index (within the last decode call) of logits row 0 */
    int32_t logits_rows;      /* rows held */
    int32_t last_n;           /* tokens in the last decode call */
    const memory_ops *mem;    /* the model's long-context memory (memory.h); NULL for plain LLaMA models */
    void *mem_state;          /* this context's memory, reached only through mem */
    const struct lora_adapter *lora; /* mnemo_context_set_adapter: NULL = the base model alone */
    mnemo_progress_fn progress; /* mnemo_context_set_progress; NULL = off */
    void *progress_user;
};

/* Reports a multi-step call's progress; false when the callback asks to stop (the caller then cancels). */
static inline bool ctx_progress(mnemo_context *ctx, int64_t done, int64_t total) {
    return !ctx->progress || ctx->progress(done, total, ctx->progress_user);
}

/* Fills m->cfg, m->tok and m->ws from a GGUF file (model_gguf.c); MNEMO_OK or a status with m->err set. */
mnemo_status model_open_gguf(mnemo_model *m, const char *path);

/* A hash of the model's config and samples of its embedding and output weights: what snapshots and training
 * checkpoints are tied to (context_snapshot.c). */
uint64_t model_fingerprint(const mnemo_model *m);
/* Gives the calling thread the model's thread count for every OpenMP region (FAISS and memstore included). */
void threads_use(const mnemo_model *m);
/* Set a context's message (printf-style) and return status. */
mnemo_status ctx_fail(mnemo_context *ctx, mnemo_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
