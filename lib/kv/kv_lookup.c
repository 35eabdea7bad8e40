/*
 * kv_lookup.c -- lookup documents (the seeds' "customer_ref::12345" ->
 * {"ref": "user::42"}), kept in step with the documents they point to.
 *
 * Storage: lookups.db is a B-tree with sorted duplicates.  Its key is the
 * logical key "NAME::VALUE"; each duplicate is the key of one document that
 * has VALUE at the lookup's path.  So adding or removing one document's
 * reference touches one record, however many documents share a value (the
 * seeds warn against rewriting an ever-growing "refs" array).  The logical
 * lookup document is assembled on read: {"ref": K} for a unique lookup,
 * {"refs": [K1, K2, ...]} in key order otherwise.
 *
 * Values: a string is used as is, a number as written, a boolean as "true"
 * or "false"; null, objects and missing paths give no entry.  A string
 * holding a NUL (\u0000) is refused (KVFTS_EINVAL), as in keys.  Each element of
 * an array at the path gives its own entry.  A value is at most
 * KV_MAX_LOOKUP_VALUE bytes (a longer one fails the write, naming it).
 *
 * Atomicity: kv_lookup_update() checks every unique constraint before it
 * writes anything, and runs inside the caller's transaction with the
 * document write, so a violation leaves the database unchanged.
 */
#include "kv.h"

#include <string.h>

typedef struct collect {
    kv_lookup_vals *out;
    const kv_config *cfg;
    kv_err *err;
} collect;

static int vals_add(kv_lookup_vals *v, const char *name, const char *val,
                    size_t vlen, bool uniq, kv_err *err)
{
    size_t nlen = strlen(name);
    /* Drop duplicates: a document names a value once per lookup. */
    for (size_t i = 0; i < v->n; i++) {
        const char *r = v->keys.data + v->offs[i];
        if (strlen(r) == nlen + 2 + vlen && memcmp(r, name, nlen) == 0 &&
            memcmp(r + nlen + 2, val, vlen) == 0)
            return KVFTS_OK;
    }
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        size_t *o = kv_realloc(v->offs, cap * sizeof *o);
        if (!o)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        v->offs = o;
        unsigned char *u = kv_realloc(v->uniq, cap);
        if (!u)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        v->uniq = u;
        v->cap = cap;
    }
    size_t at = v->keys.len;
    int rc = kv_buf_append(&v->keys, name, nlen, err);
    if (!rc)
        rc = kv_buf_append(&v->keys, KV_SEP, 2, err);
    if (!rc)
        rc = kv_buf_append(&v->keys, val, vlen, err);
    if (!rc)
        rc = kv_buf_append(&v->keys, "", 1, err);
    if (rc) {
        v->keys.len = at;
        return rc;
    }
    v->offs[v->n] = at;
    v->uniq[v->n] = uniq;
    v->n++;
    return KVFTS_OK;
}

static int on_leaf(void *payload, const char *path, size_t path_len,
                   kv_json_type type, const char *value, size_t value_len,
                   size_t pos)
{
    (void)pos;
    collect *c = payload;
    if (type == KV_JSON_NULL)
        return KVFTS_OK;
    for (size_t i = 0; i < c->cfg->nlookups; i++) {
        const kv_lookup_def *d = &c->cfg->lookups[i];
        if (strlen(d->path) != path_len || memcmp(d->path, path, path_len))
            continue;
        if (value_len > KV_MAX_LOOKUP_VALUE)
            return kv_seterr(c->err, KVFTS_EINVAL,
                             "lookup '%s': value at '%s' is %zu bytes, "
                             "longer than %d", d->name, d->path, value_len,
                             KV_MAX_LOOKUP_VALUE);
        /* Lookup keys are C strings ("NAME::VALUE"), as document keys
         * are: a NUL would cut the value short, and "a\u0000b" would
         * take "a"'s place. */
        if (memchr(value, '\0', value_len))
            return kv_seterr(c->err, KVFTS_EINVAL,
                             "lookup '%s': the value at '%s' holds a NUL "
                             "byte (\\u0000), which lookup values may not",
                             d->name, d->path);
        int rc = vals_add(c->out, d->name, value, value_len, d->unique,
                          c->err);
        if (rc)
            return rc;
    }
    return KVFTS_OK;
}

