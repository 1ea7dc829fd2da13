/*
 * train_data.c — see train_data.h. Examples are tokenized once, at open, into one pool of ids (JSON lines: with a
 * loss flag beside each id, so a chat example's several answers need no list of spans); a step's rows are then a
 * lookup. Chat lines are checked here (roles, content, who speaks last) and rendered and tokenized by train_chat.c.
 * The shuffled order is a keyed Feistel permutation of [0, n) (cycle-walking on the next even power of two), so
 * example j of epoch e is found in O(1) from (seed, e, j) with no stored permutation or RNG state.
 */
#include "train_data.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "log.h"
#include "train_chat.h"
#include "errbuf.h"

struct train_data {
    int32_t L;              /* seq_len: predicted tokens per row */
    bool text, shuffle;
    uint64_t seed;
    mnemo_token pad;
    mnemo_token *pool;      /* text: the whole stream; JSON lines: every example's ids back to back */
    size_t n_pool;
    int64_t n_ex;
    size_t *start;          /* JSON lines: [n_ex + 1] offsets into pool */
    uint8_t *loss;          /* JSON lines: [n_pool] 1 where the id counts in the loss (predicted and learned) */
    bool tmpl_known;        /* chat lines: tmpl detected (at the first one) */
    mnemo_chat_template tmpl;
};

static train_data *fail(train_data *d, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errbuf_vwrite(err, errlen, NULL, fmt, ap);
    va_end(ap);
    train_data_free(d);
    return NULL;
}

void train_data_free(train_data *d) {
    if (!d) return;
    free(d->pool);
    free(d->start);
    free(d->loss);
    free(d);
}

int64_t train_data_examples(const train_data *d) { return d->n_ex; }
bool train_data_is_text(const train_data *d) { return d->text; }

/* The byte offset of the first invalid UTF-8 sequence, or -1 when the text is valid. */
static int64_t utf8_error_at(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n || (c == 0)) return (int64_t)i;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return (int64_t)i;
        if ((len == 2 && c < 0xC2) || (len == 3 && c == 0xE0 && s[i + 1] < 0xA0) ||
            (len == 4 && (c > 0xF4 || (c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F))))
            return (int64_t)i; /* overlong, or past U+10FFFF */
        i += len;
    }
    return -1;
}

static char *read_file(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        snprintf(err, errlen, "%s: %s", path, buf ? "read error (a directory?)" : "out of memory");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Appends n ids to the pool, loss[i] (or fill when loss is NULL) beside each. */
static int append(train_data *d, const mnemo_token *ids, const uint8_t *loss, uint8_t fill, size_t n, size_t *cap) {
    if (d->n_pool + n > *cap) {
        size_t c = (*cap ? *cap * 2 : 4096) + n;
        mnemo_token *p = realloc(d->pool, c * sizeof *p);
        if (p) d->pool = p;
        uint8_t *l = p ? realloc(d->loss, c) : NULL;
        if (l) d->loss = l;
        if (!p || !l) return -1;
        *cap = c;
    }
    memcpy(d->pool + d->n_pool, ids, n * sizeof *ids);
    if (loss) memcpy(d->loss + d->n_pool, loss, n);
    else memset(d->loss + d->n_pool, fill, n);
    d->n_pool += n;
    return 0;
}

/* Closes the example whose ids were appended since the last one. */
static int end_example(train_data *d) {
    size_t *gs = realloc(d->start, (size_t)(d->n_ex + 2) * sizeof *gs);
    if (!gs) return -1;
    d->start = gs;
    d->n_ex++;
    d->start[d->n_ex] = d->n_pool;
    return 0;
}

static train_data *open_text(train_data *d, const mnemo_model *m, const char *path, const char *buf, size_t len, char *err,
                             size_t errlen) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode(m->tok, buf, len, true, &ids, &n) != 0 || !n)
        return fail(d, err, errlen, "%s: tokenization failed", path);
    d->pool = ids;
    d->n_pool = n;
    if (n < (size_t)d->L + 1)
        return fail(d, err, errlen, "%s: %zu tokens (BOS included), too few for one window of seq_len + 1 = %d", path,
                    n, d->L + 1);
    d->n_ex = (int64_t)((n - 1) / (size_t)d->L);
    return d;
}

