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
 * in-memory buffer (a term table plus one chain of encoded postings per
 * term, idx_buffer.c), and idx_flush() merges them into the stored entries
 * in key order: a new term is written as full blocks, and a term whose new
 * doc ids all come after its last stored one (the usual case: new documents
 * get new, larger ids) appends to its last block and then writes full
 * blocks; only other cases fall back to term_apply per posting.  Removals
 * are applied at once; a document whose postings are still in the buffer
 * is flushed before it is changed again.  Field statistics are summed in
 * memory and written by idx_flush(), which the database handle calls before
 * every commit.
 *
 * The field dictionary (name -> id, for the compact per-document length
 * records) is cached per writer; idx_discard() drops the cache with the
 * buffer, because ids handed out in an aborted transaction are void.
 */
#include "idx_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define DEFAULT_MEM (256u * 1024u * 1024u)

/* ---- one version of a document: its sorted terms ------------------------ */


static void dterms_free(dterms *d)
{
    idx__strtab_free(&d->keys);
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
        rc = idx__strtab_put(&d->keys, d->scratch.data, d->scratch.len, &id,
                        &added, err);
    if (rc)
        return rc;
    if (added) {
        if ((rc = idx__grow(&d->tf, &d->ecap, id + 1, 4, err)) != 0)
            return rc;
        if ((rc = idx__grow(&d->flen, &d->fcap, id + 1, 4, err)) != 0)
            return rc;
        d->tf[id] = 0;
        d->flen[id] = (uint32_t)t->field_len;
    }
    d->tf[id]++;
    if ((rc = idx__grow(&d->occ_e, &d->ocap_e, d->nocc + 1, 4, err)) != 0 ||
        (rc = idx__grow(&d->occ_p, &d->ocap_p, d->nocc + 1, 4, err)) != 0)
        return rc;
    d->occ_e[d->nocc] = id;
    d->occ_p[d->nocc] = t->pos;
    d->nocc++;
    return KVFTS_OK;
}

/* Analyze json into d (reset first).  json NULL: the version is absent.
 * sort: order the entries by key (needed to merge with another version);
 * otherwise d->order keeps entry order. */
static int dterms_build(dterms *d, tok_analysis *a, const char *json,
                        size_t len, bool sort, kv_err *err)
{
    idx__strtab_reset(&d->keys);
    d->nocc = 0;
    d->present = json != NULL;
    if (!json)
        return KVFTS_OK;
    d->err = err;
    int rc = tok_analysis_run_doc(a, json, len, on_term, d, err);
    if (rc)
        return rc;
    uint32_t n = d->keys.n;
    if ((rc = idx__grow(&d->pstart, &d->scap, (uint64_t)n + 1, 4, err)) != 0)
        return rc;
    if ((rc = idx__grow(&d->pos, &d->pcap, d->nocc, 4, err)) != 0)
        return rc;
    if ((rc = idx__grow(&d->order, &d->kcap, n, sizeof(keyref), err)) != 0)
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
        d->order[e].s = idx__strtab_str(&d->keys, e, &l);
        d->order[e].len = l;
        d->order[e].id = e;
    }
    d->sorted = sort;
    if (sort && n > 1)
        qsort(d->order, n, sizeof *d->order, idx__keyref_cmp);
    return KVFTS_OK;
}

/* ---- the writer --------------------------------------------------------- */



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
    idx__strtab_free(&w->bterms);
    idx__buf_free(w);
    idx__strtab_free(&w->bdocs);
    idx__strtab_free(&w->fnames);
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

/* Memory held for the tables: what is allocated (they grow by doubling). */
static size_t strtab_bytes(const strtab *t)
{
    return t->arena.cap + (size_t)t->cap * 12 + (size_t)t->nslots * 4;
}

size_t idx_buffered_bytes(const idx_writer *w)
{
    return idx__buf_bytes(w) + strtab_bytes(&w->bterms) +
           strtab_bytes(&w->bdocs);
}

bool idx_flush_due(const idx_writer *w)
{
    return idx_buffered_bytes(w) >= w->mem_limit;
}

static void buffer_reset(idx_writer *w)
{
    idx__strtab_reset(&w->bterms);
    idx__strtab_reset(&w->bdocs);
    idx__buf_reset(w);
}

