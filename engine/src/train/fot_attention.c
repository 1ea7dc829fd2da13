/*
 * fot_attention.c — see fot_attention.h. Per row: gather [extras' raw keys | own rotated keys] and the matching
 * values into scratch, one attention call; the backward gathers the same, runs attention_backward into scratch
 * gradients and scatters them back (own part to dk/dv, extras' keys to dk_raw, extras' values to dv). The extras
 * move as whole contexts through the embed op (a row gather by index) and its backward (a scatter-add in index
 * order), one call for all of a row's extras: with the paper's d = 128 a copy per context was ~130 launches per row
 * and layer on a GPU. The own part is a backend copy and the add op, so the same code runs on a device backend.
 */
#include "fot_attention.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_mem.h"

struct fot_ws {
    const kern_backend *be; /* device backend holding the float buffers; NULL: host memory */
    fot_schedule s;
    const model_config *cfg;
    int32_t docs, T, rows, max_extra;
    int64_t kvd;
    bool recompute;
    float **k_raw;   /* [L] (NULL for ordinary layers); with recompute every memory layer shares k_raw_one */
    float *k_raw_one, *dk_raw;
    float *kc, *vc, *dkc, *dvc; /* [(max_extra + 1) * T, kvd] gathered keys, values and their gradients */
    int32_t *extra;            /* [rows][max_extra] */
    int32_t *extra_ids;        /* the same in the backend's memory (the gather's ids); == extra on the host */
    int32_t *n_extra;          /* [rows] */
    size_t bytes;
};

static float *alloc_floats(fot_ws *f, size_t n) {
    f->bytes += n * sizeof(float);
    return f->be ? f->be->mem_alloc(n * sizeof(float)) : malloc(n * sizeof(float));
}

bool fot_is_mem_layer(const fot_ws *f, int64_t l) {
    for (int32_t i = 0; i < f->cfg->n_mem_layers; i++)
        if (f->cfg->mem_layers[i] == l) return true;
    return false;
}

fot_ws *fot_ws_new(const model_config *c, const fot_schedule *s, int32_t docs, int32_t T, bool recompute, char *err,
                   size_t errlen) {
    return fot_ws_new_on(NULL, c, s, docs, T, recompute, err, errlen);
}

fot_ws *fot_ws_new_on(const kern_backend *be, const model_config *c, const fot_schedule *s, int32_t docs, int32_t T,
                      bool recompute, char *err, size_t errlen) {
    if (!c->n_mem_layers) {
        snprintf(err, errlen, "FoT training needs a LongLLaMA-layout model: its config.json has no mem_layers");
        return NULL;
    }
    if (fot_schedule_check_docs(s, docs, err, errlen)) return NULL;
    fot_ws *f = calloc(1, sizeof *f);
    if (!f) goto oom;
    f->be = train_mem_backend(be);
    f->s = *s, f->cfg = c, f->docs = docs, f->T = T, f->rows = docs * s->K, f->recompute = recompute;
    f->max_extra = fot_schedule_max_extra(s);
    f->kvd = (int64_t)c->num_key_value_heads * c->head_dim;
    const size_t n = (size_t)f->rows * (size_t)T * (size_t)f->kvd, g = (size_t)(f->max_extra + 1) * T * f->kvd;
    if (!(f->k_raw = calloc((size_t)c->num_hidden_layers, sizeof *f->k_raw))) goto oom;
    if (recompute && !(f->k_raw_one = alloc_floats(f, n))) goto oom;
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        if (fot_is_mem_layer(f, l) && !(f->k_raw[l] = recompute ? f->k_raw_one : alloc_floats(f, n))) goto oom;
    if (!(f->dk_raw = alloc_floats(f, n)) || !(f->kc = alloc_floats(f, g)) || !(f->vc = alloc_floats(f, g)) ||
        !(f->dkc = alloc_floats(f, g)) || !(f->dvc = alloc_floats(f, g)))
        goto oom;
    f->extra = malloc((size_t)f->rows * (size_t)(f->max_extra ? f->max_extra : 1) * sizeof *f->extra);
    f->n_extra = malloc((size_t)f->rows * sizeof *f->n_extra);
    if (!f->extra || !f->n_extra) goto oom;
    for (int32_t r = 0; r < f->rows; r++) f->n_extra[r] = fot_extra_rows(s, docs, r, f->extra + (size_t)r * f->max_extra);
    f->extra_ids = f->extra;
    if (f->be) { /* uploaded once: the schedule fixes every row's extras for the whole run */
        const size_t ib = (size_t)f->rows * (size_t)(f->max_extra ? f->max_extra : 1) * sizeof *f->extra;
        if (!(f->extra_ids = f->be->mem_alloc(ib))) goto oom;
        f->bytes += ib;
        if (f->be->mem_copy(NULL, f->extra_ids, f->extra, ib, KERN_H2D) != KERN_OK) goto oom;
    }
    return f;
oom:
    snprintf(err, errlen, "out of memory for FoT cross-batch buffers (%d rows x %d tokens, up to %d extra contexts)",
             docs * s->K, T, fot_schedule_max_extra(s));
    fot_ws_free(f);
    return NULL;
}