/* A {"prompt", "completion"} line -> its example appended. 0, or -1 with the message in err. */
static int add_completion(train_data *d, const mnemo_model *m, json_t *o, const char *path, long line, size_t *cap,
                          char *err, size_t errlen) {
    json_t *jp = json_object_get(o, "prompt"), *jc = json_object_get(o, "completion");
    if (!json_is_string(jp) || !json_is_string(jc)) {
        snprintf(err, errlen, "%s:%ld: an example is {\"prompt\": string, \"completion\": string}%s", path, line,
                 !jp || !jc ? "" : " (both strings)");
        return -1;
    }
    const char *p = json_string_value(jp), *c = json_string_value(jc);
    size_t pl = json_string_length(jp), cl = json_string_length(jc);
    if (cl == 0) {
        snprintf(err, errlen, "%s:%ld: the completion is empty: nothing to learn", path, line);
        return -1;
    }
    char *both = malloc(pl + cl + 1);
    int32_t *pid = NULL, *all = NULL;
    size_t np = 0, na = 0;
    int rc = -1;
    if (!both) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(both, p, pl);
    memcpy(both + pl, c, cl);
    if (tokenizer_encode(m->tok, p, pl, true, &pid, &np) != 0 ||
        tokenizer_encode(m->tok, both, pl + cl, true, &all, &na) != 0) {
        snprintf(err, errlen, "%s:%ld: tokenization failed", path, line);
        goto out;
    }
    size_t agree = 0; /* the prompt's ids that the pair's tokenization keeps */
    while (agree < np && agree < na && pid[agree] == all[agree]) agree++;
    if (agree == na) {
        snprintf(err, errlen, "%s:%ld: the completion adds no token", path, line);
        goto out;
    }
    if (na + 1 > (size_t)d->L + 1) { /* + EOS */
        snprintf(err, errlen, "%s:%ld: the example has %zu tokens (BOS and EOS included), more than seq_len + 1 = %d",
                 path, line, na + 1, d->L + 1);
        goto out;
    }
    mnemo_token eos = mnemo_model_eos(m);
    if (append(d, all, NULL, 0, agree, cap) || append(d, all + agree, NULL, 1, na - agree, cap) ||
        append(d, &eos, NULL, 1, 1, cap) || end_example(d)) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    rc = 0;
out:
    free(both);
    free(pid);
    free(all);
    return rc;
}

static const char *const ROLES[] = {"system", "user", "assistant"}; /* by mnemo_chat_role */

/* The model's chat template, from its tokenizer_config.json as mnemo-server reads it (llama2 when it names none
 * or one mnemo does not know; the latter with a warning). */
static mnemo_chat_template chat_template_of(train_data *d, const mnemo_model *m) {
    if (!d->tmpl_known) {
        char why[512];
        mnemo_status st = mnemo_chat_template_detect(m->dir, &d->tmpl, why, sizeof why);
        if (st != MNEMO_OK && st != MNEMO_ERR_IO)
            mnemo_log(MNEMO_LOG_WARN, "%s; chat training examples use the %s template", why,
                      mnemo_chat_template_name(d->tmpl));
        d->tmpl_known = true;
    }
    return d->tmpl;
}

