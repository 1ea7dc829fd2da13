/*
 * cli_passkey.c — `mnemo passkey`: the passkey retrieval test of Mohtashami & Jaggi as FoT/LongLLaMA and LongLoRA
 * run it. A random 5-digit key hides at a chosen depth in filler text of a chosen token length; the model is
 * asked for it and answers greedily. Prints accuracy per length (and per depth with --verbose / --json).
 *
 * Prompt (token counts include it all):
 *   "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will quiz
 *    you about the important information there.\n" + filler... + "The pass key is N. Remember it. N is the pass
 *    key.\n" + filler... + "What is the pass key? The pass key is"
 * The filler repeats one built-in line, or is a text of the user's (--file) laid down line by line (cli_haystack.h).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_args.h"
#include "cli_memory.h"
#include "cli_haystack.h"
#include "cli_log.h"
#include "cli_progress.h"
#include "cli_text_file.h"
#include "engine.h"

#define MAX_LIST 64
#define ANSWER_TOKENS 8

static const char *HEAD = "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
                          "them. I will quiz you about the important information there.\n";
static const char *FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back "
                            "again.\n";
static const char *QUESTION = "What is the pass key? The pass key is";

static void usage(FILE *f) {
    fprintf(f,
            "usage: mnemo passkey [--model DIR] [options]\n\n"
            "  --model DIR          checkpoint directory or GGUF file (default: $MNEMO_MODEL, else SmolLM2-135M-Instruct)\n"
            "  --lengths L,L,...    prompt lengths in tokens (default 4096,8192,16384,32768 on a model with memory\n"
            "                       layers; else 1/4, 1/2, 3/4 and all of the model's context, less the answer)\n"
            "  --depths D,D,...     key depth as a fraction of the filler, 0..1 (default 0,0.25,0.5,0.75,1)\n"
            "  --trials N           random keys per (length, depth) (default 2)\n"
            "  --seed S             key generator seed (default 1)\n"
            "  -f, --file FILE      filler text (- = standard input) instead of the built-in line, taken line by\n"
            "                       line and from its start again when it runs out\n"
            "  --last-context-length N  LongLLaMA: tokens kept local (default: config.json's)\n"
            "  --uio DIR            a UIO-LLM: UIO weights over the model (as mnemo generate --uio); prompts are\n"
            "                       compressed segment by segment, so they may be longer than --ctx\n"
            "  --ctx N              positions of the context (UIO: <mem> entries + raw tokens; default the model's)\n"
            "  --threads N          CPU threads (default: all cores)\n"
            "  --tail N             decode the prompt's last N tokens in a call of their own (default 0: the whole\n"
            "                       prompt in one call); retrieval memory retrieves once per forward step, so\n"
            "                       the last step's queries choose what the answer's first token reads\n"
            "  --json               one JSON object per trial, then one per length\n"
            "  --progress           prefill progress bar on stderr even when it is not a terminal\n"
            "  -v, --verbose        print every trial\n");
    cli_memory_usage(f, 23);
    fprintf(f, "\n%s\n", cli_default_model_help());
}

static int parse_list(const char *cmd, const char *flag, const char *s, double min, double max, double *out) {
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        double v = strtod(t, &end);
        if (*t == '\0' || *end != '\0' || v < min || v > max || n == MAX_LIST) {
            fprintf(stderr, "mnemo %s: %s expects up to %d comma-separated numbers in [%g, %g], got '%s'\n", cmd, flag,
                    MAX_LIST, min, max, s);
            free(copy);
            return -1;
        }
        out[n++] = v;
    }
    free(copy);
    if (n == 0) fprintf(stderr, "mnemo %s: %s expects a list, got '%s'\n", cmd, flag, s);
    return n ? n : -1;
}

static int32_t count_tokens(const mnemo_model *m, const char *text) {
    int32_t n = 0;
    mnemo_tokenize(m, text, strlen(text), false, NULL, 0, &n);
    return n;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The prompt's token ids (with BOS) for a key at depth: the units that fill length, fewer while the whole
 * tokenizes longer than length (units counted alone can differ from the text they make together). *units carries
 * the count over to the next trial of the same length. malloc'ed; NULL when out of memory. */
