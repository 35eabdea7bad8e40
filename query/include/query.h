/*
 * query/include/query.h -- the query evaluator of kvfts: the one header other modules
 * (lib/kvfts_search.c) include from query/.
 *
 * A search runs in three steps, each in its own file:
 *
 *   qry_parse.c   query text -> plan (a tree of qry_node).  The parser reads
 *                 the syntax (README "Query syntax") and passes every word
 *                 through the analyzer of the field it targets, so the plan
 *                 holds index terms, not user words.  Errors name the byte
 *                 offset in the query ("query: unbalanced '(' at 7").
 *   qry_iter.c    plan -> posting iterators (term, phrase, prefix union, AND,
 *                 OR, AND NOT) with next / skip_to over internal doc ids,
 *                 modeled on RediSearch's QueryIterator.
 *   qry_run.c     iterate the root, count the matches, score them with BM25
 *                 and keep the top k in a bounded heap.
 *
 * Everything that reads the index runs inside the caller's (snapshot)
 * transaction, so one search sees one consistent state.
 */
#ifndef KVFTS_QUERY_H
#define KVFTS_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index.h"
#include "kv.h"
#include "tokenizer.h"

/** Most expansions of a prefix that rank as terms of their own (BM25 each,
 *  summed).  A prefix may expand to any number of terms; past this many it
 *  is evaluated as one pseudo-term over a per-document byte array and ranks
 *  as that one term (qry_iter.c "prefix", README "Query syntax"). */
#define QRY_SCORED_EXPANSION 1000
/** Default memory bound of a prefix expansion's working set, in bytes. */
#define QRY_DEFAULT_MEM ((size_t)256 << 20)
/** Deepest nesting of parentheses. */
#define QRY_MAX_DEPTH 64
/** Longest query text, in bytes. */
#define QRY_MAX_QUERY 262144
/** Most words and phrases in one query (a 10,000-term OR is answered). */
#define QRY_MAX_TERMS 10000

/** BM25 parameters. */
#define QRY_BM25_K1 1.2
#define QRY_BM25_B 0.75

/* ------------------------------------------------------------------------ */
/* The plan (qry_parse.c)                                                    */

typedef enum qry_kind {
    QRY_EMPTY = 0,  /* matches nothing (a stop word, an empty analysis) */
    QRY_TERM,       /* one (field, term) */
    QRY_PHRASE,     /* terms at fixed relative positions in one field */
    QRY_PREFIX,     /* every term of the field starting with terms[0] */
    QRY_AND,        /* all positive kids, none of the negative ones */
    QRY_OR          /* any kid */
} qry_kind;

typedef struct qry_node qry_node;
struct qry_node {
    qry_kind kind;
    bool neg;             /* a NOT kid of an AND */
    size_t pos;           /* byte offset in the query text (for messages) */
    char *field;          /* TERM, PHRASE, PREFIX: NUL-terminated path
                             (it, terms, tlens and offs share the node's
                             allocation) */
    size_t flen;
    size_t nterms;        /* TERM, PREFIX: 1; PHRASE: >= 2 */
    char **terms;         /* NUL-terminated index terms */
    size_t *tlens;
    uint32_t *offs;       /* PHRASE: position of term i relative to term 0 */
    size_t nkids;         /* AND, OR */
    qry_node **kids;
};

/** Parse and analyze query @p q (UTF-8, @p len bytes) under analysis @p a
 *  (borrowed during the call).
 *  @param[out] out  caller owns; qry_node_free().  NULL on failure.
 *  @return KVFTS_OK, KVFTS_EINVAL (syntax: message "query: <what> at <byte
 *          offset>", err->pos = that offset), KVFTS_ENOMEM. */
int qry_parse(qry_node **out, tok_analysis *a, const char *q, size_t len,
              kv_err *err);
void qry_node_free(qry_node *n);            /* NULL: no-op */

/** A canonical one-line form of a plan, for tests and debugging:
 *  AND(f:a, -f:b, OR(f:c, f:d), f:"x y", f:"x _ y" (a gap), f:pre*), EMPTY. */
int qry_node_dump(const qry_node *n, kv_buf *out, kv_err *err);

/** Test hook: rounds of candidates a phrase count has checked from its
 *  terms' blocks whole (idx_postings_block), since the process began. */
uint64_t qry_test_phrase_block_rounds(void);

/** Test hook: NOT counts taken as the positive term's count less what it
 *  shares with the (much smaller) negative kid, since the process began. */
uint64_t qry_test_not_subtracted(void);

/** Test hook: postings cursors of terms and phrases searches have opened,
 *  since the process began (a word repeated in a phrase, an AND or an OR
 *  opens one). */
uint64_t qry_test_cursors(void);

/** Test hook: while on, every search's deadline has passed (its time
 *  limit, when it has one, is reached at the first look at the clock). */
void qry_test_clock_expired(bool on);

/* ------------------------------------------------------------------------ */
/* Running a search (qry_run.c)                                              */

typedef struct qry_hit {
    uint32_t docid;
    double score;
} qry_hit;

typedef struct qry_run_options {
    size_t k;             /* keep the best k hits; 0 = every hit */
    bool count_only;      /* count matches; no scoring, no hits */
    idx_lens_cache *lens; /* the handle's length columns, or NULL */
    idx_dict_cache *dict; /* the handle's dictionary chunks, or NULL */
    /* Resource bounds (README "Query syntax", "Huge prefixes").  Reaching
     * one stops the work it bounds; the answer is what was found so far,
     * flagged partial, or KVFTS_ELIMIT when exact is set. */
    size_t mem_limit;     /* bytes a prefix expansion may hold; 0 = default
                             (QRY_DEFAULT_MEM) */
    unsigned time_limit_ms;   /* expanding prefixes; 0 = no limit */
    bool exact;           /* a bound reached is an error, not partial */
    bool *partial;        /* out (NULL: not wanted): a bound cut the answer,
                             so total and hits cover part of the matches */
} qry_run_options;

/** Evaluate plan @p plan in @p txn: *@p total = the exact number of matching
 *  documents; unless count_only, *@p hits = the best k (all when k = 0) by
 *  score descending, ties by doc id ascending (caller owns; kv_free()).
 *  @return KVFTS_OK (also when a bound cut the answer: *o->partial),
 *          KVFTS_ELIMIT (a bound reached with o->exact), or an error of
 *          qry_iter_build() / the index. */
int qry_run(kv_txn *txn, const qry_node *plan, const qry_run_options *o,
            qry_hit **hits, size_t *nhits, uint64_t *total, kv_err *err);

#endif /* KVFTS_QUERY_H */
