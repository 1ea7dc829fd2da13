/*
 * test_gguf_shapes.c — GGUF tensor shapes that lie are refused at parse time, quickly and by name. A zero dim makes
 * a tensor's byte size 0 whatever its other dims claim, so before shapes were checked a 2-D tensor [0, 2^45]
 * passed every size check and the loader walked 2^45 empty rows (a q5_0 matrix, then converted to q8_0) or 2^57
 * (Q/K reorder).
 * Also: the row reorder refuses empty rows and head counts whose double overflows; sane files still load.
 */
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_llama.h"
#include "gguf_write.h"
#include "tensor_index.h"
#include "test_util.h"

static char tmpdir[256];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int zero_fill(void *user, size_t i, void *dst, char *err, size_t errlen) {
    (void)i; (void)err; (void)errlen;
    memset(dst, 0, *(const size_t *)user);
    return 0;
}

/* A GGUF image (malloc'ed, *len) with head_count 2 and one tensor. */
static uint8_t *one_tensor(const char *name, uint32_t type, int32_t ndim, const int64_t *ne, size_t nbytes,
                           size_t *len) {
    char path[300], err[256] = "";
    snprintf(path, sizeof path, "%s/t.gguf", tmpdir);
    gguf_writer *w = gguf_writer_new();
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_u32(w, "llama.attention.head_count", 2);
    gguf_w_tensor(w, name, type, ndim, ne, nbytes);
    int rc = gguf_writer_write(w, path, zero_fill, &nbytes, err, sizeof err);
    gguf_writer_free(w);
    CHECK(rc == 0, "write %s: %s", name, err);
    return rc ? NULL : test_slurp(path, len);
}

static void test_zero_dims(void) {
    static const struct {
        const char *name;
        uint32_t type;
        int32_t ndim;
        int64_t ne[3];
    } cases[] = {
        {"blk.0.ffn_up.weight", GGML_Q5_0, 2, {0, INT64_C(1) << 45}},  /* the conversion's rows */
        {"blk.0.attn_q.weight", GGML_F32, 2, {0, INT64_C(1) << 57}},   /* the Q/K reorder's rows */
        {"blk.0.attn_k.weight", GGML_Q8_0, 2, {0, INT64_C(1) << 40}},
        {"blk.0.ffn_down.weight", GGML_F16, 2, {64, 0}},
        {"output_norm.weight", GGML_F32, 1, {0}},
        {"blk.0.ffn_gate.weight", GGML_F32, 3, {32, INT64_C(1) << 50, 0}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        size_t len;
        uint8_t *b = one_tensor(cases[k].name, cases[k].type, cases[k].ndim, cases[k].ne, 0, &len);
        if (!b) continue;
        char err[512] = "";
        gguf_file g;
        double t0 = now();
        int rc = gguf_parse(b, len, "z.gguf", &g, err, sizeof err);
        gguf_free(&g);
        CHECK(rc == -1 && strstr(err, "zero dimension") && strstr(err, cases[k].name),
              "%s: parse refuses a zero dim by name: rc %d '%s'", cases[k].name, rc, err);
        tensor_list l = {0};
        err[0] = '\0';
        rc = gguf_weights_parse(b, len, "z.gguf", &l, err, sizeof err);
        double secs = now() - t0;
        CHECK(rc == -1 && l.count == 0 && strstr(err, "zero dimension"), "%s: load refused: rc %d '%s'",
              cases[k].name, rc, err);
        CHECK(secs < 1.0, "%s: refused in %.3f s", cases[k].name, secs);
        tensor_list_free(&l);
        free(b);
    }
}

static void test_sane_files_load(void) {
    size_t len;
    int64_t q5[2] = {32, 4}, q[2] = {4, 4};
    uint8_t *b = one_tensor("blk.0.ffn_up.weight", GGML_Q5_0, 2, q5, 4 * 22, &len);
    tensor_list l = {0};
    char err[512] = "";
    CHECK(b && gguf_weights_parse(b, len, "ok.gguf", &l, err, sizeof err) == 0 && l.count == 1 &&
              l.items[0].dtype == TENSOR_Q5_0 && l.items[0].shape[0] == 4 && l.items[0].shape[1] == 32,
          "q5_0 [4, 32] loads as q5_0: %s", err);
    tensor_list_free(&l);
    free(b);
    b = one_tensor("blk.0.attn_q.weight", GGML_F32, 2, q, 16 * 4, &len);
    CHECK(b && gguf_weights_parse(b, len, "ok.gguf", &l, err, sizeof err) == 0 && l.count == 1,
          "f32 attn_q [4, 4] with 2 heads reordered: %s", err);
    tensor_list_free(&l);
    free(b);
}

static void test_permute_guards(void) {
    uint8_t src[8] = {0, 1, 2, 3, 4, 5, 6, 7}, dst[8];
    CHECK(gguf_llama_permute_rows(dst, src, INT64_C(1) << 57, 0, 1, 0) == -1, "empty rows refused, not looped");
    CHECK(gguf_llama_permute_rows(dst, src, 0, 1, 1, 0) == -1, "no rows refused");
    CHECK(gguf_llama_permute_rows(dst, src, 8, 1, INT64_MAX, 0) == -1, "a head count whose double overflows");
    CHECK(gguf_llama_permute_rows(dst, src, 8, 1, 3, 0) == -1, "rows not 2 x heads");
    /* one head of 8 rows: GGUF row 2i + s is HF row s * 4 + i */
    CHECK(gguf_llama_permute_rows(dst, src, 8, 1, 1, 0) == 0 && dst[0] == 0 && dst[1] == 2 && dst[4] == 1 &&
              dst[7] == 7, "8 rows, 1 head: HF order restored");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mnemo_test_gguf_shapes_%d", (int)getpid());
    mkdir(tmpdir, 0755);
    test_zero_dims();
    test_sane_files_load();
    test_permute_guards();
    char path[300];
    snprintf(path, sizeof path, "%s/t.gguf", tmpdir);
    unlink(path);
    rmdir(tmpdir);
    return test_summary();
}
