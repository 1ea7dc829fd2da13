/*
 * test_train_data.c — the training data of issue 18 item 6: a text file becomes windows of seq_len + 1 ids that
 * overlap by one (BOS + the file's ids), in order or a per-epoch permutation drawn from the seed alone; a JSON-lines
 * file becomes padded rows whose loss covers the completion and EOS only; every bad file is refused at open with
 * the file (and line) named.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void expect_refused(mnemo_model *m, const char *name, const char *bytes, int32_t L, const char *want) {
    const char *path = name[0] == '/' ? name : write_file(name, bytes, strlen(bytes));
    char err[512] = "";
    train_data *d = train_data_open(m, path, L, false, 0, err, sizeof err);
    CHECK(!d && strstr(err, want) && strstr(err, name), 
          "%s refused with '%s' (got '%s')", name, want, err);
    train_data_free(d);
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
    const char *big = "{\"prompt\": \"a b c d e f g h i j k l m n o p q r s t u v w x y z\", \"completion\": \" ok\"}\n";
    expect_refused(m, "/nonexistent/data.txt", "", 8, "cannot open");
    expect_refused(m, "empty.txt", "", 8, "the file is empty");
    expect_refused(m, "short.txt", "Hi.", 64, "too few for one window");
    expect_refused(m, "latin1.txt", "caf\xe9 au lait", 2, "not UTF-8 text (byte 3)");
    expect_refused(m, "broken.jsonl", "{\"prompt\":\"a\",\"completion\":\"b\"}\n\n{\"prompt\": \n", 32,
                   "broken.jsonl:3:");
    expect_refused(m, "array.jsonl", "[1,2]\n", 32, "array.jsonl:1: a line must be a JSON object");
    expect_refused(m, "nocomp.jsonl", "{\"prompt\":\"a\"}\n", 32, "nocomp.jsonl:1: an example is");
    expect_refused(m, "chat.jsonl", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n", 32,
                   "chat.jsonl:1: chat \"messages\" examples are not supported yet");
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
