/*
 * s2_attn.c — see s2_attn.h. Per half of the query heads: gather its heads (and their KV heads) into contiguous
 * [T, heads, hd] buffers, run the attention op (or its backward) once per group on that group's rows, scatter back.
 */
#include "s2_attn.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct s2_attn {
    int64_t T, g, hq, hkv, hd;
    int64_t hh, hkvh;    /* query heads per half; KV heads each half reads (its own, or one copy per query head) */
    int64_t *kvmap;      /* [2][hkvh]: the model's KV head behind each of a half's KV heads */
    float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv; /* one half: [T, hh|hkvh, hd], lse [T, hh] */
    size_t floats;
};

static s2_attn *fail_new(s2_attn *s, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    s2_attn_free(s);
    return NULL;
}

s2_attn *s2_attn_new(int64_t T, int64_t g, int64_t hq, int64_t hkv, int64_t hd, char *err, size_t errlen) {
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
    s->T = T, s->g = g, s->hq = hq, s->hkv = hkv, s->hd = hd, s->hh = hq / 2;
    s->hkvh = s->hh % gs == 0 ? s->hh / gs : s->hh;
    if (!(s->kvmap = malloc(2 * (size_t)s->hkvh * sizeof *s->kvmap))) return fail_new(s, err, errlen, "out of memory");
    for (int64_t h = 0; h < 2; h++)
        for (int64_t j = 0; j < s->hkvh; j++) /* whole groups: the half's own KV heads; else KV head of query head */
            s->kvmap[h * s->hkvh + j] = s->hkvh == s->hh ? (h * s->hh + j) / gs : h * s->hkvh + j;
    const size_t nq = (size_t)(T * s->hh * hd), nk = (size_t)(T * s->hkvh * hd), nl = (size_t)(T * s->hh);
    s->floats = 4 * nq + 4 * nk + nl;
    float *b = malloc(s->floats * sizeof *b);
    if (!b) return fail_new(s, err, errlen, "out of memory for S2-Attn's scratch (%zu MiB)", s->floats * 4 >> 20);
    s->q = b, s->o = b + nq, s->dout = b + 2 * nq, s->dq = b + 3 * nq, s->k = b + 4 * nq, s->v = s->k + nk;
    s->dk = s->v + nk, s->dv = s->dk + nk, s->lse = s->dv + nk;
    return s;
}

void s2_attn_free(s2_attn *s) {
    if (!s) return;
    free(s->q); /* the one scratch block */
    free(s->kvmap);
    free(s);
}

size_t s2_attn_bytes(const s2_attn *s) { return s ? s->floats * sizeof(float) : 0; }

/* dst[t, j, :] = src[t, first + j, :] (map NULL) or src[t, map[j], :], for j < n of src's heads. */
static void gather(float *dst, const float *src, int64_t T, int64_t heads, int64_t first, const int64_t *map,
                   int64_t n, int64_t hd) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < n; j++)
            memcpy(dst + (t * n + j) * hd, src + (t * heads + (map ? map[j] : first + j)) * hd,
                   (size_t)hd * sizeof(float));
}

/* gather's inverse: dst[t, first + j, :] = src[t, j, :] (add 0), or dst[t, map[j], :] += src[t, j, :] (add 1). */
static void scatter(float *dst, const float *src, int64_t T, int64_t heads, int64_t first, const int64_t *map,
                    int64_t n, int64_t hd, int add) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < n; j++) {
            float *d = dst + (t * heads + (map ? map[j] : first + j)) * hd;
            const float *x = src + (t * n + j) * hd;
            if (add)
                for (int64_t i = 0; i < hd; i++) d[i] += x[i];
            else
                memcpy(d, x, (size_t)hd * sizeof(float));
        }
}

/* The end of the group of half `half` that starts at row `start` (see s2_attn.h). */
static int64_t group_end(const s2_attn *s, int half, int64_t start) {
    if (s->g >= s->T) return s->T;
    if (half == 0) return start + s->g;
    if (start == 0) return s->g / 2;
    return start + s->g < s->T ? start + s->g : s->T; /* the last group is a half group: no wrap-around */
}

int s2_attention(s2_attn *s, const kern_backend *be, kern_ctx *kc, float *out, float *lse, const float *q,
                 const float *k, const float *v, float scale) {
    const int64_t T = s->T, hd = s->hd, hh = s->hh, hk = s->hkvh;
    for (int half = 0; half < 2; half++) {
        const int64_t *map = s->kvmap + half * hk;
        gather(s->q, q, T, s->hq, half * hh, NULL, hh, hd);
        gather(s->k, k, T, s->hkv, 0, map, hk, hd);
        gather(s->v, v, T, s->hkv, 0, map, hk, hd);
        for (int64_t a = 0, e; a < T; a = e) {
            e = group_end(s, half, a);
            int rc = be->attention(kc, s->o + a * hh * hd, s->lse + a * hh, s->q + a * hh * hd, s->k + a * hk * hd,
                                   s->v + a * hk * hd, e - a, e - a, 0, hh, hk, hd, scale);
            if (rc != KERN_OK) return rc;
        }
        scatter(out, s->o, T, s->hq, half * hh, NULL, hh, hd, 0);
        scatter(lse, s->lse, T, s->hq, half * hh, NULL, hh, 1, 0);
    }
    return KERN_OK;
}

int s2_attention_backward(s2_attn *s, const kern_backend *be, kern_ctx *kc, float *dq, float *dk, float *dv,
                          const float *dout, const float *q, const float *k, const float *v, const float *out,
                          const float *lse, float scale) {
    const int64_t T = s->T, hd = s->hd, hh = s->hh, hk = s->hkvh;
    for (int half = 0; half < 2; half++) {
        const int64_t *map = s->kvmap + half * hk;
        gather(s->q, q, T, s->hq, half * hh, NULL, hh, hd);
        gather(s->o, out, T, s->hq, half * hh, NULL, hh, hd);
        gather(s->dout, dout, T, s->hq, half * hh, NULL, hh, hd);
        gather(s->lse, lse, T, s->hq, half * hh, NULL, hh, 1);
        gather(s->k, k, T, s->hkv, 0, map, hk, hd);
        gather(s->v, v, T, s->hkv, 0, map, hk, hd);
        memset(s->dk, 0, (size_t)(T * hk * hd) * sizeof(float)); /* the op accumulates dk, dv */
        memset(s->dv, 0, (size_t)(T * hk * hd) * sizeof(float));
        for (int64_t a = 0, e; a < T; a = e) {
            e = group_end(s, half, a);
            const int64_t qo = a * hh * hd, ko = a * hk * hd;
            int rc = be->attention_backward(kc, s->dq + qo, s->dk + ko, s->dv + ko, s->dout + qo, s->q + qo, s->k + ko,
                                            s->v + ko, s->o + qo, s->lse + a * hh, e - a, e - a, 0, hh, hk, hd, scale);
            if (rc != KERN_OK) return rc;
        }
        scatter(dq, s->dq, T, s->hq, half * hh, NULL, hh, hd, 0);
        scatter(dk, s->dk, T, s->hkv, 0, map, hk, hd, 1);
        scatter(dv, s->dv, T, s->hkv, 0, map, hk, hd, 1);
    }
    return KERN_OK;
}
