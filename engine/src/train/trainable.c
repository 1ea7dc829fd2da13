/*
 * trainable.c — see trainable.h.
 */
#include "trainable.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine_impl.h"
#include "checkpoint_side_files.h"
#include "lora.h"
#include "rng.h"
#include "safetensors_write.h"
#include "tensor_index.h"
#include "train_mem.h"
#include "errbuf.h"

/* "q,v", "q_proj,v_proj", "all" -> a lora_target bit set; 0 on an unknown name (named in err). */
static unsigned parse_targets(const char *s, char *err, size_t errlen) {
    if (!s || !*s) return errbuf_fail(err, errlen, "no LoRA targets given"), 0;
    if (!strcmp(s, "all")) return (1u << LORA_N_TARGETS) - 1;
    unsigned bits = 0;
    for (const char *at = s; *at;) {
        size_t len = strcspn(at, ",");
        char name[32];
        if (len == 0 || len >= sizeof name - 5)
            return errbuf_fail(err, errlen, "LoRA targets '%s': an empty or overlong name", s), 0;
        memcpy(name, at, len);
        name[len] = 0;
        if (!strstr(name, "_proj")) strcat(name, "_proj");
        int t = lora_target_parse(name);
        if (t < 0)
            return errbuf_fail(err, errlen, "LoRA target '%.*s' is not one of q,k,v,o,gate,up,down (or all)", (int)len,
                               at), 0;
        bits |= 1u << t;
        at += len + (at[len] == ',');
    }
    return bits;
}

static void peft_name(char *out, size_t cap, int32_t l, int t, char ab) {
    snprintf(out, cap, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", l, t <= LORA_O ? "self_attn" : "mlp",
             lora_target_name((lora_target)t), ab);
}

static int add_item(trainable *t, const char *name, float *p, float *g, size_t n, size_t *cap) {
    if (t->count == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        train_param *items = realloc(t->items, c * sizeof *items);
        if (!items) return -1;
        t->items = items, *cap = c;
    }
    train_param *it = &t->items[t->count++];
    snprintf(it->name, sizeof it->name, "%s", name);
    it->p = p, it->g = g, it->n = n;
    return 0;
}

static int init_lora(trainable *t, const mnemo_model *m, const mnemo_train_params *p, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    lora_adapter from = {0};
    if (p->init_adapter) {
        if (lora_load_host_unfolded(&from, p->init_adapter, c, err, errlen)) return -1;
        if (p->lora_rank && p->lora_rank != from.r) {
            lora_free(&from);
            return errbuf_fail(err, errlen, "--lora-rank %d but the initial adapter %s has r %d", p->lora_rank,
                               p->init_adapter, from.r);
        }
        t->lora.r = from.r, t->alpha = from.alpha, t->rslora = from.rslora, t->targets = from.targets;
    } else {
        if (p->lora_rank < 1 || p->lora_rank > 4096) return errbuf_fail(err, errlen, "LoRA rank %d: 1..4096",
                                                                        p->lora_rank);
        if (!(t->targets = parse_targets(p->lora_targets, err, errlen))) return -1;
        t->lora.r = p->lora_rank, t->alpha = p->lora_alpha;
    }
    t->lora.scale = (float)(t->alpha / (t->rslora ? sqrt((double)t->lora.r) : (double)t->lora.r));
    mnemo_rng rng;
    mnemo_rng_seed(&rng, p->seed);
    int rc = 0;
    for (int32_t l = 0; rc == 0 && l < c->num_hidden_layers; l++)
        for (int tg = 0; rc == 0 && tg < LORA_N_TARGETS; tg++) {
            if (!(t->targets >> tg & 1)) continue;
            int64_t out, in, r = t->lora.r;
            lora_target_shape(c, (lora_target)tg, &out, &in);
            float **slots[4] = {&t->lora.a[l][tg], &t->lora.ga[l][tg], &t->lora.b[l][tg], &t->lora.gb[l][tg]};
            size_t sizes[4] = {(size_t)(r * in), (size_t)(r * in), (size_t)(out * r), (size_t)(out * r)};
            for (int k = 0; k < 4; k++)
                if (!(*slots[k] = train_mem_zeros(t->be, sizes[k]))) rc = errbuf_fail(err, errlen, "out of memory");
            if (rc) break;
            const lora_pair *src = from.pairs ? lora_pair_at(&from, l, (lora_target)tg) : NULL;
            float *a = t->be ? malloc(sizes[0] * sizeof *a) : t->lora.a[l][tg]; /* A is made on the host */
            if (!a) {
                rc = errbuf_fail(err, errlen, "out of memory");
                break;
            }
            if (src) {
                memcpy(a, src->a, sizes[0] * sizeof(float));
                if (train_mem_upload(t->be, t->lora.b[l][tg], src->b, sizes[2]))
                    rc = errbuf_fail(err, errlen, "uploading the adapter failed");
            } else { /* peft: kaiming_uniform_(A, a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)); B = 0 */
                double bound = 1.0 / sqrt((double)in);
                for (size_t i = 0; i < sizes[0]; i++) a[i] = (float)((2.0 * mnemo_rng_uniform(&rng) - 1.0) * bound);
            }
            if (!rc && train_mem_upload(t->be, t->lora.a[l][tg], a, sizes[0]))
                rc = errbuf_fail(err, errlen, "uploading the adapter failed");
            if (t->be) free(a);
        }
    lora_free(&from);
    return rc;
}

