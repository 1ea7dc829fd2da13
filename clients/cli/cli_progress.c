/* cli_progress.c — see cli_progress.h. */
#include "cli_progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define BAR_WIDTH 30

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool cli_progress_wanted(bool forced) { return forced || isatty(STDERR_FILENO); }

bool cli_progress_report(int64_t done, int64_t total, void *user) {
    cli_progress *p = user;
    if (!p->active) { /* the rate counts from the first report: the call's start is not known here */
        p->t0 = now_s();
        p->done0 = done;
        p->active = true;
    }
    if (total <= 0) return true;
    double frac = (double)done / (double)total, dt = now_s() - p->t0;
    int fill = (int)(frac * BAR_WIDTH + 0.5);
    char bar[BAR_WIDTH + 1];
    for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[BAR_WIDTH] = '\0';
    fprintf(stderr, "\r%s [%s] %3.0f%%  %lld/%lld tokens  %.0f tok/s", p->label ? p->label : "prompt", bar,
            100.0 * frac, (long long)done, (long long)total, dt > 0 ? (double)(done - p->done0) / dt : 0.0);
    if (done >= total) { /* the last report: end the line before any text follows */
        fputc('\n', stderr);
        p->active = false;
    }
    fflush(stderr);
    return true;
}
