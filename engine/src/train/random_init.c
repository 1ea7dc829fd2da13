/*
 * random_init.c — mnemo_init_random_checkpoint (engine.h): a checkpoint directory with freshly initialised weights,
 * for training a small model from scratch (the evaluation trains LongLLaMA-layout models this
 * way). The initialisation is transformers' LlamaPreTrainedModel._init_weights: every projection, the embeddings
 * and lm_head drawn from N(0, initializer_range^2) (config.json's, default 0.02), the embedding row of
 * pad_token_id zeroed (nn.Embedding's padding_idx), every RMSNorm weight 1. The draws come from our own seeded
 * generator (splitmix64 + Box-Muller), so a seed gives the same checkpoint on every machine — not torch's numbers.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_side_files.h"
#include "engine.h"
#include "layer_params.h"
#include "model_config.h"
#include "safetensors_write.h"

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1): 53 random bits, never 0. */
static double uniform01(uint64_t *s) { return ((double)(splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static void fill_normal(float *x, size_t n, double std, uint64_t *s) {
    for (size_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(uniform01(s))), a = 6.283185307179586 * uniform01(s);
        x[i] = (float)(std * r * cos(a));
        if (i + 1 < n) x[i + 1] = (float)(std * r * sin(a));
    }
}

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && n < (1L << 26) && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            *len = fread(buf, 1, (size_t)n, f);
            buf[*len] = 0;
        }
    }
    fclose(f);
    return buf;
}

static int copy_file(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb"), *o = in ? fopen(dst, "wb") : NULL;
    int rc = in && o ? 0 : -1;
    char buf[65536];
    for (size_t n; rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0;) rc = fwrite(buf, 1, n, o) == n ? 0 : -1;
    if (in && ferror(in)) rc = -1;
    if (in) fclose(in);
    if (o && fclose(o) != 0) rc = -1;
    return rc;
}

mnemo_status mnemo_init_random_checkpoint(const char *config_path, const char *tokenizer, uint64_t seed,
                                          const char *out_dir, char *err, size_t errlen) {
    if (!err || !errlen) return MNEMO_ERR_INVALID_ARG;
    if (!config_path || !tokenizer || !out_dir) {
        snprintf(err, errlen, "a random init needs a config.json, a tokenizer and an output directory");
        return MNEMO_ERR_INVALID_ARG;
    }
    size_t len = 0;
    char *text = read_text(config_path, &len);
    if (!text) {
        snprintf(err, errlen, "%s: cannot read: %s", config_path, strerror(errno));
        return MNEMO_ERR_IO;
    }
    model_config c;
    if (model_config_parse(text, len, config_path, &c, err, errlen)) {
        free(text);
        return MNEMO_ERR_FORMAT;
    }
    json_t *root = json_loads(text, 0, NULL), *ir = json_object_get(root, "initializer_range");
    double std = json_is_number(ir) ? json_number_value(ir) : 0.02;
    json_decref(root);
    free(text);
    if (!(std >= 0 && std < 10)) {
        snprintf(err, errlen, "%s: initializer_range %g out of range", config_path, std);
        return MNEMO_ERR_FORMAT;
    }
    struct stat st;
    char tok_src[4200], path[4200];
    bool tok_dir = stat(tokenizer, &st) == 0 && S_ISDIR(st.st_mode);
    snprintf(tok_src, sizeof tok_src, tok_dir ? "%s/tokenizer.model" : "%s", tokenizer);
    if (access(tok_src, R_OK) != 0) {
        snprintf(err, errlen, "%s: no SentencePiece tokenizer.model there", tok_src);
        return MNEMO_ERR_IO;
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "%s: cannot create: %s", out_dir, strerror(errno));
        return MNEMO_ERR_IO;
    }
    /* the tokenizer's side files first (a directory's tokenizer_config.json and the like), then ours over them */
    if (tok_dir && checkpoint_copy_side_files(tokenizer, out_dir, err, errlen)) return MNEMO_ERR_IO;
    snprintf(path, sizeof path, "%s/tokenizer.model", out_dir);
    if (copy_file(tok_src, path) != 0) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        return MNEMO_ERR_IO;
    }
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    if (copy_file(config_path, path) != 0) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        return MNEMO_ERR_IO;
    }
    /* tensors, in the order transformers names them */
    const int64_t d = c.hidden_size, V = c.vocab_size, L = c.num_hidden_layers;
    const size_t PL = layer_param_count(&c);
    const size_t n_t = 2 + (size_t)L * PL + (c.tie_word_embeddings ? 0 : 1);
    st_tensor *t = calloc(n_t, sizeof *t);
    int64_t (*shape)[2] = calloc(n_t, sizeof *shape);
    char (*names)[96] = calloc(n_t, sizeof *names);
    float **data = calloc(n_t, sizeof *data);
    mnemo_status rc = t && shape && names && data ? MNEMO_OK : MNEMO_ERR_NOMEM;
    uint64_t s = seed ^ 0x6d6e656d6f696e69ull; /* "mnemoini" */
    for (size_t i = 0; rc == MNEMO_OK && i < n_t; i++) {
        const int64_t *sh;
        int64_t emb[2] = {V, d}, norm[2] = {d, 0}, layer[2];
        if (i == 0) snprintf(names[i], 96, "model.embed_tokens.weight"), sh = emb;
        else if (i <= (size_t)L * PL) {
            size_t l = (i - 1) / PL, j = (i - 1) % PL;
            layer_param_shape(&c, j, layer);
            snprintf(names[i], 96, "model.layers.%zu.%s", l, LAYER_PARAM_NAMES[j]), sh = layer;
        } else if (i == 1 + (size_t)L * PL) snprintf(names[i], 96, "model.norm.weight"), sh = norm;
        else snprintf(names[i], 96, "lm_head.weight"), sh = emb;
        shape[i][0] = sh[0], shape[i][1] = sh[1];
        size_t n = (size_t)sh[0] * (size_t)(sh[1] ? sh[1] : 1);
        if (!(data[i] = malloc(n * sizeof(float)))) {
            rc = MNEMO_ERR_NOMEM;
            break;
        }
        if (!sh[1]) /* RMSNorm */
            for (size_t k = 0; k < n; k++) data[i][k] = 1.0f;
        else
            fill_normal(data[i], n, std, &s);
        if (i == 0 && c.pad_token_id >= 0 && c.pad_token_id < V) memset(data[i] + (size_t)c.pad_token_id * d, 0, (size_t)d * sizeof(float));
        t[i] = (st_tensor){.name = names[i], .dtype = TENSOR_F32, .ndim = sh[1] ? 2 : 1, .shape = shape[i], .data = data[i]};
    }
    if (rc == MNEMO_OK) {
        snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
        static const char *const meta[2] = {"format", "pt"};
        if (safetensors_write(path, t, n_t, meta, 1, err, errlen)) rc = MNEMO_ERR_IO;
    } else {
        snprintf(err, errlen, "out of memory for the weights of %s", config_path);
    }
    for (size_t i = 0; data && i < n_t; i++) free(data[i]);
    free(t), free(shape), free(names), free(data);
    return rc;
}
