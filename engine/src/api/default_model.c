/*
 * default_model.c — mnemo_default_model_dir: where the CLI and the server find a model when none is named.
 * Looked up at run time, relative to the running executable, so that no binary depends on the source tree it was
 * built from: `cmake --install` puts the demo under <prefix>/share/mnemo/models, and the build copies it to
 * <build>/share/mnemo/models for build/mnemo (and for binaries under <build>/tests, through the first candidate).
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"

#ifdef MNEMO_DEFAULT_MODEL_NAME /* CMake names it (models/<name> in the source tree) */
#define DEFAULT_MODEL_NAME MNEMO_DEFAULT_MODEL_NAME
#else
#define DEFAULT_MODEL_NAME "longllama-shakespeare"
#endif
#ifndef MNEMO_BIN_TO_DATA /* the installed data directory relative to the installed bin directory (CMake sets it) */
#define MNEMO_BIN_TO_DATA "../share"
#endif

static const char *const CANDIDATES[] = {
    MNEMO_BIN_TO_DATA "/mnemo/models/" DEFAULT_MODEL_NAME, /* installed; also <build>/tests/<exe> */
    "share/mnemo/models/" DEFAULT_MODEL_NAME,              /* the build tree: <build>/<exe> */
};
#define N_CANDIDATES (sizeof CANDIDATES / sizeof CANDIDATES[0])

static bool has_config(const char *dir) {
    char path[PATH_MAX + 16];
    struct stat st;
    return snprintf(path, sizeof path, "%s/config.json", dir) < (int)sizeof path && stat(path, &st) == 0 &&
           S_ISREG(st.st_mode);
}

/* Copies s into out; MNEMO_ERR_TOO_SMALL (truncated) when it does not fit. */
static mnemo_status put(char *out, size_t cap, mnemo_status st, const char *s) {
    int n = snprintf(out, cap, "%s", s);
    return n >= 0 && (size_t)n < cap ? st : MNEMO_ERR_TOO_SMALL;
}

mnemo_status mnemo_default_model_dir(char *out, size_t cap) {
    if (!out || cap == 0) return MNEMO_ERR_INVALID_ARG;
    char msg[4 * PATH_MAX];
    const char *env = getenv("MNEMO_MODEL");
    if (env && *env) {
        struct stat st;
        bool exists = stat(env, &st) == 0;
        if (exists && S_ISDIR(st.st_mode)) return put(out, cap, MNEMO_OK, env);
        snprintf(msg, sizeof msg, "MNEMO_MODEL=%s: %s (it must name a checkpoint directory)", env,
                 exists ? "not a directory" : strerror(errno));
        return put(out, cap, MNEMO_ERR_IO, msg);
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(msg, sizeof msg, "no model given (--model or MNEMO_MODEL), and the default model, looked up beside "
                 "the executable, cannot be found: /proc/self/exe: %s", strerror(errno));
        return put(out, cap, MNEMO_ERR_IO, msg);
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0'; /* exe is now the executable's directory */
    char looked[N_CANDIDATES][PATH_MAX];
    for (size_t i = 0; i < N_CANDIDATES; i++) {
        snprintf(looked[i], sizeof looked[i], "%s/%s", exe, CANDIDATES[i]);
        if (!has_config(looked[i])) continue;
        char real[PATH_MAX];
        return put(out, cap, MNEMO_OK, realpath(looked[i], real) ? real : looked[i]);
    }
    int len = snprintf(msg, sizeof msg, "no model given (--model or MNEMO_MODEL), and the default model %s is in "
                       "none of the places looked at:", DEFAULT_MODEL_NAME);
    for (size_t i = 0; i < N_CANDIDATES && len > 0 && (size_t)len < sizeof msg; i++)
        len += snprintf(msg + len, sizeof msg - (size_t)len, "%s %s", i ? "," : "", looked[i]);
    return put(out, cap, MNEMO_ERR_IO, msg);
}
