/*
 * bpe_json.c — a Hugging Face tokenizer.json with a byte-level BPE model, read into a bpe_vocab:
 *   model        type "BPE", vocab {text: id}, merges ("a b" strings or [a, b] pairs), ignore_merges
 *   added_tokens [{id, content, special}]: special ones are control tokens, the others user-defined
 *   pre_tokenizer Sequence of Split (regex or string, behavior Isolated), ByteLevel (its GPT-2 regex when
 *                use_regex), Digits; a ByteLevel step is required (that is what makes the vocabulary bytes)
 *   decoder      ByteLevel (or none); post_processor TemplateProcessing whose single template starts with a
 *                special token means "add BOS" unless tokenizer_config.json says add_bos_token
 * and from tokenizer_config.json: bos_token, eos_token, unk_token, pad_token (a string or {"content": ...}),
 * add_bos_token. Anything else that would change the ids (a normalizer other than NFC, Split behaviours other
 * than Isolated, ByteLevel's add_prefix_space, word prefixes or suffixes) is refused by name rather than ignored.
 */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bpe.h"
#include "errbuf.h"

#define GPT2_BYTELEVEL_REGEX "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define MAX_JSON_BYTES ((size_t)1 << 30)
#define MAX_CONFIG_BYTES ((size_t)64 << 20)

typedef struct {
    const char *what;
    char *err;
    size_t errlen;
    bpe_vocab *v;
    bool byte_level;
    int32_t template_bos; /* the special token a TemplateProcessing puts first, or -1 */
} reader;

static int rfail(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rfail(reader *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errbuf_vwrite(r->err, r->errlen, r->what, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *type_of(json_t *o) {
    json_t *t = json_is_object(o) ? json_object_get(o, "type") : NULL;
    return json_is_string(t) ? json_string_value(t) : NULL;
}

static bool is_null(json_t *j) { return !j || json_is_null(j); }

/* ---- pre-tokenizer */

static int add_regex(reader *r, const char *pattern, bool literal) {
    char msg[400];
    if (bpe_vocab_add_regex(r->v, pattern, literal, msg, sizeof msg)) return rfail(r, "pre_tokenizer: %s", msg);
    return 0;
}

static int read_pre(reader *r, json_t *p, int depth) {
    const char *type = type_of(p);
    if (!type) return rfail(r, "pre_tokenizer: an entry without a \"type\" string");
    if (depth > 8) return rfail(r, "pre_tokenizer: nested too deep");
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list)) return rfail(r, "pre_tokenizer Sequence: \"pretokenizers\" must be a list");
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) if (read_pre(r, e, depth + 1)) return -1;
        return 0;
    }
    if (!strcmp(type, "Split")) {
        json_t *pat = json_object_get(p, "pattern"), *beh = json_object_get(p, "behavior"),
               *inv = json_object_get(p, "invert");
        json_t *re = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
        json_t *str = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
        if (!json_is_string(re) && !json_is_string(str))
            return rfail(r, "pre_tokenizer Split: \"pattern\" must be {\"Regex\": ...} or {\"String\": ...}");
        if (!json_is_string(beh) || strcmp(json_string_value(beh), "Isolated"))
            return rfail(r, "pre_tokenizer Split: behavior %s is not supported (only Isolated)",
                         json_is_string(beh) ? json_string_value(beh) : "(missing)");
        if (json_is_true(inv)) return rfail(r, "pre_tokenizer Split: invert is not supported");
        return add_regex(r, json_string_value(re ? re : str), !re);
    }
    if (!strcmp(type, "ByteLevel")) {
        if (json_is_true(json_object_get(p, "add_prefix_space")))
            return rfail(r, "pre_tokenizer ByteLevel: add_prefix_space is not supported");
        r->byte_level = true;
        json_t *use = json_object_get(p, "use_regex");
        return is_null(use) || json_is_true(use) ? add_regex(r, GPT2_BYTELEVEL_REGEX, false) : 0;
    }
    if (!strcmp(type, "Digits"))
        return add_regex(r, json_is_true(json_object_get(p, "individual_digits")) ? "\\p{N}" : "\\p{N}+", false);
    return rfail(r, "pre_tokenizer %s is not supported (Sequence, Split, ByteLevel, Digits are)", type);
}

/* ---- vocabulary */

static int read_merges(reader *r, json_t *merges) {
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        const char *a, *b;
        size_t na, nb;
        if (json_is_string(m)) {
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == s || !sp[1])
                return rfail(r, "merge %zu \"%.60s\" is not two tokens separated by one space", i + 1, s);
            a = s;
            na = (size_t)(sp - s);
            b = sp + 1;
            nb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            na = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            nb = json_string_length(json_array_get(m, 1));
        } else {
            return rfail(r, "merge %zu is neither a \"a b\" string nor a pair of strings", i + 1);
        }
        if (bpe_vocab_add_merge(r->v, a, na, b, nb)) return rfail(r, "out of memory");
    }
    return 0;
}

