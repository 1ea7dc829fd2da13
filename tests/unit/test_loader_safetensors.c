/*
 * test_loader_safetensors.c — safetensors_parse on images built in memory: valid files (metadata, scalar,
 * zero-size and overlapping tensors, values read back), and every class of malformation with the message
 * it must produce; then every truncation and single-byte corruption of a valid image (must never crash).
 * Also the dtype helpers of tensor_list.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_index.h"
#include "test_util.h"

/* header JSON + data -> a malloc'ed safetensors image */
static uint8_t *make_st(const char *json, const void *data, size_t dlen, size_t *len) {
    size_t n = strlen(json);
    uint8_t *b = malloc(8 + n + dlen + 1);
    if (!b) abort();
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, json, n);
    if (dlen) memcpy(b + 8 + n, data, dlen);
    *len = 8 + n + dlen;
    return b;
}

static const tensor_entry *find(const tensor_list *l, const char *name) {
    for (size_t i = 0; i < l->count; i++)
        if (strcmp(l->items[i].name, name) == 0) return &l->items[i];
    return NULL;
}

/* Parses json+data; expects failure with msg containing want (NULL: expect success). */
static void expect(const char *json, size_t dlen, const char *want, int line) {
    static uint8_t zeros[256];
    size_t len;
    uint8_t *b = make_st(json, zeros, dlen, &len);
    tensor_list l = {0};
    char err[512] = "";
    int rc = safetensors_parse(b, len, "model.safetensors", &l, err, sizeof err);
    if (!want) {
        CHECK(rc == 0, "line %d: expected success, got '%s'", line, err);
    } else {
        CHECK(rc == -1, "line %d: expected failure containing '%s'", line, want);
        CHECK(strstr(err, want) != NULL, "line %d: message '%s' lacks '%s'", line, err, want);
        CHECK(strncmp(err, "model.safetensors: ", 19) == 0, "line %d: message '%s' does not name the file", line,
              err);
        CHECK(l.count == 0, "line %d: failed parse left %zu entries", line, l.count);
    }
    tensor_list_free(&l);
    free(b);
}
#define EXPECT_OK(json, dlen) expect(json, dlen, NULL, __LINE__)
#define EXPECT_ERR(json, dlen, want) expect(json, dlen, want, __LINE__)

static void test_valid(void) {
    float a[4] = {1.0f, -2.0f, 0.5f, 3.25f};
    uint16_t b[3] = {0x3fc0, 0xc000, 0x3e00}; /* bf16 1.5, -2, 0.125 */
    uint8_t data[22];
    memcpy(data, a, 16);
    memcpy(data + 16, b, 6);
    const char *json = "{\"__metadata__\": {\"format\": \"pt\"},"
                       " \"a\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 16]},"
                       " \"b\": {\"dtype\": \"BF16\", \"shape\": [3], \"data_offsets\": [16, 22], \"extra\": 1}}  ";
    size_t len;
    uint8_t *img = make_st(json, data, sizeof data, &len);
    tensor_list l = {0};
    char err[256] = "";
    CHECK(safetensors_parse(img, len, "f.safetensors", &l, err, sizeof err) == 0, "valid: %s", err);
    CHECK(l.count == 2, "valid: %zu tensors", l.count);
    const tensor_entry *ta = find(&l, "a"), *tb = find(&l, "b");
    CHECK(ta && ta->dtype == TENSOR_F32 && ta->ndim == 2 && ta->shape[0] == 2 && ta->shape[1] == 2 &&
              ta->nbytes == 16,
          "valid: a described wrong");
    CHECK(tb && tb->dtype == TENSOR_BF16 && tb->ndim == 1 && tb->shape[0] == 3 && tb->nbytes == 6,
          "valid: b described wrong");
    if (ta && tb) {
        size_t hdr = 8 + strlen(json);
        CHECK(ta->data == img + hdr && tb->data == img + hdr + 16, "valid: data pointers not into the image");
        float fa[4];
        memcpy(fa, ta->data, 16);
        CHECK(fa[0] == 1.0f && fa[3] == 3.25f, "valid: a values");
        uint16_t hb[3];
        memcpy(hb, tb->data, 6);
        CHECK(kern_bf16_to_f32(hb[0]) == 1.5f && kern_bf16_to_f32(hb[1]) == -2.0f &&
                  kern_bf16_to_f32(hb[2]) == 0.125f,
              "valid: b values");
        CHECK(strcmp(ta->file, "f.safetensors") == 0, "valid: file not recorded");
    }
    /* a failed parse appends nothing and keeps what was there */
    char bad[] = "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                 " \"y\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 5]}}";
    size_t blen;
    uint8_t *bimg = make_st(bad, data, sizeof data, &blen);
    CHECK(safetensors_parse(bimg, blen, "g", &l, err, sizeof err) == -1 && l.count == 2,
          "rollback: count %zu after failed parse", l.count);
    free(bimg);

    /* every truncation fails cleanly, every single-byte corruption is handled (run under ASan in fuzz builds) */
    for (size_t cut = 0; cut < len; cut++) {
        tensor_list t = {0};
        int rc = safetensors_parse(img, cut, "t", &t, err, sizeof err);
        CHECK(rc == -1, "truncated at %zu accepted", cut);
        tensor_list_free(&t);
    }
    uint8_t *mut = malloc(len);
    size_t ok = 0;
    for (size_t i = 0; i < len; i++) {
        memcpy(mut, img, len);
        mut[i] ^= 0x5a;
        tensor_list t = {0};
        ok += safetensors_parse(mut, len, "m", &t, err, sizeof err) == 0;
        tensor_list_free(&t);
    }
    CHECK(ok < len, "corruption: all %zu mutants accepted", len);
    free(mut);
    tensor_list_free(&l);
    free(img);
}

