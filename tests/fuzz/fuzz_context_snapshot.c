/*
 * fuzz_context_snapshot.c — libFuzzer target: mnemo_context_load on arbitrary section bytes. The input is wrapped
 * in a valid container (the fixture model's header and fingerprint in front, the end marker and a correct CRC-32
 * behind), so mutations reach the context-level checks (header, section sizes, LongLLaMA window and memory stores)
 * instead of stopping at the checksum. Accepted or refused, the context must stay usable: one token is decoded
 * after every load. Model: tests/fixtures/longllama/basic (MNEMO_FIXTURES, else found next to this file).
 */
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
    if (mnemo_model_load(dir, NULL, &model) != MNEMO_OK || mnemo_context_new(model, NULL, &ctx) != MNEMO_OK) return -1;
    snprintf(path, sizeof path, "/tmp/fuzz_ctx_snap_%d.snap", (int)getpid());
    if (mnemo_context_save(ctx, path) != MNEMO_OK) return -1;
    FILE *f = fopen(path, "rb");
    int ok = f && fread(header, 1, sizeof header, f) == sizeof header;
    if (f) fclose(f);
    return ok ? 0 : -1;
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
    if (mnemo_context_load(ctx, path) != MNEMO_OK) (void)mnemo_context_error(ctx);
    mnemo_token t = 5;
    if (mnemo_decode(ctx, &t, 1) != MNEMO_OK) mnemo_context_reset(ctx); /* refused or accepted: still usable */
    if (mnemo_context_n_past(ctx) > 4096) mnemo_context_reset(ctx);
    return 0;
}
