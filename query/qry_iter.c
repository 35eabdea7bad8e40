/*
 * qry_iter.c -- posting iterators: the plan turned into a tree of iterators
 * over internal doc ids, each with next / skip_to and a status (query.h),
 * as RediSearch's QueryIterator.
 *
 *   term    one (field, term): an idx_postings; skip_to uses its block skip
 *           (binary search inside a block, a B-tree range seek across).
 *   phrase  the terms' postings intersected (rarest first), then the
 *           positions checked: a match is a start s with every term i at
 *           s + offs[i]; the phrase frequency is the number of such s.
 *   or      a min-heap of kids by doc id (prefix expansions are ORs of
 *           terms); the current match is the heap top.
 *   and     leapfrog intersection of the positive kids in ascending order of
 *           their estimated counts (df): the rarest kid proposes, the others
 *           skip_to it, and any that overshoots proposes again; then every
 *           negative kid is skipped to the candidate, and a candidate one of
 *           them holds is dropped.  An AND with a kid that has no postings
 *           at all is built as an empty iterator, so an absent term costs one
 *           header lookup and nothing else.
 *   empty   never matches.
 *
 * Counting (qry_iter.count) and pruning bounds (qry_iter.bound) are
 * optional per iterator: without a count an iterator is walked, without a
 * bound a query containing it is not pruned.  Their essays are at
 * "array intersections" and at term_bound().
 *
 * Invariants: an iterator's docid only grows; after QRY_EOF it is
 * UINT32_MAX and every move returns QRY_EOF again; skip_to to a target at or
 * before the current match does not move.
 *
 * Scoring (BM25, k1 = 1.2, b = 0.75, per (field, term) leaf, from live
 * statistics): idf = ln(1 + (N - df + 0.5) / (df + 0.5)), N = documents that
 * have the field (idx_field_stats), df = the term's live document count;
 * tf from the posting; dl = the field's length in the document (terms,
 * idx_doc_field_len), avgdl = the field's total length / N.  A document's
 * score is the sum over the leaves that match it: every positive kid of an
 * AND, the kids of an OR that sit on the document, nothing for negative
 * kids.  A phrase scores as its terms would with the phrase frequency as
 * their tf: (sum of the terms' idf) * tfnorm(phrase frequency, dl) -- what
 * Lucene does, and it keeps a phrase from scoring when only its words, not
 * the phrase, occur often.  A prefix of up to QRY_SCORED_EXPANSION terms
 * scores each expanded term that matches; a larger one scores as a single
 * pseudo-term (see "prefix" below for the rule and why).
 */
#include "qry_int.h"

#include <math.h>
#include <string.h>
#include <time.h>

/* ---- context: field statistics, the current document's lengths ---------- */

typedef struct qry_field {
    char *name;
    size_t len;
    uint64_t docs;        /* N */
    double avgdl;
    uint32_t id;          /* id in the length records (0: never indexed) */
    uint32_t dl_doc;      /* document whose length dl is (0: none) */
    uint32_t dl;
    const uint32_t *col;  /* every document's length, by id (NULL: read
                             them through the reader) */
    uint32_t ncol;
} qry_field;

struct qry_ctx {
    kv_txn *txn;
    idx_reader *r;          /* the index as txn sees it */
    qry_field *fields;
    size_t nfields, cap;
    idx_lens_reader *lens;  /* opened at the first length asked for */
    size_t mem_limit;       /* bytes an expansion may hold */
    uint64_t deadline;      /* CLOCK_MONOTONIC ns; 0: none */
    bool exact;             /* a bound reached is KVFTS_ELIMIT */
    bool partial;           /* a bound cut an expansion */
    bool unscored;          /* counting only: no field statistics */
};

int qry_ctx_new(qry_ctx **out, kv_txn *txn, idx_dict_cache *dict,
                kv_err *err)
{
    *out = kv_calloc(1, sizeof **out);
    if (!*out)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    (*out)->txn = txn;
    (*out)->mem_limit = QRY_DEFAULT_MEM;
    int rc = idx_reader_open_dict(&(*out)->r, txn, dict, err);
    if (rc) {
        kv_free(*out);
        *out = NULL;
    }
    return rc;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static _Atomic bool clock_expired;   /* test hook: every deadline passed */

void qry_test_clock_expired(bool on)
{
    clock_expired = on;
}

/* Whether a search's deadline (not 0) has passed. */
static bool past(uint64_t deadline)
{
    return clock_expired || now_ns() >= deadline;
}

void qry_ctx_limits(qry_ctx *cx, size_t mem_limit, unsigned time_limit_ms,
                    bool exact)
{
    cx->mem_limit = mem_limit ? mem_limit : QRY_DEFAULT_MEM;
    cx->deadline = time_limit_ms ? now_ns() + time_limit_ms * 1000000ull
                                 : 0;
    cx->exact = exact;
}

bool qry_ctx_partial(const qry_ctx *cx)
{
    return cx->partial;
}

int qry_ctx_late(qry_ctx *cx, uint64_t *ticks, uint64_t found, kv_err *err)
{
    if (!cx->deadline || (++*ticks & 1023) != 0 || !past(cx->deadline))
        return 0;
    if (cx->exact)
        return kv_seterr(err, KVFTS_ELIMIT, "query: the search reached its "
                         "time limit after %llu matches",
                         (unsigned long long)found);
    cx->partial = true;
    return 1;
}

void qry_ctx_unscored(qry_ctx *cx)
{
    cx->unscored = true;
}

void qry_ctx_free(qry_ctx *cx)
{
    if (!cx)
        return;
    for (size_t i = 0; i < cx->nfields; i++)
        kv_free(cx->fields[i].name);
    kv_free(cx->fields);
    idx_lens_reader_close(cx->lens);
    idx_reader_close(cx->r);
    kv_free(cx);
}

static int ctx_field(qry_ctx *cx, const char *name, size_t len, size_t *idx,
                     kv_err *err)
{
    for (size_t i = 0; i < cx->nfields; i++)
        if (cx->fields[i].len == len && memcmp(cx->fields[i].name, name,
                                               len) == 0) {
            *idx = i;
            return KVFTS_OK;
        }
    if (cx->nfields == cx->cap) {
        size_t cap = cx->cap ? cx->cap * 2 : 4;
        qry_field *f = kv_realloc(cx->fields, cap * sizeof *f);
        if (!f)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        cx->fields = f;
        cx->cap = cap;
    }
    qry_field *f = &cx->fields[cx->nfields];
    memset(f, 0, sizeof *f);
    uint64_t total = 0;
    /* Counting needs neither statistics nor the id (lengths). */
    int rc = cx->unscored ? KVFTS_OK
                          : idx_field_stats(cx->txn, name, len, &f->docs,
                                            &total, &f->id, err);
    if (rc)
        return rc;
    f->avgdl = f->docs ? (double)total / (double)f->docs : 0.0;
    f->name = kv_strndup(name, len);
    if (!f->name)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    f->len = len;
    *idx = cx->nfields++;
    return KVFTS_OK;
}

static int ctx_dl(qry_ctx *cx, size_t field, uint32_t docid, double *dl,
                  kv_err *err)
{
    qry_field *f = &cx->fields[field];
    if (f->col) {
        *dl = docid < f->ncol ? f->col[docid] : 0;
        return KVFTS_OK;
    }
    if (f->dl_doc != docid) {
        int rc = cx->lens ? KVFTS_OK
                          : idx_lens_reader_open(&cx->lens, cx->txn, err);
        if (!rc)
            rc = idx_lens_reader_get(cx->lens, docid, f->id, &f->dl, err);
        if (rc)
            return rc;
        f->dl_doc = docid;
    }
    *dl = f->dl;
    return KVFTS_OK;
}

int qry_ctx_columns(qry_ctx *cx, idx_lens_cache *c, uint64_t est,
                    kv_err *err)
{
    int rc = idx_lens_cache_sync(c, cx->txn, err);
    for (size_t i = 0; !rc && i < cx->nfields; i++) {
        qry_field *f = &cx->fields[i];
        /* Reading a column costs about what scoring a thirtieth as many
         * documents through the reader does (a step or seek each), and it
         * serves every later search until the lengths change: worth it
         * past docs / 64 matches. */
        bool build = est >= f->docs / 64;
        rc = idx_lens_cache_column(c, cx->txn, f->id, build, &f->col,
                                   &f->ncol, err);
    }
    return rc;
}

double qry_idf(uint64_t n_docs, uint64_t df)
{
    double n = (double)n_docs, d = (double)df;
    return log(1.0 + (n - d + 0.5) / (d + 0.5));
}

double qry_bm25(double idf, double tf, double dl, double avgdl)
{
    double norm = avgdl > 0 ? dl / avgdl : 0.0;
    return idf * tf * (QRY_BM25_K1 + 1.0) /
           (tf + QRY_BM25_K1 * (1.0 - QRY_BM25_B + QRY_BM25_B * norm));
}

static int at_eof(qry_iter *it)
{
    it->eof = true;
    it->docid = UINT32_MAX;
    return QRY_EOF;
}

/* The status of skip_to(target) once positioned. */
static int landed(const qry_iter *it, uint32_t target)
{
    if (it->eof)
        return QRY_EOF;
    return it->docid == target ? QRY_OK : QRY_NOTFOUND;
}

void qry_iter_free(qry_iter *it)
{
    if (it)
        it->free(it);
}

int qry_iter_count(qry_iter *it, uint64_t *n, kv_err *err)
{
    if (it->count)
        return it->count(it, n, err);
    uint64_t c = 0;
    int rc;
    while ((rc = it->next(it, err)) == QRY_OK)
        c++;
    *n = c;
    return rc == QRY_EOF ? KVFTS_OK : rc;
}

/* A kid's bound; INFINITY without one. */
static double kid_bound(qry_iter *k, qry_ctx *cx, uint32_t *upto)
{
    if (k->bound)
        return k->bound(k, cx, upto);
    *upto = k->docid;
    return INFINITY;
}

/* ---- array intersections (counting) --------------------------------------
 *
 * Counting an AND or a phrase works on arrays of doc ids, a block at a
 * time, instead of a skip_to per candidate: the lead's run of ids
 * (idx_postings_run: a block's ids as decoded, no copy) is copied into a
 * buffer, and each other list filters the buffer by merging it with its
 * own runs, galloping over ids, and skip_to only to get past a run; a
 * block none of the buffer's ids fall in is stepped over by its key and
 * header (idx_postings_skip_to), never decoded. */

/* Keep in buf[0..m) (ascending) the ids postings p holds (keep) or does
 * not hold (!keep); *out = how many are kept.  p only moves forward. */
#define ISECT_FEW 4
static int isect_postings(idx_postings *p, uint32_t *buf, size_t m,
                          bool keep, size_t *out, kv_err *err)
{
    size_t o = 0, j = 0;
    bool over = false;
    while (j < m && !over) {
        int rc = idx_postings_skip_to(p, buf[j], err);
        if (rc == KVFTS_ITEROVER)
            break;
        if (rc)
            return rc;
        /* Few of the ids fall in p's loaded block (a sparse buffer against
         * a dense list): a skip_to each, instead of the block's run. */
        uint32_t last = idx_postings_block_last(p);
        size_t e = j;
        while (e < m && buf[e] <= last && e - j <= ISECT_FEW)
            e++;
        if (e - j <= ISECT_FEW) {
            for (; j < e; j++) {
                rc = idx_postings_skip_to(p, buf[j], err);
                if (rc == KVFTS_ITEROVER) {
                    over = true;
                    break;
                }
                if (rc)
                    return rc;
                if ((idx_postings_docid(p) == buf[j]) == keep)
                    buf[o++] = buf[j];
            }
            continue;
        }
        const uint32_t *r;
        uint32_t rn, x = 0;
        if ((rc = idx_postings_run(p, &r, &rn, err)))
            return rc;
        if (rn == 0)          /* cannot happen once positioned */
            return kv_seterr(err, KVFTS_ERROR, "query: empty run");
        while (j < m && x < rn) {
            if (buf[j] < r[x]) {
                if (!keep)
                    buf[o++] = buf[j];
                j++;
            } else if (buf[j] > r[x]) {
                x = idx_gallop(r, x + 1, rn, buf[j]);
            } else {
                if (keep)
                    buf[o++] = buf[j];
                j++;
                x++;
            }
        }
    }
    if (!keep)
        while (j < m)
            buf[o++] = buf[j++];
    *out = o;
    return KVFTS_OK;
}

/* The same through any iterator: a skip_to per id. */
static int isect_iter(qry_iter *k, uint32_t *buf, size_t m, bool keep,
                      size_t *out, kv_err *err)
{
    if (k->post)
        return isect_postings(k->post, buf, m, keep, out, err);
    size_t o = 0, j = 0;
    for (; j < m; j++) {
        int rc = k->skip_to(k, buf[j], err);
        if (rc < 0)
            return rc;
        if (rc == QRY_EOF)
            break;
        if ((rc == QRY_OK) == keep)
            buf[o++] = buf[j];
    }
    if (!keep)
        while (j < m)
            buf[o++] = buf[j++];
    *out = o;
    return KVFTS_OK;
}

/* A buffer of candidate ids. */
typedef struct idbuf {
    uint32_t *v;
    uint32_t cap;
} idbuf;

static int idbuf_reserve(idbuf *b, size_t n, kv_err *err)
{
    if (n <= b->cap)
        return KVFTS_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < n)
        cap *= 2;
    if (cap > UINT32_MAX)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    uint32_t *v = kv_realloc(b->v, cap * sizeof *v);
    if (!v)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    b->v = v;
    b->cap = (uint32_t)cap;
    return KVFTS_OK;
}

