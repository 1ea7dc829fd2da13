/*
 * finetune_jobs_pg.h — fine-tuning jobs in the state database (--state postgresql://...), shared by every node:
 * the SQL side of finetune_jobs.c when it runs with a database.
 *
 * mnemo_jobs is the queue. A node claims the oldest job it may work on with SELECT ... FOR UPDATE SKIP LOCKED (two
 * nodes never claim one job, and neither waits for the other) and writes its name and a lease (now + --lease) into
 * the row; it renews the lease while it works. A job whose lease ran out (its node was killed, hung, or lost the
 * database) is claimed again by any node and resumes from the last checkpoint stored in the database. Every write
 * of a node about a job is conditional on holding its lease, so a node that lost it cannot overwrite the new owner.
 * Events and checkpoints are rows; a checkpoint's files (the trainer's out/ directory, dir_pack.h) are one blob
 * per job, replaced at each checkpoint; a succeeded job's adapter is stored once in mnemo_adapters under its
 * fine_tuned_model name, in the same transaction that marks the job succeeded.
 *
 * Functions return 0 on success, or -1 with e filled (404, 409, 429, 503 while the database is away, 500).
 */
#ifndef MNEMO_SERVER_FINETUNE_JOBS_PG_H
#define MNEMO_SERVER_FINETUNE_JOBS_PG_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "finetune_files.h"
#include "pg_pool.h"

typedef struct jpg jpg;

/* jobs_dir: this node's work directory (jobs/<id>/ for running jobs, adapters/<job id>/ for fetched adapters). */
jpg *jpg_new(pg_pool *pool, const char *node, double lease_s, const char *jobs_dir);
void jpg_free(jpg *p);

/* A new job: obj (the job object), settings (train.json), its first event; the training and validation files'
 * bytes are copied from mnemo_files inside the database. 404 for a file that does not exist, 429 past
 * max_pending jobs validating, queued or running. */
int jpg_create(jpg *p, json_t *obj, json_t *settings, const char *tf, const char *vf, int max_pending, json_t *event,
               api_error *e);

/* The queries of finetune_jobs.h; NULL with e (404 no such job, 503, 500). */
json_t *jpg_list(jpg *p, const char *after, int limit, api_error *e);
json_t *jpg_get(jpg *p, const char *id, api_error *e);
json_t *jpg_events(jpg *p, const char *id, const char *after, int limit, api_error *e);
json_t *jpg_events_since(jpg *p, const char *id, size_t *cursor, bool *finished, api_error *e);
json_t *jpg_checkpoints(jpg *p, const char *id, const char *after, int limit, api_error *e);
/* Marks the job cancelled (the node running it sees it at its next lease renewal and stops its worker). */
int jpg_cancel(jpg *p, const char *id, json_t **out, api_error *e);
/* The directory holding the adapter of fine_tuned_model `name`, fetched into the work directory on first use. */
int jpg_adapter_dir(jpg *p, const char *name, char *dir, size_t cap, api_error *e);
void jpg_models(jpg *p, json_t *arr, const char *base_name);
void jpg_stats(jpg *p, int by_status[6]);

/* ---- the supervisor's side */
typedef struct {
    char id[40];
    json_t *obj;       /* the job object (owned by the caller) */
    bool was_running;  /* claimed from a node whose lease ran out */
    char prev_node[128];
    int64_t ckpt_step; /* the checkpoint restored into out/, -1 when none */
} jpg_claimed;

/* Claims the oldest job waiting for validation (validating) or for a worker (else: queued, or running under an
 * expired lease), and lays out its directory (train.jsonl, valid.jsonl, train.json, out/ from the last checkpoint).
 * 1 with *c filled, 0 when there is none, -1 on failure. */
int jpg_claim(jpg *p, bool validating, jpg_claimed *c);
/* Writes the job's status and object (and train.json from its directory, when present) while this node holds its
 * lease; a status other than running or validating_files gives the lease up. After a cancel only "cancelled" is
 * written. false when the lease is no longer ours (or the database failed). */
bool jpg_persist(jpg *p, const char *id, const char *status, json_t *obj);
void jpg_event(jpg *p, const char *id, json_t *event);
/* Stores the trainer's out/ directory as the job's checkpoint at step, with its checkpoint object. */
bool jpg_checkpoint(jpg *p, const char *id, int64_t step, json_t *ckpt);
/* Renews the lease: false when it is no longer ours; *cancel when a cancel was asked. */
bool jpg_renew(jpg *p, const char *id, bool *cancel);
/* Succeeded: stores the adapter (out/ without train_state.mnemo) under name and writes obj (status succeeded),
 * in one transaction. */
bool jpg_finish(jpg *p, const char *id, const char *name, json_t *obj);
/* Gives a running job back to the queue (this node is stopping): another node resumes it at once. */
void jpg_release(jpg *p, const char *id, json_t *obj);

#endif