void fot_ws_free(fot_ws *f) {
    if (!f) return;
    for (int64_t l = 0; f->k_raw && !f->recompute && l < f->cfg->num_hidden_layers; l++) train_mem_free(f->be, f->k_raw[l]);
    float *bufs[] = {f->k_raw_one, f->dk_raw, f->kc, f->vc, f->dkc, f->dvc};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) train_mem_free(f->be, bufs[i]);
    if (f->be && f->extra_ids != f->extra) f->be->mem_free(f->extra_ids);
    free(f->k_raw), free(f->extra), free(f->n_extra);
    free(f);
}

size_t fot_ws_bytes(const fot_ws *f) { return f ? f->bytes : 0; }
int32_t fot_ws_rows(const fot_ws *f) { return f->rows; }
const kern_backend *fot_ws_backend(const fot_ws *f) { return f->be; }
bool fot_mem_rotates(const fot_ws *f) { return f->cfg->mem_positionals; }
float *fot_k_raw(fot_ws *f, int64_t l) { return f->k_raw[l]; }
float *fot_dk_raw(fot_ws *f) { return f->dk_raw; }

/* Fills f->kc, f->vc with row r's keys [extras raw | own rotated] and values. A kernel status. */
static int gather(const kern_backend *be, kern_ctx *kc, fot_ws *f, int64_t l, int32_t r, const float *k,
                  const float *v) {
    const size_t ctx = (size_t)f->T * (size_t)f->kvd, bytes = ctx * sizeof(float);
    const int32_t E = f->n_extra[r], *ids = f->extra_ids + (size_t)r * f->max_extra;
    int rc = KERN_OK; /* the extras: whole contexts of rows*T x kvd tables, gathered by context index */
    if (E) rc = be->embed(kc, f->kc, f->k_raw[l], KERN_F32, f->rows, (int64_t)ctx, ids, E);
    if (E && rc == KERN_OK) rc = be->embed(kc, f->vc, v, KERN_F32, f->rows, (int64_t)ctx, ids, E);
    if (rc == KERN_OK) rc = be->mem_copy(kc, f->kc + (size_t)E * ctx, k + (size_t)r * ctx, bytes, KERN_D2D);
    return rc == KERN_OK ? be->mem_copy(kc, f->vc + (size_t)E * ctx, v + (size_t)r * ctx, bytes, KERN_D2D) : rc;
}

int fot_attention_forward(const kern_backend *be, kern_ctx *kc, fot_ws *f, int64_t l, float *att, float *lse,
                          const float *q, const float *k, const float *v, int64_t hq, int64_t hkv, int64_t hd,
                          float scale) {
    const int64_t T = f->T, qd = hq * hd;
    for (int32_t r = 0; r < f->rows; r++) {
        const int64_t E = f->n_extra[r], row0 = (int64_t)r * T;
        int rc = gather(be, kc, f, l, r, k, v);
        if (rc != KERN_OK) return rc;
        rc = be->attention(kc, att + row0 * qd, lse + row0 * hq, q + row0 * qd, f->kc, f->vc, T, (E + 1) * T,
                               E * T, hq, hkv, hd, scale);
        if (rc != KERN_OK) return rc;
    }
    return KERN_OK;
}

int fot_attention_backward(const kern_backend *be, kern_ctx *kc, fot_ws *f, int64_t l, float *dq, float *dk,
                           float *dv, const float *datt, const float *q, const float *k, const float *v,
                           const float *att, const float *lse, int64_t hq, int64_t hkv, int64_t hd, float scale) {
    const int64_t T = f->T, qd = hq * hd;
    const size_t ctx = (size_t)T * (size_t)f->kvd;
    int rc = be->mem_set(kc, f->dk_raw, 0, (size_t)f->rows * ctx * sizeof(float));
    for (int32_t r = 0; r < f->rows && rc == KERN_OK; r++) {
        const int64_t E = f->n_extra[r], row0 = (int64_t)r * T;
        rc = gather(be, kc, f, l, r, k, v);
        if (rc == KERN_OK) rc = be->mem_set(kc, f->dkc, 0, (size_t)(E + 1) * ctx * sizeof(float));
        if (rc == KERN_OK) rc = be->mem_set(kc, f->dvc, 0, (size_t)(E + 1) * ctx * sizeof(float));
        if (rc == KERN_OK) rc = be->attention_backward(kc, dq + row0 * qd, f->dkc, f->dvc, datt + row0 * qd, q + row0 * qd, f->kc,
                                        f->vc, att + row0 * qd, lse + row0 * hq, T, (E + 1) * T, E * T, hq, hkv, hd,
                                        scale);
        /* scatter: extras' keys unrotated (a row's extras are distinct contexts, added in index order), then the
         * own part, rotated */
        const int32_t *ids = f->extra_ids + (size_t)r * f->max_extra;
        if (E && rc == KERN_OK) rc = be->embed_backward(kc, f->dk_raw, f->dkc, f->rows, (int64_t)ctx, ids, E);
        if (E && rc == KERN_OK) rc = be->embed_backward(kc, dv, f->dvc, f->rows, (int64_t)ctx, ids, E);
        if (rc == KERN_OK) rc = be->add(kc, dk + (size_t)r * ctx, f->dkc + (size_t)E * ctx, (int64_t)ctx);
        if (rc == KERN_OK) rc = be->add(kc, dv + (size_t)r * ctx, f->dvc + (size_t)E * ctx, (int64_t)ctx);
    }
    return rc;
}
