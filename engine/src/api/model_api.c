/*
 * model_api.c — mnemo_model_*: load a checkpoint directory (config, weights, tokenizer), describe it, free it.
 * Loading validates everything up front so that decode never meets a malformed tensor.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_impl.h"
#include "log.h"
#include "uio_weights.h"

mnemo_model_params mnemo_model_default_params(void) {
    mnemo_model_params p = {.n_threads = 0, .device = MNEMO_DEVICE_AUTO, .uio_dir = NULL, .vocab_only = false};
    return p;
}

static mnemo_status load_fail(mnemo_model *m, mnemo_status st) {
    m->failed = true;
    mnemo_log(MNEMO_LOG_ERROR, "%s", m->err);
    return st;
}

/* Config parse failures are malformed files unless the message says the model is valid but unsupported. */
static mnemo_status config_status(const char *msg) {
    return strstr(msg, "not supported") ? MNEMO_ERR_UNSUPPORTED : MNEMO_ERR_FORMAT;
}

/* AUTO: the GPU when the CUDA backend is built and a device answers, else the CPU with one log line saying why.
 * CUDA: the GPU or MNEMO_ERR_UNSUPPORTED with the reason. CPU: the CPU, CUDA is not even probed. */
static mnemo_status pick_backend(mnemo_model *m, mnemo_device dev) {
    char info[256] = "";
    m->be = kern_cpu_backend();
    if (dev == MNEMO_DEVICE_CPU) return MNEMO_OK;
    if (kern_cuda_available(info, sizeof info)) {
        m->be = kern_cuda_backend();
        mnemo_log(MNEMO_LOG_INFO, "running on CUDA: %s", info);
        return MNEMO_OK;
    }
    if (dev == MNEMO_DEVICE_CUDA) {
        snprintf(m->err, sizeof m->err, "device cuda requested, but no CUDA backend is usable: %s", info);
        return MNEMO_ERR_UNSUPPORTED;
    }
    mnemo_log(MNEMO_LOG_INFO, "no usable CUDA backend (%s): running on the CPU", info);
    return MNEMO_OK;
}

/* Device backends: weights go to the device once, in their stored dtype. */
static mnemo_status upload_weights(mnemo_model *m) {
    uint64_t bytes = 0;
    if (!m->be->host_memory && kern_dtype_is_quant(m->w.layers[0].wq.dt))
        mnemo_log(MNEMO_LOG_INFO, "%s has no quantized kernels: %s weights are dequantized to bf16 on upload",
                  m->be->name, kern_dtype_name(m->w.layers[0].wq.dt));
    if (llama_weights_upload(&m->w, &m->cfg, m->be, &m->dev_weights, &bytes) != 0) {
        snprintf(m->err, sizeof m->err, "out of %s memory uploading the weights to the device", m->be->name);
        return MNEMO_ERR_NOMEM;
    }
    if (m->dev_weights)
        mnemo_log(MNEMO_LOG_INFO, "uploaded %.1f MB of weights to %s", (double)bytes / 1e6, m->be->name);
    return MNEMO_OK;
}

/* The UIO directory over the loaded base (its weights go where the model's are). */
static mnemo_status load_uio(mnemo_model *m, const char *dir) {
    if (!*dir) {
        snprintf(m->err, sizeof m->err, "uio_dir is empty");
        return MNEMO_ERR_INVALID_ARG;
    }
    if (m->cfg.is_longllama) {
        snprintf(m->err, sizeof m->err, "%s: UIO weights over a LongLLaMA checkpoint (memory layers) are not supported",
                 dir);
        return MNEMO_ERR_UNSUPPORTED;
    }
    if (!(m->uio = calloc(1, sizeof *m->uio))) {
        snprintf(m->err, sizeof m->err, "out of memory");
        return MNEMO_ERR_NOMEM;
    }
    int io = 0;
    if (uio_weights_load(m->uio, dir, &m->cfg, m->be, &io, m->err, sizeof m->err) != 0) {
        free(m->uio);
        m->uio = NULL;
        return io ? MNEMO_ERR_IO : strstr(m->err, "out of") ? MNEMO_ERR_NOMEM : MNEMO_ERR_FORMAT;
    }
    mnemo_log(MNEMO_LOG_INFO, "UIO %s: %s, chunk_size %d, num_memory %d, LoRA r %d alpha %g, %llu parameters", dir,
              m->uio->file, m->uio->chunk_size, m->uio->num_memory, m->uio->lora_rank, m->uio->lora_alpha,
              (unsigned long long)m->uio->n_params);
    return MNEMO_OK;
}

