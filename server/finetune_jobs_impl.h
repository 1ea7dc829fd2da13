/*
 * finetune_jobs_impl.h — what the files of the fine-tuning service share (internal to server/finetune_jobs*.c and
 * finetune_supervisor.c): a job's record, the service's state, and the helpers that keep a job's files (or its rows
 * in the state database) in step with its record.
 *
 *   finetune_jobs.c         the records: persistence, events, status changes; start and stop
 *   finetune_jobs_create.c  a job from a request: its settings checked and resolved, its files copied
 *   finetune_jobs_query.c   list, get, events, checkpoints, cancel, and the adapters of succeeded jobs
 *   finetune_supervisor.c   the thread that validates data, starts, watches and restarts the workers
 *   finetune_jobs_reload.c  the jobs a restarted server finds in <jobs-dir>/jobs
 */
#ifndef MNEMO_SERVER_FINETUNE_JOBS_IMPL_H
#define MNEMO_SERVER_FINETUNE_JOBS_IMPL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "finetune_jobs.h"
#include "finetune_jobs_pg.h"

enum { ST_VALIDATING, ST_QUEUED, ST_RUNNING, ST_SUCCEEDED, ST_FAILED, ST_CANCELLED, ST_COUNT };
static const char *const STATUS[ST_COUNT] = {"validating_files", "queued",  "running",
                                             "succeeded",        "failed",  "cancelled"};
#define MAX_RESTARTS 3

typedef struct {
    char id[40];
    json_t *obj;        /* the OpenAI job object (what GET returns), persisted as job.json */
    int status;
    json_t *events;     /* array, oldest first */
    json_t *checkpoints;
    pid_t pid;          /* running worker, 0 when none */
    int out_fd;         /* its stdout (pipe), -1 when none */
    char line[4096];    /* a partial line read from the pipe */
    size_t line_len;
    int restarts;
    bool cancel;        /* cancel asked: the worker was sent SIGTERM */
    bool lost;          /* with the state database: another node holds the job's lease now */
    mnemo_adapter *adapter; /* succeeded: loaded on first use */
    double tokens_per_s;
} ft_job;

struct ft_jobs {
    ft_jobs_config cfg;
    char *jobs_dir, *model_dir, *base_name, *self_exe;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ft_job **jobs;      /* creation order */
    size_t n, cap;
    bool stop;
    pthread_t thread;
    long long steps;
    double tokens_per_s;
    long long adapters_loaded;
    jpg *pg;            /* the state database (NULL: jobs-dir only); jobs[] holds the jobs this node works on */
    struct { char name[512]; mnemo_adapter *a; } *adapters; /* with pg: fine-tuned models loaded here */
    size_t n_adapters;
    double renewed_at;  /* with pg: when the leases were last renewed (monotonic seconds) */
    double polled_at;   /* with pg: when the queue was last looked at */
};

/* Why this thread's last query found nothing (ft_jobs_last_error). */
extern _Thread_local api_error jobs_last_error;
/* jobs_last_error := 404 job_not_found for id. */
void job_not_found(const char *id);

/* <jobs-dir>/jobs/<id>[/name]. */
void job_path(const ft_jobs *J, const ft_job *j, const char *name, char *out, size_t cap);
/* Writes obj to path through path.tmp + rename. 0, or -1. */
int write_json_atomic(const char *path, json_t *obj);
long long now_unix(void);
/* An event (OpenAI's fine_tuning.job.event); data may be NULL; stolen. */
json_t *job_event_json(const ft_job *j, const char *level, const char *type, json_t *data, const char *msg);
/* Appends an event to memory and events.jsonl (or the state database). data may be NULL; stolen. */
void job_add_event(ft_jobs *J, ft_job *j, const char *level, const char *type, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Sets and persists the status; wakes the waiters. */
void job_set_status(ft_jobs *J, ft_job *j, int st);
/* The job fails with an error object {code, message} and an event. */
void job_fail(ft_jobs *J, ft_job *j, const char *code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
ft_job *job_find(ft_jobs *J, const char *id);
int jobs_add(ft_jobs *J, ft_job *j);
ft_job *job_new(void);
void job_free(ft_job *j);

/* o[key] when it is a string, else dflt. */
const char *json_str_or(json_t *o, const char *key, const char *dflt);

/* finetune_jobs_create.c: what n_epochs "auto" becomes for a number of examples, the hyperparameters as the job
 * object shows them, and setting them on the job. */
double auto_epochs(int64_t examples);
json_t *hp_echo(json_t *settings, json_t *n_epochs);
void set_hyperparameters(ft_job *j, json_t *hp);

/* finetune_supervisor.c: the supervisor thread's body (arg: the ft_jobs). */
void *ft_supervise(void *arg);
/* finetune_jobs_reload.c: loads the jobs kept in <jobs-dir>/jobs, re-queueing those that were queued or running. */
void jobs_reload(ft_jobs *J);

#endif
