/*
 * cli_eval.c — `mnemo eval <task>`: what a model remembers, measured. Tasks: perplexity,
 * forgetting-curve, dict-lookup (their arithmetic in clients/eval/eval_tasks.h) and passkey (cli_passkey.c).
 * Every task prints a table, or with --json one JSON object per line, each with "eval": "<task>", which
 * scripts/plot_eval.py draws as a PNG. The options every task shares are parsed here (cli_eval_common.h).
 */
#include <stdio.h>
#include <string.h>

#include "cli_eval_common.h"

int cli_passkey(int argc, char **argv);
int cli_eval_perplexity(int argc, char **argv);
int cli_eval_forgetting(int argc, char **argv);
int cli_eval_dict(int argc, char **argv);

static void usage(FILE *f) {
    fprintf(f,
            "usage: mnemo eval <task> [options]\n\n"
            "tasks:\n"
            "  perplexity        sliding-window perplexity of a text; a model with memory reads the whole earlier\n"
            "                    text into it\n"
            "  forgetting-curve  copy accuracy against language-model accuracy by length (Liu et al. 2024): the fine\n"
            "                    (>= 99%% copied) and coarse (copy > LM + 1%%) memory lengths\n"
            "  dict-lookup       FoT's dictionary lookup (Appendix F): value accuracy against dictionary length\n"
            "  passkey           passkey retrieval accuracy by prompt length (the same as 'mnemo passkey')\n\n"
            "Run 'mnemo eval <task> --help' for its options; --json output is drawn by\n"
            "  scripts/plot_eval.py RESULTS.jsonl -o PLOT.png\n");
}

int cli_eval(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *task = argv[1];
    if (!strcmp(task, "perplexity")) return cli_eval_perplexity(argc - 1, argv + 1);
    if (!strcmp(task, "forgetting-curve")) return cli_eval_forgetting(argc - 1, argv + 1);
    if (!strcmp(task, "dict-lookup")) return cli_eval_dict(argc - 1, argv + 1);
    if (!strcmp(task, "passkey")) return cli_passkey(argc - 1, argv + 1);
    if (!strcmp(task, "--help") || !strcmp(task, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "mnemo eval: unknown task '%s' (perplexity, forgetting-curve, dict-lookup, passkey)\n", task);
    return 2;
}