/* Candidates a non-term lead gives per round. */
#define LEAD_CHUNK 256

/* The next round of candidates of postings @p p (positioned on its next
 * one) into b: its run.  *m = 0 at the end. */
static int run_copy(idx_postings *p, idbuf *b, size_t *m, kv_err *err)
{
    const uint32_t *r;
    uint32_t rn;
    int rc = idx_postings_run(p, &r, &rn, err);
    if (!rc)
        rc = idbuf_reserve(b, rn, err);
    if (rc)
        return rc;
    memcpy(b->v, r, (size_t)rn * sizeof *r);
    *m = rn;
    return KVFTS_OK;
}

/* ---- empty --------------------------------------------------------------- */

static int empty_next(qry_iter *it, kv_err *err)
{
    (void)err;
    return at_eof(it);
}

static int empty_skip(qry_iter *it, uint32_t docid, kv_err *err)
{
    (void)docid;
    (void)err;
    return at_eof(it);
}

static int empty_score(qry_iter *it, qry_ctx *cx, double *sum, kv_err *err)
{
    (void)it;
    (void)cx;
    (void)sum;
    (void)err;
    return KVFTS_OK;
}

static double empty_bound(qry_iter *it, qry_ctx *cx, uint32_t *upto)
{
    (void)cx;
    *upto = it->docid;
    return 0.0;
}

static void plain_free(qry_iter *it)
{
    kv_free(it);
}

static int empty_new(qry_iter **out, kv_err *err)
{
    qry_iter *it = kv_calloc(1, sizeof *it);
    if (!it)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    it->next = empty_next;
    it->skip_to = empty_skip;
    it->score = empty_score;
    it->free = plain_free;
    it->bound = empty_bound;
    it->est = 0;
    at_eof(it);
    *out = it;
    return KVFTS_OK;
}

/* ---- a repeated clause ----------------------------------------------------
 *
 * An AND or OR that names the same clause more than once ("the the the", a
 * pasted text, a phrase or prefix said again) walks one iterator for it:
 * the repeat matches where the clause does and scores as the clauses
 * would, once per occurrence (its score added that many times, its bound
 * multiplied).  An AND of 5,000 `the` ranked the catalog in 25 s with a
 * cursor per word, and an OR of 2,000 `"for the"` counted in 65 s. */

typedef struct rep_it {
    qry_iter base;
    qry_iter *kid;
    size_t times;
} rep_it;

static int rep_sync(rep_it *r, int rc)
{
    r->base.docid = r->kid->docid;
    r->base.eof = r->kid->eof;
    return rc;
}

static int rep_next(qry_iter *it, kv_err *err)
{
    rep_it *r = (rep_it *)it;
    return rep_sync(r, r->kid->next(r->kid, err));
}

static int rep_skip(qry_iter *it, uint32_t docid, kv_err *err)
{
    rep_it *r = (rep_it *)it;
    return rep_sync(r, r->kid->skip_to(r->kid, docid, err));
}

/* The kid is scored once and its score added as many times as it is
 * named.  For a term, which adds one value, that is the sum the clauses
 * gave when they were added one after another (an AND's kids sorted by
 * estimate put them so, unless another kid has the same estimate); a
 * clause of several values (a phrase's terms, a prefix's expansions, a
 * group) is added as one.  Either may differ from the clauses' sum in the
 * last bit, as any change in the order of a sum may. */
static int rep_score(qry_iter *it, qry_ctx *cx, double *sum, kv_err *err)
{
    rep_it *r = (rep_it *)it;
    double x = 0.0;
    int rc = r->kid->score(r->kid, cx, &x, err);
    for (size_t i = 0; !rc && i < r->times; i++)
        *sum += x;
    return rc;
}

static int rep_count(qry_iter *it, uint64_t *n, kv_err *err)
{
    rep_it *r = (rep_it *)it;
    return qry_iter_count(r->kid, n, err);
}

static double rep_bound(qry_iter *it, qry_ctx *cx, uint32_t *upto)
{
    rep_it *r = (rep_it *)it;
    r->kid->tight = it->tight;
    return r->kid->bound(r->kid, cx, upto) * (double)r->times;
}

static void rep_free(qry_iter *it)
{
    rep_it *r = (rep_it *)it;
    qry_iter_free(r->kid);
    kv_free(r);
}

/* kid, standing for @p times clauses (taken over, freed on failure). */
static int rep_new(qry_iter **out, qry_iter *kid, size_t times, kv_err *err)
{
    if (times < 2) {
        *out = kid;
        return KVFTS_OK;
    }
    rep_it *r = kv_calloc(1, sizeof *r);
    if (!r) {
        qry_iter_free(kid);
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }
    r->kid = kid;
    r->times = times;
    r->base.next = rep_next;
    r->base.skip_to = rep_skip;
    r->base.score = rep_score;
    r->base.free = rep_free;
    r->base.count = rep_count;
    r->base.bound = kid->bound ? rep_bound : NULL;
    r->base.post = kid->post;
    r->base.exact_est = kid->exact_est;
    r->base.est = kid->est;
    rep_sync(r, 0);
    *out = &r->base;
    return KVFTS_OK;
}

/* Whether plans a and b are the same clause (kind, sign, field, terms,
 * phrase offsets and kids, all alike). */
static bool same_node(const qry_node *a, const qry_node *b)
{
    if (a->kind != b->kind || a->neg != b->neg || a->flen != b->flen ||
        a->nterms != b->nterms || a->nkids != b->nkids ||
        (a->flen && memcmp(a->field, b->field, a->flen)))
        return false;
    for (size_t i = 0; i < a->nterms; i++)
        if (a->tlens[i] != b->tlens[i] ||
            memcmp(a->terms[i], b->terms[i], a->tlens[i]) ||
            (a->offs && b->offs && a->offs[i] != b->offs[i]))
            return false;
    for (size_t i = 0; i < a->nkids; i++)
        if (!same_node(a->kids[i], b->kids[i]))
            return false;
    return true;
}

/* FNV-1a of what same_node compares. */
static uint64_t node_hash(const qry_node *k)
{
    uint64_t x = 1469598103934665603u;
    x = (x ^ (uint64_t)k->kind) * 1099511628211u;
    x = (x ^ (uint64_t)k->neg) * 1099511628211u;
    for (size_t b = 0; b < k->flen; b++)
        x = (x ^ (unsigned char)k->field[b]) * 1099511628211u;
    for (size_t i = 0; i < k->nterms; i++) {
        x = (x ^ 0xff) * 1099511628211u;
        for (size_t b = 0; b < k->tlens[i]; b++)
            x = (x ^ (unsigned char)k->terms[i][b]) * 1099511628211u;
        if (k->offs)
            x = (x ^ k->offs[i]) * 1099511628211u;
    }
    for (size_t i = 0; i < k->nkids; i++)
        x = (x ^ node_hash(k->kids[i])) * 1099511628211u;
    return x;
}

/* Per kid of @p n: how many kids it stands for (1 + the later kids that are
 * the same clause: a term, a phrase, a prefix or a group, with the same
 * sign), 0 for such a later kid.  Kids go into a hash set of their first
 * occurrences (open addressing, twice as many slots as kids): one look per
 * kid, however many. */
static int kid_times(const qry_node *n, size_t **out, kv_err *err)
{
    size_t cap = 4;
    while (cap < 2 * n->nkids)
        cap *= 2;
    size_t *t = kv_calloc(n->nkids ? n->nkids : 1, sizeof *t);
    size_t *set = kv_calloc(cap, sizeof *set);   /* kid index + 1, or 0 */
    if (!t || !set) {
        kv_free(t);
        kv_free(set);
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n->nkids; i++) {
        const qry_node *k = n->kids[i];
        uint64_t x = node_hash(k);
        size_t at = (size_t)(x ^ (x >> 32)) & (cap - 1);
        while (set[at] && !same_node(n->kids[set[at] - 1], k))
            at = (at + 1) & (cap - 1);
        if (set[at]) {
            t[set[at] - 1]++;
            t[i] = 0;
        } else {
            t[i] = 1;
            set[at] = i + 1;
        }
    }
    kv_free(set);
    *out = t;
    return KVFTS_OK;
}

/* ---- term ---------------------------------------------------------------- */

typedef struct term_it {
    qry_iter base;
    idx_postings *p;
    size_t field;         /* in the context */
    double idf;
    uint32_t bupto;       /* bval bounds the postings up to this id */
    double bval;
    bool bset;            /* bval, bupto are set */
} term_it;

