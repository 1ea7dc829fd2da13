/*
 * cli_eval_forgetting.c — `mnemo eval forgetting-curve` (the Forgetting Curve paper §3; the inputs and
 * lengths are defined in eval_tasks.h): for each test length, --samples pairs of a copy input [bos]S[bos]S and a
 * language-model input [bos]I[bos]S drawn from one text, teacher-forced accuracy on the second half of the second
 * S; mean and standard deviation per length, then the fine and coarse memory lengths.
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
            "usage: mnemo eval forgetting-curve --data FILE [options]\n\n"
            "  --data FILE          real text the copy targets and irrelevant prefixes come from (- = stdin); it\n"
            "                       needs at least the longest length in tokens\n"
            "  --lengths L,L,...    test lengths in tokens (whole input, both BOS included; 4K and 1M allowed)\n"
            "  --max-length L       instead: --points lengths L/n, 2L/n, ..., L (default L: the context's n_ctx;\n"
            "                       8 windows for a LongLLaMA model, 8 segments' worth of positions for UIO)\n"
            "  --points N           (default 8)\n"
            "  --samples N          copy targets per length (default 10, as the paper)\n"
            "  --seed S             which spans are drawn (default 1)\n");
    cli_eval_usage(f);
}

static void mean_std(const double *x, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

/* Accuracy of one input (copy or LM) of length L whose first part starts at first and S at s. */
static bool one_input(cli_eval_task *e, const int32_t *text, int64_t first, int64_t s, int32_t L, int32_t *buf,
                      uint8_t *correct, double *acc) {
    char err[512];
    int32_t from = eval_fc_input(text, first, s, L, mnemo_model_bos(e->model), buf);
    int32_t to = 2 + 2 * eval_fc_span(L) - 1; /* the prediction of the second S's last token */
    if (!e->scorer.base.score(&e->scorer.base, buf, L, from, to, correct, NULL, err, sizeof err)) {
        fprintf(stderr, "mnemo %s: %d-token input: %s\n", e->cmd, L, err);
        return false;
    }
    int hits = 0;
    for (int32_t t = 0; t < to - from; t++) hits += correct[t];
    *acc = (double)hits / (double)(to - from);
    return true;
}

