/*
 * gguf_llama.h — the llama architecture in GGUF, as llama.cpp's convert_hf_to_gguf.py writes it, mapped to and from
 * what mnemo works with: tensor names (blk.N.attn_q.weight <-> model.layers.N.self_attn.q_proj.weight), the model
 * config (llama.* keys <-> config.json fields, LongLLaMA's under mnemo.longllama.*), and the Q/K row order
 * (convert permutes each head's rows from rotate_half halves to interleaved pairs for ggml's RoPE; mnemo's RoPE is
 * Hugging Face's, so the reader puts them back and the writer permutes them again).
 */
#ifndef MNEMO_GGUF_LLAMA_H
#define MNEMO_GGUF_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "tensor_index.h"

/* HF name of a GGUF tensor name (out of n bytes), or -1 when it is not a llama tensor. */
int gguf_llama_hf_name(const char *gguf_name, char *out, size_t n);
/* GGUF name of an HF tensor name, or -1 when the model does not use it. */
int gguf_llama_gguf_name(const char *hf_name, char *out, size_t n);

/* Rows of a [heads * hd, cols] matrix (row_bytes each) between HF order and GGUF's: to_gguf 1 permutes as convert
 * does, 0 undoes it. dst and src must not overlap. -1 when rows is not a multiple of 2 * heads or rows are empty. */
int gguf_llama_permute_rows(void *dst, const void *src, int64_t rows, size_t row_bytes, int64_t heads, int to_gguf);

/* config.json text (malloc'ed, NUL-terminated) equivalent to the GGUF's metadata: general.architecture must be
 * "llama"; llama.* hyperparameters, tokenizer.ggml.* special ids, tie_word_embeddings from output.weight's
 * absence, and LongLLaMA's fields from mnemo.*. 0, or -1 with a message naming the file and key. */
int gguf_llama_config_json(const gguf_file *g, const char *file, char **json, char *err, size_t errlen);

/* The tokenizer as a serialized SentencePiece ModelProto (malloc'ed, *len bytes): mnemo.tokenizer.spm_model when
 * the file carries the original (mnemo quantize stores it), else built from tokenizer.ggml.{model = "llama",
 * tokens, scores, token_type, special ids, add_space_prefix} as a BPE model with byte fallback, the way LLaMA's
 * tokenizer.model is. 1 when the file has no tokenizer (the caller looks beside it), 0 on success, -1 with a
 * message. */
int gguf_llama_tokenizer_proto(const gguf_file *g, const char *file, uint8_t **proto, size_t *len, char *err,
                               size_t errlen);

/* weight_store's parser for a GGUF image: every tensor under its HF name (shape [out, in]), Q/K rows reordered into
 * owned copies; tensors of other architectures or types mnemo does not read are refused with their name. */
int gguf_weights_parse(const uint8_t *buf, uint64_t len, const char *file, tensor_list *out, char *err,
                       size_t errlen);

#endif
