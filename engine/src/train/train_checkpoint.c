/* train_checkpoint.c — see train_checkpoint.h. */
#include "train_checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot.h"

#define TAG_META SNAP_TAG('T', 'R', 'N', 'M')
#define TAG_SETTINGS SNAP_TAG('T', 'R', 'N', 'S')
#define TAG_BUFFER SNAP_TAG('T', 'R', 'N', 'B')
#define CKPT_VERSION 1u

typedef struct {
    uint32_t version, zero;
    int64_t step;
    uint64_t data_seed, rng[4];
} meta_section;

int train_ckpt_save(const char *path, uint64_t fingerprint, const train_ckpt_meta *meta, const char *settings,
                    const train_ckpt_buffer *bufs, size_t n_bufs, char *err, size_t errlen) {
    snap_writer *w = snap_writer_open(path, fingerprint, err, errlen);
    if (!w) return -1;
    meta_section ms = {.version = CKPT_VERSION, .step = meta->step, .data_seed = meta->data_seed};
    memcpy(ms.rng, meta->rng, sizeof ms.rng);
    int rc = snap_section(w, TAG_META, &ms, sizeof ms);
    if (!rc) rc = snap_section(w, TAG_SETTINGS, settings ? settings : "", settings ? strlen(settings) : 0);
    static const uint8_t pad[8];
    for (size_t i = 0; !rc && i < n_bufs; i++) {
        uint32_t nl = (uint32_t)strlen(bufs[i].name);
        uint64_t n = bufs[i].n;
        rc = snap_section_begin(w, TAG_BUFFER) || snap_write(w, &nl, 4) || snap_write(w, bufs[i].name, nl) ||
             snap_write(w, pad, (8 - (4 + nl) % 8) % 8) || snap_write(w, &n, 8) ||
             snap_write(w, bufs[i].data, n * sizeof(float)) || snap_section_end(w);
    }
    if (rc) { /* keep the write error; closing without commit only deletes the temporary file */
        snprintf(err, errlen, "%s: %s", path, snap_writer_error(w));
        snap_writer_close(w, 0, NULL, 0);
        return -1;
    }
    return snap_writer_close(w, 1, err, errlen);
}

/* Section bytes -> the buffer's name, count and values (pointers into the section). 0, or -1 when malformed. */
static int parse_buffer(const uint8_t *p, uint64_t len, const char **name, uint32_t *nl, uint64_t *n,
                        const float **vals) {
    if (len < 4) return -1;
    memcpy(nl, p, 4);
    uint64_t at = 4 + (uint64_t)*nl;
    at += (8 - at % 8) % 8;
    if (*nl == 0 || *nl > 4096 || at + 8 > len) return -1;
    memcpy(n, p + at, 8);
    if (*n > (len - at - 8) / sizeof(float) || len - at - 8 != *n * sizeof(float)) return -1;
    *name = (const char *)p + 4;
    *vals = (const float *)(p + at + 8); /* 8-aligned: the container pads sections to 8 */
    return 0;
}

int train_ckpt_load(const char *path, uint64_t fingerprint, train_ckpt_meta *meta, const char *settings,
                    const train_ckpt_buffer *bufs, size_t n_bufs, char *err, size_t errlen) {
    snap_reader *r = snap_reader_open(path, fingerprint, err, errlen);
    if (!r) return -1;
    int rc = -1;
    const void *d;
    uint64_t len;
    const float **src = calloc(n_bufs ? n_bufs : 1, sizeof *src);
    meta_section ms;
    if (!src) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if (snap_reader_find(r, TAG_META, &d, &len) || len != sizeof ms) {
        snprintf(err, errlen, "%s: not a training checkpoint (no run state)", path);
        goto out;
    }
    memcpy(&ms, d, sizeof ms);
    if (ms.version != CKPT_VERSION) {
        snprintf(err, errlen, "%s: training checkpoint version %u, this build reads %u", path, ms.version, CKPT_VERSION);
        goto out;
    }
    const char *want = settings ? settings : "";
    if (snap_reader_find(r, TAG_SETTINGS, &d, &len) || len != strlen(want) || memcmp(d, want, len)) {
        snprintf(err, errlen, "%s: written by a run with other settings; resume with the same ones (saved: %.*s)", path,
                 (int)(len < 300 ? len : 300), d ? (const char *)d : "");
        goto out;
    }
    size_t seen = 0;
    for (size_t i = 0; i < snap_reader_count(r); i++) {
        uint32_t tag;
        snap_reader_section(r, i, &tag, &d, &len);
        if (tag != TAG_BUFFER) continue;
        const char *name;
        uint32_t nl;
        uint64_t n;
        const float *vals;
        if (parse_buffer(d, len, &name, &nl, &n, &vals)) {
            snprintf(err, errlen, "%s: buffer section %zu is malformed", path, i);
            goto out;
        }
        size_t k = 0;
        while (k < n_bufs && !(strlen(bufs[k].name) == nl && !memcmp(bufs[k].name, name, nl))) k++;
        if (k == n_bufs || src[k]) {
            snprintf(err, errlen, "%s: buffer '%.*s' is %s", path, (int)nl, name, k == n_bufs ? "not part of this run" : "there twice");
            goto out;
        }
        if (n != bufs[k].n) {
            snprintf(err, errlen, "%s: buffer '%s' holds %llu values, this run has %zu", path, bufs[k].name,
                     (unsigned long long)n, bufs[k].n);
            goto out;
        }
        src[k] = vals;
        seen++;
    }
    for (size_t k = 0; k < n_bufs; k++)
        if (!src[k]) {
            snprintf(err, errlen, "%s: buffer '%s' is missing", path, bufs[k].name);
            goto out;
        }
    for (size_t k = 0; k < n_bufs; k++) memcpy(bufs[k].data, src[k], bufs[k].n * sizeof(float)); /* all checked */
    meta->step = ms.step;
    meta->data_seed = ms.data_seed;
    memcpy(meta->rng, ms.rng, sizeof ms.rng);
    rc = seen == n_bufs ? 0 : -1;
out:
    free(src);
    snap_reader_close(r);
    return rc;
}
