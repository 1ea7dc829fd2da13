/*
 * optimizer.c — see optimizer.h.
 */
#include "optimizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lr_schedule.h"
#include "train_mem.h"

int optimizer_init(optimizer *o, const trainable *t, const mnemo_train_params *p, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->be = t->be;
    o->kind = p->optimizer, o->beta1 = p->beta1, o->beta2 = p->beta2, o->eps = p->eps;
    o->weight_decay = p->weight_decay, o->momentum = p->momentum;
    o->count = t->count;
    bool adam = o->kind == MNEMO_OPTIM_ADAMW, sgd_mom = o->kind == MNEMO_OPTIM_SGD && o->momentum != 0;
    o->m = calloc(t->count ? t->count : 1, sizeof *o->m);
    o->v = calloc(t->count ? t->count : 1, sizeof *o->v);
    bool ok = o->m && o->v && (!o->be || (o->norm_sq = train_mem_zeros(o->be, 1)));
    for (size_t i = 0; ok && i < t->count; i++) {
        if (adam || sgd_mom) ok &= (o->m[i] = train_mem_zeros(o->be, t->items[i].n)) != NULL;
        if (adam) ok &= (o->v[i] = train_mem_zeros(o->be, t->items[i].n)) != NULL;
    }
    if (!ok) {
        optimizer_free(o);
        snprintf(err, errlen, "out of memory for the optimizer's state");
        return -1;
    }
    return 0;
}

void optimizer_free(optimizer *o) {
    for (size_t i = 0; i < o->count; i++) {
        if (o->m && o->m[i]) train_mem_free(o->be, o->m[i]);
        if (o->v && o->v[i]) train_mem_free(o->be, o->v[i]);
    }
    if (o->norm_sq) train_mem_free(o->be, o->norm_sq);
    free(o->m), free(o->v);
    memset(o, 0, sizeof *o);
}

size_t optimizer_floats(const optimizer *o, const trainable *t) {
    size_t n = 0;
    for (size_t i = 0; i < o->count; i++) n += t->items[i].n * ((o->m[i] != NULL) + (o->v[i] != NULL));
    return n;
}

double optimizer_clip_grad_norm(optimizer *o, trainable *t, kern_ctx *kc, double max_norm, int *rc) {
    *rc = KERN_OK;
    if (!o->be) {
        grad_span *spans = malloc((t->count ? t->count : 1) * sizeof *spans);
        if (!spans) return *rc = KERN_ENOMEM, NAN;
        for (size_t i = 0; i < t->count; i++) spans[i] = (grad_span){t->items[i].g, t->items[i].n};
        double norm = clip_grad_norm(spans, t->count, max_norm);
        free(spans);
        return norm;
    }
    const kern_backend *be = o->be;
    float sq = 0;
    *rc = be->mem_set(kc, o->norm_sq, 0, sizeof(float));
    for (size_t i = 0; i < t->count && *rc == KERN_OK; i++) *rc = be->sumsq(kc, o->norm_sq, t->items[i].g, (int64_t)t->items[i].n);
    if (*rc == KERN_OK) *rc = be->mem_copy(kc, &sq, o->norm_sq, sizeof sq, KERN_D2H);
    if (*rc != KERN_OK) return NAN;
    double norm = sqrt((double)sq);
    double coef = max_norm / (norm + 1e-6); /* as clip_grad_norm */
    for (size_t i = 0; max_norm > 0 && coef < 1.0 && i < t->count && *rc == KERN_OK; i++)
        *rc = be->axpby(kc, t->items[i].g, t->items[i].g, (int64_t)t->items[i].n, (float)coef, 0.f);
    return norm;
}

/* torch.optim.SGD on a device: the host loop below as axpby ops (g += wd p; buf = mu buf + g; p -= lr buf). */
static int sgd_device(const kern_backend *be, kern_ctx *kc, train_param *it, float *buf, float wd, float mu, float a,
                      int64_t step) {
    const int64_t n = (int64_t)it->n;
    int rc = wd != 0 ? be->axpby(kc, it->g, it->p, n, wd, 1.f) : KERN_OK;
    if (rc == KERN_OK && buf) rc = be->axpby(kc, buf, it->g, n, 1.f, step == 1 ? 0.f : mu);
    return rc != KERN_OK ? rc : be->axpby(kc, it->p, buf ? buf : it->g, n, -a, 1.f);
}

