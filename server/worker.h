/*
 * worker.h — the engine side of the scheduler: it owns one mnemo_context per slot and runs the batch.
 *
 * All functions are called from the scheduler thread only (slots are not locked), except worker_gauges_get. worker_step is one iteration
 * of continuous batching:
 *   1. every generating slot samples its next token from its last logits (mnemo_generation_step) and the event
 *      goes to its request; a slot whose sequence ended becomes idle;
 *   2. the sampled tokens (one per slot) and chunks of pending prompts (oldest slot first, while the per-step
 *      token budget lasts) form ONE mnemo_decode_batch: the weights are read once for all slots, and a long prompt
 *      is prefilled over several steps instead of stalling the others.
 * If the batch fails, each entry is retried alone so that one bad sequence cannot take the others down.
 */
#ifndef MNEMO_SERVER_WORKER_H
#define MNEMO_SERVER_WORKER_H

#include <stdint.h>

#include "engine.h"
#include "infer_request.h"
#include "metrics.h"

typedef struct worker worker;

typedef struct {
    int n_slots;
    int n_ctx;   /* KV positions per slot */
    int batch;   /* token budget per step */
    int64_t cache_bytes; /* memory rows and indexes idle slots may keep for prefix reuse; < 0: no limit */
    mnemo_context_params ctx;  /* every context's parameters (memory attention included), as main.c built them */
} worker_config;

worker *worker_new(mnemo_model *model, const worker_config *cfg, metrics *mx, char *err, size_t errlen);
void worker_free(worker *w);

int worker_n_slots(const worker *w);
int worker_idle_slot(const worker *w);      /* an idle slot's index, or -1 */
/* The idle slot for choice `choice` of j: the one holding the longest prefix of its prompt, else the one idle
 * longest; -1 when none is idle. */
int worker_pick_slot(const worker *w, const ireq *j, int choice);
int worker_busy(const worker *w);           /* slots in use */
ireq *worker_slot_job(const worker *w, int slot); /* NULL when idle */
int64_t worker_kv_used(const worker *w);    /* KV positions filled over all busy slots */
/* Bytes of KV cache allocated over all slots (fixed once the slots exist). */
int64_t worker_kv_bytes(const worker *w);
/* Memory by kind summed over every slot's context (mnemo_context_memory). */
void worker_memory(const worker *w, mnemo_memory_stats *sum);

typedef struct {
    int busy;
    int64_t kv_used, kv_bytes;
    mnemo_memory_stats memory;
} worker_gauges;
/* Takes the gauges above from the slots and publishes them (also done before any client is woken, so a client
 * that reads /metrics after its answer sees the state its request left). */
void worker_publish(worker *w);
/* The last published gauges; any thread. */
void worker_gauges_get(worker *w, worker_gauges *out);

/* Put choice `choice` of j on an idle slot (takes a reference on j). */
void worker_start(worker *w, int slot, ireq *j, int choice);
/* End a busy slot's sequence early (its request was cancelled). */
void worker_stop(worker *w, int slot, ireq_end why);
/* One batch step (see above). */
void worker_step(worker *w);

#endif
