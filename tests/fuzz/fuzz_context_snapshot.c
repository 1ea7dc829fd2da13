/*
 * fuzz_context_snapshot.c — libFuzzer target: mnemo_context_load on arbitrary section bytes. The input is wrapped
 * in a valid container (the fixture model's header and fingerprint in front, the end marker and a correct CRC-32
 * behind), so mutations reach the context-level checks (header, section sizes, LongLLaMA window and memory stores)
 * instead of stopping at the checksum. Work per input is what the input decides: a refused load must leave the
 * (empty) context as it was, checked for free; only an accepted one is decoded (one token, which must give finite
 * logits) and reset. The model is loaded once; the file goes to /dev/shm when there is one. Seeds: a few KB each
 * (tests/fuzz/make_snapshot_seeds.py). Model: tests/fixtures/longllama/basic (MNEMO_FIXTURES, else found next to
 * this file).
 */
#include <math.h>
#include <faiss/c_api/utils/distances_c.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "snapshot.h"

static mnemo_model *model;
static mnemo_context *ctx;
static uint8_t header[24]; /* magic, version, 0, fingerprint: taken from a real snapshot */
static char path[64];
static int32_t n_vocab;

static void remove_file(void) { unlink(path); }

static int setup(void) {
    char dir[4096];
    const char *fx = getenv("MNEMO_FIXTURES");
    if (fx) snprintf(dir, sizeof dir, "%s/longllama/basic", fx);
    else {
        snprintf(dir, sizeof dir, "%s", __FILE__); /* .../tests/fuzz/fuzz_context_snapshot.c */
        char *cut = strstr(dir, "fuzz/fuzz_context_snapshot.c");
        if (!cut) return -1;
        snprintf(cut, sizeof dir - (size_t)(cut - dir), "fixtures/longllama/basic");
    }
    mnemo_log_set_level(MNEMO_LOG_ERROR);
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = 1; /* a tiny model: one thread beats waking a team for every input */
    if (mnemo_model_load(dir, &mp, &model) != MNEMO_OK || mnemo_context_new(model, NULL, &ctx) != MNEMO_OK) return -1;
    n_vocab = mnemo_model_n_vocab(model);
    snprintf(path, sizeof path, "%s/fuzz_ctx_snap_%d.snap", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
             (int)getpid());
    if (mnemo_context_save(ctx, path) != MNEMO_OK) return -1;
    atexit(remove_file);
    FILE *f = fopen(path, "rb");
    int ok = f && fread(header, 1, sizeof header, f) == sizeof header;
    if (f) fclose(f);
    return ok ? 0 : -1;
}

/* One thread: idle OpenMP workers would otherwise spin through every input (the runtime may have read the
 * environment already, hence omp_set_num_threads too); FAISS's BLAS search path takes a 16 MiB tile per call
 * whatever the size, where the direct loop gives the same answer for the few rows an input holds. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OMP_WAIT_POLICY", "passive", 0);
    omp_set_num_threads(1);
    faiss_set_distance_compute_blas_threshold(1 << 30);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready = 0;
    if (!ready) {
        if (setup() != 0) {
            fprintf(stderr, "fuzz_context_snapshot: cannot load the fixture model\n");
            abort();
        }
        ready = 1;
    }
    if (size > (1u << 20)) return 0;
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    /* header, the input as the sections, padding to 8, then the end marker and the CRC of everything before it */
    size_t pad = (8 - size % 8) % 8;
    uint8_t zeros[8] = {0}, end[16] = {0};
    uint32_t end_tag = SNAP_TAG_END;
    memcpy(end, &end_tag, 4);
    uint32_t crc = snap_crc32(0, header, sizeof header);
    crc = snap_crc32(crc, data, size);
    crc = snap_crc32(crc, zeros, pad);
    crc = snap_crc32(crc, end, sizeof end);
    uint8_t tail[8] = {0};
    memcpy(tail, &crc, 4);
    fwrite(header, 1, sizeof header, f);
    fwrite(data, 1, size, f);
    fwrite(zeros, 1, pad, f);
    fwrite(end, 1, sizeof end, f);
    fwrite(tail, 1, sizeof tail, f);
    fclose(f);
    if (mnemo_context_load(ctx, path) != MNEMO_OK) {
        if (mnemo_context_n_past(ctx) != 0) abort(); /* a refused file changed the context */
        return 0;
    }
    /* accepted: whatever it holds, the next token's logits are finite and the context carries on */
    mnemo_token t = 5;
    if (mnemo_decode(ctx, &t, 1) != MNEMO_OK) abort();
    const float *logits = mnemo_get_logits(ctx, -1);
    for (int32_t i = 0; logits && i < n_vocab; i++)
        if (!isfinite(logits[i])) abort();
    mnemo_context_reset(ctx);
    return 0;
}
