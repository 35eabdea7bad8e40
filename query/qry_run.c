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
 * Every match is visited even when only the top k is wanted: the exact total
 * is part of the answer (kvfts_results_total).  Block-max pruning would skip
 * scoring, not counting; it is left for later.
 */
#include "qry_int.h"

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
    int rc = qry_ctx_new(&cx, txn, err);
    if (!rc)
        rc = qry_iter_build(&it, cx, plan, err);
    if (rc)
        goto fail;
    if (!o->count_only && o->lens) {
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
    while ((rc = it->next(it, err)) == QRY_OK) {
        count++;
        if (o->count_only)
            continue;
        qry_hit x = { it->docid, 0.0 };
        rc = it->score(it, cx, &x.score, err);
        if (rc)
            goto fail;
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
    if (rc != QRY_EOF)
        goto fail;
    rc = KVFTS_OK;
    if (n > 1)
        qsort(h, n, sizeof *h, rank_cmp);
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
