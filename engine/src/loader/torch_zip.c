/*
 * torch_zip.c — torch_zip_parse: a torch.save file is a zip holding <archive>/data.pkl (the pickled state
 * dict) and one <archive>/data/<key> entry per storage. This file ties zip_reader (where the bytes are) to
 * torch_pickle (what they mean).
 */
#include <stdio.h>
#include <string.h>

#include "loader_util.h"
#include "torch_pickle.h"
#include "zip_reader.h"
#include "errbuf.h"

#define MAX_PREFIX 256

typedef struct {
    const zip_archive *za;
    const char *prefix;
    size_t plen;
} storage_ctx;

/* torch_storage_fn: the bytes of <prefix>/data/<key>. */
static int find_storage(void *ctx, const char *key, size_t keylen, const uint8_t **data, uint64_t *size,
                        char *msg, size_t msglen) {
    const storage_ctx *c = ctx;
    char name[MAX_PREFIX + 6 + 257];
    if (keylen > 256) {
        snprintf(msg, msglen, "storage key too long");
        return -1;
    }
    int n = snprintf(name, sizeof name, "%.*sdata/%.*s", (int)c->plen, c->prefix, (int)keylen, key);
    const zip_entry *e = zip_find(c->za, name, (size_t)n);
    if (!e) {
        snprintf(msg, msglen, "storage '%.*s' has no entry '%s' in the archive", (int)keylen, key, name);
        return -1;
    }
    if (zip_entry_data(c->za, e, data, msg, msglen)) return -1;
    *size = e->size;
    return 0;
}

/* The single "<archive>/data.pkl" entry; *plen = length of "<archive>/". */
static const zip_entry *find_pickle(const zip_archive *za, size_t *plen, int *count) {
    const zip_entry *found = NULL;
    *count = 0;
    for (size_t i = 0; i < za->count; i++) {
        const zip_entry *e = &za->entries[i];
        size_t l = e->name_len;
        if (l < 9 || memcmp(e->name + l - 9, "/data.pkl", 9) != 0) continue;
        if (memchr(e->name, '/', l - 9) || l - 8 > MAX_PREFIX) continue; /* only <archive>/data.pkl */
        found = e;
        *plen = l - 8;
        ++*count;
    }
    return found;
}

int torch_zip_parse(const uint8_t *buf, uint64_t len, const char *file, tensor_list *out, char *err,
                    size_t errlen) {
    char msg[256];
    zip_archive za;
    if (len >= 2 && buf[0] == 0x80 && buf[1] <= 5)
        return errbuf_fail_at(err, errlen, file,
                              "legacy torch.save format (a bare pickle, torch < 1.6) is not supported: "
                                       "re-save it with a newer torch or convert it to safetensors");
    if (zip_open(&za, buf, len, msg, sizeof msg)) return errbuf_fail_at(err, errlen, file, "%s", msg);
    int rc = -1, count;
    size_t plen = 0;
    const zip_entry *pe = find_pickle(&za, &plen, &count);
    if (count != 1) {
        errbuf_fail_at(err, errlen, file,
                       count ? "archive holds %d data.pkl records" : "no <archive>/data.pkl in the zip: "
                                                                               "not a torch.save file",
                       count);
        goto done;
    }
    /* torch writes "little" or "big"; an old file without the record is little-endian */
    char bo[MAX_PREFIX + 16];
    int bl = snprintf(bo, sizeof bo, "%.*sbyteorder", (int)plen, pe->name);
    const zip_entry *be = zip_find(&za, bo, (size_t)bl);
    const uint8_t *p;
    if (be && (zip_entry_data(&za, be, &p, msg, sizeof msg) == 0) && be->size == 3 && memcmp(p, "big", 3) == 0) {
        errbuf_fail_at(err, errlen, file, "big-endian checkpoint (byteorder 'big') is not supported");
        goto done;
    }
    if (zip_entry_data(&za, pe, &p, msg, sizeof msg)) {
        errbuf_fail_at(err, errlen, file, "%s", msg);
        goto done;
    }
    if (pe->size > (1u << 30)) {
        errbuf_fail_at(err, errlen, file, "data.pkl of %llu bytes is implausibly large", (unsigned long long)pe->size);
        goto done;
    }
    storage_ctx sc = {&za, pe->name, plen};
    size_t start = out->count;
    if (torch_unpickle(p, (size_t)pe->size, find_storage, &sc, file, out, msg, sizeof msg)) {
        errbuf_fail_at(err, errlen, file, "%s", msg);
        goto done;
    }
    rc = 0;
    for (size_t i = start; i < out->count && !rc; i++) {
        const tensor_entry *e = &out->items[i];
        if (ld_shape_fits(e->ndim, e->shape, len)) continue;
        char shp[128];
        ld_format_shape(shp, sizeof shp, e->ndim, e->shape);
        rc = errbuf_fail_at(err, errlen, file,
                            "tensor '%s' shape %s is empty, yet its other dimensions claim more elements "
                            "than the file has bytes", e->name, shp);
    }
    if (rc) ld_list_truncate(out, start);
done:
    zip_close(&za);
    return rc;
}
