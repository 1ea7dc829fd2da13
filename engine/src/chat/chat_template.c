/*
 * chat_template.c — the built-in chat templates (mnemo_chat_template_*, see engine.h "chat templates") and their
 * recognition in a checkpoint's tokenizer_config.json.
 *
 * A template is a plain function over the messages that sends text pieces and BOS/EOS to a sink; nothing is
 * tokenized here, so the same render serves the server (one prompt, text between specials tokenized as one piece,
 * as Hugging Face does) and training data (which also needs to know where each assistant answer begins and ends:
 * every piece says whether it belongs to one). Pieces are sent in the order they appear, and an answer's pieces
 * are never merged with framing, so a sink can split at the boundary exactly.
 */
#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine.h"
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gguf.h"
#include "errbuf.h"

static const char *const NAMES[] = {"llama2", "chatml", "plain", "llama3"};
#define N_TEMPLATES ((int)(sizeof NAMES / sizeof *NAMES))

mnemo_status mnemo_chat_template_parse(const char *name, mnemo_chat_template *out) {
    for (int i = 0; name && out && i < N_TEMPLATES; i++)
        if (!strcmp(name, NAMES[i])) {
            *out = (mnemo_chat_template)i;
            return MNEMO_OK;
        }
    return MNEMO_ERR_INVALID_ARG;
}

const char *mnemo_chat_template_name(mnemo_chat_template t) { return (unsigned)t < N_TEMPLATES ? NAMES[t] : "?"; }

const char *mnemo_chat_template_stop(mnemo_chat_template t) {
    if (t == MNEMO_CHAT_CHATML) return "<|im_end|>";
    if (t == MNEMO_CHAT_PLAIN) return "\nuser:";
    if (t == MNEMO_CHAT_LLAMA3) return "<|eot_id|>";
    return NULL; /* llama2 ends with EOS */
}

static mnemo_status classify(const char *tmpl, mnemo_chat_template *out) {
    if (strstr(tmpl, "[INST]")) *out = MNEMO_CHAT_LLAMA2;
    else if (strstr(tmpl, "<|im_start|>")) *out = MNEMO_CHAT_CHATML;
    else if (strstr(tmpl, "<|start_header_id|>")) *out = MNEMO_CHAT_LLAMA3;
    else return MNEMO_ERR_UNSUPPORTED;
    return MNEMO_OK;
}

mnemo_status mnemo_chat_template_classify(const char *jinja, mnemo_chat_template *out) {
    if (!out) return MNEMO_ERR_INVALID_ARG;
    *out = MNEMO_CHAT_TEMPLATE_DEFAULT;
    return jinja ? classify(jinja, out) : MNEMO_ERR_INVALID_ARG;
}

/* A GGUF file's tokenizer.chat_template (the file is mapped, only its header read). */
static mnemo_status detect_gguf(const char *path, mnemo_chat_template *out, char *why, size_t whylen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    void *map = MAP_FAILED;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0)
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (fd >= 0) close(fd);
    if (map == MAP_FAILED) {
        if (why) snprintf(why, whylen, "%s: cannot be read", path);
        return MNEMO_ERR_IO;
    }
    char err[256];
    gguf_file g;
    mnemo_status rc = MNEMO_ERR_IO; /* no chat template: nothing to recognise */
    if (gguf_parse(map, (uint64_t)st.st_size, path, &g, err, sizeof err) != 0) {
        if (why) snprintf(why, whylen, "%s", err);
        rc = MNEMO_ERR_FORMAT;
    } else {
        const char *s;
        uint64_t n;
        if (gguf_get_str(&g, "tokenizer.chat_template", &s, &n)) {
            char *text = malloc(n + 1);
            if (text) {
                memcpy(text, s, n);
                text[n] = '\0';
                rc = classify(text, out);
                if (rc != MNEMO_OK && why)
                    snprintf(why, whylen, "the chat template in %s is not one mnemo knows (%.60s...)", path, text);
                free(text);
            } else {
                rc = MNEMO_ERR_NOMEM;
            }
        }
        gguf_free(&g);
    }
    munmap(map, (size_t)st.st_size);
    return rc;
}