static int term_moved(term_it *t, int rc)
{
    if (rc == KVFTS_ITEROVER)
        return at_eof(&t->base);
    if (rc)
        return rc;
    t->base.docid = idx_postings_docid(t->p);
    return QRY_OK;
}

static int term_next(qry_iter *it, kv_err *err)
{
    term_it *t = (term_it *)it;
    if (it->eof)
        return QRY_EOF;
    return term_moved(t, idx_postings_next(t->p, err));
}

static int term_skip(qry_iter *it, uint32_t docid, kv_err *err)
{
    term_it *t = (term_it *)it;
    if (it->eof || (it->docid && it->docid >= docid))
        return landed(it, docid);
    int rc = term_moved(t, idx_postings_skip_to(t->p, docid, err));
    return rc < 0 ? rc : landed(it, docid);
}

static int term_score(qry_iter *it, qry_ctx *cx, double *sum, kv_err *err)
{
    term_it *t = (term_it *)it;
    double dl;
    int rc = ctx_dl(cx, t->field, it->docid, &dl, err);
    if (!rc)   /* tfs are decoded on first use: a damaged stream shows here */
        rc = idx_postings_need(t->p, IDX_DECODE_TFS, err);
    if (!rc)
        *sum += qry_bm25(t->idf, idx_postings_tf(t->p), dl,
                         cx->fields[t->field].avgdl);
    return rc;
}

/* The score a tf of @p mtf can reach at most: BM25 with the shortest
 * length, 0 (the score grows with tf and falls with the length). */
static double bm25_bound(double idf, uint32_t mtf, double avgdl)
{
    return qry_bm25(idf, mtf, 0.0, avgdl);
}

/* The block's max tf bounds every posting up to its last id (with other
 * segments' cursors in between, up to the next of theirs).  With the
 * field's length column at hand the bound also takes the shortest length
 * among the block's remaining documents (a look-up each, on the ids the
 * block has decoded): with the length 0 a bound is too loose to prune much,
 * as BM25 gives short documents most of their score.  Computed once per
 * block: the remaining documents only shrink, so it stays a bound.  Only
 * for a term that skips blocks (it->tight): under an AND or an OR, where a
 * bound only spares one document's scoring, the scan of the block's
 * lengths cost more than it saved. */
static double term_bound(qry_iter *it, qry_ctx *cx, uint32_t *upto)
{
    term_it *t = (term_it *)it;
    if (t->bset && it->docid <= t->bupto) {
        *upto = t->bupto;
        return t->bval;
    }
    const qry_field *f = &cx->fields[t->field];
    uint32_t mtf = idx_postings_block_max_tf(t->p);
    uint32_t last = idx_postings_block_last(t->p);
    double dl = 0.0;
    const uint32_t *ids;
    uint32_t n;
    kv_err e = KV_ERR_INIT;
    if (it->tight && f->col &&
        idx_postings_run(t->p, &ids, &n, &e) == KVFTS_OK && n) {
        if (ids[n - 1] < last)
            last = ids[n - 1];
        uint32_t min = UINT32_MAX;
        for (uint32_t i = 0; i < n && ids[i] <= last; i++) {
            uint32_t l = ids[i] < f->ncol ? f->col[ids[i]] : 0;
            min = l < min ? l : min;
        }
        dl = min;
    }
    t->bval = qry_bm25(t->idf, mtf, dl, f->avgdl);
    t->bupto = last < it->docid ? it->docid : last;
    t->bset = true;
    *upto = t->bupto;
    return t->bval;
}

/* A term's live count is exact in its entries (postings minus deletions,
 * per segment): nothing is walked. */
static int term_count(qry_iter *it, uint64_t *n, kv_err *err)
{
    (void)err;
    *n = it->est;
    return KVFTS_OK;
}

static void term_free(qry_iter *it)
{
    idx_postings_close(((term_it *)it)->p);
    kv_free(it);
}

static _Atomic uint64_t cursors_opened;   /* the test hook's count */

uint64_t qry_test_cursors(void)
{
    return cursors_opened;
}

/* Open (field, term); *out NULL when the term is absent. */
static int postings_open(idx_postings **out, qry_ctx *cx, const char *field,
                         size_t flen, const char *term, size_t tlen,
                         kv_err *err)
{
    int rc = idx_postings_open(out, cx->r, field, flen, term, tlen, err);
    if (rc == KVFTS_ENOTFOUND) {
        kv_err_clear(err);
        *out = NULL;
        return KVFTS_OK;
    }
    if (!rc)
        cursors_opened++;
    return rc;
}

static int term_new(qry_iter **out, qry_ctx *cx, const char *field,
                    size_t flen, const char *term, size_t tlen, kv_err *err)
{
    idx_postings *p = NULL;
    size_t fi = 0;
    int rc = postings_open(&p, cx, field, flen, term, tlen, err);
    if (rc)
        return rc;
    if (!p)
        return empty_new(out, err);
    term_it *t = kv_calloc(1, sizeof *t);
    if (!t) {
        idx_postings_close(p);
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }
    t->p = p;
    t->base.next = term_next;
    t->base.skip_to = term_skip;
    t->base.score = term_score;
    t->base.free = term_free;
    t->base.est = idx_postings_info(p)->df;
    t->base.post = p;
    t->base.count = term_count;
    t->base.bound = term_bound;
    t->base.exact_est = true;
    rc = ctx_field(cx, field, flen, &fi, err);
    if (rc) {
        term_free(&t->base);
        return rc;
    }
    t->field = fi;
    t->idf = qry_idf(cx->fields[fi].docs, idx_postings_info(p)->df);
    *out = &t->base;
    return KVFTS_OK;
}

/* ---- phrase -------------------------------------------------------------- */

typedef struct phrase_it {
    qry_iter base;
    size_t n;
    idx_postings **p;     /* in phrase order (a repeated word's terms
                             share their first term's cursor) */
    uint32_t *offs;
    size_t *first;        /* per term: the first term of the same word */
    bool dups;            /* a word is repeated */
    size_t u;             /* distinct words */
    size_t *order;        /* their first terms, by ascending df: the
                             cursors that move */
    size_t field;
    double idf_sum;
    uint32_t pf;          /* phrase frequency in the current match (0: not
                             counted yet) */
    const uint32_t **pos; /* per term: its positions in the current match */
    uint32_t *npos, *at;  /* their count; where the walk is */
    const idx_view **views;  /* per term: its views of the current match */
    uint32_t *nviews, *vat;  /* their count; where the walk of them is */
    size_t qpos;          /* for messages */
    const char *fname;    /* borrowed from the plan */
    /* Walked by next (phrase_round): a round of blocks' matches at a time,
     * their ids in cand.v[0..rn) and phrase frequencies in rpf, served
     * from ri on; the round covers ids up to rlast. */
    idbuf cand, rpf;
    uint32_t rlast;
    size_t rn, ri;
} phrase_it;

/* Occurrences of the phrase at the positions ph->pos[i] (npos[i] each). */
static uint32_t phrase_walk(phrase_it *ph, bool all)
{
    uint32_t pf = 0;
    for (size_t i = 0; i < ph->n; i++)
        ph->at[i] = 0;
    for (uint32_t a = 0; a < ph->npos[0]; a++) {
        uint64_t s = ph->pos[0][a];
        bool match = true;
        for (size_t i = 1; match && i < ph->n; i++) {
            uint64_t want = s + ph->offs[i];
            const uint32_t *v = ph->pos[i];
            uint32_t k = ph->at[i], n = ph->npos[i];
            while (k < n && v[k] < want)
                k++;
            ph->at[i] = k;
            if (k == n)
                return pf;             /* no later start can match */
            match = v[k] == want;
        }
        if (match) {
            pf++;
            if (!all)
                return pf;
        }
    }
    return pf;
}

/* Occurrences of the phrase in the document every term sits on: all of
 * them, or (all false) whether there is one.  A phrase matches within one
 * field's values: per field the terms have one view each (`_all` has one
 * per source field), and the fields every term has are walked one by one;
 * the terms' position lists are walked once each, in step (the wanted
 * position only grows); a count or an unscored match needs only the
 * first. */
static int phrase_count(phrase_it *ph, bool all, uint32_t *pf, kv_err *err)
{
    *pf = 0;
    for (size_t i = 0; i < ph->n; i++) {
        size_t j = ph->first[i];
        ph->vat[i] = 0;
        if (j < i) {             /* a repeated word: the same views */
            ph->views[i] = ph->views[j];
            ph->nviews[i] = ph->nviews[j];
            continue;
        }
        int rc = idx_postings_need(ph->p[i], IDX_DECODE_POSITIONS, err);
        if (rc)
            return rc;
        ph->views[i] = idx_postings_views(ph->p[i], &ph->nviews[i]);
        if (!ph->views[i] || !ph->nviews[i])
            goto bad;
    }
    for (uint32_t a = 0; a < ph->nviews[0]; a++) {
        uint32_t fid = ph->views[0][a].col >> 2;
        bool every = true;
        for (size_t i = 1; every && i < ph->n; i++) {
            uint32_t k = ph->vat[i];
            while (k < ph->nviews[i] && (ph->views[i][k].col >> 2) < fid)
                k++;
            ph->vat[i] = k;
            every = k < ph->nviews[i] && (ph->views[i][k].col >> 2) == fid;
        }
        if (!every)
            continue;
        for (size_t i = 0; i < ph->n; i++) {
            const idx_view *v = i ? &ph->views[i][ph->vat[i]]
                                  : &ph->views[0][a];
            ph->pos[i] = v->pos;
            ph->npos[i] = v->tf;
            if (!v->pos)
                goto bad;
        }
        *pf += phrase_walk(ph, all);
        if (*pf && !all)
            return KVFTS_OK;
    }
    return KVFTS_OK;
bad:
    return kv_seterr(err, KVFTS_ECORRUPT, "query: phrase at %zu: postings "
                     "of field '%s' lack the positions their entry "
                     "promises", ph->qpos, ph->fname);
}

static _Atomic uint64_t block_rounds;   /* the test hook's count */

uint64_t qry_test_phrase_block_rounds(void)
{
    return block_rounds;
}

/* Count the candidates cand[0..*m) holding the phrase from the terms'
 * current blocks (idx_postings_phrase), which first cuts them to those in
 * every block: no iterator moves per candidate; with pf, each one's phrase
 * frequency too.  *done false: the blocks are not to be had so (the caller
 * goes candidate by candidate over the cut ones). */
static int phrase_count_blocks(phrase_it *ph, uint32_t *cand, size_t *m,
                               uint32_t *pf, uint64_t *total, bool *done,
                               kv_err *err)
{
    uint32_t n = (uint32_t)*m;
    int rc = idx_postings_phrase(ph->p, ph->first, ph->offs, ph->n, cand,
                                 &n, pf, total, done, err);
    *m = n;
    block_rounds += !rc && *done;
    return rc;
}

