/*
 * idx_write.c -- keeping the inverted index equal to the stored documents.
 *
 * Every write of a document goes through two steps:
 *
 *  idx_doc_prepare  analyzes the old version (as stored) and the new one into
 *                   two sorted term lists (field, term, tf, positions).  No
 *                   writes, so a document the analyzer refuses changes
 *                   nothing.
 *  idx_doc_apply    walks both lists in key order and, per term, adds the
 *                   document, removes it, or rewrites its posting when tf or
 *                   positions changed (unchanged terms cost nothing, so an
 *                   update that edits one field touches only that field's
 *                   terms); then stores the document's field lengths and
 *                   adds its contribution to the field statistics.
 *
 * A single posting change (term_apply) reads the term header, finds the one
 * block that holds or would hold the doc id (a B-tree range seek on the
 * block keys), edits it, splits it in two past IDX_BLOCK_DOCS or deletes it
 * when it empties, and writes the header back: one block per term per
 * document, whatever the length of the list.
 *
 * Bulk loads turn buffering on: the postings of the new versions go to an
 * in-memory buffer (a term table plus one log of (term, doc, tf, positions)
 * records), and idx_flush() merges them into the stored entries in key
 * order: a new term is written as full blocks, and a term whose new doc ids
 * all come after its last stored one (the usual case: new documents get new,
 * larger ids) appends to its last block and then writes full blocks; only
 * other cases fall back to term_apply per posting.  Removals are applied at
 * once; a document whose postings are still in the buffer is flushed before
 * it is changed again.  Field statistics are summed in memory and written
 * by idx_flush(), which the database handle calls before every commit.
 *
 * The field dictionary (name -> id, for the compact per-document length
 * records) is cached per writer; idx_discard() drops the cache with the
 * buffer, because ids handed out in an aborted transaction are void.
 *
 * The string table below is written here because none of Debian's C
 * libraries fits: GLib's tables abort on out-of-memory (our rule is to
 * report it), and hsearch(3) is one table per process.  Hashing is xxHash.
 */
#include "index.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define DEFAULT_MEM (256u * 1024u * 1024u)

/* ---- growable arrays ---------------------------------------------------- */

static int grow(void *pp, uint32_t *cap, uint64_t need, size_t elem,
                kv_err *err)
{
    if (need <= *cap)
        return KVFTS_OK;
    if (need > UINT32_MAX / 2)
        return kv_seterr(err, KVFTS_ENOMEM, "index buffer too large");
    uint64_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void **p = pp;
    void *q = kv_realloc(*p, (size_t)c * elem + IDX_SLACK);
    if (!q)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    *p = q;
    *cap = (uint32_t)c;
    return KVFTS_OK;
}

/* ---- string table: byte strings -> dense ids ---------------------------- */

typedef struct strtab {
    kv_buf arena;        /* the strings back to back */
    uint32_t *off;       /* per id: offset in arena */
    uint32_t *len;       /* per id: length */
    uint32_t *hash;      /* per id: low bits of the hash */
    uint32_t n, cap;
    uint32_t *slots;     /* open addressing: id + 1; 0 = empty */
    uint32_t nslots;     /* a power of two, > 2 n */
} strtab;

static void strtab_free(strtab *t)
{
    kv_buf_free(&t->arena);
    kv_free(t->off);
    kv_free(t->len);
    kv_free(t->hash);
    kv_free(t->slots);
    memset(t, 0, sizeof *t);
}

static void strtab_reset(strtab *t)
{
    kv_buf_reset(&t->arena);
    t->n = 0;
    if (t->slots)
        memset(t->slots, 0, (size_t)t->nslots * sizeof *t->slots);
}

static const char *strtab_str(const strtab *t, uint32_t id, uint32_t *len)
{
    *len = t->len[id];
    return t->arena.data + t->off[id];
}

static int strtab_rehash(strtab *t, uint32_t nslots, kv_err *err)
{
    uint32_t *s = kv_calloc(nslots, sizeof *s);
    if (!s)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    for (uint32_t id = 0; id < t->n; id++) {
        uint32_t i = t->hash[id] & (nslots - 1);
        while (s[i])
            i = (i + 1) & (nslots - 1);
        s[i] = id + 1;
    }
    kv_free(t->slots);
    t->slots = s;
    t->nslots = nslots;
    return KVFTS_OK;
}

/* True if s is in the table. */
static bool strtab_has(const strtab *t, const char *s, size_t n)
{
    if (!t->n)
        return false;
    uint32_t h = (uint32_t)XXH3_64bits(s, n);
    for (uint32_t i = h & (t->nslots - 1); t->slots[i];
         i = (i + 1) & (t->nslots - 1)) {
        uint32_t e = t->slots[i] - 1;
        if (t->hash[e] == h && t->len[e] == n &&
            memcmp(t->arena.data + t->off[e], s, n) == 0)
            return true;
    }
    return false;
}

/* Find s, adding it if absent.  *added tells which. */
static int strtab_put(strtab *t, const char *s, size_t n, uint32_t *id,
                      bool *added, kv_err *err)
{
    int rc;
    if ((uint64_t)(t->n + 1) * 2 >= t->nslots) {
        rc = strtab_rehash(t, t->nslots ? t->nslots * 2 : 1024, err);
        if (rc)
            return rc;
    }
    uint32_t h = (uint32_t)XXH3_64bits(s, n);
    uint32_t i = h & (t->nslots - 1);
    while (t->slots[i]) {
        uint32_t e = t->slots[i] - 1;
        if (t->hash[e] == h && t->len[e] == n &&
            memcmp(t->arena.data + t->off[e], s, n) == 0) {
            *id = e;
            *added = false;
            return KVFTS_OK;
        }
        i = (i + 1) & (t->nslots - 1);
    }
    if (t->arena.len + n > UINT32_MAX - 1)
        return kv_seterr(err, KVFTS_ENOMEM, "index buffer too large");
    if (t->n == t->cap) {     /* off, len and hash share one capacity */
        uint32_t cap = t->cap ? t->cap * 2 : 256;
        uint32_t *o = kv_realloc(t->off, (size_t)cap * 4);
        if (o)
            t->off = o;
        uint32_t *l = o ? kv_realloc(t->len, (size_t)cap * 4) : NULL;
        if (l)
            t->len = l;
        uint32_t *hh = l ? kv_realloc(t->hash, (size_t)cap * 4) : NULL;
        if (!hh)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        t->hash = hh;
        t->cap = cap;
    }
    size_t at = t->arena.len;
    if ((rc = kv_buf_append(&t->arena, s, n, err)) != 0)
        return rc;
    uint32_t e = t->n++;
    t->off[e] = (uint32_t)at;
    t->len[e] = (uint32_t)n;
    t->hash[e] = h;
    t->slots[i] = e + 1;
    *id = e;
    *added = true;
    return KVFTS_OK;
}

/* Sorting ids by their strings (qsort has no context argument). */
typedef struct keyref {
    const char *s;
    uint32_t len;
    uint32_t id;
} keyref;

