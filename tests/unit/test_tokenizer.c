/*
 * test_tokenizer.c — the SentencePiece binding and the streaming detokenizer against the committed fixtures.
 *
 * Covers: tokenizer.model specials; every case of tokenizer_cases.json (recorded with the sentencepiece
 * Python library: ids must match exactly and decode must give "decoded"); BOS handling; id <-> piece round
 * trip over the whole vocabulary; unknown pieces and out-of-range ids; load errors for a missing / garbage /
 * empty file and a directory; and text_stream: targeted cases (an emoji split over byte pieces, leading space
 * after different contexts, incomplete bytes at flush) plus a seeded property test — for thousands of random
 * id sequences (byte pieces forming valid and invalid characters, control tokens, spaces, unk) the pushes +
 * flush concatenate to decode(context + ids) minus decode(context), and every single output is valid UTF-8.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"
#include "tokenizer.h"

static char model_path[4096];

/* ---- helpers */

/* Strict UTF-8 check (no overlongs, surrogates, or code points above U+10FFFF). */
static bool utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) need = 2;
        else if (c >= 0xE0 && c <= 0xEF) { need = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return false;
        if (i + need > n) return false;
        if (p[i + 1] < lo || p[i + 1] > hi) return false;
        for (size_t k = 2; k < need; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xBF) return false;
        i += need;
    }
    return true;
}

static char *decode_ids(const tokenizer *tok, const int32_t *ids, size_t n, size_t *len) {
    char *t = NULL;
    if (tokenizer_decode(tok, ids, n, &t, len) != 0) return NULL;
    return t;
}

