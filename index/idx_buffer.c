/*
 * idx_buffer.c -- a shard of the bulk buffer: the changes of a batch's
 * documents, analyzed and held in memory until the segment writer
 * (idx_segw.c) turns them into one segment.
 *
 * A shard belongs to one thread at a time: each analysis worker of a batch
 * owns one (idx_write.c), and so does a writer without workers.  It has its
 * own analysis (tok_analysis: tokenizers and stemmers are not shared across
 * threads) and its own table of field names (local field numbers, mapped to
 * the database's field ids by the writer at flush time, in the
 * transaction), so analysis touches no shared state and no Berkeley DB.
 *
 * A change (old version -> new version of document D; either may be
 * absent) is analyzed into both versions' terms with their views (column,
 * tf, positions; columns here are local field << 2 | kinds) and compared
 * term by term: a term only in the old version gets a deletion record, one
 * only in the new a posting, one in both a deletion and a posting when its
 * views differ, and nothing when they are the same (the stored posting
 * stays the current one: an edit of one field rewrites that field's terms
 * only).  Each record is appended to the term's chain of chunks in one
 * arena, as SQLite FTS5's pending-terms hash and Lucene's byte-block pool
 * keep theirs:
 *
 *   record   = varint(zigzag(D - previous D of the term) << 1 | deletion)
 *              posting:   varint views, per view: varint column,
 *                         varint tf, tf varints (first position, gaps)
 *              deletion:  varint columns, the columns
 *   chunk    = u32 next chunk's offset (0: none) | payload
 *
 * Chunks start at 32 bytes and grow four times each step up to 2 KiB, so a
 * term seen once costs 32 bytes and a long list wastes little.  Doc ids of
 * a term are usually ascending (new documents get new ids); a replaced
 * document keeps its id, so the signed gap allows any order and the reader
 * sorts a term that came out of order.
 *
 * The shard also keeps each new version's field lengths (written to
 * doclens.db at flush), the ids deleted, and the changes to each field's
 * statistics (documents having it, sum of lengths) for BM25.
 */
#include "idx_int.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK_MIN 32u
#define CHUNK_MAX 2048u
#define ARENA_MAX (3u * 1024u * 1024u * 1024u)   /* offsets are 32 bits */
#define NONE UINT32_MAX

/* One buffered term: a chain of chunks holding its records. */
typedef struct tbuf {
    uint32_t head, tail;  /* arena offsets of its first and last chunk */
    uint32_t used;        /* payload bytes used in the last chunk */
    uint32_t last;        /* doc id of the last record */
    uint32_t n;           /* records */
    uint8_t cls;          /* size class of the last chunk */
    bool unsorted;        /* a doc id came after a larger one */
} tbuf;

struct idx_shard {
    tok_analysis *a;
    bool positions;
    strtab fields;        /* local field numbers: path -> lf */
    uint32_t lf_all;      /* the local number of "_all" */
    int64_t *ddocs, *dlen;/* per lf: change of the field's statistics */
    uint32_t fdcap;
    idx_dterms oldv, newv;
    /* the buffer */
    strtab terms;
    tbuf *tb;
    uint32_t tbcap;
    kv_buf arena;
    kv_buf enc;
    uint64_t records;
    uint64_t docs;        /* changes analyzed */
    /* lengths */
    idx_doclen *dl;
    uint32_t ndl, dlcap;
    idx_len *lens;
    uint32_t nlens, lcap;
    uint32_t *deleted;
    uint32_t ndeleted, delcap;
    uint64_t skipped;
    /* the sorted order, and each term's idx__prefix8() in it */
    uint32_t *order;
    uint32_t ocap;
    uint64_t *opre;
    uint32_t opcap;
};

/* ---- deletion lists ------------------------------------------------------ */

void idx_dels_init(idx_dels *d)
{
    memset(d, 0, sizeof *d);
}

void idx_dels_free(idx_dels *d)
{
    kv_free(d->ids);
    kv_free(d->cstart);
    kv_free(d->cols);
    memset(d, 0, sizeof *d);
}

void idx_dels_reset(idx_dels *d)
{
    d->n = d->nc = 0;
    if (d->cstart)
        d->cstart[0] = 0;
}

