/*
 * kvfts_search.c -- the public search API (kvfts_search and the results
 * handle): glue between the query module and the documents.
 *
 * One search is one snapshot read transaction: the config is refreshed (so
 * query words are analyzed as the stored documents were), the query parsed
 * and run (query/: exact count, BM25 top k), and the page of hits resolved
 * to keys and documents.  The page is read in doc-id order -- doc-id table,
 * then the documents -- in that same transaction: one bulk read with
 * ascending keys in the doc-id table, not one transaction per hit, and a
 * page always agrees with the count and the scores.  The hits are then put
 * back in rank order.
 *
 * Sorting by key needs the key of every match (the doc-id table is ordered
 * by id, not key), so it reads all of them; it is meant for filters with
 * modest result sets, and scores are still computed for the output.
 *
 * The results handle owns one arena holding every key and document, so the
 * pointers kvfts_results_next() hands out stay valid until
 * kvfts_results_free().
 */
#include "kvfts_int.h"
#include "query.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct res_hit {
    uint32_t docid;
    double score;
    size_t key_off, key_len;
    size_t doc_off, doc_len;
    bool has_doc;
    size_t rank;          /* position in the page */
    const char *kp;       /* sorting by key: the key, in the arena */
} res_hit;

struct kvfts_results {
    res_hit *hits;
    size_t n, next;
    uint64_t total;
    bool partial;         /* a bound cut the answer */
    kv_buf arena;
};

typedef struct search_req {
    kvfts_db *db;
    const char *q;
    size_t qlen;
    kvfts_search_options o;
    kvfts_results *r;
} search_req;

static int by_docid(const void *a, const void *b)
{
    const res_hit *x = a, *y = b;
    return x->docid < y->docid ? -1 : x->docid > y->docid;
}