/* Position every term on the first document >= target holding the phrase. */
static int phrase_align(phrase_it *ph, uint32_t target, kv_err *err)
{
    for (;;) {
        bool moved = false;
        for (size_t k = 0; k < ph->u; k++) {
            idx_postings *p = ph->p[ph->order[k]];
            int rc = idx_postings_skip_to(p, target, err);
            if (rc == KVFTS_ITEROVER)
                return at_eof(&ph->base);
            if (rc)
                return rc;
            uint32_t d = idx_postings_docid(p);
            if (d > target) {
                target = d;
                moved = true;
                break;
            }
        }
        if (moved)
            continue;
        uint32_t pf;
        int rc = phrase_count(ph, false, &pf, err);
        if (rc)
            return rc;
        if (pf) {
            ph->pf = 0;           /* counted when the match is scored */
            ph->base.docid = target;
            return QRY_OK;
        }
        if (target == UINT32_MAX)
            return at_eof(&ph->base);
        target++;
    }
}

static int phrase_round(phrase_it *ph, uint32_t target, kv_err *err);

/* The round's next match (phrase_round) as the current one. */
static int round_next(phrase_it *ph)
{
    ph->base.docid = ph->cand.v[ph->ri];
    ph->pf = ph->rpf.v[ph->ri++];
    return QRY_OK;
}

static int phrase_next(qry_iter *it, kv_err *err)
{
    phrase_it *ph = (phrase_it *)it;
    if (it->eof)
        return QRY_EOF;
    if (ph->ri < ph->rn)
        return round_next(ph);
    if (it->docid == UINT32_MAX)
        return at_eof(it);
    return phrase_round(ph, it->docid + 1, err);
}

static int phrase_skip(qry_iter *it, uint32_t docid, kv_err *err)
{
    phrase_it *ph = (phrase_it *)it;
    if (it->eof || (it->docid && it->docid >= docid))
        return landed(it, docid);
    uint32_t from = docid;
    if (ph->ri < ph->rn && docid <= ph->rlast) {
        /* within the round: its first match at or after docid, or none
         * up to its end */
        while (ph->ri < ph->rn && ph->cand.v[ph->ri] < docid)
            ph->ri++;
        if (ph->ri < ph->rn) {
            round_next(ph);
            return landed(it, docid);
        }
        if (ph->rlast == UINT32_MAX) {
            ph->rn = 0;
            return at_eof(it);
        }
        from = ph->rlast + 1;
    }
    ph->rn = ph->ri = 0;
    int rc = phrase_align(ph, from, err);
    return rc < 0 ? rc : landed(it, docid);
}

static int phrase_score(qry_iter *it, qry_ctx *cx, double *sum, kv_err *err)
{
    phrase_it *ph = (phrase_it *)it;
    double dl;
    int rc = ph->pf ? KVFTS_OK : phrase_count(ph, true, &ph->pf, err);
    if (!rc)
        rc = ctx_dl(cx, ph->field, it->docid, &dl, err);
    if (!rc)
        *sum += qry_bm25(ph->idf_sum, ph->pf, dl, cx->fields[ph->field].avgdl);
    return rc;
}

/* Rounds of blocks: every term skips to the lead's candidate; the round
 * covers ids up to the smallest last id of their loaded blocks
 * (idx_postings_block_last), so the candidates lie in blocks every term
 * has loaded, and checking their positions moves no term to another
 * block.  When the lead has many ids in the round, they are checked in
 * the terms' blocks (idx_postings_phrase: cut to the ids every block
 * holds, then the positions of those): a term whose block alone does not
 * tell its live ids (idx_postings_plain: another segment, a deletion, a
 * field's filter) cuts them by its run (idx_postings_run) first.  When
 * the lead has PHRASE_FEW or fewer (a rare term against common ones: each
 * candidate in another block of theirs), a skip_to per candidate does,
 * decoding a dense block by document for one id or two: measured over
 * the Debian catalog's, GCIDE's and largevocab's phrases, 4 lost least
 * ("in the plural" 0.95 ms with 0, 0.82 with 4 or 8; largevocab's "ka pi"
 * 1.60 with 0 or 4, 2.0 with 8).  A count and a ranking walk (next) go
 * by rounds alike; a skip_to past the round goes by posting
 * (phrase_align), as an AND's rarer kid asks for few of the phrase's
 * ids. */
#define PHRASE_FEW 4

/* The candidates of the round at the lead's posting into b->v[0..*m): the
 * lead's run up to *bound, cut by the other terms' runs. */
static int round_candidates(phrase_it *ph, idbuf *b, size_t *m,
                            uint32_t *bound, kv_err *err)
{
    idx_postings *lead = ph->p[ph->order[0]];
    uint32_t target = idx_postings_docid(lead);
    int rc = KVFTS_OK;
    *m = 0;
    *bound = UINT32_MAX;
    for (size_t k = 1; !rc && k < ph->u; k++)
        rc = idx_postings_skip_to(ph->p[ph->order[k]], target, err);
    if (rc)
        return rc;
    for (size_t k = 0; k < ph->u; k++) {
        uint32_t l = idx_postings_block_last(ph->p[ph->order[k]]);
        if (l < *bound)
            *bound = l;
    }
    /* the lead's run up to bound, then each other term's */
    const uint32_t *r;
    uint32_t rn;
    size_t n = 0;
    rc = idx_postings_run(lead, &r, &rn, err);
    if (!rc)
        rc = idbuf_reserve(b, rn, err);
    if (rc)
        return rc;
    while (n < rn && r[n] <= *bound) {
        b->v[n] = r[n];
        n++;
    }
    for (size_t k = 1; n > PHRASE_FEW && k < ph->u; k++) {
        idx_postings *p = ph->p[ph->order[k]];
        if (idx_postings_plain(p, b->v[0], b->v[n - 1]))
            continue;     /* the blocks tell (idx_postings_phrase) */
        if ((rc = idx_postings_run(p, &r, &rn, err)))
            return rc;
        size_t o = 0, j = 0;
        uint32_t x = 0;
        while (j < n && x < rn) {          /* without branches: the ids */
            uint32_t a = b->v[j], y = r[x];  /* are about as dense */
            b->v[o] = a;
            o += a == y;
            j += a <= y;
            x += y <= a;
        }
        n = o;
    }
    *m = n;
    return KVFTS_OK;
}

/* The round's candidates b->v[0..*m) holding the phrase: counted into
 * *total; with pf (room for *m), the matches kept in b->v[0..*m) and
 * their phrase frequencies in pf. */
static int round_check(phrase_it *ph, idbuf *b, size_t *m, uint32_t *pf,
                       uint64_t *total, kv_err *err)
{
    bool done = false;
    int rc = *m > PHRASE_FEW
             ? phrase_count_blocks(ph, b->v, m, pf, total, &done, err)
             : KVFTS_OK;
    size_t o = 0;
    for (size_t j = 0; !rc && j < *m; j++) {
        uint32_t f = done ? (pf ? pf[j] : 0) : 0;
        bool every = !done;
        for (size_t k = 0; !rc && every && k < ph->u; k++) {
            rc = idx_postings_skip_to(ph->p[ph->order[k]], b->v[j], err);
            every = !rc &&
                    idx_postings_docid(ph->p[ph->order[k]]) == b->v[j];
        }
        if (!rc && every) {
            rc = phrase_count(ph, pf != NULL, &f, err);
            *total += f != 0;
        }
        if (pf && f) {
            b->v[o] = b->v[j];
            pf[o++] = f;
        }
    }
    if (pf)
        *m = o;
    /* a term's postings ended: no later candidate holds the phrase (the
     * next round finds the end) */
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

static int phrase_count_all(qry_iter *it, uint64_t *n, kv_err *err)
{
    phrase_it *ph = (phrase_it *)it;
    idx_postings *lead = ph->p[ph->order[0]];
    uint64_t total = 0;
    int rc = idx_postings_next(lead, err);
    while (rc == KVFTS_OK) {
        uint32_t bound;
        size_t m;
        rc = round_candidates(ph, &ph->cand, &m, &bound, err);
        if (!rc)
            rc = round_check(ph, &ph->cand, &m, NULL, &total, err);
        if (rc)
            break;
        if (bound == UINT32_MAX) {
            rc = KVFTS_ITEROVER;
            break;
        }
        rc = idx_postings_skip_to(lead, bound + 1, err);
    }
    if (rc != KVFTS_ITEROVER)
        return rc ? rc : kv_seterr(err, KVFTS_ERROR, "query: phrase count");
    *n = total;
    return KVFTS_OK;
}

/* The next round holding a match at or after target, its first match the
 * current one (next serves the rest). */
static int phrase_round(phrase_it *ph, uint32_t target, kv_err *err)
{
    idx_postings *lead = ph->p[ph->order[0]];
    ph->rn = ph->ri = 0;
    for (;;) {
        uint32_t bound = UINT32_MAX;
        size_t m = 0;
        uint64_t total = 0;
        int rc = idx_postings_skip_to(lead, target, err);
        if (!rc)
            rc = round_candidates(ph, &ph->cand, &m, &bound, err);
        if (!rc && m)
            rc = idbuf_reserve(&ph->rpf, m, err);
        if (!rc && m)
            rc = round_check(ph, &ph->cand, &m, ph->rpf.v, &total, err);
        if (rc == KVFTS_ITEROVER)
            return at_eof(&ph->base);
        if (rc)
            return rc;
        if (m) {
            ph->rn = m;
            ph->ri = 1;
            ph->rlast = bound;
            ph->base.docid = ph->cand.v[0];
            ph->pf = ph->rpf.v[0];
            return QRY_OK;
        }
        if (bound == UINT32_MAX)
            return at_eof(&ph->base);
        target = bound + 1;
    }
}

/* The phrase frequency is at most any of its terms' tf in the field: at
 * most the smallest of their blocks' max tf. */
static double phrase_bound(qry_iter *it, qry_ctx *cx, uint32_t *upto)
{
    phrase_it *ph = (phrase_it *)it;
    uint32_t mtf = UINT32_MAX, last = UINT32_MAX;
    for (size_t k = 0; k < ph->u; k++) {
        uint32_t m = idx_postings_block_max_tf(ph->p[ph->order[k]]);
        uint32_t l = idx_postings_block_last(ph->p[ph->order[k]]);
        mtf = m < mtf ? m : mtf;
        last = l < last ? l : last;
    }
    *upto = last < it->docid ? it->docid : last;
    return bm25_bound(ph->idf_sum, mtf, cx->fields[ph->field].avgdl);
}

static void phrase_free(qry_iter *it)
{
    phrase_it *ph = (phrase_it *)it;
    for (size_t i = 0; i < ph->n; i++)
        if (ph->first[i] == i)
            idx_postings_close(ph->p[i]);
    kv_free(ph->p);
    kv_free(ph->first);
    kv_free(ph->order);
    kv_free(ph->pos);
    kv_free(ph->npos);
    kv_free(ph->at);
    kv_free(ph->views);
    kv_free(ph->nviews);
    kv_free(ph->vat);
    kv_free(ph->cand.v);
    kv_free(ph->rpf.v);
    kv_free(ph);
}

static int phrase_new(qry_iter **out, qry_ctx *cx, const qry_node *n,
                      kv_err *err)
{
    phrase_it *ph = kv_calloc(1, sizeof *ph);
    int rc = KVFTS_OK;
    if (!ph)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    ph->base.next = phrase_next;
    ph->base.skip_to = phrase_skip;
    ph->base.score = phrase_score;
    ph->base.free = phrase_free;
    ph->base.count = phrase_count_all;
    ph->base.bound = phrase_bound;
    ph->offs = n->offs;
    ph->qpos = n->pos;
    ph->fname = n->field;
    ph->p = kv_calloc(n->nterms, sizeof *ph->p);
    ph->first = kv_calloc(n->nterms, sizeof *ph->first);
    ph->order = kv_calloc(n->nterms, sizeof *ph->order);
    ph->pos = kv_calloc(n->nterms, sizeof *ph->pos);
    ph->npos = kv_calloc(n->nterms, sizeof *ph->npos);
    ph->at = kv_calloc(n->nterms, sizeof *ph->at);
    ph->views = kv_calloc(n->nterms, sizeof *ph->views);
    ph->nviews = kv_calloc(n->nterms, sizeof *ph->nviews);
    ph->vat = kv_calloc(n->nterms, sizeof *ph->vat);
    if (!ph->p || !ph->first || !ph->order || !ph->pos || !ph->npos ||
        !ph->at ||
        !ph->views || !ph->nviews || !ph->vat) {
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        goto fail;
    }
    /* A repeated word ("the ... the") shares its first term's cursor: the
     * cursors move in step, and a phrase of one word said a thousand
     * times walks one cursor, not a thousand per candidate. */
    uint64_t est = UINT64_MAX;
    for (size_t i = 0; i < n->nterms; i++) {
        size_t j = 0;
        while (j < i && (n->tlens[j] != n->tlens[i] ||
                         memcmp(n->terms[j], n->terms[i], n->tlens[i])))
            j++;
        ph->first[i] = j;
        if (j < i) {
            ph->p[i] = ph->p[j];
            ph->n = i + 1;
            ph->dups = true;
            continue;
        }
        rc = postings_open(&ph->p[i], cx, n->field, n->flen, n->terms[i],
                           n->tlens[i], err);
        if (rc)
            goto fail;
        ph->n = i + 1;
        if (!ph->p[i]) {          /* a term is absent: no phrase */
            phrase_free(&ph->base);
            return empty_new(out, err);
        }
        const idx_term_info *in = idx_postings_info(ph->p[i]);
        if (!in->positions) {
            rc = kv_seterr(err, KVFTS_EINVAL, "query: phrase at %zu needs "
                           "positions, which field '%s' does not store "
                           "(\"positions\": false)", n->pos, n->field);
            err->pos = (long long)n->pos;
            goto fail;
        }
        est = in->df < est ? in->df : est;
        ph->order[ph->u++] = i;
    }
    /* Rarest term first (insertion sort: phrases are short). */
    for (size_t i = 1; i < ph->u; i++)
        for (size_t j = i; j > 0 &&
             idx_postings_info(ph->p[ph->order[j]])->df <
             idx_postings_info(ph->p[ph->order[j - 1]])->df; j--) {
            size_t x = ph->order[j];
            ph->order[j] = ph->order[j - 1];
            ph->order[j - 1] = x;
        }
    rc = ctx_field(cx, n->field, n->flen, &ph->field, err);
    if (rc)
        goto fail;
    for (size_t i = 0; i < ph->n; i++)
        ph->idf_sum += qry_idf(cx->fields[ph->field].docs,
                               idx_postings_info(ph->p[i])->df);
    ph->base.est = est;
    *out = &ph->base;
    return KVFTS_OK;
fail:
    phrase_free(&ph->base);
    return rc;
}

/* ---- or ------------------------------------------------------------------ */

typedef struct or_it {
    qry_iter base;
    qry_iter **kids;      /* all kids (owned) */
    size_t nkids;
    uint32_t maxid;       /* largest doc id of the index (0: not known) */
    qry_iter **heap;      /* kids not at EOF, min-heap by docid */
    size_t nheap;
    bool started;
} or_it;

static void sift_down(or_it *o, size_t i)
{
    qry_iter **h = o->heap;
    size_t n = o->nheap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l]->docid < h[m]->docid)
            m = l;
        if (r < n && h[r]->docid < h[m]->docid)
            m = r;
        if (m == i)
            return;
        qry_iter *x = h[i];
        h[i] = h[m];
        h[m] = x;
        i = m;
    }
}

