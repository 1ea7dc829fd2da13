/*
 * zip_reader.c — parses the central directory of an in-memory zip (PKWARE APPNOTE 6.3), including ZIP64:
 * the EOCD64 locator/record and the 0x0001 extra field in central and local headers. torch.save writes
 * STORED entries with data descriptors (bit 3), so sizes come from the central directory, and only the
 * name/extra lengths are taken from the local header to locate the data.
 */
#include "zip_reader.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader_util.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_EOCD64_LOC 0x07064b50u
#define EOCD_SIZE 22u
#define EOCD64_SIZE 56u
#define LOC64_SIZE 20u
#define CENTRAL_SIZE 46u
#define LOCAL_SIZE 30u

/* Offset of the end-of-central-directory record: scanned backwards over the last 64 KiB + 22 bytes (the
 * comment is at most 65535 bytes). */
static bool find_eocd(const uint8_t *buf, uint64_t len, uint64_t *pos) {
    if (len < EOCD_SIZE) return false;
    uint64_t lo = len - EOCD_SIZE > 65535u ? len - EOCD_SIZE - 65535u : 0;
    for (uint64_t p = len - EOCD_SIZE + 1; p-- > lo;) {
        if (ld_le32(buf + p) == SIG_EOCD && p + EOCD_SIZE + ld_le16(buf + p + 20) <= len) {
            *pos = p;
            return true;
        }
    }
    return false;
}

/* Replaces the 0xFFFFFFFF fields with their 64-bit values from a ZIP64 extra field (id 0x0001), in the order
 * the spec gives: uncompressed size, compressed size, local header offset. */
static int read_zip64_extra(const uint8_t *ex, size_t exlen, uint64_t *usize, uint64_t *csize, uint64_t *lho,
                            char *msg, size_t msglen) {
    bool need_u = *usize == 0xFFFFFFFFu, need_c = *csize == 0xFFFFFFFFu, need_o = lho && *lho == 0xFFFFFFFFu;
    if (!need_u && !need_c && !need_o) return 0;
    size_t off = 0;
    while (off + 4 <= exlen) {
        uint16_t id = ld_le16(ex + off), sz = ld_le16(ex + off + 2);
        if (sz > exlen - off - 4) break;
        if (id == 0x0001) {
            const uint8_t *f = ex + off + 4;
            size_t need = 8u * ((size_t)need_u + need_c + need_o), k = 0;
            if (sz < need) {
                snprintf(msg, msglen, "ZIP64 extra field too short (%u bytes, needs %zu)", sz, need);
                return -1;
            }
            if (need_u) { *usize = ld_le64(f + k); k += 8; }
            if (need_c) { *csize = ld_le64(f + k); k += 8; }
            if (need_o) *lho = ld_le64(f + k);
            return 0;
        }
        off += 4u + sz;
    }
    /* no ZIP64 field: the values really are 0xFFFFFFFF (legal, if unlikely) */
    return 0;
}

