/*
 * pg_schema.c — see pg_schema.h. Each migration is the SQL that takes the schema from version i to i + 1; append new
 * ones, never edit a released one.
 *
 * Version 1: chunked blobs (every byte stored: snapshots, uploaded files, job data, checkpoints, adapters), the
 * snapshots with their version (compare-and-swap) and CRC-32, files, jobs (the queue: status, lease), their events
 * and checkpoints, and adapters (one row per fine-tuned model name).
 */
#include "pg_schema.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const MIGRATIONS[] = {
    /* 0 -> 1 */
    "CREATE SEQUENCE mnemo_blob_ids;"
    "CREATE TABLE mnemo_blob_chunks (blob bigint NOT NULL, seq int NOT NULL, data bytea NOT NULL,"
    "  PRIMARY KEY (blob, seq));"
    /* snapshot and adapter bytes (floats) barely compress: stored out of line as they are, no pglz pass */
    "ALTER TABLE mnemo_blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;"
    "CREATE TABLE mnemo_snapshots (name text PRIMARY KEY, version bigint NOT NULL, blob bigint NOT NULL,"
    "  bytes bigint NOT NULL, crc32 bigint NOT NULL, modified bigint NOT NULL, saved_by text NOT NULL);"
    "CREATE TABLE mnemo_files (seq bigserial, id text PRIMARY KEY, created_at bigint NOT NULL, purpose text NOT NULL,"
    "  obj jsonb NOT NULL, blob bigint NOT NULL);"
    "CREATE TABLE mnemo_jobs (id text PRIMARY KEY, created_at bigint NOT NULL, status text NOT NULL,"
    "  obj jsonb NOT NULL, settings jsonb NOT NULL, train_blob bigint NOT NULL, valid_blob bigint,"
    "  ckpt_blob bigint, ckpt_step bigint, lease_owner text, lease_until timestamptz,"
    "  restarts int NOT NULL DEFAULT 0, cancel boolean NOT NULL DEFAULT false);"
    "CREATE INDEX mnemo_jobs_queue ON mnemo_jobs (status, created_at);"
    "CREATE TABLE mnemo_job_events (seq bigserial PRIMARY KEY, job_id text NOT NULL, ev jsonb NOT NULL);"
    "CREATE INDEX mnemo_job_events_job ON mnemo_job_events (job_id, seq);"
    "CREATE TABLE mnemo_job_checkpoints (seq bigserial PRIMARY KEY, job_id text NOT NULL, obj jsonb NOT NULL);"
    "CREATE INDEX mnemo_job_checkpoints_job ON mnemo_job_checkpoints (job_id, seq);"
    "CREATE TABLE mnemo_adapters (name text PRIMARY KEY, job_id text NOT NULL UNIQUE, blob bigint NOT NULL,"
    "  created_at bigint NOT NULL);",
};
#define N_MIGRATIONS ((int)(sizeof MIGRATIONS / sizeof *MIGRATIONS))

int pg_schema_version(void) { return N_MIGRATIONS; }

typedef struct {
    int from;
} migrate_arg;

static pg_rc migrate(PGconn *c, void *arg, char *err, size_t errlen) {
    migrate_arg *a = arg;
    pg_rc rc = pg_simple(c, "BEGIN", err, errlen);
    if (rc == PG_OK) rc = pg_simple(c, "SELECT pg_advisory_xact_lock(7366324461)", err, errlen); /* "mnemo" */
    if (rc == PG_OK) rc = pg_simple(c, "CREATE TABLE IF NOT EXISTS mnemo_schema (version int NOT NULL)", err, errlen);
    PGresult *r = rc == PG_OK ? pg_exec(c, "SELECT version FROM mnemo_schema", 0, NULL, NULL, NULL, 0, err, errlen)
                              : NULL;
    if (rc == PG_OK && !r) rc = pg_last_failure();
    int v = 0;
    if (r && PQntuples(r) > 0) v = atoi(PQgetvalue(r, 0, 0));
    bool had_row = r && PQntuples(r) > 0;
    PQclear(r);
    a->from = v;
    if (rc == PG_OK && v > N_MIGRATIONS) {
        snprintf(err, errlen, "the database's schema is at version %d, newer than this mnemo-server knows (%d): "
                 "upgrade this node", v, N_MIGRATIONS);
        rc = PG_ERROR;
    }
    for (int i = v; rc == PG_OK && i < N_MIGRATIONS; i++) rc = pg_simple(c, MIGRATIONS[i], err, errlen);
    if (rc == PG_OK && v < N_MIGRATIONS) {
        char sql[96];
        snprintf(sql, sizeof sql,
                 had_row ? "UPDATE mnemo_schema SET version = %d" : "INSERT INTO mnemo_schema VALUES (%d)", N_MIGRATIONS);
        rc = pg_simple(c, sql, err, errlen);
    }
    if (rc == PG_OK) rc = pg_simple(c, "COMMIT", err, errlen);
    return rc; /* on failure the pool rolls the transaction back */
}

pg_rc pg_schema_migrate(pg_pool *p, int *from_version, char *err, size_t errlen) {
    migrate_arg a = {0};
    pg_rc rc = pg_run(p, migrate, &a, err, errlen);
    *from_version = a.from;
    return rc;
}
