/*
 * trainer_api.c — mnemo_trainer_*: a training run (engine/src/train) behind the public API: settings checked,
 * data read, the step loop (micro-batches, clipping, schedule, optimizer), checkpoints and resume.
 *
 * Resume is exact because everything a step depends on is either in train_state.mnemo (the trained tensors, the
 * optimizer's moments, the step) or a function of the step and the settings (the data order: train_data; the
 * learning rate: lr_schedule). The settings a checkpoint was written under are stored in it as text and must
 * match, with a digest of the data's rows, so a checkpoint never continues on other data or another recipe.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine_impl.h"
#include "fot_attention.h"
#include "fot_schedule.h"
#include "kernels_cpu_paths.h"
#include "log.h"
#include "lr_schedule.h"
#include "model_grad.h"
#include "optimizer.h"
#include "rope_config.h"
#include "smt_step.h"
#include "train_checkpoint.h"
#include "train_data.h"
#include "trainable.h"
#include "uio_trainer.h"

struct mnemo_trainer {
    bool failed;
    char err[MNEMO_ERRLEN];
    mnemo_model *model;
    char *model_dir, *data_path, *out_dir, *init_adapter, *targets, *fot_text;
    mnemo_train_params p;
    train_data *data;
    trainable tr;
    optimizer opt;
    model_train_ws *ws;
    uio_run *uio;         /* method UIO: its tensors, workspace and TBPTT settings (uio_trainer.h) */
    fot_schedule fot;   /* FoT: K rows per document; without FoT K = 1 (each example is one row) */
    fot_ws *fot_ws;     /* NULL without FoT */
    kern_ctx *kc;
    lr_schedule sched;
    int64_t step, total, tokens;
    double elapsed_s;
    uint64_t data_digest;
    uint64_t fingerprint; /* the base model's, taken before training changes its weights */
    char settings[2048];
    mnemo_token *rows;  /* [batch * grad_accum * K][data_len + 1] */
    uint8_t *masks;     /* [batch * grad_accum * K][data_len] */
    int32_t data_len;   /* tokens a data row predicts: seq_len, or SMT's whole document (smt_doc_tokens - 1) */
    smt_settings smt;
    mnemo_token *doc;   /* [K * data_len + 1]: one example before it is cut into K rows */
    uint8_t *doc_mask;  /* [K * data_len] */
    volatile sig_atomic_t cancel;
};

