/*
 * idx_check.c -- rebuilding the index from the stored documents (kvfts
 * reindex, config changes) and checking that the live index equals a fresh
 * analysis of them (kvfts check).
 *
 * A rebuild clears the index and writes every document through a writer
 * (idx_write.c), flushing a segment whenever the buffer is full.
 *
 * A check analyzes every stored document as new into one shard of a
 * buffer (idx_buffer.c), in memory, and compares it with the live index:
 *  - terms, walked in byte order on both sides at once: a term only
 *    expected is missing, one only live is extra;
 *  - per term, its live postings across segments (every view: column, tf,
 *    positions) against the expected ones, document by document;
 *  - per term and column, the counts the entries give (postings minus
 *    deletions, what searches and `kvfts term` answer) against the live
 *    postings just read;
 *  - each field's statistics (documents having it, sum of lengths);
 *  - each document's length record, and that no other is left.
 * Lengths are compared as sorted lists of (field id, length), so a
 * document with many fields costs n log n, not n squared.
 */
#include "idx_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- rebuilding --------------------------------------------------------- */

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
    int rc = idx_doc_write(f->w, d->docid, NULL, 0, d->json, d->json_len,
                           NULL, 0, err);
    if (rc == KVFTS_EINVAL) {
        kv_err_prefix(err, "doc '%.*s'", (int)kl, k);
        err->code = rc = KVFTS_ECORRUPT;   /* it was accepted once */
    }
    if (!rc && idx_flush_due(f->w))
        rc = idx_flush(f->w, f->txn, err);
    if (!rc && ++f->n % 1000 == 0 && f->progress)
        f->progress(f->payload, f->n);
    return rc;
}

int idx_rebuild(kv_txn *txn, const char *config_json, size_t len,
                size_t mem_limit, idx_progress_fn progress, void *payload,
                kv_err *err)
{
    idx_writer *w = NULL;
    int rc = idx_clear(txn, err);
    if (!rc)
        rc = idx_writer_new(&w, config_json, len, mem_limit, err);
    feed f = { w, txn, progress, payload, 0 };
    if (!rc)
        rc = kv_doc_scan(txn, feed_doc, &f, err);
    if (!rc)
        rc = idx_flush(w, txn, err);
    if (!rc && progress)
        progress(payload, f.n);
    idx_writer_free(w);
    return rc;
}

/* ---- checking ----------------------------------------------------------- */

#define MAX_REPORTS 1000

