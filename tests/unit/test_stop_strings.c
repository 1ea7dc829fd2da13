/*
 * test_stop_strings.c — unit tests for the streaming stop-string matcher (engine/src/sampling/stop_strings.c).
 * Hand-written cases (split across pushes, self-overlap, several strings, flush, empty strings, match at the
 * start, growth past the initial buffer) plus a randomized differential test against a naive reference that
 * re-scans the whole text after every push.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stop_strings.h"

#include "test_util.h"

/* Feed pushes[0..n) (NULL-terminated list) and collect everything emitted. Returns the index of the push
 * that reported the stop, or -1 (then the flush output is appended). */
typedef struct {
    char out[4096];
    size_t out_len;
    int stop_at;
    size_t emits[32]; /* emit length per push */
} run_result;

static run_result run(const char *const *stops, int n_stops, const char *const *pushes) {
    run_result r;
    memset(&r, 0, sizeof r);
    r.stop_at = -1;
    stop_matcher *m = stop_matcher_new(stops, n_stops);
    if (!m) {
        fprintf(stderr, "stop_matcher_new failed\n");
        r.stop_at = -2;
        return r;
    }
    for (int i = 0; pushes[i]; i++) {
        const char *e = NULL;
        size_t el = 12345;
        bool stop = stop_matcher_push(m, pushes[i], strlen(pushes[i]), &e, &el);
        if (i < 32) r.emits[i] = el;
        if (e && el && r.out_len + el < sizeof r.out) {
            memcpy(r.out + r.out_len, e, el);
            r.out_len += el;
        }
        if (stop && r.stop_at < 0) r.stop_at = i;
    }
    if (r.stop_at < 0) {
        const char *e = NULL;
        size_t el = 0;
        stop_matcher_flush(m, &e, &el);
        if (e && el) {
            memcpy(r.out + r.out_len, e, el);
            r.out_len += el;
        }
    }
    r.out[r.out_len] = 0;
    stop_matcher_free(m);
    return r;
}

static void test_no_stops(void) {
    const char *pushes[] = {"Hello", ", ", "world", NULL};
    run_result r = run(NULL, 0, pushes);
    CHECK(r.stop_at == -1 && strcmp(r.out, "Hello, world") == 0, "got '%s' stop %d", r.out, r.stop_at);
    CHECK(r.emits[0] == 5 && r.emits[1] == 2 && r.emits[2] == 5, "no stops must emit immediately");
}

static void test_split_across_pushes(void) {
    const char *stops[] = {"END"};
    const char *pushes[] = {"Hello E", "N", "D more", "after", NULL};
    run_result r = run(stops, 1, pushes);
    CHECK(r.stop_at == 2, "stop_at %d", r.stop_at);
    CHECK(strcmp(r.out, "Hello ") == 0, "got '%s'", r.out);
    CHECK(r.emits[0] == 6 && r.emits[1] == 0 && r.emits[2] == 0 && r.emits[3] == 0, "emits %zu %zu %zu %zu",
          r.emits[0], r.emits[1], r.emits[2], r.emits[3]);
}

static void test_hold_then_release(void) {
    const char *stops[] = {"END"};
    const char *pushes[] = {"abc E", "N", "x", NULL};
    run_result r = run(stops, 1, pushes);
    CHECK(r.stop_at == -1 && strcmp(r.out, "abc ENx") == 0, "got '%s'", r.out);
    CHECK(r.emits[0] == 4 && r.emits[1] == 0 && r.emits[2] == 3, "emits %zu %zu %zu", r.emits[0], r.emits[1],
          r.emits[2]);
}

static void test_self_overlap(void) {
    const char *stops[] = {"aab"};
    const char *pushes[] = {"a", "a", "a", "b", NULL};
    run_result r = run(stops, 1, pushes);
    CHECK(r.stop_at == 3, "stop_at %d", r.stop_at);
    CHECK(strcmp(r.out, "a") == 0, "got '%s'", r.out);
    CHECK(r.emits[0] == 0 && r.emits[1] == 0 && r.emits[2] == 1 && r.emits[3] == 0, "emits %zu %zu %zu %zu",
          r.emits[0], r.emits[1], r.emits[2], r.emits[3]);

    const char *pushes2[] = {"aaab", NULL};
    r = run(stops, 1, pushes2);
    CHECK(r.stop_at == 0 && strcmp(r.out, "a") == 0, "one push: got '%s'", r.out);

    const char *stops3[] = {"abab"};
    const char *pushes3[] = {"ab", "a", "bab", NULL}; /* "ababab": match at 0 */
    r = run(stops3, 1, pushes3);
    CHECK(r.stop_at == 2 && strcmp(r.out, "") == 0, "abab: got '%s' stop %d", r.out, r.stop_at);

    const char *pushes4[] = {"xaba", "cabab", NULL}; /* "xabacabab": match at 5 */
    r = run(stops3, 1, pushes4);
    CHECK(r.stop_at == 1 && strcmp(r.out, "xabac") == 0, "abab 2: got '%s'", r.out);
}

