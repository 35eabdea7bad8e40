/*
 * kvfts_api.c -- the glue that implements include/kvfts.h on top of the kv
 * layer (and, as they land, the tokenizer, index and query modules).
 *
 * A kvfts_db is one handle: a view of the shared environment, the parsed
 * configuration, and a kv_err whose message kvfts_errmsg() returns.  Every
 * public function clears the error first and leaves a message on failure.
 *
 * The write path (write_doc) is one transaction that changes a document, its
 * lookups and its CAS/id sequences together or not at all:
 *   1. outside the transaction: check the key, validate and compact the JSON
 *      (so a deadlock retry does not redo the parse);
 *   2. read the old version with a write lock; apply add/replace/CAS rules;
 *   3. collect old and new lookup values; check unique constraints;
 *   4. only then write: lookups, then the record.
 * Every failure of steps 2-3 happens before any write, so a batch can refuse
 * one document and carry on.  Step 4 failing (disk full, ...) rolls the
 * whole transaction back.
 *
 * Batches keep a replay log of what they applied since the last commit: when
 * Berkeley DB picks the batch as a deadlock victim, the transaction is
 * aborted, begun again and the log replayed, so callers never see KV_RETRY.
 */
#include "kvfts_int.h"

#include <stdio.h>
#include <string.h>

#define CONFIG_KEY "config"
#define MAX_RANGE 10000000ull
#define BATCH_RETRIES 50


typedef struct write_req {
    kvfts_write_mode mode;
    const char *key;         /* NULL with auto_prefix */
    size_t key_len;
    const char *auto_prefix; /* key = PREFIX::<incr count::PREFIX> */
    size_t auto_len;
    const char *json;        /* compact, validated */
    size_t json_len;
    uint64_t cas;            /* expected CAS, 0 = any */
    uint64_t cas_out;
    kv_buf *key_out;         /* the key used (auto keys), or NULL */
} write_req;

/* One applied write in a batch's replay log: header + key + json bytes. */
typedef struct batch_item {
    unsigned mode;
    unsigned is_auto;
    size_t key_len;
    size_t json_len;
} batch_item;

struct kvfts_batch {
    kvfts_db *db;
    kv_txn *txn;             /* open write transaction, or NULL */
    kv_buf log;              /* batch_item + key + json, back to back */
    size_t pending;          /* writes in log */
    kv_buf json;             /* scratch: compacted document */
    size_t mem;              /* memory bound of the buffers */
    bool split;              /* a commit out of cache may go in parts */
    size_t parts;            /* commits that went in parts */
};

/* ---- errors and small helpers ------------------------------------------ */

const char *kvfts_strerror(int status)
{
    switch (status) {
    case KVFTS_OK: return "ok";
    case KVFTS_ERROR: return "error";
    case KVFTS_ENOMEM: return "out of memory";
    case KVFTS_ENOTFOUND: return "not found";
    case KVFTS_EEXISTS: return "already exists";
    case KVFTS_EINVAL: return "invalid input";
    case KVFTS_EBUSY: return "busy";
    case KVFTS_ECORRUPT: return "corrupt data";
    case KVFTS_ITEROVER: return "end of iteration";
    case KVFTS_ECAS: return "CAS mismatch";
    default: return "unknown status";
    }
}

const char *kvfts_errmsg(const kvfts_db *db)
{
    if (!db)
        return "no database handle (out of memory)";
    return db->err.msg;
}

long long kvfts_errpos(const kvfts_db *db)
{
    return db && db->err.code ? db->err.pos : -1;
}

void kvfts_free(void *p)
{
    kv_free(p);
}

/* Start of every public call on db. */
void api_begin(kvfts_db *db)
{
    kv_err_clear(&db->err);
}

int api_finish(kvfts_db *db, int rc)
{
    if (rc == KV_RETRY)  /* never leaves lib/ */
        rc = kv_seterr(&db->err, KVFTS_EBUSY, "deadlock");
    if (rc == KVFTS_OK)
        kv_err_clear(&db->err);
    else if (!db->err.msg[0])
        kv_seterr(&db->err, rc, "%s", kvfts_strerror(rc));
    db->err.code = rc;
    return rc;
}

int api_check_writable(kvfts_db *db)
{
    if (kv_env_read_only(db->env))
        return kv_seterr(&db->err, KVFTS_EINVAL,
                         "database '%s' is open read-only",
                         kv_env_dir(db->env));
    return KVFTS_OK;
}

/* ---- configuration ----------------------------------------------------- */