int kv_lookup_collect(kv_lookup_vals *out, const kv_config *cfg,
                      const char *json, size_t len, kv_err *err)
{
    kv_buf_reset(&out->keys);
    out->n = 0;
    if (cfg->nlookups == 0)
        return KVFTS_OK;
    collect c = { out, cfg, err };
    return kv_json_walk(json, len, NULL, on_leaf, &c, err);
}

void kv_lookup_vals_free(kv_lookup_vals *v)
{
    kv_buf_free(&v->keys);
    kv_free(v->offs);
    kv_free(v->uniq);
    memset(v, 0, sizeof *v);
}

static bool vals_has(const kv_lookup_vals *v, const char *k)
{
    if (!v)
        return false;
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->keys.data + v->offs[i], k) == 0)
            return true;
    return false;
}

int kv_lookup_update(kv_txn *txn, const char *key, size_t klen,
                     const kv_lookup_vals *old_vals,
                     const kv_lookup_vals *new_vals, kv_err *err)
{
    int rc = KVFTS_OK;
    kv_buf cur = KV_BUF_INIT;
    size_t nnew = new_vals ? new_vals->n : 0;
    size_t nold = old_vals ? old_vals->n : 0;
    /* 1. Every unique value must be free or already ours. */
    for (size_t i = 0; i < nnew && !rc; i++) {
        if (!new_vals->uniq[i])
            continue;
        const char *lk = new_vals->keys.data + new_vals->offs[i];
        rc = kv_get(txn, KV_LOOKUPS, lk, strlen(lk), &cur, true, err);
        if (rc == KVFTS_ENOTFOUND) {
            rc = KVFTS_OK;
        } else if (rc == KVFTS_OK &&
                   !(cur.len == klen && memcmp(cur.data, key, klen) == 0)) {
            rc = kv_seterr(err, KVFTS_EEXISTS,
                           "unique lookup '%s' already refers to '%.*s'", lk,
                           (int)(cur.len > 250 ? 250 : cur.len), cur.data);
        }
    }
    if (rc)
        goto out;             /* refused (or failed) before any write */
    /* 2. Remove what the old version had and the new one has not. */
    for (size_t i = 0; i < nold && !rc; i++) {
        const char *lk = old_vals->keys.data + old_vals->offs[i];
        if (vals_has(new_vals, lk))
            continue;
        rc = kv_del_pair(txn, KV_LOOKUPS, lk, strlen(lk), key, klen, err);
        if (rc == KVFTS_ENOTFOUND)
            rc = kv_seterr(err, KVFTS_ECORRUPT,
                           "lookup '%s' -> '%.*s' missing", lk, (int)klen,
                           key);
    }
    /* 3. Add what is new. */
    for (size_t i = 0; i < nnew && !rc; i++) {
        const char *lk = new_vals->keys.data + new_vals->offs[i];
        if (vals_has(old_vals, lk))
            continue;
        rc = kv_put(txn, KV_LOOKUPS, lk, strlen(lk), key, klen, err);
    }
    /* After the first write nothing is a refusal: the caller rolls back. */
    if (rc == KVFTS_EINVAL || rc == KVFTS_EEXISTS || rc == KVFTS_ENOTFOUND)
        rc = err->code = KVFTS_ERROR;
out:
    kv_buf_free(&cur);
    return rc;
}

int kv_lookup_refs(kv_txn *txn, const char *lkey, size_t lklen, kv_buf *keys,
                   size_t *n, kv_err *err)
{
    *n = 0;
    kv_cursor *c = NULL;
    int rc = kv_cursor_open(&c, txn, KV_LOOKUPS, err);
    if (rc)
        return rc;
    rc = kv_cursor_seek_exact(c, lkey, lklen, err);
    while (rc == KVFTS_OK) {
        const char *v;
        size_t vl;
        kv_cursor_val(c, &v, &vl);
        rc = kv_buf_append(keys, v, vl, err);
        if (!rc)
            rc = kv_buf_append(keys, "", 1, err);
        if (rc)
            break;
        (*n)++;
        rc = kv_cursor_next_dup(c, err);
    }
    kv_cursor_close(c);
    if (rc == KVFTS_ITEROVER)
        rc = *n ? KVFTS_OK
                : kv_seterr(err, KVFTS_ENOTFOUND, "lookup '%.*s' not found",
                            (int)lklen, lkey);
    return rc;
}
