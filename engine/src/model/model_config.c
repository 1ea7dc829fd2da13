/*
 * model_config.c — parses and validates config.json of a LlamaForCausalLM / LongLlamaForCausalLM checkpoint.
 * Every field is type-checked and range-checked here, so later size arithmetic (layers x heads x head_dim,
 * vocab x hidden) cannot overflow and the forward pass never meets a shape it cannot run. Unsupported
 * features are reported with "not supported" in the message (the API maps that to MNEMO_ERR_UNSUPPORTED).
 */
#include "model_config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"

#define MAX_DIM (1 << 20)          /* hidden, intermediate, heads, head_dim, vocab, layers */
#define MAX_POSITIONS (1 << 24)
#define MAX_CONFIG_BYTES (16u << 20)

typedef struct {
    const char *file;
    char *err;
    size_t errlen;
} ctx;

static int fail(const ctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errbuf_vwrite(c->err, c->errlen, c->file, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "real";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    default: return "null";
    }
}

/* The field, or NULL when absent or null (null means "use the default" everywhere in HF configs). */
static json_t *get(json_t *root, const char *key) {
    json_t *v = json_object_get(root, key);
    return json_is_null(v) ? NULL : v;
}

static int int_value(const ctx *c, const char *name, json_t *v, long long lo, long long hi, int32_t *out) {
    if (!json_is_integer(v)) return fail(c, "field '%s' must be an integer, got %s", name, type_name(v));
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return fail(c, "field '%s' must be in %lld..%lld, got %lld", name, lo, hi, x);
    *out = (int32_t)x;
    return 0;
}

/* Optional integer: *out keeps its default when absent/null. */
static int opt_int(const ctx *c, json_t *root, const char *name, long long lo, long long hi, int32_t *out) {
    json_t *v = get(root, name);
    return v ? int_value(c, name, v, lo, hi, out) : 0;
}

static int req_int(const ctx *c, json_t *root, const char *name, long long lo, long long hi, int32_t *out) {
    json_t *v = json_object_get(root, name);
    if (!v) return fail(c, "missing required field '%s'", name);
    return int_value(c, name, v, lo, hi, out);
}

/* Optional positive finite float (integer or real in the file). */
static int opt_pos_float(const ctx *c, json_t *obj, const char *name, float *out) {
    json_t *v = get(obj, name);
    if (!v) return 0;
    if (!json_is_number(v)) return fail(c, "field '%s' must be a number, got %s", name, type_name(v));
    double d = json_number_value(v);
    if (!(d > 0) || !isfinite((float)d)) return fail(c, "field '%s' must be a positive number, got %g", name, d);
    *out = (float)d;
    return 0;
}

static int opt_bool(const ctx *c, json_t *root, const char *name, bool *out) {
    json_t *v = get(root, name);
    if (!v) return 0;
    if (!json_is_boolean(v)) return fail(c, "field '%s' must be true or false, got %s", name, type_name(v));
    *out = json_is_true(v);
    return 0;
}

static int parse_architecture(const ctx *c, json_t *root, model_config *m) {
    json_t *a = get(root, "architectures");
    const char *arch = NULL;
    if (a) {
        if (!json_is_array(a) || json_array_size(a) == 0 || !json_is_string(json_array_get(a, 0)))
            return fail(c, "field 'architectures' must be a non-empty list of strings");
        arch = json_string_value(json_array_get(a, 0));
    } else {
        json_t *t = get(root, "model_type");
        if (!t) return fail(c, "missing 'architectures' (or 'model_type'): cannot tell which model this is");
        if (!json_is_string(t)) return fail(c, "field 'model_type' must be a string, got %s", type_name(t));
        const char *mt = json_string_value(t);
        if (strcmp(mt, "llama") == 0) arch = "LlamaForCausalLM";
        else if (strcmp(mt, "longllama") == 0) arch = "LongLlamaForCausalLM";
        else return fail(c, "model_type '%.64s' is not supported (llama, longllama)", mt);
    }
    if (strcmp(arch, "LlamaForCausalLM") != 0 && strcmp(arch, "LongLlamaForCausalLM") != 0)
        return fail(c, "architecture '%.64s' is not supported (LlamaForCausalLM, LongLlamaForCausalLM)", arch);
    snprintf(m->architecture, sizeof m->architecture, "%s", arch);
    m->is_longllama = strcmp(arch, "LongLlamaForCausalLM") == 0;
    json_t *act = get(root, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0))
        return fail(c, "hidden_act '%.32s' is not supported (silu)",
                    json_is_string(act) ? json_string_value(act) : type_name(act));
    return 0;
}

