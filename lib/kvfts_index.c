/*
 * kvfts_index.c -- the public API of the inverted index: the configuration
 * (a change re-indexes the stored documents), reading an entry in the
 * seeds' {"count","refs"} form, listing terms, verifying that the index,
 * the lookups and the doc-id table equal a fresh analysis of the stored
 * documents (kvfts check), rebuilding them (kvfts reindex), and the
 * database's statistics.
 *
 * Reads run in one snapshot transaction, so a check sees one consistent
 * state while writers go on.  A rebuild is one write transaction: it either
 * replaces every entry or changes nothing.
 */
#include "kvfts_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fts::FIELD::TERM ---------------------------------------------------- */

typedef struct term_req {
    const char *field, *term;
    size_t flen, tlen, limit;
    kv_buf keys;          /* NUL-terminated keys back to back */
    size_t nkeys;
    uint64_t count;
} term_req;

static int term_fn(kv_txn *txn, void *payload, kv_err *err)
{
    term_req *r = payload;
    kv_buf_reset(&r->keys);
    r->nkeys = 0;
    idx_postings *p = NULL;
    idx_reader *rd = NULL;
    kv_buf key = KV_BUF_INIT;
    int rc = idx_reader_open(&rd, txn, err);
    if (!rc)
        rc = idx_postings_open(&p, rd, r->field, r->flen, r->term, r->tlen,
                               err);
    if (rc)
        idx_reader_close(rd);
    if (rc == KVFTS_ENOTFOUND)
        return kv_seterr(err, rc, "no index entry fts::%.*s::%.*s",
                         (int)r->flen, r->field, (int)r->tlen, r->term);
    if (rc)
        return rc;
    r->count = idx_postings_info(p)->df;
    while ((rc = idx_postings_next(p, err)) == KVFTS_OK) {
        rc = kv_docid_key(txn, idx_postings_docid(p), &key, err);
        if (rc == KVFTS_ENOTFOUND)
            rc = kv_seterr(err, KVFTS_ECORRUPT, "doc id %u of fts::%.*s::%.*s "
                           "has no key", idx_postings_docid(p), (int)r->flen,
                           r->field, (int)r->tlen, r->term);
        if (!rc)
            rc = kv_buf_append(&r->keys, key.data, key.len + 1, err);
        if (rc)
            break;
        r->nkeys++;
    }
    idx_postings_close(p);
    idx_reader_close(rd);
    kv_buf_free(&key);
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int kvfts_term_get(char **out, size_t *out_len, kvfts_db *db,
                   const char *field, size_t field_len, const char *term,
                   size_t term_len, size_t limit)
{
    api_begin(db);
    *out = NULL;
    term_req r = { field, term, field_len, term_len, limit, KV_BUF_INIT, 0,
                   0 };
    kv_buf j = KV_BUF_INIT;
    const char **refs = NULL;
    int rc = kv_txn_run(db->env, false, term_fn, &r, &db->err);
    if (!rc) {
        refs = kv_malloc((r.nkeys + 1) * sizeof *refs);
        if (!refs)
            rc = kv_seterr(&db->err, KVFTS_ENOMEM, "out of memory");
    }
    if (!rc) {
        const char *k = r.keys.data;
        for (size_t i = 0; i < r.nkeys; i++) {
            refs[i] = k;
            k += strlen(k) + 1;
        }
        qsort(refs, r.nkeys, sizeof *refs, cmp_str);
        size_t n = limit && limit < r.nkeys ? limit : r.nkeys;
        rc = kv_buf_appendf(&j, &db->err, "{\"count\":%llu,\"refs\":[",
                            (unsigned long long)r.count);
        for (size_t i = 0; !rc && i < n; i++) {
            if (i)
                rc = kv_buf_append(&j, ",", 1, &db->err);
            if (!rc)
                rc = kv_buf_append_json_str(&j, refs[i], strlen(refs[i]),
                                            &db->err);
        }
        if (!rc)
            rc = kv_buf_append(&j, "]}", 2, &db->err);
    }
    if (!rc) {
        *out = j.data;
        if (out_len)
            *out_len = j.len;
        j.data = NULL;
    }
    kv_free(refs);
    kv_buf_free(&j);
    kv_buf_free(&r.keys);
    return api_finish(db, rc);
}

typedef struct list_req {
    const char *field, *prefix;
    size_t flen, plen;
    kvfts_term_fn fn;
    void *payload;
    int user_rc;          /* what fn returned to stop the walk */
} list_req;

static int list_term(void *payload, const char *term, size_t tlen,
                     const idx_term_info *info)
{
    list_req *r = payload;
    r->user_rc = r->fn(r->payload, term, tlen, info->df);
    return r->user_rc;
}

static int list_fn(kv_txn *txn, void *payload, kv_err *err)
{
    list_req *r = payload;
    idx_reader *rd = NULL;
    int rc = idx_reader_open(&rd, txn, err);
    if (rc)
        return rc;
    rc = idx_terms_scan(rd, r->field, r->flen, r->prefix, r->plen,
                        list_term, r, err);
    idx_reader_close(rd);
    return rc;
}

int kvfts_term_list(kvfts_db *db, const char *field, size_t field_len,
                    const char *prefix, size_t prefix_len, kvfts_term_fn fn,
                    void *payload)
{
    api_begin(db);
    list_req r = { field, prefix ? prefix : "", field_len,
                   prefix ? prefix_len : 0, fn, payload, 0 };
    int rc = kv_txn_run(db->env, false, list_fn, &r, &db->err);
    if (rc && rc == r.user_rc) {
        db->err.code = rc;    /* the caller stopped it: not our failure */
        return rc;
    }
    return api_finish(db, rc);
}

/* ---- checking ------------------------------------------------------------ */

typedef struct check_req {
    kvfts_db *db;
    kvfts_report_fn report;
    void *payload;
    uint64_t found;
} check_req;

static int report_line(check_req *r, const char *line)
{
    r->found++;
    if (r->found > 1000 || !r->report)
        return KVFTS_OK;
    return r->report(r->payload, line);
}

static int idx_report(void *payload, const char *what)
{
    check_req *r = payload;
    return r->report ? r->report(r->payload, what) : KVFTS_OK;
}

typedef struct pair_list {
    kv_buf arena;         /* "LOOKUP::VALUE\0KEY\0" records */
    size_t *offs;
    size_t n, cap;
} pair_list;

static int pair_cmp(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    int c = strcmp(x, y);
    if (c)
        return c;
    return strcmp(x + strlen(x) + 1, y + strlen(y) + 1);
}

typedef struct expect_state {
    check_req *r;
    kv_txn *txn;
    pair_list *pl;
    kv_lookup_vals *lv;
    uint64_t ndocs;
} expect_state;

/* One document: its key must map back to its doc id, and its lookup pairs
 * go to the expected list. */
static int expect_doc(void *payload, const char *k, size_t kl, const kv_doc *d,
                      kv_err *err)
{
    expect_state *es = payload;
    check_req *r = es->r;
    pair_list *pl = es->pl;
    char line[600];
    es->ndocs++;
    uint32_t id = 0;
    int rc = kv_key_docid(es->txn, k, kl, &id, false, err);
    if (rc == KVFTS_ENOTFOUND || rc == KVFTS_ECORRUPT ||
        (!rc && id != d->docid)) {
        snprintf(line, sizeof line, "doc '%.*s' (id %u): its key %s", (int)kl,
                 k, d->docid, rc == KVFTS_ENOTFOUND ? "is missing"
                 : rc ? "record is corrupt" : "names another id");
        kv_err_clear(err);
        rc = report_line(r, line);
    }
    if (!rc)
        rc = kv_lookup_collect(es->lv, &r->db->cfg, d->json, d->json_len, err);
    for (size_t i = 0; !rc && i < es->lv->n; i++) {
        if (pl->n == pl->cap) {
            size_t cap = pl->cap ? pl->cap * 2 : 256;
            size_t *o = kv_realloc(pl->offs, cap * sizeof *o);
            if (!o)
                return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
            pl->offs = o;
            pl->cap = cap;
        }
        const char *lk = es->lv->keys.data + es->lv->offs[i];
        pl->offs[pl->n] = pl->arena.len;
        rc = kv_buf_append(&pl->arena, lk, strlen(lk) + 1, err);
        if (!rc)
            rc = kv_buf_append(&pl->arena, k, kl, err);
        if (!rc)
            rc = kv_buf_append(&pl->arena, "", 1, err);
        pl->n++;
    }
    return rc;
}

/* The lookups and the key records against the documents. */
static int check_lookups_docids(check_req *r, kv_txn *txn, kv_err *err)
{
    pair_list pl = { KV_BUF_INIT, NULL, 0, 0 };
    kv_lookup_vals lv = { 0 };
    const char **sorted = NULL;
    char line[600];
    kv_cursor *c = NULL;
    expect_state es = { r, txn, &pl, &lv, 0 };
    int rc = kv_doc_scan(txn, expect_doc, &es, err);
    uint64_t ndocs = es.ndocs;
    uint64_t nids = 0;
    if (!rc)
        rc = kv_count(txn, KV_KEYS, &nids, err);
    if (!rc && nids != ndocs) {
        snprintf(line, sizeof line, "%llu keys for %llu documents",
                 (unsigned long long)nids, (unsigned long long)ndocs);
        rc = report_line(r, line);
    }
    /* Expected pairs in storage order, then one walk over lookups.db. */
    if (!rc) {
        sorted = kv_malloc((pl.n + 1) * sizeof *sorted);
        if (!sorted)
            rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }
    if (!rc) {
        for (size_t i = 0; i < pl.n; i++)
            sorted[i] = pl.arena.data + pl.offs[i];
        qsort(sorted, pl.n, sizeof *sorted, pair_cmp);
        rc = kv_cursor_open(&c, txn, KV_LOOKUPS, err);
    }
    if (!rc)
        rc = kv_cursor_seek(c, "", 0, err);
    size_t i = 0;
    while (rc == KVFTS_OK || (rc == KVFTS_ITEROVER && i < pl.n)) {
        const char *sk = NULL, *sv = NULL;
        size_t skl = 0, svl = 0;
        int cmp = -1;       /* stored < expected */
        if (rc == KVFTS_OK) {
            kv_cursor_key(c, &sk, &skl);
            kv_cursor_val(c, &sv, &svl);
            if (i < pl.n) {
                const char *ek = sorted[i], *ev = ek + strlen(ek) + 1;
                size_t ekl = strlen(ek), evl = strlen(ev);
                size_t m = skl < ekl ? skl : ekl;
                cmp = memcmp(sk, ek, m);
                if (!cmp)
                    cmp = skl < ekl ? -1 : skl > ekl;
                if (!cmp) {
                    m = svl < evl ? svl : evl;
                    cmp = memcmp(sv, ev, m);
                    if (!cmp)
                        cmp = svl < evl ? -1 : svl > evl;
                }
            }
        } else {
            cmp = 1;        /* stored ran out */
        }
        if (cmp < 0) {
            snprintf(line, sizeof line, "lookup '%.*s' -> '%.*s' should not "
                     "be there", (int)(skl > 250 ? 250 : skl), sk,
                     (int)(svl > 250 ? 250 : svl), sv);
            rc = report_line(r, line);
            if (!rc)
                rc = kv_cursor_next(c, err);
        } else if (cmp > 0) {
            const char *ek = sorted[i];
            snprintf(line, sizeof line, "lookup '%.250s' -> '%.250s' missing",
                     ek, ek + strlen(ek) + 1);
            int was = rc;
            rc = report_line(r, line);
            if (!rc)
                rc = was;   /* keep the cursor state */
            i++;
        } else {
            i++;
            rc = kv_cursor_next(c, err);
        }
    }
    kv_cursor_close(c);
    kv_free(sorted);
    kv_free(pl.offs);
    kv_buf_free(&pl.arena);
    kv_lookup_vals_free(&lv);
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

static int check_fn(kv_txn *txn, void *payload, kv_err *err)
{
    check_req *r = payload;
    r->found = 0;
    int rc = api_refresh_config(r->db, txn, err);
    uint64_t n = 0;
    if (!rc)
        rc = idx_check(txn, r->db->cfg_json.data ? r->db->cfg_json.data : "",
                       r->db->cfg_json.len, idx_report, r, &n, err);
    r->found += n;
    if (!rc)
        rc = check_lookups_docids(r, txn, err);
    return rc;
}

int kvfts_check(uint64_t *differences, kvfts_db *db, kvfts_report_fn report,
                void *payload)
{
    api_begin(db);
    check_req r = { db, report, payload, 0 };
    int rc = kv_txn_run(db->env, false, check_fn, &r, &db->err);
    *differences = r.found;
    return api_finish(db, rc);
}

/* ---- rebuilding ---------------------------------------------------------- */

typedef struct progress_adapter {
    kvfts_progress_fn fn;
    void *payload;
} progress_adapter;

static void on_progress(void *payload, uint64_t done)
{
    progress_adapter *p = payload;
    if (p->fn)
        p->fn(p->payload, done);
}

/* One document's lookups, added afresh (the table was emptied). */
typedef struct relookup {
    kvfts_db *db;
    kv_txn *txn;
} relookup;

static int relookup_doc(void *payload, const char *k, size_t kl,
                        const kv_doc *d, kv_err *err)
{
    relookup *rl = payload;
    kvfts_db *db = rl->db;
    kv_txn *txn = rl->txn;
    int rc = kv_lookup_collect(&db->new_lv, &db->cfg, d->json, d->json_len,
                               err);
    if (!rc)
        rc = kv_lookup_update(txn, k, kl, NULL, &db->new_lv, err);
    if (rc && rc != KV_RETRY)
        kv_err_prefix(err, "doc '%.*s'", (int)kl, k);
    return rc;
}

int api_rebuild(kvfts_db *db, kv_txn *txn, kvfts_progress_fn progress,
                void *payload, kv_err *err)
{
    /* Lookups: drop every pair, then add each document's. */
    relookup rl = { db, txn };
    kv_cursor *c = NULL;
    int rc = kv_cursor_open(&c, txn, KV_LOOKUPS, err);
    if (!rc)
        rc = kv_cursor_seek(c, "", 0, err);
    while (rc == KVFTS_OK) {
        rc = kv_cursor_del(c, err);
        if (!rc)
            rc = kv_cursor_next(c, err);
    }
    kv_cursor_close(c);
    c = NULL;
    if (rc == KVFTS_ITEROVER)
        rc = KVFTS_OK;
    if (!rc && db->cfg.nlookups)
        rc = kv_doc_scan(txn, relookup_doc, &rl, err);
    progress_adapter pa = { progress, payload };
    if (!rc)
        rc = idx_rebuild(txn, db->cfg_json.data ? db->cfg_json.data : "",
                         db->cfg_json.len, 0, on_progress, &pa, err);
    return rc;
}

typedef struct reindex_req {
    kvfts_db *db;
    kvfts_progress_fn progress;
    void *payload;
} reindex_req;

static int reindex_fn(kv_txn *txn, void *payload, kv_err *err)
{
    reindex_req *r = payload;
    int rc = api_refresh_config(r->db, txn, err);
    if (!rc)
        rc = api_rebuild(r->db, txn, r->progress, r->payload, err);
    if (rc)
        idx_discard(r->db->iw);
    return rc;
}

int kvfts_reindex(kvfts_db *db, kvfts_progress_fn progress, void *payload)
{
    api_begin(db);
    int rc = api_check_writable(db);
    if (!rc && db->batch)
        rc = kv_seterr(&db->err, KVFTS_EINVAL, "a batch is open on this "
                       "handle");
    reindex_req r = { db, progress, payload };
    if (!rc)
        rc = kv_txn_run(db->env, true, reindex_fn, &r, &db->err);
    if (!rc)
        api_drop_sweep_warn(db);
    return api_finish(db, rc);
}

int kvfts_optimize(kvfts_db *db, kvfts_merge_fn progress, void *payload)
{
    api_begin(db);
    int rc = api_check_writable(db);
    if (!rc && db->batch)
        rc = kv_seterr(&db->err, KVFTS_EINVAL, "a batch is open on this "
                       "handle");
    int more = 1;
    while (!rc && more) {
        idx_merge_stats st;
        rc = api_merge_step(db, true, api_merge_step_bytes(), 0, &more, &st,
                            &db->err);
        if (!rc && progress && progress(payload, st.done, st.total,
                                        st.segments))
            break;   /* the merge state is committed: it resumes later */
    }
    return api_finish(db, rc);
}

typedef struct set_config_req {
    kvfts_db *db;
    const char *json;
    size_t len;
} set_config_req;

static int set_config_fn(kv_txn *txn, void *payload, kv_err *err)
{
    set_config_req *r = payload;
    uint64_t ndocs = 0;
    int rc = kv_count(txn, KV_DOCS, &ndocs, err);
    if (!rc)
        rc = kv_put(txn, KV_META, API_CONFIG_KEY, strlen(API_CONFIG_KEY), r->json,
                    r->len, err);
    /* Documents already stored are re-indexed and their lookups rebuilt
     * under the new config, in this transaction: all or nothing.  (If it
     * aborts, the next call reloads the stored config: it differs from the
     * one cached now.) */
    if (!rc)
        rc = api_refresh_config(r->db, txn, err);
    if (!rc && ndocs > 0)
        rc = api_rebuild(r->db, txn, NULL, NULL, err);
    if (rc && r->db->iw)
        idx_discard(r->db->iw);
    return rc;
}

int kvfts_set_config(kvfts_db *db, const char *json, size_t json_len)
{
    api_begin(db);
    int rc = api_check_writable(db);
    if (rc)
        return api_finish(db, rc);
    kv_config cfg;
    kv_buf compact = KV_BUF_INIT;
    rc = kv_config_parse(&cfg, json, json_len, &db->err);
    if (rc)
        return api_finish(db, rc);
    kv_config_clear(&cfg);
    /* The "analysis" member belongs to the tokenizer: let it judge. */
    tok_analysis *a = NULL;
    rc = tok_analysis_new(&a, json, json_len, &db->err);
    tok_analysis_free(a);
    if (rc)
        return api_finish(db, rc);   /* the message starts with "config" */
    rc = kv_json_walk(json, json_len, &compact, NULL, NULL, &db->err);
    if (!rc) {
        set_config_req r = { db, compact.data, compact.len };
        rc = kv_txn_run(db->env, true, set_config_fn, &r, &db->err);
        if (!rc)
            api_drop_sweep_warn(db);
    }
    if (!rc)
        rc = kv_txn_run(db->env, false, api_load_config_fn, db, &db->err);
    kv_buf_free(&compact);
    return api_finish(db, rc);
}

int kvfts_get_config(char **out, size_t *out_len, kvfts_db *db)
{
    api_begin(db);
    *out = NULL;
    int rc = kv_txn_run(db->env, false, api_load_config_fn, db, &db->err);
    if (rc)
        return api_finish(db, rc);
    const char *s = db->cfg_json.len ? db->cfg_json.data : "{}";
    size_t n = db->cfg_json.len ? db->cfg_json.len : 2;
    *out = kv_strndup(s, n);
    if (!*out)
        return api_finish(db, kv_seterr(&db->err, KVFTS_ENOMEM, "out of memory"));
    if (out_len)
        *out_len = n;
    return KVFTS_OK;
}

/* ---- statistics -------------------------------------------------------- */

static int stats_fn(kv_txn *txn, void *payload, kv_err *err)
{
    kvfts_stats *s = payload;
    /* keys.db holds a record per document (check proves it), in a small
     * fraction of docs.db's pages */
    int rc = kv_count(txn, KV_KEYS, &s->documents, err);
    if (!rc)
        rc = kv_count(txn, KV_COUNTERS, &s->counters, err);
    if (!rc)
        rc = kv_count(txn, KV_LOOKUPS, &s->lookup_entries, err);
    idx_stats is;
    if (!rc)
        rc = idx_get_stats(txn, &is, err);
    if (!rc) {
        s->terms = is.terms;
        s->postings = is.postings;
        s->blocks = is.blocks;
        s->postings_bytes = is.postings_bytes;
        s->fields = is.fields;
        s->skipped_tokens = is.skipped_tokens;
        s->segments = is.segments;
        s->field_list_postings = is.list_postings;
    }
    idx_merge_stats ms;
    if (!rc)
        rc = idx_merge_stats_get(txn, &ms, err);
    if (!rc)
        s->merging = ms.merging;
    return rc;
}

int kvfts_get_stats(kvfts_stats *out, kvfts_db *db)
{
    api_begin(db);
    memset(out, 0, sizeof *out);
    int rc = kv_txn_run(db->env, false, stats_fn, out, &db->err);
    if (!rc)
        rc = kv_env_sizes(db->env, &out->disk_bytes, &out->log_bytes,
                          &db->err);
    return api_finish(db, rc);
}

