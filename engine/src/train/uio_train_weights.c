/*
 * uio_train_weights.c — the tensors UIO training changes (uio_train.h): made fresh or read from a UIO directory
 * (either checkpoint format, through memory/uio_weights.c), and written as a UIO directory mnemo generate --uio
 * loads (uio_config.json + uio.safetensors, mnemo's names, fp32). They are built on the host; a device model's copy
 * is uploaded once (train_mem.h) and downloaded only to be written.
 */
#include "uio_train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine_impl.h"
#include "rng.h"
#include "safetensors_write.h"
#include "train_mem.h"
#include "uio_weights.h"
#include "errbuf.h"

void uio_train_weights_free(uio_train_weights *w) {
    for (size_t i = 0; w->t && i < w->count; i++) train_mem_free(w->be, w->t[i].p), train_mem_free(w->be, w->t[i].g);
    free(w->t);
    memset(w, 0, sizeof *w);
}

void uio_train_weights_zero_grads(uio_train_weights *w) {
    for (size_t i = 0; i < w->count; i++)
        if (w->be) w->be->mem_set(NULL, w->t[i].g, 0, w->t[i].n * sizeof(float));
        else memset(w->t[i].g, 0, w->t[i].n * sizeof(float));
}

/* The host-built tensors into be's memory (be NULL: they stay). On failure the tensors left are w->be's. */
static int move_to(uio_train_weights *w, const kern_backend *be, char *err, size_t errlen) {
    for (size_t i = 0; be && i < w->count; i++) {
        uio_tensor *t = &w->t[i];
        float *p = train_mem_zeros(be, t->n), *g = p ? train_mem_zeros(be, t->n) : NULL;
        if (!g || train_mem_upload(be, p, t->p, t->n)) {
            train_mem_free(be, p), train_mem_free(be, g);
            for (size_t k = 0; k < i; k++) /* the moved ones back into host form: free them with the rest */
                train_mem_free(be, w->t[k].p), train_mem_free(be, w->t[k].g), w->t[k].p = w->t[k].g = NULL;
            return errbuf_fail(err, errlen, "out of %s memory for the UIO tensors", be->name);
        }
        free(t->p), free(t->g);
        t->p = p, t->g = g;
    }
    w->be = be;
    return 0;
}

/* Row `row` of m's embedding table as fp32 (out: hidden floats); a device model's row is downloaded first. */
static int embedding_row(const mnemo_model *m, int64_t row, float *out, char *err, size_t errlen) {
    const kern_dtype dt = m->w.tok_embd.dt;
    const size_t bytes = (size_t)m->cfg.hidden_size * kern_dtype_size(dt);
    const char *src = (const char *)m->w.tok_embd.data + (size_t)row * bytes;
    if (m->be->host_memory) {
        kern_cpu_widen(out, src, dt, m->cfg.hidden_size);
        return 0;
    }
    void *stage = malloc(bytes ? bytes : 1);
    int rc = stage && m->be->mem_copy(NULL, stage, src, bytes, KERN_D2H) == KERN_OK ? 0 : -1;
    if (rc == 0) kern_cpu_widen(out, stage, dt, m->cfg.hidden_size);
    free(stage);
    return rc ? errbuf_fail(err, errlen, "reading embedding row %lld from %s failed", (long long)row, m->be->name) : 0;
}