static int by_rank(const void *a, const void *b)
{
    const res_hit *x = a, *y = b;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Keys are compared through kp, set once the arena holds every key and
 * stops moving. */
static int by_key(const void *a, const void *b)
{
    const res_hit *x = a, *y = b;
    size_t m = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->kp, y->kp, m);
    if (c)
        return c;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

static int read_key(kv_txn *txn, kvfts_results *r, res_hit *h, kv_buf *tmp,
                    kv_err *err)
{
    int rc = kv_docid_key(txn, h->docid, tmp, err);
    if (rc == KVFTS_ENOTFOUND)
        return kv_seterr(err, KVFTS_ECORRUPT, "doc id %u matched the query "
                         "but has no key", h->docid);
    if (rc)
        return rc;
    h->key_off = r->arena.len;
    h->key_len = tmp->len;
    return kv_buf_append(&r->arena, tmp->data, tmp->len + 1, err);
}

static int search_fn(kv_txn *txn, void *payload, kv_err *err)
{
    search_req *q = payload;
    kvfts_results *r = q->r;
    const kvfts_search_options *o = &q->o;
    qry_node *plan = NULL;
    qry_hit *hits = NULL;
    size_t nhits = 0;
    kv_buf tmp = KV_BUF_INIT;
    kv_buf *rec = &q->db->doc_rec;   /* kept: big documents fault less */
    kv_free(r->hits);
    r->hits = NULL;
    r->n = r->next = 0;
    r->total = 0;
    r->partial = false;
    kv_buf_reset(&r->arena);

    int rc = api_refresh_config(q->db, txn, err);
    if (!rc)
        rc = qry_parse(&plan, q->db->an, q->q, q->qlen, err);
    qry_run_options ro = { .k = 0, .count_only = o->count_only };
    if (!rc && !o->count_only && !q->db->lens)   /* none: rank without */
        (void)idx_lens_cache_new(&q->db->lens, &(kv_err)KV_ERR_INIT);
    ro.lens = q->db->lens;
    if (!rc && !q->db->dict)      /* none: each search reads its own */
        (void)idx_dict_cache_new(&q->db->dict, API_DICT_CACHE_BYTES,
                                 &(kv_err)KV_ERR_INIT);
    ro.dict = q->db->dict;
    ro.mem_limit = o->mem_limit;
    ro.time_limit_ms = o->time_limit_ms;
    ro.exact = o->exact;
    ro.partial = &r->partial;
    if (o->sort == KVFTS_SORT_SCORE && o->limit)
        ro.k = o->offset > SIZE_MAX - o->limit ? 0 : o->offset + o->limit;
    if (!rc)
        rc = qry_run(txn, plan, &ro, &hits, &nhits, &r->total, err);
    if (rc || o->count_only)
        goto done;

    /* The page, as res_hit in rank order. */
    res_hit *all = kv_calloc(nhits ? nhits : 1, sizeof *all);
    if (!all) {
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nhits; i++) {
        all[i].docid = hits[i].docid;
        all[i].score = hits[i].score;
    }
    r->hits = all;
    if (o->sort == KVFTS_SORT_KEY) {
        qsort(all, nhits, sizeof *all, by_docid);
        for (size_t i = 0; !rc && i < nhits; i++)
            rc = read_key(txn, r, &all[i], &tmp, err);
        if (rc)
            goto done;
        for (size_t i = 0; i < nhits; i++)
            all[i].kp = r->arena.data + all[i].key_off;
        qsort(all, nhits, sizeof *all, by_key);
    }
    size_t from = o->offset < nhits ? o->offset : nhits;
    size_t n = nhits - from;
    if (o->limit && n > o->limit)
        n = o->limit;
    memmove(all, all + from, n * sizeof *all);
    r->n = n;
    for (size_t i = 0; i < n; i++)
        all[i].rank = i;

    /* One pass over the page in doc-id order: one B-tree read a hit. */
    qsort(all, n, sizeof *all, by_docid);
    for (size_t i = 0; !rc && i < n; i++) {
        res_hit *h = &all[i];
        if (o->keys_only) {
            if (o->sort != KVFTS_SORT_KEY)
                rc = read_key(txn, r, h, &tmp, err);
            continue;
        }
        kv_doc d;
        rc = kv_doc_get_id(txn, h->docid, rec, &d, err);
        if (rc == KVFTS_ENOTFOUND)
            rc = kv_seterr(err, KVFTS_ECORRUPT, "doc id %u matched the query "
                           "but holds no document", h->docid);
        if (rc)
            break;
        if (o->sort != KVFTS_SORT_KEY) {
            h->key_off = r->arena.len;
            h->key_len = d.key_len;
            rc = kv_buf_append(&r->arena, d.key, d.key_len, err);
            if (!rc)
                rc = kv_buf_append(&r->arena, "", 1, err);
        }
        h->doc_off = r->arena.len;
        h->doc_len = d.json_len;
        h->has_doc = true;
        if (!rc)
            rc = kv_buf_append(&r->arena, d.json, d.json_len, err);
        if (!rc)
            rc = kv_buf_append(&r->arena, "", 1, err);
    }
    qsort(all, n, sizeof *all, by_rank);
done:
    kv_free(hits);
    qry_node_free(plan);
    kv_buf_free(&tmp);
    return rc;
}

int kvfts_search(kvfts_results **out, kvfts_db *db, const char *q,
                 size_t q_len, const kvfts_search_options *o)
{
    api_begin(db);
    *out = NULL;
    search_req req = { db, q, q_len, KVFTS_SEARCH_OPTIONS_INIT, NULL };
    int rc = KVFTS_OK;
    if (o) {
        if (o->version != 1 && o->version != KVFTS_SEARCH_OPTIONS_VERSION)
            rc = kv_seterr(&db->err, KVFTS_EINVAL, "search options version "
                           "%u (this library knows 1 and %d)", o->version,
                           KVFTS_SEARCH_OPTIONS_VERSION);
        else if (o->sort != KVFTS_SORT_SCORE && o->sort != KVFTS_SORT_KEY)
            rc = kv_seterr(&db->err, KVFTS_EINVAL, "search options: unknown "
                           "sort %d", (int)o->sort);
        else if (o->version == 1)   /* the fields version 1 has */
            memcpy(&req.o, o, offsetof(kvfts_search_options, mem_limit));
        else
            req.o = *o;
    }
    if (!rc && !q && q_len)
        rc = kv_seterr(&db->err, KVFTS_EINVAL, "query is NULL");
    if (!rc) {
        req.r = kv_calloc(1, sizeof *req.r);
        if (!req.r)
            rc = kv_seterr(&db->err, KVFTS_ENOMEM, "out of memory");
    }
    if (!rc)
        rc = kv_txn_run_read(db->env, search_fn, &req, &db->err);
    if (rc) {
        kvfts_results_free(req.r);
        return api_finish(db, rc);
    }
    *out = req.r;
    return api_finish(db, KVFTS_OK);
}

int kvfts_results_next(kvfts_results *r, const char **key_out,
                       const char **doc_out, size_t *doc_len_out,
                       double *score_out)
{
    if (!r || r->next >= r->n)
        return KVFTS_ITEROVER;
    const res_hit *h = &r->hits[r->next++];
    if (key_out)
        *key_out = r->arena.data + h->key_off;
    if (doc_out)
        *doc_out = h->has_doc ? r->arena.data + h->doc_off : NULL;
    if (doc_len_out)
        *doc_len_out = h->has_doc ? h->doc_len : 0;
    if (score_out)
        *score_out = h->score;
    return KVFTS_OK;
}

uint64_t kvfts_results_total(const kvfts_results *r)
{
    return r ? r->total : 0;
}

bool kvfts_results_partial(const kvfts_results *r)
{
    return r && r->partial;
}

size_t kvfts_results_count(const kvfts_results *r)
{
    return r ? r->n : 0;
}

void kvfts_results_free(kvfts_results *r)
{
    if (!r)
        return;
    kv_free(r->hits);
    kv_buf_free(&r->arena);
    kv_free(r);
}
