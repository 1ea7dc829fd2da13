/*
 * uio_memory.h — the per-context state of a UIO-LLM, the second implementation of the memory table
 * (memory.h; its row: uio_ops.c). Semantics: tests/fixtures/uio/README.md ("Semantics"), from
 * the UIO-LLMs paper and its reference code wenhaoli-xmu/UIO-LLMs.
 *
 * Decoder side (uio_ops.c): the context's own KV cache IS the concatenation [memory | raw]:
 *     rows [0, n_mem)              the <mem> entries of every compressed segment, in order (M per segment)
 *     rows [n_mem, n_mem + n_raw)  the raw tokens not compressed yet
 *   and a forward step of n new tokens runs the plain LLaMA forward at cache rows pos0 = n_mem + n_raw, so key j
 *   sits at RoPE position j and the new queries at N-n .. N-1, causal: exactly the reference's positions 0..N-1
 *   over [memories | raw | new]. The reference caches keys before RoPE and rotates at attention time because its
 *   raw tokens' positions could move; here they do not: a compression empties the raw cache (a call is cut where
 *   the accumulator reaches C), and the M new entries take rows n_mem .. n_mem+M-1, rotated once at the positions
 *   they keep for good. So each key is rotated once, by the same rope op at the same position — the same numbers,
 *   with no per-step re-rotation. The exceptions: option (a) (uio_keep_raw W > 0) keeps the segment's last W raw
 *   rows, which move to rows n_mem+M .. and are turned once by their position shift (uio_keep.c); option (b) (a
 *   memory budget, below) shifts the cache's entries down after moving the oldest to a store, re-rotated from
 *   pre-RoPE copies. The two are not combined (uio_ops.c refuses W > 0 with a budget or with uio_encode_batch > 1).
 *   The cache's n_ctx rows bound memory + raw (the reference's 4096; with a budget only the budget's entries + raw).
 * Accumulator (uio_decode.c): the ids of the raw tokens not compressed yet (the raw cache holds them, after the W
 *   kept rows of option (a)).
 *   When it reaches C the segment is compressed: right after the decoder pass of the token that completes it in
 *   mnemo_decode; before the next step in mnemo_decode_batch (make_room; memory_ops.advance has no backend).
 * Compression: the encoder (uio_encoder.c: the base model with LoRA on q, v over the segment + M <mem> rows, its
 *   own mask and positions) gives each layer's attention input at the <mem> rows; the transfer head
 *   (uio_transfer.c: k_proj, v_proj with their LoRA) turns them into the M memory keys and values of each layer,
 *   written into rows n_mem .. n_mem+M-1 over the segment's raw rows, which are dropped.
 */
#ifndef MNEMO_UIO_MEMORY_H
#define MNEMO_UIO_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"
#include "llama_forward.h"
#include "llama_weights.h"
#include "memory.h"
#include "memstore.h"
#include "model_config.h"
#include "uio_weights.h"

/* Option (b), beyond the reference (uio_knn.c; tests/fixtures/uio_knn/README.md): with a budget B > 0 the cache
 * keeps at most B <mem> entries; after a compression takes it past B the oldest entries move to a kNN memstore per
 * layer (their keys before RoPE, values as they are, fp32) and the rest shift down to rows 0..B-1, re-rotated from
 * their pre-RoPE copies at their new positions. Every layer then attends to [stored entries | cache] in one softmax
 * (the kern attention_mem op, as LongLLaMA's memory layers): the stored entries all, or the top-k per query and head
 * by inner product with the rotated query, and all "at position 0" — unrotated, as LongLLaMA's memory keys — while
 * the cache keeps positions 0..N-1 over [recent entries | raw | new]. So n_ctx bounds B + raw, not the length. */