/* Load the stored config if it differs from the cached one. */
int api_refresh_config(kvfts_db *db, kv_txn *txn, kv_err *err)
{
    kv_buf v = KV_BUF_INIT;
    int rc = kv_get(txn, KV_META, CONFIG_KEY, strlen(CONFIG_KEY), &v, false,
                    err);
    if (rc == KVFTS_ENOTFOUND) {
        rc = KVFTS_OK;
        v.len = 0;
    }
    if (rc)
        goto done;
    if (db->iw && v.len == db->cfg_json.len &&
        (v.len == 0 || memcmp(v.data, db->cfg_json.data, v.len) == 0))
        goto done;
    kv_config cfg;
    rc = kv_config_parse(&cfg, v.data ? v.data : "", v.len, err);
    if (rc) {
        kv_err_prefix(err, "stored meta::config");
        if (rc == KVFTS_EINVAL)     /* it was valid when stored */
            err->code = rc = KVFTS_ECORRUPT;
        goto done;
    }
    tok_analysis *an = NULL;
    idx_writer *iw = NULL;
    rc = tok_analysis_new(&an, v.data ? v.data : "", v.len, err);
    if (!rc)
        rc = idx_writer_new(&iw, an, 0, err);
    if (rc) {
        if (rc == KVFTS_EINVAL) {
            kv_err_prefix(err, "stored meta::config");
            err->code = rc = KVFTS_ECORRUPT;
        }
        idx_writer_free(iw);
        tok_analysis_free(an);
        kv_config_clear(&cfg);
        goto done;
    }
    kv_config_clear(&db->cfg);
    db->cfg = cfg;
    for (size_t i = 0; i < db->cfg.nlookups; i++)
        db->cfg.lookup_names[i] = db->cfg.lookups[i].name;
    idx_writer_free(db->iw);
    tok_analysis_free(db->an);
    db->an = an;
    db->iw = iw;
    if (db->batch) {
        idx_writer_buffering(iw, true);
        idx_writer_set_mem(iw, db->batch->mem * 2);
    }
    kv_buf_reset(&db->cfg_json);
    rc = kv_buf_append(&db->cfg_json, v.data ? v.data : "", v.len, err);
done:
    kv_buf_free(&v);
    return rc;
}

