/*
 * test_uio_keep.c — UIO option (a), mnemo_context_params.uio_keep_raw W, against the PyTorch
 * reference with the same option (tests/reference/uio_reference.py keep_raw; fixtures tests/fixtures/uio/keep_raw:
 * the mha_c16_m4 weights, C 16, M 4, W 5 (the kept rows move down the cache) and W 14 (> C - M: the first time they
 * move up, a positive position shift), 4 compressions, one during generation). For each case, on each device:
 *   - logits of every fed token within 1e-4: in one call, one token at a time, and through mnemo_decode_batch one
 *     token per step for two contexts (compression then runs in make_room before the next step);
 *   - greedy generation equals the fixture's ids; the raw tokens after it are W + the accumulator;
 *   - snapshots saved mid-segment and with a compression due, loaded into a fresh context with the same W and
 *     continued: the same logits; a context with another W refuses them (and a W context refuses a W = 0 one);
 *   - a damaged kept-rows section (wrong count, wrong size, missing) is refused naming it, the context unchanged;
 *   - the test's power: the same tokens with W = 0 miss the fixture by far more than the tolerance.
 * Then the option's limits: W > chunk_size and an n_ctx without room for W are refused at context creation.
 * MNEMO_TEST_DEVICE=cpu|cuda|all as in test_uio.
 */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "fixture_logits.h"
#include "kernels.h"
#include "snapshot.h"
#include "test_devices.h"
#include "test_util.h"

#define LOGIT_TOL 1e-4f

static const char *const CASES[] = {"mha_c16_m4_keep5", "mha_c16_m4_keep14"};
static char g_tmp[] = "/tmp/mnemo-uio-keep-XXXXXX";
static float g_worst;

typedef struct {
    const char *name;
    json_t *ref;
    char base[4096], uio[4096];
    logit_block lg;
    int32_t *fed, n_fed, P, n_greedy, W;
} fixture;

static int geti(json_t *o, const char *key) { return (int)json_integer_value(json_object_get(o, key)); }

/* "tests/fixtures/..." in reference.json -> under MNEMO_FIXTURES */
static void fixture_path(char *out, size_t cap, const char *rel) {
    snprintf(out, cap, "%s/%s", test_fixtures(), rel && !strncmp(rel, "tests/fixtures/", 15) ? rel + 15 : "");
}

static bool load_fixture(const char *name, fixture *f) {
    memset(f, 0, sizeof *f);
    f->name = name;
    char path[4200];
    snprintf(path, sizeof path, "%s/uio/keep_raw/%s/reference.json", test_fixtures(), name);
    json_error_t je;
    f->ref = json_load_file(path, 0, &je);
    CHECK(f->ref != NULL, "%s: %s", path, je.text);
    if (!f->ref) return false;
    fixture_path(f->base, sizeof f->base, json_string_value(json_object_get(f->ref, "base")));
    fixture_path(f->uio, sizeof f->uio, json_string_value(json_object_get(f->ref, "uio_dir")));
    f->W = geti(f->ref, "keep_raw");
    json_t *prompt = json_object_get(json_object_get(f->ref, "prompt"), "ids");
    json_t *greedy = json_object_get(f->ref, "greedy");
    f->P = (int32_t)json_array_size(prompt);
    f->n_greedy = (int32_t)json_array_size(greedy);
    f->n_fed = f->P + f->n_greedy - 1;
    f->fed = malloc((size_t)(f->P + f->n_greedy) * sizeof *f->fed);
    for (int32_t i = 0; i < f->P; i++) f->fed[i] = (int32_t)json_integer_value(json_array_get(prompt, (size_t)i));
    for (int32_t i = 0; i < f->n_greedy; i++)
        f->fed[f->P + i] = (int32_t)json_integer_value(json_array_get(greedy, (size_t)i));
    snprintf(path, sizeof path, "%s/uio/keep_raw/%s/logits.bin", test_fixtures(), name);
    int nb = read_logits(path, &f->lg, 1);
    CHECK(nb == 1 && f->lg.n_tokens == f->n_fed, "%s: logits.bin holds %d rows for %d fed tokens", name,
          nb == 1 ? f->lg.n_tokens : -1, f->n_fed);
    return nb == 1 && f->lg.n_tokens == f->n_fed;
}

