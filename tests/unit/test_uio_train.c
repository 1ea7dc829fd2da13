/*
 * test_uio_train.c — UIO training (engine/src/train/uio_*.c) against the PyTorch reference
 * (tests/reference/uio_train_reference.py, fixtures tests/fixtures/uio_train made by make_uio_train_fixtures.py):
 * for a 3-segment document on the MHA and GQA fixtures (the inference fixtures' UIO weights: non-zero LoRA A and
 * B), every UIO tensor's gradient within 1e-4 of torch's relative to the tensor's max |grad|, and each segment's
 * loss within 1e-5, for full BPTT and for reservoir runs with S = 1 (a draw that evicts, with and without the
 * compensation factor; a draw that drops). Then: the trained tensors written as a UIO directory load through
 * mnemo_model_params.uio_dir and read back equal; bad settings are refused with a message. Through the trainer API
 * (method MNEMO_TRAIN_UIO): one document trained 12 steps lowers its loss (also as mnemo_trainer_evaluate measures
 * it; forward-only documents give the training pass's losses and no gradient); 6 steps + save + resume + 6 steps
 * give the same losses and the same uio.safetensors bytes as 12 straight (the reservoir's draws included).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "tensor_index.h"
#include "test_util.h"
#include "uio_train.h"

#define GRAD_TOL 1e-4
#define LOSS_TOL 1e-5

static const tensor_entry *find(const tensor_list *tl, const char *name) {
    for (size_t i = 0; i < tl->count; i++)
        if (!strcmp(tl->items[i].name, name)) return &tl->items[i];
    return NULL;
}

static void check_mode(const char *cs, const char *mode, json_t *jm, const mnemo_model *m, uio_train_weights *w,
                       const int32_t *ids, int64_t n, const tensor_list *tl) {
    char err[512];
    uio_tbptt_opts o = {.slots = (int32_t)json_integer_value(json_object_get(jm, "slots")),
                        .compensate = json_is_true(json_object_get(jm, "compensate"))};
    uint64_t state = (uint64_t)json_integer_value(json_object_get(jm, "state"));
    uio_train_ws *ws = uio_train_ws_new(m, w, n, err, sizeof err);
    CHECK(ws, "%s/%s: %s", cs, mode, err);
    if (!ws) return;
    uio_train_weights_zero_grads(w);
    uio_doc_stats ds = {0};
    CHECK(uio_document_grads(ws, m, w, ids, NULL, n, 1.0f, &o, &state, &ds, err, sizeof err) == 0, "%s/%s: %s", cs,
          mode, err);
    const double loss_sum = ds.loss_sum;
    const int32_t n_loss = ds.n_losses;
    json_t *losses = json_object_get(jm, "losses");
    double want = 0;
    for (size_t i = 0; i < json_array_size(losses); i++) want += json_number_value(json_array_get(losses, i));
    CHECK(n_loss == (int32_t)json_array_size(losses) && fabs(loss_sum - want) <= LOSS_TOL * fabs(want),
          "%s/%s: %d losses summing to %.7f, torch %zu summing to %.7f", cs, mode, n_loss, loss_sum,
          json_array_size(losses), want);
    double worst = 0, norm = 0;
    const char *worst_name = "";
    for (size_t i = 0; i < w->count; i++) {
        char name[160];
        snprintf(name, sizeof name, "%s/%s", mode, w->t[i].name);
        const tensor_entry *ti = find(tl, name);
        if (!ti || (size_t)(ti->nbytes / 4) != w->t[i].n) {
            CHECK(0, "%s: %s %s", cs, name, ti ? "has another size" : "is missing from the fixture");
            continue;
        }
        const float *r = ti->data;
        double top = 1e-30, diff = 0;
        for (size_t k = 0; k < w->t[i].n; k++) {
            top = fmax(top, fabs(r[k])), diff = fmax(diff, fabs(r[k] - w->t[i].g[k]));
            norm += (double)w->t[i].g[k] * w->t[i].g[k];
        }
        double rel = top > 1e-20 ? diff / top : diff;
        CHECK(rel <= GRAD_TOL, "%s/%s: %s relative error %.2e (max |grad| %.3g)", cs, mode, w->t[i].name, rel, top);
        if (rel > worst) worst = rel, worst_name = w->t[i].name;
    }
    double want_norm = json_number_value(json_object_get(jm, "grad_norm"));
    printf("%-11s %-18s S=%d%s  loss sum %.6f (torch %.6f)  |g| %.5g (torch %.5g)  worst rel %.2e (%s)\n", cs, mode,
           o.slots, o.slots && !o.compensate ? " no factor" : "", loss_sum, want, sqrt(norm), want_norm, worst,
           worst_name);
    if (!o.slots) { /* forward only: the same losses, no gradient, no draw */
        uio_train_weights_zero_grads(w);
        o.forward_only = true;
        uint64_t st0 = 0;
        uio_doc_stats fs = {0};
        CHECK(uio_document_grads(ws, m, w, ids, NULL, n, 1.0f, &o, &st0, &fs, err, sizeof err) == 0, "%s", err);
        double gmax = 0;
        for (size_t i = 0; i < w->count; i++)
            for (size_t k = 0; k < w->t[i].n; k++) gmax = fmax(gmax, fabs(w->t[i].g[k]));
        CHECK(fs.loss_sum == loss_sum && gmax == 0 && st0 == 0 && fs.tokens == n - (n + w->C - 1) / w->C,
              "%s forward only: loss sum %.7f (with gradients %.7f), max |grad| %g, %lld tokens", cs, fs.loss_sum,
              loss_sum, gmax, (long long)fs.tokens);
    }
    uio_train_ws_free(ws);
}

