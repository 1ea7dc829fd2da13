/*
 * llamacpp_parity_record.c — what llama.cpp itself does on a GGUF file, for make_llamacpp_parity.py: per prompt,
 * its tokenization, its greedy continuation (with the top-1 / top-2 log-probs of each step) and, teacher-forced
 * over that continuation in one batch, the top-1 / top-2 ids and log-probs at every continuation position (the two
 * paths of llama.cpp itself differ a little: the batch takes other kernels). Built by make_llamacpp_parity.py against a local llama.cpp build
 * (libllama); never part of mnemo's build, never run in CI.
 *
 * usage: llamacpp_parity_record MODEL.gguf N_PREDICT THREADS < requests > records
 * A request is one line: "P <hex text>" (plain text, tokenized without parsing special tokens) or
 * "C <hex role> <hex content> [<hex role> <hex content>]..." (a conversation, rendered by llama.cpp's
 * llama_chat_apply_template with the file's tokenizer.chat_template and the assistant prefix, then tokenized with
 * special tokens parsed, as llama.cpp's chat does). One JSON object per request on stdout; the rendered text is
 * written as hex so no JSON escaping is needed here.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

#define MAX_TOKENS 4096
#define MAX_MSGS 16

static int hexval(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

/* Decodes the hex word at *p into a fresh NUL-terminated string and moves *p past it and one space. */
static char *unhex(char **p) {
    char *s = *p, *e = s;
    while (*e && *e != ' ' && *e != '\n') e++;
    size_t n = (size_t)(e - s) / 2;
    char *out = malloc(n + 1);
    for (size_t i = 0; i < n; i++) out[i] = (char)(hexval(s[2 * i]) * 16 + hexval(s[2 * i + 1]));
    out[n] = '\0';
    *p = *e == ' ' ? e + 1 : e;
    return out;
}

/* Top two ids of logits and their log-probs (log-softmax in double); lp_of gets the log-prob of token want. */
static void top2(const float *logits, int n_vocab, int want, int id[2], double lp[2], double *lp_of) {
    int a = 0, b = -1;
    double mx = logits[0];
    for (int i = 1; i < n_vocab; i++) {
        if (logits[i] > logits[a]) b = a, a = i;
        else if (b < 0 || logits[i] > logits[b]) b = i;
        if (logits[i] > mx) mx = logits[i];
    }
    double z = 0;
    for (int i = 0; i < n_vocab; i++) z += exp((double)logits[i] - mx);
    double lz = mx + log(z);
    id[0] = a, id[1] = b;
    lp[0] = logits[a] - lz, lp[1] = logits[b] - lz;
    *lp_of = logits[want] - lz;
}

static int argmax(const float *logits, int n_vocab) {
    int a = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > logits[a]) a = i;
    return a;
}

static void print_ids(const char *key, const llama_token *t, int n) {
    printf("\"%s\":[", key);
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", t[i]);
    printf("]");
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.gguf N_PREDICT THREADS < requests\n", argv[0]);
        return 2;
    }
    const int n_predict = atoi(argv[2]), threads = atoi(argv[3]);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024, cp.n_batch = 1024, cp.n_ubatch = 1024, cp.n_threads = threads, cp.n_threads_batch = threads;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return fprintf(stderr, "cannot make a context\n"), 1;
    const char *tmpl = llama_model_chat_template(model, NULL);

    static char line[1 << 20];
    static llama_token toks[MAX_TOKENS];
    while (fgets(line, sizeof line, stdin)) {
        char kind = line[0], *p = line + 2, *text;
        if (kind == 'P') {
            text = unhex(&p);
        } else {
            struct llama_chat_message msgs[MAX_MSGS];
            int n = 0;
            while (*p && *p != '\n' && n < MAX_MSGS) {
                msgs[n].role = unhex(&p);
                msgs[n].content = unhex(&p);
                n++;
            }
            int len = llama_chat_apply_template(tmpl, msgs, (size_t)n, true, NULL, 0);
            if (len < 0) return fprintf(stderr, "llama_chat_apply_template failed\n"), 1;
            text = malloc((size_t)len + 1);
            llama_chat_apply_template(tmpl, msgs, (size_t)n, true, text, len + 1);
            text[len] = '\0';
            for (int i = 0; i < n; i++) free((void *)msgs[i].role), free((void *)msgs[i].content);
        }
        int n_prompt = llama_tokenize(vocab, text, (int32_t)strlen(text), toks, MAX_TOKENS - n_predict, true,
                                      kind == 'C');
        if (n_prompt <= 0) return fprintf(stderr, "llama_tokenize failed (%d)\n", n_prompt), 1;

        /* greedy: the prompt in one batch, then one token at a time (as llama-simple does) */
        llama_memory_clear(llama_get_memory(ctx), true);
        if (llama_decode(ctx, llama_batch_get_one(toks, n_prompt))) return fprintf(stderr, "decode failed\n"), 1;
        int n_gen = 0;
        static double inc_lp[MAX_TOKENS][2]; /* top-1 / top-2 log-probs along the incremental path */
        while (n_gen < n_predict) {
            const float *lg = llama_get_logits_ith(ctx, -1);
            llama_token t = argmax(lg, n_vocab);
            int id[2];
            double lp_of;
            top2(lg, n_vocab, t, id, inc_lp[n_gen], &lp_of);
            toks[n_prompt + n_gen++] = t;
            if (llama_vocab_is_eog(vocab, t)) break;
            if (llama_decode(ctx, llama_batch_get_one(&toks[n_prompt + n_gen - 1], 1)))
                return fprintf(stderr, "decode failed\n"), 1;
        }

        /* teacher-forced: prompt + continuation as one batch, logits kept at every continuation position */
        llama_memory_clear(llama_get_memory(ctx), true);
        int n_all = n_prompt + n_gen;
        struct llama_batch b = llama_batch_init(n_all, 0, 1);
        for (int i = 0; i < n_all; i++) {
            b.token[i] = toks[i], b.pos[i] = i, b.n_seq_id[i] = 1, b.seq_id[i][0] = 0;
            b.logits[i] = i >= n_prompt - 1 && i < n_all - 1;
        }
        b.n_tokens = n_all;
        if (llama_decode(ctx, b)) return fprintf(stderr, "teacher-forced decode failed\n"), 1;

        printf("{\"text_hex\":\"");
        for (const char *c = text; *c; c++) printf("%02x", (unsigned char)*c);
        printf("\",");
        print_ids("prompt_ids", toks, n_prompt);
        printf(",");
        print_ids("greedy_ids", toks + n_prompt, n_gen);
        printf(",\"tf\":[");
        for (int i = 0; i < n_gen; i++) {
            int id[2];
            double lp[2], lp_of;
            top2(llama_get_logits_ith(ctx, n_prompt - 1 + i), n_vocab, toks[n_prompt + i], id, lp, &lp_of);
            printf("%s[%d,%.5f,%d,%.5f,%.5f]", i ? "," : "", id[0], lp[0], id[1], lp[1], lp_of);
        }
        printf("],\"inc\":[");
        for (int i = 0; i < n_gen; i++) printf("%s[%.5f,%.5f]", i ? "," : "", inc_lp[i][0], inc_lp[i][1]);
        printf("]}\n");
        fflush(stdout);
        llama_batch_free(b);
        free(text);
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
