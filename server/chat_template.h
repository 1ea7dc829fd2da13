/*
 * chat_template.h — the server's view of libengine's chat templates (engine.h "chat templates"): the request's
 * messages rendered with mnemo_chat_template_render, and a conversation that does not fit named by the OpenAI
 * `param` of the error reply ("messages" / "messages[i].role"). The templates themselves, their stop strings and
 * their recognition in tokenizer_config.json live in the engine, shared with training data; the names here are the
 * server's short ones for the engine's.
 */
#ifndef MNEMO_SERVER_CHAT_TEMPLATE_H
#define MNEMO_SERVER_CHAT_TEMPLATE_H

#include <stddef.h>

#include "engine.h"
#include "request_parse.h"

typedef mnemo_chat_template chat_template;
#define TMPL_LLAMA2 MNEMO_CHAT_LLAMA2
#define TMPL_CHATML MNEMO_CHAT_CHATML
#define TMPL_PLAIN MNEMO_CHAT_PLAIN

typedef mnemo_chat_special tmpl_special;
#define TMPL_TOK_BOS MNEMO_CHAT_BOS
#define TMPL_TOK_EOS MNEMO_CHAT_EOS

/* A prompt sink: the server tokenizes a whole prompt, so it needs no answer marks. */
typedef struct {
    int (*text)(void *user, const char *s, size_t n);  /* nonzero aborts the render */
    int (*special)(void *user, tmpl_special which);
    void *user;
} tmpl_sink;

/* "llama2" | "chatml" | "plain" -> 0, else -1. */
int chat_template_parse(const char *name, chat_template *out);
const char *chat_template_name(chat_template t);
/* The stop string the template implies (NULL for none): generation must end at the next turn's marker. */
const char *chat_template_stop(chat_template t);

/* Reads <model_dir>/tokenizer_config.json. 1 when its chat_template is recognised (*out set), 0 when there is
 * none, -1 when present but unknown or unreadable (why says what was seen). */
int chat_template_detect(const char *model_dir, chat_template *out, char *why, size_t whylen);

/* Renders msgs and the opening of the assistant's turn. 0, or -1 with a message and the offending param
 * ("messages" / "messages[i].role") when the conversation does not fit the template. */
int chat_template_render(chat_template t, const chat_msg *msgs, int n, const tmpl_sink *sink, char *err,
                         size_t errlen, char *param, size_t paramlen);

#endif
