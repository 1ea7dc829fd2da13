/*
 * webui_negotiate.c — Accept-Encoding and If-None-Match, read as RFC 9110 writes them (see webui_negotiate.h).
 * Both headers are comma-separated lists; each element is read in place, never copied.
 */
#include "webui_negotiate.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *skip_space(const char *p) {
    while (*p == ' ' || *p == '\t') p++;
    return p;
}

/* The q-value of one Accept-Encoding element's parameters ("; q=0.5"); 1 when absent. */
static double element_q(const char *params, const char *end) {
    for (const char *p = params; p < end; p++) {
        if (*p != ';') continue;
        const char *k = skip_space(p + 1);
        if ((k[0] == 'q' || k[0] == 'Q') && k[1] == '=') return strtod(k + 2, NULL);
    }
    return 1.0;
}

bool webui_accepts_gzip(const char *h) {
    if (!h) return false;
    double gzip_q = -1, star_q = -1; /* -1: not listed */
    while (*h) {
        const char *start = skip_space(h);
        const char *end = strchr(start, ',');
        if (!end) end = start + strlen(start);
        size_t n = strcspn(start, " \t;,");
        if (n > (size_t)(end - start)) n = (size_t)(end - start);
        double q = element_q(start + n, end);
        if ((n == 4 && !strncasecmp(start, "gzip", 4)) || (n == 6 && !strncasecmp(start, "x-gzip", 6))) gzip_q = q;
        else if (n == 1 && *start == '*') star_q = q;
        h = *end ? end + 1 : end;
    }
    return gzip_q >= 0 ? gzip_q > 0 : star_q > 0; /* an explicit gzip element wins over "*" */
}

bool webui_etag_matches(const char *h, const char *etag) {
    if (!h || !etag) return false;
    size_t elen = strlen(etag);
    while (*h) {
        const char *start = skip_space(h);
        const char *end = strchr(start, ',');
        if (!end) end = start + strlen(start);
        const char *tag_end = end;
        while (tag_end > start && (tag_end[-1] == ' ' || tag_end[-1] == '\t')) tag_end--;
        if (tag_end - start == 1 && *start == '*') return true;
        if (tag_end - start >= 2 && !strncmp(start, "W/", 2)) start += 2;
        if ((size_t)(tag_end - start) == elen && !strncmp(start, etag, elen)) return true;
        h = *end ? end + 1 : end;
    }
    return false;
}
