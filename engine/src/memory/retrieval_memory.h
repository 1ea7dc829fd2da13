/*
 * retrieval_memory.h — training-free retrieval memory for any RoPE LLaMA model (the idea of InfLLM, Xiao et al.
 * 2024, arXiv 2402.04617), the third implementation of the memory table (memory.h; its row: retrieval_ops.c).
 * The float64 statement of the same computation is tests/reference/retrieval_ref.py.
 *
 * Cache layout and positions. The context's KV cache holds S + W rows:
 *     rows [0, S)          the first S tokens ever seen (attention sinks), at RoPE positions 0 .. S-1, for good
 *     rows [S, n_rows)     the local window: the latest tokens not moved to memory, at positions S .. n_rows-1
 *   so a query's position is its cache row, and no query-key distance in the cache exceeds S + W - 1, which
 *   create() keeps within max_position_embeddings. Before a step of n tokens, while n_rows + n > S + W the oldest
 *   B local tokens move to memory as one block (retrieval_store.c) and the window shifts down: the cache rows that
 *   stay are rotated again, from their keys before RoPE, at their new positions. A step is at most W - B + 1
 *   tokens, so a whole block is always there to move.
 * Memory. Per layer and KV head: the tokens that left the window, in blocks of B, keys already rotated at the
 *   retrieval position P (below: every retrieved key is read there, so a step reads them as they lie) and values
 *   (a mem_store in f32, bf16 or f16), and one row per block: the sum of its r representative keys (before RoPE,
 *   f32). The representatives are InfLLM's: the r tokens of the block whose keys get the largest attention logits
 *   (summed over the KV head's query heads) from the B queries that follow them, at their true relative
 *   distances, as far as those queries are still local.
 * Retrieval position. Every retrieved key is rotated at one position, P = S - 1 (0 when S = 0): right before the
 *   local window, as InfLLM places its memory. A memory token is older than every local token, so it gets a
 *   distance no shorter than theirs, yet at most S + W - 1 like the rest: nothing the model never saw in training.
 * Retrieval. Each forward step (a chunk of queries in a prompt, one query in generation) retrieves, per layer and
 *   KV head, the top-k blocks by the sum of the logits its queries (every query of the step, every query head of
 *   the KV head) would give the block's representatives at position P: q_sum . R(P) rsum_b. The search runs over
 *   the block rows of a mem_store (mem_index: brute force or FAISS; IVF-grow is exact below 8192 blocks, i.e. 1M
 *   tokens at B = 128), with one row per block there are few enough that an exact search costs little.
 * Attention. The step's queries attend, in one softmax (the kern attention_mem op), to the cache rows
 *   (sinks + local window, causal) and to the k*B retrieved tokens, rotated at P. While the memory is empty this is
 *   the plain attention op over the cache: a prompt that fits S + W gives the plain model's logits.
 * Host backends only: the state (keys before RoPE, stores, the window's shift) lives in host memory.
 */
#ifndef MNEMO_RETRIEVAL_MEMORY_H
#define MNEMO_RETRIEVAL_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "memory.h"
#include "memstore.h"
#include "model_config.h"

/* The retrieval row of the memory table (retrieval_ops.c): what a context asking for MNEMO_MEMORY_RETRIEVAL gets. */
extern const memory_ops retrieval_memory_ops;

typedef struct retrieval_state {
    const model_config *cfg;
    const kern_backend *be;
    int32_t S, W, k, B, r;   /* sinks, local window, blocks retrieved, block size, representatives per block */
    int32_t step_max;        /* longest forward step: min(n_batch, W - B + 1) */
    mnemo_mem_dtype dtype;   /* the token stores' dtype */
    int32_t n_layer, hq, hkv, hd, kv_dim;
    int32_t n_rows;          /* cache rows in use: sinks + local window */
    int64_t n_blocks;        /* blocks in memory (every layer holds the same) */
    uint64_t mem_max_bytes;  /* refuse to grow the memory past this; 0: no limit */
    int32_t mem_pos;         /* P: the position every retrieved key is rotated at */
    uint8_t *layer_flags;    /* [n_layer] MEMORY_LAYER_KV | MEMORY_LAYER_ATTEND */
    mem_store **tokens;      /* [n_layer] keys before RoPE and values of the tokens in memory, block after block */
    mem_store **reps;        /* [n_layer] one row per block: the sum of its representatives' keys (values unused) */
    float *raw_k;            /* [n_layer][S + W][kv_dim] the cache rows' keys before RoPE */
    float *raw_q;            /* [n_layer][S + W][kv_dim] per row and KV head: its query heads' sum, before RoPE */
    int32_t *pos;            /* [S + W] scratch positions for the rope op */
    float *mem_pos_cs;       /* [hd] cos | sin of position P (the rope op's arithmetic) */
    float *rel_cs;           /* [2B][hd] cos | sin of positions 0 .. 2B-1 (representative logits) */
    /* attention scratch */
    float *gk, *gv;          /* [hkv][k * B][hd] the retrieved tokens of a many-query step, widened to f32 */
    int64_t *sel;            /* [hq][k * B] a one-query step's retrieved token rows (attention_mem reads the stores) */
    float *rotk;             /* [B][kv_dim] a block's keys rotated at P, on their way to memory */
    float *qsum;             /* [hkv][hd] */
    int64_t *ids;            /* [hkv][k] */
    float *scores;           /* [k] */
    float *zeros;            /* [kv_dim] the reps stores' values */
    float *rep_score;        /* [B] */
    float *rot;              /* [3B][hd] one KV head of a block: keys rotated at 0 .. B-1, queries at 0 .. 2B-1 */
    float *rsum;             /* [kv_dim] one block's representative sum per KV head */
} retrieval_state;

/* cos | sin of position p for every frequency of head_dim hd (hd floats), as the CPU rope op computes them. */
void retrieval_rope_table(const model_config *cfg, int32_t p, float *cs);
/* x[hd] rotated by the table's angle (sign +1) or back (-1). */
void retrieval_rotate(float *x, const float *cs, int32_t hd, float sign);

/* Moves the oldest e blocks of the local window to memory (tokens, representatives) and shifts the window down,
 * its keys rotated again at their new rows (retrieval_store.c). kv: the context's cache. MNEMO_OK, or
 * CONTEXT_FULL (mem_max_bytes: nothing moved) / NOMEM / BACKEND with the message in err. */
mnemo_status retrieval_evict(retrieval_state *s, kern_ctx *kc, const kv_cache *kv, int32_t e, char *err,
                             size_t errlen);
/* Blocks to move before a step of n tokens (0 when it fits next to the window). */
int32_t retrieval_blocks_due(const retrieval_state *s, int32_t n);
mem_bytes retrieval_mem_bytes(const retrieval_state *s);

/* memory_ops.attend (retrieval_attend.c). */
int retrieval_attend(void *st, int32_t l, const kern_backend *be, kern_ctx *kc, float *out, const float *q,
                     const float *k, const float *v, int64_t nq, int64_t nkv, int64_t q_pos0, int64_t hq, int64_t hkv,
                     int64_t hd, float scale);

/* Snapshot sections (retrieval_snapshot.c). */
void retrieval_snapshot_settings(const void *st, int32_t out[MEMORY_SNAP_SETTINGS]);
int retrieval_save(const void *st, struct snap_writer *w, int32_t n_rows);
mnemo_status retrieval_load_check(const void *st, const struct snap_reader *r, const memory_snap *sn, void **staged,
                                  char *err, size_t errlen);
void retrieval_load_commit(void *st, void *staged, const memory_snap *sn);
void retrieval_load_discard(const void *st, void *staged);

#endif
