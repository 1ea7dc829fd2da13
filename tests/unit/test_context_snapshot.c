/*
 * test_context_snapshot.c — mnemo_context_save / mnemo_context_load: a restored context continues exactly as the
 * live one (next-token logits and a greedy continuation bitwise equal), for plain LLaMA and for LongLLaMA with
 * memory of several windows (dense and kNN), also when a further long input overflows the restored window; and
 * every bad snapshot (another model, bit flips, truncation, empty, a directory, a missing file, too big for n_ctx,
 * the other kind of context) is refused with a message, leaving the context usable and unchanged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "snapshot.h"
#include "test_util.h"

static char tmpdir[] = "/tmp/mnemo_snapXXXXXX";

static mnemo_model *load(const char *sub) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", test_fixtures(), sub);
    mnemo_model *m = NULL;
    mnemo_status st = mnemo_model_load(dir, NULL, &m);
    CHECK(st == MNEMO_OK, "load %s: %s", dir, mnemo_model_error(m));
    if (st != MNEMO_OK) {
        mnemo_model_free(m);
        return NULL;
    }
    return m;
}

static mnemo_context *context(mnemo_model *m, int32_t n_ctx, int32_t knn_k, mnemo_mem_index index) {
    mnemo_context_params cp = mnemo_context_default_params();
    cp.n_ctx = n_ctx;
    cp.mem_knn_k = knn_k;
    cp.mem_index = index;
    cp.mem_dense_rows = 0; /* kNN cases search from the first memory row */
    mnemo_context *ctx = NULL;
    CHECK(mnemo_context_new(m, &cp, &ctx) == MNEMO_OK, "context: %s", mnemo_context_error(ctx));
    return ctx;
}

