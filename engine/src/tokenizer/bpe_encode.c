/*
 * bpe_encode.c — byte-level BPE encoding: control and added pieces are split out of the text (leftmost, longest
 * first), the rest is cut into words by the pre-tokenizer (bpe_pretok.c), and inside each word the byte
 * characters are merged pair by pair, lowest merge rank first (ties: leftmost), as GPT-2, Hugging Face and
 * llama.cpp do. A min-heap of candidate pairs over a linked list of symbols keeps a word O(n log n), so one long
 * word (a megabyte without spaces) costs no more than many short ones.
 */
#include <stdlib.h>
#include <string.h>

#include "bpe_model.h"
#include "byte_unicode.h"
#include "tokenizer_impl.h"

typedef struct {
    uint32_t rank;
    int32_t left, right;  /* symbol positions */
    int32_t lid, rid;     /* their ids when the pair was queued: a pair is stale once either changed */
    int32_t result;
} pair;

typedef struct {
    const bpe_vocab *v;
    int32_t *out;
    size_t n, cap;
    /* per word, grown as needed */
    int32_t *id, *prev, *next;
    size_t sym_cap;
    pair *heap;
    size_t heap_n, heap_cap;
    char *mapped; /* the word in GPT-2 characters, for whole-word lookups */
    size_t mapped_cap;
    bool oom;
} encoder;

static void emit(encoder *e, int32_t id) {
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 256;
        int32_t *p = realloc(e->out, cap * sizeof *p);
        if (!p) {
            e->oom = true;
            return;
        }
        e->out = p;
        e->cap = cap;
    }
    e->out[e->n++] = id;
}

static bool pair_less(const pair *a, const pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(encoder *e, pair p) {
    if (e->heap_n == e->heap_cap) {
        size_t cap = e->heap_cap ? e->heap_cap * 2 : 64;
        pair *h = realloc(e->heap, cap * sizeof *h);
        if (!h) {
            e->oom = true;
            return;
        }
        e->heap = h;
        e->heap_cap = cap;
    }
    size_t i = e->heap_n++;
    while (i > 0 && pair_less(&p, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = p;
}

static pair heap_pop(encoder *e) {
    pair top = e->heap[0], last = e->heap[--e->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= e->heap_n) break;
        if (c + 1 < e->heap_n && pair_less(&e->heap[c + 1], &e->heap[c])) c++;
        if (!pair_less(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (e->heap_n) e->heap[i] = last;
    return top;
}

/* Queues the pair of symbols l and r when the vocabulary has a merge for it. */
static void queue_pair(encoder *e, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    int32_t a = e->id[l], b = e->id[r];
    if (a < 0 || b < 0) return;
    const bpe_vocab *v = e->v;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t h = bpe_merge_hash(key) & v->mmask; v->mkey[h] != UINT64_MAX; h = (h + 1) & v->mmask)
        if (v->mkey[h] == key) {
            heap_push(e, (pair){v->mrank[h], l, r, a, b, v->mres[h]});
            return;
        }
}

static bool grow_symbols(encoder *e, size_t n) {
    if (n <= e->sym_cap) return true;
    size_t cap = e->sym_cap ? e->sym_cap : 64;
    while (cap < n) cap *= 2;
    int32_t *a = realloc(e->id, cap * sizeof *a);
    if (a) e->id = a;
    int32_t *b = realloc(e->prev, cap * sizeof *b);
    if (b) e->prev = b;
    int32_t *c = realloc(e->next, cap * sizeof *c);
    if (c) e->next = c;
    if (!a || !b || !c) return false;
    e->sym_cap = cap;
    return true;
}

/* A word that is one token as a whole (Llama 3's ignore_merges): its id, else -1. */
static int32_t whole_word(encoder *e, const unsigned char *p, size_t n) {
    if (2 * n > e->mapped_cap) {
        char *m = realloc(e->mapped, 2 * n);
        if (!m) {
            e->oom = true;
            return -1;
        }
        e->mapped = m;
        e->mapped_cap = 2 * n;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += byte_to_unicode_utf8(p[i], e->mapped + k);
    return bpe_lookup(e->v, e->mapped, k);
}

static int encode_word(void *ctx, const char *text, size_t n) {
    encoder *e = ctx;
    const bpe_vocab *v = e->v;
    const unsigned char *p = (const unsigned char *)text;
    if (v->ignore_merges) {
        int32_t id = whole_word(e, p, n);
        if (id >= 0) {
            emit(e, id);
            return e->oom ? -1 : 0;
        }
    }
    if (n > INT32_MAX || !grow_symbols(e, n)) return -1;
    for (size_t i = 0; i < n; i++) {
        e->id[i] = v->byte_token[p[i]];
        e->prev[i] = (int32_t)i - 1;
        e->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    e->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) queue_pair(e, (int32_t)i, (int32_t)i + 1);
    while (e->heap_n && !e->oom) {
        pair q = heap_pop(e);
        int32_t l = q.left, r = q.right;
        if (e->id[l] != q.lid || e->id[r] != q.rid || e->next[l] != r) continue; /* stale */
        e->id[l] = q.result;
        e->id[r] = -2; /* merged away */
        e->next[l] = e->next[r];
        if (e->next[r] >= 0) e->prev[e->next[r]] = l;
        queue_pair(e, e->prev[l], l);
        queue_pair(e, l, e->next[l]);
    }
    for (int32_t i = 0; i >= 0; i = e->next[i]) {
        /* a byte whose character is not in the vocabulary: unknown, or dropped as llama.cpp does */
        if (e->id[i] >= 0) emit(e, e->id[i]);
        else if (v->unk >= 0) emit(e, v->unk);
    }
    return e->oom ? -1 : 0;
}

/* The special piece starting at text[i] (leftmost, longest), or -1. */
static int32_t special_at(const bpe_vocab *v, const char *text, size_t len, size_t i, bool parse_special) {
    uint8_t b = (uint8_t)text[i];
    for (uint32_t k = v->special_start[b]; k < v->special_start[b + 1]; k++) {
        int32_t id = v->special[k];
        if (!parse_special && v->type[id] != BPE_USER_DEFINED) continue;
        if (v->len[id] <= len - i && memcmp(text + i, bpe_text(v, id), v->len[id]) == 0) return id;
    }
    return -1;
}

int bpe_encode(const tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
                      size_t piece_bytes, int32_t **ids, size_t *n) {
    (void)piece_bytes; /* BPE's working memory is small: always whole */
    const bpe_vocab *v = t->impl;
    encoder e = {.v = v};
    if (add_bos && t->add_bos && t->bos >= 0) emit(&e, t->bos);
    size_t from = 0;
    for (size_t i = 0; i < len && !e.oom;) {
        int32_t id = v->special_start[(uint8_t)text[i]] < v->special_start[(uint8_t)text[i] + 1]
                         ? special_at(v, text, len, i, parse_special)
                         : -1;
        if (id < 0) {
            i++;
            continue;
        }
        if (i > from && bpe_pretokenize(v, text + from, i - from, encode_word, &e)) e.oom = true;
        emit(&e, id);
        i += v->len[id];
        from = i;
    }
    if (!e.oom && len > from && bpe_pretokenize(v, text + from, len - from, encode_word, &e)) e.oom = true;
    free(e.id);
    free(e.prev);
    free(e.next);
    free(e.heap);
    free(e.mapped);
    if (e.oom) {
        free(e.out);
        return -1;
    }
    if (!e.out && !(e.out = malloc(sizeof *e.out))) return -1; /* an empty result is still a buffer to free */
    *ids = e.out;
    *n = e.n;
    return 0;
}
