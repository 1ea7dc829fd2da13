/*
 * gguf.c — parses a GGUF image (see gguf.h) with a bounds-checked cursor: no read is formed before the bytes it
 * needs are known to be inside the image, every count is bounded by what the remaining bytes could hold before
 * anything is allocated for it, and sizes are computed with overflow checks.
 */
#include "gguf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader_util.h"
#include "errbuf.h"

#define MAX_KEY 65535u   /* longest key or tensor name accepted */

typedef struct {
    const uint8_t *b;
    uint64_t len, pos;
    const char *file;
    char *err;
    size_t errlen;
} cursor;

static int fail(cursor *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errbuf_vwrite(c->err, c->errlen, c->file, fmt, ap);
    va_end(ap);
    return -1;
}

static bool have(const cursor *c, uint64_t n) { return n <= c->len - c->pos; }

static int rd_u32(cursor *c, uint32_t *v, const char *what) {
    if (!have(c, 4)) return fail(c, "truncated reading %s at byte %" PRIu64, what, c->pos);
    *v = ld_le32(c->b + c->pos);
    c->pos += 4;
    return 0;
}
static int rd_u64(cursor *c, uint64_t *v, const char *what) {
    if (!have(c, 8)) return fail(c, "truncated reading %s at byte %" PRIu64, what, c->pos);
    *v = ld_le64(c->b + c->pos);
    c->pos += 8;
    return 0;
}
/* A string: its bytes stay in the image. */
static int rd_str(cursor *c, const char **s, uint64_t *n, const char *what) {
    if (rd_u64(c, n, what)) return -1;
    if (!have(c, *n))
        return fail(c, "%s of %" PRIu64 " bytes at byte %" PRIu64 " runs past the end (%" PRIu64 " bytes)", what, *n,
                    c->pos, c->len);
    *s = (const char *)c->b + c->pos;
    c->pos += *n;
    return 0;
}
/* A key or name: non-empty, no NUL inside, copied NUL-terminated. */
static int rd_name(cursor *c, char **out, const char *what) {
    const char *s = NULL;
    uint64_t n = 0;
    if (rd_str(c, &s, &n, what)) return -1;
    if (n == 0 || n > MAX_KEY || memchr(s, 0, (size_t)n))
        return fail(c, "%s at byte %" PRIu64 " is empty, longer than %u bytes or holds a NUL", what, c->pos - n,
                    MAX_KEY);
    if (!(*out = malloc((size_t)n + 1))) return fail(c, "out of memory");
    memcpy(*out, s, (size_t)n);
    (*out)[n] = '\0';
    return 0;
}

static uint64_t scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

/* Skips n values of type t (not ARRAY) after checking they fit. */
static int skip_values(cursor *c, uint32_t t, uint64_t n, const char *key) {
    if (t == GGUF_STRING) {
        if (n > (c->len - c->pos) / 8) return fail(c, "'%s': %" PRIu64 " strings cannot fit in the file", key, n);
        for (uint64_t i = 0; i < n; i++) {
            const char *s = NULL;
            uint64_t l = 0;
            if (rd_str(c, &s, &l, "a string value")) return -1;
        }
        return 0;
    }
    uint64_t sz = scalar_size(t), total;
    if (!sz) return fail(c, "'%s' has unknown value type %u", key, t);
    if (!ld_mul_u64(sz, n, &total) || !have(c, total))
        return fail(c, "'%s': %" PRIu64 " values of type %u run past the end of the file", key, n, t);
    c->pos += total;
    return 0;
}

