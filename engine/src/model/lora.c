/*
 * lora.c — see lora.h. Every tensor is checked (name, shape) against the model before anything is uploaded; a
 * tensor in the file that no target explains is an error too, so an adapter is used whole or not at all.
 */
#include "lora.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors_write.h"
#include "tensor_index.h"
#include "errbuf.h"

static const char *const TARGET_NAMES[LORA_N_TARGETS] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                         "gate_proj", "up_proj", "down_proj"};

int lora_target_parse(const char *module) {
    for (int t = 0; module && t < LORA_N_TARGETS; t++)
        if (!strcmp(module, TARGET_NAMES[t])) return t;
    return -1;
}

const char *lora_target_name(lora_target t) { return (unsigned)t < LORA_N_TARGETS ? TARGET_NAMES[t] : "?"; }

/* "adapter <dir>: <message>" into err; -1. */
static int adapter_fail(char *err, size_t errlen, const char *dir, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int adapter_fail(char *err, size_t errlen, const char *dir, const char *fmt, ...) {
    char where[4200];
    snprintf(where, sizeof where, "adapter %s", dir);
    va_list ap;
    va_start(ap, fmt);
    errbuf_vwrite(err, errlen, where, fmt, ap);
    va_end(ap);
    return -1;
}

/* [out, in] of target t in a model of config cfg. */
void lora_target_shape(const model_config *cfg, lora_target t, int64_t *out, int64_t *in) {
    int64_t d = cfg->hidden_size, ff = cfg->intermediate_size, qd = (int64_t)cfg->num_attention_heads * cfg->head_dim;
    int64_t kvd = (int64_t)cfg->num_key_value_heads * cfg->head_dim;
    static const int rows[LORA_N_TARGETS] = {0, 1, 1, 2, 3, 3, 2}; /* out: qd, kvd, d, ff */
    int64_t outs[4] = {qd, kvd, d, ff};
    *out = outs[rows[t]];
    *in = t == LORA_O ? qd : t == LORA_DOWN ? ff : d;
}

/* Checks adapter_config.json's content; fills r, scale and the targets. */
int lora_config_parse(const char *json, size_t len, const char *dir, lora_adapter *a, char *err, size_t errlen) {
    json_error_t je;
    json_t *c = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!c) return adapter_fail(err, errlen, dir, "adapter_config.json: %s (line %d)", je.text, je.line);
    a->targets = 0;
    int rc = -1;
    json_t *type = json_object_get(c, "peft_type"), *r = json_object_get(c, "r"), *alpha = json_object_get(c, "lora_alpha");
    json_t *targets = json_object_get(c, "target_modules"), *bias = json_object_get(c, "bias");
    if (!json_is_object(c) || !json_is_string(type) || strcmp(json_string_value(type), "LORA")) {
        adapter_fail(err, errlen, dir, "adapter_config.json: peft_type must be \"LORA\"");
        goto out;
    }
    if (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 65536 || !json_is_number(alpha) ||
        fabs(json_number_value(alpha)) > 1e6) {
        adapter_fail(err, errlen, dir,
                     "adapter_config.json: r must be an integer in 1..65536 and lora_alpha a number of "
                     "magnitude at most 1e6");
        goto out;
    }
    if (bias && !json_is_null(bias) && (!json_is_string(bias) || strcmp(json_string_value(bias), "none"))) {
        adapter_fail(err, errlen, dir, "adapter_config.json: bias \"%s\" is not supported (only \"none\")",
                     json_is_string(bias) ? json_string_value(bias) : "?");
        goto out;
    }
    static const char *const unsupported[] = {"use_dora", "fan_in_fan_out", "modules_to_save", "layers_to_transform",
                                              "rank_pattern", "alpha_pattern", "lora_bias"};
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++) {
        json_t *v = json_object_get(c, unsupported[i]);
        bool set = v && !json_is_null(v) && !json_is_false(v) && !(json_is_object(v) && !json_object_size(v)) &&
                   !(json_is_array(v) && !json_array_size(v));
        if (set) {
            adapter_fail(err, errlen, dir, "adapter_config.json: %s is set, which mnemo does not support yet",
                         unsupported[i]);
            goto out;
        }
    }
    if (!json_is_array(targets) || !json_array_size(targets)) {
        adapter_fail(err, errlen, dir, "adapter_config.json: target_modules must be a list of module names (a regex "
                     "string is not supported)");
        goto out;
    }
    size_t i;
    json_t *v;
    json_array_foreach(targets, i, v) {
        int t = json_is_string(v) ? lora_target_parse(json_string_value(v)) : -1;
        if (t < 0) {
            adapter_fail(err, errlen, dir,
                         "adapter_config.json: target module '%s' is not one of q_proj, k_proj, v_proj, "
                         "o_proj, gate_proj, up_proj, down_proj", json_is_string(v) ? json_string_value(v) : "?");
            goto out;
        }
        a->targets |= 1u << t;
    }
    a->r = (int32_t)json_integer_value(r);
    double rs = json_is_true(json_object_get(c, "use_rslora")) ? sqrt((double)a->r) : (double)a->r;
    a->scale = (float)(json_number_value(alpha) / rs);
    a->alpha = json_number_value(alpha);
    a->rslora = json_is_true(json_object_get(c, "use_rslora"));
    rc = 0;