typedef struct uio_knn {
    int32_t budget;          /* 0: off (every entry in the cache, the reference) */
    int32_t knn_k;           /* 0: every stored entry; else the top-k per query and head ... */
    int64_t dense_rows;      /* ... once a store holds more than this many entries */
    uint64_t max_bytes;      /* refuse to grow the stores past this (mem_max_bytes); 0: no limit */
    mem_store **store;       /* [n_layer] */
    float *kpre;             /* [n_layer, budget + M, kv_dim] host: the cache's <mem> keys before RoPE */
    int32_t *epos;           /* [budget] backend: positions 0..budget-1 (re-rotation after a shift) */
    int64_t *sel, *ids;      /* kNN ids: [rows][hq][k], one head's [rows][k] */
    float *scores;
    size_t sel_cap, ids_cap;
    float *stage;            /* host staging on device backends (keys, values, queries) */
    size_t stage_cap;
    mem_device **dev;        /* [n_layer] device copies of the stores (GPU backends), else NULL */
    int64_t *dev_sel;
    size_t dev_sel_cap;
    bool knn_on_device;      /* exact kNN on the device copy */
} uio_knn;

/* The UIO row of the memory table (uio_ops.c): what memory_for_model gives a model loaded with UIO weights. */
extern const memory_ops uio_memory_ops;

typedef struct uio_state {
    const model_config *cfg;
    const llama_weights *w; /* the base model: the encoder and the transfer head run its weights */
    const uio_weights *u;
    const kern_backend *be;
    int32_t C, M, c;        /* chunk_size, num_memory, tokens per <mem> slot C / M */
    int32_t n_ctx;          /* cache rows: n_mem + n_raw <= n_ctx */
    int32_t n_mem;          /* <mem> entries per layer, cache rows [0, n_mem): M * segments */
    int32_t W;              /* uio_keep_raw (option (a), uio_keep.c): raw tokens kept after a compression */
    int32_t n_kept;         /* raw rows [n_mem, n_mem + n_kept) kept from the last compression (W, or 0 before) */
    int32_t n_raw;          /* raw tokens, cache rows [n_mem + n_kept, + n_raw); the accumulator holds their ids */
    int64_t segments;       /* segments compressed so far */
    int32_t *acc;           /* [C] host: the accumulator's token ids; n_raw of them; C = a compression is due */
    uint8_t *layer_flags;   /* [n_layer] all MEMORY_LAYER_ATTEND: uio_knn_attend, the plain attention over the cache
                             * unless option (b) stored entries */
    /* the encoder's workspace, backend memory */
    forward_buffers fb;     /* C + M rows (its pos holds the encoder's positions, then the token ids) */
    float *kscr, *vscr;     /* [C + 1, kv_dim]: what one <mem> slot attends to (uio_encoder.c) */
    float *h;               /* [n_layer, M, hidden]: the last segment's <mem> attention inputs */
    int32_t *tpos;          /* [M] backend: the new memory rows' positions (the transfer head's RoPE) */
    int32_t *tpos_host;     /* [M] host staging (== tpos on host backends) */
    /* option (c): segments per encoder forward (1: one at a time, the reference's order); fb, h hold that many */
    int32_t enc_batch;
    bool logits_all;        /* the context keeps every row's logits: no decoder pass may be skipped */
    uio_knn knn;            /* option (b): the budget and the stores (knn.budget 0: off) */
    int32_t *kpos, *kpos_host; /* [W] the kept rows' position shift (uio_keep.c); NULL when W == 0 */
} uio_state;

/* The encoder over nb segments of C tokens each (ids, host: nb * C; nb <= enc_batch), all in one forward: s->h
 * receives, per segment, every layer's normed attention input at its M <mem> rows ([nb][n_layer][M][hidden]).
 * KERN_* code. */
int uio_encode(uio_state *s, kern_ctx *kc, const int32_t *ids, int32_t nb);
/* The transfer head: from h ([n_layer][M][hidden], one segment of s->h), each layer's M memory keys (rotated at
 * positions row0 .. row0+M-1) and values into rows row0 .. row0+M-1 of the context's cache kv; with a budget the
 * keys before RoPE also into knn.kpre at the same rows. KERN_* code. */