/* The top moved (rc from its move): drop it at EOF, else restore order. */
static int or_fix_top(or_it *o, int rc)
{
    if (rc < 0)
        return rc;
    if (rc == QRY_EOF)
        o->heap[0] = o->heap[--o->nheap];
    if (o->nheap)
        sift_down(o, 0);
    return KVFTS_OK;
}

static int or_settle(or_it *o, uint32_t target)
{
    if (!o->nheap)
        return at_eof(&o->base);
    o->base.docid = o->heap[0]->docid;
    return landed(&o->base, target);
}

/* First move: every kid goes to its first match >= target. */
static int or_start(or_it *o, uint32_t target, kv_err *err)
{
    o->started = true;
    o->nheap = 0;
    for (size_t i = 0; i < o->nkids; i++) {
        qry_iter *k = o->kids[i];
        int rc = target ? k->skip_to(k, target, err) : k->next(k, err);
        if (rc < 0)
            return rc;
        if (rc != QRY_EOF)
            o->heap[o->nheap++] = k;
    }
    for (size_t i = o->nheap / 2; i-- > 0;)
        sift_down(o, i);
    return or_settle(o, target);
}

static int or_next(qry_iter *it, kv_err *err)
{
    or_it *o = (or_it *)it;
    if (it->eof)
        return QRY_EOF;
    if (!o->started) {
        int rc = or_start(o, 0, err);
        return rc == QRY_NOTFOUND ? QRY_OK : rc;
    }
    uint32_t cur = it->docid;
    while (o->nheap && o->heap[0]->docid == cur) {
        int rc = or_fix_top(o, o->heap[0]->next(o->heap[0], err));
        if (rc)
            return rc;
    }
    int rc = or_settle(o, 0);
    return rc == QRY_NOTFOUND ? QRY_OK : rc;
}

static int or_skip(qry_iter *it, uint32_t docid, kv_err *err)
{
    or_it *o = (or_it *)it;
    if (it->eof)
        return QRY_EOF;
    if (!o->started)
        return or_start(o, docid, err);
    if (it->docid >= docid)
        return landed(it, docid);
    while (o->nheap && o->heap[0]->docid < docid) {
        int rc = or_fix_top(o, o->heap[0]->skip_to(o->heap[0], docid, err));
        if (rc)
            return rc;
    }
    return or_settle(o, docid);
}

/* Score the kids on the current document: the heap entries equal to the
 * top (a subtree walk that stops at larger ids). */
static int or_score_from(or_it *o, size_t i, qry_ctx *cx, double *sum,
                         kv_err *err)
{
    if (i >= o->nheap || o->heap[i]->docid != o->base.docid)
        return KVFTS_OK;
    int rc = o->heap[i]->score(o->heap[i], cx, sum, err);
    if (!rc)
        rc = or_score_from(o, 2 * i + 1, cx, sum, err);
    if (!rc)
        rc = or_score_from(o, 2 * i + 2, cx, sum, err);
    return rc;
}

static int or_score(qry_iter *it, qry_ctx *cx, double *sum, kv_err *err)
{
    return or_score_from((or_it *)it, 0, cx, sum, err);
}

/* The kids on the current document, as or_score_from() walks them. */
static double or_bound_from(or_it *o, size_t i, qry_ctx *cx)
{
    if (i >= o->nheap || o->heap[i]->docid != o->base.docid)
        return 0.0;
    uint32_t upto;
    return kid_bound(o->heap[i], cx, &upto) +
           or_bound_from(o, 2 * i + 1, cx) + or_bound_from(o, 2 * i + 2, cx);
}

/* Bounds the current document only: a kid not on it may be on the next. */
static double or_bound(qry_iter *it, qry_ctx *cx, uint32_t *upto)
{
    *upto = it->docid;
    return or_bound_from((or_it *)it, 0, cx);
}

/* Set id's bit; 1 if it was clear.  Distinct ids are counted as their
 * bits are set: no pass over the bitmap after (its popcount was a libgcc
 * call per word: Debian builds for baseline x86-64, without POPCNT). */
static inline uint64_t bit_set(uint64_t *bits, uint32_t id)
{
    uint64_t *w = &bits[id >> 6], m = 1ull << (id & 63);
    uint64_t was = *w & m;
    *w |= m;
    return !was;
}

/* An OR of terms counts its union in a bitmap of the index's doc ids,
 * filled a run (block) at a time, when the lists are long enough for the
 * bitmap's size (a bit per id) not to matter: no heap per posting.
 * Otherwise, and over other kids, it walks. */
static int or_count(qry_iter *it, uint64_t *n, kv_err *err)
{
    or_it *o = (or_it *)it;
    uint64_t sum = 0;
    bool terms = o->maxid > 0;
    for (size_t i = 0; terms && i < o->nkids; i++) {
        terms = o->kids[i]->post != NULL;
        sum += o->kids[i]->est;
    }
    if (!terms || sum < o->maxid / 256) {
        uint64_t c = 0;
        int rc;
        while ((rc = it->next(it, err)) == QRY_OK)
            c++;
        *n = c;
        return rc == QRY_EOF ? KVFTS_OK : rc;
    }
    size_t words = (size_t)o->maxid / 64 + 1;
    uint64_t *bits = kv_calloc(words, sizeof *bits);
    if (!bits)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    int rc = KVFTS_OK;
    uint64_t c = 0;
    for (size_t i = 0; !rc && i < o->nkids; i++) {
        idx_postings *p = o->kids[i]->post;
        rc = idx_postings_next(p, err);
        while (rc == KVFTS_OK) {
            const uint32_t *r;
            uint32_t rn;
            if ((rc = idx_postings_run(p, &r, &rn, err)))
                break;
            for (uint32_t j = 0; j < rn; j++)
                if (r[j] <= o->maxid)
                    c += bit_set(bits, r[j]);
            uint32_t last = rn ? r[rn - 1] : UINT32_MAX;
            rc = last == UINT32_MAX ? KVFTS_ITEROVER
                                    : idx_postings_skip_to(p, last + 1, err);
        }
        if (rc == KVFTS_ITEROVER)
            rc = KVFTS_OK;
    }
    kv_free(bits);
    if (rc)
        return rc;
    *n = c;
    return KVFTS_OK;
}

static void or_free(qry_iter *it)
{
    or_it *o = (or_it *)it;
    for (size_t i = 0; i < o->nkids; i++)
        qry_iter_free(o->kids[i]);
    kv_free(o->kids);
    kv_free(o->heap);
    kv_free(o);
}