static float row_diff(const fixture *f, const float *got, int32_t t) {
    const float *want = f->lg.data + (size_t)t * (size_t)f->lg.n_vocab;
    float m = 0.f;
    for (int32_t i = 0; got && i < f->lg.n_vocab; i++) {
        float d = fabsf(got[i] - want[i]);
        if (!(d <= m)) m = d; /* NaN counts as the worst */
    }
    return got ? m : INFINITY;
}

static mnemo_context *new_ctx(mnemo_model *m, int32_t keep, bool logits_all) {
    mnemo_context_params cp = mnemo_context_default_params();
    cp.logits_all = logits_all;
    cp.uio_keep_raw = keep;
    mnemo_context *ctx = NULL;
    mnemo_status st = mnemo_context_new(m, &cp, &ctx);
    CHECK(st == MNEMO_OK, "context with uio_keep_raw %d: %s", keep, mnemo_context_error(ctx));
    if (st == MNEMO_OK) return ctx;
    mnemo_context_free(ctx);
    return NULL;
}

static void note(float worst) {
    if (!(worst <= g_worst)) g_worst = worst;
}

/* One call, then token by token, then two contexts through decode_batch: every row against the fixture. */
static void run_feeds(mnemo_model *m, const fixture *f, const char *what) {
    mnemo_context *one = new_ctx(m, f->W, true), *tok = new_ctx(m, f->W, false);
    mnemo_context *a = new_ctx(m, f->W, false), *b = new_ctx(m, f->W, false);
    if (!one || !tok || !a || !b) goto out;
    mnemo_status st = mnemo_decode(one, f->fed, f->n_fed);
    CHECK(st == MNEMO_OK, "%s: one call: %s", what, mnemo_context_error(one));
    float w1 = 0.f, wt = 0.f, wb = 0.f;
    for (int32_t t = 0; st == MNEMO_OK && t < f->n_fed; t++) {
        float d = row_diff(f, mnemo_get_logits(one, t), t);
        if (!(d <= w1)) w1 = d;
    }
    json_t *fs = json_object_get(f->ref, "final_state");
    mnemo_memory_stats ms;
    CHECK(mnemo_context_memory(one, &ms) == MNEMO_OK && ms.local_tokens == geti(fs, "raw_tokens") &&
              (int)ms.mem_entries == geti(fs, "mem_slots"),
          "%s: after one call %d raw tokens, %d entries (fixture: %d, %d)", what, ms.local_tokens,
          (int)ms.mem_entries, geti(fs, "raw_tokens"), geti(fs, "mem_slots"));
    for (int32_t t = 0; t < f->n_fed; t++) {
        st = mnemo_decode(tok, &f->fed[t], 1);
        CHECK(st == MNEMO_OK, "%s: token %d: %s", what, t, mnemo_context_error(tok));
        if (st != MNEMO_OK) break;
        float d = row_diff(f, mnemo_get_logits(tok, -1), t);
        if (!(d <= wt)) wt = d;
    }
    for (int32_t t = 0; t < f->n_fed; t++) {
        mnemo_batch_entry e[2] = {{a, &f->fed[t], 1}, {b, &f->fed[t], 1}};
        st = mnemo_decode_batch(e, 2);
        CHECK(st == MNEMO_OK, "%s: batch step %d: %s", what, t, mnemo_context_error(a));
        if (st != MNEMO_OK) break;
        for (int k = 0; k < 2; k++) {
            float d = row_diff(f, mnemo_get_logits(k ? b : a, -1), t);
            if (!(d <= wb)) wb = d;
        }
    }
    CHECK(w1 <= LOGIT_TOL && wt <= LOGIT_TOL && wb <= LOGIT_TOL,
          "%s: max |dlogit| one call %.3g, token by token %.3g, decode_batch %.3g", what, w1, wt, wb);
    note(w1), note(wt), note(wb);
out:
    mnemo_context_free(one);
    mnemo_context_free(tok);
    mnemo_context_free(a);
    mnemo_context_free(b);
}

typedef struct {
    int32_t n;
    mnemo_token ids[64];
} collected;

