/*
 * kvfts_db.c -- opening and closing a database handle, and the reads that
 * are not searches: multi-get, counter ranges, counters and lookups.  Each
 * read is one snapshot transaction, so what it returns is one consistent
 * state of the database.
 */
#include "kvfts_int.h"

#include <stdio.h>
#include <string.h>

#define MAX_RANGE 10000000ull

/* ---- open / close ------------------------------------------------------ */

int kvfts_open(kvfts_db **out, const char *path, const kvfts_open_options *o)
{
    *out = NULL;
    kvfts_open_options def = KVFTS_OPEN_OPTIONS_INIT;
    if (!o)
        o = &def;
    kvfts_db *db = kv_calloc(1, sizeof *db);
    if (!db)
        return KVFTS_ENOMEM;
    *out = db;
    kv_err_clear(&db->err);
    if (o->version != KVFTS_OPEN_OPTIONS_VERSION)
        return api_finish(db, kv_seterr(&db->err, KVFTS_EINVAL,
                                    "kvfts_open_options version %u, "
                                    "expected %u", o->version,
                                    KVFTS_OPEN_OPTIONS_VERSION));
    if (!path || !path[0])
        return api_finish(db, kv_seterr(&db->err, KVFTS_EINVAL,
                                    "no database directory given (use -d DIR "
                                    "or KVFTS_DB)"));
    kv_env_options eo = { o->create, o->read_only, o->cache_bytes };
    int rc = kv_env_open(&db->env, path, &eo, &db->err);
    if (!rc)
        rc = kv_txn_run(db->env, false, api_load_config_fn, db, &db->err);
    return api_finish(db, rc);
}

void kvfts_close(kvfts_db *db)
{
    if (!db)
        return;
    kvfts_batch_free(db->batch);
    kv_env_close(db->env);
    kv_config_clear(&db->cfg);
    kv_buf_free(&db->cfg_json);
    kv_buf_free(&db->old_rec);
    kv_buf_free(&db->leaves);
    kv_buf_free(&db->doc_rec);
    kv_lookup_vals_free(&db->old_lv);
    kv_lookup_vals_free(&db->new_lv);
    idx_writer_free(db->iw);
    idx_lens_cache_free(db->lens);
    idx_dict_cache_free(db->dict);
    tok_analysis_free(db->an);
    kv_free(db);
}

int kvfts_checkpoint(kvfts_db *db)
{
    api_begin(db);
    return api_finish(db, kv_env_checkpoint(db->env, &db->err));
}

typedef struct mget_req {
    kvfts_docs *d;
    const char *const *keys;
    const size_t *lens;
    size_t n;
} mget_req;

static int mget_fn(kv_txn *txn, void *payload, kv_err *err)
{
    mget_req *r = payload;
    kv_buf rec = KV_BUF_INIT;
    int rc = KVFTS_OK;
    r->d->n = 0;
    kv_buf_reset(&r->d->arena);
    for (size_t i = 0; i < r->n && !rc; i++) {
        size_t kl = r->lens ? r->lens[i] : strlen(r->keys[i]);
        rc = api_get_into(txn, r->d, &rec, r->keys[i], kl, false, err);
    }
    kv_buf_free(&rec);
    return rc;
}

int kvfts_multi_get(kvfts_docs **out, kvfts_db *db, const char *const *keys,
                    const size_t *key_lens, size_t n)
{
    api_begin(db);
    *out = NULL;
    kvfts_docs *d = kv_calloc(1, sizeof *d);
    if (!d)
        return api_finish(db, kv_seterr(&db->err, KVFTS_ENOMEM, "out of memory"));
    mget_req r = { d, keys, key_lens, n };
    int rc = kv_txn_run(db->env, false, mget_fn, &r, &db->err);
    if (rc) {
        kvfts_docs_free(d);
        return api_finish(db, rc);
    }
    api_docs_fix(d);
    *out = d;
    return KVFTS_OK;
}

int kvfts_get(char **json_out, size_t *json_len_out, uint64_t *cas_out,
              kvfts_db *db, const char *key, size_t key_len)
{
    *json_out = NULL;
    kvfts_docs *d = NULL;
    const char *k = key;
    int rc = kvfts_multi_get(&d, db, &k, &key_len, 1);
    if (rc)
        return rc;
    const kvfts_doc *x = kvfts_docs_at(d, 0);
    if (x->status != KVFTS_OK) {
        rc = kv_seterr(&db->err, x->status, "doc '%.*s' not found",
                       (int)key_len, key);
    } else {
        *json_out = kv_strndup(x->json, x->json_len);
        if (!*json_out)
            rc = kv_seterr(&db->err, KVFTS_ENOMEM, "out of memory");
        else {
            if (json_len_out)
                *json_len_out = x->json_len;
            if (cas_out)
                *cas_out = x->cas;
        }
    }
    kvfts_docs_free(d);
    return api_finish(db, rc);
}

