/*
 * pg_blob.h — bytes of any size in PostgreSQL as chunked rows (mnemo_blob_chunks: blob id, sequence number, at most
 * PG_BLOB_CHUNK bytes), so a 1 GB snapshot is never one value in memory on either side: it is written and read a
 * chunk at a time. A blob is immutable once written; replacing data means writing a new blob and pointing the row that
 * names it at the new id in the same transaction, then deleting the old one.
 *
 * Every function runs on the caller's connection, inside the caller's transaction (so a blob is either wholly there
 * or not at all), and returns PG_OK or the failure's pg_rc with a message. Each computes the CRC-32 (IEEE, zlib's) of
 * the bytes it moves, so a reader can check what it got against what was written.
 */
#ifndef MNEMO_SERVER_PG_BLOB_H
#define MNEMO_SERVER_PG_BLOB_H

#include <stdint.h>

#include "pg_pool.h"

#define PG_BLOB_CHUNK (1u << 20)

/* Writes the file at path as a new blob: *blob its id, *bytes its size, *crc its CRC-32. */
pg_rc pg_blob_put_file(PGconn *c, const char *path, int64_t *blob, uint64_t *bytes, uint32_t *crc, char *err,
                       size_t errlen);
/* Writes len bytes from memory as a new blob. */
pg_rc pg_blob_put_mem(PGconn *c, const void *data, size_t len, int64_t *blob, char *err, size_t errlen);
/* Writes blob into path (through path.part + rename, so path is whole or absent): *bytes and *crc of what was read. */
pg_rc pg_blob_get_file(PGconn *c, int64_t blob, const char *path, uint64_t *bytes, uint32_t *crc, char *err,
                       size_t errlen);
/* A new blob with the same bytes (copied inside the database). */
pg_rc pg_blob_copy(PGconn *c, int64_t from, int64_t *to, char *err, size_t errlen);
pg_rc pg_blob_delete(PGconn *c, int64_t blob, char *err, size_t errlen);

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32 and the snapshot format's trailer). */
uint32_t pg_blob_crc32(uint32_t crc, const void *data, size_t len);

#endif
