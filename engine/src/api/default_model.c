/*
 * default_model.c — mnemo_default_model_dir: where the CLI and the server find a model when none is named.
 * Looked up at run time, relative to the running executable, so that no binary depends on the source tree it was
 * built from: `cmake --install` puts it under <prefix>/share/mnemo/models, and the build copies it to
 * <build>/share/mnemo/models for build/mnemo (and for binaries under <build>/tests, through the first candidate).
 * The default is one GGUF file (SmolLM2-135M-Instruct, fetched by scripts/fetch-default-model.sh); a checkpoint
 * directory (config.json) works the same way for a build that names one.
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
#define DEFAULT_MODEL_NAME "SmolLM2-135M-Instruct.Q4_1.gguf"
#endif
#ifndef MNEMO_DEFAULT_MODEL_BYTES /* the fetched file's size: a shorter or longer one is a broken download */
#define MNEMO_DEFAULT_MODEL_BYTES 98362432
#endif
#define FETCH_HINT "scripts/fetch-default-model.sh (which scripts/install-deps.sh runs) fetches it"
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

/* A model at path: a checkpoint directory, or a regular file (a GGUF). */
static bool is_model(const char *path, struct stat *st) {
    return stat(path, st) == 0 && (S_ISREG(st->st_mode) || (S_ISDIR(st->st_mode) && has_config(path)));
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
        if (exists && (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) return put(out, cap, MNEMO_OK, env);
        snprintf(msg, sizeof msg, "MNEMO_MODEL=%s: %s (it must name a checkpoint directory or a GGUF file)", env,
                 exists ? "not a directory or file" : strerror(errno));
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
        struct stat st;
        if (!is_model(looked[i], &st)) continue;
        char real[PATH_MAX];
        const char *found = realpath(looked[i], real) ? real : looked[i];
        if (S_ISREG(st.st_mode) && MNEMO_DEFAULT_MODEL_BYTES > 0 && st.st_size != MNEMO_DEFAULT_MODEL_BYTES) {
            snprintf(msg, sizeof msg, "the default model %s is damaged (%lld bytes, not %lld): " FETCH_HINT " again",
                     found, (long long)st.st_size, (long long)MNEMO_DEFAULT_MODEL_BYTES);
            return put(out, cap, MNEMO_ERR_IO, msg);
        }
        return put(out, cap, MNEMO_OK, found);
    }
    int len = snprintf(msg, sizeof msg, "no model given (--model or MNEMO_MODEL), and the default model %s is in "
                       "none of the places looked at:", DEFAULT_MODEL_NAME);
    for (size_t i = 0; i < N_CANDIDATES && len > 0 && (size_t)len < sizeof msg; i++)
        len += snprintf(msg + len, sizeof msg - (size_t)len, "%s %s", i ? "," : "", looked[i]);
    if (len > 0 && (size_t)len < sizeof msg) snprintf(msg + len, sizeof msg - (size_t)len, "; " FETCH_HINT);
    return put(out, cap, MNEMO_ERR_IO, msg);
}
