/*
 * test_model_grad.c — the model backward (engine/src/train/model_grad.c) against PyTorch: for the batch of
 * tests/fixtures/train/batch.json (2 sequences of 16 predictions) the loss within 1e-5 and every parameter's
 * gradient within 1e-4 of torch's, relative to the tensor's max |grad| (the bar), on the MHA, GQA
 * (head_dim 12), tied-embedding, rope-scaled and bf16-weight fixtures (tests/fixtures/train/full/<model>).
 * LoRA gradients (every lora_A / lora_B, non-zero B) against peft on seven adapters (q,v and all seven targets, MHA,
 * GQA, tied, rope-scaled, bf16 base) and LoRA+ (embeddings and norms trainable too) at the same bar.
 * Then full fine-tuning of MHA for 10 AdamW steps (lr 1e-3, weight decay 0.01, clip 1.0, warmup 2 + cosine, B 2,
 * gradient accumulation 1 and 2) on train.txt: every step's loss and pre-clip gradient norm within 1e-5 of torch's
 * (tests/fixtures/train/adamw/full_mha_g*).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "kernels.h"
#include "lr_schedule.h"
#include "model_grad.h"
#include "train_data.h"
#include "tensor_index.h"
#include "test_util.h"

#define GRAD_TOL 1e-4

static const char *const TARGET_MODULES[7] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

static void check_model(const char *name, const int32_t *tokens, int B, int T) {
    char dir[4600], path[4700], err[512];
    snprintf(dir, sizeof dir, "%s/models/%s", test_fixtures(), name);
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU;
    mnemo_model *m = NULL;
    model_grads g = {0};
    json_t *res = NULL;
    if (mnemo_model_load(dir, &mp, &m) != MNEMO_OK || model_grads_init(&g, m, err, sizeof err)) {
        CHECK(0, "%s: %s %s", name, mnemo_model_error(m), err);
        goto out;
    }
    float loss = 0;
    CHECK(model_loss_and_grads(m, tokens, NULL, B, T, 1.0f, &g, &loss, err, sizeof err) == 0, "%s: %s", name, err);
    snprintf(path, sizeof path, "%s/train/full/%s/result.json", test_fixtures(), name);
    res = json_load_file(path, 0, NULL);
    double want = json_number_value(json_object_get(res, "loss"));
    CHECK(res && fabs(loss - want) <= 1e-5 * fabs(want), "%s: loss %.8f, torch %.8f", name, loss, want);
    char gpath[4700];
    snprintf(gpath, sizeof gpath, "%s/train/full/%s/grads.safetensors", test_fixtures(), name);
    size_t len = 0;
    uint8_t *img = test_slurp(gpath, &len);
    tensor_list tl = {0};
    CHECK(img && safetensors_parse(img, len, gpath, &tl, err, sizeof err) == 0, "%s: %s", gpath, err);
    CHECK(tl.count == g.count, "%s: %zu gradients, torch has %zu", name, g.count, tl.count);
    double worst = 0;
    const char *worst_name = "";
    for (size_t i = 0; i < tl.count; i++) {
        param_grad *p = model_grads_find(&g, tl.items[i].name);
        size_t n = (size_t)(tl.items[i].nbytes / 4);
        if (!p || p->n != n) {
            CHECK(0, "%s: gradient %s %s", name, tl.items[i].name, p ? "has another size" : "is missing");
            continue;
        }
        const float *r = tl.items[i].data;
        double top = 1e-30, diff = 0;
        for (size_t k = 0; k < n; k++) top = fmax(top, fabs(r[k])), diff = fmax(diff, fabs(r[k] - p->g[k]));
        double rel = diff / top;
        CHECK(rel <= GRAD_TOL, "%s: %s relative error %.2e", name, tl.items[i].name, rel);
        if (rel > worst) worst = rel, worst_name = tl.items[i].name;
    }
    printf("%-12s loss %.7f (torch %.7f)  %zu gradients, worst relative error %.2e (%s)\n", name, loss, want, tl.count,
           worst, worst_name);
    tensor_list_free(&tl);
    free(img);
out:
    json_decref(res);
    model_grads_free(&g);
    mnemo_model_free(m);
}

static void check_adamw_run(const char *run, int G) {
    char dir[4600], path[4700], err[512];
    snprintf(dir, sizeof dir, "%s/models/mha", test_fixtures());
    snprintf(path, sizeof path, "%s/train/adamw/%s/steps.json", test_fixtures(), run);
    json_t *ref = json_load_file(path, 0, NULL), *log = ref ? json_object_get(ref, "log") : NULL;
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU;
    mnemo_model *m = NULL;
    model_grads params = {0}, grads = {0}, adam_m = {0}, adam_v = {0};
    train_data *d = NULL;
    kern_ctx *kc = kern_cpu_ctx_new(0);
    const kern_backend *be = kern_cpu_backend();
    if (!log || mnemo_model_load(dir, &mp, &m) != MNEMO_OK || model_params_bind_fp32(&params, m, err, sizeof err) ||
        model_grads_init(&grads, m, err, sizeof err) || model_grads_init(&adam_m, m, err, sizeof err) ||
        model_grads_init(&adam_v, m, err, sizeof err)) {
        CHECK(0, "%s: setup: %s", run, err);
        goto out;
    }
    snprintf(path, sizeof path, "%s/train/data/train.txt", test_fixtures());
    d = train_data_open(m, path, 16, false, 0, err, sizeof err);
    CHECK(d != NULL, "%s: %s", run, err);
    lr_schedule sc = {.kind = LR_COSINE, .lr = 1e-3, .warmup = 2, .total = 10};
    const int B = 2, T = 16;
    double worst_loss = 0, worst_norm = 0;
    grad_span spans[64];
    for (size_t i = 0; i < grads.count && i < 64; i++) spans[i] = (grad_span){grads.p[i].g, grads.p[i].n};
    for (int s = 0; d && s < 10; s++) {
        model_grads_zero(&grads);
        double loss = 0;
        for (int g = 0; g < G; g++) {
            int32_t tokens[2 * 17];
            uint8_t mask[16];
            for (int b = 0; b < B; b++) train_data_row(d, s, B * G, g * B + b, tokens + b * (T + 1), mask);
            float lg = 0;
            CHECK(model_loss_and_grads(m, tokens, NULL, B, T, 1.0f / (float)G, &grads, &lg, err, sizeof err) == 0,
                  "%s step %d: %s", run, s, err);
            loss += lg / G;
        }
        double norm = clip_grad_norm(spans, grads.count, 1.0);
        double lr = lr_at(&sc, s);
        for (size_t i = 0; i < params.count; i++)
            CHECK(be->adamw(kc, params.p[i].g, adam_m.p[i].g, adam_v.p[i].g, grads.p[i].g, (int64_t)params.p[i].n,
                            1.0f, lr, 0.9, 0.999, 1e-8, 0.01, s + 1) == KERN_OK,
                  "adamw");
        json_t *e = json_array_get(log, (size_t)s);
        double want_loss = json_number_value(json_object_get(e, "loss")), want_norm = json_number_value(json_object_get(e, "grad_norm"));
        worst_loss = fmax(worst_loss, fabs(loss - want_loss) / want_loss);
        worst_norm = fmax(worst_norm, fabs(norm - want_norm) / want_norm);
        CHECK(fabs(loss - want_loss) <= 1e-5 * want_loss && fabs(norm - want_norm) <= 1e-5 * want_norm,
              "%s step %d: loss %.7f (torch %.7f), grad norm %.6f (torch %.6f)", run, s, loss, want_loss, norm, want_norm);
    }
    printf("%-12s 10 AdamW steps: worst relative loss error %.2e, grad norm %.2e (vs torch)\n", run, worst_loss,
           worst_norm);
out:
    train_data_free(d);
    model_grads_free(&grads);
    model_grads_free(&adam_m);
    model_grads_free(&adam_v);
    mnemo_model_free(m); /* before params: the model's weights point into them */
    model_grads_free(&params);
    kern_cpu_ctx_free(kc);
    json_decref(ref);
}