int api_load_config_fn(kv_txn *txn, void *payload, kv_err *err)
{
    return api_refresh_config(payload, txn, err);
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
        rc = kv_put(txn, KV_META, CONFIG_KEY, strlen(CONFIG_KEY), r->json,
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

/** Semi-private: the stored config JSON, borrowed from @p db until the next
 *  call on it ("" if none).  For other modules' glue (analysis). */
int kvfts__config_json(const char **json, size_t *len, kvfts_db *db);
int kvfts__config_json(const char **json, size_t *len, kvfts_db *db)
{
    api_begin(db);
    int rc = kv_txn_run(db->env, false, api_load_config_fn, db, &db->err);
    if (rc)
        return api_finish(db, rc);
    *json = db->cfg_json.data ? db->cfg_json.data : "";
    *len = db->cfg_json.len;
    return KVFTS_OK;
}

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
    kv_buf_free(&db->doc_rec);
    kv_lookup_vals_free(&db->old_lv);
    kv_lookup_vals_free(&db->new_lv);
    idx_writer_free(db->iw);
    idx_lens_cache_free(db->lens);
    tok_analysis_free(db->an);
    kv_free(db);
}

int kvfts_checkpoint(kvfts_db *db)
{
    api_begin(db);
    return api_finish(db, kv_env_checkpoint(db->env, &db->err));
}

/* ---- the write path ---------------------------------------------------- */

/* Step 1, outside any transaction: key and JSON. */
static int prepare(kvfts_db *db, const char *key, size_t key_len,
                   const char *json, size_t json_len, kv_buf *compact,
                   kv_err *err)
{
    int rc;
    if (key) {
        rc = kv_key_check(key, key_len, db->cfg.lookup_names,
                          db->cfg.nlookups, err);
        if (rc)
            return rc;
    }
    kv_buf_reset(compact);
    rc = kv_json_walk(json, json_len, compact, NULL, NULL, err);
    if (rc && key)
        kv_err_prefix(err, "doc '%.*s'", (int)key_len, key);
    return rc;
}

/* An auto key "PREFIX::<n>" must be a valid key whatever n is; check it
 * before the counter moves. */
static int check_auto_prefix(kvfts_db *db, const char *prefix, size_t plen,
                             kv_err *err)
{
    int rc = kv_name_check("counter", prefix, plen, err);
    if (rc)
        return rc;
    char probe[KVFTS_MAX_KEY + 1];
    if (plen + 2 + 20 > KVFTS_MAX_KEY)
        return kv_seterr(err, KVFTS_EINVAL,
                         "auto-key prefix of %zu bytes is too long", plen);
    memcpy(probe, prefix, plen);
    memcpy(probe + plen, "::1", 3);
    return kv_key_check(probe, plen + 3, db->cfg.lookup_names,
                        db->cfg.nlookups, err);
}

/* Make the key "PREFIX::<n>" from counter count::PREFIX. */
static int auto_key(kv_txn *txn, const char *prefix, size_t plen,
                    kv_buf *key, kv_err *err)
{
    int64_t n;
    int rc = kv_counter_incr(txn, prefix, plen, 1, NULL, &n, err);
    if (rc)
        return rc;
    kv_buf_reset(key);
    return kv_buf_appendf(key, err, "%.*s::%lld", (int)plen, prefix,
                          (long long)n);
}

/* Steps 2-4 inside txn. */
static int write_doc(kvfts_db *db, kv_txn *txn, write_req *r, kv_err *err)
{
    kv_buf autok = KV_BUF_INIT;
    const char *key = r->key;
    size_t klen = r->key_len;
    int rc;
    if (r->auto_prefix) {
        rc = auto_key(txn, r->auto_prefix, r->auto_len, &autok, err);
        if (rc)
            goto done;
        key = autok.data;
        klen = autok.len;
        rc = kv_key_check(key, klen, db->cfg.lookup_names, db->cfg.nlookups,
                          err);
        if (rc)
            goto done;
    }
    kv_doc old = { 0 };
    rc = kv_doc_get(txn, key, klen, &db->old_rec, &old, true, err);
    bool exists = rc == KVFTS_OK;
    if (rc && rc != KVFTS_ENOTFOUND)
        goto done;
    rc = KVFTS_OK;
    if (r->mode == KVFTS_INSERT && exists) {
        rc = kv_seterr(err, KVFTS_EEXISTS, "doc '%.*s' already exists",
                       (int)klen, key);
        goto done;
    }
    if ((r->mode == KVFTS_REPLACE || r->cas) && !exists) {
        rc = kv_seterr(err, KVFTS_ENOTFOUND, "doc '%.*s' not found",
                       (int)klen, key);
        goto done;
    }
    if (r->cas && old.cas != r->cas) {
        rc = kv_seterr(err, KVFTS_ECAS,
                       "doc '%.*s': CAS mismatch (given %llu, stored %llu)",
                       (int)klen, key, (unsigned long long)r->cas,
                       (unsigned long long)old.cas);
        goto done;
    }
    /* Analysis of both versions: a refusal here has written nothing. */
    rc = idx_doc_prepare(db->iw, exists ? old.json : NULL, old.json_len,
                         r->json, r->json_len, err);
    if (rc) {
        if (rc != KV_RETRY)
            kv_err_prefix(err, "doc '%.*s'", (int)klen, key);
        goto done;
    }
    if (db->cfg.nlookups) {
        kv_lookup_vals_free(&db->old_lv);
        if (exists)
            rc = kv_lookup_collect(&db->old_lv, &db->cfg, old.json,
                                   old.json_len, err);
        if (!rc)
            rc = kv_lookup_collect(&db->new_lv, &db->cfg, r->json,
                                   r->json_len, err);
        if (!rc)
            rc = kv_lookup_update(txn, key, klen, exists ? &db->old_lv : NULL,
                                  &db->new_lv, err);
        if (rc) {
            if (rc != KV_RETRY)
                kv_err_prefix(err, "doc '%.*s'", (int)klen, key);
            goto done;
        }
    }
    kv_doc nd = { .docid = old.docid, .json = r->json,
                  .json_len = r->json_len };
    rc = kv_seq_next(txn, "cas", &nd.cas, err);
    if (!rc && !exists) {
        uint64_t id;
        rc = kv_seq_next(txn, "docid", &id, err);
        if (!rc && id > UINT32_MAX)
            rc = kv_seterr(err, KVFTS_EINVAL, "doc ids exhausted");
        nd.docid = (uint32_t)id;
    }
    if (!rc)
        rc = idx_doc_apply(db->iw, txn, nd.docid, err);
    if (!rc)
        rc = kv_doc_put(txn, key, klen, &nd, !exists, err);
    if (!rc) {
        r->cas_out = nd.cas;
        if (r->key_out) {
            kv_buf_reset(r->key_out);
            rc = kv_buf_append(r->key_out, key, klen, err);
        }
    }
done:
    kv_buf_free(&autok);
    return rc;
}

typedef struct write_ctx {
    kvfts_db *db;
    write_req *req;
} write_ctx;

static int write_fn(kv_txn *txn, void *payload, kv_err *err)
{
    write_ctx *c = payload;
    int rc = api_refresh_config(c->db, txn, err);
    if (!rc)
        rc = write_doc(c->db, txn, c->req, err);
    if (!rc)
        rc = idx_flush(c->db->iw, txn, err);
    if (rc && c->db->iw)
        idx_discard(c->db->iw);   /* the transaction aborts */
    return rc;
}

static int check_no_batch(kvfts_db *db)
{
    if (db->batch)
        return kv_seterr(&db->err, KVFTS_EINVAL,
                         "a batch is open on this handle; write through it "
                         "or free it first");
    return KVFTS_OK;
}

static int single_write(kvfts_db *db, write_req *r, const char *json,
                        size_t json_len)
{
    int rc = api_check_writable(db);
    if (!rc)
        rc = check_no_batch(db);
    if (!rc && r->auto_prefix)
        rc = check_auto_prefix(db, r->auto_prefix, r->auto_len, &db->err);
    kv_buf compact = KV_BUF_INIT;
    if (!rc)
        rc = prepare(db, r->key, r->key_len, json, json_len, &compact,
                     &db->err);
    if (!rc) {
        r->json = compact.data;
        r->json_len = compact.len;
        write_ctx c = { db, r };
        rc = kv_txn_run(db->env, true, write_fn, &c, &db->err);
    }
    kv_buf_free(&compact);
    return rc;
}

int kvfts_write(uint64_t *cas_out, kvfts_db *db, kvfts_write_mode mode,
                const char *key, size_t key_len, const char *json,
                size_t json_len, uint64_t cas)
{
    api_begin(db);
    if (mode != KVFTS_UPSERT && mode != KVFTS_INSERT && mode != KVFTS_REPLACE)
        return api_finish(db, kv_seterr(&db->err, KVFTS_EINVAL,
                                    "bad write mode %d", (int)mode));
    if (mode == KVFTS_INSERT && cas)
        return api_finish(db, kv_seterr(&db->err, KVFTS_EINVAL,
                                    "add takes no CAS: the document must "
                                    "not exist"));
    write_req r = { .mode = mode, .key = key, .key_len = key_len, .cas = cas };
    int rc = single_write(db, &r, json, json_len);
    if (!rc && cas_out)
        *cas_out = r.cas_out;
    return api_finish(db, rc);
}

int kvfts_put(uint64_t *cas_out, kvfts_db *db, const char *key, size_t key_len,
              const char *json, size_t json_len, uint64_t cas)
{
    return kvfts_write(cas_out, db, KVFTS_UPSERT, key, key_len, json,
                       json_len, cas);
}

int kvfts_add(uint64_t *cas_out, kvfts_db *db, const char *key, size_t key_len,
              const char *json, size_t json_len)
{
    return kvfts_write(cas_out, db, KVFTS_INSERT, key, key_len, json,
                       json_len, 0);
}

int kvfts_replace(uint64_t *cas_out, kvfts_db *db, const char *key,
                  size_t key_len, const char *json, size_t json_len,
                  uint64_t cas)
{
    return kvfts_write(cas_out, db, KVFTS_REPLACE, key, key_len, json,
                       json_len, cas);
}

int kvfts_put_auto(char **key_out, uint64_t *cas_out, kvfts_db *db,
                   const char *prefix, size_t prefix_len, const char *json,
                   size_t json_len)
{
    api_begin(db);
    *key_out = NULL;
    kv_buf k = KV_BUF_INIT;
    write_req r = { .mode = KVFTS_INSERT, .auto_prefix = prefix,
                    .auto_len = prefix_len, .key_out = &k };
    int rc = single_write(db, &r, json, json_len);
    if (!rc) {
        *key_out = k.data;   /* NUL-terminated, from kv_malloc */
        k.data = NULL;
        if (cas_out)
            *cas_out = r.cas_out;
    }
    kv_buf_free(&k);
    return api_finish(db, rc);
}

typedef struct del_req {
    kvfts_db *db;
    const char *key;
    size_t klen;
    uint64_t cas;
} del_req;

static int del_fn(kv_txn *txn, void *payload, kv_err *err)
{
    del_req *r = payload;
    kvfts_db *db = r->db;
    int rc = api_refresh_config(db, txn, err);
    if (rc)
        return rc;
    kv_doc old;
    rc = kv_doc_get(txn, r->key, r->klen, &db->old_rec, &old, true, err);
    if (rc == KVFTS_ENOTFOUND)
        return kv_seterr(err, rc, "doc '%.*s' not found", (int)r->klen,
                         r->key);
    if (rc)
        return rc;
    if (r->cas && old.cas != r->cas)
        return kv_seterr(err, KVFTS_ECAS,
                         "doc '%.*s': CAS mismatch (given %llu, stored %llu)",
                         (int)r->klen, r->key, (unsigned long long)r->cas,
                         (unsigned long long)old.cas);
    rc = idx_doc_prepare(db->iw, old.json, old.json_len, NULL, 0, err);
    if (!rc && db->cfg.nlookups) {
        rc = kv_lookup_collect(&db->old_lv, &db->cfg, old.json, old.json_len,
                               err);
        if (!rc)
            rc = kv_lookup_update(txn, r->key, r->klen, &db->old_lv, NULL,
                                  err);
    }
    if (!rc)
        rc = idx_doc_apply(db->iw, txn, old.docid, err);
    if (!rc)
        rc = kv_doc_del(txn, r->key, r->klen, old.docid, err);
    if (!rc)
        rc = idx_flush(db->iw, txn, err);
    if (rc)
        idx_discard(db->iw);
    return rc;
}

int kvfts_del(kvfts_db *db, const char *key, size_t key_len, uint64_t cas)
{
    api_begin(db);
    int rc = api_check_writable(db);
    if (!rc)
        rc = check_no_batch(db);
    if (!rc)
        rc = kv_key_check(key, key_len, db->cfg.lookup_names,
                          db->cfg.nlookups, &db->err);
    if (!rc) {
        del_req r = { db, key, key_len, cas };
        rc = kv_txn_run(db->env, true, del_fn, &r, &db->err);
    }
    return api_finish(db, rc);
}

/* ---- reads ------------------------------------------------------------- */


int api_docs_add(kvfts_docs *d, const char *key, size_t klen, int status,
                    const char *json, size_t jlen, uint64_t cas, kv_err *err)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 16;
        kvfts_doc *p = kv_realloc(d->docs, cap * sizeof *p);
        if (!p)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        d->docs = p;
        d->cap = cap;
    }
    kvfts_doc *x = &d->docs[d->n];
    memset(x, 0, sizeof *x);
    x->key = (const char *)(uintptr_t)d->arena.len;   /* offset for now */
    x->key_len = klen;
    int rc = kv_buf_append(&d->arena, key, klen, err);
    if (!rc)
        rc = kv_buf_append(&d->arena, "", 1, err);
    if (!rc && status == KVFTS_OK) {
        x->json = (const char *)(uintptr_t)d->arena.len;
        x->json_len = jlen;
        rc = kv_buf_append(&d->arena, json, jlen, err);
        if (!rc)
            rc = kv_buf_append(&d->arena, "", 1, err);
    }
    if (rc)
        return rc;
    x->status = status;
    x->cas = cas;
    d->n++;
    return KVFTS_OK;
}