mnemo_status mnemo_chat_template_detect(const char *model_dir, mnemo_chat_template *out, char *why, size_t whylen) {
    char path[4096];
    if (why && whylen) why[0] = '\0';
    if (!out) return MNEMO_ERR_INVALID_ARG;
    *out = MNEMO_CHAT_TEMPLATE_DEFAULT;
    if (!model_dir) return MNEMO_ERR_INVALID_ARG;
    struct stat st;
    if (stat(model_dir, &st) == 0 && S_ISREG(st.st_mode)) return detect_gguf(model_dir, out, why, whylen);
    if (snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir) >= (int)sizeof path) return MNEMO_ERR_IO;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return MNEMO_ERR_IO;
    if (st.st_size > (64 << 20)) {
        if (why) snprintf(why, whylen, "%s is larger than 64 MiB", path);
        return MNEMO_ERR_FORMAT;
    }
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        if (why) snprintf(why, whylen, "%s is not valid JSON (line %d: %s)", path, je.line, je.text);
        return MNEMO_ERR_FORMAT;
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
    mnemo_status st_ = MNEMO_ERR_IO; /* no chat_template: nothing to recognise */
    if (tmpl) {
        st_ = classify(tmpl, out);
        if (st_ != MNEMO_OK && why)
            snprintf(why, whylen, "the chat_template in %s is not one mnemo knows (%.60s...)", path, tmpl);
    }
    json_decref(root);
    return st_;
}

/* ---------------------------------------------------------------- rendering */

typedef struct {
    const mnemo_chat_sink *sink;
    bool stopped; /* a sink callback returned nonzero */
} out_t;

static int put(out_t *o, const char *s, size_t n, bool answer) {
    if (!o->stopped && n && o->sink->text(o->sink->user, s, n, answer)) o->stopped = true; /* no empty pieces */
    return o->stopped ? -1 : 0;
}
static int puts_(out_t *o, const char *s, bool answer) { return put(o, s, strlen(s), answer); }
static int special(out_t *o, mnemo_chat_special w, bool answer) {
    if (!o->stopped && o->sink->special(o->sink->user, w, answer)) o->stopped = true;
    return o->stopped ? -1 : 0;
}

/* s without leading and trailing whitespace, as Llama-2's reference template strips contents. */
static void trimmed(const char *s, size_t n, const char **b, size_t *len) {
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    *b = s;
    *len = n;
}

static const char *role_name(mnemo_chat_role r) {
    return r == MNEMO_ROLE_SYSTEM ? "system" : r == MNEMO_ROLE_USER ? "user" : "assistant";
}

