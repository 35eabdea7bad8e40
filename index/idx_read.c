/*
 * idx_read.c -- reading the inverted index: term headers, postings
 * iterators, term enumeration, field statistics and index-wide figures.
 *
 * An idx_postings walks one term's block records with a Berkeley DB cursor,
 * decoding one block at a time (positions only when asked for).  skip_to()
 * first looks inside the current block (binary search), then jumps with a
 * B-tree range seek on the block keys, so skipping over a long list costs a
 * few page reads, not a scan.  All of it runs inside the caller's (usually
 * snapshot) transaction, so a query sees one consistent index.
 */
#include "idx_int.h"

#include <string.h>

struct idx_postings {
    kv_txn *txn;
    kv_cursor *c;
    kv_buf tkey;          /* FIELD 0x00 TERM */
    kv_buf seek;          /* scratch key */
    idx_term_info info;
    idx_block blk;
    uint32_t first;       /* first id of the current block */
    uint32_t i;           /* index in the block */
    bool started, eof;
};

int idx_term_get(kv_txn *txn, const char *field, size_t flen,
                 const char *term, size_t tlen, idx_term_info *out,
                 kv_err *err)
{
    kv_buf key = KV_BUF_INIT, val = KV_BUF_INIT;
    int rc = idx_key_term(&key, field, flen, term, tlen, err);
    if (!rc)
        rc = kv_get(txn, KV_POSTINGS, key.data, key.len, &val, false, err);
    idx_header h;
    if (!rc)
        rc = idx_header_decode(val.data, val.len, &h, err);
    if (!rc) {
        out->df = h.df;
        out->cf = h.cf;
        out->blocks = h.blocks;
        out->last = h.last;
        out->positions = h.positions;
    }
    kv_buf_free(&key);
    kv_buf_free(&val);
    return rc;
}

void idx_postings_close(idx_postings *p)
{
    if (!p)
        return;
    kv_cursor_close(p->c);
    kv_buf_free(&p->tkey);
    kv_buf_free(&p->seek);
    idx_block_free(&p->blk);
    kv_free(p);
}

int idx_postings_open(idx_postings **out, kv_txn *txn, const char *field,
                      size_t flen, const char *term, size_t tlen,
                      kv_err *err)
{
    *out = NULL;
    idx_postings *p = kv_calloc(1, sizeof *p);
    if (!p)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    p->txn = txn;
    idx_block_init(&p->blk);
    int rc = idx_term_get(txn, field, flen, term, tlen, &p->info, err);
    if (!rc)
        rc = idx_key_term(&p->tkey, field, flen, term, tlen, err);
    if (!rc)
        rc = kv_cursor_open(&p->c, txn, KV_POSTINGS, err);
    if (rc) {
        idx_postings_close(p);
        return rc;
    }
    *out = p;
    return KVFTS_OK;
}

/* Decode the block the cursor is on, if it belongs to the term. */
static int load_block(idx_postings *p, int rc, kv_err *err)
{
    if (rc == KVFTS_ITEROVER) {
        p->eof = true;
        return KVFTS_ITEROVER;
    }
    if (rc)
        return rc;
    const char *k, *v;
    size_t kl, vl;
    uint32_t first;
    kv_cursor_key(p->c, &k, &kl);
    if (!idx_key_is_block_of(k, kl, p->tkey.data, p->tkey.len, &first)) {
        p->eof = true;
        return KVFTS_ITEROVER;
    }
    kv_cursor_val(p->c, &v, &vl);
    /* The decoder keeps its own copy of the streams it decodes later. */
    rc = idx_block_decode(&p->blk, first, v, vl, IDX_DECODE_IDS, err);
    if (rc)
        return rc;
    p->first = first;
    p->i = 0;
    return KVFTS_OK;
}

/* The first and last ids of the block the cursor is on, from its key and
 * header, without decoding it.  False if the record is not a block of the
 * term.  A damaged header reads as "may hold anything", so that
 * load_block() decodes it and reports the damage. */
