/*
 * test_s2_smt_reference.c — one training step of each long-context method against its PyTorch statement
 * (tests/reference/make_s2_smt_fixtures.py, fixtures in tests/fixtures/train/{s2,smt}):
 *   s2/tied:         S²-Attn (groups of seq_len/4 = 8, GQA 4/2 heads, tied embeddings) as a brute-force per-head
 *                    mask in torch; loss and every parameter's gradient within 1e-4 relative (to the tensor's max
 *                    |grad|), with and without --recompute. The same step with full attention, or groups of 16,
 *                    must miss the fixture (so a broken pattern fails here).
 *   smt/rope_scaled: SMT (M 48, n 8, W 8, beta 1) on the rope-scaled model: the C sampler draws the fixture's
 *                    positions from the same seed, and loss (SMT + beta x plain) and gradients match within 1e-4;
 *                    --recompute gives the same bits; the same rows at positions 0..T-1 (original positions
 *                    dropped) must miss it.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "model_grad.h"
#include "smt_sampler.h"
#include "smt_step.h"
#include "tensor_index.h"
#include "test_util.h"

#define TOL 1e-4

/* The worst relative error of g against dir/grads.safetensors (-1: a tensor missing or of another size). */
static double grads_error(const char *dir, model_grads *g, char *worst_name /* [96] */) {
    char path[4700], err[512];
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    size_t len = 0;
    uint8_t *img = test_slurp(path, &len);
    tensor_list tl = {0};
    double worst = -1;
    if (!img || safetensors_parse(img, len, path, &tl, err, sizeof err)) {
        CHECK(0, "%s: %s", path, img ? err : "cannot read");
        free(img);
        return -1;
    }
    if (tl.count == g->count) worst = 0;
    for (size_t i = 0; i < tl.count && worst >= 0; i++) {
        param_grad *p = model_grads_find(g, tl.items[i].name);
        size_t n = (size_t)(tl.items[i].nbytes / 4);
        if (!p || p->n != n) {
            worst = -1;
            break;
        }
        const float *r = tl.items[i].data;
        double top = 1e-30, diff = 0;
        for (size_t k = 0; k < n; k++) top = fmax(top, fabs(r[k])), diff = fmax(diff, fabs(r[k] - p->g[k]));
        if (diff / top > worst) worst = diff / top, snprintf(worst_name, 96, "%s", tl.items[i].name);
    }
    tensor_list_free(&tl);
    free(img);
    return worst;
}

static mnemo_model *load(const char *name) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/models/%s", test_fixtures(), name);
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU;
    mnemo_model *m = NULL;
    if (mnemo_model_load(dir, &mp, &m) != MNEMO_OK) {
        CHECK(0, "%s: %s", dir, mnemo_model_error(m));
        mnemo_model_free(m);
        return NULL;
    }
    return m;
}

/* One S² step with groups of `group` (0: full attention); returns the loss, fills g. */
static float s2_step(mnemo_model *m, const int32_t *tokens, int B, int T, int group, bool recompute, model_grads *g) {
    char err[512] = "";
    float loss = NAN;
    model_grads_zero(g);
    model_train_ws *w = model_train_ws_new(m, B, T, 0, recompute, err, sizeof err);
    if (!w || (group && model_train_ws_set_s2(w, m, group, err, sizeof err)) ||
        model_loss_and_grads_ws(w, m, tokens, NULL, 1.0f, g, TRAIN_ALL, NULL, &loss, err, sizeof err))
        CHECK(0, "S2 step: %s", err);
    model_train_ws_free(w);
    return loss;
}

