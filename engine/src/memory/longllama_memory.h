/*
 * longllama_memory.h — the per-context state of a LongLLaMA (Focused Transformer) model, the first implementation
 * of the memory table (memory.h; its row: longllama_ops.c): the local cache window and the memory of each memory
 * layer, following the reference modeling_longllama.py (CStanKonrad/long_llama):
 *   - The local cache holds at most W = max_position_embeddings tokens; RoPE positions are relative to its
 *     first token (0 .. n_local-1), so the ordinary kv_cache with pos0 = n_local serves as the local cache.
 *   - A call whose tokens do not fit next to the local cache first flushes it: memory layers append its keys
 *     (before RoPE: memory keys sit "at position 0") and values, rounded to mem_dtype, to their memory;
 *     ordinary layers drop it.
 *   - Memory layers attend to the local keys (causal) and to their memory in one softmax: every memory row
 *     (dense, as released) or, per query and head, the top-k rows by inner product (FoT kNN, memstore search).
 */
#ifndef MNEMO_LONGLLAMA_MEMORY_H
#define MNEMO_LONGLLAMA_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "memory.h"
#include "memstore.h"
#include "model_config.h"

/* The LongLLaMA row of the memory table (longllama_ops.c): what memory_for_model gives LongLLaMA models. */
extern const memory_ops longllama_memory_ops;

typedef struct longllama_state {
    int32_t n_layer, window;     /* window W: local cache capacity */
    int32_t n_local;             /* tokens in the local cache */
    int32_t last_context_length; /* tail of a long input that stays local (mnemo_context_set_last_context_length) */
    int32_t config_last_context_length; /* config.json's, at most W: what setting 0 restores */
    int32_t knn_k;               /* 0: dense memory attention; else top-k rows per query and head ... */
    int64_t dense_rows;          /* ... once the memory holds more than this many rows (dense until then) */
    int32_t kv_dim;
    int32_t n_mem_layers;        /* layers with a store */
    uint64_t mem_max_bytes;      /* refuse to grow the memory past this (keys + values + index); 0 = no limit */
    kern_dtype mem_dt;           /* the stores' dtype (config mem_dtype) */
    uint8_t *layer_flags;        /* [n_layer] MEMORY_LAYER_* for the forward pass */
    mem_store **mem;             /* [n_layer]: a store for memory layers, NULL for ordinary ones */
    float **raw_k;               /* [n_layer]: memory layers' local keys before RoPE, [W][kv_dim] */
    int64_t *sel;                /* kNN ids, [rows][hq][k] */
    int64_t *ids;                /* one head's search result, [rows][k] */
    float *scores;
    size_t sel_cap, ids_cap;     /* elements */
    /* GPU backends: memory attention reads a device copy of each store (memstore's mem_device); NULL on the CPU */
    const kern_backend *dev_be;
    mem_device **dev;            /* [n_layer]: the device copy of each store, NULL for ordinary layers */
    int64_t *dev_sel;            /* kNN ids on the device */
    bool knn_on_device;          /* exact kNN searched on the device copy (mem_device_search), not by the host stores */
    size_t dev_sel_cap;
    int64_t *marks;              /* the memory's rows after each flush since it was last emptied: where it can be cut */
    int32_t n_marks, marks_cap;
    float *stage;                /* host staging: values at flush, queries for a kNN search */
    size_t stage_cap;            /* floats */
    char err[256];
} longllama_state;

/* 1 when layer l of this config is a memory layer. */
bool longllama_is_mem_layer(const model_config *cfg, int32_t l);

/* 0, or -1 with a message in err (bad parameters, out of memory). */
int longllama_init(longllama_state *s, const model_config *cfg, const mem_params *mp, int32_t knn_k, char *err,
                   size_t errlen);
void longllama_free(longllama_state *s);
/* Empties the local cache and every memory. */
void longllama_clear(longllama_state *s);

/* Forgets every token past the first keep (prefix reuse): the local window is cut when keep reaches past the
 * memory; else the memory is cut back to the last flush at or before keep and the local window emptied (a local
 * window's keys of ordinary layers are gone once flushed). Returns the tokens kept (<= keep; 0: all forgotten). */
int64_t longllama_keep_prefix(longllama_state *s, int64_t keep);

/* Moves the local cache to the memory layers' stores and empties it, refusing first (MNEMO_ERR_CONTEXT_FULL,
 * nothing moved) when that would take the memory past mem_max_bytes. Messages go to h->err. */
mnemo_status longllama_flush_checked(longllama_state *s, const memory_host *h);
/* The same without the limit. v_cache: the context's value cache (backend
 * memory: on a GPU backend it is read back through kc), layer l at v_cache + l * cache_ctx * kv_dim. 0, or -1 with
 * s->err set (memory store or copy failure). */
int longllama_flush(longllama_state *s, kern_ctx *kc, const float *v_cache, int32_t cache_ctx);

/* Memory-layer attention for one sequence of a forward step: local keys k, v as for kern attention (backend
 * memory), plus layer l's memory, dense or kNN. On a GPU backend the memory is read from its device copy, and kNN
 * searches there too (exact indexes) or on the host store (approximate ones: queries read back, ids uploaded).
 * Returns a KERN_* code. */
int longllama_attention(longllama_state *s, int32_t l, const kern_backend *be, kern_ctx *kc, float *out,
                        const float *q, const float *k, const float *v, int64_t nq, int64_t nkv, int64_t q_pos0,
                        int64_t hq, int64_t hkv, int64_t hd, float scale);

/* ---- GPU backends (longllama_device.c): a device copy of every store (memstore's mem_device) and the buffers that
 * move queries and ids. init: no-op for host backends; 0 or -1 (out of memory). */
int longllama_device_init(longllama_state *s, const kern_backend *be, int32_t hkv, int32_t head_dim);
void longllama_device_free(longllama_state *s);
/* The stores were cleared or replaced: the next attention uploads them whole. */
void longllama_device_invalidate(longllama_state *s);
/* A device buffer of n ids, holding s->sel's first n when upload (NULL: out of memory or copy failure). */
int64_t *longllama_device_sel(longllama_state *s, kern_ctx *kc, size_t n, bool upload);
/* A host buffer of at least `floats` floats (NULL: out of memory). */
float *longllama_stage(longllama_state *s, size_t floats);

/* mnemo_decode's long-input handling (longllama_decode.c): memory_ops.decode. */
mnemo_status longllama_decode(void *st, const memory_host *h, const int32_t *tokens, int32_t n, bool *was_reset);
/* Snapshot sections (longllama_snapshot.c): memory_ops.snapshot_settings, save, load_check, load_commit,
 * load_discard. */
void longllama_snapshot_settings(const void *st, int32_t out[MEMORY_SNAP_SETTINGS]);
int longllama_save(const void *st, struct snap_writer *w, int32_t n_rows);
mnemo_status longllama_load_check(const void *st, const struct snap_reader *r, const memory_snap *sn, void **staged,
                                  char *err, size_t errlen);
void longllama_load_commit(void *st, void *staged, const memory_snap *sn);
void longllama_load_discard(const void *st, void *staged);

/* Memory totals over all memory layers. */
uint64_t longllama_mem_tokens(const longllama_state *s); /* rows in one layer's memory */
mem_bytes longllama_mem_bytes(const longllama_state *s);
/* The same after n more tokens move to memory (capacity growth included). */
mem_bytes longllama_mem_bytes_after(const longllama_state *s, size_t n);

#endif
