/*
 * quantize_source.c — a GGUF file read as mnemo_quantize's input (quantize_source.h).
 */
#include "quantize_source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_llama.h"

mnemo_status quant_gguf_open(const char *path, quant_gguf_source *src, model_config *cfg, weight_store **ws,
                             char *err, size_t errlen) {
    memset(src, 0, sizeof *src);
    *ws = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return MNEMO_ERR_IO;
    }
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size > 0) map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: cannot map (empty file?)", path);
        return MNEMO_ERR_IO;
    }
    src->map = map;
    src->len = (size_t)st.st_size;
    if (gguf_parse(map, (uint64_t)st.st_size, path, &src->g, err, errlen)) {
        quant_gguf_close(src);
        return MNEMO_ERR_FORMAT;
    }
    if (src->g.n_tensors == 0) { /* a vocabulary-only file: nothing to quantize */
        snprintf(err, errlen, "%s holds no tensors (a vocabulary-only GGUF)", path);
        quant_gguf_close(src);
        return MNEMO_ERR_FORMAT;
    }
    char *json = NULL;
    int rc = gguf_llama_config_json(&src->g, path, &json, err, errlen);
    if (rc == 0) rc = model_config_parse(json, strlen(json), path, cfg, err, errlen);
    free(json);
    if (rc == 0) rc = weight_store_open_gguf(path, ws, err, errlen);
    if (rc != 0) {
        quant_gguf_close(src);
        return strstr(err, "not supported") || strstr(err, "has type") ? MNEMO_ERR_UNSUPPORTED : MNEMO_ERR_FORMAT;
    }
    return MNEMO_OK;
}

void quant_gguf_close(quant_gguf_source *src) {
    if (!src->map) return;
    gguf_free(&src->g);
    munmap(src->map, src->len);
    memset(src, 0, sizeof *src);
}

bool quant_gguf_has_tokenizer(const quant_gguf_source *src) { return gguf_find(&src->g, "tokenizer.ggml.model"); }

void quant_gguf_put_tokenizer(gguf_writer *w, const quant_gguf_source *src) {
    for (size_t i = 0; i < src->g.n_kv; i++) {
        const gguf_kv *kv = &src->g.kv[i];
        if (!strncmp(kv->key, "tokenizer.", 10) || !strncmp(kv->key, "mnemo.tokenizer.", 16)) gguf_w_copy(w, kv);
    }
}

bool quant_gguf_name(const quant_gguf_source *src, char *out, size_t n) {
    const char *s;
    uint64_t len;
    if (!n || !gguf_get_str(&src->g, "general.name", &s, &len) || !len) return false;
    snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), s);
    return true;
}