static void check_s2(void) {
    char dir[4600], path[4700], err[512];
    snprintf(dir, sizeof dir, "%s/train/s2/tied", test_fixtures());
    snprintf(path, sizeof path, "%s/result.json", dir);
    json_t *res = json_load_file(path, 0, NULL);
    mnemo_model *m = load("tied");
    model_grads g = {0};
    if (!res || !m || model_grads_init(&g, m, err, sizeof err)) {
        CHECK(0, "%s: setup %s", path, err);
        goto out;
    }
    const int B = (int)json_integer_value(json_object_get(res, "batch")), T = (int)json_integer_value(json_object_get(res, "seq_len"));
    const int group = (int)json_integer_value(json_object_get(res, "group"));
    int32_t *tokens = malloc((size_t)B * (size_t)(T + 1) * sizeof *tokens);
    for (int b = 0; b < B; b++)
        for (int t = 0; t <= T; t++)
            tokens[b * (T + 1) + t] = (int32_t)json_integer_value(json_array_get(json_array_get(json_object_get(res, "tokens"), (size_t)b), (size_t)t));
    const double want = json_number_value(json_object_get(res, "loss"));
    for (int rc = 0; rc < 2; rc++) {
        float loss = s2_step(m, tokens, B, T, group, rc, &g);
        char wn[96] = "";
        double e = grads_error(dir, &g, wn);
        CHECK(fabs(loss - want) <= TOL * want, "S2%s: loss %.7f, torch %.7f", rc ? " --recompute" : "", loss, want);
        CHECK(e >= 0 && e <= TOL, "S2%s: gradient %s off by %.2e relative", rc ? " --recompute" : "", wn, e);
        printf("s2/tied%s: loss %.7f (torch %.7f), %zu gradients, worst relative error %.2e (%s)\n",
               rc ? " --recompute" : "", loss, want, g.count, e, wn);
    }
    /* broken patterns must miss the fixture */
    const int wrong[2] = {0, 2 * group};
    for (int i = 0; i < 2; i++) {
        float loss = s2_step(m, tokens, B, T, wrong[i], false, &g);
        char wn[96] = "";
        double e = grads_error(dir, &g, wn);
        CHECK(e > 100 * TOL, "%s: the fixture cannot tell it from S2 (gradient error %.2e)",
              wrong[i] ? "groups of 2g" : "full attention", e);
        printf("  broken (%s): loss %.7f, gradient error %.2e: caught\n", wrong[i] ? "groups of 2g" : "full attention",
               loss, e);
    }
    free(tokens);
out:
    model_grads_free(&g);
    mnemo_model_free(m);
    json_decref(res);
}