/* Fills lt from an adapter directory's safetensors (host copies; zeroed gradients). 0, or -1. */
static int lora_from_dir(lora_train *lt, const char *adir, uint8_t **img_out, tensor_list *tl) {
    char path[4700], err[256];
    snprintf(path, sizeof path, "%s/adapter_config.json", adir);
    json_t *cfg = json_load_file(path, 0, NULL);
    size_t len = 0;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", adir);
    *img_out = test_slurp(path, &len);
    if (!cfg || !*img_out || safetensors_parse(*img_out, len, path, tl, err, sizeof err)) {
        json_decref(cfg);
        return -1;
    }
    lt->r = (int32_t)json_integer_value(json_object_get(cfg, "r"));
    lt->scale = (float)(json_number_value(json_object_get(cfg, "lora_alpha")) / lt->r);
    json_decref(cfg);
    for (size_t i = 0; i < tl->count; i++) {
        int l, t = -1;
        char mod[32], ab;
        if (sscanf(tl->items[i].name, "base_model.model.model.layers.%d.%*[a-z_].%31[a-z_].lora_%c", &l, mod, &ab) != 3)
            continue;
        for (int k = 0; k < 7; k++)
            if (!strcmp(mod, TARGET_MODULES[k])) t = k;
        if (t < 0 || l >= LORA_TRAIN_MAX_LAYERS) return -1;
        size_t n = (size_t)(tl->items[i].nbytes / 4);
        float *copy = malloc(n * sizeof(float)), *grad = calloc(n, sizeof(float));
        memcpy(copy, tl->items[i].data, n * sizeof(float));
        if (ab == 'A') lt->a[l][t] = copy, lt->ga[l][t] = grad;
        else lt->b[l][t] = copy, lt->gb[l][t] = grad;
    }
    return 0;
}