static mnemo_status misfit(int32_t *bad_msg, int32_t i, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static mnemo_status misfit(int32_t *bad_msg, int32_t i, char *err, size_t errlen, const char *fmt, ...) {
    if (bad_msg) *bad_msg = i;
    va_list ap;
    va_start(ap, fmt);
    errbuf_vwrite(err, errlen, NULL, fmt, ap);
    va_end(ap);
    return MNEMO_ERR_INVALID_ARG;
}

/* Checked before anything is sent, so that a conversation that does not fit sends nothing. */
static mnemo_status check_llama2(const mnemo_chat_msg *msgs, int32_t n, int32_t *bad_msg, char *err, size_t errlen) {
    int32_t start = n > 0 && msgs[0].role == MNEMO_ROLE_SYSTEM;
    if (start >= n)
        return misfit(bad_msg, -1, err, errlen, "the conversation needs a user message after the system message");
    for (int32_t i = start; i < n; i++) {
        mnemo_chat_role want = (i - start) % 2 == 0 ? MNEMO_ROLE_USER : MNEMO_ROLE_ASSISTANT;
        if (msgs[i].role != want)
            return misfit(bad_msg, i, err, errlen,
                          "the llama2 chat template needs roles alternating user/assistant/user/... after an "
                          "optional first system message (message %d is %s)",
                          (int)i, role_name(msgs[i].role));
    }
    return MNEMO_OK;
}

static void render_llama2(out_t *o, const mnemo_chat_msg *msgs, int32_t n) {
    int32_t start = msgs[0].role == MNEMO_ROLE_SYSTEM;
    const char *sys = NULL;
    size_t sys_len = 0;
    if (start) trimmed(msgs[0].content, msgs[0].len, &sys, &sys_len);
    for (int32_t i = start; i < n; i++) {
        const char *c;
        size_t len;
        trimmed(msgs[i].content, msgs[i].len, &c, &len);
        if (msgs[i].role == MNEMO_ROLE_USER) {
            if (special(o, MNEMO_CHAT_BOS, false) || puts_(o, "[INST] ", false)) return;
            if (i == start && sys &&
                (puts_(o, "<<SYS>>\n", false) || put(o, sys, sys_len, false) || puts_(o, "\n<</SYS>>\n\n", false)))
                return;
            if (put(o, c, len, false) || puts_(o, " [/INST]", false)) return;
        } else if (puts_(o, " ", true) || put(o, c, len, true) || puts_(o, " ", true) ||
                   special(o, MNEMO_CHAT_EOS, true))
            return;
    }
}

static void render_chatml(out_t *o, const mnemo_chat_msg *msgs, int32_t n, bool gen) {
    if (special(o, MNEMO_CHAT_BOS, false)) return;
    for (int32_t i = 0; i < n; i++) {
        bool a = msgs[i].role == MNEMO_ROLE_ASSISTANT;
        if (puts_(o, "<|im_start|>", false) || puts_(o, role_name(msgs[i].role), false) || puts_(o, "\n", false) ||
            put(o, msgs[i].content, msgs[i].len, a) || puts_(o, "<|im_end|>", a) || puts_(o, "\n", false))
            return;
    }
    if (gen) puts_(o, "<|im_start|>assistant\n", false);
}

static void render_llama3(out_t *o, const mnemo_chat_msg *msgs, int32_t n, bool gen) {
    if (special(o, MNEMO_CHAT_BOS, false)) return;
    for (int32_t i = 0; i < n; i++) {
        bool a = msgs[i].role == MNEMO_ROLE_ASSISTANT;
        const char *c;
        size_t len;
        trimmed(msgs[i].content, msgs[i].len, &c, &len); /* Meta's template trims each content */
        if (puts_(o, "<|start_header_id|>", false) || puts_(o, role_name(msgs[i].role), false) ||
            puts_(o, "<|end_header_id|>\n\n", false) || put(o, c, len, a) || puts_(o, "<|eot_id|>", a))
            return;
    }
    if (gen) puts_(o, "<|start_header_id|>assistant<|end_header_id|>\n\n", false);
}

static void render_plain(out_t *o, const mnemo_chat_msg *msgs, int32_t n, bool gen) {
    if (special(o, MNEMO_CHAT_BOS, false)) return;
    for (int32_t i = 0; i < n; i++) {
        bool a = msgs[i].role == MNEMO_ROLE_ASSISTANT;
        if (puts_(o, role_name(msgs[i].role), false) || puts_(o, ":", false) || puts_(o, " ", a) ||
            put(o, msgs[i].content, msgs[i].len, a) || puts_(o, "\n", a))
            return;
    }
    if (gen) puts_(o, "assistant:", false);
}

mnemo_status mnemo_chat_template_render(mnemo_chat_template t, const mnemo_chat_msg *msgs, int32_t n,
                                        bool add_generation_prompt, const mnemo_chat_sink *sink, int32_t *bad_msg,
                                        char *err, size_t errlen) {
    if (bad_msg) *bad_msg = -1;
    if (err && errlen) err[0] = '\0';
    if ((unsigned)t >= N_TEMPLATES) return misfit(bad_msg, -1, err, errlen, "unknown chat template %d", (int)t);
    if (n < 0 || (n > 0 && !msgs) || !sink || !sink->text || !sink->special)
        return misfit(bad_msg, -1, err, errlen, "invalid arguments (messages, count or sink)");
    for (int32_t i = 0; i < n; i++)
        if ((unsigned)msgs[i].role > MNEMO_ROLE_ASSISTANT || (msgs[i].len && !msgs[i].content))
            return misfit(bad_msg, i, err, errlen, "message %d has an invalid role or no content", (int)i);
    if (t == MNEMO_CHAT_LLAMA2) {
        mnemo_status st = check_llama2(msgs, n, bad_msg, err, errlen);
        if (st != MNEMO_OK) return st;
    }
    out_t o = {sink, false};
    switch (t) {
    case MNEMO_CHAT_LLAMA2: render_llama2(&o, msgs, n); break;
    case MNEMO_CHAT_CHATML: render_chatml(&o, msgs, n, add_generation_prompt); break;
    case MNEMO_CHAT_PLAIN: render_plain(&o, msgs, n, add_generation_prompt); break;
    case MNEMO_CHAT_LLAMA3: render_llama3(&o, msgs, n, add_generation_prompt); break;
    }
    if (o.stopped) {
        if (err && errlen) snprintf(err, errlen, "the chat template's sink stopped the render");
        return MNEMO_ERR_CANCELLED;
    }
    return MNEMO_OK;
}