void api_docs_fix(kvfts_docs *d)
{
    for (size_t i = 0; i < d->n; i++) {
        kvfts_doc *x = &d->docs[i];
        x->key = d->arena.data + (uintptr_t)x->key;
        if (x->status == KVFTS_OK)
            x->json = d->arena.data + (uintptr_t)x->json;
    }
}

void kvfts_docs_free(kvfts_docs *d)
{
    if (!d)
        return;
    kv_free(d->docs);
    kv_buf_free(&d->arena);
    kv_free(d);
}

size_t kvfts_docs_count(const kvfts_docs *d)
{
    return d ? d->n : 0;
}

const kvfts_doc *kvfts_docs_at(const kvfts_docs *d, size_t i)
{
    return d && i < d->n ? &d->docs[i] : NULL;
}

/* Read one key into d; a missing one is recorded (or skipped). */
int api_get_into(kv_txn *txn, kvfts_docs *d, kv_buf *rec, const char *key,
                    size_t klen, bool skip_missing, kv_err *err)
{
    kv_doc doc;
    int rc = kv_doc_get(txn, key, klen, rec, &doc, false, err);
    if (rc == KVFTS_ENOTFOUND) {
        if (skip_missing)
            return KVFTS_OK;
        return api_docs_add(d, key, klen, KVFTS_ENOTFOUND, NULL, 0, 0, err);
    }
    if (rc)
        return rc;
    return api_docs_add(d, key, klen, KVFTS_OK, doc.json, doc.json_len, doc.cas,
                    err);
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
        rc = check_no_batch(db);
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

/* ---- batches ----------------------------------------------------------- */

int kvfts_batch_begin(kvfts_batch **out, kvfts_db *db)
{
    api_begin(db);
    *out = NULL;
    int rc = api_check_writable(db);
    if (!rc)
        rc = check_no_batch(db);
    if (rc)
        return api_finish(db, rc);
    kvfts_batch *b = kv_calloc(1, sizeof *b);
    if (!b)
        return api_finish(db, kv_seterr(&db->err, KVFTS_ENOMEM, "out of memory"));
    b->db = db;
    db->batch = b;
    idx_writer_buffering(db->iw, true);
    kvfts_batch_set_mem(b, 0);
    *out = b;
    return KVFTS_OK;
}

size_t kvfts_batch_pending(const kvfts_batch *b)
{
    return b ? b->pending : 0;
}

#define DEFAULT_BATCH_MEM (256u * 1024u * 1024u)

void kvfts_batch_set_mem(kvfts_batch *b, size_t bytes)
{
    b->mem = bytes ? bytes : DEFAULT_BATCH_MEM;
    /* The writer merges into the transaction by itself only at twice the
     * bound: a caller that commits when kvfts_batch_full() says so never
     * pays for a merge that a commit would have done anyway. */
    idx_writer_set_mem(b->db->iw, b->mem * 2);
}

bool kvfts_batch_full(const kvfts_batch *b)
{
    return idx_buffered_bytes(b->db->iw) + b->log.len >= b->mem;
}

static void batch_rollback(kvfts_batch *b)
{
    kv_txn_abort(b->txn);
    b->txn = NULL;
    if (b->db->iw)
        idx_discard(b->db->iw);
    kv_buf_reset(&b->log);
    b->pending = 0;
}

static int batch_txn(kvfts_batch *b, kv_err *err)
{
    if (b->txn)
        return KVFTS_OK;
    int rc = kv_txn_begin(&b->txn, b->db->env, true, err);
    if (!rc)
        rc = api_refresh_config(b->db, b->txn, err);
    return rc;
}

/* Write one item of the log (or a new one) in the open transaction. */
static int batch_apply(kvfts_batch *b, const batch_item *it, const char *key,
                       const char *json, kv_buf *key_out, kv_err *err)
{
    write_req r = { .mode = (kvfts_write_mode)it->mode, .json = json,
                    .json_len = it->json_len, .key_out = key_out };
    if (it->is_auto) {
        r.auto_prefix = key;
        r.auto_len = it->key_len;
    } else {
        r.key = key;
        r.key_len = it->key_len;
    }
    return write_doc(b->db, b->txn, &r, err);
}

/* After a deadlock: a fresh transaction with everything re-applied. */
static int batch_replay(kvfts_batch *b, kv_err *err)
{
    kv_txn_abort(b->txn);
    b->txn = NULL;
    idx_discard(b->db->iw);
    int rc = batch_txn(b, err);
    size_t off = 0;
    for (size_t i = 0; i < b->pending && !rc; i++) {
        batch_item it;
        memcpy(&it, b->log.data + off, sizeof it);
        const char *key = b->log.data + off + sizeof it;
        const char *json = key + it.key_len;
        rc = batch_apply(b, &it, key, json, NULL, err);
        off += sizeof it + it.key_len + it.json_len;
    }
    return rc;
}

static int batch_flush(kvfts_batch *b, kv_err *err);

/* A failure after the batch wrote: roll it all back and say so. */
static int batch_fail(kvfts_batch *b, int rc, kv_err *err)
{
    size_t lost = b->pending;
    batch_rollback(b);
    if (rc == KV_RETRY)
        rc = kv_seterr(err, KVFTS_EBUSY, "deadlock persisted");
    kv_err_prefix(err, "batch rolled back (%zu uncommitted write(s) lost)",
                  lost);
    return rc;
}

static int batch_split_commit(kvfts_batch *b, kv_err *err);

static int batch_write(kvfts_batch *b, const batch_item *it, const char *key,
                       const char *json, kv_buf *key_out)
{
    kvfts_db *db = b->db;
    kv_err *err = &db->err;
    bool replayed_ok = true;   /* a failed replay loses the batch */
    int rc = batch_txn(b, err);
    if (!rc)
        rc = batch_apply(b, it, key, json, key_out, err);
    for (int attempt = 0; rc == KV_RETRY && attempt < BATCH_RETRIES;
         attempt++) {
        rc = batch_replay(b, err);
        replayed_ok = rc == KVFTS_OK;
        if (replayed_ok)
            rc = batch_apply(b, it, key, json, key_out, err);
    }
    if (rc == KVFTS_ENOMEM && b->split && b->pending > 0) {
        /* Out of cache: commit what came before, then this one afresh. */
        rc = batch_split_commit(b, err);
        if (!rc)
            rc = batch_txn(b, err);
        if (!rc)
            rc = batch_apply(b, it, key, json, key_out, err);
    }
    if (replayed_ok && (rc == KVFTS_EINVAL || rc == KVFTS_EEXISTS ||
                        rc == KVFTS_ENOTFOUND || rc == KVFTS_ECAS))
        return rc;          /* refused before any write: batch intact */
    if (rc)
        return batch_fail(b, rc, err);
    /* Record the write for replay. */
    size_t need = sizeof *it + it->key_len + it->json_len;
    rc = kv_buf_reserve(&b->log, need, err);
    if (rc) {
        batch_rollback(b);
        return rc;
    }
    memcpy(b->log.data + b->log.len, it, sizeof *it);
    memcpy(b->log.data + b->log.len + sizeof *it, key, it->key_len);
    memcpy(b->log.data + b->log.len + sizeof *it + it->key_len, json,
           it->json_len);
    b->log.len += need;
    b->pending++;
    if (idx_flush_due(b->db->iw))
        return batch_flush(b, err);
    return KVFTS_OK;
}

int kvfts_batch_write(kvfts_batch *b, kvfts_write_mode mode, const char *key,
                      size_t key_len, const char *json, size_t json_len)
{
    kvfts_db *db = b->db;
    api_begin(db);
    if (mode != KVFTS_UPSERT && mode != KVFTS_INSERT && mode != KVFTS_REPLACE)
        return api_finish(db, kv_seterr(&db->err, KVFTS_EINVAL,
                                    "bad write mode %d", (int)mode));
    int rc = prepare(db, key, key_len, json, json_len, &b->json, &db->err);
    if (rc)
        return api_finish(db, rc);
    batch_item it = { (unsigned)mode, 0, key_len, b->json.len };
    return api_finish(db, batch_write(b, &it, key, b->json.data, NULL));
}

/* ---- key templates ("pkg::{package}") ----------------------------------- */

#define TMPL_MAX_FIELDS 8

typedef struct tmpl {
    const char *text;
    size_t len;
    size_t nfields;
    size_t start[TMPL_MAX_FIELDS];   /* offset of '{' */
    size_t end[TMPL_MAX_FIELDS];     /* offset just past '}' */
    kv_buf val[TMPL_MAX_FIELDS];     /* the value found, if found */
    bool found[TMPL_MAX_FIELDS];
    kv_err *err;
} tmpl;

static int tmpl_parse(tmpl *t, const char *text, size_t len, kv_err *err)
{
    memset(t, 0, sizeof *t);
    t->text = text;
    t->len = len;
    t->err = err;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '}')
            return kv_seterr(err, KVFTS_EINVAL,
                             "key template '%.*s': '}' without '{' at "
                             "byte %zu", (int)len, text, i);
        if (text[i] != '{')
            continue;
        const char *close = memchr(text + i, '}', len - i);
        if (!close)
            return kv_seterr(err, KVFTS_EINVAL,
                             "key template '%.*s': '{' at byte %zu is not "
                             "closed", (int)len, text, i);
        size_t e = (size_t)(close - text) + 1;
        if (e - i == 2)
            return kv_seterr(err, KVFTS_EINVAL,
                             "key template '%.*s': empty '{}' at byte %zu",
                             (int)len, text, i);
        if (t->nfields == TMPL_MAX_FIELDS)
            return kv_seterr(err, KVFTS_EINVAL,
                             "key template '%.*s': more than %d fields",
                             (int)len, text, TMPL_MAX_FIELDS);
        t->start[t->nfields] = i;
        t->end[t->nfields] = e;
        t->nfields++;
        i = e - 1;
    }
    return KVFTS_OK;
}

