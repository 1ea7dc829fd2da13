/*
 * test_loader_torch.c — torch_zip_parse on real torch.save files (tests/fixtures/loader, made by
 * tests/reference/make_loader_fixtures.py): f32/bf16/f16/i64 values, scalars, empty and offset views,
 * ZIP64, nn.Parameter, nested dicts, the same weights as safetensors; refusals (non-contiguous, os.system
 * global, legacy format); truncated and corrupted copies made here; and hand-built archives whose pickles
 * probe each interpreter check (unknown opcode, underflow, memo misuse, self-reference, storage bounds).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_index.h"
#include "test_util.h"

static uint8_t *read_all(const char *rel, size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/loader/%s", test_fixtures(), rel);
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); *len = 0; return NULL; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) abort();
    fclose(f);
    *len = (size_t)n;
    return b;
}

static const tensor_entry *find(const tensor_list *l, const char *name) {
    for (size_t i = 0; i < l->count; i++)
        if (strcmp(l->items[i].name, name) == 0) return &l->items[i];
    return NULL;
}

static float f32_at(const tensor_entry *t, size_t i) {
    float v;
    memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
    return v;
}
static uint16_t u16_at(const tensor_entry *t, size_t i) {
    uint16_t v;
    memcpy(&v, (const uint8_t *)t->data + 2 * i, 2);
    return v;
}

/* Parses a fixture; expects failure containing want, or success when want is NULL. */
static int parse_fixture(const char *rel, tensor_list *l, const char *want, uint8_t **img) {
    size_t len;
    *img = read_all(rel, &len);
    CHECK(*img != NULL, "fixture %s missing", rel);
    if (!*img) return -1;
    char err[512] = "";
    int rc = torch_zip_parse(*img, len, rel, l, err, sizeof err);
    if (!want) {
        CHECK(rc == 0, "%s: %s", rel, err);
    } else {
        CHECK(rc == -1 && strstr(err, want) && strncmp(err, rel, strlen(rel)) == 0, "%s: message '%s' lacks '%s'",
              rel, err, want);
    }
    return rc;
}

static void check_mixed(const char *rel) {
    tensor_list l = {0};
    uint8_t *img;
    if (parse_fixture(rel, &l, NULL, &img) == 0) {
        CHECK(l.count == 8, "%s: %zu tensors", rel, l.count);
        const tensor_entry *a = find(&l, "a"), *b = find(&l, "b"), *c = find(&l, "c"), *s = find(&l, "s");
        const tensor_entry *e = find(&l, "e"), *base = find(&l, "base"), *row = find(&l, "row"), *n = find(&l, "n");
        CHECK(a && b && c && s && e && base && row && n, "%s: a tensor is missing", rel);
        if (a && b && c && s && e && base && row && n) {
            CHECK(a->dtype == TENSOR_F32 && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3 && a->nbytes == 24,
                  "%s: a", rel);
            for (int i = 0; i < 6; i++) CHECK(f32_at(a, i) == i * 0.25f - 0.5f, "%s: a[%d] = %g", rel, i, f32_at(a, i));
            CHECK(b->dtype == TENSOR_BF16 && b->ndim == 1 && b->shape[0] == 4 && b->nbytes == 8, "%s: b", rel);
            const float bv[4] = {1.5f, -2.0f, 0.125f, 3.0f};
            for (int i = 0; i < 4; i++) CHECK(kern_bf16_to_f32(u16_at(b, i)) == bv[i], "%s: b[%d]", rel, i);
            CHECK(c->dtype == TENSOR_F16 && c->ndim == 2 && c->nbytes == 8, "%s: c", rel);
            for (int i = 0; i < 4; i++) CHECK(kern_f16_to_f32(u16_at(c, i)) == i * 0.5f, "%s: c[%d]", rel, i);
            CHECK(s->ndim == 0 && s->nbytes == 4 && f32_at(s, 0) == 7.0f, "%s: scalar", rel);
            CHECK(e->ndim == 2 && e->shape[0] == 0 && e->shape[1] == 3 && e->nbytes == 0, "%s: empty", rel);
            CHECK(row->ndim == 1 && row->shape[0] == 3 && row->data == (const uint8_t *)base->data + 12,
                  "%s: row is not base's storage at offset 3", rel);
            for (int i = 0; i < 3; i++) CHECK(f32_at(row, i) == 13.0f + i, "%s: row[%d]", rel, i);
            int64_t nv[3];
            memcpy(nv, n->data, sizeof nv);
            CHECK(n->dtype == TENSOR_I64 && nv[0] == -1 && nv[1] == 0 && nv[2] == (int64_t)1 << 40, "%s: n", rel);
            CHECK(strcmp(a->file, rel) == 0, "%s: entry file '%s'", rel, a->file);
            CHECK((const uint8_t *)a->data > img, "%s: data not in the image", rel);
        }
    }
    tensor_list_free(&l);
    free(img);
}