static int32_t byte_id(const tokenizer *tok, unsigned b) {
    char piece[8];
    snprintf(piece, sizeof piece, "<0x%02X>", b);
    return tokenizer_piece_to_id(tok, piece);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {   /* xorshift64*: seeded, so failures reproduce */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* A growable byte buffer for concatenating stream output. */
typedef struct { char *p; size_t n, cap; } sbuf;
static bool sbuf_add(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

/* ---- long texts encoded in pieces equal the whole encoding */

static void random_text(char *out, size_t n) {
    static const char *const words[] = {"the", "King", "of", "Denmark,", "to-be", "42", "3.14", "(x)", "don't",
                                        "caf\xc3\xa9", "\xe4\xb8\xad\xe6\x96\x87", "\xf0\x9f\x99\x82", "a", "Z",
                                        "\"quoted\"", "x_y", "<s>", "...", "#!", "naïve"};
    static const char *const gaps[] = {" ", " ", " ", " ", "  ", "   ", "\n", "\t", " \n ", "\n\n"};
    size_t len = 0;
    while (len + 32 < n) {
        const char *w = words[rnd() % (sizeof words / sizeof *words)];
        const char *g = gaps[rnd() % (sizeof gaps / sizeof *gaps)];
        len += (size_t)snprintf(out + len, n - len, "%s%s", w, g);
    }
    out[len] = '\0';
}

static void test_encode_pieces(const char *rel, bool expect_pieces) {
    char path[4096], err[512] = "";
    snprintf(path, sizeof path, "%s/%s", test_fixtures(), rel);
    tokenizer *tok = NULL;
    if (tokenizer_load(path, &tok, err, sizeof err) != 0) {
        CHECK(0, "load %s: %s", path, err);
        return;
    }
    CHECK(tokenizer_encodes_in_pieces(tok) == expect_pieces, "%s: encodes in pieces %d, expected %d", rel,
          tokenizer_encodes_in_pieces(tok), expect_pieces);
    static char text[20000];
    for (int round = 0; round < 12; round++) {
        random_text(text, 2000 + rnd() % (sizeof text - 2000));
        size_t len = strlen(text), skip = round % 3; /* also texts that start with spaces */
        const char *t = round % 4 == 3 ? "  lead" : text + skip;
        if (round % 4 == 3) len = strlen(t);
        else len -= skip;
        int32_t *whole = NULL, *parts = NULL;
        size_t nw = 0, np = 0;
        for (size_t piece = 1; piece <= 4096; piece *= 8) {
            CHECK(tokenizer_encode_pieces(tok, t, len, true, 0, &whole, &nw) == 0, "whole encode");
            CHECK(tokenizer_encode_pieces(tok, t, len, true, piece, &parts, &np) == 0, "encode in pieces");
            bool same = whole && parts && nw == np && !memcmp(whole, parts, nw * sizeof *whole);
            CHECK(same, "%s: round %d, pieces of %zu: %zu ids, whole %zu", rel, round, piece, np, nw);
            free(whole);
            free(parts);
        }
    }
    tokenizer_free(tok);
}

/* ---- specials, pieces, ranges */

static void test_specials(const tokenizer *tok) {
    CHECK(tokenizer_vocab_size(tok) == 512, "vocab %d", tokenizer_vocab_size(tok));
    CHECK(tokenizer_unk_id(tok) == 0, "unk %d", tokenizer_unk_id(tok));
    CHECK(tokenizer_bos_id(tok) == 1, "bos %d", tokenizer_bos_id(tok));
    CHECK(tokenizer_eos_id(tok) == 2, "eos %d", tokenizer_eos_id(tok));
    CHECK(tokenizer_pad_id(tok) == -1, "pad %d", tokenizer_pad_id(tok));
    CHECK(tokenizer_is_control(tok, 1) && tokenizer_is_control(tok, 2), "bos/eos are control");
    CHECK(!tokenizer_is_control(tok, 0), "unk is not control");
    int32_t e2 = byte_id(tok, 0xE2);
    CHECK(e2 > 2 && tokenizer_is_byte(tok, e2), "<0xE2> is a byte piece (id %d)", e2);
    CHECK(!tokenizer_is_byte(tok, 1), "bos is not a byte piece");
    int nbytes = 0;
    for (int32_t id = 0; id < tokenizer_vocab_size(tok); id++) nbytes += tokenizer_is_byte(tok, id);
    CHECK(nbytes == 256, "256 byte pieces, got %d", nbytes);
}

static void test_pieces(const tokenizer *tok) {
    int32_t V = tokenizer_vocab_size(tok);
    int bad = 0;
    for (int32_t id = 0; id < V; id++) {
        char *p;
        size_t n;
        if (tokenizer_id_to_piece(tok, id, &p, &n) != 0) { bad++; continue; }
        if (strlen(p) != n || tokenizer_piece_to_id(tok, p) != id) bad++;
        free(p);
    }
    CHECK(bad == 0, "id -> piece -> id round trip failed for %d ids", bad);

    char *p;
    size_t n;
    CHECK(tokenizer_id_to_piece(tok, 1, &p, &n) == 0 && strcmp(p, "<s>") == 0 && n == 3, "piece of bos");
    free(p);
    CHECK(tokenizer_piece_to_id(tok, "<unk>") == 0, "<unk> is a real piece");
    CHECK(tokenizer_piece_to_id(tok, "definitely-not-a-piece") == -1, "unknown piece -> -1");
    CHECK(tokenizer_piece_to_id(tok, "") == -1, "empty piece -> -1");
    CHECK(tokenizer_piece_to_id(tok, "<pad>") == -1, "<pad> absent -> -1");
    CHECK(tokenizer_piece_to_id(tok, NULL) == -1, "NULL piece -> -1");

    /* Out of range ids are refused everywhere, and outputs are left empty. */
    p = (char *)1;
    CHECK(tokenizer_id_to_piece(tok, V, &p, &n) == -1 && p == NULL, "id_to_piece(vocab) refused");
    CHECK(tokenizer_id_to_piece(tok, -1, &p, &n) == -1, "id_to_piece(-1) refused");
    int32_t bad_ids[][2] = {{5, V}, {-1, 5}, {INT32_MAX, 5}, {INT32_MIN, 5}};
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
        char *t = (char *)1;
        size_t l = 7;
        CHECK(tokenizer_decode(tok, bad_ids[i], 2, &t, &l) == -1 && t == NULL && l == 0, "decode bad id %zu", i);
    }
    CHECK(!tokenizer_is_control(tok, V) && !tokenizer_is_byte(tok, -1), "flags of out-of-range ids are false");

    /* Decoding nothing is fine. */
    char *t;
    size_t l;
    CHECK(tokenizer_decode(tok, NULL, 0, &t, &l) == 0 && l == 0 && t && t[0] == '\0', "decode of no ids");
    free(t);
}

/* ---- the recorded cases */

static void test_cases(const tokenizer *tok) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_cases.json", test_fixtures());
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    CHECK(root != NULL, "%s: %s (line %d)", path, jerr.text, jerr.line);
    if (!root) return;
    CHECK(json_is_string(json_object_get(root, "format")) &&
              strcmp(json_string_value(json_object_get(root, "format")), "mnemo-tokenizer-cases") == 0,
          "cases format");
    CHECK(json_integer_value(json_object_get(root, "version")) == 1, "cases version");
    json_t *cases = json_object_get(root, "cases");
    CHECK(json_is_array(cases) && json_array_size(cases) > 0, "cases array");
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *jt = json_object_get(c, "text"), *jids = json_object_get(c, "ids"),
               *jdec = json_object_get(c, "decoded");
        if (!json_is_string(jt) || !json_is_array(jids) || !json_is_string(jdec)) {
            CHECK(0, "case %zu malformed", i);
            continue;
        }
        const char *text = json_string_value(jt);
        size_t tlen = json_string_length(jt);
        size_t want_n = json_array_size(jids);
        int32_t *want = malloc((want_n + 1) * sizeof *want);
        if (!want) { CHECK(0, "oom"); break; }
        for (size_t k = 0; k < want_n; k++) want[k] = (int32_t)json_integer_value(json_array_get(jids, k));

        int32_t *ids = NULL;
        size_t n = 0;
        int rc = tokenizer_encode(tok, text, tlen, false, &ids, &n);
        bool same = rc == 0 && n == want_n && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
        CHECK(same, "case %zu encode mismatch (%zu ids, want %zu): \"%s\"", i, n, want_n, text);
        free(ids);

        /* BOS: exactly one more id, in front. */
        rc = tokenizer_encode(tok, text, tlen, true, &ids, &n);
        same = rc == 0 && n == want_n + 1 && ids[0] == 1 && (want_n == 0 || memcmp(ids + 1, want, want_n * 4) == 0);
        CHECK(same, "case %zu encode with BOS", i);
        /* Decoding with the BOS in front gives the same text (control pieces are invisible). */
        size_t dl;
        char *d = rc == 0 ? decode_ids(tok, ids, n, &dl) : NULL;
        CHECK(d && dl == json_string_length(jdec) && memcmp(d, json_string_value(jdec), dl) == 0,
              "case %zu decode with BOS", i);
        free(d);
        free(ids);

        d = decode_ids(tok, want, want_n, &dl);
        CHECK(d && dl == json_string_length(jdec) && memcmp(d, json_string_value(jdec), dl) == 0,
              "case %zu decode: got \"%s\" want \"%s\"", i, d ? d : "(null)", json_string_value(jdec));
        CHECK(d && strlen(d) == dl, "case %zu decode NUL-terminated", i);
        free(d);
        free(want);
    }
    json_decref(root);
}