static int parse_kv(cursor *c, gguf_kv *kv) {
    if (rd_name(c, &kv->key, "a metadata key")) return -1;
    if (rd_u32(c, &kv->type, "a value type")) return -1;
    kv->n = 1;
    if (kv->type == GGUF_ARRAY) {
        if (rd_u32(c, &kv->arr_type, "an array's element type") || rd_u64(c, &kv->n, "an array's length")) return -1;
        if (kv->arr_type == GGUF_ARRAY) return fail(c, "'%s': arrays of arrays are not supported", kv->key);
        if (kv->arr_type >= GGUF_TYPE_COUNT) return fail(c, "'%s' has unknown element type %u", kv->key, kv->arr_type);
    } else if (kv->type >= GGUF_TYPE_COUNT) {
        return fail(c, "'%s' has unknown value type %u", kv->key, kv->type);
    }
    kv->p = c->b + c->pos;
    uint64_t start = c->pos;
    if (skip_values(c, kv->type == GGUF_ARRAY ? kv->arr_type : kv->type, kv->n, kv->key)) return -1;
    kv->nbytes = c->pos - start;
    return 0;
}

static const struct {
    uint32_t type;
    const char *name;
    uint32_t block, bytes; /* elements per block, bytes per block */
} ggml_types[] = {
    {GGML_F32, "f32", 1, 4},       {GGML_F16, "f16", 1, 2},       {GGML_BF16, "bf16", 1, 2},
    {GGML_Q4_0, "q4_0", 32, 18},   {GGML_Q4_1, "q4_1", 32, 20},   {GGML_Q5_0, "q5_0", 32, 22},
    {GGML_Q5_1, "q5_1", 32, 24},   {GGML_Q8_0, "q8_0", 32, 34},   {GGML_Q8_1, "q8_1", 32, 36},
    {GGML_Q2_K, "q2_K", 256, 84},  {GGML_Q3_K, "q3_K", 256, 110}, {GGML_Q4_K, "q4_K", 256, 144},
    {GGML_Q5_K, "q5_K", 256, 176}, {GGML_Q6_K, "q6_K", 256, 210}, {GGML_Q8_K, "q8_K", 256, 292},
    {GGML_I8, "i8", 1, 1},         {GGML_I16, "i16", 1, 2},       {GGML_I32, "i32", 1, 4},
    {GGML_I64, "i64", 1, 8},       {GGML_F64, "f64", 1, 8},
};
#define N_GGML_TYPES (sizeof ggml_types / sizeof *ggml_types)

static int type_index(uint32_t t) {
    for (size_t i = 0; i < N_GGML_TYPES; i++)
        if (ggml_types[i].type == t) return (int)i;
    return -1;
}

uint64_t gguf_type_bytes(uint32_t t, uint64_t n) {
    int i = type_index(t);
    uint64_t out;
    if (i < 0 || n % ggml_types[i].block) return 0;
    return ld_mul_u64(n / ggml_types[i].block, ggml_types[i].bytes, &out) ? out : 0;
}

const char *gguf_type_name(uint32_t t) {
    int i = type_index(t);
    return i < 0 ? "?" : ggml_types[i].name;
}

static int parse_tensor_info(cursor *c, gguf_tensor *t) {
    if (rd_name(c, &t->name, "a tensor name")) return -1;
    uint32_t nd = 0;
    if (rd_u32(c, &nd, "a tensor's dimension count")) return -1;
    if (nd == 0 || nd > GGUF_MAX_DIMS)
        return fail(c, "tensor '%s' has %u dimensions (1 to %d)", t->name, nd, GGUF_MAX_DIMS);
    t->ndim = (int32_t)nd;
    uint64_t numel = 1;
    for (uint32_t i = 0; i < nd; i++) {
        uint64_t d = 0;
        if (rd_u64(c, &d, "a tensor dimension")) return -1;
        /* a zero dimension makes the byte size 0 whatever the others claim, so the data-area check below could
         * not bound them, and the loader walks rows */
        if (d == 0) return fail(c, "tensor '%s' has a zero dimension (ne[%u] = 0): an empty tensor is not a weight",
                                t->name, i);
        if (d > (uint64_t)INT64_MAX || !ld_mul_u64(numel, d, &numel) || numel > (uint64_t)INT64_MAX)
            return fail(c, "tensor '%s': dimensions overflow", t->name);
        t->ne[i] = (int64_t)d;
    }
    for (uint32_t i = nd; i < GGUF_MAX_DIMS; i++) t->ne[i] = 1;
    if (rd_u32(c, &t->type, "a tensor type") || rd_u64(c, &t->offset, "a tensor offset")) return -1;
    int ti = type_index(t->type);
    if (ti < 0) return fail(c, "tensor '%s' has ggml type %u, which mnemo does not know", t->name, t->type);
    if (t->ne[0] % ggml_types[ti].block)
        return fail(c, "tensor '%s': row of %" PRId64 " is not a whole number of %s blocks (%u)", t->name, t->ne[0],
                    ggml_types[ti].name, ggml_types[ti].block);
    if (!ld_mul_u64(numel / ggml_types[ti].block, ggml_types[ti].bytes, &t->nbytes))
        return fail(c, "tensor '%s': size overflows", t->name);
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The first name given twice, or NULL. names is sorted in place. */
static const char *find_dup(char **names, size_t n) {
    qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i])) return names[i];
    return NULL;
}

