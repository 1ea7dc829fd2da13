/*
 * train_chat.h — one chat conversation -> the ids a training row holds and which of them count in the loss
 *.
 *
 * The conversation is rendered with a chat template (engine.h "chat templates", no generation prompt) and
 * tokenized as mnemo-server tokenizes a chat prompt: each run of text between two specials as one piece, BOS and
 * EOS as their ids, so "<s>" inside a message stays text and the prompt part of each turn gets the ids the server
 * would feed at inference. The loss covers the pieces the template marks as an assistant's answer (its content
 * and the end-of-turn marker: EOS for llama2, "<|im_end|>" for chatml). Where an answer begins or ends inside a
 * run of text, the split is where the tokenization of the text up to the boundary agrees with the whole run's
 * (as for prompt/completion examples): the ids of that common prefix go to the part before, a token straddling
 * the boundary to the part after. Tokenizing the parts separately would be exact too but wrong for SentencePiece:
 * each part would gain a dummy-prefix "▁" the model never sees at inference.
 */
#ifndef MNEMO_TRAIN_CHAT_H
#define MNEMO_TRAIN_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"

typedef enum {
    TRAIN_CHAT_OK = 0,
    TRAIN_CHAT_MISFIT = 1,   /* the conversation does not fit the template: err says why, *bad_msg which message */
    TRAIN_CHAT_TOO_LONG = 2, /* more than max_ids ids: *n_ids says how many; nothing else is returned */
    TRAIN_CHAT_FAILED = 3,   /* tokenization or allocation failed: err says which */
} train_chat_rc;

/* On TRAIN_CHAT_OK, *ids and *loss (malloc'ed, *n_ids long; free both) hold the rendered ids, BOS first, and
 * loss[i] = 1 where ids[i] belongs to an assistant's answer. */
train_chat_rc train_chat_tokenize(const mnemo_model *m, mnemo_chat_template tmpl, const mnemo_chat_msg *msgs,
                                  int32_t n, size_t max_ids, mnemo_token **ids, uint8_t **loss, size_t *n_ids,
                                  int32_t *bad_msg, char *err, size_t errlen);

#endif
