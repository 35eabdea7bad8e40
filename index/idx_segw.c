/*
 * idx_segw.c -- writing a segment: its terms in byte order, each as an
 * entry in a dictionary chunk, with its postings inline or in block
 * records (the format is idx_codec.c's).
 *
 * A segment is written front to back into a file of its own (its keys
 * start with its id, which names the file: lib/kv/kv_part.c), so the
 * transaction that writes it touches only new pages: its write set is the
 * segment, whatever the size of the index.  Two producers feed it:
 *
 *  - a batch's flush (idx_segw_shards): the buffer's shards, each with
 *    its terms sorted, merged term by term; per term the shards' postings
 *    (distinct documents: a document is analyzed by one shard) merged by
 *    id, their local columns mapped to the database's field ids;
 *  - a merge (idx_merge.c): terms fed one at a time with their postings
 *    streamed a block's worth at a time, so that a term of millions of
 *    postings never sits in memory whole.  A merge spreads its segment
 *    over several transactions (idx_segw_set_txn); the segment is listed
 *    only when it is finished.
 *
 * Per term the writer keeps one block's worth of postings pending: a term
 * whose postings fit one block of at most IDX_INLINE_MAX bytes is stored
 * inline in its entry (one record for most terms of a corpus, which are
 * rare), a longer one in block records keyed by the term's ordinal.  The
 * entry, with the term's counts, is added to the chunk once the term ends;
 * a chunk past IDX_CHUNK_BYTES is written and a new one begun.
 */
#include "idx_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct idx_segw {
    kv_txn *txn;
    kv_buf *sink;          /* without a transaction: records go here */
    uint32_t seg;
    idx_chunk_w chunk;
    kv_buf key, val, scratch, blk, ent;
    uint32_t ord;          /* ordinal of the current term */
    uint64_t bytes;        /* bytes of records written */
    uint64_t terms;
    uint64_t docs_max;     /* the most postings of one term (for stats) */
    uint32_t min_id, max_id;
    bool any;
    /* the current term */
    kv_buf term;
    uint32_t *cols;
    uint32_t ncols, ccap;
    bool positions;
    uint64_t *df;          /* per column index */
    uint32_t dcap;
    uint64_t df_all, ndocs;
    uint32_t first, last, max_tf, nblocks;
    idx_plist pend;        /* postings not yet in a block */
    uint64_t ndels_total;
};

int idx_segw_open(idx_segw **out, kv_txn *txn, uint32_t seg_id, kv_err *err)
{
    *out = kv_calloc(1, sizeof **out);
    if (!*out)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    idx_segw *w = *out;
    w->txn = txn;
    w->seg = seg_id;
    idx_chunk_w_init(&w->chunk);
    idx_plist_init(&w->pend);
    return KVFTS_OK;
}

int idx_segw_open_sink(idx_segw **out, uint32_t seg_id, kv_buf *sink,
                       kv_err *err)
{
    int rc = idx_segw_open(out, NULL, seg_id, err);
    if (!rc)
        (*out)->sink = sink;
    return rc;
}

/* A record of the segment: put in the transaction, or appended to the
 * sink as u8 space | u32 key length | u32 value length | key | value
 * (host order: the sink never leaves the process). */
static int seg_put(idx_segw *w, kv_space space, const void *key, size_t klen,
                   const void *val, size_t vlen, kv_err *err)
{
    if (w->txn)
        return kv_put(w->txn, space, key, klen, val, vlen, err);
    if (klen > UINT32_MAX || vlen > UINT32_MAX)
        return kv_seterr(err, KVFTS_EINVAL, "record too large");
    unsigned char h[9];
    uint32_t kl = (uint32_t)klen, vl = (uint32_t)vlen;
    h[0] = (unsigned char)space;
    memcpy(h + 1, &kl, 4);
    memcpy(h + 5, &vl, 4);
    int rc = kv_buf_append(w->sink, h, sizeof h, err);
    if (!rc)
        rc = kv_buf_append(w->sink, key, klen, err);
    return rc ? rc : kv_buf_append(w->sink, val, vlen, err);
}

/* Put sink's records: through @p pw (a file the transaction makes,
 * written from any thread) or into @p txn. */
static int replay(kv_txn *txn, kv_partw *pw, const kv_buf *sink,
                  kv_err *err)
{
    const unsigned char *p = (const unsigned char *)sink->data;
    const unsigned char *end = p + sink->len;
    while (p < end) {
        uint32_t kl, vl;
        if (end - p < 9)
            return kv_seterr(err, KVFTS_ERROR, "segment sink damaged");
        kv_space space = (kv_space)p[0];
        memcpy(&kl, p + 1, 4);
        memcpy(&vl, p + 5, 4);
        p += 9;
        if ((size_t)(end - p) < (size_t)kl + vl)
            return kv_seterr(err, KVFTS_ERROR, "segment sink damaged");
        int rc = pw ? kv_partw_put(pw, space, p, kl, p + kl, vl, err)
                    : kv_put(txn, space, p, kl, p + kl, vl, err);
        if (rc)
            return rc;
        p += (size_t)kl + vl;
    }
    return KVFTS_OK;
}

int idx_segw_replay(kv_txn *txn, const kv_buf *sink, kv_err *err)
{
    return replay(txn, NULL, sink, err);
}

int idx_segw_replay_pw(kv_partw *pw, const kv_buf *sink, kv_err *err)
{
    return replay(NULL, pw, sink, err);
}

void idx_segw_set_txn(idx_segw *w, kv_txn *txn)
{
    w->txn = txn;
}

void idx_segw_set_ord(idx_segw *w, uint32_t ord)
{
    w->ord = ord;
}

uint32_t idx_segw_ord(const idx_segw *w)
{
    return w->ord;
}

void idx_segw_free(idx_segw *w)
{
    if (!w)
        return;
    idx_chunk_w_free(&w->chunk);
    kv_buf_free(&w->key);
    kv_buf_free(&w->val);
    kv_buf_free(&w->scratch);
    kv_buf_free(&w->blk);
    kv_buf_free(&w->ent);
    kv_buf_free(&w->term);
    kv_free(w->cols);
    kv_free(w->df);
    idx_plist_free(&w->pend);
    kv_free(w);
}

