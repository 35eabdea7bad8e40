/*
 * idx_check.c -- rebuilding the index from the stored documents (kvfts
 * reindex, config changes) and checking that the stored index equals a
 * fresh analysis of them (kvfts check).
 *
 * Both feed every document through an idx_writer (idx_write.c): a rebuild
 * with buffering on, merging into the emptied index; a check in "dry"
 * mode, which gathers the whole corpus's postings, field lengths and field
 * statistics in memory and writes nothing.  The check then walks that
 * buffer term by term in key order against the stored entries (headers,
 * every posting with tf and positions, block counts and last ids), looks
 * for stored terms no document produces, and compares field statistics and
 * each document's length record.
 */
#include "idx_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int check_term(checker *ck, const keyref *k, const idx_tpost *tp)
{
    idx_writer *w = ck->w;
    kv_err *err = ck->err;
    uint32_t n = tp->n;
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
    uint64_t cf = tp->cf;
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
        while (!rc && i < n && tp->ids[i] < d) {
            rc = differ(ck, "fts::%s::%.*s: document '%s' missing", field,
                        tlen, term, doc_name(ck, tp->ids[i]));
            i++;
        }
        if (rc)
            break;
        if (i == n || tp->ids[i] > d) {
            rc = differ(ck, "fts::%s::%.*s: document '%s' should not be "
                        "there", field, tlen, term, doc_name(ck, d));
            continue;
        }
        uint32_t tf = idx_postings_tf(p);
        const uint32_t *pos = idx_postings_positions(p);
        if (tf != tp->tfs[i])
            rc = differ(ck, "fts::%s::%.*s: document '%s' has tf %u, "
                        "expected %u", field, tlen, term, doc_name(ck, d), tf,
                        tp->tfs[i]);
        else if (w->positions &&
                 (!pos || memcmp(pos, tp->pos + tp->poff[i],
                                 (size_t)tf * 4) != 0))
            rc = differ(ck, "fts::%s::%.*s: document '%s' has wrong "
                        "positions", field, tlen, term, doc_name(ck, d));
        i++;
    }
    if (!rc && prc != KVFTS_ITEROVER && prc != KVFTS_OK)
        rc = prc;
    for (; !rc && i < n; i++)
        rc = differ(ck, "fts::%s::%.*s: document '%s' missing", field, tlen,
                    term, doc_name(ck, tp->ids[i]));
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
                   !idx__strtab_has(&ck->w->bterms, k, kl)) {
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
        if (idx__strtab_has(&w->fnames, name, nl)) {
            bool added;
            rc = idx__strtab_put(&w->fnames, name, nl, &idx, &added, ck->err);
            if (rc)
                break;
            docs = (uint64_t)w->fs[idx].ddocs;
            total = (uint64_t)w->fs[idx].dlen;
            seen++;
        }
        if ((rc = idx__grow(&ck->ids, &ck->idcap, (uint64_t)ck->nids + 1,
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
                    const char *name = idx__strtab_str(&w->fnames,
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
    keyref *order = NULL;
    if (!rc)
        rc = idx__buf_terms(ck.w, &order, err);
    for (uint32_t i = 0; !rc && i < ck.w->bterms.n; i++) {
        rc = idx__buf_decode(ck.w, order[i].id, &ck.w->tp, err);
        if (!rc)
            rc = check_term(&ck, &order[i], &ck.w->tp);
    }
    kv_free(order);
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
