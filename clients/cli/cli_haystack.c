/* cli_haystack.c — see cli_haystack.h. */
#include "cli_haystack.h"

#include <stdlib.h>
#include <string.h>

#define UNIT_SOFT_BYTES 256  /* a longer line is cut at the first space past this */
#define UNIT_HARD_BYTES 1024 /* ... or here, at a UTF-8 character boundary, when it has no space */

/* Length of the unit starting at s (n > 0 bytes left). */
static size_t unit_len(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') return i + 1;
        if (i >= UNIT_SOFT_BYTES && s[i] == ' ') return i + 1;
        if (i >= UNIT_HARD_BYTES && ((unsigned char)s[i] & 0xC0) != 0x80) return i;
    }
    return n;
}

static int32_t count_tokens(const mnemo_model *m, const char *s, size_t len) {
    int32_t n = 0;
    mnemo_tokenize(m, s, len, false, NULL, 0, &n);
    return n;
}

bool cli_haystack_init(cli_haystack *h, const mnemo_model *m, const char *text, size_t len) {
    memset(h, 0, sizeof *h);
    bool blank = true;
    for (size_t i = 0; i < len && blank; i++) blank = strchr(" \t\r\n\v\f", text[i]) != NULL;
    if (blank || !(h->text = malloc(len + 2))) return false;
    memcpy(h->text, text, len);
    /* A final newline keeps the key line, and the text's start when it repeats, on lines of their own. */
    if (h->text[len - 1] != '\n') h->text[len++] = '\n';
    h->text[len] = '\0';
    int units = 0;
    for (size_t o = 0; o < len; o += unit_len(h->text + o, len - o)) units++;
    h->off = malloc(((size_t)units + 1) * sizeof *h->off);
    h->n_tokens = malloc((size_t)units * sizeof *h->n_tokens);
    if (!h->off || !h->n_tokens) {
        cli_haystack_free(h);
        return false;
    }
    size_t o = 0;
    for (h->n = 0; h->n < units; h->n++) {
        size_t l = unit_len(h->text + o, len - o);
        h->off[h->n] = o;
        h->n_tokens[h->n] = count_tokens(m, h->text + o, l);
        o += l;
    }
    h->off[h->n] = len;
    return true;
}

void cli_haystack_free(cli_haystack *h) {
    free(h->text);
    free(h->off);
    free(h->n_tokens);
    memset(h, 0, sizeof *h);
}

int cli_haystack_units(const cli_haystack *h, int64_t budget) {
    int units = 0;
    for (int64_t used = 0; units < (1 << 30); units++) {
        int32_t t = h->n_tokens[units % h->n];
        if (used + (t > 0 ? t : 1) > budget) break;
        used += t > 0 ? t : 1;
    }
    return units > 0 ? units : 1;
}

static char *append(char *w, const char *s, size_t len) {
    memcpy(w, s, len);
    return w + len;
}

char *cli_haystack_prompt(const cli_haystack *h, const char *head, int units, double depth, const char *keyline,
                          const char *question) {
    size_t total = strlen(head) + strlen(keyline) + strlen(question) + 1;
    for (int i = 0; i < units; i++) total += h->off[i % h->n + 1] - h->off[i % h->n];
    char *p = malloc(total), *w = p;
    if (!p) return NULL;
    int before = (int)(depth * units + 0.5);
    w = append(w, head, strlen(head));
    for (int i = 0; i < units; i++) {
        if (i == before) w = append(w, keyline, strlen(keyline));
        size_t a = h->off[i % h->n];
        w = append(w, h->text + a, h->off[i % h->n + 1] - a);
    }
    if (before >= units) w = append(w, keyline, strlen(keyline));
    strcpy(w, question);
    return p;
}