static mnemo_token *prompt_ids(const mnemo_model *m, const cli_haystack *h, int *units, int32_t length, double depth,
                               unsigned key, int32_t *n) {
    char keyline[128];
    snprintf(keyline, sizeof keyline, "The pass key is %u. Remember it. %u is the pass key.\n", key, key);
    for (;;) {
        char *prompt = cli_haystack_prompt(h, HEAD, *units, depth, keyline, QUESTION);
        if (!prompt) return NULL;
        size_t len = strlen(prompt);
        mnemo_tokenize(m, prompt, len, true, NULL, 0, n);
        mnemo_token *ids = *n <= length || *units == 1 ? malloc((size_t)*n * sizeof *ids) : NULL;
        if (ids && mnemo_tokenize(m, prompt, len, true, ids, *n, n) != MNEMO_OK) {
            free(ids);
            ids = NULL;
        }
        free(prompt);
        if (*n <= length || *units == 1) return ids;
        int per_unit = *n / *units > 0 ? *n / *units : 1, drop = (*n - length + per_unit - 1) / per_unit;
        *units = drop < *units ? *units - drop : 1;
    }
}

/* One trial on the prompt ids[0..n): 1 when the greedy answer contains the key. -1 on an engine error (message
 * printed). */
static int trial(mnemo_model *m, mnemo_context *ctx, const mnemo_token *ids, int32_t n, int32_t tail, unsigned key,
                 double *prefill_s, char *answer, size_t answer_cap) {
    mnemo_context_reset(ctx);
    double t0 = now_s();
    int32_t head = tail > 0 && tail < n ? n - tail : n; /* --tail: the last tokens in a call of their own */
    mnemo_status st = mnemo_decode(ctx, ids, head);
    if (st == MNEMO_OK && head < n) st = mnemo_decode(ctx, ids + head, n - head);
    *prefill_s = now_s() - t0;
    if (st != MNEMO_OK) {
        fprintf(stderr, "mnemo passkey: %d-token prompt: %s\n", n, mnemo_context_error(ctx));
        return -1;
    }
    mnemo_token out[ANSWER_TOKENS];
    int32_t n_out = 0;
    for (; n_out < ANSWER_TOKENS; n_out++) {
        const float *lg = mnemo_get_logits(ctx, -1);
        int32_t V = mnemo_model_n_vocab(m), best = 0;
        for (int32_t v = 1; v < V; v++)
            if (lg[v] > lg[best]) best = v;
        if (mnemo_model_is_eog(m, best)) break;
        out[n_out] = best;
        if (mnemo_decode(ctx, &out[n_out], 1) != MNEMO_OK) {
            fprintf(stderr, "mnemo passkey: decode: %s\n", mnemo_context_error(ctx));
            return -1;
        }
    }
    size_t len = 0;
    if (mnemo_detokenize(m, out, n_out, answer, answer_cap, &len) != MNEMO_OK) answer[0] = '\0';
    char want[16];
    snprintf(want, sizeof want, "%u", key);
    return strstr(answer, want) != NULL;
}

/* The most tokens a fresh UIO context of n_ctx positions takes: segment k (k = 0, 1, ...) is decoded next to the k*M
 * entries before it (and the W raw tokens kept from the last one, option (a)) and compressed while those rows fit;
 * then a tail of what is left. */
static int32_t uio_capacity(int32_t n_ctx, const mnemo_uio_info *u, int32_t keep_raw) {
    int64_t k = 0;
    while (k * u->num_memory + (k ? keep_raw : 0) + u->chunk_size <= n_ctx) k++;
    int64_t total = k * u->chunk_size + n_ctx - k * u->num_memory - (k ? keep_raw : 0);
    return total > (1 << 24) ? 1 << 24 : (int32_t)total;
}

/* A model without memory layers holds at most its context, less the answer's tokens; a UIO-LLM what its positions
 * take with compression (uio_capacity), less the answer; with memory layers or a UIO memory budget (whose older
 * entries leave the positions for a kNN store), any length. Checks
 * the asked lengths against that and against the shortest prompt (shortest tokens: the fixed text and one filler
 * unit), or, with none asked, keeps the defaults (memory layers) or picks a quarter, half, three quarters and all
 * of what the context holds. Returns the number of lengths, or -1 after a message. */
