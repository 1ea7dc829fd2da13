/*
 * chat_template.c — the built-in chat templates and tokenizer_config.json recognition (see chat_template.h).
 */
#include "chat_template.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const char *NAMES[] = {"llama2", "chatml", "plain"};

int chat_template_parse(const char *name, chat_template *out) {
    for (int i = 0; i < 3; i++)
        if (name && !strcmp(name, NAMES[i])) {
            *out = (chat_template)i;
            return 0;
        }
    return -1;
}

const char *chat_template_name(chat_template t) { return (unsigned)t < 3 ? NAMES[t] : "?"; }

const char *chat_template_stop(chat_template t) {
    if (t == TMPL_CHATML) return "<|im_end|>";
    if (t == TMPL_PLAIN) return "\nuser:";
    return NULL; /* llama2 ends with EOS */
}

static int classify(const char *tmpl, chat_template *out) {
    if (strstr(tmpl, "[INST]")) *out = TMPL_LLAMA2;
    else if (strstr(tmpl, "<|im_start|>")) *out = TMPL_CHATML;
    else return -1;
    return 1;
}

int chat_template_detect(const char *model_dir, chat_template *out, char *why, size_t whylen) {
    char path[4096];
    snprintf(why, whylen, "%s", "");
    if (snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir) >= (int)sizeof path) return 0;
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    if (st.st_size > (64 << 20)) {
        snprintf(why, whylen, "%s is larger than 64 MiB", path);
        return -1;
    }
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        snprintf(why, whylen, "%s is not valid JSON (line %d: %s)", path, je.line, je.text);
        return -1;
    }
    json_t *t = json_object_get(root, "chat_template");
    const char *tmpl = NULL;
    if (json_is_string(t)) tmpl = json_string_value(t);
    else if (json_is_array(t)) /* [{"name": "default", "template": "..."}, ...] */
        for (size_t i = 0; i < json_array_size(t) && !tmpl; i++) {
            json_t *e = json_array_get(t, i);
            if (json_is_string(json_object_get(e, "name")) &&
                !strcmp(json_string_value(json_object_get(e, "name")), "default") &&
                json_is_string(json_object_get(e, "template")))
                tmpl = json_string_value(json_object_get(e, "template"));
        }
    int rc = 0;
    if (tmpl) {
        rc = classify(tmpl, out);
        if (rc < 0) snprintf(why, whylen, "the chat_template in %s is not one mnemo knows (%.60s...)", path, tmpl);
    }
    json_decref(root);
    return rc;
}

/* s without leading and trailing whitespace, as Llama-2's reference template strips contents. */
static void trimmed(const char *s, size_t n, const char **b, size_t *len) {
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    *b = s;
    *len = n;
}

#define EMIT(s, n)                                                  \
    do {                                                            \
        if (sink->text(sink->user, (s), (n))) return -1;            \
    } while (0)
#define EMIT_S(s) EMIT((s), strlen(s))
#define SPECIAL(w)                                                  \
    do {                                                            \
        if (sink->special(sink->user, (w))) return -1;              \
    } while (0)

static int render_llama2(const chat_msg *msgs, int n, const tmpl_sink *sink, char *err, size_t errlen, char *param,
                         size_t paramlen) {
    int start = 0;
    const char *sys = NULL;
    size_t sys_len = 0;
    if (n > 0 && msgs[0].role == ROLE_SYSTEM) {
        trimmed(msgs[0].content, msgs[0].len, &sys, &sys_len);
        start = 1;
    }
    if (start >= n) {
        snprintf(err, errlen, "the conversation needs a user message after the system message");
        snprintf(param, paramlen, "messages");
        return -1;
    }
    for (int i = start; i < n; i++) {
        chat_role want = (i - start) % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;
        if (msgs[i].role != want) {
            snprintf(err, errlen,
                     "the llama2 chat template needs roles alternating user/assistant/user/... after an optional "
                     "first system message (message %d is %s)",
                     i, msgs[i].role == ROLE_SYSTEM ? "system" : msgs[i].role == ROLE_USER ? "user" : "assistant");
            snprintf(param, paramlen, "messages[%d].role", i);
            return -1;
        }
        const char *c;
        size_t len;
        trimmed(msgs[i].content, msgs[i].len, &c, &len);
        if (want == ROLE_USER) {
            SPECIAL(TMPL_TOK_BOS);
            EMIT_S("[INST] ");
            if (i == start && sys) {
                EMIT_S("<<SYS>>\n");
                EMIT(sys, sys_len);
                EMIT_S("\n<</SYS>>\n\n");
            }
            EMIT(c, len);
            EMIT_S(" [/INST]");
        } else {
            EMIT_S(" ");
            EMIT(c, len);
            EMIT_S(" ");
            SPECIAL(TMPL_TOK_EOS);
        }
    }
    return 0;
}

static const char *role_name(chat_role r) {
    return r == ROLE_SYSTEM ? "system" : r == ROLE_USER ? "user" : "assistant";
}

static int render_chatml(const chat_msg *msgs, int n, const tmpl_sink *sink) {
    SPECIAL(TMPL_TOK_BOS);
    for (int i = 0; i < n; i++) {
        EMIT_S("<|im_start|>");
        EMIT_S(role_name(msgs[i].role));
        EMIT_S("\n");
        EMIT(msgs[i].content, msgs[i].len);
        EMIT_S("<|im_end|>\n");
    }
    EMIT_S("<|im_start|>assistant\n");
    return 0;
}

static int render_plain(const chat_msg *msgs, int n, const tmpl_sink *sink) {
    SPECIAL(TMPL_TOK_BOS);
    for (int i = 0; i < n; i++) {
        EMIT_S(role_name(msgs[i].role));
        EMIT_S(": ");
        EMIT(msgs[i].content, msgs[i].len);
        EMIT_S("\n");
    }
    EMIT_S("assistant:");
    return 0;
}

int chat_template_render(chat_template t, const chat_msg *msgs, int n, const tmpl_sink *sink, char *err,
                         size_t errlen, char *param, size_t paramlen) {
    snprintf(err, errlen, "out of memory rendering the chat template");
    snprintf(param, paramlen, "messages");
    switch (t) {
    case TMPL_LLAMA2: return render_llama2(msgs, n, sink, err, errlen, param, paramlen);
    case TMPL_CHATML: return render_chatml(msgs, n, sink);
    case TMPL_PLAIN: return render_plain(msgs, n, sink);
    }
    snprintf(err, errlen, "unknown chat template");
    return -1;
}
