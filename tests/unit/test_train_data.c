/*
 * test_train_data.c — the training data: a text file becomes windows of seq_len + 1 ids that
 * overlap by one (BOS + the file's ids), in order or a per-epoch permutation drawn from the seed alone; a JSON-lines
 * file becomes padded rows whose loss covers the completion and EOS only; every bad file is refused at open with
 * the file (and line) named. A chat-format line ({"messages": [...]}) becomes the model's chat template rendered and
 * tokenized as mnemo-server tokenizes a chat prompt, the loss on the assistant answers (content + end-of-turn
 * marker) only: llama2 (no chat_template in the fixture's tokenizer_config.json), chatml (a copy of the fixture
 * whose tokenizer_config.json names one) and the llama2 fallback for a template mnemo does not know.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "test_util.h"
#include "train_data.h"

static char g_dir[] = "/tmp/mnemo-train-data-XXXXXX";

static const char *write_file(const char *name, const char *bytes, size_t n) {
    static char path[8][512];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 512, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
    return p;
}

static mnemo_token *tokenize(mnemo_model *m, const char *s, int32_t *n) {
    mnemo_tokenize(m, s, strlen(s), true, NULL, 0, n);
    mnemo_token *ids = malloc((size_t)*n * sizeof *ids);
    mnemo_tokenize(m, s, strlen(s), true, ids, *n, n);
    return ids;
}

static void check_text(mnemo_model *m) {
    char text[4096] = "";
    for (int i = 0; i < 40; i++) strcat(text, "To be, or not to be, that is the question. ");
    const char *path = write_file("corpus.txt", text, strlen(text));
    int32_t n = 0, L = 16;
    mnemo_token *ids = tokenize(m, text, &n);
    char err[512];
    train_data *d = train_data_open(m, path, L, false, 1, err, sizeof err);
    CHECK(d != NULL, "open text: %s", err);
    if (!d) return;
    int64_t n_ex = train_data_examples(d);
    CHECK(train_data_is_text(d) && n_ex == (n - 1) / L, "%lld windows from %d ids (want %d)", (long long)n_ex, n,
          (n - 1) / L);
    mnemo_token row[17];
    uint8_t mask[16];
    bool windows_ok = true, masks_ok = true;
    for (int64_t step = 0; step < 2 * n_ex; step++)
        for (int32_t r = 0; r < 3; r++) {
            int64_t want = (step * 3 + r) % n_ex, got = train_data_row(d, step, 3, r, row, mask);
            windows_ok &= got == want && !memcmp(row, ids + want * L, sizeof row); /* overlap by one, wrapping */
            for (int t = 0; t < L; t++) masks_ok &= mask[t] == 1;
        }
    CHECK(windows_ok && masks_ok, "shuffle off: step s row r is window (s*rows + r) mod n, every token counts");
    CHECK(ids[0] == mnemo_model_bos(m), "the stream starts with BOS");
    train_data_free(d);

    /* shuffle: each epoch is a permutation, the same for the same seed, another for another seed or epoch */
    train_data *a = train_data_open(m, path, L, true, 7, err, sizeof err);
    train_data *b = train_data_open(m, path, L, true, 7, err, sizeof err);
    train_data *c = train_data_open(m, path, L, true, 8, err, sizeof err);
    CHECK(a && b && c, "open shuffled: %s", err);
    if (a && b && c) {
        int64_t *seen = calloc((size_t)n_ex, sizeof *seen);
        bool perm = true, same = true, other_seed = false, other_epoch = false, identity = true;
        for (int64_t j = 0; j < n_ex; j++) {
            int64_t e0 = train_data_row(a, j, 1, 0, row, mask), e1 = train_data_row(a, n_ex + j, 1, 0, row, mask);
            perm &= e0 >= 0 && e0 < n_ex && !seen[e0]++;
            same &= train_data_row(b, j, 1, 0, row, mask) == e0;
            other_seed |= train_data_row(c, j, 1, 0, row, mask) != e0;
            other_epoch |= e1 != e0;
            identity &= e0 == j;
        }
        CHECK(perm && same && other_seed && other_epoch && !identity,
              "shuffle: permutation %d, reproducible %d, seed changes it %d, epoch changes it %d, not identity %d",
              perm, same, other_seed, other_epoch, !identity);
        free(seen);
    }
    train_data_free(a);
    train_data_free(b);
    train_data_free(c);
    free(ids);
}

