/*
 * test_uio.c — UIO-LLM compression inference against the PyTorch reference's fixtures
 * (tests/fixtures/uio, made by tests/reference/make_uio_fixtures.py from tests/reference/uio_reference.py; its
 * README gives the semantics). Every case (mha_c16_m4, mha_c16_m2_bf16, gqa_c12_m3), from both checkpoint formats
 * (the reference's uio.pth and mnemo's uio.safetensors), on a fresh context each time:
 *   - logits of every fed token (prompt + greedy[:-1], 6 segments of prompt, 8 compressions in all) within
 *     LOGIT_TOL, fed in one call, one token at a time, in the fixture's odd split into calls, and through
 *     mnemo_decode_batch one token per step for two contexts at once (compression then runs before the next step);
 *   - greedy generation (mnemo_generate_tokens) equal to the fixture's ids, with two compressions during it, and
 *     the memory/raw sizes after every compression, call and generation step as recorded;
 *   - (CPU) after every compression, the encoder's <mem> hidden states and the memory K/V in the cache against
 *     memory.safetensors, and the test's own power: with the encoder's LoRA zeroed the logits move far past the
 *     tolerance (so a build that ignored it would fail);
 *   - snapshots: saved mid-segment and with a compression due, loaded into a fresh context, continued: the same
 *     logits; refused by a model with other UIO weights.
 * Then malformed and mismatched UIO directories, each refused at load with a message naming the file, and the
 * API's limits (n_ctx, an entry crossing a segment boundary, a full context ending generation).
 * Tolerance: 1e-4 on every logit for all three cases. The bf16 case stores its UIO weights in bf16, widened
 * exactly to fp32; the base model and every computation are fp32 as in the fp32 cases, and the fixture's logits
 * are fp64 results rounded to fp32, so the same bound holds (measured worst errors are printed).
 * MNEMO_TEST_DEVICE=cpu|cuda|all chooses the devices, as in test_longllama (default: the CPU, and CUDA when usable).
 */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "engine_impl.h"
#include "fixture_logits.h"
#include "safetensors_write.h"
#include "tensor_index.h"
#include "test_devices.h"
#include "test_util.h"
#include "uio_memory.h"

#define LOGIT_TOL 1e-4f
#define MEM_TOL 1e-4f /* encoder hidden states and memory K/V (fixture: fp64 rounded to fp32) */

static const char *const CASES[] = {"mha_c16_m4", "mha_c16_m2_bf16", "gqa_c12_m3"};
static const char *const FORMATS[] = {"uio_pth", "uio_st"};
static char g_tmp[] = "/tmp/mnemo-uio-XXXXXX";

typedef struct {
    const char *name;
    json_t *ref;
    char dir[4096], base[4096];
    logit_block lg;
    int32_t *fed, n_fed, P, n_greedy, C, M;
    const int32_t *greedy; /* fed + P */
} fixture;

/* Worst |dlogit| per way of feeding, over every case and format, printed at the end. */
enum { MODE_ONE_CALL, MODE_TOKENS, MODE_CALLS, MODE_BATCH, MODE_SNAPSHOT, MODE_COUNT };
static const char *const MODE_NAMES[MODE_COUNT] = {"one call", "token by token", "call split", "decode_batch",
                                                   "snapshot"};
static float g_worst[MODE_COUNT], g_worst_h, g_worst_kv;

static float max_diff(const float *a, const float *b, int64_t n) {
    float m = 0.f;
    for (int64_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN counts as the worst */
    }
    return m;
}

static int geti(json_t *o, const char *key) { return (int)json_integer_value(json_object_get(o, key)); }

static bool load_fixture(const char *name, fixture *f) {
    memset(f, 0, sizeof *f);
    f->name = name;
    snprintf(f->dir, sizeof f->dir, "%s/uio/%s", test_fixtures(), name);
    char path[4200];
    snprintf(path, sizeof path, "%s/reference.json", f->dir);
    json_error_t je;
    f->ref = json_load_file(path, 0, &je);
    CHECK(f->ref != NULL, "%s: %s", path, je.text);
    if (!f->ref) return false;
    const char *base = json_string_value(json_object_get(f->ref, "base")); /* tests/fixtures/models/... */
    const char *rel = base && !strncmp(base, "tests/fixtures/", 15) ? base + 15 : "";
    snprintf(f->base, sizeof f->base, "%s/%s", test_fixtures(), rel);
    json_t *prompt = json_object_get(json_object_get(f->ref, "prompt"), "ids");
    json_t *greedy = json_object_get(f->ref, "greedy");
    f->P = (int32_t)json_array_size(prompt);
    f->n_greedy = (int32_t)json_array_size(greedy);
    f->n_fed = f->P + f->n_greedy - 1;
    f->fed = malloc((size_t)(f->P + f->n_greedy) * sizeof *f->fed);
    for (int32_t i = 0; i < f->P; i++) f->fed[i] = (int32_t)json_integer_value(json_array_get(prompt, (size_t)i));
    for (int32_t i = 0; i < f->n_greedy; i++)
        f->fed[f->P + i] = (int32_t)json_integer_value(json_array_get(greedy, (size_t)i));
    f->greedy = f->fed + f->P;
    json_t *uc = json_object_get(f->ref, "uio_config");
    f->C = geti(uc, "chunk_size");
    f->M = geti(uc, "num_memory");
    snprintf(path, sizeof path, "%s/logits.bin", f->dir);
    int nb = read_logits(path, &f->lg, 1);
    CHECK(nb == 1 && f->lg.n_tokens == f->n_fed && f->lg.n_tokens == geti(f->ref, "n_rows"),
          "%s: logits.bin holds %d rows for %d fed tokens", name, nb == 1 ? f->lg.n_tokens : -1, f->n_fed);
    return nb == 1 && f->lg.n_tokens == f->n_fed;
}

