/*
 * test_safetensors_write.c — safetensors_write: what it writes, safetensors_parse reads back (names, dtypes,
 * shapes, bytes, metadata; the layout Hugging Face writes: 8-aligned data area); bad tensors are refused with the
 * tensor named and nothing written; the file appears whole or not at all (no .tmp left behind).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors_write.h"
#include "tensor_index.h"
#include "test_util.h"

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

int main(void) {
    char dir[] = "/tmp/mnemo-st-write-XXXXXX", path[256], tmp[272];
    CHECK(mkdtemp(dir) != NULL, "temp dir");
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);

    float a[2 * 3] = {1, -2, 3.5f, 0, 1e-8f, -7};
    uint16_t b[4] = {0x3f80, 0xc000, 0x0001, 0x7f80}; /* bf16 1, -2, a denormal, +inf */
    float scalar = 42.f;
    int64_t sa[] = {2, 3}, sb[] = {4}, sz[] = {0, 5};
    st_tensor ts[] = {
        {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", TENSOR_F32, 2, sa, a},
        {"b", TENSOR_BF16, 1, sb, b},
        {"scalar", TENSOR_F32, 0, NULL, &scalar},
        {"empty", TENSOR_F32, 2, sz, NULL},
    };
    const char *meta[] = {"format", "pt", "mnemo", "test"};
    char err[512] = "";
    CHECK(safetensors_write(path, ts, 4, meta, 2, err, sizeof err) == 0, "write: %s", err);
    CHECK(!exists(tmp), "no .tmp left after a good write");
    size_t len = 0;
    uint8_t *img = test_slurp(path, &len);
    CHECK(img && len >= 8, "read back");
    uint64_t hl = 0;
    for (int i = 0; img && i < 8; i++) hl |= (uint64_t)img[i] << (8 * i);
    CHECK(hl % 8 == 0 && len == 8 + hl + sizeof a + sizeof b + sizeof scalar, "layout: header %llu bytes, file %zu",
          (unsigned long long)hl, len);
    CHECK(img && strstr((const char *)img + 8, "\"__metadata__\":{\"format\":\"pt\",\"mnemo\":\"test\"}"),
          "metadata written first, in order");
    tensor_list l = {0};
    CHECK(img && safetensors_parse(img, len, path, &l, err, sizeof err) == 0, "parse back: %s", err);
    CHECK(l.count == 4, "4 tensors back, got %zu", l.count);
    for (size_t i = 0; i < l.count && i < 4; i++) {
        const tensor_entry *e = NULL;
        for (size_t j = 0; j < l.count; j++)
            if (!strcmp(l.items[j].name, ts[i].name)) e = &l.items[j];
        CHECK(e && e->dtype == ts[i].dtype && e->ndim == ts[i].ndim, "tensor %s: dtype and rank", ts[i].name);
        if (!e) continue;
        bool same_shape = true;
        for (int32_t d = 0; d < e->ndim; d++) same_shape &= e->shape[d] == ts[i].shape[d];
        CHECK(same_shape, "tensor %s: shape", ts[i].name);
        CHECK(e->nbytes == 0 || !memcmp(e->data, ts[i].data, e->nbytes), "tensor %s: bytes", ts[i].name);
    }
    tensor_list_free(&l);
    free(img);

    /* refusals name the tensor and leave the earlier file as it was */
    struct {
        st_tensor t[2];
        size_t n;
        const char *want;
    } bad[] = {
        {{{"x", TENSOR_F32, 1, sb, a}, {"x", TENSOR_F32, 1, sb, a}}, 2, "('x') appears twice"},
        {{{"__metadata__", TENSOR_F32, 1, sb, a}}, 1, "is named __metadata__"},
        {{{"", TENSOR_F32, 1, sb, a}}, 1, "has no name"},
        {{{"neg", TENSOR_F32, 2, (int64_t[]){2, -1}, a}}, 1, "'neg' has a bad size in dimension 1"},
        {{{"huge", TENSOR_F32, 2, (int64_t[]){1LL << 62, 8}, a}}, 1, "'huge' has a bad size"},
        {{{"nodata", TENSOR_F32, 1, sb, NULL}}, 1, "'nodata' has no data"},
        {{{"bad\xff", TENSOR_F32, 1, sb, a}}, 1, "not UTF-8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        CHECK(safetensors_write(path, bad[i].t, bad[i].n, NULL, 0, err, sizeof err) == -1 && strstr(err, bad[i].want) &&
                  strstr(err, path),
              "bad case %zu refused with '%s' (got '%s')", i, bad[i].want, err);
        CHECK(!exists(tmp), "bad case %zu: nothing half-written", i);
    }
    img = test_slurp(path, &len);
    CHECK(img && safetensors_parse(img, len, path, &l, err, sizeof err) == 0 && l.count == 4,
          "the good file is untouched by refused writes");
    tensor_list_free(&l);
    free(img);
    char nodir[300];
    snprintf(nodir, sizeof nodir, "%s/missing/x.safetensors", dir);
    CHECK(safetensors_write(nodir, ts, 1, NULL, 0, err, sizeof err) == -1 && strstr(err, "cannot create"),
          "an unwritable path: %s", err);
    unlink(path);
    rmdir(dir);
    return test_summary();
}