static void check_smt(void) {
    char dir[4600], path[4700], err[512] = "";
    snprintf(dir, sizeof dir, "%s/train/smt/rope_scaled", test_fixtures());
    snprintf(path, sizeof path, "%s/result.json", dir);
    json_t *res = json_load_file(path, 0, NULL);
    mnemo_model *m = load("rope_scaled");
    model_grads g = {0};
    model_train_ws *w = NULL;
    int32_t *docs = NULL;
    uint8_t *dmask = NULL;
    if (!res || !m || model_grads_init(&g, m, err, sizeof err)) {
        CHECK(0, "%s: setup %s", path, err);
        goto out;
    }
#define GETI(k) json_integer_value(json_object_get(res, k))
    const int B = (int)GETI("batch"), T = (int)GETI("seq_len");
    const uint64_t seed = (uint64_t)GETI("seed");
    smt_settings s = {.memory = GETI("memory"), .sampled = (int32_t)GETI("sampled_n"), .window = (int32_t)GETI("window"),
                      .decay = (int32_t)GETI("decay"), .beta = json_number_value(json_object_get(res, "beta"))};
    const int64_t D = smt_doc_tokens(&s, T);
    docs = malloc((size_t)(B * D) * sizeof *docs), dmask = malloc((size_t)(B * D));
    memset(dmask, 1, (size_t)(B * D));
    int32_t pos[64];
    for (int b = 0; b < B; b++) {
        json_t *row = json_array_get(json_object_get(res, "docs"), (size_t)b);
        for (int64_t j = 0; j < D; j++) docs[b * D + j] = (int32_t)json_integer_value(json_array_get(row, (size_t)j));
        uint64_t rng = smt_row_seed(seed, b);
        int same = s.sampled <= 64 && smt_sample(&rng, s.memory, s.sampled, s.window, s.decay, pos, err, sizeof err) == 0;
        json_t *want = json_array_get(json_object_get(res, "sampled"), (size_t)b);
        for (int i = 0; same && i < s.sampled; i++) same = pos[i] == json_integer_value(json_array_get(want, (size_t)i));
        CHECK(same, "SMT row %d: the C sampler does not draw the fixture's positions from seed %llu", b,
              (unsigned long long)seed);
    }
    w = model_train_ws_new(m, B, T, 0, false, err, sizeof err);
    float loss = NAN;
    CHECK(w && smt_microbatch(w, m, &s, seed, 0, docs, dmask, 1.0f, &g, TRAIN_ALL, NULL, &loss, err, sizeof err) == 0,
          "SMT step: %s", err);
    const double want = json_number_value(json_object_get(res, "loss"));
    char wn[96] = "";
    double e = grads_error(dir, &g, wn);
    CHECK(fabs(loss - want) <= TOL * want, "SMT: loss %.7f, torch %.7f", loss, want);
    CHECK(e >= 0 && e <= TOL, "SMT: gradient %s off by %.2e relative", wn, e);
    printf("smt/rope_scaled: loss %.7f (torch %.7f), %zu gradients, worst relative error %.2e (%s)\n", loss, want,
           g.count, e, wn);
    { /* --recompute: the same step, bit for bit */
        model_grads g2 = {0};
        model_train_ws *w2 = model_train_ws_new(m, B, T, 0, true, err, sizeof err);
        float loss2 = NAN;
        int same = w2 && model_grads_init(&g2, m, err, sizeof err) == 0 &&
                   smt_microbatch(w2, m, &s, seed, 0, docs, dmask, 1.0f, &g2, TRAIN_ALL, NULL, &loss2, err,
                                  sizeof err) == 0 && loss2 == loss;
        for (size_t i = 0; same && i < g.count; i++) same = !memcmp(g.p[i].g, g2.p[i].g, g.p[i].n * sizeof(float));
        CHECK(same, "SMT with --recompute differs from without (%s)", err);
        printf("smt/rope_scaled --recompute: identical loss and gradients: %s\n", same ? "yes" : "no");
        model_grads_free(&g2);
        model_train_ws_free(w2);
    }
    /* broken: the sampled tokens at positions 0..T-1 instead of their own */
    int32_t tok[2 * 17], ppos[2 * 16], sampled[64];
    uint8_t mask[2 * 16];
    if (B <= 2 && T <= 16) {
        for (int b = 0; b < B; b++) {
            uint64_t rng = smt_row_seed(seed, b);
            smt_sample(&rng, s.memory, s.sampled, s.window, s.decay, sampled, err, sizeof err);
            smt_row(docs + b * D, dmask + b * D, s.memory, T, sampled, s.sampled, tok + b * (T + 1), mask + b * T,
                    ppos + b * T);
        }
        model_grads_zero(&g);
        float l_s = 0, l_p = 0;
        model_loss_and_grads_ws(w, m, tok, mask, 1.0f, &g, TRAIN_ALL, NULL, &l_s, err, sizeof err);
        for (int b = 0; b < B; b++) smt_plain_row(docs + b * D, dmask + b * D, T, tok + b * (T + 1), mask + b * T, ppos + b * T);
        model_loss_and_grads_ws(w, m, tok, mask, (float)s.beta, &g, TRAIN_ALL, NULL, &l_p, err, sizeof err);
        e = grads_error(dir, &g, wn);
        CHECK(e > 100 * TOL, "SMT without the original positions: the fixture cannot tell (error %.2e)", e);
        printf("  broken (positions 0..T-1): loss %.7f, gradient error %.2e: caught\n", l_s + s.beta * l_p, e);
    }
out:
    free(docs), free(dmask);
    model_train_ws_free(w);
    model_grads_free(&g);
    mnemo_model_free(m);
    json_decref(res);
}

int main(void) {
    check_s2();
    check_smt();
    return test_summary();
}
