/*
 * fot_schedule.h — FoT cross-batch schedules (paper §3.2, Appendix A.2 and B.3): which extra
 * contexts each batch row's memory layers attend to.
 *
 * Text: segments "F(P,N)" separated by commas, F a fraction of the batch ("1/4", "1/2", "1"), P the number of
 * previous contexts of the row's own document it sees (positives), N the number of contexts of other documents
 * (negatives); the fractions sum to 1. The paper's LongLLaMA-3B schedule is "1/4(0,0),1/4(1,1),1/4(2,1),1/4(3,0)".
 *
 * Layout (the reference's doc-aware packing, fot_continued_pretraining): a document occupies K consecutive rows of
 * seq_len tokens (K = the least common denominator of the fractions; one run of K * seq_len + 1 tokens cut into K
 * rows overlapping by one), and its rows are handed to the segments in the order written: with the schedule above
 * K = 4 and row j of every document is in segment j. So each segment holds its fraction of the batch's rows.
 * Row j of document g (batch row g*K + j of D*K):
 *   positives: rows j-P .. j-1 of the same document (its previous local contexts), so P <= j is required;
 *   negatives: the N rows just before the document's first row, cyclically over the micro-batch (the last rows of
 *              document g-1, then g-2, ...), which are other documents' as long as N <= (D-1) K.
 *   mirrored negatives (an optional third number M, "F(P,N,M)"): rows j-P .. j-1 of the M documents before g,
 *              cyclically (g-1, ..., g-M): other documents' contexts at the same place as the row's positives, the
 *              paper's own cross-batch (§3.2: "d-1 contexts from unrelated documents coming from Cprev"; its
 *              dictionary-lookup model trains with "1/2(0,0),1/2(1,0,127)", d = 128). Unlike the tail negatives
 *              they have the shape of the row's own history: in a document of definitions then queries, a query
 *              row's mirrored negatives are definitions too. M needs P >= 1 and M <= D-1; a row the tail
 *              negatives already list is seen once.
 * Extra contexts are seen whole (no causal mask) with keys unrotated (encoded at the local window's first position,
 * as the inference path stores memory), in one softmax with the row's causal local keys (fot_attention.h).
 */
#ifndef MNEMO_FOT_SCHEDULE_H
#define MNEMO_FOT_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#define FOT_MAX_K 256 /* rows per document (long documents in short rows: 4096 tokens in rows of 16) */

typedef struct {
    int32_t K;                   /* rows (contexts) per document */
    int32_t pos[FOT_MAX_K];      /* per row of a document: positives */
    int32_t neg[FOT_MAX_K];      /* per row of a document: negatives */
    int32_t mir[FOT_MAX_K];      /* per row of a document: documents whose copies of its positives it sees */
} fot_schedule;

/* 0, or -1 with a message naming the problem (syntax, fractions not summing to 1, a segment whose positives its
 * rows cannot have, more than FOT_MAX_K rows per document). */
int fot_schedule_parse(fot_schedule *s, const char *text, char *err, size_t errlen);

/* The largest number of extra contexts of any row. */
int32_t fot_schedule_max_extra(const fot_schedule *s);

/* 0 when a micro-batch of `docs` documents can supply every row's negatives from other documents; else -1 with
 * a message. */
int fot_schedule_check_docs(const fot_schedule *s, int32_t docs, char *err, size_t errlen);

/* The batch rows that row r (0 <= r < docs*K) attends to as extra contexts, positives first (oldest first), then
 * negatives (nearest first), then mirrored negatives (document g-1 first), into out (fot_schedule_max_extra entries at most). Returns their number. */
int32_t fot_extra_rows(const fot_schedule *s, int32_t docs, int32_t r, int32_t *out);

#endif
