/*
 * test_train_checkpoint.c — training checkpoints: saved and loaded bit for bit; a corrupt,
 * truncated, foreign (other fingerprint), other-settings or misshapen file is refused with a message and the
 * caller's buffers stay exactly as they were.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "train_checkpoint.h"

#define FP 0x1234abcdULL

static char g_dir[] = "/tmp/mnemo-ckpt-XXXXXX";

static void fill(float *x, size_t n, float base) {
    for (size_t i = 0; i < n; i++) x[i] = base + (float)i * 0.25f;
}

static void expect_refused(const char *path, uint64_t fp, const char *settings, train_ckpt_buffer *bufs, size_t n,
                           const char *want, const char *what) {
    float before[3][128];
    for (size_t k = 0; k < n && k < 3; k++) memcpy(before[k], bufs[k].data, bufs[k].n * sizeof(float));
    train_ckpt_meta meta = {.step = -7};
    char err[512] = "";
    CHECK(train_ckpt_load(path, fp, &meta, settings, bufs, n, err, sizeof err) == -1 && strstr(err, want),
          "%s refused with '%s' (got '%s')", what, want, err);
    bool same = meta.step == -7;
    for (size_t k = 0; k < n && k < 3; k++) same &= !memcmp(before[k], bufs[k].data, bufs[k].n * sizeof(float));
    CHECK(same, "%s: nothing of the run was overwritten", what);
}

int main(void) {
    CHECK(mkdtemp(g_dir) != NULL, "temp dir");
    char path[256], bad[256];
    snprintf(path, sizeof path, "%s/step.ckpt", g_dir);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", g_dir);
    float p[64], m[64], v[3];
    fill(p, 64, 1.f), fill(m, 64, -2.f), fill(v, 3, 0.5f);
    train_ckpt_buffer bufs[] = {{"param:lora_A.0", p, 64}, {"adam_m:lora_A.0", m, 64}, {"adam_v:x", v, 3}};
    train_ckpt_meta meta = {.step = 42, .data_seed = 99, .rng = {1, 2, 3, 4}};
    const char *settings = "{\"lr\":0.001,\"seq_len\":16}";
    char err[512];
    CHECK(train_ckpt_save(path, FP, &meta, settings, bufs, 3, err, sizeof err) == 0, "save: %s", err);
    float p2[64] = {0}, m2[64] = {0}, v2[3] = {0};
    train_ckpt_buffer back[] = {{"adam_v:x", v2, 3}, {"param:lora_A.0", p2, 64}, {"adam_m:lora_A.0", m2, 64}};
    train_ckpt_meta got = {0};
    CHECK(train_ckpt_load(path, FP, &got, settings, back, 3, err, sizeof err) == 0, "load: %s", err);
    CHECK(!memcmp(p, p2, sizeof p) && !memcmp(m, m2, sizeof m) && !memcmp(v, v2, sizeof v), "buffers bit for bit, by name");
    CHECK(got.step == 42 && got.data_seed == 99 && got.rng[3] == 4, "step, data seed and RNG state back");

    fill(p2, 64, 100.f);
    expect_refused(path, FP + 1, settings, back, 3, "fingerprint", "another model's checkpoint");
    expect_refused(path, FP, "{\"lr\":0.01,\"seq_len\":16}", back, 3, "other settings", "other settings");
    train_ckpt_buffer fewer[] = {{"adam_v:x", v2, 3}, {"param:lora_A.0", p2, 64}};
    expect_refused(path, FP, settings, fewer, 2, "'adam_m:lora_A.0' is not part of this run", "an extra buffer");
    float big[65];
    train_ckpt_buffer more[] = {{"adam_v:x", v2, 3}, {"param:lora_A.0", p2, 64}, {"adam_m:lora_A.0", m2, 64},
                                {"param:lora_B.0", big, 65}};
    expect_refused(path, FP, settings, more, 4, "'param:lora_B.0' is missing", "a missing buffer");
    train_ckpt_buffer sized[] = {{"adam_v:x", v2, 3}, {"param:lora_A.0", big, 65}, {"adam_m:lora_A.0", m2, 64}};
    expect_refused(path, FP, settings, sized, 3, "holds 64 values, this run has 65", "a buffer of another size");
    /* every single-byte corruption and every truncation is refused, the buffers untouched */
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *img = malloc((size_t)n);
    CHECK(fread(img, 1, (size_t)n, f) == (size_t)n, "read");
    fclose(f);
    int corrupt_ok = 0, trunc_ok = 0;
    for (long i = 0; i < n; i += 7) {
        img[i] ^= 0x5a;
        FILE *g = fopen(bad, "wb");
        fwrite(img, 1, (size_t)n, g);
        fclose(g);
        img[i] ^= 0x5a;
        fill(p2, 64, 100.f);
        train_ckpt_meta mm = {.step = -1};
        corrupt_ok += train_ckpt_load(bad, FP, &mm, settings, back, 3, err, sizeof err) == -1 && p2[0] == 100.f &&
                      mm.step == -1;
        g = fopen(bad, "wb");
        fwrite(img, 1, (size_t)i, g);
        fclose(g);
        trunc_ok += train_ckpt_load(bad, FP, &mm, settings, back, 3, err, sizeof err) == -1 && p2[0] == 100.f;
    }
    CHECK(corrupt_ok == (n + 6) / 7 && trunc_ok == (n + 6) / 7, "corrupt %d and truncated %d of %ld files refused",
          corrupt_ok, trunc_ok, (n + 6) / 7);
    free(img);
    unlink(path);
    unlink(bad);
    rmdir(g_dir);
    return test_summary();
}
