/*
 * tokenizer.h — one interface over two kinds of tokenizer: SentencePiece (tokenizer.model, through our own thin
 * extern "C" binding spm_binding.cc, the only C++ file of libengine) and byte-level BPE (GPT-2 style: a GGUF
 * vocabulary with tokenizer.ggml.model "gpt2", or a Hugging Face tokenizer.json; bpe_*.c), plus a streaming
 * detokenizer in C. Callers use the same calls for both; the kind only decides what happens inside.
 * A loaded tokenizer is read-only: every call here is safe from many threads at once.
 */
#ifndef MNEMO_TOKENIZER_H
#define MNEMO_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

typedef enum { TOKENIZER_SPM = 0, TOKENIZER_BPE = 1 } tokenizer_kind;

/* Long texts are encoded in pieces of this size where the model allows it (SentencePiece, see spm_binding.cc). */
#define TOKENIZER_ENCODE_CHUNK ((size_t)64 << 10)

/* 0 on success; -1 with a message naming the file (missing, not a SentencePiece model). */
int tokenizer_load(const char *model_path, tokenizer **out, char *err, size_t errlen);
/* The same from a serialized ModelProto in memory (a GGUF file's tokenizer); what names it in messages. */
int tokenizer_load_proto(const void *bytes, size_t len, const char *what, tokenizer **out, char *err, size_t errlen);
/* Byte-level BPE from a Hugging Face tokenizer.json (and the tokenizer_config.json beside it, when there is one:
 * bos_token, eos_token, pad_token, unk_token, add_bos_token). dir is the checkpoint directory. */
int tokenizer_load_hf_dir(const char *dir, tokenizer **out, char *err, size_t errlen);
/* The same from the two files' text in memory (config may be NULL); what names them in messages. */
int tokenizer_load_hf_json(const char *json, size_t len, const char *config, size_t config_len, const char *what,
                           tokenizer **out, char *err, size_t errlen);
void tokenizer_free(tokenizer *tok);                              /* NULL is a no-op */
tokenizer_kind tokenizer_get_kind(const tokenizer *tok);

int32_t tokenizer_vocab_size(const tokenizer *tok);
int32_t tokenizer_bos_id(const tokenizer *tok);                   /* -1 when the model has none */
int32_t tokenizer_eos_id(const tokenizer *tok);
int32_t tokenizer_unk_id(const tokenizer *tok);
int32_t tokenizer_pad_id(const tokenizer *tok);

/* True when add_bos = true prepends a BOS: SentencePiece models always (when they have a BOS); BPE vocabularies as
 * they say (GGUF tokenizer.ggml.add_bos_token, tokenizer_config.json add_bos_token, else the pre-tokenizer's
 * default: Llama 3 yes, GPT-2 / SmolLM / Qwen2 no). */
bool tokenizer_adds_bos(const tokenizer *tok);

/* Encode UTF-8 text; *ids is malloc'ed (free() it), *n its length. add_bos prepends the BOS id when
 * tokenizer_adds_bos. Control pieces written in the text ("<|im_start|>") are encoded as text, as SentencePiece
 * and llama-tokenize do; user-defined BPE pieces are always recognised (longest match first).
 * 0 on success, -1 on failure (allocation, invalid model state). */
int tokenizer_encode(const tokenizer *tok, const char *text, size_t len, bool add_bos, int32_t **ids, size_t *n);
/* The same, but control pieces written in the text become their ids (Hugging Face encode, llama.cpp
 * parse_special). SentencePiece has no such pieces in text: the same as tokenizer_encode. */
int tokenizer_encode_special(const tokenizer *tok, const char *text, size_t len, bool add_bos, int32_t **ids,
                             size_t *n);
/* The same, encoding long texts in pieces of about piece_bytes where the model allows (0: whole); the ids are
 * those of the whole text. tokenizer_encode uses 64 KiB pieces, which bound SentencePiece's working memory. */
int tokenizer_encode_pieces(const tokenizer *tok, const char *text, size_t len, bool add_bos, size_t piece_bytes,
                            int32_t **ids, size_t *n);
bool tokenizer_encodes_in_pieces(const tokenizer *tok); /* the model's flags allow it (else always whole) */
/* Decode ids to text; *text is malloc'ed and NUL-terminated, *len excludes the NUL. Byte-fallback pieces
 * become their bytes (BPE: every normal piece's GPT-2 characters become their bytes); control pieces give
 * nothing; bytes that do not form UTF-8 become U+FFFD, as SentencePiece and Hugging Face do. No clean-up of
 * spaces before punctuation: decode(encode(text)) == text for UTF-8 text. -1 if an id is outside [0, vocab). */
int tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n, char **text, size_t *len);
/* The piece of one id, malloc'ed, NUL-terminated. -1 if out of range. */
int tokenizer_id_to_piece(const tokenizer *tok, int32_t id, char **piece, size_t *len);
/* -1 when the piece is not in the vocabulary (SentencePiece's unk mapping is not reported as a hit). */
int32_t tokenizer_piece_to_id(const tokenizer *tok, const char *piece);
bool tokenizer_is_control(const tokenizer *tok, int32_t id);      /* <s>, </s>, ... */
bool tokenizer_is_byte(const tokenizer *tok, int32_t id);         /* <0xNN> byte-fallback piece */
/* A piece's score and SentencePiece type (1 normal, 2 unknown, 3 control, 5 unused, 6 byte; user-defined pieces
 * report 1 for SentencePiece, 4 for BPE), as GGUF's tokenizer.ggml.scores / token_type store them (BPE scores
 * are 0). -1 if id is out of range. */
int tokenizer_piece_info(const tokenizer *tok, int32_t id, float *score, int *type);
/* Byte-level BPE: the raw bytes one id adds to a decode (may be part of a UTF-8 character), pointing into the
 * tokenizer. -1 for SentencePiece or an id out of range. */
int tokenizer_token_bytes(const tokenizer *tok, int32_t id, const char **bytes, size_t *len);

/* ---- streaming detokenization
 * Feeds generated ids one at a time and hands back only text that is final: never half a UTF-8 character
 * (a byte-fallback sequence is held until complete), and the leading space of a piece is kept or dropped as
 * the full decode of the whole sequence would (a context token preceding the generation decides it). */
typedef struct text_stream text_stream;

/* context_token: the last token before the generation (e.g. the prompt's last id), or -1 when none. */
text_stream *text_stream_new(const tokenizer *tok, int32_t context_token);
void text_stream_free(text_stream *ts);
/* Push one id; *out points to the newly final bytes (valid until the next call), *out_len may be 0. */
int text_stream_push(text_stream *ts, int32_t id, const char **out, size_t *out_len);
/* End of generation: whatever is still held back (an incomplete UTF-8 tail is emitted as U+FFFD). */
int text_stream_flush(text_stream *ts, const char **out, size_t *out_len);

#endif