static int keyref_cmp(const void *a, const void *b)
{
    const keyref *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    if (c)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* ---- one version of a document: its sorted terms ------------------------ */

typedef struct dterms {
    bool present;
    strtab keys;          /* "field\0term" -> entry */
    uint32_t *tf, *flen;  /* per entry */
    uint32_t ecap, fcap;
    uint32_t *occ_e, *occ_p;  /* occurrences, in emission order */
    uint32_t nocc, ocap_e, ocap_p, pcap;
    uint32_t *pstart;     /* per entry (+1): start in pos */
    uint32_t *pos;        /* positions grouped by entry */
    uint32_t scap;
    keyref *order;        /* entries sorted by key */
    uint32_t kcap;
    kv_buf scratch;       /* key being built */
    kv_err *err;
} dterms;

static void dterms_free(dterms *d)
{
    strtab_free(&d->keys);
    kv_free(d->tf);
    kv_free(d->flen);
    kv_free(d->occ_e);
    kv_free(d->occ_p);
    kv_free(d->pstart);
    kv_free(d->pos);
    kv_free(d->order);
    kv_buf_free(&d->scratch);
    memset(d, 0, sizeof *d);
}

static int on_term(void *payload, const tok_term *t)
{
    dterms *d = payload;
    kv_err *err = d->err;
    if (memchr(t->field, 0, t->field_len))
        return kv_seterr(err, KVFTS_EINVAL,
                         "field name with a NUL character cannot be indexed");
    if (t->term_len == 0 || memchr(t->term, 0, t->term_len))
        return KVFTS_OK;     /* a NUL-bearing keyword value is not indexed */
    kv_buf_reset(&d->scratch);
    int rc = kv_buf_append(&d->scratch, t->field, t->field_len, err);
    if (!rc)
        rc = kv_buf_append(&d->scratch, "", 1, err);
    if (!rc)
        rc = kv_buf_append(&d->scratch, t->term, t->term_len, err);
    uint32_t id;
    bool added;
    if (!rc)
        rc = strtab_put(&d->keys, d->scratch.data, d->scratch.len, &id,
                        &added, err);
    if (rc)
        return rc;
    if (added) {
        if ((rc = grow(&d->tf, &d->ecap, id + 1, 4, err)) != 0)
            return rc;
        if ((rc = grow(&d->flen, &d->fcap, id + 1, 4, err)) != 0)
            return rc;
        d->tf[id] = 0;
        d->flen[id] = (uint32_t)t->field_len;
    }
    d->tf[id]++;
    if ((rc = grow(&d->occ_e, &d->ocap_e, d->nocc + 1, 4, err)) != 0 ||
        (rc = grow(&d->occ_p, &d->ocap_p, d->nocc + 1, 4, err)) != 0)
        return rc;
    d->occ_e[d->nocc] = id;
    d->occ_p[d->nocc] = t->pos;
    d->nocc++;
    return KVFTS_OK;
}

/* Analyze json into d (reset first).  json NULL: the version is absent. */
static int dterms_build(dterms *d, tok_analysis *a, const char *json,
                        size_t len, kv_err *err)
{
    strtab_reset(&d->keys);
    d->nocc = 0;
    d->present = json != NULL;
    if (!json)
        return KVFTS_OK;
    d->err = err;
    int rc = tok_analysis_run_doc(a, json, len, on_term, d, err);
    if (rc)
        return rc;
    uint32_t n = d->keys.n;
    if ((rc = grow(&d->pstart, &d->scap, (uint64_t)n + 1, 4, err)) != 0)
        return rc;
    if ((rc = grow(&d->pos, &d->pcap, d->nocc, 4, err)) != 0)
        return rc;
    if ((rc = grow(&d->order, &d->kcap, n, sizeof(keyref), err)) != 0)
        return rc;
    /* Group positions by entry (counting sort; emission order within an
     * entry is position order), dropping repeats of one position. */
    uint32_t acc = 0;
    for (uint32_t e = 0; e < n; e++) {
        d->pstart[e] = acc;
        acc += d->tf[e];
        d->tf[e] = 0;
    }
    d->pstart[n] = acc;
    for (uint32_t i = 0; i < d->nocc; i++) {
        uint32_t e = d->occ_e[i];
        uint32_t at = d->pstart[e] + d->tf[e];
        if (d->tf[e] && d->pos[at - 1] >= d->occ_p[i])
            continue;
        d->pos[at] = d->occ_p[i];
        d->tf[e]++;
    }
    for (uint32_t e = 0; e < n; e++) {
        uint32_t l;
        d->order[e].s = strtab_str(&d->keys, e, &l);
        d->order[e].len = l;
        d->order[e].id = e;
    }
    if (n > 1)
        qsort(d->order, n, sizeof *d->order, keyref_cmp);
    return KVFTS_OK;
}

/* ---- the writer --------------------------------------------------------- */

typedef struct field_state {
    uint32_t id;          /* 0 = not known yet */
    int64_t ddocs;        /* pending change of the field statistics */
    int64_t dlen;
} field_state;

struct idx_writer {
    tok_analysis *a;
    size_t mem_limit;
    bool buffering;
    bool positions;
    bool dry;             /* check mode: analyze into memory, write nothing */
    struct exp_len { uint32_t docid, field, len; } *exp;  /* dry: lengths */
    uint32_t nexp, expcap;
    uint64_t skipped;     /* too-long tokens of new versions, not yet saved */
    dterms old, neu;      /* the last prepared change */
    /* the bulk buffer */
    strtab bterms;        /* buffered term keys -> term id */
    uint32_t *rec_term, *rec_doc, *rec_tf, *rec_pos;
    uint32_t nrec, cap_t, cap_d, cap_f, cap_p;
    uint32_t *bpos;
    uint32_t nbpos, cap_bpos;
    strtab bdocs;         /* doc ids (4 bytes) with buffered postings */
    /* fields */
    strtab fnames;        /* field name -> index in fs */
    field_state *fs;
    uint32_t fscap;
    /* scratch */
    kv_buf key, val, val2;
    idx_block blk, out;
    idx_len *lens;        /* the document's field lengths being built */
    uint32_t nlens, lcap;
};

int idx_writer_new(idx_writer **out, tok_analysis *a, size_t mem_limit,
                   kv_err *err)
{
    *out = NULL;
    idx_writer *w = kv_calloc(1, sizeof *w);
    if (!w)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    w->a = a;
    w->mem_limit = mem_limit ? mem_limit : DEFAULT_MEM;
    w->positions = tok_analysis_positions(a);
    idx_block_init(&w->blk);
    idx_block_init(&w->out);
    *out = w;
    return KVFTS_OK;
}

void idx_writer_free(idx_writer *w)
{
    if (!w)
        return;
    dterms_free(&w->old);
    dterms_free(&w->neu);
    strtab_free(&w->bterms);
    kv_free(w->rec_term);
    kv_free(w->rec_doc);
    kv_free(w->rec_tf);
    kv_free(w->rec_pos);
    kv_free(w->bpos);
    strtab_free(&w->bdocs);
    strtab_free(&w->fnames);
    kv_free(w->fs);
    kv_buf_free(&w->key);
    kv_buf_free(&w->val);
    kv_buf_free(&w->val2);
    idx_block_free(&w->blk);
    idx_block_free(&w->out);
    kv_free(w->lens);
    kv_free(w->exp);
    kv_free(w);
}

void idx_writer_set_mem(idx_writer *w, size_t mem_limit)
{
    w->mem_limit = mem_limit ? mem_limit : DEFAULT_MEM;
}

void idx_writer_buffering(idx_writer *w, bool on)
{
    w->buffering = on;
}

/* Memory held for the buffer: what is allocated, not what is used, since
 * arrays grow by doubling; plus what a flush will allocate to sort it. */
static size_t strtab_bytes(const strtab *t)
{
    return t->arena.cap + (size_t)t->cap * 12 + (size_t)t->nslots * 4;
}

size_t idx_buffered_bytes(const idx_writer *w)
{
    size_t recs = (size_t)w->cap_t * 4 + (size_t)w->cap_d * 4 +
                  (size_t)w->cap_f * 4 + (size_t)w->cap_p * 4;
    size_t sort = (size_t)w->nrec * 8 +   /* a recref per record */
                  (size_t)w->bterms.n * (sizeof(keyref) + 4);
    return recs + sort + (size_t)w->cap_bpos * 4 + strtab_bytes(&w->bterms) +
           strtab_bytes(&w->bdocs);
}

bool idx_flush_due(const idx_writer *w)
{
    return idx_buffered_bytes(w) >= w->mem_limit;
}

static void buffer_reset(idx_writer *w)
{
    strtab_reset(&w->bterms);
    strtab_reset(&w->bdocs);
    w->nrec = 0;
    w->nbpos = 0;
}

void idx_discard(idx_writer *w)
{
    buffer_reset(w);
    w->skipped = 0;
    strtab_reset(&w->fnames);   /* ids of an aborted transaction are void */
}

int idx_doc_prepare(idx_writer *w, const char *old_json, size_t old_len,
                    const char *new_json, size_t new_len, kv_err *err)
{
    tok_stats before, after;
    tok_analysis_stats(w->a, &before);
    int rc = dterms_build(&w->neu, w->a, new_json, new_len, err);
    if (rc)
        return rc;
    tok_analysis_stats(w->a, &after);
    w->skipped += after.too_long - before.too_long;
    rc = dterms_build(&w->old, w->a, old_json, old_len, err);
    if (rc == KVFTS_EINVAL) {
        kv_err_prefix(err, "stored version no longer analyzes");
        err->code = rc = KVFTS_ECORRUPT;
    }
    return rc;
}

/* ---- fields ------------------------------------------------------------- */

/* The state of field name (adding it to the cache), with its id loaded or
 * assigned in txn. */
static int field_get(idx_writer *w, kv_txn *txn, const char *name,
                     size_t nlen, field_state **out, kv_err *err)
{
    uint32_t i;
    bool added;
    int rc = strtab_put(&w->fnames, name, nlen, &i, &added, err);
    if (rc)
        return rc;
    if ((rc = grow(&w->fs, &w->fscap, i + 1, sizeof *w->fs, err)) != 0)
        return rc;
    field_state *f = &w->fs[i];
    if (added)
        memset(f, 0, sizeof *f);
    if (w->dry) {
        f->id = i + 1;        /* a stand-in: the index into fnames, + 1 */
    } else if (f->id == 0) {
        rc = idx_key_field(&w->key, name, nlen, err);
        if (!rc)
            rc = kv_get(txn, KV_META, w->key.data, w->key.len, &w->val, false,
                        err);
        idx_field rec = { 0, 0, 0 };
        if (rc == KVFTS_OK) {
            rc = idx_field_decode(w->val.data, w->val.len, &rec, err);
        } else if (rc == KVFTS_ENOTFOUND) {
            uint64_t id;
            rc = kv_seq_next(txn, "field", &id, err);
            if (!rc && id > UINT32_MAX)
                rc = kv_seterr(err, KVFTS_ERROR, "field ids exhausted");
            rec.id = (uint32_t)id;
            if (!rc)
                rc = idx_field_encode(&rec, &w->val, err);
            if (!rc)
                rc = kv_put(txn, KV_META, w->key.data, w->key.len,
                            w->val.data, w->val.len, err);
        }
        if (rc)
            return rc;
        f->id = rec.id;
    }
    *out = f;
    return KVFTS_OK;
}

/* Add the too-long tokens counted since the last flush to meta.db's
 * "stat::skipped_tokens" (big-endian u64). */
static int skipped_flush(idx_writer *w, kv_txn *txn, kv_err *err)
{
    if (!w->skipped || w->dry)
        return KVFTS_OK;
    static const char key[] = IDX_SKIPPED_KEY;
    uint64_t n = 0;
    int rc = kv_get(txn, KV_META, key, sizeof key - 1, &w->val, true, err);
    if (rc == KVFTS_OK && w->val.len == 8)
        n = kv_get_be64((const unsigned char *)w->val.data);
    else if (rc == KVFTS_OK || rc == KVFTS_ENOTFOUND)
        rc = KVFTS_OK;
    if (rc)
        return rc;
    unsigned char b[8];
    kv_put_be64(b, n + w->skipped);
    rc = kv_put(txn, KV_META, key, sizeof key - 1, b, 8, err);
    if (!rc)
        w->skipped = 0;
    return rc;
}

static int fields_flush(idx_writer *w, kv_txn *txn, kv_err *err)
{
    if (w->dry)
        return KVFTS_OK;
    for (uint32_t i = 0; i < w->fnames.n; i++) {
        field_state *f = &w->fs[i];
        if (!f->ddocs && !f->dlen)
            continue;
        uint32_t nlen;
        const char *name = strtab_str(&w->fnames, i, &nlen);
        idx_field rec;
        int rc = idx_key_field(&w->key, name, nlen, err);
        if (!rc)
            rc = kv_get(txn, KV_META, w->key.data, w->key.len, &w->val, true,
                        err);
        if (!rc)
            rc = idx_field_decode(w->val.data, w->val.len, &rec, err);
        if (rc == KVFTS_ENOTFOUND)
            rc = kv_seterr(err, KVFTS_ECORRUPT, "field record '%.*s' "
                           "missing", (int)nlen, name);
        if (rc)
            return rc;
        if ((f->ddocs < 0 && (uint64_t)-f->ddocs > rec.docs) ||
            (f->dlen < 0 && (uint64_t)-f->dlen > rec.total_len))
            return kv_seterr(err, KVFTS_ECORRUPT, "field statistics of "
                             "'%.*s' would go negative", (int)nlen, name);
        rec.docs = (uint64_t)((int64_t)rec.docs + f->ddocs);
        rec.total_len = (uint64_t)((int64_t)rec.total_len + f->dlen);
        rc = idx_field_encode(&rec, &w->val, err);
        if (!rc)
            rc = kv_put(txn, KV_META, w->key.data, w->key.len, w->val.data,
                        w->val.len, err);
        if (rc)
            return rc;
        f->ddocs = f->dlen = 0;
    }
    return KVFTS_OK;
}

/* Field lengths of version d: sum of tf per field (entries sorted by key
 * have their field's entries together).  Calls fn per field. */
typedef int (*field_len_fn)(idx_writer *w, kv_txn *txn, const char *name,
                            uint32_t nlen, uint64_t len, int sign,
                            kv_err *err);

static int each_field_len(idx_writer *w, kv_txn *txn, dterms *d, int sign,
                          field_len_fn fn, kv_err *err)
{
    uint32_t n = d->keys.n;
    uint32_t i = 0;
    while (i < n) {
        uint32_t e = d->order[i].id;
        uint32_t fl = d->flen[e];
        const char *name = d->order[i].s;
        uint64_t sum = 0;
        while (i < n && d->flen[d->order[i].id] == fl &&
               memcmp(d->order[i].s, name, fl) == 0 &&
               d->order[i].s[fl] == '\0') {
            sum += d->tf[d->order[i].id];
            i++;
        }
        int rc = fn(w, txn, name, fl, sum, sign, err);
        if (rc)
            return rc;
    }
    return KVFTS_OK;
}

static int count_field(idx_writer *w, kv_txn *txn, const char *name,
                       uint32_t nlen, uint64_t len, int sign, kv_err *err)
{
    field_state *f;
    int rc = field_get(w, txn, name, nlen, &f, err);
    if (rc)
        return rc;
    f->ddocs += sign;
    f->dlen += sign * (int64_t)len;
    if (sign > 0) {           /* for the new version's length record */
        uint32_t k = w->nlens;
        if ((rc = grow(&w->lens, &w->lcap, k + 1, sizeof *w->lens, err)) != 0)
            return rc;
        w->lens[k].field_id = f->id;
        w->lens[k].len = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
        w->nlens = k + 1;
    }
    return KVFTS_OK;
}

/* ---- one posting -------------------------------------------------------- */

/* Write documents [from, to) of b as blocks of IDX_BLOCK_DOCS; *lastfirst
 * gets the first id of the last block written, *nblocks the count. */
static int put_blocks(idx_writer *w, kv_txn *txn, size_t tklen,
                      const idx_block *b, uint32_t from, uint32_t to,
                      uint32_t *nblocks, uint32_t *lastfirst, kv_err *err)
{
    *nblocks = 0;
    for (uint32_t i = from; i < to; i += IDX_BLOCK_DOCS) {
        uint32_t end = to - i > IDX_BLOCK_DOCS ? i + IDX_BLOCK_DOCS : to;
        int rc = idx_block_encode(b, i, end, &w->val2, err);
        if (!rc)
            rc = idx_key_block(&w->key, tklen, b->ids[i], err);
        if (!rc)
            rc = kv_put(txn, KV_POSTINGS, w->key.data, w->key.len,
                        w->val2.data, w->val2.len, err);
        if (rc)
            return rc;
        (*nblocks)++;
        *lastfirst = b->ids[i];
    }
    return KVFTS_OK;
}

/* The last block of the term whose key is w->key[0..tklen): its first id
 * and its last id (from its span, without decoding it). */
static int read_last(idx_writer *w, kv_txn *txn, size_t tklen, uint32_t *last,
                     uint32_t *lastblk, kv_err *err)
{
    kv_cursor *c = NULL;
    int rc = kv_cursor_open(&c, txn, KV_POSTINGS, err);
    if (rc)
        return rc;
    /* Past every block key of the term: TERM 0x00 ff ff ff ff ff. */
    w->key.len = tklen;
    rc = kv_buf_append(&w->key, "\0\xff\xff\xff\xff\xff", 6, err);
    if (!rc)
        rc = kv_cursor_seek(c, w->key.data, w->key.len, err);
    if (rc == KVFTS_OK)
        rc = kv_cursor_prev(c, err);
    else if (rc == KVFTS_ITEROVER)
        rc = kv_cursor_last(c, err);
    uint32_t first = 0;
    const char *k, *v;
    size_t kl, vl;
    if (!rc) {
        kv_cursor_key(c, &k, &kl);
        if (!idx_key_is_block_of(k, kl, w->key.data, tklen, &first))
            rc = kv_seterr(err, KVFTS_ECORRUPT, "term has a header but no "
                           "blocks");
    } else if (rc == KVFTS_ITEROVER) {
        rc = kv_seterr(err, KVFTS_ECORRUPT, "term has a header but no blocks");
    }
    if (!rc) {
        kv_cursor_val(c, &v, &vl);
        const unsigned char *p = (const unsigned char *)v + 2, *end =
            (const unsigned char *)v + vl;
        uint64_t n, span;
        if (vl < 2 || !idx_varint_get(&p, end, &n) ||
            !idx_varint_get(&p, end, &span) || span > UINT32_MAX - first)
            rc = kv_seterr(err, KVFTS_ECORRUPT, "corrupt postings block");
        else {
            *lastblk = first;
            *last = first + (uint32_t)span;
        }
    }
    kv_cursor_close(c);
    w->key.len = tklen;
    return rc;
}

/* Find the block of the term (key w->key[0..tklen)) that holds docid, or
 * where it would go: the last block whose first id <= docid, else the first
 * block.  *found = false if the term has no block at all. */
static int find_block(idx_writer *w, kv_txn *txn, size_t tklen,
                      uint32_t docid, uint32_t *first, bool *found,
                      kv_err *err)
{
    *found = false;
    kv_cursor *c = NULL;
    int rc = kv_cursor_open(&c, txn, KV_POSTINGS, err);
    if (rc)
        return rc;
    rc = idx_key_block(&w->key, tklen, docid, err);
    if (!rc)
        rc = kv_cursor_seek(c, w->key.data, w->key.len, err);
    const char *k;
    size_t kl;
    uint32_t f;
    bool at_block = false;
    uint32_t at_first = 0;
    if (rc == KVFTS_OK) {
        kv_cursor_key(c, &k, &kl);
        at_block = idx_key_is_block_of(k, kl, w->key.data, tklen, &at_first);
        if (at_block && at_first == docid) {
            *first = docid;
            *found = true;
            goto done;
        }
        rc = kv_cursor_prev(c, err);
    } else if (rc == KVFTS_ITEROVER) {
        rc = kv_cursor_last(c, err);
    }
    if (rc == KVFTS_OK) {
        kv_cursor_key(c, &k, &kl);
        if (idx_key_is_block_of(k, kl, w->key.data, tklen, &f)) {
            *first = f;
            *found = true;
            goto done;
        }
    } else if (rc != KVFTS_ITEROVER) {
        goto done;
    }
    rc = KVFTS_OK;
    if (at_block) {            /* docid precedes every block */
        *first = at_first;
        *found = true;
    }
done:
    kv_cursor_close(c);
    w->key.len = tklen;
    return rc;
}

/* Copy b into out with document docid set to (tf, pos) or removed (tf 0). */
static int block_edit(const idx_block *b, idx_block *out, uint32_t docid,
                      uint32_t tf, const uint32_t *pos, uint32_t *old_tf,
                      kv_err *err)
{
    uint32_t lo = 0, hi = b->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (b->ids[mid] < docid)
            lo = mid + 1;
        else
            hi = mid;
    }
    bool exists = lo < b->n && b->ids[lo] == docid;
    *old_tf = exists ? b->tfs[lo] : 0;
    uint32_t n = b->n + (exists ? 0 : 1) - (tf == 0 && exists ? 1 : 0);
    uint64_t npos = b->positions ? (uint64_t)b->npos + tf - *old_tf : 0;
    int rc = idx_block_reserve(out, n + 1, npos + 1, err);
    if (rc)
        return rc;
    out->positions = b->positions;
    uint32_t k = 0, pk = 0;
    for (uint32_t i = 0; i <= b->n; i++) {
        if (i == lo && tf) {     /* the new or rewritten posting */
            out->ids[k] = docid;
            out->tfs[k] = tf;
            if (out->positions) {
                out->poff[k] = pk;
                memcpy(out->pos + pk, pos, (size_t)tf * 4);
                pk += tf;
            }
            k++;
        }
        if (i == b->n)
            break;
        if (i == lo && exists)
            continue;            /* replaced or removed */
        out->ids[k] = b->ids[i];
        out->tfs[k] = b->tfs[i];
        if (out->positions) {
            out->poff[k] = pk;
            memcpy(out->pos + pk, b->pos + b->poff[i], (size_t)b->tfs[i] * 4);
            pk += b->tfs[i];
        }
        k++;
    }
    out->n = k;
    out->npos = pk;
    if (out->positions)
        out->poff[k] = pk;
    return KVFTS_OK;
}

