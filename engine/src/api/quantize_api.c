/*
 * quantize_api.c — mnemo_quantize: a Hugging Face LLaMA / LongLLaMA checkpoint directory, or a GGUF file to re-quantize
 * (quantize_source.c: its tensors dequantized, its tokenizer metadata copied through), written as one GGUF file
 * (llama architecture) that both mnemo and llama.cpp load:
 *   - metadata as convert_hf_to_gguf.py writes it (llama.*, general.file_type, tokenizer.ggml.* from
 *     tokenizer.model), plus mnemo.architecture, mnemo.longllama.* (memory layers and their settings) and
 *     mnemo.tokenizer.spm_model (the tokenizer.model bytes, so mnemo's tokenizer is the original bit for bit);
 *   - matrices in the chosen type; rows without whole 32-blocks fall back to f16 and norms stay f32, as convert
 *     does; k-quant rows without whole 256-blocks take q4_0 (q2_K, q3_K), q5_0 (q4_K), q5_1 (q5_K) or q8_0 (q6_K),
 *     as llama-quantize mostly does (it takes iq4_nl for q2_K / q3_K); q4_0, q4_1, q5_0, q5_1,
 *     q8_0 are ggml's reference quantizers bit for bit, the k-quants mnemo's simple round-to-nearest ones
 *     (quant_kblocks.c, quant_xquantize.c), not ggml's searching ones;
 *     Q/K rows permuted into ggml's RoPE order (gguf_llama_permute_rows);
 *   - tensors produced one at a time (widened to fp32, permuted, quantized with GGML's reference rounding).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine_impl.h"
#include "errbuf.h"
#include "gguf_llama.h"
#include "gguf_write.h"
#include "log.h"
#include "quantize_source.h"

/* llama.cpp's llama_ftype values for general.file_type */
enum {
    FTYPE_F32 = 0, FTYPE_F16 = 1, FTYPE_Q4_0 = 2, FTYPE_Q4_1 = 3, FTYPE_Q8_0 = 7, FTYPE_Q5_0 = 8, FTYPE_Q5_1 = 9,
    FTYPE_Q2_K = 10, FTYPE_Q3_K_S = 11, FTYPE_Q4_K_S = 14, FTYPE_Q5_K_S = 16, FTYPE_Q6_K = 18, FTYPE_BF16 = 32
};

static const struct {
    const char *name;
    uint32_t ggml;
    kern_dtype kd;
    uint32_t ftype;
} out_types[] = {
    {"q8_0", GGML_Q8_0, KERN_Q8_0, FTYPE_Q8_0}, {"q4_0", GGML_Q4_0, KERN_Q4_0, FTYPE_Q4_0},
    {"q4_K", GGML_Q4_K, KERN_Q4_K, FTYPE_Q4_K_S}, {"q6_K", GGML_Q6_K, KERN_Q6_K, FTYPE_Q6_K},
    {"q4_1", GGML_Q4_1, KERN_Q4_1, FTYPE_Q4_1}, {"q5_0", GGML_Q5_0, KERN_Q5_0, FTYPE_Q5_0},
    {"q5_1", GGML_Q5_1, KERN_Q5_1, FTYPE_Q5_1}, {"q2_K", GGML_Q2_K, KERN_Q2_K, FTYPE_Q2_K},
    {"q3_K", GGML_Q3_K, KERN_Q3_K, FTYPE_Q3_K_S}, {"q5_K", GGML_Q5_K, KERN_Q5_K, FTYPE_Q5_K_S},
    {"f16", GGML_F16, KERN_F16, FTYPE_F16},     {"bf16", GGML_BF16, KERN_BF16, FTYPE_BF16},
    {"f32", GGML_F32, KERN_F32, FTYPE_F32},
};

typedef struct {
    const tensor_entry *src;
    uint32_t ggml;
    kern_dtype kd;
    int64_t rows, cols;
    int64_t heads; /* > 0: Q or K, rows permuted into GGUF order */
} out_tensor;

typedef struct {
    out_tensor *t;
    size_t n;
} quant_job;