static int fit_lengths(const mnemo_model *m, const mnemo_context *ctx, const mnemo_context_params *cp,
                       int32_t shortest, bool asked, double *lengths, int n) {
    mnemo_uio_info u;
    bool uio = mnemo_model_uio(m, &u) == MNEMO_OK;
    bool unbounded = mnemo_model_has_memory(m) || (uio && cp->uio_mem_budget > 0) ||
                     cp->memory == MNEMO_MEMORY_RETRIEVAL; /* retrieval memory: any length */
    int32_t n_ctx = mnemo_context_n_ctx(ctx), longest = unbounded ? 1 << 24 : n_ctx - ANSWER_TOKENS;
    if (uio && !unbounded) longest = uio_capacity(n_ctx, &u, cp->uio_keep_raw) - ANSWER_TOKENS;
    if (!asked && !unbounded) {
        n = 0;
        for (int q = 1; q <= 4; q++)
            if (longest * q / 4 >= shortest) lengths[n++] = longest * q / 4;
        if (n == 0) {
            fprintf(stderr, "mnemo passkey: the model's context of %d tokens is too short for a passkey prompt (at least "
                    "%d tokens, and %d for the answer)\n", n_ctx, shortest, ANSWER_TOKENS);
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        if (lengths[i] > longest) {
            if (uio)
                fprintf(stderr, "mnemo passkey: a %.0f-token prompt does not fit this UIO context of %d positions: "
                        "each %d tokens become %d <mem> entries, so --lengths can be at most %d (%d tokens are kept "
                        "for the answer); raise --ctx\n", lengths[i], n_ctx, u.chunk_size, u.num_memory, longest,
                        ANSWER_TOKENS);
            else
                fprintf(stderr, "mnemo passkey: a %.0f-token prompt does not fit the model's context of %d tokens: "
                        "without memory layers --lengths can be at most %d (%d tokens are kept for the answer); a "
                        "LongLLaMA checkpoint takes any length\n", lengths[i], n_ctx, longest, ANSWER_TOKENS);
            return -1;
        }
        if (lengths[i] < shortest) {
            fprintf(stderr, "mnemo passkey: a %.0f-token prompt cannot hold the passkey text: it takes at least %d tokens "
                    "with this model's tokenizer\n", lengths[i], shortest);
            return -1;
        }
    }
    return n;
}

int cli_passkey(int argc, char **argv) {
    const char *cmd = "passkey", *model_dir = NULL, *filler_file = NULL, *uio_dir = NULL, *v;
    double lengths[MAX_LIST] = {4096, 8192, 16384, 32768}, depths[MAX_LIST] = {0, 0.25, 0.5, 0.75, 1};
    int n_lengths = 4, n_depths = 5;
    int32_t trials = 2, lcl = 0, threads = 0, tail = 0;
    mnemo_context_params cp = mnemo_context_default_params();
    uint64_t seed = 1;
    bool json = false, verbose = false, progress = false, lengths_asked = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define VALUE() if (!(v = cli_value(cmd, argc, argv, &i))) return 2
        int mem = cli_memory_option(cmd, argc, argv, &i, &cp);
        if (mem < 0) return 2;
        if (mem) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--model")) { VALUE(); model_dir = v; }
        else if (!strcmp(a, "--uio")) { VALUE(); uio_dir = v; }
        else if (!strcmp(a, "--ctx")) { VALUE(); if (!cli_int(cmd, a, v, 1, 1 << 24, &cp.n_ctx)) return 2; }
        else if (!strcmp(a, "--lengths")) {
            VALUE();
            if ((n_lengths = parse_list(cmd, a, v, 64, 1 << 24, lengths)) < 0) return 2;
            lengths_asked = true;
        }
        else if (!strcmp(a, "--depths")) { VALUE(); if ((n_depths = parse_list(cmd, a, v, 0, 1, depths)) < 0) return 2; }
        else if (!strcmp(a, "--trials")) { VALUE(); if (!cli_int(cmd, a, v, 1, 10000, &trials)) return 2; }
        else if (!strcmp(a, "--seed")) { VALUE(); if (!cli_u64(cmd, a, v, &seed)) return 2; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { VALUE(); filler_file = v; }
        else if (!strcmp(a, "--last-context-length")) { VALUE(); if (!cli_int(cmd, a, v, 1, 1 << 24, &lcl)) return 2; }
        else if (!strcmp(a, "--threads")) { VALUE(); if (!cli_int(cmd, a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "--tail")) { VALUE(); if (!cli_int(cmd, a, v, 0, 1 << 24, &tail)) return 2; }
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--progress")) progress = true;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = true;
        else { fprintf(stderr, "mnemo passkey: unknown option '%s' (try --help)\n", a); return 2; }
#undef VALUE
    }
    cli_log_init(false);
    mnemo_model *m = NULL;
    mnemo_context *ctx = NULL;
    cli_haystack hay = {0};
    int rc = 1;
    size_t filler_len = strlen(FILLER);
    char *filler = filler_file ? cli_read_text(cmd, filler_file, &filler_len) : strdup(FILLER);
    if (!filler) goto out;
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = threads;
    mp.uio_dir = uio_dir;
    if (!model_dir && !(model_dir = cli_default_model(cmd))) goto out;
    if (mnemo_model_load(model_dir, &mp, &m) != MNEMO_OK) {
        fprintf(stderr, "mnemo passkey: cannot load model: %s\n", mnemo_model_error(m));
        goto out;
    }
    if (mnemo_context_new(m, &cp, &ctx) != MNEMO_OK ||
        (lcl && mnemo_context_set_last_context_length(ctx, lcl) != MNEMO_OK)) {
        fprintf(stderr, "mnemo passkey: %s\n", mnemo_context_error(ctx));
        goto out;
    }
    if (!cli_haystack_init(&hay, m, filler, filler_len)) {
        fprintf(stderr, "mnemo passkey: %s\n", filler_file ? "the --file text is empty" : "out of memory");
        goto out;
    }
    int32_t fixed = count_tokens(m, HEAD) + count_tokens(m, QUESTION) +
                    count_tokens(m, "The pass key is 12345. Remember it. 12345 is the pass key.\n") + 1;
    n_lengths = fit_lengths(m, ctx, &cp, fixed + (hay.n_tokens[0] > 0 ? hay.n_tokens[0] : 1),
                            lengths_asked, lengths, n_lengths);
    if (n_lengths < 0) {
        rc = 2;
        goto out;
    }
    cli_progress bar = {.label = "prefill"};
    if (cli_progress_wanted(progress)) mnemo_context_set_progress(ctx, cli_progress_report, &bar);
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    rc = 0;
    if (!json) printf("%10s %8s %9s %12s\n", "length", "trials", "accuracy", "prefill tok/s");
    for (int li = 0; li < n_lengths && rc == 0; li++) {
        int reps = cli_haystack_units(&hay, (int64_t)lengths[li] - fixed);
        int ok = 0, total = 0;
        double tok = 0, secs = 0;
        for (int di = 0; di < n_depths && rc == 0; di++) {
            for (int t = 0; t < trials; t++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                unsigned key = 10000u + (unsigned)(rng % 90000u);
                char answer[256];
                int32_t n = 0;
                double ps = 0;
                mnemo_token *ids = prompt_ids(m, &hay, &reps, (int32_t)lengths[li], depths[di], key, &n);
                int r = ids ? trial(m, ctx, ids, n, tail, key, &ps, answer, sizeof answer) : -1;
                if (!ids) fprintf(stderr, "mnemo passkey: out of memory for a %.0f-token prompt\n", lengths[li]);
                free(ids);
                if (r < 0) { rc = 1; break; }
                ok += r;
                total++;
                tok += n;
                secs += ps;
                if (json) {
                    json_t *o = json_pack("{s:i, s:f, s:i, s:s, s:b, s:f}", "tokens", n, "depth", depths[di], "key",
                                          key, "answer", answer, "correct", r, "prefill_s", ps);
                    char *s = json_dumps(o, JSON_COMPACT);
                    puts(s);
                    fflush(stdout); /* a long run's trials can be read as they finish */
                    free(s);
                    json_decref(o);
                } else if (verbose) {
                    printf("  %d tokens, depth %.2f, key %u: %s (answer '%s', prefill %.2f s)\n", n, depths[di], key,
                           r ? "correct" : "wrong", answer, ps);
                }
            }
        }
        if (rc) break;
        if (json)
            printf("{\"eval\":\"passkey\",\"length\":%.0f,\"trials\":%d,\"accuracy\":%.4f,\"prefill_tok_per_s\":%.1f}\n", lengths[li],
                   total, (double)ok / total, tok / secs);
        else
            printf("%10.0f %8d %8.1f%% %12.1f\n", lengths[li], total, 100.0 * ok / total, tok / secs);
        fflush(stdout);
    }
out:
    free(filler);
    cli_haystack_free(&hay);
    mnemo_context_free(ctx);
    mnemo_model_free(m);
    return rc;
}
