/*
 * uio_weights.c — see uio_weights.h. Both formats reduce to one table: the reference's list position i of each
 * tensor, its mnemo name, its role and its expected shape for the base model. Every tensor is checked before
 * anything is uploaded, and a file holding more or fewer tensors than the model needs is refused, so a checkpoint
 * for another base (layers, widths, heads) or another rank never loads half-way.
 */
#include "uio_weights.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor_index.h"
#include "errbuf.h"

#define MAX_CONFIG_BYTES (1u << 20)

/* ---- the list positions */

typedef enum { ROLE_RETRIEVAL, ROLE_REPEAT, ROLE_ENCODER, ROLE_TRANSFER } role_kind;

typedef struct {
    role_kind kind;
    int32_t layer;
    lora_target target; /* ENCODER: LORA_Q / LORA_V; TRANSFER: LORA_K / LORA_V */
    bool is_b;          /* lora_B (else lora_A) */
} role;

static role role_at(int32_t i, int32_t n_layer) {
    if (i == 0) return (role){.kind = ROLE_RETRIEVAL};
    if (i == 1 + 4 * n_layer) return (role){.kind = ROLE_REPEAT};
    bool enc = i <= 4 * n_layer;
    int32_t j = enc ? i - 1 : i - 2 - 4 * n_layer;
    lora_target t = j % 4 < 2 ? (enc ? LORA_Q : LORA_K) : LORA_V;
    return (role){.kind = enc ? ROLE_ENCODER : ROLE_TRANSFER, .layer = j / 4, .target = t, .is_b = j % 2 == 1};
}

void uio_tensor_name(int32_t i, int32_t n_layer, char *buf, size_t cap) {
    role r = role_at(i, n_layer);
    if (r.kind == ROLE_RETRIEVAL) snprintf(buf, cap, "encoder.retrieval_token");
    else if (r.kind == ROLE_REPEAT) snprintf(buf, cap, "decoder.repeat_token");
    else
        snprintf(buf, cap, "%s.layers.%d.%s.lora_%c", r.kind == ROLE_ENCODER ? "encoder" : "decoder", r.layer,
                 lora_target_name(r.target), r.is_b ? 'B' : 'A');
}

/* ---- uio_config.json */

int uio_config_parse(const char *json, size_t len, const char *file, uio_weights *u, char *err, size_t errlen) {
    json_error_t je;
    json_t *c = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!c) return errbuf_fail_at(err, errlen, file, "not valid JSON: %s (line %d)", je.text, je.line);
    int rc = -1;
    if (!json_is_object(c)) {
        errbuf_fail_at(err, errlen, file, "not a JSON object");
        goto out;
    }
    static const char *const ints[] = {"num_memory", "chunk_size", "lora_rank"};
    json_int_t v[3];
    for (int i = 0; i < 3; i++) {
        json_t *x = json_object_get(c, ints[i]);
        if (!json_is_integer(x) || json_integer_value(x) < 1 || json_integer_value(x) > (1 << 20)) {
            errbuf_fail_at(err, errlen, file, "%s must be an integer in 1..%d", ints[i], 1 << 20);
            goto out;
        }
        v[i] = json_integer_value(x);
    }
    json_t *alpha = json_object_get(c, "lora_alpha"), *drop = json_object_get(c, "lora_dropout");
    if (!json_is_number(alpha) || !isfinite(json_number_value(alpha)) || fabs(json_number_value(alpha)) > 1e6) {
        errbuf_fail_at(err, errlen, file, "lora_alpha must be a number of magnitude at most 1e6");
        goto out;
    }
    if (drop && !json_is_null(drop) &&
        (!json_is_number(drop) || !(json_number_value(drop) >= 0) || json_number_value(drop) >= 1)) {
        errbuf_fail_at(err, errlen, file, "lora_dropout must be a number in [0, 1)");
        goto out;
    }
    if (v[1] % v[0] != 0) { /* each <mem> slot sees (i+1) * C/M tokens: a remainder would be seen by none */
        errbuf_fail_at(err, errlen, file, "chunk_size %lld is not a multiple of num_memory %lld", (long long)v[1],
                       (long long)v[0]);
        goto out;
    }
    u->num_memory = (int32_t)v[0];
    u->chunk_size = (int32_t)v[1];
    u->lora_rank = (int32_t)v[2];
    u->lora_alpha = json_number_value(alpha);
    u->lora_dropout = drop && json_is_number(drop) ? json_number_value(drop) : 0.0;
    rc = 0;