int uio_transfer(uio_state *s, kern_ctx *kc, const kv_cache *kv, const float *h, int32_t row0);

/* Option (a): before the transfer head writes the new memory, the segment's last W raw rows move to rows
 * n_mem + M .., their keys re-rotated at those positions. KERN_* code. */
int uio_keep_rows(uio_state *s, kern_ctx *kc, const kv_cache *kv);

/* Compresses the accumulator's full segment (n_raw == C) into M memory entries; empties the raw cache and the
 * accumulator. MNEMO_OK, or a status with the message in h->err (the state is then unusable: reset it). */
mnemo_status uio_compress(uio_state *s, const memory_host *h);
/* After the encoder: segment b of s->h becomes M memory entries (transfer head at row n_mem), then the budget is
 * enforced. Same contract as uio_compress. */
mnemo_status uio_install(uio_state *s, const memory_host *h, int32_t b);

/* ---- option (b), uio_knn.c. init: stores and buffers for a->params->uio_mem_budget (nothing when 0); MNEMO_OK or
 * INVALID_ARG / NOMEM with the message. */
mnemo_status uio_knn_init(uio_state *s, const memory_args *a, char *err, size_t errlen);
void uio_knn_free(uio_state *s);
void uio_knn_clear(uio_state *s);
/* Entries past the budget (the oldest n_mem - budget) to the stores, the rest shifted to rows 0.. and re-rotated.
 * Called right after a compression (raw cache empty). MNEMO_OK, or CONTEXT_FULL (mem_max_bytes) / NOMEM / BACKEND
 * with the message in h->err. */
mnemo_status uio_knn_evict(uio_state *s, const memory_host *h);
/* memory_ops.attend: layer l over its store and the cache in one softmax. KERN_* code. */
int uio_knn_attend(void *st, int32_t l, const kern_backend *be, kern_ctx *kc, float *out, const float *q,
                   const float *k, const float *v, int64_t nq, int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv,
                   int64_t hd, float scale);
uint64_t uio_knn_entries(const uio_state *s); /* entries in one layer's store */
mem_bytes uio_knn_bytes(const uio_state *s);  /* over all layers */
/* Snapshot sections of the stores and the pre-RoPE keys (uio_snapshot.c calls these). */
int uio_knn_save(const uio_state *s, struct snap_writer *w);
/* Checks a snapshot's option (b) part against s; on success *staged holds what uio_knn_load_commit installs. */
mnemo_status uio_knn_load_check(const uio_state *s, const struct snap_reader *r, int32_t n_mem_local,
                                int64_t n_stored, void **staged, char *err, size_t errlen);
void uio_knn_load_commit(uio_state *s, void *staged);
void uio_knn_load_discard(const uio_state *s, void *staged);
/* memory_ops.decode: a call of any length, cut where the accumulator reaches C (uio_decode.c). */
mnemo_status uio_decode(void *st, const memory_host *h, const int32_t *tokens, int32_t n, bool *was_reset);
/* Whether n more tokens fit the cache, compressions on the way included; the message in err when not. */
mnemo_status uio_fits(const uio_state *s, int64_t n, char *err, size_t errlen);
void uio_clear(uio_state *s);

/* Snapshot sections (uio_snapshot.c): memory_ops.snapshot_settings, save, load_check, load_commit, load_discard. */
void uio_snapshot_settings(const void *st, int32_t out[MEMORY_SNAP_SETTINGS]);
int uio_save(const void *st, struct snap_writer *w, int32_t n_rows);
mnemo_status uio_load_check(const void *st, const struct snap_reader *r, const memory_snap *sn, void **staged,
                            char *err, size_t errlen);
void uio_load_commit(void *st, void *staged, const memory_snap *sn);
void uio_load_discard(const void *st, void *staged);

#endif
