/*
 * pg_schema.h — the tables of the PostgreSQL state backend, created and migrated by the server itself.
 *
 * mnemo_schema holds one row: the schema version the database is at. At start each node takes a transaction-scoped
 * advisory lock (so two nodes starting together migrate once), reads the version and applies the migrations above
 * it in order, in the same transaction: a database is at one version or the next, never between. A database at a
 * version newer than this binary knows is refused (an older node must not write to tables it does not understand).
 */
#ifndef MNEMO_SERVER_PG_SCHEMA_H
#define MNEMO_SERVER_PG_SCHEMA_H

#include <stddef.h>

#include "pg_pool.h"

/* The schema version this binary writes. */
int pg_schema_version(void);
/* Brings the database to pg_schema_version(). PG_OK, or the failure with a message (a newer database is PG_ERROR). */
pg_rc pg_schema_migrate(pg_pool *p, int *from_version, char *err, size_t errlen);

#endif
