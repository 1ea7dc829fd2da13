/*
 * cli_eval_dict.c — `mnemo eval dict-lookup` (FoT Appendix F; the generator in eval_tasks.h): documents of each
 * length, definitions then queries in the last --query-tokens tokens, scored on the queried values with teacher
 * forcing. Token ids are the task's own 64 (eval_tasks.h), so the model must have been trained on the task
 * (vocabulary >= 64). A model without memory sees only its last n_ctx tokens of a longer document.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "cli_eval_common.h"
#include "eval_tasks.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mnemo eval dict-lookup [options]\n\n"
            "  --lengths L,L,...    document lengths in tokens (default 1K,4K,16K,64K)\n"
            "  --query-tokens N     tokens of queries closing each document (default 256, as the paper)\n"
            "  --samples N          documents per length (default 10; at most 10000 scored, 10000000 written)\n"
            "  --seed S             the documents' generator seed (default 1)\n"
            "  --first-sample K     score documents K..K+N-1 of each length (default 0): a long evaluation split\n"
            "                       over processes or machines; equal-length documents score equally many values,\n"
            "                       so the shards' mean accuracy is the whole run's\n"
            "  --write-data FILE    write --samples documents of each length as training data instead (JSON lines\n"
            "                       {\"tokens\", \"loss\"}: the loss on the queried values, as FoT trains; no model\n"
            "                       needed; drawn apart from the evaluation's documents, so one seed never trains\n"
            "                       on the test). FoT's training documents: --lengths 512 (half queries)\n"
            "  --loss-on-keys       with --write-data: the loss also on each query's keys after its first (k2..k4:\n"
            "                       given k1 they are lookups too, of one more token each, a denser signal that\n"
            "                       teaches the key match sooner; the evaluation scores the values alone)\n"
            "  --confusable P       with --write-data: P%% of definitions share 2-3 key symbols with an earlier one\n"
            "                       and P%% their first 2-3 values, so a partial match cannot answer (default 0)\n\n"
            "With --json, a memory model's rows carry by_row_boundary: the accuracy on values whose definition lies\n"
            "whole in one local-window row, on those a row boundary cuts (keys in an earlier row than the value) and\n"
            "on those whose query a boundary cuts, with their shares of the values.\n"
            "Token ids: 1 BOS, 3 <k>, 4 <v>, 5 <q>, 6..63 the symbols keys and values are written with (4 each).\n");
    cli_eval_usage(f);
}

/* The stream of document k of a length: evaluation (train = false) and training data never share one. */
static void doc_stream(eval_rng *r, uint64_t seed, int32_t length, int32_t k, bool train) {
    eval_rng_seed(r, (seed * 0x100000001B3ull ^ (uint64_t)length << 20 ^ (uint64_t)k) + (train ? 0x5bd1e995ull : 0));
}

static int write_documents(const char *cmd, const char *path, const int32_t *lengths, int n_len,
                           int32_t query_tokens, int32_t samples, uint64_t seed, bool loss_on_keys,
                           int32_t confusable) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "mnemo %s: %s: cannot write it\n", cmd, path);
        return 1;
    }
    int32_t longest = 0;
    for (int i = 0; i < n_len; i++) longest = lengths[i] > longest ? lengths[i] : longest;
    int32_t *doc = malloc((size_t)longest * sizeof *doc);
    uint8_t *score = malloc((size_t)longest);
    int rc = doc && score ? 0 : 1;
    for (int i = 0; i < n_len && !rc; i++)
        for (int32_t k = 0; k < samples && !rc; k++) {
            eval_rng rng;
            doc_stream(&rng, seed, lengths[i], k, true);
            eval_dict_document(&rng, lengths[i], query_tokens, doc, score);
            if (confusable) eval_dict_confuse(&rng, doc, lengths[i], confusable);
            if (loss_on_keys) /* <q> opens a query and nothing else: symbols are ids >= 6 */
                for (int32_t t = 0; t + 4 < lengths[i]; t++)
                    if (doc[t] == EVAL_DICT_Q) score[t + 2] = score[t + 3] = score[t + 4] = 1;
            fputs("{\"tokens\":[", f);
            for (int32_t t = 0; t < lengths[i]; t++) fprintf(f, t ? ",%d" : "%d", doc[t]);
            fputs("],\"loss\":[", f);
            for (int32_t t = 0; t < lengths[i]; t++) fprintf(f, t ? ",%d" : "%d", score[t]);
            fputs("]}\n", f);
        }
    if (fclose(f) != 0 || rc) {
        fprintf(stderr, "mnemo %s: %s: %s\n", cmd, path, rc ? "out of memory" : "write failed");
        rc = 1;
    }
    free(doc);
    free(score);
    return rc;
}

/* The <k> of the definition a query at q (its <q>) asks for: keys are distinct within a document. */
static int64_t find_definition(const int32_t *doc, int64_t first_def, int64_t q) {
    for (int64_t d = first_def; d + EVAL_DICT_RECORD <= q; d += EVAL_DICT_RECORD)
        if (doc[d] == EVAL_DICT_K && !memcmp(doc + d + 1, doc + q + 1, 4 * sizeof *doc)) return d;
    return -1;
}