void idx_discard(idx_writer *w)
{
    buffer_reset(w);
    w->lens_changed = false;
    w->skipped = 0;
    idx__strtab_reset(&w->fnames);   /* ids of an aborted transaction are void */
}

int idx_doc_prepare(idx_writer *w, const char *old_json, size_t old_len,
                    const char *new_json, size_t new_len, kv_err *err)
{
    int rc = dterms_build(&w->old, w->a, old_json, old_len, true, err);
    if (rc == KVFTS_EINVAL) {
        kv_err_prefix(err, "stored version no longer analyzes");
        err->code = rc = KVFTS_ECORRUPT;
    }
    if (rc)
        return rc;
    /* A new document going to the buffer has nothing to merge with, and
     * the flush sorts terms anyway: skip sorting its entries (a tenth of a
     * bulk load's time).  Single writes keep key order, so that concurrent
     * writers take page locks in one order. */
    tok_stats before, after;
    tok_analysis_stats(w->a, &before);
    rc = dterms_build(&w->neu, w->a, new_json, new_len,
                      old_json || !w->buffering, err);
    tok_analysis_stats(w->a, &after);
    if (rc == KVFTS_OK && w->neu.keys.n > IDX_MAX_DOC_ENTRIES)
        return kv_seterr(err, KVFTS_EINVAL,
                         "document has %u index entries (distinct terms of "
                         "each field and of _all), more than the "
                         KVFTS_STR(IDX_MAX_DOC_ENTRIES) " one document may "
                         "have", w->neu.keys.n);
    w->skipped += after.too_long - before.too_long;
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
    int rc = idx__strtab_put(&w->fnames, name, nlen, &i, &added, err);
    if (rc)
        return rc;
    if ((rc = idx__grow(&w->fs, &w->fscap, i + 1, sizeof *w->fs, err)) != 0)
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
        const char *name = idx__strtab_str(&w->fnames, i, &nlen);
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

static int sorted_field_len(idx_writer *w, kv_txn *txn, dterms *d, int sign,
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

#define FEW_FIELDS 32

typedef struct field_sum {
    keyref name;          /* s, len: the field name; id unused */
    uint64_t sum;
} field_sum;

static int field_sum_cmp(const void *a, const void *b)
{
    return idx__keyref_cmp(&((const field_sum *)a)->name,
                      &((const field_sum *)b)->name);
}

/* Call fn once per field of d, in field-name order, with the field's length
 * (the sum of its terms' tf): what sorted_field_len gives, without sorting
 * every entry when the document has few fields. */
static int each_field_len(idx_writer *w, kv_txn *txn, dterms *d, int sign,
                          field_len_fn fn, kv_err *err)
{
    if (d->sorted)
        return sorted_field_len(w, txn, d, sign, fn, err);
    field_sum f[FEW_FIELDS];
    uint32_t nf = 0, last = 0;
    for (uint32_t e = 0; e < d->keys.n; e++) {
        uint32_t fl = d->flen[e], l;
        const char *s = idx__strtab_str(&d->keys, e, &l);
        if (!(nf && f[last].name.len == fl && !memcmp(f[last].name.s, s, fl))) {
            for (last = 0; last < nf; last++)
                if (f[last].name.len == fl && !memcmp(f[last].name.s, s, fl))
                    break;
            if (last == nf) {
                if (nf == FEW_FIELDS) {   /* many fields: sort after all */
                    qsort(d->order, d->keys.n, sizeof *d->order, idx__keyref_cmp);
                    d->sorted = true;
                    return sorted_field_len(w, txn, d, sign, fn, err);
                }
                f[nf++] = (field_sum){ { s, fl, 0 }, 0 };
            }
        }
        f[last].sum += d->tf[e];
    }
    if (nf > 1)
        qsort(f, nf, sizeof *f, field_sum_cmp);
    for (uint32_t i = 0; i < nf; i++) {
        int rc = fn(w, txn, f[i].name.s, f[i].name.len, f[i].sum, sign, err);
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
        if ((rc = idx__grow(&w->lens, &w->lcap, k + 1, sizeof *w->lens, err)) != 0)
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
    return idx__buf_add(w, k->s, k->len, docid, tf, pos, err);
}

/* Append every posting of tp to b. */
static int block_append(idx_block *b, const idx_tpost *tp, kv_err *err)
{
    uint32_t n = tp->n;
    uint64_t npos = b->npos + (b->positions ? tp->cf : 0);
    int rc = idx_block_reserve(b, b->n + n + 1, npos + 1, err);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = b->n++;
        b->ids[k] = tp->ids[i];
        b->tfs[k] = tp->tfs[i];
        if (b->positions) {
            b->poff[k] = b->npos;
            memcpy(b->pos + b->npos, tp->pos + tp->poff[i],
                   (size_t)tp->tfs[i] * 4);
            b->npos += tp->tfs[i];
        }
    }
    if (b->positions)
        b->poff[b->n] = b->npos;
    return KVFTS_OK;
}

/* Where a flush knows the stored keys to be: terms come in key order, so
 * after a seek that found key B as the first stored key >= term T, every
 * term between T and B is known to be absent without another lookup (its
 * own inserts all sort before the next term).  On a fresh load, one seek
 * answers for every term. */
typedef struct probe {
    kv_cursor *c;
    kv_buf bound;         /* first stored key >= the last term sought */
    bool valid;           /* bound (or end) is known */
    bool end;             /* no stored key >= the last term sought */
} probe;

/* The header of the term whose key is w->key into w->val; *have tells. */
static int header_get(idx_writer *w, kv_txn *txn, probe *pr, bool *have,
                      kv_err *err)
{
    const char *k = w->key.data;
    size_t kl = w->key.len;
    *have = false;
    if (pr->valid && pr->end)
        return KVFTS_OK;
    if (pr->valid) {
        size_t m = kl < pr->bound.len ? kl : pr->bound.len;
        int c = memcmp(k, pr->bound.data, m);
        if (c < 0 || (c == 0 && kl < pr->bound.len))
            return KVFTS_OK;
    }
    int rc = pr->c ? KVFTS_OK : kv_cursor_open(&pr->c, txn, KV_POSTINGS, err);
    if (!rc)
        rc = kv_cursor_seek(pr->c, k, kl, err);
    pr->valid = rc == KVFTS_OK || rc == KVFTS_ITEROVER;
    pr->end = rc == KVFTS_ITEROVER;
    if (rc)
        return pr->end ? KVFTS_OK : rc;
    const char *bk, *v;
    size_t bl, vl;
    kv_cursor_key(pr->c, &bk, &bl);
    kv_buf_reset(&pr->bound);
    if ((rc = kv_buf_append(&pr->bound, bk, bl, err)) != 0) {
        pr->valid = false;
        return rc;
    }
    if (bl != kl || memcmp(bk, k, kl) != 0)
        return KVFTS_OK;
    kv_cursor_val(pr->c, &v, &vl);
    kv_buf_reset(&w->val);
    *have = true;
    return kv_buf_append(&w->val, v, vl, err);
}

/* Merge the buffered postings tp of term k into the stored entry. */
static int flush_term(idx_writer *w, kv_txn *txn, probe *pr, const keyref *k,
                      const idx_tpost *tp, kv_err *err)
{
    uint32_t n = tp->n;
    kv_buf_reset(&w->key);
    int rc = kv_buf_append(&w->key, k->s, k->len, err);
    if (rc)
        return rc;
    size_t tklen = k->len;
    idx_header h;
    bool have;
    rc = header_get(w, txn, pr, &have, err);
    if (!rc && have)
        rc = idx_header_decode(w->val.data, w->val.len, &h, err);
    if (rc)
        return rc;
    idx_block *b = &w->out;
    uint64_t cf = tp->cf;
    if (!have) {
        b->n = 0;
        b->npos = 0;
        b->positions = w->positions;
        rc = block_append(b, tp, err);
        if (rc)
            return rc;
        /* The header goes first: it sorts before the term's blocks, so on a
         * fresh load every put lands at the end of the tree, where Berkeley
         * DB splits a full page by moving one item and leaves pages full
         * (written after the blocks, it split them in half). */
        uint32_t nb = (b->n + IDX_BLOCK_DOCS - 1) / IDX_BLOCK_DOCS;
        h = (idx_header){ n, cf, nb, tp->ids[n - 1],
                          b->ids[(nb - 1) * IDX_BLOCK_DOCS], w->positions };
        rc = idx_header_encode(&h, &w->val, err);
        if (!rc)
            rc = kv_put(txn, KV_POSTINGS, w->key.data, tklen, w->val.data,
                        w->val.len, err);
        uint32_t lf = 0;
        if (!rc)
            rc = put_blocks(w, txn, tklen, b, 0, b->n, &nb, &lf, err);
        return rc;
    } else if (tp->ids[0] > h.last && h.positions == w->positions) {
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
            rc = block_append(b, tp, err);
        uint32_t nb = 0, lf = 0;
        if (!rc)
            rc = put_blocks(w, txn, tklen, b, 0, b->n, &nb, &lf, err);
        h.blocks += nb - 1;
        h.df += n;
        h.cf += cf;
        h.last = tp->ids[n - 1];
        h.lastblk = lf;
    } else {
        for (uint32_t i = 0; i < n && !rc; i++) {
            w->key.len = tklen;
            rc = term_apply(w, txn, tklen, tp->ids[i], tp->tfs[i],
                            tp->pos ? tp->pos + tp->poff[i] : NULL, err);
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


/* Length records changed in txn: cached length columns (idx_lens_cache)
 * are stale from its commit on. */
static int bump_lens_generation(kv_txn *txn, kv_err *err)
{
    uint64_t gen;
    return kv_seq_next(txn, IDX_LENS_GEN, &gen, err);
}

int idx_flush(idx_writer *w, kv_txn *txn, kv_err *err)
{
    int rc = KVFTS_OK;
    if (w->npost && !w->dry) {
        /* Terms in key order: the B-tree is written front to back. */
        keyref *order = NULL;
        probe pr = { NULL, KV_BUF_INIT, false, false };
        rc = idx__buf_terms(w, &order, err);
        for (uint32_t i = 0; !rc && i < w->bterms.n; i++) {
            rc = idx__buf_decode(w, order[i].id, &w->tp, err);
            if (!rc)
                rc = flush_term(w, txn, &pr, &order[i], &w->tp, err);
        }
        kv_cursor_close(pr.c);
        kv_buf_free(&pr.bound);
        kv_free(order);
    }
    if (!rc)
        rc = fields_flush(w, txn, err);
    if (!rc)
        rc = skipped_flush(w, txn, err);
    if (!rc && w->lens_changed && !w->dry)
        rc = bump_lens_generation(txn, err);
    if (!rc && !w->dry) {
        buffer_reset(w);
        w->lens_changed = false;
    }
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
        idx__strtab_has(&w->bdocs, (const char *)idb, 4)) {
        /* Its earlier version is still in the buffer: merge that first. */
        rc = idx_flush(w, txn, err);
        if (rc)
            return rc;
    }
    /* Terms: merge-walk the old and new sorted lists. */
    uint32_t i = 0, j = 0, no = o->present ? o->keys.n : 0;
    uint32_t nn = nw->present ? nw->keys.n : 0;
    while (!rc && (i < no || j < nn)) {
        int c = i == no ? 1 : j == nn ? -1 : idx__keyref_cmp(&o->order[i],
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
        rc = idx__strtab_put(&w->bdocs, (const char *)idb, 4, &id, &added, err);
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
            if ((rc = idx__grow(&w->exp, &w->expcap, (uint64_t)w->nexp + 1,
                           sizeof *w->exp, err)) != 0)
                return rc;
            w->exp[w->nexp++] = (struct exp_len){ docid, w->lens[k].field_id,
                                                  w->lens[k].len };
        }
    } else if (nw->present) {
        w->lens_changed = true;
        rc = idx_lens_encode(w->lens, w->nlens, &w->val, err);
        if (!rc)
            rc = kv_put(txn, KV_DOCLENS, idb, 4, w->val.data, w->val.len,
                        err);
    } else if (o->present) {
        w->lens_changed = true;
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
    if (!rc)
        rc = bump_lens_generation(txn, err);
    return rc;
}
