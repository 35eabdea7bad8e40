/*
 * kv_records.c -- records and cursors of the storage layer over Berkeley
 * DB: get, put, delete, walks in bulk, cursors and bulk reads, each inside
 * a kv_txn (kv_env.c).  DBTs are DB_DBT_USERMEM over kv_buf buffers, grown
 * and retried on DB_BUFFER_SMALL; no memory owned by Berkeley DB leaves
 * lib/kv/.
 */
#include "kv_int.h"

#include <string.h>

/* ---- records ----------------------------------------------------------- */

static void dbt_in(DBT *d, const void *p, size_t n)
{
    memset(d, 0, sizeof *d);
    d->data = (void *)p;
    d->size = (u_int32_t)n;
}

static void dbt_user(DBT *d, kv_buf *b)
{
    memset(d, 0, sizeof *d);
    d->data = b->data;
    d->ulen = (u_int32_t)(b->cap ? b->cap - 1 : 0);
    d->flags = DB_DBT_USERMEM;
}

static int check_len(size_t n, kv_err *err)
{
    if (n > UINT32_MAX / 2)
        return kv_seterr(err, KVFTS_EINVAL, "record of %zu bytes too large",
                         n);
    return KVFTS_OK;
}

/* The database of space s that holds key (a segment's file for the
 * partitioned spaces, kv_part.c), and the Berkeley DB transaction to use
 * it in (none for a file t is making). */
static int space_db(kv_txn *t, kv_space s, const void *key, size_t klen,
                    bool create, DB **db, DB_TXN **tx, kv_err *err)
{
    if (!kv__parted(s)) {
        *db = t->inst->db[s];
        *tx = t->txn;
        return KVFTS_OK;
    }
    return kv__part_db(t, s, key, klen, create, db, tx, err);
}

/* Read the value at key into val; with head > 0 only its first head bytes
 * (DB_DBT_PARTIAL: Berkeley DB copies no more than that). */
static int get_value(kv_txn *t, kv_space s, const void *key, size_t klen,
                     size_t head, kv_buf *val, bool for_update, kv_err *err)
{
    DB *db = NULL;
    DB_TXN *tx = NULL;
    int rc = check_len(klen, err);
    if (!rc)
        rc = kv__txn_live(t, err);
    if (!rc)
        rc = space_db(t, s, key, klen, false, &db, &tx, err);
    if (rc)
        return rc;
    DBT k, v;
    dbt_in(&k, key, klen);
    size_t want = head ? head + 1 : 256;
    if ((rc = kv_buf_reserve(val, want, err)) != 0)
        return rc;
    for (;;) {
        dbt_user(&v, val);
        if (head) {
            v.flags |= DB_DBT_PARTIAL;
            v.doff = 0;
            v.dlen = (u_int32_t)head;
        }
        int ret = KV_BDB(t->inst->sh,
                         db->get(db, tx, &k, &v,
                                 for_update && tx && t->write ? DB_RMW
                                                              : 0));
        if (ret == DB_BUFFER_SMALL) {
            val->len = 0;
            rc = kv_buf_reserve(val, v.size, err);
            if (rc)
                return rc;
            continue;
        }
        if (ret)
            return kv__bdb_err(t->inst, ret, err, kv_spaces[s].name);
        val->len = v.size;
        val->data[val->len] = '\0';
        return KVFTS_OK;
    }
}

int kv_get(kv_txn *t, kv_space s, const void *key, size_t klen, kv_buf *val,
           bool for_update, kv_err *err)
{
    return get_value(t, s, key, klen, 0, val, for_update, err);
}

int kv_get_head(kv_txn *t, kv_space s, const void *key, size_t klen,
                size_t head, kv_buf *val, kv_err *err)
{
    return get_value(t, s, key, klen, head ? head : 1, val, false, err);
}

/* Put key -> val into db of space s in tx (NULL: a file being made,
 * kv_part.c). */
