/*
 * test_reference_models.c — whole models against Hugging Face transformers.
 *
 * For every tests/fixtures/models/<name>/ (written by tests/reference/make_fixtures.py) this loads the
 * directory with libengine and checks, per prompt:
 *   1. logits at every position of a one-shot prefill     : max |dlogit| <= LOGIT_TOL
 *   2. the same positions fed in chunks of 3 tokens and then one by one (exercises the KV cache and
 *      incremental positions)                               : max |dlogit| <= LOGIT_TOL
 *   3. greedy generation of up to 32 tokens                 : identical ids to transformers' generate()
 * The tolerance is on fp32 compute over fp32-widened weights; the fixtures' greedy margins are >= 1e-3, so a
 * token can only differ if the engine is really wrong.
 *
 * Devices: every model runs on the CPU, and on CUDA as well when a usable CUDA backend is present (the same
 * tolerance: the CUDA backend's default GEMM precision is fp32-level, see kernels.h). MNEMO_TEST_DEVICE=cpu,
 * cuda or all overrides; asking for cuda without a usable backend is a failure, not a skip.
 */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine.h"
#include "kernels.h"
#include "fixture_logits.h"
#include "test_devices.h"
#include "test_util.h"

#define LOGIT_TOL 1e-4f

static const char *kernel_settings; /* for every context: main's --set plus cpu.gemm=exact */

static float max_diff(const float *a, const float *b, int32_t n) {
    float m = 0.f;
    for (int32_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as a failure */
    }
    return m;
}

typedef struct {
    mnemo_token ids[64];
    int n;
} token_list;

static bool collect(const mnemo_token_event *ev, void *user) {
    token_list *t = user;
    if (t->n < 64) t->ids[t->n++] = ev->token;
    return true;
}

/* Feeds ids in chunks of `chunk` tokens into a logits_all context; returns the worst |dlogit| vs ref. */
static float run_chunked(mnemo_model *m, const int32_t *ids, int n, int chunk, const logit_block *ref) {
    mnemo_context_params cp = mnemo_context_default_params();
    cp.kernel_settings = kernel_settings;
    cp.logits_all = true;
    cp.n_batch = chunk;
    mnemo_context *ctx = NULL;
    float worst = INFINITY;
    if (mnemo_context_new(m, &cp, &ctx) != MNEMO_OK) goto out;
    worst = 0.f;
    for (int i = 0; i < n; i += chunk) {
        int nb = n - i < chunk ? n - i : chunk;
        if (mnemo_decode(ctx, ids + i, nb) != MNEMO_OK) { worst = INFINITY; goto out; }
        for (int j = 0; j < nb; j++) {
            const float *lg = mnemo_get_logits(ctx, j);
            if (!lg) { worst = INFINITY; goto out; }
            float d = max_diff(lg, ref->data + (size_t)(i + j) * ref->n_vocab, ref->n_vocab);
            if (!(d <= worst)) worst = d;
        }
    }
out:
    mnemo_context_free(ctx);
    return worst;
}

/* All prompts of a model decoded TOGETHER with mnemo_decode_batch: first a ragged prefill (prompt p gets p+2
 * tokens), then 3-token steps for every prompt that has tokens left, as a server's continuous batching does.
 * Every row must still match transformers. */
static float run_batched(mnemo_model *m, int32_t ids[][512], const int *lens, int np, const logit_block *ref) {
    mnemo_context *ctx[16] = {0};
    int done[16] = {0};
    float worst = 0.f;
    mnemo_context_params cp = mnemo_context_default_params();
    cp.kernel_settings = kernel_settings;
    cp.logits_all = true;
    for (int p = 0; p < np; p++)
        if (mnemo_context_new(m, &cp, &ctx[p]) != MNEMO_OK) { worst = INFINITY; goto out; }
    for (int step = 0;; step++) {
        mnemo_batch_entry e[16];
        int ne = 0, which[16];
        for (int p = 0; p < np; p++) {
            int want = step == 0 ? p + 2 : 3, left = lens[p] - done[p];
            if (left <= 0) continue;
            e[ne] = (mnemo_batch_entry){.ctx = ctx[p], .tokens = ids[p] + done[p], .n = want < left ? want : left};
            which[ne++] = p;
        }
        if (ne == 0) break;
        if (mnemo_decode_batch(e, ne) != MNEMO_OK) { worst = INFINITY; goto out; }
        for (int i = 0; i < ne; i++) {
            int p = which[i];
            for (int j = 0; j < e[i].n; j++) {
                const float *lg = mnemo_get_logits(ctx[p], j);
                float d = lg ? max_diff(lg, ref[p].data + (size_t)(done[p] + j) * ref[p].n_vocab, ref[p].n_vocab) : INFINITY;
                if (!(d <= worst)) worst = d;
            }
            done[p] += e[i].n;
        }
    }
out:
    for (int p = 0; p < np; p++) mnemo_context_free(ctx[p]);
    return worst;
}

