/*
 * kvfts_core.c -- the bottom of the glue that implements include/kvfts.h:
 * status codes and messages, the start and end of every public call, the
 * handle's copy of the stored configuration, and the multi-get result sets
 * that reads, lookups and searches fill.  The other lib/kvfts_*.c files call
 * into this one and never the other way round.
 *
 * A kvfts_db is one handle: a view of the shared environment, the parsed
 * configuration, and a kv_err whose message kvfts_errmsg() returns.  Every
 * public function clears the error first (api_begin) and leaves a message
 * on failure (api_finish).
 */
#include "kvfts_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    case KVFTS_EROLLBACK: return "batch rolled back";
    case KVFTS_ELIMIT: return "search bound reached";
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
    db->leaves_of = NULL;
}

const char *kvfts_warning(const kvfts_db *db)
{
    return db ? db->warning : "";
}

void kvfts_warning_clear(kvfts_db *db)
{
    if (db)
        db->warning[0] = '\0';
}

int api_finish(kvfts_db *db, int rc)
{
    /* A write that committed and then met a failure that does not undo it
     * (a checkpoint on a full disk): the latest one is kept. */
    if (db->env)
        kv_env_take_warning(db->env, db->warning, sizeof db->warning);
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

int api_check_no_batch(kvfts_db *db)
{
    if (db->batch)
        return kv_seterr(&db->err, KVFTS_EINVAL,
                         "a batch is open on this handle; write through it "
                         "or free it first");
    return KVFTS_OK;
}

/* ---- configuration ----------------------------------------------------- */

/* Load the stored config if it differs from the cached one (not even read
 * when the transaction's commit stamp says nothing was committed since the
 * last read). */
int api_refresh_config(kvfts_db *db, kv_txn *txn, kv_err *err)
{
    uint64_t stamp = kv_txn_stamp(txn);
    if (stamp && db->iw && stamp == db->cfg_stamp)
        return KVFTS_OK;
    db->cfg_stamp = 0;
    kv_buf v = KV_BUF_INIT;
    int rc = kv_get(txn, KV_META, API_CONFIG_KEY, strlen(API_CONFIG_KEY), &v, false,
                    err);
    if (rc == KVFTS_ENOTFOUND) {
        rc = KVFTS_OK;
        v.len = 0;
    }
    if (rc)
        goto done;
    if (db->iw && v.len == db->cfg_json.len &&
        (v.len == 0 || memcmp(v.data, db->cfg_json.data, v.len) == 0)) {
        db->cfg_stamp = stamp;
        goto done;
    }
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
        rc = idx_writer_new(&iw, v.data ? v.data : "", v.len, 0, err);
    if (!rc && db->batch)
        rc = idx_writer_workers(iw, db->batch_workers, err);
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
    if (db->batch)
        idx_writer_set_mem(iw, db->batch_mem * 2);
    kv_buf_reset(&db->cfg_json);
    rc = kv_buf_append(&db->cfg_json, v.data ? v.data : "", v.len, err);
    if (!rc)
        db->cfg_stamp = stamp;
done:
    kv_buf_free(&v);
    return rc;
}

int api_drop_sweep(kvfts_db *db, kv_err *err)
{
    /* A file some process reads stays listed; the next sweep tries
     * again. */
    uint32_t left;
    return idx_drop_sweep(db->env, &left, err);
}

void api_drop_sweep_warn(kvfts_db *db)
{
    kv_err e = KV_ERR_INIT;
    if (api_drop_sweep(db, &e))
        snprintf(db->warning, sizeof db->warning, "the write is committed, "
                 "but removing replaced segments' files failed (the next "
                 "merge tries again): %s", e.msg);
}

/* The environment variable @p name in kilobytes (1 .. 1 GiB), as bytes;
 * 0 if it is unset or out of range. */
static uint64_t env_kb(const char *name)
{
    const char *e = getenv(name);
    long kb = e && *e ? atol(e) : 0;
    return kb > 0 && kb < 1024L * 1024 ? (uint64_t)kb * 1024u : 0;
}

uint64_t api_merge_step_bytes(void)
{
    uint64_t b = env_kb("KVFTS_MERGE_STEP_KB");
    return b ? b : API_MERGE_STEP_BYTES;
}

/* KVFTS_MERGE_RANGE_KB (tests): kilobytes of input per range of a merge
 * done whole, every such merge's output a file of its own; 0 if unset. */
static uint64_t merge_range_bytes(void)
{
    return env_kb("KVFTS_MERGE_RANGE_KB");
}

uint64_t api_merge_once_bytes(void)
{
    if (merge_range_bytes())
        return UINT64_MAX;
    const char *e = getenv("KVFTS_MERGE_STEP_KB");
    return e && *e ? 0 : API_MERGE_ONCE_BYTES;
}

typedef struct merge_req {
    idx_merge_opts o;
    int more;
    idx_merge_stats st;
} merge_req;

static int merge_fn(kv_txn *txn, void *payload, kv_err *err)
{
    merge_req *m = payload;
    bool more = false;
    int rc = idx_merge_step(txn, &m->o, &more, err);
    m->more = more;
    if (!rc)
        rc = idx_merge_stats_get(txn, &m->st, err);
    return rc;
}

int api_merge_step(kvfts_db *db, bool all, uint64_t bytes, uint64_t once,
                   int *more, idx_merge_stats *st, kv_err *err)
{
    /* A merge done whole after a batch: on every core (on more threads
     * than cores, ranges held in memory grow, not speed).  Not asked of
     * single writes, which merge after every one. */
    unsigned helpers = 0;
    if (once && db->batch_workers) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        helpers = cores > 1 ? (unsigned)(cores - 1) : 0;
    }
    merge_req m = { { all, bytes, once, once ? merge_range_bytes() : 0,
                      helpers }, 0, { 0 } };
    int rc = kv_txn_run(db->env, true, merge_fn, &m, err);
    if (!rc && m.st.dropping)   /* no extra transaction when none wait */
        rc = api_drop_sweep(db, err);
    *more = m.more;
    if (st)
        *st = m.st;
    return rc;
}

int api_load_config_fn(kv_txn *txn, void *payload, kv_err *err)
{
    return api_refresh_config(payload, txn, err);
}

int api_config_json(const char **json, size_t *len, kvfts_db *db)
{
    api_begin(db);
    int rc = kv_txn_run(db->env, false, api_load_config_fn, db, &db->err);
    if (rc)
        return api_finish(db, rc);
    *json = db->cfg_json.data ? db->cfg_json.data : "";
    *len = db->cfg_json.len;
    return KVFTS_OK;
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

