/*
 * chat_template.c — request messages through libengine's chat templates (see chat_template.h).
 */
#include "chat_template.h"

#include <stdio.h>
#include <stdlib.h>

int chat_template_parse(const char *name, chat_template *out) {
    return mnemo_chat_template_parse(name, out) == MNEMO_OK ? 0 : -1;
}

const char *chat_template_name(chat_template t) { return mnemo_chat_template_name(t); }

const char *chat_template_stop(chat_template t) { return mnemo_chat_template_stop(t); }

int chat_template_detect(const char *model_dir, chat_template *out, char *why, size_t whylen) {
    mnemo_chat_template t;
    mnemo_status st = mnemo_chat_template_detect(model_dir, &t, why, whylen);
    if (st == MNEMO_OK) *out = t;
    return st == MNEMO_OK ? 1 : st == MNEMO_ERR_IO ? 0 : -1;
}

/* The engine's sink calls into the server's (which ignores answer marks). */
static int fwd_text(void *u, const char *s, size_t n, bool answer) {
    const tmpl_sink *k = u;
    return k->text(k->user, s, n);
}
static int fwd_special(void *u, mnemo_chat_special which, bool answer) {
    const tmpl_sink *k = u;
    return k->special(k->user, which);
}

int chat_template_render(chat_template t, const chat_msg *msgs, int n, const tmpl_sink *sink, char *err,
                         size_t errlen, char *param, size_t paramlen) {
    snprintf(err, errlen, "out of memory rendering the chat template");
    snprintf(param, paramlen, "messages");
    mnemo_chat_msg *m = malloc((n > 0 ? (size_t)n : 1) * sizeof *m);
    if (!m) return -1;
    for (int i = 0; i < n; i++) m[i] = (mnemo_chat_msg){msgs[i].role, msgs[i].content, msgs[i].len};
    mnemo_chat_sink es = {fwd_text, fwd_special, (void *)sink};
    int32_t bad = -1;
    char why[256];
    mnemo_status st = mnemo_chat_template_render(t, m, n, true, &es, &bad, why, sizeof why);
    free(m);
    if (st == MNEMO_OK) return 0;
    if (st == MNEMO_ERR_CANCELLED) return -1; /* the sink failed: out of memory */
    snprintf(err, errlen, "%s", why);
    if (bad >= 0) snprintf(param, paramlen, "messages[%d].role", (int)bad);
    return -1;
}
