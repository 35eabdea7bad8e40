/*
 * kv_doc.c -- document records, the doc-id table, sequences, counters and the
 * rules for keys and names.
 *
 * On-disk formats (version 1; change this comment with the format):
 *
 *   docs.db      key   = the user key (UTF-8, 1..250 bytes, as given)
 *                value = byte 0      record version, 1
 *                        bytes 1..8  CAS, big-endian u64, never 0
 *                        bytes 9..12 internal doc id, big-endian u32, never 0
 *                        bytes 13..  the document, compact JSON (kv_json.c)
 *   docids.db    key   = internal doc id, big-endian u32 (sorts by id)
 *                value = the user key
 *   counters.db  key   = counter NAME (logical key "count::NAME")
 *                value = big-endian two's-complement i64
 *   meta.db      "seq::cas"   big-endian u64: the last CAS handed out
 *                "seq::docid" big-endian u64: the last doc id handed out
 *
 * CAS values come from one database-wide sequence, so a CAS is never reused,
 * not even after a delete and re-create of the same key (no ABA).  Doc ids
 * also come from a sequence and are never reused: a document keeps its id
 * when replaced and a new document gets a new id, which keeps postings
 * append-mostly.
 *
 * Every decoder takes (buf, len), checks bounds and reports KVFTS_ECORRUPT.
 */
#include "kv.h"

#include <stdio.h>
#include <string.h>

#define DOC_VERSION 1
#define DOC_HEADER 13

/* ---- keys and names ---------------------------------------------------- */

static bool has_prefix(const char *s, size_t n, const char *p, size_t pn)
{
    return n >= pn && memcmp(s, p, pn) == 0;
}

/* Offset of the first control character (C0, DEL or C1), or -1. */
static long first_control(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n; i++) {
        if (u[i] < 0x20 || u[i] == 0x7F)
            return (long)i;
        if (u[i] == 0xC2 && i + 1 < n && u[i + 1] >= 0x80 && u[i + 1] <= 0x9F)
            return (long)i;
    }
    return -1;
}

int kv_key_check(const char *key, size_t klen, const char *const *lookups,
                 size_t nlookups, kv_err *err)
{
    if (klen == 0)
        return kv_seterr(err, KVFTS_EINVAL, "key is empty");
    if (klen > KVFTS_MAX_KEY)
        return kv_seterr(err, KVFTS_EINVAL,
                         "key of %zu bytes is longer than %d bytes", klen,
                         KVFTS_MAX_KEY);
    size_t bad;
    if (!kv_utf8_valid(key, klen, &bad))
        return kv_seterr(err, KVFTS_EINVAL,
                         "key: invalid UTF-8 at byte %zu", bad);
    long c = first_control(key, klen);
    if (c >= 0)
        return kv_seterr(err, KVFTS_EINVAL,
                         "key: control character at byte %ld", c);
    static const char *const reserved[] = {
        KV_PREFIX_FTS, KV_PREFIX_COUNT, KV_PREFIX_META
    };
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
        if (has_prefix(key, klen, reserved[i], strlen(reserved[i])))
            return kv_seterr(err, KVFTS_EINVAL,
                             "key '%.*s': the prefix '%s' is reserved",
                             (int)klen, key, reserved[i]);
    for (size_t i = 0; i < nlookups; i++) {
        size_t ln = strlen(lookups[i]);
        if (has_prefix(key, klen, lookups[i], ln) &&
            has_prefix(key + ln, klen - ln, KV_SEP, 2))
            return kv_seterr(err, KVFTS_EINVAL,
                             "key '%.*s': the prefix '%s::' is reserved for "
                             "lookup '%s'", (int)klen, key, lookups[i],
                             lookups[i]);
    }
    return KVFTS_OK;
}

