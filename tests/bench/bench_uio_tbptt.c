/*
 * bench_uio_tbptt.c — the paper's Table 4 at small scale: how well unbiased incremental TBPTT's
 * gradient matches full BPTT's. For each trial (a mini-batch of B documents of N tokens) the gradient of every UIO
 * tensor by full BPTT (S = 0) and by the reservoir with S slots, with and without the compensation factor (the same
 * draws for both), and the ratio r = |g_reservoir| / |g_full|; printed: mean and variance of r over the trials, for
 * all UIO tensors (the paper's Theta) and for those reached only through memories (encoder LoRA + <mem> token; the
 * transfer head's gradient is exact under any S). Paper (C 128, M 16, 8 x 2048 tokens, Llama-2-7B after PG19
 * training): mean r 0.676 / 0.818 / 0.935 without the factor at S = 1 / 4 / 8; 0.994 / 0.980 / 1.024 with it.
 * Unbiasedness itself (E g_reservoir = g_full with the factor): the gradients summed over every trial, their norm
 * ratio and cosine against the summed full-BPTT gradients (encoder side) — the sum averages the draws out.
 *
 *   build/mnemo train --uio /tmp/t4 --model models/tiny-shakespeare --data shakespeare.txt --uio-chunk 64 \
 *       --uio-num-memory 8 --seq-len 1024 --steps 60 --lr 2e-3 --lora-rank 8 --lora-alpha 16
 *   build/tests/bench_uio_tbptt --model models/tiny-shakespeare --uio /tmp/t4 --data shakespeare.txt \
 *       [--doc 1024] [--batch 8] [--trials 10] [--offset 200000] [--threads N] [--jsonl FILE]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "engine.h"
#include "uio_train.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(*len + 1);
    *len = b ? fread(b, 1, *len, f) : 0;
    fclose(f);
    return b;
}

/* The gradient norm over every tensor (all) and over the encoder's and the <mem> token's (enc). */
static void norms(const uio_train_weights *w, double *all, double *enc) {
    *all = *enc = 0;
    for (size_t i = 0; i < w->count; i++) {
        double s = 0;
        for (size_t k = 0; k < w->t[i].n; k++) s += (double)w->t[i].g[k] * w->t[i].g[k];
        *all += s;
        if (i < (size_t)(1 + 4 * w->n_layer)) *enc += s;
    }
    *all = sqrt(*all), *enc = sqrt(*enc);
}

