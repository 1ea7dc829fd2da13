/*
 * state.h — where a node keeps what users build up (sessions' snapshots, uploaded files, fine-tuning jobs and their
 * adapters), chosen once at start by --state:
 *   local                  directories of this machine (--session-dir, --jobs-dir): the single-machine default,
 *                          no database needed;
 *   postgresql://... (or any libpq conninfo)
 *                          one PostgreSQL database shared by several nodes behind a load balancer: a session saved
 *                          on one node restores on another, a job queued on one is trained by whichever node claims
 *                          it, an adapter is stored once and served by every node (snapshot_store_pg.c,
 *                          finetune_files_pg.c, finetune_jobs_pg.c). Each node still has a work directory of its own
 *                          (--jobs-dir, or a temporary one removed at exit) for caches and running workers.
 * state_open connects (waiting up to --state-wait seconds for a database that is not up yet), creates or migrates the
 * schema (pg_schema.h), and picks the node's name (--node-id, else host name and pid) used for job leases.
 */
#ifndef MNEMO_SERVER_STATE_H
#define MNEMO_SERVER_STATE_H

#include <stdbool.h>
#include <stddef.h>

#include "args.h"
#include "pg_pool.h"

typedef struct {
    pg_pool *pg;            /* NULL: local state */
    char work_dir[4096];    /* postgres: this node's caches and running jobs */
    bool work_dir_temp;     /* made by state_open, removed by state_close */
    char node[128];         /* postgres: this node's name in leases and rows */
    char desc[512];         /* one line for the log: where the state is */
} state_backend;

/* 0, or -1 with a message (the database cannot be reached, refused the login, or has a newer schema). */
int state_open(state_backend *s, const server_opts *o, char *err, size_t errlen);
void state_close(state_backend *s);

#endif