int optimizer_step(optimizer *o, trainable *t, const kern_backend *be, kern_ctx *kc, double lr, int64_t step) {
    for (size_t i = 0; i < t->count; i++) {
        train_param *it = &t->items[i];
        if (o->kind == MNEMO_OPTIM_ADAMW) {
            int rc = be->adamw(kc, it->p, o->m[i], o->v[i], it->g, (int64_t)it->n, 1.0f, lr, o->beta1, o->beta2, o->eps,
                               o->weight_decay, step);
            if (rc != KERN_OK) return rc;
            continue;
        }
        const float wd = (float)o->weight_decay, mu = (float)o->momentum, a = (float)lr;
        float *buf = o->m[i];
        if (o->be) {
            int rc = sgd_device(be, kc, it, buf, wd, mu, a, step);
            if (rc != KERN_OK) return rc;
            continue;
        }
        for (size_t k = 0; k < it->n; k++) { /* torch.optim.SGD's order of operations, in fp32 */
            float g = wd != 0 ? it->g[k] + wd * it->p[k] : it->g[k];
            if (buf) g = buf[k] = step == 1 ? g : mu * buf[k] + g;
            it->p[k] -= a * g;
        }
    }
    return KERN_OK;
}

/* Tensor i's part of the checkpoint, in order: its value, then the optimizer's moments (NULL: not kept). */
static void ckpt_tensors(const optimizer *o, const trainable *t, size_t i, float *bufs[3], const char *tag[3]) {
    bufs[0] = t->items[i].p, bufs[1] = o->m[i], bufs[2] = o->v[i];
    tag[0] = "p", tag[1] = o->kind == MNEMO_OPTIM_ADAMW ? "m" : "mom", tag[2] = "v";
}

train_ckpt_buffer *optimizer_ckpt_buffers(const optimizer *o, const trainable *t, bool download, size_t *n) {
    train_ckpt_buffer *b = calloc(3 * t->count + 1, sizeof *b);
    size_t k = 0;
    for (size_t i = 0; b && i < t->count; i++) {
        float *bufs[3];
        const char *tag[3];
        ckpt_tensors(o, t, i, bufs, tag);
        for (size_t j = 0; j < 3; j++) {
            if (!bufs[j]) continue;
            size_t len = strlen(t->items[i].name) + 8;
            char *name = malloc(len);
            float *data = !o->be     ? bufs[j]
                          : download ? train_mem_host_view(o->be, bufs[j], t->items[i].n)
                                     : malloc((t->items[i].n ? t->items[i].n : 1) * sizeof *data);
            if (!name || !data) {
                free(name);
                if (o->be) free(data);
                optimizer_ckpt_buffers_free(o, b, k);
                return NULL;
            }
            snprintf(name, len, "%s/%s", tag[j], t->items[i].name);
            b[k++] = (train_ckpt_buffer){name, data, t->items[i].n};
        }
    }
    *n = k;
    return b;
}

int optimizer_ckpt_upload(const optimizer *o, const trainable *t, const train_ckpt_buffer *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; o->be && i < t->count; i++) {
        float *bufs[3];
        const char *tag[3];
        ckpt_tensors(o, t, i, bufs, tag);
        for (size_t j = 0; j < 3; j++) {
            if (!bufs[j]) continue;
            if (k >= n || b[k].n != t->items[i].n || train_mem_upload(o->be, bufs[j], b[k].data, b[k].n)) return -1;
            k++;
        }
    }
    return 0;
}

void optimizer_ckpt_buffers_free(const optimizer *o, train_ckpt_buffer *b, size_t n) {
    for (size_t i = 0; o->be && b && i < n; i++) free(b[i].data);
    train_ckpt_buffers_free(b, n);
}

void train_ckpt_buffers_free(train_ckpt_buffer *b, size_t n) {
    for (size_t i = 0; b && i < n; i++) free((char *)b[i].name);
    free(b);
}
