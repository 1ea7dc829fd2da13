/*
 * bpe_pretok.c — the pre-tokenizer: regexes that cut a text into words before BPE merges run inside each word.
 * The regexes of each GGUF tokenizer.ggml.pre are llama.cpp's (src/llama-vocab.cpp, the "adapted" forms where
 * llama.cpp rewrote Hugging Face's (?i:...) group); they run on PCRE2 with UTF and UCP, so \p{L}, \p{N} and \s
 * are Unicode's. Each regex splits every piece the one before it left: matches and the text between them both
 * become pieces (Hugging Face's Split behaviour "Isolated").
 */
#include <stdio.h>
#include <string.h>

#include "bpe_model.h"

#define GPT2_REGEX "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define LLAMA3_REGEX "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct {
    const char *names[6];        /* tokenizer.ggml.pre values */
    const char *regexes[BPE_MAX_REGEXES];
    bool add_bos, ignore_merges; /* llama.cpp's defaults for the type */
} pre_type;

static const pre_type PRE_TYPES[] = {
    {{"default"}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {{"gpt-2", "phi-2", "mpt", "olmo", "jais"}, {GPT2_REGEX}, false, false},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3"}, {LLAMA3_REGEX}, true, true},
    {{"starcoder", "smollm", "refact", "command-r"}, {"\\p{N}", GPT2_REGEX}, false, false},
    {{"qwen2", "stablelm2", "deepseek-r1-qwen"}, {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, false, false},
    {{"deepseek-llm"}, {
        "[\r\n]",
        "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
        "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
        "\\s+$",
        "[一-龥ࠀ-一가-퟿]+",
        "\\p{N}+",
    }, false, false},
};

int bpe_vocab_add_regex(bpe_vocab *v, const char *pattern, bool literal, char *err, size_t errlen) {
    if (v->n_re == BPE_MAX_REGEXES) {
        snprintf(err, errlen, "more than %d pre-tokenizer regexes", BPE_MAX_REGEXES);
        return -1;
    }
    int code;
    PCRE2_SIZE at;
    /* MATCH_INVALID_UTF: a text that is not UTF-8 is still split (its invalid bytes are never matched).
     * DOLLAR_ENDONLY: $ is the end of the text, as in Rust's regex (Hugging Face) and std::regex (llama.cpp). */
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        snprintf(err, errlen, "pre-tokenizer regex \"%.80s\": %s at offset %zu", pattern, (const char *)msg,
                 (size_t)at);
        return -1;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT (unsupported CPU) matching is slower, not wrong */
    v->re[v->n_re++] = re;
    return 0;
}

int bpe_vocab_use_pre(bpe_vocab *v, const char *pre, char *err, size_t errlen) {
    for (size_t t = 0; t < sizeof PRE_TYPES / sizeof PRE_TYPES[0]; t++)
        for (int k = 0; k < 6 && PRE_TYPES[t].names[k]; k++) {
            if (strcmp(pre, PRE_TYPES[t].names[k])) continue;
            for (int r = 0; r < BPE_MAX_REGEXES && PRE_TYPES[t].regexes[r]; r++)
                if (bpe_vocab_add_regex(v, PRE_TYPES[t].regexes[r], false, err, errlen)) return -1;
            if (!v->add_bos_set) v->add_bos = PRE_TYPES[t].add_bos;
            if (!v->ignore_merges_set) v->ignore_merges = PRE_TYPES[t].ignore_merges;
            return 0;
        }
    snprintf(err, errlen, "pre-tokenizer \"%.64s\" is not supported (known: default, gpt-2, llama-bpe, llama3, "
             "smollm, starcoder, qwen2, deepseek-llm and their aliases)", pre);
    return -1;
}

typedef struct {
    const bpe_vocab *v;
    pcre2_match_data *md[BPE_MAX_REGEXES];
    bpe_word_fn word;
    void *ctx;
} splitter;

/* One match of regex k in p[0..n) at or after start: 1 with [*ms, *me), 0 when none. A matcher error (JIT stack,
 * heap or match limit on a pathological text) ends the matching: the rest stays one piece. */
static int next_match(splitter *s, int k, const char *p, size_t n, size_t start, size_t *ms, size_t *me) {
    int rc = pcre2_match(s->v->re[k], (PCRE2_SPTR)p, n, start, 0, s->md[k], NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(s->v->re[k], (PCRE2_SPTR)p, n, start, PCRE2_NO_JIT, s->md[k], NULL);
    if (rc < 0) return 0;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md[k]);
    *ms = ov[0];
    *me = ov[1];
    return *ms <= *me && *me <= n;
}

static int split(splitter *s, int k, const char *p, size_t n) {
    if (n == 0) return 0;
    if (k == s->v->n_re) return s->word(s->ctx, p, n);
    size_t start = 0, last = 0, ms, me;
    while (start < n && next_match(s, k, p, n, start, &ms, &me)) {
        if (me == ms) { /* an empty match cuts nothing: step over one character */
            start = ms + 1;
            while (start < n && ((unsigned char)p[start] & 0xC0) == 0x80) start++;
            continue;
        }
        if (ms > last && split(s, k + 1, p + last, ms - last)) return -1;
        if (split(s, k + 1, p + ms, me - ms)) return -1;
        last = start = me;
    }
    return split(s, k + 1, p + last, n - last);
}

int bpe_pretokenize(const bpe_vocab *v, const char *text, size_t len, bpe_word_fn word, void *ctx) {
    splitter s = {.v = v, .word = word, .ctx = ctx};
    int rc = 0;
    for (int k = 0; k < v->n_re; k++)
        if (!(s.md[k] = pcre2_match_data_create_from_pattern(v->re[k], NULL))) rc = -1;
    if (rc == 0) rc = split(&s, 0, text, len);
    for (int k = 0; k < v->n_re; k++) pcre2_match_data_free(s.md[k]);
    return rc;
}