/* An OR of @p kids (taken over, even on failure); drops empty kids. */
static int or_new(qry_iter **out, qry_iter **kids, size_t n, kv_err *err)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (kids[i]->eof)
            qry_iter_free(kids[i]);
        else
            kids[m++] = kids[i];
    }
    if (m == 0) {
        kv_free(kids);
        return empty_new(out, err);
    }
    if (m == 1) {
        *out = kids[0];
        kv_free(kids);
        return KVFTS_OK;
    }
    or_it *o = kv_calloc(1, sizeof *o);
    qry_iter **heap = kv_calloc(m, sizeof *heap);
    if (!o || !heap) {
        kv_free(o);
        kv_free(heap);
        for (size_t i = 0; i < m; i++)
            qry_iter_free(kids[i]);
        kv_free(kids);
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }
    o->kids = kids;
    o->nkids = m;
    o->heap = heap;
    o->base.next = or_next;
    o->base.skip_to = or_skip;
    o->base.score = or_score;
    o->base.free = or_free;
    o->base.bound = or_bound;
    o->base.count = or_count;
    for (size_t i = 0; i < m; i++)
        o->base.est += kids[i]->est;
    *out = &o->base;
    return KVFTS_OK;
}

/* ---- and ----------------------------------------------------------------- */

typedef struct and_it {
    qry_iter base;
    qry_iter **pos;       /* positive kids, ascending est */
    size_t npos;
    qry_iter **neg;       /* negative kids */
    size_t nneg;
} and_it;

/* skip_to(target) of a kid; one standing just before target moves by next,
 * the same move, which an iterator may serve cheaper (a phrase from the
 * round of blocks it checked at once). */
static int kid_skip(qry_iter *k, uint32_t target, kv_err *err)
{
    if (k->eof || k->docid == UINT32_MAX || k->docid + 1 != target)
        return k->skip_to(k, target, err);
    int rc = k->next(k, err);
    return rc < 0 ? rc : landed(k, target);
}

static int and_align(and_it *a, uint32_t target, kv_err *err)
{
    for (;;) {
        size_t i;
        for (i = 0; i < a->npos; i++) {
            qry_iter *k = a->pos[i];
            int rc = kid_skip(k, target, err);
            if (rc < 0)
                return rc;
            if (rc == QRY_EOF)
                return at_eof(&a->base);
            if (rc == QRY_NOTFOUND) {     /* overshot: a new candidate */
                target = k->docid;
                break;
            }
        }
        if (i < a->npos)
            continue;
        bool excluded = false;
        for (i = 0; !excluded && i < a->nneg; i++) {
            qry_iter *k = a->neg[i];
            int rc = k->skip_to(k, target, err);
            if (rc < 0)
                return rc;
            excluded = rc == QRY_OK;
        }
        if (!excluded) {
            a->base.docid = target;
            return QRY_OK;
        }
        if (target == UINT32_MAX)
            return at_eof(&a->base);
        target++;
    }
}

static int and_next(qry_iter *it, kv_err *err)
{
    if (it->eof)
        return QRY_EOF;
    if (it->docid == UINT32_MAX)
        return at_eof(it);
    return and_align((and_it *)it, it->docid + 1, err);
}

static int and_skip(qry_iter *it, uint32_t docid, kv_err *err)
{
    if (it->eof || (it->docid && it->docid >= docid))
        return landed(it, docid);
    int rc = and_align((and_it *)it, docid, err);
    return rc < 0 ? rc : landed(it, docid);
}

static int and_score(qry_iter *it, qry_ctx *cx, double *sum, kv_err *err)
{
    and_it *a = (and_it *)it;
    for (size_t i = 0; i < a->npos; i++) {
        int rc = a->pos[i]->score(a->pos[i], cx, sum, err);
        if (rc)
            return rc;
    }
    return KVFTS_OK;
}

/* Count by rounds: the lead's next run of candidates (a term's block, or
 * LEAD_CHUNK matches of another iterator) filtered by each positive kid of
 * pos (rarest first), then by the negative ones. */
static int rounds_count(qry_iter *lead, qry_iter **pos, size_t npos,
                        qry_iter **neg, size_t nneg, uint64_t *n,
                        kv_err *err)
{
    idbuf b = { NULL, 0 };
    uint64_t total = 0;
    int rc = idbuf_reserve(&b, LEAD_CHUNK, err);
    if (!rc)
        rc = lead->next(lead, err);
    while (rc == QRY_OK) {
        size_t m = 0;
        if (lead->post) {
            rc = run_copy(lead->post, &b, &m, err);
            if (rc)
                break;
        } else {
            b.v[m++] = lead->docid;
            while (m < LEAD_CHUNK && (rc = lead->next(lead, err)) == QRY_OK)
                b.v[m++] = lead->docid;
            if (rc < 0)
                break;
        }
        uint32_t last = b.v[m - 1];
        bool more = lead->post || rc == QRY_OK;
        rc = KVFTS_OK;
        for (size_t i = 0; !rc && m && i < npos; i++)
            rc = isect_iter(pos[i], b.v, m, true, &m, err);
        for (size_t i = 0; !rc && m && i < nneg; i++)
            rc = isect_iter(neg[i], b.v, m, false, &m, err);
        if (rc)
            break;
        total += m;
        if (!more || last == UINT32_MAX)
            break;
        rc = lead->skip_to(lead, last + 1, err);
        if (rc == QRY_NOTFOUND)
            rc = QRY_OK;
    }
    kv_free(b.v);
    if (rc < 0)
        return rc;
    *n = total;
    return KVFTS_OK;
}

/* A NOT whose negative kid holds at most a quarter of what its one
 * positive kid does, a term (its count exact from its entries), is that
 * count less the documents the two share, counted from the negative
 * kid's side: `python -django` reads django's postings and skips through
 * python's, rather than reading python's and skipping through django's. */
#define NOT_SUBTRACT 4

static _Atomic uint64_t not_subtracted;   /* the test hook's count */

uint64_t qry_test_not_subtracted(void)
{
    return not_subtracted;
}

static int and_count(qry_iter *it, uint64_t *n, kv_err *err)
{
    and_it *a = (and_it *)it;
    qry_iter *lead = a->pos[0];
    if (a->npos == 1 && a->nneg == 1 && lead->exact_est &&
        a->neg[0]->est <= lead->est / NOT_SUBTRACT) {
        uint64_t both;
        int rc = rounds_count(a->neg[0], &lead, 1, NULL, 0, &both, err);
        if (rc)
            return rc;
        if (both > lead->est)
            return kv_seterr(err, KVFTS_ECORRUPT, "a term's count (%llu) "
                             "is below the matches it shares (%llu)",
                             (unsigned long long)lead->est,
                             (unsigned long long)both);
        *n = lead->est - both;
        not_subtracted++;
        return KVFTS_OK;
    }
    return rounds_count(lead, a->pos + 1, a->npos - 1, a->neg, a->nneg, n,
                        err);
}

/* The positive kids' bounds, over the range they all hold for. */
static double and_bound(qry_iter *it, qry_ctx *cx, uint32_t *upto)
{
    and_it *a = (and_it *)it;
    double b = 0.0;
    uint32_t last = UINT32_MAX;
    for (size_t i = 0; i < a->npos; i++) {
        uint32_t u;
        b += kid_bound(a->pos[i], cx, &u);
        last = u < last ? u : last;
    }
    *upto = last < it->docid ? it->docid : last;
    return b;
}

static void and_free(qry_iter *it)
{
    and_it *a = (and_it *)it;
    for (size_t i = 0; i < a->npos; i++)
        qry_iter_free(a->pos[i]);
    for (size_t i = 0; i < a->nneg; i++)
        qry_iter_free(a->neg[i]);
    kv_free(a->pos);
    kv_free(a->neg);
    kv_free(a);
}

static int and_new(qry_iter **out, qry_ctx *cx, const qry_node *n,
                   kv_err *err)
{
    and_it *a = kv_calloc(1, sizeof *a);
    int rc = KVFTS_OK;
    if (!a)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    a->base.next = and_next;
    a->base.skip_to = and_skip;
    a->base.score = and_score;
    a->base.free = and_free;
    a->base.count = and_count;
    a->base.bound = and_bound;
    a->pos = kv_calloc(n->nkids, sizeof *a->pos);
    a->neg = kv_calloc(n->nkids, sizeof *a->neg);
    size_t *times = NULL;
    if (!a->pos || !a->neg) {
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = kid_times(n, &times, err)))
        goto fail;
    /* Positive kids first, so an absent one stops the build early. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n->nkids; i++) {
            const qry_node *k = n->kids[i];
            if (k->neg != (pass == 1) || !times[i])
                continue;
            qry_iter *ki = NULL;
            rc = qry_iter_build(&ki, cx, k, err);
            if (!rc && !k->neg)
                rc = rep_new(&ki, ki, times[i], err);
            if (rc)
                goto fail;
            if (!k->neg && ki->eof) {     /* absent: the AND is empty */
                qry_iter_free(ki);
                and_free(&a->base);
                kv_free(times);
                return empty_new(out, err);
            }
            if (k->neg && ki->eof)
                qry_iter_free(ki);
            else if (k->neg)
                a->neg[a->nneg++] = ki;
            else
                a->pos[a->npos++] = ki;
        }
    /* Ascending estimated count: the rarest kid leads. */
    for (size_t i = 1; i < a->npos; i++)
        for (size_t j = i; j > 0 && a->pos[j]->est < a->pos[j - 1]->est; j--) {
            qry_iter *x = a->pos[j];
            a->pos[j] = a->pos[j - 1];
            a->pos[j - 1] = x;
        }
    kv_free(times);
    if (a->npos == 1 && a->nneg == 0) {
        *out = a->pos[0];
        a->npos = 0;
        and_free(&a->base);
        return KVFTS_OK;
    }
    a->base.est = a->npos ? a->pos[0]->est : 0;
    *out = &a->base;
    return KVFTS_OK;
fail:
    kv_free(times);
    and_free(&a->base);
    return rc;
}

/* ---- prefix --------------------------------------------------------------
 *
 * A prefix may expand to any number of terms: there is no limit that
 * refuses a query.  The number of expansions picks the evaluation (a walk
 * of the dictionaries counts up to UNION_MIN_TERMS of them; the union's
 * own walk counts on, and hands over to the dense union past
 * QRY_SCORED_EXPANSION):
 *
 *   fewer than UNION_MIN_TERMS  an OR of term iterators;
 *   up to QRY_SCORED_EXPANSION  the union: every posting of every expansion
 *                               read in one walk as (doc, term, tf) triples
 *                               and sorted by doc (below); each expansion
 *                               scores as a term of its own, as the OR of
 *                               them would.  Past UNION_MAX triples (or
 *                               the memory bound) the OR of term iterators;
 *   more                        the dense union: one byte per document, by
 *                               internal id, holding the document's number
 *                               of occurrences of any expansion (255 at
 *                               most); the walk adds each posting to it,
 *                               and the iterator steps over the non-zero
 *                               bytes.  Its memory is one byte per document
 *                               of the corpus whatever the expansion holds,
 *                               as a bitmap would be (Lucene's constant-
 *                               score rewrite of a many-term query), and it
 *                               keeps enough to rank.
 *
 * Ranking of a huge expansion (more than QRY_SCORED_EXPANSION terms): the
 * prefix scores as one term of the field, BM25 with tf = the document's
 * occurrences of expansions (at most 255; BM25's tf part is flat long
 * before that) and df = the documents matching the prefix.  That is how
 * FTS5's bm25() ranks every prefix (one phrase whose hits are the tokens
 * the prefix matches).  Summing a BM25 per expansion, as smaller prefixes
 * do, would let the rarest of thousands of expansions (df 1: typos, ids,
 * the highest idf) decide the order, and reward a document for holding
 * many distinct words with the prefix rather than for being about it; and
 * it needs state per expansion, which grows with the vocabulary.
 *
 * Bounds (qry_ctx_limits): the triples may take mem_limit / 32 postings at
 * most (12 bytes each, twice while sorted, and room to grow), the dense
 * union ids below mem_limit; and the walks look at the clock every 4,096
 * postings.  Reaching the time bound stops the walk: the iterator holds the
 * expansions read so far (in byte order).  Reaching the memory bound of
 * the dense union drops the documents past it (the walk goes on, so the
 * documents below it are all found).  Either makes the search partial, or
 * KVFTS_ELIMIT when it must be exact.
 */

