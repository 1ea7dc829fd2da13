/*
 * test_util.h — the tiny harness every C test uses: CHECK records a failure without stopping, and
 * test_summary prints "N passed, M failed" and yields the exit status (non-zero on any failure).
 */
#ifndef MNEMO_TEST_UTIL_H
#define MNEMO_TEST_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int test_passed, test_failed;

#define CHECK(cond, ...)                                                                                        \
    do {                                                                                                        \
        if (cond) {                                                                                             \
            test_passed++;                                                                                      \
        } else {                                                                                                \
            test_failed++;                                                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                \
            fprintf(stderr, __VA_ARGS__);                                                                       \
            fputc('\n', stderr);                                                                                \
        }                                                                                                       \
    } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

static inline const char *test_fixtures(void) {
    const char *d = getenv("MNEMO_FIXTURES");
    return d ? d : "tests/fixtures";
}

/* A whole file in memory (one spare byte past the end), its size in *len; NULL when it cannot be read. */
static inline uint8_t *test_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) free(b), b = NULL;
    fclose(f);
    *len = n >= 0 ? (size_t)n : 0;
    return b;
}

#endif