/* rope_scaling (or, in transformers >= 5 files, rope_parameters): none/default or linear with a factor. */
static int parse_rope(const ctx *c, json_t *root, model_config *m) {
    json_t *rp = get(root, "rope_parameters");
    if (rp && !json_is_object(rp)) return fail(c, "field 'rope_parameters' must be an object, got %s", type_name(rp));
    if (opt_pos_float(c, root, "rope_theta", &m->rope_theta)) return -1;
    if (rp && !get(root, "rope_theta") && opt_pos_float(c, rp, "rope_theta", &m->rope_theta)) return -1;

    const char *field = "rope_scaling";
    json_t *rs = json_object_get(root, "rope_scaling");
    if (!rs) {  /* absent (not null): the newer field speaks */
        rs = rp;
        field = "rope_parameters";
    }
    if (json_is_null(rs) || !rs) return 0;
    if (!json_is_object(rs)) return fail(c, "field '%s' must be an object or null, got %s", field, type_name(rs));
    json_t *t = get(rs, "rope_type");
    if (!t) t = get(rs, "type");
    if (!t && rs == rp) return 0; /* rope_parameters holding only rope_theta */
    if (!json_is_string(t)) return fail(c, "%s needs a 'type' or 'rope_type' string", field);
    const char *type = json_string_value(t);
    if (strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "linear") != 0)
        return fail(c, "%s type '%.32s' is not supported (linear)", field, type);
    if (!get(rs, "factor")) return fail(c, "%s type 'linear' needs a 'factor'", field);
    if (opt_pos_float(c, rs, "factor", &m->rope_scaling_factor)) return -1;
    m->rope_scaling = ROPE_SCALING_LINEAR;
    if (m->is_longllama)
        return fail(c, "%s 'linear' is not supported for LongLlamaForCausalLM (it must be null)", field);
    return 0;
}

static int parse_tokens(const ctx *c, json_t *root, model_config *m) {
    if (opt_int(c, root, "bos_token_id", 0, m->vocab_size - 1, &m->bos_token_id)) return -1;
    json_t *p = get(root, "pad_token_id");
    if (p) {
        if (!json_is_integer(p)) return fail(c, "field 'pad_token_id' must be an integer, got %s", type_name(p));
        long long x = json_integer_value(p);
        if (x >= m->vocab_size)
            return fail(c, "field 'pad_token_id' %lld is outside the vocabulary (%d)", x, m->vocab_size);
        m->pad_token_id = x < 0 ? -1 : (int32_t)x; /* some LLaMA configs say -1 for "none" */
    }
    json_t *e = get(root, "eos_token_id");
    if (!e) return 0;
    if (json_is_integer(e)) {
        m->n_eos = 1;
        return int_value(c, "eos_token_id", e, 0, m->vocab_size - 1, &m->eos_token_ids[0]);
    }
    if (!json_is_array(e) || json_array_size(e) == 0 || json_array_size(e) > MODEL_MAX_EOS)
        return fail(c, "field 'eos_token_id' must be an integer or a list of 1..%d integers", MODEL_MAX_EOS);
    m->n_eos = (int32_t)json_array_size(e);
    for (int32_t i = 0; i < m->n_eos; i++)
        if (int_value(c, "eos_token_id", json_array_get(e, (size_t)i), 0, m->vocab_size - 1, &m->eos_token_ids[i]))
            return -1;
    return 0;
}

static int parse_longllama(const ctx *c, json_t *root, model_config *m) {
    json_t *ml = get(root, "mem_layers");
    if (ml) {
        if (!json_is_array(ml) || json_array_size(ml) > MODEL_MAX_MEM_LAYERS)
            return fail(c, "field 'mem_layers' must be a list of at most %d layer indices", MODEL_MAX_MEM_LAYERS);
        m->n_mem_layers = (int32_t)json_array_size(ml);
        for (int32_t i = 0; i < m->n_mem_layers; i++) {
            if (int_value(c, "mem_layers", json_array_get(ml, (size_t)i), 0, m->num_hidden_layers - 1,
                          &m->mem_layers[i]))
                return -1;
            for (int32_t j = 0; j < i; j++)
                if (m->mem_layers[j] == m->mem_layers[i])
                    return fail(c, "field 'mem_layers' lists layer %d twice", m->mem_layers[i]);
        }
    }
    json_t *md = get(root, "mem_dtype");
    if (md) {
        const char *s = json_is_string(md) ? json_string_value(md) : "";
        if (strcmp(s, "bfloat16") == 0) m->mem_dtype = KERN_BF16;
        else if (strcmp(s, "float16") == 0) m->mem_dtype = KERN_F16;
        else if (strcmp(s, "float32") == 0) m->mem_dtype = KERN_F32;
        else return fail(c, "mem_dtype '%.32s' is not supported (bfloat16, float16, float32)",
                         json_is_string(md) ? s : type_name(md));
    }
    if (opt_int(c, root, "last_context_length", 1, MAX_POSITIONS, &m->last_context_length)) return -1;
    json_t *g = get(root, "mem_attention_grouping");
    if (g) {
        if (!json_is_array(g) || json_array_size(g) != 2)
            return fail(c, "field 'mem_attention_grouping' must be null or [heads, queries]");
        for (size_t i = 0; i < 2; i++)
            if (int_value(c, "mem_attention_grouping", json_array_get(g, i), 1, MAX_POSITIONS,
                          &m->mem_attention_grouping[i]))
                return -1;
    }
    return opt_bool(c, root, "mem_positionals", &m->mem_positionals);
}