/* A {"messages": [...]} line -> its example appended (see train_data.h). 0, or -1 with the message in err. */
static int add_chat(train_data *d, const mnemo_model *m, json_t *jm, const char *path, long line, size_t *cap,
                    char *err, size_t errlen) {
    size_t n = json_array_size(jm);
    if (!json_is_array(jm) || n == 0 || n > INT32_MAX) {
        snprintf(err, errlen, "%s:%ld: \"messages\" must be a non-empty array of {\"role\", \"content\"}", path,
                 line);
        return -1;
    }
    mnemo_chat_msg *msgs = malloc(n * sizeof *msgs);
    if (!msgs) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = -1;
    bool answered = false;
    mnemo_token *ids = NULL;
    uint8_t *loss = NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(jm, i), *jr = json_object_get(e, "role"), *jc = json_object_get(e, "content");
        int role = -1;
        for (int r = 0; json_is_string(jr) && r < 3; r++)
            if (!strcmp(json_string_value(jr), ROLES[r])) role = r;
        if (!json_is_object(e)) {
            snprintf(err, errlen, "%s:%ld: messages[%zu] must be an object {\"role\", \"content\"}", path, line, i);
            goto out;
        }
        if (role < 0) {
            snprintf(err, errlen, "%s:%ld: messages[%zu].role must be \"system\", \"user\" or \"assistant\"", path,
                     line, i);
            goto out;
        }
        if (!json_is_string(jc)) {
            snprintf(err, errlen, "%s:%ld: messages[%zu].content must be a string", path, line, i);
            goto out;
        }
        msgs[i] = (mnemo_chat_msg){(mnemo_chat_role)role, json_string_value(jc), json_string_length(jc)};
        answered |= role == MNEMO_ROLE_ASSISTANT;
    }
    if (!answered) {
        snprintf(err, errlen, "%s:%ld: the conversation has no assistant message: nothing to learn", path, line);
        goto out;
    }
    if (msgs[n - 1].role != MNEMO_ROLE_ASSISTANT) {
        snprintf(err, errlen, "%s:%ld: the last message must be the assistant's (messages[%zu] is a %s message)",
                 path, line, n - 1, ROLES[msgs[n - 1].role]);
        goto out;
    }
    mnemo_chat_template t = chat_template_of(d, m);
    size_t n_ids = 0;
    int32_t bad = -1;
    char why[384];
    switch (train_chat_tokenize(m, t, msgs, (int32_t)n, (size_t)d->L + 1, &ids, &loss, &n_ids, &bad, why,
                                sizeof why)) {
    case TRAIN_CHAT_OK: break;
    case TRAIN_CHAT_MISFIT:
        if (bad >= 0) snprintf(err, errlen, "%s:%ld: messages[%d].role: %s", path, line, (int)bad, why);
        else snprintf(err, errlen, "%s:%ld: %s", path, line, why);
        goto out;
    case TRAIN_CHAT_TOO_LONG:
        snprintf(err, errlen, "%s:%ld: the example has %zu tokens (the %s chat template, BOS included), more than "
                 "seq_len + 1 = %d", path, line, n_ids, mnemo_chat_template_name(t), d->L + 1);
        goto out;
    default: snprintf(err, errlen, "%s:%ld: %s", path, line, why); goto out;
    }
    bool counts = false; /* an id after the first one is learned (ids[0] is predicted from nothing) */
    for (size_t i = 1; i < n_ids; i++) counts |= loss[i];
    if (!counts) {
        snprintf(err, errlen, "%s:%ld: the assistant's answers add no token", path, line);
        goto out;
    }
    if (append(d, ids, loss, 0, n_ids, cap) || end_example(d)) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    rc = 0;
out:
    free(msgs);
    free(ids);
    free(loss);
    return rc;
}

/* A {"tokens": [ids], "loss": [0|1, ...]} line (token ids as they are: synthetic tasks, a tokenizer of the
 * caller's) -> its example appended. loss[i] = 1: tokens[i] is learned; absent: every token after the first. 0, or
 * -1 with the message in err. */