static void check_jsonl(mnemo_model *m) {
    const char *lines = "{\"prompt\": \"Q: who wrote Hamlet?\\nA:\", \"completion\": \" Shakespeare.\"}\n"
                        "\n"
                        "  {\"completion\": \"To be.\", \"prompt\": \"\"}  \r\n";
    const char *path = write_file("sft.jsonl", lines, strlen(lines));
    char err[512];
    int32_t L = 32;
    train_data *d = train_data_open(m, path, L, false, 0, err, sizeof err);
    CHECK(d && !train_data_is_text(d) && train_data_examples(d) == 2, "two examples, blank line skipped: %s", err);
    if (!d) return;
    const char *ex[2][2] = {{"Q: who wrote Hamlet?\nA:", " Shakespeare."}, {"", "To be."}};
    for (int e = 0; e < 2; e++) {
        char both[128];
        snprintf(both, sizeof both, "%s%s", ex[e][0], ex[e][1]);
        int32_t np = 0, na = 0;
        mnemo_token *pid = tokenize(m, ex[e][0], &np), *all = tokenize(m, both, &na);
        int32_t agree = 0;
        while (agree < np && agree < na && pid[agree] == all[agree]) agree++;
        mnemo_token row[33];
        uint8_t mask[32];
        CHECK(train_data_row(d, e, 1, 0, row, mask) == e, "example %d in order", e);
        bool ids_ok = !memcmp(row, all, (size_t)na * sizeof *row) && row[na] == mnemo_model_eos(m);
        int counted = 0;
        bool mask_ok = true;
        for (int t = 0; t < L; t++) {
            bool want = t + 1 >= agree && t + 1 <= na; /* completion tokens, then the EOS at na */
            mask_ok &= mask[t] == want;
            counted += mask[t];
        }
        bool pad_ok = true;
        for (int t = na + 1; t <= L; t++) pad_ok &= row[t] == mnemo_model_eos(m);
        CHECK(ids_ok && mask_ok && pad_ok && counted == na - agree + 1,
              "example %d: BOS+prompt+completion+EOS, loss on %d completion tokens + EOS only (%d counted), padded", e,
              na - agree, counted);
        free(pid);
        free(all);
    }
    train_data_free(d);
}

/* ---- chat-format examples
 * The expected row is built from the render written out by hand (independent of the engine's templates): text
 * parts between specials are tokenized as one run; where an answer begins or ends inside a run, the fixture's
 * tokenizer must split cleanly (the ids of the text before the boundary are a prefix of the run's, checked), and
 * the ids after the boundary belong to the next part. */
typedef struct {
    int special;  /* 0: text, 1: BOS, 2: EOS */
    const char *text;
    bool answer;  /* counts in the loss */
} part;
#define TXT(s) {0, s, false}
#define ANS(s) {0, s, true}
#define BOS_ {1, NULL, false}
#define EOS_ANS {2, NULL, true}

static int32_t tok_nobos(mnemo_model *m, const char *s, mnemo_token *out, int32_t cap) {
    int32_t n = 0;
    mnemo_tokenize(m, s, strlen(s), false, out, cap, &n);
    return n;
}

/* ids[] and learned[] of the parts; returns their count. */
static int32_t expected_row(mnemo_model *m, const part *p, int np, mnemo_token *ids, bool *learned, int32_t cap) {
    int32_t n = 0;
    for (int i = 0; i < np;) {
        if (p[i].special) {
            ids[n] = p[i].special == 1 ? mnemo_model_bos(m) : mnemo_model_eos(m);
            learned[n++] = p[i++].answer;
            continue;
        }
        char run[2048] = "";
        int j = i;
        for (; j < np && !p[j].special; j++) strcat(run, p[j].text);
        mnemo_token whole[512], pre[512];
        int32_t nw = tok_nobos(m, run, whole, 512), done = 0;
        char upto[2048] = "";
        for (int k = i; k < j; k++) {
            strcat(upto, p[k].text);
            int32_t end = nw;
            if (k + 1 < j) {
                end = tok_nobos(m, upto, pre, 512);
                CHECK(end <= nw && !memcmp(pre, whole, (size_t)end * sizeof *pre),
                      "the fixture tokenizer splits cleanly after '%s'", p[k].text);
            }
            for (; done < end && n < cap; done++) {
                ids[n] = whole[done];
                learned[n++] = p[k].answer;
            }
        }
        i = j;
    }
    return n;
}