static void free_fixture(fixture *f) {
    json_decref(f->ref);
    free(f->fed);
    free(f->lg.data);
}

static mnemo_model *load_uio(const char *base, const char *uio_dir, mnemo_device dev, mnemo_status *st) {
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = 1; /* tiny models: more threads only wait on each other */
    mp.device = dev;
    mp.uio_dir = uio_dir;
    mnemo_model *m = NULL;
    *st = mnemo_model_load(base, &mp, &m);
    return m;
}

static mnemo_context *new_ctx(mnemo_model *m, bool logits_all, int32_t n_batch) {
    mnemo_context_params cp = mnemo_context_default_params();
    cp.logits_all = logits_all;
    cp.n_batch = n_batch;
    mnemo_context *ctx = NULL;
    mnemo_status st = mnemo_context_new(m, &cp, &ctx);
    CHECK(st == MNEMO_OK, "context: %s", mnemo_context_error(ctx));
    if (st != MNEMO_OK) {
        mnemo_context_free(ctx);
        return NULL;
    }
    return ctx;
}

/* The context's sizes against a state record {tokens_fed?, mem_slots, raw_tokens, acc_tokens, segments?}. */
static void check_state(const mnemo_context *ctx, const fixture *f, json_t *s, const char *what, int at) {
    mnemo_memory_stats ms;
    CHECK(mnemo_context_memory(ctx, &ms) == MNEMO_OK, "%s: stats", what);
    int mem = geti(s, "mem_slots"), raw = geti(s, "raw_tokens"), acc = geti(s, "acc_tokens");
    int segs = json_object_get(s, "segments_compressed") ? geti(s, "segments_compressed") : mem / f->M;
    CHECK((int)ms.mem_entries == mem && ms.local_tokens == raw && raw == acc &&
              ms.mem_tokens == (uint64_t)segs * (uint64_t)f->C,
          "%s at %d: <mem> entries %llu, raw %d, compressed tokens %llu; expected %d, %d (acc %d), %d", what, at,
          (unsigned long long)ms.mem_entries, ms.local_tokens, (unsigned long long)ms.mem_tokens, mem, raw, acc,
          segs * f->C);
    if (json_object_get(s, "tokens_fed"))
        CHECK(mnemo_context_n_past(ctx) == geti(s, "tokens_fed"), "%s at %d: n_past %d, expected %d", what, at,
              mnemo_context_n_past(ctx), geti(s, "tokens_fed"));
    const mnemo_model *m = ctx->model;
    uint64_t row = (uint64_t)m->cfg.num_hidden_layers * (uint64_t)m->cfg.num_key_value_heads *
                   (uint64_t)m->cfg.head_dim * sizeof(float);
    CHECK(ms.mem_key_bytes == (uint64_t)mem * row && ms.mem_value_bytes == (uint64_t)mem * row &&
              ms.local_kv_bytes + ms.mem_key_bytes + ms.mem_value_bytes == mnemo_context_kv_bytes(ctx),
          "%s at %d: memory bytes by kind", what, at);
}

static float row_diff(const fixture *f, const float *got, int32_t t) {
    const int32_t V = f->lg.n_vocab;
    return got ? max_diff(got, f->lg.data + (size_t)t * (size_t)V, V) : INFINITY;
}

/* ---- the encoder's and transfer head's outputs against memory.safetensors (host backends) */

typedef struct {
    uint8_t *img;
    tensor_list l;
} st_file;

static uint8_t *read_all(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    *len = b && fread(b, 1, (size_t)n, fp) == (size_t)n ? (size_t)n : 0;
    fclose(fp);
    return b;
}

static const float *st_find(const st_file *s, const char *name, size_t floats) {
    for (size_t i = 0; i < s->l.count; i++)
        if (!strcmp(s->l.items[i].name, name) && s->l.items[i].dtype == TENSOR_F32 &&
            s->l.items[i].nbytes == floats * sizeof(float))
            return s->l.items[i].data;
    return NULL;
}