int trainable_init(trainable *t, mnemo_model *m, const mnemo_train_params *p, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    t->method = p->method;
    t->be = train_mem_backend(m->be);
    const model_config *c = &m->cfg;
    if (p->method != MNEMO_TRAIN_FULL && c->num_hidden_layers > LORA_TRAIN_MAX_LAYERS)
        return errbuf_fail(err, errlen, "LoRA training supports up to %d layers (the model has %d)",
                           LORA_TRAIN_MAX_LAYERS,
                           c->num_hidden_layers);
    t->base = p->method == MNEMO_TRAIN_FULL ? TRAIN_ALL : p->method == MNEMO_TRAIN_LORA_PLUS ? TRAIN_EMBED | TRAIN_NORMS : 0;
    if (t->base && (model_params_bind_fp32_for(&t->params, m, t->base, err, errlen) ||
                    model_grads_init_for(&t->grads, m, t->base, err, errlen))) {
        trainable_free(t);
        return -1;
    }
    if (p->method != MNEMO_TRAIN_FULL && init_lora(t, m, p, err, errlen)) {
        trainable_free(t);
        return -1;
    }
    size_t cap = 0;
    char name[160];
    for (int32_t l = 0; t->lora.r && l < c->num_hidden_layers; l++)
        for (int tg = 0; tg < LORA_N_TARGETS; tg++) {
            if (!(t->targets >> tg & 1)) continue;
            int64_t out, in;
            lora_target_shape(c, (lora_target)tg, &out, &in);
            peft_name(name, sizeof name, l, tg, 'A');
            if (add_item(t, name, t->lora.a[l][tg], t->lora.ga[l][tg], (size_t)(t->lora.r * in), &cap)) goto oom;
            peft_name(name, sizeof name, l, tg, 'B');
            if (add_item(t, name, t->lora.b[l][tg], t->lora.gb[l][tg], (size_t)(out * t->lora.r), &cap)) goto oom;
        }
    for (size_t i = 0; i < t->params.count; i++)
        if (t->params.p[i].g && add_item(t, t->params.p[i].name, t->params.p[i].g, t->grads.p[i].g, t->params.p[i].n, &cap))
            goto oom;
    return 0;
oom:
    trainable_free(t);
    return errbuf_fail(err, errlen, "out of memory");
}

void trainable_free(trainable *t) {
    for (int l = 0; l < LORA_TRAIN_MAX_LAYERS; l++)
        for (int k = 0; k < 7; k++) {
            float *bufs[4] = {t->lora.a[l][k], t->lora.b[l][k], t->lora.ga[l][k], t->lora.gb[l][k]};
            for (int j = 0; j < 4; j++) train_mem_free(t->be, bufs[j]);
        }
    model_grads_free(&t->grads);
    model_grads_free(&t->params); /* the model's weights may point here: free the model first */
    free(t->items);
    memset(t, 0, sizeof *t);
}

int trainable_zero_grads(trainable *t, kern_ctx *kc) {
    int rc = KERN_OK;
    for (size_t i = 0; i < t->count && rc == KERN_OK; i++)
        if (t->be) rc = t->be->mem_set(kc, t->items[i].g, 0, t->items[i].n * sizeof(float));
        else memset(t->items[i].g, 0, t->items[i].n * sizeof(float));
    return rc == KERN_OK && t->be ? t->be->sync(kc) : rc; /* the step's kernels run on another context's stream */
}

size_t trainable_floats(const trainable *t) {
    size_t n = 0;
    for (size_t i = 0; i < t->count; i++) n += 2 * t->items[i].n;
    return n;
}

