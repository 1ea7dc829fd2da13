/*
 * test_finetune_files.c — server/finetune_files.c without HTTP: ids, the JSONL validation table (status, param and
 * the line named), and the store in a temporary directory (create, list order and pagination, get, path, delete,
 * --max-files, reopen). Exits non-zero on any failure.
 */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "finetune_files.h"
#include "test_util.h"


#define PC "{\"prompt\":\"a\",\"completion\":\"b\"}\n"
#define CHAT "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"yo\"}]}\n"

typedef struct {
    const char *data;
    int line; /* 0 = valid; -1 = invalid without a line (empty) */
} vcase;

static const vcase VCASES[] = {
    {PC, 0},
    {CHAT, 0},
    {PC "\n\r\n \t\n" CHAT, 0},
    {PC "\r\n" CHAT "\r\n", 0},
    {PC, 0},
    {"", -1},
    {"\n\n \r\n", -1},
    {PC "x\n", 2},
    {PC PC "[]\n", 3},
    {"\n\n{\"prompt\":\"a\"}", 3},
    {"{\"prompt\":\"a\",\"completion\":\"\"}", 1},
    {"{\"prompt\":\"a\",\"completion\":\"b\",\"messages\":[]}", 1},
    {"{\"prompt\":\"a\",\"prompt\":\"a\",\"completion\":\"b\"}", 1},
    {"{\"prompt\":\"\xff\",\"completion\":\"b\"}", 1},
    {"{\"messages\":[]}", 1},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 1},
    {"{\"messages\":[{\"role\":\"tool\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"x\"}]}", 1},
    {"{\"messages\":[{\"role\":\"user\",\"content\":1},{\"role\":\"assistant\",\"content\":\"x\"}]}", 1},
    {"{\"messages\":[1]}", 1},
    {PC "{\"prompt\":\"a\",\"compl", 2},
};

static void test_validate(void) {
    for (size_t i = 0; i < sizeof VCASES / sizeof VCASES[0]; i++) {
        const vcase *c = &VCASES[i];
        api_error e = {0};
        int rc = ft_files_validate(c->data, strlen(c->data), &e);
        if (c->line == 0) {
            CHECK(rc == 0, "case %zu: %s", i, e.message);
            continue;
        }
        CHECK(rc == -1 && e.status == 400 && !strcmp(e.param, "file"), "case %zu: rc %d status %d", i, rc, e.status);
        if (c->line > 0) {
            char want[64];
            snprintf(want, sizeof want, "training file line %d: ", c->line);
            CHECK(!strncmp(e.message, want, strlen(want)), "case %zu: %s", i, e.message);
        }
    }
    const char nul[] = "{\"prompt\":\"a\",\"completion\":\"b\"}\0x";
    api_error e;
    CHECK(ft_files_validate(nul, sizeof nul - 1, &e) == -1, "a raw NUL byte is not JSON");
}