/* Segment k just compressed into rows [k M, (k+1) M) of the cache. */
static void check_memory(const mnemo_context *ctx, const st_file *ref, int k, const char *what) {
    const uio_state *s = ctx->mem_state;
    const model_config *cfg = &ctx->model->cfg;
    const int64_t d = cfg->hidden_size, kvd = (int64_t)cfg->num_key_value_heads * cfg->head_dim, M = s->M;
    int32_t pos[64];
    for (int i = 0; i < M && i < 64; i++) pos[i] = (int32_t)(k * M + i);
    for (int l = 0; l < cfg->num_hidden_layers; l++) {
        char name[96];
        snprintf(name, sizeof name, "seg%d.layers.%d.h", k, l);
        const float *h = st_find(ref, name, (size_t)(M * d));
        snprintf(name, sizeof name, "seg%d.layers.%d.k", k, l);
        const float *rk = st_find(ref, name, (size_t)(M * kvd));
        snprintf(name, sizeof name, "seg%d.layers.%d.v", k, l);
        const float *rv = st_find(ref, name, (size_t)(M * kvd));
        CHECK(h && rk && rv, "%s: memory.safetensors lacks segment %d layer %d", what, k, l);
        if (!h || !rk || !rv) return;
        float dh = max_diff(s->h + (size_t)l * (size_t)(M * d), h, M * d);
        /* the cache holds the keys rotated at their rows: rotate the reference's the same way */
        float *kr = malloc((size_t)(M * kvd) * sizeof *kr);
        memcpy(kr, rk, (size_t)(M * kvd) * sizeof *kr);
        kern_ctx *kc = kern_cpu_ctx_new(1);
        kern_cpu_backend()->rope(kc, kr, M, cfg->num_key_value_heads, cfg->head_dim, pos, cfg->rope_theta,
                                 cfg->rope_scaling_factor);
        kern_cpu_ctx_free(kc);
        size_t off = ((size_t)l * (size_t)ctx->kv.n_ctx + (size_t)(k * M)) * (size_t)kvd;
        float dk = max_diff(ctx->kv.k + off, kr, M * kvd), dv = max_diff(ctx->kv.v + off, rv, M * kvd);
        free(kr);
        CHECK(dh <= MEM_TOL && dk <= MEM_TOL && dv <= MEM_TOL,
              "%s: segment %d layer %d: |dh| %.3g, |dK| %.3g, |dV| %.3g (tolerance %g)", what, k, l, dh, dk, dv,
              MEM_TOL);
        if (dh > g_worst_h) g_worst_h = dh;
        if (dk > g_worst_kv) g_worst_kv = dk;
        if (dv > g_worst_kv) g_worst_kv = dv;
    }
}

/* ---- the ways of feeding */

static void run_one_call(mnemo_model *m, const fixture *f, const char *what) {
    mnemo_context *ctx = new_ctx(m, true, 0);
    if (!ctx) return;
    mnemo_status st = mnemo_decode(ctx, f->fed, f->n_fed);
    CHECK(st == MNEMO_OK, "%s: one call: %s", what, mnemo_context_error(ctx));
    float worst = 0.f;
    for (int32_t t = 0; st == MNEMO_OK && t < f->n_fed; t++) {
        float dl = row_diff(f, mnemo_get_logits(ctx, t), t);
        if (!(dl <= worst)) worst = dl;
    }
    CHECK(worst <= LOGIT_TOL, "%s: one call: max |dlogit| %.3g over %d rows", what, worst, f->n_fed);
    if (!(worst <= g_worst[MODE_ONE_CALL])) g_worst[MODE_ONE_CALL] = worst;
    check_state(ctx, f, json_object_get(f->ref, "final_state"), what, f->n_fed);
    mnemo_context_free(ctx);
}

static void run_tokens(mnemo_model *m, const fixture *f, const st_file *mem_ref, const char *what) {
    mnemo_context *ctx = new_ctx(m, false, 0);
    if (!ctx) return;
    json_t *comps = json_object_get(f->ref, "compressions");
    size_t next = 0;
    float worst = 0.f;
    for (int32_t t = 0; t < f->n_fed; t++) {
        mnemo_status st = mnemo_decode(ctx, &f->fed[t], 1);
        CHECK(st == MNEMO_OK, "%s: token %d: %s", what, t, mnemo_context_error(ctx));
        if (st != MNEMO_OK) break;
        float dl = row_diff(f, mnemo_get_logits(ctx, -1), t);
        if (!(dl <= worst)) worst = dl;
        json_t *c = json_array_get(comps, next);
        if (c && geti(c, "after_tokens") == t + 1) {
            check_state(ctx, f, c, what, t + 1);
            if (mem_ref) check_memory(ctx, mem_ref, geti(c, "segment"), what);
            next++;
        }
    }
    CHECK(next == json_array_size(comps), "%s: %zu of %zu compressions seen", what, next, json_array_size(comps));
    CHECK(worst <= LOGIT_TOL, "%s: token by token: max |dlogit| %.3g", what, worst);
    if (!(worst <= g_worst[MODE_TOKENS])) g_worst[MODE_TOKENS] = worst;
    mnemo_context_free(ctx);
}

static void run_calls(mnemo_model *m, const fixture *f, const char *what) {
    mnemo_context *ctx = new_ctx(m, true, 7); /* forward steps of 7 rows inside each piece too */
    if (!ctx) return;
    json_t *calls = json_object_get(f->ref, "calls");
    int32_t off = 0;
    float worst = 0.f;
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *c = json_array_get(calls, i);
        int32_t n = geti(c, "n_tokens");
        mnemo_status st = mnemo_decode(ctx, f->fed + off, n);
        CHECK(st == MNEMO_OK, "%s: call %zu: %s", what, i, mnemo_context_error(ctx));
        if (st != MNEMO_OK) break;
        for (int32_t j = 0; j < n; j++) {
            float dl = row_diff(f, mnemo_get_logits(ctx, j), off + j);
            if (!(dl <= worst)) worst = dl;
        }
        off += n;
        check_state(ctx, f, c, what, off);
    }
    CHECK(off == f->P, "%s: the calls cover %d of %d prompt tokens", what, off, f->P);
    CHECK(worst <= LOGIT_TOL, "%s: call split: max |dlogit| %.3g", what, worst);
    if (!(worst <= g_worst[MODE_CALLS])) g_worst[MODE_CALLS] = worst;
    mnemo_context_free(ctx);
}