/* model.safetensors (full) or trainable_params.safetensors (LoRA+): every tensor of the base checkpoint, the trained
 * ones in fp32 (only those with only_trained). */
static int write_base(const trainable *t, const mnemo_model *m, const char *path, bool only_trained, char *err,
                      size_t errlen) {
    size_t n = weight_store_count(m->ws), k = 0, found = 0;
    st_tensor *ts = calloc(n ? n : 1, sizeof *ts);
    float **views = calloc(n ? n : 1, sizeof *views); /* device: downloaded copies of the trained tensors */
    int rc = ts && views ? 0 : errbuf_fail(err, errlen, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const tensor_entry *e = weight_store_at(m->ws, i);
        const param_grad *pg = NULL;
        for (size_t j = 0; j < t->params.count && !pg; j++)
            if (t->params.p[j].g && !strcmp(t->params.p[j].name, e->name)) pg = &t->params.p[j];
        if (pg) found++;
        if (only_trained && !pg) continue;
        if (pg && !(views[i] = train_mem_host_view(t->be, pg->g, pg->n)))
            rc = errbuf_fail(err, errlen, "out of memory (or a device copy failed) reading %s back", e->name);
        ts[k++] = pg ? (st_tensor){e->name, TENSOR_F32, e->ndim, e->shape, views[i]}
                     : (st_tensor){e->name, e->dtype, e->ndim, e->shape, e->data};
    }
    size_t want = 0;
    for (size_t j = 0; j < t->params.count; j++) want += t->params.p[j].g != NULL;
    if (rc == 0)
        rc = found != want ? errbuf_fail(err, errlen, "%zu of %zu trained tensors found among the checkpoint's", found,
                                         want)
                           : safetensors_write(path, ts, k, (const char *const[]){"format", "pt"}, 1, err, errlen);
    for (size_t i = 0; views && i < n; i++)
        if (views[i]) train_mem_host_release(t->be, views[i]);
    free(ts), free(views);
    return rc;
}

/* mkdir -p. 0, or -1 with errno. */
static int make_dirs(const char *path) {
    char buf[4200];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int trainable_write(const trainable *t, const mnemo_model *m, const char *model_dir, const char *out_dir, char *err,
                    size_t errlen) {
    if (make_dirs(out_dir) != 0) return errbuf_fail(err, errlen, "%s: cannot create: %s", out_dir, strerror(errno));
    char path[4200];
    if (t->lora.r) {
        lora_host_pair *pairs = calloc((size_t)m->cfg.num_hidden_layers * LORA_N_TARGETS, sizeof *pairs);
        size_t np = 0;
        if (!pairs) return errbuf_fail(err, errlen, "out of memory");
        int rc = 0;
        for (int32_t l = 0; l < m->cfg.num_hidden_layers; l++)
            for (int tg = 0; tg < LORA_N_TARGETS; tg++) {
                if (!(t->targets >> tg & 1)) continue;
                int64_t out, in;
                lora_target_shape(&m->cfg, (lora_target)tg, &out, &in);
                float *a = train_mem_host_view(t->be, t->lora.a[l][tg], (size_t)(t->lora.r * in));
                float *b = train_mem_host_view(t->be, t->lora.b[l][tg], (size_t)(out * t->lora.r));
                pairs[np++] = (lora_host_pair){l, (lora_target)tg, a, b};
                if (!a || !b) rc = errbuf_fail(err, errlen,
                                               "out of memory (or a device copy failed) reading the adapter back");
            }
        if (rc == 0)
            rc = lora_write_peft(out_dir, &m->cfg, t->lora.r, t->alpha, t->rslora, t->targets, pairs, np, model_dir,
                                 err, errlen);
        for (size_t i = 0; i < np; i++) {
            if (pairs[i].a) train_mem_host_release(t->be, (float *)pairs[i].a);
            if (pairs[i].b) train_mem_host_release(t->be, (float *)pairs[i].b);
        }
        free(pairs);
        if (rc) return -1;
    }
    if (t->method == MNEMO_TRAIN_LORA_PLUS) {
        snprintf(path, sizeof path, "%s/trainable_params.safetensors", out_dir);
        return write_base(t, m, path, true, err, errlen);
    }
    if (t->method != MNEMO_TRAIN_FULL) return 0;
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    if (write_base(t, m, path, false, err, errlen)) return -1;
    return checkpoint_copy_side_files(model_dir, out_dir, err, errlen);
}
