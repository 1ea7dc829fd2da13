/*
 * scheduler.c — the queue and the loop that drives the worker (see scheduler.h).
 *
 * Locking: s->mu guards the queue, flags and the stats snapshot. Slots belong to the scheduler thread alone, so
 * worker calls need no lock; worker_step runs with s->mu released so submits never wait for a forward pass.
 */
#include "scheduler.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "text_util.h"
#include "worker.h"

struct scheduler {
    pthread_mutex_t mu;
    pthread_cond_t wake;  /* a submit, a cancel or quit */
    pthread_cond_t idle;  /* broadcast when nothing is queued or running */
    pthread_t thread;
    bool started, quit, accepting;
    ireq_end cancel_all;   /* set by sched_cancel_all, applied by the loop (slots are the loop's alone) */
    worker *w;
    metrics *mx;
    ireq *head, *tail;
    int n_queued, queue_cap, n_ctx;
    sched_stats stats;
};

/* The checks every step makes for a request: cancelled by someone, past its deadline, or its client gone. */
static ireq_end ireq_should_stop(ireq *j, double t) {
    ireq_end why = ireq_cancelled(j);
    if (why) return why;
    if (j->deadline > 0 && t > j->deadline) why = IREQ_END_TIMEOUT;
    else if (ireq_client_gone(j)) why = IREQ_END_CLIENT_GONE;
    if (why) ireq_cancel(j, why);
    return ireq_cancelled(j);
}

/* End the choices of j that never reached a slot. */
static void end_unstarted(ireq *j, ireq_end why, double t) {
    for (int c = j->next_choice; c < j->n_choices; c++)
        ireq_end_choice(j, c, why, MNEMO_FINISH_CANCELLED, 0, (t - j->t_arrival) * 1e3, 0, 0, NULL);
    j->next_choice = j->n_choices;
}

static void drop_stopped_queued(scheduler *s, double t) {
    ireq *prev = NULL, *j = s->head;
    while (j) {
        ireq *next = j->qnext;
        ireq_end why = ireq_should_stop(j, t);
        if (why) {
            if (prev) prev->qnext = next;
            else s->head = next;
            if (s->tail == j) s->tail = prev;
            s->n_queued--;
            end_unstarted(j, why, t);
            ireq_unref(j);
        } else {
            prev = j;
        }
        j = next;
    }
}

static void stop_cancelled_running(scheduler *s, double t) {
    for (int i = 0; i < worker_n_slots(s->w); i++) {
        ireq *j = worker_slot_job(s->w, i);
        if (!j) continue;
        if (s->cancel_all) ireq_cancel(j, s->cancel_all);
        ireq_end why = ireq_should_stop(j, t);
        if (why) worker_stop(s->w, i, why);
    }
}

static void assign_slots(scheduler *s) {
    int slot;
    while (s->head && (slot = worker_pick_slot(s->w, s->head, s->head->next_choice)) >= 0) {
        ireq *j = s->head;
        worker_start(s->w, slot, j, j->next_choice++);
        if (j->next_choice == j->n_choices) { /* fully placed: the queue's reference goes */
            s->head = j->qnext;
            if (!s->head) s->tail = NULL;
            s->n_queued--;
            ireq_unref(j);
        }
    }
}

static void update_stats(scheduler *s) {
    s->stats.slots_busy = worker_busy(s->w);
    s->stats.waiting = s->n_queued;
    worker_publish(s->w);
}

static void *loop(void *arg) {
    scheduler *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->quit) {
        double t = now_s();
        if (s->cancel_all)
            for (ireq *j = s->head; j; j = j->qnext) ireq_cancel(j, s->cancel_all);
        drop_stopped_queued(s, t);
        stop_cancelled_running(s, t);
        assign_slots(s);
        update_stats(s);
        if (worker_busy(s->w) == 0) {
            pthread_cond_broadcast(&s->idle);
            pthread_cond_wait(&s->wake, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        worker_step(s->w);
        pthread_mutex_lock(&s->mu);
    }
    /* Quitting: whatever is left ends as a shutdown. */
    double t = now_s();
    while (s->head) {
        ireq *j = s->head;
        s->head = j->qnext;
        ireq_cancel(j, IREQ_END_SHUTDOWN);
        end_unstarted(j, IREQ_END_SHUTDOWN, t);
        ireq_unref(j);
    }
    s->tail = NULL;
    s->n_queued = 0;
    for (int i = 0; i < worker_n_slots(s->w); i++)
        if (worker_slot_job(s->w, i)) worker_stop(s->w, i, IREQ_END_SHUTDOWN);
    update_stats(s);
    pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

scheduler *sched_new(mnemo_model *model, const sched_config *cfg, metrics *mx, char *err, size_t errlen) {
    scheduler *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    worker_config wc = {.n_slots = cfg->parallel, .n_ctx = cfg->n_ctx, .batch = cfg->batch,
                        .cache_bytes = cfg->cache_bytes, .ctx = cfg->ctx};
    s->w = worker_new(model, &wc, mx, err, errlen);
    if (!s->w) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->mx = mx;
    s->accepting = true;
    s->queue_cap = cfg->queue;
    s->n_ctx = cfg->n_ctx;
    s->stats.slots_total = cfg->parallel;
    s->stats.kv_capacity = (int64_t)cfg->parallel * cfg->n_ctx;
    if (pthread_create(&s->thread, NULL, loop, s) != 0) {
        snprintf(err, errlen, "cannot start the scheduler thread");
        sched_free(s);
        return NULL;
    }
    s->started = true;
    return s;
}

sched_result sched_submit(scheduler *s, ireq *j) {
    pthread_mutex_lock(&s->mu);
    sched_result r = SCHED_OK;
    int idle = worker_n_slots(s->w) - s->stats.slots_busy;
    if (!s->accepting || s->quit) r = SCHED_STOPPING;
    else if (s->n_queued >= s->queue_cap + (idle > 0 ? idle : 0)) r = SCHED_FULL;
    if (r == SCHED_OK) {
        ireq_ref(j);
        j->qnext = NULL;
        j->next_choice = 0;
        if (s->tail) s->tail->qnext = j;
        else s->head = j;
        s->tail = j;
        s->n_queued++;
        s->stats.waiting = s->n_queued;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
    return r;
}

void sched_get_stats(scheduler *s, sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
    worker_gauges g;
    worker_gauges_get(s->w, &g); /* published by the worker, fresher than the scheduler's step */
    out->slots_busy = g.busy;
    out->kv_used = g.kv_used;
    out->kv_bytes = g.kv_bytes;
    out->memory = g.memory;
}

void sched_stop_accepting(scheduler *s) {
    pthread_mutex_lock(&s->mu);
    s->accepting = false;
    pthread_mutex_unlock(&s->mu);
}

bool sched_wait_idle(scheduler *s, double timeout_s) {
    double end = now_s() + timeout_s;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (!s->head && s->stats.slots_busy == 0) break;
        double left = end - now_s();
        if (left <= 0) break;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double wake = (double)until.tv_sec + until.tv_nsec * 1e-9 + (left < 0.05 ? left : 0.05);
        until.tv_sec = (time_t)wake;
        until.tv_nsec = (long)((wake - (double)until.tv_sec) * 1e9);
        pthread_cond_timedwait(&s->idle, &s->mu, &until);
    }
    bool idle = !s->head && s->stats.slots_busy == 0;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

void sched_cancel_all(scheduler *s, ireq_end why) {
    pthread_mutex_lock(&s->mu);
    s->cancel_all = why;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

void sched_free(scheduler *s) {
    if (!s) return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->quit = true;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    worker_free(s->w);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