out:
    json_decref(c);
    return rc;
}

static int read_config(const char *path, uio_weights *u, int *io, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        *io = 1;
        return errbuf_fail_at(err, errlen, path, "cannot open: %s (a UIO directory holds uio_config.json)",
                              strerror(errno));
    }
    char *buf = malloc(MAX_CONFIG_BYTES);
    size_t n = buf ? fread(buf, 1, MAX_CONFIG_BYTES, f) : 0;
    bool too_big = buf && n == MAX_CONFIG_BYTES && fgetc(f) != EOF;
    fclose(f);
    int rc = !buf ? errbuf_fail_at(err, errlen, path, "out of memory")
             : too_big ? errbuf_fail_at(err, errlen, path, "larger than 1 MiB")
                       : uio_config_parse(buf, n, path, u, err, errlen);
    free(buf);
    return rc;
}

/* ---- the tensor file */

typedef struct {
    void *addr;
    size_t len;
} mapping;

static int map_file(const char *path, mapping *m, int *io, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *io = 1;
        return errbuf_fail_at(err, errlen, path, "cannot open: %s", strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        *io = 1;
        return errbuf_fail_at(err, errlen, path, "not a regular file");
    }
    m->len = (size_t)st.st_size;
    if (m->len) {
        m->addr = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m->addr == MAP_FAILED) {
            m->addr = NULL;
            close(fd);
            *io = 1;
            return errbuf_fail_at(err, errlen, path, "mmap failed: %s", strerror(errno));
        }
    }
    close(fd);
    return 0;
}

static const tensor_entry *find(const tensor_list *l, const char *name) {
    for (size_t i = 0; i < l->count; i++)
        if (!strcmp(l->items[i].name, name)) return &l->items[i];
    return NULL;
}

/* Expected shape of the tensor in role r, as "numel, rows, cols" (tokens: rows = 1, cols = hidden). */
static void expected(const role *r, const model_config *cfg, int32_t rank, int64_t *rows, int64_t *cols) {
    int64_t d = cfg->hidden_size;
    if (r->kind == ROLE_RETRIEVAL || r->kind == ROLE_REPEAT) {
        *rows = 1;
        *cols = d;
        return;
    }
    int64_t out, in;
    lora_target_shape(cfg, r->target, &out, &in);
    *rows = r->is_b ? out : rank;
    *cols = r->is_b ? rank : in;
}

/* Tokens: (1, 1, hidden) as the reference saves them ((hidden) and (1, hidden) are taken too); matrices 2-D. */
static bool shape_ok(const tensor_entry *e, const role *r, int64_t rows, int64_t cols) {
    if (r->kind == ROLE_RETRIEVAL || r->kind == ROLE_REPEAT) {
        if (e->ndim < 1 || e->shape[e->ndim - 1] != cols) return false;
        for (int32_t k = 0; k + 1 < e->ndim; k++)
            if (e->shape[k] != 1) return false;
        return true;
    }
    return e->ndim == 2 && e->shape[0] == rows && e->shape[1] == cols;
}

static void describe(const role *r, int32_t rank, const model_config *cfg, char *buf, size_t cap) {
    int64_t rows, cols;
    expected(r, cfg, rank, &rows, &cols);
    if (r->kind == ROLE_RETRIEVAL || r->kind == ROLE_REPEAT)
        snprintf(buf, cap, "(1, 1, %lld)", (long long)cols);
    else
        snprintf(buf, cap, "[%lld, %lld]", (long long)rows, (long long)cols);
}