uint64_t idx_segw_bytes(const idx_segw *w)
{
    return w->bytes + w->chunk.buf.len;
}

static int put_chunk(idx_segw *w, kv_err *err)
{
    if (w->chunk.n == 0)
        return KVFTS_OK;
    int rc = idx_chunk_w_finish(&w->chunk, &w->val, err);
    if (!rc)
        rc = idx_key_chunk(&w->key, w->seg, w->chunk.first.data,
                           w->chunk.first.len, err);
    if (!rc)
        rc = seg_put(w, KV_TERMS, w->key.data, w->key.len, w->val.data,
                     w->val.len, err);
    if (!rc)
        w->bytes += w->key.len + w->val.len;
    idx_chunk_w_reset(&w->chunk, w->ord);
    return rc;
}

int idx_segw_term_begin(idx_segw *w, const char *term, size_t tlen,
                        const uint32_t *cols, uint32_t ncols, bool positions,
                        kv_err *err)
{
    kv_buf_reset(&w->term);
    int rc = kv_buf_append(&w->term, term, tlen, err);
    if (!rc)
        rc = idx__grow(&w->cols, &w->ccap, ncols, 4, err);
    if (!rc)
        rc = idx__grow(&w->df, &w->dcap, ncols, 8, err);
    if (rc)
        return rc;
    memcpy(w->cols, cols, (size_t)ncols * 4);
    memset(w->df, 0, (size_t)ncols * 8);
    w->ncols = ncols;
    w->positions = positions;
    w->df_all = w->ndocs = 0;
    w->first = w->last = w->max_tf = w->nblocks = 0;
    idx_plist_reset(&w->pend, positions);
    return KVFTS_OK;
}

/* Encode pending postings [from, to) as one block into w->blk. */
static int encode_range(idx_segw *w, uint32_t from, uint32_t to, kv_err *err)
{
    kv_buf_reset(&w->blk);
    int rc = idx_block_encode(&w->pend, from, to, &w->blk, &w->scratch,
                              err);
    if (rc)
        return rc;
    uint32_t span, mtf;
    uint64_t mask;
    if (idx_block_peek(w->blk.data, w->blk.len, &span, &mtf, &mask) &&
        mtf > w->max_tf)
        w->max_tf = mtf;
    return KVFTS_OK;
}

static int encode_pending(idx_segw *w, kv_err *err)
{
    return encode_range(w, 0, w->pend.n, err);
}

/* Write pending postings [from, to) as block records: one, or halves of
 * it while it is larger than IDX_BLOCK_BYTES (one document's may be). */
static int write_range(idx_segw *w, uint32_t from, uint32_t to, kv_err *err)
{
    int rc = encode_range(w, from, to, err);
    if (rc)
        return rc;
    if (w->blk.len > IDX_BLOCK_BYTES && to - from > 1) {
        uint32_t half = from + (to - from) / 2;
        rc = write_range(w, from, half, err);
        return rc ? rc : write_range(w, half, to, err);
    }
    unsigned char key[13];
    idx_key_block(key, w->seg, w->ord, w->pend.ids[from]);
    rc = seg_put(w, KV_POSTINGS, key, sizeof key, w->blk.data, w->blk.len,
                 err);
    if (rc)
        return rc;
    w->bytes += sizeof key + w->blk.len;
    w->nblocks++;
    return KVFTS_OK;
}

/* Write the pending postings as block records. */
static int flush_block(idx_segw *w, kv_err *err)
{
    int rc = write_range(w, 0, w->pend.n, err);
    if (rc)
        return rc;
    idx_plist_reset(&w->pend, w->positions);
    return KVFTS_OK;
}

/* Count document i of l in the term's document frequencies: per column,
 * and once in `_all` if a view of it is there (its columns checked). */
static void doc_counts(idx_segw *w, const idx_plist *l, uint32_t i)
{
    bool all = false;
    for (uint32_t v = l->vstart[i]; v < l->vstart[i + 1]; v++) {
        w->df[l->vcol[v]]++;
        all |= (w->cols[l->vcol[v]] & IDX_KIND_ALL) != 0;
    }
    w->df_all += all;
}

int idx_segw_term_add(idx_segw *w, const idx_plist *l, uint32_t from,
                      uint32_t to, kv_err *err)
{
    for (uint32_t i = from; i < to;) {
        if (w->pend.n == IDX_BLOCK_DOCS) {
            int rc = flush_block(w, err);
            if (rc)
                return rc;
        }
        /* as many as the pending block has room for, copied at once */
        uint32_t j = to - i < IDX_BLOCK_DOCS - w->pend.n
                         ? to : i + (IDX_BLOCK_DOCS - w->pend.n);
        for (uint32_t k = i; k < j; k++) {
            uint32_t id = l->ids[k];
            if (w->ndocs && id <= w->last)
                return kv_seterr(err, KVFTS_ERROR, "segment writer: "
                                 "postings out of order (%u after %u)", id,
                                 w->last);
            for (uint32_t v = l->vstart[k]; v < l->vstart[k + 1]; v++)
                if (l->vcol[v] >= w->ncols)
                    return kv_seterr(err, KVFTS_ERROR, "segment writer: "
                                     "column index %u of %u", l->vcol[v],
                                     w->ncols);
            doc_counts(w, l, k);
            if (w->ndocs++ == 0)
                w->first = id;
            w->last = id;
        }
        int rc = idx_plist_copy_range(&w->pend, l, i, j, NULL, err);
        if (rc)
            return rc;
        i = j;
    }
    return KVFTS_OK;
}

