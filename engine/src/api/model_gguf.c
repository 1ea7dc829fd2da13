/*
 * model_gguf.c — a model from one GGUF file: the config from its llama.* / mnemo.* metadata (turned into the
 * config.json text model_config_parse validates, so both paths share every check), the tokenizer from its
 * tokenizer.ggml.* metadata (SentencePiece "llama" or byte-level BPE "gpt2"; or the original tokenizer.model it
 * carries, or a tokenizer.model beside the file), and the weights memory-mapped through weight_store_open_gguf.
 * A vocabulary-only file (no tensors, as llama.cpp's convert --vocab-only writes) or params.vocab_only loads the
 * tokenizer alone, for mnemo tokenize; its config may then be partial.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_impl.h"
#include "gguf_bpe.h"
#include "gguf_llama.h"
#include "log.h"

/* A vocabulary-only model whose metadata makes no config: the few fields the tokenizer calls read. */
static void vocab_only_config(mnemo_model *m) {
    memset(&m->cfg, 0, sizeof m->cfg);
    snprintf(m->cfg.architecture, sizeof m->cfg.architecture, "vocabulary");
    m->cfg.vocab_size = tokenizer_vocab_size(m->tok);
    m->cfg.bos_token_id = tokenizer_bos_id(m->tok);
    m->cfg.n_eos = tokenizer_eos_id(m->tok) >= 0;
    m->cfg.eos_token_ids[0] = tokenizer_eos_id(m->tok);
}

/* The config from the metadata; a vocabulary-only load goes on without one (have_cfg false). */
static mnemo_status config_from_metadata(mnemo_model *m, const gguf_file *g, const char *path, bool *have_cfg) {
    char *json = NULL, err[sizeof m->err];
    *have_cfg = false;
    int rc = gguf_llama_config_json(g, path, &json, err, sizeof err);
    if (rc == 0) {
        rc = model_config_parse(json, strlen(json), path, &m->cfg, err, sizeof err);
        free(json);
    }
    if (rc == 0) {
        *have_cfg = true;
        return MNEMO_OK;
    }
    if (m->vocab_only) return MNEMO_OK;
    snprintf(m->err, sizeof m->err, "%s", err);
    return strstr(err, "not supported") ? MNEMO_ERR_UNSUPPORTED : MNEMO_ERR_FORMAT;
}

/* The tokenizer must fit the model's embedding rows. */
static mnemo_status check_vocab(mnemo_model *m, const char *path, bool have_cfg) {
    if (!have_cfg) {
        vocab_only_config(m);
        return MNEMO_OK;
    }
    if (tokenizer_vocab_size(m->tok) > m->cfg.vocab_size) {
        snprintf(m->err, sizeof m->err, "%s: tokenizer has %d pieces but the model's vocabulary is %d", path,
                 (int)tokenizer_vocab_size(m->tok), (int)m->cfg.vocab_size);
        return MNEMO_ERR_FORMAT;
    }
    return MNEMO_OK;
}

/* Config and tokenizer from the parsed metadata. */
static mnemo_status from_metadata(mnemo_model *m, const gguf_file *g, const char *path) {
    bool have_cfg;
    mnemo_status st = config_from_metadata(m, g, path, &have_cfg);
    if (st != MNEMO_OK) return st;
    if (gguf_has_bpe_tokenizer(g)) {
        if (gguf_bpe_tokenizer(g, path, &m->tok, m->err, sizeof m->err)) return MNEMO_ERR_FORMAT;
        return check_vocab(m, path, have_cfg);
    }
    uint8_t *proto = NULL;
    size_t plen = 0;
    int rc = gguf_llama_tokenizer_proto(g, path, &proto, &plen, m->err, sizeof m->err);
    if (rc < 0) return MNEMO_ERR_FORMAT;
    if (rc == 0) {
        rc = tokenizer_load_proto(proto, plen, path, &m->tok, m->err, sizeof m->err);
        free(proto);
        if (rc) return MNEMO_ERR_FORMAT;
    } else { /* no tokenizer in the file: the SentencePiece model beside it */
        char tp[4096];
        const char *slash = strrchr(path, '/');
        snprintf(tp, sizeof tp, "%.*stokenizer.model", slash ? (int)(slash - path + 1) : 0, path);
        if (access(tp, R_OK) != 0) {
            snprintf(m->err, sizeof m->err, "%s: holds no tokenizer (tokenizer.ggml.tokens) and there is no %s", path,
                     tp);
            return MNEMO_ERR_IO;
        }
        if (tokenizer_load(tp, &m->tok, m->err, sizeof m->err)) return MNEMO_ERR_FORMAT;
        mnemo_log(MNEMO_LOG_INFO, "%s holds no tokenizer: using %s", path, tp);
    }
    return check_vocab(m, path, have_cfg);
}

mnemo_status model_open_gguf(mnemo_model *m, const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(m->err, sizeof m->err, "%s: cannot open: %s", path, strerror(errno));
        return MNEMO_ERR_IO;
    }
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size > 0) map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(m->err, sizeof m->err, "%s: cannot map (empty file?)", path);
        return MNEMO_ERR_IO;
    }
    gguf_file g;
    mnemo_status s = MNEMO_OK;
    if (gguf_parse(map, (uint64_t)st.st_size, path, &g, m->err, sizeof m->err)) s = MNEMO_ERR_FORMAT;
    if (s == MNEMO_OK && g.n_tensors == 0 && !m->vocab_only) {
        m->vocab_only = true; /* nothing to run: the vocabulary alone, as llama-tokenize --vocab-only reads it */
        mnemo_log(MNEMO_LOG_INFO, "%s holds no tensors: loading its vocabulary only", path);
    }
    if (s == MNEMO_OK) s = from_metadata(m, &g, path);
    if (s == MNEMO_OK && !m->tok) {
        snprintf(m->err, sizeof m->err, "%s: holds no tokenizer", path);
        s = MNEMO_ERR_FORMAT;
    }
    gguf_free(&g);
    munmap(map, (size_t)st.st_size);
    if (s != MNEMO_OK || m->vocab_only) return s;
    /* the weights: a second mapping that lives as long as the model (the metadata one is gone) */
    if (weight_store_open_gguf(path, &m->ws, m->err, sizeof m->err))
        return strstr(m->err, "has type") ? MNEMO_ERR_UNSUPPORTED : MNEMO_ERR_FORMAT;
    return MNEMO_OK;
}
