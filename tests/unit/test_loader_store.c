/*
 * test_loader_store.c — weight_store_open on directories written here (sharded safetensors with an index,
 * a shard name escaping the directory, a tensor in two shards, an index that lies, missing/empty/not-a-dir,
 * truncated and empty files, format preference) and on the committed fixtures (every model dir, and the
 * tiny LLaMA as safetensors, pytorch_model.bin and sharded .bin, which must agree tensor for tensor).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor_index.h"
#include "test_util.h"

static char tmp[256];

static void write_file(const char *name, const void *data, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n)) abort();
    fclose(f);
}

static void write_text(const char *name, const char *text) { write_file(name, text, strlen(text)); }

/* A safetensors file holding F32 tensors named in names (comma-separated), each [2] = {base, base+1}. */
static void write_st(const char *file, const char *names, float base) {
    char json[1024] = "{";
    float data[64];
    size_t nt = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", names);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        size_t l = strlen(json);
        snprintf(json + l, sizeof json - l,
                 "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [%zu, %zu]}", nt ? ", " : "",
                 tok, nt * 8, nt * 8 + 8);
        data[2 * nt] = base + (float)nt;
        data[2 * nt + 1] = base + (float)nt + 0.5f;
        nt++;
    }
    strcat(json, "}");
    size_t n = strlen(json);
    uint8_t *img = malloc(8 + n + nt * 8);
    for (int i = 0; i < 8; i++) img[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(img + 8, json, n);
    memcpy(img + 8 + n, data, nt * 8);
    write_file(file, img, 8 + n + nt * 8);
    free(img);
}

static void clear_dir(void) {
    const char *names[] = {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                           "pytorch_model.bin.index.json", "s1.safetensors", "s2.safetensors", "evil.safetensors"};
    char p[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", tmp, names[i]);
        unlink(p);
    }
}

/* Opens tmp; expects failure containing want (NULL: success, store returned). */
static weight_store *open_expect(const char *dir, const char *want, int line) {
    weight_store *ws = NULL;
    char err[512] = "";
    int rc = weight_store_open(dir, &ws, err, sizeof err);
    if (!want) {
        CHECK(rc == 0 && ws, "line %d: %s", line, err);
    } else {
        CHECK(rc == -1 && !ws && strstr(err, want), "line %d: message '%s' lacks '%s'", line, err, want);
        weight_store_close(ws);
        ws = NULL;
    }
    return ws;
}
#define OPEN(dir, want) open_expect(dir, want, __LINE__)

static void test_sharded_safetensors(void) {
    clear_dir();
    write_st("s1.safetensors", "a,b", 1.0f);
    write_st("s2.safetensors", "c", 10.0f);
    write_text("model.safetensors.index.json",
               "{\"metadata\": {\"total_size\": 24}, \"weight_map\": {\"a\": \"s1.safetensors\", "
               "\"b\": \"s1.safetensors\", \"c\": \"s2.safetensors\"}}");
    weight_store *ws = OPEN(tmp, NULL);
    if (ws) {
        CHECK(weight_store_count(ws) == 3, "sharded: %zu tensors", weight_store_count(ws));
        CHECK(strcmp(weight_store_format(ws), "safetensors") == 0, "sharded: format %s", weight_store_format(ws));
        const tensor_entry *a = weight_store_find(ws, "a"), *c = weight_store_find(ws, "c");
        CHECK(a && c && !weight_store_find(ws, "d") && !weight_store_find(ws, ""), "sharded: lookups");
        if (a && c) {
            float v[2];
            memcpy(v, c->data, 8);
            CHECK(v[0] == 10.0f && v[1] == 10.5f, "sharded: c values %g %g", v[0], v[1]);
            CHECK(strstr(a->file, "/s1.safetensors") && strstr(c->file, "/s2.safetensors"), "sharded: files %s %s",
                  a->file, c->file);
        }
        CHECK(weight_store_at(ws, 0) && strcmp(weight_store_at(ws, 0)->name, "a") == 0 && !weight_store_at(ws, 3),
              "sharded: weight_store_at");
        weight_store_close(ws);
    }

    write_text("model.safetensors.index.json", "{\"weight_map\": {\"a\": \"../s1.safetensors\"}}");
    OPEN(tmp, "shard name '../s1.safetensors' must be a plain file name");
    write_text("model.safetensors.index.json", "{\"weight_map\": {\"a\": \"/etc/passwd\"}}");
    OPEN(tmp, "must be a plain file name");
    write_text("model.safetensors.index.json", "{\"weight_map\": {\"a\": \"\"}}");
    OPEN(tmp, "must be a plain file name");
    write_text("model.safetensors.index.json", "{\"weight_map\": {\"a\": 3}}");
    OPEN(tmp, "must be a file name string");
    write_text("model.safetensors.index.json", "{\"weight_map\": {}}");
    OPEN(tmp, "no 'weight_map'");
    write_text("model.safetensors.index.json", "{\"weight_map\": ");
    OPEN(tmp, "not valid JSON");
    write_text("model.safetensors.index.json", "{\"weight_map\": {\"a\": \"missing.safetensors\"}}");
    OPEN(tmp, "missing.safetensors: cannot open");
    /* the index names a tensor the shard lacks */
    write_text("model.safetensors.index.json",
               "{\"weight_map\": {\"a\": \"s1.safetensors\", \"c\": \"s1.safetensors\"}}");
    OPEN(tmp, "puts 'c' in s1.safetensors, but that shard does not hold it");
    /* one tensor in two shards */
    write_st("s2.safetensors", "a,c", 10.0f);
    write_text("model.safetensors.index.json",
               "{\"weight_map\": {\"a\": \"s1.safetensors\", \"c\": \"s2.safetensors\"}}");
    OPEN(tmp, "tensor 'a' is in both");
    /* a broken shard is reported with its path */
    write_file("s2.safetensors", "\x40\0\0\0\0\0\0\0{}", 10);
    OPEN(tmp, "s2.safetensors: truncated: header says 64 bytes but file has 10");
}

