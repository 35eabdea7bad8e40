/*
 * kvfts_write.c -- the write path of the public API: single writes (put,
 * add, replace, auto keys, delete) and batches.
 *
 * A write (write_doc) changes a document, its lookups, its CAS and id
 * sequences and its index entries together or not at all.  It checks
 * everything before it writes anything:
 *   1. outside the transaction: validate and compact the JSON, check its
 *      field paths as the analysis will (so that analysis, maybe later in
 *      another thread, cannot refuse it) and keep its leaves for that
 *      analysis (db->leaves: it need not parse the JSON again), check the
 *      key's form;
 *   2. in the transaction, with the config the transaction reads: the key
 *      against the reserved prefixes and declared lookups; the old version
 *      (read with a write lock) against add/replace/CAS; for a new
 *      document, an id left; the unique lookups;
 *   3. only then the writes: lookups, the auto-key counter, the sequences,
 *      the document record, and the change handed to the index writer (a
 *      batch holds a new document's key record, and with analysis threads
 *      its document record, until it writes the index buffer: then they
 *      are stored sorted, kv_pending_keys in lib/kv/).
 * A refusal (KVFTS_EINVAL, _EEXISTS, _ENOTFOUND, _ECAS) happens in step 1
 * or 2 and leaves nothing behind, so a batch refuses one document and goes
 * on.  A failure in step 3 (disk full, out of memory, a damaged record)
 * rolls the transaction back: for a batch that is KVFTS_EROLLBACK, a status
 * of its own, never to be mistaken for a refusal.  (Berkeley DB's child
 * transactions would give the same guarantee for any order; checking first
 * gives it without the cost of a child transaction per document.)
 *
 * The index: every write hands the document's old and new version to the
 * handle's idx_writer, which buffers the change; the transaction writes
 * the buffer as one new segment before it commits (index/idx_write.c).  A
 * batch analyzes in worker threads, one per core beyond the caller's, while
 * the caller's thread checks, writes records and compresses documents.
 * After a commit, a bounded amount of merge work runs (api_merge_some), so
 * that segments do not pile up.
 *
 * Batches keep a replay log of what they applied since the last commit:
 * when Berkeley DB picks the batch as a deadlock victim (or another
 * process's recovery resets the environment), the transaction is aborted,
 * begun again and the log replayed, so callers never see KV_RETRY.
 */
#include "kvfts_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Merge work after a single write, and after a batch's commit: a step
 * writes at most API_MERGE_STEP_BYTES; after a batch, at most as many steps
 * as the batch had megabytes of buffered index (so merging keeps pace with
 * loading), at least one. */
#define SINGLE_MERGE_BYTES (256u * 1024u)
/* A buffered change that must be written before this write: internal. */
#define KV_FLUSH (-102)

typedef struct write_req {
    kvfts_write_mode mode;
    const char *key;         /* NULL with auto_prefix */
    size_t key_len;
    const char *auto_prefix; /* key = PREFIX::<count::PREFIX + 1> */
    size_t auto_len;
    const char *json;        /* compact, validated; NULL: delete */
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
    size_t flushed;          /* index bytes flushed since the commit */
    kv_pending_keys keys;    /* new documents' key records, stored with
                                the index buffer (batch_segment) */
};

/* ---- step 1: outside the transaction ----------------------------------- */

/* The check of each leaf's path, which also keeps the leaves (db->leaves)
 * for the analysis: it then reads them instead of parsing the JSON a
 * second time (yajl and its callbacks were 5% of a GCIDE load). */
typedef struct path_check {
    kvfts_db *db;
    kv_err *err;
} path_check;

static int check_path(void *payload, const char *path, size_t plen,
                      kv_json_type type, const char *v, size_t vlen,
                      size_t pos)
{
    path_check *c = payload;
    if (type == KV_JSON_NULL || !c->db->an)
        return KVFTS_OK;
    int rc = tok_analysis_check_path(c->db->an, path, plen, pos, c->err);
    return rc ? rc : kv_leaves_add(&c->db->leaves, path, plen, type, v, vlen,
                                   pos, c->err);
}

/* Validate and compact json into @p compact (reset first) with @p leaf
 * (check_path, or a walker that calls it) on each leaf; the leaves kept
 * are then those of the compact form (which the walk may have moved). */