int idx_dels_add(idx_dels *d, uint32_t id, const uint32_t *cols,
                 uint32_t ncols, kv_err *err)
{
    uint32_t c = d->cap;
    int rc = idx__grow(&d->ids, &c, (uint64_t)d->n + 2, 4, err);
    c = d->cap;
    if (!rc)
        rc = idx__grow(&d->cstart, &c, (uint64_t)d->n + 2, 4, err);
    if (!rc) {
        d->cap = c;
        rc = idx__grow(&d->cols, &d->ccap, (uint64_t)d->nc + ncols + 1, 4,
                       err);
    }
    if (rc)
        return rc;
    if (d->n == 0)
        d->cstart[0] = 0;
    d->ids[d->n] = id;
    memcpy(d->cols + d->nc, cols, (size_t)ncols * 4);
    d->nc += ncols;
    d->n++;
    d->cstart[d->n] = d->nc;
    return KVFTS_OK;
}

/* ---- one version of a document ------------------------------------------- */

static void dterms_free(idx_dterms *d)
{
    idx__strtab_free(&d->terms);
    kv_free(d->vhead);
    kv_free(d->vnext);
    kv_free(d->vcol);
    kv_free(d->vtf);
    kv_free(d->vpos);
    kv_free(d->vlist);
    kv_free(d->occ_v);
    kv_free(d->occ_p);
    kv_free(d->pos);
    kv_free(d->flen);
    kv_free(d->ftouched);
    memset(d, 0, sizeof *d);
}

static int field_lf(idx_shard *s, const char *name, size_t len, uint32_t *lf,
                    kv_err *err)
{
    bool added;
    int rc = idx__strtab_put(&s->fields, name, len, lf, &added, err);
    if (rc || !added)
        return rc;
    uint32_t c = s->fdcap;
    rc = idx__grow(&s->ddocs, &c, (uint64_t)*lf + 1, 8, err);
    c = s->fdcap;
    if (!rc)
        rc = idx__grow(&s->dlen, &c, (uint64_t)*lf + 1, 8, err);
    if (rc)
        return rc;
    for (uint32_t i = s->fdcap; i < c; i++)
        s->ddocs[i] = s->dlen[i] = 0;
    s->fdcap = c;
    return KVFTS_OK;
}

static int add_view(idx_dterms *d, const char *term, size_t tlen,
                    uint32_t col, uint32_t pos, bool list);

/* True if s[0..n) holds a NUL: inline, terms are a few bytes (memchr was
 * 1% of a load, most of it the call). */
static inline bool has_nul(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\0')
            return true;
    return false;
}

/* A term of a document: its view (the field's, or `_all`'s), and a term of
 * a field in "field_lists" the view of its field list's term too
 * (TOK_LIST_MARK + the term), at the same position. */
static int on_term(void *payload, const tok_term *t)
{
    idx_dterms *d = payload;
    idx_shard *s = d->shard;
    kv_err *err = d->err;
    bool is_all = t->field_len == 4 && memcmp(t->field, TOK_ALL_FIELD, 4) == 0;
    if (is_all && t->dual)
        return KVFTS_OK;      /* already in the field's view (kinds 3) */
    uint32_t lf;
    int rc = KVFTS_OK;
    if (t->src_len && t->src_len == d->lastf_len &&
        idx__bytes_eq(t->src, d->lastf, t->src_len)) {
        lf = d->lastf_lf;
    } else {
        if (memchr(t->src, 0, t->src_len))
            return kv_seterr(err, KVFTS_EINVAL, "field name with a NUL "
                             "character cannot be indexed");
        if ((rc = field_lf(s, t->src, t->src_len, &lf, err)))
            return rc;
        d->lastf_len = 0;
        if (t->src_len <= sizeof d->lastf) {
            memcpy(d->lastf, t->src, t->src_len);
            d->lastf_len = (uint32_t)t->src_len;
            d->lastf_lf = lf;
        }
    }
    unsigned kinds = is_all ? 2u : t->dual ? 3u : 1u;
    if (t->term_len == 0 || has_nul(t->term, t->term_len) ||
        t->term[0] == TOK_LIST_MARK)
        return KVFTS_OK;     /* a NUL-bearing keyword value is not indexed,
                                nor one in field lists' term space */
    rc = add_view(d, t->term, t->term_len, lf << 2 | kinds, t->pos, false);
    if (rc || is_all || !t->listed)
        return rc;
    char lt[TOK_MAX_TERM + 1];
    if (t->term_len > TOK_MAX_TERM)
        return kv_seterr(err, KVFTS_ERROR, "a term of %zu bytes",
                         t->term_len);
    lt[0] = TOK_LIST_MARK;
    memcpy(lt + 1, t->term, t->term_len);
    return add_view(d, lt, t->term_len + 1, lf << 2 | 1u, t->pos, true);
}