/* Set (tf > 0) or remove (tf == 0) the posting of docid in the term whose
 * key is w->key[0..tklen).  The slow, always-correct path. */
static int term_apply(idx_writer *w, kv_txn *txn, size_t tklen,
                      uint32_t docid, uint32_t tf, const uint32_t *pos,
                      kv_err *err)
{
    idx_header h;
    w->key.len = tklen;
    int rc = kv_get(txn, KV_POSTINGS, w->key.data, tklen, &w->val, true, err);
    if (rc == KVFTS_ENOTFOUND) {
        if (tf == 0)
            return kv_seterr(err, KVFTS_ECORRUPT, "index entry missing for "
                             "a term of document %u", docid);
        /* A new term: one block of one document. */
        idx_block *b = &w->out;
        rc = idx_block_reserve(b, 1, tf, err);
        if (rc)
            return rc;
        b->positions = w->positions;
        b->n = 1;
        b->ids[0] = docid;
        b->tfs[0] = tf;
        b->poff[0] = 0;
        b->poff[1] = tf;
        if (b->positions)
            memcpy(b->pos, pos, (size_t)tf * 4);
        uint32_t nb, lf;
        rc = put_blocks(w, txn, tklen, b, 0, 1, &nb, &lf, err);
        h = (idx_header){ 1, tf, 1, docid, docid, w->positions };
        goto put_header;
    }
    if (!rc)
        rc = idx_header_decode(w->val.data, w->val.len, &h, err);
    if (rc)
        return rc;
    uint32_t first = 0;
    bool found;
    rc = find_block(w, txn, tklen, docid, &first, &found, err);
    if (!rc && !found)
        rc = kv_seterr(err, KVFTS_ECORRUPT, "term has a header but no "
                       "blocks");
    if (!rc)
        rc = idx_key_block(&w->key, tklen, first, err);
    if (!rc)
        rc = kv_get(txn, KV_POSTINGS, w->key.data, w->key.len, &w->val2, true,
                    err);
    if (rc == KVFTS_ENOTFOUND)
        rc = kv_seterr(err, KVFTS_ECORRUPT, "postings block vanished");
    if (!rc)
        rc = idx_block_decode(&w->blk, first, w->val2.data, w->val2.len,
                              IDX_DECODE_POSITIONS, err);
    uint32_t old_tf = 0;
    if (!rc)
        rc = block_edit(&w->blk, &w->out, docid, tf, pos, &old_tf, err);
    if (rc)
        return rc;
    if (tf == 0 && old_tf == 0)
        return kv_seterr(err, KVFTS_ECORRUPT, "document %u missing from the "
                         "postings of one of its terms", docid);
    idx_block *b = &w->out;
    bool was_last = first == h.lastblk;
    /* The old record goes if the block emptied or its first id changed. */
    if (b->n == 0 || b->ids[0] != first) {
        rc = idx_key_block(&w->key, tklen, first, err);
        if (!rc)
            rc = kv_del(txn, KV_POSTINGS, w->key.data, w->key.len, err);
        if (rc)
            return rc;
    }
    uint32_t nb = 0, lf = 0;
    if (b->n > IDX_BLOCK_DOCS) {        /* split in two */
        uint32_t half = b->n / 2, nb2;
        rc = put_blocks(w, txn, tklen, b, 0, half, &nb, &lf, err);
        if (!rc)
            rc = put_blocks(w, txn, tklen, b, half, b->n, &nb2, &lf, err);
        nb = 2;
    } else if (b->n > 0) {
        rc = put_blocks(w, txn, tklen, b, 0, b->n, &nb, &lf, err);
    }
    if (rc)
        return rc;
    h.blocks = h.blocks - 1 + nb;
    if (tf == 0) {
        h.df--;
        h.cf -= old_tf;
    } else {
        if (old_tf == 0)
            h.df++;
        h.cf = h.cf - old_tf + tf;
    }
    if (h.df == 0) {
        w->key.len = tklen;
        return kv_del(txn, KV_POSTINGS, w->key.data, tklen, err);
    }
    if (was_last || docid > h.last) {
        rc = read_last(w, txn, tklen, &h.last, &h.lastblk, err);
        if (rc)
            return rc;
    }
put_header:
    if (rc)
        return rc;
    w->key.len = tklen;
    rc = idx_header_encode(&h, &w->val, err);
    if (!rc)
        rc = kv_put(txn, KV_POSTINGS, w->key.data, tklen, w->val.data,
                    w->val.len, err);
    return rc;
}

