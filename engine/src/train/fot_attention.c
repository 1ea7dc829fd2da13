/*
 * fot_attention.c — see fot_attention.h. The one softmax of a row over [its extras | its own causal keys] is
 * computed in two parts and merged by log-sum-exp: the own part per row (a causal attention over the row's T
 * keys), the extras per GROUP of rows — rows whose extra contexts are the same set (with mirrored negatives
 * "F(P,0,M)" every document's row j sees rows 0..j-1 of the same M+1 documents), whose queries are gathered into one
 * attention_cross call over the extras gathered once. The backward uses the same split: each part's backward
 * against the merged out and lse gives that part's share of dq (summed: the own part's is written, the group's
 * scatter-added), and of its keys' and values' gradients (extras' keys to dk_raw unrotated, values to dv, both
 * scatter-added by context index; the own part straight into dk, dv). Gathering per group instead of per row
 * removed a copy and a pack of every extra context per row (18% of a step with 15 other documents a row), and the
 * group's queries fill the CPU's 64-wide score tiles a row of 32 queries left half empty. The extras move as
 * whole contexts through the embed op (a row gather by index) and its backward (a scatter-add in index order);
 * every piece is an op of the table, so the same code runs on a device backend.
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
    int32_t n_groups, max_group; /* groups of rows with the same set of extras (rows without extras in none) */
    int32_t *group_start;      /* [n_groups + 1] into group_rows */
    int32_t *group_rows;       /* the rows of each group, in order; group_row_ids: the same in backend memory */
    int32_t *group_row_ids;
    float *qg, *og, *og2, *dqg, *lg; /* a group's queries, outputs (or dout), outputs, dq, lse gathered */
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

/* FNV-1a over a sorted list of extra rows: rows with different sets rarely share it, so only equal hashes are
 * compared element by element. */
static uint64_t list_hash(const int32_t *a, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)a[i]) * 1099511628211ull;
    return h;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Groups the rows with extras by their set of extras; 0, or -1 when out of memory. */
static int find_groups(fot_ws *f) {
    const int32_t R = f->rows, M = f->max_extra ? f->max_extra : 1;
    int32_t *sorted = malloc((size_t)R * (size_t)M * sizeof *sorted), *group_of = malloc((size_t)R * sizeof *group_of);
    uint64_t *hash = malloc((size_t)R * sizeof *hash);
    f->group_start = malloc(((size_t)R + 1) * sizeof *f->group_start);
    f->group_rows = malloc((size_t)R * sizeof *f->group_rows);
    int rc = -1;
    if (!sorted || !group_of || !hash || !f->group_start || !f->group_rows) goto done;
    for (int32_t r = 0; r < R; r++) {
        int32_t *a = sorted + (size_t)r * M;
        memcpy(a, f->extra + (size_t)r * f->max_extra, (size_t)f->n_extra[r] * sizeof *a);
        qsort(a, (size_t)f->n_extra[r], sizeof *a, cmp_i32);
        hash[r] = list_hash(a, f->n_extra[r]);
        group_of[r] = -1;
    }
    int32_t n = 0;
    f->n_groups = 0, f->max_group = 0;
    for (int32_t r = 0; r < R; r++) {
        if (group_of[r] >= 0 || !f->n_extra[r]) continue;
        const int32_t g = f->n_groups++, E = f->n_extra[r];
        f->group_start[g] = n;
        for (int32_t r2 = r; r2 < R; r2++)
            if (group_of[r2] < 0 && f->n_extra[r2] == E && hash[r2] == hash[r] &&
                !memcmp(sorted + (size_t)r2 * M, sorted + (size_t)r * M, (size_t)E * sizeof *sorted))
                group_of[r2] = g, f->group_rows[n++] = r2;
        if (n - f->group_start[g] > f->max_group) f->max_group = n - f->group_start[g];
    }
    f->group_start[f->n_groups] = n;
    rc = 0;
done:
    free(sorted), free(group_of), free(hash);
    return rc;
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
    if (find_groups(f)) goto oom;
    f->group_row_ids = f->group_rows;
    if (f->be) { /* uploaded once: the schedule fixes every row's extras for the whole run */
        const size_t ib = (size_t)f->rows * (size_t)(f->max_extra ? f->max_extra : 1) * sizeof *f->extra;
        if (!(f->extra_ids = f->be->mem_alloc(ib))) goto oom;
        f->bytes += ib;
        if (f->be->mem_copy(NULL, f->extra_ids, f->extra, ib, KERN_H2D) != KERN_OK) goto oom;
        const size_t gb = (size_t)f->rows * sizeof *f->group_rows;
        if (!(f->group_row_ids = f->be->mem_alloc(gb))) goto oom;
        f->bytes += gb;
        if (f->be->mem_copy(NULL, f->group_row_ids, f->group_rows, gb, KERN_H2D) != KERN_OK) goto oom;
    }
    const size_t gq = (size_t)(f->max_group ? f->max_group : 1) * (size_t)T * (size_t)c->num_attention_heads;
    if (!(f->qg = alloc_floats(f, gq * (size_t)c->head_dim)) || !(f->og = alloc_floats(f, gq * (size_t)c->head_dim)) ||
        !(f->og2 = alloc_floats(f, gq * (size_t)c->head_dim)) || !(f->dqg = alloc_floats(f, gq * (size_t)c->head_dim)) ||
        !(f->lg = alloc_floats(f, gq)))
        goto oom;
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
    float *bufs[] = {f->k_raw_one, f->dk_raw, f->kc, f->vc, f->dkc, f->dvc, f->qg, f->og, f->og2, f->dqg, f->lg};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) train_mem_free(f->be, bufs[i]);
    if (f->be && f->extra_ids != f->extra) f->be->mem_free(f->extra_ids);
    if (f->be && f->group_row_ids != f->group_rows) f->be->mem_free(f->group_row_ids);
    free(f->k_raw), free(f->extra), free(f->n_extra), free(f->group_start), free(f->group_rows);
    free(f);
}

