/*
 * query/qry_int.h -- private to query/: the posting iterators (qry_iter.c)
 * that qry_run.c drives.  Other modules cannot include it: only
 * query/include/ is on their include path.
 */
#ifndef KVFTS_QRY_INT_H
#define KVFTS_QRY_INT_H

#include "query.h"

/* ------------------------------------------------------------------------ */
/* Iterators (qry_iter.c)                                                    */

/** Status of an iterator move (RediSearch's IteratorStatus).  Errors are the
 *  negative kvfts_status codes, with err set; after one the iterator may
 *  only be freed.
 *   QRY_OK        positioned on a match; for skip_to, on exactly the target
 *   QRY_NOTFOUND  skip_to only: positioned on the first match after target
 *   QRY_EOF       no more matches; docid is UINT32_MAX from now on */
typedef enum qry_status {
    QRY_OK = 0,
    QRY_NOTFOUND = 1,
    QRY_EOF = 2
} qry_status;

typedef struct qry_ctx qry_ctx;
typedef struct qry_iter qry_iter;

/** A posting iterator over internal doc ids, in ascending order.  Before the
 *  first move docid is 0 (ids start at 1). */
struct qry_iter {
    /** Move to the next match. */
    int (*next)(qry_iter *it, kv_err *err);
    /** Move to the first match with id >= @p docid; never backwards (a
     *  target at or before the current match reports on the current one). */
    int (*skip_to)(qry_iter *it, uint32_t docid, kv_err *err);
    /** Add the BM25 score of the current match to *@p sum. */
    int (*score)(qry_iter *it, qry_ctx *cx, double *sum, kv_err *err);
    void (*free)(qry_iter *it);
    /** Count every match of an iterator that has not moved yet (it is
     *  spent after); NULL: qry_iter_count() walks next. */
    int (*count)(qry_iter *it, uint64_t *n, kv_err *err);
    /** An upper bound of the score of every match from the current one to
     *  *@p upto (set here, >= docid) from the blocks' max tf (block-max
     *  pruning); NULL: no bound (INFINITY). */
    double (*bound)(qry_iter *it, qry_ctx *cx, uint32_t *upto);
    idx_postings *post;   /* a term's postings (array intersections), or
                             NULL */
    bool exact_est;       /* est is the exact count (a term: its entries) */
    bool tight;           /* bound tightly where that costs more (a term
                             root skipping blocks), else cheaply */
    uint32_t docid;       /* the current match */
    uint64_t est;         /* at most this many matches (orders AND kids) */
    bool eof;
};

/** Search state shared by the iterators of one search: the transaction,
 *  per-field statistics and the current document's field lengths; terms
 *  found through the handle's dictionary cache @p dict (or NULL). */
int qry_ctx_new(qry_ctx **out, kv_txn *txn, idx_dict_cache *dict,
                kv_err *err);
void qry_ctx_free(qry_ctx *cx);             /* NULL: no-op */

/** Bounds of the search: @p mem_limit bytes a prefix's expansion may hold
 *  (0: QRY_DEFAULT_MEM), @p time_limit_ms from now (0: none) for the
 *  expansions and the ranking walk (qry_ctx_late); @p exact makes reaching
 *  one KVFTS_ELIMIT rather than a partial answer. */
void qry_ctx_limits(qry_ctx *cx, size_t mem_limit, unsigned time_limit_ms,
                    bool exact);
/** True when a bound cut an expansion or the ranking walk of this search. */
bool qry_ctx_partial(const qry_ctx *cx);
/** Every 1,024 calls (matches walked): is the search's time up?  0: go on.
 *  1: it is, and the search is now partial (stop, answer with what was
 *  found).  KVFTS_ELIMIT: it is, and the bounds are exact (@p found, the
 *  matches walked, goes in the message). */
int qry_ctx_late(qry_ctx *cx, uint64_t *ticks, uint64_t found, kv_err *err);
/** The search only counts: fields' BM25 statistics are not read (a
 *  one-term count was a fifth slower reading them). */
void qry_ctx_unscored(qry_ctx *cx);

/** Build the iterator of plan @p n (postings opened in @p cx's transaction;
 *  prefixes expanded).  A term that is absent gives an iterator at EOF, and
 *  makes its AND one.
 *  A prefix's expansion stops early when it reaches a bound of
 *  qry_ctx_limits(): then qry_ctx_partial() is true, or the build fails
 *  with KVFTS_ELIMIT when the bounds are exact.
 *  @return KVFTS_OK, KVFTS_EINVAL (a phrase on terms stored without
 *          positions), KVFTS_ELIMIT, KVFTS_ENOMEM, KVFTS_ECORRUPT,
 *          KV_RETRY, KVFTS_ERROR. */
int qry_iter_build(qry_iter **out, qry_ctx *cx, const qry_node *n,
                   kv_err *err);
void qry_iter_free(qry_iter *it);           /* NULL: no-op */
/** The exact number of matches of @p it, which has not moved yet and is
 *  spent after: its count method, else a walk. */
int qry_iter_count(qry_iter *it, uint64_t *n, kv_err *err);

/** Rank with the length columns of @p c (idx_lens_cache) for the fields of
 *  @p cx: those already cached, and the others too when the query may
 *  match @p est documents, a good part of a field's. */
int qry_ctx_columns(qry_ctx *cx, idx_lens_cache *c, uint64_t est,
                    kv_err *err);

/** BM25 of one (field, term) leaf: @p idf as qry_idf(), term frequency
 *  @p tf, field length @p dl and average field length @p avgdl. */
double qry_bm25(double idf, double tf, double dl, double avgdl);
/** ln(1 + (N - df + 0.5) / (df + 0.5)). */
double qry_idf(uint64_t n_docs, uint64_t df);


#endif /* KVFTS_QRY_INT_H */
