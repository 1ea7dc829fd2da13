/*
 * bpe_vocab.c — filling and checking a byte-level BPE vocabulary, and building the lookup tables encoding uses:
 * text -> id, (left id, right id) -> merge rank and result, each byte's token, the pieces split out before
 * pre-tokenization, and the bytes each token decodes to.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_model.h"
#include "byte_unicode.h"
#include "tokenizer_impl.h"
#include "errbuf.h"

#define UNSET UINT32_MAX

bpe_vocab *bpe_vocab_new(int32_t n_tokens) {
    if (n_tokens <= 0 || n_tokens > BPE_MAX_TOKENS) return NULL;
    bpe_vocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->n = n_tokens;
    v->off = malloc((size_t)n_tokens * sizeof *v->off);
    v->len = malloc((size_t)n_tokens * sizeof *v->len);
    v->type = calloc((size_t)n_tokens, 1);
    if (!v->off || !v->len || !v->type) {
        bpe_vocab_free(v);
        return NULL;
    }
    for (int32_t i = 0; i < n_tokens; i++) v->len[i] = UNSET;
    v->bos = v->eos = v->unk = v->pad = -1;
    return v;
}

void bpe_vocab_free(bpe_vocab *v) {
    if (!v) return;
    free(v->pool);
    free(v->off);
    free(v->len);
    free(v->type);
    free(v->mpool);
    free(v->m_off);
    free(v->m_left);
    free(v->m_right);
    for (int i = 0; i < v->n_re; i++) pcre2_code_free(v->re[i]);
    free(v->index);
    free(v->mkey);
    free(v->mrank);
    free(v->mres);
    free(v->special);
    free(v->dec);
    free(v->dec_off);
    free(v->dec_len);
    free(v);
}

/* Appends n bytes to a growing pool; the offset where they start, or -1 when out of memory. */
static int64_t pool_put(char **pool, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 1 << 16;
        while (c < *len + n + 1) c *= 2;
        char *p = realloc(*pool, c);
        if (!p) return -1;
        *pool = p;
        *cap = c;
    }
    int64_t at = (int64_t)*len;
    if (n) memcpy(*pool + *len, s, n);
    (*pool)[*len + n] = '\0'; /* each text NUL-terminated for piece_to_id's callers */
    *len += n + 1;
    return at;
}

int bpe_vocab_set_token(bpe_vocab *v, int32_t id, const char *s, size_t n, int type, char *err, size_t errlen) {
    if (id < 0 || id >= v->n) return errbuf_fail(err, errlen, "token id %d is outside 0..%d", (int)id, (int)v->n - 1);
    if (type < BPE_NORMAL || type > BPE_BYTE)
        return errbuf_fail(err, errlen, "token %d has type %d (not 1..6)", (int)id, type);
    if (n >= UNSET) return errbuf_fail(err, errlen, "token %d is too long", (int)id);
    if (v->len[id] != UNSET) {
        /* an added token repeating a vocabulary entry only changes its type */
        if (v->len[id] != n || memcmp(bpe_text(v, id), s, n))
            return errbuf_fail(err, errlen, "token id %d is given twice with different texts", (int)id);
        v->type[id] = (uint8_t)type;
        return 0;
    }
    int64_t at = pool_put(&v->pool, &v->pool_len, &v->pool_cap, s, n);
    if (at < 0) return errbuf_fail(err, errlen, "out of memory");
    v->off[id] = (uint64_t)at;
    v->len[id] = (uint32_t)n;
    v->type[id] = (uint8_t)type;
    free(v->index); /* a lookup before this token was set is out of date */
    v->index = NULL;
    return 0;
}

int bpe_vocab_add_merge(bpe_vocab *v, const char *left, size_t nl, const char *right, size_t nr) {
    if (nl >= UNSET || nr >= UNSET) return -1;
    if (v->n_merges == v->merges_cap) {
        size_t c = v->merges_cap ? v->merges_cap * 2 : 1024;
        uint64_t *o = realloc(v->m_off, c * sizeof *o);
        if (o) v->m_off = o;
        uint32_t *l = realloc(v->m_left, c * sizeof *l);
        if (l) v->m_left = l;
        uint32_t *r = realloc(v->m_right, c * sizeof *r);
        if (r) v->m_right = r;
        if (!o || !l || !r) return -1;
        v->merges_cap = c;
    }
    int64_t a = pool_put(&v->mpool, &v->mpool_len, &v->mpool_cap, left, nl);
    if (a < 0 || pool_put(&v->mpool, &v->mpool_len, &v->mpool_cap, right, nr) < 0) return -1;
    v->m_off[v->n_merges] = (uint64_t)a;
    v->m_left[v->n_merges] = (uint32_t)nl;
    v->m_right[v->n_merges] = (uint32_t)nr;
    v->n_merges++;
    return 0;
}