static void tmpl_free(tmpl *t)
{
    for (size_t i = 0; i < t->nfields; i++)
        kv_buf_free(&t->val[i]);
}

static int tmpl_leaf(void *payload, const char *path, size_t path_len,
                     kv_json_type type, const char *value, size_t value_len,
                     size_t pos)
{
    (void)pos;
    tmpl *t = payload;
    if (type == KV_JSON_NULL)
        return KVFTS_OK;
    for (size_t i = 0; i < t->nfields; i++) {
        size_t fl = t->end[i] - t->start[i] - 2;
        if (t->found[i] || fl != path_len ||
            memcmp(t->text + t->start[i] + 1, path, path_len) != 0)
            continue;
        t->found[i] = true;   /* the first value wins (arrays) */
        int rc = kv_buf_append(&t->val[i], value, value_len, t->err);
        if (rc)
            return rc;
    }
    return KVFTS_OK;
}

static int tmpl_build(tmpl *t, kv_buf *key, kv_err *err)
{
    kv_buf_reset(key);
    size_t at = 0;
    int rc = KVFTS_OK;
    for (size_t i = 0; i < t->nfields && !rc; i++) {
        if (!t->found[i])
            return kv_seterr(err, KVFTS_EINVAL,
                             "key template '%.*s': the document has no "
                             "value at '%.*s'", (int)t->len, t->text,
                             (int)(t->end[i] - t->start[i] - 2),
                             t->text + t->start[i] + 1);
        rc = kv_buf_append(key, t->text + at, t->start[i] - at, err);
        if (!rc)
            rc = kv_buf_append(key, t->val[i].data ? t->val[i].data : "",
                               t->val[i].len, err);
        at = t->end[i];
    }
    if (!rc)
        rc = kv_buf_append(key, t->text + at, t->len - at, err);
    return rc;
}