int kv_name_check(const char *what, const char *name, size_t nlen,
                  kv_err *err)
{
    if (nlen == 0)
        return kv_seterr(err, KVFTS_EINVAL, "%s name is empty", what);
    if (nlen > 128)
        return kv_seterr(err, KVFTS_EINVAL,
                         "%s name of %zu bytes is longer than 128 bytes", what,
                         nlen);
    size_t bad;
    if (!kv_utf8_valid(name, nlen, &bad))
        return kv_seterr(err, KVFTS_EINVAL,
                         "%s name: invalid UTF-8 at byte %zu", what, bad);
    for (size_t i = 0; i < nlen; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch <= 0x20 || ch == 0x7F)
            return kv_seterr(err, KVFTS_EINVAL,
                             "%s name '%.*s': space or control character at "
                             "byte %zu", what, (int)nlen, name, i);
    }
    return KVFTS_OK;
}

/* ---- documents --------------------------------------------------------- */

int kv_doc_decode(const char *rec, size_t len, const char *key, size_t klen,
                  kv_doc *out, kv_err *err)
{
    const unsigned char *p = (const unsigned char *)rec;
    if (len < DOC_HEADER + 2 || p[0] != DOC_VERSION)
        return kv_seterr(err, KVFTS_ECORRUPT,
                         "doc '%.*s': corrupt record (%zu bytes, version %d)",
                         (int)klen, key, len, len ? (int)p[0] : -1);
    out->cas = kv_get_be64(p + 1);
    out->docid = kv_get_be32(p + 9);
    out->json = rec + DOC_HEADER;
    out->json_len = len - DOC_HEADER;
    if (out->cas == 0 || out->docid == 0 || out->json[0] != '{' ||
        rec[len - 1] != '}')
        return kv_seterr(err, KVFTS_ECORRUPT,
                         "doc '%.*s': corrupt record header", (int)klen, key);
    return KVFTS_OK;
}

int kv_doc_get(kv_txn *txn, const char *key, size_t klen, kv_buf *buf,
               kv_doc *out, bool for_update, kv_err *err)
{
    int rc = kv_get(txn, KV_DOCS, key, klen, buf, for_update, err);
    if (rc)
        return rc;
    return kv_doc_decode(buf->data, buf->len, key, klen, out, err);
}

