/*
 * gguf_write.c — the GGUF v3 writer (gguf_write.h). Metadata and tensor infos go into growing byte buffers; the
 * data area is streamed tensor by tensor.
 */
#include "gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

#define ALIGN GGUF_DEFAULT_ALIGNMENT

typedef struct {
    uint8_t *p;
    size_t len, cap;
} bytes;

typedef struct {
    uint64_t nbytes, offset;
} tensor_slot;

struct gguf_writer {
    bytes kv, info;
    uint64_t n_kv;
    tensor_slot *t;
    size_t n_t, cap_t;
    uint64_t data_len;
    bool oom;
};

static void put(gguf_writer *w, bytes *b, const void *src, size_t n) {
    if (w->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->len + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            w->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
/* Little-endian host (x86-64, aarch64), as the reader assumes via ld_le*. */
static void put_u32(gguf_writer *w, bytes *b, uint32_t v) { put(w, b, &v, 4); }
static void put_u64(gguf_writer *w, bytes *b, uint64_t v) { put(w, b, &v, 8); }
static void put_str(gguf_writer *w, bytes *b, const char *s, size_t n) {
    put_u64(w, b, n);
    put(w, b, s, n);
}
static void key(gguf_writer *w, const char *k, uint32_t type) {
    put_str(w, &w->kv, k, strlen(k));
    put_u32(w, &w->kv, type);
    w->n_kv++;
}

gguf_writer *gguf_writer_new(void) { return calloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    free(w->kv.p);
    free(w->info.p);
    free(w->t);
    free(w);
}

void gguf_w_str(gguf_writer *w, const char *k, const char *v) {
    key(w, k, GGUF_STRING);
    put_str(w, &w->kv, v, strlen(v));
}
void gguf_w_u32(gguf_writer *w, const char *k, uint32_t v) { key(w, k, GGUF_U32); put_u32(w, &w->kv, v); }
void gguf_w_i32(gguf_writer *w, const char *k, int32_t v) { key(w, k, GGUF_I32); put_u32(w, &w->kv, (uint32_t)v); }
void gguf_w_f32(gguf_writer *w, const char *k, float v) { key(w, k, GGUF_F32); put(w, &w->kv, &v, 4); }
void gguf_w_bool(gguf_writer *w, const char *k, bool v) {
    uint8_t b = v;
    key(w, k, GGUF_BOOL);
    put(w, &w->kv, &b, 1);
}
static void arr(gguf_writer *w, const char *k, uint32_t t, const void *v, uint64_t n, size_t es) {
    key(w, k, GGUF_ARRAY);
    put_u32(w, &w->kv, t);
    put_u64(w, &w->kv, n);
    if (n) put(w, &w->kv, v, (size_t)n * es);
}
void gguf_w_arr_i32(gguf_writer *w, const char *k, const int32_t *v, uint64_t n) { arr(w, k, GGUF_I32, v, n, 4); }
void gguf_w_arr_f32(gguf_writer *w, const char *k, const float *v, uint64_t n) { arr(w, k, GGUF_F32, v, n, 4); }
void gguf_w_arr_u8(gguf_writer *w, const char *k, const uint8_t *v, uint64_t n) { arr(w, k, GGUF_U8, v, n, 1); }
void gguf_w_arr_str(gguf_writer *w, const char *k, const char *const *s, const size_t *lens, uint64_t n) {
    key(w, k, GGUF_ARRAY);
    put_u32(w, &w->kv, GGUF_STRING);
    put_u64(w, &w->kv, n);
    for (uint64_t i = 0; i < n; i++) put_str(w, &w->kv, s[i], lens ? lens[i] : strlen(s[i]));
}

void gguf_w_copy(gguf_writer *w, const gguf_kv *kv) {
    key(w, kv->key, kv->type);
    if (kv->type == GGUF_ARRAY) {
        put_u32(w, &w->kv, kv->arr_type);
        put_u64(w, &w->kv, kv->n);
    }
    put(w, &w->kv, kv->p, (size_t)kv->nbytes); /* the parser checked these bytes lie in the source image */
}

void gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, int32_t ndim, const int64_t *ne, uint64_t nbytes) {
    if (w->oom) return;
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        tensor_slot *q = realloc(w->t, cap * sizeof *q);
        if (!q) {
            w->oom = true;
            return;
        }
        w->t = q;
        w->cap_t = cap;
    }
    w->t[w->n_t++] = (tensor_slot){.nbytes = nbytes, .offset = w->data_len};
    put_str(w, &w->info, name, strlen(name));
    put_u32(w, &w->info, (uint32_t)ndim);
    for (int32_t i = 0; i < ndim; i++) put_u64(w, &w->info, (uint64_t)ne[i]);
    put_u32(w, &w->info, type);
    put_u64(w, &w->info, w->data_len);
    w->data_len += (nbytes + ALIGN - 1) / ALIGN * ALIGN;
}

static int pad(FILE *f, uint64_t pos) {
    static const uint8_t zeros[ALIGN];
    size_t n = (size_t)((ALIGN - pos % ALIGN) % ALIGN);
    return fwrite(zeros, 1, n, f) == n ? 0 : -1;
}

int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *user, char *err, size_t errlen) {
    if (w->oom) {
        snprintf(err, errlen, "%s: out of memory building the GGUF header", path);
        return -1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        return -1;
    }
    bytes head = {0};
    put(w, &head, "GGUF", 4);
    put_u32(w, &head, 3);
    put_u64(w, &head, w->n_t);
    put_u64(w, &head, w->n_kv);
    int rc = w->oom ? -1 : 0;
    uint64_t pos = head.len + w->kv.len + w->info.len;
    if (!rc && (fwrite(head.p, 1, head.len, f) != head.len || fwrite(w->kv.p, 1, w->kv.len, f) != w->kv.len ||
                fwrite(w->info.p, 1, w->info.len, f) != w->info.len || pad(f, pos)))
        rc = -1;
    free(head.p);
    uint8_t *buf = NULL;
    for (size_t i = 0; !rc && i < w->n_t; i++) {
        free(buf);
        if (!(buf = malloc(w->t[i].nbytes ? (size_t)w->t[i].nbytes : 1))) {
            snprintf(err, errlen, "%s: out of memory for a tensor of %llu bytes", path,
                     (unsigned long long)w->t[i].nbytes);
            rc = -2;
            break;
        }
        if (fill(user, i, buf, err, errlen)) {
            rc = -2;
            break;
        }
        if (fwrite(buf, 1, (size_t)w->t[i].nbytes, f) != w->t[i].nbytes || pad(f, w->t[i].nbytes)) rc = -1;
    }
    free(buf);
    if (fclose(f) != 0 && !rc) rc = -1;
    if (rc == -1) snprintf(err, errlen, "%s: write failed: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        rc = -1;
    }
    if (rc) remove(tmp);
    return rc ? -1 : 0;
}
