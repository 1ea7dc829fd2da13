/*
 * safetensors_write.c — see safetensors_write.h. The header is built with jansson (insertion order kept) and
 * checked for the same limits the parser enforces, so whatever this writes, safetensors_parse reads back.
 */
#define _POSIX_C_SOURCE 200809L /* fileno, fsync */
#include "safetensors_write.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader_util.h"
#include "errbuf.h"

/* The header JSON for the tensors (offsets back to back) and metadata; NULL after a message in err. */
static char *build_header(const char *path, const st_tensor *t, size_t n, const char *const *meta, size_t n_meta,
                          uint64_t *data_bytes, char *err, size_t errlen) {
    json_t *root = json_object();
    if (!root) return errbuf_fail_at(err, errlen, path, "out of memory"), NULL;
    if (n_meta) {
        json_t *m = json_object();
        json_object_set_new(root, "__metadata__", m);
        for (size_t i = 0; i < n_meta; i++)
            if (!meta[2 * i] || !meta[2 * i + 1] || json_object_set_new(m, meta[2 * i], json_string(meta[2 * i + 1])))
                return json_decref(root), errbuf_fail_at(err, errlen, path,
                                                         "metadata pair %zu is not two UTF-8 strings", i),
                       NULL;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const st_tensor *x = &t[i];
        const char *why = !x->name || !*x->name                   ? "has no name"
                          : !strcmp(x->name, "__metadata__")      ? "is named __metadata__"
                          : json_object_get(root, x->name)        ? "appears twice"
                          : x->ndim < 0 || x->ndim > TENSOR_MAX_DIMS ? "has too many dimensions"
                          : (unsigned)x->dtype >= TENSOR_DTYPE_COUNT ? "has an unknown dtype"
                                                                     : NULL;
        if (why) {
            json_decref(root);
            return errbuf_fail_at(err, errlen, path, "tensor %zu ('%s') %s", i, x->name ? x->name : "", why), NULL;
        }
        uint64_t bytes = tensor_dtype_size(x->dtype);
        json_t *shape = json_array();
        for (int32_t d = 0; d < x->ndim; d++) {
            if (x->shape[d] < 0 || !ld_mul_u64(bytes, (uint64_t)x->shape[d], &bytes)) {
                json_decref(shape);
                json_decref(root);
                return errbuf_fail_at(err, errlen, path, "tensor '%s' has a bad size in dimension %d", x->name,
                                      d), NULL;
            }
            json_array_append_new(shape, json_integer(x->shape[d]));
        }
        if (bytes && !x->data) {
            json_decref(shape);
            json_decref(root);
            return errbuf_fail_at(err, errlen, path, "tensor '%s' has no data", x->name), NULL;
        }
        json_t *desc = json_pack("{s:s, s:o, s:[I, I]}", "dtype", tensor_dtype_name(x->dtype), "shape", shape,
                                 "data_offsets", (json_int_t)off, (json_int_t)(off + bytes));
        if (!desc || json_object_set_new(root, x->name, desc)) {
            json_decref(root);
            return errbuf_fail_at(err, errlen, path, "tensor '%s': its name is not UTF-8, or out of memory",
                                  x->name), NULL;
        }
        off += bytes;
    }
    *data_bytes = off;
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!s) errbuf_fail_at(err, errlen, path, "out of memory");
    return s;
}

int safetensors_write(const char *path, const st_tensor *t, size_t n, const char *const *meta, size_t n_meta,
                      char *err, size_t errlen) {
    uint64_t data_bytes = 0;
    char *json = build_header(path, t, n, meta, n_meta, &data_bytes, err, errlen);
    if (!json) return -1;
    size_t jl = strlen(json), padded = (jl + 7) / 8 * 8; /* the data area starts 8-aligned, as HF writes it */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        free(json);
        return errbuf_fail_at(err, errlen, path, "path too long");
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(json);
        return errbuf_fail_at(err, errlen, path, "cannot create %s: %s", tmp, strerror(errno));
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(json, 1, jl, f) == jl;
    for (size_t i = jl; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    free(json);
    for (size_t i = 0; ok && i < n; i++) {
        uint64_t bytes = tensor_dtype_size(t[i].dtype);
        for (int32_t d = 0; d < t[i].ndim; d++) bytes *= (uint64_t)t[i].shape[d]; /* checked in build_header */
        ok = bytes == 0 || fwrite(t[i].data, 1, bytes, f) == bytes;
    }
    int saved = errno;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (!ok) saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (!ok || rename(tmp, path) != 0) {
        if (ok) saved = errno;
        unlink(tmp);
        return errbuf_fail_at(err, errlen, path, "write failed: %s", strerror(saved));
    }
    return 0;
}