static void test_multiple(void) {
    const char *stops[] = {"world", "lo w"};
    const char *pushes[] = {"hello world", NULL};
    run_result r = run(stops, 2, pushes);
    CHECK(r.stop_at == 0 && strcmp(r.out, "hel") == 0, "earliest wins: got '%s'", r.out);

    /* one character at a time */
    const char *chars[] = {"h", "e", "l", "l", "o", " ", "w", "o", "r", "l", "d", NULL};
    r = run(stops, 2, chars);
    CHECK(r.stop_at == 6 && strcmp(r.out, "hel") == 0, "char by char: got '%s' stop %d", r.out, r.stop_at);

    /* both complete in the same push: the earlier start wins even though it ends later */
    const char *stops2[] = {"bc", "abcd"};
    const char *pushes2[] = {"xabcd", NULL};
    r = run(stops2, 2, pushes2);
    CHECK(r.stop_at == 0 && strcmp(r.out, "x") == 0, "got '%s'", r.out);

    /* held tail is a prefix of one string; a different string completes */
    const char *stops3[] = {"xyz", "yq"};
    const char *pushes3[] = {"axy", "q", NULL};
    r = run(stops3, 2, pushes3);
    CHECK(r.emits[0] == 1, "should hold 'xy', emitted %zu", r.emits[0]);
    CHECK(r.stop_at == 1 && strcmp(r.out, "ax") == 0, "got '%s'", r.out);

    /* order of the list does not matter */
    const char *stops4[] = {"lo w", "world"};
    r = run(stops4, 2, pushes);
    CHECK(r.stop_at == 0 && strcmp(r.out, "hel") == 0, "reversed list: got '%s'", r.out);
}

static void test_no_match_flush(void) {
    const char *stops[] = {"XYZ"};
    const char *pushes[] = {"abcX", "Y", NULL};
    run_result r = run(stops, 1, pushes);
    CHECK(r.stop_at == -1 && strcmp(r.out, "abcXY") == 0, "got '%s'", r.out);
    CHECK(r.emits[0] == 3 && r.emits[1] == 0, "emits %zu %zu", r.emits[0], r.emits[1]);

    /* a prefix that diverges is released at once */
    const char *pushes2[] = {"XY", "Q", NULL};
    r = run(stops, 1, pushes2);
    CHECK(r.emits[0] == 0 && r.emits[1] == 3 && strcmp(r.out, "XYQ") == 0, "got '%s'", r.out);

    /* flush twice: second flush emits nothing */
    stop_matcher *m = stop_matcher_new(stops, 1);
    const char *e;
    size_t el;
    stop_matcher_push(m, "aXY", 3, &e, &el);
    CHECK(el == 1 && memcmp(e, "a", 1) == 0, "push emitted %zu", el);
    stop_matcher_flush(m, &e, &el);
    CHECK(el == 2 && memcmp(e, "XY", 2) == 0, "flush emitted %zu", el);
    stop_matcher_flush(m, &e, &el);
    CHECK(el == 0, "second flush emitted %zu", el);
    stop_matcher_free(m);
}

static void test_empty_strings(void) {
    const char *stops[] = {"", "Z"};
    const char *pushes[] = {"abc", "", "de", NULL};
    run_result r = run(stops, 2, pushes);
    CHECK(r.stop_at == -1 && strcmp(r.out, "abcde") == 0, "got '%s'", r.out);
    CHECK(r.emits[0] == 3, "empty stop string must not hold text (%zu)", r.emits[0]);

    const char *only_empty[] = {""};
    r = run(only_empty, 1, pushes);
    CHECK(r.stop_at == -1 && strcmp(r.out, "abcde") == 0, "only empty: got '%s'", r.out);

    const char *with_null[] = {NULL, "de"};
    r = run(with_null, 2, pushes);
    CHECK(r.stop_at == 2 && strcmp(r.out, "abc") == 0, "NULL entry: got '%s'", r.out);
}

static void test_match_at_start(void) {
    const char *stops[] = {"<|end|>"};
    const char *pushes[] = {"<|end|>rest", "more", NULL};
    run_result r = run(stops, 1, pushes);
    CHECK(r.stop_at == 0 && r.out_len == 0, "got '%s'", r.out);
    CHECK(r.emits[0] == 0 && r.emits[1] == 0, "after a match nothing is emitted");

    /* later pushes keep reporting the stop and emit nothing; flush after a match emits nothing */
    stop_matcher *m = stop_matcher_new(stops, 1);
    const char *e;
    size_t el;
    bool s1 = stop_matcher_push(m, "<|e", 3, &e, &el);
    bool s2 = stop_matcher_push(m, "nd|>", 4, &e, &el);
    CHECK(!s1 && s2 && el == 0, "s1 %d s2 %d el %zu", s1, s2, el);
    bool s3 = stop_matcher_push(m, "xyz", 3, &e, &el);
    CHECK(s3 && el == 0, "s3 %d el %zu", s3, el);
    stop_matcher_flush(m, &e, &el);
    CHECK(el == 0, "flush after match emitted %zu", el);
    stop_matcher_free(m);

    /* a match in the middle of a push: the text before it once, then nothing */
    m = stop_matcher_new(stops, 1);
    s1 = stop_matcher_push(m, "ab<|end|>cd", 11, &e, &el);
    CHECK(s1 && el == 2 && memcmp(e, "ab", 2) == 0, "s1 %d el %zu", s1, el);
    s2 = stop_matcher_push(m, "x", 1, &e, &el);
    CHECK(s2 && el == 0, "after a mid-push match: s2 %d el %zu", s2, el);
    stop_matcher_free(m);
}