/* Example ex of d (in order) is exactly the parts: ids, EOS padding, mask[t] = tokens[t + 1] is learned. */
static void expect_row(mnemo_model *m, train_data *d, int64_t ex, int32_t L, const part *p, int np, const char *what) {
    mnemo_token want[512], row[513];
    bool learned[512];
    uint8_t mask[512];
    int32_t n = expected_row(m, p, np, want, learned, 512), counted = 0, want_counted = 0;
    CHECK(n <= L + 1 && train_data_row(d, ex, 1, 0, row, mask) == ex, "%s: example %lld fits", what, (long long)ex);
    bool ids_ok = !memcmp(row, want, (size_t)n * sizeof *row), mask_ok = true, pad_ok = true;
    for (int32_t t = n; t <= L; t++) pad_ok &= row[t] == mnemo_model_eos(m);
    for (int32_t t = 0; t < L; t++) {
        bool w = t + 1 < n && learned[t + 1];
        mask_ok &= mask[t] == w;
        counted += mask[t];
        want_counted += w;
    }
    CHECK(ids_ok && pad_ok, "%s: the row is the rendered conversation's ids, padded with EOS", what);
    CHECK(mask_ok && counted == want_counted && counted > 0, "%s: the loss on the answers only (%d counted, want %d)",
          what, counted, want_counted);
    int bos = 0;
    for (int32_t t = 0; t < n; t++) bos += row[t] == mnemo_model_bos(m);
    int want_bos = 0;
    for (int i = 0; i < np; i++) want_bos += p[i].special == 1;
    CHECK(bos == want_bos, "%s: %d BOS ids, one per template BOS (\"<s>\" in a message stays text)", what, bos);
}

static const char *CHAT_LINES =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \" Hi <s> \"},"
    " {\"role\": \"assistant\", \"content\": \"Hello.\"}]}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Who wrote Hamlet?\"},"
    " {\"role\": \"assistant\", \"content\": \"Shakespeare.\"}]}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello.\"},"
    " {\"role\": \"user\", \"content\": \"Bye\"}, {\"role\": \"assistant\", \"content\": \"Farewell.\"}]}\n"
    "{\"prompt\": \"Q: who?\\nA:\", \"completion\": \" me.\"}\n";

static const part LLAMA2_SYS[] = {BOS_, TXT("[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi <s> [/INST]"), ANS(" Hello. "),
                                  EOS_ANS};
static const part LLAMA2_ONE[] = {BOS_, TXT("[INST] Who wrote Hamlet? [/INST]"), ANS(" Shakespeare. "), EOS_ANS};
static const part LLAMA2_TWO[] = {BOS_, TXT("[INST] Hi [/INST]"),  ANS(" Hello. "),    EOS_ANS,
                                  BOS_, TXT("[INST] Bye [/INST]"), ANS(" Farewell. "), EOS_ANS};
#define NP(a) ((int)(sizeof a / sizeof *a))

static void check_chat_llama2(mnemo_model *m) {
    const char *file = "chat.jsonl", *path = write_file(file, CHAT_LINES, strlen(CHAT_LINES));
    char err[512];
    int32_t L = 96;
    train_data *d = train_data_open(m, path, L, false, 0, err, sizeof err);
    CHECK(d && !train_data_is_text(d) && train_data_examples(d) == 4, "%s: four examples (chat and prompt/completion "
          "mixed): %s", file, d ? "" : err);
    if (!d) return;
    expect_row(m, d, 0, L, LLAMA2_SYS, NP(LLAMA2_SYS), "llama2 with a system message");
    expect_row(m, d, 1, L, LLAMA2_ONE, NP(LLAMA2_ONE), "llama2 without one");
    expect_row(m, d, 2, L, LLAMA2_TWO, NP(LLAMA2_TWO), "llama2, two assistant turns");
    const part completion[] = {BOS_, TXT("Q: who?\nA:"), ANS(" me."), EOS_ANS}; /* splits cleanly here too */
    expect_row(m, d, 3, L, completion, NP(completion), "a prompt/completion line beside chat lines");
    train_data_free(d);
}

