/*
 * gguf_llama.c — llama-architecture GGUF <-> mnemo (see gguf_llama.h): names, Q/K row order, the config, and the
 * weight_store parser that lists a GGUF file's tensors under their Hugging Face names.
 */
#include "gguf_llama.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader_util.h"
#include "errbuf.h"

static const struct {
    const char *gguf, *hf;
} layer_names[] = {
    {"attn_norm", "input_layernorm"},  {"attn_q", "self_attn.q_proj"},    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},    {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},     {"ffn_up", "mlp.up_proj"},         {"ffn_down", "mlp.down_proj"},
};
static const struct {
    const char *gguf, *hf;
} top_names[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
#define N_LAYER_NAMES (sizeof layer_names / sizeof *layer_names)
#define N_TOP_NAMES (sizeof top_names / sizeof *top_names)

int gguf_llama_hf_name(const char *g, char *out, size_t n) {
    for (size_t i = 0; i < N_TOP_NAMES; i++)
        if (!strcmp(g, top_names[i].gguf)) return snprintf(out, n, "%s", top_names[i].hf) < (int)n ? 0 : -1;
    unsigned layer;
    int used = 0;
    if (sscanf(g, "blk.%u.%n", &layer, &used) != 1 || used == 0 || layer > 1000000) return -1;
    const char *rest = g + used;
    for (size_t i = 0; i < N_LAYER_NAMES; i++) {
        size_t l = strlen(layer_names[i].gguf);
        if (!strncmp(rest, layer_names[i].gguf, l) && !strcmp(rest + l, ".weight"))
            return snprintf(out, n, "model.layers.%u.%s.weight", layer, layer_names[i].hf) < (int)n ? 0 : -1;
    }
    return -1;
}

int gguf_llama_gguf_name(const char *h, char *out, size_t n) {
    for (size_t i = 0; i < N_TOP_NAMES; i++)
        if (!strcmp(h, top_names[i].hf)) return snprintf(out, n, "%s", top_names[i].gguf) < (int)n ? 0 : -1;
    unsigned layer;
    int used = 0;
    if (sscanf(h, "model.layers.%u.%n", &layer, &used) != 1 || used == 0) return -1;
    const char *rest = h + used;
    for (size_t i = 0; i < N_LAYER_NAMES; i++) {
        size_t l = strlen(layer_names[i].hf);
        if (!strncmp(rest, layer_names[i].hf, l) && !strcmp(rest + l, ".weight"))
            return snprintf(out, n, "blk.%u.%s.weight", layer, layer_names[i].gguf) < (int)n ? 0 : -1;
    }
    return -1;
}

/* Within each head of hd rows: HF row s * hd/2 + i (half s, pair i) is GGUF row 2i + s. */
int gguf_llama_permute_rows(void *dst, const void *src, int64_t rows, size_t row_bytes, int64_t heads, int to_gguf) {
    /* empty rows would make a huge row count free to claim: refused rather than looped over */
    if (heads <= 0 || rows <= 0 || row_bytes == 0 || heads > rows / 2 || rows % (2 * heads)) return -1;
    int64_t hd = rows / heads, half = hd / 2;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t s = 0; s < 2; s++)
            for (int64_t i = 0; i < half; i++) {
                int64_t hf = h * hd + s * half + i, gg = h * hd + 2 * i + s;
                int64_t to = to_gguf ? gg : hf, from = to_gguf ? hf : gg;
                memcpy((char *)dst + (size_t)to * row_bytes, (const char *)src + (size_t)from * row_bytes, row_bytes);
            }
    return 0;
}

/* ---- config */

typedef struct {
    const gguf_file *g;
    const char *file;
    char *err;
    size_t errlen;
    json_t *root;
} cfg_ctx;

static int cfail(cfg_ctx *c, const char *fmt, const char *key) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, key);
    snprintf(c->err, c->errlen, "%s: %s", c->file, msg);
    return -1;
}

/* Copies an integer key into the JSON under field; required keys must be present. */
static int put_int(cfg_ctx *c, const char *key, const char *field, int required) {
    int64_t v;
    if (gguf_get_i64(c->g, key, &v)) return json_object_set_new(c->root, field, json_integer(v)) ? -1 : 0;
    if (gguf_find(c->g, key)) return cfail(c, "metadata '%s' must be an integer", key);
    return required ? cfail(c, "metadata '%s' is missing (a llama GGUF has it)", key) : 0;
}