static void test_fixture_files(void) {
    check_mixed("mixed.bin");
    check_mixed("zip64.bin");
    tensor_list l = {0};
    uint8_t *img;
    parse_fixture("noncontig.bin", &l, "tensor 't' is not contiguous (shape [3, 2], stride [1, 3])", &img);
    free(img);
    parse_fixture("evil.bin", &l, "unsupported pickle global 'posix.system'", &img);
    free(img);
    parse_fixture("legacy.bin", &l, "legacy torch.save format", &img);
    free(img);
    CHECK(l.count == 0, "refused files left entries");
    if (parse_fixture("param_nested.bin", &l, NULL, &img) == 0) {
        const tensor_entry *w = find(&l, "w"), *in = find(&l, "outer.inner");
        CHECK(l.count == 2 && w && in, "param_nested: %zu tensors", l.count);
        if (w && in) CHECK(f32_at(w, 0) == 0.5f && f32_at(w, 1) == -0.5f && f32_at(in, 0) == 2.0f, "param values");
    }
    tensor_list_free(&l);
    free(img);
}

/* The same weights saved by torch.save and by safetensors must read identically. */
static void test_same_as_safetensors(void) {
    size_t blen, slen;
    uint8_t *bin = read_all("llama_bin/pytorch_model.bin", &blen), *st = read_all("llama_st/model.safetensors", &slen);
    CHECK(bin && st, "llama fixtures missing");
    if (!bin || !st) { free(bin); free(st); return; }
    tensor_list lb = {0}, ls = {0};
    char err[512] = "";
    CHECK(torch_zip_parse(bin, blen, "bin", &lb, err, sizeof err) == 0, "llama bin: %s", err);
    CHECK(safetensors_parse(st, slen, "st", &ls, err, sizeof err) == 0, "llama st: %s", err);
    CHECK(lb.count == 12 && ls.count == 12, "llama: %zu / %zu tensors", lb.count, ls.count);
    for (size_t i = 0; i < lb.count; i++) {
        const tensor_entry *b = &lb.items[i], *s = find(&ls, b->name);
        CHECK(s != NULL, "llama: %s missing from safetensors", b->name);
        if (!s) continue;
        CHECK(b->dtype == TENSOR_BF16 && s->dtype == b->dtype && s->ndim == b->ndim && s->nbytes == b->nbytes &&
                  memcmp(s->shape, b->shape, sizeof s->shape) == 0 && memcmp(s->data, b->data, b->nbytes) == 0,
              "llama: %s differs between formats", b->name);
    }
    tensor_list_free(&lb);
    tensor_list_free(&ls);
    free(bin);
    free(st);
}