static int add_tokens(train_data *d, const mnemo_model *m, json_t *jt, json_t *jl, const char *path, long line,
                      size_t *cap, char *err, size_t errlen) {
    size_t n = json_array_size(jt);
    if (!json_is_array(jt) || n < 2) {
        snprintf(err, errlen, "%s:%ld: \"tokens\" must be an array of at least 2 token ids", path, line);
        return -1;
    }
    if (n > (size_t)d->L + 1) {
        snprintf(err, errlen, "%s:%ld: the example has %zu tokens, more than seq_len + 1 = %d", path, line, n,
                 d->L + 1);
        return -1;
    }
    if (jl && (!json_is_array(jl) || json_array_size(jl) != n)) {
        snprintf(err, errlen, "%s:%ld: \"loss\" must be an array of 0 and 1 as long as \"tokens\" (%zu)", path,
                 line, n);
        return -1;
    }
    mnemo_token *ids = malloc(n * sizeof *ids);
    uint8_t *loss = malloc(n);
    int rc = -1;
    if (!ids || !loss) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    int32_t V = mnemo_model_n_vocab(m);
    bool counts = false;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(jt, i), *l = jl ? json_array_get(jl, i) : NULL;
        json_int_t v = json_is_integer(t) ? json_integer_value(t) : -1;
        if (v < 0 || v >= V) {
            snprintf(err, errlen, "%s:%ld: tokens[%zu] must be a token id in [0, %d)", path, line, i, (int)V);
            goto out;
        }
        if (l && !(json_is_integer(l) && (json_integer_value(l) == 0 || json_integer_value(l) == 1))) {
            snprintf(err, errlen, "%s:%ld: loss[%zu] must be 0 or 1", path, line, i);
            goto out;
        }
        ids[i] = (mnemo_token)v;
        loss[i] = l ? (uint8_t)json_integer_value(l) : i > 0;
        counts |= i > 0 && loss[i];
    }
    if (!counts) {
        snprintf(err, errlen, "%s:%ld: no token after the first has loss 1: nothing to learn", path, line);
        goto out;
    }
    if (append(d, ids, loss, 0, n, cap) || end_example(d)) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    rc = 0;
out:
    free(ids);
    free(loss);
    return rc;
}

/* One JSON line -> its example appended. 0, or -1 with the message in err. */
static int add_example(train_data *d, const mnemo_model *m, json_t *o, const char *path, long line, size_t *cap,
                       char *err, size_t errlen) {
    json_t *jt = json_object_get(o, "tokens");
    if (jt) {
        if (json_object_get(o, "prompt") || json_object_get(o, "completion") || json_object_get(o, "messages")) {
            snprintf(err, errlen, "%s:%ld: an example is {\"tokens\"}, {\"prompt\", \"completion\"} or "
                     "{\"messages\"}, one of them", path, line);
            return -1;
        }
        return add_tokens(d, m, jt, json_object_get(o, "loss"), path, line, cap, err, errlen);
    }
    json_t *jm = json_object_get(o, "messages");
    if (!jm) return add_completion(d, m, o, path, line, cap, err, errlen);
    if (json_object_get(o, "prompt") || json_object_get(o, "completion")) {
        snprintf(err, errlen, "%s:%ld: an example is {\"prompt\", \"completion\"} or {\"messages\"}, not both", path,
                 line);
        return -1;
    }
    return add_chat(d, m, jm, path, line, cap, err, errlen);
}

static train_data *open_jsonl(train_data *d, const mnemo_model *m, const char *path, const char *buf, size_t len,
                              char *err, size_t errlen) {
    size_t cap = 0;
    d->start = calloc(1, sizeof *d->start);
    if (!d->start) return fail(d, err, errlen, "out of memory");
    long line = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(buf + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - buf) : len;
        line++;
        size_t a = at, b = end;
        while (a < b && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\r')) a++;
        while (b > a && (buf[b - 1] == ' ' || buf[b - 1] == '\t' || buf[b - 1] == '\r')) b--;
        at = end + 1;
        if (a == b) continue; /* blank lines are allowed */
        json_error_t je;
        json_t *o = json_loadb(buf + a, b - a, JSON_REJECT_DUPLICATES, &je);
        if (!o || !json_is_object(o)) {
            json_decref(o);
            return fail(d, err, errlen, "%s:%ld: %s", path, line, o ? "a line must be a JSON object" : je.text);
        }
        int rc = add_example(d, m, o, path, line, &cap, err, errlen);
        json_decref(o);
        if (rc) return fail(d, NULL, 0, "");
    }
    if (d->n_ex == 0) return fail(d, err, errlen, "%s: no examples (only blank lines)", path);
    return d;
}

