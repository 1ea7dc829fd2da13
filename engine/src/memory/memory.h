/*
 * memory.h — the one interface between the engine and a long-context memory mechanism: LongLLaMA's memory layers
 * (longllama_*.c) and UIO-LLM compression of segments into <mem> KV entries (uio_*.c). A context with memory holds
 * `const memory_ops *mem` and its `void *mem_state`; a plain LLaMA context has mem == NULL. The forward pass
 * (llama_forward.c) and the context API (engine/src/api) reach a mechanism only through this table, never by name,
 * so a new mechanism is one more table (its own files here) and one line in memory_for_model.
 *
 * Who owns what:
 *   - the context owns the local KV cache (keys after RoPE, values), n_past and the logits of the last call;
 *   - the memory owns everything beyond it: which cache row the next token takes, moving rows out of the cache into
 *     memory (a window, a segment), the memory part of attention, how a long input is digested, its bytes and its
 *     snapshot sections.
 * Forward-pass ops return KERN_* codes, like the rest of the forward. Context-level ops return an mnemo_status and
 * write their message to the error buffer they are given (the context's own, so it reaches mnemo_context_error).
 */
#ifndef MNEMO_MEMORY_H
#define MNEMO_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "kernels.h"
#include "llama_forward.h"
#include "model_config.h"

struct snap_writer;
struct snap_reader;
struct uio_weights;

/* What the forward pass must do at one layer: memory_ops.layers gives one byte of these per layer. */
enum {
    MEMORY_LAYER_KV = 1 << 0,      /* hand the layer's new keys (before RoPE) and values to on_layer_kv */
    MEMORY_LAYER_ATTEND = 1 << 1,  /* attention through attend (local cache + memory) instead of be->attention */
    MEMORY_LAYER_NO_ROPE = 1 << 2, /* no RoPE on the layer's queries and keys */
};

/* Settings a memory keeps in a snapshot's header (context_snapshot.c), memory_ops.snapshot_settings. */
#define MEMORY_SNAP_SETTINGS 5

/* What creating a memory needs. */
typedef struct {
    const model_config *cfg;
    const kern_backend *be;              /* where the context's forward runs */
    const mnemo_context_params *params;  /* the mem_* fields; mem_index already resolved (never AUTO) */
    int32_t n_ctx;                       /* the context's cache rows (cache_rows' answer) */
    const llama_weights *w;              /* the model's weights (UIO's encoder runs the model itself) */
    const struct uio_weights *uio;       /* the model's UIO weights, NULL without */
} memory_args;

/* The context's side, handed to ops that move cache rows or run the model. err: where a failing op writes its
 * message (errlen bytes). forward/progress/self: only for decode. */
typedef struct memory_host {
    kern_ctx *kc;           /* the context's kernel context */
    const kv_cache *kv;     /* the context's local cache: rows moving to memory are read from here */
    char *err;
    size_t errlen;
    void *self;
    /* Tokens [first, first + n) of the current decode call through the model at cache rows pos0 .. pos0+n-1, in
     * forward steps of at most n_batch, this memory attached; logits kept as the context wants them (every row
     * with logits_all, else the call's last token). MNEMO_OK, or a status with the message in err. */
    mnemo_status (*forward)(void *self, const int32_t *tokens, int32_t first, int32_t n, int32_t pos0);
    /* The call's progress callback (mnemo_context_set_progress): false asks to stop. */
    bool (*progress)(void *self, int64_t done, int64_t total);
} memory_host;

/* Snapshot bookkeeping the context and the memory share (context_snapshot.c). */
typedef struct {
    int32_t settings[MEMORY_SNAP_SETTINGS]; /* as snapshot_settings wrote them */
    int32_t n_rows;                         /* local cache rows in the file */
    int32_t n_past;                         /* tokens the saved context had seen */
} memory_snap;

