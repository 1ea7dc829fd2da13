/*
 * cli_eval_perplexity.c — `mnemo eval perplexity`: the perplexity of a text (exp of the mean negative log-likelihood
 * of every token after the first) and the next-token accuracy.
 *   windows (any model; the default without memory): windows of W tokens moving by S, each read from an empty
 *     state with BOS first and scoring only the S tokens it adds (eval_tasks.h eval_ppl_window);
 *   memory (the default for LongLLaMA and UIO models): the whole text read once, in chunks, so every token is
 *     predicted with all of the earlier text in memory. --memory off scores the same model in windows, so the two
 *     figures say what the memory buys.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "cli_eval_common.h"
#include "eval_tasks.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mnemo eval perplexity --data FILE [options]\n\n"
            "  --data FILE          the text (- = standard input)\n"
            "  --max-tokens N       score at most the first N tokens (default: all)\n"
            "  --memory on|off      a model with memory: read the whole earlier text into it (on, default), or\n"
            "                       score in windows like a model without memory (off)\n"
            "  --window W           tokens a window holds (default: the context's n_ctx)\n"
            "  --stride S           tokens each window adds and scores (default: W / 2)\n");
    cli_eval_usage(f);
}

int cli_eval_perplexity(int argc, char **argv) {
    cli_eval_task e;
    cli_eval_init(&e, "eval perplexity");
    const char *data = NULL, *v;
    int32_t window = 0, stride = 0;
    uint64_t max_tokens = 0;
    int memory = -1; /* -1: the model decides */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int common = cli_eval_option(&e, argc, argv, &i);
        if (common < 0) return 2;
        if (common) continue;
#define VALUE() if (!(v = cli_value(e.cmd, argc, argv, &i))) return 2
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--data")) { VALUE(); data = v; }
        else if (!strcmp(a, "--max-tokens")) { VALUE(); if (!cli_u64(e.cmd, a, v, &max_tokens)) return 2; }
        else if (!strcmp(a, "--window")) { VALUE(); if (!cli_int(e.cmd, a, v, 2, 1 << 24, &window)) return 2; }
        else if (!strcmp(a, "--stride")) { VALUE(); if (!cli_int(e.cmd, a, v, 1, 1 << 24, &stride)) return 2; }
        else if (!strcmp(a, "--memory")) {
            VALUE();
            if (strcmp(v, "on") && strcmp(v, "off")) {
                fprintf(stderr, "mnemo %s: --memory expects on or off, got '%s'\n", e.cmd, v);
                return 2;
            }
            memory = !strcmp(v, "on");
        }
        else { fprintf(stderr, "mnemo %s: unknown option '%s' (try --help)\n", e.cmd, a); return 2; }
#undef VALUE
    }
    if (!data) {
        fprintf(stderr, "mnemo %s: --data FILE is required (the text to score)\n", e.cmd);
        return 2;
    }
    int rc = 1;
    int32_t *ids = NULL;
    uint8_t *correct = NULL;
    double *logprob = NULL;
    if (!cli_eval_open(&e)) goto out;
    bool has_memory = cli_eval_has_memory(&e);
    if (memory == 1 && !has_memory) {
        fprintf(stderr, "mnemo %s: --memory on needs a model with memory (LongLLaMA memory layers or --uio)\n", e.cmd);
        rc = 2;
        goto out;
    }
    bool use_memory = memory < 0 ? has_memory : memory == 1;
    int32_t n_ctx = mnemo_context_n_ctx(e.ctx);
    if (!window) window = n_ctx;
    if (!stride) stride = window / 2 > 0 ? window / 2 : 1;
    if (!use_memory && window > n_ctx && !has_memory) {
        fprintf(stderr, "mnemo %s: --window %d is longer than the model's context (%d tokens)\n", e.cmd, window, n_ctx);
        rc = 2;
        goto out;
    }
    if (stride > window - 1) {
        fprintf(stderr, "mnemo %s: --stride %d must be below --window %d (a window re-reads BOS first)\n", e.cmd,
                stride, window);
        rc = 2;
        goto out;
    }
    int64_t n = 0;
    if (!(ids = cli_eval_read_tokens(&e, data, true, (int64_t)max_tokens, &n))) goto out;
    if (n < 2) {
        fprintf(stderr, "mnemo %s: %s has fewer than 1 token to score\n", e.cmd, data);
        goto out;
    }
    correct = malloc((size_t)n);
    logprob = malloc((size_t)n * sizeof *logprob);
    if (!correct || !logprob) {
        fprintf(stderr, "mnemo %s: out of memory for %lld tokens\n", e.cmd, (long long)n);
        goto out;
    }
    char err[512];
    int64_t scored = 0, hits = 0;
    double nll = 0;
    if (use_memory) {
        cli_eval_progress_start(&e, n);
        if (!e.scorer.base.score(&e.scorer.base, ids, n, 0, n - 1, correct, logprob, err, sizeof err)) {
            fprintf(stderr, "mnemo %s: %s\n", e.cmd, err);
            goto out;
        }
        for (int64_t t = 0; t < n - 1; t++) hits += correct[t], nll -= logprob[t];
        scored = n - 1;
    } else {
        int64_t total = 0;
        eval_window w;
        for (int64_t i = 0; eval_ppl_window(n, window, stride, i, &w); i++) total += w.end - w.start + (w.start > 0);
        cli_eval_progress_start(&e, total);
        int32_t *buf = malloc((size_t)window * sizeof *buf);
        if (!buf) goto out;
        for (int64_t i = 0; eval_ppl_window(n, window, stride, i, &w); i++) {
            /* BOS + the window's text; the last w.scored predictions count */
            int64_t len = 0;
            if (w.start > 0) buf[len++] = ids[0];
            memcpy(buf + len, ids + w.start, (size_t)(w.end - w.start) * sizeof *buf);
            len += w.end - w.start;
            if (!e.scorer.base.score(&e.scorer.base, buf, len, len - 1 - w.scored, len - 1, correct, logprob, err,
                                     sizeof err)) {
                fprintf(stderr, "mnemo %s: %s\n", e.cmd, err);
                free(buf);
                goto out;
            }
            for (int64_t t = 0; t < w.scored; t++) hits += correct[t], nll -= logprob[t];
            scored += w.scored;
        }
        free(buf);
    }
    double ppl = exp(nll / (double)scored), acc = (double)hits / (double)scored;
    if (e.json) {
        cli_eval_print_json(json_pack("{s:s, s:I, s:f, s:f, s:f, s:b, s:i, s:i}", "eval", "perplexity", "tokens",
                                      (json_int_t)scored, "perplexity", ppl, "nll_per_token", nll / (double)scored,
                                      "accuracy", acc, "memory", use_memory, "window", use_memory ? 0 : window,
                                      "stride", use_memory ? 0 : stride));
    } else {
        if (use_memory) printf("scored %lld tokens with the whole earlier text in memory\n", (long long)scored);
        else printf("scored %lld tokens in windows of %d moving by %d\n", (long long)scored, window, stride);
        printf("perplexity %.4f  (nll %.4f nats/token)  next-token accuracy %.2f%%\n", ppl, nll / (double)scored,
               100.0 * acc);
    }
    rc = 0;
out:
    free(ids);
    free(correct);
    free(logprob);
    cli_eval_close(&e);
    return rc;
}