train_data *train_data_open_bytes(const mnemo_model *m, const char *name, const char *buf, size_t len,
                                  int32_t seq_len, bool shuffle, uint64_t seed, char *err, size_t errlen) {
    if (!m || m->failed || !name || (!buf && len) || seq_len < 1)
        return fail(NULL, err, errlen, "training data needs a loaded model, a name and seq_len >= 1");
    train_data *d = calloc(1, sizeof *d);
    if (!d) return fail(NULL, err, errlen, "out of memory");
    d->L = seq_len;
    d->shuffle = shuffle;
    d->seed = seed;
    d->pad = mnemo_model_eos(m);
    size_t nl = strlen(name);
    d->text = !(nl >= 6 && !strcmp(name + nl - 6, ".jsonl"));
    if (len >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3)) buf += 3, len -= 3; /* a UTF-8 BOM: not text of the file */
    int64_t bad = utf8_error_at((const unsigned char *)buf, len);
    if (len == 0) return fail(d, err, errlen, "%s: the file is empty", name);
    if (bad >= 0) return fail(d, err, errlen, "%s: not UTF-8 text (byte %lld)", name, (long long)bad);
    return d->text ? open_text(d, m, name, buf, len, err, errlen) : open_jsonl(d, m, name, buf, len, err, errlen);
}

train_data *train_data_open(const mnemo_model *m, const char *path, int32_t seq_len, bool shuffle, uint64_t seed,
                            char *err, size_t errlen) {
    if (!path) return fail(NULL, err, errlen, "training data needs a path");
    size_t len = 0;
    char *buf = read_file(path, &len, err, errlen);
    if (!buf) return NULL;
    train_data *d = train_data_open_bytes(m, path, buf, len, seq_len, shuffle, seed, err, errlen);
    free(buf);
    return d;
}

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* A permutation of [0, n) keyed by key: 4 Feistel rounds on 2h bits (2^(2h) >= n), walking the cycle until the
 * value falls inside [0, n). */
static int64_t permute(int64_t i, int64_t n, uint64_t key) {
    int h = 1;
    while (((int64_t)1 << (2 * h)) < n) h++;
    uint64_t mask = ((uint64_t)1 << h) - 1, x = (uint64_t)i;
    do {
        uint64_t l = x >> h, r = x & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t t = l ^ (mix64(r ^ key ^ ((uint64_t)round << 56)) & mask);
            l = r;
            r = t;
        }
        x = (l << h) | r;
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}

int64_t train_data_row(const train_data *d, int64_t step, int32_t rows, int32_t r, mnemo_token *tokens,
                       uint8_t *mask) {
    int64_t flat = step * rows + r, epoch = flat / d->n_ex, j = flat % d->n_ex;
    int64_t ex = d->shuffle ? permute(j, d->n_ex, mix64(d->seed ^ mix64((uint64_t)epoch + 1))) : j;
    const int32_t L = d->L;
    if (d->text) {
        memcpy(tokens, d->pool + (size_t)ex * (size_t)L, (size_t)(L + 1) * sizeof *tokens);
        memset(mask, 1, (size_t)L);
        return ex;
    }
    size_t s = d->start[ex], n = d->start[ex + 1] - s; /* BOS .. EOS */
    memcpy(tokens, d->pool + s, n * sizeof *tokens);
    for (size_t t = n; t < (size_t)L + 1; t++) tokens[t] = d->pad;
    for (int32_t t = 0; t < L; t++) /* tokens[t + 1] counts when it is learned (a completion or an answer) */
        mask[t] = (size_t)(t + 1) < n && d->loss[s + (size_t)t + 1];
    return ex;
}