/* Two contexts one token per mnemo_decode_batch step; an entry crossing a segment boundary is refused. */
static void run_batch(mnemo_model *m, const fixture *f, const char *what) {
    mnemo_context *a = new_ctx(m, false, 0), *b = new_ctx(m, false, 0);
    if (!a || !b) goto out;
    mnemo_batch_entry e2[1] = {{a, f->fed, f->C + 1}};
    mnemo_status st = mnemo_decode_batch(e2, 1);
    CHECK(st == MNEMO_ERR_INVALID_ARG && strstr(mnemo_context_error(a), "crosses a segment boundary") &&
              mnemo_context_n_past(a) == 0,
          "%s: an entry of C + 1 tokens: %d (%s)", what, st, mnemo_context_error(a));
    float worst = 0.f;
    for (int32_t t = 0; t < f->n_fed; t++) {
        mnemo_batch_entry e[2] = {{a, &f->fed[t], 1}, {b, &f->fed[t], 1}};
        st = mnemo_decode_batch(e, 2);
        CHECK(st == MNEMO_OK, "%s: batch step %d: %s %s", what, t, mnemo_context_error(a), mnemo_context_error(b));
        if (st != MNEMO_OK) break;
        for (int k = 0; k < 2; k++) {
            float dl = row_diff(f, mnemo_get_logits(k ? b : a, -1), t);
            if (!(dl <= worst)) worst = dl;
        }
    }
    CHECK(worst <= LOGIT_TOL, "%s: decode_batch: max |dlogit| %.3g", what, worst);
    if (!(worst <= g_worst[MODE_BATCH])) g_worst[MODE_BATCH] = worst;
out:
    mnemo_context_free(a);
    mnemo_context_free(b);
}

typedef struct {
    const fixture *f;
    mnemo_context *ctx;
    int32_t n;
    int32_t ids[256];
    const char *what;
} gen_state;

static bool on_token(const mnemo_token_event *ev, void *user) {
    gen_state *g = user;
    if (g->n < 256) g->ids[g->n] = ev->token;
    json_t *step = json_array_get(json_object_get(g->f->ref, "generation_steps"), (size_t)g->n);
    if (step) check_state(g->ctx, g->f, step, g->what, g->n); /* before this token is fed: after step n */
    g->n++;
    return true;
}

static void run_generate(mnemo_model *m, const fixture *f, const char *what) {
    mnemo_context *ctx = new_ctx(m, false, 0);
    if (!ctx) return;
    mnemo_generate_params gp = mnemo_generate_default_params();
    gp.sampling.temperature = 0.f;
    gp.max_tokens = f->n_greedy;
    gp.add_bos = true; /* the prompt starts with BOS: nothing is added */
    gen_state g = {.f = f, .ctx = ctx, .what = what};
    mnemo_generate_result res;
    mnemo_status st = mnemo_generate_tokens(ctx, f->fed, f->P, &gp, on_token, &g, &res);
    CHECK(st == MNEMO_OK && res.n_prompt_tokens == f->P && res.finish_reason == MNEMO_FINISH_LENGTH,
          "%s: generate: %s", what, mnemo_context_error(ctx));
    bool same = g.n == f->n_greedy;
    for (int32_t i = 0; same && i < g.n; i++) same = g.ids[i] == f->greedy[i];
    CHECK(same, "%s: greedy continuation differs from the fixture's (%d tokens; first: %d vs %d)", what, g.n,
          g.n ? g.ids[0] : -1, f->greedy[0]);
    mnemo_context_free(ctx);
}

/* Saved after `cut` tokens (a compression due when cut is a multiple of C and fed through decode_batch), loaded
 * into a fresh context, continued with the rest in one call. */