/* ---- the bulk buffer ---------------------------------------------------- */

static int buffer_add(idx_writer *w, const keyref *k, uint32_t docid,
                      uint32_t tf, const uint32_t *pos, kv_err *err)
{
    uint32_t t;
    bool added;
    int rc = strtab_put(&w->bterms, k->s, k->len, &t, &added, err);
    if (rc)
        return rc;
    uint32_t i = w->nrec;
    if ((rc = grow(&w->rec_term, &w->cap_t, i + 1, 4, err)) ||
        (rc = grow(&w->rec_doc, &w->cap_d, i + 1, 4, err)) ||
        (rc = grow(&w->rec_tf, &w->cap_f, i + 1, 4, err)) ||
        (rc = grow(&w->rec_pos, &w->cap_p, i + 1, 4, err)))
        return rc;
    uint32_t np = w->positions ? tf : 0;
    if ((rc = grow(&w->bpos, &w->cap_bpos, (uint64_t)w->nbpos + np, 4, err)))
        return rc;
    w->rec_term[i] = t;
    w->rec_doc[i] = docid;
    w->rec_tf[i] = tf;
    w->rec_pos[i] = w->nbpos;
    memcpy(w->bpos + w->nbpos, pos, (size_t)np * 4);
    w->nbpos += np;
    w->nrec++;
    return KVFTS_OK;
}

