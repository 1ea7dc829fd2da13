/* cli_eval_common.c — see cli_eval_common.h. */
#include "cli_eval_common.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "cli_log.h"
#include "cli_memory.h"
#include "cli_text_file.h"

void cli_eval_init(cli_eval_task *e, const char *cmd) {
    memset(e, 0, sizeof *e);
    e->cmd = cmd;
    e->cp = mnemo_context_default_params();
}

int cli_eval_option(cli_eval_task *e, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    int mem = cli_memory_option(e->cmd, argc, argv, i, &e->cp);
    if (mem) return mem;
#define VALUE() if (!(v = cli_value(e->cmd, argc, argv, i))) return -1
    if (!strcmp(a, "--model")) { VALUE(); e->model_dir = v; }
    else if (!strcmp(a, "--uio")) { VALUE(); e->uio_dir = v; }
    else if (!strcmp(a, "--threads")) { VALUE(); if (!cli_int(e->cmd, a, v, 1, 1024, &e->threads)) return -1; }
    else if (!strcmp(a, "--chunk")) { VALUE(); if (!cli_int(e->cmd, a, v, 1, 1 << 20, &e->chunk)) return -1; }
    else if (!strcmp(a, "--last-context-length")) { VALUE(); if (!cli_int(e->cmd, a, v, 1, 1 << 24, &e->lcl)) return -1; }
    else if (!strcmp(a, "--json")) e->json = true;
    else if (!strcmp(a, "--progress")) e->progress = true;
    else return 0;
#undef VALUE
    return 1;
}

void cli_eval_usage(FILE *f) {
    fprintf(f,
            "  --model DIR          checkpoint directory (default: $MNEMO_MODEL, else SmolLM2-135M-Instruct)\n"
            "  --uio DIR            UIO weights over the model (compressed memory; see 'mnemo generate --help')\n"
            "  --chunk N            tokens per decode call (default: 512 or the context, if shorter); a LongLLaMA\n"
            "                       model moves each full window to memory, a UIO model compresses each segment\n"
            "  --last-context-length N  LongLLaMA: tokens kept local (default: config.json's)\n"
            "  --threads N          CPU threads (default: all cores)\n"
            "  --json               one JSON object per line (\"eval\": task); plot: scripts/plot_eval.py\n"
            "  --progress           progress bar on stderr even when it is not a terminal\n");
    cli_memory_usage(f, 23);
    fprintf(f, "\n%s\n", cli_default_model_help());
}

static void on_progress(eval_scorer *s, int64_t done) {
    cli_eval_task *e = s->user;
    if (e->bar_on) cli_progress_report(done < e->total_tokens ? done : e->total_tokens, e->total_tokens, &e->bar);
}

bool cli_eval_open(cli_eval_task *e) {
    cli_log_init(false);
    const char *dir = e->model_dir ? e->model_dir : cli_default_model(e->cmd);
    if (!dir) return false;
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = e->threads;
    mp.uio_dir = e->uio_dir;
    if (mnemo_model_load(dir, &mp, &e->model) != MNEMO_OK) {
        fprintf(stderr, "mnemo %s: cannot load model: %s\n", e->cmd, mnemo_model_error(e->model));
        return false;
    }
    e->cp.logits_all = true;
    if (mnemo_context_new(e->model, &e->cp, &e->ctx) != MNEMO_OK ||
        (e->lcl && mnemo_context_set_last_context_length(e->ctx, e->lcl) != MNEMO_OK)) {
        fprintf(stderr, "mnemo %s: %s\n", e->cmd, mnemo_context_error(e->ctx));
        return false;
    }
    int32_t n_ctx = mnemo_context_n_ctx(e->ctx), chunk = e->chunk ? e->chunk : (n_ctx < 512 ? n_ctx : 512);
    if (e->lcl && chunk > e->lcl) chunk = e->lcl;
    eval_engine_scorer_init(&e->scorer, e->model, e->ctx, chunk);
    e->scorer.unbounded = e->cp.memory == MNEMO_MEMORY_RETRIEVAL; /* past sinks + window: memory, never a cut */
    e->scorer.base.progress = on_progress;
    e->scorer.base.user = e;
    return true;
}

void cli_eval_progress_start(cli_eval_task *e, int64_t total) {
    e->total_tokens = total;
    e->scorer.done = 0;
    e->bar = (cli_progress){.label = "eval"};
    e->bar_on = total > 0 && cli_progress_wanted(e->progress);
}

void cli_eval_close(cli_eval_task *e) {
    mnemo_context_free(e->ctx);
    mnemo_model_free(e->model);
    e->ctx = NULL;
    e->model = NULL;
}

int cli_eval_int_list(const char *cmd, const char *flag, const char *s, int32_t min, int32_t max, int32_t *out) {
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    if (!copy) return -1;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == CLI_EVAL_MAX_LIST) {
            fprintf(stderr, "mnemo %s: %s takes at most %d values\n", cmd, flag, CLI_EVAL_MAX_LIST);
            free(copy);
            return -1;
        }
        char *end;
        double v = strtod(t, &end);
        /* 16K, 1M: the suffixes the papers write lengths with */
        if (end != t && (*end == 'K' || *end == 'k')) v *= 1024, end++;
        else if (end != t && (*end == 'M' || *end == 'm')) v *= 1024 * 1024, end++;
        if (end == t || *end != '\0' || v != (double)(int64_t)v || v < min || v > max) {
            fprintf(stderr, "mnemo %s: %s expects comma-separated integers in [%d, %d] (16K, 1M allowed), got '%s'\n",
                    cmd, flag, min, max, s);
            free(copy);
            return -1;
        }
        out[n++] = (int32_t)v;
    }
    free(copy);
    if (n == 0) fprintf(stderr, "mnemo %s: %s expects a list, got '%s'\n", cmd, flag, s);
    return n ? n : -1;
}

bool cli_eval_has_memory(const cli_eval_task *e) {
    mnemo_uio_info uio;
    return e->cp.memory == MNEMO_MEMORY_RETRIEVAL || mnemo_model_has_memory(e->model) ||
           mnemo_model_uio(e->model, &uio) == MNEMO_OK;
}

void cli_eval_print_json(json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    if (s) puts(s);
    fflush(stdout); /* a long run's rows can be read as they finish */
    free(s);
    json_decref(o);
    fflush(stdout);
}

int32_t *cli_eval_read_tokens(cli_eval_task *e, const char *path, bool bos, int64_t max_tokens, int64_t *n) {
    size_t len = 0;
    char *text = cli_read_text(e->cmd, path, &len);
    if (!text) return NULL;
    int32_t count = 0;
    mnemo_tokenize(e->model, text, len, bos, NULL, 0, &count);
    int32_t *ids = count > 0 ? malloc((size_t)count * sizeof *ids) : NULL;
    if (!ids || mnemo_tokenize(e->model, text, len, bos, ids, count, &count) != MNEMO_OK) {
        fprintf(stderr, "mnemo %s: %s: %s\n", e->cmd, path, count > 0 ? "cannot tokenize it" : "no text in it");
        free(ids);
        free(text);
        return NULL;
    }
    free(text);
    *n = max_tokens > 0 && count > max_tokens ? max_tokens : count;
    return ids;
}