static int token_id(json_t *j, int64_t *id) {
    if (!json_is_integer(j)) return -1;
    *id = json_integer_value(j);
    return *id < 0 || *id >= BPE_MAX_TOKENS ? -1 : 0;
}

/* The number of ids: one more than the largest, which may not exceed the entries (no gaps to fill). */
static int count_ids(reader *r, json_t *vocab, json_t *added, int32_t *n) {
    int64_t max = -1, id;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (token_id(val, &id))
            return rfail(r, "model.vocab[\"%.60s\"] is not an id in 0..%d", key, BPE_MAX_TOKENS - 1);
        if (id > max) max = id;
    }
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        if (!json_is_object(a) || token_id(json_object_get(a, "id"), &id) ||
            !json_is_string(json_object_get(a, "content")))
            return rfail(r, "added_tokens[%zu] needs an \"id\" in 0..%d and a \"content\" string", i,
                         BPE_MAX_TOKENS - 1);
        if (id > max) max = id;
    }
    size_t entries = json_object_size(vocab) + json_array_size(added);
    if (max < 0) return rfail(r, "model.vocab is empty");
    if ((uint64_t)max >= entries)
        return rfail(r, "token id %lld but only %zu tokens: ids must run from 0 without gaps", (long long)max, entries);
    *n = (int32_t)max + 1;
    return 0;
}

static int read_tokens(reader *r, json_t *vocab, json_t *added) {
    char msg[300];
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (bpe_vocab_set_token(r->v, (int32_t)json_integer_value(val), key, strlen(key), BPE_NORMAL, msg, sizeof msg))
            return rfail(r, "model.vocab: %s", msg);
    }
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        json_t *c = json_object_get(a, "content");
        int type = json_is_true(json_object_get(a, "special")) ? BPE_CONTROL : BPE_USER_DEFINED;
        if (bpe_vocab_set_token(r->v, (int32_t)json_integer_value(json_object_get(a, "id")), json_string_value(c),
                                json_string_length(c), type, msg, sizeof msg))
            return rfail(r, "added_tokens[%zu]: %s", i, msg);
    }
    return 0;
}

/* ---- special tokens */

/* The id of a tokenizer_config.json token entry (a string or {"content": string}); -1 when absent or null. */
static int special_id(reader *r, json_t *config, const char *key, int32_t *id) {
    json_t *e = config ? json_object_get(config, key) : NULL;
    *id = -1;
    if (is_null(e)) return 0;
    if (json_is_object(e)) e = json_object_get(e, "content");
    if (!json_is_string(e)) return rfail(r, "tokenizer_config.json: %s must be a string or {\"content\": string}", key);
    *id = bpe_vocab_find(r->v, json_string_value(e), json_string_length(e));
    if (*id < 0)
        return rfail(r, "tokenizer_config.json: %s \"%.60s\" is not in the vocabulary", key, json_string_value(e));
    return 0;
}

/* A TemplateProcessing post-processor whose single template starts with a special token: that token. */
static void read_template(reader *r, json_t *post) {
    const char *type = type_of(post);
    if (type && !strcmp(type, "Sequence")) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(post, "processors"), i, e) read_template(r, e);
        return;
    }
    if (!type || strcmp(type, "TemplateProcessing")) return;
    json_t *first = json_array_get(json_object_get(post, "single"), 0);
    json_t *st = json_is_object(first) ? json_object_get(first, "SpecialToken") : NULL;
    json_t *name = json_is_object(st) ? json_object_get(st, "id") : NULL;
    if (json_is_string(name)) r->template_bos = bpe_vocab_find(r->v, json_string_value(name), json_string_length(name));
}