static bool on_token(const mnemo_token_event *ev, void *user) {
    collected *c = user;
    if (c->n < 64) c->ids[c->n++] = ev->token;
    return true;
}

static void run_generate(mnemo_model *m, const fixture *f, const char *what) {
    mnemo_context *ctx = new_ctx(m, f->W, false);
    if (!ctx) return;
    mnemo_generate_params gp = mnemo_generate_default_params();
    gp.sampling.temperature = 0.f;
    gp.max_tokens = f->n_greedy;
    collected got = {0};
    mnemo_generate_result res;
    mnemo_status st = mnemo_generate_tokens(ctx, f->fed, f->P, &gp, on_token, &got, &res);
    bool same = st == MNEMO_OK && got.n == f->n_greedy;
    for (int32_t i = 0; same && i < got.n; i++) same = got.ids[i] == f->fed[f->P + i];
    CHECK(same, "%s: greedy continuation differs from the fixture's (%d tokens, %s)", what, got.n,
          mnemo_context_error(ctx));
    mnemo_context_free(ctx);
}

/* Saved after `cut` tokens fed one per decode_batch step (at a multiple of C a compression is due), loaded into a
 * fresh context with the same W, continued in one call; a context with another W refuses the file. */
static void run_snapshot(mnemo_model *m, const fixture *f, int32_t cut, const char *what) {
    char path[256];
    snprintf(path, sizeof path, "%s/keep-%d.mnemo", g_tmp, cut);
    mnemo_context *a = new_ctx(m, f->W, false), *b = new_ctx(m, f->W, true), *c = new_ctx(m, 0, false);
    if (!a || !b || !c) goto out;
    mnemo_status st = MNEMO_OK;
    for (int32_t t = 0; st == MNEMO_OK && t < cut; t++) {
        mnemo_batch_entry e = {a, &f->fed[t], 1};
        st = mnemo_decode_batch(&e, 1);
    }
    CHECK(st == MNEMO_OK && mnemo_context_save(a, path) == MNEMO_OK, "%s: save after %d: %s", what, cut,
          mnemo_context_error(a));
    st = mnemo_context_load(b, path);
    CHECK(st == MNEMO_OK && mnemo_context_n_past(b) == cut, "%s: load after %d: %s", what, cut,
          mnemo_context_error(b));
    st = st == MNEMO_OK ? mnemo_decode(b, f->fed + cut, f->n_fed - cut) : st;
    float worst = row_diff(f, mnemo_get_logits(b, -1), f->n_fed - 1);
    for (int32_t t = cut; st == MNEMO_OK && t < f->n_fed; t++) {
        float d = row_diff(f, mnemo_get_logits(b, t - cut), t);
        if (!(d <= worst)) worst = d;
    }
    CHECK(st == MNEMO_OK && worst <= LOGIT_TOL, "%s: snapshot after %d, continued: max |dlogit| %.3g (%s)", what, cut,
          worst, mnemo_context_error(b));
    note(worst);
    st = mnemo_context_load(c, path);
    CHECK(st == MNEMO_ERR_FORMAT && mnemo_context_n_past(c) == 0 && strstr(mnemo_context_error(c), "uio_keep_raw"),
          "%s: a W = %d snapshot loaded with W = 0: %d (%s)", what, f->W, st, mnemo_context_error(c));
    /* and the other way round: a W = 0 snapshot into a W context */
    st = mnemo_decode(c, f->fed, cut) == MNEMO_OK ? mnemo_context_save(c, path) : MNEMO_ERR_BACKEND;
    mnemo_context_reset(b);
    mnemo_status lst = st == MNEMO_OK ? mnemo_context_load(b, path) : st;
    CHECK(lst == MNEMO_ERR_FORMAT && mnemo_context_n_past(b) == 0 && strstr(mnemo_context_error(b), "uio_keep_raw"),
          "%s: a W = 0 snapshot loaded with W = %d: %d (%s)", what, f->W, lst, mnemo_context_error(b));
out:
    unlink(path);
    mnemo_context_free(a);
    mnemo_context_free(b);
    mnemo_context_free(c);
}

/* `from` rewritten to `to` with its UKPT section (option (a)'s W and kept rows) replaced by len bytes of keep (len 0:
 * dropped); the fingerprint and every other section as they were. 0, or -1. */