/* LoRA (and LoRA+: embeddings and norms trainable too) gradients against peft's (tests/fixtures/train/lora*). */
static void check_lora(const char *sub, const char *model, bool plus, const int32_t *tokens) {
    char dir[4600], path[4700], err[512];
    snprintf(dir, sizeof dir, "%s/train/%s", test_fixtures(), sub);
    /* LoRA+ uses lora/mha_all's adapter */
    char adir[4700];
    snprintf(adir, sizeof adir, "%s/train/%s", test_fixtures(), plus ? "lora/mha_all" : sub);
    snprintf(path, sizeof path, "%s/result.json", dir);
    json_t *res = json_load_file(path, 0, NULL);
    char mdir[4600];
    snprintf(mdir, sizeof mdir, "%s/models/%s", test_fixtures(), model);
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU;
    mnemo_model *m = NULL;
    model_grads g = {0};
    lora_train lt;
    memset(&lt, 0, sizeof lt);
    size_t glen = 0;
    uint8_t *aimg = NULL;
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    uint8_t *gimg = test_slurp(path, &glen);
    tensor_list at = {0}, gt = {0};
    if (!res || !gimg || mnemo_model_load(mdir, &mp, &m) != MNEMO_OK || lora_from_dir(&lt, adir, &aimg, &at) ||
        safetensors_parse(gimg, glen, "grads", &gt, err, sizeof err) || (plus && model_grads_init_for(&g, m, TRAIN_EMBED | TRAIN_NORMS, err, sizeof err))) {
        CHECK(0, "%s: setup %s", sub, err);
        goto out;
    }
    float loss = 0;
    CHECK(model_loss_and_grads_ex(m, tokens, NULL, 2, 16, 1.0f, plus ? &g : NULL, plus ? TRAIN_EMBED | TRAIN_NORMS : 0,
                                  &lt, &loss, err, sizeof err) == 0,
          "%s: %s", sub, err);
    double want = json_number_value(json_object_get(res, "loss"));
    CHECK(fabs(loss - want) <= 1e-5 * fabs(want), "%s: loss %.8f, peft %.8f", sub, loss, want);
    double worst = 0;
    const char *worst_name = "";
    for (size_t i = 0; i < gt.count; i++) {
        const char *name = gt.items[i].name;
        const float *mine = NULL;
        size_t n = (size_t)(gt.items[i].nbytes / 4);
        int l, t = -1;
        char mod[32], ab;
        if (sscanf(name, "base_model.model.model.layers.%d.%*[a-z_].%31[a-z_].lora_%c", &l, mod, &ab) == 3) {
            for (int k = 0; k < 7; k++)
                if (!strcmp(mod, TARGET_MODULES[k])) t = k;
            if (t >= 0 && l < LORA_TRAIN_MAX_LAYERS) mine = ab == 'A' ? lt.ga[l][t] : lt.gb[l][t];
        } else if (plus && !strncmp(name, "base_model.model.", 17)) {
            param_grad *p = model_grads_find(&g, name + 17);
            mine = p && p->n == n ? p->g : NULL;
        }
        if (!mine) {
            CHECK(0, "%s: no gradient for %s", sub, name);
            continue;
        }
        const float *r = gt.items[i].data;
        double top = 1e-30, diff = 0;
        for (size_t k = 0; k < n; k++) top = fmax(top, fabs(r[k])), diff = fmax(diff, fabs(r[k] - mine[k]));
        CHECK(diff / top <= GRAD_TOL, "%s: %s relative error %.2e", sub, name, diff / top);
        if (diff / top > worst) worst = diff / top, worst_name = name;
    }
    printf("%-16s loss %.7f (peft %.7f)  %zu gradients, worst relative error %.2e (%s)\n", sub, loss, want, gt.count,
           worst, strstr(worst_name, "layers.") ? strstr(worst_name, "layers.") : worst_name);
out:
    for (int l = 0; l < LORA_TRAIN_MAX_LAYERS; l++)
        for (int t = 0; t < 7; t++) free(lt.a[l][t]), free(lt.b[l][t]), free(lt.ga[l][t]), free(lt.gb[l][t]);
    tensor_list_free(&at);
    tensor_list_free(&gt);
    free(aimg);
    free(gimg);
    model_grads_free(&g);
    mnemo_model_free(m);
    json_decref(res);
}