/* A copy of the fixture model (links to its files) with its own tokenizer_config.json. */
static const char *model_copy(const char *fixture, const char *name, const char *tokenizer_config) {
    static char dir[4][512];
    static int k;
    char *p = dir[k++ % 4];
    snprintf(p, 512, "%s/%s", g_dir, name);
    CHECK(mkdir(p, 0700) == 0, "mkdir %s", p);
    const char *files[] = {"config.json", "model.safetensors", "tokenizer.model"};
    char abs[4096];
    CHECK(realpath(fixture, abs) != NULL, "realpath %s", fixture);
    for (int i = 0; i < 3; i++) {
        char from[4200], to[600];
        snprintf(from, sizeof from, "%s/%s", abs, files[i]);
        snprintf(to, sizeof to, "%s/%s", p, files[i]);
        CHECK(symlink(from, to) == 0, "link %s", to);
    }
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", p);
    FILE *f = fopen(cfg, "w");
    fputs(tokenizer_config, f);
    fclose(f);
    return p;
}

static void check_chat_chatml(const char *fixture) {
    const char *dir = model_copy(fixture, "chatml", "{\"chat_template\": \"{% for m in messages %}<|im_start|>"
                                 "{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}\"}");
    mnemo_model *m = NULL;
    if (mnemo_model_load(dir, NULL, &m) != MNEMO_OK) {
        CHECK(0, "load %s: %s", dir, mnemo_model_error(m));
        mnemo_model_free(m);
        return;
    }
    const char *path = write_file("chatml.jsonl", CHAT_LINES, strlen(CHAT_LINES));
    char err[512];
    int32_t L = 120;
    train_data *d = train_data_open(m, path, L, false, 0, err, sizeof err);
    CHECK(d && train_data_examples(d) == 4, "chatml: four examples: %s", d ? "" : err);
    if (d) {
        const part sys[] = {BOS_,
                            TXT("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <s> <|im_end|>\n"
                                "<|im_start|>assistant\n"),
                            ANS("Hello.<|im_end|>"), TXT("\n")};
        const part two[] = {BOS_,
                            TXT("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
                            ANS("Hello.<|im_end|>"),
                            TXT("\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"),
                            ANS("Farewell.<|im_end|>"),
                            TXT("\n")};
        expect_row(m, d, 0, L, sys, NP(sys), "chatml with a system message");
        expect_row(m, d, 2, L, two, NP(two), "chatml, two assistant turns");
        train_data_free(d);
    }
    /* roles llama2 refuses are fine in chatml */
    const char *free_roles = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", "
                             "\"content\": \"b\"}, {\"role\": \"assistant\", \"content\": \"c\"}]}\n";
    d = train_data_open(m, write_file("users.jsonl", free_roles, strlen(free_roles)), 120, false, 0, err, sizeof err);
    CHECK(d != NULL, "chatml takes two user messages in a row: %s", d ? "" : err);
    train_data_free(d);
    mnemo_model_free(m);

    /* a template mnemo does not know: llama2, as mnemo-server does */
    dir = model_copy(fixture, "unknown", "{\"chat_template\": \"{{ '<|user|>' }}\"}");
    m = NULL;
    mnemo_log_set_level(MNEMO_LOG_ERROR); /* the fallback's warning */
    if (mnemo_model_load(dir, NULL, &m) == MNEMO_OK) {
        d = train_data_open(m, path, 96, false, 0, err, sizeof err);
        CHECK(d != NULL, "unknown template: %s", d ? "" : err);
        if (d) expect_row(m, d, 0, 96, LLAMA2_SYS, NP(LLAMA2_SYS), "an unknown template falls back to llama2");
        train_data_free(d);
    } else CHECK(0, "load %s: %s", dir, mnemo_model_error(m));
    mnemo_log_set_level(MNEMO_LOG_WARN);
    mnemo_model_free(m);
}

static void expect_refused(mnemo_model *m, const char *name, const char *bytes, int32_t L, const char *want) {
    const char *path = name[0] == '/' ? name : write_file(name, bytes, strlen(bytes));
    char err[512] = "";
    train_data *d = train_data_open(m, path, L, false, 0, err, sizeof err);
    CHECK(!d && strstr(err, want) && strstr(err, name), 
          "%s refused with '%s' (got '%s')", name, want, err);
    train_data_free(d);
}

/* Chat lines the fixture's template (llama2) or the format refuses, each with the file and line named. */
static void check_chat_refused(mnemo_model *m) {
#define USER(s) "{\"role\": \"user\", \"content\": \"" s "\"}"
#define ASSISTANT(s) "{\"role\": \"assistant\", \"content\": \"" s "\"}"
    const char *ok = "{\"messages\": [" USER("a") ", " ASSISTANT("b") "]}\n";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}, " ASSISTANT("b") "]}\n", ok);
    expect_refused(m, "role.jsonl", buf, 32, "role.jsonl:2: messages[0].role must be \"system\", \"user\" or");
    snprintf(buf, sizeof buf, "%s\n{\"messages\": [" USER("a") ", " USER("b") ", " ASSISTANT("c") "]}\n", ok);
    expect_refused(m, "alternate.jsonl", buf, 32, "alternate.jsonl:3: messages[1].role: the llama2 chat template");
    snprintf(buf, sizeof buf, "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, " USER("a") "]}\n");
    expect_refused(m, "noanswer.jsonl", buf, 32, "noanswer.jsonl:1: the conversation has no assistant message");
    snprintf(buf, sizeof buf, "%s{\"messages\": [" USER("a") ", " ASSISTANT("b") ", " USER("c") "]}\n", ok);
    expect_refused(m, "lastuser.jsonl", buf, 32, "lastuser.jsonl:2: the last message must be the assistant's");
    snprintf(buf, sizeof buf, "%s%s{\"messages\": [" USER("a b c d e f g h") ", " ASSISTANT("ok") "]}\n", ok, ok);
    expect_refused(m, "chatlong.jsonl", buf, 24, "chatlong.jsonl:3: the example has");
    snprintf(buf, sizeof buf, "{\"messages\": [" USER("a") ", {\"role\": \"assistant\", \"content\": 5}]}\n");
    expect_refused(m, "content.jsonl", buf, 32, "content.jsonl:1: messages[1].content must be a string");
    snprintf(buf, sizeof buf, "{\"messages\": [" USER("a") ", {\"role\": \"assistant\"}]}\n");
    expect_refused(m, "nocontent.jsonl", buf, 32, "nocontent.jsonl:1: messages[1].content must be a string");
    expect_refused(m, "msgobj.jsonl", "{\"messages\": [\"hi\"]}\n", 32,
                   "msgobj.jsonl:1: messages[0] must be an object");
    expect_refused(m, "msgarr.jsonl", "{\"messages\": {}}\n", 32, "msgarr.jsonl:1: \"messages\" must be a non-empty");
    expect_refused(m, "msgempty.jsonl", "{\"messages\": []}\n", 32,
                   "msgempty.jsonl:1: \"messages\" must be a non-empty");
    snprintf(buf, sizeof buf, "{\"prompt\": \"a\", \"messages\": [" USER("a") ", " ASSISTANT("b") "]}\n");
    expect_refused(m, "both.jsonl", buf, 32,
                   "both.jsonl:1: an example is {\"prompt\", \"completion\"} or {\"messages\"}");
}