static void test_damaged_copies(void) {
    size_t len;
    uint8_t *img = read_all("mixed.bin", &len);
    if (!img) return;
    char err[512];
    uint8_t *cp = malloc(len);
    int bad_msgs = 0, accepted = 0;
    for (size_t cut = 0; cut < len; cut++) {
        memcpy(cp, img, cut); /* a fresh buffer of exactly cut bytes would be better under ASan: see fuzz target */
        tensor_list l = {0};
        err[0] = '\0';
        if (torch_zip_parse(cp, cut, "cut.bin", &l, err, sizeof err) == 0) accepted++;
        else if (strncmp(err, "cut.bin: ", 9) != 0) bad_msgs++;
        tensor_list_free(&l);
    }
    CHECK(accepted == 0, "%d truncated copies accepted", accepted);
    CHECK(bad_msgs == 0, "%d truncation messages lack the file name", bad_msgs);
    for (size_t i = 0; i < len; i++) {
        memcpy(cp, img, len);
        cp[i] ^= 0xff;
        tensor_list l = {0};
        torch_zip_parse(cp, len, "flip.bin", &l, err, sizeof err);
        tensor_list_free(&l);
    }
    /* central directory edits: find mixed/data.pkl's record and change method, then mixed/data/0's size */
    for (size_t p = 0; p + 46 < len; p++) {
        if (memcmp(img + p, "PK\1\2", 4) != 0) continue;
        uint16_t nl = (uint16_t)(img[p + 28] | img[p + 29] << 8);
        const char *name = (const char *)img + p + 46;
        if (nl == 14 && memcmp(name, "mixed/data.pkl", 14) == 0) {
            memcpy(cp, img, len);
            cp[p + 10] = 8; /* deflate */
            tensor_list l = {0};
            CHECK(torch_zip_parse(cp, len, "m", &l, err, sizeof err) == -1 && strstr(err, "compressed"),
                  "deflated data.pkl: '%s'", err);
        }
        if (nl == 12 && memcmp(name, "mixed/data/0", 12) == 0) {
            memcpy(cp, img, len);
            cp[p + 20] = cp[p + 24] = 0xf0; /* sizes: 24 -> 240 bytes, past the end of the file */
            cp[p + 21] = cp[p + 25] = 0xff;
            tensor_list l = {0};
            CHECK(torch_zip_parse(cp, len, "m", &l, err, sizeof err) == -1 && strstr(err, "past the end"),
                  "oversized storage entry: '%s'", err);
            memcpy(cp, img, len);
            cp[p + 20] = cp[p + 24] = 8; /* 24 -> 8 bytes: too small for 6 floats */
            CHECK(torch_zip_parse(cp, len, "m", &l, err, sizeof err) == -1 && strstr(err, "holds 8 bytes"),
                  "undersized storage entry: '%s'", err);
        }
    }
    free(cp);
    free(img);
    tensor_list l = {0};
    CHECK(torch_zip_parse((const uint8_t *)"hello", 5, "h", &l, err, sizeof err) == -1 &&
              strstr(err, "not a zip archive"),
          "not a zip: '%s'", err);
}

/* ---- hand-built archives */
typedef struct { uint8_t b[16384]; size_t n; } buf_t;
static void put(buf_t *b, const void *p, size_t n) { memcpy(b->b + b->n, p, n); b->n += n; }
static void put8(buf_t *b, uint8_t v) { b->b[b->n++] = v; }
static void put16(buf_t *b, uint16_t v) { put8(b, (uint8_t)v); put8(b, (uint8_t)(v >> 8)); }
static void put32(buf_t *b, uint32_t v) { put16(b, (uint16_t)v); put16(b, (uint16_t)(v >> 16)); }
static void pstr(buf_t *b, const char *s) { put8(b, 'X'); put32(b, (uint32_t)strlen(s)); put(b, s, strlen(s)); }
static void pint(buf_t *b, int32_t v) { put8(b, 'J'); put32(b, (uint32_t)v); }
static void praw(buf_t *b, const char *s) { put(b, s, strlen(s)); }