typedef struct range_req {
    kvfts_docs *d;
    const char *prefix;
    size_t plen;
    uint64_t first, last;
} range_req;

static int range_fn(kv_txn *txn, void *payload, kv_err *err)
{
    range_req *r = payload;
    r->d->n = 0;
    kv_buf_reset(&r->d->arena);
    uint64_t last = r->last;
    int rc = KVFTS_OK;
    if (last == 0) {
        int64_t v = 0;
        rc = kv_counter_get(txn, r->prefix, r->plen, &v, false, err);
        if (rc)
            return rc;
        last = v > 0 ? (uint64_t)v : 0;
    }
    if (last >= r->first && last - r->first >= MAX_RANGE)
        return kv_seterr(err, KVFTS_EINVAL,
                         "range %llu..%llu spans more than %llu keys",
                         (unsigned long long)r->first,
                         (unsigned long long)last, MAX_RANGE);
    kv_buf key = KV_BUF_INIT, rec = KV_BUF_INIT;
    for (uint64_t i = r->first; i <= last && !rc; i++) {
        kv_buf_reset(&key);
        rc = kv_buf_appendf(&key, err, "%.*s::%llu", (int)r->plen, r->prefix,
                            (unsigned long long)i);
        if (!rc)
            rc = api_get_into(txn, r->d, &rec, key.data, key.len, true, err);
        if (i == UINT64_MAX)
            break;
    }
    kv_buf_free(&key);
    kv_buf_free(&rec);
    return rc;
}

int kvfts_get_range(kvfts_docs **out, kvfts_db *db, const char *prefix,
                    size_t prefix_len, uint64_t first, uint64_t last)
{
    api_begin(db);
    *out = NULL;
    int rc = kv_name_check("counter", prefix, prefix_len, &db->err);
    if (rc)
        return api_finish(db, rc);
    kvfts_docs *d = kv_calloc(1, sizeof *d);
    if (!d)
        return api_finish(db, kv_seterr(&db->err, KVFTS_ENOMEM, "out of memory"));
    range_req r = { d, prefix, prefix_len, first, last };
    rc = kv_txn_run(db->env, false, range_fn, &r, &db->err);
    if (rc) {
        kvfts_docs_free(d);
        return api_finish(db, rc);
    }
    api_docs_fix(d);
    *out = d;
    return KVFTS_OK;
}

/* ---- counters ---------------------------------------------------------- */

typedef struct incr_req {
    const char *name;
    size_t nlen;
    int64_t delta;
    const int64_t *initial;
    int64_t out;
} incr_req;

static int incr_fn(kv_txn *txn, void *payload, kv_err *err)
{
    incr_req *r = payload;
    return kv_counter_incr(txn, r->name, r->nlen, r->delta, r->initial,
                           &r->out, err);
}

int kvfts_incr(int64_t *out, kvfts_db *db, const char *name, size_t name_len,
               int64_t delta, const int64_t *initial)
{
    api_begin(db);
    int rc = api_check_writable(db);
    if (!rc)
        rc = api_check_no_batch(db);
    if (!rc)
        rc = kv_name_check("counter", name, name_len, &db->err);
    incr_req r = { name, name_len, delta, initial, 0 };
    if (!rc)
        rc = kv_txn_run(db->env, true, incr_fn, &r, &db->err);
    if (!rc)
        *out = r.out;
    return api_finish(db, rc);
}

static int cget_fn(kv_txn *txn, void *payload, kv_err *err)
{
    incr_req *r = payload;
    return kv_counter_get(txn, r->name, r->nlen, &r->out, false, err);
}

int kvfts_counter_get(int64_t *out, kvfts_db *db, const char *name,
                      size_t name_len)
{
    api_begin(db);
    int rc = kv_name_check("counter", name, name_len, &db->err);
    incr_req r = { name, name_len, 0, NULL, 0 };
    if (!rc)
        rc = kv_txn_run(db->env, false, cget_fn, &r, &db->err);
    if (!rc)
        *out = r.out;
    return api_finish(db, rc);
}

/* ---- lookups ----------------------------------------------------------- */

