/*
 * log.c — process-wide log sink and status names. The default sink writes to stderr with a "mnemo:" prefix,
 * filtered by level (warnings and errors unless raised with mnemo_log_set_level).
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static mnemo_log_fn log_fn;
static void *log_user;
static mnemo_log_level log_max = MNEMO_LOG_WARN;

void mnemo_log_set(mnemo_log_fn fn, void *user) {
    log_fn = fn;
    log_user = user;
}

void mnemo_log_set_level(mnemo_log_level max_level) { log_max = max_level; }

void mnemo_log(mnemo_log_level level, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (log_fn) {
        log_fn(level, msg, log_user);
    } else if (level <= log_max) {
        static const char *names[] = {"error", "warning", "info", "debug"};
        fprintf(stderr, "mnemo: %s: %s\n", names[level], msg);
    }
}

const char *mnemo_status_str(mnemo_status s) {
    switch (s) {
    case MNEMO_OK: return "ok";
    case MNEMO_ERR_INVALID_ARG: return "invalid argument";
    case MNEMO_ERR_IO: return "i/o error";
    case MNEMO_ERR_FORMAT: return "malformed file";
    case MNEMO_ERR_UNSUPPORTED: return "unsupported";
    case MNEMO_ERR_NOMEM: return "out of memory";
    case MNEMO_ERR_CONTEXT_FULL: return "context full";
    case MNEMO_ERR_CANCELLED: return "cancelled";
    case MNEMO_ERR_MISUSE: return "API misuse";
    case MNEMO_ERR_TOO_SMALL: return "buffer too small";
    case MNEMO_ERR_BACKEND: return "backend failure";
    }
    return "unknown status";
}
