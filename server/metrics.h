/*
 * metrics.h — counters and histograms for GET /metrics, rendered in the Prometheus text format (version 0.0.4).
 *
 * Writers: the scheduler thread (tokens, latencies, batch steps) and HTTP threads (responses by status); one mutex
 * guards everything, each update is a few additions. Gauges that belong to someone else (slots busy, queue length,
 * KV occupancy, RSS) are passed in at render time.
 */
#ifndef MNEMO_SERVER_METRICS_H
#define MNEMO_SERVER_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"

typedef struct metrics metrics;

typedef enum { HIST_TTFT = 0, HIST_ITL, HIST_E2E, HIST_QUEUE, HIST_COUNT } hist_id;

typedef struct {
    int slots_total, slots_busy;
    int requests_waiting;
    int64_t kv_tokens_used, kv_tokens_capacity;
    int64_t kv_bytes; /* < 0 when unknown */
    int64_t rss_bytes;
    int loading;
    bool have_memory;
    mnemo_memory_stats memory; /* by kind, when have_memory */
    bool have_sessions;
    int sessions, sessions_max;
    mnemo_memory_stats session_memory; /* by kind over every session (as of their last request) */
    bool uio;                          /* a UIO model: its memory as compressed vs raw KV too */
    int64_t kv_row_bytes;              /* keys + values of one cache position, all layers */
    bool have_jobs;                    /* --jobs-dir: fine-tuning */
    int jobs_by_status[6];             /* validating_files, queued, running, succeeded, failed, cancelled */
    double train_tokens_per_s;         /* the last step a worker reported */
    long long train_steps, adapters_loaded;
    bool have_http;
    int http_open, http_waiting_headers;    /* connections being served / still sending headers */
    uint64_t http_refused_full, http_dropped_waiting, http_refused_at_door, http_evicted_idle;
    int64_t http_body_bytes;                /* request bodies held now */
} metrics_gauges;

metrics *metrics_new(void);
void metrics_free(metrics *m);
void metrics_observe(metrics *m, hist_id h, double seconds);
void metrics_http_status(metrics *m, int status);
void metrics_tokens(metrics *m, int64_t prompt, int64_t generated);
void metrics_cached_tokens(metrics *m, int64_t cached); /* prompt tokens a slot already held (prefix reuse) */
void metrics_step(metrics *m, int64_t tokens, int64_t sequences);
void metrics_request_end(metrics *m, const char *outcome); /* "ok", "client_gone", "timeout", "shutdown", "error" */
/* The whole exposition text, malloc'd (NULL when out of memory). */
char *metrics_render(metrics *m, const metrics_gauges *g, uint64_t *len);

#endif