static int db_put(bdb_inst *in, DB *db, DB_TXN *tx, kv_space s,
                  const void *key, size_t klen, const void *val, size_t vlen,
                  kv_err *err)
{
    DBT k, v;
    dbt_in(&k, key, klen);
    dbt_in(&v, val, vlen);
    int ret = KV_BDB(in->sh, db->put(db, tx, &k, &v,
                                     s == KV_LOOKUPS ? DB_NODUPDATA : 0));
    if (ret == DB_KEYEXIST)
        return KVFTS_OK;   /* the pair is already there */
    return kv__bdb_err(in, ret, err, kv_spaces[s].name);
}

int kv_put(kv_txn *t, kv_space s, const void *key, size_t klen,
           const void *val, size_t vlen, kv_err *err)
{
    DB *db = NULL;
    DB_TXN *tx = NULL;
    int rc = check_len(klen, err);
    if (!rc)
        rc = check_len(vlen, err);
    if (!rc)
        rc = space_db(t, s, key, klen, t->write, &db, &tx, err);
    return rc ? rc : db_put(t->inst, db, tx, s, key, klen, val, vlen, err);
}

int kv_partw_put(kv_partw *w, kv_space s, const void *key, size_t klen,
                 const void *val, size_t vlen, kv_err *err)
{
    bdb_inst *in = NULL;
    DB *db = NULL;
    int rc = check_len(klen, err);
    if (!rc)
        rc = check_len(vlen, err);
    if (!rc)
        rc = kv__partw_db(w, s, key, klen, &in, &db, err);
    return rc ? rc : db_put(in, db, NULL, s, key, klen, val, vlen, err);
}

int kv_put_sorted(kv_txn *t, kv_space s, const kv_rec *v, size_t n,
                  kv_err *err)
{
    if (n == 0)
        return KVFTS_OK;
    if (kv__parted(s))
        return kv_seterr(err, KVFTS_EINVAL, "%s: no bulk puts",
                         kv_spaces[s].name);
    /* DB_MULTIPLE_KEY: the records from the front, four u32 (offsets and
     * lengths) per record from the back, and a terminating u32. */
    size_t bytes = 4;
    for (size_t i = 0; i < n; i++) {
        int rc = check_len(v[i].klen, err);
        if (!rc)
            rc = check_len(v[i].vlen, err);
        if (rc)
            return rc;
        bytes += v[i].klen + v[i].vlen + 16;
    }
    bytes = (bytes + 3) & ~(size_t)3;
    if (bytes > UINT32_MAX / 2)
        return kv_seterr(err, KVFTS_EINVAL, "%s: bulk put of %zu bytes too "
                         "large", kv_spaces[s].name, bytes);
    void *buf = kv_malloc(bytes);
    if (!buf)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    DBT m;
    memset(&m, 0, sizeof m);
    m.data = buf;
    m.ulen = (u_int32_t)bytes;
    m.flags = DB_DBT_USERMEM;
    void *p;
    DB_MULTIPLE_WRITE_INIT(p, &m);
    for (size_t i = 0; i < n && p; i++)
        DB_MULTIPLE_KEY_WRITE_NEXT(p, &m, v[i].key, (u_int32_t)v[i].klen,
                                   v[i].val, (u_int32_t)v[i].vlen);
    int rc;
    if (!p) {
        rc = kv_seterr(err, KVFTS_ERROR, "%s: bulk put buffer too small",
                       kv_spaces[s].name);
    } else {
        DB *db = t->inst->db[s];
        int ret = KV_BDB(t->inst->sh,
                         db->put(db, t->txn, &m, NULL, DB_MULTIPLE_KEY));
        rc = kv__bdb_err(t->inst, ret, err, kv_spaces[s].name);
    }
    kv_free(buf);
    return rc;
}

int kv_del(kv_txn *t, kv_space s, const void *key, size_t klen, kv_err *err)
{
    DB *db = NULL;
    DB_TXN *tx = NULL;
    int rc = space_db(t, s, key, klen, false, &db, &tx, err);
    if (rc)
        return rc;
    DBT k;
    dbt_in(&k, key, klen);
    int ret = KV_BDB(t->inst->sh, db->del(db, tx, &k, 0));
    return kv__bdb_err(t->inst, ret, err, kv_spaces[s].name);
}

