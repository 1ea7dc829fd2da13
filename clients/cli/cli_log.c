/* cli_log.c — see cli_log.h. */
#include "cli_log.h"

#include <stdio.h>

#include "engine.h"

static mnemo_log_level shown_max = MNEMO_LOG_WARN;

static void to_stderr(mnemo_log_level level, const char *msg, void *user) {
    (void)user;
    static const char *names[] = {"error", "warning", "info", "debug"};
    if (level == MNEMO_LOG_ERROR || level > shown_max) return;
    fprintf(stderr, "mnemo: %s: %s\n", names[level], msg);
}

void cli_log_init(bool verbose) {
    shown_max = verbose ? MNEMO_LOG_INFO : MNEMO_LOG_WARN;
    mnemo_log_set(to_stderr, NULL);
}
