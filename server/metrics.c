/*
 * metrics.c — Prometheus counters/histograms (see metrics.h). Fixed bucket bounds per histogram, cumulative on
 * output as the format requires.
 */
#include "metrics.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "text_util.h"

#define MAX_BUCKETS 16

typedef struct {
    const char *name, *help;
    double bounds[MAX_BUCKETS];
    int n_bounds;
    uint64_t counts[MAX_BUCKETS + 1]; /* last: +Inf */
    double sum;
    uint64_t count;
} histogram;

static const char *OUTCOMES[] = {"ok", "client_gone", "timeout", "shutdown", "error"};
#define N_OUTCOMES 5

struct metrics {
    pthread_mutex_t mu;
    histogram h[HIST_COUNT];
    uint64_t prompt_tokens, cached_tokens, generated_tokens, steps, step_tokens, step_seqs;
    uint64_t outcomes[N_OUTCOMES];
    uint64_t status_counts[600];
};

static const histogram TEMPLATES[HIST_COUNT] = {
    [HIST_TTFT] = {"mnemo_time_to_first_token_seconds", "Time from request arrival to the first generated token",
                   {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}, 13, {0}, 0, 0},
    [HIST_ITL] = {"mnemo_inter_token_latency_seconds", "Time between consecutive tokens of one sequence",
                  {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}, 11, {0}, 0, 0},
    [HIST_E2E] = {"mnemo_request_duration_seconds", "Time from request arrival to its last token",
                  {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}, 14, {0}, 0, 0},
    [HIST_QUEUE] = {"mnemo_queue_time_seconds", "Time a sequence waited for a free slot",
                    {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}, 13, {0}, 0, 0},
};

metrics *metrics_new(void) {
    metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    memcpy(m->h, TEMPLATES, sizeof TEMPLATES);
    return m;
}

void metrics_free(metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_observe(metrics *m, hist_id id, double s) {
    if (!m || id >= HIST_COUNT) return;
    pthread_mutex_lock(&m->mu);
    histogram *h = &m->h[id];
    int b = 0;
    while (b < h->n_bounds && s > h->bounds[b]) b++;
    h->counts[b]++;
    h->sum += s;
    h->count++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_http_status(metrics *m, int status) {
    if (!m || status < 100 || status >= 600) return;
    pthread_mutex_lock(&m->mu);
    m->status_counts[status]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_tokens(metrics *m, int64_t prompt, int64_t generated) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt;
    m->generated_tokens += (uint64_t)generated;
    pthread_mutex_unlock(&m->mu);
}

void metrics_cached_tokens(metrics *m, int64_t cached) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->cached_tokens += (uint64_t)cached;
    pthread_mutex_unlock(&m->mu);
}

void metrics_step(metrics *m, int64_t tokens, int64_t seqs) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->steps++;
    m->step_tokens += (uint64_t)tokens;
    m->step_seqs += (uint64_t)seqs;
    pthread_mutex_unlock(&m->mu);
}

void metrics_request_end(metrics *m, const char *outcome) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < N_OUTCOMES; i++)
        if (!strcmp(outcome, OUTCOMES[i])) m->outcomes[i]++;
    pthread_mutex_unlock(&m->mu);
}

static void gauge(strbuf *b, const char *name, const char *help, double v) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

static void counter(strbuf *b, const char *name, const char *help, uint64_t v) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

/* A UIO model's memory in bytes by kind: the <mem> entries (compressed) and the raw tokens' keys and values. */
static void uio_gauges(strbuf *b, const char *prefix, const char *over, const mnemo_memory_stats *ms,
                       int64_t row_bytes) {
    sb_printf(b, "# HELP mnemo_%suio_memory_bytes UIO memory by kind over all %s: compressed (<mem> entries' keys "
                 "and values) and raw_kv (keys and values of the raw tokens)\n# TYPE mnemo_%suio_memory_bytes gauge\n",
              prefix, over, prefix);
    sb_printf(b, "mnemo_%suio_memory_bytes{kind=\"compressed\"} %llu\n", prefix,
              (unsigned long long)(ms->mem_key_bytes + ms->mem_value_bytes));
    sb_printf(b, "mnemo_%suio_memory_bytes{kind=\"raw_kv\"} %llu\n", prefix,
              (unsigned long long)ms->local_tokens * (unsigned long long)row_bytes);
    sb_printf(b, "# HELP mnemo_%suio_memory_entries <mem> entries per layer over all %s\n"
                 "# TYPE mnemo_%suio_memory_entries gauge\nmnemo_%suio_memory_entries %llu\n",
              prefix, over, prefix, prefix, (unsigned long long)ms->mem_entries);
    sb_printf(b, "# HELP mnemo_%suio_raw_tokens Raw (not compressed) tokens over all %s\n"
                 "# TYPE mnemo_%suio_raw_tokens gauge\nmnemo_%suio_raw_tokens %d\n",
              prefix, over, prefix, prefix, ms->local_tokens);
}