static int rewrite_keep(const char *from, const char *to, const void *keep, uint64_t len) {
    char err[256];
    uint8_t head[24];
    FILE *f = fopen(from, "rb");
    size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    uint64_t fp;
    memcpy(&fp, head + 16, sizeof fp);
    snap_reader *r = got == sizeof head ? snap_reader_open(from, fp, err, sizeof err) : NULL;
    snap_writer *w = r ? snap_writer_open(to, fp, err, sizeof err) : NULL;
    int rc = w ? 0 : -1;
    const uint32_t keep_tag = SNAP_TAG('U', 'K', 'P', 'T');
    for (size_t i = 0; rc == 0 && i < snap_reader_count(r); i++) {
        uint32_t tag;
        const void *data;
        uint64_t n;
        snap_reader_section(r, i, &tag, &data, &n);
        if (tag == keep_tag) data = keep, n = len;
        if (n || tag != keep_tag) rc = snap_section(w, tag, data, n);
    }
    if (w && snap_writer_close(w, rc == 0, err, sizeof err) != 0) rc = -1;
    if (r) snap_reader_close(r);
    return rc;
}

/* A W snapshot whose kept-rows section is damaged is refused with the reason, the context unchanged. */
static void run_bad_keep(mnemo_model *m, const fixture *f, const char *what) {
    char good[256], bad[256];
    snprintf(good, sizeof good, "%s/keep-good.mnemo", g_tmp);
    snprintf(bad, sizeof bad, "%s/keep-bad.mnemo", g_tmp);
    mnemo_context *a = new_ctx(m, f->W, false), *b = new_ctx(m, f->W, false);
    if (!a || !b || mnemo_decode(a, f->fed, 40) != MNEMO_OK || mnemo_context_save(a, good) != MNEMO_OK) {
        CHECK(false, "%s: a snapshot to damage: %s", what, mnemo_context_error(a));
        goto out;
    }
    const int32_t wrong_rows[2] = {f->W, f->W - 1}, short_section[1] = {f->W};
    const struct {
        const void *data;
        uint64_t len;
        const char *want;
    } cases[] = {{wrong_rows, sizeof wrong_rows, "kept raw rows"},
                 {short_section, sizeof short_section, "kept-raw section has the wrong size"},
                 {NULL, 0, "saved keeping 0 raw tokens"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mnemo_status st = rewrite_keep(good, bad, cases[i].data, cases[i].len) == 0 ? mnemo_context_load(b, bad)
                                                                                     : MNEMO_ERR_IO;
        CHECK(st == MNEMO_ERR_FORMAT && mnemo_context_n_past(b) == 0 && strstr(mnemo_context_error(b), cases[i].want),
              "%s: damaged kept-rows section %zu: %d (%s)", what, i, st, mnemo_context_error(b));
    }
    CHECK(mnemo_decode(b, f->fed, 1) == MNEMO_OK, "%s: the context works after the refusals", what);
out:
    unlink(good);
    unlink(bad);
    mnemo_context_free(a);
    mnemo_context_free(b);
}

/* The same tokens without the option miss the fixture: the checks above can fail. */
static void check_power(mnemo_model *m, const fixture *f, const char *what) {
    mnemo_context *ctx = new_ctx(m, 0, true);
    float worst = 0.f;
    if (ctx && mnemo_decode(ctx, f->fed, f->n_fed) == MNEMO_OK)
        for (int32_t t = 0; t < f->n_fed; t++) {
            float d = row_diff(f, mnemo_get_logits(ctx, t), t);
            if (!(d <= worst)) worst = d;
        }
    mnemo_context_free(ctx);
    CHECK(worst > 100 * LOGIT_TOL, "%s: with W = 0 the logits miss the fixture by only %.3g", what, worst);
    printf("%s: the same tokens with uio_keep_raw 0: max |dlogit| %.3g\n", what, worst);
}

static void run_case(const char *name, mnemo_device dev, const char *devname) {
    fixture f;
    if (!load_fixture(name, &f)) goto out;
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = 1;
    mp.device = dev;
    mp.uio_dir = f.uio;
    mnemo_model *m = NULL;
    mnemo_status st = mnemo_model_load(f.base, &mp, &m);
    CHECK(st == MNEMO_OK, "%s: load: %s", name, mnemo_model_error(m));
    if (st == MNEMO_OK) {
        char what[128];
        snprintf(what, sizeof what, "%s (W %d, %s)", name, f.W, devname);
        run_feeds(m, &f, what);
        run_generate(m, &f, what);
        run_snapshot(m, &f, 40, what); /* after 2 compressions, mid-segment */
        run_snapshot(m, &f, 48, what); /* the third compression due (decode_batch leaves it to the next step) */
        run_bad_keep(m, &f, what);
        check_power(m, &f, what);
    }
    mnemo_model_free(m);
out:
    json_decref(f.ref);
    free(f.fed);
    free(f.lg.data);
}

static void test_limits(void) {
    char base[4200], uio[4200];
    fixture_path(base, sizeof base, "tests/fixtures/models/mha");
    fixture_path(uio, sizeof uio, "tests/fixtures/uio/mha_c16_m4/uio_st");
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = 1;
    mp.uio_dir = uio;
    mnemo_model *m = NULL;
    if (mnemo_model_load(base, &mp, &m) != MNEMO_OK) {
        CHECK(false, "limits: load: %s", mnemo_model_error(m));
        mnemo_model_free(m);
        return;
    }
    mnemo_context_params cp = mnemo_context_default_params();
    mnemo_context *ctx = NULL;
    cp.uio_keep_raw = 17;
    mnemo_status st = mnemo_context_new(m, &cp, &ctx);
    CHECK(st == MNEMO_ERR_INVALID_ARG && strstr(mnemo_context_error(ctx), "uio_keep_raw 17 outside 0..16"),
          "W 17 > chunk_size: %d (%s)", st, mnemo_context_error(ctx));
    mnemo_context_free(ctx);
    ctx = NULL;
    cp.uio_keep_raw = 8;
    cp.n_ctx = 27; /* 16 + 4 + 8 = 28 needed */
    st = mnemo_context_new(m, &cp, &ctx);
    CHECK(st == MNEMO_ERR_INVALID_ARG && strstr(mnemo_context_error(ctx), "8 kept raw tokens need 28"),
          "n_ctx 27 with W 8: %d (%s)", st, mnemo_context_error(ctx));
    mnemo_context_free(ctx);
    ctx = NULL;
    cp.n_ctx = 28; /* the second segment needs 4 entries + 8 kept + 16 raw = 28; the third would need 32 */
    st = mnemo_context_new(m, &cp, &ctx);
    int32_t toks[48];
    for (int i = 0; i < 48; i++) toks[i] = 3 + i;
    st = st == MNEMO_OK ? mnemo_decode(ctx, toks, 32) : st;
    CHECK(st == MNEMO_OK && mnemo_context_entry_max(ctx) == 12, "W 8 in n_ctx 28: 32 tokens: %d, entry_max %d (%s)",
          st, mnemo_context_entry_max(ctx), mnemo_context_error(ctx));
    st = mnemo_decode(ctx, toks, 13); /* 8 entries + 8 kept + 13 raw = 29 > 28 */
    CHECK(st == MNEMO_ERR_CONTEXT_FULL && mnemo_context_n_past(ctx) == 32, "13 more: %d (%s)", st,
          mnemo_context_error(ctx));
    st = mnemo_decode(ctx, toks, 12);
    CHECK(st == MNEMO_OK && mnemo_context_entry_max(ctx) == 0, "12 more: %d, entry_max %d (%s)", st,
          mnemo_context_entry_max(ctx), mnemo_context_error(ctx));
    mnemo_context_free(ctx);
    mnemo_model_free(m);
}

int main(void) {
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_devices devs = test_pick_devices();
    mnemo_log_set_level(MNEMO_LOG_ERROR);
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        if (devs.cpu) run_case(CASES[c], MNEMO_DEVICE_CPU, "cpu");
        if (devs.cuda) run_case(CASES[c], MNEMO_DEVICE_CUDA, "cuda");
    }
    printf("worst |dlogit| with uio_keep_raw: %.3g (tolerance %g)\n", g_worst, LOGIT_TOL);
    test_limits();
    rmdir(g_tmp);
    return test_summary();
}
