/*
 * tokenizer.h — SentencePiece tokenizer.model through our own thin extern "C" binding (spm_binding.cc, the
 * only C++ file of libengine) over libsentencepiece, plus a streaming detokenizer in C.
 * A loaded tokenizer is read-only: every call here is safe from many threads at once.
 */
#ifndef MNEMO_TOKENIZER_H
#define MNEMO_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

/* 0 on success; -1 with a message naming the file (missing, not a SentencePiece model). */
int tokenizer_load(const char *model_path, tokenizer **out, char *err, size_t errlen);
/* The same from a serialized ModelProto in memory (a GGUF file's tokenizer); what names it in messages. */
int tokenizer_load_proto(const void *bytes, size_t len, const char *what, tokenizer **out, char *err, size_t errlen);
void tokenizer_free(tokenizer *tok);                              /* NULL is a no-op */

int32_t tokenizer_vocab_size(const tokenizer *tok);
int32_t tokenizer_bos_id(const tokenizer *tok);                   /* -1 when the model has none */
int32_t tokenizer_eos_id(const tokenizer *tok);
int32_t tokenizer_unk_id(const tokenizer *tok);
int32_t tokenizer_pad_id(const tokenizer *tok);

/* Encode UTF-8 text; *ids is malloc'ed (free() it), *n its length. add_bos prepends the BOS id.
 * 0 on success, -1 on failure (allocation, invalid model state). */
int tokenizer_encode(const tokenizer *tok, const char *text, size_t len, bool add_bos, int32_t **ids, size_t *n);
/* The same, encoding long texts in pieces of about piece_bytes where the model allows (0: whole); the ids are
 * those of the whole text. tokenizer_encode uses 64 KiB pieces, which bound SentencePiece's working memory. */
int tokenizer_encode_pieces(const tokenizer *tok, const char *text, size_t len, bool add_bos, size_t piece_bytes,
                            int32_t **ids, size_t *n);
bool tokenizer_encodes_in_pieces(const tokenizer *tok); /* the model's flags allow it (else always whole) */
/* Decode ids to text; *text is malloc'ed and NUL-terminated, *len excludes the NUL. Byte-fallback pieces
 * become their bytes. -1 if an id is outside [0, vocab). */
int tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n, char **text, size_t *len);
/* The piece of one id, malloc'ed, NUL-terminated. -1 if out of range. */
int tokenizer_id_to_piece(const tokenizer *tok, int32_t id, char **piece, size_t *len);
/* -1 when the piece is not in the vocabulary (SentencePiece's unk mapping is not reported as a hit). */
int32_t tokenizer_piece_to_id(const tokenizer *tok, const char *piece);
bool tokenizer_is_control(const tokenizer *tok, int32_t id);      /* <s>, </s>, ... */
bool tokenizer_is_byte(const tokenizer *tok, int32_t id);         /* <0xNN> byte-fallback piece */
/* A piece's score and SentencePiece type (1 normal, 2 unknown, 3 control, 5 unused, 6 byte; user-defined pieces
 * report 1), as GGUF's tokenizer.ggml.scores / token_type store them. -1 if id is out of range. */
int tokenizer_piece_info(const tokenizer *tok, int32_t id, float *score, int *type);

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