typedef struct expand {
    kv_buf terms;         /* NUL-terminated terms back to back */
    size_t n;
    size_t max;           /* the walk stops past this many */
    bool over;            /* there are more than max */
    kv_err *err;
} expand;

static int expand_term(void *payload, const char *term, size_t tlen,
                       const idx_term_info *info)
{
    expand *e = payload;
    (void)info;
    if (e->n == e->max) {
        e->over = true;
        return 1;
    }
    e->n++;
    int rc = kv_buf_append(&e->terms, term, tlen, e->err);
    return rc ? rc : kv_buf_append(&e->terms, "", 1, e->err);
}

/* What stopped a walk (callbacks' non-zero returns, positive). */
enum { WALK_UNION_FULL = 2, WALK_BOUND = 3 };
/* Which bound was reached. */
enum { CUT_NONE = 0, CUT_TIME, CUT_MEM };

/* Every 4,096 postings: is the search's time up? */
static bool walk_late(const qry_ctx *cx, uint64_t *seen)
{
    return cx->deadline && (++*seen & 4095) == 0 && past(cx->deadline);
}

/* A bound cut prefix n's expansion: an error if the search must be exact,
 * else the search is partial. */
static int bound_reached(qry_ctx *cx, const qry_node *n, int cut,
                         uint64_t postings, kv_err *err)
{
    if (!cx->exact) {
        cx->partial = true;
        return KVFTS_OK;
    }
    int rc;
    const char *word = n->terms[0] + (n->terms[0][0] == TOK_LIST_MARK);
    if (cut == CUT_TIME)
        rc = kv_seterr(err, KVFTS_ELIMIT, "query: prefix '%s*' at %zu: its "
                       "expansion reached the time limit of the search "
                       "after %llu postings of field '%s'", word,
                       n->pos, (unsigned long long)postings, n->field);
    else
        rc = kv_seterr(err, KVFTS_ELIMIT, "query: prefix '%s*' at %zu: its "
                       "expansion in field '%s' holds documents past the "
                       "memory limit of the search (a byte per document, "
                       "%zu bytes)", word, n->pos, n->field,
                       cx->mem_limit);
    err->pos = (long long)n->pos;
    return rc;
}

/* ---- prefix: the expansions read in one walk ------------------------------
 *
 * A prefix's terms and their blocks are neighbours in the key space, so one
 * cursor walk reads every posting of every expansion (idx_prefix_postings)
 * into (doc, term, tf) triples, sorted by doc id; the iterator steps through
 * them a document at a time.  Opening each expansion as its own iterator
 * under an OR heap cost 13 us a term (a header lookup, a cursor, a seek),
 * which made a 600-term prefix slower than FTS5.  Past UNION_MAX postings
 * (memory: 12 bytes each) the OR of iterators is used instead. */
#define UNION_MAX (4u * 1024u * 1024u)
/* Fewer expansions than this: an OR of their iterators (cheaper for a few
 * long lists, which the union would copy and sort). */
#define UNION_MIN_TERMS 8

typedef struct upost {
    uint32_t doc, term, tf;
} upost;

typedef struct dense_it dense_it;
static dense_it *dense_alloc(const qry_ctx *cx, size_t field);
static int dense_collect(void *payload, uint32_t term, uint64_t df,
                         uint32_t docid, uint32_t tf);
static int dense_done(qry_iter **out, qry_ctx *cx, const qry_node *n,
                      dense_it *d, int rc, kv_err *err);

typedef struct union_it {
    qry_iter base;
    upost *v, *tmp;
    size_t n, cap, i, end;    /* the current document is v[i .. end) */
    size_t max;               /* triples at most (UNION_MAX, memory bound) */
    double *idf;              /* per term */
    uint32_t nidf, idfcap;
    size_t field;
    uint64_t field_docs;
    const qry_ctx *cx;
    uint64_t seen;            /* postings walked (for the clock) */
    dense_it *dense;          /* the walk met too many terms: it goes on
                                 into this */
    bool sorted;              /* v is sorted (at the first move) */
} union_it;

static void union_free(qry_iter *it);

/* The walk meets term QRY_SCORED_EXPANSION (the 1,001st): the prefix
 * ranks as one term (the dense union), which takes the triples read so
 * far and the rest of the walk.  Finding it out in the walk, rather than
 * in a count of the terms first, saves most prefixes a second walk of the
 * dictionaries. */
static int union_to_dense(union_it *u)
{
    dense_it *d = dense_alloc(u->cx, u->field);
    if (!d)
        return KVFTS_ENOMEM;
    int rc = KVFTS_OK;
    for (size_t i = 0; !rc && i < u->n; i++)
        rc = dense_collect(d, u->v[i].term, 0, u->v[i].doc, u->v[i].tf);
    u->dense = d;
    kv_free(u->v);
    u->v = NULL;
    u->n = u->cap = 0;
    return rc;
}

static int union_collect(void *payload, uint32_t term, uint64_t df,
                         uint32_t docid, uint32_t tf)
{
    union_it *u = payload;
    if (u->dense)
        return dense_collect(u->dense, term, df, docid, tf);
    if (term >= QRY_SCORED_EXPANSION) {
        int rc = union_to_dense(u);
        return rc ? rc : dense_collect(u->dense, term, df, docid, tf);
    }
    if (walk_late(u->cx, &u->seen))
        return WALK_BOUND;
    if (u->n + 1 > u->max)
        return WALK_UNION_FULL;
    if (term >= u->nidf) {
        if (term >= u->idfcap) {
            uint32_t cap = u->idfcap ? u->idfcap * 2 : 64;
            while (cap <= term)
                cap *= 2;
            double *d = kv_realloc(u->idf, cap * sizeof *d);
            if (!d)
                return KVFTS_ENOMEM;
            u->idf = d;
            u->idfcap = cap;
        }
        u->idf[term] = qry_idf(u->field_docs, df);
        u->nidf = term + 1;
    }
    if (u->n + 1 > u->cap) {
        size_t cap = u->cap ? u->cap * 2 : 1024;
        upost *v = kv_realloc(u->v, cap * sizeof *v);
        if (!v)
            return KVFTS_ENOMEM;
        u->v = v;
        u->cap = cap;
    }
    u->v[u->n++] = (upost){ docid, term, tf };
    return KVFTS_OK;
}

/* Sort u->v by doc id, stably: an LSD radix sort of 8-bit digits, as many
 * passes as the largest id needs (a 16-bit digit spent most of a short
 * prefix's time clearing and summing its 65,536 counters). */
static int union_sort(union_it *u, kv_err *err)
{
    size_t n = u->n;
    uint32_t max = 0;
    for (size_t i = 0; i < n; i++)
        if (u->v[i].doc > max)
            max = u->v[i].doc;
    u->tmp = kv_malloc((n ? n : 1) * sizeof *u->tmp);
    if (!u->tmp)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    upost *from = u->v, *to = u->tmp;
    size_t count[256];
    for (int shift = 0; shift < 32 && (max >> shift); shift += 8) {
        memset(count, 0, sizeof count);
        for (size_t i = 0; i < n; i++)
            count[(from[i].doc >> shift) & 0xff]++;
        size_t acc = 0;
        for (size_t d = 0; d < 256; d++) {
            size_t c = count[d];
            count[d] = acc;
            acc += c;
        }
        for (size_t i = 0; i < n; i++)
            to[count[(from[i].doc >> shift) & 0xff]++] = from[i];
        upost *t = from;
        from = to;
        to = t;
    }
    if (from != u->v)         /* an odd number of passes */
        memcpy(u->v, from, n * sizeof *u->v);
    kv_free(u->tmp);
    u->tmp = NULL;
    return KVFTS_OK;
}

/* Sorted at the first move: a count needs no order. */
static int union_ready(union_it *u, kv_err *err)
{
    if (u->sorted)
        return KVFTS_OK;
    u->sorted = true;
    return u->n ? union_sort(u, err) : KVFTS_OK;
}

/* The distinct documents of the triples, in a bitmap by id (an eighth of
 * the dense union's byte per document), unless that would take more than
 * the memory bound: then sorted and walked. */
static int union_count(qry_iter *it, uint64_t *n, kv_err *err)
{
    union_it *u = (union_it *)it;
    uint32_t max = 0;
    for (size_t i = 0; i < u->n; i++)
        max = u->v[i].doc > max ? u->v[i].doc : max;
    size_t words = (size_t)max / 64 + 1;
    uint64_t *bits = words * 8 <= u->cx->mem_limit && !u->sorted
                     ? kv_calloc(words, 8) : NULL;
    if (!bits) {
        int rc = union_ready(u, err);
        uint64_t c = 0;
        while (!rc && (rc = it->next(it, err)) == QRY_OK)
            c++;
        *n = c;
        return rc == QRY_EOF ? KVFTS_OK : rc;
    }
    uint64_t c = 0;
    for (size_t i = 0; i < u->n; i++)
        c += bit_set(bits, u->v[i].doc);
    kv_free(bits);
    *n = c;
    return KVFTS_OK;
}

static int union_group(union_it *u, size_t i)
{
    if (i >= u->n)
        return at_eof(&u->base);
    u->i = i;
    u->end = i + 1;
    while (u->end < u->n && u->v[u->end].doc == u->v[i].doc)
        u->end++;
    u->base.docid = u->v[i].doc;
    return QRY_OK;
}

static int union_next(qry_iter *it, kv_err *err)
{
    union_it *u = (union_it *)it;
    if (it->eof)
        return QRY_EOF;
    int rc = union_ready(u, err);
    return rc ? rc : union_group(u, it->docid ? u->end : 0);
}

static int union_skip(qry_iter *it, uint32_t docid, kv_err *err)
{
    union_it *u = (union_it *)it;
    if (it->eof || (it->docid && it->docid >= docid))
        return landed(it, docid);
    int rc = union_ready(u, err);
    if (rc)
        return rc;
    size_t lo = it->docid ? u->end : 0, hi = lo, stride = 1;
    while (hi < u->n && u->v[hi].doc < docid) {
        lo = hi + 1;
        hi += stride;
        stride *= 2;
    }
    if (hi > u->n)
        hi = u->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (u->v[mid].doc < docid)
            lo = mid + 1;
        else
            hi = mid;
    }
    union_group(u, lo);
    return landed(it, docid);
}

