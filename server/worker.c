/*
 * worker.c — slots, chunked prefill and the batched decode step (see worker.h).
 *
 * Prefix reuse: a slot's own context keeps what its last request left (prompt and generated tokens, and for a
 * LongLLaMA model its memory), and the slot records those tokens. A new request goes to the idle slot whose tokens
 * share the longest prefix with its prompt (same adapter; else the slot idle longest), which keeps that prefix
 * (mnemo_context_keep_prefix) and prefills only the rest: a second question about a long document decodes the
 * question. What idle slots hold beyond their fixed KV cache (memory rows, index) is bounded by --cache-ram: past
 * it, the slots idle longest forget everything.
 */
#include "worker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text_util.h"

/* FINISH: a session's sequence has ended and its last token is being decoded into the session. */
typedef enum { SLOT_IDLE = 0, SLOT_PREFILL, SLOT_GENERATE, SLOT_FINISH } slot_state;

typedef struct {
    mnemo_context *ctx;     /* the one in use: own, or the request's session's */
    mnemo_context *own;
    slot_state state;
    ireq *ireq;
    int choice;
    int32_t n_fed;          /* prompt tokens already decoded */
    int32_t chunk;          /* prompt tokens in this step's batch */
    mnemo_generation *gen;
    mnemo_token pending;    /* the sampled token this step decodes */
    uint64_t order;         /* admission order: the oldest prompt is prefilled first */
    int32_t n_tokens;       /* tokens streamed so far */
    int32_t n_cached;       /* prompt tokens the slot already held (prefix reuse) */
    double t_start, t_gen, t_last;
    mnemo_token *held;      /* the tokens `own` holds, in order (prefix reuse) */
    int32_t n_held, cap_held;
    const mnemo_adapter *held_adapter; /* the adapter `own` decodes with */
    double t_idle;          /* when it last became idle */
} slot;

struct worker {
    mnemo_model *model;
    metrics *mx;
    slot *slots;
    int n_slots, n_ctx, batch;
    int64_t cache_bytes;    /* what idle slots may hold beyond their KV cache; < 0: no limit */
    uint64_t next_order;
    mnemo_batch_entry *entries;
    slot **entry_slot;      /* which slot each batch entry belongs to */
    pthread_mutex_t pub_mu; /* guards `published` only: /metrics reads it from HTTP threads */
    worker_gauges published;
};

worker *worker_new(mnemo_model *model, const worker_config *cfg, metrics *mx, char *err, size_t errlen) {
    worker *w = calloc(1, sizeof *w);
    if (!w) goto oom;
    w->model = model;
    w->mx = mx;
    w->n_slots = cfg->n_slots;
    w->n_ctx = cfg->n_ctx;
    w->batch = cfg->batch;
    w->cache_bytes = cfg->cache_bytes;
    pthread_mutex_init(&w->pub_mu, NULL);
    w->slots = calloc((size_t)cfg->n_slots, sizeof *w->slots);
    w->entries = calloc((size_t)cfg->n_slots, sizeof *w->entries);
    w->entry_slot = calloc((size_t)cfg->n_slots, sizeof *w->entry_slot);
    if (!w->slots || !w->entries || !w->entry_slot) goto oom;
    mnemo_context_params cp = cfg->ctx;
    cp.n_ctx = cfg->n_ctx;
    cp.n_batch = cfg->batch;
    for (int i = 0; i < w->n_slots; i++) {
        mnemo_status st = mnemo_context_new(model, &cp, &w->slots[i].own);
        w->slots[i].ctx = w->slots[i].own;
        if (st != MNEMO_OK) {
            snprintf(err, errlen, "slot %d: %s", i, mnemo_context_error(w->slots[i].own));
            worker_free(w);
            return NULL;
        }
    }
    return w;
oom:
    snprintf(err, errlen, "out of memory creating %d slots", cfg->n_slots);
    worker_free(w);
    return NULL;
}