/* ---- load errors */

static void test_load_errors(void) {
    char err[512];
    tokenizer *t = (tokenizer *)1;
    const char *missing = "/nonexistent-dir/no-such-tokenizer.model";
    CHECK(tokenizer_load(missing, &t, err, sizeof err) == -1 && t == NULL, "missing file refused");
    CHECK(strstr(err, missing) && strstr(err, "no such file"), "missing file message: %s", err);

    char tmpl[] = "/tmp/mnemo-tok-garbage-XXXXXX";
    int fd = mkstemp(tmpl);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    unsigned char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rnd();
    CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk, "write garbage");
    close(fd);
    err[0] = '\0';
    t = (tokenizer *)1;
    CHECK(tokenizer_load(tmpl, &t, err, sizeof err) == -1 && t == NULL, "garbage file refused");
    CHECK(strstr(err, tmpl) && strstr(err, "not a SentencePiece model"), "garbage message: %s", err);

    /* A text file (valid UTF-8, not a protobuf) and an empty file (an empty protobuf parses fine). */
    FILE *f = fopen(tmpl, "wb");
    if (f) { fputs("this is not a tokenizer\n", f); fclose(f); }
    err[0] = '\0';
    CHECK(tokenizer_load(tmpl, &t, err, sizeof err) == -1 && strstr(err, "not a SentencePiece model"),
          "text file message: %s", err);
    f = fopen(tmpl, "wb");
    if (f) fclose(f);
    err[0] = '\0';
    CHECK(tokenizer_load(tmpl, &t, err, sizeof err) == -1 && strstr(err, tmpl), "empty file message: %s", err);
    unlink(tmpl);

    err[0] = '\0';
    CHECK(tokenizer_load("/tmp", &t, err, sizeof err) == -1 && strstr(err, "/tmp"), "directory refused: %s", err);
    /* A tiny error buffer is truncated, not overrun. */
    char small[8];
    memset(small, 'x', sizeof small);
    CHECK(tokenizer_load(missing, &t, small, sizeof small) == -1 && small[7] == '\0', "small err buffer");
    CHECK(tokenizer_load(missing, &t, NULL, 0) == -1, "NULL err buffer");
    tokenizer_free(NULL);
}