static bool peek_block(idx_postings *p, uint32_t *first, uint32_t *last)
{
    const char *k, *v;
    size_t kl, vl;
    uint32_t span;
    kv_cursor_key(p->c, &k, &kl);
    if (!idx_key_is_block_of(k, kl, p->tkey.data, p->tkey.len, first))
        return false;
    kv_cursor_val(p->c, &v, &vl);
    if (!idx_block_peek(v, vl, &span) || span > UINT32_MAX - *first)
        *last = UINT32_MAX;
    else
        *last = *first + span;
    return true;
}

static int seek_block(idx_postings *p, uint32_t first, kv_err *err)
{
    kv_buf_reset(&p->seek);
    int rc = kv_buf_append(&p->seek, p->tkey.data, p->tkey.len, err);
    if (!rc)
        rc = idx_key_block(&p->seek, p->tkey.len, first, err);
    if (!rc)
        rc = kv_cursor_seek(p->c, p->seek.data, p->seek.len, err);
    return load_block(p, rc, err);
}

int idx_postings_next(idx_postings *p, kv_err *err)
{
    if (p->eof)
        return KVFTS_ITEROVER;
    if (!p->started) {
        p->started = true;
        return seek_block(p, 0, err);
    }
    if (++p->i < p->blk.n)
        return KVFTS_OK;
    return load_block(p, kv_cursor_next(p->c, err), err);
}

/* Blocks skip_to walks through one by one before it seeks. */
#define NEAR_STEPS 2

int idx_postings_skip_to(idx_postings *p, uint32_t docid, kv_err *err)
{
    if (p->eof)
        return KVFTS_ITEROVER;
    int rc;
    if (!p->started) {
        p->started = true;
        rc = seek_block(p, 0, err);
        if (rc)
            return rc;
    }
    if (p->blk.ids[p->i] >= docid)
        return KVFTS_OK;
    /* Intersections mostly skip to a near block: step there with the
     * cursor (neighbouring records, often on the same page) before paying
     * for a search from the root.  Blocks stepped over are not decoded:
     * their key and header tell their first and last ids. */
    uint32_t first, last;
    for (int step = 0; step < NEAR_STEPS && p->blk.ids[p->blk.n - 1] < docid;
         step++) {
        rc = kv_cursor_next(p->c, err);
        if (rc || !peek_block(p, &first, &last))
            return load_block(p, rc, err);     /* the end, or an error */
        if (last >= docid) {
            rc = load_block(p, KVFTS_OK, err);
            if (rc)
                return rc;
            goto search;
        }
    }
    if (p->blk.ids[p->blk.n - 1] < docid) {
        /* The block that may hold docid is the last one whose first id is
         * <= docid: range-seek to docid's key, then look one record back. */
        kv_buf_reset(&p->seek);
        rc = kv_buf_append(&p->seek, p->tkey.data, p->tkey.len, err);
        if (!rc)
            rc = idx_key_block(&p->seek, p->tkey.len, docid, err);
        if (!rc)
            rc = kv_cursor_seek(p->c, p->seek.data, p->seek.len, err);
        bool at_end = rc == KVFTS_ITEROVER;
        if (rc && !at_end)
            return rc;
        if (!at_end && peek_block(p, &first, &last) && first == docid)
            return load_block(p, KVFTS_OK, err);
        rc = at_end ? kv_cursor_last(p->c, err) : kv_cursor_prev(p->c, err);
        if (rc && rc != KVFTS_ITEROVER)
            return rc;
        if (rc == KVFTS_OK && peek_block(p, &first, &last) &&
            first < docid && last >= docid) {
            rc = load_block(p, KVFTS_OK, err);
            if (rc)
                return rc;
            goto search;
        }
        /* docid falls between two blocks: the answer starts the next. */
        return seek_block(p, docid, err);
    }
search:;
    /* Gallop from the current position (intersections mostly move a few
     * ids), then binary search the last stride. */
    uint32_t lo = p->i, hi = p->i, n = p->blk.n, stride = 1;
    while (hi < n && p->blk.ids[hi] < docid) {
        lo = hi + 1;
        hi += stride;
        stride *= 2;
    }
    if (hi > n)
        hi = n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (p->blk.ids[mid] < docid)
            lo = mid + 1;
        else
            hi = mid;
    }
    p->i = lo;
    return KVFTS_OK;
}

