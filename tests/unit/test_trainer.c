/*
 * test_trainer.c — the public training API (mnemo_trainer_*) end to end:
 *   - the torch + peft AdamW runs of tests/fixtures/train/adamw reproduced through mnemo_trainer (full fine-tuning
 *     with and without gradient accumulation; LoRA from peft's own init via init_adapter): every step's loss and
 *     pre-clip gradient norm within 1e-5 relative, the final adapter within 1e-5 of peft's (relative to each
 *     tensor's largest value);
 *   - resume: a run stopped after any step and resumed from its last checkpoint gives the uninterrupted run's
 *     losses and final adapter bit for bit (and so does --recompute);
 *   - refusals that leave the checkpoint untouched: other settings, a corrupt file, another model, a state that
 *     would be overwritten, nothing to resume.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "tensor_index.h"
#include "test_util.h"

static char tmp_root[256];

static const char *out_dir(const char *name) {
    static char buf[8][512];
    static int k;
    char *s = buf[k++ % 8];
    snprintf(s, 512, "%s/%s", tmp_root, name);
    return s;
}

static mnemo_train_params fixture_params(const char *data, const char *out, int G) {
    mnemo_train_params p = mnemo_train_default_params();
    p.data = data, p.out_dir = out;
    p.steps = 10, p.batch = 2, p.seq_len = 16, p.grad_accum = G, p.lr = 1e-3, p.schedule = MNEMO_LR_COSINE;
    p.warmup = 2, p.weight_decay = 0.01, p.grad_clip = 1.0, p.shuffle = false;
    return p;
}

static mnemo_model_params cpu(void) {
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU;
    mp.n_threads = 2;
    return mp;
}

/* Runs p on model to the end, recording every step's loss (NULL: not kept). MNEMO status of the run. */
static mnemo_status run(const char *model, const mnemo_train_params *p, double *losses, double *norms, char *err,
                        size_t errlen) {
    mnemo_model_params mp = cpu();
    mnemo_trainer *t = NULL;
    mnemo_status st = mnemo_trainer_new(model, &mp, p, &t);
    while (st == MNEMO_OK && mnemo_trainer_steps_done(t) < mnemo_trainer_total_steps(t)) {
        mnemo_train_progress pr;
        if ((st = mnemo_trainer_step(t, &pr)) != MNEMO_OK) break;
        if (losses) losses[pr.step - 1] = pr.loss;
        if (norms) norms[pr.step - 1] = pr.grad_norm;
        if (p->checkpoint_every && pr.step % p->checkpoint_every == 0) st = mnemo_trainer_save(t);
    }
    if (st == MNEMO_OK) st = mnemo_trainer_save(t);
    snprintf(err, errlen, "%s", mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    return st;
}

static void check_against_torch(const char *runname, mnemo_train_method method, int G) {
    char model[4600], data[4600], path[4700], err[1024], init[4700];
    snprintf(model, sizeof model, "%s/models/mha", test_fixtures());
    snprintf(data, sizeof data, "%s/train/data/train.txt", test_fixtures());
    snprintf(path, sizeof path, "%s/train/adamw/%s/steps.json", test_fixtures(), runname);
    snprintf(init, sizeof init, "%s/train/adamw/%s/adapter_init", test_fixtures(), runname);
    json_t *ref = json_load_file(path, 0, NULL), *log = json_object_get(ref, "log");
    mnemo_train_params p = fixture_params(data, out_dir(runname), G);
    p.method = method;
    if (method == MNEMO_TRAIN_LORA) p.init_adapter = init, p.lora_rank = 0;
    double losses[10] = {0}, norms[10] = {0};
    mnemo_status st = run(model, &p, losses, norms, err, sizeof err);
    CHECK(st == MNEMO_OK && log, "%s: %s", runname, err);
    double worst_l = 0, worst_n = 0;
    for (int s = 0; s < 10 && log; s++) {
        json_t *e = json_array_get(log, (size_t)s);
        double wl = json_number_value(json_object_get(e, "loss")), wn = json_number_value(json_object_get(e, "grad_norm"));
        worst_l = fmax(worst_l, fabs(losses[s] - wl) / wl), worst_n = fmax(worst_n, fabs(norms[s] - wn) / wn);
        CHECK(fabs(losses[s] - wl) <= 1e-5 * wl && fabs(norms[s] - wn) <= 1e-5 * wn,
              "%s step %d: loss %.7f (torch %.7f), grad norm %.6f (torch %.6f)", runname, s, losses[s], wl, norms[s], wn);
    }
    double worst_p = 0;
    if (method == MNEMO_TRAIN_LORA) { /* the final adapter against peft's save_pretrained after step 10 */
        char mine[4700], theirs[4700];
        snprintf(mine, sizeof mine, "%s/adapter_model.safetensors", p.out_dir);
        snprintf(theirs, sizeof theirs, "%s/train/adamw/%s/adapter_final/adapter_model.safetensors", test_fixtures(), runname);
        size_t la = 0, lb = 0;
        uint8_t *a = test_slurp(mine, &la), *b = test_slurp(theirs, &lb);
        tensor_list ta = {0}, tb = {0};
        CHECK(a && b && !safetensors_parse(a, la, mine, &ta, err, sizeof err) &&
                  !safetensors_parse(b, lb, theirs, &tb, err, sizeof err) && ta.count == tb.count && tb.count > 0,
              "%s: final adapters (%zu vs %zu tensors)", runname, ta.count, tb.count);
        for (size_t i = 0; i < tb.count; i++) {
            const tensor_entry *x = NULL;
            for (size_t j = 0; j < ta.count; j++)
                if (!strcmp(ta.items[j].name, tb.items[i].name)) x = &ta.items[j];
            CHECK(x && x->nbytes == tb.items[i].nbytes && x->dtype == TENSOR_F32, "%s: %s missing", runname, tb.items[i].name);
            if (!x || x->nbytes != tb.items[i].nbytes) continue;
            const float *u = x->data, *v = tb.items[i].data;
            double top = 1e-30, diff = 0;
            for (size_t k = 0; k < x->nbytes / 4; k++) top = fmax(top, fabs(v[k])), diff = fmax(diff, fabs(u[k] - v[k]));
            worst_p = fmax(worst_p, diff / top);
            CHECK(diff / top <= 1e-5, "%s: %s differs from peft's by %.2e relative", runname, tb.items[i].name, diff / top);
        }
        tensor_list_free(&ta), tensor_list_free(&tb);
        free(a), free(b);
    }
    printf("%-16s via mnemo_trainer: worst relative loss %.2e, grad norm %.2e%s", runname, worst_l, worst_n,
           method == MNEMO_TRAIN_LORA ? "" : "\n");
    if (method == MNEMO_TRAIN_LORA) printf(", final adapter %.2e (vs torch + peft)\n", worst_p);
    json_decref(ref);
}

/* torch.optim.SGD (momentum 0.9, weight decay 0.01), clipping, linear schedule with warmup: 10 full fine-tuning
 * steps against tests/fixtures/train/sgd/full_mha. */
static void check_sgd_against_torch(void) {
    char model[4600], data[4600], path[4700], err[1024];
    snprintf(model, sizeof model, "%s/models/mha", test_fixtures());
    snprintf(data, sizeof data, "%s/train/data/train.txt", test_fixtures());
    snprintf(path, sizeof path, "%s/train/sgd/full_mha/steps.json", test_fixtures());
    json_t *ref = json_load_file(path, 0, NULL), *log = json_object_get(ref, "log");
    mnemo_train_params p = fixture_params(data, out_dir("sgd_full_mha"), 1);
    p.method = MNEMO_TRAIN_FULL, p.optimizer = MNEMO_OPTIM_SGD, p.lr = 0.05, p.momentum = 0.9, p.weight_decay = 0.01;
    p.schedule = MNEMO_LR_LINEAR;
    double losses[10] = {0}, norms[10] = {0};
    CHECK(run(model, &p, losses, norms, err, sizeof err) == MNEMO_OK && log, "sgd: %s", err);
    double worst_l = 0, worst_n = 0;
    for (int s = 0; s < 10 && log; s++) {
        json_t *e = json_array_get(log, (size_t)s);
        double wl = json_number_value(json_object_get(e, "loss")), wn = json_number_value(json_object_get(e, "grad_norm"));
        worst_l = fmax(worst_l, fabs(losses[s] - wl) / wl), worst_n = fmax(worst_n, fabs(norms[s] - wn) / wn);
        CHECK(fabs(losses[s] - wl) <= 1e-5 * wl && fabs(norms[s] - wn) <= 1e-5 * wn,
              "sgd step %d: loss %.7f (torch %.7f), grad norm %.6f (torch %.6f)", s, losses[s], wl, norms[s], wn);
    }
    printf("%-16s via mnemo_trainer: worst relative loss %.2e, grad norm %.2e (torch.optim.SGD, momentum, linear)\n",
           "sgd_full_mha", worst_l, worst_n);
    json_decref(ref);
}

static bool same_file(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    uint8_t *x = test_slurp(a, &la), *y = test_slurp(b, &lb);
    bool same = x && y && la == lb && !memcmp(x, y, la);
    free(x), free(y);
    return same;
}

/* Stops after `stop` steps without saving (what SIGKILL leaves: the last checkpoint), then resumes. */
static void check_resume(mnemo_train_method method, int stop, bool recompute, bool sgd) {
    char model[4600], data[4600], err[1024];
    snprintf(model, sizeof model, "%s/models/gqa", test_fixtures());
    snprintf(data, sizeof data, "%s/train/data/train.txt", test_fixtures());
    char straight[64], resumed[64];
    snprintf(straight, sizeof straight, "straight_%d_%d_%d", method, recompute, sgd);
    snprintf(resumed, sizeof resumed, "resumed_%d_%d_%d_%d", method, stop, recompute, sgd);
    mnemo_train_params p = fixture_params(data, out_dir(straight), 2);
    p.method = method, p.lora_targets = "all", p.lora_rank = 4, p.shuffle = true, p.seed = 7, p.checkpoint_every = 3;
    if (sgd) p.optimizer = MNEMO_OPTIM_SGD, p.momentum = 0.9, p.lr = 0.05;
    static struct {
        char name[64];
        double losses[10];
    } straight_runs[16];
    static int n_straight;
    double want[10], got[10];
    for (int i = 0; i < 10; i++) got[i] = NAN;
    int k = 0;
    while (k < n_straight && strcmp(straight_runs[k].name, straight)) k++;
    if (k == n_straight && k < 16) { /* the uninterrupted run, once per configuration */
        CHECK(run(model, &p, straight_runs[k].losses, NULL, err, sizeof err) == MNEMO_OK, "straight: %s", err);
        snprintf(straight_runs[k].name, sizeof straight_runs[k].name, "%s", straight);
        n_straight++;
    }
    memcpy(want, straight_runs[k].losses, sizeof want);
    /* the interrupted run: `stop` steps, checkpoints every 3, no save at the stop */
    p.out_dir = out_dir(resumed);
    p.recompute = recompute;
    mnemo_model_params mp = cpu();
    mnemo_trainer *t = NULL;
    mnemo_status st = mnemo_trainer_new(model, &mp, &p, &t);
    for (int s = 0; st == MNEMO_OK && s < stop; s++) {
        mnemo_train_progress pr;
        st = mnemo_trainer_step(t, &pr);
        got[pr.step - 1] = pr.loss;
        if (pr.step % 3 == 0 && st == MNEMO_OK) st = mnemo_trainer_save(t);
    }
    CHECK(st == MNEMO_OK, "interrupted run: %s", mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    p.resume = stop >= 3; /* killed before the first checkpoint: the run starts again */
    t = NULL;
    st = mnemo_trainer_new(model, &mp, &p, &t);
    CHECK(st == MNEMO_OK && mnemo_trainer_steps_done(t) == stop / 3 * 3, "resume at %d: %s (at step %lld)", stop,
          mnemo_trainer_error(t), (long long)mnemo_trainer_steps_done(t));
    while (st == MNEMO_OK && mnemo_trainer_steps_done(t) < mnemo_trainer_total_steps(t)) {
        mnemo_train_progress pr;
        st = mnemo_trainer_step(t, &pr);
        got[pr.step - 1] = pr.loss;
    }
    if (st == MNEMO_OK) st = mnemo_trainer_save(t);
    CHECK(st == MNEMO_OK, "resumed run: %s", mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    int differ = 0;
    for (int i = 0; i < 10; i++) differ += memcmp(&want[i], &got[i], sizeof(double)) != 0;
    char a[600], b[600];
    const char *file = method == MNEMO_TRAIN_FULL ? "model.safetensors" : "adapter_model.safetensors";
    snprintf(a, sizeof a, "%s/%s", out_dir(straight), file);
    snprintf(b, sizeof b, "%s/%s", out_dir(resumed), file);
    CHECK(differ == 0, "method %d stop %d recompute %d sgd %d: %d of 10 losses differ", method, stop, recompute, sgd, differ);
    CHECK(same_file(a, b), "method %d stop %d: the final %s differs", method, stop, file);
    if (method == MNEMO_TRAIN_LORA_PLUS) {
        snprintf(a, sizeof a, "%s/trainable_params.safetensors", out_dir(straight));
        snprintf(b, sizeof b, "%s/trainable_params.safetensors", out_dir(resumed));
        CHECK(same_file(a, b), "LoRA+ stop %d: trainable_params differ", stop);
    }
}

static void check_refusals(void) {
    char model[4600], other[4600], data[4600], err[1024], state[600], copy[600];
    snprintf(model, sizeof model, "%s/models/mha", test_fixtures());
    snprintf(other, sizeof other, "%s/models/gqa", test_fixtures());
    snprintf(data, sizeof data, "%s/train/data/train.txt", test_fixtures());
    mnemo_train_params p = fixture_params(data, out_dir("refusals"), 1);
    p.steps = 2;
    CHECK(run(model, &p, NULL, NULL, err, sizeof err) == MNEMO_OK, "refusals setup: %s", err);
    snprintf(state, sizeof state, "%s/train_state.mnemo", p.out_dir);
    snprintf(copy, sizeof copy, "%s/state_copy", tmp_root);
    size_t len = 0;
    uint8_t *orig = test_slurp(state, &len);
    FILE *f = fopen(copy, "wb");
    if (f && orig) fwrite(orig, 1, len, f);
    if (f) fclose(f);
    mnemo_model_params mp = cpu();
    struct {
        const char *what, *expect;
        mnemo_train_params p;
        const char *model;
    } cases[6];
    int n = 0;
    cases[n] = (typeof(cases[0])){"no --resume", "pass --resume", p, model}, n++;
    mnemo_train_params q = p;
    q.resume = true, q.lr = 2e-3;
    cases[n] = (typeof(cases[0])){"other lr", "other settings", q, model}, n++;
    q = p, q.resume = true, q.steps = 3;
    cases[n] = (typeof(cases[0])){"other steps", "other settings", q, model}, n++;
    q = p, q.resume = true;
    cases[n] = (typeof(cases[0])){"other model", "model", q, other}, n++;
    q = p, q.resume = true, q.out_dir = out_dir("nothing_here");
    cases[n] = (typeof(cases[0])){"nothing to resume", "nothing to resume", q, model}, n++;
    for (int i = 0; i < n; i++) {
        mnemo_trainer *t = NULL;
        mnemo_status st = mnemo_trainer_new(cases[i].model, &mp, &cases[i].p, &t);
        CHECK(st != MNEMO_OK && strstr(mnemo_trainer_error(t), cases[i].expect), "%s: status %d, '%s'", cases[i].what,
              st, mnemo_trainer_error(t));
        CHECK(mnemo_trainer_step(t, NULL) == MNEMO_ERR_MISUSE, "%s: a failed trainer refuses to step", cases[i].what);
        mnemo_trainer_free(t);
        CHECK(same_file(state, copy), "%s: the checkpoint was changed", cases[i].what);
    }
    /* a corrupt checkpoint: one byte flipped in the middle */
    if (orig && len > 64) {
        orig[len / 2] ^= 0x40;
        f = fopen(state, "wb");
        if (f) fwrite(orig, 1, len, f), fclose(f);
        q = p, q.resume = true;
        mnemo_trainer *t = NULL;
        mnemo_status st = mnemo_trainer_new(model, &mp, &q, &t);
        CHECK(st == MNEMO_ERR_FORMAT && strstr(mnemo_trainer_error(t), "cannot resume"), "corrupt: %d '%s'", st,
              mnemo_trainer_error(t));
        mnemo_trainer_free(t);
    }
    /* bad settings and data, each with a message */
    q = p, q.out_dir = out_dir("bad"), q.batch = 0;
    mnemo_trainer *t = NULL;
    CHECK(mnemo_trainer_new(model, &mp, &q, &t) == MNEMO_ERR_INVALID_ARG && strstr(mnemo_trainer_error(t), "batch"),
          "batch 0: '%s'", mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    q = p, q.out_dir = out_dir("bad"), q.lora_targets = "q,w";
    CHECK(mnemo_trainer_new(model, &mp, &q, &t) != MNEMO_OK && strstr(mnemo_trainer_error(t), "'w'"), "target w: '%s'",
          mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    q = p, q.out_dir = out_dir("bad"), q.data = "/nonexistent/train.txt";
    CHECK(mnemo_trainer_new(model, &mp, &q, &t) == MNEMO_ERR_FORMAT && strstr(mnemo_trainer_error(t), "/nonexistent"),
          "missing data: '%s'", mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    q = p, q.out_dir = model;
    CHECK(mnemo_trainer_new(model, &mp, &q, &t) == MNEMO_ERR_INVALID_ARG && strstr(mnemo_trainer_error(t), "own"),
          "out = model: '%s'", mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    q = p, q.out_dir = out_dir("bad"), q.seq_len = 100000;
    CHECK(mnemo_trainer_new(model, &mp, &q, &t) == MNEMO_ERR_INVALID_ARG && strstr(mnemo_trainer_error(t), "seq_len"),
          "seq_len: '%s'", mnemo_trainer_error(t));
    mnemo_trainer_free(t);
    free(orig);
}

/* The adapter a LoRA run writes serves through mnemo_adapter_load; a LoRA+ one is refused there (it needs merging)
 * and its merged export loads as a plain model. */
static void check_outputs_load(void) {
    char model[4600];
    snprintf(model, sizeof model, "%s/models/gqa", test_fixtures());
    mnemo_model_params mp = cpu();
    mnemo_model *m = NULL;
    CHECK(mnemo_model_load(model, &mp, &m) == MNEMO_OK, "load gqa");
    mnemo_adapter *a = NULL;
    CHECK(mnemo_adapter_load(m, out_dir("straight_0_0_0"), &a) == MNEMO_OK, "LoRA output loads: %s", mnemo_adapter_error(a));
    mnemo_adapter_free(a);
    a = NULL;
    CHECK(mnemo_adapter_load(m, out_dir("straight_1_0_0"), &a) != MNEMO_OK &&
              strstr(mnemo_adapter_error(a), "export --merge"),
          "LoRA+ output refused unmerged: '%s'", mnemo_adapter_error(a));
    mnemo_adapter_free(a);
    mnemo_model_free(m);
    m = NULL;
    CHECK(mnemo_model_load(out_dir("straight_2_0_0"), &mp, &m) == MNEMO_OK, "full output loads as a model: %s",
          mnemo_model_error(m));
    mnemo_model_free(m);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/mnemo_test_trainer_XXXXXX");
    if (!mkdtemp(tmp_root)) return 1;
    check_against_torch("full_mha_g1", MNEMO_TRAIN_FULL, 1);
    check_against_torch("full_mha_g2", MNEMO_TRAIN_FULL, 2);
    check_against_torch("lora_mha_qv_g1", MNEMO_TRAIN_LORA, 1);
    check_against_torch("lora_mha_qv_g2", MNEMO_TRAIN_LORA, 2);
    check_sgd_against_torch();
    for (int stop = 1; stop <= 9; stop += 4) check_resume(MNEMO_TRAIN_LORA, stop, false, false);
    check_resume(MNEMO_TRAIN_LORA, 7, true, false);
    check_resume(MNEMO_TRAIN_LORA_PLUS, 4, false, false);
    check_resume(MNEMO_TRAIN_FULL, 5, false, false);
    check_resume(MNEMO_TRAIN_FULL, 8, false, true);
    check_refusals();
    check_outputs_load();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return test_summary();
}