/* ---- streaming */

/* Streams ids after ctx; returns the concatenated text (malloc'ed) or NULL; *all_valid reports whether every
 * individual output was valid UTF-8; outs[i] (if given) receives the length of push i's output. */
static char *stream_all(const tokenizer *tok, int32_t ctx, const int32_t *ids, size_t n, size_t *len,
                        bool *all_valid, size_t *outs) {
    text_stream *ts = text_stream_new(tok, ctx);
    if (!ts) return NULL;
    sbuf b = {0};
    *all_valid = true;
    bool ok = sbuf_add(&b, "", 0);
    for (size_t i = 0; ok && i <= n; i++) {
        const char *o;
        size_t ol;
        int rc = i < n ? text_stream_push(ts, ids[i], &o, &ol) : text_stream_flush(ts, &o, &ol);
        if (rc != 0) { ok = false; break; }
        if (!utf8_valid(o, ol)) *all_valid = false;
        if (outs) outs[i] = ol;
        ok = sbuf_add(&b, o, ol);
    }
    text_stream_free(ts);
    if (!ok) { free(b.p); return NULL; }
    *len = b.n;
    return b.p;
}

/* Expected stream text: decode(ctx + ids) minus decode(ctx). NULL if decode(ctx) is not a prefix. */
static char *reference(const tokenizer *tok, int32_t ctx, const int32_t *ids, size_t n, size_t *len) {
    int32_t *all = malloc((n + 1) * sizeof *all);
    if (!all) return NULL;
    size_t k = 0;
    if (ctx >= 0) all[k++] = ctx;
    memcpy(all + k, ids, n * sizeof *ids);
    size_t fl, cl = 0;
    char *full = decode_ids(tok, all, n + k, &fl);
    char *c = ctx >= 0 ? decode_ids(tok, &ctx, 1, &cl) : NULL;
    free(all);
    char *res = NULL;
    if (full && (ctx < 0 || c) && cl <= fl && memcmp(full, c ? c : "", cl) == 0) {
        res = malloc(fl - cl + 1);
        if (res) {
            memcpy(res, full + cl, fl - cl + 1);
            *len = fl - cl;
        }
    }
    free(full);
    free(c);
    return res;
}

/* Checks one sequence; returns true when the stream matches the reference and every output was valid. */
static bool stream_matches(const tokenizer *tok, int32_t ctx, const int32_t *ids, size_t n) {
    size_t sl = 0, rl = 0;
    bool valid;
    char *s = stream_all(tok, ctx, ids, n, &sl, &valid, NULL);
    char *r = reference(tok, ctx, ids, n, &rl);
    bool ok = s && r && valid && sl == rl && memcmp(s, r, sl) == 0;
    if (!ok) {
        fprintf(stderr, "stream mismatch ctx=%d ids=[", ctx);
        for (size_t i = 0; i < n; i++) fprintf(stderr, "%s%d", i ? "," : "", ids[i]);
        fprintf(stderr, "]\n  stream(%s)=\"%s\"\n  ref=\"%s\"\n", valid ? "valid" : "INVALID UTF-8",
                s ? s : "(null)", r ? r : "(null)");
    }
    free(s);
    free(r);
    return ok;
}