uint32_t idx_postings_docid(const idx_postings *p)
{
    return p->blk.ids[p->i];
}

int idx_postings_need(idx_postings *p, int level, kv_err *err)
{
    return idx_block_need(&p->blk, level, err);
}

/* The block's tfs and positions are decoded when first asked for (a count
 * or an intersection needs neither).  The iterator is const to callers; the
 * decoding state inside is not. */
uint32_t idx_postings_tf(const idx_postings *p)
{
    /* The error record (a message buffer) is made only on the decode path:
     * zeroing it on every call was a fifth of a phrase query's time. */
    if (p->blk.decoded < IDX_DECODE_TFS) {
        kv_err e = KV_ERR_INIT;
        if (idx_block_need((idx_block *)&p->blk, IDX_DECODE_TFS, &e))
            return 0;      /* corrupt: tf 0 never occurs otherwise */
    }
    return p->blk.tfs[p->i];
}

const uint32_t *idx_postings_positions(const idx_postings *p)
{
    if (!p->blk.positions)
        return NULL;
    if (p->blk.decoded < IDX_DECODE_POSITIONS) {
        kv_err e = KV_ERR_INIT;
        if (idx_block_need((idx_block *)&p->blk, IDX_DECODE_POSITIONS, &e))
            return NULL;
    }
    return p->blk.pos + p->blk.poff[p->i];
}

uint32_t idx_postings_block_max_tf(const idx_postings *p)
{
    return p->blk.max_tf;
}

uint32_t idx_postings_block_last(const idx_postings *p)
{
    return p->blk.ids[p->blk.n - 1];
}

const idx_term_info *idx_postings_info(const idx_postings *p)
{
    return &p->info;
}

/* ---- term enumeration --------------------------------------------------- */