static int check_tensors(const tensor_entry **ts, const tensor_list *l, bool by_position, const char *path,
                         const uio_weights *u, const model_config *cfg, char *err, size_t errlen) {
    const int32_t L = cfg->num_hidden_layers, n = uio_tensor_count(L);
    if (l->count != (size_t)n)
        return errbuf_fail_at(err, errlen, path,
                              "%zu tensors, but a UIO checkpoint for this %d-layer model holds %d (retrieval_token, "
                              "4 per encoder layer, repeat_token, 4 per decoder layer)",
                              l->count, L, n);
    for (int32_t i = 0; i < n; i++) {
        char name[96], key[16];
        uio_tensor_name(i, L, name, sizeof name);
        snprintf(key, sizeof key, "%d", i);
        const tensor_entry *e = find(l, by_position ? key : name);
        if (!e) {
            if (by_position) return errbuf_fail_at(err, errlen, path, "list item %d is missing", i);
            /* the count matched, so some name is not one of ours: name it */
            for (size_t j = 0; j < l->count; j++) {
                bool known = false;
                for (int32_t k = 0; k < n && !known; k++) {
                    char nk[96];
                    uio_tensor_name(k, L, nk, sizeof nk);
                    known = !strcmp(nk, l->items[j].name);
                }
                if (!known)
                    return errbuf_fail_at(err, errlen, path, "tensor '%s' is not a UIO tensor (%s is missing)",
                                          l->items[j].name,
                                          name);
            }
            return errbuf_fail_at(err, errlen, path, "tensor %s is missing", name);
        }
        role r = role_at(i, L);
        int64_t rows, cols;
        expected(&r, cfg, u->lora_rank, &rows, &cols);
        kern_dtype kd;
        if (tensor_dtype_to_kern(e->dtype, &kd) != 0)
            return errbuf_fail_at(err, errlen, path, "%s%s%s%s is %s; F32, F16 or BF16 expected",
                                  by_position ? "list item " : "",
                                  by_position ? key : "", by_position ? " = " : "", name, tensor_dtype_name(e->dtype));
        if (!shape_ok(e, &r, rows, cols)) {
            char want[64], got[96] = "[";
            describe(&r, u->lora_rank, cfg, want, sizeof want);
            for (int32_t k = 0; k < e->ndim; k++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", k ? ", " : "", (long long)e->shape[k]);
            strncat(got, "]", sizeof got - strlen(got) - 1);
            return errbuf_fail_at(err, errlen, path,
                                  "%s%s%s%s has shape %s, expected %s for this model (hidden %d, %d/%d heads of "
                                  "%d, lora_rank %d)",
                                  by_position ? "list item " : "", by_position ? key : "",
                                  by_position ? " = " : "", name, got, want, cfg->hidden_size,
                                  cfg->num_attention_heads, cfg->num_key_value_heads, cfg->head_dim, u->lora_rank);
        }
        ts[i] = e;
    }
    return 0;
}

/* Widened to fp32 into the host image, then one upload. */
static int install(uio_weights *u, const tensor_entry *const *ts, const model_config *cfg, const kern_backend *be,
                   const char *path, char *err, size_t errlen) {
    const int32_t L = cfg->num_hidden_layers, n = uio_tensor_count(L);
    const float scale = (float)(u->lora_alpha / u->lora_rank);
    size_t floats = 0;
    size_t *at = malloc((size_t)n * sizeof *at);
    if (!at) return errbuf_fail_at(err, errlen, path, "out of memory");
    for (int32_t i = 0; i < n; i++) {
        at[i] = floats;
        floats += (size_t)(ts[i]->nbytes / tensor_dtype_size(ts[i]->dtype));
        floats = (floats + 15) & ~(size_t)15; /* every tensor 64-byte aligned */
    }
    float *host = calloc(floats ? floats : 1, sizeof *host);
    u->block = be->mem_alloc(floats * sizeof(float));
    u->block_bytes = floats * sizeof(float);
    u->be = be;
    lora_adapter *ads[2] = {&u->encoder, &u->transfer};
    for (int k = 0; k < 2; k++) {
        ads[k]->r = u->lora_rank;
        ads[k]->n_layer = L;
        ads[k]->scale = scale;
        ads[k]->alpha = u->lora_alpha;
        ads[k]->targets = k == 0 ? (1u << LORA_Q | 1u << LORA_V) : (1u << LORA_K | 1u << LORA_V);
        ads[k]->pairs = calloc((size_t)L * LORA_N_TARGETS, sizeof(lora_pair));
        ads[k]->be = be;
    }
    int rc = -1;
    if (!host || !u->block || !u->encoder.pairs || !u->transfer.pairs) {
        errbuf_fail_at(err, errlen, path, "out of %s memory for %zu UIO parameters", u->block ? "host" : be->name,
                       floats);
        goto out;
    }
    for (int32_t i = 0; i < n; i++) {
        const tensor_entry *e = ts[i];
        size_t cnt = (size_t)(e->nbytes / tensor_dtype_size(e->dtype));
        kern_dtype kd = KERN_F32;
        tensor_dtype_to_kern(e->dtype, &kd);
        kern_cpu_widen(host + at[i], e->data, kd, (int64_t)cnt);
        u->n_params += cnt;
        role r = role_at(i, L);
        float *dev = (float *)u->block + at[i];
        if (r.kind == ROLE_RETRIEVAL) {
            u->retrieval_token = dev;
        } else if (r.kind == ROLE_REPEAT) {
            u->repeat_token = dev;
        } else {
            lora_adapter *a = r.kind == ROLE_ENCODER ? &u->encoder : &u->transfer;
            lora_pair *p = &a->pairs[(size_t)r.layer * LORA_N_TARGETS + r.target];
            if (r.is_b) {
                for (size_t j = 0; j < cnt; j++) host[at[i] + j] *= scale;
                p->b = dev;
            } else {
                p->a = dev;
            }
        }
    }
    if (be->mem_copy(NULL, u->block, host, floats * sizeof(float), KERN_H2D) != KERN_OK) {
        errbuf_fail_at(err, errlen, path, "uploading the UIO weights to %s failed", be->name);
        goto out;
    }
    rc = 0;
out:
    free(at);
    free(host);
    return rc;
}

int uio_weights_load(uio_weights *u, const char *dir, const model_config *cfg, const kern_backend *be, int *io,
                     char *err, size_t errlen) {
    memset(u, 0, sizeof *u);
    *io = 0;
    if (cfg->qk_norm) /* the encoder and its training run plain LLaMA layers (uio_encoder.c, uio_grad.c) */
        return errbuf_fail_at(err, errlen, dir, "UIO weights over a qk_norm model (head norms) are not supported");
    char path[4200];
    snprintf(path, sizeof path, "%s/uio_config.json", dir);
    if (read_config(path, u, io, err, errlen)) return -1;
    struct stat st;
    bool is_st = false;
    snprintf(path, sizeof path, "%s/uio.safetensors", dir);
    if (stat(path, &st) == 0) {
        is_st = true;
    } else {
        snprintf(path, sizeof path, "%s/uio.pth", dir);
        if (stat(path, &st) != 0) {
            *io = 1;
            return errbuf_fail_at(err, errlen, dir,
                                  "neither uio.safetensors nor uio.pth is there (a UIO directory holds "
                                          "uio_config.json and one of them)");
        }
    }
    u->file = is_st ? "uio.safetensors" : "uio.pth";
    mapping m;
    if (map_file(path, &m, io, err, errlen)) return -1;
    static const uint8_t empty[1];
    tensor_list l = {0};
    const int32_t n = uio_tensor_count(cfg->num_hidden_layers);
    const tensor_entry **ts = calloc((size_t)n, sizeof *ts);
    int rc = -1;
    if (!ts) {
        errbuf_fail_at(err, errlen, path, "out of memory");
        goto out;
    }
    /* the parsers' messages already name the file */
    if ((is_st ? safetensors_parse : torch_zip_parse)(m.addr ? m.addr : empty, m.len, path, &l, err, errlen)) goto out;
    if (check_tensors(ts, &l, !is_st, path, u, cfg, err, errlen)) goto out;
    rc = install(u, ts, cfg, be, path, err, errlen);
out:
    free(ts);
    tensor_list_free(&l);
    if (m.addr) munmap(m.addr, m.len);
    if (rc) uio_weights_free(u);
    return rc;
}

void uio_weights_free(uio_weights *u) {
    if (!u) return;
    lora_free(&u->encoder); /* their pairs (block NULL: the matrices live in u->block) */
    lora_free(&u->transfer);
    if (u->be) u->be->mem_free(u->block);
    memset(u, 0, sizeof *u);
}
