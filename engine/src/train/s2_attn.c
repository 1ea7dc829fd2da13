/*
 * s2_attn.c — see s2_attn.h. Per half of the query heads: gather its heads (and their KV heads) into contiguous
 * [T, heads, hd] buffers, run the attention op (or its backward) once per group on that group's rows, scatter back.
 * Every move is a backend 2-D copy (a strided slice of all rows in one call), so the same code runs where the
 * model's activations are: host memory on the CPU, device memory on a GPU.
 */
#include "s2_attn.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"

struct s2_attn {
    const kern_backend *be; /* whose memory the scratch is in, and whose copies move the heads */
    int64_t T, g, hq, hkv, hd;
    int64_t hh, hkvh;    /* query heads per half; KV heads each half reads (its own, or one copy per query head) */
    int64_t *kvmap;      /* [2][hkvh]: the model's KV head behind each of a half's KV heads (host) */
    bool kv_slice[2];    /* that half's KV heads are consecutive, distinct, and no other half's: one strided copy */
    float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv; /* one half: [T, hh|hkvh, hd], lse [T, hh] (backend memory) */
    size_t floats;
};

static s2_attn *fail_new(s2_attn *s, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errbuf_vwrite(err, errlen, NULL, fmt, ap);
    va_end(ap);
    s2_attn_free(s);
    return NULL;
}

s2_attn *s2_attn_new(const kern_backend *be, int64_t T, int64_t g, int64_t hq, int64_t hkv, int64_t hd, char *err,
                     size_t errlen) {
    if (T < 1 || g < 1 || hd < 1 || hkv < 1 || hq % hkv)
        return fail_new(NULL, err, errlen, "S2-Attn: bad shape (T %lld, group %lld, heads %lld/%lld)", (long long)T,
                        (long long)g, (long long)hq, (long long)hkv);
    if (hq % 2) return fail_new(NULL, err, errlen, "S2-Attn shifts half of the heads: %lld heads is odd", (long long)hq);
    if (g < T && (T % g || g % 2))
        return fail_new(NULL, err, errlen, "S2-Attn: seq_len %lld must be a multiple of the group %lld, and the group "
                        "even (shifted by half a group)", (long long)T, (long long)g);
    s2_attn *s = calloc(1, sizeof *s);
    if (!s) return fail_new(NULL, err, errlen, "out of memory");
    const int64_t gs = hq / hkv; /* query heads per KV head */
    s->be = be, s->T = T, s->g = g, s->hq = hq, s->hkv = hkv, s->hd = hd, s->hh = hq / 2;
    s->hkvh = s->hh % gs == 0 ? s->hh / gs : s->hh;
    if (!(s->kvmap = malloc(2 * (size_t)s->hkvh * sizeof *s->kvmap))) return fail_new(s, err, errlen, "out of memory");
    for (int64_t h = 0; h < 2; h++)
        for (int64_t j = 0; j < s->hkvh; j++) /* whole groups: the half's own KV heads; else KV head of query head */
            s->kvmap[h * s->hkvh + j] = s->hkvh == s->hh ? (h * s->hh + j) / gs : h * s->hkvh + j;
    for (int h = 0; h < 2; h++) { /* whole groups, or MHA: KV heads h*hkvh .. (h+1)*hkvh-1 */
        s->kv_slice[h] = true;
        for (int64_t j = 0; j < s->hkvh; j++) s->kv_slice[h] &= s->kvmap[h * s->hkvh + j] == h * s->hkvh + j;
    }
    const size_t nq = (size_t)(T * s->hh * hd), nk = (size_t)(T * s->hkvh * hd), nl = (size_t)(T * s->hh);
    s->floats = 4 * nq + 4 * nk + nl;
    float *b = be->mem_alloc(s->floats * sizeof *b);
    if (!b)
        return fail_new(s, err, errlen, "out of %s memory for S2-Attn's scratch (%zu MiB)", be->name,
                        s->floats * 4 >> 20);
    s->q = b, s->o = b + nq, s->dout = b + 2 * nq, s->dq = b + 3 * nq, s->k = b + 4 * nq, s->v = s->k + nk;
    s->dk = s->v + nk, s->dv = s->dk + nk, s->lse = s->dv + nk;
    return s;
}