/* The directory's tokenizer: SentencePiece tokenizer.model, else a byte-level BPE tokenizer.json. */
static mnemo_status open_dir_tokenizer(mnemo_model *m, const char *dir, char *path, size_t cap) {
    snprintf(path, cap, "%s/tokenizer.model", dir);
    if (access(path, R_OK) == 0)
        return tokenizer_load(path, &m->tok, m->err, sizeof m->err) != 0 ? MNEMO_ERR_FORMAT : MNEMO_OK;
    snprintf(path, cap, "%s/tokenizer.json", dir);
    if (access(path, R_OK) == 0)
        return tokenizer_load_hf_dir(dir, &m->tok, m->err, sizeof m->err) != 0 ? MNEMO_ERR_FORMAT : MNEMO_OK;
    snprintf(m->err, sizeof m->err, "%s: neither tokenizer.model (SentencePiece) nor tokenizer.json (byte-level BPE) "
             "is there", dir);
    return MNEMO_ERR_IO;
}

/* A Hugging Face checkpoint directory: config.json, tokenizer.model or tokenizer.json, the weight files. */
static mnemo_status open_dir(mnemo_model *m, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (access(path, R_OK) != 0) {
        snprintf(m->err, sizeof m->err, "%s: missing or unreadable (a Hugging Face model directory has one)", path);
        return MNEMO_ERR_IO;
    }
    if (model_config_load(dir, &m->cfg, m->err, sizeof m->err) != 0)
        return config_status(m->err);

    mnemo_status ts = open_dir_tokenizer(m, dir, path, sizeof path);
    if (ts != MNEMO_OK) return ts;
    if (tokenizer_vocab_size(m->tok) > m->cfg.vocab_size) {
        snprintf(m->err, sizeof m->err, "%s: tokenizer has %d pieces but config.json vocab_size is %d", path,
                 (int)tokenizer_vocab_size(m->tok), (int)m->cfg.vocab_size);
        return MNEMO_ERR_FORMAT;
    }
    if (m->vocab_only) return MNEMO_OK;

    if (weight_store_open(dir, &m->ws, m->err, sizeof m->err) != 0)
        return strstr(m->err, "no weights found") ? MNEMO_ERR_IO : MNEMO_ERR_FORMAT;
    return MNEMO_OK;
}

mnemo_status mnemo_model_load(const char *dir, const mnemo_model_params *params, mnemo_model **out) {
    if (!out) return MNEMO_ERR_INVALID_ARG;
    mnemo_model *m = calloc(1, sizeof *m);
    *out = m;
    if (!m) return MNEMO_ERR_NOMEM;
    mnemo_model_params p = params ? *params : mnemo_model_default_params();
    if (!dir || !*dir) {
        snprintf(m->err, sizeof m->err, "no model directory given");
        return load_fail(m, MNEMO_ERR_INVALID_ARG);
    }
    if (p.n_threads < 0 || p.device < MNEMO_DEVICE_AUTO || p.device > MNEMO_DEVICE_CUDA) {
        snprintf(m->err, sizeof m->err, "invalid model params (n_threads %d, device %d)", p.n_threads, (int)p.device);
        return load_fail(m, MNEMO_ERR_INVALID_ARG);
    }
    if (!(m->dir = strdup(dir))) {
        snprintf(m->err, sizeof m->err, "out of memory");
        return load_fail(m, MNEMO_ERR_NOMEM);
    }
    m->vocab_only = p.vocab_only;
    struct stat st;
    mnemo_status s;
    if (stat(dir, &st) == 0 && S_ISREG(st.st_mode)) {
        s = model_open_gguf(m, dir); /* model_gguf.c */
    } else if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(m->err, sizeof m->err, "%s: not a directory or a GGUF file", dir);
        s = MNEMO_ERR_IO;
    } else {
        s = open_dir(m, dir);
    }
    if (s != MNEMO_OK) return load_fail(m, s);
    if (m->vocab_only) {
        snprintf(m->desc, sizeof m->desc, "vocabulary only: %s tokenizer, %d tokens",
                 tokenizer_get_kind(m->tok) == TOKENIZER_BPE ? "byte-level BPE" : "SentencePiece",
                 (int)tokenizer_vocab_size(m->tok));
        mnemo_log(MNEMO_LOG_INFO, "loaded %s: %s", dir, m->desc);
        return MNEMO_OK;
    }
    if (llama_weights_bind(&m->w, &m->cfg, m->ws, m->err, sizeof m->err) != 0)
        return load_fail(m, strstr(m->err, "dtype") ? MNEMO_ERR_UNSUPPORTED : MNEMO_ERR_FORMAT);

    s = pick_backend(m, p.device);
    if (s == MNEMO_OK) s = upload_weights(m);
    if (s == MNEMO_OK && p.uio_dir) s = load_uio(m, p.uio_dir);
    if (s != MNEMO_OK) return load_fail(m, s);
    m->n_threads = p.n_threads;

    const model_config *c = &m->cfg;
    snprintf(m->desc, sizeof m->desc,
             "%s: %d layers, hidden %d, heads %d/%d (head_dim %d), ffn %d, vocab %d, ctx %d, %s weights (%s), %s",
             c->architecture, c->num_hidden_layers, c->hidden_size, c->num_attention_heads, c->num_key_value_heads,
             c->head_dim, c->intermediate_size, c->vocab_size, c->max_position_embeddings,
             kern_dtype_name(m->w.layers[0].wq.dt), weight_store_format(m->ws), m->be->name);
    if (m->uio) {
        size_t len = strlen(m->desc);
        snprintf(m->desc + len, sizeof m->desc - len, "; UIO: chunk_size %d, num_memory %d, LoRA r %d (%s)",
                 m->uio->chunk_size, m->uio->num_memory, m->uio->lora_rank, m->uio->file);
    }
    mnemo_log(MNEMO_LOG_INFO, "loaded %s: %s", dir, m->desc);
    m->err[0] = '\0';
    return MNEMO_OK;
}