int kv_doc_scan(kv_txn *txn, kv_doc_fn fn, void *payload, kv_err *err)
{
    kv_cursor *c = NULL;
    int rc = kv_cursor_open(&c, txn, KV_DOCS, err);
    if (!rc)
        rc = kv_cursor_seek(c, "", 0, err);
    while (rc == KVFTS_OK) {
        const char *k, *v;
        size_t kl, vl;
        kv_doc d;
        kv_cursor_key(c, &k, &kl);
        kv_cursor_val(c, &v, &vl);
        rc = kv_doc_decode(v, vl, k, kl, &d, err);
        if (!rc)
            rc = fn(payload, k, kl, &d, err);
        if (!rc)
            rc = kv_cursor_next(c, err);
    }
    kv_cursor_close(c);
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

int kv_doc_put(kv_txn *txn, const char *key, size_t klen, const kv_doc *doc,
               bool new_id, kv_err *err)
{
    kv_buf rec = KV_BUF_INIT;
    int rc = kv_buf_reserve(&rec, DOC_HEADER + doc->json_len, err);
    if (rc)
        return rc;
    unsigned char *p = (unsigned char *)rec.data;
    p[0] = DOC_VERSION;
    kv_put_be64(p + 1, doc->cas);
    kv_put_be32(p + 9, doc->docid);
    memcpy(p + DOC_HEADER, doc->json, doc->json_len);
    rec.len = DOC_HEADER + doc->json_len;
    rc = kv_put(txn, KV_DOCS, key, klen, rec.data, rec.len, err);
    if (!rc && new_id) {
        unsigned char id[4];
        kv_put_be32(id, doc->docid);
        rc = kv_put(txn, KV_DOCIDS, id, 4, key, klen, err);
    }
    kv_buf_free(&rec);
    return rc;
}

int kv_doc_del(kv_txn *txn, const char *key, size_t klen, uint32_t docid,
               kv_err *err)
{
    int rc = kv_del(txn, KV_DOCS, key, klen, err);
    if (rc)
        return rc;
    unsigned char id[4];
    kv_put_be32(id, docid);
    rc = kv_del(txn, KV_DOCIDS, id, 4, err);
    if (rc == KVFTS_ENOTFOUND)
        return kv_seterr(err, KVFTS_ECORRUPT,
                         "doc '%.*s': id %u missing from the doc-id table",
                         (int)klen, key, docid);
    return rc;
}

int kv_docid_key(kv_txn *txn, uint32_t docid, kv_buf *buf, kv_err *err)
{
    unsigned char id[4];
    kv_put_be32(id, docid);
    return kv_get(txn, KV_DOCIDS, id, 4, buf, false, err);
}

/* ---- sequences --------------------------------------------------------- */

int kv_seq_reserve(kv_txn *txn, const char *name, uint64_t n, uint64_t *first,
                   kv_err *err)
{
    char key[64];
    int kl = snprintf(key, sizeof key, "seq::%s", name);
    kv_buf v = KV_BUF_INIT;
    uint64_t last = 0;
    int rc = kv_get(txn, KV_META, key, (size_t)kl, &v, true, err);
    if (rc == KVFTS_OK) {
        if (v.len != 8) {
            rc = kv_seterr(err, KVFTS_ECORRUPT,
                           "meta::%s: corrupt sequence (%zu bytes)", key,
                           v.len);
            goto done;
        }
        last = kv_get_be64((const unsigned char *)v.data);
    } else if (rc != KVFTS_ENOTFOUND) {
        goto done;
    }
    if (n == 0 || last > UINT64_MAX - n) {
        rc = kv_seterr(err, KVFTS_EINVAL, "sequence %s exhausted", name);
        goto done;
    }
    unsigned char b[8];
    kv_put_be64(b, last + n);
    rc = kv_put(txn, KV_META, key, (size_t)kl, b, 8, err);
    if (!rc)
        *first = last + 1;
done:
    kv_buf_free(&v);
    return rc;
}

int kv_seq_next(kv_txn *txn, const char *name, uint64_t *out, kv_err *err)
{
    return kv_seq_reserve(txn, name, 1, out, err);
}

/* ---- counters ---------------------------------------------------------- */

int kv_counter_get(kv_txn *txn, const char *name, size_t nlen, int64_t *out,
                   bool for_update, kv_err *err)
{
    kv_buf v = KV_BUF_INIT;
    int rc = kv_get(txn, KV_COUNTERS, name, nlen, &v, for_update, err);
    if (rc == KVFTS_ENOTFOUND)
        kv_seterr(err, rc, "counter 'count::%.*s' not found", (int)nlen, name);
    if (rc == KVFTS_OK) {
        if (v.len != 8)
            rc = kv_seterr(err, KVFTS_ECORRUPT,
                           "counter 'count::%.*s': corrupt value (%zu bytes)",
                           (int)nlen, name, v.len);
        else
            *out = (int64_t)kv_get_be64((const unsigned char *)v.data);
    }
    kv_buf_free(&v);
    return rc;
}

int kv_counter_incr(kv_txn *txn, const char *name, size_t nlen, int64_t delta,
                    const int64_t *initial, int64_t *out, kv_err *err)
{
    int64_t cur = 0, val;
    int rc = kv_counter_get(txn, name, nlen, &cur, true, err);
    if (rc == KVFTS_ENOTFOUND) {
        if (initial)
            val = *initial;
        else
            val = delta;
    } else if (rc) {
        return rc;
    } else if (__builtin_add_overflow(cur, delta, &val)) {
        return kv_seterr(err, KVFTS_EINVAL,
                         "counter 'count::%.*s': %lld + %lld overflows",
                         (int)nlen, name, (long long)cur, (long long)delta);
    }
    unsigned char b[8];
    kv_put_be64(b, (uint64_t)val);
    rc = kv_put(txn, KV_COUNTERS, name, nlen, b, 8, err);
    if (!rc)
        *out = val;
    return rc;
}
