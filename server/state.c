/*
 * state.c — see state.h.
 */
#define _GNU_SOURCE /* nftw's FTW_DEPTH | FTW_PHYS */
#include "state.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg_schema.h"

/* "user@host:port/db" of a conninfo, never its password. */
static void describe(const char *conninfo, char *out, size_t cap) {
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &perr);
    const char *user = "", *host = "", *port = "", *db = "";
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
        if (!o->val) continue;
        if (!strcmp(o->keyword, "user")) user = o->val;
        else if (!strcmp(o->keyword, "host")) host = o->val;
        else if (!strcmp(o->keyword, "port")) port = o->val;
        else if (!strcmp(o->keyword, "dbname")) db = o->val;
    }
    snprintf(out, cap, "%s%s%s%s%s/%s", user, *user ? "@" : "", *host ? host : "(default host)", *port ? ":" : "",
             port, db);
    PQconninfoFree(opts);
    PQfreemem(perr);
}

static bool is_local(const char *state) { return !state || !*state || !strcmp(state, "local"); }

int state_open(state_backend *s, const server_opts *o, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (is_local(o->state)) {
        snprintf(s->desc, sizeof s->desc, "local (this machine's directories)");
        return 0;
    }
    char *perr = NULL;
    PQconninfoOption *check = PQconninfoParse(o->state, &perr);
    if (!check) {
        snprintf(err, errlen, "--state: not 'local' nor a PostgreSQL conninfo: %s", perr ? perr : "out of memory");
        PQfreemem(perr);
        return -1;
    }
    PQconninfoFree(check);
    char where[300], why[400];
    describe(o->state, where, sizeof where);
    s->pg = pg_pool_open(o->state, o->state_pool, o->state_wait_s, why, sizeof why);
    if (!s->pg) {
        snprintf(err, errlen, "cannot reach the state database %s%s: %s (start it, or give --state-wait SECONDS to "
                 "wait for it)", where, o->state_wait_s > 0 ? " within --state-wait" : "", why);
        return -1;
    }
    int from = 0;
    if (pg_schema_migrate(s->pg, &from, why, sizeof why) != PG_OK) {
        snprintf(err, errlen, "the state database %s: cannot set up its tables: %s", where, why);
        state_close(s);
        return -1;
    }
    if (o->node_id) {
        snprintf(s->node, sizeof s->node, "%s", o->node_id);
    } else {
        char host[64] = "node";
        gethostname(host, sizeof host - 1);
        snprintf(s->node, sizeof s->node, "%s-%d", host, (int)getpid());
    }
    if (o->jobs_dir) {
        snprintf(s->work_dir, sizeof s->work_dir, "%s", o->jobs_dir);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(s->work_dir, sizeof s->work_dir, "%s/mnemo-node-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(s->work_dir)) {
            snprintf(err, errlen, "cannot create a work directory under %s (give --jobs-dir DIR)", tmp ? tmp : "/tmp");
            state_close(s);
            return -1;
        }
        s->work_dir_temp = true;
    }
    int to = pg_schema_version();
    char schema[64];
    if (from == to) snprintf(schema, sizeof schema, "schema v%d", to);
    else snprintf(schema, sizeof schema, "schema v%d (was v%d)", to, from);
    snprintf(s->desc, sizeof s->desc, "PostgreSQL %s, %s, %d connections; node '%s', work directory %s", where, schema,
             o->state_pool, s->node, s->work_dir);
    return 0;
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *f) {
    (void)sb, (void)type, (void)f;
    remove(path);
    return 0;
}

void state_close(state_backend *s) {
    pg_pool_close(s->pg);
    s->pg = NULL;
    if (s->work_dir_temp) nftw(s->work_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    s->work_dir_temp = false;
}