/* Tensor i: source widened to fp32, Q/K rows permuted, then stored in its type. */
static int fill(void *user, size_t i, void *dst, char *err, size_t errlen) {
    const out_tensor *o = &((quant_job *)user)->t[i];
    kern_dtype sk; /* a GGUF source's quantized blocks widen like f16 / bf16 ones */
    if (tensor_dtype_to_kern(o->src->dtype, &sk)) {
        snprintf(err, errlen, "%s: dtype %s cannot be converted", o->src->name, tensor_dtype_name(o->src->dtype));
        return -1;
    }
    size_t n = (size_t)(o->rows * o->cols);
    float *f = malloc(n * sizeof(float)), *g = o->heads ? malloc(n * sizeof(float)) : NULL;
    if (!f || (o->heads && !g)) {
        free(f);
        free(g);
        snprintf(err, errlen, "%s: out of memory", o->src->name);
        return -1;
    }
    kern_cpu_widen(f, o->src->data, sk, (int64_t)n);
    if (o->heads) {
        int bad = gguf_llama_permute_rows(g, f, o->rows, (size_t)o->cols * sizeof(float), o->heads, 1);
        free(f);
        f = g;
        if (bad) { /* g was never written: refuse rather than store garbage */
            snprintf(err, errlen, "%s: %lld rows are not a multiple of 2 x %lld heads (RoPE pairs)", o->src->name,
                     (long long)o->rows, (long long)o->heads);
            free(f);
            return -1;
        }
    }
    size_t rb = kern_dtype_bytes(o->kd, o->cols);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < o->rows; r++) {
        const float *src = f + r * o->cols;
        char *out = (char *)dst + (size_t)r * rb;
        if (kern_dtype_is_quant(o->kd))
            kern_quantize_row(out, src, o->kd, o->cols);
        else if (o->kd == KERN_F32)
            memcpy(out, src, rb);
        else
            for (int64_t c = 0; c < o->cols; c++)
                ((uint16_t *)out)[c] = o->kd == KERN_BF16 ? kern_f32_to_bf16(src[c]) : kern_f32_to_f16(src[c]);
    }
    free(f);
    return 0;
}

/* The tensors in GGUF order (token_embd, blocks, output_norm, output), each with its output type. */
static mnemo_status plan(const model_config *c, const weight_store *ws, int ti, quant_job *job, char *err,
                         size_t errlen) {
    if (c->qk_norm) /* GGUF's llama architecture has no head norms: writing it would drop them silently */
        return errbuf_fail(err, errlen, "a qk_norm model (config.json) has head norms that GGUF's llama "
                                        "layout cannot hold"),
               MNEMO_ERR_UNSUPPORTED;
    size_t cap = 3 + 9 * (size_t)c->num_hidden_layers;
    if (!(job->t = calloc(cap, sizeof *job->t))) return errbuf_fail(err, errlen, "out of memory"), MNEMO_ERR_NOMEM;
    static const char *const layer[] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                                        "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
                                        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    for (size_t k = 0; k < cap; k++) {
        char hf[160];
        if (k == 0) snprintf(hf, sizeof hf, "model.embed_tokens.weight");
        else if (k == cap - 2) snprintf(hf, sizeof hf, "model.norm.weight");
        else if (k == cap - 1) snprintf(hf, sizeof hf, "lm_head.weight");
        else snprintf(hf, sizeof hf, "model.layers.%zu.%s.weight", (k - 1) / 9, layer[(k - 1) % 9]);
        const tensor_entry *e = weight_store_find(ws, hf);
        if (!e && k == cap - 1 && c->tie_word_embeddings) continue; /* tied: no output.weight, as convert writes */
        if (!e) return errbuf_fail(err, errlen, "the checkpoint has no tensor '%s'", hf), MNEMO_ERR_FORMAT;
        if (e->ndim < 1 || e->ndim > 2)
            return errbuf_fail(err, errlen, "tensor '%s' is not 1-D or 2-D", hf), MNEMO_ERR_FORMAT;
        out_tensor *o = &job->t[job->n++];
        o->src = e;
        o->rows = e->ndim == 2 ? e->shape[0] : 1;
        o->cols = e->ndim == 2 ? e->shape[1] : e->shape[0];
        if (o->rows <= 0 || o->cols <= 0) /* the row loops would run over an empty tensor's other dim */
            return errbuf_fail(err, errlen, "tensor '%s' has a zero dimension", hf), MNEMO_ERR_FORMAT;
        o->ggml = GGML_F32;
        o->kd = KERN_F32;
        if (e->ndim == 2) {
            o->ggml = out_types[ti].ggml;
            o->kd = out_types[ti].kd;
            if (kern_dtype_is_kquant(o->kd) && o->cols % KERN_QK_K) { /* rows of partial 256-blocks: a 32-block
                                                                      * type of about the same size or more */
                o->kd = o->kd == KERN_Q6_K ? KERN_Q8_0 : o->kd == KERN_Q5_K ? KERN_Q5_1
                        : o->kd == KERN_Q4_K ? KERN_Q5_0 : KERN_Q4_0;
                o->ggml = o->kd == KERN_Q8_0 ? GGML_Q8_0 : o->kd == KERN_Q5_1 ? GGML_Q5_1
                          : o->kd == KERN_Q5_0 ? GGML_Q5_0 : GGML_Q4_0;
            }
            if (kern_dtype_is_quant(o->kd) && o->cols % KERN_QBLOCK) { /* convert's fallback */
                o->ggml = GGML_F16;
                o->kd = KERN_F16;
            }
        }
        if (strstr(hf, "q_proj")) o->heads = c->num_attention_heads;
        if (strstr(hf, "k_proj")) o->heads = c->num_key_value_heads;
    }
    return MNEMO_OK;
}