/* A stored zip of arc/data.pkl = pkl and arc/data/0 = 32 bytes of floats 0..7. */
static void make_zip(buf_t *z, const buf_t *pkl) {
    static float st[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const char *names[2] = {"arc/data.pkl", "arc/data/0"};
    const void *data[2] = {pkl->b, st};
    uint32_t sizes[2] = {(uint32_t)pkl->n, sizeof st}, offs[2];
    z->n = 0;
    for (int i = 0; i < 2; i++) {
        offs[i] = (uint32_t)z->n;
        put32(z, 0x04034b50); put16(z, 20); put16(z, 0); put16(z, 0); put32(z, 0); put32(z, 0);
        put32(z, sizes[i]); put32(z, sizes[i]); put16(z, (uint16_t)strlen(names[i])); put16(z, 0);
        praw(z, names[i]);
        put(z, data[i], sizes[i]);
    }
    uint32_t cd = (uint32_t)z->n;
    for (int i = 0; i < 2; i++) {
        put32(z, 0x02014b50); put16(z, 20); put16(z, 20); put16(z, 0); put16(z, 0); put32(z, 0); put32(z, 0);
        put32(z, sizes[i]); put32(z, sizes[i]); put16(z, (uint16_t)strlen(names[i])); put16(z, 0); put16(z, 0);
        put16(z, 0); put16(z, 0); put32(z, 0); put32(z, offs[i]);
        praw(z, names[i]);
    }
    uint32_t cdlen = (uint32_t)z->n - cd;
    put32(z, 0x06054b50); put16(z, 0); put16(z, 0); put16(z, 2); put16(z, 2); put32(z, cdlen); put32(z, cd);
    put16(z, 0);
}

/* Pickle bytes of _rebuild_tensor_v2 over storage `key` (numel floats) at offset, 1-D size/stride. */
static void ptensor(buf_t *p, const char *key, int numel, int offset, int size, int stride) {
    praw(p, "ctorch._utils\n_rebuild_tensor_v2\n(");
    praw(p, "(");
    pstr(p, "storage");
    praw(p, "ctorch\nFloatStorage\n");
    pstr(p, key);
    pstr(p, "cpu");
    pint(p, numel);
    praw(p, "tQ");
    pint(p, offset);
    praw(p, "(");
    pint(p, size);
    praw(p, "t(");
    pint(p, stride);
    praw(p, "t\x89}tR");
}

/* Runs {name: <body>} or a raw pickle through a zip; expects want in the message (NULL: success). */
static void run_pickle(const buf_t *pkl, const char *want, int line, tensor_list *keep) {
    static buf_t z;
    make_zip(&z, pkl);
    tensor_list l = {0};
    char err[512] = "";
    int rc = torch_zip_parse(z.b, z.n, "syn.bin", &l, err, sizeof err);
    if (!want) CHECK(rc == 0, "line %d: %s", line, err);
    else CHECK(rc == -1 && strstr(err, want), "line %d: message '%s' lacks '%s'", line, err, want);
    if (keep && rc == 0) {
        *keep = l;
        return;
    }
    tensor_list_free(&l);
}

static void pickle_case(const char *body, size_t n, const char *want, int line) {
    buf_t p = {.n = 0};
    praw(&p, "\x80\x02");
    put(&p, body, n);
    run_pickle(&p, want, line, NULL);
}
/* body is a string literal or char array: its length includes embedded NULs */
#define PICKLE(body, want) pickle_case(body, sizeof(body) - 1, want, __LINE__)

static void tensor_case(int numel, int offset, int size, int stride, const char *want, int line) {
    buf_t p = {.n = 0};
    praw(&p, "\x80\x02}(");
    pstr(&p, "t");
    ptensor(&p, "0", numel, offset, size, stride);
    praw(&p, "u.");
    tensor_list l = {0};
    run_pickle(&p, want, line, &l);
    if (!want) {
        CHECK(l.count == 1 && l.items[0].shape[0] == size, "line %d: tensor", line);
        if (l.count == 1 && size > 0) CHECK(f32_at(&l.items[0], 0) == (float)offset, "line %d: first value", line);
    }
    tensor_list_free(&l);
}

static void plong(buf_t *b, int64_t v) { /* LONG1, 8 bytes little-endian */
    put8(b, 0x8a);
    put8(b, 8);
    for (int i = 0; i < 8; i++) put8(b, (uint8_t)((uint64_t)v >> (8 * i)));
}

/* An empty 2-D tensor [d0, d1] over storage "0": the file holds no bytes for it, so a huge other dim is refused
 * (code that walks its rows would loop over them), while a modest one is a legal empty tensor. */
static void empty_2d_case(int64_t d0, int64_t d1, const char *want, int line) {
    buf_t p = {.n = 0};
    praw(&p, "\x80\x02}(");
    pstr(&p, "t");
    praw(&p, "ctorch._utils\n_rebuild_tensor_v2\n((");
    pstr(&p, "storage");
    praw(&p, "ctorch\nFloatStorage\n");
    pstr(&p, "0");
    pstr(&p, "cpu");
    pint(&p, 8);
    praw(&p, "tQ");
    pint(&p, 0);
    praw(&p, "(");
    plong(&p, d0);
    plong(&p, d1);
    praw(&p, "t(");
    pint(&p, 1);
    pint(&p, 1);
    praw(&p, "t\x89}tRu.");
    run_pickle(&p, want, line, NULL);
}

static void test_empty_tensors(void) {
    empty_2d_case(0, INT64_C(1) << 40, "is empty, yet its other dimensions claim more elements", __LINE__);
    empty_2d_case(INT64_C(1) << 57, 0, "is empty, yet", __LINE__);
    empty_2d_case(0, 64, NULL, __LINE__);
}

/* A list of tensors (UIO-LLMs' checkpoint format): named by position; two views into one storage at offsets. */
static void test_list(void) {
    buf_t p = {.n = 0};
    praw(&p, "\x80\x02](");
    ptensor(&p, "0", 8, 2, 3, 1);
    ptensor(&p, "0", 8, 6, 2, 1);
    praw(&p, "e.");
    tensor_list l = {0};
    run_pickle(&p, NULL, __LINE__, &l);
    CHECK(l.count == 2 && !strcmp(l.items[0].name, "0") && !strcmp(l.items[1].name, "1"), "list entries named 0, 1");
    if (l.count == 2)
        CHECK(l.items[0].shape[0] == 3 && f32_at(&l.items[0], 0) == 2.f && l.items[1].shape[0] == 2 &&
                  f32_at(&l.items[1], 1) == 7.f,
              "list items are views at their offsets into the shared storage");
    tensor_list_free(&l);
    p.n = 0;
    praw(&p, "\x80\x02](");
    ptensor(&p, "0", 8, 0, 4, 2);
    praw(&p, "e.");
    run_pickle(&p, "list item 0 is not contiguous", __LINE__, NULL);
}

static void test_synthetic(void) {
    test_list();
    test_empty_tensors();
    tensor_case(8, 0, 8, 1, NULL, __LINE__);
    tensor_case(8, 5, 3, 1, NULL, __LINE__);
    tensor_case(8, 2, 1, 7, NULL, __LINE__);           /* a size-1 dim may have any stride */
    tensor_case(8, 8, 0, 1, NULL, __LINE__);           /* empty at the very end */
    tensor_case(8, 6, 3, 1, "lies outside its storage", __LINE__);
    tensor_case(9, 0, 8, 1, "holds 32 bytes but 9 x F32 needs 36", __LINE__);
    tensor_case(8, 0, 4, 2, "is not contiguous", __LINE__);
    tensor_case(8, 0, 4, -1, "is not contiguous", __LINE__);
    tensor_case(8, -1, 4, 1, "_rebuild_tensor_v2 arguments", __LINE__);
    tensor_case(-1, 0, 4, 1, "malformed storage record", __LINE__);
    tensor_case(8, 0, -4, 1, "size/stride", __LINE__);

    /* a storage key with no zip entry */
    {
        buf_t p = {.n = 0};
        praw(&p, "\x80\x02}(");
        pstr(&p, "t");
        ptensor(&p, "7", 8, 0, 8, 1);
        praw(&p, "u.");
        run_pickle(&p, "storage '7' has no entry 'arc/data/7'", __LINE__, NULL);
    }
    /* two names sharing one tensor object (tied weights) are both listed */
    {
        buf_t p = {.n = 0};
        praw(&p, "\x80\x02}(");
        pstr(&p, "x");
        ptensor(&p, "0", 8, 0, 8, 1);
        put(&p, "q\x00", 2);
        pstr(&p, "y");
        put(&p, "h\x00u.", 4);
        tensor_list l = {0};
        run_pickle(&p, NULL, __LINE__, &l);
        CHECK(l.count == 2 && l.items[0].data == l.items[1].data, "shared tensor: %zu entries", l.count);
        tensor_list_free(&l);
    }
    PICKLE("}.", NULL);                                          /* empty state dict is fine */
    PICKLE("]q\x00.", NULL);                                     /* an empty list of tensors is fine */
    PICKLE("](K\x01""e.", "list item 0 is a Python int, not a tensor");
    PICKLE("K\x01.", "holds a Python int, not a state dict or a list of tensors");
    PICKLE("}(X\x01\x00\x00\x00""aK\x01u.", "'a' is a Python int, not a tensor");
    PICKLE("}(K\x01K\x02u.", "key is a Python int");
    PICKLE("cbuiltins\neval\n.", "unsupported pickle global 'builtins.eval'");
    PICKLE("X\x08\x00\x00\x00""builtinsX\x04\x00\x00\x00""exec\x93.", "unsupported pickle global 'builtins.exec'");
    PICKLE("ctorch\nFloatStorage\n)R.", "calls a torch storage type directly");
    PICKLE("ccollections\nOrderedDict\n(K\x01tR.", "OrderedDict called with arguments");
    PICKLE("ccollections\nOrderedDict\n)\x81}b.", NULL);        /* NEWOBJ + BUILD on a dict */
    PICKLE("]}b.", "sets the state of a list");
    PICKLE("s.", "stack underflow");
    PICKLE("(s.", "stack underflow");                           /* cannot pop across a MARK */
    PICKLE("}q\x05.", "memo index 5 out of sequence");
    PICKLE("h\x00.", "memo index 0 was never set");
    PICKLE("}", "no STOP");
    PICKLE("}X\xff\xff\x00\x00""ab.", "runs past the end");
    PICKLE("i__main__\nX\n.", "unsupported pickle opcode 0x69");
    PICKLE("cos\nsystem", "unterminated GLOBAL");
    PICKLE("\x8a\x09\x01\x02\x03\x04\x05\x06\x07\x08\x09.", "integer of 9 bytes");
    PICKLE("t.", "no MARK");
    PICKLE("(K\x01""d.", "odd item count");
    PICKLE("}(K\x01u.", "odd item count");
    PICKLE("](K\x01u.", "SETITEMS on a list");
    PICKLE("K\x01K\x01K\x02s.", "SETITEM on a int");
    PICKLE("Q.", "stack underflow");
    PICKLE("(X\x07\x00\x00\x00storagetQ.", "persistent id is a tuple of 1 items");
    PICKLE("\x80\x06}.", "protocol 6");
    PICKLE("\x95\x02\x00\x00\x00\x00\x00\x00\x00}\x94.", NULL); /* FRAME + MEMOIZE */
    PICKLE("\x8c\x01""a\x8c\x01""b\x86.", "holds a Python tuple");
    /* a dict containing itself: the walk stops at the nesting limit */
    PICKLE("}q\x00X\x01\x00\x00\x00""ah\x00s.", "nested more than 4 deep");
    /* levels of dicts sharing one sub-dict 40 times each: 40^4 names from a 7 KB pickle, refused */
    {
        buf_t p = {.n = 0};
        praw(&p, "\x80\x02}q");
        put8(&p, 0);
        praw(&p, "(");
        pstr(&p, "t");
        ptensor(&p, "0", 8, 0, 8, 1);
        praw(&p, "u");
        for (int lvl = 1; lvl <= 4; lvl++) {
            praw(&p, "}q");
            put8(&p, (uint8_t)lvl);
            praw(&p, "(");
            for (int i = 0; i < 40; i++) {
                char k[8];
                snprintf(k, sizeof k, "k%d", i);
                pstr(&p, k);
                praw(&p, "h");
                put8(&p, (uint8_t)(lvl - 1));
            }
            praw(&p, "u");
        }
        praw(&p, ".");
        run_pickle(&p, "state dict has too many entries", __LINE__, NULL);
        /* the same with three levels under the root: 64000 tensors, accepted */
        p.n -= 1;
        while (p.b[p.n - 1] != 'u' || p.b[p.n - 2] != 2) p.n--;
        praw(&p, ".");
        tensor_list l = {0};
        run_pickle(&p, NULL, __LINE__, &l);
        CHECK(l.count == 64000 && strcmp(l.items[0].name, "k0.k0.k0.t") == 0, "fan-out: %zu tensors", l.count);
        tensor_list_free(&l);
    }
    /* MARKs nested past the limit */
    {
        static char deep[5000];
        memset(deep, '(', sizeof deep - 1);
        PICKLE(deep, "MARKs too deeply");
    }
}

int main(void) {
    test_fixture_files();
    test_same_as_safetensors();
    test_damaged_copies();
    test_synthetic();
    return test_summary();
}
