/*
 * job.h — one inference request as the scheduler runs it, shared by two threads:
 *   the HTTP connection thread that built it (submits it, then consumes its events: streams or aggregates them),
 *   the scheduler thread that runs its choices on slots and appends events.
 *
 * A job has n_choices sequences (prompts x n); each runs on its own slot and produces token events followed by
 * one END event. The consumer takes events in batches (job_take_events blocks until there are some), so the
 * scheduler never waits for a slow client. Lifetime: reference counted, one reference per side.
 *
 * Cancellation: either side calls job_cancel (client gone, time limit, shutdown, engine error); the scheduler
 * frees the job's slots at its next step. Liveness: the job keeps a dup() of the client socket and job_client_gone
 * peeks at it, so a client that hangs up is noticed within one step even when nothing is being written to it
 * (a non-streaming request); the dup keeps the descriptor number from being reused while the job lives.
 */
#ifndef MNEMO_SERVER_JOB_H
#define MNEMO_SERVER_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine.h"
#include "sessions.h"

typedef enum {
    JOB_END_OK = 0,        /* finished normally (finish reason says how) */
    JOB_END_CLIENT_GONE,   /* the client disconnected */
    JOB_END_TIMEOUT,       /* the per-request time limit passed */
    JOB_END_SHUTDOWN,      /* the server stopped before the request finished */
    JOB_END_ERROR,         /* the engine failed; message in the job */
} job_end;

/* PROGRESS: prompt tokens decoded so far (token = done, n_top unused, logprob unused; total in the choice). */
typedef enum { JOB_EV_TOKEN = 0, JOB_EV_END = 1, JOB_EV_PROGRESS = 2 } job_event_kind;

typedef struct {
    job_event_kind kind;
    int choice;
    mnemo_token token;
    int32_t done, total;   /* PROGRESS */
    double elapsed_ms;     /* PROGRESS: since the choice reached its slot */
    char *text;            /* malloc'd (may be NULL when empty) */
    size_t text_len;
    float logprob;
    int n_top;
    mnemo_token_logprob top[MNEMO_MAX_LOGPROBS];
} job_event;

typedef struct {
    mnemo_token *prompt;   /* BOS included */
    int32_t n_prompt;
    int prompt_index;      /* which request prompt this choice continues (usage counts each prompt once) */
    uint64_t seed;
    /* Results, written by the scheduler before the END event (published by the job's lock). */
    bool started;          /* it reached a slot */
    job_end end;
    mnemo_finish_reason finish;
    int32_t n_generated;
    int32_t n_fed;         /* prompt tokens decoded before it ended */
    double queue_ms, prefill_ms, decode_ms;
} job_choice;

typedef struct job job;
struct job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    mnemo_generate_params gp;  /* gp.stop points into stop[] */
    char **stop;
    int n_stop;
    int n_choices;
    job_choice *choices;
    job_event *ev;             /* events not yet taken by the consumer */
    size_t n_ev, cap_ev;
    int n_done;                /* choices that have ended */
    atomic_int cancel;         /* 0, or the job_end reason it was cancelled for */
    char error[256];           /* JOB_END_ERROR's message */
    bool progress;             /* send PROGRESS events while the prompt is decoded */
    /* A session's job (one choice) runs on the session's context instead of a fresh one; the session is given
     * back (sessions_release) when the choice ends, before the consumer hears of it. */
    session_store *sessions;
    session *session;
    int fd;                    /* dup of the client socket, -1 when none */
    double t_arrival, deadline; /* now_s() clock; deadline 0 = none */
    /* Scheduler-private. */
    int next_choice;           /* first choice not yet on a slot */
    job *qnext;
};

/* A job of n choices with everything zeroed, one reference, fd -1. NULL when out of memory. */
job *job_new(int n_choices);
void job_ref(job *j);
void job_unref(job *j);
/* Keep a dup of the client's socket for liveness checks (fd < 0: none). */
void job_watch_fd(job *j, int fd);
/* True when the client has closed its side (EOF or a socket error). Never blocks. */
bool job_client_gone(job *j);
/* Ask for the job to stop; the first reason wins. Wakes the consumer. */
void job_cancel(job *j, job_end why);
job_end job_cancelled(job *j);

/* Scheduler side. Returns -1 when out of memory (the caller cancels the job). */
int job_push_token(job *j, int choice, const mnemo_token_event *ev);
int job_push_progress(job *j, int choice, int32_t done, int32_t total, double elapsed_ms);
/* Records a choice's outcome and appends its END event (and gives the job's session back). */
void job_end_choice(job *j, int choice, job_end end, mnemo_finish_reason finish, int32_t n_generated,
                    double queue_ms, double prefill_ms, double decode_ms, const char *error);

/* Consumer side: waits up to wait_s for events (or for every choice to have ended) and moves the pending events
 * into *out (free with job_events_free). *all_done tells whether every choice has ended and been taken. */
size_t job_take_events(job *j, double wait_s, job_event **out, bool *all_done);
void job_events_free(job_event *ev, size_t n);

#endif