static int put_float(cfg_ctx *c, const char *key, const char *field) {
    double v;
    if (gguf_get_f64(c->g, key, &v)) return json_object_set_new(c->root, field, json_real(v)) ? -1 : 0;
    return gguf_find(c->g, key) ? cfail(c, "metadata '%s' must be a number", key) : 0;
}

/* A string key as a JSON string (NUL bytes are refused: they would cut the value). */
static json_t *str_value(cfg_ctx *c, const char *key, int *bad) {
    const char *s;
    uint64_t n;
    *bad = 0;
    if (!gguf_get_str(c->g, key, &s, &n)) {
        if (gguf_find(c->g, key)) *bad = cfail(c, "metadata '%s' must be a string", key);
        return NULL;
    }
    if (n > 4096 || memchr(s, 0, (size_t)n)) {
        *bad = cfail(c, "metadata '%s' is longer than 4096 bytes or holds a NUL", key);
        return NULL;
    }
    json_t *v = json_stringn_nocheck(s, (size_t)n);
    if (!v) *bad = cfail(c, "%s: out of memory", key);
    return v;
}

static int put_longllama(cfg_ctx *c) {
    const gguf_kv *ml = gguf_find(c->g, "mnemo.longllama.mem_layers");
    if (ml) {
        if (ml->type != GGUF_ARRAY || ml->n > 256) return cfail(c, "metadata '%s' must be an integer array", ml->key);
        json_t *a = json_array();
        json_object_set_new(c->root, "mem_layers", a);
        for (uint64_t i = 0; i < ml->n; i++) {
            int64_t v;
            if (!gguf_arr_i64(ml, i, &v)) return cfail(c, "metadata '%s' must be an integer array", ml->key);
            json_array_append_new(a, json_integer(v));
        }
    }
    const gguf_kv *gr = gguf_find(c->g, "mnemo.longllama.mem_attention_grouping");
    if (gr) {
        int64_t a, b;
        if (gr->n != 2 || !gguf_arr_i64(gr, 0, &a) || !gguf_arr_i64(gr, 1, &b))
            return cfail(c, "metadata '%s' must be 2 integers", gr->key);
        json_object_set_new(c->root, "mem_attention_grouping", json_pack("[II]", (json_int_t)a, (json_int_t)b));
    }
    int bad;
    json_t *md = str_value(c, "mnemo.longllama.mem_dtype", &bad);
    if (bad) return -1;
    if (md) json_object_set_new(c->root, "mem_dtype", md);
    if (put_int(c, "mnemo.longllama.last_context_length", "last_context_length", 0)) return -1;
    bool pos;
    if (gguf_get_bool(c->g, "mnemo.longllama.mem_positionals", &pos))
        json_object_set_new(c->root, "mem_positionals", json_boolean(pos));
    else if (gguf_find(c->g, "mnemo.longllama.mem_positionals"))
        return cfail(c, "metadata '%s' must be a bool", "mnemo.longllama.mem_positionals");
    return 0;
}