static void set_defaults(model_config *m) {
    memset(m, 0, sizeof *m);
    m->rms_norm_eps = 1e-6f;
    m->rope_theta = 10000.0f;
    m->rope_scaling = ROPE_SCALING_NONE;
    m->rope_scaling_factor = 1.0f;
    m->max_position_embeddings = 2048;
    m->bos_token_id = 1;
    m->eos_token_ids[0] = 2;
    m->n_eos = 1;
    m->pad_token_id = -1;
    m->mem_dtype = KERN_BF16;
    m->last_context_length = 1024;
    m->mem_positionals = true;
}

static int parse_root(const ctx *c, json_t *root, model_config *m) {
    if (!json_is_object(root)) return fail(c, "must be a JSON object, got %s", type_name(root));
    if (parse_architecture(c, root, m)) return -1;
    if (req_int(c, root, "hidden_size", 1, MAX_DIM, &m->hidden_size) ||
        req_int(c, root, "intermediate_size", 1, MAX_DIM, &m->intermediate_size) ||
        req_int(c, root, "num_hidden_layers", 1, MAX_DIM, &m->num_hidden_layers) ||
        req_int(c, root, "num_attention_heads", 1, MAX_DIM, &m->num_attention_heads) ||
        req_int(c, root, "vocab_size", 1, MAX_DIM, &m->vocab_size))
        return -1;
    m->num_key_value_heads = m->num_attention_heads;
    if (opt_int(c, root, "num_key_value_heads", 1, MAX_DIM, &m->num_key_value_heads)) return -1;
    if (m->num_attention_heads % m->num_key_value_heads != 0)
        return fail(c, "num_attention_heads %d is not a multiple of num_key_value_heads %d", m->num_attention_heads,
                    m->num_key_value_heads);
    if (get(root, "head_dim")) {
        if (opt_int(c, root, "head_dim", 1, MAX_DIM, &m->head_dim)) return -1;
    } else {
        if (m->hidden_size % m->num_attention_heads != 0)
            return fail(c, "hidden_size %d is not divisible by num_attention_heads %d (and no head_dim is given)",
                        m->hidden_size, m->num_attention_heads);
        m->head_dim = m->hidden_size / m->num_attention_heads;
    }
    if (m->head_dim % 2 != 0) return fail(c, "head_dim %d must be even for RoPE", m->head_dim);
    if ((long long)m->num_attention_heads * m->head_dim > MAX_DIM)
        return fail(c, "num_attention_heads x head_dim = %lld is too large",
                    (long long)m->num_attention_heads * m->head_dim);
    if (opt_int(c, root, "max_position_embeddings", 1, MAX_POSITIONS, &m->max_position_embeddings)) return -1;
    if (opt_pos_float(c, root, "rms_norm_eps", &m->rms_norm_eps)) return -1;
    if (parse_rope(c, root, m)) return -1;
    if (opt_bool(c, root, "tie_word_embeddings", &m->tie_word_embeddings)) return -1;
    if (opt_bool(c, root, "qk_norm", &m->qk_norm)) return -1;
    if (parse_tokens(c, root, m)) return -1;
    json_t *dt = get(root, "torch_dtype");
    if (!dt) dt = get(root, "dtype"); /* transformers >= 5 name */
    if (dt && json_is_string(dt)) {
        const char *s = json_string_value(dt);
        if (!strcmp(s, "float32") || !strcmp(s, "bfloat16") || !strcmp(s, "float16"))
            snprintf(m->torch_dtype, sizeof m->torch_dtype, "%s", s);
    }
    return m->is_longllama ? parse_longllama(c, root, m) : 0;
}

int model_config_parse(const char *json, size_t len, const char *file, model_config *out, char *err,
                       size_t errlen) {
    ctx c = {file ? file : "config.json", err, errlen};
    set_defaults(out);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) return fail(&c, "not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int rc = parse_root(&c, root, out);
    json_decref(root);
    return rc;
}

int model_config_load(const char *dir, model_config *out, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    /* read at most one byte past the limit, so an oversized file is noticed without reading it all */
    long sz = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    rewind(f);
    size_t cap = sz >= 0 && (unsigned long)sz < MAX_CONFIG_BYTES ? (size_t)sz + 1 : MAX_CONFIG_BYTES + 1;
    char *buf = malloc(cap);
    size_t n = buf ? fread(buf, 1, cap, f) : 0;
    int rd_err = ferror(f);
    fclose(f);
    if (!buf) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc;
    if (rd_err) rc = -1, snprintf(err, errlen, "%s: read error", path);
    else if (n > MAX_CONFIG_BYTES) rc = -1, snprintf(err, errlen, "%s: larger than %u bytes", path, MAX_CONFIG_BYTES);
    else rc = model_config_parse(buf, n, path, out, err, errlen);
    free(buf);
    return rc;
}