void s2_attn_free(s2_attn *s) {
    if (!s) return;
    if (s->be) s->be->mem_free(s->q); /* the one scratch block */
    free(s->kvmap);
    free(s);
}

size_t s2_attn_bytes(const s2_attn *s) { return s ? s->floats * sizeof(float) : 0; }

/* One head slice of every row, in backend memory: dst[t, dj + j, :] = src[t, sj + j, :] for j < n, dst rows of dn
 * heads, src rows of sn heads, heads of hd floats. */
static int copy_heads(const s2_attn *s, kern_ctx *kc, float *dst, int64_t dn, int64_t dj, const float *src,
                      int64_t sn, int64_t sj, int64_t n, int64_t hd) {
    const size_t f = sizeof(float);
    return s->be->mem_copy2d(kc, dst + dj * hd, (size_t)(dn * hd) * f, src + sj * hd, (size_t)(sn * hd) * f,
                             (size_t)(n * hd) * f, (size_t)s->T, KERN_D2D);
}

/* dst[t, j, :] = src[t, map[j], :] for j < n (map NULL: src[t, first + j, :]). */
static int gather(const s2_attn *s, kern_ctx *kc, float *dst, const float *src, int64_t heads, int64_t first,
                  const int64_t *map, int64_t n, int64_t hd) {
    if (!map) return copy_heads(s, kc, dst, n, 0, src, heads, first, n, hd);
    for (int64_t j = 0; j < n; j++) {
        int rc = copy_heads(s, kc, dst, n, j, src, heads, map[j], 1, hd);
        if (rc != KERN_OK) return rc;
    }
    return KERN_OK;
}

/* gather's inverse for the query heads: dst[t, first + j, :] = src[t, j, :]. */
static int scatter(const s2_attn *s, kern_ctx *kc, float *dst, const float *src, int64_t heads, int64_t first,
                   int64_t n, int64_t hd) {
    return copy_heads(s, kc, dst, heads, first, src, n, 0, n, hd);
}

/* dst[t, map[j], :] += src[t, j, :] for j < n, one head at a time (several j may share a KV head), through two
 * [T, hd] staging buffers and the add op. */
static int scatter_add(const s2_attn *s, kern_ctx *kc, float *dst, const float *src, int64_t heads,
                       const int64_t *map, int64_t n, float *stage_a, float *stage_b) {
    const int64_t hd = s->hd;
    for (int64_t j = 0; j < n; j++) {
        int rc = copy_heads(s, kc, stage_a, 1, 0, dst, heads, map[j], 1, hd);
        if (rc == KERN_OK) rc = copy_heads(s, kc, stage_b, 1, 0, src, n, j, 1, hd);
        if (rc == KERN_OK) rc = s->be->add(kc, stage_a, stage_b, s->T * hd);
        if (rc == KERN_OK) rc = copy_heads(s, kc, dst, heads, map[j], stage_a, 1, 0, 1, hd);
        if (rc != KERN_OK) return rc;
    }
    return KERN_OK;
}

/* The end of the group of half `half` that starts at row `start` (see s2_attn.h). */
static int64_t group_end(const s2_attn *s, int half, int64_t start) {
    if (s->g >= s->T) return s->T;
    if (half == 0) return start + s->g;
    if (start == 0) return s->g / 2;
    return start + s->g < s->T ? start + s->g : s->T; /* the last group is a half group: no wrap-around */
}

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        int rc_ = (x);                                                                                                 \
        if (rc_ != KERN_OK) return rc_;                                                                                \
    } while (0)

