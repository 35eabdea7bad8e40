/*
 * idx_read.c -- reading the inverted index: a snapshot's segments, a
 * term's entry in each, its live postings across them, term enumeration,
 * and walks of a whole segment (merges, checks).
 *
 * Finding a term in a segment: one cursor seek to be32(SEG) 'D' TERM; the
 * record there is the chunk that starts with TERM, or else the one before
 * it holds TERM if any chunk does; its entries are scanned (a chunk is one
 * page).  A reader keeps one cursor for all of it.
 *
 * A term's live postings (idx_postings) merge one cursor per segment
 * holding the term (segcur) by doc id.  A document may have postings in
 * several segments (it was replaced): the newest one is current, unless a
 * deletion in a newer segment still cancels it.  The deletions of the term
 * are gathered from every segment first, with the rank (age) of the
 * segment they are in, so that checking a posting is a step of a pointer
 * through them.  Without deletions and with one segment, the merge is the
 * segment cursor itself.
 *
 * Block records after a seek come in bulk reads (kv_cursor_bulk, 16 KiB
 * or more a call); idx_postings_run() hands out the live ids of the loaded
 * blocks as an array for the query's intersections, without a copy when
 * one segment holds the term without deletions or filtering.
 *
 * A field-scoped reader selects the columns of that field with kind 1
 * (`_all`: every column with kind 2); a term whose postings are all in
 * selected columns is read as it is, one with other columns is filtered
 * document by document, and a block whose column summary has none of the
 * selected columns is skipped without decoding.
 *
 * Errors are sticky: an iterator that met damage returns the same error
 * from every later move (SQLite FTS5's p->rc), so it cannot be mistaken for
 * the end of the list.
 */
#include "idx_int.h"

#include <stdlib.h>
#include <string.h>

#define NOWHERE UINT32_MAX

/* Field ids looked up: a reader's own, or the handle's (in its dictionary
 * cache) while the commit stamp they were read at holds. */
struct fidtab {
    strtab names;
    uint32_t *fid;         /* per names id: the field id (0: none) */
    uint32_t cap;
    uint64_t stamp;        /* in the cache: the commit stamp (0: none) */
};

static void fidtab_free(struct fidtab *t)
{
    idx__strtab_free(&t->names);
    kv_free(t->fid);
}

struct idx_reader {
    kv_txn *txn;
    idx_segs segs;
    kv_cursor *c;          /* dictionary lookups */
    kv_buf key;
    idx_chunk_it it;
    struct segcache *cache; /* per segment (index in segs): its last chunk */
    idx_dict_cache *dict;  /* the handle's chunks, if it lent them */
    struct fidtab *ft;     /* field ids: the cache's, or own */
    struct fidtab own;
};

/* A segment's last dictionary chunk, decoded: terms looked up in byte order
 * (a check walks every term so; a query's terms are few) mostly fall in the
 * chunk the last lookup read, and find their entry by a binary search
 * instead of a B-tree seek, a copy of the chunk and a walk from its start. */
typedef struct cent {
    uint32_t toff, tlen;   /* the term in terms */
    uint32_t boff, blen;   /* the entry in rec */
    uint32_t ord;
} cent;

typedef struct segcache {
    kv_buf rec;            /* the chunk record */
    kv_buf terms;          /* its terms, back to back */
    cent *v;
    uint32_t n, cap;
    bool read;             /* a chunk of the segment was read before */
} segcache;

static void segcache_free(segcache *c)
{
    kv_buf_free(&c->rec);
    kv_buf_free(&c->terms);
    kv_free(c->v);
}

/* A handle's decoded dictionary chunks, kept across its searches: a
 * segment never changes once listed (its id is never used again), so a
 * chunk read once answers later lookups of its terms without Berkeley DB.
 * Per segment, the chunks sorted by first term; a chunk answers for the
 * terms from its first to hi (its last, raised to any term a floor seek
 * found in the gap after it: such a term is in no chunk). */
typedef struct dchunk {
    segcache c;
    kv_buf hi;
} dchunk;

typedef struct dseg {
    uint32_t id;
    uint32_t n, cap;
    dchunk **v;
} dseg;

#define DICT_POOL 16               /* buffers kept */
#define BT_SEEN 64                 /* terms opened lately, remembered */
#define BT_STALE 64                /* readers since a term's walk: stale */
#define BT_FILL_RATIO 16           /* a walk reading 1/16 of a term's blocks
                                      makes it a candidate (bt_note) */
#define DICT_POOL_BUF (256u << 10) /* larger ones are freed */

struct idx_dict_cache {
    dseg *segs;
    uint32_t n, cap;
    size_t bytes, max;
    idx_segs list;         /* the segment list as read at commit stamp */
    uint64_t list_stamp;   /* (0: none) */
    struct fidtab fields;  /* field ids read at commit stamp fields.stamp */
    /* Bulk-read buffers of closed postings readers, for the next ones: a
     * search's buffers freed together sit at the top of the heap, which
     * glibc then gives back to the kernel (and the next search faults the
     * pages in again): a fifth of a small query's time. */
    kv_buf pool[DICT_POOL];
    uint32_t npool;
    /* Blocks of closed postings readers, their buffers kept (blk_take):
     * a search's cursors grew theirs from nothing, a tenth of a short
     * phrase's time in malloc and free. */
    idx_block blk[DICT_POOL];
    uint32_t nblk;
    /* Terms' external blocks, read whole (bterm, below). */
    struct bterm **bt;
    uint32_t nbt, btcap;
    size_t bt_bytes, bt_max;
    bool bt_full;          /* a term was not kept for want of room */
    uint64_t readers;      /* readers opened with this cache */
    uint64_t seen[BT_SEEN];  /* (segment, ordinal) + 1 opened lately */
    uint64_t big[BT_SEEN];   /* ... found larger than bt_max / 8 */
    uint32_t seen_at, big_at;
};

/*
 * The handle's cache of terms' external blocks.  A term's block records
 * are read whole when a handle walks the term in a segment after a walk
 * that read a sixteenth of them or more (bt_note: a rare term's AND with a
 * common one that seeks a few of thousands leaves them Berkeley DB's to
 * read), and kept across searches as the dictionary chunks are (a segment
 * never changes once listed).  A walk or
 * a skip through them then costs a binary search or a step in memory, not
 * a Berkeley DB cursor call, and a search whose blocks are all here begins
 * no transaction at all (kv_txn_run_read).  At most bt_max bytes (twice
 * the dictionary's budget), a term at most an eighth of it.  When full,
 * the next reader's start (reader_use_dict) drops the terms no reader has
 * walked in its last BT_STALE readers (not all: a working set larger than
 * the cache would then be read whole again and again), and the cache
 * takes no new term until one goes; terms of segments no longer listed
 * go at the start that drops those segments' dictionary chunks.
 * Record i is at buf + at[i]: its 13-byte key, then its value, up to
 * at[i + 1].
 */
typedef struct bterm {
    uint32_t seg, ord;
    uint32_t n;            /* block records */
    uint32_t *at;          /* n + 1 offsets */
    kv_buf buf;
    uint8_t *ok;           /* per record: what its decodes checked
                              (idx_block_trust >> 8; NULL: none kept) */
    uint32_t users;        /* segment cursors walking it */
    uint64_t used;         /* the cache's reader count at its last walk */
} bterm;

static void bterm_free(bterm *b)
{
    if (!b)
        return;
    kv_free(b->at);
    kv_free(b->ok);
    kv_buf_free(&b->buf);
    kv_free(b);
}

static size_t bterm_bytes(const bterm *b)
{
    return sizeof *b + b->buf.cap + ((size_t)b->n + 1) * sizeof *b->at +
           (b->ok ? b->n : 0);
}

/* Record i of b: its 13-byte key (the block's first id at + 9), its value
 * and the value's length. */
static void bt_rec(const bterm *b, uint32_t i, const char **key,
                   const char **val, size_t *vlen)
{
    *key = b->buf.data + b->at[i];
    *val = *key + 13;
    *vlen = b->at[i + 1] - b->at[i] - 13;
}

/* Drop the terms no reader holds that are of a segment @p keep does not
 * list, or (@p stale) were not walked in the last BT_STALE readers. */
static void bt_drop(idx_dict_cache *d, const idx_segs *keep, bool stale)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < d->nbt; i++) {
        bterm *b = d->bt[i];
        bool listed = false;
        for (uint32_t j = 0; !listed && j < keep->n; j++)
            listed = keep->v[j].id == b->seg;
        if (stale && b->used + BT_STALE < d->readers)
            listed = false;
        if (listed || b->users) {
            d->bt[k++] = b;
            continue;
        }
        d->bt_bytes -= bterm_bytes(b);
        bterm_free(b);
    }
    d->nbt = k;
}

/* Where term (seg, ord) is or would go in d->bt, which is kept in
 * (segment, ordinal) order: a prefix's expansion looks up each of its
 * terms. */