static int walk_keeping_leaves(kvfts_db *db, const char *json, size_t len,
                               kv_buf *compact, kv_json_leaf_fn leaf,
                               void *payload, kv_err *err)
{
    kv_buf_reset(compact);
    kv_buf_reset(&db->leaves);
    db->leaves_of = NULL;
    int rc = kv_json_walk(json, len, compact, leaf, payload, err);
    if (!rc && db->an) {
        db->leaves_of = compact->data;
        db->leaves_of_len = compact->len;
    }
    return rc;
}

/* Key form and JSON (validated, compacted, field paths checked). */
static int prepare(kvfts_db *db, const char *key, size_t key_len,
                   const char *json, size_t json_len, kv_buf *compact,
                   kv_err *err)
{
    int rc;
    if (key) {
        /* Its form only: the reserved lookup prefixes are checked in the
         * transaction, against the config it reads (write_doc), not the
         * handle's cached one, which another handle may have changed. */
        rc = kv_key_check(key, key_len, NULL, 0, err);
        if (rc)
            return rc;
    }
    path_check pc = { db, err };
    rc = walk_keeping_leaves(db, json, json_len, compact, check_path, &pc,
                             err);
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
    (void)db;   /* the lookup prefixes: in the transaction (write_doc) */
    return kv_key_check(probe, plen + 3, NULL, 0, err);
}

/* ---- steps 2 and 3: in the transaction --------------------------------- */

/* A refusal: the write changed nothing, the transaction is intact. */
static bool refused(int rc)
{
    return rc == KVFTS_EINVAL || rc == KVFTS_EEXISTS ||
           rc == KVFTS_ENOTFOUND || rc == KVFTS_ECAS;
}

/* What a write that landed tells its caller: its CAS and key. */
static int written(write_req *r, const char *key, size_t klen, uint64_t cas,
                   kv_err *err)
{
    r->cas_out = cas;
    if (!r->key_out)
        return KVFTS_OK;
    kv_buf_reset(r->key_out);
    return kv_buf_append(r->key_out, key, klen, err);
}