static int build_config(cfg_ctx *c) {
    const char *arch;
    uint64_t alen;
    if (!gguf_get_str(c->g, "general.architecture", &arch, &alen))
        return cfail(c, "metadata '%s' is missing or not a string", "general.architecture");
    if (alen != 5 || memcmp(arch, "llama", 5) != 0) {
        char a[40];
        snprintf(a, sizeof a, "%.*s", (int)(alen < 32 ? alen : 32), arch);
        return cfail(c, "architecture '%s' is not supported (llama)", a);
    }
    int bad;
    json_t *hf_arch = str_value(c, "mnemo.architecture", &bad);
    if (bad) return -1;
    if (!hf_arch) hf_arch = json_string("LlamaForCausalLM");
    json_object_set_new(c->root, "architectures", json_pack("[o]", hf_arch));
    if (put_int(c, "llama.embedding_length", "hidden_size", 1) ||
        put_int(c, "llama.feed_forward_length", "intermediate_size", 1) ||
        put_int(c, "llama.block_count", "num_hidden_layers", 1) ||
        put_int(c, "llama.attention.head_count", "num_attention_heads", 1) ||
        put_int(c, "llama.attention.head_count_kv", "num_key_value_heads", 0) ||
        put_int(c, "llama.attention.key_length", "head_dim", 0) ||
        put_int(c, "llama.context_length", "max_position_embeddings", 0) ||
        put_float(c, "llama.attention.layer_norm_rms_epsilon", "rms_norm_eps") ||
        put_float(c, "llama.rope.freq_base", "rope_theta"))
        return -1;
    /* vocabulary: llama.vocab_size, else the token list, else the embedding's rows */
    if (put_int(c, "llama.vocab_size", "vocab_size", 0)) return -1;
    if (!json_object_get(c->root, "vocab_size")) {
        const gguf_kv *tk = gguf_find(c->g, "tokenizer.ggml.tokens");
        const gguf_tensor *te = gguf_find_tensor(c->g, "token_embd.weight");
        if (tk && tk->type == GGUF_ARRAY) json_object_set_new(c->root, "vocab_size", json_integer((json_int_t)tk->n));
        else if (te && te->ndim == 2) json_object_set_new(c->root, "vocab_size", json_integer(te->ne[1]));
        else return cfail(c, "%sno vocabulary size (llama.vocab_size, tokenizer.ggml.tokens or token_embd.weight)", "");
    }
    json_t *st = str_value(c, "llama.rope.scaling.type", &bad);
    if (bad) return -1;
    if (st) {
        json_t *rs = json_object();
        json_object_set_new(rs, "type", st);
        double f;
        if (gguf_get_f64(c->g, "llama.rope.scaling.factor", &f)) json_object_set_new(rs, "factor", json_real(f));
        json_object_set_new(c->root, "rope_scaling", rs);
    } else {
        double f;
        if (gguf_get_f64(c->g, "llama.rope.scale_linear", &f) && f != 1.0)
            json_object_set_new(c->root, "rope_scaling", json_pack("{s:s, s:f}", "type", "linear", "factor", f));
    }
    if (gguf_find_tensor(c->g, "rope_freqs.weight"))
        return cfail(c, "%srope_freqs.weight (llama3-style RoPE scaling) is not supported", "");
    json_object_set_new(c->root, "tie_word_embeddings", json_boolean(!gguf_find_tensor(c->g, "output.weight")));
    if (put_int(c, "tokenizer.ggml.bos_token_id", "bos_token_id", 0) ||
        put_int(c, "tokenizer.ggml.eos_token_id", "eos_token_id", 0) ||
        put_int(c, "tokenizer.ggml.padding_token_id", "pad_token_id", 0))
        return -1;
    return put_longllama(c);
}

int gguf_llama_config_json(const gguf_file *g, const char *file, char **json, char *err, size_t errlen) {
    cfg_ctx c = {.g = g, .file = file, .err = err, .errlen = errlen, .root = json_object()};
    *json = NULL;
    if (!c.root) return cfail(&c, "%sout of memory", "");
    int rc = build_config(&c);
    if (!rc && !(*json = json_dumps(c.root, JSON_COMPACT))) rc = cfail(&c, "%sout of memory", "");
    json_decref(c.root);
    return rc;
}

/* ---- tensors */

static int tensor_dtype_of(uint32_t ggml_type, tensor_dtype *dt) {
    switch (ggml_type) {
    case GGML_F32: *dt = TENSOR_F32; return 0;
    case GGML_F16: *dt = TENSOR_F16; return 0;
    case GGML_BF16: *dt = TENSOR_BF16; return 0;
    case GGML_Q8_0: *dt = TENSOR_Q8_0; return 0;
    case GGML_Q4_0: *dt = TENSOR_Q4_0; return 0;
    case GGML_Q4_K: *dt = TENSOR_Q4_K; return 0;
    case GGML_Q6_K: *dt = TENSOR_Q6_K; return 0;
    case GGML_Q4_1: *dt = TENSOR_Q4_1; return 0;
    case GGML_Q5_0: *dt = TENSOR_Q5_0; return 0;
    case GGML_Q5_1: *dt = TENSOR_Q5_1; return 0;
    case GGML_Q2_K: *dt = TENSOR_Q2_K; return 0;
    case GGML_Q3_K: *dt = TENSOR_Q3_K; return 0;
    case GGML_Q5_K: *dt = TENSOR_Q5_K; return 0;
    default: return -1;
    }
}