void mnemo_model_free(mnemo_model *m) {
    if (!m) return;
    uio_weights_free(m->uio);
    free(m->uio);
    if (m->dev_weights) m->be->mem_free(m->dev_weights);
    llama_weights_free(&m->w);
    tokenizer_free(m->tok);
    weight_store_close(m->ws);
    free(m->dir);
    free(m);
}

const char *mnemo_model_error(const mnemo_model *m) { return m ? m->err : "no model (allocation failed)"; }

#define MODEL_OK(m) ((m) && !(m)->failed)
int32_t mnemo_model_n_vocab(const mnemo_model *m) { return MODEL_OK(m) ? m->cfg.vocab_size : 0; }
int32_t mnemo_model_n_ctx_train(const mnemo_model *m) { return MODEL_OK(m) ? m->cfg.max_position_embeddings : 0; }
int32_t mnemo_model_n_layer(const mnemo_model *m) { return MODEL_OK(m) ? m->cfg.num_hidden_layers : 0; }
int32_t mnemo_model_n_embd(const mnemo_model *m) { return MODEL_OK(m) ? m->cfg.hidden_size : 0; }
mnemo_token mnemo_model_bos(const mnemo_model *m) { return MODEL_OK(m) ? m->cfg.bos_token_id : -1; }
mnemo_token mnemo_model_eos(const mnemo_model *m) { return MODEL_OK(m) && m->cfg.n_eos ? m->cfg.eos_token_ids[0] : -1; }
const char *mnemo_model_desc(const mnemo_model *m) { return MODEL_OK(m) ? m->desc : ""; }
uint64_t mnemo_model_weight_bytes(const mnemo_model *m) { return MODEL_OK(m) ? m->w.bytes_per_token : 0; }

bool mnemo_model_has_memory(const mnemo_model *m) { return MODEL_OK(m) && m->cfg.is_longllama && m->cfg.n_mem_layers > 0; }

mnemo_status mnemo_model_uio(const mnemo_model *m, mnemo_uio_info *out) {
    if (!MODEL_OK(m) || !out) return MNEMO_ERR_MISUSE;
    if (!m->uio) return MNEMO_ERR_UNSUPPORTED;
    const uio_weights *u = m->uio;
    *out = (mnemo_uio_info){.chunk_size = u->chunk_size, .num_memory = u->num_memory, .lora_rank = u->lora_rank,
                            .lora_alpha = u->lora_alpha, .file = u->file, .n_params = u->n_params};
    return MNEMO_OK;
}

bool mnemo_model_is_eog(const mnemo_model *m, mnemo_token t) {
    if (!MODEL_OK(m)) return false;
    for (int32_t i = 0; i < m->cfg.n_eos; i++)
        if (m->cfg.eos_token_ids[i] == t) return true;
    return false;
}
