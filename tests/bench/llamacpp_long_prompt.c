/*
 * llamacpp_long_prompt.c — llama.cpp's time to first token and per-token decode on one long prompt, for the
 * long-context speed table (docs/long-context.md): the prompt file is tokenized by llama.cpp, decoded with n_ctx set
 * to the prompt plus the answer (linear RoPE scaling n_ctx / the trained context when the prompt is longer, as
 * `llama-cli --rope-scaling linear` does; the arithmetic is the same either way), then N tokens are generated
 * greedily one at a time. Built against a local llama.cpp build (libllama); never part of mnemo's build or CI.
 *
 *   cc -O2 tests/bench/llamacpp_long_prompt.c -I LLAMA/include -I LLAMA/ggml/include -L BIN -lllama -o lcp_long
 *   LD_LIBRARY_PATH=BIN ./lcp_long MODEL.gguf PROMPT.txt N_GEN THREADS
 *
 * Prints one JSON line: prompt tokens, n_ctx, prefill seconds (= time to first token: the first token's logits
 * come with the prefill), decode ms per token, and the rope scale used. Peak RSS: run it under /usr/bin/time -v.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 5) return fprintf(stderr, "usage: %s MODEL.gguf PROMPT.txt N_GEN THREADS\n", argv[0]), 2;
    int n_gen = atoi(argv[3]), threads = atoi(argv[4]);
    FILE *f = fopen(argv[2], "rb");
    if (!f) return fprintf(stderr, "cannot open %s\n", argv[2]), 1;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    if (fread(text, 1, (size_t)len, f) != (size_t)len) return fprintf(stderr, "short read\n"), 1;
    text[len] = '\0';
    fclose(f);

    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int cap = (int)len + 16;
    llama_token *toks = malloc((size_t)(cap + n_gen) * sizeof *toks);
    int n = llama_tokenize(vocab, text, (int)len, toks, cap, true, false);
    if (n < 0) return fprintf(stderr, "tokenize failed\n"), 1;

    int train_ctx = llama_model_n_ctx_train(model);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n + n_gen);
    cp.n_batch = 2048, cp.n_ubatch = 512, cp.n_threads = threads, cp.n_threads_batch = threads;
    float scale = 1.0f;
    if ((int)cp.n_ctx > train_ctx) { /* position interpolation to the length */
        scale = (float)cp.n_ctx / (float)train_ctx;
        cp.rope_scaling_type = LLAMA_ROPE_SCALING_TYPE_LINEAR;
        cp.rope_freq_scale = 1.0f / scale;
    }
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return fprintf(stderr, "cannot create a context of %u\n", cp.n_ctx), 1;

    double t0 = now_s();
    for (int at = 0; at < n; at += (int)cp.n_batch) {
        int m = n - at < (int)cp.n_batch ? n - at : (int)cp.n_batch;
        if (llama_decode(ctx, llama_batch_get_one(toks + at, m))) return fprintf(stderr, "prefill failed\n"), 1;
    }
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const float *lg = llama_get_logits_ith(ctx, -1);
    double t1 = now_s();
    for (int i = 0; i < n_gen; i++) {
        int best = 0;
        for (int v = 1; v < n_vocab; v++)
            if (lg[v] > lg[best]) best = v;
        toks[n + i] = best;
        if (llama_decode(ctx, llama_batch_get_one(&toks[n + i], 1))) return fprintf(stderr, "decode failed\n"), 1;
        lg = llama_get_logits_ith(ctx, -1);
    }
    double t2 = now_s();
    printf("{\"engine\":\"llama.cpp\",\"prompt_tokens\":%d,\"n_ctx\":%u,\"rope_scale\":%.3f,\"threads\":%d,"
           "\"prefill_s\":%.3f,\"decode_ms_per_token\":%.2f,\"n_gen\":%d}\n",
           n, cp.n_ctx, scale, threads, t1 - t0, 1e3 * (t2 - t1) / n_gen, n_gen);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(toks);
    free(text);
    return 0;
}