/* Gradient checkpointing changes where activations live, not what is computed: the loss and every gradient of a
 * workspace with recompute equal (bit for bit) those of one without, and a reused workspace gives the same again. */
static void check_recompute(const char *model, const char *adapter, const int32_t *tokens) {
    char dir[4600], adir[4700], err[512];
    snprintf(dir, sizeof dir, "%s/models/%s", test_fixtures(), model);
    snprintf(adir, sizeof adir, "%s/train/%s", test_fixtures(), adapter);
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU;
    mnemo_model *m = NULL;
    model_grads g[3] = {{0}};
    lora_train lt;
    memset(&lt, 0, sizeof lt);
    uint8_t *aimg = NULL;
    tensor_list at = {0};
    model_train_ws *plain = NULL, *rec = NULL;
    if (mnemo_model_load(dir, &mp, &m) != MNEMO_OK || lora_from_dir(&lt, adir, &aimg, &at) ||
        model_grads_init(&g[0], m, err, sizeof err) || model_grads_init(&g[1], m, err, sizeof err) ||
        model_grads_init(&g[2], m, err, sizeof err) || !(plain = model_train_ws_new(m, 2, 16, lt.r, false, err, sizeof err)) ||
        !(rec = model_train_ws_new(m, 2, 16, lt.r, true, err, sizeof err))) {
        CHECK(0, "recompute %s: setup %s", model, err);
        goto out;
    }
    CHECK(model_train_ws_bytes(rec) < model_train_ws_bytes(plain), "recompute keeps less: %zu vs %zu bytes",
          model_train_ws_bytes(rec), model_train_ws_bytes(plain));
    float loss[3];
    float **lora_g[3];
    for (int run = 0; run < 3; run++) lora_g[run] = calloc(at.count, sizeof(float *));
    for (int run = 0; run < 3; run++) {
        model_train_ws *w = run == 1 ? rec : plain; /* plain, recompute, plain again (reused) */
        for (size_t i = 0; i < at.count; i++) { /* zero every adapter gradient */
            int l, t = -1;
            char mod[32], ab;
            if (sscanf(at.items[i].name, "base_model.model.model.layers.%d.%*[a-z_].%31[a-z_].lora_%c", &l, mod, &ab) != 3)
                continue;
            for (int k = 0; k < 7; k++)
                if (!strcmp(mod, TARGET_MODULES[k])) t = k;
            float *gr = ab == 'A' ? lt.ga[l][t] : lt.gb[l][t];
            memset(gr, 0, (size_t)at.items[i].nbytes);
        }
        CHECK(model_loss_and_grads_ws(w, m, tokens, NULL, 1.0f, &g[run], TRAIN_ALL, &lt, &loss[run], err, sizeof err) == 0,
              "recompute %s run %d: %s", model, run, err);
        for (size_t i = 0; i < at.count; i++) { /* keep a copy of the adapter's gradients of this run */
            int l, t = -1;
            char mod[32], ab;
            if (sscanf(at.items[i].name, "base_model.model.model.layers.%d.%*[a-z_].%31[a-z_].lora_%c", &l, mod, &ab) != 3)
                continue;
            for (int k = 0; k < 7; k++)
                if (!strcmp(mod, TARGET_MODULES[k])) t = k;
            const float *gr = ab == 'A' ? lt.ga[l][t] : lt.gb[l][t];
            lora_g[run][i] = malloc((size_t)at.items[i].nbytes);
            memcpy(lora_g[run][i], gr, (size_t)at.items[i].nbytes);
        }
    }
    for (int run = 1; run < 3; run++) {
        CHECK(memcmp(&loss[0], &loss[run], sizeof(float)) == 0, "recompute %s run %d: loss %.9g vs %.9g", model, run,
              loss[run], loss[0]);
        size_t differ = 0;
        for (size_t i = 0; i < g[0].count; i++) differ += memcmp(g[0].p[i].g, g[run].p[i].g, g[0].p[i].n * sizeof(float)) != 0;
        for (size_t i = 0; i < at.count; i++)
            differ += lora_g[0][i] && memcmp(lora_g[0][i], lora_g[run][i], (size_t)at.items[i].nbytes) != 0;
        CHECK(differ == 0, "recompute %s run %d: %zu gradients differ", model, run, differ);
    }
    printf("%-12s recompute: %zu of %zu activation bytes, gradients bit-identical with and without, workspace reused\n",
           model, model_train_ws_bytes(rec), model_train_ws_bytes(plain));
    for (int run = 0; run < 3; run++) {
        for (size_t i = 0; i < at.count; i++) free(lora_g[run][i]);
        free(lora_g[run]);
    }
out:
    for (int l = 0; l < LORA_TRAIN_MAX_LAYERS; l++)
        for (int t = 0; t < 7; t++) free(lt.a[l][t]), free(lt.b[l][t]), free(lt.ga[l][t]), free(lt.gb[l][t]);
    tensor_list_free(&at);
    free(aimg);
    for (int i = 0; i < 3; i++) model_grads_free(&g[i]);
    model_train_ws_free(plain);
    model_train_ws_free(rec);
    mnemo_model_free(m);
}

