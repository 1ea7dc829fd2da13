/*
 * infer_request.c — the shared request object (see infer_request.h).
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include "infer_request.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

ireq *ireq_new(int n_choices) {
    ireq *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->choices = calloc((size_t)(n_choices > 0 ? n_choices : 1), sizeof *j->choices);
    if (!j->choices) {
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->n_choices = n_choices;
    j->refs = 1;
    j->fd = -1;
    return j;
}

void ireq_ref(ireq *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void ireq_unref(ireq *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    ireq_events_free(j->ev, j->n_ev);
    for (int i = 0; i < j->n_choices; i++) free(j->choices[i].prompt);
    free(j->choices);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->stop);
    if (j->fd >= 0) close(j->fd);
    if (j->session) sessions_release(j->sessions, j->session, "the request ended before it ran");
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void ireq_watch_fd(ireq *j, int fd) {
    if (fd >= 0) j->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
}

bool ireq_client_gone(ireq *j) {
    if (j->fd < 0) return false;
    struct pollfd p = {.fd = j->fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL | POLLRDHUP)) return true;
    char c;
    ssize_t n = recv(j->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void ireq_cancel(ireq *j, ireq_end why) {
    int expected = 0;
    atomic_compare_exchange_strong(&j->cancel, &expected, (int)why);
    pthread_mutex_lock(&j->mu);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

ireq_end ireq_cancelled(ireq *j) { return (ireq_end)atomic_load(&j->cancel); }

static ireq_event *next_event(ireq *j) {
    if (j->n_ev == j->cap_ev) {
        size_t cap = j->cap_ev ? j->cap_ev * 2 : 16;
        ireq_event *p = realloc(j->ev, cap * sizeof *p);
        if (!p) return NULL;
        j->ev = p;
        j->cap_ev = cap;
    }
    ireq_event *e = &j->ev[j->n_ev];
    memset(e, 0, offsetof(ireq_event, top));
    return e;
}

int ireq_push_token(ireq *j, int choice, const mnemo_token_event *ev) {
    char *text = NULL;
    if (ev->text_len) {
        if (!(text = malloc(ev->text_len))) return -1;
        memcpy(text, ev->text, ev->text_len);
    }
    pthread_mutex_lock(&j->mu);
    ireq_event *e = next_event(j);
    if (!e) {
        pthread_mutex_unlock(&j->mu);
        free(text);
        return -1;
    }
    e->kind = IREQ_EV_TOKEN;
    e->choice = choice;
    e->token = ev->token;
    e->text = text;
    e->text_len = ev->text_len;
    e->logprob = ev->logprob;
    e->n_top = ev->n_top < MNEMO_MAX_LOGPROBS ? ev->n_top : MNEMO_MAX_LOGPROBS;
    if (e->n_top > 0) memcpy(e->top, ev->top, (size_t)e->n_top * sizeof *e->top);
    j->n_ev++;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return 0;
}

int ireq_push_progress(ireq *j, int choice, int32_t done, int32_t total, double elapsed_ms) {
    pthread_mutex_lock(&j->mu);
    ireq_event *e = next_event(j);
    if (e) {
        e->kind = IREQ_EV_PROGRESS;
        e->choice = choice;
        e->token = -1;
        e->done = done;
        e->total = total;
        e->elapsed_ms = elapsed_ms;
        j->n_ev++;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    return e ? 0 : -1;
}

static const char *end_name(ireq_end e) {
    static const char *names[] = {"finished", "client disconnected", "time limit", "server shutdown", "error"};
    return names[e];
}

void ireq_end_choice(ireq *j, int choice, ireq_end end, mnemo_finish_reason finish, int32_t n_generated,
                    double queue_ms, double prefill_ms, double decode_ms, const char *error) {
    pthread_mutex_lock(&j->mu);
    ireq_choice *c = &j->choices[choice];
    c->end = end;
    c->finish = finish;
    c->n_generated = n_generated;
    c->queue_ms = queue_ms;
    c->prefill_ms = prefill_ms;
    c->decode_ms = decode_ms;
    if (end == IREQ_END_ERROR && error && !j->error[0]) snprintf(j->error, sizeof j->error, "%s", error);
    ireq_event *e = next_event(j);
    if (e) { /* out of memory: the consumer still sees n_done reach n_choices */
        e->kind = IREQ_EV_END;
        e->choice = choice;
        e->token = -1;
        j->n_ev++;
    }
    j->n_done++;
    if (j->session && j->n_done == j->n_choices) { /* before the consumer wakes: its next request finds it free */
        char why[256] = "";
        if (end != IREQ_END_OK)
            snprintf(why, sizeof why, "%s after %d of %d prompt tokens and %d generated (the session holds what was decoded)%s%s",
                     end_name(end), c->n_fed, c->n_prompt, n_generated, error ? ": " : "", error ? error : "");
        sessions_release(j->sessions, j->session, end != IREQ_END_OK ? why : NULL);
        j->session = NULL;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

size_t ireq_take_events(ireq *j, double wait_s, ireq_event **out, bool *all_done) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long long ns = (long long)until.tv_nsec + (long long)(wait_s * 1e9);
    until.tv_sec += (time_t)(ns / 1000000000LL);
    until.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&j->mu);
    while (j->n_ev == 0 && j->n_done < j->n_choices) {
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT) break;
    }
    size_t n = j->n_ev;
    *out = j->ev;
    j->ev = NULL;
    j->n_ev = j->cap_ev = 0;
    *all_done = j->n_done >= j->n_choices;
    pthread_mutex_unlock(&j->mu);
    return n;
}

void ireq_events_free(ireq_event *ev, size_t n) {
    for (size_t i = 0; i < n; i++) free(ev[i].text);
    free(ev);
}