out:
    json_decref(c);
    return rc;
}

static int read_config(const char *dir, lora_adapter *a, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return adapter_fail(err, errlen, dir, "cannot open adapter_config.json: %s", strerror(errno));
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    bool too_big = buf && n == (1 << 20) && fgetc(f) != EOF;
    fclose(f);
    int rc = !buf ? adapter_fail(err, errlen, dir, "out of memory")
             : too_big ? adapter_fail(err, errlen, dir, "adapter_config.json is larger than 1 MiB")
                       : lora_config_parse(buf, n, dir, a, err, errlen);
    free(buf);
    return rc;
}

/* The tensor of layer l, target t, matrix "A"/"B" (peft saves without the adapter name; older files keep
 * ".default"). */
static const tensor_entry *find_tensor(const weight_store *ws, int32_t l, lora_target t, const char *ab) {
    char name[256];
    const char *block = t <= LORA_O ? "self_attn" : "mlp";
    snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.%s.lora_%s.weight", l, block, TARGET_NAMES[t], ab);
    const tensor_entry *e = weight_store_find(ws, name);
    if (e) return e;
    snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.%s.lora_%s.default.weight", l, block,
             TARGET_NAMES[t], ab);
    return weight_store_find(ws, name);
}

/* A checked F32/F16/BF16 tensor widened to fp32, times mul. */
static void widen(float *dst, const tensor_entry *e, size_t n, float mul) {
    kern_dtype kd = KERN_F32;
    tensor_dtype_to_kern(e->dtype, &kd);
    kern_cpu_widen(dst, e->data, kd, (int64_t)n);
    if (mul != 1.0f)
        for (size_t i = 0; i < n; i++) dst[i] *= mul;
}

