/*
 * train_chat.c — see train_chat.h. Two passes over the render: the first tokenizes every run of text between
 * specials whole (so an example that is too long is refused before any more work), the second finds inside each
 * run the ids where an answer begins or ends by tokenizing the text up to that boundary.
 */
#include "train_chat.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"

typedef struct {
    bool special, answer;
    mnemo_chat_special which; /* special */
    size_t at, len;           /* text: bytes [at, at + len) of the render's buf, adjacent pieces merged by answer */
    size_t n_ids;             /* the first piece of a run of text: the run's ids */
} piece;

typedef struct {
    char *buf; /* every text piece back to back */
    size_t len, cap;
    piece *p;
    size_t n, cap_p;
} render_buf;

static int grow(void **v, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *g = realloc(*v, c * elem);
    if (!g) return -1;
    *v = g;
    *cap = c;
    return 0;
}

static int push(render_buf *r, piece p) {
    if (grow((void **)&r->p, &r->cap_p, r->n + 1, sizeof *r->p)) return -1;
    r->p[r->n++] = p;
    return 0;
}

static int on_text(void *u, const char *s, size_t n, bool answer) {
    render_buf *r = u;
    if (grow((void **)&r->buf, &r->cap, r->len + n, 1)) return -1;
    memcpy(r->buf + r->len, s, n);
    piece *last = r->n ? &r->p[r->n - 1] : NULL;
    if (last && !last->special && last->answer == answer) last->len += n; /* buf grows only here: contiguous */
    else if (push(r, (piece){.answer = answer, .at = r->len, .len = n})) return -1;
    r->len += n;
    return 0;
}

static int on_special(void *u, mnemo_chat_special which, bool answer) {
    return push(u, (piece){.special = true, .answer = answer, .which = which});
}

/* The id a template's special stands for: BOS only for a vocabulary that starts sequences with it (SmolLM2's
 * ChatML has none), EOS always; -1 for none. */
static mnemo_token special_id(const mnemo_model *m, mnemo_chat_special which) {
    if (which == MNEMO_CHAT_BOS) return mnemo_model_adds_bos(m) ? mnemo_model_bos(m) : -1;
    return mnemo_model_eos(m);
}

/* The end of the run of text that starts at piece i (one past its last piece). */
static size_t run_end(const render_buf *r, size_t i) {
    while (i < r->n && !r->p[i].special) i++;
    return i;
}

train_chat_rc train_chat_tokenize(const mnemo_model *m, mnemo_chat_template tmpl, const mnemo_chat_msg *msgs,
                                  int32_t n, size_t max_ids, mnemo_token **ids_out, uint8_t **loss_out,
                                  size_t *n_ids, int32_t *bad_msg, char *err, size_t errlen) {
    render_buf r = {0};
    mnemo_token *ids = NULL;
    uint8_t *loss = NULL;
    size_t n_out = 0, cap = 0;
    int32_t *pre = NULL;
    train_chat_rc rc = TRAIN_CHAT_FAILED;
    *ids_out = NULL;
    *loss_out = NULL;
    *n_ids = 0;
    mnemo_chat_sink sink = {on_text, on_special, &r};
    mnemo_status st = mnemo_chat_template_render(tmpl, msgs, n, false, &sink, bad_msg, err, errlen);
    if (st == MNEMO_ERR_INVALID_ARG) {
        rc = TRAIN_CHAT_MISFIT;
        goto out;
    }
    if (st != MNEMO_OK) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    /* pass 1: ids of every special and every whole run of text */
    for (size_t i = 0; i < r.n;) {
        if (r.p[i].special) {
            mnemo_token id = special_id(m, r.p[i].which);
            if (id >= 0) { /* a model without BOS or EOS: nothing, as mnemo-server does */
                if (grow((void **)&ids, &cap, n_out + 1, sizeof *ids)) goto oom;
                ids[n_out++] = id;
            }
            i++;
            continue;
        }
        size_t j = run_end(&r, i), at = r.p[i].at, len = r.p[j - 1].at + r.p[j - 1].len - at, nf = 0;
        int32_t *full = NULL;
        if (tokenizer_encode_special(m->tok, r.buf + at, len, false, &full, &nf) != 0) {
            snprintf(err, errlen, "tokenization failed");
            goto out;
        }
        int g = grow((void **)&ids, &cap, n_out + nf, sizeof *ids);
        if (!g) memcpy(ids + n_out, full, nf * sizeof *ids);
        free(full);
        if (g) goto oom;
        r.p[i].n_ids = nf;
        n_out += nf;
        i = j;
    }
    if (n_out > max_ids) {
        *n_ids = n_out;
        rc = TRAIN_CHAT_TOO_LONG;
        goto out;
    }
    /* pass 2: which ids count */
    if (!(loss = malloc(n_out ? n_out : 1))) goto oom;
    size_t k = 0; /* ids[k]: the first id of piece i */
    for (size_t i = 0; i < r.n;) {
        if (r.p[i].special) {
            if (special_id(m, r.p[i].which) >= 0)
                loss[k++] = r.p[i].answer;
            i++;
            continue;
        }
        size_t j = run_end(&r, i), at = r.p[i].at, nf = r.p[i].n_ids, tb = 0; /* tb: the run's ids assigned */
        for (size_t q = i; q < j; q++) {
            size_t end = nf, np = 0;
            if (q + 1 < j) { /* the next piece starts at byte b of the run: the ids of text[0, b) that agree */
                free(pre);
                pre = NULL;
                if (tokenizer_encode_special(m->tok, r.buf + at, r.p[q + 1].at - at, false, &pre, &np) != 0) {
                    snprintf(err, errlen, "tokenization failed");
                    goto out;
                }
                size_t agree = 0;
                while (agree < np && agree < nf && pre[agree] == ids[k + agree]) agree++;
                end = agree > tb ? agree : tb;
            }
            for (; tb < end; tb++) loss[k + tb] = r.p[q].answer;
        }
        k += nf;
        i = j;
    }
    *ids_out = ids;
    *loss_out = loss;
    *n_ids = n_out;
    ids = NULL;
    loss = NULL;
    rc = TRAIN_CHAT_OK;
    goto out;
oom:
    snprintf(err, errlen, "out of memory");
out:
    free(r.buf);
    free(r.p);
    free(ids);
    free(loss);
    free(pre);
    return rc;
}
