/*
 * optimizer.c — see optimizer.h.
 */
#include "optimizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int optimizer_init(optimizer *o, const trainable *t, const mnemo_train_params *p, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->kind = p->optimizer, o->beta1 = p->beta1, o->beta2 = p->beta2, o->eps = p->eps;
    o->weight_decay = p->weight_decay, o->momentum = p->momentum;
    o->count = t->count;
    bool adam = o->kind == MNEMO_OPTIM_ADAMW, sgd_mom = o->kind == MNEMO_OPTIM_SGD && o->momentum != 0;
    o->m = calloc(t->count ? t->count : 1, sizeof *o->m);
    o->v = calloc(t->count ? t->count : 1, sizeof *o->v);
    bool ok = o->m && o->v;
    for (size_t i = 0; ok && i < t->count; i++) {
        if (adam || sgd_mom) ok &= (o->m[i] = calloc(t->items[i].n, sizeof(float))) != NULL;
        if (adam) ok &= (o->v[i] = calloc(t->items[i].n, sizeof(float))) != NULL;
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
        if (o->m) free(o->m[i]);
        if (o->v) free(o->v[i]);
    }
    free(o->m), free(o->v);
    memset(o, 0, sizeof *o);
}

size_t optimizer_floats(const optimizer *o, const trainable *t) {
    size_t n = 0;
    for (size_t i = 0; i < o->count; i++) n += t->items[i].n * ((o->m[i] != NULL) + (o->v[i] != NULL));
    return n;
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
        for (size_t k = 0; k < it->n; k++) { /* torch.optim.SGD's order of operations, in fp32 */
            float g = wd != 0 ? it->g[k] + wd * it->p[k] : it->g[k];
            if (buf) g = buf[k] = step == 1 ? g : mu * buf[k] + g;
            it->p[k] -= a * g;
        }
    }
    return KERN_OK;
}

train_ckpt_buffer *optimizer_ckpt_buffers(const optimizer *o, const trainable *t, size_t *n) {
    train_ckpt_buffer *b = calloc(3 * t->count + 1, sizeof *b);
    size_t k = 0;
    for (size_t i = 0; b && i < t->count; i++) {
        float *bufs[3] = {t->items[i].p, o->m[i], o->v[i]};
        const char *tag[3] = {"p", o->kind == MNEMO_OPTIM_ADAMW ? "m" : "mom", "v"};
        for (int j = 0; j < 3; j++) {
            if (!bufs[j]) continue;
            size_t len = strlen(t->items[i].name) + 8;
            char *name = malloc(len);
            if (!name) {
                train_ckpt_buffers_free(b, k);
                return NULL;
            }
            snprintf(name, len, "%s/%s", tag[j], t->items[i].name);
            b[k++] = (train_ckpt_buffer){name, bufs[j], t->items[i].n};
        }
    }
    *n = k;
    return b;
}

void train_ckpt_buffers_free(train_ckpt_buffer *b, size_t n) {
    for (size_t i = 0; b && i < n; i++) free((char *)b[i].name);
    free(b);
}