int kvfts_batch_write_template(char **key_out, kvfts_batch *b,
                               kvfts_write_mode mode,
                               const char *key_template, size_t template_len,
                               const char *json, size_t json_len)
{
    kvfts_db *db = b->db;
    api_begin(db);
    if (key_out)
        *key_out = NULL;
    if (mode != KVFTS_UPSERT && mode != KVFTS_INSERT && mode != KVFTS_REPLACE)
        return api_finish(db, kv_seterr(&db->err, KVFTS_EINVAL,
                                    "bad write mode %d", (int)mode));
    tmpl t;
    kv_buf key = KV_BUF_INIT;
    int rc = tmpl_parse(&t, key_template, template_len, &db->err);
    if (!rc) {
        kv_buf_reset(&b->json);
        rc = kv_json_walk(json, json_len, &b->json, tmpl_leaf, &t, &db->err);
    }
    if (!rc)
        rc = tmpl_build(&t, &key, &db->err);
    if (!rc)
        rc = kv_key_check(key.data, key.len, db->cfg.lookup_names,
                          db->cfg.nlookups, &db->err);
    if (!rc) {
        batch_item it = { (unsigned)mode, 0, key.len, b->json.len };
        rc = batch_write(b, &it, key.data, b->json.data, NULL);
    }
    if (!rc && key_out) {
        *key_out = key.data;
        key.data = NULL;
    }
    tmpl_free(&t);
    kv_buf_free(&key);
    return api_finish(db, rc);
}

