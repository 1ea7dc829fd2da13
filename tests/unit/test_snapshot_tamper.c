/*
 * test_snapshot_tamper.c — snapshots changed after saving and given a correct checksum again (what a checksum
 * cannot catch): a NaN, an infinity or a huge value in the cache rows, the logits, LongLLaMA's local keys or a
 * memory store, and counts that contradict each other, are refused at load with a message; the context stays as
 * it was and decodes exactly as a twin that never saw the file. The untampered file still loads.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "snapshot.h"
#include "test_util.h"

static char tmpdir[] = "/tmp/mnemo_tamperXXXXXX";

static mnemo_model *load(const char *sub) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", test_fixtures(), sub);
    mnemo_model *m = NULL;
    CHECK(mnemo_model_load(dir, NULL, &m) == MNEMO_OK, "load %s: %s", dir, mnemo_model_error(m));
    return m;
}

static mnemo_context *context(mnemo_model *m, int32_t n_ctx) {
    mnemo_context_params cp = mnemo_context_default_params();
    cp.n_ctx = n_ctx;
    mnemo_context *ctx = NULL;
    CHECK(mnemo_context_new(m, &cp, &ctx) == MNEMO_OK, "context: %s", mnemo_context_error(ctx));
    return ctx;
}

typedef struct {
    uint8_t *bytes;
    size_t n;
} file_bytes;

/* Offset of section `tag`'s data (+ at; at < 0 counts from its end) in the file, or 0 when absent. */
static size_t offset_of(const file_bytes *f, uint32_t tag, long at) {
    uint64_t fp;
    memcpy(&fp, f->bytes + 16, 8);
    char err[256];
    snap_reader *r = snap_reader_from_memory(f->bytes, f->n, fp, err, sizeof err);
    const void *data;
    uint64_t len;
    size_t off = 0;
    if (r && snap_reader_find(r, tag, &data, &len) == 0 && len > 0)
        off = (size_t)((const uint8_t *)data - f->bytes) + (size_t)(at >= 0 ? at : (long)len + at);
    snap_reader_close(r);
    CHECK(off > 0, "section %.4s found", (const char *)&tag);
    return off;
}

/* Writes f with `n` bytes at `off` replaced and the checksum recomputed; returns the file's path. */
static const char *tampered(const file_bytes *f, size_t off, const void *with, size_t n) {
    static char out[300];
    snprintf(out, sizeof out, "%s/tampered.snap", tmpdir);
    uint8_t *b = malloc(f->n);
    memcpy(b, f->bytes, f->n);
    if (off + n <= f->n - 8) memcpy(b + off, with, n);
    uint32_t crc = snap_crc32(0, b, f->n - 8);
    memcpy(b + f->n - 8, &crc, 4);
    FILE *o = fopen(out, "wb");
    if (o) {
        fwrite(b, 1, f->n, o);
        fclose(o);
    }
    free(b);
    return out;
}

/* Refused with a message naming `expect`; then ctx and twin decode the same token to bitwise equal logits. */
static void refused(mnemo_context *ctx, mnemo_context *twin, int32_t V, const char *path, const char *expect,
                    const char *what) {
    mnemo_status st = mnemo_context_load(ctx, path);
    CHECK(st != MNEMO_OK && strstr(mnemo_context_error(ctx), expect), "%s refused: status %d '%s'", what, st,
          mnemo_context_error(ctx));
    mnemo_token t = 9;
    bool ok = mnemo_decode(ctx, &t, 1) == MNEMO_OK && mnemo_decode(twin, &t, 1) == MNEMO_OK;
    const float *a = ok ? mnemo_get_logits(ctx, -1) : NULL, *b = ok ? mnemo_get_logits(twin, -1) : NULL;
    CHECK(a && b && !memcmp(a, b, (size_t)V * sizeof(float)) && isfinite(a[0]), "%s: context unchanged", what);
}

static file_bytes saved(mnemo_context *live, const char *name) {
    char p[300];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    CHECK(mnemo_context_save(live, p) == MNEMO_OK, "save: %s", mnemo_context_error(live));
    file_bytes f = {0};
    f.bytes = test_slurp(p, &f.n);
    CHECK(f.bytes && f.n > 64, "read back %s", p);
    return f;
}

#define TAG_KEYS SNAP_TAG('K', 'V', 'K', '_')
#define TAG_VALUES SNAP_TAG('K', 'V', 'V', '_')
#define TAG_LOGITS SNAP_TAG('L', 'G', 'T', 'S')
#define TAG_RAWK SNAP_TAG('R', 'A', 'W', 'K')
#define TAG_MEM(l) SNAP_TAG('M', (l), 0, 0x7f)
#define HEADER_AT 40 /* file header 24 + section header 16: the context header's fields */