static mnemo_status tfail(mnemo_trainer *t, mnemo_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    mnemo_log(MNEMO_LOG_ERROR, "%s", t->err);
    return st;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

mnemo_train_params mnemo_train_default_params(void) {
    return (mnemo_train_params){.method = MNEMO_TRAIN_LORA, .lora_rank = 8, .lora_alpha = 16, .lora_targets = "q,v",
                                .epochs = 1, .batch = 1, .seq_len = 512, .grad_accum = 1, .lr = 1e-4,
                                .schedule = MNEMO_LR_CONSTANT, .optimizer = MNEMO_OPTIM_ADAMW, .beta1 = 0.9,
                                .beta2 = 0.999, .eps = 1e-8, .grad_clip = 1.0, .shuffle = true, .tbptt_slots = 2,
                                .tbptt_compensation = true, .smt_beta = 1.0};
}

mnemo_status mnemo_train_data_check(const mnemo_model *m, const char *path, int32_t seq_len, int64_t *examples,
                                    char *err, size_t errlen) {
    if (!err || !errlen) return MNEMO_ERR_INVALID_ARG;
    if (!m || m->failed || !path || seq_len < 1 || seq_len > m->cfg.max_position_embeddings) {
        snprintf(err, errlen, "a loaded model, a path and seq_len in 1..%d are needed",
                 m && !m->failed ? m->cfg.max_position_embeddings : 0);
        return MNEMO_ERR_INVALID_ARG;
    }
    train_data *d = train_data_open(m, path, seq_len, false, 0, err, errlen);
    if (!d) return strstr(err, "cannot open") ? MNEMO_ERR_IO : MNEMO_ERR_FORMAT;
    if (examples) *examples = train_data_examples(d);
    train_data_free(d);
    return MNEMO_OK;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static const char *method_name(mnemo_train_method m) {
    return m == MNEMO_TRAIN_FULL        ? "full"
           : m == MNEMO_TRAIN_LORA_PLUS ? "lora_plus"
           : m == MNEMO_TRAIN_UIO       ? "uio"
                                        : "lora";
}

/* A digest of every row the data can give (epoch 0's order), so a checkpoint resumes only on the same examples. */
static uint64_t data_digest(const train_data *d, int32_t L) {
    mnemo_token *tok = malloc((size_t)(L + 1) * sizeof *tok);
    uint8_t *mask = malloc((size_t)L);
    uint64_t h = 0xcbf29ce484222325ull;
    int64_t n = train_data_examples(d);
    for (int64_t j = 0; tok && mask && j < n; j++) {
        train_data_row(d, 0, (int32_t)(n < INT32_MAX ? n : INT32_MAX), (int32_t)(j % INT32_MAX), tok, mask);
        const unsigned char *b = (const unsigned char *)tok;
        for (size_t k = 0; k < (size_t)(L + 1) * sizeof *tok; k++) h = (h ^ b[k]) * 0x100000001b3ull;
        for (int32_t k = 0; k < L; k++) h = (h ^ mask[k]) * 0x100000001b3ull;
    }
    free(tok), free(mask);
    return h;
}

/* The settings that decide the arithmetic of every step, as text: a resumed run must have the same. */
static void describe_settings(mnemo_trainer *t) {
    const mnemo_train_params *p = &t->p;
    snprintf(t->settings, sizeof t->settings,
             "{\"method\":\"%s\",\"lora_rank\":%d,\"lora_alpha\":%.17g,\"lora_targets\":%u,\"rslora\":%d,"
             "\"data_digest\":\"%016llx\",\"examples\":%lld,\"steps\":%lld,\"batch\":%d,\"seq_len\":%d,"
             "\"grad_accum\":%d,\"lr\":%.17g,\"schedule\":\"%s\",\"warmup\":%lld,\"optimizer\":\"%s\","
             "\"beta1\":%.17g,\"beta2\":%.17g,\"eps\":%.17g,\"weight_decay\":%.17g,\"momentum\":%.17g,"
             "\"grad_clip\":%.17g,\"seed\":%llu,\"shuffle\":%d}",
             method_name(p->method), t->tr.lora.r, t->tr.alpha, t->tr.targets, t->tr.rslora,
             (unsigned long long)t->data_digest, (long long)train_data_examples(t->data), (long long)t->total, p->batch,
             p->seq_len, p->grad_accum, p->lr, lr_kind_name((lr_kind)p->schedule), (long long)p->warmup,
             p->optimizer == MNEMO_OPTIM_SGD ? "sgd" : "adamw", p->beta1, p->beta2, p->eps, p->weight_decay,
             p->momentum, p->grad_clip, (unsigned long long)p->seed, p->shuffle);
    if (p->s2_attn || p->rope_scale > 0 || p->smt) { /* only then, so checkpoints of plain runs keep their text */
        size_t len = strlen(t->settings);
        snprintf(t->settings + len - 1, sizeof t->settings - (len - 1),
                 ",\"s2_attn\":%d,\"rope_scale\":%.17g,\"smt\":%d,\"smt_memory\":%lld,\"smt_sampled\":%d,"
                 "\"smt_window\":%d,\"smt_decay\":%d,\"smt_beta\":%.17g}",
                 p->s2_attn, p->rope_scale, p->smt, (long long)t->smt.memory, t->smt.sampled, t->smt.window,
                 t->smt.decay, t->smt.beta);
    }
    if (t->uio) { /* the UIO settings join the object before its closing brace */
        size_t n = strlen(t->settings);
        uio_run_settings(t->uio, t->settings + n - 1, sizeof t->settings - n);
        strncat(t->settings, "}", sizeof t->settings - strlen(t->settings) - 1);
    }
    if (p->fot_schedule) { /* only then, so checkpoints of runs without FoT keep their settings text */
        size_t len = strlen(t->settings);
        snprintf(t->settings + len - 1, sizeof t->settings - (len - 1), ",\"fot\":\"%s\"}", p->fot_schedule);
    }
}

/* Example r of the `rows` examples step `step` takes from d (opened for K * L tokens: K * L + 1 of them), cut into
 * K rows of L + 1 that overlap by one, into tokens[K][L + 1] and mask[K][L]. L: t->data_len in training (seq_len, or
 * SMT's whole document with K = 1), seq_len in evaluation. */
static void fill_example(mnemo_trainer *t, const train_data *d, int32_t L, int64_t step, int32_t rows, int32_t r,
                         mnemo_token *tokens, uint8_t *mask) {
    const int32_t K = t->fot.K;
    train_data_row(d, step, rows, r, t->doc, t->doc_mask);
    for (int32_t j = 0; j < K; j++) {
        memcpy(tokens + (size_t)j * (size_t)(L + 1), t->doc + (size_t)j * (size_t)L, (size_t)(L + 1) * sizeof *tokens);
        memcpy(mask + (size_t)j * (size_t)L, t->doc_mask + (size_t)j * (size_t)L, (size_t)L);
    }
}

static char *state_path(const mnemo_trainer *t) {
    size_t len = strlen(t->out_dir) + 32;
    char *s = malloc(len);
    if (s) snprintf(s, len, "%s/train_state.mnemo", t->out_dir);
    return s;
}

/* Long-context settings: S2-Attn's group fits seq_len, the RoPE factor, SMT's shape (its defaults filled in t->smt). */
static mnemo_status check_long_params(mnemo_trainer *t, const mnemo_train_params *p) {
    if (p->s2_attn && (p->seq_len % 8))
        return tfail(t, MNEMO_ERR_INVALID_ARG, "S2-Attn splits seq_len into 4 groups shifted by half a group: seq_len "
                     "%d is not a multiple of 8", p->seq_len);
    if (p->rope_scale != 0 && !(p->rope_scale >= 1 && p->rope_scale <= 1024))
        return tfail(t, MNEMO_ERR_INVALID_ARG, "rope_scale %g: a factor in [1, 1024] (0: the model's)", p->rope_scale);
    if (p->method == MNEMO_TRAIN_UIO && (p->s2_attn || p->smt || p->rope_scale))
        return tfail(t, MNEMO_ERR_INVALID_ARG, "UIO training takes none of S2-Attn, SMT or rope_scale");
    if (p->fot_schedule && p->smt) /* FoT rows: a document's consecutive contexts; SMT rows: sampled memory + target */
        return tfail(t, MNEMO_ERR_INVALID_ARG, "--fot and --smt lay out their rows differently (FoT: K consecutive "
                     "contexts of a document, attended across the batch; SMT: sampled memory tokens at their original "
                     "positions, then the target): choose one");
    if (p->fot_schedule && p->s2_attn) /* memory layers attend across rows through fot_attention, not S2's groups */
        return tfail(t, MNEMO_ERR_INVALID_ARG, "--fot and --s2-attn do not combine: FoT's memory layers attend to other "
                     "rows' contexts, which S2-Attn's shifted groups do not cover; choose one");
    if (!p->smt) return MNEMO_OK;
    if (p->s2_attn) return tfail(t, MNEMO_ERR_INVALID_ARG, "SMT and S2-Attn are two methods: choose one");
    smt_settings *s = &t->smt;
    *s = (smt_settings){.memory = p->smt_memory ? p->smt_memory : 4 * (int64_t)p->seq_len,
                        .sampled = p->smt_sampled ? p->smt_sampled : p->seq_len / 2, .decay = p->smt_decay,
                        .beta = p->smt_beta};
    s->window = p->smt_window ? p->smt_window : s->sampled;
    if (s->sampled < 1 || s->sampled >= p->seq_len || s->memory < s->sampled || s->memory > (1 << 28) ||
        s->window < 1 || s->decay < 0 || !(s->beta >= 0 && s->beta <= 1e3))
        return tfail(t, MNEMO_ERR_INVALID_ARG, "SMT: %d sampled of %lld memory tokens (window %d, %d decay iterations, "
                     "beta %g) with seq_len %d: need 1 <= sampled < seq_len, sampled <= memory, window >= 1, beta >= 0",
                     s->sampled, (long long)s->memory, s->window, s->decay, s->beta, p->seq_len);
    return MNEMO_OK;
}

/* Every setting in range, or a message naming the first that is not. */
static mnemo_status check_params(mnemo_trainer *t, const mnemo_train_params *p) {
    if (!p->data || !p->out_dir) return tfail(t, MNEMO_ERR_INVALID_ARG, "training needs a data file and an output directory");
    if (p->method < MNEMO_TRAIN_LORA || p->method > MNEMO_TRAIN_UIO)
        return tfail(t, MNEMO_ERR_INVALID_ARG, "unknown training method %d", (int)p->method);
    if (p->batch < 1 || p->batch > 4096 || p->grad_accum < 1 || p->grad_accum > 65536 || p->seq_len < 1)
        return tfail(t, MNEMO_ERR_INVALID_ARG, "batch %d, grad_accum %d, seq_len %d: each at least 1", p->batch,
                     p->grad_accum, p->seq_len);
    if (p->steps < 0 || (p->steps == 0 && !(p->epochs > 0 && p->epochs <= 1e6)))
        return tfail(t, MNEMO_ERR_INVALID_ARG, "give a number of steps (> 0) or of epochs (> 0)");
    if (!(p->lr >= 0 && p->lr < 1e3) || p->warmup < 0 || (unsigned)p->schedule > MNEMO_LR_COSINE)
        return tfail(t, MNEMO_ERR_INVALID_ARG, "learning rate %g, warmup %lld, schedule %d: out of range", p->lr,
                     (long long)p->warmup, (int)p->schedule);
    if ((unsigned)p->optimizer > MNEMO_OPTIM_SGD || !(p->beta1 >= 0 && p->beta1 < 1) || !(p->beta2 >= 0 && p->beta2 < 1) ||
        !(p->eps > 0) || !(p->weight_decay >= 0) || !(p->momentum >= 0 && p->momentum < 1) || !(p->grad_clip >= 0))
        return tfail(t, MNEMO_ERR_INVALID_ARG, "optimizer settings out of range (betas and momentum in [0, 1), eps > 0, "
                     "weight decay and clipping >= 0)");
    if (p->checkpoint_every < 0) return tfail(t, MNEMO_ERR_INVALID_ARG, "checkpoint_every %lld < 0", (long long)p->checkpoint_every);
    return check_long_params(t, p);
}

static mnemo_status load_checkpoint(mnemo_trainer *t, const char *path) {
    size_t nb = 0;
    train_ckpt_buffer *b = optimizer_ckpt_buffers(&t->opt, &t->tr, false, &nb);
    if (!b) return tfail(t, MNEMO_ERR_NOMEM, "out of memory");
    train_ckpt_meta meta;
    char err[MNEMO_ERRLEN];
    int rc = train_ckpt_load(path, t->fingerprint, &meta, t->settings, b, nb, err, sizeof err);
    bool uploaded = rc || optimizer_ckpt_upload(&t->opt, &t->tr, b, nb) == 0; /* device: the values go back */
    optimizer_ckpt_buffers_free(&t->opt, b, nb);
    if (rc) return tfail(t, MNEMO_ERR_FORMAT, "cannot resume: %s", err);
    if (!uploaded) return tfail(t, MNEMO_ERR_BACKEND, "cannot resume: uploading %s to %s failed", path,
                                t->model->be->name);
    if (meta.step < 0 || meta.step > t->total)
        return tfail(t, MNEMO_ERR_FORMAT, "cannot resume: %s is at step %lld of %lld", path, (long long)meta.step,
                     (long long)t->total);
    t->step = meta.step;
    mnemo_log(MNEMO_LOG_INFO, "resumed %s at step %lld of %lld", path, (long long)t->step, (long long)t->total);
    return MNEMO_OK;
}

mnemo_status mnemo_trainer_new(const char *model_dir, const mnemo_model_params *mparams, const mnemo_train_params *params,
                               mnemo_trainer **out) {
    if (!out) return MNEMO_ERR_INVALID_ARG;
    mnemo_trainer *t = calloc(1, sizeof *t);
    *out = t;
    if (!t) return MNEMO_ERR_NOMEM;
    t->failed = true;
    if (!model_dir || !params) return tfail(t, MNEMO_ERR_INVALID_ARG, "a trainer needs a model directory and params");
    mnemo_status st = check_params(t, params);
    if (st) return st;
    t->p = *params;
    t->model_dir = strdup(model_dir), t->data_path = strdup(params->data), t->out_dir = strdup(params->out_dir);
    t->init_adapter = dup_or_null(params->init_adapter), t->targets = dup_or_null(params->lora_targets);
    t->fot_text = dup_or_null(params->fot_schedule);
    if (!t->model_dir || !t->data_path || !t->out_dir || (params->init_adapter && !t->init_adapter) ||
        (params->lora_targets && !t->targets) || (params->fot_schedule && !t->fot_text))
        return tfail(t, MNEMO_ERR_NOMEM, "out of memory");
    t->p.data = t->data_path, t->p.out_dir = t->out_dir, t->p.init_adapter = t->init_adapter, t->p.lora_targets = t->targets;
    t->p.fot_schedule = t->fot_text;
    char err[MNEMO_ERRLEN] = "";
    t->fot.K = 1;
    if (t->fot_text && t->p.method == MNEMO_TRAIN_UIO)
        return tfail(t, MNEMO_ERR_INVALID_ARG, "--fot trains LongLLaMA memory layers; it does not combine with --uio");
    if (t->fot_text && fot_schedule_parse(&t->fot, t->fot_text, err, sizeof err))
        return tfail(t, MNEMO_ERR_INVALID_ARG, "%s", err);
    if (t->fot_text && fot_schedule_check_docs(&t->fot, t->p.batch, err, sizeof err))
        return tfail(t, MNEMO_ERR_INVALID_ARG, "%s", err);
    struct stat a, b;
    if (stat(t->out_dir, &b) == 0 && stat(model_dir, &a) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return tfail(t, MNEMO_ERR_INVALID_ARG, "the output directory %s is the model's own: choose another", t->out_dir);
    char *sp = state_path(t);
    if (!sp) return tfail(t, MNEMO_ERR_NOMEM, "out of memory");
    bool has_state = access(sp, F_OK) == 0;
    if (has_state && !t->p.resume) {
        free(sp);
        return tfail(t, MNEMO_ERR_INVALID_ARG, "%s/train_state.mnemo exists: pass --resume to continue that run, or "
                     "choose another output directory", t->out_dir);
    }
    if (!has_state && t->p.resume) {
        st = tfail(t, MNEMO_ERR_IO, "nothing to resume: %s has no train_state.mnemo", t->out_dir);
        free(sp);
        return st;
    }
    mnemo_model_params mp = mparams ? *mparams : mnemo_model_default_params();
    /* auto stays on the CPU: it is the path checked against torch; the device runs when asked for (cuda) */
    if (mp.device == MNEMO_DEVICE_AUTO) mnemo_log(MNEMO_LOG_INFO, "training runs on the CPU (--device cuda: the GPU)");
    if (mp.device != MNEMO_DEVICE_CUDA) mp.device = MNEMO_DEVICE_CPU;
    if ((st = mnemo_model_load(model_dir, &mp, &t->model)) != MNEMO_OK) {
        tfail(t, st, "%s", mnemo_model_error(t->model));
        goto out;
    }
    t->fingerprint = model_fingerprint(t->model);
    if (t->p.rope_scale > 0) { /* position interpolation: the window grows by the factor over the model's own */
        model_config *c = &t->model->cfg;
        double longer = (double)c->max_position_embeddings * t->p.rope_scale / (double)c->rope_scaling_factor;
        c->max_position_embeddings = longer < (double)(1 << 30) ? (int32_t)longer : (1 << 30);
        c->rope_scaling_factor = (float)t->p.rope_scale;
        c->rope_scaling = ROPE_SCALING_LINEAR;
    }
    if (t->p.method != MNEMO_TRAIN_UIO && t->p.seq_len > t->model->cfg.max_position_embeddings) { /* UIO: segments */
        st = tfail(t, MNEMO_ERR_INVALID_ARG, "seq_len %d is past the model's max_position_embeddings %d", t->p.seq_len,
                   t->model->cfg.max_position_embeddings);
        goto out;
    }
    t->data_len = t->p.smt ? (int32_t)(smt_doc_tokens(&t->smt, t->p.seq_len) - 1) : t->p.seq_len;
    const int32_t K = t->fot.K, doc_len = K * t->data_len; /* an example: one document's K contexts (SMT: K = 1) */
    if (t->fot_text && !t->model->cfg.n_mem_layers) {
        st = tfail(t, MNEMO_ERR_INVALID_ARG, "--fot trains LongLLaMA memory layers: %s/config.json has no mem_layers "
                   "(a LongLLaMA-layout model has, e.g. \"mem_layers\": [6, 12, 18])", model_dir);
        goto out;
    }
    if (!strcmp(weight_store_format(t->model->ws), "gguf") && t->p.method != MNEMO_TRAIN_LORA) {
        st = tfail(t, MNEMO_ERR_UNSUPPORTED, "%s is a GGUF file: only LoRA trains over it (its weights stay frozen as "
                   "they are); %s needs the Hugging Face checkpoint directory", model_dir, method_name(t->p.method));
        goto out;
    }
    if (!(t->data = train_data_open(t->model, t->data_path, doc_len, t->p.shuffle, t->p.seed, err, sizeof err))) {
        st = tfail(t, MNEMO_ERR_FORMAT, "%s", err);
        goto out;
    }
    if (t->p.smt && !train_data_is_text(t->data)) {
        st = tfail(t, MNEMO_ERR_INVALID_ARG, "SMT samples the memory of long documents: give a text file, not %s",
                   t->data_path);
        goto out;
    }
    int64_t rows = (int64_t)t->p.batch * t->p.grad_accum;
    t->total = t->p.steps ? t->p.steps : (int64_t)ceil(t->p.epochs * (double)train_data_examples(t->data) / (double)rows);
    if (t->total < 1) t->total = 1;
    if ((t->p.method == MNEMO_TRAIN_UIO ? uio_run_init(&t->uio, &t->tr, t->model, &t->p, err, sizeof err)
                                        : trainable_init(&t->tr, t->model, &t->p, err, sizeof err)) ||
        optimizer_init(&t->opt, &t->tr, &t->p, err, sizeof err)) {
        st = tfail(t, strstr(err, "out of memory") ? MNEMO_ERR_NOMEM : MNEMO_ERR_INVALID_ARG, "%s", err);
        goto out;
    }
    if (!t->uio &&
        (!(t->ws = model_train_ws_new(t->model, t->p.batch * K, t->p.seq_len, t->tr.lora.r, t->p.recompute, err,
                                      sizeof err)) ||
         (t->p.s2_attn && model_train_ws_set_s2(t->ws, t->model, t->p.seq_len / 4, err, sizeof err)) ||
         (t->fot_text && (!(t->fot_ws = fot_ws_new_on(t->model->be, &t->model->cfg, &t->fot, t->p.batch, t->p.seq_len,
                                                      t->p.recompute, err, sizeof err)) ||
                          model_train_ws_set_fot(t->ws, t->fot_ws, err, sizeof err))))) {
        st = tfail(t, t->ws && !t->fot_text ? MNEMO_ERR_INVALID_ARG : MNEMO_ERR_NOMEM, "%s", err); /* S2: a shape */
        goto out;
    }
    t->rows = malloc((size_t)rows * (size_t)K * (size_t)(t->data_len + 1) * sizeof *t->rows);
    t->masks = malloc((size_t)rows * (size_t)K * (size_t)t->data_len);
    t->doc = malloc((size_t)(doc_len + 1) * sizeof *t->doc);
    t->doc_mask = malloc((size_t)doc_len);
    t->kc = t->model->be->ctx_new(t->model->n_threads);
    if (t->kc && t->model->be == kern_cpu_backend()) kern_cpu_set_gemm(t->kc, KERN_CPU_GEMM_EXACT); /* fp32 grads */
    if (!t->rows || !t->masks || !t->doc || !t->doc_mask || !t->kc) {
        st = tfail(t, MNEMO_ERR_NOMEM, "out of memory");
        goto out;
    }
    t->sched = (lr_schedule){.kind = (lr_kind)t->p.schedule, .lr = t->p.lr, .warmup = t->p.warmup, .total = t->total};
    t->data_digest = data_digest(t->data, doc_len);
    describe_settings(t);
    if (t->p.resume && (st = load_checkpoint(t, sp)) != MNEMO_OK) goto out;
    t->failed = false;
    mnemo_log(MNEMO_LOG_INFO, "training %s on %s (%s): %lld examples, %lld steps of %lld rows x %d tokens, %zu "
              "tensors trained (%.1f M values), activations %.1f MiB", method_name(t->p.method), t->data_path,
              t->model->be->name,
              (long long)train_data_examples(t->data), (long long)t->total, (long long)rows * K, t->p.seq_len,
              t->tr.count, (double)trainable_floats(&t->tr) / 2e6,
              (double)(t->uio ? uio_run_ws_bytes(t->uio) : model_train_ws_bytes(t->ws) + fot_ws_bytes(t->fot_ws)) /
                  (1 << 20));
    if (t->fot_text)
        mnemo_log(MNEMO_LOG_INFO, "FoT cross-batch %s: %d documents of %d contexts per micro-batch, up to %d extra "
                  "contexts per row", t->fot_text, t->p.batch, K, fot_schedule_max_extra(&t->fot));
out:
    free(sp);
    return st;
}

mnemo_status mnemo_trainer_step(mnemo_trainer *t, mnemo_train_progress *prog) {
    if (!t || t->failed) return MNEMO_ERR_MISUSE;
    if (t->step >= t->total) return tfail(t, MNEMO_ERR_MISUSE, "all %lld steps are done", (long long)t->total);
    double t0 = now_s();
    const int32_t K = t->fot.K, G = t->p.grad_accum, L = t->data_len, docs = t->p.batch * G, B = t->p.batch * K;
    const int32_t rows = docs * K; /* B rows per micro-batch: batch examples of K rows each */
    int64_t counted = 0, per[G > 0 ? G : 1];
    for (int32_t g = 0; g < G; g++) per[g] = 0;
    for (int32_t e = 0; e < docs; e++)
        fill_example(t, t->data, L, t->step, docs, e, t->rows + (size_t)e * K * (size_t)(L + 1),
                     t->masks + (size_t)e * K * (size_t)L);
    for (int32_t r = 0; r < rows; r++)
        for (int32_t k = 0; k < L; k++) per[r / B] += t->masks[(size_t)r * (size_t)L + (size_t)k];
    if (t->p.smt) /* text: every SMT row counts its whole target part, so micro-batches weigh the same */
        for (int32_t g = 0; g < G; g++) per[g] = 1;
    for (int32_t g = 0; g < G; g++) counted += per[g];
    if (trainable_zero_grads(&t->tr, t->kc) != KERN_OK)
        return tfail(t, MNEMO_ERR_BACKEND, "step %lld: clearing the gradients on %s failed", (long long)t->step + 1,
                     t->model->be->name);
    double loss = 0;
    char err[MNEMO_ERRLEN];
    if (t->uio && uio_run_rows(t->uio, t->model, t->rows, t->masks, rows, L, t->step, &loss, err, sizeof err))
        return tfail(t, MNEMO_ERR_BACKEND, "step %lld: %s", (long long)t->step + 1, err);
    for (int32_t g = 0; g < G && counted > 0 && !t->uio; g++) {
        if (!per[g]) continue; /* nothing counted in this micro-batch: no loss, no gradient */
        float share = (float)((double)per[g] / (double)counted), lg = 0; /* the step's mean over every counted token */
        const mnemo_token *rg = t->rows + (size_t)g * (size_t)B * (size_t)(L + 1);
        const uint8_t *mg = t->masks + (size_t)g * (size_t)B * (size_t)L;
        lora_train *lt = t->tr.lora.r ? &t->tr.lora : NULL;
        if (t->p.smt ? smt_microbatch(t->ws, t->model, &t->smt, t->p.seed, t->step * rows + (int64_t)g * B, rg, mg,
                                      share, &t->tr.grads, t->tr.base, lt, &lg, err, sizeof err)
                     : model_loss_and_grads_ws(t->ws, t->model, rg, mg, share, &t->tr.grads, t->tr.base, lt, &lg, err,
                                               sizeof err))
            return tfail(t, MNEMO_ERR_BACKEND, "step %lld: %s", (long long)t->step + 1, err);
        loss += (double)lg * share;
    }
    int rc;
    double norm = optimizer_clip_grad_norm(&t->opt, &t->tr, t->kc, t->p.grad_clip, &rc);
    double lr = lr_at(&t->sched, t->step);
    if (rc == KERN_OK) rc = optimizer_step(&t->opt, &t->tr, t->model->be, t->kc, lr, t->step + 1);
    if (rc == KERN_OK) rc = t->model->be->sync(t->kc); /* device: the update is done before anything reads it */
    if (rc != KERN_OK) return tfail(t, MNEMO_ERR_BACKEND, "step %lld: optimizer kernel error %d", (long long)t->step + 1, rc);
    t->step++;
    t->tokens += (int64_t)rows * t->p.seq_len * (t->p.smt && t->smt.beta > 0 ? 2 : 1);
    t->elapsed_s += now_s() - t0;
    if (prog)
        *prog = (mnemo_train_progress){.step = t->step, .total_steps = t->total, .loss = loss, .grad_norm = norm,
                                       .lr = lr, .tokens = t->tokens, .elapsed_s = t->elapsed_s};
    return MNEMO_OK;
}

mnemo_status mnemo_trainer_evaluate(mnemo_trainer *t, const char *path, double *loss, int64_t *tokens) {
    if (!t || t->failed || !path || !loss) return MNEMO_ERR_MISUSE;
    char err[MNEMO_ERRLEN];
    const int32_t B = t->p.batch, L = t->p.seq_len, K = t->fot.K;
    train_data *d = train_data_open(t->model, path, K * L, false, 0, err, sizeof err);
    if (!d) return tfail(t, MNEMO_ERR_FORMAT, "%s", err);
    if (t->uio) { /* documents one at a time through the UIO model */
        int rc = uio_run_evaluate(t->uio, t->model, d, t->rows, t->masks, t->p.seq_len, loss, tokens, err, sizeof err);
        train_data_free(d);
        return rc ? tfail(t, MNEMO_ERR_BACKEND, "evaluating %s: %s", path, err) : MNEMO_OK;
    }
    const int64_t n = train_data_examples(d);
    if (t->p.s2_attn) model_train_ws_set_s2(t->ws, t->model, 0, err, sizeof err); /* evaluated as served: full */
    double sum = 0; /* loss x counted tokens, summed over every batch */
    int64_t counted = 0;
    mnemo_status st = MNEMO_OK;
    for (int64_t first = 0; first < n && st == MNEMO_OK; first += B) {
        int32_t rows = (int32_t)(n - first < B ? n - first : B), cnt = 0;
        for (int32_t r = 0; r < B; r++) { /* a short last batch repeats its examples with nothing counted */
            int64_t ex = first + (r < rows ? r : 0);
            mnemo_token *tok = t->rows + (size_t)r * K * (size_t)(L + 1);
            uint8_t *mask = t->masks + (size_t)r * K * (size_t)L;
            fill_example(t, d, L, 0, (int32_t)(n < INT32_MAX ? n : INT32_MAX), (int32_t)ex, tok, mask);
            if (r >= rows) memset(mask, 0, (size_t)K * (size_t)L);
            for (int32_t k = 0; k < K * L; k++) cnt += mask[k];
        }
        float lg = 0;
        if (cnt && model_loss_and_grads_ws(t->ws, t->model, t->rows, t->masks, 0.0f, &t->tr.grads, 0,
                                           t->tr.lora.r ? &t->tr.lora : NULL, &lg, err, sizeof err))
            st = tfail(t, MNEMO_ERR_BACKEND, "evaluating %s: %s", path, err);
        sum += (double)lg * cnt;
        counted += cnt;
    }
    train_data_free(d);
    if (t->p.s2_attn && model_train_ws_set_s2(t->ws, t->model, t->p.seq_len / 4, err, sizeof err) && st == MNEMO_OK)
        st = tfail(t, MNEMO_ERR_NOMEM, "%s", err);
    if (st != MNEMO_OK) return st;
    *loss = counted ? sum / (double)counted : 0;
    if (tokens) *tokens = counted;
    return MNEMO_OK;
}

mnemo_status mnemo_trainer_save(mnemo_trainer *t) {
    if (!t || t->failed) return MNEMO_ERR_MISUSE;
    char err[MNEMO_ERRLEN];
    int64_t window = t->model->cfg.max_position_embeddings; /* SMT trains positions up to its documents' length */
    if (t->p.smt && smt_doc_tokens(&t->smt, t->p.seq_len) > window) window = smt_doc_tokens(&t->smt, t->p.seq_len);
    if (t->uio ? uio_run_write(t->uio, t->out_dir, err, sizeof err)
               : (trainable_write(&t->tr, t->model, t->model_dir, t->out_dir, err, sizeof err) ||
                  ((t->p.rope_scale > 0 || window > t->model->cfg.max_position_embeddings) &&
                   rope_config_write(t->model_dir, t->out_dir, t->p.rope_scale, (int32_t)window, err, sizeof err))))
        return tfail(t, MNEMO_ERR_IO, "%s", err);
    size_t nb = 0;
    train_ckpt_buffer *b = optimizer_ckpt_buffers(&t->opt, &t->tr, true, &nb);
    char *sp = state_path(t);
    train_ckpt_meta meta = {.step = t->step, .data_seed = t->p.seed};
    int rc = b && sp ? train_ckpt_save(sp, t->fingerprint, &meta, t->settings, b, nb, err, sizeof err) : -1;
    if (!b || !sp) snprintf(err, sizeof err, "out of memory (or reading the state back from the device failed)");
    optimizer_ckpt_buffers_free(&t->opt, b, nb);
    free(sp);
    return rc ? tfail(t, MNEMO_ERR_IO, "%s", err) : MNEMO_OK;
}

mnemo_status mnemo_trainer_run(mnemo_trainer *t) {
    if (!t || t->failed) return MNEMO_ERR_MISUSE;
    mnemo_status st = MNEMO_OK;
    bool cancelled = false;
    while (t->step < t->total && !cancelled) {
        mnemo_train_progress pr;
        if ((st = mnemo_trainer_step(t, &pr)) != MNEMO_OK) return st;
        if (t->p.progress && !t->p.progress(&pr, t->p.progress_user)) t->cancel = 1;
        cancelled = t->cancel;
        bool due = t->p.checkpoint_every && t->step % t->p.checkpoint_every == 0;
        if ((due || cancelled || t->step == t->total) && (st = mnemo_trainer_save(t)) != MNEMO_OK) return st;
    }
    if (t->step == 0 && t->total == 0 && (st = mnemo_trainer_save(t)) != MNEMO_OK) return st;
    return cancelled ? MNEMO_ERR_CANCELLED : MNEMO_OK;
}

void mnemo_trainer_cancel(mnemo_trainer *t) {
    if (t) t->cancel = 1;
}

int64_t mnemo_trainer_steps_done(const mnemo_trainer *t) { return t && !t->failed ? t->step : 0; }
int64_t mnemo_trainer_total_steps(const mnemo_trainer *t) { return t && !t->failed ? t->total : 0; }

void mnemo_trainer_memory(const mnemo_trainer *t, uint64_t *act, uint64_t *state) {
    bool ok = t && !t->failed;
    if (act) *act = ok ? (t->uio ? uio_run_ws_bytes(t->uio) : model_train_ws_bytes(t->ws) + fot_ws_bytes(t->fot_ws)) : 0;
    if (state) *state = ok ? (trainable_floats(&t->tr) + optimizer_floats(&t->opt, &t->tr)) * sizeof(float) : 0;
}

const char *mnemo_trainer_error(const mnemo_trainer *t) { return t ? t->err : "no trainer"; }

void mnemo_trainer_free(mnemo_trainer *t) {
    if (!t) return;
    if (t->kc) t->model->be->ctx_free(t->kc);
    model_train_ws_free(t->ws);
    fot_ws_free(t->fot_ws);
    optimizer_free(&t->opt);
    train_data_free(t->data);
    uio_run_free(t->uio); /* its device buffers while the model's backend is surely up */
    mnemo_model_free(t->model); /* before the trained tensors: its weights may point into them */
    trainable_free(&t->tr);
    free(t->rows), free(t->masks), free(t->doc), free(t->doc_mask);
    free(t->model_dir), free(t->data_path), free(t->out_dir), free(t->init_adapter), free(t->targets), free(t->fot_text);
    free(t);
}
