/*
 * llamacpp_tokenize_speed.c — llama.cpp's tokenizer encode speed on a text file, printed in bench_tokenizer's
 * format so bench_vs_llamacpp.py reads both alike: the model loaded vocabulary-only, the whole file encoded by
 * llama_tokenize (no BOS, special tokens not parsed: what bench_tokenizer asks of mnemo) 5 times, the best run.
 * Built by bench_vs_llamacpp.py against its local llama.cpp build (libllama); not part of mnemo's build.
 *
 * usage: llamacpp_tokenize_speed MODEL.gguf TEXT_FILE
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "llama.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void quiet(enum ggml_log_level level, const char *text, void *user) { (void)level, (void)text, (void)user; }

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf TEXT_FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) return fprintf(stderr, "cannot open %s\n", argv[2]), 1;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) return fprintf(stderr, "cannot read %s\n", argv[2]), 1;
    fclose(f);
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int32_t cap = (int32_t)len + 16, n = 0;
    llama_token *ids = malloc(sizeof *ids * (size_t)cap);
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        n = llama_tokenize(vocab, text, (int32_t)len, ids, cap, false, false);
        double t = now() - t0;
        if (n < 0) return fprintf(stderr, "llama_tokenize failed (%d)\n", n), 1;
        if (t < best) best = t;
    }
    printf("%s: %ld bytes -> %d tokens, %.2f ms, %.2f MB/s\n", argv[1], len, n, best * 1e3, (double)len / best / 1e6);
    free(ids);
    free(text);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
