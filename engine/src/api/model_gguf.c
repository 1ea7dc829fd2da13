/*
 * model_gguf.c — a model from one GGUF file: the config from its llama.* / mnemo.* metadata (turned into the
 * config.json text model_config_parse validates, so both paths share every check), the tokenizer from its
 * tokenizer.ggml.* metadata (or the original tokenizer.model it carries, or a tokenizer.model beside the file), and
 * the weights memory-mapped through weight_store_open_gguf.
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
#include "gguf_llama.h"
#include "log.h"

/* Config and tokenizer from the parsed metadata. */
static mnemo_status from_metadata(mnemo_model *m, const gguf_file *g, const char *path) {
    char *json = NULL;
    if (gguf_llama_config_json(g, path, &json, m->err, sizeof m->err))
        return strstr(m->err, "not supported") ? MNEMO_ERR_UNSUPPORTED : MNEMO_ERR_FORMAT;
    int rc = model_config_parse(json, strlen(json), path, &m->cfg, m->err, sizeof m->err);
    free(json);
    if (rc) return strstr(m->err, "not supported") ? MNEMO_ERR_UNSUPPORTED : MNEMO_ERR_FORMAT;

    uint8_t *proto = NULL;
    size_t plen = 0;
    rc = gguf_llama_tokenizer_proto(g, path, &proto, &plen, m->err, sizeof m->err);
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
    if (tokenizer_vocab_size(m->tok) > m->cfg.vocab_size) {
        snprintf(m->err, sizeof m->err, "%s: tokenizer has %d pieces but the model's vocabulary is %d", path,
                 (int)tokenizer_vocab_size(m->tok), (int)m->cfg.vocab_size);
        return MNEMO_ERR_FORMAT;
    }
    return MNEMO_OK;
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
    if (s == MNEMO_OK) s = from_metadata(m, &g, path);
    gguf_free(&g);
    munmap(map, (size_t)st.st_size);
    if (s != MNEMO_OK) return s;
    /* the weights: a second mapping that lives as long as the model (the metadata one is gone) */
    if (weight_store_open_gguf(path, &m->ws, m->err, sizeof m->err))
        return strstr(m->err, "has type") ? MNEMO_ERR_UNSUPPORTED : MNEMO_ERR_FORMAT;
    return MNEMO_OK;
}
