/*
 * infer_request.h — one inference request as the scheduler runs it, shared by two threads:
 *   the HTTP connection thread that built it (submits it, then consumes its events: streams or aggregates them),
 *   the scheduler thread that runs its choices on slots and appends events.
 *
 * A request has n_choices sequences (prompts x n); each runs on its own slot and produces token events followed by
 * one END event. The consumer takes events in batches (ireq_take_events blocks until there are some), so the
 * scheduler never waits for a slow client. Lifetime: reference counted, one reference per side.
 *
 * Cancellation: either side calls ireq_cancel (client gone, time limit, shutdown, engine error); the scheduler
 * frees the request's slots at its next step. Liveness: the request keeps a dup() of the client socket and ireq_client_gone
 * peeks at it, so a client that hangs up is noticed within one step even when nothing is being written to it
 * (a non-streaming request); the dup keeps the descriptor number from being reused while the request lives.
 */
#ifndef MNEMO_SERVER_INFER_REQUEST_H
#define MNEMO_SERVER_INFER_REQUEST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine.h"
#include "sessions.h"

typedef enum {
    IREQ_END_OK = 0,        /* finished normally (finish reason says how) */
    IREQ_END_CLIENT_GONE,   /* the client disconnected */
    IREQ_END_TIMEOUT,       /* the per-request time limit passed */
    IREQ_END_SHUTDOWN,      /* the server stopped before the request finished */
    IREQ_END_ERROR,         /* the engine failed; message in the request */
} ireq_end;

/* PROGRESS: prompt tokens decoded so far (token = done, n_top unused, logprob unused; total in the choice). */
typedef enum { IREQ_EV_TOKEN = 0, IREQ_EV_END = 1, IREQ_EV_PROGRESS = 2 } ireq_event_kind;

typedef struct {
    ireq_event_kind kind;
    int choice;
    mnemo_token token;
    int32_t done, total;   /* PROGRESS */
    double elapsed_ms;     /* PROGRESS: since the choice reached its slot */
    char *text;            /* malloc'd (may be NULL when empty) */
    size_t text_len;
    float logprob;
    int n_top;
    mnemo_token_logprob top[MNEMO_MAX_LOGPROBS];
} ireq_event;

typedef struct {
    mnemo_token *prompt;   /* BOS included */
    int32_t n_prompt;
    int prompt_index;      /* which request prompt this choice continues (usage counts each prompt once) */
    uint64_t seed;
    /* Results, written by the scheduler before the END event (published by the request's lock). */
    bool started;          /* it reached a slot */
    ireq_end end;
    mnemo_finish_reason finish;
    int32_t n_generated;
    int32_t n_fed;         /* prompt tokens decoded before it ended (cached ones included) */
    int32_t n_cached;      /* of those, tokens its slot already held (prefix reuse): not decoded again */
    double queue_ms, prefill_ms, decode_ms;
} ireq_choice;

typedef struct ireq ireq;
struct ireq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    mnemo_generate_params gp;  /* gp.stop points into stop[] */
    char **stop;
    int n_stop;
    int n_choices;
    ireq_choice *choices;
    ireq_event *ev;             /* events not yet taken by the consumer */
    size_t n_ev, cap_ev;
    int n_done;                /* choices that have ended */
    atomic_int cancel;         /* 0, or the ireq_end reason it was cancelled for */
    char error[256];           /* IREQ_END_ERROR's message */
    bool error_full;           /* that error: the prompt did not fit the context (UIO: only the engine can tell) */
    bool progress;             /* send PROGRESS events while the prompt is decoded */
    /* A session's request (one choice) runs on the session's context instead of a fresh one; the session is given
     * back (sessions_release) when the choice ends, before the consumer hears of it. */
    session_store *sessions;
    session *session;
    int fd;                    /* dup of the client socket, -1 when none */
    const mnemo_adapter *adapter; /* a fine-tuned model's adapter over the base weights; NULL: the base model */
    double t_arrival, deadline; /* now_s() clock; deadline 0 = none */
    /* Scheduler-private. */
    int next_choice;           /* first choice not yet on a slot */
    ireq *qnext;
};

/* A request of n choices with everything zeroed, one reference, fd -1. NULL when out of memory. */
ireq *ireq_new(int n_choices);
void ireq_ref(ireq *j);
void ireq_unref(ireq *j);
/* Keep a dup of the client's socket for liveness checks (fd < 0: none). */
void ireq_watch_fd(ireq *j, int fd);
/* True when the client has closed its side (EOF or a socket error). Never blocks. */
bool ireq_client_gone(ireq *j);
/* Ask for the request to stop; the first reason wins. Wakes the consumer. */
void ireq_cancel(ireq *j, ireq_end why);
ireq_end ireq_cancelled(ireq *j);

/* Scheduler side. Returns -1 when out of memory (the caller cancels the request). */
int ireq_push_token(ireq *j, int choice, const mnemo_token_event *ev);
int ireq_push_progress(ireq *j, int choice, int32_t done, int32_t total, double elapsed_ms);
/* Records a choice's outcome and appends its END event (and gives the request's session back). */
void ireq_end_choice(ireq *j, int choice, ireq_end end, mnemo_finish_reason finish, int32_t n_generated,
                    double queue_ms, double prefill_ms, double decode_ms, const char *error);

/* Consumer side: waits up to wait_s for events (or for every choice to have ended) and moves the pending events
 * into *out (free with ireq_events_free). *all_done tells whether every choice has ended and been taken. */
size_t ireq_take_events(ireq *j, double wait_s, ireq_event **out, bool *all_done);
void ireq_events_free(ireq_event *ev, size_t n);

#endif