/* LoRA r 4 on q,v from peft's own init: 10 AdamW steps (weight decay on every trained tensor) against torch. */
static void check_lora_adamw_run(const char *run, int G) {
    char dir[4600], path[4700], adir[4700], err[512];
    snprintf(dir, sizeof dir, "%s/models/mha", test_fixtures());
    snprintf(path, sizeof path, "%s/train/adamw/%s/steps.json", test_fixtures(), run);
    snprintf(adir, sizeof adir, "%s/train/adamw/%s/adapter_init", test_fixtures(), run);
    json_t *ref = json_load_file(path, 0, NULL), *log = ref ? json_object_get(ref, "log") : NULL;
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU;
    mnemo_model *m = NULL;
    lora_train lt, mom, vel;
    memset(&lt, 0, sizeof lt), memset(&mom, 0, sizeof mom), memset(&vel, 0, sizeof vel);
    uint8_t *img = NULL;
    tensor_list tl = {0};
    train_data *d = NULL;
    kern_ctx *kc = kern_cpu_ctx_new(0);
    const kern_backend *be = kern_cpu_backend();
    if (!log || mnemo_model_load(dir, &mp, &m) != MNEMO_OK || lora_from_dir(&lt, adir, &img, &tl)) {
        CHECK(0, "%s: setup", run);
        goto out;
    }
    snprintf(path, sizeof path, "%s/train/data/train.txt", test_fixtures());
    d = train_data_open(m, path, 16, false, 0, err, sizeof err);
    lr_schedule sc = {.kind = LR_COSINE, .lr = 1e-3, .warmup = 2, .total = 10};
    grad_span spans[2 * 7 * LORA_TRAIN_MAX_LAYERS];
    size_t ns = 0;
    float *params[2 * 7 * LORA_TRAIN_MAX_LAYERS], *ms[2 * 7 * LORA_TRAIN_MAX_LAYERS], *vs[2 * 7 * LORA_TRAIN_MAX_LAYERS];
    for (int l = 0; l < LORA_TRAIN_MAX_LAYERS; l++)
        for (int t = 0; t < 7; t++)
            for (int k = 0; k < 2 && lt.a[l][t]; k++) {
                const char *ab = k ? "B" : "A";
                char name[160];
                snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.%s.lora_%s.weight", l,
                         t <= 3 ? "self_attn" : "mlp", TARGET_MODULES[t], ab);
                size_t cnt = 0;
                for (size_t i = 0; i < tl.count; i++)
                    if (!strcmp(tl.items[i].name, name)) cnt = (size_t)(tl.items[i].nbytes / 4);
                spans[ns] = (grad_span){k ? lt.gb[l][t] : lt.ga[l][t], cnt};
                params[ns] = k ? lt.b[l][t] : lt.a[l][t];
                ms[ns] = calloc(cnt, sizeof(float));
                vs[ns] = calloc(cnt, sizeof(float));
                ns++;
            }
    double worst_loss = 0, worst_norm = 0;
    for (int s = 0; d && s < 10; s++) {
        for (size_t i = 0; i < ns; i++) memset(spans[i].g, 0, spans[i].n * sizeof(float));
        double loss = 0;
        for (int g = 0; g < G; g++) {
            int32_t tokens[2 * 17];
            uint8_t mask[16];
            for (int b = 0; b < 2; b++) train_data_row(d, s, 2 * G, g * 2 + b, tokens + b * 17, mask);
            float lg = 0;
            CHECK(model_loss_and_grads_ex(m, tokens, NULL, 2, 16, 1.0f / (float)G, NULL, 0, &lt, &lg, err, sizeof err) == 0,
                  "%s step %d: %s", run, s, err);
            loss += lg / G;
        }
        double norm = clip_grad_norm(spans, ns, 1.0), lr = lr_at(&sc, s);
        for (size_t i = 0; i < ns; i++)
            be->adamw(kc, params[i], ms[i], vs[i], spans[i].g, (int64_t)spans[i].n, 1.0f, lr, 0.9, 0.999, 1e-8, 0.01, s + 1);
        json_t *e = json_array_get(log, (size_t)s);
        double want_loss = json_number_value(json_object_get(e, "loss")), want_norm = json_number_value(json_object_get(e, "grad_norm"));
        worst_loss = fmax(worst_loss, fabs(loss - want_loss) / want_loss);
        worst_norm = fmax(worst_norm, fabs(norm - want_norm) / want_norm);
        CHECK(fabs(loss - want_loss) <= 1e-5 * want_loss && fabs(norm - want_norm) <= 1e-5 * want_norm,
              "%s step %d: loss %.7f (torch %.7f), grad norm %.6f (torch %.6f)", run, s, loss, want_loss, norm, want_norm);
    }
    printf("%-16s 10 AdamW steps: worst relative loss error %.2e, grad norm %.2e (vs torch + peft)\n", run,
           worst_loss, worst_norm);
    for (size_t i = 0; i < ns; i++) free(ms[i]), free(vs[i]);