static void run_snapshot(mnemo_model *m, mnemo_model *other, const fixture *f, int32_t cut, bool batch,
                         const char *what) {
    char path[256];
    snprintf(path, sizeof path, "%s/snap-%d.mnemo", g_tmp, cut);
    mnemo_context *a = new_ctx(m, false, 0), *b = new_ctx(m, true, 0);
    if (!a || !b) goto out;
    mnemo_status st = MNEMO_OK;
    for (int32_t t = 0; batch && st == MNEMO_OK && t < cut; t++) {
        mnemo_batch_entry e = {a, &f->fed[t], 1};
        st = mnemo_decode_batch(&e, 1);
    }
    if (!batch) st = mnemo_decode(a, f->fed, cut);
    CHECK(st == MNEMO_OK && mnemo_context_save(a, path) == MNEMO_OK, "%s: save after %d: %s", what, cut,
          mnemo_context_error(a));
    st = mnemo_context_load(b, path);
    CHECK(st == MNEMO_OK && mnemo_context_n_past(b) == cut, "%s: load after %d: %s", what, cut,
          mnemo_context_error(b));
    float dl0 = row_diff(f, mnemo_get_logits(b, -1), cut - 1);
    st = mnemo_decode(b, f->fed + cut, f->n_fed - cut);
    CHECK(st == MNEMO_OK, "%s: continue after load: %s", what, mnemo_context_error(b));
    float worst = dl0;
    for (int32_t t = cut; st == MNEMO_OK && t < f->n_fed; t++) {
        float dl = row_diff(f, mnemo_get_logits(b, t - cut), t);
        if (!(dl <= worst)) worst = dl;
    }
    CHECK(worst <= LOGIT_TOL, "%s: snapshot after %d: max |dlogit| %.3g", what, cut, worst);
    if (!(worst <= g_worst[MODE_SNAPSHOT])) g_worst[MODE_SNAPSHOT] = worst;
    if (other) { /* other UIO weights over the same base: refused, the context unchanged */
        mnemo_context *c = new_ctx(other, false, 0);
        if (c) {
            st = mnemo_context_load(c, path);
            CHECK(st == MNEMO_ERR_FORMAT && mnemo_context_n_past(c) == 0,
                  "%s: a snapshot loaded by a model with other UIO weights: %d (%s)", what, st, mnemo_context_error(c));
            mnemo_context_free(c);
        }
    }
out:
    unlink(path);
    mnemo_context_free(a);
    mnemo_context_free(b);
}

/* With the encoder's LoRA zeroed the logits must move far past the tolerance: the checks above can tell. */
static void check_power(mnemo_model *m, const fixture *f, const char *what) {
    uio_weights *u = m->uio;
    size_t qd = (size_t)m->cfg.num_attention_heads * (size_t)m->cfg.head_dim;
    size_t kvd = (size_t)m->cfg.num_key_value_heads * (size_t)m->cfg.head_dim, r = (size_t)u->lora_rank;
    float *saved[2 * 8];
    int n = 0;
    for (int l = 0; l < m->cfg.num_hidden_layers && n + 2 <= 16; l++)
        for (int t = 0; t < 2; t++) {
            lora_pair *p = &u->encoder.pairs[(size_t)l * LORA_N_TARGETS + (t ? LORA_V : LORA_Q)];
            size_t cnt = (t ? kvd : qd) * r;
            saved[n] = malloc(cnt * sizeof(float));
            memcpy(saved[n], p->b, cnt * sizeof(float));
            memset(p->b, 0, cnt * sizeof(float));
            n++;
        }
    mnemo_context *ctx = new_ctx(m, true, 0);
    float worst = 0.f;
    if (ctx && mnemo_decode(ctx, f->fed, f->n_fed) == MNEMO_OK)
        for (int32_t t = 0; t < f->n_fed; t++) {
            float dl = row_diff(f, mnemo_get_logits(ctx, t), t);
            if (!(dl <= worst)) worst = dl;
        }
    mnemo_context_free(ctx);
    CHECK(worst > 100 * LOGIT_TOL, "%s: zeroing the encoder LoRA moves the logits by only %.3g", what, worst);
    printf("%s: with the encoder LoRA zeroed, max |dlogit| %.3g (the fixture's own sensitivity check: >= 8.4)\n", what,
           worst);
    n = 0;
    for (int l = 0; l < m->cfg.num_hidden_layers && n + 2 <= 16; l++)
        for (int t = 0; t < 2; t++) {
            lora_pair *p = &u->encoder.pairs[(size_t)l * LORA_N_TARGETS + (t ? LORA_V : LORA_Q)];
            memcpy(p->b, saved[n], (t ? kvd : qd) * r * sizeof(float));
            free(saved[n++]);
        }
}