int idx_prefix_postings(kv_txn *txn, const char *field, size_t flen,
                        const char *prefix, size_t plen, uint32_t max_terms,
                        idx_block_fn fn, void *payload, kv_err *err)
{
    kv_buf start = KV_BUF_INIT, cur = KV_BUF_INIT;  /* cur: term's key */
    kv_cursor *c = NULL;
    kv_bulk bulk = KV_BULK_INIT;
    idx_block b;
    idx_block_init(&b);
    uint32_t nterms = 0;
    idx_term_info info = { 0, 0, 0, 0, false };
    int rc = idx_key_term(&start, field, flen, prefix, plen, err);
    if (!rc)
        rc = kv_cursor_open(&c, txn, KV_POSTINGS, err);
    /* The range in bulk reads: a cursor step per record was most of a
     * short prefix's time. */
    if (!rc)
        rc = kv_cursor_bulk(c, start.data, start.len, &bulk, err);
    bool done = false;
    while (rc == KVFTS_OK && !done) {
        const char *k, *v;
        size_t kl, vl;
        while (!rc && kv_bulk_next(&bulk, &k, &kl, &v, &vl)) {
            if (kl < start.len || memcmp(k, start.data, start.len) != 0) {
                done = true;
                break;
            }
            uint32_t first;
            if (!memchr(k + flen + 1, 0, kl - flen - 1)) {      /* a header */
                idx_header h;
                if ((rc = idx_header_decode(v, vl, &h, err)) != 0)
                    break;
                if (++nterms > max_terms) {
                    rc = 1;
                    break;
                }
                info = (idx_term_info){ h.df, h.cf, h.blocks, h.last,
                                        h.positions };
                kv_buf_reset(&cur);
                rc = kv_buf_append(&cur, k, kl, err);
            } else if (nterms &&
                       idx_key_is_block_of(k, kl, cur.data, cur.len, &first)) {
                rc = idx_block_decode(&b, first, v, vl, IDX_DECODE_TFS, err);
                if (!rc)
                    rc = fn(payload, nterms - 1, &info, b.ids, b.tfs, b.n);
            }
        }
        if (!rc && !done)
            rc = kv_cursor_bulk(c, NULL, 0, &bulk, err);
    }
    kv_cursor_close(c);
    kv_bulk_free(&bulk);
    kv_buf_free(&start);
    kv_buf_free(&cur);
    idx_block_free(&b);
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

int idx_terms_scan(kv_txn *txn, const char *field, size_t flen,
                   const char *prefix, size_t plen, idx_term_fn fn,
                   void *payload, kv_err *err)
{
    kv_buf start = KV_BUF_INIT, skip = KV_BUF_INIT;
    kv_cursor *c = NULL;
    int rc = idx_key_term(&start, field, flen, prefix, plen, err);
    if (!rc)
        rc = kv_cursor_open(&c, txn, KV_POSTINGS, err);
    if (!rc)
        rc = kv_cursor_seek(c, start.data, start.len, err);
    while (rc == KVFTS_OK) {
        const char *k, *v;
        size_t kl, vl;
        kv_cursor_key(c, &k, &kl);
        if (kl < start.len || memcmp(k, start.data, start.len) != 0)
            break;
        const char *term = k + flen + 1;
        size_t tl = kl - flen - 1;
        if (memchr(term, 0, tl)) {      /* a block key: skip */
            rc = kv_cursor_next(c, err);
            continue;
        }
        idx_header h;
        kv_cursor_val(c, &v, &vl);
        rc = idx_header_decode(v, vl, &h, err);
        if (rc)
            break;
        idx_term_info info = { h.df, h.cf, h.blocks, h.last, h.positions };
        rc = fn(payload, term, tl, &info);
        if (rc)
            break;
        if (h.blocks > 4) {
            /* Jump over the term's blocks. */
            kv_buf_reset(&skip);
            rc = kv_buf_append(&skip, k, kl, err);
            if (!rc)
                rc = kv_buf_append(&skip, "\0\xff\xff\xff\xff\xff", 6, err);
            if (!rc)
                rc = kv_cursor_seek(c, skip.data, skip.len, err);
        } else {
            rc = kv_cursor_next(c, err);
        }
    }
    kv_cursor_close(c);
    kv_buf_free(&start);
    kv_buf_free(&skip);
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

/* ---- statistics --------------------------------------------------------- */

static int field_rec(kv_txn *txn, const char *field, size_t flen,
                     idx_field *f, kv_err *err)
{
    kv_buf key = KV_BUF_INIT, val = KV_BUF_INIT;
    int rc = idx_key_field(&key, field, flen, err);
    if (!rc)
        rc = kv_get(txn, KV_META, key.data, key.len, &val, false, err);
    if (!rc)
        rc = idx_field_decode(val.data, val.len, f, err);
    kv_buf_free(&key);
    kv_buf_free(&val);
    return rc;
}

int idx_field_stats(kv_txn *txn, const char *field, size_t flen,
                    uint64_t *docs, uint64_t *total_len, kv_err *err)
{
    idx_field f;
    int rc = field_rec(txn, field, flen, &f, err);
    if (rc == KVFTS_ENOTFOUND) {
        *docs = *total_len = 0;
        return KVFTS_OK;
    }
    if (!rc) {
        *docs = f.docs;
        *total_len = f.total_len;
    }
    return rc;
}

int idx_field_id(kv_txn *txn, const char *field, size_t flen, uint32_t *id,
                 kv_err *err)
{
    idx_field f;
    *id = 0;
    int rc = field_rec(txn, field, flen, &f, err);
    if (rc == KVFTS_ENOTFOUND)
        return KVFTS_OK;
    if (!rc)
        *id = f.id;
    return rc;
}

int idx_doc_len(kv_txn *txn, uint32_t docid, uint32_t field_id,
                kv_buf *scratch, uint32_t *len, kv_err *err)
{
    *len = 0;
    if (field_id == 0)
        return KVFTS_OK;
    unsigned char id[4];
    kv_put_be32(id, docid);
    int rc = kv_get(txn, KV_DOCLENS, id, 4, scratch, false, err);
    if (!rc)
        rc = idx_lens_find(scratch->data, scratch->len, field_id, len, err);
    else if (rc == KVFTS_ENOTFOUND)
        rc = KVFTS_OK;
    return rc;
}

/* ---- length records read in doc id order ------------------------------ */

/* Scoring visits documents in ascending id order.  A lookup from the root
 * per document was 80% of a ranked search's time; instead the reader copies
 * a run of consecutive records in one bulk read and answers from it,
 * reading the next run when the ids move past it (or seeking, when they
 * jump far). */
#define LENS_NEAR 64      /* ids past the run's end: read on, else seek */

typedef struct lens_rec {
    uint32_t docid;
    uint32_t vlen;
    const char *val;
} lens_rec;

struct idx_lens_reader {
    kv_cursor *c;
    kv_bulk bulk;
    lens_rec *run;        /* the records of the last bulk read */
    uint32_t n, cap, i;   /* count, capacity, where the last answer was */
    bool end;             /* the run reaches the last record */
};

int idx_lens_reader_open(idx_lens_reader **out, kv_txn *txn, kv_err *err)
{
    *out = kv_calloc(1, sizeof **out);
    if (!*out)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    int rc = kv_cursor_open(&(*out)->c, txn, KV_DOCLENS, err);
    if (rc) {
        kv_free(*out);
        *out = NULL;
    }
    return rc;
}

void idx_lens_reader_close(idx_lens_reader *r)
{
    if (!r)
        return;
    kv_cursor_close(r->c);
    kv_bulk_free(&r->bulk);
    kv_free(r->run);
    kv_free(r);
}

/* Read the run after the last one, in one bulk read. */
static int lens_read_next(idx_lens_reader *r, kv_err *err)
{
    r->n = r->i = 0;
    int rc = kv_cursor_bulk(r->c, NULL, 0, &r->bulk, err);
    r->end = rc == KVFTS_ITEROVER;
    if (rc)
        return r->end ? KVFTS_OK : rc;
    const char *k, *v;
    size_t kl, vl;
    while (kv_bulk_next(&r->bulk, &k, &kl, &v, &vl)) {
        if (kl != 4)
            return kv_seterr(err, KVFTS_ECORRUPT, "length record key of %zu "
                             "bytes", kl);
        if (r->n == r->cap &&
            (rc = idx__grow(&r->run, &r->cap, (uint64_t)r->n + 1,
                            sizeof *r->run, err)) != 0)
            return rc;
        r->run[r->n++] = (lens_rec){ kv_get_be32((const unsigned char *)k),
                                     (uint32_t)vl, v };
    }
    return KVFTS_OK;
}

/* Seek to docid's record (or the next one): a run of one record, read by an
 * ordinary lookup, since a far jump (a rare term) gains nothing from a bulk
 * copy. */
static int lens_seek(idx_lens_reader *r, uint32_t docid, kv_err *err)
{
    unsigned char id[4];
    kv_put_be32(id, docid);
    r->n = r->i = 0;
    int rc = kv_cursor_seek(r->c, id, 4, err);
    r->end = rc == KVFTS_ITEROVER;
    if (rc)
        return r->end ? KVFTS_OK : rc;
    const char *k, *v;
    size_t kl, vl;
    kv_cursor_key(r->c, &k, &kl);
    kv_cursor_val(r->c, &v, &vl);
    if (kl != 4)
        return kv_seterr(err, KVFTS_ECORRUPT, "length record key of %zu "
                         "bytes", kl);
    if ((rc = idx__grow(&r->run, &r->cap, 1, sizeof *r->run, err)) != 0)
        return rc;
    r->run[r->n++] = (lens_rec){ kv_get_be32((const unsigned char *)k),
                                 (uint32_t)vl, v };
    return KVFTS_OK;
}

int idx_lens_reader_get(idx_lens_reader *r, uint32_t docid,
                        uint32_t field_id, uint32_t *len, kv_err *err)
{
    *len = 0;
    if (field_id == 0)
        return KVFTS_OK;
    int rc = KVFTS_OK;
    if (!(r->n && r->run[0].docid <= docid &&
          (docid <= r->run[r->n - 1].docid || r->end))) {
        if (r->n && r->run[0].docid <= docid &&
            docid - r->run[r->n - 1].docid <= LENS_NEAR)
            rc = lens_read_next(r, err);
        if (!rc && !(r->n && r->run[0].docid <= docid &&
                     (docid <= r->run[r->n - 1].docid || r->end)))
            rc = lens_seek(r, docid, err);
        if (!rc && (!r->n || r->run[0].docid > docid))
            return KVFTS_OK;                        /* no record */
    }
    if (rc)
        return rc;
    /* A run without gaps (no deleted ids in it) is an array by id. */
    uint32_t off = docid - r->run[0].docid;
    if (off < r->n && r->run[off].docid == docid) {
        r->i = off;
        return idx_lens_find(r->run[off].val, r->run[off].vlen, field_id, len,
                             err);
    }
    /* Gallop from the last answer, then binary search the stride. */
    uint32_t lo = r->run[r->i].docid <= docid ? r->i : 0, hi = lo;
    uint32_t stride = 1;
    while (hi < r->n && r->run[hi].docid < docid) {
        lo = hi + 1;
        hi += stride;
        stride *= 2;
    }
    if (hi > r->n)
        hi = r->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (r->run[mid].docid < docid)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == r->n || r->run[lo].docid != docid)
        return KVFTS_OK;
    r->i = lo;
    return idx_lens_find(r->run[lo].val, r->run[lo].vlen, field_id, len, err);
}

/* ---- whole length columns, kept by a handle ------------------------------ */

/* A ranked search that matches a good part of the corpus asks for almost
 * every document's length, far apart or not: a cursor step or seek each
 * (a microsecond) was most of such a search's time.  The handle keeps the
 * lengths of the fields it ranks as arrays by doc id, read in one pass over
 * the length records, and drops them when the lengths generation moves
 * (every transaction that writes a length record bumps it, in idx_flush()
 * and idx_clear()).  Lucene keeps its norms per segment for the same
 * reason.  A column costs 4 bytes a document. */
#define LENS_COLUMNS 4    /* fields kept at once */

struct idx_lens_cache {
    uint64_t gen;         /* generation the columns belong to */
    bool synced;          /* gen read at least once */
    struct lens_col {
        uint32_t field_id;
        uint32_t n;       /* ids 0 .. n-1 */
        uint32_t *len;
    } cols[LENS_COLUMNS];
    uint32_t ncols;
};

int idx_lens_cache_new(idx_lens_cache **out, kv_err *err)
{
    *out = kv_calloc(1, sizeof **out);
    return *out ? KVFTS_OK : kv_seterr(err, KVFTS_ENOMEM, "out of memory");
}

static void lens_cache_drop(idx_lens_cache *c)
{
    for (uint32_t i = 0; i < c->ncols; i++)
        kv_free(c->cols[i].len);
    c->ncols = 0;
}

void idx_lens_cache_free(idx_lens_cache *c)
{
    if (!c)
        return;
    lens_cache_drop(c);
    kv_free(c);
}

int idx_lens_cache_sync(idx_lens_cache *c, kv_txn *txn, kv_err *err)
{
    uint64_t gen;
    int rc = kv_seq_get(txn, IDX_LENS_GEN, false, &gen, err);
    if (rc)
        return rc;
    if (!c->synced || gen != c->gen)
        lens_cache_drop(c);
    c->gen = gen;
    c->synced = true;
    return KVFTS_OK;
}

/* The column being read, and its capacity. */
struct lens_walk {
    struct lens_col *col;
    uint32_t cap;
};

static int lens_record(void *payload, const char *k, size_t kl,
                       const char *v, size_t vl, kv_err *err)
{
    struct lens_walk *w = payload;
    struct lens_col *col = w->col;
    if (kl != 4)
        return kv_seterr(err, KVFTS_ECORRUPT, "length record key of %zu "
                         "bytes", kl);
    uint32_t id = kv_get_be32((const unsigned char *)k), len = 0;
    if (id == UINT32_MAX)
        return kv_seterr(err, KVFTS_ECORRUPT, "length record of id %u", id);
    int rc = idx_lens_find(v, vl, col->field_id, &len, err);
    if (!rc && id >= w->cap) {
        uint32_t old = w->cap;
        rc = idx__grow(&col->len, &w->cap, (uint64_t)id + 1,
                       sizeof *col->len, err);
        if (!rc)
            memset(col->len + old, 0, (size_t)(w->cap - old) *
                   sizeof *col->len);
    }
    if (!rc) {
        col->len[id] = len;
        if (id >= col->n)
            col->n = id + 1;
    }
    return rc;
}

/* Read every length record once, keeping field_id's lengths. */
static int lens_column_read(kv_txn *txn, uint32_t field_id,
                            struct lens_col *col, kv_err *err)
{
    col->field_id = field_id;
    col->n = 0;
    col->len = NULL;
    struct lens_walk w = { col, 0 };
    int rc = kv_walk(txn, KV_DOCLENS, lens_record, &w, err);
    if (rc) {
        kv_free(col->len);
        col->len = NULL;
        col->n = 0;
    }
    return rc;
}

int idx_lens_cache_column(idx_lens_cache *c, kv_txn *txn, uint32_t field_id,
                          bool build, const uint32_t **col, uint32_t *n,
                          kv_err *err)
{
    *col = NULL;
    *n = 0;
    for (uint32_t i = 0; i < c->ncols; i++)
        if (c->cols[i].field_id == field_id) {
            *col = c->cols[i].len;
            *n = c->cols[i].n;
            return KVFTS_OK;
        }
    if (!build || field_id == 0)
        return KVFTS_OK;
    if (c->ncols == LENS_COLUMNS) {        /* drop the oldest */
        kv_free(c->cols[0].len);
        memmove(c->cols, c->cols + 1, (LENS_COLUMNS - 1) * sizeof *c->cols);
        c->ncols--;
    }
    struct lens_col *nc = &c->cols[c->ncols];
    int rc = lens_column_read(txn, field_id, nc, err);
    if (rc)
        return rc;
    c->ncols++;
    *col = nc->len;
    *n = nc->n;
    return KVFTS_OK;
}

int idx_doc_field_len(kv_txn *txn, uint32_t docid, const char *field,
                      size_t flen, uint32_t *len, kv_err *err)
{
    uint32_t fid;
    kv_buf val = KV_BUF_INIT;
    int rc = idx_field_id(txn, field, flen, &fid, err);
    if (!rc)
        rc = idx_doc_len(txn, docid, fid, &val, len, err);
    kv_buf_free(&val);
    return rc;
}

int idx_get_stats(kv_txn *txn, idx_stats *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    kv_cursor *c = NULL;
    int rc = kv_cursor_open(&c, txn, KV_POSTINGS, err);
    if (!rc)
        rc = kv_cursor_seek(c, "", 0, err);
    while (rc == KVFTS_OK) {
        const char *k, *v;
        size_t kl, vl;
        kv_cursor_key(c, &k, &kl);
        kv_cursor_val(c, &v, &vl);
        out->postings_bytes += kl + vl;
        const char *z = memchr(k, 0, kl);
        if (z && memchr(z + 1, 0, kl - (size_t)(z + 1 - k))) {
            out->blocks++;
        } else {
            idx_header h;
            rc = idx_header_decode(v, vl, &h, err);
            if (rc)
                break;
            out->terms++;
            out->postings += h.df;
        }
        rc = kv_cursor_next(c, err);
    }
    kv_cursor_close(c);
    if (rc != KVFTS_ITEROVER && rc != KVFTS_OK)
        return rc;
    rc = kv_cursor_open(&c, txn, KV_META, err);
    if (!rc)
        rc = kv_cursor_seek(c, IDX_FIELD_PREFIX, strlen(IDX_FIELD_PREFIX),
                            err);
    while (rc == KVFTS_OK) {
        const char *k;
        size_t kl;
        kv_cursor_key(c, &k, &kl);
        if (kl < strlen(IDX_FIELD_PREFIX) ||
            memcmp(k, IDX_FIELD_PREFIX, strlen(IDX_FIELD_PREFIX)) != 0)
            break;
        out->fields++;
        rc = kv_cursor_next(c, err);
    }
    kv_cursor_close(c);
    if (rc != KVFTS_ITEROVER && rc != KVFTS_OK)
        return rc;
    kv_buf v = KV_BUF_INIT;
    rc = kv_get(txn, KV_META, IDX_SKIPPED_KEY, strlen(IDX_SKIPPED_KEY), &v,
                false, err);
    if (rc == KVFTS_OK && v.len == 8)
        out->skipped_tokens = kv_get_be64((const unsigned char *)v.data);
    if (rc == KVFTS_ENOTFOUND)
        rc = KVFTS_OK;
    kv_buf_free(&v);
    return rc;
}