void worker_free(worker *w) {
    if (!w) return;
    for (int i = 0; w->slots && i < w->n_slots; i++) {
        if (w->slots[i].state != SLOT_IDLE) worker_stop(w, i, IREQ_END_SHUTDOWN);
        mnemo_context_free(w->slots[i].own);
        free(w->slots[i].held);
    }
    pthread_mutex_destroy(&w->pub_mu);
    free(w->slots);
    free(w->entries);
    free(w->entry_slot);
    free(w);
}

int worker_n_slots(const worker *w) { return w->n_slots; }

int worker_idle_slot(const worker *w) {
    for (int i = 0; i < w->n_slots; i++)
        if (w->slots[i].state == SLOT_IDLE) return i;
    return -1;
}

static int32_t common_prefix(const mnemo_token *a, int32_t na, const mnemo_token *b, int32_t nb) {
    int32_t n = 0;
    while (n < na && n < nb && a[n] == b[n]) n++;
    return n;
}

int worker_pick_slot(const worker *w, const ireq *j, int choice) {
    const ireq_choice *c = &j->choices[choice];
    int best = -1;
    int32_t best_common = -1;
    for (int i = 0; i < w->n_slots; i++) {
        const slot *s = &w->slots[i];
        if (s->state != SLOT_IDLE) continue;
        int32_t common = !j->session && s->held_adapter == j->adapter
                             ? common_prefix(s->held, s->n_held, c->prompt, c->n_prompt)
                             : 0;
        if (common > best_common || (common == best_common && s->t_idle < w->slots[best].t_idle)) {
            best = i;
            best_common = common;
        }
    }
    return best;
}

int worker_busy(const worker *w) {
    int n = 0;
    for (int i = 0; i < w->n_slots; i++) n += w->slots[i].state != SLOT_IDLE;
    return n;
}

ireq *worker_slot_job(const worker *w, int i) { return w->slots[i].state == SLOT_IDLE ? NULL : w->slots[i].ireq; }

int64_t worker_kv_used(const worker *w) {
    int64_t n = 0;
    for (int i = 0; i < w->n_slots; i++)
        if (w->slots[i].state != SLOT_IDLE) n += mnemo_context_n_past(w->slots[i].ctx);
    return n;
}

int64_t worker_kv_bytes(const worker *w) {
    int64_t n = 0;
    for (int i = 0; i < w->n_slots; i++) n += (int64_t)mnemo_context_kv_bytes(w->slots[i].own);
    return n;
}

void worker_memory(const worker *w, mnemo_memory_stats *sum) {
    memset(sum, 0, sizeof *sum);
    for (int i = 0; i < w->n_slots; i++) {
        mnemo_memory_stats m;
        if (mnemo_context_memory(w->slots[i].own, &m) != MNEMO_OK) continue; /* sessions count their own */
        sum->local_tokens += m.local_tokens;
        sum->mem_tokens += m.mem_tokens;
        sum->local_kv_bytes += m.local_kv_bytes;
        sum->mem_key_bytes += m.mem_key_bytes;
        sum->mem_value_bytes += m.mem_value_bytes;
        sum->mem_index_bytes += m.mem_index_bytes;
        sum->mem_entries += m.mem_entries;
    }
}

static void forget(slot *s) {
    mnemo_context_reset(s->own);
    s->n_held = 0;
}

/* The slot's own context keeps the longest prefix it shares with the prompt (at most all but the prompt's last
 * token, whose logits the generation needs); returns how many tokens it kept. */
static int32_t reuse_prefix(slot *s, const ireq *j, const ireq_choice *c) {
    if (s->held_adapter != j->adapter || mnemo_context_n_past(s->own) != s->n_held) {
        /* set_adapter resets the context, and fails only for lack of memory: then the base model would answer */
        if (mnemo_context_set_adapter(s->own, j->adapter) != MNEMO_OK) mnemo_context_reset(s->own);
        s->held_adapter = j->adapter;
        s->n_held = 0;
        return 0;
    }
    int32_t keep = common_prefix(s->held, s->n_held, c->prompt, c->n_prompt - 1), kept = 0;
    if (keep == s->n_held) return keep; /* everything it holds is the prompt's prefix */
    if (mnemo_context_keep_prefix(s->own, s->held, keep, &kept) != MNEMO_OK) kept = 0, mnemo_context_reset(s->own);
    s->n_held = kept;
    return kept;
}

