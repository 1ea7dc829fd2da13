/*
 * test_train_reference.c — the training pieces built so far against what torch, transformers and peft computed
 * (tests/fixtures/train, written by tests/reference/make_train_fixtures.py; see its README):
 *   - a peft adapter (non-zero A and B, all seven targets / q,v on GQA) loads in mnemo with peft's logits at every
 *     position, within 1e-4;
 *   - train.txt becomes exactly the reference stream's 30 windows, and every step of the recorded AdamW runs
 *     (G = 1 and G = 2, which wraps) takes the windows train_data gives;
 *   - the learning rate of every recorded step is lr_schedule's (cosine, warmup 2, 10 steps).
 * Gradients and optimizer steps are checked when the backward lands.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "fixture_logits.h"
#include "lr_schedule.h"
#include "test_util.h"
#include "train_data.h"

static char g_root[4096]; /* the repository root (fixture paths in the JSON files start with tests/) */

static json_t *load_json(const char *path) {
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    CHECK(j != NULL, "%s: %s", path, e.text);
    return j;
}

static void check_interop(const char *name) {
    char dir[4600], path[4700], base[4700];
    snprintf(dir, sizeof dir, "%s/train/interop/%s", test_fixtures(), name);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_t *ref = load_json(path);
    if (!ref) return;
    snprintf(base, sizeof base, "%s/%s", g_root, json_string_value(json_object_get(ref, "base")));
    snprintf(path, sizeof path, "%s/logits.bin", dir);
    logit_block blk[4];
    int nb = read_logits(path, blk, 4);
    mnemo_model *m = NULL;
    mnemo_adapter *a = NULL;
    mnemo_context *ctx = NULL;
    mnemo_context_params cp = mnemo_context_default_params();
    cp.logits_all = true;
    if (nb < 1 || mnemo_model_load(base, NULL, &m) != MNEMO_OK || mnemo_adapter_load(m, dir, &a) != MNEMO_OK ||
        mnemo_context_new(m, &cp, &ctx) != MNEMO_OK || mnemo_context_set_adapter(ctx, a) != MNEMO_OK) {
        CHECK(0, "%s: logits %d, model %s, adapter %s", name, nb, mnemo_model_error(m), mnemo_adapter_error(a));
    } else {
        json_t *prompts = json_object_get(ref, "prompts");
        for (int p = 0; p < nb && p < (int)json_array_size(prompts); p++) {
            json_t *ids = json_object_get(json_array_get(prompts, (size_t)p), "ids");
            int32_t n = (int32_t)json_array_size(ids);
            mnemo_token t[256];
            for (int32_t i = 0; i < n && i < 256; i++) t[i] = (mnemo_token)json_integer_value(json_array_get(ids, (size_t)i));
            mnemo_context_reset(ctx);
            CHECK(n == blk[p].n_tokens && mnemo_decode(ctx, t, n) == MNEMO_OK, "%s prompt %d decodes", name, p);
            float worst = 0;
            for (size_t k = 0; k < (size_t)n * (size_t)blk[p].n_vocab; k++)
                worst = fmaxf(worst, fabsf(mnemo_get_logits(ctx, 0)[k] - blk[p].data[k]));
            CHECK(worst <= 1e-4f, "%s prompt %d: peft's adapter in mnemo = peft's logits, max |dlogit| %.2e", name, p,
                  worst);
            printf("interop %-8s prompt %d: max |dlogit| vs peft %.2e over %d positions\n", name, p, worst, n);
        }
    }
    for (int i = 0; i < nb; i++) free(blk[i].data);
    mnemo_context_free(ctx);
    mnemo_adapter_free(a);
    mnemo_model_free(m);
    json_decref(ref);
}

static void check_run(mnemo_model *m, const char *run) {
    char path[4600], data[4700];
    snprintf(path, sizeof path, "%s/train/adamw/%s/steps.json", test_fixtures(), run);
    json_t *s = load_json(path);
    if (!s) return;
    int32_t B = (int32_t)json_integer_value(json_object_get(s, "batch")), L = (int32_t)json_integer_value(json_object_get(s, "seq_len"));
    int32_t G = (int32_t)json_integer_value(json_object_get(s, "grad_accum"));
    snprintf(data, sizeof data, "%s/train/data/train.txt", test_fixtures());
    char err[512];
    train_data *d = train_data_open(m, data, L, false, 0, err, sizeof err);
    CHECK(d != NULL, "%s: %s", run, err);
    lr_schedule sc = {.kind = LR_COSINE, .lr = 1e-3, .warmup = 2, .total = 10};
    json_t *log = json_object_get(s, "log");
    bool windows_ok = true, tokens_ok = true, lr_ok = true;
    for (size_t st = 0; d && st < json_array_size(log); st++) {
        json_t *e = json_array_get(log, st), *win = json_object_get(e, "windows"), *tok = json_object_get(e, "tokens");
        for (int32_t r = 0; r < B * G; r++) {
            mnemo_token row[64];
            uint8_t mask[64];
            int64_t w = train_data_row(d, (int64_t)st, B * G, r, row, mask);
            windows_ok &= w == json_integer_value(json_array_get(win, (size_t)r));
            json_t *tr = json_array_get(tok, (size_t)r);
            for (int32_t t = 0; t <= L; t++) tokens_ok &= row[t] == json_integer_value(json_array_get(tr, (size_t)t));
        }
        double want = json_number_value(json_object_get(e, "lr")), got = lr_at(&sc, (int64_t)st);
        lr_ok &= fabs(got - want) <= 1e-15 + 1e-12 * want;
    }
    CHECK(windows_ok && tokens_ok, "%s: every step takes the windows and ids torch's run took", run);
    CHECK(lr_ok, "%s: every step's lr is torch's", run);
    train_data_free(d);
    json_decref(s);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "%s/../..", test_fixtures());
    check_interop("mha_all");
    check_interop("gqa_qv");
    char dir[4600], path[4700];
    snprintf(dir, sizeof dir, "%s/models/mha", test_fixtures());
    mnemo_model *m = NULL;
    if (mnemo_model_load(dir, NULL, &m) != MNEMO_OK) {
        CHECK(0, "load %s", dir);
        return test_summary();
    }
    /* the stream: BOS + train.txt's ids, 30 windows of 17 */
    snprintf(path, sizeof path, "%s/train/data/train_ids.json", test_fixtures());
    json_t *ref = load_json(path);
    json_t *ids = ref ? json_object_get(ref, "ids") : NULL;
    snprintf(path, sizeof path, "%s/train/data/train.txt", test_fixtures());
    char err[512];
    train_data *d = train_data_open(m, path, 16, false, 0, err, sizeof err);
    CHECK(d && train_data_examples(d) == 30, "train.txt: 30 windows (%s)", d ? "" : err);
    bool same = ids != NULL;
    for (int64_t w = 0; d && same && w < 30; w++) {
        mnemo_token row[17];
        uint8_t mask[16];
        train_data_row(d, w, 1, 0, row, mask);
        for (int t = 0; t < 17; t++) same &= row[t] == json_integer_value(json_array_get(ids, (size_t)(16 * w + t)));
    }
    CHECK(same, "train.txt tokenizes to the reference's ids, window by window");
    train_data_free(d);
    json_decref(ref);
    check_run(m, "full_mha_g1");
    check_run(m, "full_mha_g2");
    check_run(m, "lora_mha_qv_g2");
    mnemo_model_free(m);
    return test_summary();
}