int main(int argc, char **argv) {
    const char *model_dir = NULL, *uio_dir = NULL, *data = NULL, *jsonl = NULL;
    int32_t doc = 1024, batch = 8, trials = 10, threads = 0;
    int64_t offset = 200000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model_dir = argv[i + 1];
        else if (!strcmp(argv[i], "--uio")) uio_dir = argv[i + 1];
        else if (!strcmp(argv[i], "--data")) data = argv[i + 1];
        else if (!strcmp(argv[i], "--jsonl")) jsonl = argv[i + 1];
        else if (!strcmp(argv[i], "--doc")) doc = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--trials")) trials = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--offset")) offset = atoll(argv[i + 1]);
        else {
            fprintf(stderr, "bench_uio_tbptt: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!model_dir || !uio_dir || !data || doc < 2 || batch < 1 || trials < 2) {
        fprintf(stderr, "usage: bench_uio_tbptt --model DIR --uio DIR --data FILE [--doc N] [--batch B] "
                        "[--trials T >= 2] [--offset BYTES] [--threads N] [--jsonl FILE]\n");
        return 2;
    }
    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = MNEMO_DEVICE_CPU, mp.n_threads = threads;
    mnemo_model *m = NULL;
    if (mnemo_model_load(model_dir, &mp, &m) != MNEMO_OK) {
        fprintf(stderr, "bench_uio_tbptt: %s\n", mnemo_model_error(m));
        return 1;
    }
    char err[512];
    uio_train_weights w;
    if (uio_train_weights_init(&w, m, uio_dir, 0, 0, 0, 0, 0, err, sizeof err)) {
        fprintf(stderr, "bench_uio_tbptt: %s\n", err);
        return 1;
    }
    size_t len = 0;
    char *text = slurp(data, &len);
    int64_t need = (int64_t)doc * batch * trials;
    if (!text || (size_t)offset >= len) {
        fprintf(stderr, "bench_uio_tbptt: cannot read %s past byte %lld\n", data, (long long)offset);
        return 1;
    }
    /* the tokens from the byte offset on: enough text for need tokens (a token is at most a few bytes here) */
    size_t take = len - (size_t)offset;
    if (take > (size_t)need * 8) take = (size_t)need * 8;
    int32_t n_ids = 0;
    mnemo_status st = mnemo_tokenize(m, text + offset, take, false, NULL, 0, &n_ids);
    mnemo_token *ids = n_ids > 0 ? malloc((size_t)n_ids * sizeof *ids) : NULL;
    if ((st != MNEMO_OK && st != MNEMO_ERR_TOO_SMALL) || !ids ||
        mnemo_tokenize(m, text + offset, take, false, ids, n_ids, &n_ids) != MNEMO_OK || n_ids < need) {
        fprintf(stderr, "bench_uio_tbptt: %s gives %d tokens past byte %lld, %lld needed\n", data, n_ids,
                (long long)offset, (long long)need);
        return 1;
    }
    uio_train_ws *ws = uio_train_ws_new(m, &w, doc, err, sizeof err);
    if (!ws) {
        fprintf(stderr, "bench_uio_tbptt: %s\n", err);
        return 1;
    }
    enum { NS = 3 };
    size_t F = 0; /* the encoder side's floats: retrieval token + encoder LoRA */
    for (size_t i = 0; i < (size_t)(1 + 4 * w.n_layer); i++) F += w.t[i].n;
    double *sum_full = calloc(F, sizeof *sum_full), *sum_mode = calloc(F * NS * 2, sizeof *sum_mode);
    const int32_t slots[NS] = {1, 4, 8};
    double *r_all = calloc((size_t)trials * NS * 2, sizeof *r_all);
    double *r_enc = calloc((size_t)trials * NS * 2, sizeof *r_enc);
    printf("Table 4 at small scale: %s + %s (C %d, M %d), %d trials of %d documents x %d tokens (%d segments)\n",
           model_dir, uio_dir, w.C, w.M, trials, batch, doc, (doc + w.C - 1) / w.C);
    double t0 = bench_now_s();
    for (int32_t k = 0; k < trials; k++) {
        double full_all = 0, full_enc = 0;
        for (int mode = -1; mode < NS * 2; mode++) { /* -1: full BPTT; then (S, factor on / off) */
            uio_tbptt_opts o = {.slots = mode < 0 ? 0 : slots[mode / 2], .compensate = mode >= 0 && mode % 2 == 0};
            uio_train_weights_zero_grads(&w);
            for (int32_t j = 0; j < batch; j++) {
                uint64_t state = 0x5eed0000ull + (uint64_t)k * 1000003ull + (uint64_t)j * 7919ull +
                                 (uint64_t)(mode < 0 ? 0 : mode / 2) * 104729ull; /* factor on/off: same draws */
                uio_doc_stats ds;
                if (uio_document_grads(ws, m, &w, ids + ((int64_t)k * batch + j) * doc, NULL, doc, 1.0f / (float)batch,
                                       &o, &state, &ds, err, sizeof err)) {
                    fprintf(stderr, "bench_uio_tbptt: %s\n", err);
                    return 1;
                }
            }
            double a, e;
            norms(&w, &a, &e);
            double *acc = mode < 0 ? sum_full : sum_mode + (size_t)mode * F;
            for (size_t i = 0, at = 0; i < (size_t)(1 + 4 * w.n_layer); at += w.t[i].n, i++)
                for (size_t q = 0; q < w.t[i].n; q++) acc[at + q] += w.t[i].g[q];
            if (mode < 0) {
                full_all = a, full_enc = e;
                continue;
            }
            r_all[((size_t)k * NS + mode / 2) * 2 + mode % 2] = a / full_all;
            r_enc[((size_t)k * NS + mode / 2) * 2 + mode % 2] = e / full_enc;
        }
        fprintf(stderr, "\rtrial %d/%d  %.0f s", k + 1, trials, bench_now_s() - t0);
    }
    fprintf(stderr, "\n");
    FILE *jf = jsonl ? fopen(jsonl, "a") : NULL;
    printf("%-6s %-10s %12s %12s %14s %14s %18s %14s\n", "S", "factor", "mean r", "var r", "mean r (enc)",
           "var r (enc)", "r of sums (enc)", "cos (enc)");
    for (int s = 0; s < NS; s++)
        for (int f = 1; f >= 0; f--) {
            int col = f ? 0 : 1;
            double ma = 0, me = 0, va = 0, ve = 0;
            for (int32_t k = 0; k < trials; k++)
                ma += r_all[((size_t)k * NS + s) * 2 + col], me += r_enc[((size_t)k * NS + s) * 2 + col];
            ma /= trials, me /= trials;
            for (int32_t k = 0; k < trials; k++) {
                double da = r_all[((size_t)k * NS + s) * 2 + col] - ma, de = r_enc[((size_t)k * NS + s) * 2 + col] - me;
                va += da * da, ve += de * de;
            }
            va /= trials - 1, ve /= trials - 1; /* sample variance */
            const double *sm = sum_mode + (size_t)(s * 2 + col) * F;
            double dot = 0, nm = 0, nf = 0;
            for (size_t q = 0; q < F; q++)
                dot += sm[q] * sum_full[q], nm += sm[q] * sm[q], nf += sum_full[q] * sum_full[q];
            double rs = sqrt(nm / nf), cs = dot / sqrt(nm * nf);
            printf("%-6d %-10s %12.3f %12.4f %14.3f %14.4f %18.3f %14.4f\n", slots[s], f ? "with" : "without", ma, va,
                   me, ve, rs, cs);
            if (jf)
                fprintf(jf, "{\"bench\":\"uio_tbptt\",\"model\":\"%s\",\"C\":%d,\"M\":%d,\"doc\":%d,\"batch\":%d,"
                            "\"trials\":%d,\"S\":%d,\"factor\":%s,\"mean_r\":%.6f,\"var_r\":%.6f,\"mean_r_enc\":%.6f,"
                            "\"var_r_enc\":%.6f,\"r_of_sums_enc\":%.6f,\"cos_enc\":%.6f}\n", model_dir, w.C, w.M, doc,
                        batch, trials, slots[s], f ? "true" : "false", ma, va, me, ve, rs, cs);
        }
    printf("S = 0 (full BPTT) is the reference: r = 1 by construction; %.0f s\n", bench_now_s() - t0);
    if (jf) fclose(jf);
    free(r_all), free(r_enc), free(ids), free(text), free(sum_full), free(sum_mode);
    uio_train_ws_free(ws);
    uio_train_weights_free(&w);
    mnemo_model_free(m);
    return 0;
}