/* {"tokens", "loss"} lines: ids as given, padded; the loss where it is 1 (absent: all but the first token). */
static void check_token_lines(mnemo_model *m) {
    const char *lines = "{\"tokens\": [1, 3, 7, 9, 4, 11], \"loss\": [0, 0, 0, 0, 1, 1]}\n"
                        "{\"tokens\": [5, 6, 7]}\n";
    const char *path = write_file("ids.jsonl", lines, strlen(lines));
    char err[512];
    int32_t L = 8;
    train_data *d = train_data_open(m, path, L, false, 0, err, sizeof err);
    CHECK(d && train_data_examples(d) == 2, "two token examples (%s)", d ? "" : err);
    if (d) {
        mnemo_token t[9];
        uint8_t mask[8];
        train_data_row(d, 0, 2, 0, t, mask);
        static const mnemo_token want0[] = {1, 3, 7, 9, 4, 11};
        static const uint8_t mask0[] = {0, 0, 0, 1, 1, 0, 0, 0};
        CHECK(!memcmp(t, want0, sizeof want0) && t[6] == mnemo_model_eos(m) && !memcmp(mask, mask0, 8),
              "example 0: ids as given, EOS padding, the loss on tokens 4 and 5 (predicted at 3 and 4)");
        train_data_row(d, 0, 2, 1, t, mask);
        static const uint8_t mask1[] = {1, 1, 0, 0, 0, 0, 0, 0};
        CHECK(t[0] == 5 && t[2] == 7 && !memcmp(mask, mask1, 8), "example 1: no loss given -> all but the first");
    }
    train_data_free(d);
    expect_refused(m, "idrange.jsonl", "{\"tokens\": [1, 512]}\n", 8, "idrange.jsonl:1: tokens[1] must be a token id");
    expect_refused(m, "idneg.jsonl", "{\"tokens\": [1, -1]}\n", 8, "idneg.jsonl:1: tokens[1] must be a token id");
    expect_refused(m, "idlong.jsonl", "{\"tokens\": [1,2,3,4,5,6,7,8,9,10]}\n", 8, "idlong.jsonl:1: the example has 10");
    expect_refused(m, "idloss.jsonl", "{\"tokens\": [1, 2], \"loss\": [1]}\n", 8,
                   "idloss.jsonl:1: \"loss\" must be an array of 0 and 1 as long");
    expect_refused(m, "idloss2.jsonl", "{\"tokens\": [1, 2], \"loss\": [0, 2]}\n", 8,
                   "idloss2.jsonl:1: loss[1] must be 0 or 1");
    expect_refused(m, "idnone.jsonl", "{\"tokens\": [1, 2], \"loss\": [1, 0]}\n", 8,
                   "idnone.jsonl:1: no token after the first has loss 1");
    expect_refused(m, "idboth.jsonl", "{\"tokens\": [1, 2], \"prompt\": \"a\"}\n", 8,
                   "idboth.jsonl:1: an example is {\"tokens\"}");
}