static void run_case(const char *name, mnemo_device dev, const char *devname) {
    fixture f;
    if (!load_fixture(name, &f)) {
        free_fixture(&f);
        return;
    }
    st_file mem_ref = {0};
    char path[4200];
    snprintf(path, sizeof path, "%s/memory.safetensors", f.dir);
    size_t len = 0;
    mem_ref.img = read_all(path, &len);
    char err[512];
    CHECK(mem_ref.img && safetensors_parse(mem_ref.img, len, path, &mem_ref.l, err, sizeof err) == 0,
          "%s: %s", path, err);
    for (int fmt = 0; fmt < 2; fmt++) {
        char uio_dir[4300], what[128];
        snprintf(uio_dir, sizeof uio_dir, "%s/%s", f.dir, FORMATS[fmt]);
        snprintf(what, sizeof what, "%s/%s (%s)", name, FORMATS[fmt], devname);
        mnemo_status st;
        mnemo_model *m = load_uio(f.base, uio_dir, dev, &st);
        CHECK(st == MNEMO_OK, "%s: load: %s", what, mnemo_model_error(m));
        if (st != MNEMO_OK) {
            mnemo_model_free(m);
            continue;
        }
        mnemo_uio_info info;
        CHECK(mnemo_model_uio(m, &info) == MNEMO_OK && info.chunk_size == f.C && info.num_memory == f.M &&
                  !strcmp(info.file, fmt ? "uio.safetensors" : "uio.pth") &&
                  info.n_params > (uint64_t)mnemo_model_n_embd(m) && strstr(mnemo_model_desc(m), "UIO"),
              "%s: mnemo_model_uio / desc: %s", what, mnemo_model_desc(m));
        bool host = m->be->host_memory;
        run_one_call(m, &f, what);
        run_tokens(m, &f, host ? &mem_ref : NULL, what);
        run_calls(m, &f, what);
        run_batch(m, &f, what);
        run_generate(m, &f, what);
        /* other UIO weights over the same base: the other mha case (the gqa one has no partner) */
        mnemo_model *other = NULL;
        if (strncmp(name, "mha", 3) == 0) {
            char od[4300];
            snprintf(od, sizeof od, "%s/uio/%s/uio_st", test_fixtures(),
                     strcmp(name, "mha_c16_m4") ? "mha_c16_m4" : "mha_c16_m2_bf16");
            other = load_uio(f.base, od, dev, &st);
        }
        run_snapshot(m, other, &f, f.C * 3 + 5, false, what);
        run_snapshot(m, NULL, &f, f.C * 3, true, what); /* a compression due in the snapshot */
        mnemo_model_free(other);
        if (host && fmt == 0) check_power(m, &f, what);
        mnemo_model_free(m);
    }
    tensor_list_free(&mem_ref.l);
    free(mem_ref.img);
    free_fixture(&f);
}

/* ---- malformed and mismatched directories */

static void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
}

static void copy_file(const char *from, const char *to, size_t max) {
    size_t len = 0;
    uint8_t *b = read_all(from, &len);
    FILE *fp = fopen(to, "wb");
    if (b && fp) fwrite(b, 1, len < max ? len : max, fp);
    if (fp) fclose(fp);
    free(b);
}

/* Expects the load of dir over base to fail with st and a message holding want (and naming file). */
static void refused(const char *base, const char *dir, mnemo_status want_st, const char *want, const char *file,
                    int line) {
    mnemo_status st;
    mnemo_model *m = load_uio(base, dir, MNEMO_DEVICE_CPU, &st);
    const char *msg = mnemo_model_error(m);
    CHECK(st == want_st && strstr(msg, want) && strstr(msg, file), "line %d: status %d (want %d), message '%s' lacks "
          "'%s' or '%s'", line, st, want_st, msg, want, file);
    mnemo_model_free(m);
}
#define REFUSED(dir, st, want, file) refused(base, dir, st, want, file, __LINE__)

/* uio.safetensors from the mha_c16_m4 fixture with tensor `drop` left out and `rename` renamed (-1: none). */
static void write_st_variant(const char *dir, int drop, int rename) {
    char path[4200];
    snprintf(path, sizeof path, "%s/uio/mha_c16_m4/uio_st/uio.safetensors", test_fixtures());
    size_t len = 0;
    uint8_t *img = read_all(path, &len);
    tensor_list l = {0};
    char err[512];
    if (!img || safetensors_parse(img, len, path, &l, err, sizeof err) != 0) {
        CHECK(0, "%s: %s", path, err);
        free(img);
        return;
    }
    st_tensor ts[64];
    size_t n = 0;
    for (size_t i = 0; i < l.count && n < 64; i++) {
        if ((int)i == drop) continue;
        ts[n++] = (st_tensor){(int)i == rename ? "encoder.layers.0.k_proj.lora_A" : l.items[i].name, l.items[i].dtype,
                              l.items[i].ndim, l.items[i].shape, l.items[i].data};
    }
    snprintf(path, sizeof path, "%s/uio.safetensors", dir);
    const char *meta[] = {"format", "mnemo-uio/1"};
    CHECK(safetensors_write(path, ts, n, meta, 1, err, sizeof err) == 0, "write %s: %s", path, err);
    tensor_list_free(&l);
    free(img);
}

