/*
 * snapshot.c — writer and validating reader of the snapshot container (format in snapshot.h).
 */
#define _GNU_SOURCE
#include "snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char MAGIC[8] = {'M', 'N', 'E', 'M', 'O', 'S', 'N', '1'};
#define HEADER_BYTES 24
#define SECTION_HEAD 16
#define TRAILER_BYTES 24

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t snap_crc32(uint32_t crc, const void *data, size_t len) {
    if (!crc_table[1]) crc_init(); /* idempotent: racing initialisers write the same values */
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < len; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static void msg(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- writer */

struct snap_writer {
    FILE *f;
    char *path, *tmp;
    int failed, in_section;
    long section_len_at; /* file offset of the open section's length field */
    uint64_t section_len;
    char err[256];
};

/* Records the first failure; e is errno as the failing call left it (0: a short read or write that set none). */
static int io_fail(snap_writer *w, const char *what, int e) {
    if (!w->failed)
        snprintf(w->err, sizeof w->err, "%s %s: %s", what, w->tmp, e ? strerror(e) : "short read or write");
    w->failed = 1;
    return -1;
}

static int put(snap_writer *w, const void *data, uint64_t len) {
    if (w->failed) return -1;
    errno = 0;
    if (len && fwrite(data, 1, len, w->f) != len) return io_fail(w, "writing", errno);
    return 0;
}

static int put_u32(snap_writer *w, uint32_t v) { return put(w, &v, 4); }
static int put_u64(snap_writer *w, uint64_t v) { return put(w, &v, 8); }

/* Creates "<path>.tmp.XXXXXX", unique to this writer: two saves of one name never share a temporary file, and
 * the last rename wins with a whole file. Not mkstemp: its 0600 would ignore the umask the final file had. */
static int create_unique(const char *path, char **tmp) {
    static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static uint64_t counter;
    for (int attempt = 0; attempt < 100; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 40 ^
                     __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0x9E3779B97F4A7C15ull;
        char suffix[7];
        for (int i = 0; i < 6; i++, x /= 62) suffix[i] = digits[x % 62];
        suffix[6] = '\0';
        free(*tmp);
        *tmp = NULL;
        if (asprintf(tmp, "%s" SNAP_TMP_SUFFIX "%s", path, suffix) < 0) {
            *tmp = NULL;
            errno = ENOMEM;
            return -1;
        }
        int fd = open(*tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    return -1;
}

snap_writer *snap_writer_open(const char *path, uint64_t fingerprint, char *err, size_t errlen) {
    snap_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        msg(err, errlen, "out of memory");
        free(w);
        return NULL;
    }
    int fd = create_unique(path, &w->tmp);
    if (fd < 0 || !(w->f = fdopen(fd, "w+b"))) {
        int e = errno;
        msg(err, errlen, "cannot create %s" SNAP_TMP_SUFFIX "*: %s", path, strerror(e));
        if (fd >= 0) {
            close(fd);
            unlink(w->tmp);
        }
        free(w->tmp);
        free(w->path);
        free(w);
        return NULL;
    }
    put(w, MAGIC, 8);
    put_u32(w, SNAP_VERSION);
    put_u32(w, 0);
    put_u64(w, fingerprint);
    return w;
}

int snap_section_begin(snap_writer *w, uint32_t tag) {
    if (w->failed) return -1;
    if (w->in_section || tag == SNAP_TAG_END) {
        snprintf(w->err, sizeof w->err, "snapshot writer misuse (nested section or reserved tag)");
        w->failed = 1;
        return -1;
    }
    put_u32(w, tag);
    put_u32(w, 0);
    w->section_len_at = ftell(w->f);
    if (w->section_len_at < 0) return io_fail(w, "writing", errno);
    w->section_len = 0;
    w->in_section = 1;
    return put_u64(w, 0); /* patched by snap_section_end */
}

int snap_write(snap_writer *w, const void *data, uint64_t len) {
    if (!w->in_section) {
        snprintf(w->err, sizeof w->err, "snapshot writer misuse (write outside a section)");
        w->failed = 1;
        return -1;
    }
    w->section_len += len;
    return put(w, data, len);
}

int snap_section_end(snap_writer *w) {
    if (w->failed || !w->in_section) return -1;
    static const uint8_t zeros[8] = {0};
    put(w, zeros, (8 - w->section_len % 8) % 8);
    w->in_section = 0;
    if (w->failed) return -1;
    /* patch the length field in place; the checksum is computed from the finished file at close */
    errno = 0;
    if (fflush(w->f) != 0 || fseek(w->f, w->section_len_at, SEEK_SET) != 0 ||
        fwrite(&w->section_len, 8, 1, w->f) != 1 || fseek(w->f, 0, SEEK_END) != 0)
        return io_fail(w, "writing", errno);
    return 0;
}

int snap_section(snap_writer *w, uint32_t tag, const void *data, uint64_t len) {
    if (snap_section_begin(w, tag) != 0 || snap_write(w, data, len) != 0) return -1;
    return snap_section_end(w);
}

const char *snap_writer_error(const snap_writer *w) { return w->err; }

/* CRC of the first n bytes of f. 0, or -1 with errno (0 for a short read). */
static int file_crc(FILE *f, uint64_t n, uint32_t *out) {
    uint8_t buf[1 << 16];
    uint32_t crc = 0;
    if (fseek(f, 0, SEEK_SET) != 0) return -1;
    while (n > 0) {
        size_t want = n < sizeof buf ? (size_t)n : sizeof buf;
        errno = 0;
        if (fread(buf, 1, want, f) != want) return -1;
        crc = snap_crc32(crc, buf, want);
        n -= want;
    }
    *out = crc;
    return 0;
}

/* The trailer, then the file's bytes on disk: 0, or -1 (w->err says which step failed and why). */
static int finish(snap_writer *w) {
    put_u32(w, SNAP_TAG_END);
    put_u32(w, 0);
    put_u64(w, 0);
    if (w->failed) return -1;
    uint32_t crc = 0;
    errno = 0;
    long end = ftell(w->f);
    if (end <= 0 || fflush(w->f) != 0) return io_fail(w, "writing", errno);
    if (file_crc(w->f, (uint64_t)end, &crc) != 0) return io_fail(w, "reading back", errno);
    uint32_t tail[2] = {crc, 0};
    errno = 0;
    if (fseek(w->f, 0, SEEK_END) != 0 || fwrite(tail, 4, 2, w->f) != 2 || fflush(w->f) != 0)
        return io_fail(w, "writing", errno);
    if (fsync(fileno(w->f)) != 0) return io_fail(w, "syncing", errno);
    return 0;
}

/* After the rename: the directory entry itself reaches the disk. Best effort: some filesystems cannot sync a
 * directory, and the file is already whole under its name. */
static void sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    int fd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

int snap_writer_close(snap_writer *w, int commit, char *err, size_t errlen) {
    int rc = -1;
    if (commit && !w->failed && !w->in_section) rc = finish(w);
    else if (commit && !w->err[0]) snprintf(w->err, sizeof w->err, "snapshot writer misuse (a section is still open)");
    if (fclose(w->f) != 0 && rc == 0) rc = io_fail(w, "closing", errno);
    if (rc == 0 && rename(w->tmp, w->path) != 0) {
        int e = errno;
        snprintf(w->err, sizeof w->err, "renaming %s to %s: %s", w->tmp, w->path, strerror(e));
        rc = -1;
    }
    if (rc == 0) sync_dir(w->path);
    if (rc != 0) unlink(w->tmp); /* this writer's own file: another save of the name has its own */
    if (rc != 0 && commit) msg(err, errlen, "%s", w->err);
    free(w->tmp);
    free(w->path);
    free(w);
    return commit ? rc : 0;
}

/* ---------------------------------------------------------------- reader */

typedef struct {
    uint32_t tag;
    const uint8_t *data;
    uint64_t len;
} section;

struct snap_reader {
    void *map;
    size_t map_len;
    section *sections;
    size_t n;
};

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

snap_reader *snap_reader_from_memory(const void *data, size_t len, uint64_t fingerprint, char *err, size_t errlen) {
    const uint8_t *p = data;
    if (len < HEADER_BYTES + TRAILER_BYTES) {
        msg(err, errlen, "not a mnemo snapshot: %zu bytes is too short", len);
        return NULL;
    }
    if (memcmp(p, MAGIC, 8) != 0) {
        msg(err, errlen, "not a mnemo snapshot (bad magic)");
        return NULL;
    }
    if (rd32(p + 8) != SNAP_VERSION) {
        msg(err, errlen, "snapshot format version %u is not supported (this build reads version %d)", rd32(p + 8),
            SNAP_VERSION);
        return NULL;
    }
    uint64_t crc_stored = rd32(p + len - 8), crc = snap_crc32(0, p, len - 8);
    if (crc != crc_stored || rd32(p + len - 4) != 0) {
        msg(err, errlen, "snapshot is corrupt: checksum mismatch (stored %08llx, computed %08llx)",
            (unsigned long long)crc_stored, (unsigned long long)crc);
        return NULL;
    }
    if (rd64(p + 16) != fingerprint) {
        msg(err, errlen, "snapshot was made for a different model (fingerprint %016llx, this model %016llx)",
            (unsigned long long)rd64(p + 16), (unsigned long long)fingerprint);
        return NULL;
    }
    snap_reader *r = calloc(1, sizeof *r);
    if (!r) {
        msg(err, errlen, "out of memory");
        return NULL;
    }
    size_t off = HEADER_BYTES, cap = 0, end = len - 8; /* the end marker's 16 bytes lie before `end` */
    for (;;) {
        if (end - off < SECTION_HEAD) {
            msg(err, errlen, "snapshot is corrupt: section header at byte %zu runs past the end", off);
            goto fail;
        }
        uint32_t tag = rd32(p + off);
        uint64_t slen = rd64(p + off + 8);
        if (tag == SNAP_TAG_END) {
            if (slen != 0 || off + SECTION_HEAD != end) {
                msg(err, errlen, "snapshot is corrupt: end marker at byte %zu is not at the end", off);
                goto fail;
            }
            break;
        }
        uint64_t padded = slen + (8 - slen % 8) % 8;
        if (slen > end - off - SECTION_HEAD || padded > end - off - SECTION_HEAD) {
            msg(err, errlen, "snapshot is corrupt: section at byte %zu claims %llu bytes, %zu remain", off,
                (unsigned long long)slen, end - off - SECTION_HEAD);
            goto fail;
        }
        if (r->n == cap) {
            cap = cap ? 2 * cap : 8;
            section *ns = realloc(r->sections, cap * sizeof *ns);
            if (!ns) {
                msg(err, errlen, "out of memory");
                goto fail;
            }
            r->sections = ns;
        }
        r->sections[r->n++] = (section){tag, p + off + SECTION_HEAD, slen};
        off += SECTION_HEAD + (size_t)padded;
    }
    return r;
fail:
    free(r->sections);
    free(r);
    return NULL;
}

snap_reader *snap_reader_open(const char *path, uint64_t fingerprint, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        msg(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        msg(err, errlen, "%s is not a regular file", path);
        close(fd);
        return NULL;
    }
    size_t len = (size_t)st.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED) {
        msg(err, errlen, len ? "cannot map %s: %s" : "%s: empty file", path, strerror(errno));
        return NULL;
    }
    char inner[256] = "";
    snap_reader *r = snap_reader_from_memory(map, len, fingerprint, inner, sizeof inner);
    if (!r) {
        msg(err, errlen, "%s: %s", path, inner);
        munmap(map, len);
        return NULL;
    }
    r->map = map;
    r->map_len = len;
    return r;
}

int snap_reader_section(const snap_reader *r, size_t i, uint32_t *tag, const void **data, uint64_t *len) {
    if (i >= r->n) return -1;
    *tag = r->sections[i].tag;
    *data = r->sections[i].data;
    *len = r->sections[i].len;
    return 0;
}

int snap_reader_find(const snap_reader *r, uint32_t tag, const void **data, uint64_t *len) {
    for (size_t i = 0; i < r->n; i++)
        if (r->sections[i].tag == tag) {
            *data = r->sections[i].data;
            *len = r->sections[i].len;
            return 0;
        }
    return -1;
}

size_t snap_reader_count(const snap_reader *r) { return r->n; }

void snap_reader_close(snap_reader *r) {
    if (!r) return;
    if (r->map) munmap(r->map, r->map_len);
    free(r->sections);
    free(r);
}
