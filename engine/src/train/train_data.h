/*
 * train_data.h — the examples a training run reads, and which of them step s takes.
 *
 * Text (.txt, any other extension): one stream, BOS + the SentencePiece ids of the whole file, cut into windows of
 *   seq_len + 1 tokens that overlap by one (window i = ids[i*L .. i*L + L]); every predicted token counts.
 * JSON lines (.jsonl): one example per non-blank line, either
 *   {"prompt": str, "completion": str}: BOS + prompt + completion + EOS, the loss on the completion's tokens and
 *     the EOS only (the prompt is tokenized alone and the pair together, and the split is where the two agree); or
 *   {"messages": [{"role": "system" | "user" | "assistant", "content": str}, ...]} (OpenAI's chat format): the
 *     conversation rendered with the model's chat template — the one its tokenizer_config.json names, as
 *     mnemo-server detects it (engine.h "chat templates"), llama2 when it names none or one mnemo does not know
 *     (with a warning) — and tokenized as the server tokenizes a chat prompt, the loss on every assistant
 *     answer (its content and the template's end-of-turn marker: " {content} " + EOS for llama2,
 *     "{content}<|im_end|>" for chatml) and nothing else (see train_chat.h for where a boundary falls inside a
 *     run of text). The conversation must end with an assistant message and fit the template (llama2: user and
 *     assistant alternate after an optional first system message); other roles ("developer", "tool") and
 *     content that is not a string are refused.
 *   {"tokens": [id, ...], "loss": [0 | 1, ...]}: token ids as they are (synthetic tasks such as `mnemo eval
 *     dict-lookup --write-data`; no BOS or EOS added), the loss on tokens whose "loss" is 1 ("loss" absent: every
 *     token after the first); ids must be below the model's vocabulary.
 *   The kinds may be mixed in one file, line by line. One example per row, padded after its end with mask 0
 *   (no packing: an example never attends to another).
 * Order: with shuffle off, step s takes examples s*B*G .. s*B*G + B*G - 1, wrapping at the end; with shuffle on,
 *   each pass over the data (epoch) is a permutation drawn from (seed, epoch) alone, so a resumed run needs only the
 *   step number to continue the same order.
 * Every problem (unreadable or empty file, a broken JSON line, an example longer than seq_len + 1 tokens, a
 * conversation the template cannot take, a file shorter than one window) is found when the file is opened, before
 * any step runs, with the file and line named.
 */
#ifndef MNEMO_TRAIN_DATA_H
#define MNEMO_TRAIN_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

typedef struct train_data train_data;

/* NULL with a message in err on any problem (see above). */
train_data *train_data_open(const mnemo_model *m, const char *path, int32_t seq_len, bool shuffle, uint64_t seed,
                            char *err, size_t errlen);
/* The same over bytes in memory (an upload; the fuzz target); name plays the path's part (".jsonl" or not, and in
 * messages). */
train_data *train_data_open_bytes(const mnemo_model *m, const char *name, const char *buf, size_t len,
                                  int32_t seq_len, bool shuffle, uint64_t seed, char *err, size_t errlen);
void train_data_free(train_data *d);

int64_t train_data_examples(const train_data *d); /* windows (text) or examples (JSON lines) */
bool train_data_is_text(const train_data *d);

/* Row r of the examples step `step` takes when every step takes `rows` examples: tokens[seq_len + 1] (padding:
 * the model's EOS id) and mask[seq_len] (mask[t] = 1: tokens[t + 1] is predicted from tokens[0..t] and counts in
 * the loss). Returns the example's index in the data. */
int64_t train_data_row(const train_data *d, int64_t step, int32_t rows, int32_t r, mnemo_token *tokens,
                       uint8_t *mask);

#endif
