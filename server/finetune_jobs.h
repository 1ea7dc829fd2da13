/*
 * finetune_jobs.h — OpenAI-shaped fine-tuning jobs run by supervised worker processes, and the adapters they make.
 *
 * A job lives in <jobs-dir>/jobs/<id>/: job.json (the job object, rewritten through a temp file at every change),
 * events.jsonl (appended), train.jsonl (a copy of the training file taken at creation, so deleting the upload
 * never breaks a job), out/ (the trainer's output: the peft adapter and train_state.mnemo).
 *
 * Statuses: validating_files (the data is read with the model's tokenizer: a bad line or an example longer than
 * seq_len fails the job naming the line) -> queued -> running -> succeeded | failed | cancelled. A supervisor thread
 * starts at most max_jobs workers at once: each is this same executable re-run as `--finetune-worker <job dir>`, a
 * fresh process with its own thread budget, so training never runs on the HTTP or scheduler threads and a crash in
 * it cannot take inference down. The worker writes one JSON line per step on a pipe; the supervisor turns them into
 * events. A worker that dies (SIGKILL, OOM) is restarted and resumes from its last checkpoint (up to 3 times); a
 * server restart re-queues the jobs that were queued or running, and those resume from their checkpoints.
 *
 * A succeeded job's fine_tuned_model ("ft:<base>:<suffix>:<job id>") is served by name: its adapter is loaded on
 * first use (mnemo_adapter_load over the shared base weights) and kept; ft_jobs_adapter finds it.
 *
 * With the state database (cfg.pg) the jobs, their events, checkpoints and adapters are rows shared by every node:
 * any node takes requests about any job; a node whose --max-jobs allows claims queued jobs (and jobs whose node
 * stopped renewing its lease) and runs them in its own work directory as above, storing each checkpoint in the
 * database so that another node resumes from it; a succeeded job's adapter is stored once and every node serves it.
 * Queries that find nothing because the database is away return NULL with ft_jobs_last_error() saying 503.
 */
#ifndef MNEMO_SERVER_FINETUNE_JOBS_H
#define MNEMO_SERVER_FINETUNE_JOBS_H

#include <jansson.h>
#include <stdbool.h>

#include "engine.h"
#include "finetune_files.h"

typedef struct ft_jobs ft_jobs;

typedef struct {
    const char *jobs_dir;
    const char *model_dir;   /* the served base model's directory (workers load it themselves) */
    const char *base_name;   /* the served model's name (alias) */
    const char *self_exe;    /* this executable, re-run as the worker */
    int max_jobs, max_pending, train_threads;
    const char *train_device; /* "cpu" or "cuda": where each worker trains */
    mnemo_model *model;      /* the served model: tokenizer for validation, base for adapters */
    ft_files *files;
    struct pg_pool *pg;      /* --state postgresql: the jobs are rows shared by every node (finetune_jobs_pg.h);
                              * jobs_dir is then this node's work directory */
    const char *node;        /* with pg: this node's name in leases */
    double lease_s;          /* with pg: how long a claimed job stays this node's without a renewal */
} ft_jobs_config;

/* Loads the jobs found in jobs_dir (re-queueing unfinished ones) and starts the supervisor. NULL on failure. */
ft_jobs *ft_jobs_start(const ft_jobs_config *cfg, char *err, size_t errlen);
/* Stops the supervisor; running workers get SIGTERM (they checkpoint and exit) and their jobs stay "running" on disk,
 * so the next start resumes them. */
void ft_jobs_stop(ft_jobs *j);

/* POST /v1/fine_tuning/jobs: body as the OpenAI API takes it. 0 with *out (the job object), or -1 with e. */
int ft_jobs_create(ft_jobs *j, json_t *body, json_t **out, api_error *e);
json_t *ft_jobs_list(ft_jobs *j, const char *after, int limit);
json_t *ft_jobs_get(ft_jobs *j, const char *id);                       /* NULL: no such job */
/* Events newest first after the event id `after` (NULL: from the newest), at most limit. NULL: no such job. */
json_t *ft_jobs_events(ft_jobs *j, const char *id, const char *after, int limit);
/* Events oldest first from index *cursor on (advanced); *finished when the job reached a final status. NULL: no job. */
json_t *ft_jobs_events_since(ft_jobs *j, const char *id, size_t *cursor, bool *finished);
json_t *ft_jobs_checkpoints(ft_jobs *j, const char *id, const char *after, int limit);
/* Why this thread's last query above returned NULL: 404 (no such job) or 503 / 500 (the state database). */
const api_error *ft_jobs_last_error(void);
/* 0 with *out (the job object), -1 with e (404, or 409 for a finished job). */
int ft_jobs_cancel(ft_jobs *j, const char *id, json_t **out, api_error *e);

/* The adapter of a succeeded job's fine_tuned_model (loaded on first use). NULL with e: 404 for an unknown name,
 * 500 for an adapter that cannot be loaded. */
const mnemo_adapter *ft_jobs_adapter(ft_jobs *j, const char *model_name, api_error *e);
/* The fine_tuned_model names of succeeded jobs, as /v1/models objects (appended to arr). */
void ft_jobs_models(ft_jobs *j, json_t *arr, long long created);
/* For /metrics and /props: jobs by status, and the last reported training speed. */
typedef struct {
    int by_status[6]; /* validating_files, queued, running, succeeded, failed, cancelled */
    double tokens_per_s;
    long long steps, adapters_loaded;
} ft_jobs_stats;
void ft_jobs_get_stats(ft_jobs *j, ft_jobs_stats *out);

/* The worker's entry (main.c, `--finetune-worker DIR --threads N --device cpu|cuda`): trains the job in DIR, on
 * the GPU when cuda. Exit status for main. */
int ft_worker_main(const char *job_dir, int threads, bool cuda);

#endif