/* fold: B times the scale (serving); not folded: B as stored (training starts from it exactly). */
static int load(lora_adapter *a, const char *dir, const model_config *cfg, const kern_backend *be, bool fold,
                bool allow_extra, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    if (read_config(dir, a, err, errlen)) return -1;
    char extra[4200];
    snprintf(extra, sizeof extra, "%s/trainable_params.safetensors", dir);
    if (!allow_extra && access(extra, F_OK) == 0)
        return adapter_fail(err, errlen, dir,
                            "trainable_params.safetensors is present (a LoRA+ run: embeddings and norms trained "
                            "too), which an unmerged adapter cannot carry; serve it merged: mnemo export --merge");
    weight_store *ws = NULL;
    char werr[512];
    if (weight_store_open_adapter(dir, &ws, werr, sizeof werr)) return adapter_fail(err, errlen, dir, "%s", werr);
    a->n_layer = cfg->num_hidden_layers;
    size_t floats = 0, used = 0;
    int rc = -1;
    float *host = NULL;
    for (int32_t l = 0; l < a->n_layer; l++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            if (!(a->targets >> t & 1)) continue;
            int64_t out, in;
            lora_target_shape(cfg, (lora_target)t, &out, &in);
            const tensor_entry *ea = find_tensor(ws, l, (lora_target)t, "A"), *eb = find_tensor(ws, l, (lora_target)t, "B");
            if (!ea || !eb) {
                adapter_fail(err, errlen, dir, "layer %d %s: lora_%s.weight is missing", l, TARGET_NAMES[t],
                             ea ? "B" : "A");
                goto out;
            }
            for (int k = 0; k < 2; k++) {
                const tensor_entry *e = k ? eb : ea;
                int64_t want0 = k ? out : a->r, want1 = k ? a->r : in;
                kern_dtype kd;
                if (e->ndim != 2 || e->shape[0] != want0 || e->shape[1] != want1 || tensor_dtype_to_kern(e->dtype, &kd)) {
                    adapter_fail(err, errlen, dir,
                                 "%s: shape [%lld, %lld] in F32/F16/BF16 expected for r %d on this model",
                                 e->name, (long long)want0, (long long)want1, a->r);
                    goto out;
                }
            }
            floats += (size_t)a->r * (size_t)(in + out);
            used += 2;
        }
    if (used != weight_store_count(ws)) {
        for (size_t i = 0; i < weight_store_count(ws); i++) { /* name the first tensor no target explains */
            const char *name = weight_store_at(ws, i)->name;
            bool known = false;
            for (int32_t l = 0; l < a->n_layer && !known; l++)
                for (int t = 0; t < LORA_N_TARGETS && !known; t++)
                    known = (a->targets >> t & 1) && (find_tensor(ws, l, (lora_target)t, "A") == weight_store_at(ws, i) ||
                                                      find_tensor(ws, l, (lora_target)t, "B") == weight_store_at(ws, i));
            if (!known) {
                adapter_fail(err, errlen, dir, "tensor %s is not a LoRA matrix of this model's layers and targets",
                             name);
                goto out;
            }
        }
    }
    a->pairs = calloc((size_t)a->n_layer * LORA_N_TARGETS, sizeof *a->pairs);
    host = malloc(floats * sizeof *host);
    a->block = be->mem_alloc(floats * sizeof(float));
    if (!a->pairs || !host || !a->block) {
        adapter_fail(err, errlen, dir, "out of %s memory for %zu adapter parameters", a->block ? "host" : be->name,
                     floats);
        goto out;
    }
    a->be = be;
    size_t at = 0;
    for (int32_t l = 0; l < a->n_layer; l++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            if (!(a->targets >> t & 1)) continue;
            int64_t out, in;
            lora_target_shape(cfg, (lora_target)t, &out, &in);
            lora_pair *p = &a->pairs[(size_t)l * LORA_N_TARGETS + t];
            widen(host + at, find_tensor(ws, l, (lora_target)t, "A"), (size_t)a->r * (size_t)in, 1.0f);
            p->a = (float *)a->block + at;
            at += (size_t)a->r * (size_t)in;
            widen(host + at, find_tensor(ws, l, (lora_target)t, "B"), (size_t)out * (size_t)a->r, fold ? a->scale : 1.0f);
            p->b = (float *)a->block + at;
            at += (size_t)out * (size_t)a->r;
        }
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char *bytes[2] = {(const unsigned char *)host, (const unsigned char *)&a->scale};
    size_t lens[2] = {floats * sizeof(float), sizeof a->scale};
    for (int part = 0; part < 2; part++)
        for (size_t i = 0; i < lens[part]; i++) h = (h ^ bytes[part][i]) * 0x100000001b3ull;
    h = (h ^ (uint64_t)a->r ^ ((uint64_t)a->targets << 32)) * 0x100000001b3ull;
    a->fingerprint = h ? h : 1;
    if (be->mem_copy(NULL, a->block, host, floats * sizeof(float), KERN_H2D) != KERN_OK) {
        adapter_fail(err, errlen, dir, "uploading the adapter to %s failed", be->name);
        goto out;
    }
    rc = 0;
out:
    free(host);
    weight_store_close(ws);
    if (rc) lora_free(a);
    return rc;
}

int lora_load(lora_adapter *a, const char *dir, const model_config *cfg, const kern_backend *be, char *err,
              size_t errlen) {
    return load(a, dir, cfg, be, true, false, err, errlen);
}

int lora_load_for_merge(lora_adapter *a, const char *dir, const model_config *cfg, char *err, size_t errlen) {
    return load(a, dir, cfg, kern_cpu_backend(), true, true, err, errlen);
}

int lora_load_host_unfolded(lora_adapter *a, const char *dir, const model_config *cfg, char *err, size_t errlen) {
    return load(a, dir, cfg, kern_cpu_backend(), false, true, err, errlen);
}

