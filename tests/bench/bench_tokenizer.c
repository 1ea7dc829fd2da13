/*
 * bench_tokenizer.c — tokenizer encode speed in MB/s on about 1 MB of mixed text (English prose, code, digits,
 * German, Russian, Chinese, emoji, whitespace runs, repeated with a counter so words vary).
 *
 *   build/tests/bench_tokenizer [--write-text FILE] MODEL [MODEL...]   (a GGUF file, vocabulary-only or not, or a
 *                                                                      checkpoint dir)
 * --write-text also writes the text to FILE, so another tokenizer can encode the same bytes (bench_vs_llamacpp.py).
 *
 * Each model is loaded vocabulary-only; the text is encoded 5 times and the best run is reported.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "engine_impl.h"
#include "tokenizer.h"

static const char *const PARTS[] = {
    "The quick brown fox jumps over the lazy dog; it's not what they'd expected, but we'll manage. ",
    "def tokenize(text):\n    return [vocab[w] for w in text.split()]  # TODO: handle unknown words\n\n",
    "In 2024, 1234567 people paid $3.50 each (total 4,320,984.50). ",
    "Der schnelle braune Fuchs springt über den faulen Hund. ",
    "Быстрая коричневая лиса прыгает через ленивую собаку. ",
    "敏捷的棕色狐狸跳过了懒狗。",
    "🦙 llamas 👍🏽 and emoji. ",
    "    indented\t\ttabs   and   spaces\r\n",
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    const char *write_text = NULL;
    int first = 1;
    if (argc > 2 && !strcmp(argv[1], "--write-text")) write_text = argv[2], first = 3;
    if (argc <= first) {
        fprintf(stderr, "usage: %s [--write-text FILE] MODEL [MODEL...]\n", argv[0]);
        return 2;
    }
    mnemo_log_set_level(MNEMO_LOG_WARN);
    size_t cap = (1 << 20) + 4096, len = 0;
    char *text = malloc(cap);
    for (unsigned k = 0; len < (1 << 20); k++) {
        const char *p = PARTS[k % (sizeof PARTS / sizeof PARTS[0])];
        len += (size_t)snprintf(text + len, cap - len, "%s%u ", p, k);
    }
    if (write_text) {
        FILE *f = fopen(write_text, "wb");
        if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "cannot write %s\n", write_text);
            return 1;
        }
    }
    for (int a = first; a < argc; a++) {
        mnemo_model_params p = mnemo_model_default_params();
        p.vocab_only = true;
        mnemo_model *m = NULL;
        if (mnemo_model_load(argv[a], &p, &m) != MNEMO_OK) {
            fprintf(stderr, "%s: %s\n", argv[a], mnemo_model_error(m));
            mnemo_model_free(m);
            continue;
        }
        double best = 1e9;
        size_t n = 0;
        for (int r = 0; r < 5; r++) {
            int32_t *ids;
            double t0 = now();
            if (tokenizer_encode(m->tok, text, len, false, &ids, &n) != 0) return 1;
            double t = now() - t0;
            if (t < best) best = t;
            free(ids);
        }
        printf("%s: %zu bytes -> %zu tokens, %.2f ms, %.2f MB/s\n", argv[a], len, n, best * 1e3,
               (double)len / best / 1e6);
        mnemo_model_free(m);
    }
    free(text);
    return 0;
}