typedef struct checker {
    kv_txn *txn;
    idx_report_fn report;
    void *payload;
    uint64_t found;
    kv_buf key;
    kv_err *err;
    idx_shard *sh;
    uint32_t *fid;        /* per local field: its id (0: none stored) */
    uint32_t *colmap;     /* local column -> global */
    uint32_t *rev;        /* field id -> local field (UINT32_MAX: none) */
    uint32_t nrev;
    idx_reader *r;
    idx_plist exp;        /* a term's expected postings (global columns) */
    idx_plist tmp;
    idx_dels dels;
    idx_tl_scratch tl;
    uint64_t ndocs;
    bool missing;          /* a listed segment's file is missing */
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

static int analyze_doc(void *payload, const char *k, size_t kl,
                       const kv_doc *d, kv_err *err)
{
    checker *ck = payload;
    int rc = idx_shard_doc(ck->sh, d->docid, NULL, 0, d->json, d->json_len,
                           NULL, 0, err);
    if (rc == KVFTS_EINVAL) {
        kv_err_prefix(err, "doc '%.*s'", (int)kl, k);
        err->code = rc = KVFTS_ECORRUPT;
    }
    ck->ndocs++;
    return rc;
}

/* Local fields -> stored field ids (none created). */
static int map_fields(checker *ck)
{
    uint32_t nf = idx_shard_nfields(ck->sh);
    ck->fid = kv_calloc(nf + 1, sizeof *ck->fid);
    ck->colmap = kv_calloc((size_t)nf * 4 + 1, sizeof *ck->colmap);
    if (!ck->fid || !ck->colmap)
        return kv_seterr(ck->err, KVFTS_ENOMEM, "out of memory");
    for (uint32_t lf = 0; lf < nf; lf++) {
        uint32_t l;
        const char *name = idx_shard_field(ck->sh, lf, &l);
        int rc = idx_field_id(ck->txn, name, l, &ck->fid[lf], ck->err);
        if (rc)
            return rc;
        for (uint32_t k = 1; k < 4; k++)
            ck->colmap[lf << 2 | k] = ck->fid[lf] << 2 | k;
        if (ck->fid[lf] >= ck->nrev) {
            uint32_t old = ck->nrev;
            rc = idx__grow(&ck->rev, &ck->nrev, (uint64_t)ck->fid[lf] + 1, 4,
                           ck->err);
            if (rc)
                return rc;
            for (uint32_t k = old; k < ck->nrev; k++)
                ck->rev[k] = UINT32_MAX;
        }
        ck->rev[ck->fid[lf]] = lf;
    }
    return KVFTS_OK;
}

/* Expected term i's postings into ck->exp, with global columns, each
 * document's views ascending. */
static int expected_postings(checker *ck, uint32_t i)
{
    int rc = idx_shard_term_lists(ck->sh, i, &ck->tl, &ck->tmp, &ck->dels,
                                  ck->err);
    if (rc)
        return rc;
    idx_plist_reset(&ck->exp, ck->tmp.positions);
    for (uint32_t d = 0; !rc && d < ck->tmp.n; d++) {
        rc = idx_plist_copy_doc(&ck->exp, &ck->tmp, d, ck->colmap, ck->err);
        /* sort the document's views by global column (selection sort: a
         * document has few views of one term) */
        idx_plist *l = &ck->exp;
        uint32_t v0 = l->vstart[l->n - 1], v1 = l->vstart[l->n];
        for (uint32_t a = v0; !rc && a < v1; a++) {
            uint32_t m = a;
            for (uint32_t b = a + 1; b < v1; b++)
                if (l->vcol[b] < l->vcol[m])
                    m = b;
            if (m == a)
                continue;
            /* swap views a and m: columns, tfs and position runs */
            uint32_t c = l->vcol[a], t = l->vtf[a];
            l->vcol[a] = l->vcol[m];
            l->vcol[m] = c;
            l->vtf[a] = l->vtf[m];
            l->vtf[m] = t;
            if (l->positions) {
                uint32_t n = l->poff[v1] - l->poff[v0];
                uint32_t *p = kv_malloc(((size_t)n + 1) * 4);
                if (!p)
                    return kv_seterr(ck->err, KVFTS_ENOMEM, "out of memory");
                /* rebuild the runs in the new view order from the old
                 * offsets (the runs still follow the old order) */
                uint32_t k = 0;
                for (uint32_t v = v0; v < v1; v++) {
                    uint32_t src = v == a ? m : v == m ? a : v;
                    memcpy(p + k, l->pos + l->poff[src],
                           (size_t)l->vtf[v] * 4);
                    k += l->vtf[v];
                }
                memcpy(l->pos + l->poff[v0], p, (size_t)n * 4);
                for (uint32_t v = v0; v < v1; v++)
                    l->poff[v + 1] = l->poff[v] + l->vtf[v];
                kv_free(p);
            }
        }
    }
    return rc;
}

/* Compare term t's live postings (every view) with ck->exp; check the
 * counts the entries give against what was read. */
static int check_term(checker *ck, const char *t, size_t tl)
{
    const idx_plist *x = &ck->exp;
    idx_postings *p = NULL;
    int rc = idx_postings_open(&p, ck->r, NULL, 0, t, tl, ck->err);
    if (rc == KVFTS_ENOTFOUND) {
        kv_err_clear(ck->err);
        return x->n ? differ(ck, "fts::%.*s: no live postings, expected %u",
                             (int)tl, t, x->n)
                    : KVFTS_OK;
    }
    if (rc)
        return rc;
    uint32_t i = 0, seen = 0;
    while (!rc && (rc = idx_postings_next(p, ck->err)) == KVFTS_OK) {
        uint32_t id = idx_postings_docid(p);
        seen++;
        while (!rc && i < x->n && x->ids[i] < id)
            rc = differ(ck, "fts::%.*s: document '%s' missing", (int)tl, t,
                        doc_name(ck, x->ids[i++]));
        if (rc)
            break;
        if (i == x->n || x->ids[i] != id) {
            rc = differ(ck, "fts::%.*s: document '%s' should not be there",
                        (int)tl, t, doc_name(ck, id));
            continue;
        }
        /* the whole block's views first: their decode checks the block's
         * summaries (max tf, column mask), which a phrase's decode of one
         * document at a time does not */
        rc = idx_postings_need(p, IDX_DECODE_TFS, ck->err);
        if (!rc)
            rc = idx_postings_need(p, IDX_DECODE_POSITIONS, ck->err);
        uint32_t nv;
        const idx_view *v = rc ? NULL : idx_postings_views(p, &nv);
        uint32_t v0 = x->vstart[i], ne = x->vstart[i + 1] - v0;
        bool same = !rc && v && nv == ne;
        for (uint32_t k = 0; same && k < nv; k++) {
            uint32_t ev = v0 + k;
            same = v[k].col == x->vcol[ev] && v[k].tf == x->vtf[ev] &&
                   (!x->positions || (v[k].pos &&
                    memcmp(v[k].pos, x->pos + x->poff[ev],
                           (size_t)v[k].tf * 4) == 0));
        }
        if (!rc && !same)
            rc = differ(ck, "fts::%.*s: document '%s' has other views "
                        "(fields, frequencies or positions) than its "
                        "analysis", (int)tl, t, doc_name(ck, id));
        i++;
    }
    if (rc == KVFTS_ITEROVER)
        rc = KVFTS_OK;
    while (!rc && i < x->n)
        rc = differ(ck, "fts::%.*s: document '%s' missing", (int)tl, t,
                    doc_name(ck, x->ids[i++]));
    if (!rc && idx_postings_info(p)->df != seen)
        rc = differ(ck, "fts::%.*s: the entries count %llu documents, the "
                    "postings hold %u", (int)tl, t,
                    (unsigned long long)idx_postings_info(p)->df, seen);
    idx_postings_close(p);
    return rc;
}

/* The count of term t in each of its fields and in `_all`, as the entries
 * give it (what searches and `kvfts term` answer), against the expected
 * postings: a document counts in field f if it has a kind-1 view of f, in
 * `_all` if it has a kind-2 view. */
static int check_field_counts(checker *ck, const char *t, size_t tl)
{
    const idx_plist *x = &ck->exp;
    int rc = KVFTS_OK;
    uint64_t want_all = 0;
    for (uint32_t d = 0; d < x->n; d++)
        for (uint32_t w = x->vstart[d]; w < x->vstart[d + 1]; w++)
            if (x->vcol[w] & IDX_KIND_ALL) {
                want_all++;
                break;
            }
    idx_term_info info;
    rc = idx_term_get(ck->r, TOK_ALL_FIELD, 4, t, tl, &info, ck->err);
    if (rc == KVFTS_ENOTFOUND) {
        kv_err_clear(ck->err);
        info.df = 0;
        rc = KVFTS_OK;
    }
    if (!rc && info.df != want_all)
        rc = differ(ck, "fts::_all::%.*s: count %llu, expected %llu",
                    (int)tl, t, (unsigned long long)info.df,
                    (unsigned long long)want_all);
    for (uint32_t v = 0; !rc && v < x->nv; v++) {
        if (!(x->vcol[v] & IDX_KIND_FIELD))
            continue;
        uint32_t fid = x->vcol[v] >> 2;
        bool first = true;     /* the first view of fid among x's */
        for (uint32_t u = 0; u < v && first; u++)
            first = !((x->vcol[u] >> 2) == fid &&
                      (x->vcol[u] & IDX_KIND_FIELD));
        if (!first || fid >= ck->nrev || ck->rev[fid] == UINT32_MAX)
            continue;
        uint64_t want = 0;
        for (uint32_t d = 0; d < x->n; d++)
            for (uint32_t w = x->vstart[d]; w < x->vstart[d + 1]; w++)
                if ((x->vcol[w] >> 2) == fid &&
                    (x->vcol[w] & IDX_KIND_FIELD)) {
                    want++;
                    break;
                }
        uint32_t nl;
        const char *name = idx_shard_field(ck->sh, ck->rev[fid], &nl);
        rc = idx_term_get(ck->r, name, nl, t, tl, &info, ck->err);
        if (rc == KVFTS_ENOTFOUND) {
            kv_err_clear(ck->err);
            info.df = 0;
            rc = KVFTS_OK;
        }
        if (!rc && info.df != want)
            rc = differ(ck, "fts::%.*s::%.*s: count %llu, expected %llu",
                        (int)nl, name, (int)tl, t,
                        (unsigned long long)info.df,
                        (unsigned long long)want);
    }
    return rc;
}

static int check_terms(checker *ck)
{
    int rc = idx_shard_sort(ck->sh, ck->err);
    if (rc)
        return rc;
    uint32_t n = idx_shard_nterms(ck->sh);
    for (uint32_t i = 0; !rc && i < n; i++) {
        uint32_t tl;
        const char *t = idx_shard_term(ck->sh, i, &tl);
        rc = expected_postings(ck, i);
        if (!rc)
            rc = check_term(ck, t, tl);
        if (!rc)
            rc = check_field_counts(ck, t, tl);
    }
    return rc;
}

/* Live terms no document produces. */
typedef struct extra_ctx {
    checker *ck;
    uint32_t i, n;
} extra_ctx;

static int extra_term(void *payload, const char *term, size_t tlen,
                      const idx_term_info *info)
{
    extra_ctx *x = payload;
    checker *ck = x->ck;
    while (x->i < x->n) {
        uint32_t l;
        const char *t = idx_shard_term(ck->sh, x->i, &l);
        int c = idx__bytes_cmp(t, l, term, tlen);
        if (c > 0)
            break;
        x->i++;
        if (c == 0)
            return KVFTS_OK;
    }
    return differ(ck, "fts::%.*s: %llu live documents, none of the stored "
                  "documents has the term", (int)tlen, term,
                  (unsigned long long)info->df);
}

static int check_extra_terms(checker *ck)
{
    extra_ctx x = { ck, 0, idx_shard_nterms(ck->sh) };
    return idx_terms_scan(ck->r, NULL, 0, "", 0, extra_term, &x, ck->err);
}

static int check_fields(checker *ck)
{
    const int64_t *dd, *dl;
    idx_shard_field_deltas(ck->sh, &dd, &dl);
    uint32_t nf = idx_shard_nfields(ck->sh);
    int rc = KVFTS_OK;
    for (uint32_t lf = 0; !rc && lf < nf; lf++) {
        uint32_t l;
        const char *name = idx_shard_field(ck->sh, lf, &l);
        uint64_t docs, total;
        rc = idx_field_stats(ck->txn, name, l, &docs, &total, NULL,
                             ck->err);
        if (!rc && (docs != (uint64_t)dd[lf] || total != (uint64_t)dl[lf]))
            rc = differ(ck, "field '%.*s': statistics say %llu documents "
                        "and %llu terms, the documents %lld and %lld",
                        (int)l, name, (unsigned long long)docs,
                        (unsigned long long)total, (long long)dd[lf],
                        (long long)dl[lf]);
    }
    return rc;
}

/* Every large segment listed has its file; every segment file present is
 * listed, a merge's output under way, or waiting to be removed. */
static int check_files(checker *ck)
{
    idx_segs s;
    memset(&s, 0, sizeof s);
    uint32_t *files = NULL;
    size_t nfiles = 0;
    int rc = idx_segs_read(&s, ck->txn, false, ck->err);
    if (!rc)
        rc = kv_parts_list(ck->txn, &files, &nfiles, ck->err);
    for (uint32_t i = 0; !rc && i < s.n; i++) {
        bool there = !(s.v[i].id & KV_PART_OWN);
        for (size_t j = 0; !there && j < nfiles; j++)
            there = files[j] == s.v[i].id;
        if (!there) {
            ck->missing = true;
            rc = differ(ck, "segment %u: its file seg-%08x.db is missing",
                        s.v[i].id & ~KV_PART_OWN, s.v[i].id);
        }
    }
    if (!rc)
        rc = idx_seg_strays(ck->txn, &s, files, &nfiles, ck->err);
    for (size_t i = 0; !rc && i < nfiles; i++)
        rc = differ(ck, "file seg-%08x.db belongs to no segment (not "
                    "listed, not a merge's output, not waiting for "
                    "removal)", files[i]);
    idx_segs_free(&s);
    kv_free(files);
    return rc;
}

static int len_cmp(const void *a, const void *b)
{
    const idx_len *x = a, *y = b;
    return x->field_id < y->field_id ? -1 : x->field_id > y->field_id;
}

static int count_lens(void *arg, const idx_lens_it *it, kv_err *err)
{
    (void)it;
    (void)err;
    ++*(uint64_t *)arg;
    return KVFTS_OK;
}

static int check_lengths(checker *ck)
{
    const idx_doclen *docs;
    const idx_len *lens;
    const uint32_t *del;
    uint32_t nd, ndel;
    idx_shard_lengths(ck->sh, &docs, &nd, &lens, &del, &ndel);
    kv_buf span = KV_BUF_INIT;
    uint32_t span_base = 1;     /* no span's: bases are multiples of 64 */
    idx_len *want = NULL, *have = NULL;
    uint32_t wcap = 0, hcap = 0, nh = 0;
    int rc = KVFTS_OK;
    for (uint32_t i = 0; !rc && i < nd; i++) {
        uint32_t docid = docs[i].docid, n = docs[i].n;
        if ((rc = idx__grow(&want, &wcap, (uint64_t)n + 1, sizeof *want,
                            ck->err)))
            break;
        for (uint32_t k = 0; k < n; k++)
            want[k] = (idx_len){ ck->fid[lens[docs[i].off + k].field_id],
                                 lens[docs[i].off + k].len };
        qsort(want, n, sizeof *want, len_cmp);
        bool found;
        idx_lens_it it;
        rc = idx_lens_lookup(ck->txn, docid, &span, &span_base, &it, &found,
                             ck->err);
        if (!rc && found)
            rc = idx_lens_pairs(&it, &have, &nh, &hcap, ck->err);
        if (rc)
            break;
        if (!found) {
            rc = n ? differ(ck, "document '%s': no length record",
                            doc_name(ck, docid)) : KVFTS_OK;
            continue;
        }
        qsort(have, nh, sizeof *have, len_cmp);
        bool same = nh == n;
        for (uint32_t k = 0; same && k < n; k++)
            same = have[k].field_id == want[k].field_id &&
                   have[k].len == want[k].len;
        if (!same)
            rc = differ(ck, "document '%s': its length record (%u fields) "
                        "differs from its analysis (%u fields)",
                        doc_name(ck, docid), nh, n);
    }
    uint64_t stored = 0;
    if (!rc)
        rc = idx_lens_walk(ck->txn, count_lens, &stored, ck->err);
    if (!rc && stored != nd)
        rc = differ(ck, "%llu document length records for %u documents "
                    "with indexed fields", (unsigned long long)stored, nd);
    kv_buf_free(&span);
    kv_free(want);
    kv_free(have);
    return rc;
}

/* The index against a fresh analysis of every stored document. */
static int check_index(checker *ck, const char *config_json, size_t len)
{
    int rc = idx_shard_new(&ck->sh, config_json, len, ck->err);
    if (!rc)
        rc = kv_doc_scan(ck->txn, analyze_doc, ck, ck->err);
    if (!rc)
        rc = map_fields(ck);
    if (!rc)
        rc = idx_reader_open(&ck->r, ck->txn, ck->err);
    if (!rc)
        rc = check_terms(ck);
    if (!rc)
        rc = check_extra_terms(ck);
    if (!rc)
        rc = check_fields(ck);
    if (!rc)
        rc = check_lengths(ck);
    return rc;
}

int idx_check(kv_txn *txn, const char *config_json, size_t len,
              idx_report_fn report, void *payload, uint64_t *differences,
              kv_err *err)
{
    *differences = 0;
    checker ck;
    memset(&ck, 0, sizeof ck);
    ck.txn = txn;
    ck.report = report;
    ck.payload = payload;
    ck.err = err;
    idx_plist_init(&ck.exp);
    idx_plist_init(&ck.tmp);
    idx_dels_init(&ck.dels);
    int rc = check_files(&ck);
    /* Without a segment's file the index cannot be read: that is the
     * answer (reading it would fail, and be retried, for a file that will
     * not come back). */
    if (!rc && !ck.missing)
        rc = check_index(&ck, config_json, len);
    *differences = ck.found;
    idx_reader_close(ck.r);
    idx_shard_free(ck.sh);
    idx_plist_free(&ck.exp);
    idx_plist_free(&ck.tmp);
    idx_dels_free(&ck.dels);
    idx_tl_scratch_free(&ck.tl);
    kv_buf_free(&ck.key);
    kv_free(ck.fid);
    kv_free(ck.colmap);
    kv_free(ck.rev);
    return rc;
}