int cli_eval_forgetting(int argc, char **argv) {
    cli_eval_task e;
    cli_eval_init(&e, "eval forgetting-curve");
    const char *data = NULL, *v;
    int32_t lengths[CLI_EVAL_MAX_LIST], n_len = 0, max_length = 0, points = 8, samples = 10;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int common = cli_eval_option(&e, argc, argv, &i);
        if (common < 0) return 2;
        if (common) continue;
#define VALUE() if (!(v = cli_value(e.cmd, argc, argv, &i))) return 2
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--data")) { VALUE(); data = v; }
        else if (!strcmp(a, "--lengths")) {
            VALUE();
            if ((n_len = cli_eval_int_list(e.cmd, a, v, 8, 1 << 26, lengths)) < 0) return 2;
        }
        else if (!strcmp(a, "--max-length")) { VALUE(); if (!cli_int(e.cmd, a, v, 8, 1 << 26, &max_length)) return 2; }
        else if (!strcmp(a, "--points")) { VALUE(); if (!cli_int(e.cmd, a, v, 1, CLI_EVAL_MAX_LIST, &points)) return 2; }
        else if (!strcmp(a, "--samples")) { VALUE(); if (!cli_int(e.cmd, a, v, 1, 10000, &samples)) return 2; }
        else if (!strcmp(a, "--seed")) { VALUE(); if (!cli_u64(e.cmd, a, v, &seed)) return 2; }
        else { fprintf(stderr, "mnemo %s: unknown option '%s' (try --help)\n", e.cmd, a); return 2; }
#undef VALUE
    }
    if (!data) {
        fprintf(stderr, "mnemo %s: --data FILE is required (real text for the copy targets)\n", e.cmd);
        return 2;
    }
    if (n_len && max_length) {
        fprintf(stderr, "mnemo %s: give --lengths or --max-length, not both\n", e.cmd);
        return 2;
    }
    int rc = 1;
    int32_t *text = NULL, *buf = NULL;
    uint8_t *correct = NULL;
    double *copy_runs = NULL, *lm_runs = NULL;
    double copy_mean[CLI_EVAL_MAX_LIST], lm_mean[CLI_EVAL_MAX_LIST];
    if (!cli_eval_open(&e)) goto out;
    if (!n_len) {
        if (!max_length) {
            mnemo_uio_info uio;
            max_length = mnemo_context_n_ctx(e.ctx);
            if (mnemo_model_has_memory(e.model)) max_length *= 8;
            else if (mnemo_model_uio(e.model, &uio) == MNEMO_OK) max_length = 8 * uio.chunk_size;
        }
        for (int32_t p = 1; p <= points; p++) lengths[n_len++] = (int32_t)((int64_t)max_length * p / points);
    }
    int32_t longest = 0;
    for (int i = 0; i < n_len; i++) {
        if (lengths[i] < 8) {
            fprintf(stderr, "mnemo %s: a test length must be at least 8 tokens (got %d)\n", e.cmd, lengths[i]);
            rc = 2;
            goto out;
        }
        if (i && lengths[i] <= lengths[i - 1]) {
            fprintf(stderr, "mnemo %s: --lengths must increase (%d after %d)\n", e.cmd, lengths[i], lengths[i - 1]);
            rc = 2;
            goto out;
        }
        if (lengths[i] > longest) longest = lengths[i];
    }
    int64_t n_text = 0;
    if (!(text = cli_eval_read_tokens(&e, data, false, 0, &n_text))) goto out;
    if (n_text < 2 * (int64_t)eval_fc_span(longest)) {
        fprintf(stderr, "mnemo %s: %s has %lld tokens; a %d-token test needs two disjoint spans of %d\n", e.cmd, data,
                (long long)n_text, longest, eval_fc_span(longest));
        goto out;
    }
    buf = malloc((size_t)longest * sizeof *buf);
    correct = malloc((size_t)longest);
    copy_runs = malloc((size_t)samples * sizeof *copy_runs);
    lm_runs = malloc((size_t)samples * sizeof *lm_runs);
    if (!buf || !correct || !copy_runs || !lm_runs) {
        fprintf(stderr, "mnemo %s: out of memory\n", e.cmd);
        goto out;
    }
    int64_t total = 0;
    for (int i = 0; i < n_len; i++) total += 2 * (int64_t)samples * lengths[i];
    cli_eval_progress_start(&e, total);
    eval_rng rng;
    eval_rng_seed(&rng, seed);
    if (!e.json) printf("%10s %8s %16s %16s\n", "length", "samples", "copy accuracy", "LM accuracy");
    for (int i = 0; i < n_len; i++) {
        int32_t L = lengths[i];
        e.scorer.truncated = false;
        for (int k = 0; k < samples; k++) {
            int64_t s, irr;
            eval_fc_pick(&rng, n_text, eval_fc_span(L), &s, &irr);
            if (!one_input(&e, text, s, s, L, buf, correct, &copy_runs[k]) ||
                !one_input(&e, text, irr, s, L, buf, correct, &lm_runs[k]))
                goto out;
        }
        double copy_sd, lm_sd;
        mean_std(copy_runs, samples, &copy_mean[i], &copy_sd);
        mean_std(lm_runs, samples, &lm_mean[i], &lm_sd);
        if (e.json)
            cli_eval_print_json(json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:b}", "eval", "forgetting-curve",
                                          "length", L, "samples", samples, "copy", copy_mean[i], "copy_std", copy_sd,
                                          "lm", lm_mean[i], "lm_std", lm_sd, "truncated", e.scorer.truncated));
        else
            printf("%10d %8d %8.2f%% ±%5.2f %8.2f%% ±%5.2f%s\n", L, samples, 100 * copy_mean[i], 100 * copy_sd,
                   100 * lm_mean[i], 100 * lm_sd, e.scorer.truncated ? "  (longer than the model sees)" : "");
    }
    eval_fc_lengths ml = eval_fc_memory_lengths(lengths, copy_mean, lm_mean, n_len);
    if (e.json) {
        cli_eval_print_json(json_pack("{s:s, s:i, s:b, s:i, s:b}", "eval", "forgetting-curve", "fine_length",
                                      ml.fine, "fine_beyond", ml.fine_beyond, "coarse_length", ml.coarse,
                                      "coarse_beyond", ml.coarse_beyond));
    } else {
        printf("fine-grained memory length (copy >= 99%%): %s%d\n", ml.fine_beyond ? ">=" : "", ml.fine);
        printf("coarse-grained memory length (copy > LM + 1%%): %s%d\n", ml.coarse_beyond ? ">=" : "", ml.coarse);
    }
    rc = 0;
out:
    free(text);
    free(buf);
    free(correct);
    free(copy_runs);
    free(lm_runs);
    cli_eval_close(&e);
    return rc;
}
