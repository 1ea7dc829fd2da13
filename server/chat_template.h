/*
 * chat_template.h — chat messages -> prompt, for the templates mnemo knows by heart.
 *
 * A template renders into a sink of text pieces and special tokens (BOS/EOS), so that "<s>" in a user's message
 * stays text and never becomes a control token. Jinja is not interpreted: a checkpoint's tokenizer_config.json
 * chat_template is recognised by its markers ("[INST]" -> llama2, "<|im_start|>" -> chatml) and an unrecognised
 * one falls back to the default with a warning. The model directory is the operator's; nothing here comes from a
 * request.
 *
 *   llama2  <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] {user} [/INST]
 *           (Meta's Llama-2-chat format; roles after an optional system message must alternate user/assistant)
 *   chatml  <s><|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n   (stop: "<|im_end|>")
 *   plain   <s>{role}: {content}\n ... assistant:                                      (stop: "\nuser:")
 */
#ifndef MNEMO_SERVER_CHAT_TEMPLATE_H
#define MNEMO_SERVER_CHAT_TEMPLATE_H

#include <stddef.h>

#include "request_parse.h"

typedef enum { TMPL_LLAMA2 = 0, TMPL_CHATML = 1, TMPL_PLAIN = 2 } chat_template;

typedef enum { TMPL_TOK_BOS = 1, TMPL_TOK_EOS = 2 } tmpl_special;

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
 * none, -1 when present but unknown (why says what was seen). */
int chat_template_detect(const char *model_dir, chat_template *out, char *why, size_t whylen);

/* Renders msgs and the opening of the assistant's turn. 0, or -1 with a message and the offending param
 * ("messages" / "messages[i].role") when the conversation does not fit the template. */
int chat_template_render(chat_template t, const chat_msg *msgs, int n, const tmpl_sink *sink, char *err,
                         size_t errlen, char *param, size_t paramlen);

#endif