static int check_unique(cursor *c, gguf_file *g) {
    size_t n = g->n_kv > g->n_tensors ? g->n_kv : g->n_tensors;
    char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names) return fail(c, "out of memory");
    for (size_t i = 0; i < g->n_kv; i++) names[i] = g->kv[i].key;
    const char *d = find_dup(names, g->n_kv);
    int rc = d ? fail(c, "metadata key '%s' appears twice", d) : 0;
    if (!rc) {
        for (size_t i = 0; i < g->n_tensors; i++) names[i] = g->tensors[i].name;
        if ((d = find_dup(names, g->n_tensors))) rc = fail(c, "tensor '%s' appears twice", d);
    }
    free(names);
    return rc;
}

static int read_alignment(cursor *c, gguf_file *g) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find(g, "general.alignment");
    if (!kv) return 0;
    if (kv->type != GGUF_U32) return fail(c, "general.alignment must be a u32 (type %u given)", kv->type);
    uint32_t a = ld_le32(kv->p);
    if (a == 0 || (a & (a - 1)) || a > (1u << 20))
        return fail(c, "general.alignment %u is not a power of two up to 2^20", a);
    g->alignment = a;
    return 0;
}

int gguf_parse(const uint8_t *buf, uint64_t len, const char *file, gguf_file *g, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    cursor c = {.b = buf, .len = len, .pos = 0, .file = file, .err = err, .errlen = errlen};
    uint32_t magic = 0;
    if (len < 4 || memcmp(buf, "GGUF", 4) != 0) return fail(&c, "not a GGUF file (no 'GGUF' magic)");
    if (rd_u32(&c, &magic, "the magic") || rd_u32(&c, &g->version, "the version")) return -1;
    if (g->version != 2 && g->version != 3)
        return fail(&c, "GGUF version %u is not supported (2 and 3 are; re-convert with a current llama.cpp)",
                    g->version);
    uint64_t nt = 0, nkv = 0;
    if (rd_u64(&c, &nt, "the tensor count") || rd_u64(&c, &nkv, "the metadata count")) return -1;
    /* each key/value takes at least 12 bytes and each tensor info 24: bound the counts before allocating */
    if (nkv > (len - c.pos) / 12 || nt > (len - c.pos) / 24)
        return fail(&c, "%" PRIu64 " metadata entries and %" PRIu64 " tensors cannot fit in %" PRIu64 " bytes", nkv, nt,
                    len);
    if (!(g->kv = calloc(nkv ? nkv : 1, sizeof *g->kv)) || !(g->tensors = calloc(nt ? nt : 1, sizeof *g->tensors))) {
        gguf_free(g);
        return fail(&c, "out of memory");
    }
    int rc = 0;
    for (uint64_t i = 0; i < nkv && !rc; i++, g->n_kv++) rc = parse_kv(&c, &g->kv[i]);
    if (!rc) rc = read_alignment(&c, g);
    for (uint64_t i = 0; i < nt && !rc; i++, g->n_tensors++) rc = parse_tensor_info(&c, &g->tensors[i]);
    if (!rc) rc = check_unique(&c, g);
    if (!rc) {
        uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
        g->data_offset = c.pos + pad;
        if (nt && g->data_offset > len) rc = fail(&c, "truncated: the data area would start past the end of the file");
    }
    for (size_t i = 0; i < g->n_tensors && !rc; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t dlen = len - g->data_offset, end;
        if (t->offset % g->alignment)
            rc = fail(&c, "tensor '%s' at offset %" PRIu64 " is not aligned to %" PRIu64, t->name, t->offset,
                      g->alignment);
        else if (!ld_add_u64(t->offset, t->nbytes, &end) || end > dlen)
            rc = fail(&c, "tensor '%s' (%" PRIu64 " bytes at offset %" PRIu64 ") runs past the data area (%" PRIu64
                      " bytes): file truncated?", t->name, t->nbytes, t->offset, dlen);
        else
            t->data = buf + g->data_offset + t->offset;
    }
    if (rc) gguf_free(g);
    return rc;
}