static int read_all(reader *r, json_t *root, json_t *config) {
    if (!json_is_object(root)) return rfail(r, "not a JSON object");
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return rfail(r, "no \"model\" object");
    const char *mtype = type_of(model);
    if (mtype && strcmp(mtype, "BPE"))
        return rfail(r, "model type %s is not supported (only BPE; a SentencePiece model needs tokenizer.model)",
                     mtype);
    const char *unsupported[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        json_t *x = json_object_get(model, unsupported[i]);
        if (!is_null(x) && !(json_is_string(x) && json_string_length(x) == 0))
            return rfail(r, "model.%s is not supported", unsupported[i]);
    }
    json_t *norm = json_object_get(root, "normalizer");
    const char *ntype = type_of(norm);
    /* NFC leaves text that is already composed (nearly all text) unchanged; llama.cpp ignores it too. */
    if (!is_null(norm) && !(ntype && !strcmp(ntype, "NFC")))
        return rfail(r, "normalizer %s is not supported", ntype ? ntype : "(without a type)");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges"),
           *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab)) return rfail(r, "model.vocab must be an object of token: id");
    if (!json_is_array(merges)) return rfail(r, "model.merges is missing or not a list");
    if (is_null(added))
        added = NULL;
    else if (!json_is_array(added))
        return rfail(r, "added_tokens must be a list");
    json_t *none = json_array();
    if (!none) return rfail(r, "out of memory");
    int32_t n = 0;
    int rc = count_ids(r, vocab, added ? added : none, &n);
    if (rc == 0 && !(r->v = bpe_vocab_new(n))) rc = rfail(r, "out of memory");
    if (rc == 0) rc = read_tokens(r, vocab, added ? added : none);
    json_decref(none);
    if (rc) return -1;
    if (read_merges(r, merges)) return -1;
    json_t *pre = json_object_get(root, "pre_tokenizer");
    if (is_null(pre)) return rfail(r, "no pre_tokenizer: not a byte-level BPE tokenizer");
    if (read_pre(r, pre, 0)) return -1;
    if (!r->byte_level)
        return rfail(r, "pre_tokenizer has no ByteLevel step: not a byte-level BPE tokenizer (a SentencePiece model "
                        "needs tokenizer.model)");
    json_t *dec = json_object_get(root, "decoder");
    const char *dtype = type_of(dec);
    if (!is_null(dec) && !(dtype && !strcmp(dtype, "ByteLevel")))
        return rfail(r, "decoder %s is not supported (only ByteLevel)", dtype ? dtype : "(without a type)");
    json_t *im = json_object_get(model, "ignore_merges");
    if (json_is_boolean(im)) bpe_vocab_set_ignore_merges(r->v, json_is_true(im));
    r->template_bos = -1;
    read_template(r, json_object_get(root, "post_processor"));
    int32_t bos, eos, unk, pad;
    if (special_id(r, config, "bos_token", &bos) || special_id(r, config, "eos_token", &eos) ||
        special_id(r, config, "unk_token", &unk) || special_id(r, config, "pad_token", &pad))
        return -1;
    if (bos < 0) bos = r->template_bos;
    json_t *ab = config ? json_object_get(config, "add_bos_token") : NULL;
    bpe_vocab_set_add_bos(r->v,
                          json_is_boolean(ab) ? json_is_true(ab) : r->template_bos >= 0 && r->template_bos == bos);
    bpe_vocab_set_ids(r->v, bos, eos, unk, pad);
    return 0;
}

static json_t *parse(reader *r, const char *text, size_t len, const char *name) {
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_ALLOW_NUL, &je);
    if (!j) rfail(r, "%s is not valid JSON (line %d: %s)", name, je.line, je.text);
    return j;
}

int tokenizer_load_hf_json(const char *json, size_t len, const char *config, size_t config_len, const char *what,
                           tokenizer **out, char *err, size_t errlen) {
    reader r = {.what = what ? what : "tokenizer.json", .err = err, .errlen = errlen};
    if (!out) return -1;
    *out = NULL;
    if (!json) return rfail(&r, "no text");
    json_t *root = parse(&r, json, len, "tokenizer.json"), *cfg = NULL;
    if (!root) return -1;
    if (config && !(cfg = parse(&r, config, config_len, "tokenizer_config.json"))) {
        json_decref(root);
        return -1;
    }
    if (cfg && !json_is_object(cfg)) {
        json_decref(cfg);
        cfg = NULL;
    }
    int rc = read_all(&r, root, cfg);
    json_decref(root);
    json_decref(cfg);
    if (rc) {
        bpe_vocab_free(r.v);
        return -1;
    }
    return bpe_vocab_build(r.v, r.what, out, err, errlen);
}

/* Reads a whole file (at most max bytes); NULL with a message. */
static char *read_file(const char *path, size_t max, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    char *buf = NULL;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
        snprintf(err, errlen, "%s: not a regular file of at most %zu MB", path, max >> 20);
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        snprintf(err, errlen, "%s: out of memory", path);
    } else if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        snprintf(err, errlen, "%s: read error", path);
        free(buf);
        buf = NULL;
    } else {
        *len = (size_t)st.st_size;
    }
    fclose(f);
    return buf;
}

int tokenizer_load_hf_dir(const char *dir, tokenizer **out, char *err, size_t errlen) {
    char path[4096], cpath[4096];
    if (!out) return -1;
    *out = NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
    size_t len = 0, clen = 0;
    char *json = read_file(path, MAX_JSON_BYTES, &len, err, errlen), *cfg = NULL;
    if (!json) return -1;
    struct stat st;
    if (stat(cpath, &st) == 0 && !(cfg = read_file(cpath, MAX_CONFIG_BYTES, &clen, err, errlen))) {
        free(json);
        return -1;
    }
    int rc = tokenizer_load_hf_json(json, len, cfg, clen, path, out, err, errlen);
    free(json);
    free(cfg);
    return rc;
}