/* Names and shapes of the 2 + 8L tensors; buffers zeroed. */
static int alloc_tensors(uio_train_weights *w, char *err, size_t errlen) {
    const int32_t L = w->n_layer;
    w->count = (size_t)uio_tensor_count(L);
    if (!(w->t = calloc(w->count, sizeof *w->t))) return errbuf_fail(err, errlen, "out of memory");
    for (int32_t i = 0; i < (int32_t)w->count; i++) {
        uio_tensor *t = &w->t[i];
        uio_tensor_name(i, L, t->name, sizeof t->name);
        int32_t k = i == 0 || i == 1 + 4 * L ? -1 : (i < 1 + 4 * L ? (i - 1) % 4 : (i - 2 - 4 * L) % 4);
        bool enc = i < 1 + 4 * L;
        int64_t out = enc && k < 2 ? w->q_dim : w->kv_dim; /* encoder q: q_dim; v, transfer k and v: kv_dim */
        if (k < 0) t->rows = 1, t->cols = w->hidden;
        else if (k % 2 == 0) t->rows = w->r, t->cols = w->hidden; /* A [r, hidden] */
        else t->rows = out, t->cols = w->r;                        /* B [out, r] */
        t->n = (size_t)(t->rows * t->cols);
        if (!(t->p = calloc(t->n, sizeof(float))) || !(t->g = calloc(t->n, sizeof(float))))
            return errbuf_fail(err, errlen, "out of memory");
    }
    return 0;
}

static int from_dir(uio_train_weights *w, const mnemo_model *m, const char *dir, int32_t C, int32_t M, int32_t r,
                    char *err, size_t errlen) {
    uio_weights u;
    int io = 0;
    if (uio_weights_load(&u, dir, &m->cfg, kern_cpu_backend(), &io, err, errlen)) return -1;
    int rc = 0;
    if ((C && C != u.chunk_size) || (M && M != u.num_memory) || (r && r != u.lora_rank))
        rc = errbuf_fail(err, errlen, "%s: chunk_size %d, num_memory %d, lora_rank %d, but %d, %d, %d were asked for",
                         dir,
                         u.chunk_size, u.num_memory, u.lora_rank, C, M, r);
    w->C = u.chunk_size, w->M = u.num_memory, w->r = u.lora_rank, w->alpha = u.lora_alpha;
    w->scale = (float)(u.lora_alpha / u.lora_rank);
    if (!rc) rc = alloc_tensors(w, err, errlen);
    if (!rc) {
        memcpy(w->t[0].p, u.retrieval_token, (size_t)w->hidden * sizeof(float));
        memcpy(w->t[1 + 4 * w->n_layer].p, u.repeat_token, (size_t)w->hidden * sizeof(float));
        for (int32_t l = 0; l < w->n_layer; l++)
            for (int which = 0; which < 2; which++) {
                const lora_pair *e = lora_pair_at(&u.encoder, l, which ? LORA_V : LORA_Q);
                const lora_pair *d = lora_pair_at(&u.transfer, l, which ? LORA_V : LORA_K);
                uio_tensor *ts[4] = {uio_enc(w, l, which, 0), uio_enc(w, l, which, 1), uio_dec(w, l, which, 0),
                                     uio_dec(w, l, which, 1)};
                const float *src[4] = {e->a, e->b, d->a, d->b};
                for (int k = 0; k < 4; k++)
                    for (size_t i = 0; i < ts[k]->n; i++) /* uio_weights folds the scale into B: unfold it */
                        ts[k]->p[i] = k % 2 ? src[k][i] / w->scale : src[k][i];
            }
    }
    uio_weights_free(&u);
    return rc;
}