/* Records tokens that went into the slot's own context. On allocation failure the record is dropped and the context
 * forgets too, so they never disagree. */
static void hold(slot *s, const mnemo_token *t, int32_t n) {
    if (s->ctx != s->own) return;
    if (s->n_held + n > s->cap_held) {
        int32_t cap = s->cap_held ? s->cap_held : 256;
        while (cap < s->n_held + n) cap *= 2;
        mnemo_token *p = realloc(s->held, (size_t)cap * sizeof *p);
        if (!p) {
            forget(s);
            return;
        }
        s->held = p;
        s->cap_held = cap;
    }
    memcpy(s->held + s->n_held, t, (size_t)n * sizeof *t);
    s->n_held += n;
}

/* Idle slots past the --cache-ram budget forget everything, idle longest first (only memory rows and indexes
 * count: the KV cache is allocated whatever it holds). */
static void enforce_cache_budget(worker *w) {
    if (w->cache_bytes < 0) return;
    for (;;) {
        int64_t total = 0;
        int lru = -1;
        for (int i = 0; i < w->n_slots; i++) {
            slot *s = &w->slots[i];
            mnemo_memory_stats m;
            if (s->state != SLOT_IDLE || mnemo_context_memory(s->own, &m) != MNEMO_OK) continue;
            int64_t b = (int64_t)(m.mem_key_bytes + m.mem_value_bytes + m.mem_index_bytes);
            total += b;
            if (b > 0 && (lru < 0 || s->t_idle < w->slots[lru].t_idle)) lru = i;
        }
        if (total <= w->cache_bytes || lru < 0) return;
        forget(&w->slots[lru]);
    }
}

void worker_publish(worker *w) {
    worker_gauges g = {.busy = worker_busy(w), .kv_used = worker_kv_used(w), .kv_bytes = worker_kv_bytes(w)};
    worker_memory(w, &g.memory);
    pthread_mutex_lock(&w->pub_mu);
    w->published = g;
    pthread_mutex_unlock(&w->pub_mu);
}

void worker_gauges_get(worker *w, worker_gauges *out) {
    pthread_mutex_lock(&w->pub_mu);
    *out = w->published;
    pthread_mutex_unlock(&w->pub_mu);
}

void worker_start(worker *w, int i, ireq *j, int choice) {
    slot *s = &w->slots[i];
    ireq_ref(j);
    s->ctx = j->session ? session_context(j->session) : s->own;
    /* a session continues where its last request ended; a fresh sequence reuses what the slot holds of its prompt */
    s->n_cached = j->session ? 0 : reuse_prefix(s, j, &j->choices[choice]);
    s->state = SLOT_PREFILL;
    s->ireq = j;
    s->choice = choice;
    s->n_fed = s->n_cached;
    s->chunk = s->n_tokens = 0;
    s->gen = NULL;
    s->order = w->next_order++;
    s->t_start = now_s();
    s->t_gen = s->t_last = 0;
    j->choices[choice].started = true;
    metrics_observe(w->mx, HIST_QUEUE, s->t_start - j->t_arrival);
}

