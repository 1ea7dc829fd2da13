/*
 * safetensors.c — parses a .safetensors image: u64 LE header length N, N bytes of JSON
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the data area.
 * Every field is checked before any pointer is formed; entries point into the image (no copy).
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "loader_util.h"
#include "errbuf.h"

/* A header larger than this is not a real checkpoint (a 70B model's header is ~100 KB). */
#define ST_MAX_HEADER (100u * 1024u * 1024u)

static const char *const st_dtype_names[TENSOR_DTYPE_COUNT] = {
    [TENSOR_F32] = "F32", [TENSOR_F16] = "F16", [TENSOR_BF16] = "BF16", [TENSOR_F64] = "F64",
    [TENSOR_I64] = "I64", [TENSOR_I32] = "I32", [TENSOR_I16] = "I16", [TENSOR_I8] = "I8",
    [TENSOR_U8] = "U8", [TENSOR_BOOL] = "BOOL", [TENSOR_F8_E4M3] = "F8_E4M3", [TENSOR_F8_E5M2] = "F8_E5M2",
};

static const char *json_type_name(const json_t *v) {
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

/* Parses one tensor's description and appends it. data/dlen: the data area after the header; len: the file's size. */
static int parse_tensor(const char *name, size_t namelen, json_t *desc, const uint8_t *data, uint64_t dlen,
                        uint64_t len, const char *file, tensor_list *out, char *err, size_t errlen) {
    if (!json_is_object(desc))
        return errbuf_fail_at(err, errlen, file, "tensor '%s' must be an object, got %s", name, json_type_name(desc));
    json_t *jd = json_object_get(desc, "dtype"), *js = json_object_get(desc, "shape");
    json_t *jo = json_object_get(desc, "data_offsets");
    if (!jd || !js || !jo)
        return errbuf_fail_at(err, errlen, file, "tensor '%s' lacks '%s'", name,
                              !jd ? "dtype" : !js ? "shape" : "data_offsets");
    if (!json_is_string(jd))
        return errbuf_fail_at(err, errlen, file, "tensor '%s' dtype must be a string, got %s", name,
                              json_type_name(jd));
    int dt = -1;
    for (int i = 0; i < TENSOR_DTYPE_COUNT; i++) /* GGUF-only dtypes have no safetensors name */
        if (st_dtype_names[i] && strcmp(json_string_value(jd), st_dtype_names[i]) == 0) dt = i;
    if (dt < 0) return errbuf_fail_at(err, errlen, file, "tensor '%s' has unknown dtype '%s'", name,
                                      json_string_value(jd));

    if (!json_is_array(js))
        return errbuf_fail_at(err, errlen, file, "tensor '%s' shape must be an array, got %s", name,
                              json_type_name(js));
    size_t ndim = json_array_size(js);
    if (ndim > TENSOR_MAX_DIMS)
        return errbuf_fail_at(err, errlen, file, "tensor '%s' has %zu dimensions (at most %d)", name, ndim,
                              TENSOR_MAX_DIMS);
    int64_t shape[TENSOR_MAX_DIMS] = {0};
    for (size_t i = 0; i < ndim; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d))
            return errbuf_fail_at(err, errlen, file, "tensor '%s' shape[%zu] must be an integer, got %s", name, i,
                                  json_type_name(d));
        if (json_integer_value(d) < 0)
            return errbuf_fail_at(err, errlen, file, "tensor '%s' shape[%zu] is negative (%" JSON_INTEGER_FORMAT ")",
                                  name, i, json_integer_value(d));
        shape[i] = (int64_t)json_integer_value(d);
    }

    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return errbuf_fail_at(err, errlen, file, "tensor '%s' data_offsets must be an array of 2 integers", name);
    json_t *jb = json_array_get(jo, 0), *je = json_array_get(jo, 1);
    if (!json_is_integer(jb) || !json_is_integer(je) || json_integer_value(jb) < 0 || json_integer_value(je) < 0)
        return errbuf_fail_at(err, errlen, file, "tensor '%s' data_offsets must be non-negative integers", name);
    uint64_t begin = (uint64_t)json_integer_value(jb), end = (uint64_t)json_integer_value(je);
    if (begin > end)
        return errbuf_fail_at(err, errlen, file,
                              "tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                              name, begin, end);
    if (end > dlen)
        return errbuf_fail_at(err, errlen, file,
                              "tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] run past the data area (%" PRIu64
                              " bytes): file truncated?",
                              name, begin, end, dlen);

    char shp[128];
    ld_format_shape(shp, sizeof shp, (int32_t)ndim, shape);
    uint64_t nbytes;
    if (!ld_tensor_nbytes((tensor_dtype)dt, (int32_t)ndim, shape, &nbytes))
        return errbuf_fail_at(err, errlen, file, "tensor '%s' shape %s x %s overflows", name, shp, st_dtype_names[dt]);
    if (!ld_shape_fits((int32_t)ndim, shape, len))
        return errbuf_fail_at(err, errlen, file,
                              "tensor '%s' shape %s is empty, yet its other dimensions claim more elements "
                              "than the file has bytes", name, shp);
    if (end - begin != nbytes)
        return errbuf_fail_at(err, errlen, file,
                              "tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] do not match shape %s x %s (%" PRIu64
                              " bytes)",
                              name, begin, end, shp, st_dtype_names[dt], nbytes);
    if (ld_list_push(out, name, namelen, (tensor_dtype)dt, (int32_t)ndim, shape, data + begin, nbytes, file) != 0)
        return errbuf_fail_at(err, errlen, file, "out of memory");
    return 0;
}