static int argmax(const float *x, int32_t n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Feeds `extra` tokens to both contexts, then 12 greedy steps; every logit row must be bitwise equal. */
static void same_future(mnemo_context *a, mnemo_context *b, int32_t V, const mnemo_token *extra, int32_t n_extra,
                        const char *what) {
    bool ok = mnemo_decode(a, extra, n_extra) == MNEMO_OK && mnemo_decode(b, extra, n_extra) == MNEMO_OK;
    CHECK(ok, "%s: decode after restore: %s / %s", what, mnemo_context_error(a), mnemo_context_error(b));
    for (int step = 0; ok && step < 12; step++) {
        const float *la = mnemo_get_logits(a, -1), *lb = mnemo_get_logits(b, -1);
        ok = la && lb && !memcmp(la, lb, (size_t)V * sizeof(float));
        CHECK(ok, "%s: logits differ at step %d", what, step);
        mnemo_token t = (mnemo_token)argmax(la, V);
        ok = ok && mnemo_decode(a, &t, 1) == MNEMO_OK && mnemo_decode(b, &t, 1) == MNEMO_OK;
    }
    CHECK(ok && mnemo_context_n_past(a) == mnemo_context_n_past(b), "%s: same future (n_past %d vs %d)", what,
          mnemo_context_n_past(a), mnemo_context_n_past(b));
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n ? *n : 1);
    if (b && fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

/* A refused load: status want (0 = any error), a message, and the context's next logits unchanged. */
static void refused(mnemo_context *ctx, mnemo_context *twin, int32_t V, const char *path, mnemo_status want,
                    const char *what) {
    mnemo_status st = mnemo_context_load(ctx, path);
    CHECK(st != MNEMO_OK && (want == 0 || st == want) && strlen(mnemo_context_error(ctx)) > 0,
          "%s refused: status %d (want %d) '%s'", what, st, want, mnemo_context_error(ctx));
    mnemo_token t = 7;
    bool ok = mnemo_decode(ctx, &t, 1) == MNEMO_OK && mnemo_decode(twin, &t, 1) == MNEMO_OK &&
              !memcmp(mnemo_get_logits(ctx, -1), mnemo_get_logits(twin, -1), (size_t)V * sizeof(float));
    CHECK(ok, "%s: the context is unchanged after the refusal", what);
}

static void plain(void) {
    mnemo_model *m = load("models/gqa"), *other = load("models/mha");
    if (!m || !other) return;
    int32_t V = mnemo_model_n_vocab(m);
    mnemo_token ids[40];
    for (int i = 0; i < 40; i++) ids[i] = 3 + (i * 31) % (V - 3);
    mnemo_context *live = context(m, 128, 0, MNEMO_MEM_INDEX_FLAT);
    CHECK(mnemo_decode(live, ids, 40) == MNEMO_OK, "prompt");
    char path[300];
    snprintf(path, sizeof path, "%s/plain.snap", tmpdir);
    CHECK(mnemo_context_save(live, path) == MNEMO_OK, "save: %s", mnemo_context_error(live));
    mnemo_context *restored = context(m, 128, 0, MNEMO_MEM_INDEX_FLAT);
    CHECK(mnemo_context_load(restored, path) == MNEMO_OK, "load: %s", mnemo_context_error(restored));
    CHECK(mnemo_context_n_past(restored) == 40 && mnemo_get_logits(restored, -1) &&
              !memcmp(mnemo_get_logits(restored, -1), mnemo_get_logits(live, -1), (size_t)V * sizeof(float)),
          "restored: 40 tokens and the last token's logits");
    same_future(live, restored, V, ids, 5, "plain LLaMA");

    /* refusals, each on a context that holds 3 tokens, compared with a twin */
    mnemo_context *ctx = context(m, 128, 0, MNEMO_MEM_INDEX_FLAT), *twin = context(m, 128, 0, MNEMO_MEM_INDEX_FLAT);
    mnemo_decode(ctx, ids, 3);
    mnemo_decode(twin, ids, 3);
    size_t n = 0;
    unsigned char *bytes = read_bytes(path, &n);
    CHECK(bytes && n > 64, "snapshot read back (%zu bytes)", n);
    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad.snap", tmpdir);
    const size_t flips[] = {0, 9, 20, 40, n / 2, n - 5};
    for (size_t i = 0; bytes && i < sizeof flips / sizeof *flips; i++) {
        bytes[flips[i]] ^= 0x10;
        write_bytes(bad, bytes, n);
        bytes[flips[i]] ^= 0x10;
        char what[64];
        snprintf(what, sizeof what, "bit flip at byte %zu", flips[i]);
        refused(ctx, twin, V, bad, 0, what);
    }
    const size_t cuts[] = {0, 7, 31, n / 3, n - 1};
    for (size_t i = 0; bytes && i < sizeof cuts / sizeof *cuts; i++) {
        write_bytes(bad, bytes, cuts[i]);
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu bytes", cuts[i]);
        refused(ctx, twin, V, bad, 0, what);
    }
    /* a well-formed file (checksum right) whose header claims more past tokens than it holds cache rows for */
    if (bytes && n > 72) {
        int32_t n_past;
        memcpy(&n_past, bytes + 60, 4); /* file header 24 + section header 16 + 5 fields of the context header */
        CHECK(n_past == 40, "context header layout as expected (n_past %d)", n_past);
        n_past = 41;
        memcpy(bytes + 60, &n_past, 4);
        uint32_t crc = snap_crc32(0, bytes, n - 8);
        memcpy(bytes + n - 8, &crc, 4);
        write_bytes(bad, bytes, n);
        refused(ctx, twin, V, bad, MNEMO_ERR_FORMAT, "n_past past the saved rows (checksum fixed)");
    }
    free(bytes);
    refused(ctx, twin, V, tmpdir, 0, "a directory");
    refused(ctx, twin, V, "/nonexistent/dir/x.snap", 0, "a missing file");
    refused(ctx, twin, V, "", MNEMO_ERR_INVALID_ARG, "an empty path");
    mnemo_context *small = context(m, 16, 0, MNEMO_MEM_INDEX_FLAT), *small_twin = context(m, 16, 0, MNEMO_MEM_INDEX_FLAT);
    refused(small, small_twin, V, path, MNEMO_ERR_CONTEXT_FULL, "40 tokens into n_ctx 16");
    mnemo_context *o = context(other, 128, 0, MNEMO_MEM_INDEX_FLAT), *o_twin = context(other, 128, 0, MNEMO_MEM_INDEX_FLAT);
    refused(o, o_twin, mnemo_model_n_vocab(other), path, MNEMO_ERR_FORMAT, "another model's snapshot");
    CHECK(mnemo_context_save(ctx, "/nonexistent/dir/x.snap") == MNEMO_ERR_IO, "save into a missing directory");

    mnemo_context *cs[] = {live, restored, ctx, twin, small, small_twin, o, o_twin};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) mnemo_context_free(cs[i]);
    mnemo_model_free(m);
    mnemo_model_free(other);
}

static void longllama(int32_t knn_k, mnemo_mem_index index, const char *what) {
    mnemo_model *m = load("longllama/basic"), *plain_m = load("models/gqa");
    if (!m || !plain_m) return;
    int32_t V = mnemo_model_n_vocab(m), W = mnemo_model_n_ctx_train(m);
    int32_t n = 6 * W + 11;
    mnemo_token *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = 3 + (i * 7919) % (V - 3);
    mnemo_context *live = context(m, 0, knn_k, index);
    CHECK(mnemo_decode(live, ids, n) == MNEMO_OK, "%s: long prompt: %s", what, mnemo_context_error(live));
    mnemo_memory_stats ms;
    CHECK(mnemo_context_memory(live, &ms) == MNEMO_OK && ms.mem_tokens >= (uint64_t)(4 * W), "%s: memory holds %llu tokens",
          what, (unsigned long long)ms.mem_tokens);
    char path[300];
    snprintf(path, sizeof path, "%s/ll.snap", tmpdir);
    CHECK(mnemo_context_save(live, path) == MNEMO_OK, "%s: save: %s", what, mnemo_context_error(live));
    mnemo_context *restored = context(m, 0, knn_k, index);
    CHECK(mnemo_context_load(restored, path) == MNEMO_OK, "%s: load: %s", what, mnemo_context_error(restored));
    mnemo_memory_stats rs;
    CHECK(mnemo_context_memory(restored, &rs) == MNEMO_OK && rs.mem_tokens == ms.mem_tokens &&
              rs.local_tokens == ms.local_tokens && mnemo_context_n_past(restored) == n,
          "%s: restored memory %llu/%d tokens", what, (unsigned long long)rs.mem_tokens, rs.local_tokens);
    struct stat sb;
    if (stat(path, &sb) == 0 && ms.mem_tokens)
        printf("%s: snapshot %lld bytes for %llu memory tokens (%.0f bytes per memory token)\n", what,
               (long long)sb.st_size, (unsigned long long)ms.mem_tokens, (double)sb.st_size / (double)ms.mem_tokens);
    same_future(live, restored, V, ids, 3, what);
    /* a second long input: the restored window overflows into memory exactly as the live one does */
    same_future(live, restored, V, ids + 100, 2 * W + 5, what);

    /* a LongLLaMA snapshot into a plain context and back */
    mnemo_context *p = context(plain_m, 128, 0, MNEMO_MEM_INDEX_FLAT);
    CHECK(mnemo_context_load(p, path) != MNEMO_OK, "%s: LongLLaMA snapshot into another model refused", what);
    mnemo_context_free(p);
    free(ids);
    mnemo_context_free(live);
    mnemo_context_free(restored);
    mnemo_model_free(m);
    mnemo_model_free(plain_m);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    plain();
    longllama(0, MNEMO_MEM_INDEX_FLAT, "LongLLaMA dense");
    longllama(4, MNEMO_MEM_INDEX_FLAT, "LongLLaMA kNN k=4 flat");
    longllama(4, MNEMO_MEM_INDEX_BRUTE, "LongLLaMA kNN k=4 brute force");
    longllama(4, MNEMO_MEM_INDEX_IVF_GROW, "LongLLaMA kNN k=4 ivf-grow");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_summary();
}