static int add_view(idx_dterms *d, const char *term, size_t tlen,
                    uint32_t col, uint32_t pos, bool list)
{
    kv_err *err = d->err;
    uint32_t e;
    bool added;
    int rc = idx__strtab_put(&d->terms, term, tlen, &e, &added, err);
    if (rc)
        return rc;
    if (added) {
        if ((rc = idx__grow(&d->vhead, &d->ecap, (uint64_t)e + 1, 4, err)))
            return rc;
        d->vhead[e] = NONE;
    }
    uint32_t v;
    for (v = d->vhead[e]; v != NONE && d->vcol[v] != col; v = d->vnext[v])
        ;
    if (v == NONE) {
        v = d->nview;
        uint32_t c = d->vcap;
        if ((rc = idx__grow(&d->vnext, &c, (uint64_t)v + 1, 4, err)))
            return rc;
        c = d->vcap;
        if ((rc = idx__grow(&d->vcol, &c, (uint64_t)v + 1, 4, err)))
            return rc;
        c = d->vcap;
        if ((rc = idx__grow(&d->vtf, &c, (uint64_t)v + 1, 4, err)))
            return rc;
        c = d->vcap;
        if ((rc = idx__grow(&d->vpos, &c, (uint64_t)v + 1, 4, err)))
            return rc;
        c = d->vcap;
        if ((rc = idx__grow(&d->vlist, &c, (uint64_t)v + 1, 1, err)))
            return rc;
        d->vcap = c;
        d->nview++;
        d->vcol[v] = col;
        d->vlist[v] = list;
        d->vtf[v] = 0;
        d->vnext[v] = d->vhead[e];
        d->vhead[e] = v;
    }
    d->vtf[v]++;
    uint32_t c = d->ocap;
    if ((rc = idx__grow(&d->occ_v, &c, (uint64_t)d->nocc + 1, 4, err)))
        return rc;
    c = d->ocap;
    if ((rc = idx__grow(&d->occ_p, &c, (uint64_t)d->nocc + 1, 4, err)))
        return rc;
    d->ocap = c;
    d->occ_v[d->nocc] = v;
    d->occ_p[d->nocc] = pos;
    d->nocc++;
    return KVFTS_OK;
}

/* Analyze json into d (reset first): terms, views sorted by column,
 * positions grouped per view (repeats of one position dropped), field
 * lengths.  json NULL: the version is absent; leaves (its kept leaves)
 * not NULL: read those, not the JSON. */
static int dterms_build(idx_shard *s, idx_dterms *d, const char *json,
                        size_t len, const char *leaves, size_t leaves_len,
                        kv_err *err)
{
    idx__strtab_reset(&d->terms);
    d->nview = d->nocc = 0;
    for (uint32_t i = 0; i < d->nft; i++)
        d->flen[d->ftouched[i]] = 0;
    d->nft = 0;
    d->lastf_len = 0;
    if (!json)
        return KVFTS_OK;
    d->err = err;
    d->shard = s;
    int rc = leaves ? tok_analysis_run_leaves(s->a, leaves, leaves_len,
                                              on_term, d, err)
                    : tok_analysis_run_doc(s->a, json, len, on_term, d, err);
    if (rc)
        return rc;
    /* Group positions by view (counting sort: emission order within a
     * view is position order). */
    if ((rc = idx__grow(&d->pos, &d->pcap, (uint64_t)d->nocc + 1, 4, err)))
        return rc;
    uint32_t acc = 0;
    for (uint32_t v = 0; v < d->nview; v++) {
        d->vpos[v] = acc;
        acc += d->vtf[v];
        d->vtf[v] = 0;
    }
    for (uint32_t i = 0; i < d->nocc; i++) {
        uint32_t v = d->occ_v[i];
        uint32_t at = d->vpos[v] + d->vtf[v];
        if (d->vtf[v] && d->pos[at - 1] >= d->occ_p[i])
            continue;
        d->pos[at] = d->occ_p[i];
        d->vtf[v]++;
    }
    /* Lengths: the tf of the kind-1 views of each field, and of every
     * kind-2 view for `_all` (a field of its own, lf_all). */
    uint32_t need = s->fields.n;
    if (need > d->fcap) {
        uint32_t old = d->fcap;
        if ((rc = idx__grow(&d->flen, &d->fcap, need, 4, err)))
            return rc;
        memset(d->flen + old, 0, (size_t)(d->fcap - old) * 4);
    }
    for (uint32_t v = 0; v < d->nview; v++) {
        if (d->vlist[v])
            continue;        /* its field's own view counts the term */
        uint32_t f[2] = { d->vcol[v] >> 2, s->lf_all };
        for (int k = 0; k < 2; k++) {
            if (!(d->vcol[v] & (1u << k)))
                continue;
            if (d->flen[f[k]] == 0) {
                if ((rc = idx__grow(&d->ftouched, &d->ftcap,
                                    (uint64_t)d->nft + 1, 4, err)))
                    return rc;
                d->ftouched[d->nft++] = f[k];
            }
            d->flen[f[k]] += d->vtf[v];
        }
    }
    /* Each term's views in ascending column order (insertion sort of its
     * short linked list). */
    for (uint32_t e = 0; e < d->terms.n; e++) {
        uint32_t sorted = NONE;
        for (uint32_t v = d->vhead[e]; v != NONE;) {
            uint32_t next = d->vnext[v];
            uint32_t *pp = &sorted;
            while (*pp != NONE && d->vcol[*pp] < d->vcol[v])
                pp = &d->vnext[*pp];
            d->vnext[v] = *pp;
            *pp = v;
            v = next;
        }
        d->vhead[e] = sorted;
    }
    return KVFTS_OK;
}