/* The slot's sequence is over: record it in the request and metrics, free the slot. */
static void end_slot(worker *w, slot *s, ireq_end why, mnemo_finish_reason finish, const char *error) {
    double t = now_s();
    ireq *j = s->ireq;
    double prefill_end = s->t_gen ? s->t_gen : t;
    int32_t n_gen = s->gen ? mnemo_generation_n_generated(s->gen) : 0;
    j->choices[s->choice].n_fed = s->n_fed;
    j->choices[s->choice].n_cached = s->n_cached;
    /* Metrics first: ending the choice wakes the client, which may read /metrics at once. */
    metrics_tokens(w->mx, s->n_fed - s->n_cached, n_gen);
    metrics_cached_tokens(w->mx, s->n_cached);
    if (why == IREQ_END_OK) metrics_observe(w->mx, HIST_E2E, t - j->t_arrival);
    /* Done with the context before the choice ends: that gives a session back for its next request. */
    mnemo_generation_free(s->gen);
    s->gen = NULL;
    s->ctx = s->own;
    s->state = SLOT_IDLE;
    s->t_idle = t;
    s->ireq = NULL;
    enforce_cache_budget(w); /* before the client wakes: what it sees next already respects --cache-ram */
    worker_publish(w);
    ireq_end_choice(j, s->choice, why, finish, n_gen, (s->t_start - j->t_arrival) * 1e3,
                   (prefill_end - s->t_start) * 1e3, s->t_gen ? (t - s->t_gen) * 1e3 : 0.0, error);
    ireq_unref(j);
}

void worker_stop(worker *w, int i, ireq_end why) {
    slot *s = &w->slots[i];
    if (s->state == SLOT_IDLE) return;
    end_slot(w, s, why, MNEMO_FINISH_CANCELLED, NULL);
}

static void fail_slot(worker *w, slot *s, const char *what) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s: %s", what, mnemo_context_error(s->ctx));
    if (s->ctx == s->own) forget(s); /* what it holds after a failure is not worth trusting */
    fprintf(stderr, "mnemo-server: error: %s\n", msg);
    ireq_cancel(s->ireq, IREQ_END_ERROR);
    end_slot(w, s, IREQ_END_ERROR, MNEMO_FINISH_CANCELLED, msg);
}

/* Whether one more token fits (a LongLLaMA context moves a full window to memory: always; UIO: while its positions
 * hold memory + raw). */
static bool has_room(mnemo_context *ctx) { return mnemo_context_entry_max(ctx) > 0; }

/* Phase 1: sample one token for every generating slot; returns the batch entries added. */
static int sample_all(worker *w, int *budget) {
    int ne = 0;
    for (int i = 0; i < w->n_slots; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_GENERATE) continue;
        mnemo_token_event ev;
        if (mnemo_generation_step(s->gen, &ev) != MNEMO_OK) {
            fail_slot(w, s, "sampling failed");
            continue;
        }
        double t = now_s();
        metrics_observe(w->mx, s->n_tokens == 0 ? HIST_TTFT : HIST_ITL,
                        s->n_tokens == 0 ? t - s->ireq->t_arrival : t - s->t_last);
        s->t_last = t;
        s->n_tokens++;
        if (ireq_push_token(s->ireq, s->choice, &ev) != 0) {
            ireq_cancel(s->ireq, IREQ_END_ERROR);
            end_slot(w, s, IREQ_END_ERROR, MNEMO_FINISH_CANCELLED, "out of memory");
            continue;
        }
        if (ev.is_last && !(s->ireq->session && ev.token >= 0 && has_room(s->ctx))) {
            end_slot(w, s, IREQ_END_OK, mnemo_generation_finish_reason(s->gen), NULL);
            continue;
        }
        if (ev.is_last) s->state = SLOT_FINISH; /* the session keeps its last token too */
        s->pending = ev.token;
        w->entries[ne] = (mnemo_batch_entry){.ctx = s->ctx, .tokens = &s->pending, .n = 1};
        w->entry_slot[ne++] = s;
        (*budget)--;
    }
    return ne;
}