static void check_case(const char *cs, const char *base) {
    char dir[4600], path[4700], err[512];
    snprintf(dir, sizeof dir, "%s/models/%s", test_fixtures(), base);
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU;
    mp.n_threads = 1;
    mnemo_model *m = NULL;
    uio_train_weights w = {0};
    tensor_list tl = {0};
    uint8_t *img = NULL;
    if (mnemo_model_load(dir, &mp, &m) != MNEMO_OK) {
        CHECK(0, "%s: %s", dir, mnemo_model_error(m));
        goto out;
    }
    snprintf(path, sizeof path, "%s/uio/%s/uio_st", test_fixtures(), cs);
    if (uio_train_weights_init(&w, m, path, 0, 0, 0, 0, 0, err, sizeof err)) {
        CHECK(0, "%s: %s", cs, err);
        goto out;
    }
    snprintf(path, sizeof path, "%s/uio_train/%s/reference.json", test_fixtures(), cs);
    json_t *ref = json_load_file(path, 0, NULL);
    CHECK(ref, "%s unreadable", path);
    if (!ref) goto out;
    json_t *jids = json_object_get(ref, "ids");
    int64_t n = (int64_t)json_array_size(jids);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(jids, (size_t)i));
    snprintf(path, sizeof path, "%s/uio_train/%s/grads.safetensors", test_fixtures(), cs);
    size_t len = 0;
    img = test_slurp(path, &len);
    CHECK(img && safetensors_parse(img, len, path, &tl, err, sizeof err) == 0, "%s: %s", path, err);
    const char *mode;
    json_t *jm;
    json_object_foreach(json_object_get(ref, "modes"), mode, jm) check_mode(cs, mode, jm, m, &w, ids, n, &tl);

    /* the product: written, loaded by inference, read back equal */
    char tmp[] = "/tmp/test_uio_train_XXXXXX";
    CHECK(mkdtemp(tmp), "mkdtemp");
    CHECK(uio_train_weights_write(&w, tmp, err, sizeof err) == 0, "write: %s", err);
    mnemo_model_params up = mp;
    up.uio_dir = tmp;
    mnemo_model *um = NULL;
    CHECK(mnemo_model_load(dir, &up, &um) == MNEMO_OK, "the written UIO directory does not load: %s",
          mnemo_model_error(um));
    mnemo_model_free(um);
    uio_train_weights back = {0};
    CHECK(uio_train_weights_init(&back, m, tmp, 0, 0, 0, 0, 0, err, sizeof err) == 0, "reload: %s", err);
    double diff = 0;
    for (size_t i = 0; back.t && i < w.count; i++)
        for (size_t k = 0; k < w.t[i].n; k++) diff = fmax(diff, fabs(back.t[i].p[k] - w.t[i].p[k]));
    CHECK(back.t && diff <= 1e-6, "%s: values read back differ by %g", cs, diff);
    uio_train_weights_free(&back);
    snprintf(path, sizeof path, "%s/uio.safetensors", tmp), unlink(path);
    snprintf(path, sizeof path, "%s/uio_config.json", tmp), unlink(path);
    rmdir(tmp);

    /* refusals */
    uio_train_ws *ws = uio_train_ws_new(m, &w, w.C, err, sizeof err); /* one segment's room */
    uint64_t st = 0;
    uio_doc_stats ds;
    uio_tbptt_opts o = {.slots = 1, .compensate = true};
    CHECK(ws && uio_document_grads(ws, m, &w, ids, NULL, n, 1.0f, &o, &st, &ds, err, sizeof err) != 0 &&
              strstr(err, "workspace"),
          "a document longer than the workspace: '%s'", err);
    o.slots = -1;
    CHECK(ws && uio_document_grads(ws, m, &w, ids, NULL, 2, 1.0f, &o, &st, &ds, err, sizeof err) != 0,
          "negative slots accepted");
    uio_train_ws_free(ws);
    uio_train_weights bad = {0};
    CHECK(uio_train_weights_init(&bad, m, NULL, 10, 3, 4, 8, 0, err, sizeof err) != 0 && strstr(err, "multiple"),
          "chunk 10 with 3 memories: '%s'", err);
    free(ids);
    json_decref(ref);
out:
    tensor_list_free(&tl);
    free(img);
    uio_train_weights_free(&w);
    mnemo_model_free(m);
}

static uint8_t *file_bytes(const char *dir, const char *name, size_t *len) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return test_slurp(path, len);
}