/* ---- the shard ------------------------------------------------------------ */

int idx_shard_new(idx_shard **out, const char *config_json, size_t len,
                  kv_err *err)
{
    *out = NULL;
    idx_shard *s = kv_calloc(1, sizeof *s);
    if (!s)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    int rc = tok_analysis_new(&s->a, config_json, len, err);
    if (!rc)
        rc = field_lf(s, TOK_ALL_FIELD, 4, &s->lf_all, err);
    if (rc) {
        idx_shard_free(s);
        return rc;
    }
    s->positions = tok_analysis_positions(s->a);
    *out = s;
    return KVFTS_OK;
}

void idx_shard_free(idx_shard *s)
{
    if (!s)
        return;
    tok_analysis_free(s->a);
    idx__strtab_free(&s->fields);
    kv_free(s->ddocs);
    kv_free(s->dlen);
    dterms_free(&s->oldv);
    dterms_free(&s->newv);
    idx__strtab_free(&s->terms);
    kv_free(s->tb);
    kv_buf_free(&s->arena);
    kv_buf_free(&s->enc);
    kv_free(s->dl);
    kv_free(s->lens);
    kv_free(s->deleted);
    kv_free(s->order);
    kv_free(s->opre);
    kv_free(s);
}

void idx_shard_reset(idx_shard *s)
{
    idx__strtab_reset(&s->terms);
    s->arena.len = 0;
    s->records = s->docs = 0;
    s->ndl = s->nlens = s->ndeleted = 0;
    s->skipped = 0;
    for (uint32_t i = 0; i < s->fields.n; i++)
        s->ddocs[i] = s->dlen[i] = 0;
}

size_t idx_shard_bytes(const idx_shard *s)
{
    /* The arena counts by use: its unused capacity is never touched, so
     * it is not resident.  A flush adds one sorted array of the terms. */
    return s->arena.len + idx__strtab_bytes(&s->terms) +
           (size_t)s->tbcap * sizeof *s->tb + (size_t)s->terms.n * 4 +
           (size_t)s->ndl * sizeof *s->dl + (size_t)s->nlens * sizeof *s->lens;
}

uint64_t idx_shard_docs(const idx_shard *s)
{
    return s->docs;
}

uint64_t idx_shard_skipped(const idx_shard *s)
{
    return s->skipped;
}

uint32_t idx_shard_nfields(const idx_shard *s)
{
    return s->fields.n;
}

const char *idx_shard_field(const idx_shard *s, uint32_t lf, uint32_t *len)
{
    return idx__strtab_str(&s->fields, lf, len);
}

static uint32_t chunk_size(uint8_t cls)
{
    uint32_t sz = CHUNK_MIN << (2 * cls);
    return sz > CHUNK_MAX ? CHUNK_MAX : sz;
}

/* A new chunk of class cls at the end of the arena; *off gets its offset. */
static int chunk_new(idx_shard *s, uint8_t cls, uint32_t *off, kv_err *err)
{
    kv_buf *a = &s->arena;
    size_t base = a->len ? a->len : 8;    /* offset 0 means "no chunk" */
    size_t sz = chunk_size(cls);
    if (base + sz > ARENA_MAX)
        return kv_seterr(err, KVFTS_ENOMEM, "index buffer over %u MiB; "
                         "commit more often", ARENA_MAX >> 20);
    if (base + sz + 1 > a->cap) {
        size_t keep = a->len;
        a->len = 0;
        int rc = kv_buf_reserve(a, base + sz, err);
        a->len = keep;
        if (rc)
            return rc;
    }
    a->len = base;
    *off = (uint32_t)a->len;
    memset(a->data + a->len, 0, 4);
    a->len += sz;
    return KVFTS_OK;
}