static void test_malformed(void) {
    char base[4200], dir[4200], path[4300], src[4300];
    snprintf(base, sizeof base, "%s/models/mha", test_fixtures());
    const char *good_cfg = "{\"num_memory\": 4, \"lora_rank\": 4, \"lora_alpha\": 8, \"lora_dropout\": 0, "
                           "\"chunk_size\": 16}";
    int k = 0;
#define NEW_DIR() (snprintf(dir, sizeof dir, "%s/bad%d", g_tmp, k++), mkdir(dir, 0755))
#define CFG(text) (snprintf(path, sizeof path, "%s/uio_config.json", dir), write_text(path, text))
    NEW_DIR();
    REFUSED(dir, MNEMO_ERR_IO, "cannot open", "uio_config.json");
    CFG("{\"num_memory\": 4,");
    REFUSED(dir, MNEMO_ERR_FORMAT, "not valid JSON", "uio_config.json");
    CFG("[1, 2]");
    REFUSED(dir, MNEMO_ERR_FORMAT, "not a JSON object", "uio_config.json");
    CFG("{\"num_memory\": 3, \"lora_rank\": 4, \"lora_alpha\": 8, \"lora_dropout\": 0, \"chunk_size\": 16}");
    REFUSED(dir, MNEMO_ERR_FORMAT, "chunk_size 16 is not a multiple of num_memory 3", "uio_config.json");
    CFG("{\"num_memory\": 4, \"lora_rank\": \"4\", \"lora_alpha\": 8, \"chunk_size\": 16}");
    REFUSED(dir, MNEMO_ERR_FORMAT, "lora_rank must be an integer", "uio_config.json");
    CFG("{\"num_memory\": 4, \"lora_rank\": 4, \"chunk_size\": 16}");
    REFUSED(dir, MNEMO_ERR_FORMAT, "lora_alpha must be a number", "uio_config.json");
    CFG("{\"num_memory\": 0, \"lora_rank\": 4, \"lora_alpha\": 8, \"chunk_size\": 16}");
    REFUSED(dir, MNEMO_ERR_FORMAT, "num_memory must be an integer", "uio_config.json");
    CFG("{\"num_memory\": 4, \"lora_rank\": 4, \"lora_alpha\": 8, \"lora_dropout\": 1.5, \"chunk_size\": 16}");
    REFUSED(dir, MNEMO_ERR_FORMAT, "lora_dropout", "uio_config.json");
    CFG(good_cfg);
    REFUSED(dir, MNEMO_ERR_IO, "neither uio.safetensors nor uio.pth", dir);

    /* the GQA case's checkpoint over the MHA base: widths differ */
    snprintf(src, sizeof src, "%s/uio/gqa_c12_m3/uio_pth/uio.pth", test_fixtures());
    snprintf(path, sizeof path, "%s/uio.pth", dir);
    copy_file(src, path, SIZE_MAX);
    REFUSED(dir, MNEMO_ERR_FORMAT, "has shape [1, 1, 96], expected (1, 1, 64)", "uio.pth");
    /* a rank the tensors do not have */
    snprintf(src, sizeof src, "%s/uio/mha_c16_m4/uio_pth/uio.pth", test_fixtures());
    copy_file(src, path, SIZE_MAX);
    CFG("{\"num_memory\": 4, \"lora_rank\": 8, \"lora_alpha\": 8, \"lora_dropout\": 0, \"chunk_size\": 16}");
    REFUSED(dir, MNEMO_ERR_FORMAT, "encoder.layers.0.q_proj.lora_A has shape [4, 64], expected [8, 64]", "uio.pth");
    CFG(good_cfg);
    /* a truncated uio.pth */
    snprintf(path, sizeof path, "%s/uio.pth", dir);
    copy_file(src, path, 3000);
    REFUSED(dir, MNEMO_ERR_FORMAT, "", "uio.pth");
    unlink(path);
    /* the GQA checkpoint over the GQA base loads; over a 2-layer base with another count it would not: drop one */
    NEW_DIR();
    CFG(good_cfg);
    write_st_variant(dir, 5, -1);
    REFUSED(dir, MNEMO_ERR_FORMAT, "17 tensors, but a UIO checkpoint for this 2-layer model holds 18",
            "uio.safetensors");
    write_st_variant(dir, -1, 3);
    REFUSED(dir, MNEMO_ERR_FORMAT, "is not a UIO tensor", "uio.safetensors");
    /* safetensors is preferred over uio.pth when both are there: a good pth does not hide a bad safetensors */
    snprintf(path, sizeof path, "%s/uio.pth", dir);
    copy_file(src, path, SIZE_MAX);
    REFUSED(dir, MNEMO_ERR_FORMAT, "is not a UIO tensor", "uio.safetensors");
    /* UIO over a LongLLaMA checkpoint */
    char ll[4200];
    snprintf(ll, sizeof ll, "%s/longllama/basic", test_fixtures());
    snprintf(dir, sizeof dir, "%s/uio/mha_c16_m4/uio_st", test_fixtures());
    mnemo_status st;
    mnemo_model *m = load_uio(ll, dir, MNEMO_DEVICE_CPU, &st);
    CHECK(st == MNEMO_ERR_UNSUPPORTED && strstr(mnemo_model_error(m), "LongLLaMA"), "UIO over LongLLaMA: %d (%s)", st,
          mnemo_model_error(m));
    mnemo_model_free(m);
    /* a plain model has no UIO */
    mnemo_model_params mp = mnemo_model_default_params();
    mp.n_threads = 1; /* tiny models: more threads only wait on each other */
    m = NULL;
    mnemo_model_load(base, &mp, &m);
    mnemo_uio_info info;
    CHECK(mnemo_model_uio(m, &info) == MNEMO_ERR_UNSUPPORTED, "mnemo_model_uio on a plain model");
    mnemo_model_free(m);
#undef NEW_DIR
#undef CFG
}

typedef struct {
    int n, stop_at;
    int64_t done[8], total[8];
} progress_log;

static bool on_progress(int64_t done, int64_t total, void *user) {
    progress_log *p = user;
    if (p->n < 8) p->done[p->n] = done, p->total[p->n] = total;
    return ++p->n != p->stop_at;
}

