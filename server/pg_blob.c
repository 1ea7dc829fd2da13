/*
 * pg_blob.c — see pg_blob.h. Chunks go to the server as binary parameters (no escaping, no text doubling) and come
 * back as binary columns.
 */
#include "pg_blob.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint32_t pg_blob_crc32(uint32_t crc, const void *data, size_t len) {
    static uint32_t table[256];
    if (!table[1]) /* idempotent: racing initialisers write the same values */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < len; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static pg_rc new_id(PGconn *c, int64_t *blob, char *err, size_t errlen) {
    PGresult *r = pg_exec(c, "SELECT nextval('mnemo_blob_ids')", 0, NULL, NULL, NULL, 0, err, errlen);
    if (!r) return pg_last_failure();
    *blob = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return PG_OK;
}

static pg_rc put_chunk(PGconn *c, int64_t blob, int seq, const void *data, size_t len, char *err, size_t errlen) {
    char b[24], s[16];
    snprintf(b, sizeof b, "%" PRId64, blob);
    snprintf(s, sizeof s, "%d", seq);
    const char *v[3] = {b, s, data};
    int lens[3] = {0, 0, (int)len}, bin[3] = {0, 0, 1};
    PGresult *r = pg_exec(c, "INSERT INTO mnemo_blob_chunks (blob, seq, data) VALUES ($1, $2, $3)", 3, v, lens, bin,
                          0, err, errlen);
    if (!r) return pg_last_failure();
    PQclear(r);
    return PG_OK;
}

pg_rc pg_blob_put_file(PGconn *c, const char *path, int64_t *blob, uint64_t *bytes, uint32_t *crc, char *err,
                       size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno)), PG_ERROR;
    char *buf = malloc(PG_BLOB_CHUNK);
    pg_rc rc = buf ? new_id(c, blob, err, errlen) : (snprintf(err, errlen, "out of memory"), PG_ERROR);
    *bytes = 0, *crc = 0;
    for (int seq = 0; rc == PG_OK; seq++) {
        size_t n = fread(buf, 1, PG_BLOB_CHUNK, f);
        if (n == 0) {
            if (ferror(f)) snprintf(err, errlen, "cannot read %s", path), rc = PG_ERROR;
            break;
        }
        *crc = pg_blob_crc32(*crc, buf, n);
        *bytes += n;
        rc = put_chunk(c, *blob, seq, buf, n, err, errlen);
    }
    free(buf);
    fclose(f);
    return rc;
}

pg_rc pg_blob_put_mem(PGconn *c, const void *data, size_t len, int64_t *blob, char *err, size_t errlen) {
    pg_rc rc = new_id(c, blob, err, errlen);
    for (size_t off = 0, seq = 0; rc == PG_OK && off < len; off += PG_BLOB_CHUNK, seq++) {
        size_t n = len - off < PG_BLOB_CHUNK ? len - off : PG_BLOB_CHUNK;
        rc = put_chunk(c, *blob, (int)seq, (const char *)data + off, n, err, errlen);
    }
    return rc;
}

pg_rc pg_blob_get_file(PGconn *c, int64_t blob, const char *path, uint64_t *bytes, uint32_t *crc, char *err,
                       size_t errlen) {
    char part[4200], b[24], s[16];
    snprintf(part, sizeof part, "%s.part", path);
    FILE *f = fopen(part, "wb");
    if (!f) return snprintf(err, errlen, "cannot write %s: %s", part, strerror(errno)), PG_ERROR;
    snprintf(b, sizeof b, "%" PRId64, blob);
    *bytes = 0, *crc = 0;
    pg_rc rc = PG_OK;
    for (int seq = 0; rc == PG_OK; seq++) { /* one chunk per round trip: memory stays at one chunk */
        snprintf(s, sizeof s, "%d", seq);
        const char *v[2] = {b, s};
        PGresult *r = pg_exec(c, "SELECT data FROM mnemo_blob_chunks WHERE blob = $1 AND seq = $2", 2, v, NULL, NULL, 1,
                              err, errlen);
        if (!r) {
            rc = pg_last_failure();
            break;
        }
        bool done = PQntuples(r) == 0;
        if (!done) {
            size_t n = (size_t)PQgetlength(r, 0, 0);
            const char *d = PQgetvalue(r, 0, 0);
            *crc = pg_blob_crc32(*crc, d, n);
            *bytes += n;
            if (fwrite(d, 1, n, f) != n) snprintf(err, errlen, "cannot write %s", part), rc = PG_ERROR;
        }
        PQclear(r);
        if (done) break;
    }
    if (fclose(f) != 0 && rc == PG_OK) snprintf(err, errlen, "cannot write %s", part), rc = PG_ERROR;
    if (rc == PG_OK && rename(part, path) != 0)
        snprintf(err, errlen, "cannot rename %s: %s", part, strerror(errno)), rc = PG_ERROR;
    if (rc != PG_OK) unlink(part);
    return rc;
}

pg_rc pg_blob_copy(PGconn *c, int64_t from, int64_t *to, char *err, size_t errlen) {
    pg_rc rc = new_id(c, to, err, errlen);
    if (rc != PG_OK) return rc;
    char a[24], b[24];
    snprintf(a, sizeof a, "%" PRId64, from);
    snprintf(b, sizeof b, "%" PRId64, *to);
    const char *v[2] = {a, b};
    PGresult *r = pg_exec(c, "INSERT INTO mnemo_blob_chunks (blob, seq, data) SELECT $2, seq, data FROM "
                          "mnemo_blob_chunks WHERE blob = $1", 2, v, NULL, NULL, 0, err, errlen);
    if (!r) return pg_last_failure();
    PQclear(r);
    return PG_OK;
}

pg_rc pg_blob_delete(PGconn *c, int64_t blob, char *err, size_t errlen) {
    char a[24];
    snprintf(a, sizeof a, "%" PRId64, blob);
    const char *v[1] = {a};
    PGresult *r = pg_exec(c, "DELETE FROM mnemo_blob_chunks WHERE blob = $1", 1, v, NULL, NULL, 0, err, errlen);
    if (!r) return pg_last_failure();
    PQclear(r);
    return PG_OK;
}
