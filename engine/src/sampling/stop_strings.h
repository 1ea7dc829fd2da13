/*
 * stop_strings.h — stop-string matching over streamed text. Text is appended as it becomes final; the
 * matcher says how much of it may be emitted now: it holds back any tail that is a prefix of a stop string,
 * and on a full match it reports the text before the match and that generation must end.
 */
#ifndef MNEMO_STOP_STRINGS_H
#define MNEMO_STOP_STRINGS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct stop_matcher stop_matcher;

/* Copies the n strings (empty strings are ignored). NULL on allocation failure. */
stop_matcher *stop_matcher_new(const char *const *stops, int n);
void stop_matcher_free(stop_matcher *m);
/* Append text. Afterwards (emit, emit_len) is the text now safe to emit (valid until the next call), and the
 * return value is true when a stop string matched (emit then ends just before it; later calls emit nothing). */
bool stop_matcher_push(stop_matcher *m, const char *text, size_t len, const char **emit, size_t *emit_len);
/* End of generation without a match: release the held-back tail. */
void stop_matcher_flush(stop_matcher *m, const char **emit, size_t *emit_len);

#endif