int kvfts_batch_write_auto(char **key_out, kvfts_batch *b, const char *prefix,
                           size_t prefix_len, const char *json,
                           size_t json_len)
{
    kvfts_db *db = b->db;
    api_begin(db);
    if (key_out)
        *key_out = NULL;
    int rc = check_auto_prefix(db, prefix, prefix_len, &db->err);
    if (!rc)
        rc = prepare(db, NULL, 0, json, json_len, &b->json, &db->err);
    if (rc)
        return api_finish(db, rc);
    kv_buf k = KV_BUF_INIT;
    batch_item it = { KVFTS_INSERT, 1, prefix_len, b->json.len };
    rc = batch_write(b, &it, prefix, b->json.data, &k);
    if (!rc && key_out) {
        *key_out = k.data;
        k.data = NULL;
    }
    kv_buf_free(&k);
    return api_finish(db, rc);
}

/* Merge the buffered postings into the index inside the batch's
 * transaction; a deadlock replays the batch and merges again. */
static int batch_flush(kvfts_batch *b, kv_err *err)
{
    int rc = idx_flush(b->db->iw, b->txn, err);
    for (int attempt = 0; rc == KV_RETRY && attempt < BATCH_RETRIES;
         attempt++) {
        rc = batch_replay(b, err);
        if (!rc)
            rc = idx_flush(b->db->iw, b->txn, err);
    }
    return rc ? batch_fail(b, rc, err) : KVFTS_OK;
}

