/* cli_eval_common.h — what every `mnemo eval` task shares: the model options, loading the model and a
 * teacher-forcing context, the progress bar, and lists of lengths. */
#ifndef MNEMO_CLI_EVAL_COMMON_H
#define MNEMO_CLI_EVAL_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli_progress.h"
#include "engine.h"
#include "eval_scorer.h"

#define CLI_EVAL_MAX_LIST 64

typedef struct {
    const char *cmd;        /* "eval perplexity": in messages */
    const char *model_dir;  /* --model (NULL: the default model) */
    const char *uio_dir;    /* --uio */
    int32_t threads;        /* --threads */
    int32_t chunk;          /* --chunk: tokens per decode call (0: min(512, the context's n_ctx)) */
    int32_t lcl;            /* --last-context-length (LongLLaMA) */
    mnemo_context_params cp;
    bool json, progress;
    /* set up by cli_eval_open */
    mnemo_model *model;
    mnemo_context *ctx;
    eval_engine_scorer scorer;
    cli_progress bar;
    bool bar_on;
    int64_t total_tokens;   /* the whole run's tokens, for the bar */
} cli_eval_task;

void cli_eval_init(cli_eval_task *e, const char *cmd);
/* 1: argv[*i] was a shared option (consumed, *i past its value); 0: not one; -1: bad value (message printed). */
int cli_eval_option(cli_eval_task *e, int argc, char **argv, int *i);
/* The shared options' --help lines. */
void cli_eval_usage(FILE *f);
/* Loads the model and a logits_all context; false after a message. */
bool cli_eval_open(cli_eval_task *e);
/* Starts the progress bar for a run of total tokens through the model (drawn on a terminal or with --progress). */
void cli_eval_progress_start(cli_eval_task *e, int64_t total);
void cli_eval_close(cli_eval_task *e);
/* "L,L,..." into ints in [min, max]; the count, or -1 after a message. */
int cli_eval_int_list(const char *cmd, const char *flag, const char *s, int32_t min, int32_t max, int32_t *out);
/* The token ids of a text file (- = stdin), with BOS first when bos; at most max_tokens (0: all). malloc'ed; NULL
 * after a message. */
int32_t *cli_eval_read_tokens(cli_eval_task *e, const char *path, bool bos, int64_t max_tokens, int64_t *n);
/* Whether the model reads past its context: LongLLaMA memory layers or UIO compression. */
bool cli_eval_has_memory(const cli_eval_task *e);
/* Prints a JSON object (stolen) as one line. */
struct json_t;
void cli_eval_print_json(struct json_t *o);

#endif