/* Appends the byte pieces of the UTF-8 encoding of cp to ids; drop > 0 leaves off that many trailing bytes. */
static size_t push_char_bytes(const tokenizer *tok, int32_t *ids, size_t n, uint32_t cp, size_t drop) {
    unsigned char b[4];
    size_t k;
    if (cp < 0x80) { b[0] = (unsigned char)cp; k = 1; }
    else if (cp < 0x800) { b[0] = 0xC0 | (cp >> 6); b[1] = 0x80 | (cp & 0x3F); k = 2; }
    else if (cp < 0x10000) {
        b[0] = 0xE0 | (cp >> 12); b[1] = 0x80 | ((cp >> 6) & 0x3F); b[2] = 0x80 | (cp & 0x3F); k = 3;
    } else {
        b[0] = 0xF0 | (cp >> 18); b[1] = 0x80 | ((cp >> 12) & 0x3F);
        b[2] = 0x80 | ((cp >> 6) & 0x3F); b[3] = 0x80 | (cp & 0x3F); k = 4;
    }
    if (drop >= k) drop = k - 1;
    for (size_t i = 0; i + drop < k; i++) ids[n++] = byte_id(tok, b[i]);
    return n;
}

static void test_stream_targeted(const tokenizer *tok) {
    /* 😀 = F0 9F 98 80 as four byte pieces: nothing until the last one, then exactly the emoji. */
    int32_t grin[4] = {byte_id(tok, 0xF0), byte_id(tok, 0x9F), byte_id(tok, 0x98), byte_id(tok, 0x80)};
    int32_t hello = tokenizer_piece_to_id(tok, "\xE2\x96\x81" "H");   /* "▁H" */
    CHECK(hello > 0, "piece \xE2\x96\x81H exists");
    int32_t ctxs[3] = {-1, 1, hello};
    for (int c = 0; c < 3; c++) {
        text_stream *ts = text_stream_new(tok, ctxs[c]);
        CHECK(ts != NULL, "text_stream_new(ctx %d)", ctxs[c]);
        if (!ts) continue;
        const char *o;
        size_t ol;
        for (int i = 0; i < 3; i++)
            CHECK(text_stream_push(ts, grin[i], &o, &ol) == 0 && ol == 0, "emoji byte %d held back (ctx %d)", i,
                  ctxs[c]);
        CHECK(text_stream_push(ts, grin[3], &o, &ol) == 0 && ol == 4 && memcmp(o, "\xF0\x9F\x98\x80", 4) == 0,
              "emoji emitted whole (ctx %d)", ctxs[c]);
        CHECK(text_stream_flush(ts, &o, &ol) == 0 && ol == 0, "nothing left after emoji");
        text_stream_free(ts);
    }

    /* Incomplete bytes at the end come out at flush as SentencePiece's U+FFFD (one per byte). */
    text_stream *ts = text_stream_new(tok, hello);
    if (ts) {
        const char *o;
        size_t ol;
        CHECK(text_stream_push(ts, grin[0], &o, &ol) == 0 && ol == 0, "F0 held");
        CHECK(text_stream_push(ts, grin[1], &o, &ol) == 0 && ol == 0, "F0 9F held");
        CHECK(text_stream_flush(ts, &o, &ol) == 0 && ol == 6 && memcmp(o, "\xEF\xBF\xBD\xEF\xBF\xBD", 6) == 0,
              "flush of F0 9F gives two U+FFFD");
        text_stream_free(ts);
    }

    /* An invalid byte is final at once: a lone continuation byte, then 'A' as a byte piece. */
    ts = text_stream_new(tok, hello);
    if (ts) {
        const char *o;
        size_t ol;
        CHECK(text_stream_push(ts, byte_id(tok, 0x80), &o, &ol) == 0 && ol == 3 && memcmp(o, "\xEF\xBF\xBD", 3) == 0,
              "lone continuation byte is U+FFFD right away");
        CHECK(text_stream_push(ts, byte_id(tok, 0xE2), &o, &ol) == 0 && ol == 0, "E2 held");
        CHECK(text_stream_push(ts, byte_id(tok, 0x41), &o, &ol) == 0 && ol == 4 && memcmp(o, "\xEF\xBF\xBD" "A", 4) == 0,
              "E2 then 'A': U+FFFD A");
        text_stream_free(ts);
    }

    /* Nothing is held longer than needed: once a byte makes the character impossible (overlong, surrogate,
     * above U+10FFFF, never-valid lead), every byte so far is final — SentencePiece's U+FFFD for each. */
    static const struct { unsigned char b[3]; size_t n; } dead[] = {
        {{0xE0, 0x80}, 2}, {{0xED, 0xA0}, 2}, {{0xF0, 0x80}, 2}, {{0xF4, 0x90}, 2}, {{0xC0}, 1},
        {{0xC1}, 1},       {{0xF5}, 1},       {{0xFF}, 1},       {{0xE2, 0x41}, 2}, {{0xF0, 0x9F, 0x41}, 3},
    };
    for (size_t i = 0; i < sizeof dead / sizeof dead[0]; i++) {
        int32_t ids[3];
        for (size_t k = 0; k < dead[i].n; k++) ids[k] = byte_id(tok, dead[i].b[k]);
        size_t outs[4] = {0}, sl = 0, rl = 0;
        bool valid;
        char *s = stream_all(tok, hello, ids, dead[i].n, &sl, &valid, outs);
        char *r = reference(tok, hello, ids, dead[i].n, &rl);
        size_t before = 0;
        for (size_t k = 0; k + 1 < dead[i].n; k++) before += outs[k];
        CHECK(s && r && valid && sl == rl && memcmp(s, r, sl) == 0 && before + outs[dead[i].n - 1] == sl &&
                  outs[dead[i].n] == 0,
              "dead byte sequence %zu is emitted at its last byte, not held to flush", i);
        free(s);
        free(r);
    }

    /* Leading space of the first generated piece: dropped at the start of text, kept after text. */
    int32_t w = tokenizer_piece_to_id(tok, "\xE2\x96\x81w");   /* "▁w" */
    int32_t sp = tokenizer_piece_to_id(tok, "\xE2\x96\x81");   /* "▁" */
    CHECK(w > 0 && sp > 0, "pieces \xE2\x96\x81w and \xE2\x96\x81 exist");
    struct { int32_t ctx; const char *want; } lead[] = {
        {-1, "w"}, {1, "w"}, {hello, " w"}, {sp, " w"}, {grin[3], " w"},
    };
    for (size_t i = 0; i < sizeof lead / sizeof lead[0]; i++) {
        ts = text_stream_new(tok, lead[i].ctx);
        const char *o = NULL;
        size_t ol = 0;
        CHECK(ts && text_stream_push(ts, w, &o, &ol) == 0 && ol == strlen(lead[i].want) &&
                  memcmp(o, lead[i].want, ol) == 0,
              "after ctx %d, \xE2\x96\x81w -> \"%s\" (got \"%.*s\")", lead[i].ctx, lead[i].want, (int)ol, o ? o : "");
        text_stream_free(ts);
    }
    /* [▁, ▁w] from the start: the first '▁' is the stripped one, so the second keeps its space. */
    int32_t seq[3] = {1, sp, w};
    CHECK(stream_matches(tok, -1, seq, 3), "bos ▁ ▁w");

    /* Bad input. */
    CHECK(text_stream_new(tok, tokenizer_vocab_size(tok)) == NULL, "out-of-range context refused");
    CHECK(text_stream_new(NULL, -1) == NULL, "NULL tokenizer refused");
    ts = text_stream_new(tok, -1);
    if (ts) {
        const char *o;
        size_t ol;
        CHECK(text_stream_push(ts, grin[0], &o, &ol) == 0 && ol == 0, "F0 held");
        CHECK(text_stream_push(ts, -3, &o, &ol) == -1, "push of a bad id refused");
        CHECK(text_stream_push(ts, tokenizer_vocab_size(tok), &o, &ol) == -1, "push of id == vocab refused");
        /* ...and the stream is unchanged by the refusals. */
        for (int i = 1; i < 4; i++) text_stream_push(ts, grin[i], &o, &ol);
        CHECK(ol == 4 && memcmp(o, "\xF0\x9F\x98\x80", 4) == 0, "stream intact after refused pushes");
        text_stream_free(ts);
    }
    text_stream_free(NULL);
}

