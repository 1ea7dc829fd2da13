/*
 * pg_pool.h — a small pool of PostgreSQL connections (libpq) shared by the server's threads, for the
 * `--state postgresql://...` backend.
 *
 * The conninfo string goes to libpq as given, so TLS (sslmode, sslrootcert, ...), passwords (password, passfile,
 * ~/.pgpass) and timeouts are libpq's own options. Connections are opened on demand up to `size`; a thread that finds
 * none free waits for one. A connection the database dropped (restart, failover, network) is noticed when a statement
 * on it fails and is reopened on the next acquire, so the node reconnects by itself; while the database cannot be
 * reached, callers get PG_UNAVAILABLE and answer 503 with Retry-After.
 *
 * pg_run wraps one unit of work (a function that runs its statements, usually one transaction, on the connection it
 * is given): when the unit fails because a connection taken from the idle pool turned out dead, it is run once more
 * on a fresh connection, since nothing of it was committed. Thread-safe.
 */
#ifndef MNEMO_SERVER_PG_POOL_H
#define MNEMO_SERVER_PG_POOL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct pg_pool pg_pool;

/* Result of a unit of work: OK, a conflict the caller reports (compare-and-swap lost), the database unreachable
 * (503), or an error of the statement or the data (500). */
typedef enum { PG_OK = 0, PG_CONFLICT = 1, PG_UNAVAILABLE = 2, PG_ERROR = 3 } pg_rc;

/* Opens the pool and one connection to check the database is there. wait_s > 0: keep trying that long (a database
 * still starting). NULL with a message naming the database's answer when it cannot be reached. */
pg_pool *pg_pool_open(const char *conninfo, int size, double wait_s, char *err, size_t errlen);
void pg_pool_close(pg_pool *p); /* NULL is a no-op */

typedef pg_rc (*pg_work)(PGconn *c, void *arg, char *err, size_t errlen);
/* Runs work on a pooled connection (see above). The message in err says what failed. */
pg_rc pg_run(pg_pool *p, pg_work work, void *arg, char *err, size_t errlen);

/* Statement helper for work functions: runs sql with n parameters (text, or binary where binary[i]; lengths only
 * for binary ones; NULL arrays = all text) and returns the result when it is COMMAND_OK or TUPLES_OK (binary_result:
 * columns in binary). Else it clears the result, writes the server's message into err, and returns NULL;
 * pg_last_failure then says which pg_rc that was. */
PGresult *pg_exec(PGconn *c, const char *sql, int n, const char *const *values, const int *lengths,
                  const int *binary, int binary_result, char *err, size_t errlen);
/* The pg_rc of this thread's last failed pg_exec: PG_UNAVAILABLE for a lost connection or a server shutting down
 * (SQLSTATE class 08, 57P01..57P03), PG_CONFLICT for a unique violation or a serialization failure, else PG_ERROR. */
pg_rc pg_last_failure(void);
/* Statements without results and arguments ("BEGIN", "COMMIT", or several separated by ';'). PG_OK or the
 * failure's pg_rc. */
pg_rc pg_simple(PGconn *c, const char *sql, char *err, size_t errlen);

/* The HTTP status of a pg_rc that is not PG_OK: 409, 503 or 500. */
int pg_http_status(pg_rc rc);

#endif