int uio_train_weights_init(uio_train_weights *w, const mnemo_model *m, const char *init_dir, int32_t C, int32_t M,
                           int32_t r, double alpha, uint64_t seed, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    const model_config *c = &m->cfg;
    w->n_layer = c->num_hidden_layers, w->hidden = c->hidden_size;
    w->q_dim = c->num_attention_heads * c->head_dim, w->kv_dim = c->num_key_value_heads * c->head_dim;
    int rc;
    if (init_dir) {
        rc = from_dir(w, m, init_dir, C, M, r, err, errlen);
    } else if (C < 1 || M < 1 || C % M) {
        rc = errbuf_fail(err, errlen,
                         "--uio-chunk %d and --uio-num-memory %d: both at least 1, the chunk a multiple of M", C,
                         M);
    } else if (r < 1 || r > 4096 || !(alpha > 0)) {
        rc = errbuf_fail(err, errlen, "LoRA rank %d (1..4096) and alpha %g (> 0)", r, alpha);
    } else if (c->vocab_size < 3) {
        rc = errbuf_fail(err, errlen, "the <mem> token starts from embedding row 2 (</s>); the vocabulary has %d rows",
                         c->vocab_size);
    } else {
        w->C = C, w->M = M, w->r = r, w->alpha = alpha, w->scale = (float)(alpha / r);
        rc = alloc_tensors(w, err, errlen);
        if (!rc) rc = embedding_row(m, 2, w->t[0].p, err, errlen);
        if (!rc) { /* the reference: <mem> = embedding row 2; peft: A ~ U(+-1/sqrt(in)), B = 0 */
            memcpy(w->t[1 + 4 * w->n_layer].p, w->t[0].p, (size_t)w->hidden * sizeof(float));
            mnemo_rng rng;
            mnemo_rng_seed(&rng, seed);
            const double bound = 1.0 / sqrt((double)w->hidden);
            for (int32_t l = 0; l < w->n_layer; l++)
                for (int which = 0; which < 2; which++)
                    for (int dec = 0; dec < 2; dec++) {
                        uio_tensor *a = dec ? uio_dec(w, l, which, 0) : uio_enc(w, l, which, 0);
                        for (size_t i = 0; i < a->n; i++)
                            a->p[i] = (float)((2.0 * mnemo_rng_uniform(&rng) - 1.0) * bound);
                    }
        }
    }
    if (!rc) rc = move_to(w, train_mem_backend(m->be), err, errlen);
    if (rc) uio_train_weights_free(w);
    return rc;
}

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

int uio_train_weights_write(const uio_train_weights *w, const char *dir, char *err, size_t errlen) {
    if (make_dirs(dir)) return errbuf_fail(err, errlen, "cannot create %s: %s", dir, strerror(errno));
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/uio_config.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return errbuf_fail(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "{\n  \"num_memory\": %d,\n  \"lora_rank\": %d,\n  \"lora_alpha\": %.17g,\n  \"lora_dropout\": 0.0,\n"
               "  \"chunk_size\": %d\n}\n", w->M, w->r, w->alpha, w->C);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return errbuf_fail(err, errlen, "cannot write %s: %s", path, strerror(errno));
    st_tensor *ts = calloc(w->count, sizeof *ts);
    int64_t(*shapes)[3] = calloc(w->count, sizeof *shapes);
    float **views = calloc(w->count, sizeof *views); /* host copies of device tensors (the tensors themselves on the host) */
    int rc = ts && shapes && views ? 0 : errbuf_fail(err, errlen, "out of memory");
    for (size_t i = 0; rc == 0 && i < w->count; i++) {
        const uio_tensor *t = &w->t[i];
        bool token = i == 0 || i == (size_t)(1 + 4 * w->n_layer);
        if (!(views[i] = train_mem_host_view(w->be, t->p, t->n)))
            rc = errbuf_fail(err, errlen, "reading %s back from %s failed", t->name, w->be ? w->be->name : "host");
        shapes[i][0] = token ? 1 : t->rows, shapes[i][1] = token ? 1 : t->cols, shapes[i][2] = t->cols;
        ts[i] = (st_tensor){.name = t->name, .dtype = TENSOR_F32, .ndim = token ? 3 : 2, .shape = shapes[i],
                            .data = views[i]};
    }
    snprintf(path, sizeof path, "%s/uio.safetensors", dir);
    const char *meta[2] = {"format", "mnemo-uio/1"};
    if (rc == 0) rc = safetensors_write(path, ts, w->count, meta, 1, err, errlen);
    for (size_t i = 0; views && i < w->count; i++)
        if (views[i]) train_mem_host_release(w->be, views[i]);
    free(ts), free(shapes), free(views);
    return rc;
}
