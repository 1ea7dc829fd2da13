/* cli_args.c — value parsers for the mnemo CLI (see cli_args.h). */
#include "cli_args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"

const char *cli_default_model(const char *cmd) {
    static char dir[4096];
    if (mnemo_default_model_dir(dir, sizeof dir) == MNEMO_OK) return dir;
    fprintf(stderr, "mnemo %s: %s\n", cmd, dir);
    return NULL;
}

const char *cli_default_model_help(void) {
    static char help[4096 + 64];
    char dir[4096];
    bool found = mnemo_default_model_dir(dir, sizeof dir) == MNEMO_OK;
    snprintf(help, sizeof help, "%s: %s", found ? "default model (no --model) now" : "no default model", dir);
    return help;
}

bool cli_int(const char *cmd, const char *flag, const char *s, long min, long max, int32_t *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !*s || *end || v < min || v > max) {
        fprintf(stderr, "mnemo %s: %s expects an integer in [%ld, %ld], got '%s'\n", cmd, flag, min, max, s);
        return false;
    }
    *out = (int32_t)v;
    return true;
}

bool cli_float(const char *cmd, const char *flag, const char *s, double min, double max, float *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || !*s || *end || !isfinite(v) || v < min || v > max) {
        fprintf(stderr, "mnemo %s: %s expects a number in [%g, %g], got '%s'\n", cmd, flag, min, max, s);
        return false;
    }
    *out = (float)v;
    return true;
}

bool cli_u64(const char *cmd, const char *flag, const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || !*s || *end || *s == '-') {
        fprintf(stderr, "mnemo %s: %s expects a non-negative integer, got '%s'\n", cmd, flag, s);
        return false;
    }
    *out = (uint64_t)v;
    return true;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "mnemo %s: %s needs a value\n", cmd, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}