void gguf_free(gguf_file *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_kv; i++) free(g->kv[i].key);
    for (size_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    memset(g, 0, sizeof *g);
}

const gguf_kv *gguf_find(const gguf_file *g, const char *key) {
    for (size_t i = 0; g && i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name) {
    for (size_t i = 0; g && i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

/* An integer of type t at p as int64 (u64 above INT64_MAX does not fit). */
static bool int_at(uint32_t t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case GGUF_U8: *out = p[0]; return true;
    case GGUF_I8: *out = (int8_t)p[0]; return true;
    case GGUF_U16: *out = ld_le16(p); return true;
    case GGUF_I16: *out = (int16_t)ld_le16(p); return true;
    case GGUF_U32: *out = ld_le32(p); return true;
    case GGUF_I32: *out = (int32_t)ld_le32(p); return true;
    case GGUF_I64: *out = (int64_t)ld_le64(p); return true;
    case GGUF_U64: {
        uint64_t v = ld_le64(p);
        if (v > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v;
        return true;
    }
    default: return false;
    }
}

bool gguf_get_i64(const gguf_file *g, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_find(g, key);
    return kv && kv->type != GGUF_ARRAY && int_at(kv->type, kv->p, out);
}

bool gguf_get_f64(const gguf_file *g, const char *key, double *out) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return false;
    if (kv->type == GGUF_F32) {
        union { uint32_t u; float f; } v = {.u = ld_le32(kv->p)};
        *out = v.f;
        return true;
    }
    if (kv->type == GGUF_F64) {
        union { uint64_t u; double f; } v = {.u = ld_le64(kv->p)};
        *out = v.f;
        return true;
    }
    int64_t i;
    if (kv->type == GGUF_ARRAY || !int_at(kv->type, kv->p, &i)) return false;
    *out = (double)i;
    return true;
}

bool gguf_get_bool(const gguf_file *g, const char *key, bool *out) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv || kv->type != GGUF_BOOL) return false;
    *out = kv->p[0] != 0;
    return true;
}

bool gguf_get_str(const gguf_file *g, const char *key, const char **s, uint64_t *len) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv || kv->type != GGUF_STRING) return false;
    *len = ld_le64(kv->p);
    *s = (const char *)kv->p + 8;
    return true;
}

bool gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out) {
    if (!kv || kv->type != GGUF_ARRAY || i >= kv->n) return false;
    uint64_t sz = scalar_size(kv->arr_type);
    return sz && kv->arr_type != GGUF_F32 && kv->arr_type != GGUF_F64 && kv->arr_type != GGUF_BOOL &&
           int_at(kv->arr_type, kv->p + i * sz, out);
}

void gguf_arr_next_str(const uint8_t **pos, const char **s, uint64_t *len) {
    *len = ld_le64(*pos);
    *s = (const char *)*pos + 8;
    *pos += 8 + *len;
}