char *metrics_render(metrics *m, const metrics_gauges *g, uint64_t *len) {
    strbuf b = {0};
    gauge(&b, "mnemo_model_loading", "1 while the model is loading", g->loading);
    gauge(&b, "mnemo_slots_total", "Sequences decoded together (--parallel)", g->slots_total);
    gauge(&b, "mnemo_requests_running", "Slots busy with a request", g->slots_busy);
    gauge(&b, "mnemo_requests_waiting", "Requests waiting in the queue for a slot", g->requests_waiting);
    gauge(&b, "mnemo_kv_cache_tokens", "KV cache positions in use over all slots", (double)g->kv_tokens_used);
    gauge(&b, "mnemo_kv_cache_capacity_tokens", "KV cache positions allocated over all slots",
          (double)g->kv_tokens_capacity);
    gauge(&b, "mnemo_kv_cache_usage_ratio", "KV cache positions in use / allocated",
          g->kv_tokens_capacity ? (double)g->kv_tokens_used / (double)g->kv_tokens_capacity : 0.0);
    if (g->kv_bytes >= 0) gauge(&b, "mnemo_kv_cache_bytes", "Bytes of KV cache allocated", (double)g->kv_bytes);
    gauge(&b, "mnemo_process_resident_memory_bytes", "Resident set size of the server", (double)g->rss_bytes);
    if (g->have_memory) {
        const mnemo_memory_stats *ms = &g->memory;
        sb_printf(&b, "# HELP mnemo_memory_bytes Context memory by kind over all slots (local KV cache; LongLLaMA "
                      "memory keys, values and kNN index)\n# TYPE mnemo_memory_bytes gauge\n");
        sb_printf(&b, "mnemo_memory_bytes{kind=\"local_kv\"} %llu\n", (unsigned long long)ms->local_kv_bytes);
        sb_printf(&b, "mnemo_memory_bytes{kind=\"memory_keys\"} %llu\n", (unsigned long long)ms->mem_key_bytes);
        sb_printf(&b, "mnemo_memory_bytes{kind=\"memory_values\"} %llu\n", (unsigned long long)ms->mem_value_bytes);
        sb_printf(&b, "mnemo_memory_bytes{kind=\"index\"} %llu\n", (unsigned long long)ms->mem_index_bytes);
        gauge(&b, "mnemo_memory_tokens", "Tokens held in memory over all slots (LongLLaMA; UIO: tokens compressed)",
              (double)ms->mem_tokens);
        if (g->uio) uio_gauges(&b, "", "slots", ms, g->kv_row_bytes);
    }
    if (g->have_sessions) {
        const mnemo_memory_stats *ms = &g->session_memory;
        gauge(&b, "mnemo_sessions", "Live sessions", (double)g->sessions);
        gauge(&b, "mnemo_sessions_max", "Most live sessions (--max-sessions)", (double)g->sessions_max);
        sb_printf(&b, "# HELP mnemo_session_memory_bytes Session memory by kind over all sessions\n"
                      "# TYPE mnemo_session_memory_bytes gauge\n");
        sb_printf(&b, "mnemo_session_memory_bytes{kind=\"local_kv\"} %llu\n", (unsigned long long)ms->local_kv_bytes);
        sb_printf(&b, "mnemo_session_memory_bytes{kind=\"memory_keys\"} %llu\n", (unsigned long long)ms->mem_key_bytes);
        sb_printf(&b, "mnemo_session_memory_bytes{kind=\"memory_values\"} %llu\n",
                  (unsigned long long)ms->mem_value_bytes);
        sb_printf(&b, "mnemo_session_memory_bytes{kind=\"index\"} %llu\n", (unsigned long long)ms->mem_index_bytes);
        gauge(&b, "mnemo_session_memory_tokens",
              "Tokens held in memory over all sessions (LongLLaMA; UIO: tokens compressed)", (double)ms->mem_tokens);
        if (g->uio) uio_gauges(&b, "session_", "sessions", ms, g->kv_row_bytes);
    }
    if (g->have_jobs) {
        static const char *const st[6] = {"validating_files", "queued", "running", "succeeded", "failed", "cancelled"};
        sb_printf(&b, "# HELP mnemo_finetune_jobs Fine-tuning jobs by status\n# TYPE mnemo_finetune_jobs gauge\n");
        for (int i = 0; i < 6; i++) sb_printf(&b, "mnemo_finetune_jobs{status=\"%s\"} %d\n", st[i], g->jobs_by_status[i]);
        gauge(&b, "mnemo_finetune_tokens_per_second", "Training tokens per second of the last step a worker reported",
              g->train_tokens_per_s);
        sb_printf(&b, "# HELP mnemo_finetune_steps_total Optimizer steps reported by fine-tuning workers\n"
                      "# TYPE mnemo_finetune_steps_total counter\nmnemo_finetune_steps_total %lld\n", g->train_steps);
        gauge(&b, "mnemo_adapters_loaded", "Fine-tuned adapters loaded over the base weights", (double)g->adapters_loaded);
    }

    if (g->have_http) {
        gauge(&b, "mnemo_http_connections", "Connections being served (--max-conns bounds them)", g->http_open);
        gauge(&b, "mnemo_http_connections_waiting_headers",
              "Connections still sending their request headers (--max-pending bounds them)", g->http_waiting_headers);
        gauge(&b, "mnemo_http_request_body_bytes", "Request body bytes held now (--max-body-inflight bounds them)",
              (double)g->http_body_bytes);
        counter(&b, "mnemo_http_connections_refused_total", "Connections answered 503: no room within a second",
                g->http_refused_full);
        counter(&b, "mnemo_http_connections_dropped_total",
                "Connections still sending headers closed to make room for new ones", g->http_dropped_waiting);
        counter(&b, "mnemo_http_connections_evicted_total", "Idle keep-alive connections closed to make room",
                g->http_evicted_idle);
        counter(&b, "mnemo_http_refused_before_routing_total",
                "Requests answered 400 / 408 / 431 before routing (not HTTP, slow or oversized headers, ambiguous "
                "framing on a first request)",
                g->http_refused_at_door);
    }

    pthread_mutex_lock(&m->mu);
    counter(&b, "mnemo_prompt_tokens_total", "Prompt tokens prefilled", m->prompt_tokens);
    counter(&b, "mnemo_prompt_tokens_cached_total", "Prompt tokens a slot already held, not prefilled again",
            m->cached_tokens);
    counter(&b, "mnemo_generated_tokens_total", "Tokens generated", m->generated_tokens);
    counter(&b, "mnemo_batch_steps_total", "Forward passes run by the scheduler", m->steps);
    counter(&b, "mnemo_batch_tokens_total", "Tokens processed by those forward passes", m->step_tokens);
    counter(&b, "mnemo_batch_sequences_total", "Sequences in those forward passes (sum over steps)", m->step_seqs);
    sb_printf(&b, "# HELP mnemo_requests_total Inference requests by outcome\n# TYPE mnemo_requests_total counter\n");
    for (int i = 0; i < N_OUTCOMES; i++)
        sb_printf(&b, "mnemo_requests_total{outcome=\"%s\"} %llu\n", OUTCOMES[i], (unsigned long long)m->outcomes[i]);
    sb_printf(&b, "# HELP mnemo_http_responses_total HTTP responses by status code\n"
                  "# TYPE mnemo_http_responses_total counter\n");
    for (int s = 100; s < 600; s++)
        if (m->status_counts[s])
            sb_printf(&b, "mnemo_http_responses_total{code=\"%d\"} %llu\n", s, (unsigned long long)m->status_counts[s]);
    for (int i = 0; i < HIST_COUNT; i++) {
        histogram *h = &m->h[i];
        sb_printf(&b, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
        uint64_t cum = 0;
        for (int k = 0; k < h->n_bounds; k++) {
            cum += h->counts[k];
            sb_printf(&b, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->bounds[k], (unsigned long long)cum);
        }
        cum += h->counts[h->n_bounds];
        sb_printf(&b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", h->name, (unsigned long long)cum,
                  h->name, h->sum, h->name, (unsigned long long)h->count);
    }
    pthread_mutex_unlock(&m->mu);
    if (b.failed) {
        sb_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.data;
}