static int chain_append(idx_shard *s, tbuf *tb, const unsigned char *p,
                        size_t n, kv_err *err)
{
    while (n) {
        uint32_t room = chunk_size(tb->cls) - 4 - tb->used;
        if (room == 0) {
            uint8_t cls = (uint8_t)(tb->cls + (chunk_size(tb->cls) <
                                               CHUNK_MAX));
            uint32_t off = 0;
            int rc = chunk_new(s, cls, &off, err);
            if (rc)
                return rc;
            memcpy(s->arena.data + tb->tail, &off, 4);
            tb->tail = off;
            tb->cls = cls;
            tb->used = 0;
            continue;
        }
        uint32_t k = n < room ? (uint32_t)n : room;
        memcpy(s->arena.data + tb->tail + 4 + tb->used, p, k);
        tb->used += k;
        p += k;
        n -= k;
    }
    return KVFTS_OK;
}

/* Encode at p the record of doc (gap from last) for d's entry e: a
 * posting, or (del) a deletion with its columns.  Returns its length. */
static size_t enc_record(unsigned char *p, const idx_shard *s, uint32_t doc,
                         uint32_t last, const idx_dterms *d, uint32_t e,
                         uint32_t nv, bool del)
{
    size_t k = 0;
    int64_t gap = (int64_t)doc - (int64_t)last;
    uint64_t zz = ((uint64_t)gap << 1) ^ (uint64_t)(gap >> 63);
    k += idx_varint_put(p + k, zz << 1 | del);
    k += idx_varint_put(p + k, nv);
    for (uint32_t v = d->vhead[e]; v != NONE; v = d->vnext[v]) {
        k += idx_varint_put(p + k, d->vcol[v]);
        if (del)
            continue;
        k += idx_varint_put(p + k, d->vtf[v]);
        if (!s->positions)
            continue;
        const uint32_t *ps = d->pos + d->vpos[v];
        for (uint32_t j = 0; j < d->vtf[v]; j++)
            k += idx_varint_put(p + k, j ? ps[j] - ps[j - 1] : ps[0]);
    }
    return k;
}

/* Append a record for term (t, tl) of doc: a posting of version d's entry
 * e (del false), or a deletion with the columns of d's entry e.  Encoded
 * in place when the term's chunk has room for the longest it can be (most
 * records are a few bytes), else in s->enc and copied across chunks. */
static int record(idx_shard *s, const char *t, size_t tl, uint32_t doc,
                  const idx_dterms *d, uint32_t e, bool del, kv_err *err)
{
    uint32_t id;
    bool added;
    int rc = idx__strtab_put_h(&s->terms, t, tl,
                               idx__strtab_hash_of(&d->terms, e), &id,
                               &added, err);
    if (rc)
        return rc;
    if (added) {
        if ((rc = idx__grow(&s->tb, &s->tbcap, (uint64_t)id + 1,
                            sizeof *s->tb, err)))
            return rc;
        uint32_t off = 0;
        if ((rc = chunk_new(s, 0, &off, err)))
            return rc;
        s->tb[id] = (tbuf){ off, off, 0, 0, 0, 0, false };
    }
    tbuf *tb = &s->tb[id];
    uint32_t nv = 0;
    uint64_t npos = 0;
    for (uint32_t v = d->vhead[e]; v != NONE; v = d->vnext[v]) {
        nv++;
        npos += d->vtf[v];
    }
    /* varints: gap 10, count 5, per view column 5 and tf 5, 5 a position */
    uint64_t most = 15 + (uint64_t)nv * 10 + (s->positions ? npos * 5 : 0);
    uint32_t room = chunk_size(tb->cls) - 4 - tb->used;
    if (most <= room) {
        tb->used += (uint32_t)enc_record((unsigned char *)s->arena.data +
                                         tb->tail + 4 + tb->used, s, doc,
                                         tb->last, d, e, nv, del);
    } else {
        kv_buf *b = &s->enc;
        b->len = 0;
        if ((rc = kv_buf_reserve(b, most, err)))
            return rc;
        unsigned char *p = (unsigned char *)b->data;
        size_t k = enc_record(p, s, doc, tb->last, d, e, nv, del);
        if ((rc = chain_append(s, tb, p, k, err)))
            return rc;
    }
    if (tb->n && doc <= tb->last)
        tb->unsorted = true;
    tb->last = doc;
    tb->n++;
    s->records++;
    return KVFTS_OK;
}

/* True if entry ea of a and eb of b have the same views (columns, tfs,
 * positions). */