static int write_doc(kvfts_db *db, kv_txn *txn, write_req *r, kv_err *err)
{
    bool writing = false;     /* past the last check: nothing refuses */
    kv_buf autok = KV_BUF_INIT;
    const char *key = r->key;
    size_t klen = r->key_len;
    int64_t counter = 0;
    int rc = KVFTS_OK;
    if (r->auto_prefix) {
        rc = kv_counter_get(txn, r->auto_prefix, r->auto_len, &counter, true,
                            err);
        if (rc == KVFTS_ENOTFOUND) {
            counter = 0;
            rc = KVFTS_OK;
        }
        if (!rc && counter == INT64_MAX)
            rc = kv_seterr(err, KVFTS_EINVAL, "counter count::%.*s is at "
                           "its largest value", (int)r->auto_len,
                           r->auto_prefix);
        if (!rc)
            rc = kv_buf_appendf(&autok, err, "%.*s::%lld", (int)r->auto_len,
                                r->auto_prefix, (long long)counter + 1);
        if (rc)
            goto done;
        key = autok.data;
        klen = autok.len;
    }
    /* The key against the config this transaction reads (another handle
     * may have declared a lookup since this one's cached config). */
    rc = kv_key_check(key, klen, db->cfg.lookup_names, db->cfg.nlookups, err);
    if (rc)
        goto done;
    kv_doc old = { 0 };
    /* A document whose change is still in the index buffer must become
     * part of a segment first: a change per document per segment, and its
     * record may not be stored yet (with analysis threads, they encode it
     * and the flush stores it). */
    kv_pending_keys *held = db->batch ? &db->batch->keys : NULL;
    if (held && kv_pending_key_has(held, key, klen)) {
        rc = KV_FLUSH;      /* new in this batch, its key record held */
        goto done;
    }
    uint32_t have = 0;
    rc = kv_key_docid(txn, key, klen, &have, true, err);
    if (!rc && idx_doc_buffered(db->iw, have)) {
        rc = KV_FLUSH;
        goto done;
    }
    if (!rc)
        rc = kv_doc_get_keyed(txn, key, klen, have, &db->old_rec, &old, true,
                              err);
    bool exists = rc == KVFTS_OK;
    if (rc && rc != KVFTS_ENOTFOUND)
        goto done;
    rc = KVFTS_OK;
    if (!r->json && !exists) {
        rc = kv_seterr(err, KVFTS_ENOTFOUND, "doc '%.*s' not found",
                       (int)klen, key);
        goto done;
    }
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
    if (exists && r->json && r->json_len == old.json_len &&
        memcmp(r->json, old.json, r->json_len) == 0) {
        /* The content as stored (a reload of documents that did not
         * change): its index entries, lengths and lookups stand; the write
         * is its record stored again with a new CAS, nothing analyzed or
         * compressed (as Elasticsearch's no-op updates, but the write
         * still counts: a new CAS). */
        writing = true;
        uint64_t cas = 0;
        rc = kv_seq_next(txn, "cas", &cas, err);
        if (!rc)
            rc = kv_doc_put_recas(txn, &old, &db->old_rec, cas, err);
        if (!rc)
            rc = written(r, key, klen, cas, err);
        goto done;
    }
    if (!exists) {
        bool room = false;
        rc = kv_seq_room(txn, "docid", UINT32_MAX, &room, err);
        if (!rc && !room)
            rc = kv_seterr(err, KVFTS_EINVAL, "doc ids exhausted");
        if (rc)
            goto done;
    }
    if (db->cfg.nlookups) {
        kv_lookup_vals_free(&db->old_lv);
        if (exists)
            rc = kv_lookup_collect(&db->old_lv, &db->cfg, old.json,
                                   old.json_len, err);
        if (!rc && r->json)
            rc = kv_lookup_collect(&db->new_lv, &db->cfg, r->json,
                                   r->json_len, err);
        /* checks every unique constraint, and writes only if all hold */
        if (!rc)
            rc = kv_lookup_update(txn, key, klen, exists ? &db->old_lv : NULL,
                                  r->json ? &db->new_lv : NULL, err);
        if (rc) {
            if (rc != KV_RETRY)
                kv_err_prefix(err, "doc '%.*s'", (int)klen, key);
            goto done;
        }
    }
    /* From here on nothing refuses: a failure rolls back. */
    writing = true;
    if (r->auto_prefix) {
        int64_t now;
        rc = kv_counter_incr(txn, r->auto_prefix, r->auto_len, 1, NULL, &now,
                             err);
    }
    if (!r->json) {
        if (!rc)
            rc = idx_doc_write(db->iw, old.docid, old.json, old.json_len,
                               NULL, 0, NULL, 0, err);
        if (!rc)
            rc = kv_doc_del(txn, key, klen, old.docid, err);
        goto done;
    }
    kv_doc nd = { .docid = old.docid, .json = r->json,
                  .json_len = r->json_len };
    if (!rc)
        rc = kv_seq_next(txn, "cas", &nd.cas, err);
    if (!rc && !exists) {
        uint64_t id;
        rc = kv_seq_next_max(txn, "docid", UINT32_MAX, &id, err);
        nd.docid = (uint32_t)id;
    }
    /* The leaves kept when this JSON was checked, if it was this call's */
    bool kept = db->leaves_of == r->json && db->leaves_of_len == r->json_len;
    const char *lv = kept ? db->leaves.data : NULL;
    size_t lvl = kept ? db->leaves.len : 0;
    if (!rc && idx_writer_defers_records(db->iw)) {
        /* the record is encoded by an analysis thread, stored at flush */
        idx_docrec dr = { key, klen, nd.cas, { NULL, false } };
        rc = kv_doc_coder_get(txn, r->json, r->json_len, &dr.coder, err);
        if (!rc)
            rc = idx_doc_write_rec(db->iw, nd.docid, exists ? old.json : NULL,
                                   old.json_len, r->json, r->json_len, lv,
                                   lvl, &dr, err);
    } else if (!rc) {
        rc = idx_doc_write(db->iw, nd.docid, exists ? old.json : NULL,
                           old.json_len, r->json, r->json_len, lv, lvl,
                           err);
        if (!rc)
            rc = kv_doc_put(txn, key, klen, &nd, !exists && !held, err);
    }
    if (!rc && !exists && held)
        rc = kv_pending_key_add(held, key, klen, nd.docid, err);
    else if (!rc && !exists && idx_writer_defers_records(db->iw))
        rc = kv_key_put(txn, key, klen, nd.docid, err);
    if (!rc)
        rc = written(r, key, klen, nd.cas, err);
done:
    kv_buf_free(&autok);
    /* A status that reads as a refusal, after writing began, is not one:
     * the batch must roll back (kv_err keeps the message). */
    if (writing && refused(rc))
        rc = err->code = KVFTS_ERROR;
    return rc;
}