/* Records of one term, as an idx_block (sorted by doc id). */
typedef struct recref {
    uint32_t doc;
    uint32_t rec;
} recref;

static int recref_cmp(const void *a, const void *b)
{
    const recref *x = a, *y = b;
    return x->doc < y->doc ? -1 : x->doc > y->doc;
}

/* Append records recs[0..n) (sorted) to block b (which may hold stored
 * postings already). */
static int block_append(idx_writer *w, idx_block *b, const recref *recs,
                        uint32_t n, kv_err *err)
{
    uint64_t npos = b->npos;
    for (uint32_t i = 0; i < n; i++)
        npos += w->positions ? w->rec_tf[recs[i].rec] : 0;
    int rc = idx_block_reserve(b, b->n + n + 1, npos + 1, err);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t r = recs[i].rec, k = b->n++;
        b->ids[k] = w->rec_doc[r];
        b->tfs[k] = w->rec_tf[r];
        if (b->positions) {
            b->poff[k] = b->npos;
            memcpy(b->pos + b->npos, w->bpos + w->rec_pos[r],
                   (size_t)w->rec_tf[r] * 4);
            b->npos += w->rec_tf[r];
        }
    }
    if (b->positions)
        b->poff[b->n] = b->npos;
    return KVFTS_OK;
}

static int flush_term(idx_writer *w, kv_txn *txn, const keyref *k,
                      recref *recs, uint32_t n, kv_err *err)
{
    /* Doc ids are ascending unless a replaced document's old id is here. */
    for (uint32_t i = 1; i < n; i++)
        if (recs[i].doc <= recs[i - 1].doc) {
            qsort(recs, n, sizeof *recs, recref_cmp);
            break;
        }
    kv_buf_reset(&w->key);
    int rc = kv_buf_append(&w->key, k->s, k->len, err);
    if (rc)
        return rc;
    size_t tklen = k->len;
    idx_header h;
    rc = kv_get(txn, KV_POSTINGS, w->key.data, tklen, &w->val, true, err);
    bool have = rc == KVFTS_OK;
    if (have)
        rc = idx_header_decode(w->val.data, w->val.len, &h, err);
    else if (rc == KVFTS_ENOTFOUND)
        rc = KVFTS_OK;
    if (rc)
        return rc;
    idx_block *b = &w->out;
    uint64_t cf = 0;
    for (uint32_t i = 0; i < n; i++)
        cf += w->rec_tf[recs[i].rec];
    if (!have) {
        b->n = 0;
        b->npos = 0;
        b->positions = w->positions;
        rc = block_append(w, b, recs, n, err);
        uint32_t nb = 0, lf = 0;
        if (!rc)
            rc = put_blocks(w, txn, tklen, b, 0, b->n, &nb, &lf, err);
        h = (idx_header){ n, cf, nb, recs[n - 1].doc, lf, w->positions };
    } else if (recs[0].doc > h.last && h.positions == w->positions) {
        /* Append after the last stored posting. */
        rc = idx_key_block(&w->key, tklen, h.lastblk, err);
        if (!rc)
            rc = kv_get(txn, KV_POSTINGS, w->key.data, w->key.len, &w->val2,
                        true, err);
        if (rc == KVFTS_ENOTFOUND)
            rc = kv_seterr(err, KVFTS_ECORRUPT, "last postings block "
                           "missing");
        if (!rc)
            rc = idx_block_decode(b, h.lastblk, w->val2.data, w->val2.len,
                                  IDX_DECODE_POSITIONS, err);
        if (!rc)
            rc = block_append(w, b, recs, n, err);
        uint32_t nb = 0, lf = 0;
        if (!rc)
            rc = put_blocks(w, txn, tklen, b, 0, b->n, &nb, &lf, err);
        h.blocks += nb - 1;
        h.df += n;
        h.cf += cf;
        h.last = recs[n - 1].doc;
        h.lastblk = lf;
    } else {
        for (uint32_t i = 0; i < n && !rc; i++) {
            uint32_t r = recs[i].rec;
            w->key.len = tklen;
            rc = term_apply(w, txn, tklen, w->rec_doc[r], w->rec_tf[r],
                            w->bpos + w->rec_pos[r], err);
        }
        return rc;
    }
    if (rc)
        return rc;
    w->key.len = tklen;
    rc = idx_header_encode(&h, &w->val, err);
    if (!rc)
        rc = kv_put(txn, KV_POSTINGS, w->key.data, tklen, w->val.data,
                    w->val.len, err);
    return rc;
}