/* Property test over random sequences. */
static void test_stream_property(const tokenizer *tok) {
    int32_t V = tokenizer_vocab_size(tok);
    int32_t sp = tokenizer_piece_to_id(tok, "\xE2\x96\x81");
    int32_t sp2 = tokenizer_piece_to_id(tok, "\xE2\x96\x81\xE2\x96\x81");
    static const uint32_t cps[] = {0xE9, 0x20AC, 0x1F600, 0x6771, 0x10FFFF, 0x80, 0x7FF, 0x800, 0xFFFD,
                                   0xD7FF, 0xE000, 0x10000, 0x2764, 0xA0};
    enum { ROUNDS = 4000, MAXLEN = 40 };
    int fails = 0;
    for (int r = 0; r < ROUNDS; r++) {
        int32_t ids[MAXLEN + 8];
        size_t n = 0, len = 1 + rnd() % MAXLEN;
        while (n < len) {
            uint32_t kind = rnd() % 10;
            if (kind < 3) ids[n++] = (int32_t)(rnd() % V);                      /* anything */
            else if (kind < 5) n = push_char_bytes(tok, ids, n, cps[rnd() % 14], 0);   /* whole char */
            else if (kind < 6) n = push_char_bytes(tok, ids, n, cps[rnd() % 14], 1 + rnd() % 3); /* cut */
            else if (kind < 7) ids[n++] = byte_id(tok, rnd() % 256);           /* any byte, often invalid */
            else if (kind < 8) ids[n++] = (int32_t)(rnd() % 3);                /* unk, bos, eos */
            else if (kind < 9) ids[n++] = rnd() % 2 ? sp : (sp2 > 0 ? sp2 : sp);  /* spaces */
            else ids[n++] = 259 + (int32_t)(rnd() % (V - 259));                /* merged pieces */
        }
        /* Contexts: none, BOS, or any non-byte piece (a byte context is documented as a whole char). */
        int32_t ctx;
        switch (rnd() % 4) {
        case 0: ctx = -1; break;
        case 1: ctx = 1; break;
        case 2: ctx = sp; break;
        default:
            do ctx = (int32_t)(rnd() % V); while (tokenizer_is_byte(tok, ctx));
        }
        if (!stream_matches(tok, ctx, ids, n) && ++fails > 5) break;
    }
    CHECK(fails == 0, "stream property: %d of %d random sequences differ", fails, ROUNDS);
}