static void put_config(gguf_writer *w, const model_config *c, const char *name, uint32_t ftype, bool quant) {
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_str(w, "general.name", name);
    gguf_w_u32(w, "general.file_type", ftype);
    if (quant) gguf_w_u32(w, "general.quantization_version", 2);
    gguf_w_u32(w, "llama.context_length", (uint32_t)c->max_position_embeddings);
    gguf_w_u32(w, "llama.embedding_length", (uint32_t)c->hidden_size);
    gguf_w_u32(w, "llama.block_count", (uint32_t)c->num_hidden_layers);
    gguf_w_u32(w, "llama.feed_forward_length", (uint32_t)c->intermediate_size);
    gguf_w_u32(w, "llama.rope.dimension_count", (uint32_t)c->head_dim);
    gguf_w_u32(w, "llama.attention.head_count", (uint32_t)c->num_attention_heads);
    gguf_w_u32(w, "llama.attention.head_count_kv", (uint32_t)c->num_key_value_heads);
    if (c->head_dim * c->num_attention_heads != c->hidden_size) {
        gguf_w_u32(w, "llama.attention.key_length", (uint32_t)c->head_dim);
        gguf_w_u32(w, "llama.attention.value_length", (uint32_t)c->head_dim);
    }
    gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", c->rms_norm_eps);
    gguf_w_f32(w, "llama.rope.freq_base", c->rope_theta);
    gguf_w_u32(w, "llama.vocab_size", (uint32_t)c->vocab_size);
    if (c->rope_scaling == ROPE_SCALING_LINEAR) {
        gguf_w_str(w, "llama.rope.scaling.type", "linear");
        gguf_w_f32(w, "llama.rope.scaling.factor", c->rope_scaling_factor);
    }
    gguf_w_str(w, "mnemo.architecture", c->architecture);
    if (c->is_longllama) {
        gguf_w_arr_i32(w, "mnemo.longllama.mem_layers", c->mem_layers, (uint64_t)c->n_mem_layers);
        gguf_w_str(w, "mnemo.longllama.mem_dtype", c->mem_dtype == KERN_F32 ? "float32"
                                                   : c->mem_dtype == KERN_F16 ? "float16" : "bfloat16");
        gguf_w_u32(w, "mnemo.longllama.last_context_length", (uint32_t)c->last_context_length);
        if (c->mem_attention_grouping[0])
            gguf_w_arr_i32(w, "mnemo.longllama.mem_attention_grouping", c->mem_attention_grouping, 2);
        gguf_w_bool(w, "mnemo.longllama.mem_positionals", c->mem_positionals);
    }
}

/* tokenizer.ggml.* from tokenizer.model (so llama.cpp can tokenize) and the file itself under mnemo.*. */
static mnemo_status put_tokenizer(gguf_writer *w, const model_config *c, const char *dir, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    FILE *fp = fopen(path, "rb");
    if (!fp) return errbuf_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno)), MNEMO_ERR_IO;
    uint8_t *raw = NULL;
    long sz = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    rewind(fp);
    if (sz > 0 && sz < (256L << 20) && (raw = malloc((size_t)sz)) && fread(raw, 1, (size_t)sz, fp) != (size_t)sz) {
        free(raw);
        raw = NULL;
    }
    fclose(fp);
    if (!raw) return errbuf_fail(err, errlen, "%s: cannot read", path), MNEMO_ERR_IO;
    tokenizer *tok = NULL;
    if (tokenizer_load(path, &tok, err, errlen)) {
        free(raw);
        return MNEMO_ERR_FORMAT;
    }
    int32_t n = tokenizer_vocab_size(tok);
    char **pieces = calloc((size_t)n, sizeof *pieces);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    float *scores = calloc((size_t)n, sizeof *scores);
    int32_t *types = calloc((size_t)n, sizeof *types);
    mnemo_status st = pieces && lens && scores && types ? MNEMO_OK : MNEMO_ERR_NOMEM;
    for (int32_t i = 0; st == MNEMO_OK && i < n; i++) {
        int t = 1;
        if (tokenizer_id_to_piece(tok, i, &pieces[i], &lens[i]) || tokenizer_piece_info(tok, i, &scores[i], &t))
            st = (errbuf_fail(err, errlen, "%s: cannot read its pieces", path), MNEMO_ERR_FORMAT);
        types[i] = t;
    }
    if (st == MNEMO_OK) {
        gguf_w_str(w, "tokenizer.ggml.model", "llama");
        gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)pieces, lens, (uint64_t)n);
        gguf_w_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)n);
        gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n);
        gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)c->bos_token_id);
        gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)c->eos_token_ids[0]);
        if (tokenizer_unk_id(tok) >= 0)
            gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)tokenizer_unk_id(tok));
        if (c->pad_token_id >= 0) gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)c->pad_token_id);
        gguf_w_bool(w, "tokenizer.ggml.add_bos_token", true);
        gguf_w_bool(w, "tokenizer.ggml.add_eos_token", false);
        gguf_w_arr_u8(w, "mnemo.tokenizer.spm_model", raw, (uint64_t)sz);
    } else if (st == MNEMO_ERR_NOMEM) {
        snprintf(err, errlen, "out of memory");
    }
    for (int32_t i = 0; pieces && i < n; i++) free(pieces[i]);
    free(pieces);
    free(lens);
    free(scores);
    free(types);
    free(raw);
    tokenizer_free(tok);
    return st;
}