/* The local window's rows, as the scorer's decode calls fill them: calls of `chunk` tokens are appended until the
 * next does not fit the window of n_ctx, which then moves to memory, so rows start at multiples of this. */
static int32_t row_tokens(const cli_eval_task *e) {
    int32_t n_ctx = mnemo_context_n_ctx(e->ctx), chunk = e->scorer.chunk;
    return chunk > 0 && chunk <= n_ctx ? n_ctx / chunk * chunk : n_ctx;
}

/* Values split by the local window's row boundary: a value whose definition's keys lie in an earlier row can only be
 * matched through memory of a row without them (the 4-token key is 5-9 tokens before the value), and a query whose
 * keys lie in an earlier row than the value being predicted must carry them through memory too. */
typedef struct {
    int64_t hits[3], n[3]; /* 0 whole (neither cut), 1 definition cut, 2 query cut */
} boundary_split;

static void split_add(boundary_split *b, const int32_t *doc, int64_t first_def, int64_t row, int64_t q, int j,
                      uint8_t ok) {
    int64_t d = find_definition(doc, first_def, q);
    if (d < 0 || row <= 0) return;
    bool def_cut = (d + 1) / row != (d + 6 + j) / row, query_cut = (q + 1) / row != (q + 5 + j) / row;
    if (!def_cut && !query_cut) b->hits[0] += ok, b->n[0]++;
    if (def_cut) b->hits[1] += ok, b->n[1]++;
    if (query_cut) b->hits[2] += ok, b->n[2]++;
}

static json_t *split_json(const boundary_split *b, int64_t row, int64_t values) {
    static const char *names[3] = {"whole", "definition_cut", "query_cut"};
    json_t *o = json_pack("{s:I}", "row_tokens", (json_int_t)row);
    for (int i = 0; i < 3; i++)
        json_object_set_new(o, names[i],
                            json_pack("{s:f, s:o}", "share", values ? (double)b->n[i] / (double)values : 0.0,
                                      "accuracy", b->n[i] ? json_real((double)b->hits[i] / (double)b->n[i])
                                                          : json_null()));
    return o;
}

int cli_eval_dict(int argc, char **argv) {
    cli_eval_task e;
    cli_eval_init(&e, "eval dict-lookup");
    const char *v, *write_data = NULL;
    bool loss_on_keys = false;
    int32_t confusable = 0;
    int32_t lengths[CLI_EVAL_MAX_LIST] = {1024, 4096, 16384, 65536}, n_len = 4, query_tokens = 256, samples = 10,
            first_sample = 0;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int common = cli_eval_option(&e, argc, argv, &i);
        if (common < 0) return 2;
        if (common) continue;
#define VALUE() if (!(v = cli_value(e.cmd, argc, argv, &i))) return 2
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--lengths")) {
            VALUE();
            if ((n_len = cli_eval_int_list(e.cmd, a, v, 32, 1 << 26, lengths)) < 0) return 2;
        }
        else if (!strcmp(a, "--query-tokens")) { VALUE(); if (!cli_int(e.cmd, a, v, 10, 1 << 20, &query_tokens)) return 2; }
        else if (!strcmp(a, "--samples")) { VALUE(); if (!cli_int(e.cmd, a, v, 1, 10000000, &samples)) return 2; }
        else if (!strcmp(a, "--seed")) { VALUE(); if (!cli_u64(e.cmd, a, v, &seed)) return 2; }
        else if (!strcmp(a, "--first-sample")) {
            VALUE();
            if (!cli_int(e.cmd, a, v, 0, 10000000, &first_sample)) return 2;
        }
        else if (!strcmp(a, "--write-data")) { VALUE(); write_data = v; }
        else if (!strcmp(a, "--loss-on-keys")) loss_on_keys = true;
        else if (!strcmp(a, "--confusable")) { VALUE(); if (!cli_int(e.cmd, a, v, 0, 100, &confusable)) return 2; }
        else { fprintf(stderr, "mnemo %s: unknown option '%s' (try --help)\n", e.cmd, a); return 2; }