size_t fot_ws_bytes(const fot_ws *f) { return f ? f->bytes : 0; }
int32_t fot_ws_rows(const fot_ws *f) { return f->rows; }
const kern_backend *fot_ws_backend(const fot_ws *f) { return f->be; }
bool fot_mem_rotates(const fot_ws *f) { return f->cfg->mem_positionals; }
float *fot_k_raw(fot_ws *f, int64_t l) { return f->k_raw[l]; }
float *fot_dk_raw(fot_ws *f) { return f->dk_raw; }

/* Fills f->kc, f->vc with the E extra contexts (keys raw, values) listed at ids (backend memory). A kernel
 * status. */
static int gather_extras(const kern_backend *be, kern_ctx *kc, fot_ws *f, int64_t l, const int32_t *ids, int32_t E,
                         const float *v) {
    const int64_t ctx = (int64_t)f->T * f->kvd;
    int rc = be->embed(kc, f->kc, f->k_raw[l], KERN_F32, f->rows, ctx, ids, E);
    return rc == KERN_OK ? be->embed(kc, f->vc, v, KERN_F32, f->rows, ctx, ids, E) : rc;
}

/* Group g: its rows (host and backend memory), their number, its extras' count and ids (the first row's list). */
typedef struct {
    const int32_t *rows, *row_ids, *extra_ids;
    int32_t m, E;
} group;

static group group_at(const fot_ws *f, int32_t g) {
    const int32_t s = f->group_start[g], first = f->group_rows[s];
    return (group){f->group_rows + s, f->group_row_ids + s, f->extra_ids + (size_t)first * f->max_extra,
                   f->group_start[g + 1] - s, f->n_extra[first]};
}