/* Replay items [first, first + n) of the log (the first at byte off) in a
 * transaction of their own and commit it.  Out of cache again: the two
 * halves, each in its own transaction. */
static int batch_commit_part(kvfts_batch *b, size_t first, size_t off,
                             size_t n, kv_err *err)
{
    int rc;
    for (int attempt = 0;; attempt++) {
        idx_discard(b->db->iw);
        rc = batch_txn(b, err);
        size_t o = off;
        for (size_t i = 0; i < n && !rc; i++) {
            batch_item it;
            memcpy(&it, b->log.data + o, sizeof it);
            const char *key = b->log.data + o + sizeof it;
            rc = batch_apply(b, &it, key, key + it.key_len, NULL, err);
            o += sizeof it + it.key_len + it.json_len;
        }
        if (!rc)
            rc = idx_flush(b->db->iw, b->txn, err);
        if (!rc) {
            rc = kv_txn_commit(b->txn, err);
            b->txn = NULL;
            return rc;
        }
        kv_txn_abort(b->txn);
        b->txn = NULL;
        if (rc != KV_RETRY || attempt + 1 >= BATCH_RETRIES)
            break;
    }
    if (rc != KVFTS_ENOMEM || n < 2)
        return rc;
    size_t half = n / 2, o = off;
    for (size_t i = 0; i < half; i++) {
        batch_item it;
        memcpy(&it, b->log.data + o, sizeof it);
        o += sizeof it + it.key_len + it.json_len;
    }
    kv_err_clear(err);
    rc = batch_commit_part(b, first, off, half, err);
    return rc ? rc : batch_commit_part(b, first + half, o, n - half, err);
}

/* More pages changed than the cache holds (under MVCC a changed page
 * keeps its old version until commit): commit the log in parts, and make
 * later batches half as big. */
static int batch_split_commit(kvfts_batch *b, kv_err *err)
{
    kv_txn_abort(b->txn);
    b->txn = NULL;
    kv_err_clear(err);
    int rc = batch_commit_part(b, 0, 0, b->pending, err);
    if (b->mem > 2u * 1024u * 1024u)
        kvfts_batch_set_mem(b, b->mem / 2);
    b->parts++;
    if (!rc) {
        kv_buf_reset(&b->log);
        b->pending = 0;
    }
    return rc;
}

int kvfts_batch_commit(kvfts_batch *b)
{
    kvfts_db *db = b->db;
    api_begin(db);
    if (!b->txn)
        return KVFTS_OK;
    int rc = idx_flush(db->iw, b->txn, &db->err);
    for (int attempt = 0; rc == KV_RETRY && attempt < BATCH_RETRIES;
         attempt++) {
        rc = batch_replay(b, &db->err);     /* a deadlock: again */
        if (!rc)
            rc = idx_flush(db->iw, b->txn, &db->err);
    }
    if (!rc) {
        rc = kv_txn_commit(b->txn, &db->err);
        b->txn = NULL;
    }
    if (rc == KVFTS_ENOMEM && b->split && b->pending > 1)
        rc = batch_split_commit(b, &db->err);
    if (rc)
        return api_finish(db, batch_fail(b, rc, &db->err));
    kv_buf_reset(&b->log);
    b->pending = 0;
    return api_finish(db, rc);
}

void kvfts_batch_set_split(kvfts_batch *b, bool on)
{
    b->split = on;
}

size_t kvfts_batch_split_commits(const kvfts_batch *b)
{
    return b ? b->parts : 0;
}

void kvfts_batch_free(kvfts_batch *b)
{
    if (!b)
        return;
    batch_rollback(b);
    if (b->db->batch == b)
        b->db->batch = NULL;
    idx_writer_buffering(b->db->iw, false);
    idx_writer_set_mem(b->db->iw, 0);
    kv_buf_free(&b->log);
    kv_buf_free(&b->json);
    kv_free(b);
}

/* ---- statistics -------------------------------------------------------- */

static int stats_fn(kv_txn *txn, void *payload, kv_err *err)
{
    kvfts_stats *s = payload;
    int rc = kv_count(txn, KV_DOCS, &s->documents, err);
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
    }
    kv_buf v = KV_BUF_INIT;
    if (!rc)
        rc = kv_get(txn, KV_META, IDX_SKIPPED_KEY, strlen(IDX_SKIPPED_KEY), &v,
                    false, err);
    if (rc == KVFTS_OK && v.len == 8)
        s->skipped_tokens = kv_get_be64((const unsigned char *)v.data);
    if (rc == KVFTS_ENOTFOUND)
        rc = KVFTS_OK;
    kv_buf_free(&v);
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