static void test_growth(void) {
    /* a push much larger than the initial buffer, with the match near its end */
    const char *stops[] = {"STOP"};
    size_t n = 100000;
    char *big = malloc(n + 5);
    if (!big) {
        CHECK(0, "malloc");
        return;
    }
    for (size_t i = 0; i < n; i++) big[i] = (char)('a' + i % 26);
    memcpy(big + n, "STOP", 5);
    stop_matcher *m = stop_matcher_new(stops, 1);
    const char *e;
    size_t el;
    bool s = stop_matcher_push(m, big, n - 1, &e, &el);
    CHECK(!s && el == n - 1 && memcmp(e, big, el) == 0, "big push emitted %zu", el);
    s = stop_matcher_push(m, big + n - 1, 3, &e, &el); /* last letter + "ST" */
    CHECK(!s && el == 1, "emitted %zu", el);
    s = stop_matcher_push(m, "OP", 2, &e, &el);
    CHECK(s && el == 0, "s %d el %zu", s, el);
    stop_matcher_free(m);
    free(big);
}

/* ---- randomized differential test */

static uint64_t lcg_state = 0x1234567ULL;
static uint32_t rnd(uint32_t n) {
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(lcg_state >> 33) % n;
}

/* Earliest start of any stop in text[0..len), or SIZE_MAX. */
static size_t ref_find(const char *text, size_t len, char stops[][8], int n) {
    size_t best = SIZE_MAX;
    for (int j = 0; j < n; j++) {
        size_t sl = strlen(stops[j]);
        if (!sl) continue;
        for (size_t i = 0; i + sl <= len; i++)
            if (memcmp(text + i, stops[j], sl) == 0) {
                if (i < best) best = i;
                break;
            }
    }
    return best;
}

static size_t ref_hold(const char *text, size_t len, char stops[][8], int n) {
    size_t hold = 0;
    for (int j = 0; j < n; j++) {
        size_t sl = strlen(stops[j]);
        for (size_t l = 1; l < sl && l <= len; l++)
            if (memcmp(text + len - l, stops[j], l) == 0 && l > hold) hold = l;
    }
    return hold;
}

static void test_random(void) {
    int bad = 0;
    for (int iter = 0; iter < 20000 && bad < 5; iter++) {
        char stops[4][8];
        const char *sp[4];
        int ns = 1 + (int)rnd(3);
        for (int j = 0; j < ns; j++) {
            int l = (int)rnd(5); /* 0..4, 0 = empty (ignored) */
            for (int k = 0; k < l; k++) stops[j][k] = (char)('a' + rnd(3));
            stops[j][l] = 0;
            sp[j] = stops[j];
        }
        char text[64];
        size_t tlen = 1 + rnd(40);
        for (size_t k = 0; k < tlen; k++) text[k] = (char)('a' + rnd(3));

        stop_matcher *m = stop_matcher_new(sp, ns);
        if (!m) {
            CHECK(0, "new failed");
            return;
        }
        char out[64];
        size_t out_len = 0, fed = 0;
        bool stopped = false, ok = true;
        while (fed < tlen && !stopped) {
            size_t chunk = 1 + rnd(5);
            if (chunk > tlen - fed) chunk = tlen - fed;
            const char *e;
            size_t el;
            stopped = stop_matcher_push(m, text + fed, chunk, &e, &el);
            memcpy(out + out_len, e, el);
            out_len += el;
            fed += chunk;
            size_t pos = ref_find(text, fed, stops, ns);
            if (stopped != (pos != SIZE_MAX)) ok = false;
            if (stopped && out_len != pos) ok = false;
            /* without a match, exactly the longest stop-prefix suffix is held back */
            if (!stopped && out_len != fed - ref_hold(text, fed, stops, ns)) ok = false;
        }
        if (!stopped) {
            const char *e;
            size_t el;
            stop_matcher_flush(m, &e, &el);
            memcpy(out + out_len, e, el);
            out_len += el;
            if (out_len != tlen) ok = false;
        }
        if (memcmp(out, text, out_len) != 0) ok = false;
        stop_matcher_free(m);
        if (!ok) {
            bad++;
            fprintf(stderr, "random case %d: text '%.*s' stops", iter, (int)tlen, text);
            for (int j = 0; j < ns; j++) fprintf(stderr, " '%s'", stops[j]);
            fprintf(stderr, "\n");
        }
    }
    CHECK(bad == 0, "%d random cases disagree with the reference", bad);
}

int main(void) {
    test_no_stops();
    test_split_across_pushes();
    test_hold_then_release();
    test_self_overlap();
    test_multiple();
    test_no_match_flush();
    test_empty_strings();
    test_match_at_start();
    test_growth();
    test_random();
    return test_summary();
}
