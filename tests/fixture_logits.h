/*
 * fixture_logits.h — reads the logits files the reference scripts write (tests/reference/README.md):
 * "MNFXLGT1", u32 version 1, u32 n_prompts, then per prompt u32 n_tokens, u32 n_vocab and n_tokens x n_vocab floats.
 */
#ifndef MNEMO_FIXTURE_LOGITS_H
#define MNEMO_FIXTURE_LOGITS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t n_tokens, n_vocab;
    float *data;
} logit_block;

/* The number of prompts read (each block's data malloc'ed), or -1 on a missing or malformed file. */
static inline int read_logits(const char *path, logit_block *blocks, int max_blocks) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char magic[8];
    uint32_t ver = 0, n = 0;
    int ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, "MNFXLGT1", 8) && fread(&ver, 4, 1, f) == 1 && ver == 1 &&
             fread(&n, 4, 1, f) == 1 && n <= (uint32_t)max_blocks;
    for (uint32_t i = 0; ok && i < n; i++) {
        uint32_t nt, nv;
        ok = fread(&nt, 4, 1, f) == 1 && fread(&nv, 4, 1, f) == 1 && nt < 100000 && nv < 1000000;
        if (!ok) break;
        blocks[i].n_tokens = (int32_t)nt;
        blocks[i].n_vocab = (int32_t)nv;
        blocks[i].data = malloc((size_t)nt * nv * sizeof(float));
        ok = blocks[i].data && fread(blocks[i].data, sizeof(float), (size_t)nt * nv, f) == (size_t)nt * nv;
    }
    fclose(f);
    return ok ? (int)n : -1;
}

#endif