int fot_attention_forward(const kern_backend *be, kern_ctx *kc, fot_ws *f, int64_t l, float *att, float *lse,
                          const float *q, const float *k, const float *v, int64_t hq, int64_t hkv, int64_t hd,
                          float scale) {
    const int64_t T = f->T, qd = hq * hd, ctx = T * f->kvd;
    int rc = KERN_OK;
    for (int32_t r = 0; r < f->rows && rc == KERN_OK; r++) /* own keys, causal */
        rc = be->attention(kc, att + r * T * qd, lse + r * T * hq, q + r * T * qd, k + r * ctx, v + r * ctx, T, T, 0,
                           hq, hkv, hd, scale);
    for (int32_t g = 0; g < f->n_groups && rc == KERN_OK; g++) { /* the group's extras, merged into each row */
        const group G = group_at(f, g);
        rc = gather_extras(be, kc, f, l, G.extra_ids, G.E, v);
        if (rc == KERN_OK) rc = be->embed(kc, f->qg, q, KERN_F32, f->rows, T * qd, G.row_ids, G.m);
        if (rc == KERN_OK)
            rc = be->attention_cross(kc, f->og, f->lg, f->qg, f->kc, f->vc, G.m * T, G.E * T, hq, hkv, hd, scale);
        for (int32_t i = 0; i < G.m && rc == KERN_OK; i++) {
            const int64_t r = G.rows[i];
            rc = be->attention_merge(kc, att + r * T * qd, lse + r * T * hq, f->og + i * T * qd, f->lg + i * T * hq, T,
                                     hq, hd);
        }
    }
    return rc;
}

int fot_attention_backward(const kern_backend *be, kern_ctx *kc, fot_ws *f, int64_t l, float *dq, float *dk,
                           float *dv, const float *datt, const float *q, const float *k, const float *v,
                           const float *att, const float *lse, int64_t hq, int64_t hkv, int64_t hd, float scale) {
    const int64_t T = f->T, qd = hq * hd, ctx = T * f->kvd;
    int rc = be->mem_set(kc, f->dk_raw, 0, (size_t)f->rows * (size_t)ctx * sizeof(float));
    for (int32_t r = 0; r < f->rows && rc == KERN_OK; r++) /* own part: dq written, dk and dv accumulated */
        rc = be->attention_backward(kc, dq + r * T * qd, dk + r * ctx, dv + r * ctx, datt + r * T * qd,
                                    q + r * T * qd, k + r * ctx, v + r * ctx, att + r * T * qd, lse + r * T * hq, T, T,
                                    0, hq, hkv, hd, scale);
    for (int32_t g = 0; g < f->n_groups && rc == KERN_OK; g++) {
        const group G = group_at(f, g);
        const size_t xb = (size_t)G.E * (size_t)ctx * sizeof(float);
        rc = gather_extras(be, kc, f, l, G.extra_ids, G.E, v);
        if (rc == KERN_OK) rc = be->mem_set(kc, f->dkc, 0, xb);
        if (rc == KERN_OK) rc = be->mem_set(kc, f->dvc, 0, xb);
        if (rc == KERN_OK) rc = be->embed(kc, f->qg, q, KERN_F32, f->rows, T * qd, G.row_ids, G.m);
        if (rc == KERN_OK) rc = be->embed(kc, f->og, datt, KERN_F32, f->rows, T * qd, G.row_ids, G.m);
        if (rc == KERN_OK) rc = be->embed(kc, f->og2, att, KERN_F32, f->rows, T * qd, G.row_ids, G.m);
        if (rc == KERN_OK) rc = be->embed(kc, f->lg, lse, KERN_F32, f->rows, T * hq, G.row_ids, G.m);
        if (rc == KERN_OK)
            rc = be->attention_cross_backward(kc, f->dqg, f->dkc, f->dvc, f->og, f->qg, f->kc, f->vc, f->og2, f->lg,
                                              G.m * T, G.E * T, hq, hkv, hd, scale);
        /* scatter-adds: the group's dq share, the extras' keys (unrotated) and values */
        if (rc == KERN_OK) rc = be->embed_backward(kc, dq, f->dqg, f->rows, T * qd, G.row_ids, G.m);
        if (rc == KERN_OK) rc = be->embed_backward(kc, f->dk_raw, f->dkc, f->rows, ctx, G.extra_ids, G.E);
        if (rc == KERN_OK) rc = be->embed_backward(kc, dv, f->dvc, f->rows, ctx, G.extra_ids, G.E);
    }
    return rc;
}