int idx_segw_term_add_block(idx_segw *w, const idx_block *b,
                            const char *rec, size_t len, kv_err *err)
{
    const idx_plist *l = &b->l;
    if (l->n == 0)
        return KVFTS_OK;
    if (!b->cols && b->decoded < IDX_DEC_VIEWS)
        return kv_seterr(err, KVFTS_ERROR, "segment writer: a block's "
                         "columns are not decoded");
    if (w->ndocs && l->ids[0] <= w->last)
        return kv_seterr(err, KVFTS_ERROR, "segment writer: postings out "
                         "of order (%u after %u)", l->ids[0], w->last);
    if (l->positions != w->positions)
        return kv_seterr(err, KVFTS_ERROR, "segment writer: a block %s "
                         "positions in a term %s them",
                         l->positions ? "with" : "without",
                         w->positions ? "with" : "without");
    for (uint32_t v = 0; v < l->nv; v++)
        if (l->vcol[v] >= w->ncols)
            return kv_seterr(err, KVFTS_ERROR, "segment writer: column "
                             "index %u of %u", l->vcol[v], w->ncols);
    /* the pending postings first, as a block of their own */
    int rc = w->pend.n ? flush_block(w, err) : KVFTS_OK;
    if (rc)
        return rc;
    unsigned char key[13];
    idx_key_block(key, w->seg, w->ord, l->ids[0]);
    if ((rc = seg_put(w, KV_POSTINGS, key, sizeof key, rec, len, err)))
        return rc;
    w->bytes += sizeof key + len;
    w->nblocks++;
    for (uint32_t i = 0; i < l->n; i++)
        doc_counts(w, l, i);
    if (w->ndocs == 0)
        w->first = l->ids[0];
    w->ndocs += l->n;
    w->last = l->ids[l->n - 1];
    if (b->max_tf > w->max_tf)
        w->max_tf = b->max_tf;
    return KVFTS_OK;
}

int idx_segw_term_end(idx_segw *w, const uint32_t *dels, uint32_t ndel,
                      const uint64_t *ndelc, uint64_t ndel_all, kv_err *err)
{
    /* A merge's term whose postings and deletions all cancelled: no entry
     * (the format has none without either). */
    if (w->ndocs == 0 && ndel == 0)
        return KVFTS_OK;
    idx_entry e;
    memset(&e, 0, sizeof e);
    e.flags = (w->positions ? IDX_E_POSITIONS : 0) |
              (ndel ? IDX_E_DELS : 0) | (w->ncols == 1 ? IDX_E_ONECOL : 0);
    e.ncols = w->ncols;
    e.cols = w->cols;
    e.df = w->df;
    e.df_all = w->df_all;
    e.ndocs = w->ndocs;
    e.ndel = ndel;
    e.ndel_all = ndel_all;
    kv_buf dels_enc = KV_BUF_INIT;
    int rc = KVFTS_OK;
    uint64_t zero = 0;
    e.ndelc = ndel ? (uint64_t *)ndelc : &zero;
    for (uint32_t k = 0; !rc && k < ndel; k++)
        rc = idx_buf_varint(&dels_enc, dels[k] - (k ? dels[k - 1] : 0), err);
    e.dels = (const unsigned char *)dels_enc.data;
    e.dels_len = dels_enc.len;
    if (!rc && w->ndocs) {
        e.first = w->first;
        e.last = w->last;
        if (w->nblocks == 0) {
            rc = encode_pending(w, err);
            if (!rc && w->blk.len > IDX_INLINE_MAX)
                rc = flush_block(w, err);
        } else if (w->pend.n) {
            rc = flush_block(w, err);
        }
        e.max_tf = w->max_tf;
        if (w->nblocks) {
            e.flags |= IDX_E_EXTERNAL;
            e.nblocks = w->nblocks;
        } else {
            e.blk = w->blk.data;
            e.blk_len = w->blk.len;
        }
        if (w->first < w->min_id || !w->any)
            w->min_id = w->first;
        if (w->last > w->max_id)
            w->max_id = w->last;
        w->any = true;
    }
    kv_buf_reset(&w->ent);
    if (!rc)
        rc = idx_entry_encode(&e, &w->ent, err);
    kv_buf_free(&dels_enc);
    if (rc)
        return rc;
    if (w->chunk.n && w->chunk.buf.len + w->ent.len > IDX_CHUNK_BYTES) {
        rc = put_chunk(w, err);
        if (rc)
            return rc;
    }
    if (w->chunk.n == 0)
        idx_chunk_w_reset(&w->chunk, w->ord);
    rc = idx_chunk_w_add(&w->chunk, w->term.data, w->term.len, w->ent.data,
                         w->ent.len, err);
    if (rc)
        return rc;
    w->ord++;
    w->terms++;
    w->ndels_total += ndel;
    if (w->ndocs > w->docs_max)
        w->docs_max = w->ndocs;
    return KVFTS_OK;
}

int idx_segw_close(idx_segw *w, idx_seg *seg, kv_err *err)
{
    int rc = put_chunk(w, err);
    if (rc)
        return rc;
    memset(seg, 0, sizeof *seg);
    seg->id = w->seg;
    seg->docs = w->docs_max;
    seg->dels = w->ndels_total;
    seg->terms = w->terms;
    seg->bytes = w->bytes;
    seg->min_id = w->any ? w->min_id : 0;
    seg->max_id = w->any ? w->max_id : 0;
    return KVFTS_OK;
}

/* ---- a batch's segment, from its shards ---------------------------------- */

/* Scratch for one term merged across shards. */
typedef struct termw {
    idx_plist adds, merged, tmp;
    idx_dels dels, mdels;
    uint32_t *table;          /* the term's columns (global), sorted */
    uint32_t ntab, tabcap;
    uint32_t *idxmap;         /* scratch: a doc's view order */
    uint32_t imcap;
    uint64_t *ndelc;
    uint32_t ndcap;
    uint32_t *delids;
    uint32_t dicap;
} termw;

static void termw_free(termw *t)
{
    idx_plist_free(&t->adds);
    idx_plist_free(&t->merged);
    idx_plist_free(&t->tmp);
    idx_dels_free(&t->dels);
    idx_dels_free(&t->mdels);
    kv_free(t->table);
    kv_free(t->idxmap);
    kv_free(t->ndelc);
    kv_free(t->delids);
}