/* Appends one GGUF tensor under its HF name; Q and K get a reordered heap copy; every other tensor (f32, f16,
 * bf16, and each quant type the kernels read: q8_0, q4_0, q4_1, q5_0, q5_1, q2_K .. q6_K) stays in the mapped
 * file. */
static int add_tensor(const gguf_tensor *t, int64_t n_head, int64_t n_head_kv, const char *file, tensor_list *out,
                      char *err, size_t errlen) {
    char hf[160];
    if (gguf_llama_hf_name(t->name, hf, sizeof hf))
        return errbuf_fail_at(err, errlen, file,
                              "tensor '%s' is not part of a llama model (mnemo reads token_embd, output_norm, "
                              "output and blk.N.attn_*/ffn_*)",
                              t->name);
    if (t->ndim > 2) return errbuf_fail_at(err, errlen, file, "tensor '%s' is not 1-D or 2-D", t->name);
    /* the row loops below (Q/K reorder) are bounded only through the byte size: no empty dims */
    if (t->ne[0] <= 0 || (t->ndim == 2 && t->ne[1] <= 0))
        return errbuf_fail_at(err, errlen, file, "tensor '%s' has a zero dimension", t->name);
    tensor_dtype dt;
    const void *data = t->data;
    uint64_t nbytes = t->nbytes;
    void *owned = NULL;
    if (tensor_dtype_of(t->type, &dt)) {
        char what[200];
        snprintf(what, sizeof what, "has type %s; mnemo reads f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, "
                 "q3_K, q4_K, q5_K, q6_K: re-quantize with mnemo quantize or llama-quantize",
                 gguf_type_name(t->type));
        return errbuf_fail_at(err, errlen, file, "tensor '%s' %s", t->name, what);
    }
    int64_t shape[2] = {t->ndim == 2 ? t->ne[1] : t->ne[0], t->ne[0]};
    if (ld_list_push(out, hf, strlen(hf), dt, t->ndim, shape, data, nbytes, file)) {
        free(owned);
        return errbuf_fail_at(err, errlen, file, "tensor '%s' cannot be listed: out of memory", t->name);
    }
    tensor_entry *e = &out->items[out->count - 1];
    e->owned = owned;
    int is_q = strstr(t->name, ".attn_q.") != NULL, is_k = strstr(t->name, ".attn_k.") != NULL;
    if (t->ndim != 2 || !(is_q || is_k)) return 0;
    int64_t heads = is_q ? n_head : n_head_kv;
    void *copy = malloc(nbytes ? (size_t)nbytes : 1);
    if (!copy) return errbuf_fail_at(err, errlen, file, "tensor '%s' cannot be reordered: out of memory", t->name);
    int bad = gguf_llama_permute_rows(copy, data, t->ne[1], (size_t)(nbytes / (uint64_t)t->ne[1]), heads, 0);
    free(e->owned);
    e->owned = copy;
    e->data = copy;
    if (bad)
        return errbuf_fail_at(err, errlen, file,
                              "tensor '%s' has a row count that is not 2 x its head count (RoPE pairs)", t->name);
    return 0;
}

/* weight_store's parse_fn for GGUF files. */
int gguf_weights_parse(const uint8_t *buf, uint64_t len, const char *file, tensor_list *out, char *err,
                       size_t errlen) {
    gguf_file g;
    if (gguf_parse(buf, len, file, &g, err, errlen)) return -1;
    int64_t n_head = 0, n_head_kv = 0;
    int rc = 0;
    if (!gguf_get_i64(&g, "llama.attention.head_count", &n_head) || n_head <= 0)
        rc = -1, snprintf(err, errlen, "%s: metadata 'llama.attention.head_count' is missing or not positive", file);
    if (!rc && (!gguf_get_i64(&g, "llama.attention.head_count_kv", &n_head_kv) || n_head_kv <= 0)) n_head_kv = n_head;
    size_t start = out->count;
    for (size_t i = 0; i < g.n_tensors && !rc; i++)
        rc = add_tensor(&g.tensors[i], n_head, n_head_kv, file, out, err, errlen);
    if (rc) ld_list_truncate(out, start);
    gguf_free(&g);
    return rc;
}
