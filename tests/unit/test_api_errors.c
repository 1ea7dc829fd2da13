/*
 * test_api_errors.c — libengine's public API under bad input and misuse: broken model directories (each
 * error must name the file and the problem, with the right status), NULL and out-of-range arguments, handles
 * whose creation failed, a full context, invalid generation settings. Nothing may crash.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "kernels.h"
#include "test_util.h"

static char tmp_root[256];

static int copy_file(const char *from, const char *to, long limit) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    if (!a || !b) { if (a) fclose(a); if (b) fclose(b); return -1; }
    char buf[65536];
    long total = 0;
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) {
        if (limit >= 0 && total + (long)n > limit) n = (size_t)(limit - total);
        fwrite(buf, 1, n, b);
        total += (long)n;
        if (limit >= 0 && total >= limit) break;
    }
    fclose(a);
    fclose(b);
    return 0;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) { fputs(text, f); fclose(f); }
}

/* A copy of the mha fixture in tmp_root/<name>; the caller then breaks one thing. */
static void make_model_dir(const char *name, char *out, size_t outlen) {
    snprintf(out, outlen, "%s/%s", tmp_root, name);
    mkdir(out, 0755);
    const char *files[] = {"config.json", "model.safetensors", "tokenizer.model"};
    for (int i = 0; i < 3; i++) {
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/models/mha/%s", test_fixtures(), files[i]);
        snprintf(b, sizeof b, "%s/%s", out, files[i]);
        copy_file(a, b, -1);
    }
}

static void expect_load_error_p(const char *dir, const mnemo_model_params *mp, mnemo_status want, const char *msg_part,
                                const char *what) {
    mnemo_model *m = NULL;
    mnemo_status st = mnemo_model_load(dir, mp, &m);
    const char *msg = mnemo_model_error(m);
    CHECK(st == want && m != NULL && strstr(msg, msg_part) != NULL, "%s: status %s (want %s), message '%s' (want '%s')",
          what, mnemo_status_str(st), mnemo_status_str(want), msg, msg_part);
    /* a failed handle refuses use instead of crashing */
    mnemo_context *ctx = NULL;
    CHECK(mnemo_context_new(m, NULL, &ctx) == MNEMO_ERR_MISUSE, "%s: context on a failed model is misuse", what);
    mnemo_context_free(ctx);
    int32_t n = 0;
    CHECK(mnemo_tokenize(m, "x", 1, true, NULL, 0, &n) == MNEMO_ERR_MISUSE, "%s: tokenize on failed model", what);
    CHECK(mnemo_model_n_vocab(m) == 0 && mnemo_model_desc(m)[0] == '\0', "%s: accessors on failed model", what);
    mnemo_model_free(m);
}

static void expect_load_error(const char *dir, mnemo_status want, const char *msg_part, const char *what) {
    expect_load_error_p(dir, NULL, want, msg_part, what);
}