static bool same_views(const idx_dterms *a, uint32_t ea, const idx_dterms *b,
                       uint32_t eb)
{
    uint32_t va = a->vhead[ea], vb = b->vhead[eb];
    for (; va != NONE && vb != NONE; va = a->vnext[va], vb = b->vnext[vb])
        if (a->vcol[va] != b->vcol[vb] || a->vtf[va] != b->vtf[vb] ||
            memcmp(a->pos + a->vpos[va], b->pos + b->vpos[vb],
                   (size_t)a->vtf[va] * 4) != 0)
            return false;
    return va == NONE && vb == NONE;
}

static int add_lengths(idx_shard *s, uint32_t docid, const idx_dterms *d,
                       int sign, kv_err *err)
{
    int rc;
    if (sign > 0) {
        if ((rc = idx__grow(&s->dl, &s->dlcap, (uint64_t)s->ndl + 1,
                            sizeof *s->dl, err)))
            return rc;
        s->dl[s->ndl] = (idx_doclen){ docid, s->nlens, 0 };
    }
    for (uint32_t i = 0; i < d->nft; i++) {
        uint32_t lf = d->ftouched[i];
        uint32_t len = d->flen[lf];
        if (len == 0)
            continue;
        s->ddocs[lf] += sign;
        s->dlen[lf] += sign * (int64_t)len;
        if (sign < 0)
            continue;
        if ((rc = idx__grow(&s->lens, &s->lcap, (uint64_t)s->nlens + 1,
                            sizeof *s->lens, err)))
            return rc;
        s->lens[s->nlens++] = (idx_len){ lf, len };
    }
    if (sign > 0) {
        s->dl[s->ndl].n = s->nlens - s->dl[s->ndl].off;
        s->ndl++;
    }
    return KVFTS_OK;
}

/* Lookups ahead: terms apart (a ring of 4 guesses holds AHEAD). */
#define AHEAD 4

/* The lookups ahead of a document's terms t in the shard's big table, as
 * term e of them comes (-2 AHEAD <= e < t->n): fetch the home slot of
 * term e + 2 AHEAD, read it and guess term e + AHEAD's id (g[], a ring),
 * fetch the bytes and buffer of term e + AHEAD / 2. */
static void ahead_step(const idx_shard *s, const strtab *t, int64_t e,
                       uint32_t *g)
{
    int64_t nt = t->n, a = e + 2 * AHEAD, b = e + AHEAD, c = e + AHEAD / 2;
    if (a < nt)
        idx__strtab_prefetch(&s->terms,
                             idx__strtab_hash_of(t, (uint32_t)a));
    if (b >= 0 && b < nt)
        g[b & 3] = idx__strtab_guess(&s->terms,
                                     idx__strtab_hash_of(t, (uint32_t)b));
    if (c >= 0 && c < nt) {
        uint32_t id = g[c & 3];
        idx__strtab_prefetch_str(&s->terms, id);
        if (id < s->tbcap)
            __builtin_prefetch(&s->tb[id]);
    }
}

int idx_shard_doc(idx_shard *s, uint32_t docid, const char *old_json,
                  size_t old_len, const char *new_json, size_t new_len,
                  const char *leaves, size_t leaves_len, kv_err *err)
{
    int rc = dterms_build(s, &s->oldv, old_json, old_len, NULL, 0, err);
    if (rc == KVFTS_EINVAL) {
        kv_err_prefix(err, "stored version no longer analyzes");
        err->code = rc = KVFTS_ECORRUPT;
    }
    if (rc)
        return rc;
    tok_stats before, after;
    tok_analysis_stats(s->a, &before);
    rc = dterms_build(s, &s->newv, new_json, new_len, leaves, leaves_len,
                      err);
    tok_analysis_stats(s->a, &after);
    if (rc)
        return rc;
    s->skipped += after.too_long - before.too_long;
    idx_dterms *o = &s->oldv, *n = &s->newv;
    for (uint32_t e = 0; !rc && e < o->terms.n; e++) {
        uint32_t tl, en;
        const char *t = idx__strtab_str(&o->terms, e, &tl);
        bool in_new = n->terms.n && idx__strtab_get(&n->terms, t, tl, &en);
        if (in_new && same_views(o, e, n, en))
            continue;
        rc = record(s, t, tl, docid, o, e, true, err);
    }
    /* The new version's terms, looked up in the shard's big table a few
     * terms ahead (idx__strtab_guess): each lookup is cache misses. */
    uint32_t g[4];
    for (int64_t e = -2 * AHEAD; e < 0; e++)
        ahead_step(s, &n->terms, e, g);
    for (uint32_t e = 0; !rc && e < n->terms.n; e++) {
        ahead_step(s, &n->terms, e, g);
        uint32_t tl, eo;
        const char *t = idx__strtab_str(&n->terms, e, &tl);
        if (o->terms.n && idx__strtab_get(&o->terms, t, tl, &eo) &&
            same_views(o, eo, n, e))
            continue;
        rc = record(s, t, tl, docid, n, e, false, err);
    }
    if (!rc && old_json)
        rc = add_lengths(s, docid, o, -1, err);
    if (!rc && new_json)
        rc = add_lengths(s, docid, n, +1, err);
    if (!rc && old_json && !new_json) {
        rc = idx__grow(&s->deleted, &s->delcap, (uint64_t)s->ndeleted + 1, 4,
                       err);
        if (!rc)
            s->deleted[s->ndeleted++] = docid;
    }
    if (!rc)
        s->docs++;
    return rc;
}