static int cmp_entry(const void *a, const void *b) {
    const zip_entry *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    if (c) return c;
    return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

int zip_open(zip_archive *za, const uint8_t *buf, uint64_t len, char *msg, size_t msglen) {
    memset(za, 0, sizeof *za);
    za->buf = buf;
    za->len = len;
    uint64_t eocd;
    if (!find_eocd(buf, len, &eocd)) {
        snprintf(msg, msglen, "not a zip archive (no end of central directory record)");
        return -1;
    }
    uint64_t n = ld_le16(buf + eocd + 10), cd_size = ld_le32(buf + eocd + 12), cd_off = ld_le32(buf + eocd + 16);
    if (eocd >= LOC64_SIZE && ld_le32(buf + eocd - LOC64_SIZE) == SIG_EOCD64_LOC) {
        uint64_t r = ld_le64(buf + eocd - LOC64_SIZE + 8);
        if (r > len || len - r < EOCD64_SIZE || ld_le32(buf + r) != SIG_EOCD64) {
            snprintf(msg, msglen, "ZIP64 locator points to no ZIP64 end of central directory record");
            return -1;
        }
        n = ld_le64(buf + r + 32);
        cd_size = ld_le64(buf + r + 40);
        cd_off = ld_le64(buf + r + 48);
    }
    uint64_t cd_end;
    if (!ld_add_u64(cd_off, cd_size, &cd_end) || cd_end > len) {
        snprintf(msg, msglen, "central directory (offset %llu, %llu bytes) lies outside the file (%llu bytes)",
                 (unsigned long long)cd_off, (unsigned long long)cd_size, (unsigned long long)len);
        return -1;
    }
    /* each record is >= 46 bytes, so this bounds the allocation whatever the count claims */
    uint64_t max_n = cd_size / CENTRAL_SIZE;
    if (n > max_n) {
        snprintf(msg, msglen, "central directory claims %llu entries but has room for %llu",
                 (unsigned long long)n, (unsigned long long)max_n);
        return -1;
    }
    if (n > SIZE_MAX / sizeof(zip_entry)) {
        snprintf(msg, msglen, "too many zip entries");
        return -1;
    }
    za->entries = calloc(n ? (size_t)n : 1, sizeof(zip_entry));
    if (!za->entries) {
        snprintf(msg, msglen, "out of memory");
        return -1;
    }
    uint64_t p = cd_off;
    for (uint64_t i = 0; i < n; i++) {
        if (cd_end - p < CENTRAL_SIZE || ld_le32(buf + p) != SIG_CENTRAL) {
            snprintf(msg, msglen, "central directory entry %llu is damaged", (unsigned long long)i);
            goto fail;
        }
        const uint8_t *h = buf + p;
        zip_entry *e = &za->entries[za->count];
        e->flags = ld_le16(h + 8);
        e->method = ld_le16(h + 10);
        e->comp_size = ld_le32(h + 20);
        e->size = ld_le32(h + 24);
        size_t nl = ld_le16(h + 28), xl = ld_le16(h + 30), cl = ld_le16(h + 32);
        e->local_offset = ld_le32(h + 42);
        if (cd_end - p - CENTRAL_SIZE < (uint64_t)nl + xl + cl) {
            snprintf(msg, msglen, "central directory entry %llu runs past the directory", (unsigned long long)i);
            goto fail;
        }
        e->name = (const char *)h + CENTRAL_SIZE;
        e->name_len = nl;
        if (read_zip64_extra(h + CENTRAL_SIZE + nl, xl, &e->size, &e->comp_size, &e->local_offset, msg, msglen))
            goto fail;
        p += CENTRAL_SIZE + nl + xl + cl;
        za->count++;
    }
    qsort(za->entries, za->count, sizeof(zip_entry), cmp_entry);
    for (size_t i = 1; i < za->count; i++) {
        if (cmp_entry(&za->entries[i - 1], &za->entries[i]) == 0) {
            size_t nl = za->entries[i].name_len;
            snprintf(msg, msglen, "duplicate zip entry '%.*s'", (int)(nl > 200 ? 200 : nl), za->entries[i].name);
            goto fail;
        }
    }
    return 0;
fail:
    zip_close(za);
    return -1;
}

void zip_close(zip_archive *za) {
    free(za->entries);
    za->entries = NULL;
    za->count = 0;
}

const zip_entry *zip_find(const zip_archive *za, const char *name, size_t len) {
    zip_entry key = {.name = name, .name_len = len};
    if (!za->entries || !za->count) return NULL;
    return bsearch(&key, za->entries, za->count, sizeof(zip_entry), cmp_entry);
}

int zip_entry_data(const zip_archive *za, const zip_entry *e, const uint8_t **data, char *msg, size_t msglen) {
    int nl = e->name_len > 200 ? 200 : (int)e->name_len;
    if (e->flags & 1u) {
        snprintf(msg, msglen, "zip entry '%.*s' is encrypted", nl, e->name);
        return -1;
    }
    if (e->method != 0 || e->comp_size != e->size) {
        snprintf(msg, msglen, "zip entry '%.*s' is compressed (method %u); torch.save stores entries uncompressed",
                 nl, e->name, e->method);
        return -1;
    }
    uint64_t lho = e->local_offset, len = za->len;
    if (lho > len || len - lho < LOCAL_SIZE || ld_le32(za->buf + lho) != SIG_LOCAL) {
        snprintf(msg, msglen, "zip entry '%.*s': no local header at offset %llu", nl, e->name,
                 (unsigned long long)lho);
        return -1;
    }
    uint64_t start = lho + LOCAL_SIZE + ld_le16(za->buf + lho + 26) + ld_le16(za->buf + lho + 28), end;
    if (start > len || !ld_add_u64(start, e->size, &end) || end > len) {
        snprintf(msg, msglen, "zip entry '%.*s' (%llu bytes at offset %llu) runs past the end of the file: truncated?",
                 nl, e->name, (unsigned long long)e->size, (unsigned long long)start);
        return -1;
    }
    *data = za->buf + start;
    return 0;
}