static int check_metadata(json_t *meta, const char *file, char *err, size_t errlen) {
    if (!json_is_object(meta))
        return errbuf_fail_at(err, errlen, file, "__metadata__ must be an object of strings, got %s",
                              json_type_name(meta));
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return errbuf_fail_at(err, errlen, file, "__metadata__ '%s' must be a string, got %s", k,
                                  json_type_name(v));
    }
    return 0;
}

int safetensors_parse(const uint8_t *buf, uint64_t len, const char *file, tensor_list *out, char *err,
                      size_t errlen) {
    if (len < 8)
        return errbuf_fail_at(err, errlen, file, "truncated: %" PRIu64 " bytes, too short for a safetensors header",
                              len);
    uint64_t n = ld_le64(buf);
    if (n > len - 8)
        return errbuf_fail_at(err, errlen, file, "truncated: header says %" PRIu64 " bytes but file has %" PRIu64, n,
                              len);
    if (n > ST_MAX_HEADER)
        return errbuf_fail_at(err, errlen, file, "header of %" PRIu64 " bytes is implausibly large (limit %u)", n,
                              ST_MAX_HEADER);
    if (n < 2) return errbuf_fail_at(err, errlen, file, "header of %" PRIu64 " bytes cannot hold a JSON object", n);

    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return errbuf_fail_at(err, errlen, file, "header is not valid JSON: %s (line %d, column %d)", jerr.text,
                              jerr.line,
                              jerr.column);
    size_t start = out->count;
    int rc = 0;
    if (!json_is_object(root)) {
        rc = errbuf_fail_at(err, errlen, file, "header must be a JSON object, got %s", json_type_name(root));
        goto done;
    }
    const uint8_t *data = buf + 8 + n;
    uint64_t dlen = len - 8 - n;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            rc = check_metadata(val, file, err, errlen);
        } else if (key[0] == '\0') {
            rc = errbuf_fail_at(err, errlen, file, "tensor with an empty name");
        } else {
            rc = parse_tensor(key, strlen(key), val, data, dlen, len, file, out, err, errlen);
        }
        if (rc) break;
    }
done:
    json_decref(root);
    if (rc) ld_list_truncate(out, start);
    return rc;
}
