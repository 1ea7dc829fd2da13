/*
 * dir_pack.c — see dir_pack.h.
 */
#define _DEFAULT_SOURCE /* DT_REG */
#include "dir_pack.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pg_blob.h"

static const char MAGIC[8] = {'M', 'N', 'E', 'M', 'O', 'P', 'K', '1'};

typedef struct {
    FILE *f;
    uint32_t crc;
    int bad;
} sink;

static void put(sink *s, const void *p, size_t n) {
    if (s->bad || fwrite(p, 1, n, s->f) != n) s->bad = 1;
    s->crc = pg_blob_crc32(s->crc, p, n);
}

static void put_le(sink *s, uint64_t v, int bytes) {
    unsigned char b[8];
    for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(s, b, (size_t)bytes);
}

int dir_pack(const char *dir, const char *skip, const char *out_path, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return snprintf(err, errlen, "cannot read %s: %s", dir, strerror(errno)), -1;
    sink s = {.f = fopen(out_path, "wb")};
    if (!s.f) {
        closedir(d);
        return snprintf(err, errlen, "cannot write %s: %s", out_path, strerror(errno)), -1;
    }
    put(&s, MAGIC, sizeof MAGIC);
    char *buf = malloc(1 << 20);
    if (!buf) s.bad = 1;
    for (struct dirent *e; !s.bad && (e = readdir(d));) {
        size_t nl = strlen(e->d_name);
        if (e->d_name[0] == '.' || nl > 255 || (skip && !strcmp(e->d_name, skip))) continue; /* temp files too */
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        FILE *in = lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? fopen(path, "rb") : NULL;
        if (!in) continue; /* gone meanwhile (a writer's rename), or not a regular file */
        /* the size as read, not as stat'ed: the trainer replaces files whole (rename), never grows them */
        if (fstat(fileno(in), &sb) != 0) s.bad = 1;
        put_le(&s, nl, 4);
        put(&s, e->d_name, nl);
        put_le(&s, (uint64_t)sb.st_size, 8);
        uint64_t left = (uint64_t)sb.st_size;
        while (!s.bad && left > 0) {
            size_t n = fread(buf, 1, left < (1u << 20) ? (size_t)left : (1u << 20), in);
            if (n == 0) s.bad = 1;
            put(&s, buf, n);
            left -= n;
        }
        fclose(in);
    }
    free(buf);
    closedir(d);
    put_le(&s, 0, 4);
    uint32_t crc = s.crc;
    put_le(&s, crc, 4);
    if (fclose(s.f) != 0) s.bad = 1;
    if (s.bad) {
        unlink(out_path);
        return snprintf(err, errlen, "cannot pack %s", dir), -1;
    }
    return 0;
}

static uint64_t get_le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Reads the whole pack into memory: packs are adapters and trainer states (megabytes), checked before any write. */
int dir_unpack(const char *pack_path, const char *dir, char *err, size_t errlen) {
    FILE *f = fopen(pack_path, "rb");
    if (!f) return snprintf(err, errlen, "cannot read %s: %s", pack_path, strerror(errno)), -1;
    struct stat sb;
    unsigned char *p = fstat(fileno(f), &sb) == 0 && sb.st_size >= 16 ? malloc((size_t)sb.st_size) : NULL;
    size_t n = p ? fread(p, 1, (size_t)sb.st_size, f) : 0;
    fclose(f);
    if (!p || n != (size_t)sb.st_size || memcmp(p, MAGIC, 8) != 0 ||
        pg_blob_crc32(0, p, n - 4) != (uint32_t)get_le(p + n - 4, 4)) {
        free(p);
        return snprintf(err, errlen, "%s is not a whole mnemo pack (magic, size or CRC-32)", pack_path), -1;
    }
    /* pass 0 checks every entry, pass 1 writes */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && mkdir(dir, 0700) != 0 && errno != EEXIST) {
            free(p);
            return snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno)), -1;
        }
        size_t off = 8;
        for (;;) {
            if (off + 4 > n - 4) goto bad;
            uint32_t nl = (uint32_t)get_le(p + off, 4);
            off += 4;
            if (nl == 0) break;
            if (nl > 255 || off + nl + 8 > n - 4) goto bad;
            char name[256];
            memcpy(name, p + off, nl);
            name[nl] = 0;
            off += nl;
            uint64_t size = get_le(p + off, 8);
            off += 8;
            if (strlen(name) != nl || strchr(name, '/') || name[0] == '.' || size > n - 4 - off) goto bad;
            if (pass == 1) {
                char path[4400], tmp[4500];
                snprintf(path, sizeof path, "%s/%s", dir, name);
                snprintf(tmp, sizeof tmp, "%s/.unpack-%s", dir, name);
                FILE *o = fopen(tmp, "wb");
                bool ok = o && fwrite(p + off, 1, (size_t)size, o) == size;
                if (o && fclose(o) != 0) ok = false;
                if (!ok || rename(tmp, path) != 0) {
                    unlink(tmp);
                    free(p);
                    return snprintf(err, errlen, "cannot write %s", path), -1;
                }
            }
            off += (size_t)size;
        }
    }
    free(p);
    return 0;
bad:
    free(p);
    return snprintf(err, errlen, "%s: a malformed entry", pack_path), -1;
}