static void test_edge_cases_ok(void) {
    EXPECT_OK("{}", 0);
    EXPECT_OK("{\"__metadata__\": {}}", 0);
    EXPECT_OK("{\"z\": {\"dtype\": \"F32\", \"shape\": [0, 4], \"data_offsets\": [0, 0]}}", 0);
    EXPECT_OK("{\"z\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [0, 0]}}", 0);
    EXPECT_OK("{\"s\": {\"dtype\": \"F64\", \"shape\": [], \"data_offsets\": [0, 8]}}", 8);
    /* overlapping tensors and unused bytes are allowed */
    EXPECT_OK("{\"p\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
              " \"q\": {\"dtype\": \"U8\", \"shape\": [2, 2], \"data_offsets\": [4, 8]}}",
              32);
    const char *dts[] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2"};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        char j[160];
        snprintf(j, sizeof j, "{\"t\": {\"dtype\": \"%s\", \"shape\": [3], \"data_offsets\": [0, %zu]}}", dts[i],
                 3 * tensor_dtype_size((tensor_dtype)i));
        EXPECT_OK(j, 24);
        CHECK(strcmp(tensor_dtype_name((tensor_dtype)i), dts[i]) == 0, "dtype name %zu", i);
    }
}

static void test_malformed(void) {
    /* the example of the brief, verbatim */
    {
        static uint8_t zeros[128];
        size_t len;
        uint8_t *b = make_st("{\"x\": {\"dtype\": \"F32\", \"shape\": [4, 4], \"data_offsets\": [0, 99]}}", zeros,
                             100, &len);
        tensor_list l = {0};
        char err[256] = "";
        CHECK(safetensors_parse(b, len, "model.safetensors", &l, err, sizeof err) == -1, "mismatch accepted");
        CHECK(strcmp(err, "model.safetensors: tensor 'x' data_offsets [0, 99] do not match shape [4, 4] x F32 "
                          "(64 bytes)") == 0,
              "mismatch message: '%s'", err);
        free(b);
    }
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 16]}}", 16, "do not match");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 15, "run past");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 16, "end before");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F31\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "unknown dtype 'F31'");
    EXPECT_ERR("{\"x\": {\"dtype\": \"f32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "unknown dtype");
    EXPECT_ERR("{\"x\": {\"dtype\": 5, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "dtype must be a string");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": \"1\", \"data_offsets\": [0, 4]}}", 4,
               "shape must be an array");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [1.0], \"data_offsets\": [0, 4]}}", 4, "must be an integer");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, "negative");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4,
               "9 dimensions");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 16], \"data_offsets\": [0, 4]}}", 4,
               "overflows");
    /* an empty tensor whose other dims claim more elements than the file has bytes: rows nobody should walk */
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [0, 1099511627776], \"data_offsets\": [0, 0]}}", 0,
               "is empty, yet");
    EXPECT_ERR("{\"x\": {\"dtype\": \"BF16\", \"shape\": [4096, 0, 4096], \"data_offsets\": [0, 0]}}", 0,
               "is empty, yet");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [0, 4294967296, 4294967296], \"data_offsets\": [0, 0]}}", 0,
               "is empty, yet");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4, "data_offsets must be");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, \"4\"]}}", 4, "data_offsets must");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 4, "non-negative");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"data_offsets\": [0, 4]}}", 4,
               "not valid JSON");
    EXPECT_ERR("{\"x\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "lacks 'dtype'");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4, "lacks 'shape'");
    EXPECT_ERR("{\"x\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "lacks 'data_offsets'");
    EXPECT_ERR("{\"x\": [1, 2]}", 4, "must be an object, got array");
    EXPECT_ERR("{\"\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "empty name");
    EXPECT_ERR("[1, 2, 3]", 0, "header must be a JSON object, got array");
    EXPECT_ERR("{\"__metadata__\": {\"a\": 1}}", 0, "__metadata__ 'a' must be a string");
    EXPECT_ERR("{\"__metadata__\": [1]}", 0, "__metadata__ must be an object");
    EXPECT_ERR("{\"x\": ", 0, "not valid JSON");
    EXPECT_ERR("{}  trailing", 0, "not valid JSON");
    EXPECT_ERR("{", 0, "cannot hold");
}

static void test_bad_lengths(void) {
    char err[256];
    tensor_list l = {0};
    uint8_t small[5] = {1, 2, 3, 4, 5};
    CHECK(safetensors_parse(small, 5, "m.st", &l, err, sizeof err) == -1 && strstr(err, "m.st: truncated"),
          "short file: '%s'", err);
    CHECK(safetensors_parse(small, 0, "m.st", &l, err, sizeof err) == -1, "empty file accepted");
    uint8_t hdr[108] = {0xd2, 0x04}; /* says 1234 header bytes, file has 108 */
    CHECK(safetensors_parse(hdr, sizeof hdr, "m.st", &l, err, sizeof err) == -1 &&
              strstr(err, "truncated: header says 1234 bytes but file has 108"),
          "header past EOF: '%s'", err);
    uint8_t huge[16];
    memset(huge, 0xff, sizeof huge);
    CHECK(safetensors_parse(huge, sizeof huge, "m.st", &l, err, sizeof err) == -1 && strstr(err, "truncated"),
          "header length 2^64-1: '%s'", err);
    CHECK(l.count == 0, "entries after failures");
}

static void test_dtype_helpers(void) {
    kern_dtype k;
    CHECK(tensor_dtype_to_kern(TENSOR_F32, &k) == 0 && k == KERN_F32, "F32 -> kern");
    CHECK(tensor_dtype_to_kern(TENSOR_F16, &k) == 0 && k == KERN_F16, "F16 -> kern");
    CHECK(tensor_dtype_to_kern(TENSOR_BF16, &k) == 0 && k == KERN_BF16, "BF16 -> kern");
    CHECK(tensor_dtype_to_kern(TENSOR_I64, &k) == -1 && tensor_dtype_to_kern(TENSOR_F8_E4M3, &k) == -1,
          "non-weight dtypes map to kern");
    CHECK(tensor_dtype_size(TENSOR_F64) == 8 && tensor_dtype_size(TENSOR_BOOL) == 1 &&
              tensor_dtype_size(TENSOR_DTYPE_COUNT) == 0,
          "dtype sizes");
    CHECK(strcmp(tensor_dtype_name(TENSOR_DTYPE_COUNT), "?") == 0, "out-of-range dtype name");
    tensor_list_free(NULL);
}

int main(void) {
    test_valid();
    test_edge_cases_ok();
    test_malformed();
    test_bad_lengths();
    test_dtype_helpers();
    return test_summary();
}