#undef VALUE
    }
    if (samples > 10000 && !write_data) { /* scoring is minutes a document at long lengths; training data is not */
        fprintf(stderr, "mnemo %s: --samples scores at most 10000 documents a length (more only with --write-data)\n",
                e.cmd);
        return 2;
    }
    if (first_sample && write_data) { /* training data is written whole: its streams are not the scored ones */
        fprintf(stderr, "mnemo %s: --first-sample picks scored documents: not with --write-data\n", e.cmd);
        return 2;
    }
    if ((loss_on_keys || confusable) && !write_data) {
        fprintf(stderr, "mnemo %s: %s shapes training data: it needs --write-data\n", e.cmd,
                loss_on_keys ? "--loss-on-keys" : "--confusable");
        return 2;
    }
    int32_t longest = 0;
    for (int i = 0; i < n_len; i++) {
        if (lengths[i] < 1 + 2 * EVAL_DICT_RECORD + query_tokens / EVAL_DICT_RECORD * EVAL_DICT_RECORD) {
            fprintf(stderr, "mnemo %s: a %d-token document cannot hold a definition and %d query tokens\n", e.cmd,
                    lengths[i], query_tokens);
            return 2;
        }
        if (lengths[i] > longest) longest = lengths[i];
    }
    if (write_data)
        return write_documents(e.cmd, write_data, lengths, n_len, query_tokens, samples, seed, loss_on_keys,
                               confusable);
    int rc = 1;
    int32_t *doc = NULL;
    uint8_t *score = NULL, *correct = NULL;
    if (!cli_eval_open(&e)) goto out;
    if (mnemo_model_n_vocab(e.model) < EVAL_DICT_VOCAB) {
        fprintf(stderr, "mnemo %s: the model's vocabulary has %d tokens; the task uses ids 0..%d\n", e.cmd,
                mnemo_model_n_vocab(e.model), EVAL_DICT_VOCAB - 1);
        goto out;
    }
    doc = malloc((size_t)longest * sizeof *doc);
    score = malloc((size_t)longest);
    correct = malloc((size_t)longest);
    if (!doc || !score || !correct) {
        fprintf(stderr, "mnemo %s: out of memory\n", e.cmd);
        goto out;
    }
    /* where the local window's rows cut definitions (memory models: a plain one sees one window or is truncated) */
    bool memory = mnemo_model_has_memory(e.model);
    int64_t row = row_tokens(&e);
    int64_t total = 0;
    for (int i = 0; i < n_len; i++) total += (int64_t)samples * lengths[i];
    cli_eval_progress_start(&e, total);
    if (!e.json) printf("%10s %8s %10s %10s %10s %10s\n", "length", "docs", "accuracy", "min", "max", "queries");
    for (int i = 0; i < n_len; i++) {
        int64_t hits = 0, scored_all = 0, queries_ok = 0, queries = 0, value_hits[4] = {0};
        boundary_split split = {0};
        double lo = 1, hi = 0;
        e.scorer.truncated = false;
        for (int k = 0; k < samples; k++) {
            /* one stream per (seed, length, sample): a length's documents do not change when others are added */
            eval_rng rng;
            doc_stream(&rng, seed, lengths[i], first_sample + k, false);
            int64_t n_scored = eval_dict_document(&rng, lengths[i], query_tokens, doc, score);
            int64_t from = 0;
            while (!score[from + 1]) from++;
            char err[512];
            if (!e.scorer.base.score(&e.scorer.base, doc, lengths[i], from, lengths[i] - 1, correct, NULL, err,
                                     sizeof err)) {
                fprintf(stderr, "mnemo %s: %d-token document: %s\n", e.cmd, lengths[i], err);
                goto out;
            }
            int64_t h = 0, run = 0, first_def = 1;
            while (doc[first_def] != EVAL_DICT_K) first_def++;
            for (int64_t t = from; t < lengths[i] - 1; t++) {
                if (!score[t + 1]) continue;
                h += correct[t - from];
                if (memory) split_add(&split, doc, first_def, row, t - 5 - (int64_t)(scored_all % 4),
                                      (int)(scored_all % 4), correct[t - from]);
                run += correct[t - from];
                value_hits[scored_all % 4] += correct[t - from];
                if (++scored_all % 4 == 0) { /* a query's four values */
                    queries_ok += run == 4;
                    queries++;
                    run = 0;
                }
            }
            hits += h;
            double acc = (double)h / (double)n_scored;
            if (acc < lo) lo = acc;
            if (acc > hi) hi = acc;
        }
        double acc = (double)hits / (double)scored_all, qacc = (double)queries_ok / (double)queries;
        /* by the value's place: v1 is found by the key alone, v2..v4 can lean on the values before them too, which
         * a model can learn as a shortcut that fails once many definitions share them */
        double by_value[4];
        for (int j = 0; j < 4; j++) by_value[j] = (double)value_hits[j] / (double)queries;
        if (e.json) {
            json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:[f,f,f,f], s:b}", "eval", "dict-lookup",
                                  "length", lengths[i], "samples", samples, "first_sample", first_sample, "accuracy",
                                  acc, "accuracy_min", lo, "accuracy_max", hi, "query_accuracy", qacc,
                                  "value_accuracy", by_value[0], by_value[1], by_value[2], by_value[3], "truncated",
                                  e.scorer.truncated);
            if (o && memory) json_object_set_new(o, "by_row_boundary", split_json(&split, row, scored_all));
            cli_eval_print_json(o);
        } else
            printf("%10d %8d %9.2f%% %9.2f%% %9.2f%% %9.2f%%%s\n", lengths[i], samples, 100 * acc, 100 * lo, 100 * hi,
                   100 * qacc, e.scorer.truncated ? "  (longer than the model sees)" : "");
    }
    rc = 0;
out:
    free(doc);
    free(score);
    free(correct);
    cli_eval_close(&e);
    return rc;
}