out:
    for (int l = 0; l < LORA_TRAIN_MAX_LAYERS; l++)
        for (int t = 0; t < 7; t++) free(lt.a[l][t]), free(lt.b[l][t]), free(lt.ga[l][t]), free(lt.gb[l][t]);
    tensor_list_free(&tl);
    free(img);
    train_data_free(d);
    mnemo_model_free(m);
    kern_cpu_ctx_free(kc);
    json_decref(ref);
}

int main(void) {
    char path[4600];
    snprintf(path, sizeof path, "%s/train/batch.json", test_fixtures());
    json_t *b = json_load_file(path, 0, NULL);
    json_t *rows = b ? json_object_get(b, "tokens") : NULL;
    int B = (int)json_array_size(rows), T = B ? (int)json_array_size(json_array_get(rows, 0)) - 1 : 0;
    CHECK(B == 2 && T == 16, "batch.json: %d x %d", B, T);
    int32_t tokens[2 * 17];
    for (int i = 0; i < B && i < 2; i++)
        for (int t = 0; t <= T && t < 17; t++)
            tokens[i * (T + 1) + t] = (int32_t)json_integer_value(json_array_get(json_array_get(rows, (size_t)i), (size_t)t));
    json_decref(b);
    const char *models[] = {"mha", "gqa", "tied", "rope_scaled", "bf16"};
    for (int i = 0; i < 5 && B == 2 && T == 16; i++) check_model(models[i], tokens, B, T);
    const char *lora_cases[][2] = {{"lora/mha_qv", "mha"}, {"lora/mha_all", "mha"}, {"lora/gqa_qv", "gqa"},
                                   {"lora/gqa_all", "gqa"}, {"lora/tied_qv", "tied"}, {"lora/rope_scaled_qv", "rope_scaled"},
                                   {"lora/bf16_qv", "bf16"}};
    for (int i = 0; i < 7 && B == 2 && T == 16; i++) check_lora(lora_cases[i][0], lora_cases[i][1], false, tokens);
    if (B == 2 && T == 16) check_lora("lora_plus/mha", "mha", true, tokens);
    if (B == 2 && T == 16) check_recompute("gqa", "lora/gqa_all", tokens);
    check_adamw_run("full_mha_g1", 1);
    check_adamw_run("full_mha_g2", 2);
    check_lora_adamw_run("lora_mha_qv_g1", 1);
    check_lora_adamw_run("lora_mha_qv_g2", 2);
    return test_summary();
}