static void plain(void) {
    mnemo_model *m = load("models/gqa");
    if (!m) return;
    int32_t V = mnemo_model_n_vocab(m);
    mnemo_token ids[24];
    for (int i = 0; i < 24; i++) ids[i] = 3 + (i * 31) % (V - 3);
    mnemo_context *live = context(m, 64), *ctx = context(m, 64), *twin = context(m, 64);
    mnemo_decode(live, ids, 24);
    mnemo_decode(ctx, ids, 3);
    mnemo_decode(twin, ids, 3);
    file_bytes f = saved(live, "plain.snap");
    if (!f.bytes) return;
    const float nan = NAN, inf = INFINITY, huge = 1e30f;
    refused(ctx, twin, V, tampered(&f, offset_of(&f, TAG_KEYS, 4), &nan, 4), "not finite", "NaN in a cached key");
    refused(ctx, twin, V, tampered(&f, offset_of(&f, TAG_VALUES, -4), &inf, 4), "not finite", "inf in a value");
    refused(ctx, twin, V, tampered(&f, offset_of(&f, TAG_KEYS, 100), &huge, 4), "out of range", "1e30 in a key");
    refused(ctx, twin, V, tampered(&f, offset_of(&f, TAG_LOGITS, 8), &nan, 4), "logit", "NaN in the logits");
    const int32_t no_token = -1;
    refused(ctx, twin, V, tampered(&f, HEADER_AT + 24, &no_token, 4), "header", "no last token after 24 tokens");
    mnemo_context *back = context(m, 64);
    CHECK(mnemo_context_load(back, tampered(&f, 0, NULL, 0)) == MNEMO_OK && mnemo_context_n_past(back) == 24,
          "the untampered file loads: %s", mnemo_context_error(back));
    free(f.bytes);
    mnemo_context_free(back);
    mnemo_context_free(live);
    mnemo_context_free(ctx);
    mnemo_context_free(twin);
    mnemo_model_free(m);
}

static void longllama(void) {
    mnemo_model *m = load("longllama/basic");
    if (!m) return;
    int32_t V = mnemo_model_n_vocab(m), W = mnemo_model_n_ctx_train(m), n = 2 * W + 7;
    mnemo_token *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = 3 + (i * 7919) % (V - 3);
    mnemo_context *live = context(m, 0), *ctx = context(m, 0), *twin = context(m, 0);
    mnemo_decode(live, ids, n);
    mnemo_decode(ctx, ids, 5);
    mnemo_decode(twin, ids, 5);
    file_bytes f = saved(live, "ll.snap");
    if (!f.bytes) return;
    const float nan = NAN, huge = -3e38f;
    const uint16_t bf16_nan = 0x7fc0, bf16_inf = 0x7f80, bf16_huge = 0x7f00; /* bf16 0x7f00: 1.7e38 */
    refused(ctx, twin, V, tampered(&f, offset_of(&f, TAG_RAWK, 0), &nan, 4), "local key", "NaN in a local raw key");
    refused(ctx, twin, V, tampered(&f, offset_of(&f, TAG_RAWK, -4), &huge, 4), "local key", "-3e38 in a raw key");
    refused(ctx, twin, V, tampered(&f, offset_of(&f, TAG_MEM(1), -2), &bf16_nan, 2), "not finite",
            "NaN in a memory value");
    refused(ctx, twin, V, tampered(&f, offset_of(&f, TAG_MEM(3), -66), &bf16_inf, 2), "not finite",
            "inf in a memory row");
    refused(ctx, twin, V, tampered(&f, offset_of(&f, TAG_MEM(1), -130), &bf16_huge, 2), "beyond",
            "1.7e38 in a memory row");
    int32_t n_past;
    memcpy(&n_past, f.bytes + HEADER_AT + 20, 4);
    CHECK(n_past == n, "context header layout as expected (n_past %d)", n_past);
    n_past += 1;
    refused(ctx, twin, V, tampered(&f, HEADER_AT + 20, &n_past, 4), "token count", "n_past past memory + window");
    const int32_t lcl = 0;
    refused(ctx, twin, V, tampered(&f, HEADER_AT + 32, &lcl, 4), "settings", "last_context_length 0");
    mnemo_context *back = context(m, 0);
    CHECK(mnemo_context_load(back, tampered(&f, 0, NULL, 0)) == MNEMO_OK && mnemo_context_n_past(back) == n,
          "the untampered file loads: %s", mnemo_context_error(back));
    free(f.bytes);
    free(ids);
    mnemo_context_free(back);
    mnemo_context_free(live);
    mnemo_context_free(ctx);
    mnemo_context_free(twin);
    mnemo_model_free(m);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    plain();
    longllama();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_summary();
}