/* A call cut at segment boundaries reports each piece; stopping it resets the context. */
static void test_progress(mnemo_model *m) {
    mnemo_context *ctx = new_ctx(m, false, 0);
    if (!ctx) return;
    int32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = 5 + i;
    progress_log p = {0};
    mnemo_context_set_progress(ctx, on_progress, &p);
    mnemo_status st = mnemo_decode(ctx, toks, 40); /* C = 16: pieces of 16, 16, 8 */
    CHECK(st == MNEMO_OK && p.n == 3 && p.done[0] == 16 && p.done[1] == 32 && p.done[2] == 40 && p.total[2] == 40,
          "progress of 40 tokens: %d reports (%lld, %lld, %lld)", p.n, (long long)p.done[0], (long long)p.done[1],
          (long long)p.done[2]);
    p = (progress_log){.stop_at = 1};
    st = mnemo_decode(ctx, toks, 40);
    mnemo_memory_stats ms;
    CHECK(st == MNEMO_ERR_CANCELLED && mnemo_context_n_past(ctx) == 0 && mnemo_context_memory(ctx, &ms) == MNEMO_OK &&
              ms.mem_entries == 0 && ms.local_tokens == 0 && strstr(mnemo_context_error(ctx), "reset"),
          "a cancelled UIO decode resets the context: %d (%s)", st, mnemo_context_error(ctx));
    CHECK(mnemo_context_set_last_context_length(ctx, 4) == MNEMO_ERR_UNSUPPORTED, "last_context_length on UIO");
    mnemo_context_free(ctx);
}

/* n_ctx bounds memory + raw: too small a context is refused; a full one refuses a decode whole and ends
 * generation with FINISH_CONTEXT. */
static void test_limits(void) {
    char base[4200], dir[4300];
    snprintf(base, sizeof base, "%s/models/mha", test_fixtures());
    snprintf(dir, sizeof dir, "%s/uio/mha_c16_m4/uio_st", test_fixtures());
    mnemo_status st;
    mnemo_model *m = load_uio(base, dir, MNEMO_DEVICE_CPU, &st);
    CHECK(st == MNEMO_OK, "load: %s", mnemo_model_error(m));
    if (st != MNEMO_OK) {
        mnemo_model_free(m);
        return;
    }
    mnemo_context_params cp = mnemo_context_default_params();
    cp.n_ctx = 19; /* < C + M = 20 */
    mnemo_context *ctx = NULL;
    st = mnemo_context_new(m, &cp, &ctx);
    CHECK(st == MNEMO_ERR_INVALID_ARG && strstr(mnemo_context_error(ctx), "too small"), "n_ctx 19: %d (%s)", st,
          mnemo_context_error(ctx));
    mnemo_context_free(ctx);
    cp.n_ctx = 28; /* memory + raw <= 28: 3 segments' memory (12) + 16 raw */
    ctx = NULL;
    st = mnemo_context_new(m, &cp, &ctx);
    CHECK(st == MNEMO_OK, "n_ctx 28: %s", mnemo_context_error(ctx));
    int32_t toks[80];
    for (int i = 0; i < 80; i++) toks[i] = 3 + i;
    st = mnemo_decode(ctx, toks, 64); /* 4 segments: the 4th needs 12 + 16 = 28 rows, then 16 entries */
    CHECK(st == MNEMO_OK, "64 tokens in n_ctx 28: %s", mnemo_context_error(ctx));
    st = mnemo_decode(ctx, toks, 13); /* 16 + 13 = 29 > 28 */
    CHECK(st == MNEMO_ERR_CONTEXT_FULL && mnemo_context_n_past(ctx) == 64 && strstr(mnemo_context_error(ctx), "UIO"),
          "13 more: %d (%s)", st, mnemo_context_error(ctx));
    mnemo_generate_params gp = mnemo_generate_default_params();
    gp.sampling.temperature = 0.f;
    gp.max_tokens = 50;
    gp.ignore_eos = true;
    mnemo_generate_result res;
    st = mnemo_generate_tokens(ctx, toks, 5, &gp, NULL, NULL, &res);
    CHECK(st == MNEMO_OK && res.finish_reason == MNEMO_FINISH_CONTEXT && mnemo_context_n_past(ctx) == 64 + 12,
          "generation in a full context: %d, finish %d, n_past %d (%s)", st, res.finish_reason,
          mnemo_context_n_past(ctx), mnemo_context_error(ctx));
    mnemo_context_reset(ctx);
    mnemo_memory_stats ms;
    CHECK(mnemo_context_memory(ctx, &ms) == MNEMO_OK && ms.mem_entries == 0 && ms.local_tokens == 0 &&
              mnemo_context_n_past(ctx) == 0,
          "reset empties the memory");
    mnemo_context_free(ctx);
    test_progress(m);
    mnemo_model_free(m);
}

int main(void) {
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_devices devs = test_pick_devices();
    mnemo_log_set_level(MNEMO_LOG_ERROR);
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        if (devs.cpu) run_case(CASES[c], MNEMO_DEVICE_CPU, "cpu");
        if (devs.cuda) run_case(CASES[c], MNEMO_DEVICE_CUDA, "cuda");
    }
    for (int i = 0; i < MODE_COUNT; i++) printf("worst |dlogit|, %s: %.3g\n", MODE_NAMES[i], g_worst[i]);
    printf("worst |d<mem> hidden| %.3g, |d memory K/V| %.3g\n", g_worst_h, g_worst_kv);
    test_malformed();
    test_limits();
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return test_summary();
}