void lora_free(lora_adapter *a) {
    if (!a) return;
    if (a->be) a->be->mem_free(a->block);
    free(a->pairs);
    memset(a, 0, sizeof *a);
}

int lora_apply(const lora_pair *p, int32_t r, const kern_backend *be, kern_ctx *kc, float *y, const float *x,
               int64_t n, int64_t out, int64_t in, float *t) {
    int rc = be->matmul(kc, t, x, p->a, KERN_F32, n, r, in, 0.f); /* t[n, r] = x A^T */
    return rc != KERN_OK ? rc : be->matmul(kc, y, t, p->b, KERN_F32, n, out, r, 1.f); /* y += t (sB)^T */
}

int lora_write_peft(const char *dir, const model_config *cfg, int32_t r, double alpha, bool rslora, unsigned targets,
                    const lora_host_pair *pairs, size_t n_pairs, const char *base_model, char *err, size_t errlen) {
    int n_targets = __builtin_popcount(targets & ((1u << LORA_N_TARGETS) - 1));
    size_t want = (size_t)cfg->num_hidden_layers * (size_t)n_targets;
    if (r < 1 || n_targets == 0 || n_pairs != want)
        return adapter_fail(err, errlen, dir, "%zu matrices pairs given, %zu expected (r %d, %d targets)", n_pairs,
                            want, r, n_targets);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return adapter_fail(err, errlen, dir, "cannot create: %s", strerror(errno));
    st_tensor *ts = calloc(2 * n_pairs, sizeof *ts);
    char (*names)[160] = calloc(2 * n_pairs, sizeof *names);
    int64_t (*shapes)[2] = calloc(2 * n_pairs, sizeof *shapes);
    json_t *cfgj = NULL, *tm = json_array();
    int rc = -1;
    if (!ts || !names || !shapes || !tm) {
        adapter_fail(err, errlen, dir, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n_pairs; i++) {
        const lora_host_pair *p = &pairs[i];
        if (p->layer < 0 || p->layer >= cfg->num_hidden_layers || (unsigned)p->target >= LORA_N_TARGETS ||
            !(targets >> p->target & 1) || !p->a || !p->b) {
            adapter_fail(err, errlen, dir,
                         "pair %zu (layer %d, target %d) is outside the adapter's layers and targets", i,
                         p->layer, (int)p->target);
            goto out;
        }
        int64_t o, in;
        lora_target_shape(cfg, p->target, &o, &in);
        for (int k = 0; k < 2; k++) {
            size_t j = 2 * i + (size_t)k;
            snprintf(names[j], sizeof names[j], "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", p->layer,
                     p->target <= LORA_O ? "self_attn" : "mlp", TARGET_NAMES[p->target], k ? 'B' : 'A');
            shapes[j][0] = k ? o : r;
            shapes[j][1] = k ? r : in;
            ts[j] = (st_tensor){names[j], TENSOR_F32, 2, shapes[j], k ? (const void *)p->b : (const void *)p->a};
        }
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    const char *meta[] = {"format", "pt"};
    if (safetensors_write(path, ts, 2 * n_pairs, meta, 1, err, errlen) != 0) goto out;
    for (int t = 0; t < LORA_N_TARGETS; t++)
        if (targets >> t & 1) json_array_append_new(tm, json_string(TARGET_NAMES[t]));
    cfgj = json_pack("{s:s, s:s, s:i, s:f, s:f, s:O, s:s, s:b, s:b, s:s?, s:b, s:n, s:n}", "peft_type", "LORA",
                     "task_type", "CAUSAL_LM", "r", r, "lora_alpha", alpha, "lora_dropout", 0.0, "target_modules", tm,
                     "bias", "none", "use_rslora", rslora, "fan_in_fan_out", 0, "base_model_name_or_path", base_model,
                     "inference_mode", 1, "modules_to_save", "layers_to_transform");
    char tmp[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!cfgj || json_dump_file(cfgj, tmp, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        adapter_fail(err, errlen, dir, "cannot write adapter_config.json");
        goto out;
    }
    rc = 0;
out:
    json_decref(cfgj);
    json_decref(tm);
    free(ts);
    free(names);
    free(shapes);
    return rc;
}