int s2_attention(s2_attn *s, kern_ctx *kc, float *out, float *lse, const float *q, const float *k, const float *v,
                 float scale) {
    const kern_backend *be = s->be;
    const int64_t T = s->T, hd = s->hd, hh = s->hh, hk = s->hkvh;
    for (int half = 0; half < 2; half++) {
        const int64_t *map = s->kvmap + half * hk;
        TRY(gather(s, kc, s->q, q, s->hq, half * hh, NULL, hh, hd));
        TRY(gather(s, kc, s->k, k, s->hkv, 0, map, hk, hd));
        TRY(gather(s, kc, s->v, v, s->hkv, 0, map, hk, hd));
        for (int64_t a = 0, e; a < T; a = e) {
            e = group_end(s, half, a);
            TRY(be->attention(kc, s->o + a * hh * hd, s->lse + a * hh, s->q + a * hh * hd, s->k + a * hk * hd,
                              s->v + a * hk * hd, e - a, e - a, 0, hh, hk, hd, scale));
        }
        TRY(scatter(s, kc, out, s->o, s->hq, half * hh, hh, hd));
        TRY(scatter(s, kc, lse, s->lse, s->hq, half * hh, hh, 1));
    }
    return KERN_OK;
}

int s2_attention_backward(s2_attn *s, kern_ctx *kc, float *dq, float *dk, float *dv, const float *dout,
                          const float *q, const float *k, const float *v, const float *out, const float *lse,
                          float scale) {
    const kern_backend *be = s->be;
    const int64_t T = s->T, hd = s->hd, hh = s->hh, hk = s->hkvh;
    for (int half = 0; half < 2; half++) {
        const int64_t *map = s->kvmap + half * hk;
        TRY(gather(s, kc, s->q, q, s->hq, half * hh, NULL, hh, hd));
        TRY(gather(s, kc, s->o, out, s->hq, half * hh, NULL, hh, hd));
        TRY(gather(s, kc, s->dout, dout, s->hq, half * hh, NULL, hh, hd));
        TRY(gather(s, kc, s->lse, lse, s->hq, half * hh, NULL, hh, 1));
        TRY(gather(s, kc, s->k, k, s->hkv, 0, map, hk, hd));
        TRY(gather(s, kc, s->v, v, s->hkv, 0, map, hk, hd));
        /* The op accumulates dk, dv. A half that owns its KV heads starts from the caller's sums and is copied
         * back; one whose query heads share KV heads starts from zero and is added head by head. */
        const size_t kv_bytes = (size_t)(T * hk * hd) * sizeof(float);
        if (s->kv_slice[half]) {
            TRY(gather(s, kc, s->dk, dk, s->hkv, half * hk, NULL, hk, hd));
            TRY(gather(s, kc, s->dv, dv, s->hkv, half * hk, NULL, hk, hd));
        } else {
            TRY(be->mem_set(kc, s->dk, 0, kv_bytes));
            TRY(be->mem_set(kc, s->dv, 0, kv_bytes));
        }
        for (int64_t a = 0, e; a < T; a = e) {
            e = group_end(s, half, a);
            const int64_t qo = a * hh * hd, ko = a * hk * hd;
            TRY(be->attention_backward(kc, s->dq + qo, s->dk + ko, s->dv + ko, s->dout + qo, s->q + qo, s->k + ko,
                                       s->v + ko, s->o + qo, s->lse + a * hh, e - a, e - a, 0, hh, hk, hd, scale));
        }
        TRY(scatter(s, kc, dq, s->dq, s->hq, half * hh, hh, hd));
        if (s->kv_slice[half]) {
            TRY(scatter(s, kc, dk, s->dk, s->hkv, half * hk, hk, hd));
            TRY(scatter(s, kc, dv, s->dv, s->hkv, half * hk, hk, hd));
        } else { /* q and o are free now: they stage the heads (each holds T x hh x hd >= T x hd floats) */
            TRY(scatter_add(s, kc, dk, s->dk, s->hkv, map, hk, s->q, s->o));
            TRY(scatter_add(s, kc, dv, s->dv, s->hkv, map, hk, s->q, s->o));
        }
    }
    return KERN_OK;
}
