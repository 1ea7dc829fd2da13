/*
 * uio_memory.h — the per-context state of a UIO-LLM (issue 19), the second implementation of the memory table
 * (memory.h; its row: uio_ops.c). Semantics: tests/fixtures/uio/README.md ("Semantics"), from
 * shared/specs/uio-longlora-beacon.md and the reference wenhaoli-xmu/UIO-LLMs.
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
 *   with no per-step re-rotation. The one exception is option (a) (uio_keep_raw W > 0): a compression keeps the
 *   segment's last W raw rows, which move to rows n_mem+M .. and are turned once by their position shift
 *   (uio_keep.c). The cache's n_ctx rows bound memory + raw (the reference's 4096).
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
#include "model_config.h"
#include "uio_weights.h"

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
    uint8_t *layer_flags;   /* [n_layer] all 0: the decoder pass is a plain forward over the cache */
    /* the encoder's workspace, backend memory */
    forward_buffers fb;     /* C + M rows (its pos holds the encoder's positions, then the token ids) */
    float *kscr, *vscr;     /* [C + 1, kv_dim]: what one <mem> slot attends to (uio_encoder.c) */
    float *h;               /* [n_layer, M, hidden]: the last segment's <mem> attention inputs */
    int32_t *tpos;          /* [M] backend: the new memory rows' positions (the transfer head's RoPE) */
    int32_t *tpos_host;     /* [M] host staging (== tpos on host backends) */
    int32_t *kpos, *kpos_host; /* [W] the kept rows' position shift (uio_keep.c); NULL when W == 0 */
} uio_state;

/* The encoder over the accumulator's C tokens: s->h receives every layer's normed attention input at the M <mem>
 * rows. KERN_* code. */
int uio_encode(uio_state *s, kern_ctx *kc);
/* The transfer head: from s->h, each layer's M memory keys (rotated at positions row0 .. row0+M-1) and values into
 * rows row0 .. row0+M-1 of the context's cache kv. KERN_* code. */
int uio_transfer(uio_state *s, kern_ctx *kc, const kv_cache *kv, int32_t row0);

/* Option (a): before the transfer head writes the new memory, the segment's last W raw rows move to rows
 * n_mem + M .., their keys re-rotated at those positions. KERN_* code. */
int uio_keep_rows(uio_state *s, kern_ctx *kc, const kv_cache *kv);

/* Compresses the accumulator's full segment (n_raw == C) into M memory entries; empties the raw cache and the
 * accumulator. MNEMO_OK, or a status with the message in h->err (the state is then unusable: reset it). */
mnemo_status uio_compress(uio_state *s, const memory_host *h);
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