/* One long generation: still exact, and fast (no re-decoding of the history). */
static void test_stream_long(const tokenizer *tok) {
    enum { N = 50000 };
    int32_t *ids = malloc((N + 8) * sizeof *ids);
    if (!ids) { CHECK(0, "oom"); return; }
    size_t n = 0;
    while (n < N) {
        if (rnd() % 4 == 0) n = push_char_bytes(tok, ids, n, 0x1F600 + rnd() % 64, 0);
        else ids[n++] = 3 + (int32_t)(rnd() % (tokenizer_vocab_size(tok) - 3));
    }
    clock_t t0 = clock();
    bool valid;
    size_t sl;
    char *s = stream_all(tok, 1, ids, n, &sl, &valid, NULL);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    size_t rl;
    char *r = reference(tok, 1, ids, n, &rl);
    CHECK(s && r && valid && sl == rl && memcmp(s, r, sl) == 0, "long stream equals one-shot decode");
    CHECK(secs < 10.0, "50k-token stream took %.2fs", secs);
    printf("stream: %zu tokens in %.3fs (%.2f us/token)\n", n, secs, secs * 1e6 / (double)n);
    free(s);
    free(r);
    free(ids);
}

int main(void) {
    snprintf(model_path, sizeof model_path, "%s/tokenizer.model", test_fixtures());
    test_load_errors();

    tokenizer *tok = NULL;
    char err[512] = "";
    int rc = tokenizer_load(model_path, &tok, err, sizeof err);
    CHECK(rc == 0 && tok, "load %s: %s", model_path, err);
    if (!tok) return test_summary();

    test_specials(tok);
    test_pieces(tok);
    test_cases(tok);
    test_stream_targeted(tok);
    test_stream_property(tok);
    test_stream_long(tok);
    test_encode_pieces("tokenizer.model", true);
    test_encode_pieces("models/gqa/tokenizer.model", true);
    test_encode_pieces("longllama/basic/tokenizer.model", true);
    test_encode_pieces("gguf/rope_q4_0/tokenizer.model", true);

    tokenizer_free(tok);
    return test_summary();
}