void bpe_vocab_set_ids(bpe_vocab *v, int32_t bos, int32_t eos, int32_t unk, int32_t pad) {
    v->bos = bos;
    v->eos = eos;
    v->unk = unk;
    v->pad = pad;
}
void bpe_vocab_set_add_bos(bpe_vocab *v, bool add_bos) {
    v->add_bos = add_bos;
    v->add_bos_set = true;
}
void bpe_vocab_set_ignore_merges(bpe_vocab *v, bool on) {
    v->ignore_merges = on;
    v->ignore_merges_set = true;
}

int32_t bpe_lookup(const bpe_vocab *v, const char *s, size_t n) {
    for (uint32_t h = bpe_hash(s, n) & v->index_mask;; h = (h + 1) & v->index_mask) {
        int32_t id = v->index[h];
        if (id < 0) return -1;
        if (v->len[id] == n && memcmp(bpe_text(v, id), s, n) == 0) return id;
    }
}

/* text -> id over the tokens set so far; a text given twice maps to its last id, as llama.cpp's map does. */
static int build_index(bpe_vocab *v) {
    uint32_t size = 1;
    while (size < 2u * (uint32_t)v->n) size *= 2;
    free(v->index);
    if (!(v->index = malloc((size_t)size * sizeof *v->index))) return -1;
    memset(v->index, 0xff, (size_t)size * sizeof *v->index);
    v->index_mask = size - 1;
    for (int32_t id = 0; id < v->n; id++) {
        if (v->len[id] == UNSET) continue;
        const char *s = bpe_text(v, id);
        uint32_t h = bpe_hash(s, v->len[id]) & v->index_mask;
        while (v->index[h] >= 0 &&
               !(v->len[v->index[h]] == v->len[id] && !memcmp(bpe_text(v, v->index[h]), s, v->len[id])))
            h = (h + 1) & v->index_mask;
        v->index[h] = id;
    }
    return 0;
}

int32_t bpe_vocab_find(bpe_vocab *v, const char *s, size_t n) {
    if (!v->index && build_index(v)) return -1;
    return bpe_lookup(v, s, n);
}

/* Resolves every merge to ids; a merge naming a text that is not a token is an error, like Hugging Face's. */
static int build_merges(bpe_vocab *v, const char *what, char *err, size_t errlen) {
    uint64_t size = 1;
    while (size < 2 * (uint64_t)v->n_merges + 2) size *= 2;
    v->mkey = malloc(size * sizeof *v->mkey);
    v->mrank = malloc(size * sizeof *v->mrank);
    v->mres = malloc(size * sizeof *v->mres);
    if (!v->mkey || !v->mrank || !v->mres) return errbuf_fail(err, errlen, "%s: out of memory", what);
    memset(v->mkey, 0xff, size * sizeof *v->mkey);
    v->mmask = size - 1;
    char *buf = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < v->n_merges; i++) {
        const char *l = v->mpool + v->m_off[i], *r = l + v->m_left[i] + 1;
        size_t nl = v->m_left[i], nr = v->m_right[i];
        int32_t a = bpe_lookup(v, l, nl), b = bpe_lookup(v, r, nr);
        if (nl + nr > cap) {
            cap = (nl + nr) * 2;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                return errbuf_fail(err, errlen, "%s: out of memory", what);
            }
            buf = p;
        }
        memcpy(buf, l, nl);
        memcpy(buf + nl, r, nr);
        int32_t c = bpe_lookup(v, buf, nl + nr);
        if (a < 0 || b < 0 || c < 0) {
            free(buf);
            return errbuf_fail(err, errlen, "%s: merge %zu \"%.*s %.*s\" names %s that is not in the vocabulary", what,
                               i + 1,
                               (int)(nl > 40 ? 40 : nl), l, (int)(nr > 40 ? 40 : nr), r,
                               a < 0   ? "a left token"
                               : b < 0 ? "a right token"
                                : "a merged token");
        }
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        uint64_t h = bpe_merge_hash(key) & v->mmask;
        while (v->mkey[h] != UINT64_MAX && v->mkey[h] != key) h = (h + 1) & v->mmask;
        if (v->mkey[h] == key) continue; /* a repeated merge keeps its first rank */
        v->mkey[h] = key;
        v->mrank[h] = (uint32_t)i;
        v->mres[h] = c;
    }
    free(buf);
    free(v->mpool); /* the strings are no longer needed */
    v->mpool = NULL;
    v->mpool_len = v->mpool_cap = 0;
    return 0;
}

/* Control, unknown and user-defined tokens, grouped by first byte, longest first: a text is split at them
 * before pre-tokenization. */
typedef struct {
    uint8_t first;
    uint32_t len;
    int32_t id;
} special_key;