static uint32_t table_index(const termw *t, uint32_t col)
{
    uint32_t lo = 0, hi = t->ntab;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (t->table[mid] < col)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void plist_swap(idx_plist *a, idx_plist *b)
{
    idx_plist x = *a;
    *a = *b;
    *b = x;
}

/* Merge a shard's postings of the term, t->adds (its columns through
 * colmap), into t->merged by id.  The first shard's (nothing merged yet)
 * become the merged list, columns mapped in place, and a shard's that
 * all come after the merged ones (a rare term's few documents) are
 * appended: most terms are in one shard only, and copying their lists
 * whole was 3.6% of the catalog's load. */
static int merge_adds(termw *t, const uint32_t *colmap, kv_err *err)
{
    idx_plist *src = &t->adds;
    if (t->merged.n == 0 && t->merged.positions == src->positions) {
        if (colmap)
            for (uint32_t v = 0; v < src->nv; v++)
                src->vcol[v] = colmap[src->vcol[v]];
        plist_swap(&t->merged, src);
        return KVFTS_OK;
    }
    if (t->merged.n && src->n &&
        src->ids[0] > t->merged.ids[t->merged.n - 1])
        return idx_plist_copy_range(&t->merged, src, 0, src->n, colmap, err);
    idx_plist_reset(&t->tmp, t->merged.positions);
    uint32_t i = 0, j = 0;
    int rc = KVFTS_OK;
    const idx_plist *m = &t->merged;
    /* runs of either side copied at once (a term's postings from one
     * shard are one run) */
    while (!rc && (i < m->n || j < src->n)) {
        uint32_t k;
        if (j == src->n || (i < m->n && m->ids[i] < src->ids[j])) {
            for (k = i + 1; k < m->n && (j == src->n ||
                                          m->ids[k] < src->ids[j]); k++)
                ;
            rc = idx_plist_copy_range(&t->tmp, m, i, k, NULL, err);
            i = k;
        } else {
            for (k = j + 1; k < src->n && (i == m->n ||
                                            src->ids[k] <= m->ids[i]); k++)
                ;
            rc = idx_plist_copy_range(&t->tmp, src, j, k, colmap, err);
            j = k;
        }
    }
    if (!rc)
        plist_swap(&t->merged, &t->tmp);
    return rc;
}

static int merge_dels(termw *t, const idx_dels *src, const uint32_t *colmap,
                      kv_err *err)
{
    idx_dels out;
    idx_dels_init(&out);
    uint32_t i = 0, j = 0, buf[64];
    int rc = KVFTS_OK;
    while (!rc && (i < t->mdels.n || j < src->n)) {
        if (j == src->n || (i < t->mdels.n && t->mdels.ids[i] < src->ids[j])) {
            rc = idx_dels_add(&out, t->mdels.ids[i],
                              t->mdels.cols + t->mdels.cstart[i],
                              t->mdels.cstart[i + 1] - t->mdels.cstart[i],
                              err);
            i++;
            continue;
        }
        uint32_t n = src->cstart[j + 1] - src->cstart[j], k0 = src->cstart[j];
        uint32_t *cs = n <= 64 ? buf : kv_malloc((size_t)n * 4);
        if (!cs) {
            rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
            break;
        }
        for (uint32_t k = 0; k < n; k++)
            cs[k] = colmap[src->cols[k0 + k]];
        rc = idx_dels_add(&out, src->ids[j], cs, n, err);
        if (cs != buf)
            kv_free(cs);
        j++;
    }
    if (!rc) {
        idx_dels x = t->mdels;
        t->mdels = out;
        out = x;
    }
    idx_dels_free(&out);
    return rc;
}

/* The distinct values of a[0..na) and b[0..nb) into table (room for
 * na + nb), ascending; their number.  A term has few columns, so each
 * value is checked against the previous one and the few found so far;
 * past TAB_LINEAR distinct ones, all of them are sorted instead (sorting
 * every view of a common term was 5% of a load). */
#define TAB_LINEAR 16
static uint32_t distinct_cols(uint32_t *table, const uint32_t *a, uint32_t na,
                              const uint32_t *b, uint32_t nb)
{
    uint32_t u = 0, last = 0;
    bool many = false;
    for (uint64_t k = 0; k < (uint64_t)na + nb && !many; k++) {
        uint32_t x = k < na ? a[k] : b[k - na];
        if (u && x == last)
            continue;
        last = x;
        uint32_t j = 0;
        while (j < u && table[j] != x)
            j++;
        if (j < u)
            continue;
        if (u == TAB_LINEAR)
            many = true;
        else
            table[u++] = x;
    }
    if (many) {
        if (na)
            memcpy(table, a, (size_t)na * 4);
        if (nb)
            memcpy(table + na, b, (size_t)nb * 4);
        qsort(table, (size_t)na + nb, 4, idx__u32_cmp);
        u = 0;
        for (uint64_t k = 0; k < (uint64_t)na + nb; k++)
            if (u == 0 || table[k] != table[u - 1])
                table[u++] = table[k];
        return u;
    }
    for (uint32_t i = 1; i < u; i++) {     /* insertion sort of the few */
        uint32_t x = table[i], j = i;
        for (; j && table[j - 1] > x; j--)
            table[j] = table[j - 1];
        table[j] = x;
    }
    return u;
}

/* The merged term: its column table, views renumbered into it (ascending
 * within each document), deletion counts; fed to the writer. */
static int write_merged(idx_segw *w, termw *t, const char *term, size_t tlen,
                        kv_err *err)
{
    idx_plist *m = &t->merged;
    uint64_t need = (uint64_t)m->nv + t->mdels.nc + 1;
    int rc = idx__grow(&t->table, &t->tabcap, need, 4, err);
    if (rc)
        return rc;
    t->ntab = distinct_cols(t->table, m->nv ? m->vcol : NULL, m->nv,
                            t->mdels.cols, t->mdels.nc);
    /* Views into table indexes, ascending within each document. */
    for (uint32_t v = 0; v < m->nv; v++)
        m->vcol[v] = table_index(t, m->vcol[v]);
    for (uint32_t i = 0; i < m->n; i++) {
        uint32_t v0 = m->vstart[i], v1 = m->vstart[i + 1];
        bool ordered = true;
        for (uint32_t v = v0 + 1; v < v1 && ordered; v++)
            ordered = m->vcol[v] > m->vcol[v - 1];
        if (ordered)
            continue;
        /* Rare (two columns whose local and global orders differ): sort
         * the document's views with their tfs and positions. */
        idx_plist_reset(&t->tmp, m->positions);
        for (uint32_t v = v0; v < v1; v++) {
            uint32_t best = UINT32_MAX, bv = v0;
            for (uint32_t x = v0; x < v1; x++) {
                bool used = false;
                for (uint32_t y = 0; y < t->tmp.nv && !used; y++)
                    used = t->tmp.vcol[y] == m->vcol[x];
                if (!used && m->vcol[x] < best) {
                    best = m->vcol[x];
                    bv = x;
                }
            }
            rc = idx_plist_reserve(&t->tmp, 0, 1, m->vtf[bv], err);
            if (rc)
                return rc;
            uint32_t y = t->tmp.nv++;
            t->tmp.vcol[y] = m->vcol[bv];
            t->tmp.vtf[y] = m->vtf[bv];
            if (m->positions) {
                memcpy(t->tmp.pos + t->tmp.np, m->pos + m->poff[bv],
                       (size_t)m->vtf[bv] * 4);
                t->tmp.np += m->vtf[bv];
            }
            t->tmp.poff[y + 1] = t->tmp.np;
        }
        for (uint32_t y = 0; y < t->tmp.nv; y++) {
            m->vcol[v0 + y] = t->tmp.vcol[y];
            m->vtf[v0 + y] = t->tmp.vtf[y];
        }
        if (m->positions)
            memcpy(m->pos + m->poff[v0], t->tmp.pos, (size_t)t->tmp.np * 4);
        for (uint32_t y = 0; y < t->tmp.nv; y++)
            m->poff[v0 + y + 1] = m->poff[v0] + t->tmp.poff[y + 1];
    }
    /* Deletions: ids, per column counts, `_all` count. */
    if ((rc = idx__grow(&t->ndelc, &t->ndcap, t->ntab + 1, 8, err)) ||
        (rc = idx__grow(&t->delids, &t->dicap, (uint64_t)t->mdels.n + 1, 4,
                        err)))
        return rc;
    memset(t->ndelc, 0, (size_t)t->ntab * 8);
    uint64_t ndel_all = 0;
    for (uint32_t k = 0; k < t->mdels.n; k++) {
        t->delids[k] = t->mdels.ids[k];
        bool all = false;
        for (uint32_t c = t->mdels.cstart[k]; c < t->mdels.cstart[k + 1];
             c++) {
            t->ndelc[table_index(t, t->mdels.cols[c])]++;
            all |= (t->mdels.cols[c] & IDX_KIND_ALL) != 0;
        }
        ndel_all += all;
    }
    rc = idx_segw_term_begin(w, term, tlen, t->table, t->ntab, m->positions,
                             err);
    if (!rc)
        rc = idx_segw_term_add(w, m, 0, m->n, err);
    if (!rc)
        rc = idx_segw_term_end(w, t->delids, t->mdels.n, t->ndelc, ndel_all,
                               err);
    return rc;
}

/* ---- the flush, on every core --------------------------------------------
 *
 * The term space is cut into ranges of about equal postings (quantiles of
 * the largest shard's terms); each range is written by one thread into a
 * sink of its own (the records, in key order), and the flushing thread
 * puts the sinks into the transaction range after range -- appending, as
 * one writer would -- while the others write the next ranges.  When the
 * segment is a file of its own, which its transaction makes (written
 * outside the transaction: kv_partw), a consumer thread puts the sinks
 * instead, so that the flushing thread's side job (the documents' records,
 * into the transaction) and the sinks go to Berkeley DB side by side: one
 * after the other on the flushing thread, they were most of a catalog
 * load's last 0.1-0.2 s, with the other core idle.  A range
 * knows its first ordinal beforehand: a first parallel pass counts the
 * distinct terms of each range.  Shards are only read meanwhile (each
 * thread with its own scratch).  Without helpers, one range is written
 * straight into the transaction. */

enum { PH_SORT, PH_COUNT, PH_WRITE };

typedef struct range {
    const char *lo, *hi;      /* [lo, hi) in byte order; NULL: unbounded */
    uint32_t lol, hil;
    uint32_t nterms, ord0;
    kv_buf sink;
    idx_seg seg;
    kv_err err;
    int rc;
} range;

typedef struct flushp {
    kv_txn *txn;
    kv_partw *pw;          /* the segment's file, made by txn: or NULL */
    idx_shard **shards;
    uint32_t n;
    uint32_t *const *colmaps;
    bool positions;
    uint32_t seg_id;
    range *r;
    uint32_t nr;
    /* the tasks of the current phase */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase;
    uint32_t ntasks, next;
    uint8_t *done;
    kv_err *terr;             /* per task (sorts) */
    int *trc;
    unsigned active;          /* helpers in the phase */
    bool abort;               /* a task failed: the phase stops */
    bool stop;                /* the flushing thread failed: all stop */
    uint32_t want;            /* ranges to cut the term space into */
    /* the driver (driver_main), under mu once started */
    const idx_runner *run;
    pthread_t driver;
    bool driver_done;
    int driver_rc;
    kv_err driver_err;
} flushp;

/* Shard s's sorted terms in range r: [*a, *b). */
static void range_bounds(const flushp *f, const range *r, uint32_t s,
                         uint32_t *a, uint32_t *b)
{
    const idx_shard *sh = f->shards[s];
    *a = r->lo ? idx_shard_term_lower(sh, r->lo, r->lol) : 0;
    *b = r->hi ? idx_shard_term_lower(sh, r->hi, r->hil)
               : idx_shard_nterms(sh);
}

/* The shards' next terms in a range, in byte order, each read from its
 * shard once (the sorted order points into the shard's strings at random:
 * a cache miss a read). */
typedef struct kway {
    uint32_t n;
    uint32_t *cur, *end;
    const char **t;        /* shard s's current term (NULL: done) */
    uint64_t *pre;         /* its idx__prefix8(), compared first */
    uint32_t *tl;
    bool *eq;              /* shard s has the current smallest */
} kway;

static void kway_load(kway *k, idx_shard *const *sh, uint32_t s)
{
    k->t[s] = NULL;
    if (k->cur[s] < k->end[s]) {
        k->t[s] = idx_shard_term(sh[s], k->cur[s], &k->tl[s]);
        k->pre[s] = idx_shard_term_prefix(sh[s], k->cur[s]);
    }
}

/* Set up for range r; false: out of memory. */
static bool kway_open(kway *k, const flushp *f, const range *r)
{
    k->n = f->n;
    uint32_t m = f->n ? f->n : 1;
    k->cur = kv_calloc(m, 2 * sizeof *k->cur + sizeof *k->t +
                          sizeof *k->pre + sizeof *k->tl + sizeof *k->eq);
    if (!k->cur)
        return false;
    k->end = k->cur + m;
    k->pre = (uint64_t *)(void *)(k->end + m);   /* 8m bytes in */
    k->t = (const char **)(void *)(k->pre + m);
    k->tl = (uint32_t *)(void *)(k->t + m);
    k->eq = (bool *)(k->tl + m);
    for (uint32_t s = 0; s < f->n; s++) {
        range_bounds(f, r, s, &k->cur[s], &k->end[s]);
        kway_load(k, f->shards, s);
    }
    return true;
}

/* The smallest current term (NULL at the end); k->eq marks the shards
 * that hold it. */
static const char *kway_min(kway *k, uint32_t *len)
{
    const char *best = NULL;
    uint32_t bl = 0;
    uint64_t bp = 0;
    for (uint32_t s = 0; s < k->n; s++) {
        k->eq[s] = false;
        if (!k->t[s])
            continue;
        int c = !best ? -1
              : k->pre[s] != bp ? (k->pre[s] < bp ? -1 : 1)
              : idx__bytes_cmp(k->t[s], k->tl[s], best, bl);
        if (c < 0) {
            for (uint32_t j = 0; j < s; j++)
                k->eq[j] = false;
            best = k->t[s];
            bl = k->tl[s];
            bp = k->pre[s];
        }
        if (c <= 0)
            k->eq[s] = true;
    }
    *len = bl;
    return best;
}

/* Past the current term in the shards that hold it. */
static void kway_next(kway *k, idx_shard *const *sh)
{
    for (uint32_t s = 0; s < k->n; s++)
        if (k->eq[s]) {
            k->cur[s]++;
            kway_load(k, sh, s);
        }
}

/* The distinct terms of range r. */
static int range_count(flushp *f, range *r)
{
    kway k;
    if (!kway_open(&k, f, r))
        return kv_seterr(&r->err, KVFTS_ENOMEM, "out of memory");
    r->nterms = 0;
    uint32_t bl;
    while (kway_min(&k, &bl)) {
        r->nterms++;
        kway_next(&k, f->shards);
    }
    kv_free(k.cur);
    return KVFTS_OK;
}

/* Write range r: into the transaction (txn) or r->sink. */
static int range_write(flushp *f, range *r, kv_txn *txn, kv_err *err)
{
    idx_segw *w = NULL;
    termw t;
    memset(&t, 0, sizeof t);
    idx_plist_init(&t.adds);
    idx_plist_init(&t.merged);
    idx_plist_init(&t.tmp);
    idx_dels_init(&t.dels);
    idx_dels_init(&t.mdels);
    idx_tl_scratch sc;
    memset(&sc, 0, sizeof sc);
    kway k = { 0 };
    int rc = idx_segw_open(&w, txn, f->seg_id, err);
    if (!rc) {
        if (!txn)
            w->sink = &r->sink;
        idx_segw_set_ord(w, r->ord0);
        if (!kway_open(&k, f, r))
            rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }
    while (!rc) {
        /* The smallest next term of the shards. */
        uint32_t bl;
        const char *best = kway_min(&k, &bl);
        if (!best)
            break;
        idx_plist_reset(&t.merged, f->positions);
        idx_dels_reset(&t.mdels);
        char tb[IDX_TERM_MAX + 1];
        size_t tl = bl <= IDX_TERM_MAX ? bl : IDX_TERM_MAX;
        memcpy(tb, best, tl);
        for (uint32_t s = 0; !rc && s < f->n; s++) {
            if (!k.eq[s])
                continue;
            idx_shard_term_prefetch(f->shards[s], k.cur[s]);
            rc = idx_shard_term_lists(f->shards[s], k.cur[s], &sc, &t.adds,
                                      &t.dels, err);
            if (!rc && t.adds.n)
                rc = merge_adds(&t, f->colmaps[s], err);
            if (!rc && t.dels.n)
                rc = merge_dels(&t, &t.dels, f->colmaps[s], err);
        }
        kway_next(&k, f->shards);
        if (!rc)
            rc = write_merged(w, &t, tb, tl, err);
    }
    if (!rc)
        rc = idx_segw_close(w, &r->seg, err);
    termw_free(&t);
    kv_free(k.cur);
    idx_tl_scratch_free(&sc);
    idx_segw_free(w);
    return rc;
}

/* Task k of the current phase. */
static void task_run(flushp *f, uint32_t k)
{
    if (f->phase == PH_SORT) {
        f->trc[k] = idx_shard_sort(f->shards[k], &f->terr[k]);
    } else if (f->phase == PH_COUNT) {
        f->r[k].rc = range_count(f, &f->r[k]);
    } else {
        f->r[k].rc = range_write(f, &f->r[k], NULL, &f->r[k].err);
    }
}

static bool task_failed(const flushp *f, uint32_t k)
{
    return f->phase == PH_SORT ? f->trc[k] != 0 : f->r[k].rc != 0;
}

/* Claim the next task (under mu); ntasks if none is left. */
static uint32_t task_claim(flushp *f)
{
    if (f->abort || f->stop || f->next >= f->ntasks)
        return f->ntasks;
    return f->next++;
}

static void task_done(flushp *f, uint32_t k)
{
    pthread_mutex_lock(&f->mu);
    f->done[k] = 1;
    if (task_failed(f, k))
        f->abort = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void helper_main(void *arg)
{
    flushp *f = arg;
    for (;;) {
        pthread_mutex_lock(&f->mu);
        uint32_t k = task_claim(f);
        pthread_mutex_unlock(&f->mu);
        if (k == f->ntasks)
            break;
        task_run(f, k);
        task_done(f, k);
    }
    pthread_mutex_lock(&f->mu);
    f->active--;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* Run the phase's tasks on the helpers and this thread.  Returns the
 * first failure. */
static int phase_run(flushp *f, int phase, uint32_t ntasks,
                     const idx_runner *run, kv_err *err)
{
    pthread_mutex_lock(&f->mu);
    f->phase = phase;
    f->ntasks = ntasks;
    f->next = 0;
    f->abort = false;
    memset(f->done, 0, ntasks);
    f->active = 0;
    pthread_cond_broadcast(&f->cv);     /* flush_consume waits for it */
    pthread_mutex_unlock(&f->mu);
    for (unsigned h = 0; h < run->helpers && h + 1 < ntasks; h++) {
        pthread_mutex_lock(&f->mu);
        f->active++;
        pthread_mutex_unlock(&f->mu);
        if (!run->spawn(run->ctx, helper_main, f)) {
            pthread_mutex_lock(&f->mu);
            f->active--;
            pthread_mutex_unlock(&f->mu);
            break;
        }
    }
    int rc = KVFTS_OK;
    for (uint32_t k = 0; k < ntasks; k++) {
        pthread_mutex_lock(&f->mu);
        while (!f->done[k]) {
            uint32_t j = task_claim(f);
            if (j < ntasks) {
                pthread_mutex_unlock(&f->mu);
                task_run(f, j);
                task_done(f, j);
                pthread_mutex_lock(&f->mu);
                continue;
            }
            if (f->abort || f->stop)
                break;
            pthread_cond_wait(&f->cv, &f->mu);
        }
        bool ok = f->done[k] && !task_failed(f, k);
        pthread_mutex_unlock(&f->mu);
        if (ok)
            continue;
        /* the first failed task in order (the one that aborted) */
        for (uint32_t j = 0; j < ntasks; j++) {
            if (!f->done[j] || !task_failed(f, j))
                continue;
            if (phase == PH_SORT) {
                *err = f->terr[j];
                rc = f->trc[j];
            } else {
                *err = f->r[j].err;
                rc = f->r[j].rc;
            }
            break;
        }
        if (!rc)
            rc = kv_seterr(err, KVFTS_ERROR, "segment writer stopped");
        pthread_mutex_lock(&f->mu);
        f->abort = true;
        pthread_mutex_unlock(&f->mu);
        break;
    }
    pthread_mutex_lock(&f->mu);
    while (f->active > 0)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

/* Cut the term space into about @p want ranges of equal postings, by the
 * largest shard's terms. */
static int ranges_make(flushp *f, uint32_t want, kv_err *err)
{
    uint32_t big = 0;
    for (uint32_t s = 1; s < f->n; s++)
        if (idx_shard_nterms(f->shards[s]) >
            idx_shard_nterms(f->shards[big]))
            big = s;
    const idx_shard *sh = f->shards[big];
    uint32_t nt = idx_shard_nterms(sh);
    if (want > nt / 64 + 1)
        want = nt / 64 + 1;      /* at least ~64 terms a range */
    f->r = kv_calloc(want, sizeof *f->r);
    if (!f->r)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    uint64_t total = 0;
    for (uint32_t i = 0; i < nt; i++)
        total += idx_shard_term_postings(sh, i) + 1;
    uint64_t acc = 0;
    uint32_t nr = 0;
    f->r[0].lo = NULL;
    for (uint32_t i = 0; i < nt && nr + 1 < want; i++) {
        acc += idx_shard_term_postings(sh, i) + 1;
        if (acc * want >= total * (uint64_t)(nr + 1) && i + 1 < nt) {
            uint32_t l;
            const char *t = idx_shard_term(sh, i + 1, &l);
            f->r[nr].hi = t;
            f->r[nr].hil = l;
            nr++;
            f->r[nr].lo = t;
            f->r[nr].lol = l;
        }
    }
    f->r[nr].hi = NULL;
    f->nr = nr + 1;
    return KVFTS_OK;
}

/* The segment's phases, on a thread that never calls Berkeley DB: sort
 * the shards, cut and count the ranges, write them into their sinks.  The
 * flushing thread puts each sink as soon as it is done (flush_consume). */
static void *driver_main(void *arg)
{
    flushp *f = arg;
    const idx_runner *run = f->run;
    kv_err e = KV_ERR_INIT;
    int rc = phase_run(f, PH_SORT, f->n, run, &e);
    if (!rc)
        rc = ranges_make(f, f->want, &e);
    if (!rc)
        rc = phase_run(f, PH_COUNT, f->nr, run, &e);
    uint32_t ord = 0;
    for (uint32_t k = 0; !rc && k < f->nr; k++) {
        f->r[k].ord0 = ord;
        ord += f->r[k].nterms;
    }
    if (!rc)
        rc = phase_run(f, PH_WRITE, f->nr, run, &e);
    pthread_mutex_lock(&f->mu);
    f->driver_rc = rc;
    f->driver_err = e;
    f->driver_done = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* Start the driver on a thread of its own (false: none could be had).  Not
 * on the runner's: its queue would hold a phase's helper behind the
 * driver, which waits for its helpers. */
static bool driver_start(flushp *f)
{
    return kv_thread_start(&f->driver, driver_main, f);
}

/* Put the ranges' sinks in order, each once it is written; stop at the
 * driver's failure (0 then: the driver's status is the caller's to take). */
static int flush_consume(flushp *f, kv_err *err)
{
    for (uint32_t k = 0;; k++) {
        pthread_mutex_lock(&f->mu);
        while (!f->driver_done &&
               !(f->phase == PH_WRITE && k < f->nr && f->done[k]))
            pthread_cond_wait(&f->cv, &f->mu);
        bool writing = f->phase == PH_WRITE;    /* r, nr set */
        bool ready = writing && k < f->nr && f->done[k] && !f->r[k].rc;
        bool last = writing && k >= f->nr;
        pthread_mutex_unlock(&f->mu);
        if (last || !ready)
            return KVFTS_OK;
        int rc = replay(f->txn, f->pw, &f->r[k].sink, err);
        kv_buf_free(&f->r[k].sink);
        if (rc)
            return rc;
    }
}

/* Stop the driver (after a failure of the flushing thread's). */
static void flush_stop(flushp *f)
{
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

typedef struct consumer {
    flushp *f;
    pthread_t th;
    int rc;
    kv_err err;
} consumer;

static void *consumer_main(void *arg)
{
    consumer *c = arg;
    c->rc = flush_consume(c->f, &c->err);
    /* The segment's pages to disk now, beside the flushing thread's work,
     * not in the commit's sync.  (After a failure of the driver's this
     * syncs a file the abort removes: wasted, not wrong.) */
    if (!c->rc)
        c->rc = kv_partw_sync(c->f->pw, &c->err);
    if (c->rc)
        flush_stop(c->f);
    return NULL;
}

/* Start the consumer of the sinks on a thread of its own (false: none
 * could be had; the flushing thread consumes them). */
static bool consumer_start(consumer *c)
{
    return kv_thread_start(&c->th, consumer_main, c);
}

int idx_segw_shards(kv_txn *txn, idx_shard **shards, uint32_t n,
                    uint32_t *const *colmaps, bool positions,
                    const idx_runner *run, const idx_side *side,
                    idx_seg *seg, kv_err *err)
{
    idx_runner none = { NULL, NULL, 0 };
    idx_side noside = { NULL, NULL };
    if (!run || !run->spawn)
        run = &none;
    if (!side)
        side = &noside;
    flushp f;
    memset(&f, 0, sizeof f);
    f.txn = txn;
    f.shards = shards;
    f.n = n;
    f.colmaps = colmaps;
    f.positions = positions;
    f.run = run;
    uint64_t bytes = 0;   /* in memory: about 4x what the segment takes */
    for (uint32_t s = 0; s < n; s++)
        bytes += idx_shard_bytes(shards[s]);
    int rc = idx_seg_new_id(txn, bytes >= 4ull * IDX_OWN_BYTES, &f.seg_id,
                            err);
    if (rc)
        return rc;
    if (run->helpers == 0) {
        if (side->fn)
            rc = side->fn(side->arg, txn, err);
        for (uint32_t s = 0; !rc && s < n; s++)
            rc = idx_shard_sort(shards[s], err);
        range all;
        memset(&all, 0, sizeof all);
        if (!rc)
            rc = range_write(&f, &all, txn, err);
        if (!rc)
            *seg = all.seg;
        return rc;
    }
    pthread_mutex_init(&f.mu, NULL);
    pthread_cond_init(&f.cv, NULL);
    f.want = 4 * (run->helpers + 1);
    uint32_t most = f.want > n ? f.want : n;
    f.done = kv_calloc(most, 1);
    f.terr = kv_calloc(n, sizeof *f.terr);
    f.trc = kv_calloc(n, sizeof *f.trc);
    if (!f.done || !f.terr || !f.trc)
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    /* The driver encodes the segment while this thread puts the side
     * job's records, then the ranges as they come (or, for a file of its
     * own, the consumer puts them meanwhile).  Without a thread of its
     * own, the driver runs here after the side job. */
    if (!rc && (f.seg_id & KV_PART_OWN))
        rc = kv_partw_open(&f.pw, txn, f.seg_id, err);
    bool async = !rc && driver_start(&f);
    consumer cons = { .f = &f, .err = KV_ERR_INIT };
    bool consumed = async && f.pw && consumer_start(&cons);
    if (!rc && side->fn)
        rc = side->fn(side->arg, txn, err);
    if (!rc && !async)
        driver_main(&f);
    if (!rc && !consumed)
        rc = flush_consume(&f, err);
    if (rc)
        flush_stop(&f);
    if (consumed) {
        pthread_join(cons.th, NULL);
        if (!rc && cons.rc) {
            rc = cons.rc;
            *err = cons.err;
        }
    }
    if (async)
        pthread_join(f.driver, NULL);
    kv_partw_free(f.pw);
    if (!rc && f.driver_rc) {
        rc = f.driver_rc;
        *err = f.driver_err;
    }
    if (!rc) {
        memset(seg, 0, sizeof *seg);
        seg->id = f.seg_id;
        bool any = false;
        for (uint32_t k = 0; k < f.nr; k++) {
            const idx_seg *g = &f.r[k].seg;
            if (g->docs > seg->docs)
                seg->docs = g->docs;
            seg->dels += g->dels;
            seg->terms += g->terms;
            seg->bytes += g->bytes;
            if (g->max_id == 0 && g->min_id == 0)
                continue;       /* no postings in the range */
            if (!any || g->min_id < seg->min_id)
                seg->min_id = g->min_id;
            if (g->max_id > seg->max_id)
                seg->max_id = g->max_id;
            any = true;
        }
    }
    for (uint32_t k = 0; f.r && k < f.nr; k++)
        kv_buf_free(&f.r[k].sink);
    kv_free(f.r);
    kv_free(f.done);
    kv_free(f.terr);
    kv_free(f.trc);
    pthread_mutex_destroy(&f.mu);
    pthread_cond_destroy(&f.cv);
    return rc;
}