static void check_model(const char *dir, const char *name, mnemo_device device) {
    char path[4096];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_error_t jerr;
    json_t *ref = json_load_file(path, 0, &jerr);
    CHECK(ref != NULL, "%s: %s", path, jerr.text);
    if (!ref) return;
    logit_block blocks[16] = {0};
    snprintf(path, sizeof path, "%s/logits.bin", dir);
    int nblocks = read_logits(path, blocks, 16);
    json_t *prompts = json_object_get(ref, "prompts");
    CHECK(nblocks > 0 && (size_t)nblocks == json_array_size(prompts), "%s: logits.bin unreadable or count mismatch", name);

    mnemo_model_params mp = mnemo_model_default_params();
    mp.device = device;
    mnemo_model *m = NULL;
    mnemo_status st = mnemo_model_load(dir, &mp, &m);
    CHECK(st == MNEMO_OK, "%s: load failed: %s", name, mnemo_model_error(m));
    if (st != MNEMO_OK || nblocks <= 0) goto out;

    static int32_t all_ids[16][512];
    int all_lens[16], n_ok = 0;
    for (int p = 0; p < nblocks && (size_t)p < json_array_size(prompts); p++) {
        json_t *pr = json_array_get(prompts, p), *jids = json_object_get(pr, "ids"), *jg = json_object_get(pr, "greedy");
        int n = (int)json_array_size(jids);
        int32_t *ids = all_ids[p];
        all_lens[p] = 0;
        CHECK(n > 0 && n <= 512 && n == blocks[p].n_tokens && blocks[p].n_vocab == mnemo_model_n_vocab(m),
              "%s prompt %d: shape mismatch (%d ids, %d logit rows, vocab %d vs %d)", name, p, n, blocks[p].n_tokens,
              blocks[p].n_vocab, mnemo_model_n_vocab(m));
        if (n <= 0 || n > 512 || n != blocks[p].n_tokens || blocks[p].n_vocab != mnemo_model_n_vocab(m)) continue;
        for (int i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(jids, i));
        all_lens[p] = n;
        n_ok++;

        /* 0. the tokenizer reproduces the recorded ids */
        const char *text = json_string_value(json_object_get(pr, "text"));
        int32_t tids[512], tn = 0;
        st = mnemo_tokenize(m, text, strlen(text), true, tids, 512, &tn);
        CHECK(st == MNEMO_OK && tn == n && !memcmp(tids, ids, (size_t)n * sizeof *ids),
              "%s prompt %d: tokenize differs from sentencepiece/transformers", name, p);

        /* 1, 2: logits one-shot, in chunks of 3, one token at a time */
        float d_all = run_chunked(m, ids, n, n, &blocks[p]);
        float d_3 = run_chunked(m, ids, n, 3, &blocks[p]);
        float d_1 = run_chunked(m, ids, n, 1, &blocks[p]);
        printf("%-16s prompt %d: %3d tokens  max|dlogit| one-shot %.2e  chunks-of-3 %.2e  one-by-one %.2e\n", name, p,
               n, d_all, d_3, d_1);
        CHECK(d_all <= LOGIT_TOL, "%s prompt %d: one-shot max|dlogit| %.3e > %.1e", name, p, d_all, LOGIT_TOL);
        CHECK(d_3 <= LOGIT_TOL, "%s prompt %d: chunked max|dlogit| %.3e > %.1e", name, p, d_3, LOGIT_TOL);
        CHECK(d_1 <= LOGIT_TOL, "%s prompt %d: incremental max|dlogit| %.3e > %.1e", name, p, d_1, LOGIT_TOL);

        /* 3: greedy continuation */
        mnemo_context *ctx = NULL;
        if (mnemo_context_new(m, NULL, &ctx) == MNEMO_OK) {
            mnemo_generate_params gp = mnemo_generate_default_params();
            gp.sampling.temperature = 0.f;
            gp.max_tokens = (int32_t)json_array_size(jg);
            token_list got = {.n = 0};
            st = mnemo_generate_tokens(ctx, ids, n, &gp, collect, &got, NULL);
            bool same = st == MNEMO_OK && got.n == (int)json_array_size(jg);
            for (int i = 0; same && i < got.n; i++)
                same = got.ids[i] == (int32_t)json_integer_value(json_array_get(jg, i));
            CHECK(same, "%s prompt %d: greedy tokens differ from transformers (%d vs %zu tokens, status %s)", name, p,
                  got.n, json_array_size(jg), mnemo_status_str(st));
        }
        mnemo_context_free(ctx);
    }
    if (n_ok == nblocks) {
        float d_b = run_batched(m, all_ids, all_lens, nblocks, blocks);
        printf("%-16s all %d prompts batched together: max|dlogit| %.2e\n", name, nblocks, d_b);
        CHECK(d_b <= LOGIT_TOL, "%s: batched decode max|dlogit| %.3e > %.1e", name, d_b, LOGIT_TOL);
    }
out:
    mnemo_model_free(m);
    for (int i = 0; i < 16; i++) free(blocks[i].data);
    json_decref(ref);
}

int main(int argc, char **argv) {
    /* fp32-level GEMMs (FAST rounds bf16 prefill activations), plus what --set adds (e.g. cuda.attn=mma) */
    static char settings_buf[512];
    snprintf(settings_buf, sizeof settings_buf, "cpu.gemm=exact%s%s", argc > 2 && !strcmp(argv[1], "--set") ? "," : "",
             argc > 2 && !strcmp(argv[1], "--set") ? argv[2] : "");
    kernel_settings = settings_buf;
    test_devices devs = test_pick_devices();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models", test_fixtures());
    for (int dev = 0; dev < 2; dev++) {
        if ((dev == 0 && !devs.cpu) || (dev == 1 && !devs.cuda)) continue;
        printf("== device %s%s%s\n", dev ? "cuda: " : "cpu", dev ? devs.info : "", "");
        DIR *d = opendir(dir);
        CHECK(d != NULL, "no fixture models under %s", dir);
        int models = 0;
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char md[4096], label[300];
            snprintf(md, sizeof md, "%s/%s", dir, e->d_name);
            snprintf(label, sizeof label, "%s/%s", dev ? "cuda" : "cpu", e->d_name);
            check_model(md, label, dev ? MNEMO_DEVICE_CUDA : MNEMO_DEVICE_CPU);
            models++;
        }
        if (d) closedir(d);
        CHECK(models >= 6, "expected at least 6 fixture models, found %d", models);
    }
    return test_summary();
}