int kv_del_pair(kv_txn *t, kv_space s, const void *key, size_t klen,
                const void *val, size_t vlen, kv_err *err)
{
    if (kv__parted(s))
        return kv_seterr(err, KVFTS_EINVAL, "%s: no duplicates",
                         kv_spaces[s].name);
    DB *db = t->inst->db[s];
    DBC *c = NULL;
    shared_env *sh = t->inst->sh;
    int ret = KV_BDB(sh, db->cursor(db, t->txn, &c, 0));
    if (ret)
        return kv__bdb_err(t->inst, ret, err, kv_spaces[s].name);
    DBT k, v;
    dbt_in(&k, key, klen);
    dbt_in(&v, val, vlen);
    ret = KV_BDB(sh, c->get(c, &k, &v, DB_GET_BOTH | DB_RMW));
    if (ret == 0)
        ret = KV_BDB(sh, c->del(c, 0));
    int rc = kv__bdb_err(t->inst, ret, err, kv_spaces[s].name);
    int cret = KV_BDB(sh, c->close(c));
    if (!rc && cret)
        rc = kv__bdb_err(t->inst, cret, err, kv_spaces[s].name);
    return rc;
}

int kv_del_prefix(kv_txn *t, kv_space s, const void *prefix, size_t plen,
                  kv_err *err)
{
    kv_cursor *c = NULL;
    int rc = kv_cursor_open(&c, t, s, err);
    if (!rc)
        rc = kv_cursor_seek(c, prefix, plen, err);
    while (rc == KVFTS_OK) {
        const char *k;
        size_t kl;
        kv_cursor_key(c, &k, &kl);
        if (kl < plen || memcmp(k, prefix, plen) != 0)
            break;
        rc = kv_cursor_del(c, err);
        if (!rc)
            rc = kv_cursor_next(c, err);
    }
    kv_cursor_close(c);
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

/* Walk the records from the first key >= from (flen 4: a segment's
 * first). */
static int walk_from(kv_txn *t, kv_space s, const void *from, size_t flen,
                     kv_walk_fn fn, void *payload, kv_err *err)
{
    kv_cursor *c = NULL;
    kv_bulk b = KV_BULK_INIT;
    int rc = kv_cursor_open(&c, t, s, err);
    bool first = true;
    while (!rc) {
        rc = kv_cursor_bulk(c, first ? from : NULL, flen, &b, err);
        first = false;
        const char *k, *v;
        size_t kl, vl;
        while (!rc && kv_bulk_next(&b, &k, &kl, &v, &vl))
            rc = fn(payload, k, kl, v, vl, err);
    }
    kv_cursor_close(c);
    kv_bulk_free(&b);
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

int kv_walk(kv_txn *t, kv_space s, kv_walk_fn fn, void *payload,
            kv_err *err)
{
    if (!kv__parted(s))
        return walk_from(t, s, "", 0, fn, payload, err);
    uint32_t *ids = NULL;
    size_t n = 0;
    int rc = kv__parts_list(t->inst->sh->dir, &ids, &n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        unsigned char key[4];
        kv_put_be32(key, ids[i]);
        /* a file removed since the listing is KV_RETRY: kv_txn_run()
         * walks a newer snapshot */
        rc = walk_from(t, s, key, 4, fn, payload, err);
    }
    kv_free(ids);
    return rc;
}

static int count_one(void *payload, const char *k, size_t kl, const char *v,
                     size_t vl, kv_err *err)
{
    (void)k, (void)kl, (void)v, (void)vl, (void)err;
    ++*(uint64_t *)payload;
    return KVFTS_OK;
}

/* Counted by kv_walk(): DB->stat() walks the tree with page locks of its
 * own, so in a snapshot reader it waited for a bulk load to commit
 * (`kvfts stats` hung for the whole load). */
int kv_count(kv_txn *t, kv_space s, uint64_t *out, kv_err *err)
{
    uint64_t n = 0;
    int rc = kv_walk(t, s, count_one, &n, err);
    if (!rc)
        *out = n;
    return rc;
}

/* ---- cursors ----------------------------------------------------------- */

int kv_cursor_open(kv_cursor **out, kv_txn *t, kv_space s, kv_err *err)
{
    *out = NULL;
    kv_cursor *c = kv_calloc(1, sizeof *c);
    if (!c)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    c->txn = t;
    c->space = s;
    int rc = kv__txn_live(t, err);
    if (!rc)
        rc = kv_buf_reserve(&c->key, 256, err);
    if (!rc)
        rc = kv_buf_reserve(&c->val, 1024, err);
    if (rc) {
        kv_cursor_close(c);
        return rc;
    }
    if (!kv__parted(s)) {
        DB *db = t->inst->db[s];
        int ret = KV_BDB(t->inst->sh, db->cursor(db, t->txn, &c->dbc, 0));
        if (ret) {
            kv_cursor_close(c);
            return kv__bdb_err(t->inst, ret, err, kv_spaces[s].name);
        }
    }
    *out = c;
    return KVFTS_OK;
}

void kv_cursor_close(kv_cursor *c)
{
    if (!c)
        return;
    if (c->pcs) {
        for (size_t i = 0; i < c->npcs; i++)
            KV_BDB(c->txn->inst->sh, c->pcs[i].dbc->close(c->pcs[i].dbc));
        if (c->pcs != c->inline_pcs)
            kv_free(c->pcs);
    } else if (c->dbc) {
        KV_BDB(c->txn->inst->sh, c->dbc->close(c->dbc));
    }
    kv_buf_free(&c->key);
    kv_buf_free(&c->val);
    kv_buf_free(&c->skey);
    kv_free(c);
}

/* A cursor of a partitioned space moves to the segment file that key
 * names (a Berkeley DB cursor of its own per file). */
static int cursor_bind(kv_cursor *c, const void *key, size_t klen,
                       kv_err *err)
{
    if (!kv__parted(c->space))
        return KVFTS_OK;
    if (klen < 4)
        return kv_seterr(err, KVFTS_EINVAL, "%s: a cursor needs a key with a "
                         "segment id", kv_spaces[c->space].name);
    uint32_t id = kv__part_of(key);
    for (size_t i = 0; i < c->npcs; i++)
        if (c->pcs[i].id == id) {
            c->dbc = c->pcs[i].dbc;
            return KVFTS_OK;
        }
    DB *db = NULL;
    DB_TXN *tx = NULL;
    int rc = kv__part_db_id(c->txn, c->space, id, false, &db, &tx, err);
    if (rc)
        return rc;
    void *arr = c->pcs;
    if (!kv__grow_inline(&arr, c->inline_pcs,
                         sizeof c->inline_pcs / sizeof c->inline_pcs[0],
                         c->npcs, &c->pccap, sizeof *c->pcs))
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    c->pcs = arr;
    /* A segment's file of its own is never changed once listed (a merge
     * removes it whole): a write transaction reads it without keeping a
     * lock per page, which a merge of hundreds of megabytes in one
     * transaction would run out of (kv_env.c: 100,000 locks). */
    u_int32_t flags = tx && c->txn->write && (id & KV_PART_OWN)
                      ? DB_READ_COMMITTED : 0;
    DBC *dbc = NULL;
    int ret = KV_BDB(c->txn->inst->sh, db->cursor(db, tx, &dbc, flags));
    if (ret)
        return kv__bdb_err(c->txn->inst, ret, err, kv_spaces[c->space].name);
    c->pcs[c->npcs++] = (struct kv_pcur){ id, dbc };
    c->dbc = dbc;
    return KVFTS_OK;
}

/* c->get with USERMEM buffers, growing them on DB_BUFFER_SMALL (the cursor
 * does not move when that happens).  For DB_SET/DB_SET_RANGE the search key
 * is skey: it is copied into c->key before every attempt, because a failed
 * DB_SET_RANGE may already have written the key it found there. */
static int cursor_get_v(kv_cursor *c, u_int32_t flag, const void *skey,
                        size_t sklen, bool key_only, kv_err *err)
{
    if (skey) {                  /* skey may point into c->key itself */
        kv_buf_reset(&c->skey);
        int rc = kv_buf_append(&c->skey, skey, sklen, err);
        if (!rc)
            rc = cursor_bind(c, c->skey.data, c->skey.len, err);
        if (rc)
            return rc;
    }
    if (!c->dbc)
        return kv_seterr(err, KVFTS_EINVAL, "%s: cursor not positioned",
                         kv_spaces[c->space].name);
    for (;;) {
        if (skey) {
            kv_buf_reset(&c->key);
            int rc = kv_buf_append(&c->key, c->skey.data, c->skey.len, err);
            if (rc)
                return rc;
        }
        DBT k, v;
        dbt_user(&k, &c->key);
        dbt_user(&v, &c->val);
        if (key_only) {        /* no byte of the value (nor its pages) */
            v.flags |= DB_DBT_PARTIAL;
            v.doff = v.dlen = 0;
        }
        if (skey)
            k.size = (u_int32_t)c->key.len;
        int ret = KV_BDB(c->txn->inst->sh, c->dbc->get(c->dbc, &k, &v, flag));
        if (ret == DB_BUFFER_SMALL) {
            int rc = 0;
            if (k.size > k.ulen) {
                size_t keep = c->key.len;
                c->key.len = 0;
                rc = kv_buf_reserve(&c->key, k.size, err);
                c->key.len = keep;
            }
            if (!rc && v.size > v.ulen) {
                c->val.len = 0;
                rc = kv_buf_reserve(&c->val, v.size, err);
            }
            if (rc)
                return rc;
            continue;
        }
        if (ret == DB_NOTFOUND)
            return KVFTS_ITEROVER;
        if (ret)
            return kv__bdb_err(c->txn->inst, ret, err, kv_spaces[c->space].name);
        c->key.len = k.size;
        c->key.data[k.size] = '\0';
        c->val.len = v.size;
        c->val.data[v.size] = '\0';
        return KVFTS_OK;
    }
}

static int cursor_get(kv_cursor *c, u_int32_t flag, const void *skey,
                      size_t sklen, kv_err *err)
{
    return cursor_get_v(c, flag, skey, sklen, false, err);
}

int kv_cursor_seek_floor(kv_cursor *c, const void *key, size_t klen,
                         kv_err *err)
{
    /* The key >= key without its value; then the record wanted. */
    int rc = cursor_get_v(c, DB_SET_RANGE, key, klen, true, err);
    if (rc == KVFTS_ITEROVER)
        return cursor_get(c, DB_LAST, NULL, 0, err);
    if (rc)
        return rc;
    bool exact = c->key.len == c->skey.len &&
                 memcmp(c->key.data, c->skey.data, c->key.len) == 0;
    return cursor_get(c, exact ? DB_CURRENT : DB_PREV, NULL, 0, err);
}

int kv_cursor_seek(kv_cursor *c, const void *key, size_t klen, kv_err *err)
{
    if (klen == 0 && !kv__parted(c->space))
        return cursor_get(c, DB_FIRST, NULL, 0, err);
    return cursor_get(c, DB_SET_RANGE, key, klen, err);
}

/* ---- bulk reads ---------------------------------------------------------- */

#define BULK_MIN (16 * 1024)

int kv_cursor_bulk(kv_cursor *c, const void *key, size_t klen, kv_bulk *b,
                   kv_err *err)
{
    b->it = NULL;
    if (key) {
        kv_buf_reset(&c->key);
        int rc = kv_buf_append(&c->key, key, klen, err);
        if (!rc)
            rc = cursor_bind(c, c->key.data, c->key.len, err);
        if (rc)
            return rc;
    }
    if (!c->dbc)
        return kv_seterr(err, KVFTS_EINVAL, "%s: cursor not positioned",
                         kv_spaces[c->space].name);
    size_t want = BULK_MIN;   /* grown only for a record that needs it */
    for (;;) {
        /* Berkeley DB wants a multiple of 1024 bytes, aligned for u_int32_t
         * access (malloc's alignment). */
        want = (want + 1023) & ~(size_t)1023;
        if (b->buf.cap < want + 1) {
            b->buf.len = 0;
            int rc = kv_buf_reserve(&b->buf, want, err);
            if (rc)
                return rc;
        }
        DBT k, v;
        dbt_user(&k, &c->key);
        k.size = (u_int32_t)c->key.len;
        memset(&v, 0, sizeof v);
        v.data = b->buf.data;
        v.ulen = (u_int32_t)want;
        v.flags = DB_DBT_USERMEM;
        int ret = KV_BDB(c->txn->inst->sh,
                         c->dbc->get(c->dbc, &k, &v,
                                     (key ? DB_SET_RANGE : DB_NEXT) |
                                         DB_MULTIPLE_KEY));
        if (ret == DB_BUFFER_SMALL) {
            want = (size_t)v.size > want * 2 ? (size_t)v.size : want * 2;
            if (k.size > k.ulen)
                return kv_seterr(err, KVFTS_ECORRUPT, "%s: key of %u bytes",
                                 kv_spaces[c->space].name, k.size);
            continue;
        }
        if (ret == DB_NOTFOUND)
            return KVFTS_ITEROVER;
        if (ret)
            return kv__bdb_err(c->txn->inst, ret, err, kv_spaces[c->space].name);
        b->size = want;
        b->it = (u_int8_t *)b->buf.data + want - sizeof(u_int32_t);
        return KVFTS_OK;
    }
}

bool kv_bulk_next(kv_bulk *b, const char **key, size_t *klen,
                  const char **val, size_t *vlen)
{
    if (!b->it)
        return false;
    DBT d;
    memset(&d, 0, sizeof d);
    d.data = b->buf.data;
    d.ulen = (u_int32_t)b->size;
    void *p = b->it, *kp, *vp;
    u_int32_t kl, vl;
    DB_MULTIPLE_KEY_NEXT(p, &d, kp, kl, vp, vl);
    b->it = p;
    if (!p)
        return false;
    *key = kp;
    *klen = kl;
    *val = vp;
    *vlen = vl;
    return true;
}

void kv_bulk_free(kv_bulk *b)
{
    kv_buf_free(&b->buf);
    b->it = NULL;
}

int kv_cursor_seek_exact(kv_cursor *c, const void *key, size_t klen,
                         kv_err *err)
{
    return cursor_get(c, DB_SET, key, klen, err);
}

int kv_cursor_next(kv_cursor *c, kv_err *err)
{
    return cursor_get(c, DB_NEXT, NULL, 0, err);
}

int kv_cursor_next_key(kv_cursor *c, kv_err *err)
{
    return cursor_get_v(c, DB_NEXT, NULL, 0, true, err);
}

int kv_cursor_prev(kv_cursor *c, kv_err *err)
{
    return cursor_get(c, DB_PREV, NULL, 0, err);
}

int kv_cursor_last(kv_cursor *c, kv_err *err)
{
    return cursor_get(c, DB_LAST, NULL, 0, err);
}

int kv_cursor_next_dup(kv_cursor *c, kv_err *err)
{
    return cursor_get(c, DB_NEXT_DUP, NULL, 0, err);
}

void kv_cursor_key(const kv_cursor *c, const char **key, size_t *klen)
{
    *key = c->key.data;
    *klen = c->key.len;
}

void kv_cursor_val(const kv_cursor *c, const char **val, size_t *vlen)
{
    *val = c->val.data;
    *vlen = c->val.len;
}

int kv_cursor_del(kv_cursor *c, kv_err *err)
{
    if (!c->dbc)
        return kv_seterr(err, KVFTS_EINVAL, "%s: cursor not positioned",
                         kv_spaces[c->space].name);
    int ret = KV_BDB(c->txn->inst->sh, c->dbc->del(c->dbc, 0));
    return kv__bdb_err(c->txn->inst, ret, err, kv_spaces[c->space].name);
}

/* ---- sequences ---------------------------------------------------------- */

int kv_seq_get_in(kv_txn *txn, kv_space space, const char *name,
                  bool for_update, uint64_t *out, kv_err *err)
{
    char key[64];
    int kl = snprintf(key, sizeof key, "seq::%s", name);
    kv_buf v = KV_BUF_INIT;
    *out = 0;
    int rc = kv_get(txn, space, key, (size_t)kl, &v, for_update, err);
    if (rc == KVFTS_ENOTFOUND) {
        rc = KVFTS_OK;
    } else if (rc == KVFTS_OK) {
        if (v.len != 8)
            rc = kv_seterr(err, KVFTS_ECORRUPT,
                           "%s::%s: corrupt sequence (%zu bytes)",
                           space == KV_META ? "meta" : kv_spaces[space].file,
                           key, v.len);
        else
            *out = kv_get_be64((const unsigned char *)v.data);
    }
    kv_buf_free(&v);
    return rc;
}

int kv_seq_get(kv_txn *txn, const char *name, bool for_update, uint64_t *out,
               kv_err *err)
{
    return kv_seq_get_in(txn, KV_META, name, for_update, out, err);
}

static int seq_reserve_in(kv_txn *txn, kv_space space, const char *name,
                          uint64_t n, uint64_t *first, kv_err *err)
{
    uint64_t last;
    int rc = kv_seq_get_in(txn, space, name, true, &last, err);
    if (rc)
        return rc;
    if (n == 0 || last > UINT64_MAX - n)
        return kv_seterr(err, KVFTS_EINVAL, "sequence %s exhausted", name);
    char key[64];
    int kl = snprintf(key, sizeof key, "seq::%s", name);
    unsigned char b[8];
    kv_put_be64(b, last + n);
    rc = kv_put(txn, space, key, (size_t)kl, b, 8, err);
    if (!rc)
        *first = last + 1;
    return rc;
}

int kv_seq_reserve(kv_txn *txn, const char *name, uint64_t n, uint64_t *first,
                   kv_err *err)
{
    return seq_reserve_in(txn, KV_META, name, n, first, err);
}

/* The transaction's cache of sequence @p name of @p space (NULL if it has
 * none and every slot is taken by another). */
static struct kv_seq_cache *seq_cache(kv_txn *txn, kv_space space,
                                      const char *name)
{
    size_t n = sizeof txn->seqs / sizeof txn->seqs[0];
    if (strlen(name) >= sizeof txn->seqs[0].name)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (txn->seqs[i].space == space && !strcmp(txn->seqs[i].name, name))
            return &txn->seqs[i];
    for (size_t i = 0; i < n; i++)
        if (!txn->seqs[i].name[0]) {
            txn->seqs[i].space = space;
            snprintf(txn->seqs[i].name, sizeof txn->seqs[i].name, "%s",
                     name);
            return &txn->seqs[i];
        }
    return NULL;
}

/* A transaction that takes many values of a sequence (a batch: a doc id
 * and a CAS per document) reserves them in growing runs, 1, 2, 4, ... up to
 * 256, so that it reads and writes the sequence's record once per run
 * instead of once per value.  Values reserved and not handed out when the
 * transaction ends are skipped: a sequence promises values that increase,
 * not values without gaps, and the runs grow only as they are used, so at
 * most half of what a transaction reserves goes unused. */
int kv_seq_next_in(kv_txn *txn, kv_space space, const char *name,
                   uint64_t max, uint64_t *out, kv_err *err)
{
    struct kv_seq_cache *c = seq_cache(txn, space, name);
    if (c && c->next && c->next <= c->end) {
        *out = c->next++;
        return KVFTS_OK;
    }
    uint64_t last;
    int rc = kv_seq_get_in(txn, space, name, true, &last, err);
    if (rc)
        return rc;
    if (last >= max)
        return kv_seterr(err, KVFTS_EINVAL, "sequence %s exhausted", name);
    uint64_t n = c ? (c->grab ? c->grab : 1) : 1;
    if (n > max - last)
        n = max - last;
    rc = seq_reserve_in(txn, space, name, n, out, err);
    if (rc || !c)
        return rc;
    c->next = *out + 1;
    c->end = *out + n - 1;
    c->grab = n * 2 > 256 ? 256 : n * 2;
    return KVFTS_OK;
}

int kv_seq_next_max(kv_txn *txn, const char *name, uint64_t max,
                    uint64_t *out, kv_err *err)
{
    return kv_seq_next_in(txn, KV_META, name, max, out, err);
}

int kv_seq_next(kv_txn *txn, const char *name, uint64_t *out, kv_err *err)
{
    return kv_seq_next_in(txn, KV_META, name, UINT64_MAX, out, err);
}

int kv_seq_room(kv_txn *txn, const char *name, uint64_t max, bool *room,
                kv_err *err)
{
    struct kv_seq_cache *c = seq_cache(txn, KV_META, name);
    if (c && c->next && c->next <= c->end) {
        *room = c->next <= max;
        return KVFTS_OK;
    }
    uint64_t last;
    int rc = kv_seq_get(txn, name, true, &last, err);
    if (!rc)
        *room = last < max;
    return rc;
}