static int cmp_special(const void *pa, const void *pb) {
    const special_key *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* An empty text could never be split out (and would match everywhere). */
static bool is_special(const bpe_vocab *v, int32_t id) {
    int t = v->type[id];
    return v->len[id] > 0 && (t == BPE_CONTROL || t == BPE_UNKNOWN || t == BPE_USER_DEFINED);
}

static int build_specials(bpe_vocab *v) {
    size_t n = 0;
    for (int32_t id = 0; id < v->n; id++) n += is_special(v, id);
    special_key *keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys || !(v->special = malloc((n ? n : 1) * sizeof *v->special))) {
        free(keys);
        return -1;
    }
    n = 0;
    for (int32_t id = 0; id < v->n; id++)
        if (is_special(v, id)) keys[n++] = (special_key){(uint8_t)bpe_text(v, id)[0], v->len[id], id};
    qsort(keys, n, sizeof *keys, cmp_special);
    size_t k = 0;
    for (int b = 0; b < 256; b++) {
        v->special_start[b] = (uint32_t)k;
        while (k < n && keys[k].first == b) k++;
    }
    v->special_start[256] = (uint32_t)n;
    for (size_t i = 0; i < n; i++) v->special[i] = keys[i].id;
    free(keys);
    return 0;
}

/* What each token adds to a decode: a normal token's GPT-2 characters as bytes (a character outside the map as
 * its own UTF-8), a user-defined token's text, nothing for control / unknown / unused / byte tokens (llama.cpp
 * suppresses them in BPE vocabularies). */
static int build_decode(bpe_vocab *v) {
    if (!(v->dec = malloc(v->pool_len ? v->pool_len : 1)) ||
        !(v->dec_off = malloc((size_t)v->n * sizeof *v->dec_off)) ||
        !(v->dec_len = malloc((size_t)v->n * sizeof *v->dec_len)))
        return -1;
    size_t o = 0;
    for (int32_t id = 0; id < v->n; id++) {
        const unsigned char *s = (const unsigned char *)bpe_text(v, id);
        size_t n = v->len[id];
        v->dec_off[id] = o;
        if (v->type[id] == BPE_USER_DEFINED) {
            memcpy(v->dec + o, s, n);
            o += n;
        } else if (v->type[id] == BPE_NORMAL) {
            for (size_t i = 0; i < n;) {
                uint32_t cp;
                size_t k = utf8_next(s + i, n - i, &cp);
                int b = k ? unicode_to_byte(cp) : -1;
                if (b >= 0) {
                    v->dec[o++] = (char)b;
                } else {
                    if (!k) k = 1;
                    memcpy(v->dec + o, s + i, k);
                    o += k;
                }
                i += k;
            }
        }
        v->dec_len[id] = (uint32_t)(o - v->dec_off[id]);
    }
    return 0;
}

int bpe_vocab_build(bpe_vocab *v, const char *what, tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    int rc = -1;
    for (int32_t id = 0; id < v->n; id++)
        if (v->len[id] == UNSET) {
            errbuf_fail(err, errlen, "%s: token id %d has no text (ids must run 0..%d without gaps)", what, (int)id,
                        (int)v->n - 1);
            goto done;
        }
    if (v->n_re == 0) {
        errbuf_fail(err, errlen, "%s: no pre-tokenizer", what);
        goto done;
    }
    const int32_t ids[4] = {v->bos, v->eos, v->unk, v->pad};
    const char *names[4] = {"bos", "eos", "unknown", "padding"};
    for (int i = 0; i < 4; i++)
        if (ids[i] < -1 || ids[i] >= v->n) {
            errbuf_fail(err, errlen, "%s: %s token id %d is outside the vocabulary of %d", what, names[i], (int)ids[i],
                        (int)v->n);
            goto done;
        }
    if (build_index(v) || build_specials(v) || build_decode(v)) {
        errbuf_fail(err, errlen, "%s: out of memory", what);
        goto done;
    }
    for (int b = 0; b < 256; b++) {
        char s[2];
        size_t n = byte_to_unicode_utf8((uint8_t)b, s);
        v->byte_token[b] = bpe_lookup(v, s, n);
    }
    if (build_merges(v, what, err, errlen)) goto done;
    tokenizer *t = tokenizer_wrap(&bpe_ops, v, TOKENIZER_BPE);
    if (!t) {
        errbuf_fail(err, errlen, "%s: out of memory", what);
        goto done;
    }
    t->vocab = v->n;
    t->bos = v->bos;
    t->eos = v->eos;
    t->unk = v->unk;
    t->pad = v->pad;
    t->add_bos = v->add_bos;
    *out = t;
    return 0;
done:
    bpe_vocab_free(v);
    return rc;
}