typedef struct lookup_req {
    kvfts_db *db;
    const kv_lookup_def *def;
    kv_buf lkey;          /* "NAME::VALUE" */
    kv_buf refs;          /* NUL-separated keys */
    size_t nrefs;
    kvfts_docs *d;        /* NULL: refs only */
} lookup_req;

static int lookup_fn(kv_txn *txn, void *payload, kv_err *err)
{
    lookup_req *r = payload;
    kv_buf_reset(&r->refs);
    int rc = kv_lookup_refs(txn, r->lkey.data, r->lkey.len, &r->refs,
                            &r->nrefs, err);
    if (rc || !r->d)
        return rc;
    r->d->n = 0;
    kv_buf_reset(&r->d->arena);
    kv_buf rec = KV_BUF_INIT;
    const char *k = r->refs.data;
    for (size_t i = 0; i < r->nrefs && !rc; i++) {
        size_t kl = strlen(k);
        rc = api_get_into(txn, r->d, &rec, k, kl, false, err);
        k += kl + 1;
    }
    kv_buf_free(&rec);
    return rc;
}

static int lookup_prepare(lookup_req *r, kvfts_db *db, const char *name,
                          size_t nlen, const char *value, size_t vlen)
{
    int rc = kv_txn_run(db->env, false, api_load_config_fn, db, &db->err);
    if (rc)
        return rc;
    r->db = db;
    r->def = kv_config_lookup(&db->cfg, name, nlen);
    if (!r->def) {
        kv_buf names = KV_BUF_INIT;
        for (size_t i = 0; i < db->cfg.nlookups; i++)
            kv_buf_appendf(&names, NULL, "%s%s", i ? ", " : "",
                           db->cfg.lookups[i].name);
        kv_seterr(&db->err, KVFTS_EINVAL,
                  "no lookup named '%.*s' (declared: %s)", (int)nlen, name,
                  names.len ? names.data : "none; see 'kvfts init --config'");
        kv_buf_free(&names);
        return KVFTS_EINVAL;
    }
    return kv_buf_appendf(&r->lkey, &db->err, "%s::%.*s", r->def->name,
                          (int)vlen, value);
}

int kvfts_lookup(kvfts_docs **out, kvfts_db *db, const char *name,
                 size_t name_len, const char *value, size_t value_len)
{
    api_begin(db);
    *out = NULL;
    lookup_req r = { 0 };
    int rc = lookup_prepare(&r, db, name, name_len, value, value_len);
    if (!rc) {
        r.d = kv_calloc(1, sizeof *r.d);
        if (!r.d)
            rc = kv_seterr(&db->err, KVFTS_ENOMEM, "out of memory");
    }
    if (!rc)
        rc = kv_txn_run(db->env, false, lookup_fn, &r, &db->err);
    if (!rc) {
        api_docs_fix(r.d);
        *out = r.d;
    } else {
        kvfts_docs_free(r.d);
    }
    kv_buf_free(&r.lkey);
    kv_buf_free(&r.refs);
    return api_finish(db, rc);
}

int kvfts_lookup_doc(char **out, size_t *out_len, kvfts_db *db,
                     const char *name, size_t name_len, const char *value,
                     size_t value_len)
{
    api_begin(db);
    *out = NULL;
    lookup_req r = { 0 };
    int rc = lookup_prepare(&r, db, name, name_len, value, value_len);
    if (!rc)
        rc = kv_txn_run(db->env, false, lookup_fn, &r, &db->err);
    kv_buf j = KV_BUF_INIT;
    if (!rc) {
        bool uniq = r.def->unique && r.nrefs == 1;
        rc = kv_buf_append(&j, uniq ? "{\"ref\":" : "{\"refs\":[",
                           uniq ? 7 : 9, &db->err);
        const char *k = r.refs.data;
        for (size_t i = 0; i < r.nrefs && !rc; i++) {
            size_t kl = strlen(k);
            if (i)
                rc = kv_buf_append(&j, ",", 1, &db->err);
            if (!rc)
                rc = kv_buf_append_json_str(&j, k, kl, &db->err);
            k += kl + 1;
        }
        if (!rc)
            rc = kv_buf_append(&j, uniq ? "}" : "]}", uniq ? 1 : 2, &db->err);
    }
    if (!rc) {
        *out = j.data;
        if (out_len)
            *out_len = j.len;
        j.data = NULL;
    }
    kv_buf_free(&j);
    kv_buf_free(&r.lkey);
    kv_buf_free(&r.refs);
    return api_finish(db, rc);
}