typedef struct memory_ops {
    const char *name;       /* in messages: "LongLLaMA" */
    uint32_t snapshot_kind; /* in a snapshot header: which memory wrote it (0 is reserved for "none") */

    /* ---- lifetime */
    /* KV-cache rows a context of this model needs, given the caller's parameters and n_ctx (LongLLaMA: its window;
     * retrieval: sinks + window). */
    int32_t (*cache_rows)(const model_config *cfg, const mnemo_context_params *p, int32_t n_ctx);
    /* A new, empty memory in *state. MNEMO_OK, or INVALID_ARG (a bad mem_* parameter) / NOMEM with a message. */
    mnemo_status (*create)(void **state, const memory_args *a, char *err, size_t errlen);
    void (*free)(void *st);  /* NULL is a no-op */
    void (*reset)(void *st); /* forget every token: empty local window and memory, settings kept */
    /* Forget every token past the first keep (keep <= the tokens held); returns how many were kept, which may be
     * fewer (0: all forgotten, as reset). NULL: the memory cannot be cut, the context resets instead. */
    int64_t (*keep_prefix)(void *st, int64_t keep);

    /* ---- forward pass (llama_forward.c): at most one call each per layer and sequence */
    /* [n_layer] MEMORY_LAYER_* flags, the same for every state of one model; valid while st lives. */
    const uint8_t *(*layers)(const void *st);
    /* Layer l's new rows before RoPE: k, v [n][kv_dim] (backend memory) going to cache rows pos0 .. pos0+n-1.
     * LongLLaMA keeps the keys, which move to memory with the window. KERN_* code. NULL (as attend) when no layer
     * asks for it (UIO: its memory lives in the cache rows, every layer is plain). */
    int (*on_layer_kv)(void *st, int32_t l, const kern_backend *be, kern_ctx *kc, const float *k, const float *v,
                       int32_t pos0, int32_t n);
    /* Layer l's attention: as be->attention over the local cache (k, v [nkv][hkv*hd] after the new rows were
     * written) plus the memory, in one softmax. KERN_* code. */
    int (*attend)(void *st, int32_t l, const kern_backend *be, kern_ctx *kc, float *out, const float *q,
                  const float *k, const float *v, int64_t nq, int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv,
                  int64_t hd, float scale);

    /* ---- decoding (context_api.c): the context tracks n_past; the memory where its tokens live */
    /* The cache row the next token takes. */
    int32_t (*next_row)(const void *st);
    /* Whether one forward step of n tokens can join this context (mnemo_decode_batch); changes nothing.
     * MNEMO_OK, or a status with the message in err; CONTEXT_FULL means no room (generation ends there). */
    mnemo_status (*check_step)(const void *st, int32_t n, char *err, size_t errlen);
    /* Before a forward step of n tokens: move the local window (or a finished segment) into memory when they
     * do not fit next to it (UIO: compress the segment the previous step completed). MNEMO_OK, or CONTEXT_FULL
     * (mem_max_bytes; nothing moved) / NOMEM with the message. */
    mnemo_status (*make_room)(void *st, const memory_host *h, int32_t n);
    /* After that step: its n tokens (ids in tokens) are in the cache from next_row on. */
    void (*advance)(void *st, const int32_t *tokens, int32_t n);
    /* One mnemo_decode call of n tokens, however long: this memory's way of digesting an input (LongLLaMA: its
     * prefix through memory window by window, the tail local), running the model through h->forward. On failure
     * *was_reset tells whether the memory had to be reset (the context then forgets its tokens too); the message
     * says which. */
    mnemo_status (*decode)(void *st, const memory_host *h, const int32_t *tokens, int32_t n, bool *was_reset);

    /* ---- settings and statistics */
    /* The tail of a long input that stays local (mnemo_context_set_last_context_length; 0: the model's own).
     * NULL when this memory has no such setting. */
    mnemo_status (*set_local_tail)(void *st, int32_t n, char *err, size_t errlen);
    int32_t (*local_tail)(const void *st);
    /* Fills local_tokens, mem_* and adds what the memory keeps beside the cache to local_kv_bytes (which the
     * caller has set to the cache's own bytes). */
    void (*stats)(const void *st, mnemo_memory_stats *out);

    /* ---- snapshots (context_snapshot.c writes the header, the cache rows and the logits) */
    void (*snapshot_settings)(const void *st, int32_t out[MEMORY_SNAP_SETTINGS]);
    /* The memory's own sections, for a snapshot holding n_rows cache rows. 0, or -1 (the writer holds why). */
    int (*save)(const void *st, struct snap_writer *w, int32_t n_rows);
    /* Reads and checks the memory's part of a snapshot without changing st; *staged receives what load_commit
     * installs. MNEMO_OK, or FORMAT / NOMEM / CONTEXT_FULL with the problem in err. */
    mnemo_status (*load_check)(const void *st, const struct snap_reader *r, const memory_snap *s, void **staged,
                               char *err, size_t errlen);
    /* Installs what load_check staged (it cannot fail) and frees it; load_discard frees it unused. */
    void (*load_commit)(void *st, void *staged, const memory_snap *s);
    void (*load_discard)(const void *st, void *staged);
} memory_ops;

/* The memory a context gets: retrieval memory when its parameters ask for it (p->memory), else the model's own: UIO
 * when the model was loaded with UIO weights (uio non-NULL), LongLLaMA for a LongLLaMA config, NULL for plain LLaMA.
 * The only place that names the mechanisms. */
const memory_ops *memory_for_model(const model_config *cfg, const struct uio_weights *uio,
                                   const mnemo_context_params *p);
/* "plain LLaMA" for kind 0, else the name of the memory that writes that snapshot kind ("?" if none does). */
const char *memory_kind_name(uint32_t snapshot_kind);

#endif