static void test_ids(void) {
    CHECK(ft_files_valid_id("file-0123456789abcdef01234567"), "valid");
    const char *bad[] = {NULL, "", "file-", "file-0123456789abcdef0123456", "file-0123456789abcdef012345678",
                         "file-0123456789ABCDEF01234567", "file-0123456789abcdef0123456g", "../0123456789abcdef01234567",
                         "file-0123456789abcdef0123456/", "File-0123456789abcdef01234567"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(!ft_files_valid_id(bad[i]), "bad %zu", i);
}

static const char *id_of(json_t *o) { return json_string_value(json_object_get(o, "id")); }

static void test_store(void) {
    char tmpl[] = "/tmp/mnemo-ftfiles-XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL, "mkdtemp");
    if (!dir) return;
    char err[256];
    ft_files *f = ft_files_open(dir, 3, err, sizeof err);
    CHECK(f != NULL, "open: %s", err);
    if (!f) return;
    json_t *made[3] = {0}, *out = NULL;
    api_error e;
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "f%d.jsonl", i);
        CHECK(ft_files_create(f, name, strlen(name), "fine-tune", PC CHAT, strlen(PC CHAT), &made[i], &e) == 0,
              "create %d: %s", i, e.message);
    }
    if (!made[0] || !made[1] || !made[2]) return;
    CHECK(ft_files_create(f, "x", 1, "fine-tune", PC, strlen(PC), &out, &e) == -1 && e.status == 429 && !out,
          "max files: %d", e.status);
    CHECK(ft_files_create(f, "x", 1, "assistants", PC, strlen(PC), &out, &e) == -1 && e.status == 400 &&
              !strcmp(e.param, "purpose"), "purpose");
    CHECK(ft_files_count(f) == 3, "count");

    json_t *l = ft_files_list(f, NULL, NULL, 2, false);
    json_t *d = json_object_get(l, "data");
    CHECK(json_array_size(d) == 2 && !strcmp(id_of(json_array_get(d, 0)), id_of(made[2])) &&
              json_is_true(json_object_get(l, "has_more")), "desc page 1");
    json_decref(l);
    l = ft_files_list(f, NULL, id_of(made[1]), 2, false);
    d = json_object_get(l, "data");
    CHECK(json_array_size(d) == 1 && !strcmp(id_of(json_array_get(d, 0)), id_of(made[0])) &&
              json_is_false(json_object_get(l, "has_more")), "desc page 2");
    json_decref(l);
    l = ft_files_list(f, "fine-tune", NULL, 10, true);
    d = json_object_get(l, "data");
    CHECK(json_array_size(d) == 3 && !strcmp(id_of(json_array_get(d, 0)), id_of(made[0])), "asc");
    json_decref(l);
    l = ft_files_list(f, "batch", NULL, 10, true);
    CHECK(l && json_array_size(json_object_get(l, "data")) == 0, "purpose filter");
    json_decref(l);
    CHECK(ft_files_list(f, NULL, "file-000000000000000000000000", 10, true) == NULL, "unknown after");

    json_t *g = ft_files_get(f, id_of(made[1]));
    CHECK(g && json_equal(g, made[1]), "get");
    json_decref(g);
    char path[4096];
    CHECK(ft_files_path(f, id_of(made[1]), path, sizeof path), "path");
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (size_t)sb.st_size == strlen(PC CHAT), "content size");
    CHECK(!ft_files_path(f, "../../etc/passwd", path, sizeof path) && !ft_files_get(f, "..") &&
              ft_files_delete(f, "../x") == -1, "path-like ids");
    CHECK(ft_files_delete(f, id_of(made[1])) == 0 && ft_files_delete(f, id_of(made[1])) == -1, "delete");
    CHECK(ft_files_create(f, "y", 1, "fine-tune", PC, strlen(PC), &out, &e) == 0, "room again: %s", e.message);
    ft_files_close(f);

    f = ft_files_open(dir, 3, err, sizeof err);
    CHECK(f != NULL, "reopen: %s", err);
    if (f) {
        l = ft_files_list(f, NULL, NULL, 10, true);
        d = json_object_get(l, "data");
        CHECK(json_array_size(d) == 3 && json_equal(json_array_get(d, 0), made[0]) &&
                  json_equal(json_array_get(d, 1), made[2]) && json_equal(json_array_get(d, 2), out),
              "reopen keeps objects and order");
        for (size_t i = 0; i < json_array_size(d); i++) ft_files_delete(f, id_of(json_array_get(d, i)));
        json_decref(l);
        ft_files_close(f);
    }
    ft_files_close(NULL);
    for (int i = 0; i < 3; i++) json_decref(made[i]);
    json_decref(out);
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/files", dir);
    CHECK(rmdir(sub) == 0 && rmdir(dir) == 0, "the store leaves nothing behind once every file is deleted");
}

int main(void) {
    test_ids();
    test_validate();
    test_store();
    return test_summary();
}