/* The buffered records grouped by term (counting sort, stable) with the
 * terms in key order.  Caller frees the three arrays. */
typedef struct grouped {
    uint32_t *start;      /* per term id (+1): its records in recs */
    recref *recs;
    keyref *order;        /* terms sorted by key */
    uint32_t nterms;
} grouped;

static void grouped_free(grouped *g)
{
    kv_free(g->start);
    kv_free(g->recs);
    kv_free(g->order);
    memset(g, 0, sizeof *g);
}

static int buffer_group(idx_writer *w, grouped *g, kv_err *err)
{
    uint32_t nt = w->bterms.n;
    memset(g, 0, sizeof *g);
    g->nterms = nt;
    g->start = kv_calloc((size_t)nt + 1, sizeof *g->start);
    g->recs = kv_malloc(((size_t)w->nrec + 1) * sizeof *g->recs);
    g->order = kv_malloc(((size_t)nt + 1) * sizeof *g->order);
    if (!g->start || !g->recs || !g->order) {
        grouped_free(g);
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < w->nrec; i++)
        g->start[w->rec_term[i] + 1]++;
    for (uint32_t t = 0; t < nt; t++)
        g->start[t + 1] += g->start[t];
    for (uint32_t i = 0; i < w->nrec; i++) {
        uint32_t t = w->rec_term[i];
        g->recs[g->start[t]++] = (recref){ w->rec_doc[i], i };
    }
    for (uint32_t t = nt; t > 0; t--)
        g->start[t] = g->start[t - 1];
    g->start[0] = 0;
    for (uint32_t t = 0; t < nt; t++) {
        uint32_t l;
        g->order[t].s = strtab_str(&w->bterms, t, &l);
        g->order[t].len = l;
        g->order[t].id = t;
    }
    if (nt > 1)
        qsort(g->order, nt, sizeof *g->order, keyref_cmp);
    return KVFTS_OK;
}

int idx_flush(idx_writer *w, kv_txn *txn, kv_err *err)
{
    int rc = KVFTS_OK;
    if (w->nrec && !w->dry) {
        /* Terms in key order: the B-tree is written front to back. */
        grouped g;
        rc = buffer_group(w, &g, err);
        for (uint32_t i = 0; !rc && i < g.nterms; i++) {
            uint32_t t = g.order[i].id;
            rc = flush_term(w, txn, &g.order[i], g.recs + g.start[t],
                            g.start[t + 1] - g.start[t], err);
        }
        grouped_free(&g);
    }
    if (!rc)
        rc = fields_flush(w, txn, err);
    if (!rc)
        rc = skipped_flush(w, txn, err);
    if (!rc && !w->dry)
        buffer_reset(w);
    return rc;
}

/* ---- applying a prepared change ----------------------------------------- */

static bool same_posting(const dterms *a, uint32_t ea, const dterms *b,
                         uint32_t eb)
{
    if (a->tf[ea] != b->tf[eb])
        return false;
    return memcmp(a->pos + a->pstart[ea], b->pos + b->pstart[eb],
                  (size_t)a->tf[ea] * 4) == 0;
}

static int set_posting(idx_writer *w, kv_txn *txn, const keyref *k,
                       uint32_t docid, uint32_t tf, const uint32_t *pos,
                       kv_err *err)
{
    if (w->buffering && tf)
        return buffer_add(w, k, docid, tf, pos, err);
    kv_buf_reset(&w->key);
    int rc = kv_buf_append(&w->key, k->s, k->len, err);
    if (!rc)
        rc = term_apply(w, txn, k->len, docid, tf, pos, err);
    return rc;
}

int idx_doc_apply(idx_writer *w, kv_txn *txn, uint32_t docid, kv_err *err)
{
    dterms *o = &w->old, *nw = &w->neu;
    int rc = KVFTS_OK;
    unsigned char idb[4];
    kv_put_be32(idb, docid);
    if (w->buffering && o->present &&
        strtab_has(&w->bdocs, (const char *)idb, 4)) {
        /* Its earlier version is still in the buffer: merge that first. */
        rc = idx_flush(w, txn, err);
        if (rc)
            return rc;
    }
    /* Terms: merge-walk the old and new sorted lists. */
    uint32_t i = 0, j = 0, no = o->present ? o->keys.n : 0;
    uint32_t nn = nw->present ? nw->keys.n : 0;
    while (!rc && (i < no || j < nn)) {
        int c = i == no ? 1 : j == nn ? -1 : keyref_cmp(&o->order[i],
                                                         &nw->order[j]);
        if (c < 0) {              /* only in the old version: remove */
            rc = set_posting(w, txn, &o->order[i], docid, 0, NULL, err);
            i++;
        } else if (c > 0) {       /* only in the new version: add */
            uint32_t e = nw->order[j].id;
            rc = set_posting(w, txn, &nw->order[j], docid, nw->tf[e],
                             nw->pos + nw->pstart[e], err);
            j++;
        } else {                  /* in both: rewrite if it changed */
            uint32_t eo = o->order[i].id, e = nw->order[j].id;
            if (!same_posting(o, eo, nw, e))
                rc = set_posting(w, txn, &nw->order[j], docid, nw->tf[e],
                                 nw->pos + nw->pstart[e], err);
            i++;
            j++;
        }
    }
    if (rc)
        return rc;
    if (w->buffering && nn) {
        uint32_t id;
        bool added;
        rc = strtab_put(&w->bdocs, (const char *)idb, 4, &id, &added, err);
        if (rc)
            return rc;
    }
    /* Field statistics and the document's lengths. */
    if (o->present)
        rc = each_field_len(w, txn, o, -1, count_field, err);
    if (rc)
        return rc;
    w->nlens = 0;
    if (nw->present)
        rc = each_field_len(w, txn, nw, +1, count_field, err);
    if (rc)
        return rc;
    if (w->dry) {
        for (uint32_t k = 0; k < w->nlens; k++) {
            if ((rc = grow(&w->exp, &w->expcap, (uint64_t)w->nexp + 1,
                           sizeof *w->exp, err)) != 0)
                return rc;
            w->exp[w->nexp++] = (struct exp_len){ docid, w->lens[k].field_id,
                                                  w->lens[k].len };
        }
    } else if (nw->present) {
        rc = idx_lens_encode(w->lens, w->nlens, &w->val, err);
        if (!rc)
            rc = kv_put(txn, KV_DOCLENS, idb, 4, w->val.data, w->val.len,
                        err);
    } else if (o->present) {
        rc = kv_del(txn, KV_DOCLENS, idb, 4, err);
        if (rc == KVFTS_ENOTFOUND)
            rc = kv_seterr(err, KVFTS_ECORRUPT, "length record of document "
                           "%u missing", docid);
    }
    return rc;
}

