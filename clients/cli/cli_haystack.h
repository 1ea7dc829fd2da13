/*
 * cli_haystack.h — the filler text a passkey prompt hides its key in: the built-in filler line, or a user's text
 * (passkey --file) cut into units — lines, and long lines at a space — that are laid down in order, from the
 * start again when the text runs out. Each unit's tokens are counted once, so a prompt of L tokens takes the
 * units whose counts fill L.
 */
#ifndef MNEMO_CLI_HAYSTACK_H
#define MNEMO_CLI_HAYSTACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

typedef struct {
    char *text;        /* all units back to back; the last ends in '\n' */
    size_t *off;       /* unit i is text[off[i] .. off[i + 1]); n + 1 entries */
    int32_t *n_tokens; /* tokens of unit i, tokenized alone without BOS */
    int n;             /* units (>= 1) */
} cli_haystack;

/* Cuts text[0..len) into units. False when it holds no non-blank character or memory runs out. */
bool cli_haystack_init(cli_haystack *h, const mnemo_model *m, const char *text, size_t len);
void cli_haystack_free(cli_haystack *h);
/* How many units (in order, cycling) fit in budget tokens: at least 1. */
int cli_haystack_units(const cli_haystack *h, int64_t budget);
/* head, then `units` units with keyline before unit round(depth * units) (after the last at depth 1), then
 * question. malloc'ed; NULL when out of memory. */
char *cli_haystack_prompt(const cli_haystack *h, const char *head, int units, double depth, const char *keyline,
                          const char *question);

#endif