/* Phase 2: prompt chunks, oldest admission first, while the budget lasts. */
static int add_prefill(worker *w, int ne, int budget) {
    for (;;) {
        slot *oldest = NULL;
        for (int i = 0; i < w->n_slots; i++) {
            slot *s = &w->slots[i];
            if (s->state == SLOT_PREFILL && s->chunk == 0 && (!oldest || s->order < oldest->order)) oldest = s;
        }
        if (!oldest || budget <= 0) return ne;
        const ireq_choice *c = &oldest->ireq->choices[oldest->choice];
        int32_t left = c->n_prompt - oldest->n_fed;
        oldest->chunk = left < budget ? left : budget;
        /* What one batch entry of this context may hold: LongLLaMA at most last_context_length tokens (a long prompt
         * streams through the local window, each full window moving to memory, the reference's behaviour for a
         * continued session); UIO up to the next segment boundary (that segment is compressed before the next
         * step); 0 when not one more token fits (only UIO, whose positions the route cannot count ahead) */
        int32_t cap = mnemo_context_entry_max(oldest->ctx);
        if (cap <= 0) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "the prompt does not fit: the context is full after %d of its %d tokens (--ctx %d positions)",
                     oldest->n_fed, c->n_prompt, mnemo_context_n_ctx(oldest->ctx));
            oldest->ireq->error_full = true; /* a 400 context_length_exceeded, as the route's own checks give */
            ireq_cancel(oldest->ireq, IREQ_END_ERROR);
            end_slot(w, oldest, IREQ_END_ERROR, MNEMO_FINISH_CANCELLED, msg);
            continue;
        }
        if (oldest->chunk > cap) oldest->chunk = cap;
        budget -= oldest->chunk;
        w->entries[ne] = (mnemo_batch_entry){.ctx = oldest->ctx, .tokens = c->prompt + oldest->n_fed, .n = oldest->chunk};
        w->entry_slot[ne++] = oldest;
    }
}

/* After a successful decode of this slot's entry. */
static void advance(worker *w, slot *s) {
    if (s->state == SLOT_FINISH) {
        end_slot(w, s, IREQ_END_OK, mnemo_generation_finish_reason(s->gen), NULL);
        return;
    }
    if (s->state == SLOT_GENERATE) hold(s, &s->pending, 1);
    if (s->state != SLOT_PREFILL) return;
    ireq *j = s->ireq;
    ireq_choice *c = &j->choices[s->choice];
    hold(s, c->prompt + s->n_fed, s->chunk);
    s->n_fed += s->chunk;
    s->chunk = 0;
    if (j->progress && ireq_push_progress(j, s->choice, s->n_fed, c->n_prompt, (now_s() - s->t_start) * 1e3) != 0) {
        ireq_cancel(j, IREQ_END_ERROR);
        end_slot(w, s, IREQ_END_ERROR, MNEMO_FINISH_CANCELLED, "out of memory");
        return;
    }
    if (s->n_fed < c->n_prompt) return;
    mnemo_generate_params gp = j->gp;
    gp.sampling.seed = c->seed;
    if (mnemo_generation_new(s->ctx, &gp, c->prompt, c->n_prompt, &s->gen) != MNEMO_OK) {
        fail_slot(w, s, "cannot start generation");
        return;
    }
    s->state = SLOT_GENERATE;
    s->t_gen = now_s();
}

void worker_step(worker *w) {
    int budget = w->batch;
    int ne = sample_all(w, &budget);
    ne = add_prefill(w, ne, budget);
    if (ne == 0) return;
    int64_t tokens = 0;
    for (int k = 0; k < ne; k++) tokens += w->entries[k].n;
    if (mnemo_decode_batch(w->entries, ne) == MNEMO_OK) {
        for (int k = 0; k < ne; k++) advance(w, w->entry_slot[k]);
    } else { /* all-or-nothing failed: find the culprit(s) by decoding each alone */
        for (int k = 0; k < ne; k++) {
            slot *s = w->entry_slot[k];
            if (mnemo_decode_batch(&w->entries[k], 1) == MNEMO_OK) advance(w, s);
            else fail_slot(w, s, "decode failed");
        }
    }
    metrics_step(w->mx, tokens, ne);
}