void idx_shard_lengths(const idx_shard *s, const idx_doclen **docs,
                       uint32_t *ndocs, const idx_len **lens,
                       const uint32_t **deleted, uint32_t *ndeleted)
{
    *docs = s->dl;
    *ndocs = s->ndl;
    *lens = s->lens;
    *deleted = s->deleted;
    *ndeleted = s->ndeleted;
}

void idx_shard_field_deltas(const idx_shard *s, const int64_t **ddocs,
                            const int64_t **dlen)
{
    *ddocs = s->ddocs;
    *dlen = s->dlen;
}

/* ---- reading the shard back ----------------------------------------------- */

int idx_shard_sort(idx_shard *s, kv_err *err)
{
    int rc = idx__grow(&s->order, &s->ocap, (uint64_t)s->terms.n + 1, 4, err);
    if (!rc)
        rc = idx__grow(&s->opre, &s->opcap, (uint64_t)s->terms.n + 1, 8,
                       err);
    return rc ? rc : idx__strtab_sorted(&s->terms, s->order, s->opre, err);
}

uint32_t idx_shard_nterms(const idx_shard *s)
{
    return s->terms.n;
}

const char *idx_shard_term(const idx_shard *s, uint32_t i, uint32_t *len)
{
    return idx__strtab_str(&s->terms, s->order[i], len);
}

uint64_t idx_shard_term_prefix(const idx_shard *s, uint32_t i)
{
    return s->opre[i];
}

#define TL_AHEAD 8

void idx_shard_term_prefetch(const idx_shard *s, uint32_t i)
{
    if (i + 2 * TL_AHEAD < s->terms.n) {
        uint32_t id = s->order[i + 2 * TL_AHEAD];
        __builtin_prefetch(&s->tb[id]);
        __builtin_prefetch(&s->terms.ent[id]);
    }
    if (i + TL_AHEAD < s->terms.n) {
        uint32_t id = s->order[i + TL_AHEAD];
        __builtin_prefetch(s->arena.data + s->tb[id].head);
        idx__strtab_prefetch_str(&s->terms, id);
    }
}

void idx_tl_scratch_free(idx_tl_scratch *sc)
{
    kv_buf_free(&sc->bytes);
    kv_free(sc->perm);
    memset(sc, 0, sizeof *sc);
}

uint32_t idx_shard_term_postings(const idx_shard *s, uint32_t i)
{
    return s->tb[s->order[i]].n;
}

uint32_t idx_shard_term_lower(const idx_shard *s, const char *term,
                              size_t tlen)
{
    uint32_t lo = 0, hi = s->terms.n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2, l;
        const char *x = idx__strtab_str(&s->terms, s->order[mid], &l);
        if (idx__bytes_cmp(x, l, term, tlen) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int srt_cmp(const void *a, const void *b)
{
    const struct idx_srt *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Put l's documents in id order (rare: a replaced document's id came
 * after larger ones). */
static int plist_sort(idx_tl_scratch *s, idx_plist *l, kv_err *err)
{
    int rc = idx__grow(&s->perm, &s->permcap, (uint64_t)l->n + 1,
                       sizeof *s->perm, err);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < l->n; i++)
        s->perm[i] = (struct idx_srt){ l->ids[i], i };
    qsort(s->perm, l->n, sizeof *s->perm, srt_cmp);
    idx_plist copy;
    idx_plist_init(&copy);
    idx_plist_reset(&copy, l->positions);
    for (uint32_t i = 0; !rc && i < l->n; i++)
        rc = idx_plist_copy_doc(&copy, l, s->perm[i].at, NULL, err);
    if (!rc) {
        idx_plist t = *l;
        *l = copy;
        copy = t;
    }
    idx_plist_free(&copy);
    return rc;
}

static int dels_sort(idx_tl_scratch *s, idx_dels *d, kv_err *err)
{
    int rc = idx__grow(&s->perm, &s->permcap, (uint64_t)d->n + 1,
                       sizeof *s->perm, err);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < d->n; i++)
        s->perm[i] = (struct idx_srt){ d->ids[i], i };
    qsort(s->perm, d->n, sizeof *s->perm, srt_cmp);
    idx_dels copy;
    idx_dels_init(&copy);
    for (uint32_t i = 0; !rc && i < d->n; i++) {
        uint32_t k = s->perm[i].at;
        rc = idx_dels_add(&copy, d->ids[k], d->cols + d->cstart[k],
                          d->cstart[k + 1] - d->cstart[k], err);
    }
    if (!rc) {
        idx_dels t = *d;
        *d = copy;
        copy = t;
    }
    idx_dels_free(&copy);
    return rc;
}