mnemo_status mnemo_quantize(const char *model_dir, const char *type, const char *out_path, char *err, size_t errlen) {
    if (!model_dir || !type || !out_path || !err || !errlen) return MNEMO_ERR_INVALID_ARG;
    int ti = -1;
    for (int i = 0; i < (int)(sizeof out_types / sizeof *out_types); i++)
        if (!strcmp(type, out_types[i].name)) ti = i;
    if (ti < 0)
        return errbuf_fail(err, errlen, "type '%s' is not one of q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, "
                                        "q3_K, q4_K, q5_K, q6_K, f16, bf16, f32", type),
               MNEMO_ERR_INVALID_ARG;
    struct stat st_in;
    if (stat(model_dir, &st_in) != 0 || !(S_ISDIR(st_in.st_mode) || S_ISREG(st_in.st_mode)))
        return errbuf_fail(err, errlen, "%s: neither a checkpoint directory nor a GGUF file", model_dir),
               MNEMO_ERR_IO;
    model_config cfg;
    weight_store *ws = NULL;
    quant_gguf_source gsrc = {0};
    char tok_dir[4096], name[256];
    const char *base = strrchr(model_dir, '/');
    snprintf(name, sizeof name, "%s", base && base[1] ? base + 1 : model_dir);
    snprintf(tok_dir, sizeof tok_dir, "%s", model_dir);
    if (S_ISREG(st_in.st_mode)) {
        mnemo_status gs = quant_gguf_open(model_dir, &gsrc, &cfg, &ws, err, errlen);
        if (gs != MNEMO_OK) return gs;
        size_t nl = strlen(name);
        if (!quant_gguf_name(&gsrc, name, sizeof name) && nl > 5 && !strcmp(name + nl - 5, ".gguf")) name[nl - 5] = 0;
        /* a GGUF without its vocabulary: the tokenizer.model beside it, where the loader looks for it */
        char *slash = strrchr(tok_dir, '/');
        if (slash) *slash = 0;
        else snprintf(tok_dir, sizeof tok_dir, ".");
    } else {
        if (model_config_load(model_dir, &cfg, err, errlen) != 0) return MNEMO_ERR_FORMAT;
        if (weight_store_open(model_dir, &ws, err, errlen) != 0) return MNEMO_ERR_FORMAT;
    }
    quant_job job = {0};
    gguf_writer *w = gguf_writer_new();
    mnemo_status st = w ? plan(&cfg, ws, ti, &job, err, errlen) : MNEMO_ERR_NOMEM;
    if (st == MNEMO_OK) {
        put_config(w, &cfg, name, out_types[ti].ftype, kern_dtype_is_quant(out_types[ti].kd));
        if (gsrc.map && quant_gguf_has_tokenizer(&gsrc)) quant_gguf_put_tokenizer(w, &gsrc);
        else st = put_tokenizer(w, &cfg, tok_dir, err, errlen);
    }
    for (size_t i = 0; st == MNEMO_OK && i < job.n; i++) {
        const out_tensor *o = &job.t[i];
        char gname[160];
        gguf_llama_gguf_name(o->src->name, gname, sizeof gname);
        int64_t ne[2] = {o->cols, o->rows};
        gguf_w_tensor(w, gname, o->ggml, o->src->ndim, ne, kern_dtype_bytes(o->kd, o->rows * o->cols));
    }
    if (st == MNEMO_OK && gguf_writer_write(w, out_path, fill, &job, err, errlen)) st = MNEMO_ERR_IO;
    if (st == MNEMO_OK)
        mnemo_log(MNEMO_LOG_INFO, "quantized %s to %s (%s, %zu tensors)", model_dir, out_path, type, job.n);
    if (st == MNEMO_ERR_NOMEM && !err[0]) snprintf(err, errlen, "out of memory");
    gguf_writer_free(w);
    free(job.t);
    weight_store_close(ws);
    quant_gguf_close(&gsrc);
    return st;
}