/* ---- clearing ----------------------------------------------------------- */

static int clear_space(kv_txn *txn, kv_space s, const char *prefix,
                       size_t plen, kv_err *err)
{
    kv_cursor *c = NULL;
    int rc = kv_cursor_open(&c, txn, s, err);
    if (rc)
        return rc;
    rc = kv_cursor_seek(c, prefix, plen, err);
    while (rc == KVFTS_OK) {
        const char *k;
        size_t kl;
        kv_cursor_key(c, &k, &kl);
        if (kl < plen || memcmp(k, prefix, plen) != 0)
            break;
        rc = kv_cursor_del(c, err);
        if (!rc)
            rc = kv_cursor_next(c, err);
    }
    kv_cursor_close(c);
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

int idx_clear(kv_txn *txn, kv_err *err)
{
    int rc = clear_space(txn, KV_POSTINGS, "", 0, err);
    if (!rc)
        rc = clear_space(txn, KV_DOCLENS, "", 0, err);
    if (!rc)
        rc = clear_space(txn, KV_META, IDX_FIELD_PREFIX,
                         strlen(IDX_FIELD_PREFIX), err);
    if (!rc) {
        rc = kv_del(txn, KV_META, "seq::field", 10, err);
        if (rc == KVFTS_ENOTFOUND)
            rc = KVFTS_OK;
    }
    return rc;
}

/* ---- rebuilding --------------------------------------------------------- */

/* Feed every stored document to a writer (which writes, or in dry mode
 * gathers). */
typedef struct feed {
    idx_writer *w;
    kv_txn *txn;
    idx_progress_fn progress;
    void *payload;
    uint64_t n;
} feed;

static int feed_doc(void *payload, const char *k, size_t kl, const kv_doc *d,
                    kv_err *err)
{
    feed *f = payload;
    int rc = idx_doc_prepare(f->w, NULL, 0, d->json, d->json_len, err);
    if (rc == KVFTS_EINVAL) {
        kv_err_prefix(err, "doc '%.*s'", (int)kl, k);
        err->code = rc = KVFTS_ECORRUPT;   /* it was accepted once */
    }
    if (!rc)
        rc = idx_doc_apply(f->w, f->txn, d->docid, err);
    if (!rc && !f->w->dry && idx_flush_due(f->w))
        rc = idx_flush(f->w, f->txn, err);
    if (!rc && ++f->n % 1000 == 0 && f->progress)
        f->progress(f->payload, f->n);
    return rc;
}

static int each_document(idx_writer *w, kv_txn *txn, idx_progress_fn progress,
                         void *payload, uint64_t *ndocs, kv_err *err)
{
    feed f = { w, txn, progress, payload, 0 };
    int rc = kv_doc_scan(txn, feed_doc, &f, err);
    *ndocs = f.n;
    return rc;
}

int idx_rebuild(kv_txn *txn, tok_analysis *a, size_t mem_limit,
                idx_progress_fn progress, void *payload, kv_err *err)
{
    idx_writer *w = NULL;
    int rc = idx_clear(txn, err);
    if (!rc)
        rc = idx_writer_new(&w, a, mem_limit, err);
    uint64_t n = 0;
    if (!rc) {
        w->buffering = true;
        rc = each_document(w, txn, progress, payload, &n, err);
    }
    if (!rc)
        rc = idx_flush(w, txn, err);
    if (!rc && progress)
        progress(payload, n);
    idx_writer_free(w);
    return rc;
}

/* ---- checking ----------------------------------------------------------- */

#define MAX_REPORTS 1000

typedef struct checker {
    idx_writer *w;
    kv_txn *txn;
    idx_report_fn report;
    void *payload;
    uint64_t found;
    kv_buf msg;
    kv_buf key;
    kv_err *err;
    struct fname { uint32_t id; uint32_t idx; } *ids;   /* stored id -> ours */
    uint32_t nids, idcap;
} checker;

static int differ(checker *ck, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int differ(checker *ck, const char *fmt, ...)
{
    ck->found++;
    if (ck->found > MAX_REPORTS || !ck->report)
        return KVFTS_OK;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    return ck->report(ck->payload, line);
}

/* The user key of a doc id, for messages ("#ID" if even that is gone). */
static const char *doc_name(checker *ck, uint32_t docid)
{
    kv_err e = KV_ERR_INIT;
    if (kv_docid_key(ck->txn, docid, &ck->key, &e) == KVFTS_OK)
        return ck->key.data;
    kv_buf_reset(&ck->key);
    kv_buf_appendf(&ck->key, NULL, "#%u", docid);
    return ck->key.data ? ck->key.data : "?";
}

static int check_term(checker *ck, const keyref *k, recref *recs, uint32_t n)
{
    idx_writer *w = ck->w;
    kv_err *err = ck->err;
    for (uint32_t i = 1; i < n; i++)
        if (recs[i].doc <= recs[i - 1].doc) {
            qsort(recs, n, sizeof *recs, recref_cmp);
            break;
        }
    const char *field = k->s;
    size_t flen = strlen(field);
    const char *term = k->s + flen + 1;
    int tlen = (int)(k->len - flen - 1);
    idx_postings *p = NULL;
    int rc = idx_postings_open(&p, ck->txn, field, flen, term, (size_t)tlen,
                               err);
    if (rc == KVFTS_ENOTFOUND)
        return differ(ck, "fts::%s::%.*s: missing (expected count %u)",
                      field, tlen, term, n);
    if (rc)
        return rc;
    const idx_term_info *info = idx_postings_info(p);
    uint64_t cf = 0;
    for (uint32_t i = 0; i < n; i++)
        cf += w->rec_tf[recs[i].rec];
    if (info->df != n || info->cf != cf)
        rc = differ(ck, "fts::%s::%.*s: count %llu, occurrences %llu; "
                    "expected %u, %llu", field, tlen, term,
                    (unsigned long long)info->df,
                    (unsigned long long)info->cf, n, (unsigned long long)cf);
    uint32_t i = 0, blocks = 0, block_last = 0, last = 0;
    int prc;
    while (!rc && (prc = idx_postings_next(p, err)) == KVFTS_OK) {
        uint32_t d = idx_postings_docid(p);
        if (blocks == 0 || d > block_last) {
            blocks++;
            block_last = idx_postings_block_last(p);
        }
        last = d;
        while (!rc && i < n && recs[i].doc < d) {
            rc = differ(ck, "fts::%s::%.*s: document '%s' missing", field,
                        tlen, term, doc_name(ck, recs[i].doc));
            i++;
        }
        if (rc)
            break;
        if (i == n || recs[i].doc > d) {
            rc = differ(ck, "fts::%s::%.*s: document '%s' should not be "
                        "there", field, tlen, term, doc_name(ck, d));
            continue;
        }
        uint32_t r = recs[i].rec, tf = idx_postings_tf(p);
        const uint32_t *pos = idx_postings_positions(p);
        if (tf != w->rec_tf[r])
            rc = differ(ck, "fts::%s::%.*s: document '%s' has tf %u, "
                        "expected %u", field, tlen, term, doc_name(ck, d), tf,
                        w->rec_tf[r]);
        else if (w->positions &&
                 (!pos || memcmp(pos, w->bpos + w->rec_pos[r],
                                 (size_t)tf * 4) != 0))
            rc = differ(ck, "fts::%s::%.*s: document '%s' has wrong "
                        "positions", field, tlen, term, doc_name(ck, d));
        i++;
    }
    if (!rc && prc != KVFTS_ITEROVER && prc != KVFTS_OK)
        rc = prc;
    for (; !rc && i < n; i++)
        rc = differ(ck, "fts::%s::%.*s: document '%s' missing", field, tlen,
                    term, doc_name(ck, recs[i].doc));
    if (!rc && (blocks != info->blocks || last != info->last))
        rc = differ(ck, "fts::%s::%.*s: header says %u blocks, last id %u; "
                    "found %u, %u", field, tlen, term, info->blocks,
                    info->last, blocks, last);
    idx_postings_close(p);
    return rc;
}

/* Stored terms that no document produces. */
static int check_extra_terms(checker *ck)
{
    kv_cursor *c = NULL;
    int rc = kv_cursor_open(&c, ck->txn, KV_POSTINGS, ck->err);
    if (!rc)
        rc = kv_cursor_seek(c, "", 0, ck->err);
    while (rc == KVFTS_OK) {
        const char *k;
        size_t kl;
        kv_cursor_key(c, &k, &kl);
        const char *z = memchr(k, 0, kl);
        if (!z) {
            rc = differ(ck, "postings record without a field: '%.*s'",
                        (int)(kl > 60 ? 60 : kl), k);
        } else if (!memchr(z + 1, 0, kl - (size_t)(z + 1 - k)) &&
                   !strtab_has(&ck->w->bterms, k, kl)) {
            rc = differ(ck, "fts::%s::%.*s: no document has this term",
                        k, (int)(kl - (size_t)(z + 1 - k)), z + 1);
        }
        if (!rc)
            rc = kv_cursor_next(c, ck->err);
    }
    kv_cursor_close(c);
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

/* Field statistics, and the map from stored field ids to ours. */
static int check_fields(checker *ck)
{
    idx_writer *w = ck->w;
    kv_cursor *c = NULL;
    size_t plen = strlen(IDX_FIELD_PREFIX);
    int rc = kv_cursor_open(&c, ck->txn, KV_META, ck->err);
    if (!rc)
        rc = kv_cursor_seek(c, IDX_FIELD_PREFIX, plen, ck->err);
    uint32_t seen = 0;
    while (rc == KVFTS_OK) {
        const char *k, *v;
        size_t kl, vl;
        kv_cursor_key(c, &k, &kl);
        if (kl < plen || memcmp(k, IDX_FIELD_PREFIX, plen) != 0)
            break;
        kv_cursor_val(c, &v, &vl);
        idx_field f;
        rc = idx_field_decode(v, vl, &f, ck->err);
        if (rc)
            break;
        const char *name = k + plen;
        size_t nl = kl - plen;
        uint64_t docs = 0, total = 0;
        uint32_t idx = UINT32_MAX;
        if (strtab_has(&w->fnames, name, nl)) {
            bool added;
            rc = strtab_put(&w->fnames, name, nl, &idx, &added, ck->err);
            if (rc)
                break;
            docs = (uint64_t)w->fs[idx].ddocs;
            total = (uint64_t)w->fs[idx].dlen;
            seen++;
        }
        if ((rc = grow(&ck->ids, &ck->idcap, (uint64_t)ck->nids + 1,
                       sizeof *ck->ids, ck->err)) != 0)
            break;
        ck->ids[ck->nids++] = (struct fname){ f.id, idx };
        if (f.docs != docs || f.total_len != total)
            rc = differ(ck, "field '%.*s': %llu documents, length %llu; "
                        "expected %llu, %llu", (int)nl, name,
                        (unsigned long long)f.docs,
                        (unsigned long long)f.total_len,
                        (unsigned long long)docs, (unsigned long long)total);
        if (!rc)
            rc = kv_cursor_next(c, ck->err);
    }
    kv_cursor_close(c);
    if (rc == KVFTS_ITEROVER)
        rc = KVFTS_OK;
    if (!rc && seen != w->fnames.n)
        rc = differ(ck, "%u field(s) of the documents have no field record",
                    w->fnames.n - seen);
    return rc;
}

/* Each document's stored lengths against the expected ones. */
static int check_lengths(checker *ck, uint64_t ndocs)
{
    idx_writer *w = ck->w;
    int rc = KVFTS_OK;
    kv_buf val = KV_BUF_INIT;
    uint32_t i = 0;
    uint64_t docs_seen = 0;
    /* exp[] holds each document's fields together; documents with no
     * field have no entries, so they are found by the count below. */
    while (!rc && i < w->nexp) {
        uint32_t docid = w->exp[i].docid, j = i;
        while (j < w->nexp && w->exp[j].docid == docid)
            j++;
        docs_seen++;
        unsigned char id[4];
        kv_put_be32(id, docid);
        rc = kv_get(ck->txn, KV_DOCLENS, id, 4, &val, false, ck->err);
        if (rc == KVFTS_ENOTFOUND) {
            rc = differ(ck, "document '%s': no length record",
                        doc_name(ck, docid));
        } else if (!rc) {
            for (uint32_t k = i; !rc && k < j; k++) {
                uint32_t sid = 0, len = 0;
                for (uint32_t m = 0; m < ck->nids; m++)
                    if (ck->ids[m].idx == w->exp[k].field - 1)
                        sid = ck->ids[m].id;
                if (sid)
                    rc = idx_lens_find(val.data, val.len, sid, &len, ck->err);
                if (!rc && len != w->exp[k].len) {
                    uint32_t nl;
                    const char *name = strtab_str(&w->fnames,
                                                  w->exp[k].field - 1, &nl);
                    rc = differ(ck, "document '%s': field '%.*s' length %u, "
                                "expected %u", doc_name(ck, docid), (int)nl,
                                name, len, w->exp[k].len);
                }
            }
        }
        i = j;
    }
    (void)docs_seen;
    uint64_t stored = 0;
    if (!rc)
        rc = kv_count(ck->txn, KV_DOCLENS, &stored, ck->err);
    if (!rc && stored != ndocs)
        rc = differ(ck, "%llu document length records for %llu documents",
                    (unsigned long long)stored, (unsigned long long)ndocs);
    kv_buf_free(&val);
    return rc;
}

int idx_check(kv_txn *txn, tok_analysis *a, idx_report_fn report,
              void *payload, uint64_t *differences, kv_err *err)
{
    *differences = 0;
    checker ck = { .txn = txn, .report = report, .payload = payload,
                   .err = err };
    int rc = idx_writer_new(&ck.w, a, 0, err);
    if (rc)
        return rc;
    ck.w->buffering = true;
    ck.w->dry = true;
    uint64_t ndocs = 0;
    rc = each_document(ck.w, txn, NULL, NULL, &ndocs, err);
    grouped g = { 0 };
    if (!rc)
        rc = buffer_group(ck.w, &g, err);
    for (uint32_t i = 0; !rc && i < g.nterms; i++) {
        uint32_t t = g.order[i].id;
        rc = check_term(&ck, &g.order[i], g.recs + g.start[t],
                        g.start[t + 1] - g.start[t]);
    }
    grouped_free(&g);
    if (!rc)
        rc = check_extra_terms(&ck);
    if (!rc)
        rc = check_fields(&ck);
    if (!rc)
        rc = check_lengths(&ck, ndocs);
    *differences = ck.found;
    idx_writer_free(ck.w);
    kv_buf_free(&ck.msg);
    kv_buf_free(&ck.key);
    kv_free(ck.ids);
    return rc;
}
