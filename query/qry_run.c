/*
 * qry_run.c -- running a plan: iterate the root iterator over every match,
 * count them exactly, and (unless counting only) score each one and keep
 * the best k in a bounded min-heap.
 *
 * Order of results: score descending, then internal doc id ascending (the
 * older document first), so equal scores come out in a stable order that
 * does not depend on the heap.  The heap's root is the worst kept hit under
 * that order; a new hit replaces it only when it ranks strictly better.
 * k = 0 keeps every hit (the glue needs them all to sort by key).
 *
 * Document lengths come from the handle's length columns when the query
 * may match many documents (qry_ctx_columns), else from the reader.
 *
 * Counting only (count_only) asks the root for its count (qry_iter_count:
 * a term's entries, array intersections for ANDs and phrases, a bitmap for
 * an OR of terms).
 *
 * Block-max pruning of the top k (README "Top-k: block-max pruning"): once
 * the heap holds k hits, a match whose bound (qry_iter.bound: from the
 * blocks' max tf and shortest length) is below the k-th score cannot enter
 * it.  The exact total is part of the answer (kvfts_results_total), so
 * only a term, whose count its entries give, skips whole blocks (skip_to
 * past the bound's range); every other query visits each match to count
 * it and skips only its scoring.  The bound must be strictly below the
 * k-th score by a relative 1e-9: leaves may add up in another order than
 * their bounds, and an equal score may still win on doc id.
 */
#include "qry_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* a ranks after b: lower score, or equal score and larger doc id */
static bool worse(const qry_hit *a, const qry_hit *b)
{
    if (a->score != b->score)
        return a->score < b->score;
    return a->docid > b->docid;
}

static void heap_down(qry_hit *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && worse(&h[l], &h[m]))
            m = l;
        if (r < n && worse(&h[r], &h[m]))
            m = r;
        if (m == i)
            return;
        qry_hit x = h[i];
        h[i] = h[m];
        h[m] = x;
        i = m;
    }
}

static void heap_up(qry_hit *h, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!worse(&h[i], &h[p]))
            return;
        qry_hit x = h[i];
        h[i] = h[p];
        h[p] = x;
        i = p;
    }
}

static int rank_cmp(const void *a, const void *b)
{
    const qry_hit *x = a, *y = b;
    if (worse(x, y))
        return 1;
    if (worse(y, x))
        return -1;
    return 0;
}

int qry_run(kv_txn *txn, const qry_node *plan, const qry_run_options *o,
            qry_hit **hits, size_t *nhits, uint64_t *total, kv_err *err)
{
    *hits = NULL;
    *nhits = 0;
    *total = 0;
    qry_ctx *cx = NULL;
    qry_iter *it = NULL;
    qry_hit *h = NULL;
    size_t n = 0, cap = 0;
    uint64_t count = 0;
    if (o->partial)
        *o->partial = false;
    int rc = qry_ctx_new(&cx, txn, o->dict, err);
    if (!rc) {
        qry_ctx_limits(cx, o->mem_limit, o->time_limit_ms, o->exact);
        if (o->count_only)
            qry_ctx_unscored(cx);
        rc = qry_iter_build(&it, cx, plan, err);
    }
    if (rc)
        goto fail;
    if (o->count_only) {
        rc = qry_iter_count(it, &count, err);
        if (rc)
            goto fail;
        if (o->partial)
            *o->partial = qry_ctx_partial(cx);
        qry_iter_free(it);
        qry_ctx_free(cx);
        *total = count;
        return KVFTS_OK;
    }
    if (o->lens) {
        rc = qry_ctx_columns(cx, o->lens, it->est, err);
        if (rc)
            goto fail;
    }
    if (!o->count_only && o->k) {
        cap = o->k;
        if (cap > 4096)     /* grows on demand past this */
            cap = 4096;
        h = kv_malloc(cap * sizeof *h);
        if (!h) {
            rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
            goto fail;
        }
    }
    /* A term's exact count is in its entries: its walk may skip blocks
     * that cannot enter the top k.  Other queries count as they go and
     * skip only the scoring of such documents. */
    bool skip = o->k && it->exact_est && it->bound;
    it->tight = skip;
    uint64_t ticks = 0;
    rc = it->next(it, err);
    while (rc == QRY_OK) {
        /* Out of time: the best of the matches walked so far (a term's
         * total stays its exact count), or KVFTS_ELIMIT when exact. */
        int late = qry_ctx_late(cx, &ticks, count, err);
        if (late < 0) {
            rc = late;
            goto fail;
        }
        if (late) {
            rc = QRY_EOF;
            break;
        }
        if (!skip)
            count++;
        if (o->k && n == o->k && it->bound) {
            uint32_t upto = it->docid;
            double b = it->bound(it, cx, &upto);
            /* Strictly below the k-th score, with a margin for rounding
             * (a sum's terms may add up in another order than the
             * bound's): a document that might tie is scored. */
            if (b + fabs(b) * 1e-9 < h[0].score) {
                if (skip && upto > it->docid) {
                    if (upto == UINT32_MAX) {
                        rc = QRY_EOF;
                        break;
                    }
                    rc = it->skip_to(it, upto + 1, err);
                    if (rc == QRY_NOTFOUND)
                        rc = QRY_OK;
                } else {
                    rc = it->next(it, err);
                }
                continue;
            }
        }
        qry_hit x = { it->docid, 0.0 };
        rc = it->score(it, cx, &x.score, err);
        if (rc)
            goto fail;
        rc = it->next(it, err);
        if (o->k && n == o->k) {
            if (worse(&h[0], &x)) {
                h[0] = x;
                heap_down(h, n, 0);
            }
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            if (o->k && nc > o->k)
                nc = o->k;
            qry_hit *g = kv_realloc(h, nc * sizeof *g);
            if (!g) {
                rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
                goto fail;
            }
            h = g;
            cap = nc;
        }
        h[n++] = x;
        if (o->k)
            heap_up(h, n - 1);
    }
    if (skip)
        count = it->est;
    if (rc != QRY_EOF)
        goto fail;
    rc = KVFTS_OK;
    if (n > 1)
        qsort(h, n, sizeof *h, rank_cmp);
    if (o->partial)
        *o->partial = qry_ctx_partial(cx);
    qry_iter_free(it);
    qry_ctx_free(cx);
    *hits = h;
    *nhits = n;
    *total = count;
    return KVFTS_OK;
fail:
    kv_free(h);
    qry_iter_free(it);
    qry_ctx_free(cx);
    return rc;
}
