/*
 * pg_pool.c — see pg_pool.h. Slots hold a connection or NULL (not opened yet, or dropped); connecting happens
 * outside the lock so a database that takes its time to answer never blocks threads that hold a connection.
 */
#include "pg_pool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    PGconn *c;
    bool busy;
} pg_slot;

struct pg_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *conninfo;
    pg_slot *slots;
    int size;
};

static _Thread_local pg_rc last_failure = PG_OK;

pg_rc pg_last_failure(void) { return last_failure; }

static void quiet_notice(void *arg, const char *msg) { (void)arg, (void)msg; } /* "already exists, skipping" */

/* One line: libpq's messages end with a newline, sometimes two lines (FATAL + DETAIL). */
static void one_line(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ')) s[--n] = 0;
    for (char *p = s; *p; p++)
        if (*p == '\n') *p = ' ';
}

static PGconn *connect_one(const char *conninfo, char *err, size_t errlen) {
    /* a default connect_timeout, so an unreachable host fails in seconds, not at the TCP timeout; the conninfo's
     * own connect_timeout (expanded after it) wins */
    const char *const keys[] = {"connect_timeout", "dbname", NULL};
    const char *const vals[] = {"5", conninfo, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (c && PQstatus(c) == CONNECTION_OK) {
        PQsetNoticeProcessor(c, quiet_notice, NULL);
        return c;
    }
    snprintf(err, errlen, "%s", c ? PQerrorMessage(c) : "out of memory");
    one_line(err);
    PQfinish(c);
    return NULL;
}

pg_pool *pg_pool_open(const char *conninfo, int size, double wait_s, char *err, size_t errlen) {
    if (size < 1) size = 1;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    PGconn *first;
    for (;;) {
        first = connect_one(conninfo, err, errlen);
        clock_gettime(CLOCK_MONOTONIC, &t);
        double waited = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9;
        if (first || waited >= wait_s) break;
        usleep(250 * 1000);
    }
    if (!first) return NULL;
    pg_pool *p = calloc(1, sizeof *p);
    if (p) p->slots = calloc((size_t)size, sizeof *p->slots);
    if (p) p->conninfo = strdup(conninfo);
    if (!p || !p->slots || !p->conninfo) {
        if (p) free(p->slots), free(p->conninfo);
        free(p);
        PQfinish(first);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->size = size;
    p->slots[0].c = first;
    return p;
}

void pg_pool_close(pg_pool *p) {
    if (!p) return;
    for (int i = 0; i < p->size; i++) PQfinish(p->slots[i].c);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->slots);
    free(p->conninfo);
    free(p);
}

/* A slot index with a connection, or -1 with err (the database cannot be reached). *reused: it was idle in the
 * pool (and may have been dropped by the database since). */
static int acquire(pg_pool *p, bool *reused, char *err, size_t errlen) {
    pthread_mutex_lock(&p->mu);
    for (;;) {
        int empty = -1;
        for (int i = 0; i < p->size; i++) {
            if (p->slots[i].busy) continue;
            if (p->slots[i].c) {
                p->slots[i].busy = true;
                pthread_mutex_unlock(&p->mu);
                *reused = true;
                return i;
            }
            if (empty < 0) empty = i;
        }
        if (empty >= 0) {
            p->slots[empty].busy = true;
            pthread_mutex_unlock(&p->mu);
            PGconn *c = connect_one(p->conninfo, err, errlen);
            pthread_mutex_lock(&p->mu);
            p->slots[empty].c = c;
            if (!c) {
                p->slots[empty].busy = false;
                pthread_cond_signal(&p->cv);
                pthread_mutex_unlock(&p->mu);
                return -1;
            }
            pthread_mutex_unlock(&p->mu);
            *reused = false;
            return empty;
        }
        pthread_cond_wait(&p->cv, &p->mu);
    }
}

/* Back to the pool; a connection that is broken or still inside a transaction it cannot leave is closed. */
static void release(pg_pool *p, int i) {
    PGconn *c = p->slots[i].c;
    if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) != PQTRANS_IDLE) {
        PGresult *r = PQexec(c, "ROLLBACK");
        PQclear(r);
    }
    bool drop = PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) != PQTRANS_IDLE;
    pthread_mutex_lock(&p->mu);
    if (drop) {
        PQfinish(c);
        p->slots[i].c = NULL;
    }
    p->slots[i].busy = false;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

pg_rc pg_run(pg_pool *p, pg_work work, void *arg, char *err, size_t errlen) {
    for (int attempt = 0;; attempt++) {
        bool reused = false;
        int i = acquire(p, &reused, err, errlen);
        if (i < 0) return PG_UNAVAILABLE;
        PGconn *c = p->slots[i].c;
        pg_rc rc = work(c, arg, err, errlen);
        bool lost = rc == PG_UNAVAILABLE && PQstatus(c) != CONNECTION_OK;
        release(p, i);
        /* a connection that sat idle may have died with a database restart: nothing of this unit was committed
         * (it failed on its first statement to reach the server), so once more on a new connection */
        if (!(lost && reused && attempt == 0)) return rc;
    }
}

/* r (cleared) failed: records its pg_rc for pg_last_failure and writes its message into err. */
static void failed(PGconn *c, PGresult *r, char *err, size_t errlen) {
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (PQstatus(c) != CONNECTION_OK || !state) last_failure = PG_UNAVAILABLE;
    else if (!strncmp(state, "08", 2) || !strcmp(state, "57P01") || !strcmp(state, "57P02") || !strcmp(state, "57P03"))
        last_failure = PG_UNAVAILABLE;
    else if (!strcmp(state, "23505") || !strcmp(state, "40001") || !strcmp(state, "40P01")) last_failure = PG_CONFLICT;
    else last_failure = PG_ERROR;
    snprintf(err, errlen, "%s", r && *PQresultErrorMessage(r) ? PQresultErrorMessage(r) : PQerrorMessage(c));
    one_line(err);
    PQclear(r);
}

static bool ok(PGresult *r) {
    ExecStatusType st = PQresultStatus(r);
    return r && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK);
}

PGresult *pg_exec(PGconn *c, const char *sql, int n, const char *const *values, const int *lengths,
                  const int *binary, int binary_result, char *err, size_t errlen) {
    PGresult *r = PQexecParams(c, sql, n, NULL, values, lengths, binary, binary_result);
    if (ok(r)) return r;
    failed(c, r, err, errlen);
    return NULL;
}

pg_rc pg_simple(PGconn *c, const char *sql, char *err, size_t errlen) {
    PGresult *r = PQexec(c, sql); /* the simple protocol: several statements at once (migrations) */
    if (!ok(r)) return failed(c, r, err, errlen), pg_last_failure();
    PQclear(r);
    return PG_OK;
}

int pg_http_status(pg_rc rc) { return rc == PG_CONFLICT ? 409 : rc == PG_UNAVAILABLE ? 503 : 500; }