int idx_shard_term_lists(const idx_shard *s, uint32_t i, idx_tl_scratch *sc,
                         idx_plist *adds, idx_dels *dels, kv_err *err)
{
    const tbuf *tb = &s->tb[s->order[i]];
    kv_buf *by = &sc->bytes;
    by->len = 0;
    /* Gather the chain into one run of bytes (chunk sizes follow the
     * classes: 32, 128, 512, then 2 KiB). */
    uint8_t cls = 0;
    for (uint32_t off = tb->head; off; cls += cls < 3) {
        uint32_t next;
        memcpy(&next, s->arena.data + off, 4);
        uint32_t sz = next ? chunk_size(cls) - 4 : tb->used;
        int rc = kv_buf_append(by, s->arena.data + off + 4, sz, err);
        if (rc)
            return rc;
        off = next;
    }
    idx_plist_reset(adds, s->positions);
    idx_dels_reset(dels);
    const unsigned char *p = (const unsigned char *)by->data;
    const unsigned char *end = p + by->len;
    uint32_t last = 0;
    bool sorted_adds = true, sorted_dels = true;
    for (uint32_t r = 0; r < tb->n; r++) {
        uint64_t v, nv;
        if (!idx_varint_get(&p, end, &v) || !idx_varint_get(&p, end, &nv) ||
            nv == 0)
            goto bad;
        bool del = v & 1;
        uint64_t zz = v >> 1;
        int64_t gap = (int64_t)(zz >> 1) ^ -(int64_t)(zz & 1);
        last = (uint32_t)((int64_t)last + gap);
        int rc = idx_plist_reserve(adds, 1, nv, 0, err);
        if (rc)
            return rc;
        if (del) {
            uint32_t *cs = adds->vcol + adds->nv;   /* scratch room */
            for (uint64_t k = 0; k < nv; k++) {
                uint64_t c;
                if (!idx_varint_get(&p, end, &c))
                    goto bad;
                cs[k] = (uint32_t)c;
            }
            if (dels->n && last <= dels->ids[dels->n - 1])
                sorted_dels = false;
            if ((rc = idx_dels_add(dels, last, cs, (uint32_t)nv, err)))
                return rc;
            continue;
        }
        if (adds->n && last <= adds->ids[adds->n - 1])
            sorted_adds = false;
        /* A posting: views into the list directly. */
        adds->ids[adds->n] = last;
        for (uint64_t k = 0; k < nv; k++) {
            uint64_t c, tf;
            if (!idx_varint_get(&p, end, &c) ||
                !idx_varint_get(&p, end, &tf) || tf == 0)
                goto bad;
            uint32_t w = adds->nv++;
            adds->vcol[w] = (uint32_t)c;
            adds->vtf[w] = (uint32_t)tf;
            if (s->positions) {
                if ((rc = idx_plist_reserve(adds, 0, 0, tf, err)))
                    return rc;
                uint64_t acc = 0;
                for (uint64_t j = 0; j < tf; j++) {
                    uint64_t g;
                    if (!idx_varint_get(&p, end, &g))
                        goto bad;
                    acc += g;
                    adds->pos[adds->np++] = (uint32_t)acc;
                }
            }
            adds->poff[w + 1] = adds->np;
        }
        adds->n++;
        adds->vstart[adds->n] = adds->nv;
    }
    int rc = KVFTS_OK;
    if (!sorted_adds)
        rc = plist_sort(sc, adds, err);
    if (!rc && !sorted_dels)
        rc = dels_sort(sc, dels, err);
    return rc;
bad:
    return kv_seterr(err, KVFTS_ERROR, "index buffer damaged (term %u)", i);
}