static int union_score(qry_iter *it, qry_ctx *cx, double *sum, kv_err *err)
{
    union_it *u = (union_it *)it;
    double dl;
    int rc = ctx_dl(cx, u->field, it->docid, &dl, err);
    if (rc)
        return rc;
    double avgdl = cx->fields[u->field].avgdl;
    for (size_t k = u->i; k < u->end; k++)
        *sum += qry_bm25(u->idf[u->v[k].term], u->v[k].tf, dl, avgdl);
    return KVFTS_OK;
}

static void union_free(qry_iter *it)
{
    union_it *u = (union_it *)it;
    if (u->dense)
        qry_iter_free((qry_iter *)u->dense);
    kv_free(u->v);
    kv_free(u->tmp);
    kv_free(u->idf);
    kv_free(u);
}

/* The prefix of n as one union iterator, or as the dense union when its
 * walk meets more than QRY_SCORED_EXPANSION terms; *out NULL when it has
 * more postings than it may hold (the caller falls back to an OR of
 * terms). */
static int union_new(qry_iter **out, qry_ctx *cx, const qry_node *n,
                     kv_err *err)
{
    *out = NULL;
    union_it *u = kv_calloc(1, sizeof *u);
    if (!u)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    u->base.next = union_next;
    u->base.skip_to = union_skip;
    u->base.score = union_score;
    u->base.free = union_free;
    u->base.count = union_count;
    u->cx = cx;
    u->max = cx->mem_limit / 32 < UNION_MAX ? cx->mem_limit / 32 : UNION_MAX;
    int rc = ctx_field(cx, n->field, n->flen, &u->field, err);
    if (!rc) {
        u->field_docs = cx->fields[u->field].docs;
        rc = idx_prefix_postings(cx->r, n->field, n->flen, n->terms[0],
                                 n->tlens[0], UINT32_MAX, !cx->unscored,
                                 union_collect, u, err);
    }
    if (u->dense) {           /* past QRY_SCORED_EXPANSION terms */
        dense_it *d = u->dense;
        u->dense = NULL;
        union_free(&u->base);
        return dense_done(out, cx, n, d, rc, err);
    }
    if (rc == WALK_BOUND)       /* out of time: what was read so far */
        rc = bound_reached(cx, n, CUT_TIME, u->seen, err);
    else if (rc == KVFTS_ENOMEM)
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    if (rc) {
        union_free(&u->base);
        return rc == WALK_UNION_FULL ? KVFTS_OK : rc;
    }
    u->base.est = u->n;
    if (u->n == 0)
        at_eof(&u->base);
    *out = &u->base;
    return KVFTS_OK;
}

/* ---- prefix: the dense union of a huge expansion ------------------------ */

struct dense_it {
    qry_iter base;
    uint8_t *tf;          /* by doc id: occurrences of expansions, <= 255 */
    uint32_t n;           /* ids below n are held */
    uint32_t limit;       /* ids below limit may be (the memory bound) */
    size_t field;
    double idf;           /* of the prefix as one term */
    const qry_ctx *cx;
    uint64_t seen;        /* postings walked */
    int cut;              /* CUT_*: a bound reached */
};

static int dense_collect(void *payload, uint32_t term, uint64_t df,
                         uint32_t docid, uint32_t tf)
{
    dense_it *d = payload;
    (void)term;
    (void)df;
    if (walk_late(d->cx, &d->seen)) {
        d->cut = CUT_TIME;
        return WALK_BOUND;
    }
    if (docid >= d->n) {
        if (docid >= d->limit) {  /* past the memory bound: dropped */
            d->cut = CUT_MEM;
            return d->cx->exact ? WALK_BOUND : KVFTS_OK;
        }
        uint64_t cap = d->n < 4096 ? 8192 : 2 * (uint64_t)d->n;
        if (cap <= docid)
            cap = (uint64_t)docid + 1;
        if (cap > d->limit)
            cap = d->limit;
        uint8_t *t = kv_realloc(d->tf, (size_t)cap);
        if (!t)
            return KVFTS_ENOMEM;
        memset(t + d->n, 0, (size_t)cap - d->n);
        d->tf = t;
        d->n = (uint32_t)cap;
    }
    uint32_t v = d->tf[docid];
    d->base.est += v == 0;
    v += tf;
    d->tf[docid] = (uint8_t)(v > 255 ? 255 : v);
    return KVFTS_OK;
}

/* Position on the first held document >= from (eight bytes at a time over
 * the empty stretches). */
static int dense_at(dense_it *d, uint32_t from)
{
    const uint8_t *a = d->tf;
    uint32_t i = from, n = d->n;
    while (i < n && (i & 7) && !a[i])
        i++;
    if (i < n && !a[i]) {
        for (;;) {
            uint64_t w;
            if (i + 8 > n)
                break;
            memcpy(&w, a + i, 8);
            if (w)
                break;
            i += 8;
        }
        while (i < n && !a[i])
            i++;
    }
    if (i >= n)
        return at_eof(&d->base);
    d->base.docid = i;
    return QRY_OK;
}

static int dense_next(qry_iter *it, kv_err *err)
{
    (void)err;
    if (it->eof)
        return QRY_EOF;
    return dense_at((dense_it *)it, it->docid + 1);
}

static int dense_skip(qry_iter *it, uint32_t docid, kv_err *err)
{
    (void)err;
    if (it->eof || (it->docid && it->docid >= docid))
        return landed(it, docid);
    dense_at((dense_it *)it, docid);
    return landed(it, docid);
}

static int dense_score(qry_iter *it, qry_ctx *cx, double *sum, kv_err *err)
{
    dense_it *d = (dense_it *)it;
    double dl;
    int rc = ctx_dl(cx, d->field, it->docid, &dl, err);
    if (!rc)
        *sum += qry_bm25(d->idf, d->tf[it->docid], dl,
                         cx->fields[d->field].avgdl);
    return rc;
}

static void dense_free(qry_iter *it)
{
    kv_free(((dense_it *)it)->tf);
    kv_free(it);
}

static dense_it *dense_alloc(const qry_ctx *cx, size_t field)
{
    dense_it *d = kv_calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->base.next = dense_next;
    d->base.skip_to = dense_skip;
    d->base.score = dense_score;
    d->base.free = dense_free;
    d->cx = cx;
    d->limit = cx->mem_limit < UINT32_MAX ? (uint32_t)cx->mem_limit
                                          : UINT32_MAX;
    d->field = field;
    return d;
}

/* The dense union d after its walk ended with rc. */
static int dense_done(qry_iter **out, qry_ctx *cx, const qry_node *n,
                      dense_it *d, int rc, kv_err *err)
{
    if (rc == KVFTS_ENOMEM)
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    else if (rc == WALK_BOUND || (!rc && d->cut))
        rc = bound_reached(cx, n, d->cut, d->seen, err);
    if (rc) {
        dense_free(&d->base);
        return rc;
    }
    d->idf = qry_idf(cx->fields[d->field].docs, d->base.est);
    if (d->base.est == 0)
        at_eof(&d->base);
    *out = &d->base;
    return KVFTS_OK;
}

/* The prefix of n, which has more than QRY_SCORED_EXPANSION terms. */
static int dense_new(qry_iter **out, qry_ctx *cx, const qry_node *n,
                     kv_err *err)
{
    size_t field;
    int rc = ctx_field(cx, n->field, n->flen, &field, err);
    if (rc)
        return rc;
    dense_it *d = dense_alloc(cx, field);
    if (!d)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    rc = idx_prefix_postings(cx->r, n->field, n->flen, n->terms[0],
                             n->tlens[0], UINT32_MAX, !cx->unscored,
                             dense_collect, d, err);
    return dense_done(out, cx, n, d, rc, err);
}

static int prefix_new(qry_iter **out, qry_ctx *cx, const qry_node *n,
                      kv_err *err)
{
    expand e = { KV_BUF_INIT, 0, UNION_MIN_TERMS - 1, false, err };
    qry_iter **kids = NULL;
    /* A count takes the union whatever the number of expansions (the OR
     * of a few long lists pays off in ranking, where it prunes). */
    int rc = cx->unscored ? 1
           : idx_terms_scan(cx->r, n->field, n->flen, n->terms[0],
                            n->tlens[0], expand_term, &e, err);
    if (cx->unscored || (rc == 1 && e.over)) {
        kv_buf_free(&e.terms);
        rc = union_new(out, cx, n, err);
        if (rc || *out)
            return rc;
        /* more postings than a union holds: the OR of terms below */
        e = (expand){ KV_BUF_INIT, 0, QRY_SCORED_EXPANSION, false, err };
        rc = idx_terms_scan(cx->r, n->field, n->flen, n->terms[0],
                            n->tlens[0], expand_term, &e, err);
        if (rc == 1 && e.over) {
            kv_buf_free(&e.terms);
            return dense_new(out, cx, n, err);
        }
    }
    if (rc)
        goto fail;
    kids = kv_calloc(e.n ? e.n : 1, sizeof *kids);
    if (!kids) {
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        goto fail;
    }
    const char *t = e.terms.data;
    for (size_t i = 0; i < e.n; i++) {
        size_t tl = strlen(t);
        rc = term_new(&kids[i], cx, n->field, n->flen, t, tl, err);
        if (rc) {
            for (size_t j = 0; j < i; j++)
                qry_iter_free(kids[j]);
            goto fail;
        }
        t += tl + 1;
    }
    kv_buf_free(&e.terms);
    return or_new(out, kids, e.n, err);
fail:
    kv_free(kids);
    kv_buf_free(&e.terms);
    return rc;
}

/* ---- building ------------------------------------------------------------ */

int qry_iter_build(qry_iter **out, qry_ctx *cx, const qry_node *n,
                   kv_err *err)
{
    *out = NULL;
    switch (n->kind) {
    case QRY_EMPTY:
        return empty_new(out, err);
    case QRY_TERM:
        return term_new(out, cx, n->field, n->flen, n->terms[0], n->tlens[0],
                        err);
    case QRY_PHRASE:
        return phrase_new(out, cx, n, err);
    case QRY_PREFIX:
        return prefix_new(out, cx, n, err);
    case QRY_AND:
        return and_new(out, cx, n, err);
    case QRY_OR: {
        qry_iter **kids = kv_calloc(n->nkids, sizeof *kids);
        size_t *times = NULL, nk = 0;
        int rc = kids ? kid_times(n, &times, err)
                      : kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        for (size_t i = 0; !rc && i < n->nkids; i++) {
            if (!times[i])
                continue;
            rc = qry_iter_build(&kids[nk], cx, n->kids[i], err);
            if (!rc)
                rc = rep_new(&kids[nk], kids[nk], times[i], err);
            if (!rc)
                nk++;
        }
        kv_free(times);
        if (rc) {
            for (size_t j = 0; kids && j < nk; j++)
                qry_iter_free(kids[j]);
            kv_free(kids);
            return rc;
        }
        rc = or_new(out, kids, nk, err);
        if (!rc && (*out)->next == or_next)     /* not folded to one kid */
            ((or_it *)*out)->maxid = idx_reader_max_docid(cx->r);
        return rc;
    }
    }
    return kv_seterr(err, KVFTS_ERROR, "query: bad plan node");
}