int main(void) {
    CHECK(mkdtemp(g_dir) != NULL, "temp dir");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/mha", test_fixtures());
    mnemo_model *m = NULL;
    if (mnemo_model_load(dir, NULL, &m) != MNEMO_OK) {
        CHECK(0, "load %s: %s", dir, mnemo_model_error(m));
        return test_summary();
    }
    check_text(m);
    check_jsonl(m);
    check_chat_llama2(m);
    check_chat_chatml(dir);
    check_chat_refused(m);
    check_token_lines(m);
    const char *big = "{\"prompt\": \"a b c d e f g h i j k l m n o p q r s t u v w x y z\", \"completion\": \" ok\"}\n";
    expect_refused(m, "/nonexistent/data.txt", "", 8, "cannot open");
    expect_refused(m, "empty.txt", "", 8, "the file is empty");
    expect_refused(m, "short.txt", "Hi.", 64, "too few for one window");
    expect_refused(m, "latin1.txt", "caf\xe9 au lait", 2, "not UTF-8 text (byte 3)");
    expect_refused(m, "broken.jsonl", "{\"prompt\":\"a\",\"completion\":\"b\"}\n\n{\"prompt\": \n", 32,
                   "broken.jsonl:3:");
    expect_refused(m, "array.jsonl", "[1,2]\n", 32, "array.jsonl:1: a line must be a JSON object");
    expect_refused(m, "nocomp.jsonl", "{\"prompt\":\"a\"}\n", 32, "nocomp.jsonl:1: an example is");
    expect_refused(m, "long.jsonl", big, 8, "long.jsonl:1: the example has");
    expect_refused(m, "emptycomp.jsonl", "{\"prompt\":\"a\",\"completion\":\"\"}\n", 32, "the completion is empty");
    expect_refused(m, "blank.jsonl", "\n  \n", 32, "no examples");
    expect_refused(m, "dup.jsonl", "{\"prompt\":\"a\",\"prompt\":\"b\",\"completion\":\"c\"}\n", 32, "dup.jsonl:1:");
    expect_refused(m, g_dir, "", 8, "read error");
    mnemo_model_free(m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return test_summary();
}
