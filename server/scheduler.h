/*
 * scheduler.h — admission and the batch loop.
 *
 * HTTP threads submit requests; a bounded FIFO queue holds those waiting for slots (submit answers FULL beyond it, the
 * route turns that into 503 + Retry-After). One scheduler thread loops: drop cancelled, expired or abandoned
 * requests (queued or running: a client that disconnects frees its slot within one step), hand free slots to queued
 * choices in arrival order, then run one worker_step (one batched forward pass over all busy slots). When nothing
 * is running it sleeps until a submit.
 *
 * Shutdown: sched_stop_accepting, then sched_wait_idle for a grace period, then sched_cancel_all; sched_free joins.
 */
#ifndef MNEMO_SERVER_SCHEDULER_H
#define MNEMO_SERVER_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "infer_request.h"
#include "metrics.h"

typedef struct scheduler scheduler;

typedef struct {
    int parallel;   /* slots */
    int queue;      /* waiting requests beyond the free slots */
    int n_ctx;      /* per slot */
    int batch;      /* tokens per step */
    int64_t cache_bytes; /* memory idle slots may keep for prefix reuse (--cache-ram); < 0: no limit */
    mnemo_context_params ctx;  /* every context's parameters (memory attention included), as main.c built them */
} sched_config;

typedef struct {
    int slots_total, slots_busy, waiting;
    int64_t kv_used, kv_capacity, kv_bytes;
    mnemo_memory_stats memory; /* by kind, over all slots (LongLLaMA memory included) */
} sched_stats;

typedef enum { SCHED_OK = 0, SCHED_FULL, SCHED_STOPPING } sched_result;

scheduler *sched_new(mnemo_model *model, const sched_config *cfg, metrics *mx, char *err, size_t errlen);
/* Queues j (the scheduler takes its own reference on success). */
sched_result sched_submit(scheduler *s, ireq *j);
void sched_get_stats(scheduler *s, sched_stats *out);
void sched_stop_accepting(scheduler *s);
/* Waits until nothing is queued or running, at most timeout_s. True when idle. */
bool sched_wait_idle(scheduler *s, double timeout_s);
/* Cancels every queued and running request (they end within one step). */
void sched_cancel_all(scheduler *s, ireq_end why);
/* Stops the thread (cancelling whatever is left) and frees the slots. */
void sched_free(scheduler *s);

#endif
