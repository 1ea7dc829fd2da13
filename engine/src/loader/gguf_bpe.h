/*
 * gguf_bpe.h — a GGUF file's byte-level BPE vocabulary (tokenizer.ggml.model "gpt2") as a tokenizer.
 */
#ifndef MNEMO_GGUF_BPE_H
#define MNEMO_GGUF_BPE_H

#include <stdbool.h>
#include <stddef.h>

#include "gguf.h"
#include "tokenizer.h"

/* tokenizer.ggml.model is "gpt2". */
bool gguf_has_bpe_tokenizer(const gguf_file *g);

/* From tokenizer.ggml.{tokens, token_type, merges, pre, bos/eos/unknown/padding_token_id, add_bos_token}.
 * 0, or -1 with a message naming the file and what is wrong (a missing or mistyped key, a merge that is not two
 * tokens or names one the vocabulary lacks, an unknown pre-tokenizer, counts past 2^24). */
int gguf_bpe_tokenizer(const gguf_file *g, const char *file, tokenizer **out, char *err, size_t errlen);

#endif
