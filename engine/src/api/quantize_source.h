/*
 * quantize_source.h — a GGUF file as the input of mnemo_quantize (quantize_api.c), beside a Hugging Face checkpoint
 * directory: its config from the llama.* / mnemo.* metadata, its tensors (dequantized one at a time by the writer's
 * fill), and its tokenizer metadata copied through unchanged — a byte-level BPE vocabulary (tokens, merges,
 * token_type, pre, special ids, add_bos, chat template) or a SentencePiece one — so the re-quantized file tokenizes
 * exactly as the original does, in mnemo and in llama.cpp.
 */
#ifndef MNEMO_QUANTIZE_SOURCE_H
#define MNEMO_QUANTIZE_SOURCE_H

#include <stdbool.h>
#include <stddef.h>

#include "engine.h"
#include "gguf.h"
#include "gguf_write.h"
#include "model_config.h"
#include "tensor_index.h"

typedef struct {
    void *map;    /* the mapped file (metadata values point into it); NULL when closed */
    size_t len;
    gguf_file g;
} quant_gguf_source;

/* Maps and parses path, reads its config into cfg and opens its tensors as *ws (Hugging Face names and row order).
 * MNEMO_OK, or an error with a message naming the file; on failure nothing is left open. */
mnemo_status quant_gguf_open(const char *path, quant_gguf_source *src, model_config *cfg, weight_store **ws,
                             char *err, size_t errlen);
void quant_gguf_close(quant_gguf_source *src); /* a closed or zeroed source is a no-op */

/* The file carries its vocabulary (tokenizer.ggml.model); without one the caller looks beside the file. */
bool quant_gguf_has_tokenizer(const quant_gguf_source *src);
/* Every tokenizer.* and mnemo.tokenizer.* key of the source, byte for byte. */
void quant_gguf_put_tokenizer(gguf_writer *w, const quant_gguf_source *src);
/* general.name of the source as a NUL-terminated copy into out (n bytes); false when it has none. */
bool quant_gguf_name(const quant_gguf_source *src, char *out, size_t n);

#endif