static void rm_run(const char *dir) {
    const char *files[] = {"uio.safetensors", "uio_config.json", "train_state.mnemo"};
    char path[4400];
    for (int i = 0; i < 3; i++) snprintf(path, sizeof path, "%s/%s", dir, files[i]), unlink(path);
    rmdir(dir);
}

/* Runs steps [from, to) of a UIO run into out (resuming when from > 0); losses[k] receives step k's loss; eval
 * (NULL: none) the evaluation loss on the training file before and after. */
static bool run_steps(const char *model, const char *out, int from, int to, double *losses, double *eval) {
    mnemo_train_params p = mnemo_train_default_params();
    char data[4400];
    snprintf(data, sizeof data, "%s/train/data/train.txt", test_fixtures());
    p.data = data, p.out_dir = out, p.method = MNEMO_TRAIN_UIO;
    p.uio_chunk = 40, p.uio_num_memory = 4, p.tbptt_slots = 2, p.lora_rank = 4, p.lora_alpha = 8;
    p.seq_len = 400, p.steps = 12, p.lr = 1e-2, p.seed = 5, p.resume = from > 0;
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU, mp.n_threads = 1;
    mnemo_trainer *t = NULL;
    bool ok = mnemo_trainer_new(model, &mp, &p, &t) == MNEMO_OK;
    CHECK(ok, "UIO trainer: %s", mnemo_trainer_error(t));
    int64_t tokens = 0;
    if (ok && eval)
        CHECK(mnemo_trainer_evaluate(t, data, &eval[0], &tokens) == MNEMO_OK && tokens > 0, "evaluate: %s",
              mnemo_trainer_error(t));
    for (int k = from; ok && k < to; k++) {
        mnemo_train_progress pr;
        ok = mnemo_trainer_step(t, &pr) == MNEMO_OK;
        CHECK(ok, "UIO step %d: %s", k + 1, mnemo_trainer_error(t));
        losses[k] = pr.loss;
    }
    if (ok && eval)
        CHECK(mnemo_trainer_evaluate(t, data, &eval[1], &tokens) == MNEMO_OK, "evaluate: %s", mnemo_trainer_error(t));
    if (ok) CHECK((ok = mnemo_trainer_save(t) == MNEMO_OK), "save: %s", mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    return ok;
}

static void check_trainer(void) {
    char model[4400], a[] = "/tmp/test_uio_run_a_XXXXXX", b[] = "/tmp/test_uio_run_b_XXXXXX";
    snprintf(model, sizeof model, "%s/models/gqa", test_fixtures());
    if (!mkdtemp(a) || !mkdtemp(b)) return;
    double straight[12] = {0}, split[12] = {0}, eval[2] = {0};
    bool ok = run_steps(model, a, 0, 12, straight, eval) && run_steps(model, b, 0, 6, split, NULL) &&
              run_steps(model, b, 6, 12, split, NULL);
    CHECK(ok && eval[1] < eval[0] - 0.1, "mnemo_trainer_evaluate on the training file: %.4f before, %.4f after",
          eval[0], eval[1]);
    CHECK(ok && straight[11] < straight[0] - 0.1, "one document, 12 steps: loss %.4f -> %.4f", straight[0],
          straight[11]);
    bool same = true;
    for (int k = 0; k < 12; k++) same = same && straight[k] == split[k];
    size_t la = 0, lb = 0;
    uint8_t *fa = file_bytes(a, "uio.safetensors", &la), *fb = file_bytes(b, "uio.safetensors", &lb);
    CHECK(ok && same && fa && fb && la == lb && !memcmp(fa, fb, la),
          "resumed at step 6: losses %s, uio.safetensors %s", same ? "equal" : "differ",
          fa && fb && la == lb && !memcmp(fa, fb, la) ? "equal" : "differ");
    printf("trainer API: one 400-token document, 12 AdamW steps: loss %.4f -> %.4f (evaluated %.4f -> %.4f); resumed "
           "at 6: %s\n", straight[0], straight[11], eval[0], eval[1], same ? "same losses and bytes" : "DIFFERENT");
    free(fa), free(fb);
    rm_run(a), rm_run(b);
    /* refusals */
    mnemo_train_params p = mnemo_train_default_params();
    p.data = "/nonexistent", p.out_dir = a, p.method = MNEMO_TRAIN_UIO, p.uio_init = "/nonexistent-uio";
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU;
    char data[4400];
    snprintf(data, sizeof data, "%s/train/data/train.txt", test_fixtures());
    p.data = data, p.seq_len = 48;
    mnemo_trainer *t = NULL;
    CHECK(mnemo_trainer_new(model, &mp, &p, &t) != MNEMO_OK && strstr(mnemo_trainer_error(t), "nonexistent-uio"),
          "a missing --uio-init: '%s'", mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    p.uio_init = NULL, p.uio_chunk = 12, p.uio_num_memory = 3, p.tbptt_slots = -1;
    CHECK(mnemo_trainer_new(model, &mp, &p, &t) != MNEMO_OK && strstr(mnemo_trainer_error(t), "slots"),
          "negative slots: '%s'", mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    rmdir(a);
}

int main(void) {
    check_case("mha_c16_m4", "mha");
    check_case("gqa_c12_m3", "gqa");
    check_trainer();
    return test_summary();
}
