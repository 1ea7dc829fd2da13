/*
 * eval_tasks.h — the data and the arithmetic of `mnemo eval`, apart from any model so each can be
 * tested on a case with a known answer. A model is reached only through an eval_scorer (eval_scorer.h).
 *
 *   forgetting curve: copy input [bos]S[bos]S and language-model input
 *     [bos]I[bos]S, S and I disjoint spans of one text, each |S| = (L - 2) / 2 tokens for a test length L; the
 *     accuracy is teacher-forced argmax accuracy on the second half of the second S (the first half shows the
 *     model the copying). Fine memory length: the longest tested L whose copy accuracy is >= 99%; coarse: the
 *     longest whose copy accuracy exceeds the LM accuracy by more than 1 point.
 *   dictionary lookup (FoT Appendix F): a 64-token vocabulary; definitions <k> k1..k4 <v> v1..v4, then queries
 *     <q> k1..k4 <v> v1..v4 on random defined keys filling the last query_tokens tokens; only the queries' values
 *     are scored.
 *   perplexity: sliding windows of W tokens moving by S, each scoring only the tokens it adds.
 */
#ifndef MNEMO_EVAL_TASKS_H
#define MNEMO_EVAL_TASKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- a small seeded generator (xorshift64*), the same stream on every machine */
typedef struct {
    uint64_t s;
} eval_rng;
void eval_rng_seed(eval_rng *r, uint64_t seed);
uint64_t eval_rng_next(eval_rng *r);
/* Uniform in [0, n), n > 0. */
uint64_t eval_rng_below(eval_rng *r, uint64_t n);

/* ---- forgetting curve */
/* Span length |S| for test length L (L >= 6). */
int32_t eval_fc_span(int32_t length);
/* Where S and I come from: two disjoint spans of n_text tokens, each `span` long, drawn from r. false when the
 * text is shorter than 2 * span. */
bool eval_fc_pick(eval_rng *r, int64_t n_text, int32_t span, int64_t *s_start, int64_t *i_start);
/* The input of `length` tokens: [bos] first [bos] S, first = S (copy) or I (language model). out holds length
 * tokens. Returns the first scored position p: predictions at positions p .. length - 2 (of tokens p+1 ..
 * length-1) are the second half of the second S. */
int32_t eval_fc_input(const int32_t *text, int64_t first_start, int64_t s_start, int32_t length, int32_t bos,
                      int32_t *out);
/* The memory lengths from per-length mean accuracies (lengths ascending). *_beyond: the last tested length still
 * qualifies (the true length may be longer, printed as ">L"). 0 when none qualifies. */
typedef struct {
    int32_t fine, coarse;
    bool fine_beyond, coarse_beyond;
} eval_fc_lengths;
eval_fc_lengths eval_fc_memory_lengths(const int32_t *lengths, const double *copy_acc, const double *lm_acc, int n);

/* ---- dictionary lookup */
enum {
    EVAL_DICT_VOCAB = 64, /* ids 0..63: 0 unk, 1 bos, 2 eos (SentencePiece's), 3 <k>, 4 <v>, 5 <q>, 6.. symbols */
    EVAL_DICT_K = 3,
    EVAL_DICT_V = 4,
    EVAL_DICT_Q = 5,
    EVAL_DICT_FIRST_SYMBOL = 6,
    EVAL_DICT_SYMBOLS = EVAL_DICT_VOCAB - EVAL_DICT_FIRST_SYMBOL, /* 58; 58^4 = 11.3M distinct keys */
    EVAL_DICT_RECORD = 10,                                       /* <k> k1..k4 <v> v1..v4 */
};
/* One document of n tokens: BOS, definitions, then queries in the last query_tokens tokens (rounded down to whole
 * records; the definitions take what is left, whole records, any remainder padded at the front with extra
 * definitions' tails never scored). score[t] = 1 when tokens[t] is a queried value (scored as the prediction made
 * at t - 1). Keys are distinct within a document (a permutation of the key space), queries ask defined keys.
 * Returns the number of scored tokens, or -1 when n cannot hold one definition and one query. */
int64_t eval_dict_document(eval_rng *r, int64_t n, int64_t query_tokens, int32_t *tokens, uint8_t *score);
/* Training data only (the evaluation's documents stay the paper's): near misses among a document's definitions, so
 * that part of a key, or a value's first tokens, cannot answer a query. Each definition after the first, with
 * probability percent/100, takes 2 or 3 of its key's positions from an earlier definition (keys stay distinct), and
 * independently its first 2 or 3 values from one. Queries are rewritten to follow their definitions. tokens: a
 * document eval_dict_document wrote (every query asks a defined key). */
void eval_dict_confuse(eval_rng *r, int32_t *tokens, int64_t n, int percent);

/* ---- perplexity: sliding windows over a token stream of n tokens (tokens[0] is BOS) */
typedef struct {
    int64_t start;  /* the window's first text token */
    int64_t end;    /* one past its last */
    int64_t scored; /* it scores the predictions of tokens end - scored .. end - 1 */
} eval_window;
/* Window i (0-based) for window W and stride S (1 <= S <= W - 1): the first window scores all its tokens but the
 * first; later ones add S tokens each with W - 1 - S ... earlier tokens as context (a window re-reads BOS first, so
 * it holds W tokens in all). false past the last window. */
bool eval_ppl_window(int64_t n, int32_t window, int32_t stride, int64_t i, eval_window *out);

#endif