static void broken_dirs(void) {
    char dir[512], path[1024], src[1024];
    expect_load_error("/nonexistent/dir", MNEMO_ERR_IO, "/nonexistent/dir: not a directory", "missing dir");
    expect_load_error("", MNEMO_ERR_INVALID_ARG, "no model directory", "empty path");

    snprintf(dir, sizeof dir, "%s/empty", tmp_root);
    mkdir(dir, 0755);
    expect_load_error(dir, MNEMO_ERR_IO, "config.json: missing", "empty dir");

    make_model_dir("no_tokenizer", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    unlink(path);
    expect_load_error(dir, MNEMO_ERR_IO, "neither tokenizer.model (SentencePiece) nor tokenizer.json", "no tokenizer");

    make_model_dir("bad_tokenizer", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    write_text(path, "this is not a protobuf");
    expect_load_error(dir, MNEMO_ERR_FORMAT, "tokenizer.model", "garbage tokenizer");

    make_model_dir("no_weights", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    expect_load_error(dir, MNEMO_ERR_IO, "no weights found", "no weights");

    make_model_dir("truncated", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(src, sizeof src, "%s/models/mha/model.safetensors", test_fixtures());
    copy_file(src, path, 5000);
    expect_load_error(dir, MNEMO_ERR_FORMAT, "model.safetensors", "truncated weights");

    make_model_dir("header_lies", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    if (f) { uint64_t huge = 1ull << 40; fwrite(&huge, 8, 1, f); fclose(f); }
    expect_load_error(dir, MNEMO_ERR_FORMAT, "model.safetensors", "header length past EOF");

    /* one extra space in the JSON header shifts the data area, and so every tensor, by one byte */
    make_model_dir("misaligned", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(src, sizeof src, "%s/models/mha/model.safetensors", test_fixtures());
    FILE *in = fopen(src, "rb"), *outf = fopen(path, "wb");
    uint64_t hlen = 0;
    if (in && outf && fread(&hlen, 8, 1, in) == 1) {
        uint64_t padded = hlen + 1;
        fwrite(&padded, 8, 1, outf);
        for (uint64_t i = 0; i < hlen; i++) fputc(fgetc(in), outf);
        fputc(' ', outf);
        int c;
        while ((c = fgetc(in)) != EOF) fputc(c, outf);
    }
    if (in) fclose(in);
    if (outf) fclose(outf);
    expect_load_error(dir, MNEMO_ERR_FORMAT, "not a multiple of its 4-byte elements", "misaligned tensor");

    make_model_dir("not_json", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "{\"hidden_size\": 64,");
    expect_load_error(dir, MNEMO_ERR_FORMAT, "config.json", "config not JSON");

    make_model_dir("wrong_type", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": \"64\", \"intermediate_size\": 88,"
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 512}");
    expect_load_error(dir, MNEMO_ERR_FORMAT, "hidden_size", "hidden_size as a string");

    make_model_dir("gpt2", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "{\"architectures\": [\"GPT2LMHeadModel\"], \"hidden_size\": 64, \"intermediate_size\": 88,"
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 512}");
    expect_load_error(dir, MNEMO_ERR_UNSUPPORTED, "GPT2LMHeadModel", "unsupported architecture");

    /* a config whose sizes disagree with the tensors: the message names tensor, file and both shapes */
    make_model_dir("shape_mismatch", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(src, sizeof src, "%s/models/mha/config.json", test_fixtures());
    FILE *cf = fopen(src, "r");
    char cfg[8192] = {0};
    size_t cn = cf ? fread(cfg, 1, sizeof cfg - 1, cf) : 0;
    if (cf) fclose(cf);
    cfg[cn] = '\0';
    char *ff = strstr(cfg, "\"intermediate_size\"");
    if (ff) {
        char *colon = strchr(ff, ':');
        int old = atoi(colon + 1);
        char num[32];
        int len = snprintf(num, sizeof num, "%d", old);
        char patched[8192];
        snprintf(patched, sizeof patched, "%.*s%d%s", (int)(colon + 1 - cfg) + (colon[1] == ' '), cfg, old + 8,
                 colon + 1 + (colon[1] == ' ') + len);
        write_text(path, patched);
    }
    CHECK(ff != NULL, "fixture config has intermediate_size");
    expect_load_error(dir, MNEMO_ERR_FORMAT, "mlp.gate_proj.weight' has shape", "shape mismatch");

    CHECK(mnemo_model_load(dir, NULL, NULL) == MNEMO_ERR_INVALID_ARG, "load with NULL out");
    mnemo_model_params bad = mnemo_model_default_params();
    bad.n_threads = -3;
    make_model_dir("ok", dir, sizeof dir);
    expect_load_error_p(dir, &bad, MNEMO_ERR_INVALID_ARG, "n_threads -3", "negative threads");
    mnemo_model_params cuda = mnemo_model_default_params();
    cuda.device = MNEMO_DEVICE_CUDA;
    if (!kern_cuda_available(NULL, 0)) /* with a GPU present the load succeeds; test_reference_models covers it */
        expect_load_error_p(dir, &cuda, MNEMO_ERR_UNSUPPORTED, "no CUDA backend", "cuda without backend");
}

static void misuse_and_limits(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/models/mha", test_fixtures());
    mnemo_model *m = NULL;
    mnemo_status st = mnemo_model_load(dir, NULL, &m);
    CHECK(st == MNEMO_OK, "load mha: %s", mnemo_model_error(m));
    if (st != MNEMO_OK) { mnemo_model_free(m); return; }
    mnemo_model_free(NULL);
    mnemo_context_free(NULL);
    mnemo_sampler_free(NULL);

    /* tokenizer buffers */
    int32_t ids[4], n = 0;
    CHECK(mnemo_tokenize(m, "To be, or not to be, that is the question", 41, true, ids, 4, &n) == MNEMO_ERR_TOO_SMALL &&
          n > 4, "tokenize reports the needed size");
    CHECK(mnemo_tokenize(m, NULL, 3, true, ids, 4, &n) == MNEMO_ERR_INVALID_ARG, "tokenize NULL text");
    int32_t bad_ids[2] = {5, 1 << 30};
    char text[64];
    size_t len;
    CHECK(mnemo_detokenize(m, bad_ids, 2, text, sizeof text, &len) == MNEMO_ERR_INVALID_ARG, "detokenize bad id");
    CHECK(mnemo_token_to_piece(m, -1, text, sizeof text, &len) == MNEMO_ERR_INVALID_ARG, "piece of -1");
    CHECK(mnemo_detokenize(m, ids, 0, text, sizeof text, &len) == MNEMO_OK && len == 0, "detokenize nothing");

    /* context limits */
    mnemo_context_params cp = mnemo_context_default_params();
    cp.n_ctx = 8;
    mnemo_context *ctx = NULL;
    CHECK(mnemo_context_new(m, &cp, &ctx) == MNEMO_OK, "context of 8");
    int32_t toks[10] = {1, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    st = mnemo_decode(ctx, toks, 10);
    CHECK(st == MNEMO_ERR_CONTEXT_FULL &&
              strstr(mnemo_context_error(ctx), "10 tokens do not fit in the context: it has 8 positions, 0 in use, 8 free") &&
              mnemo_context_n_past(ctx) == 0,
          "decode past n_ctx refused and says so: %s", mnemo_context_error(ctx));
    int32_t oov[2] = {1, 512};
    st = mnemo_decode(ctx, oov, 2);
    CHECK(st == MNEMO_ERR_INVALID_ARG && strstr(mnemo_context_error(ctx), "outside the vocabulary") &&
          mnemo_context_n_past(ctx) == 0, "out-of-vocab token refused, context unchanged");
    CHECK(mnemo_decode(ctx, toks, 0) == MNEMO_ERR_INVALID_ARG, "decode of 0 tokens");
    CHECK(mnemo_decode(ctx, toks, 6) == MNEMO_OK && mnemo_context_n_past(ctx) == 6, "decode 6");
    CHECK(mnemo_get_logits(ctx, -1) != NULL && mnemo_get_logits(ctx, 0) == NULL && mnemo_get_logits(ctx, 6) == NULL,
          "only the last position's logits are kept without logits_all");

    /* generation runs into the end of the context: finishes cleanly with reason CONTEXT */
    mnemo_generate_params gp = mnemo_generate_default_params();
    gp.max_tokens = 10;
    gp.ignore_eos = true;
    mnemo_generate_result res;
    st = mnemo_generate_tokens(ctx, NULL, 0, &gp, NULL, NULL, &res);
    CHECK(st == MNEMO_OK && res.finish_reason == MNEMO_FINISH_CONTEXT && res.n_generated == 3 &&
          mnemo_context_n_past(ctx) == 8, "generate stops at a full context (%s, %d generated, n_past %d)",
          mnemo_status_str(st), res.n_generated, mnemo_context_n_past(ctx));
    mnemo_context_reset(ctx);
    CHECK(mnemo_context_n_past(ctx) == 0, "reset empties the context");

    gp.n_logprobs = 21;
    CHECK(mnemo_generate(ctx, "x", &gp, NULL, NULL, NULL) == MNEMO_ERR_INVALID_ARG, "n_logprobs 21 refused");
    gp.n_logprobs = 0;
    gp.sampling.top_p = 1.5f;
    CHECK(mnemo_generate(ctx, "x", &gp, NULL, NULL, NULL) == MNEMO_ERR_INVALID_ARG, "top_p 1.5 refused");
    gp = mnemo_generate_default_params();
    gp.n_stop = 1;
    CHECK(mnemo_generate(ctx, "x", &gp, NULL, NULL, NULL) == MNEMO_ERR_INVALID_ARG, "stop count without strings");
    gp = mnemo_generate_default_params();
    gp.add_bos = false;
    CHECK(mnemo_generate(ctx, "", &gp, NULL, NULL, NULL) == MNEMO_ERR_INVALID_ARG, "empty prompt on empty context");
    CHECK(mnemo_generate(ctx, "a long prompt that does not fit in eight tokens at all", &gp, NULL, NULL, NULL) ==
              MNEMO_ERR_CONTEXT_FULL, "prompt longer than the context refused");
    CHECK(mnemo_generate(NULL, "x", &gp, NULL, NULL, NULL) == MNEMO_ERR_MISUSE, "generate on NULL context");
    mnemo_context_free(ctx);

    cp.n_ctx = -1;
    CHECK(mnemo_context_new(m, &cp, &ctx) == MNEMO_ERR_INVALID_ARG && strstr(mnemo_context_error(ctx), "n_ctx"),
          "negative n_ctx refused");
    mnemo_context_free(ctx);

    /* kernel settings: known names and values apply (also the other backend's), the rest are refused by name */
    static const struct { const char *list, *want; } ks[] = {
        {"cpu.gemm=exact,cpu.f32gemm=off,cpu.qpanel=on,cuda.attn=mma,cuda.dec_blocks_per_sm=12,", NULL},
        {"cpu.gemm=fastest", "'fastest' is not one of fast|exact"},
        {"cuda.attn=wmma", "'wmma' is not one of simt|tc|mma"},
        {"cuda.dec_blocks_per_sm=65", "not one of auto|1..64"},
        {"cpu.gemv=on", "unknown kernel setting 'cpu.gemv' (known: cpu.gemm,"},
        {"cpu.gemm", "is not NAME=VALUE"},
    };
    cp.n_ctx = 8;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        cp.kernel_settings = ks[i].list;
        mnemo_status st = mnemo_context_new(m, &cp, &ctx);
        CHECK(ks[i].want ? st == MNEMO_ERR_INVALID_ARG && strstr(mnemo_context_error(ctx), ks[i].want)
                         : st == MNEMO_OK,
              "kernel settings '%s': %s, '%s'", ks[i].list, mnemo_status_str(st), mnemo_context_error(ctx));
        mnemo_context_free(ctx);
    }
    cp.kernel_settings = NULL;
    mnemo_model_free(m);
}

static void quiet(mnemo_log_level level, const char *msg, void *user) { (void)level; (void)msg; (void)user; }

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/mnemo_test_api_%d", (int)getpid());
    mkdir(tmp_root, 0755);
    mnemo_log_set(quiet, NULL); /* keep the expected errors out of the test log */
    broken_dirs();
    misuse_and_limits();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return test_summary();
}