static void test_single_files(void) {
    clear_dir();
    OPEN(tmp, "no weights found (looked for model.safetensors, model.safetensors.index.json, pytorch_model.bin, "
              "pytorch_model.bin.index.json)");
    OPEN("/nonexistent/mnemo/dir", "/nonexistent/mnemo/dir: No such file");
    write_st("model.safetensors", "x", 1.0f);
    char file[512];
    snprintf(file, sizeof file, "%s/model.safetensors", tmp);
    OPEN(file, "not a directory");
    /* preference: safetensors wins over a (broken) pytorch_model.bin */
    write_text("pytorch_model.bin", "junk");
    weight_store *ws = OPEN(tmp, NULL);
    if (ws) {
        CHECK(strcmp(weight_store_format(ws), "safetensors") == 0 && weight_store_count(ws) == 1, "preference");
        weight_store_close(ws);
    }
    /* the brief's truncation message, with the directory in the path */
    uint8_t trunc[100] = {0xd2, 0x04};
    write_file("model.safetensors", trunc, sizeof trunc);
    char want[512];
    snprintf(want, sizeof want, "%s/model.safetensors: truncated: header says 1234 bytes but file has 100", tmp);
    OPEN(tmp, want);
    write_file("model.safetensors", "", 0);
    OPEN(tmp, "model.safetensors: truncated");
    unlink(file);
    OPEN(tmp, "pytorch_model.bin: not a zip archive");
    weight_store_close(NULL);
    CHECK(weight_store_count(NULL) == 0 && !weight_store_find(NULL, "x") && !weight_store_at(NULL, 0),
          "NULL store");
    clear_dir();
}

static void test_fixture_dirs(void) {
    const char *models[] = {"mha", "gqa", "rope_scaled", "tied", "bf16", "torch_bin", "sharded"};
    char dir[1024];
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        snprintf(dir, sizeof dir, "%s/models/%s", test_fixtures(), models[i]);
        weight_store *ws = OPEN(dir, NULL);
        if (ws) {
            CHECK(weight_store_find(ws, "model.embed_tokens.weight") && weight_store_find(ws, "model.norm.weight"),
                  "%s: standard names missing", models[i]);
            CHECK(strcmp(weight_store_format(ws), strcmp(models[i], "torch_bin") ? "safetensors" : "pytorch") == 0,
                  "%s: format %s", models[i], weight_store_format(ws));
            weight_store_close(ws);
        }
    }
    weight_store *st, *bin, *sh;
    snprintf(dir, sizeof dir, "%s/loader/llama_st", test_fixtures());
    st = OPEN(dir, NULL);
    snprintf(dir, sizeof dir, "%s/loader/llama_bin", test_fixtures());
    bin = OPEN(dir, NULL);
    snprintf(dir, sizeof dir, "%s/loader/llama_bin_sharded", test_fixtures());
    sh = OPEN(dir, NULL);
    if (st && bin && sh) {
        CHECK(weight_store_count(st) == 12 && weight_store_count(bin) == 12 && weight_store_count(sh) == 12,
              "llama: counts %zu %zu %zu", weight_store_count(st), weight_store_count(bin), weight_store_count(sh));
        CHECK(strcmp(weight_store_format(sh), "pytorch") == 0, "sharded bin format");
        for (size_t i = 0; i < weight_store_count(st); i++) {
            const tensor_entry *a = weight_store_at(st, i), *b = weight_store_find(bin, a->name),
                               *c = weight_store_find(sh, a->name);
            CHECK(b && c && a->nbytes == b->nbytes && b->nbytes == c->nbytes &&
                      memcmp(a->data, b->data, a->nbytes) == 0 && memcmp(a->data, c->data, a->nbytes) == 0,
                  "llama: %s differs", a->name);
        }
        const tensor_entry *e = weight_store_find(sh, "model.embed_tokens.weight");
        CHECK(e && strstr(e->file, "pytorch_model-00001-of-00002.bin"), "sharded bin: embed file %s",
              e ? e->file : "-");
    }
    weight_store_close(st);
    weight_store_close(bin);
    weight_store_close(sh);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/mnemo_store_XXXXXX");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_sharded_safetensors();
    test_single_files();
    test_fixture_dirs();
    clear_dir();
    rmdir(tmp);
    return test_summary();
}