static uint32_t bt_lower_key(const idx_dict_cache *d, uint32_t seg,
                             uint32_t ord)
{
    uint32_t lo = 0, hi = d->nbt;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const bterm *b = d->bt[mid];
        if (b->seg < seg || (b->seg == seg && b->ord < ord))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bterm *bt_find(idx_dict_cache *d, uint32_t seg, uint32_t ord)
{
    uint32_t i = bt_lower_key(d, seg, ord);
    return i < d->nbt && d->bt[i]->seg == seg && d->bt[i]->ord == ord
           ? d->bt[i] : NULL;
}

/* A term of a segment in the rings (0: an empty place). */
static uint64_t bt_key(uint32_t seg, uint32_t ord)
{
    return ((uint64_t)seg << 32 | ord) + 1;
}

static bool bt_ring_has(const uint64_t *ring, uint64_t key)
{
    for (uint32_t i = 0; i < BT_SEEN; i++)
        if (ring[i] == key)
            return true;
    return false;
}

static void bt_ring_add(uint64_t *ring, uint32_t *at, uint64_t key)
{
    ring[(*at)++ % BT_SEEN] = key;
}

/* Whether to read the term's blocks whole now: a walk lately read a
 * BT_FILL_RATIO-th of them or more (bt_note), so reading all costs at
 * most BT_FILL_RATIO such walks, once. */
static bool bt_admit(idx_dict_cache *d, uint32_t seg, uint32_t ord)
{
    uint64_t key = bt_key(seg, ord);
    return !d->bt_full && !bt_ring_has(d->big, key) &&
           bt_ring_has(d->seen, key);
}

/* A walk of the term read @p loads of its @p nblocks blocks: remember it
 * when that was a BT_FILL_RATIO-th or more.  (A rare term's AND with a
 * common one reads a few of thousands: reading them all would cost a
 * search that once took 30 us two milliseconds.  One that reads a
 * third of them, as GCIDE's "plural" AND "in" AND "the" does, is three
 * times faster from memory: 0.56 -> 0.16 ms, its phrase 0.84 -> 0.40; at
 * half, as before, it never got there.) */
static void bt_note(idx_dict_cache *d, uint32_t seg, uint32_t ord,
                    uint32_t loads, uint32_t nblocks)
{
    uint64_t key = bt_key(seg, ord);
    if ((uint64_t)loads * BT_FILL_RATIO >= nblocks &&
        !bt_ring_has(d->seen, key))
        bt_ring_add(d->seen, &d->seen_at, key);
}

static size_t dchunk_bytes(const dchunk *d)
{
    return sizeof *d + d->c.rec.cap + d->c.terms.cap + d->hi.cap +
           (size_t)d->c.cap * sizeof(cent);
}

/* A block for a cursor of a reader with the handle's cache d: one a
 * closed cursor left, if any (b is a new, empty one). */
static void blk_take(idx_dict_cache *d, idx_block *b)
{
    if (d && d->nblk)
        *b = d->blk[--d->nblk];
}

/* Done with block b: its buffers to d's pool, unless full or too large. */
static void blk_give(idx_dict_cache *d, idx_block *b)
{
    if (d && d->nblk < DICT_POOL && idx_block_bytes(b) <= DICT_POOL_BUF) {
        idx_block_recycle(b);
        d->blk[d->nblk++] = *b;
        idx_block_init(b);
    } else {
        idx_block_free(b);
    }
}

static void dchunk_free(dchunk *d)
{
    if (!d)
        return;
    segcache_free(&d->c);
    kv_buf_free(&d->hi);
    kv_free(d);
}

static void dseg_clear(dseg *s)
{
    for (uint32_t i = 0; i < s->n; i++)
        dchunk_free(s->v[i]);
    s->n = 0;
}

int idx_dict_cache_new(idx_dict_cache **out, size_t max_bytes, kv_err *err)
{
    *out = kv_calloc(1, sizeof **out);
    if (!*out)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    (*out)->max = max_bytes;
    (*out)->bt_max = 2 * max_bytes;
    return KVFTS_OK;
}

void idx_dict_cache_free(idx_dict_cache *d)
{
    if (!d)
        return;
    for (uint32_t i = 0; i < d->n; i++) {
        dseg_clear(&d->segs[i]);
        kv_free(d->segs[i].v);
    }
    kv_free(d->segs);
    idx_segs_free(&d->list);
    fidtab_free(&d->fields);
    for (uint32_t i = 0; i < d->npool; i++)
        kv_buf_free(&d->pool[i]);
    for (uint32_t i = 0; i < d->nblk; i++)
        idx_block_free(&d->blk[i]);
    for (uint32_t i = 0; i < d->nbt; i++)
        bterm_free(d->bt[i]);
    kv_free(d->bt);
    kv_free(d);
}

size_t idx_dict_cache_bytes(const idx_dict_cache *d)
{
    return d ? d->bytes + d->bt_bytes : 0;
}

/* The reader's segment list: the cache's when the snapshot's commit stamp
 * is the one it was read at. */
static int reader_segs(idx_reader *r, idx_dict_cache *d, kv_err *err)
{
    uint64_t stamp = kv_txn_stamp(r->txn);
    if (d && stamp && stamp == d->list_stamp) {
        r->segs.n = 0;
        for (uint32_t i = 0; i < d->list.n; i++)
            if (idx_segs_push(&r->segs, &d->list.v[i], err))
                return err->code;
        return KVFTS_OK;
    }
    int rc = idx_segs_read(&r->segs, r->txn, false, err);
    if (rc || !d)
        return rc;
    d->list_stamp = 0;
    d->list.n = 0;
    for (uint32_t i = 0; i < r->segs.n; i++)
        if (idx_segs_push(&d->list, &r->segs.v[i], err))
            return err->code;
    d->list_stamp = stamp;
    return KVFTS_OK;
}

static void reader_use_dict(idx_reader *r, idx_dict_cache *d)
{
    r->dict = d;
    r->ft = &r->own;
    if (!d)
        return;
    /* Field ids change only with commits (reindex renumbers them). */
    uint64_t stamp = kv_txn_stamp(r->txn);
    if (stamp) {
        if (d->fields.stamp != stamp) {
            idx__strtab_reset(&d->fields.names);
            d->fields.stamp = stamp;
        }
        r->ft = &d->fields;
    }
    /* Forget the segments this snapshot no longer lists (merged away). */
    uint32_t k = 0, had = d->n;
    for (uint32_t i = 0; i < d->n; i++) {
        bool listed = false;
        for (uint32_t j = 0; !listed && j < r->segs.n; j++)
            listed = r->segs.v[j].id == d->segs[i].id;
        if (listed) {
            d->segs[k++] = d->segs[i];
            continue;
        }
        for (uint32_t j = 0; j < d->segs[i].n; j++)
            d->bytes -= dchunk_bytes(d->segs[i].v[j]);
        dseg_clear(&d->segs[i]);
        kv_free(d->segs[i].v);
    }
    d->n = k;
    /* And the blocks of terms of such segments (a term's segment has
     * dictionary chunks here from its lookup on), and when it was full of
     * terms not walked lately: not a pass over every term each search. */
    d->readers++;
    if (k < had || d->bt_full)
        bt_drop(d, &r->segs, d->bt_full);
    d->bt_full = false;
}

kv_txn *idx_reader_txn(const idx_reader *r)
{
    return r->txn;
}

uint32_t idx_reader_max_docid(const idx_reader *r)
{
    uint32_t max = 0;
    for (uint32_t i = 0; i < r->segs.n; i++)
        if (r->segs.v[i].docs && r->segs.v[i].max_id > max)
            max = r->segs.v[i].max_id;
    return max;
}

int idx_reader_open(idx_reader **out, kv_txn *txn, kv_err *err)
{
    return idx_reader_open_dict(out, txn, NULL, err);
}

int idx_reader_open_dict(idx_reader **out, kv_txn *txn, idx_dict_cache *d,
                         kv_err *err)
{
    *out = kv_calloc(1, sizeof **out);
    if (!*out)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    idx_reader *r = *out;
    r->txn = txn;
    idx_chunk_it_init(&r->it);
    int rc = reader_segs(r, d, err);
    if (rc) {
        idx_reader_close(r);
        *out = NULL;
        return rc;
    }
    reader_use_dict(r, d);
    return KVFTS_OK;
}

void idx_reader_close(idx_reader *r)
{
    if (!r)
        return;
    if (r->cache)
        for (uint32_t i = 0; i < r->segs.n; i++)
            segcache_free(&r->cache[i]);
    kv_free(r->cache);
    idx_segs_free(&r->segs);
    kv_cursor_close(r->c);
    kv_buf_free(&r->key);
    idx_chunk_it_free(&r->it);
    fidtab_free(&r->own);
    kv_free(r);
}

/* ---- fields ---------------------------------------------------------------- */

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

/* The id of field name (0: never indexed), through the reader's cache. */
static int reader_fid(idx_reader *r, const char *name, size_t nlen,
                      uint32_t *out, kv_err *err)
{
    struct fidtab *t = r->ft;
    uint32_t i;
    if (idx__strtab_get(&t->names, name, nlen, &i)) {
        *out = t->fid[i];
        return KVFTS_OK;
    }
    idx_field f;
    int rc = field_rec(r->txn, name, nlen, &f, err);
    if (rc == KVFTS_ENOTFOUND) {
        f.id = 0;
        rc = KVFTS_OK;
    }
    bool added;
    if (!rc)
        rc = idx__grow(&t->fid, &t->cap, (uint64_t)t->names.n + 1, 4, err);
    if (!rc)
        rc = idx__strtab_put(&t->names, name, nlen, &i, &added, err);
    if (rc)
        return rc;
    t->fid[i] = f.id;
    *out = f.id;
    return KVFTS_OK;
}

/* What a (field, term) reader takes: the field's kind-1 columns, or with
 * fid 0 ("_all") every kind-2 column. */
typedef struct selector {
    bool all;
    bool any;              /* every column (checks) */
    uint32_t fid;
} selector;

static int selector_make(idx_reader *r, const char *field, size_t flen,
                         selector *s, bool *none, kv_err *err)
{
    *none = false;
    s->all = flen == 4 && memcmp(field, TOK_ALL_FIELD, 4) == 0;
    s->any = field == NULL;
    s->fid = 0;
    if (s->all || s->any)
        return KVFTS_OK;
    int rc = reader_fid(r, field, flen, &s->fid, err);
    if (!rc && s->fid == 0)
        *none = true;
    return rc;
}

static bool col_selected(const selector *s, uint32_t col)
{
    if (s->any)
        return true;
    return s->all ? (col & IDX_KIND_ALL) != 0
                  : (col >> 2) == s->fid && (col & IDX_KIND_FIELD);
}

/* ---- finding a term in a segment ------------------------------------------ */

/* Decode chunk record v into c (r->it walks it). */
static int segcache_fill(idx_reader *r, segcache *c, const char *v,
                         size_t vl, kv_err *err)
{
    c->n = 0;
    kv_buf_reset(&c->rec);
    kv_buf_reset(&c->terms);
    int rc = kv_buf_append(&c->rec, v, vl, err);
    if (!rc)
        rc = idx_chunk_open(&r->it, c->rec.data, c->rec.len, err);
    while (!rc && (rc = idx_chunk_next(&r->it, err)) == KVFTS_OK) {
        if (c->n == c->cap) {
            uint32_t cap = c->cap ? c->cap * 2 : 64;
            cent *nv = kv_realloc(c->v, cap * sizeof *nv);
            if (!nv)
                return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
            c->v = nv;
            c->cap = cap;
        }
        cent *e = &c->v[c->n];
        e->toff = (uint32_t)c->terms.len;
        e->tlen = (uint32_t)r->it.term.len;
        e->boff = (uint32_t)(r->it.body - c->rec.data);
        e->blen = (uint32_t)r->it.body_len;
        e->ord = r->it.ord;
        rc = kv_buf_append(&c->terms, r->it.term.data, r->it.term.len, err);
        c->n += !rc;
    }
    if (rc == KVFTS_ITEROVER)
        return KVFTS_OK;
    c->n = 0;               /* damaged: nothing cached */
    return rc;
}

static int cent_cmp(const segcache *c, uint32_t i, const char *t, size_t tl)
{
    return idx__bytes_cmp(c->terms.data + c->v[i].toff, c->v[i].tlen, t, tl);
}

/* The entry of the term looked up, at body: copied into rec and decoded
 * into e (which points into rec). */
static int entry_found(const char *body, size_t blen, uint32_t ord,
                       idx_entry *e, kv_buf *rec, uint32_t *ord_out,
                       bool *found, kv_err *err)
{
    kv_buf_reset(rec);
    int rc = kv_buf_append(rec, body, blen, err);
    if (rc)
        return rc;
    *ord_out = ord;
    *found = true;
    return idx_entry_decode(e, rec->data, rec->len, err);
}

/* Find term in chunk record v by walking it from its start.  The terms
 * ascend and each says how many bytes it shares with the one before (front
 * coding): with m, the bytes the last term compared shares with the wanted
 * one (it was smaller), a term sharing more than m with it is smaller
 * too, one sharing fewer is past the wanted term, and only one sharing
 * exactly m is compared, from byte m on. */
static int chunk_find(idx_reader *r, const char *v, size_t vl,
                      const char *term, size_t tlen, idx_entry *e,
                      kv_buf *rec, uint32_t *ord, bool *found, kv_err *err)
{
    const unsigned char *want = (const unsigned char *)term;
    size_t m = 0;
    bool first = true;
    int rc = idx_chunk_open(&r->it, v, vl, err);
    while (!rc && (rc = idx_chunk_next(&r->it, err)) == KVFTS_OK) {
        if (!first && r->it.shared != m) {
            if (r->it.shared > m)
                continue;
            return KVFTS_OK;
        }
        first = false;
        const unsigned char *a = (const unsigned char *)r->it.term.data;
        size_t n = r->it.term.len, k = m;
        while (k < n && k < tlen && a[k] == want[k])
            k++;
        if (k < n || k < tlen) {
            if (k == tlen || (k < n && a[k] > want[k]))
                return KVFTS_OK;        /* past the wanted term */
            m = k;
            continue;
        }
        return entry_found(r->it.body, r->it.body_len, r->it.ord, e, rec,
                           ord, found, err);
    }
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

/* The entry of term in decoded chunk c, if it holds it. */
static int cache_find(const segcache *c, const char *term, size_t tlen,
                      idx_entry *e, kv_buf *rec, uint32_t *ord, bool *found,
                      kv_err *err)
{
    uint32_t lo = 0, hi = c->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cent_cmp(c, mid, term, tlen) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == c->n || cent_cmp(c, lo, term, tlen) != 0)
        return KVFTS_OK;
    return entry_found(c->rec.data + c->v[lo].boff, c->v[lo].blen,
                       c->v[lo].ord, e, rec, ord, found, err);
}

/* The cursor's key against segment seg's chunk keys' prefix (memcmp's
 * sign; a key too short for one is before). */
static int chunk_pfx_cmp(const kv_cursor *c, uint32_t seg)
{
    const char *k;
    size_t kl;
    unsigned char pfx[5];
    kv_put_be32(pfx, seg);
    pfx[4] = 'D';
    kv_cursor_key(c, &k, &kl);
    return kl < 5 ? -1 : memcmp(k, pfx, 5);
}

/* Position the reader's dictionary cursor on the chunk of segment seg that
 * would hold term (the last one from before it): *at false if the term
 * comes before the segment's first chunk. */
static int chunk_seek(idx_reader *r, uint32_t seg, const char *term,
                      size_t tlen, bool *at, kv_err *err)
{
    *at = false;
    int rc = r->c ? KVFTS_OK : kv_cursor_open(&r->c, r->txn, KV_TERMS, err);
    if (!rc)
        rc = idx_key_chunk(&r->key, seg, term, tlen, err);
    if (!rc)
        rc = kv_cursor_seek_floor(r->c, r->key.data, r->key.len, err);
    if (rc == KVFTS_ITEROVER)
        return KVFTS_OK;
    if (rc)
        return rc;
    *at = chunk_pfx_cmp(r->c, seg) == 0;
    return KVFTS_OK;
}

static dseg *dict_seg(idx_dict_cache *d, uint32_t id, kv_err *err)
{
    for (uint32_t i = 0; i < d->n; i++)
        if (d->segs[i].id == id)
            return &d->segs[i];
    if (idx__grow(&d->segs, &d->cap, (uint64_t)d->n + 1, sizeof *d->segs,
                  err))
        return NULL;
    dseg *s = &d->segs[d->n++];
    memset(s, 0, sizeof *s);
    s->id = id;
    return s;
}

/* Index of the last chunk of s whose first term is <= term; s->n if none. */
static uint32_t dseg_floor(const dseg *s, const char *term, size_t tlen)
{
    uint32_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cent_cmp(&s->v[mid]->c, 0, term, tlen) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? lo - 1 : s->n;
}

/* seg_find through the handle's cache. */
static int dict_find(idx_reader *r, uint32_t si, const char *term,
                     size_t tlen, idx_entry *e, kv_buf *rec, uint32_t *ord,
                     bool *found, kv_err *err)
{
    idx_dict_cache *d = r->dict;
    dseg *s = dict_seg(d, r->segs.v[si].id, err);
    if (!s)
        return err->code;
    uint32_t i = dseg_floor(s, term, tlen);
    dchunk *c = i < s->n ? s->v[i] : NULL;
    if (c && idx__bytes_cmp(term, tlen, c->hi.data, c->hi.len) <= 0)
        return cache_find(&c->c, term, tlen, e, rec, ord, found, err);
    bool at;
    int rc = chunk_seek(r, s->id, term, tlen, &at, err);
    if (rc || !at)
        return rc;
    const char *k, *v;
    size_t kl, vl;
    kv_cursor_key(r->c, &k, &kl);
    kv_cursor_val(r->c, &v, &vl);
    if (!c || cent_cmp(&c->c, 0, k + 5, kl - 5) != 0) {
        /* A chunk not cached yet: decode it, in its place. */
        dchunk *n = kv_calloc(1, sizeof *n);
        if (!n)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        rc = segcache_fill(r, &n->c, v, vl, err);
        if (!rc && n->c.n == 0)
            rc = kv_seterr(err, KVFTS_ECORRUPT, "empty dictionary chunk");
        if (!rc)
            rc = kv_buf_append(&n->hi, n->c.terms.data +
                               n->c.v[n->c.n - 1].toff,
                               n->c.v[n->c.n - 1].tlen, err);
        if (!rc)
            rc = idx__grow(&s->v, &s->cap, (uint64_t)s->n + 1, sizeof *s->v,
                           err);
        if (rc) {
            dchunk_free(n);
            return rc;
        }
        size_t b = dchunk_bytes(n);
        if (d->bytes + b > d->max) {       /* full: start again */
            for (uint32_t j = 0; j < d->n; j++)
                dseg_clear(&d->segs[j]);
            d->bytes = 0;
            i = 0;
        }
        /* The floor seek's chunk starts after cached chunk i (if any), at
         * or before the term, so before chunk i + 1. */
        uint32_t at_i = i < s->n ? i + 1 : 0;
        memmove(s->v + at_i + 1, s->v + at_i, (s->n - at_i) * sizeof *s->v);
        s->v[at_i] = n;
        s->n++;
        d->bytes += b;
        c = n;
    }
    if (idx__bytes_cmp(term, tlen, c->hi.data, c->hi.len) > 0) {
        kv_buf_reset(&c->hi);            /* a term in the gap after c */
        if ((rc = kv_buf_append(&c->hi, term, tlen, err)))
            return rc;
    }
    return cache_find(&c->c, term, tlen, e, rec, ord, found, err);
}

/* Find term in the segment at index si of the reader's list: *found, the
 * entry decoded into e, its ordinal, and the entry's bytes copied into rec
 * (e points into it). */
static int seg_find(idx_reader *r, uint32_t si, const char *term,
                    size_t tlen, idx_entry *e, kv_buf *rec, uint32_t *ord,
                    bool *found, kv_err *err)
{
    *found = false;
    if (r->dict)
        return dict_find(r, si, term, tlen, e, rec, ord, found, err);
    if (!r->cache && !(r->cache = kv_calloc(r->segs.n ? r->segs.n : 1,
                                            sizeof *r->cache)))
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    segcache *c = &r->cache[si];
    uint32_t seg = r->segs.v[si].id;
    int rc = KVFTS_OK;
    if (!c->n || cent_cmp(c, 0, term, tlen) > 0 ||
        cent_cmp(c, c->n - 1, term, tlen) < 0) {
        bool at;
        rc = chunk_seek(r, seg, term, tlen, &at, err);
        if (rc || !at)
            return rc;
        const char *v;
        size_t vl;
        kv_cursor_val(r->c, &v, &vl);
        if (!c->read) {
            /* The segment's first lookup (a query's one term): walk the
             * chunk to the term, without copying and indexing it.  Only a
             * second lookup caches a chunk. */
            c->read = true;
            return chunk_find(r, v, vl, term, tlen, e, rec, ord, found,
                              err);
        }
        if ((rc = segcache_fill(r, c, v, vl, err)))
            return rc;
    }
    return cache_find(c, term, tlen, e, rec, ord, found, err);
}

/* Postings and deletions of entry e in selection s. */
static void entry_counts(const idx_entry *e, const selector *s,
                         uint64_t *df, uint64_t *ndel)
{
    if (s->any) {
        *df = e->ndocs;
        *ndel = e->ndel;
        return;
    }
    if (s->all) {
        *df = e->df_all;
        *ndel = e->ndel_all;
        return;
    }
    *df = *ndel = 0;
    for (uint32_t i = 0; i < e->ncols; i++)
        if (col_selected(s, e->cols[i])) {
            *df += e->df[i];
            *ndel += e->ndelc[i];
        }
}

int idx_term_get(idx_reader *r, const char *field, size_t flen,
                 const char *term, size_t tlen, idx_term_info *out,
                 kv_err *err)
{
    selector s;
    bool none;
    int rc = selector_make(r, field, flen, &s, &none, err);
    if (rc)
        return rc;
    out->df = 0;
    out->positions = false;
    if (none)
        return kv_seterr(err, KVFTS_ENOTFOUND, "no such term");
    idx_entry e;
    idx_entry_init(&e);
    kv_buf rec = KV_BUF_INIT;
    uint64_t df = 0, del = 0;
    for (uint32_t i = 0; !rc && i < r->segs.n; i++) {
        bool found;
        uint32_t ord;
        rc = seg_find(r, i, term, tlen, &e, &rec, &ord, &found,
                      err);
        if (rc || !found)
            continue;
        uint64_t a, d;
        entry_counts(&e, &s, &a, &d);
        df += a;
        del += d;
        if (a)
            out->positions |= (e.flags & IDX_E_POSITIONS) != 0;
    }
    idx_entry_free(&e);
    kv_buf_free(&rec);
    if (!rc && del > df)
        rc = kv_seterr(err, KVFTS_ECORRUPT, "term '%.*s': more deletions "
                       "(%llu) than postings (%llu)", (int)(tlen > 64 ? 64 :
                       tlen), term, (unsigned long long)del,
                       (unsigned long long)df);
    if (rc)
        return rc;
    out->df = df - del;
    return out->df ? KVFTS_OK : kv_seterr(err, KVFTS_ENOTFOUND,
                                          "no such term");
}

/* ---- one segment's postings of a term -------------------------------------- */

typedef struct segcur {
    uint32_t rank;         /* the segment's place in the list (age) */
    uint32_t seg;
    uint32_t ord;
    idx_entry e;
    kv_buf rec;            /* the chunk record the entry points into */
    uint8_t *sel;          /* per column index: selected */
    uint32_t selcap;
    uint32_t *fid;         /* per column index: its field + 1, 0 when not
                              selected (a phrase's views, by field) */
    uint32_t fidcap;
    uint64_t selbits;      /* bit (index & 63) of the selected columns */
    bool filter;           /* some columns are not selected */
    idx_block blk;
    uint32_t i;            /* position in the block */
    bool have_blk;
    bool external;
    kv_cursor *c;          /* external blocks */
    kv_bulk bulk;          /* the records after the cursor's, read ahead */
    bool bulk_on;          /* the current record is bulk's, not c's */
    uint32_t steps;        /* plain steps since the last seek */
    const char *rk, *rv;   /* the current record (borrowed) */
    size_t rkl, rvl;
    kv_buf seek;
    uint32_t cur;          /* current doc id, NOWHERE at the end */
    uint32_t gen;          /* blocks loaded (a change: the run is stale) */
    kv_txn *txn;
    idx_dict_cache *dict;  /* the handle's, or NULL */
    bterm *bt;             /* the term's blocks, cached: no cursor */
    uint32_t bi;           /* the current record in bt (n: past the end) */
    bool blk_bt;           /* blk was decoded from bt's record blk_rec */
    uint32_t blk_rec;
} segcur;

/* Done with sc's block: when it came from the cache, the record keeps what
 * the decodes checked (idx_block_trust), so that its next decodes skip
 * those checks. */
static void bt_mark_checked(segcur *sc)
{
    if (sc->blk_bt && sc->bt && sc->bt->ok && sc->blk_rec < sc->bt->n) {
        uint8_t t = (uint8_t)(idx_block_trust(&sc->blk) >> 8);
        if (t > sc->bt->ok[sc->blk_rec])
            sc->bt->ok[sc->blk_rec] = t;
    }
    sc->blk_bt = false;
}

static void segcur_free(segcur *sc)
{
    idx_dict_cache *d = sc->dict;
    bt_mark_checked(sc);
    if (sc->bt)
        sc->bt->users--;
    else if (d && sc->external && sc->have_blk)
        bt_note(d, sc->seg, sc->ord, sc->gen, sc->e.nblocks);
    kv_buf *b = &sc->bulk.buf;
    if (d && b->cap && b->cap <= DICT_POOL_BUF && d->npool < DICT_POOL) {
        d->pool[d->npool++] = *b;
        *b = (kv_buf)KV_BUF_INIT;
    }
    idx_entry_free(&sc->e);
    kv_buf_free(&sc->rec);
    kv_free(sc->sel);
    kv_free(sc->fid);
    blk_give(d, &sc->blk);
    kv_cursor_close(sc->c);
    kv_bulk_free(&sc->bulk);
    kv_buf_free(&sc->seek);
}

/* True if the current document of the block has a selected view. */
static bool doc_selected(const segcur *sc, uint32_t i)
{
    const idx_plist *l = &sc->blk.l;
    for (uint32_t v = l->vstart[i]; v < l->vstart[i + 1]; v++)
        if (sc->sel[l->vcol[v]])
            return true;
    return false;
}

/* A block was loaded: go to its first selected document at or after
 * position i (*left: none in the block). */
static int block_settle(segcur *sc, uint32_t i, uint32_t target, bool *left,
                        kv_err *err)
{
    idx_plist *l = &sc->blk.l;
    *left = false;
    if (target && i < l->n)
        i = idx_gallop(l->ids, i, l->n, target);
    if (sc->filter && i < l->n) {
        int rc = idx_block_need_cols(&sc->blk, err);
        if (rc)
            return rc;
        while (i < l->n && !doc_selected(sc, i))
            i++;
    }
    if (i >= l->n) {
        *left = true;
        return KVFTS_OK;
    }
    sc->i = i;
    sc->cur = l->ids[i];
    return KVFTS_OK;
}

/* The block records of a term are read in key order: a seek puts the
 * cursor on one (rec_cur), and the ones after it come in bulk reads of
 * 16 KiB or more (rec_next), which cost Berkeley DB one call for many
 * records instead of one call each. */
static int rec_cur(segcur *sc, int rc)
{
    sc->bulk_on = false;
    if (rc == KVFTS_OK) {
        kv_cursor_key(sc->c, &sc->rk, &sc->rkl);
        kv_cursor_val(sc->c, &sc->rv, &sc->rvl);
    }
    return rc;
}

/* Record i of the cached blocks as the current one (KVFTS_ITEROVER past
 * the last, as a cursor past the term's records would be on another's). */
static int bt_at(segcur *sc, uint32_t i)
{
    const bterm *b = sc->bt;
    if (i >= b->n) {
        sc->bi = b->n;
        return KVFTS_ITEROVER;
    }
    sc->bi = i;
    sc->rkl = 13;
    bt_rec(b, i, &sc->rk, &sc->rv, &sc->rvl);
    return KVFTS_OK;
}

/* The first cached record whose block starts at @p first or later. */
static uint32_t bt_lower(const bterm *b, uint32_t first)
{
    uint32_t lo = 0, hi = b->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const unsigned char *k =
            (const unsigned char *)b->buf.data + b->at[mid];
        if (kv_get_be32(k + 9) < first)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int rec_next(segcur *sc, kv_err *err)
{
    if (sc->bt)
        return bt_at(sc, sc->bi + 1);
    if (sc->bulk_on && kv_bulk_next(&sc->bulk, &sc->rk, &sc->rkl, &sc->rv,
                                    &sc->rvl))
        return KVFTS_OK;
    int rc = kv_cursor_bulk(sc->c, NULL, 0, &sc->bulk, err);
    sc->bulk_on = rc == KVFTS_OK;
    if (rc)
        return rc;
    return kv_bulk_next(&sc->bulk, &sc->rk, &sc->rkl, &sc->rv, &sc->rvl)
           ? KVFTS_OK : KVFTS_ITEROVER;
}

/* One record on for a skip, which peeks at one or two: from the bulk
 * buffer if one is being walked, else a plain step (a bulk read of 16 KiB
 * for a peek would cost a rare term's intersection more than it saves),
 * until two plain steps since the last seek show the list is being read
 * on rather than jumped through. */
static int rec_step(segcur *sc, kv_err *err)
{
    if (sc->bt)
        return bt_at(sc, sc->bi + 1);
    if (sc->bulk_on || sc->steps >= 2)  /* walking on: read ahead */
        return rec_next(sc, err);
    sc->steps++;
    return rec_cur(sc, kv_cursor_next(sc->c, err));
}

/* Load the block record the cursor is on, if it belongs to the term;
 * skip it (*skipped) when its column summary has no selected column. */
static int load_ext(segcur *sc, int rc, bool *end, bool *skipped, kv_err *err)
{
    *end = *skipped = false;
    if (rc == KVFTS_ITEROVER) {
        *end = true;
        return KVFTS_OK;
    }
    if (rc)
        return rc;
    const char *k = sc->rk, *v = sc->rv;
    size_t kl = sc->rkl, vl = sc->rvl;
    unsigned char pfx[9];
    kv_put_be32(pfx, sc->seg);
    pfx[4] = 'B';
    kv_put_be32(pfx + 5, sc->ord);
    if (kl != 13 || memcmp(k, pfx, 9) != 0) {
        *end = true;
        return KVFTS_OK;
    }
    uint32_t first = kv_get_be32((const unsigned char *)k + 9), span, mtf;
    uint64_t mask;
    if (sc->filter && idx_block_peek(v, vl, &span, &mtf, &mask) &&
        !(mask & sc->selbits)) {
        *skipped = true;
        return KVFTS_OK;
    }
    sc->have_blk = true;
    sc->gen++;
    bt_mark_checked(sc);                 /* the block this one replaces */
    int trust = sc->bt && sc->bt->ok && sc->bi < sc->bt->n
                ? (int)sc->bt->ok[sc->bi] << 8 : 0;
    sc->blk_bt = sc->bt != NULL;
    sc->blk_rec = sc->bi;
    return idx_block_decode(&sc->blk, first, v, vl, sc->e.ncols,
                            IDX_DEC_IDS | trust |
                            (sc->bt ? IDX_DEC_CACHED : 0), err);
}

static int ext_seek(segcur *sc, uint32_t first, kv_err *err)
{
    if (sc->bt)
        return bt_at(sc, bt_lower(sc->bt, first));
    unsigned char key[13];
    idx_key_block(key, sc->seg, sc->ord, first);
    sc->steps = 0;
    return rec_cur(sc, kv_cursor_seek(sc->c, key, sizeof key, err));
}

/* Walk external blocks from the cursor's record on until one holds a
 * selected document >= target. */
static int ext_walk(segcur *sc, int rc, uint32_t target, kv_err *err)
{
    for (;;) {
        bool end, skipped, left;
        rc = load_ext(sc, rc, &end, &skipped, err);
        if (rc)
            return rc;
        if (end) {
            sc->cur = NOWHERE;
            return KVFTS_OK;
        }
        if (!skipped) {
            rc = block_settle(sc, 0, target, &left, err);
            if (rc || !left)
                return rc;
        }
        rc = rec_next(sc, err);
    }
}

/* Read the block records of term @p ord of segment @p seg (@p nblocks of
 * them) whole into the handle's cache d (*@p out set), through @p bulk,
 * unless they take more than an eighth of its room (remembered in big) or
 * it has no room left (then bt_full: the next reader's start drops the
 * stale terms). */
static int bt_read(idx_dict_cache *d, kv_txn *txn, uint32_t seg,
                   uint32_t ord, uint32_t nblocks, kv_bulk *bulk,
                   bterm **out, kv_err *err)
{
    size_t limit = d->bt_max / 8;
    if (d->bt_bytes + limit > d->bt_max) {
        d->bt_full = true;
        return KVFTS_OK;
    }
    /* Blocks hold up to IDX_BLOCK_BYTES, most more than half that: a term
     * of more blocks than fit at half is too big, without reading it. */
    if ((uint64_t)nblocks * (IDX_BLOCK_BYTES / 2) > limit) {
        bt_ring_add(d->big, &d->big_at, bt_key(seg, ord));
        return KVFTS_OK;
    }
    bterm *b = kv_calloc(1, sizeof *b);
    kv_cursor *c = NULL;
    unsigned char key[13];
    idx_key_block(key, seg, ord, 0);
    uint32_t cap = 0;
    int rc = b ? kv_cursor_open(&c, txn, KV_POSTINGS, err)
               : kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    bool more = !rc, big = false;
    for (bool first = true; more && !rc; first = false) {
        rc = kv_cursor_bulk(c, first ? key : NULL, first ? sizeof key : 0,
                            bulk, err);
        if (rc == KVFTS_ITEROVER) {
            rc = KVFTS_OK;
            break;
        }
        const char *k, *v;
        size_t kl, vl;
        while (!rc && more && kv_bulk_next(bulk, &k, &kl, &v, &vl)) {
            if (kl != 13 || memcmp(k, key, 9) != 0) {
                more = false;               /* another term's */
                break;
            }
            if (b->buf.len + kl + vl > limit) {
                more = false;
                big = true;
                break;
            }
            rc = idx__grow(&b->at, &cap, (uint64_t)b->n + 2, sizeof *b->at,
                           err);
            if (!rc)
                rc = kv_buf_append(&b->buf, k, kl, err);
            if (!rc)
                rc = kv_buf_append(&b->buf, v, vl, err);
            if (!rc)
                b->at[++b->n] = (uint32_t)b->buf.len;
        }
    }
    kv_cursor_close(c);
    bulk->it = NULL;
    if (!rc && b && b->n && !big) {
        b->at[0] = 0;
        b->seg = seg;
        b->ord = ord;
        b->ok = kv_calloc(b->n, 1);     /* (without it: checked each time) */
        rc = idx__grow(&d->bt, &d->btcap, (uint64_t)d->nbt + 1,
                       sizeof *d->bt, err);
        if (!rc) {
            uint32_t at = bt_lower_key(d, seg, ord);
            memmove(d->bt + at + 1, d->bt + at,
                    (size_t)(d->nbt - at) * sizeof *d->bt);
            d->bt[at] = b;
            d->nbt++;
            d->bt_bytes += bterm_bytes(b);
            *out = b;
            return KVFTS_OK;
        }
    }
    if (big)
        bt_ring_add(d->big, &d->big_at, bt_key(seg, ord));
    bterm_free(b);
    return rc;
}

static int bt_fill(segcur *sc, kv_err *err)
{
    return bt_read(sc->dict, sc->txn, sc->seg, sc->ord, sc->e.nblocks,
                   &sc->bulk, &sc->bt, err);
}

static int segcur_start(segcur *sc, kv_err *err)
{
    if (!sc->external) {
        bool left;
        int rc = idx_block_decode(&sc->blk, sc->e.first, sc->e.blk,
                                  sc->e.blk_len, sc->e.ncols, IDX_DEC_IDS,
                                  err);
        sc->have_blk = true;
        sc->blk_bt = false;
        sc->gen++;
        if (!rc)
            rc = block_settle(sc, 0, 0, &left, err);
        if (!rc && left)
            sc->cur = NOWHERE;
        return rc;
    }
    int rc = KVFTS_OK;
    if (sc->dict) {
        sc->bt = bt_find(sc->dict, sc->seg, sc->ord);
        if (!sc->bt && bt_admit(sc->dict, sc->seg, sc->ord))
            rc = bt_fill(sc, err);
        if (sc->bt) {
            sc->bt->users++;
            sc->bt->used = sc->dict->readers;
        }
    }
    if (!rc && !sc->bt)
        rc = kv_cursor_open(&sc->c, sc->txn, KV_POSTINGS, err);
    if (!rc)
        rc = ext_walk(sc, ext_seek(sc, 0, err), 0, err);
    return rc;
}

static int segcur_next(segcur *sc, kv_err *err)
{
    bool left;
    int rc = block_settle(sc, sc->i + 1, 0, &left, err);
    if (rc || !left)
        return rc;
    if (!sc->external) {
        sc->cur = NOWHERE;
        return KVFTS_OK;
    }
    return ext_walk(sc, rec_next(sc, err), 0, err);
}

/* Blocks skip_to steps over one by one before it seeks. */
#define NEAR_STEPS 2

static int segcur_skip(segcur *sc, uint32_t target, kv_err *err)
{
    if (sc->cur >= target)
        return KVFTS_OK;
    idx_plist *l = &sc->blk.l;
    bool left;
    int rc;
    if (l->n && l->ids[l->n - 1] >= target) {
        rc = block_settle(sc, sc->i, target, &left, err);
        if (rc || !left)
            return rc;
    }
    if (!sc->external || target > sc->e.last) {
        sc->cur = NOWHERE;
        return KVFTS_OK;
    }
    /* Intersections mostly skip to a near block: step there (neighbouring
     * records, often on the same page) before a search from the root;
     * blocks stepped over are not decoded, their key and header tell their
     * first and last ids. */
    for (int step = 0; step < NEAR_STEPS; step++) {
        rc = rec_step(sc, err);
        if (rc == KVFTS_ITEROVER) {
            sc->cur = NOWHERE;
            return KVFTS_OK;
        }
        if (rc)
            return rc;
        const char *k = sc->rk, *v = sc->rv;
        size_t kl = sc->rkl, vl = sc->rvl;
        uint32_t span, mtf;
        uint64_t mask;
        if (kl != 13 || !idx_block_peek(v, vl, &span, &mtf, &mask))
            return ext_walk(sc, KVFTS_OK, target, err);
        uint32_t first = kv_get_be32((const unsigned char *)k + 9);
        if (first + (uint64_t)span >= target)
            return ext_walk(sc, KVFTS_OK, target, err);
    }
    /* The block that may hold target is the last one whose first id is
     * <= target: range-seek to target's key, then look one record back. */
    rc = ext_seek(sc, target, err);
    bool at_end = rc == KVFTS_ITEROVER;
    if (rc && !at_end)
        return rc;
    if (!at_end) {
        const char *k;
        size_t kl;
        k = sc->rk;
        kl = sc->rkl;
        if (kl == 13 && kv_get_be32((const unsigned char *)k + 9) == target)
            return ext_walk(sc, KVFTS_OK, target, err);
    }
    if (sc->bt)
        rc = at_end ? bt_at(sc, sc->bt->n - 1)
             : sc->bi == 0 ? KVFTS_ITEROVER : bt_at(sc, sc->bi - 1);
    else
        rc = rec_cur(sc, at_end ? kv_cursor_last(sc->c, err)
                                : kv_cursor_prev(sc->c, err));
    if (rc && rc != KVFTS_ITEROVER)
        return rc;
    return ext_walk(sc, rc, target, err);
}

/* ---- a term's live postings ------------------------------------------------ */

struct idx_postings {
    idx_reader *r;
    selector s;
    idx_term_info info;
    segcur *sc;
    uint32_t nsc;
    uint32_t *dels;        /* deletion ids, ascending (maybe repeated) */
    uint32_t *drank;       /* the rank of each */
    uint32_t ndel, dcap, rcap, dat;
    segcur *at;            /* the cursor of the current posting */
    uint32_t cur;
    bool started, eof;
    int rc;                /* sticky error */
    kv_err err;
    idx_view *views;
    uint32_t vcap;
    uint32_t *run;         /* idx_postings_run() when it copies */
    uint32_t runcap;
    uint32_t runn, runat;  /* the kept run's length (0: none); where cur
                              was */
    uint64_t runkey;       /* the cursors' block loads it was made from */
    uint32_t runbound;     /* and the end of their blocks it stopped at */
    uint32_t *pidx;        /* idx_postings_phrase's candidates' indexes */
    uint32_t pidxcap;
    uint16_t *pmap;        /* and its map (IDX_PHRASE_MAP) */
    uint32_t *pscr;        /* and the scratch of a word said twice */
    uint32_t pscrcap;
};

void idx_postings_close(idx_postings *p)
{
    if (!p)
        return;
    for (uint32_t i = 0; i < p->nsc; i++)
        segcur_free(&p->sc[i]);
    kv_free(p->sc);
    kv_free(p->pidx);
    kv_free(p->pmap);
    kv_free(p->pscr);
    kv_free(p->dels);
    kv_free(p->drank);
    kv_free(p->views);
    kv_free(p->run);
    kv_free(p);
}

typedef struct delref {
    uint32_t id, rank;
} delref;

static int delref_cmp(const void *a, const void *b)
{
    const delref *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Gather the deletions of every segment's entry (ids, ranks), sorted. */
static int gather_dels(idx_postings *p, const idx_entry *e, uint32_t rank,
                       kv_err *err)
{
    uint32_t *ids = NULL, cap = 0;
    int rc = idx_entry_dels(e, &ids, &cap, err);
    uint64_t need = (uint64_t)p->ndel + e->ndel;
    if (!rc)
        rc = idx__grow(&p->dels, &p->dcap, need, 4, err);
    if (!rc)
        rc = idx__grow(&p->drank, &p->rcap, need, 4, err);
    for (uint64_t k = 0; !rc && k < e->ndel; k++) {
        p->dels[p->ndel] = ids[k];
        p->drank[p->ndel] = rank;
        p->ndel++;
    }
    kv_free(ids);
    return rc;
}

static int sort_dels(idx_postings *p, kv_err *err)
{
    if (p->ndel < 2)
        return KVFTS_OK;
    delref *d = kv_malloc((size_t)p->ndel * sizeof *d);
    if (!d)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < p->ndel; i++)
        d[i] = (delref){ p->dels[i], p->drank[i] };
    qsort(d, p->ndel, sizeof *d, delref_cmp);
    for (uint32_t i = 0; i < p->ndel; i++) {
        p->dels[i] = d[i].id;
        p->drank[i] = d[i].rank;
    }
    kv_free(d);
    return KVFTS_OK;
}

int idx_postings_open(idx_postings **out, idx_reader *r, const char *field,
                      size_t flen, const char *term, size_t tlen,
                      kv_err *err)
{
    *out = NULL;
    idx_postings *p = kv_calloc(1, sizeof *p);
    if (!p)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    p->r = r;
    bool none;
    int rc = selector_make(r, field, flen, &p->s, &none, err);
    if (!rc && none)
        rc = kv_seterr(err, KVFTS_ENOTFOUND, "no such term");
    if (!rc && r->segs.n &&
        !(p->sc = kv_calloc(r->segs.n, sizeof *p->sc)))
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    uint64_t df = 0, del = 0;
    for (uint32_t i = 0; !rc && i < r->segs.n; i++) {
        segcur *sc = &p->sc[p->nsc];
        memset(sc, 0, sizeof *sc);
        idx_entry_init(&sc->e);
        idx_block_init(&sc->blk);
        bool found;
        rc = seg_find(r, i, term, tlen, &sc->e, &sc->rec,
                      &sc->ord, &found, err);
        if (!rc && found) {
            uint64_t a, d;
            entry_counts(&sc->e, &p->s, &a, &d);
            df += a;
            del += d;
            if (sc->e.ndel)
                rc = gather_dels(p, &sc->e, i, err);
            if (!rc && a) {
                p->info.positions |= (sc->e.flags & IDX_E_POSITIONS) != 0;
                sc->rank = i;
                sc->seg = r->segs.v[i].id;
                sc->txn = r->txn;
                sc->dict = r->dict;
                sc->external = (sc->e.flags & IDX_E_EXTERNAL) != 0;
                rc = idx__grow(&sc->sel, &sc->selcap, sc->e.ncols, 1, err);
                if (!rc)
                    rc = idx__grow(&sc->fid, &sc->fidcap, sc->e.ncols, 4,
                                   err);
                for (uint32_t c = 0; !rc && c < sc->e.ncols; c++) {
                    sc->sel[c] = col_selected(&p->s, sc->e.cols[c]);
                    sc->fid[c] = sc->sel[c] ? (sc->e.cols[c] >> 2) + 1 : 0;
                    if (sc->sel[c])
                        sc->selbits |= 1ull << (c < 63 ? c : 63);
                    else
                        sc->filter = true;
                }
                if (!rc) {
                    idx_dict_cache *dc = r->dict;
                    if (dc && dc->npool)  /* a kept buffer for its reads */
                        sc->bulk.buf = dc->pool[--dc->npool];
                    blk_take(dc, &sc->blk);
                    p->nsc++;
                    continue;
                }
            }
        }
        segcur_free(sc);
    }
    if (!rc && del > df)
        rc = kv_seterr(err, KVFTS_ECORRUPT, "term '%.*s': more deletions "
                       "than postings", (int)(tlen > 64 ? 64 : tlen), term);
    if (!rc)
        rc = sort_dels(p, err);
    if (!rc && df == del)
        rc = kv_seterr(err, KVFTS_ENOTFOUND, "no such term");
    if (rc) {
        idx_postings_close(p);
        return rc;
    }
    p->info.df = df - del;
    p->cur = 0;
    *out = p;
    return KVFTS_OK;
}

static int fail(idx_postings *p, int rc, kv_err *err)
{
    p->rc = rc;
    p->err = *err;
    return rc;
}

/* True if a deletion in a segment newer than rank cancels id. */
static bool deleted(idx_postings *p, uint32_t id, uint32_t rank)
{
    while (p->dat < p->ndel && p->dels[p->dat] < id)
        p->dat++;
    for (uint32_t k = p->dat; k < p->ndel && p->dels[k] == id; k++)
        if (p->drank[k] > rank)
            return true;
    return false;
}

/* Settle on the smallest current id of the cursors that is live, moving
 * past older duplicates and cancelled postings. */
static int settle(idx_postings *p, kv_err *err)
{
    for (;;) {
        segcur *best = NULL;
        for (uint32_t i = 0; i < p->nsc; i++) {
            segcur *sc = &p->sc[i];
            if (sc->cur == NOWHERE)
                continue;
            if (!best || sc->cur < best->cur ||
                (sc->cur == best->cur && sc->rank > best->rank))
                best = sc;
        }
        if (!best) {
            p->eof = true;
            p->cur = NOWHERE;
            p->at = NULL;
            return KVFTS_ITEROVER;
        }
        uint32_t id = best->cur;
        if (p->ndel == 0 || !deleted(p, id, best->rank)) {
            p->at = best;
            p->cur = id;
            return KVFTS_OK;
        }
        /* cancelled: step every cursor past id */
        for (uint32_t i = 0; i < p->nsc; i++) {
            segcur *sc = &p->sc[i];
            if (sc->cur == id) {
                int rc = segcur_next(sc, err);
                if (rc)
                    return rc;
            }
        }
    }
}

static int start(idx_postings *p, kv_err *err)
{
    p->started = true;
    for (uint32_t i = 0; i < p->nsc; i++) {
        int rc = segcur_start(&p->sc[i], err);
        if (rc)
            return rc;
    }
    return KVFTS_OK;
}

int idx_postings_next(idx_postings *p, kv_err *err)
{
    if (p->rc) {
        *err = p->err;
        return p->rc;
    }
    if (p->eof)
        return KVFTS_ITEROVER;
    int rc = KVFTS_OK;
    if (!p->started) {
        rc = start(p, err);
    } else {
        uint32_t id = p->cur;
        for (uint32_t i = 0; !rc && i < p->nsc; i++)
            if (p->sc[i].cur == id)
                rc = segcur_next(&p->sc[i], err);
    }
    if (!rc)
        rc = settle(p, err);
    return rc && rc != KVFTS_ITEROVER ? fail(p, rc, err) : rc;
}

int idx_postings_skip_to(idx_postings *p, uint32_t docid, kv_err *err)
{
    if (p->rc) {
        *err = p->err;
        return p->rc;
    }
    if (p->eof)
        return KVFTS_ITEROVER;
    int rc = KVFTS_OK;
    if (!p->started)
        rc = start(p, err);
    else if (p->cur >= docid)
        return KVFTS_OK;
    for (uint32_t i = 0; !rc && i < p->nsc; i++)
        rc = segcur_skip(&p->sc[i], docid, err);
    if (!rc)
        rc = settle(p, err);
    return rc && rc != KVFTS_ITEROVER ? fail(p, rc, err) : rc;
}

bool idx_postings_plain(const idx_postings *p, uint32_t first, uint32_t last)
{
    const segcur *sc = p->at;
    if (p->rc || !p->started || p->eof || !sc || sc->filter ||
        sc->blk.l.ids[sc->blk.l.n - 1] < last)
        return false;
    for (uint32_t s = 0; s < p->nsc; s++)
        if (&p->sc[s] != sc && p->sc[s].cur <= last)
            return false;
    /* From first, not from cur: the block also holds the ids before cur,
     * and one of them the cursor stepped over for a newer deletion is
     * there still (a document whose new version lost the word). */
    uint32_t d = idx_gallop(p->dels, 0, p->ndel, first);
    return d == p->ndel || p->dels[d] > last;
}

/* A run of live ids for array intersections (idx_postings_run): from the
 * current posting up to the smallest last id of the cursors' loaded blocks,
 * as far as can be known without reading another block record.  With one
 * segment cursor, no deletions and no column filter that is the rest of
 * the block, borrowed as it is; otherwise the cursors' ids up to that
 * bound are merged as settle() would take them (the newest posting of an
 * id, unless a newer deletion cancels it; selected documents only) into
 * p->run. */
int idx_postings_run(idx_postings *p, const uint32_t **ids, uint32_t *n,
                     kv_err *err)
{
    *ids = NULL;
    *n = 0;
    if (p->rc) {
        *err = p->err;
        return p->rc;
    }
    if (!p->started || p->eof || !p->at)
        return KVFTS_OK;
    if (!p->at->filter) {
        /* The current cursor's block up to the next id another cursor
         * stands at (their ids to come are all at or past it), as it is,
         * unless a deletion falls in it: a load's segments hold ranges of
         * ids apart, so this is most of a list over several segments.
         * (The run must reach idx_postings_block_last(): callers take an
         * id past its end for one the term does not hold.) */
        const segcur *sc = p->at;
        uint32_t next = NOWHERE;
        for (uint32_t s = 0; s < p->nsc; s++)
            if (&p->sc[s] != sc && p->sc[s].cur < next)
                next = p->sc[s].cur;
        uint32_t d = p->dat;   /* (left where it is: see below) */
        while (d < p->ndel && p->dels[d] < p->cur)
            d++;
        const uint32_t *v = sc->blk.l.ids + sc->i;
        uint32_t k = sc->blk.l.n - sc->i;
        if (next != NOWHERE && v[k - 1] >= next)
            k = idx_gallop(v, 0, k, next);
        if (k && (d == p->ndel || p->dels[d] > v[k - 1])) {
            *ids = v;
            *n = k;
            return KVFTS_OK;
        }
    }
    /* The run ends at the first end of the cursors' loaded blocks. */
    uint32_t bound = NOWHERE;
    uint64_t room = 0;
    for (uint32_t s = 0; s < p->nsc; s++) {
        const segcur *sc = &p->sc[s];
        if (sc->cur == NOWHERE)
            continue;
        uint32_t last = sc->blk.l.ids[sc->blk.l.n - 1];
        if (last < bound)
            bound = last;
        room += sc->blk.l.n - sc->i;
    }
    /* The merged run of the loaded blocks is kept until a cursor loads
     * another block: a count asks for the run of the same blocks from
     * one candidate after another (an AND's sparse lead against a dense
     * term), and merging them again each time was 40% of a phrase
     * count over two segments.  The run from cur is the kept one's
     * suffix: ids before cur are behind every cursor.  A cursor that ran
     * out since moves the bound on (without a block load): the kept run
     * would stop short of idx_postings_block_last(), and a count would
     * skip the ids between (a phrase count lost matches so). */
    uint64_t key = 0;
    for (uint32_t s = 0; s < p->nsc; s++)
        key += p->sc[s].gen;
    if (p->runn && key == p->runkey && bound == p->runbound &&
        p->run[p->runn - 1] >= p->cur) {
        uint32_t lo = idx_gallop(p->run, p->run[p->runat] <= p->cur
                                         ? p->runat : 0, p->runn, p->cur);
        if (lo < p->runn && p->run[lo] == p->cur) {
            p->runat = lo;
            *ids = p->run + lo;
            *n = p->runn - lo;
            return KVFTS_OK;
        }
    }
    p->runn = 0;
    int rc = idx__grow(&p->run, &p->runcap, room ? room : 1, 4, err);
    if (rc)
        return fail(p, rc, err);
    /* k-way merge of the cursors' blocks from their current positions,
     * taking ids as settle() does; every id <= bound is in its cursor's
     * loaded block.  (More than 64 segments holding one term is rare: the
     * run is then the current posting alone.) */
    if (p->nsc > 64) {
        p->run[0] = p->cur;
        *ids = p->run;
        *n = 1;
        return KVFTS_OK;
    }
    /* deleted() moves p->dat up to the ids it is asked about; the run
     * looks ahead of the iterator, which must find it where it was */
    uint32_t at[64], m = 0, dat = p->dat;
    for (uint32_t s = 0; s < p->nsc; s++)
        at[s] = p->sc[s].i;
    for (;;) {
        const segcur *best = NULL;
        uint32_t bid = NOWHERE;
        for (uint32_t s = 0; s < p->nsc; s++) {
            const segcur *sc = &p->sc[s];
            if (sc->cur == NOWHERE)
                continue;
            while (sc->filter && at[s] < sc->blk.l.n &&
                   !doc_selected(sc, at[s]))
                at[s]++;
            if (at[s] >= sc->blk.l.n)
                continue;
            uint32_t id = sc->blk.l.ids[at[s]];
            if (id > bound)
                continue;
            if (!best || id < bid || (id == bid && sc->rank > best->rank)) {
                best = sc;
                bid = id;
            }
        }
        if (!best)
            break;
        if (p->ndel == 0 || !deleted(p, bid, best->rank))
            p->run[m++] = bid;
        for (uint32_t s = 0; s < p->nsc; s++) {
            const segcur *sc = &p->sc[s];
            if (sc->cur != NOWHERE && at[s] < sc->blk.l.n &&
                sc->blk.l.ids[at[s]] == bid)
                at[s]++;
        }
    }
    p->dat = dat;
    *ids = p->run;
    *n = m;
    p->runn = m && p->run[0] == p->cur ? m : 0;
    p->runat = 0;
    p->runkey = key;
    p->runbound = bound;
    return KVFTS_OK;
}

uint32_t idx_postings_docid(const idx_postings *p)
{
    return p->cur;
}

int idx_postings_need(idx_postings *p, int level, kv_err *err)
{
    if (p->rc) {
        *err = p->err;
        return p->rc;
    }
    if (!p->at)
        return KVFTS_OK;
    /* positions: the current document's alone */
    int rc = level >= IDX_DECODE_POSITIONS
           ? idx_block_need_doc(&p->at->blk, p->at->i, err)
           : idx_block_need(&p->at->blk, level >= IDX_DECODE_TFS
                            ? IDX_DEC_VIEWS : IDX_DEC_IDS, err);
    return rc ? fail(p, rc, err) : KVFTS_OK;
}

uint32_t idx_postings_tf(const idx_postings *p)
{
    const segcur *sc = p->at;
    if (!sc || !idx_block_has_views(&sc->blk, sc->i))
        return 0;
    const idx_plist *l = &sc->blk.l;
    uint32_t tf = 0;
    for (uint32_t v = l->vstart[sc->i]; v < l->vstart[sc->i + 1]; v++)
        if (sc->sel[l->vcol[v]])
            tf += l->vtf[v];
    return tf;
}

const idx_view *idx_postings_views(idx_postings *p, uint32_t *n)
{
    *n = 0;
    const segcur *sc = p->at;
    if (!sc || !idx_block_has_views(&sc->blk, sc->i))
        return NULL;
    const idx_plist *l = &sc->blk.l;
    uint32_t v0 = l->vstart[sc->i], v1 = l->vstart[sc->i + 1];
    if (v1 - v0 > p->vcap) {
        kv_err e = KV_ERR_INIT;
        if (idx__grow(&p->views, &p->vcap, v1 - v0, sizeof *p->views, &e))
            return NULL;
    }
    bool pos = l->positions && idx_block_has_positions(&sc->blk, sc->i);
    for (uint32_t v = v0; v < v1; v++) {
        if (!sc->sel[l->vcol[v]])
            continue;
        p->views[*n] = (idx_view){ sc->e.cols[l->vcol[v]], l->vtf[v],
                                   pos ? l->pos + l->poff[v] : NULL };
        (*n)++;
    }
    return p->views;
}

#define PHRASE_STACK 8
int idx_postings_phrase(idx_postings *const *p, const size_t *first,
                        const uint32_t *offs, size_t n, uint32_t *cand,
                        uint32_t *m, uint32_t *pf, uint64_t *count, bool *ok,
                        kv_err *err)
{
    idx_phrase_term stack[PHRASE_STACK];
    idx_phrase_term *t = n <= PHRASE_STACK ? stack
                                           : kv_calloc(n, sizeof *t);
    int rc = KVFTS_OK;
    *ok = false;
    if (!t)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    if (pf && (n < 2 || n > IDX_PHRASE_LOCAL))
        goto out;                   /* the blocks count, but no more */
    for (size_t i = 0; i < n; i++) {
        segcur *sc = p[i]->at;
        if ((rc = p[i]->rc)) {
            *err = p[i]->err;
            goto out;
        }
        if (!sc || !sc->blk.l.positions)
            goto out;
        /* (the first term's also holds idx_blocks_common's keep) */
        if ((rc = idx__grow(&p[i]->pidx, &p[i]->pidxcap,
                            (uint64_t)*m * (i ? 1 : 2), 4, err)))
            goto out;
        t[i] = (idx_phrase_term){ .b = &sc->blk, .fid = sc->fid,
                                  .off = offs[i],
                                  .idx = p[i]->pidx, .dup = first[i] < i };
    }
    if (!p[0]->pmap &&
        !(p[0]->pmap = kv_malloc(IDX_PHRASE_MAP * sizeof *p[0]->pmap))) {
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        goto out;
    }
    *m = idx_blocks_common(t, n, cand, *m, p[0]->pidx + *m, p[0]->pmap);
    /* Once cut, the candidates may be few to decode a block whole for,
     * but every one is looked at, and by document each costs a walk of
     * the streams' control bytes: on the Debian catalog's phrases whole
     * decoding won down to one candidate in a block of the writers' size
     * (whole from 1 in 16, 32, 64 or 128 of its documents: 0.204, 0.179,
     * 0.176, 0.170 ms for "command line tool"). */
    for (size_t i = 0; !rc && *m && i < n; i++)
        if (!t[i].dup)
            rc = idx_block_need_gaps(&p[i]->at->blk, err);
    /* a word said twice in a row, its positions still gaps: counted for
     * the block at once (blocks_self1), in this scratch */
    const idx_block *b0 = t[0].b;
    if (!rc && *m && n == 2 && t[1].dup && offs[1] == offs[0] + 1 &&
        b0->gaps && b0->decoded < IDX_DEC_POS &&
        !(rc = idx__grow(&p[0]->pscr, &p[0]->pscrcap,
                         (uint64_t)b0->l.poff[b0->l.nv] + b0->l.nv + 2, 4,
                         err)))
        t[0].scr = p[0]->pscr;
    if (!rc)
        rc = idx_blocks_phrase(t, n, *m, pf, count, err);
    *ok = !rc;
    for (size_t i = 0; rc && i < n; i++)   /* every cursor keeps it */
        fail(p[i], rc, err);
out:
    if (t != stack)
        kv_free(t);
    return rc;
}

uint32_t idx_postings_block_max_tf(const idx_postings *p)
{
    return p->at ? p->at->blk.max_tf : 0;
}

uint32_t idx_postings_block_last(const idx_postings *p)
{
    if (!p->at)
        return NOWHERE;
    /* With several segments, another may hold ids inside this block's
     * range: the block's end is a bound only for this cursor's ids. */
    uint32_t last = p->at->blk.l.ids[p->at->blk.l.n - 1];
    for (uint32_t i = 0; i < p->nsc; i++)
        if (&p->sc[i] != p->at && p->sc[i].cur != NOWHERE &&
            p->sc[i].cur <= last)
            last = p->sc[i].cur > p->cur ? p->sc[i].cur - 1 : p->cur;
    return last;
}

const idx_term_info *idx_postings_info(const idx_postings *p)
{
    return &p->info;
}

/* ---- walking dictionaries ------------------------------------------------- */

/* One segment's dictionary from a start term on, entry by entry. */
typedef struct dict_walk {
    uint32_t seg, rank;
    kv_cursor *c;
    kv_buf rec;            /* the current chunk */
    idx_chunk_it it;
    idx_entry e;           /* the current entry, decoded */
    bool end;
} dict_walk;

static void dict_walk_free(dict_walk *d)
{
    kv_cursor_close(d->c);
    kv_buf_free(&d->rec);
    idx_chunk_it_free(&d->it);
    idx_entry_free(&d->e);
}

/* Copy the chunk the cursor is on (false: not one of the segment's). */
static int dict_load(dict_walk *d, int rc, kv_err *err)
{
    if (rc == KVFTS_ITEROVER) {
        d->end = true;
        return KVFTS_OK;
    }
    if (rc)
        return rc;
    const char *k, *v;
    size_t kl, vl;
    unsigned char pfx[5];
    kv_put_be32(pfx, d->seg);
    pfx[4] = 'D';
    kv_cursor_key(d->c, &k, &kl);
    if (kl < 5 || memcmp(k, pfx, 5) != 0) {
        d->end = true;
        return KVFTS_OK;
    }
    kv_cursor_val(d->c, &v, &vl);
    kv_buf_reset(&d->rec);
    rc = kv_buf_append(&d->rec, v, vl, err);
    return rc ? rc : idx_chunk_open(&d->it, d->rec.data, d->rec.len, err);
}

/* The next entry (d->end at the end of the segment). */
static int dict_next(dict_walk *d, kv_err *err)
{
    while (!d->end) {
        int rc = idx_chunk_next(&d->it, err);
        if (rc == KVFTS_OK)
            return idx_entry_decode_lazy(&d->e, d->it.body, d->it.body_len,
                                         err);
        if (rc != KVFTS_ITEROVER)
            return rc;
        rc = dict_load(d, kv_cursor_next(d->c, err), err);
        if (rc)
            return rc;
    }
    return KVFTS_OK;
}

/* Position d on its first entry >= from. */
static int dict_open(dict_walk *d, kv_txn *txn, uint32_t seg, uint32_t rank,
                     const char *from, size_t flen, kv_err *err)
{
    memset(d, 0, sizeof *d);
    idx_chunk_it_init(&d->it);
    idx_entry_init(&d->e);
    d->seg = seg;
    d->rank = rank;
    kv_buf key = KV_BUF_INIT;
    int rc = kv_cursor_open(&d->c, txn, KV_TERMS, err);
    if (!rc)
        rc = idx_key_chunk(&key, seg, from, flen, err);
    if (!rc)
        rc = kv_cursor_seek_floor(d->c, key.data, key.len, err);
    if (rc == KVFTS_OK) {
        /* the chunk holding from, or the segment's first one after it */
        if (chunk_pfx_cmp(d->c, seg) < 0)
            rc = kv_cursor_next(d->c, err);
    } else if (rc == KVFTS_ITEROVER) {   /* nothing before from */
        rc = kv_cursor_seek(d->c, key.data, key.len, err);
    }
    kv_buf_free(&key);
    if (rc && rc != KVFTS_ITEROVER)
        return rc;
    rc = dict_load(d, rc, err);
    while (!rc && !d->end) {
        rc = dict_next(d, err);
        if (rc || d->end)
            break;
        if (idx__bytes_cmp(d->it.term.data, d->it.term.len, from, flen) >= 0)
            break;
    }
    return rc;
}

static bool has_prefix(const kv_buf *t, const char *p, size_t pl)
{
    return t->len >= pl && memcmp(t->data, p, pl) == 0;
}

/* Walkers over every segment from prefix on; the distinct terms are then
 * taken in byte order with dicts_min(). */
typedef struct dicts {
    dict_walk *d;
    uint32_t n;
} dicts;

static void dicts_free(dicts *ds)
{
    for (uint32_t i = 0; i < ds->n; i++)
        dict_walk_free(&ds->d[i]);
    kv_free(ds->d);
}

static int dicts_open(dicts *ds, idx_reader *r, const char *prefix,
                      size_t plen, kv_err *err)
{
    ds->n = 0;
    ds->d = kv_calloc(r->segs.n ? r->segs.n : 1, sizeof *ds->d);
    if (!ds->d)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    int rc = KVFTS_OK;
    for (uint32_t i = 0; !rc && i < r->segs.n; i++) {
        rc = dict_open(&ds->d[i], r->txn, r->segs.v[i].id, i, prefix, plen,
                       err);
        ds->n = i + 1;
        if (!rc && !ds->d[i].end && !has_prefix(&ds->d[i].it.term, prefix,
                                                plen))
            ds->d[i].end = true;
    }
    return rc;
}

/* The smallest current term of the walkers (NULL: none left). */
static const kv_buf *dicts_min(const dicts *ds)
{
    const kv_buf *best = NULL;
    for (uint32_t i = 0; i < ds->n; i++) {
        const dict_walk *d = &ds->d[i];
        if (d->end)
            continue;
        if (!best || idx__bytes_cmp(d->it.term.data, d->it.term.len,
                                    best->data, best->len) < 0)
            best = &d->it.term;
    }
    return best;
}

/* Move the walkers on term t past it (ending those that leave prefix). */
/* The next term of the walk (the smallest at any dictionary) copied into
 * t; *any false when every dictionary has ended. */
static int dicts_term(const dicts *ds, kv_buf *t, bool *any, kv_err *err)
{
    const kv_buf *m = dicts_min(ds);
    *any = m != NULL;
    kv_buf_reset(t);
    return m ? kv_buf_append(t, m->data, m->len, err) : KVFTS_OK;
}

/* True if dictionary walk d stands at term t. */
static bool dict_at(const dict_walk *d, const kv_buf *t)
{
    return !d->end && idx__bytes_cmp(d->it.term.data, d->it.term.len,
                                     t->data, t->len) == 0;
}

static int dicts_step(dicts *ds, const char *t, size_t tl, const char *prefix,
                      size_t plen, kv_err *err)
{
    for (uint32_t i = 0; i < ds->n; i++) {
        dict_walk *d = &ds->d[i];
        if (d->end || idx__bytes_cmp(d->it.term.data, d->it.term.len, t,
                                     tl) != 0)
            continue;
        int rc = dict_next(d, err);
        if (rc)
            return rc;
        if (!d->end && !has_prefix(&d->it.term, prefix, plen))
            d->end = true;
    }
    return KVFTS_OK;
}

/* Whether t is a field list's term (TOK_LIST_MARK + a field's term). */
static bool list_term(const char *t, size_t len)
{
    return len && t[0] == TOK_LIST_MARK;
}

int idx_terms_scan(idx_reader *r, const char *field, size_t flen,
                   const char *prefix, size_t plen, idx_term_fn fn,
                   void *payload, kv_err *err)
{
    selector s;
    bool none;
    int rc = selector_make(r, field, flen, &s, &none, err);
    if (rc || none)
        return rc;
    dicts ds;
    rc = dicts_open(&ds, r, prefix, plen, err);
    kv_buf t = KV_BUF_INIT;
    while (!rc) {
        bool any;
        if ((rc = dicts_term(&ds, &t, &any, err)) || !any)
            break;
        uint64_t df = 0, del = 0;
        bool positions = false;
        for (uint32_t i = 0; i < ds.n; i++) {
            dict_walk *d = &ds.d[i];
            if (!dict_at(d, &t))
                continue;
            uint64_t a, dl;
            entry_counts(&d->e, &s, &a, &dl);
            df += a;
            del += dl;
            if (a)
                positions |= (d->e.flags & IDX_E_POSITIONS) != 0;
        }
        if (del > df) {
            rc = kv_seterr(err, KVFTS_ECORRUPT, "term '%.*s': more "
                           "deletions than postings", (int)t.len, t.data);
            break;
        }
        /* field lists' terms only when asked for (the prefix is one) */
        bool skip = list_term(t.data, t.len) && !list_term(prefix, plen);
        if (df > del && !skip) {
            idx_term_info info = { df - del, positions };
            rc = fn(payload, t.data, t.len, &info);
            if (rc)
                break;
        }
        rc = dicts_step(&ds, t.data, t.len, prefix, plen, err);
    }
    kv_buf_free(&t);
    dicts_free(&ds);
    return rc;
}

/* ---- every posting of a prefix ------------------------------------------- */

typedef struct ppost {
    uint32_t id, rank, tf;
    bool del;
} ppost;

static int ppost_cmp(const void *a, const void *b)
{
    const ppost *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    /* A segment's deletion of id cancels an older posting, never the
     * segment's own (a replace writes both): it sorts first. */
    return x->del != y->del ? (x->del ? -1 : 1) : 0;
}

typedef struct prefix_ctx {
    idx_reader *r;
    selector s;
    idx_block blk;
    kv_cursor *bc;         /* external blocks */
    kv_bulk bulk;          /* for reading a term's blocks whole */
    ppost *pp, *tmp;       /* a term's postings and deletions, as runs */
    uint32_t npp, ppcap, tmpcap;
    uint32_t *runs;        /* where each run of pp ends */
    uint32_t nruns, runcap;
    bool tf;               /* tfs wanted (else 1 each) */
    uint32_t *dels;
    uint32_t dcap;
    uint8_t *sel;
    uint32_t selcap;
} prefix_ctx;

/* One posting of the expansion: to fn, or collected. */
static int emit_posting(prefix_ctx *c, uint32_t rank, uint32_t id,
                        uint32_t tf, idx_posting_fn fn, void *payload,
                        uint32_t term, uint64_t df, bool collect, kv_err *err)
{
    if (!collect)
        return fn(payload, term, df, id, tf);
    int rc = idx__grow(&c->pp, &c->ppcap, (uint64_t)c->npp + 1,
                       sizeof *c->pp, err);
    if (!rc)
        c->pp[c->npp++] = (ppost){ id, rank, tf, false };
    return rc;
}

/* Call each(id, tf) for the selected postings of block b. */
static int block_postings(prefix_ctx *c, const idx_entry *e, bool filter,
                          uint32_t rank, idx_posting_fn fn, void *payload,
                          uint32_t term, uint64_t df, bool collect,
                          kv_err *err)
{
    /* without tfs: a filter reads the columns alone, and each posting
     * has tf 1 */
    int rc = c->tf ? idx_block_need(&c->blk, IDX_DEC_VIEWS, err)
           : filter ? idx_block_need_cols(&c->blk, err) : KVFTS_OK;
    if (rc)
        return rc;
    const idx_plist *l = &c->blk.l;
    for (uint32_t i = 0; i < l->n; i++) {
        uint32_t tf = 0;
        if (c->tf) {
            for (uint32_t v = l->vstart[i]; v < l->vstart[i + 1]; v++)
                if (!filter || c->sel[l->vcol[v]])
                    tf += l->vtf[v];
        } else if (filter) {
            for (uint32_t v = l->vstart[i]; !tf && v < l->vstart[i + 1]; v++)
                tf = c->sel[l->vcol[v]];
        } else {
            tf = 1;
        }
        if (tf && (rc = emit_posting(c, rank, l->ids[i], tf, fn, payload,
                                     term, df, collect, err)))
            return rc;
    }
    (void)e;
    return KVFTS_OK;
}

/* Decode the block of walker d's entry whose first id is @p first (@p v,
 * @p vl bytes), then its selected postings: to fn, or collected. */
static int block_emit(prefix_ctx *c, const dict_walk *d, bool filter,
                      uint32_t first, const char *v, size_t vl,
                      idx_posting_fn fn, void *payload, uint32_t term,
                      uint64_t df, bool collect, kv_err *err)
{
    int rc = idx_block_decode(&c->blk, first, v, vl, d->e.ncols,
                              IDX_DEC_IDS, err);
    return rc ? rc : block_postings(c, &d->e, filter, d->rank, fn, payload,
                                    term, df, collect, err);
}

/* The postings of walker d's entry (selected ones): to fn, or collected. */
static int entry_postings(prefix_ctx *c, dict_walk *d, idx_posting_fn fn,
                          void *payload, uint32_t term, uint64_t df,
                          bool collect, kv_err *err)
{
    const idx_entry *e = &d->e;
    if (e->ndocs == 0)
        return KVFTS_OK;
    bool filter = false, any = false;
    int rc = idx__grow(&c->sel, &c->selcap, e->ncols, 1, err);
    if (rc)
        return rc;
    for (uint32_t k = 0; k < e->ncols; k++) {
        c->sel[k] = col_selected(&c->s, e->cols[k]);
        any |= c->sel[k];
        filter |= !c->sel[k];
    }
    if (!any)
        return KVFTS_OK;
    /* a compact entry (one column, selected): its postings as stored,
     * without decoding the block made from them */
    for (uint32_t i = 0; !rc && i < e->nsmall; i++)
        rc = emit_posting(c, d->rank, e->sids[i], c->tf ? e->stf[i] : 1, fn,
                          payload, term, df, collect, err);
    if (rc || e->nsmall)
        return rc;
    if (!(e->flags & IDX_E_EXTERNAL))
        return block_emit(c, d, filter, e->first, e->blk, e->blk_len, fn,
                          payload, term, df, collect, err);
    /* From the handle's cache of terms' blocks where it has them; a walk
     * reads them all, so the term is a candidate (bt_note) */
    idx_dict_cache *dc = c->r->dict;
    bterm *bt = dc ? bt_find(dc, d->seg, d->it.ord) : NULL;
    if (dc && !bt && bt_admit(dc, d->seg, d->it.ord) &&
        (rc = bt_read(dc, c->r->txn, d->seg, d->it.ord, e->nblocks, &c->bulk,
                      &bt, err)))
        return rc;
    if (bt) {
        bt->used = dc->readers;
        for (uint32_t i = 0; !rc && i < bt->n; i++) {
            const char *k, *v;
            size_t vl;
            bt_rec(bt, i, &k, &v, &vl);
            rc = block_emit(c, d, filter,
                            kv_get_be32((const unsigned char *)k + 9), v, vl,
                            fn, payload, term, df, collect, err);
        }
        return rc;
    }
    if (dc)
        bt_note(dc, d->seg, d->it.ord, e->nblocks, e->nblocks);
    if (!c->bc && (rc = kv_cursor_open(&c->bc, c->r->txn, KV_POSTINGS, err)))
        return rc;
    unsigned char key[13];
    idx_key_block(key, d->seg, d->it.ord, 0);
    rc = kv_cursor_seek(c->bc, key, sizeof key, err);
    while (rc == KVFTS_OK) {
        const char *k, *v;
        size_t kl, vl;
        kv_cursor_key(c->bc, &k, &kl);
        if (kl != 13 || memcmp(k, key, 9) != 0)
            break;
        kv_cursor_val(c->bc, &v, &vl);
        rc = block_emit(c, d, filter, kv_get_be32((const unsigned char *)k +
                                                  9), v, vl, fn, payload,
                        term, df, collect, err);
        if (!rc)
            rc = kv_cursor_next(c->bc, err);
    }
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

/* pp[from, npp) is a run (ascending by ppost_cmp) when not empty. */
static int run_end(prefix_ctx *c, uint32_t from, kv_err *err)
{
    if (c->npp == from)
        return KVFTS_OK;
    int rc = idx__grow(&c->runs, &c->runcap, (uint64_t)c->nruns + 1,
                       sizeof *c->runs, err);
    if (!rc)
        c->runs[c->nruns++] = c->npp;
    return rc;
}

/* Merge the runs of pp into one, two at a time (a segment's postings of
 * the term, its deletions: each ascending already, where a sort of them
 * all was most of a large prefix's time). */
static int runs_merge(prefix_ctx *c, kv_err *err)
{
    int rc = KVFTS_OK;
    if (c->nruns > 1)
        rc = idx__grow(&c->tmp, &c->tmpcap, c->npp, sizeof *c->tmp, err);
    while (!rc && c->nruns > 1) {
        uint32_t out = 0, from = 0, k = 0, nr = 0;
        for (; k + 1 < c->nruns; k += 2) {
            uint32_t a = from, ae = c->runs[k], b = ae, be = c->runs[k + 1];
            while (a < ae && b < be)
                c->tmp[out++] = ppost_cmp(&c->pp[b], &c->pp[a]) < 0
                                ? c->pp[b++] : c->pp[a++];
            while (a < ae)
                c->tmp[out++] = c->pp[a++];
            while (b < be)
                c->tmp[out++] = c->pp[b++];
            c->runs[nr++] = out;
            from = be;
        }
        if (k < c->nruns) {
            while (from < c->runs[k])
                c->tmp[out++] = c->pp[from++];
            c->runs[nr++] = out;
        }
        ppost *t = c->pp;
        uint32_t cap = c->ppcap;
        c->pp = c->tmp;
        c->ppcap = c->tmpcap;
        c->tmp = t;
        c->tmpcap = cap;
        c->nruns = nr;
    }
    return rc;
}

int idx_prefix_postings(idx_reader *r, const char *field, size_t flen,
                        const char *prefix, size_t plen, uint32_t max_terms,
                        bool tf, idx_posting_fn fn, void *payload,
                        kv_err *err)
{
    prefix_ctx c;
    memset(&c, 0, sizeof c);
    c.r = r;
    c.tf = tf;
    idx_block_init(&c.blk);
    bool none;
    int rc = selector_make(r, field, flen, &c.s, &none, err);
    if (rc || none)
        return rc;
    blk_take(r->dict, &c.blk);
    dicts ds;
    rc = dicts_open(&ds, r, prefix, plen, err);
    kv_buf t = KV_BUF_INIT;
    uint32_t nterms = 0;
    while (!rc) {
        bool any;
        if ((rc = dicts_term(&ds, &t, &any, err)) || !any)
            break;
        uint64_t df = 0, del = 0;
        uint32_t holders = 0, ndel_entries = 0;
        for (uint32_t i = 0; i < ds.n; i++) {
            dict_walk *d = &ds.d[i];
            if (!dict_at(d, &t))
                continue;
            uint64_t a, dl;
            entry_counts(&d->e, &c.s, &a, &dl);
            df += a;
            del += dl;
            holders += a > 0;
            ndel_entries += d->e.ndel > 0;
        }
        if (df > del) {
            if (++nterms > max_terms) {
                rc = 1;
                break;
            }
            bool simple = holders == 1 && ndel_entries == 0;
            c.npp = c.nruns = 0;
            for (uint32_t i = 0; !rc && i < ds.n; i++) {
                dict_walk *d = &ds.d[i];
                if (!dict_at(d, &t))
                    continue;
                uint32_t from = c.npp;
                rc = entry_postings(&c, d, fn, payload, nterms - 1,
                                    df - del, !simple, err);
                if (!rc && !simple)
                    rc = run_end(&c, from, err);
                from = c.npp;
                for (uint64_t k = 0; !rc && !simple && k < d->e.ndel; k++) {
                    if (k == 0)
                        rc = idx_entry_dels(&d->e, &c.dels, &c.dcap, err);
                    if (!rc)
                        rc = idx__grow(&c.pp, &c.ppcap, (uint64_t)c.npp + 1,
                                       sizeof *c.pp, err);
                    if (!rc)
                        c.pp[c.npp++] = (ppost){ c.dels[k], d->rank, 0,
                                                 true };
                }
                if (!rc && !simple)
                    rc = run_end(&c, from, err);
            }
            if (!rc && !simple) {
                /* Newest posting per id, unless a newer deletion. */
                rc = runs_merge(&c, err);
                for (uint32_t i = 0; !rc && i < c.npp;) {
                    uint32_t j = i;
                    while (j < c.npp && c.pp[j].id == c.pp[i].id)
                        j++;
                    const ppost *last = &c.pp[j - 1];
                    if (!last->del)
                        rc = fn(payload, nterms - 1, df - del, last->id,
                                last->tf);
                    i = j;
                }
            }
        } else if (del > df) {
            rc = kv_seterr(err, KVFTS_ECORRUPT, "term '%.*s': more "
                           "deletions than postings", (int)t.len, t.data);
        }
        if (!rc)
            rc = dicts_step(&ds, t.data, t.len, prefix, plen, err);
    }
    kv_buf_free(&t);
    dicts_free(&ds);
    blk_give(r->dict, &c.blk);
    kv_cursor_close(c.bc);
    kv_bulk_free(&c.bulk);
    kv_free(c.pp);
    kv_free(c.tmp);
    kv_free(c.runs);
    kv_free(c.dels);
    kv_free(c.sel);
    return rc;
}

/* ---- walking one segment (merges, checks) ---------------------------------- */

struct idx_seg_walk {
    dict_walk d;
    kv_txn *txn;
    idx_block blk;
    kv_cursor *bc;
    bool started;
};

int idx_seg_walk_open(idx_seg_walk **out, kv_txn *txn, uint32_t seg,
                      const char *from, size_t flen, kv_err *err)
{
    *out = kv_calloc(1, sizeof **out);
    if (!*out)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    idx_seg_walk *w = *out;
    w->txn = txn;
    idx_block_init(&w->blk);
    int rc = dict_open(&w->d, txn, seg, 0, from ? from : "", from ? flen : 0,
                       err);
    if (rc) {
        idx_seg_walk_close(w);
        *out = NULL;
    }
    return rc;
}

void idx_seg_walk_close(idx_seg_walk *w)
{
    if (!w)
        return;
    dict_walk_free(&w->d);
    idx_block_free(&w->blk);
    kv_cursor_close(w->bc);
    kv_free(w);
}

int idx_seg_walk_next(idx_seg_walk *w, const char **term, size_t *tlen,
                      const idx_entry **e, uint32_t *ord, kv_err *err)
{
    /* dict_open leaves the walker on its first entry. */
    if (w->started) {
        int rc = dict_next(&w->d, err);
        if (rc)
            return rc;
    }
    w->started = true;
    if (w->d.end)
        return KVFTS_ITEROVER;
    *term = w->d.it.term.data;
    *tlen = w->d.it.term.len;
    idx_entry_block(&w->d.e);     /* a merge reads it */
    *e = &w->d.e;
    *ord = w->d.it.ord;
    return KVFTS_OK;
}

int idx_seg_walk_postings(idx_seg_walk *w, idx_plist *l, kv_err *err)
{
    const idx_entry *e = &w->d.e;
    idx_plist_reset(l, (e->flags & IDX_E_POSITIONS) != 0);
    if (e->ndocs == 0)
        return KVFTS_OK;
    int rc;
    if (!(e->flags & IDX_E_EXTERNAL)) {
        rc = idx_block_decode(&w->blk, e->first, e->blk, e->blk_len,
                              e->ncols, IDX_DEC_POS, err);
        for (uint32_t i = 0; !rc && i < w->blk.l.n; i++)
            rc = idx_plist_copy_doc(l, &w->blk.l, i, NULL, err);
        return rc;
    }
    if (!w->bc && (rc = kv_cursor_open(&w->bc, w->txn, KV_POSTINGS, err)))
        return rc;
    unsigned char key[13];
    idx_key_block(key, w->d.seg, w->d.it.ord, 0);
    rc = kv_cursor_seek(w->bc, key, sizeof key, err);
    uint32_t blocks = 0;
    while (rc == KVFTS_OK) {
        const char *k, *v;
        size_t kl, vl;
        kv_cursor_key(w->bc, &k, &kl);
        if (kl != 13 || memcmp(k, key, 9) != 0)
            break;
        kv_cursor_val(w->bc, &v, &vl);
        uint32_t first = kv_get_be32((const unsigned char *)k + 9);
        rc = idx_block_decode(&w->blk, first, v, vl, e->ncols, IDX_DEC_POS,
                              err);
        if (!rc && l->n && first <= l->ids[l->n - 1])
            rc = kv_seterr(err, KVFTS_ECORRUPT, "postings blocks overlap");
        for (uint32_t i = 0; !rc && i < w->blk.l.n; i++)
            rc = idx_plist_copy_doc(l, &w->blk.l, i, NULL, err);
        blocks++;
        if (!rc)
            rc = kv_cursor_next(w->bc, err);
    }
    if (rc == KVFTS_ITEROVER)
        rc = KVFTS_OK;
    if (!rc && (blocks != e->nblocks || l->n != e->ndocs))
        rc = kv_seterr(err, KVFTS_ECORRUPT, "term entry counts %u blocks "
                       "and %llu postings, the records %u and %u",
                       e->nblocks, (unsigned long long)e->ndocs, blocks,
                       l->n);
    return rc;
}

int idx_field_stats(kv_txn *txn, const char *field, size_t flen,
                    uint64_t *docs, uint64_t *total_len, uint32_t *id,
                    kv_err *err)
{
    idx_field f;
    int rc = field_rec(txn, field, flen, &f, err);
    if (rc == KVFTS_ENOTFOUND) {
        f.docs = f.total_len = 0;
        f.id = 0;
        rc = KVFTS_OK;
    }
    if (!rc) {
        *docs = f.docs;
        *total_len = f.total_len;
        if (id)
            *id = f.id;
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

int idx_lens_lookup(kv_txn *txn, uint32_t docid, kv_buf *span,
                    uint32_t *span_base, idx_lens_it *it, bool *found,
                    kv_err *err)
{
    uint32_t base = idx_lens_base(docid);
    int rc = KVFTS_OK;
    *found = false;
    if (base != *span_base) {
        unsigned char key[4];
        kv_put_be32(key, base);
        rc = kv_get(txn, KV_DOCLENS, key, 4, span, false, err);
        if (rc == KVFTS_ENOTFOUND) {      /* no document of the span */
            kv_err_clear(err);
            kv_buf_reset(span);
            rc = KVFTS_OK;
        } else if (!rc && span->len == 0) {
            rc = idx_lens_open(it, span->data, 0, base, err);  /* refused */
        }
        if (rc)
            return rc;
        *span_base = base;
    }
    if (span->len == 0)
        return KVFTS_OK;
    rc = idx_lens_open(it, span->data, span->len, base, err);
    return rc ? rc : idx_lens_seek(it, docid, found, err);
}

int idx_doc_len(kv_txn *txn, uint32_t docid, uint32_t field_id,
                kv_buf *scratch, uint32_t *len, kv_err *err)
{
    *len = 0;
    if (field_id == 0)
        return KVFTS_OK;
    uint32_t none = 1;          /* no span's base: they are multiples of 64 */
    idx_lens_it it;
    bool found;
    int rc = idx_lens_lookup(txn, docid, scratch, &none, &it, &found, err);
    if (!rc && found)
        *len = idx_lens_field(it.ids, it.lens, it.n, field_id);
    return rc;
}

int idx_lens_span(const char *k, size_t kl, const char *v, size_t vl,
                  idx_lens_fn fn, void *arg, kv_err *err)
{
    if (kl != 4)
        return kv_seterr(err, KVFTS_ECORRUPT, "length record key of %zu "
                         "bytes", kl);
    idx_lens_it it;
    bool more = true;
    int rc = idx_lens_open(&it, v, vl, kv_get_be32((const unsigned char *)k),
                           err);
    while (!rc && more && !(rc = idx_lens_next(&it, &more, err)) && more)
        rc = fn(arg, &it, err);
    return rc;
}

struct lens_walk_arg {
    idx_lens_fn fn;
    void *arg;
};

static int lens_span(void *payload, const char *k, size_t kl, const char *v,
                     size_t vl, kv_err *err)
{
    struct lens_walk_arg *a = payload;
    return idx_lens_span(k, kl, v, vl, a->fn, a->arg, err);
}

int idx_lens_walk(kv_txn *txn, idx_lens_fn fn, void *arg, kv_err *err)
{
    struct lens_walk_arg a = { fn, arg };
    return kv_walk(txn, KV_DOCLENS, lens_span, &a, err);
}

/* ---- length records read in doc id order ------------------------------ */

/* Scoring visits documents in ascending id order.  A lookup from the root
 * per document was 80% of a ranked search's time; instead the reader copies
 * a run of consecutive records in one bulk read and answers from it,
 * reading the next run when the ids move past it (or seeking, when they
 * jump far). */
#define LENS_NEAR 64      /* ids past the run's end: read on, else seek */

typedef struct lens_rec {
    uint32_t docid, n;
    const unsigned char *ids, *lens;   /* into the bulk read (idx_lens_it) */
} lens_rec;

struct idx_lens_reader {
    kv_cursor *c;
    kv_bulk bulk;
    lens_rec *run;        /* the records of the last bulk read */
    uint32_t n, cap, i;   /* count, capacity, where the last answer was */
    bool end;             /* the run reaches the last record */
    bool more;            /* the bulk read has records not in run yet */
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

/* A document of a span record onto the run. */
static int run_push(void *arg, const idx_lens_it *it, kv_err *err)
{
    idx_lens_reader *r = arg;
    int rc = r->n < r->cap ? KVFTS_OK
             : idx__grow(&r->run, &r->cap, (uint64_t)r->n + 1,
                         sizeof *r->run, err);
    if (!rc)
        r->run[r->n++] = (lens_rec){ it->docid, it->n, it->ids, it->lens };
    return rc;
}

/* The bulk read's next record onto the run (r->more false: none left). */
static int lens_more(idx_lens_reader *r, kv_err *err)
{
    const char *k, *v;
    size_t kl, vl;
    if (!kv_bulk_next(&r->bulk, &k, &kl, &v, &vl)) {
        r->more = false;
        return KVFTS_OK;
    }
    return idx_lens_span(k, kl, v, vl, run_push, r, err);
}

/* Read the run after the last one, in one bulk read, whose records are
 * decoded as the ids reach them: scored matches that come in clusters
 * (a dictionary's neighbouring headwords) read on at each cluster, and
 * decoding the whole 16 KiB (some 2,000 documents' lengths) for a few of
 * them was 49% of GCIDE's `headword:(cat OR dog)` top 10. */
static int lens_read_next(idx_lens_reader *r, kv_err *err)
{
    r->n = r->i = 0;
    r->more = false;
    int rc = kv_cursor_bulk(r->c, NULL, 0, &r->bulk, err);
    r->end = rc == KVFTS_ITEROVER;
    if (rc)
        return r->end ? KVFTS_OK : rc;
    r->more = true;
    while (!rc && r->more && !r->n)
        rc = lens_more(r, err);
    return rc;
}

/* Seek to docid's span (or the next one): a run of one record, read by an
 * ordinary lookup, since a far jump (a rare term) gains nothing from a bulk
 * copy. */
static int lens_seek(idx_lens_reader *r, uint32_t docid, kv_err *err)
{
    unsigned char id[4];
    kv_put_be32(id, idx_lens_base(docid));
    r->n = r->i = 0;
    r->more = false;
    int rc = kv_cursor_seek(r->c, id, 4, err);
    r->end = rc == KVFTS_ITEROVER;
    if (rc)
        return r->end ? KVFTS_OK : rc;
    const char *k, *v;
    size_t kl, vl;
    kv_cursor_key(r->c, &k, &kl);
    kv_cursor_val(r->c, &v, &vl);
    return idx_lens_span(k, kl, v, vl, run_push, r, err);
}

/* Whether the run answers for docid (holds it, or would if it had it). */
static bool run_holds(const idx_lens_reader *r, uint32_t docid)
{
    return r->n && r->run[0].docid <= docid &&
           (docid <= r->run[r->n - 1].docid || r->end);
}

/* Whether docid is past the run's end by LENS_NEAR ids or fewer: read on
 * (the bulk read's next records, or the next bulk read), not seek. */
static bool run_near(const idx_lens_reader *r, uint32_t docid)
{
    return r->n && docid > r->run[r->n - 1].docid &&
           docid - r->run[r->n - 1].docid <= LENS_NEAR;
}

int idx_lens_reader_get(idx_lens_reader *r, uint32_t docid,
                        uint32_t field_id, uint32_t *len, kv_err *err)
{
    *len = 0;
    if (field_id == 0)
        return KVFTS_OK;
    int rc = KVFTS_OK;
    while (!rc && r->more && run_near(r, docid))
        rc = lens_more(r, err);
    if (!rc && !run_holds(r, docid)) {
        if (run_near(r, docid))
            rc = lens_read_next(r, err);
        if (!rc && !run_holds(r, docid))
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
        *len = idx_lens_field(r->run[off].ids, r->run[off].lens,
                              r->run[off].n, field_id);
        return KVFTS_OK;
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
    *len = idx_lens_field(r->run[lo].ids, r->run[lo].lens, r->run[lo].n,
                          field_id);
    return KVFTS_OK;
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
    uint64_t stamp;       /* commit stamp gen was read at (kv_txn_stamp) */
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
    uint64_t gen, stamp = kv_txn_stamp(txn);
    if (c->synced && stamp && stamp == c->stamp)
        return KVFTS_OK;         /* nothing committed since the last read */
    int rc = kv_seq_get(txn, IDX_LENS_GEN, false, &gen, err);
    if (rc)
        return rc;
    if (!c->synced || gen != c->gen)
        lens_cache_drop(c);
    c->gen = gen;
    c->stamp = stamp;
    c->synced = true;
    return KVFTS_OK;
}

/* The column being read, and its capacity. */
struct lens_walk {
    struct lens_col *col;
    uint32_t cap;
    uint64_t max_id;      /* the largest doc id ever handed out */
};

static int lens_record(void *payload, const idx_lens_it *it, kv_err *err)
{
    struct lens_walk *w = payload;
    struct lens_col *col = w->col;
    uint32_t id = it->docid;
    /* The column is sized by the ids read: a damaged key must not make it
     * an 8 GiB array.  No id is larger than the doc-id sequence. */
    if (id == UINT32_MAX || id > w->max_id)
        return kv_seterr(err, KVFTS_ECORRUPT, "length record of id %u, past "
                         "the last id handed out (%llu)", id,
                         (unsigned long long)w->max_id);
    uint32_t len = idx_lens_field(it->ids, it->lens, it->n, col->field_id);
    int rc = KVFTS_OK;
    if (id >= w->cap) {
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
    struct lens_walk w = { col, 0, 0 };
    int rc = kv_seq_get(txn, "docid", false, &w.max_id, err);
    if (!rc)
        rc = idx_lens_walk(txn, lens_record, &w, err);
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

/* ---- index-wide figures ---------------------------------------------------- */

int idx_get_stats(kv_txn *txn, idx_stats *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    idx_reader *r = NULL;
    int rc = idx_reader_open(&r, txn, err);
    if (rc)
        return rc;
    out->segments = r->segs.n;
    for (uint32_t i = 0; i < r->segs.n; i++)
        out->postings_bytes += r->segs.v[i].bytes;
    dicts ds;
    rc = dicts_open(&ds, r, "", 0, err);
    kv_buf t = KV_BUF_INIT;
    while (!rc) {
        bool any;
        if ((rc = dicts_term(&ds, &t, &any, err)) || !any)
            break;
        uint64_t docs = 0, del = 0;
        for (uint32_t i = 0; i < ds.n; i++) {
            dict_walk *d = &ds.d[i];
            if (!dict_at(d, &t))
                continue;
            docs += d->e.ndocs;
            del += d->e.ndel;
            out->blocks += d->e.nblocks;
        }
        if (docs > del && list_term(t.data, t.len)) {
            out->list_postings += docs - del;
        } else if (docs > del) {
            out->terms++;
            out->postings += docs - del;
        }
        rc = dicts_step(&ds, t.data, t.len, "", 0, err);
    }
    kv_buf_free(&t);
    dicts_free(&ds);
    idx_reader_close(r);
    kv_cursor *c = NULL;
    if (!rc)
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