/* A bounded amount of merge work, each step its own transaction: up to
 * @p steps of @p bytes.  Merging is maintenance: its failure is the
 * handle's warning, never the write's (which committed before). */
static void merge_some(kvfts_db *db, unsigned steps, uint64_t bytes,
                       uint64_t once)
{
    for (unsigned i = 0; i < steps; i++) {
        int more = 0;
        kv_err e = KV_ERR_INIT;
        int rc = api_merge_step(db, false, bytes, once, &more, NULL, &e);
        if (rc) {
            snprintf(db->warning, sizeof db->warning, "merging segments "
                     "failed: %s", e.msg);
            return;
        }
        if (!more)
            return;
    }
}

/* ---- single writes ----------------------------------------------------- */

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

static int single_write(kvfts_db *db, write_req *r, const char *json,
                        size_t json_len)
{
    int rc = api_check_writable(db);
    if (!rc)
        rc = api_check_no_batch(db);
    if (!rc && r->auto_prefix)
        rc = check_auto_prefix(db, r->auto_prefix, r->auto_len, &db->err);
    kv_buf compact = KV_BUF_INIT;
    if (!rc && json)
        rc = prepare(db, r->key, r->key_len, json, json_len, &compact,
                     &db->err);
    else if (!rc)
        rc = kv_key_check(r->key, r->key_len, db->cfg.lookup_names,
                          db->cfg.nlookups, &db->err);
    if (!rc) {
        r->json = json ? compact.data : NULL;
        r->json_len = json ? compact.len : 0;
        write_ctx c = { db, r };
        rc = kv_txn_run(db->env, true, write_fn, &c, &db->err);
    }
    kv_buf_free(&compact);
    if (!rc)
        merge_some(db, 1, SINGLE_MERGE_BYTES, 0);
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

int kvfts_del(kvfts_db *db, const char *key, size_t key_len, uint64_t cas)
{
    api_begin(db);
    write_req r = { .mode = KVFTS_REPLACE, .key = key, .key_len = key_len,
                    .cas = cas };
    return api_finish(db, single_write(db, &r, NULL, 0));
}

/* ---- batches ----------------------------------------------------------- */

#define DEFAULT_BATCH_MEM (128u * 1024u * 1024u)

/* Worker threads for a batch's analysis: one per core but the caller's. */
static unsigned batch_workers(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    const char *e = getenv("KVFTS_WORKERS");
    if (e && *e)
        n = atol(e);
    if (n < 1)
        n = 1;
    if (n > 16)
        n = 16;
    return n > 1 ? (unsigned)n : 0;
}

int kvfts_batch_begin(kvfts_batch **out, kvfts_db *db)
{
    api_begin(db);
    *out = NULL;
    int rc = api_check_writable(db);
    if (!rc)
        rc = api_check_no_batch(db);
    if (rc)
        return api_finish(db, rc);
    kvfts_batch *b = kv_calloc(1, sizeof *b);
    if (!b)
        return api_finish(db, kv_seterr(&db->err, KVFTS_ENOMEM, "out of memory"));
    b->db = db;
    db->batch = b;
    db->batch_workers = batch_workers();
    rc = idx_writer_workers(db->iw, db->batch_workers, &db->err);
    if (rc) {
        db->batch = NULL;
        kv_free(b);
        return api_finish(db, rc);
    }
    kvfts_batch_set_mem(b, 0);
    *out = b;
    return KVFTS_OK;
}

size_t kvfts_batch_pending(const kvfts_batch *b)
{
    return b ? b->pending : 0;
}

void kvfts_batch_set_mem(kvfts_batch *b, size_t bytes)
{
    b->mem = bytes ? bytes : DEFAULT_BATCH_MEM;
    b->db->batch_mem = b->mem;
    /* The writer writes a segment by itself only at twice the bound: a
     * caller that commits when kvfts_batch_full() says so never pays for a
     * segment that the commit would have written anyway. */
    idx_writer_set_mem(b->db->iw, b->mem * 2);
}

bool kvfts_batch_full(const kvfts_batch *b)
{
    return idx_buffered_bytes(b->db->iw) + b->log.len + b->keys.arena.len >=
           b->mem;
}

static void batch_rollback(kvfts_batch *b)
{
    kv_txn_abort(b->txn);
    b->txn = NULL;
    if (b->db->iw)
        idx_discard(b->db->iw);
    kv_pending_keys_reset(&b->keys);
    kv_buf_reset(&b->log);
    b->pending = 0;
    b->flushed = 0;
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

/* Write the held key records, and the index buffer as a segment, in the
 * batch's transaction. */
static int batch_segment(kvfts_batch *b, kv_err *err)
{
    size_t bytes = idx_buffered_bytes(b->db->iw);
    int rc = kv_pending_keys_store(&b->keys, b->txn, err);
    if (!rc)
        rc = idx_flush(b->db->iw, b->txn, err);
    if (!rc)
        b->flushed += bytes;
    return rc;
}

/* Write one item of the log (or a new one) in the open transaction. */
static int batch_apply(kvfts_batch *b, const batch_item *it, const char *key,
                       const char *json, kv_buf *key_out, kv_err *err)
{
    write_req r = { .mode = (kvfts_write_mode)it->mode,
                    .json = it->json_len || json ? json : NULL,
                    .json_len = it->json_len, .key_out = key_out };
    if (it->is_auto) {
        r.auto_prefix = key;
        r.auto_len = it->key_len;
    } else {
        r.key = key;
        r.key_len = it->key_len;
    }
    int rc = write_doc(b->db, b->txn, &r, err);
    if (rc == KV_FLUSH) {
        rc = batch_segment(b, err);
        if (!rc)
            rc = write_doc(b->db, b->txn, &r, err);
    }
    return rc;
}

/* After a deadlock: a fresh transaction with everything re-applied. */
static int batch_replay(kvfts_batch *b, kv_err *err)
{
    kv_txn_abort(b->txn);
    b->txn = NULL;
    idx_discard(b->db->iw);
    kv_pending_keys_reset(&b->keys);
    b->flushed = 0;
    int rc = batch_txn(b, err);
    size_t off = 0;
    for (size_t i = 0; i < b->pending && !rc; i++) {
        batch_item it;
        memcpy(&it, b->log.data + off, sizeof it);
        const char *key = b->log.data + off + sizeof it;
        const char *json = key + it.key_len;
        rc = batch_apply(b, &it, key, json, NULL, err);
        if (refused(rc))      /* it was applied before: the data changed */
            rc = kv_seterr(err, KVFTS_ERROR, "replaying the batch: %s",
                           err->msg);
        off += sizeof it + it.key_len + it.json_len;
    }
    return rc;
}

/* A failure after the batch wrote: roll it all back and say so, with a
 * status of its own. */
static int batch_fail(kvfts_batch *b, int rc, kv_err *err)
{
    size_t lost = b->pending;
    batch_rollback(b);
    if (rc == KV_RETRY) {         /* kv_retry_next gave up */
        kv_err_prefix(err, "retries exhausted");
        err->code = KVFTS_EBUSY;
    }
    kv_err_prefix(err, "batch rolled back (%zu uncommitted write(s) lost)",
                  lost);
    err->code = KVFTS_EROLLBACK;
    return KVFTS_EROLLBACK;
}

static int batch_split_commit(kvfts_batch *b, kv_err *err);

static int batch_write(kvfts_batch *b, const batch_item *it, const char *key,
                       const char *json, kv_buf *key_out)
{
    kvfts_db *db = b->db;
    kv_err *err = &db->err;
    int rc = batch_txn(b, err);
    if (!rc)
        rc = batch_apply(b, it, key, json, key_out, err);
    int deadlocks = 0, recoveries = 0;
    while (kv_retry_next(rc, &deadlocks, &recoveries)) {
        rc = batch_replay(b, err);
        if (!rc)
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
    if (refused(rc))
        return rc;          /* refused before any write: batch intact */
    if (rc)
        return batch_fail(b, rc, err);
    /* Record the write for replay. */
    size_t need = sizeof *it + it->key_len + it->json_len;
    rc = kv_buf_reserve(&b->log, need, err);
    if (rc)
        return batch_fail(b, rc, err);
    memcpy(b->log.data + b->log.len, it, sizeof *it);
    memcpy(b->log.data + b->log.len + sizeof *it, key, it->key_len);
    if (it->json_len)
        memcpy(b->log.data + b->log.len + sizeof *it + it->key_len, json,
               it->json_len);
    b->log.len += need;
    b->pending++;
    if (idx_flush_due(db->iw)) {
        rc = batch_segment(b, err);
        if (rc)
            return batch_fail(b, rc, err);
    }
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
    kvfts_db *db;            /* for the field path checks */
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
    tmpl *t = payload;
    path_check pc = { t->db, t->err };
    int prc = check_path(&pc, path, path_len, type, value, value_len, pos);
    if (prc)
        return prc;
    if (type == KV_JSON_NULL)
        return KVFTS_OK;
    for (size_t i = 0; i < t->nfields; i++) {
        size_t fl = t->end[i] - t->start[i] - 2;
        if (fl != path_len ||
            memcmp(t->text + t->start[i] + 1, path, path_len) != 0)
            continue;
        /* A second value at the path (an array's): no one key, and taking
         * the first would make different documents one. */
        if (t->found[i])
            return kv_seterr(t->err, KVFTS_EINVAL, "key template '%.*s': "
                             "the document has more than one value at "
                             "'%.*s' (an array); a key takes one",
                             (int)t->len, t->text, (int)path_len, path);
        t->found[i] = true;
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
    t.db = db;
    if (!rc)
        rc = walk_keeping_leaves(db, json, json_len, &b->json, tmpl_leaf, &t,
                                 &db->err);
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

/* Replay items [first, first + n) of the log (the first at byte off) in a
 * transaction of their own and commit it.  Out of cache again: the two
 * halves, each in its own transaction. */
static int batch_commit_part(kvfts_batch *b, size_t first, size_t off,
                             size_t n, kv_err *err)
{
    int rc, deadlocks = 0, recoveries = 0;
    for (;;) {
        idx_discard(b->db->iw);
        kv_pending_keys_reset(&b->keys);
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
            rc = kv_pending_keys_store(&b->keys, b->txn, err);
        if (!rc)
            rc = idx_flush(b->db->iw, b->txn, err);
        if (!rc) {
            rc = kv_txn_commit(b->txn, err);
            b->txn = NULL;
            if (rc != KV_RETRY)     /* KV_RETRY: did not land (as above) */
                return rc;
        }
        kv_txn_abort(b->txn);
        b->txn = NULL;
        if (!kv_retry_next(rc, &deadlocks, &recoveries))
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
    int rc = batch_segment(b, &db->err);
    int deadlocks = 0, recoveries = 0;
    for (;;) {
        if (!rc) {
            rc = kv_txn_commit(b->txn, &db->err);
            b->txn = NULL;
        }
        /* A deadlock, or a commit that met a recovery and did not land
         * (kv_txn_commit looked in the log): all again. */
        if (!kv_retry_next(rc, &deadlocks, &recoveries))
            break;
        rc = batch_replay(b, &db->err);
        if (!rc)
            rc = batch_segment(b, &db->err);
    }
    if (rc == KVFTS_ENOMEM && b->split && b->pending > 1)
        rc = batch_split_commit(b, &db->err);
    if (rc)
        return api_finish(db, batch_fail(b, rc, &db->err));
    kv_buf_reset(&b->log);
    b->pending = 0;
    /* Merging keeps pace with loading: about as many steps as the batch
     * wrote megabytes of index. */
    size_t mb = b->flushed >> 20;
    b->flushed = 0;
    merge_some(db, (unsigned)(mb < 1 ? 1 : mb > 64 ? 64 : mb),
               api_merge_step_bytes(), api_merge_once_bytes());
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
    b->db->batch_workers = 0;
    if (b->db->iw) {
        kv_err e = KV_ERR_INIT;
        idx_writer_workers(b->db->iw, 0, &e);   /* stopping cannot fail */
        idx_writer_set_mem(b->db->iw, 0);
    }
    kv_buf_free(&b->log);
    kv_buf_free(&b->json);
    kv_pending_keys_free(&b->keys);
    kv_free(b);
}

