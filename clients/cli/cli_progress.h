/* cli_progress.h — a one-line progress bar on stderr while a long prompt goes through the model (the callback
 * of mnemo_context_set_progress). Shown when stderr is a terminal or --progress asks for it; stdout (text,
 * --json) is never touched. */
#ifndef MNEMO_CLI_PROGRESS_H
#define MNEMO_CLI_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *label; /* printed before the bar, e.g. "prompt" */
    double t0;         /* time of the first report */
    int64_t done0;     /* tokens done at the first report */
    bool active;       /* a bar line is open on stderr */
} cli_progress;

/* Whether to draw: forced by a flag, else only when stderr is a terminal. */
bool cli_progress_wanted(bool forced);
/* mnemo_progress_fn: user is a cli_progress. Always returns true (never cancels). */
bool cli_progress_report(int64_t done, int64_t total, void *user);

#endif
