/*
 * kv_doc.c -- document records, key records, sequences, counters and the
 * rules for keys and names.
 *
 * On-disk formats (version 2; change this comment with the format):
 *
 *   docs.db      key   = internal doc id, big-endian u32 (sorts by id)
 *                value = byte 0       record version, 2
 *                        bytes 1..8   CAS, big-endian u64, never 0
 *                        byte 9       key length K, 1..250
 *                        bytes 10..   the user key (K bytes)
 *                        then u8      encoding: 0 the document as it is,
 *                                     1 a zstd frame (with its content
 *                                     size) holding the document, 2 the
 *                                     same made with the dictionary
 *                                     (the frame names its id)
 *                        then         the document, compact JSON (kv_json.c),
 *                                     in that encoding
 *   keys.db      key   = the user key (UTF-8, 1..250 bytes, as given)
 *                value = byte 0       record version, 2
 *                        bytes 1..4   internal doc id, big-endian u32
 *                (a B-tree with Berkeley DB's prefix compression when made
 *                by this version, a plain one when made by an earlier one:
 *                the records are the same; kv_spaces in kv_bdb.c)
 *   counters.db  key   = counter NAME (logical key "count::NAME")
 *                value = big-endian two's-complement i64
 *   meta.db      "docdict"    u8 version 1, then a zstd dictionary
 *                "seq::cas"   big-endian u64: the last CAS handed out
 *                "seq::docid" big-endian u64: the last doc id handed out
 *
 * CAS values come from one database-wide sequence, so a CAS is never reused,
 * not even after a delete and re-create of the same key (no ABA).  Doc ids
 * also come from a sequence and are never reused: a document keeps its id
 * when replaced and a new document gets a new id, which keeps postings
 * append-mostly.
 *
 * Documents are stored by internal id, not by user key, because ids are
 * handed out in ascending order: a load appends to the right edge of the
 * B-tree, which leaves pages full (user keys arrive in any order, and a
 * B-tree filled at random runs about 60% full: the Debian catalog took
 * 88 MB keyed by name, 50 MB keyed by id), and Berkeley DB's bulk
 * transactions do not log inserts into pages they allocated themselves.
 * A search reads its hits' documents by id in one B-tree read each; a read
 * by key goes through the small keys.db first.  User keys do arrive in any
 * order, so a batch holds its new key records (kv_pending_keys) and stores
 * them sorted, in one bulk put, when it writes its index buffer.
 *
 * Documents of ZSTD_MIN bytes or more are compressed with zstd (Debian's
 * libzstd; level ZSTD_LEVEL) when that makes them shorter, as Lucene
 * compresses its stored fields: JSON repeats its member names and values.
 * One document alone is too short for zstd to find much to refer back to,
 * so once SAMPLE_DOCS documents (or SAMPLE_BYTES) have been written the
 * database trains a dictionary on them (ZDICT_trainFromBuffer_fastCover),
 * stores it in meta.db and
 * compresses every later document with it: the catalog's 47 MB of
 * documents take 27 MB alone, about 18 MB with the dictionary.  The
 * dictionary never changes once stored (documents name it by its id); a
 * writer that trained one checks, once per transaction, that it was stored
 * (its transaction may have aborted), and reads it back with a write lock
 * before storing its own, so two writers cannot store two.  Decompressing
 * one document costs about a microsecond.  The zstd contexts are per handle
 * (kv_txn_slot), made on first use; their allocations do not go
 * through kv_malloc (as YAJL's do not), so the fault hook cannot fail them,
 * but a failure is still reported as KVFTS_ENOMEM.
 *
 * Every decoder takes (buf, len), checks bounds and reports KVFTS_ECORRUPT.
 */
#include "kv.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define ZDICT_STATIC_LINKING_ONLY   /* ZDICT_trainFromBuffer_fastCover */
#include <zdict.h>
#include <xxhash.h>
#include <zstd.h>

#define DOC_VERSION 2
#define DOC_HEADER 10   /* version, CAS, key length */

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

#define KEY_RECORD 5
#define DOC_RAW 0          /* encoding byte: the JSON as it is */
#define DOC_ZSTD 1         /* a zstd frame holding the JSON */
#define DOC_ZDICT 2        /* a zstd frame made with the database's dictionary */
#define ZSTD_MIN 64        /* shorter documents are stored as they are */
#define ZSTD_LEVEL 1
#define DICT_KEY "docdict"           /* meta.db: the dictionary */
#define DICT_VERSION 1
#define DICT_BYTES (32u * 1024u)     /* trained dictionary size */
#define SAMPLE_DOCS 1000u            /* documents it is trained on */
/* ... or this many bytes of them, whichever comes first.  Training runs on
 * the writing thread while a load's workers wait for documents: on 1 MiB
 * it took 17 ms of a 0.45 s load of the Linux docs (125 documents of 8 KB);
 * on 256 KiB the databases of the catalog, GCIDE and the Linux docs came
 * out within 0.4% of the same size. */
#define SAMPLE_BYTES (256u * 1024u)

struct kv_doc_cctx {
    ZSTD_CCtx *c;
};

typedef struct kv_doc_codec {
    kv_doc_cctx *cx;       /* made on the first write */
    ZSTD_DCtx *d;          /* made on the first read of a zstd record */
    /* The database's dictionary, once it has one. */
    ZSTD_CDict *cd;        /* for writes: known stored as of txn ... */
    uint64_t cd_txn;       /* ... serial cd_txn of this handle */
    ZSTD_DDict *dd;        /* for reads */
    unsigned dict_id;      /* their zstd dictionary id (0: none) */
    uint64_t looked_txn;   /* serial of the last write txn that found none */
    /* Training samples, until there are enough. */
    kv_buf samples;
    size_t *sizes;
    unsigned nsamples;
    bool no_dict;          /* training failed: write without one */
} kv_doc_codec;

static void drop_dict(kv_doc_codec *c)
{
    ZSTD_freeCDict(c->cd);
    ZSTD_freeDDict(c->dd);
    c->cd = NULL;
    c->dd = NULL;
    c->dict_id = 0;
}

static void drop_samples(kv_doc_codec *c)
{
    kv_buf_free(&c->samples);
    kv_free(c->sizes);
    c->sizes = NULL;
    c->nsamples = 0;
}

static void codec_free(void *p)
{
    kv_doc_codec *c = p;
    if (!c)
        return;
    kv_doc_cctx_free(c->cx);
    ZSTD_freeDCtx(c->d);
    drop_dict(c);
    drop_samples(c);
    kv_free(c);
}

static kv_doc_codec *codec(kv_txn *txn, kv_err *err)
{
    void **slot = kv_txn_slot(txn, codec_free);
    if (!*slot && !(*slot = kv_calloc(1, sizeof(kv_doc_codec))))
        kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    return *slot;
}

/* Load the stored dictionary (meta "docdict": u8 version, then the zstd
 * dictionary) into c.  KVFTS_ENOTFOUND if there is none. */
static int load_dict(kv_doc_codec *c, kv_txn *txn, bool for_update,
                     bool for_writes, kv_err *err)
{
    kv_buf v = KV_BUF_INIT;
    int rc = kv_get(txn, KV_META, DICT_KEY, strlen(DICT_KEY), &v, for_update,
                    err);
    if (rc)
        goto done;
    unsigned id = v.len > 1 ? ZDICT_getDictID(v.data + 1, v.len - 1) : 0;
    if (v.data[0] != DICT_VERSION || id == 0) {
        rc = kv_seterr(err, KVFTS_ECORRUPT, "meta::" DICT_KEY ": corrupt "
                       "document dictionary (%zu bytes)", v.len);
        goto done;
    }
    if (id != c->dict_id || !c->dd || (for_writes && !c->cd)) {
        drop_dict(c);
        c->dd = ZSTD_createDDict(v.data + 1, v.len - 1);
        if (for_writes && c->dd)
            c->cd = ZSTD_createCDict(v.data + 1, v.len - 1, ZSTD_LEVEL);
        if (!c->dd || (for_writes && !c->cd)) {
            /* zstd says NULL for damaged entropy tables and for no memory
             * alike (its trial load reports both as memory_allocation);
             * the dictionary's header checked out, so damage it is --
             * the likelier of the two and the one that needs telling. */
            drop_dict(c);
            rc = kv_seterr(err, KVFTS_ECORRUPT, "meta::" DICT_KEY ": the "
                           "document dictionary does not load (corrupt, or "
                           "out of memory)");
            goto done;
        }
        c->dict_id = id;
    }
    if (for_writes)
        c->cd_txn = kv_txn_serial(txn);
done:
    kv_buf_free(&v);
    return rc;
}

/* Keep a document as a training sample; once there are SAMPLE_DOCS, train
 * the dictionary and store it (unless another writer stored one first). */
static int sample_and_train(kv_doc_codec *c, kv_txn *txn, const char *json,
                            size_t len, kv_err *err)
{
    if (c->no_dict)
        return KVFTS_OK;
    if (c->nsamples % 64 == 0) {
        size_t *z = kv_realloc(c->sizes, (c->nsamples + 64) * sizeof *z);
        if (!z)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        c->sizes = z;
    }
    int rc = kv_buf_append(&c->samples, json, len, err);
    if (rc)
        return rc;
    c->sizes[c->nsamples++] = len;
    if (c->nsamples < SAMPLE_DOCS && c->samples.len < SAMPLE_BYTES)
        return KVFTS_OK;
    /* Enough: first make sure no other writer stored one meanwhile (the
     * read locks meta's page until commit, so two trainers serialise). */
    rc = load_dict(c, txn, true, true, err);
    if (rc != KVFTS_ENOTFOUND) {
        if (!rc)
            drop_samples(c);
        return rc;
    }
    kv_buf d = KV_BUF_INIT;
    rc = kv_buf_reserve(&d, 1 + DICT_BYTES, err);
    if (rc)
        return rc;
    d.data[0] = DICT_VERSION;
    /* FastCover with fixed parameters (segments of k = 200 bytes, d = 8),
     * not ZDICT_trainFromBuffer's search over k: that took 0.10-0.13 s of
     * a load's serial start, this 0.01 s, and its dictionary compressed
     * the Debian catalog and GCIDE 0.4% and 0.7% smaller at ZSTD_LEVEL. */
    ZDICT_fastCover_params_t fp;
    memset(&fp, 0, sizeof fp);
    fp.k = 200;
    fp.d = 8;
    fp.f = 20;
    fp.accel = 1;
    fp.splitPoint = 1.0;
    fp.zParams.compressionLevel = ZSTD_LEVEL;
    size_t n = ZDICT_trainFromBuffer_fastCover(d.data + 1, DICT_BYTES,
                                               c->samples.data, c->sizes,
                                               c->nsamples, fp);
    if (ZDICT_isError(n) || ZDICT_getDictID(d.data + 1, n) == 0) {
        c->no_dict = true;           /* samples too alike or too few */
        drop_samples(c);
        kv_buf_free(&d);
        return KVFTS_OK;
    }
    d.len = 1 + n;
    rc = kv_put(txn, KV_META, DICT_KEY, strlen(DICT_KEY), d.data, d.len, err);
    kv_buf_free(&d);
    if (!rc)
        rc = load_dict(c, txn, false, true, err);
    if (!rc)
        drop_samples(c);
    return rc;
}

/* The dictionary to compress with in txn, or NULL (none yet). */
static int write_dict(kv_doc_codec *c, kv_txn *txn, const char *json,
                      size_t len, ZSTD_CDict **out, kv_err *err)
{
    uint64_t serial = kv_txn_serial(txn);
    *out = NULL;
    int rc = KVFTS_OK;
    /* A dictionary made in a transaction that aborted is not stored: check
     * once per transaction that ours is. */
    if (c->cd && c->cd_txn != serial) {
        rc = load_dict(c, txn, false, true, err);
        if (rc == KVFTS_ENOTFOUND) {
            drop_dict(c);
            rc = KVFTS_OK;
        }
    }
    if (!rc && !c->cd && c->looked_txn != serial) {
        rc = load_dict(c, txn, false, true, err);
        if (rc == KVFTS_ENOTFOUND) {
            c->looked_txn = serial;
            rc = sample_and_train(c, txn, json, len, err);
        }
    } else if (!rc && !c->cd) {
        rc = sample_and_train(c, txn, json, len, err);
    }
    if (!rc)
        *out = c->cd;
    return rc;
}

/* Decode the document record of @p docid held in b->data[0 .. len): a
 * compressed document is decompressed into b after the record (so b grows
 * and may move); out points into b. */
static int decode_record(kv_txn *txn, kv_buf *b, size_t len, uint32_t docid,
                         kv_doc *out, kv_err *err)
{
    const unsigned char *p = (const unsigned char *)b->data;
    size_t klen = len > DOC_HEADER ? p[DOC_HEADER - 1] : 0;
    size_t body = DOC_HEADER + klen + 1;     /* after the encoding byte */
    if (len < DOC_HEADER + 3 || p[0] != DOC_VERSION || klen == 0 ||
        klen > KVFTS_MAX_KEY || len < body + 2 || p[body - 1] > DOC_ZDICT)
        return kv_seterr(err, KVFTS_ECORRUPT,
                         "doc id %u: corrupt record (%zu bytes, version %d)",
                         docid, len, len ? (int)p[0] : -1);
    size_t json_off = body, json_len = len - body;
    if (p[body - 1] != DOC_RAW) {
        bool dict = p[body - 1] == DOC_ZDICT;
        unsigned long long n = ZSTD_getFrameContentSize(p + body, len - body);
        if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN ||
            n < 2 || n > KVFTS_MAX_DOC)
            return kv_seterr(err, KVFTS_ECORRUPT,
                             "doc id %u: corrupt compressed document",
                             docid);
        kv_doc_codec *c = codec(txn, err);
        if (!c)
            return KVFTS_ENOMEM;
        if (!c->d && !(c->d = ZSTD_createDCtx()))
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        unsigned id = dict ? ZSTD_getDictID_fromFrame(p + body, len - body)
                           : 0;
        if (dict && (id != c->dict_id || !c->dd)) {
            int rc = load_dict(c, txn, false, false, err);
            if (rc == KVFTS_ENOTFOUND || (!rc && id != c->dict_id))
                return kv_seterr(err, KVFTS_ECORRUPT, "doc id %u: compressed "
                                 "with dictionary %u, which is not stored",
                                 docid, id);
            if (rc)
                return rc;
        }
        b->len = len;
        int rc = kv_buf_reserve(b, (size_t)n, err);
        if (rc)
            return rc;
        size_t got = dict ? ZSTD_decompress_usingDDict(c->d, b->data + len,
                                                       (size_t)n,
                                                       b->data + body,
                                                       len - body, c->dd)
                          : ZSTD_decompressDCtx(c->d, b->data + len, (size_t)n,
                                                b->data + body, len - body);
        if (ZSTD_isError(got) || got != n)
            return kv_seterr(err, KVFTS_ECORRUPT,
                             "doc id %u: corrupt compressed document (%s)",
                             docid, ZSTD_isError(got) ?
                             ZSTD_getErrorName(got) : "short");
        json_off = len;
        json_len = (size_t)n;
        b->len = len + json_len;
        b->data[b->len] = '\0';
        p = (const unsigned char *)b->data;
    }
    out->cas = kv_get_be64(p + 1);
    out->docid = docid;
    out->key = b->data + DOC_HEADER;
    out->key_len = klen;
    out->json = b->data + json_off;
    out->json_len = json_len;
    if (out->cas == 0 || docid == 0 || out->json[0] != '{' ||
        out->json[json_len - 1] != '}')
        return kv_seterr(err, KVFTS_ECORRUPT,
                         "doc '%.*s' (id %u): corrupt record header",
                         (int)klen, out->key, docid);
    return KVFTS_OK;
}

int kv_key_docid(kv_txn *txn, const char *key, size_t klen, uint32_t *out,
                 bool for_update, kv_err *err)
{
    kv_buf v = KV_BUF_INIT;
    int rc = kv_get(txn, KV_KEYS, key, klen, &v, for_update, err);
    if (!rc) {
        const unsigned char *p = (const unsigned char *)v.data;
        if (v.len != KEY_RECORD || p[0] != DOC_VERSION ||
            kv_get_be32(p + 1) == 0)
            rc = kv_seterr(err, KVFTS_ECORRUPT,
                           "doc '%.*s': corrupt key record (%zu bytes)",
                           (int)klen, key, v.len);
        else
            *out = kv_get_be32(p + 1);
    }
    kv_buf_free(&v);
    return rc;
}

/* The document record of docid, read into buf and decoded. */
static int doc_read_id(kv_txn *txn, uint32_t docid, kv_buf *buf, kv_doc *out,
                       bool for_update, kv_err *err)
{
    unsigned char id[4];
    kv_put_be32(id, docid);
    int rc = kv_get(txn, KV_DOCS, id, 4, buf, for_update, err);
    return rc ? rc : decode_record(txn, buf, buf->len, docid, out, err);
}

int kv_doc_get_id(kv_txn *txn, uint32_t docid, kv_buf *buf, kv_doc *out,
                  kv_err *err)
{
    return doc_read_id(txn, docid, buf, out, false, err);
}

int kv_doc_get(kv_txn *txn, const char *key, size_t klen, kv_buf *buf,
               kv_doc *out, bool for_update, kv_err *err)
{
    uint32_t docid;
    int rc = kv_key_docid(txn, key, klen, &docid, for_update, err);
    return rc ? rc : kv_doc_get_keyed(txn, key, klen, docid, buf, out,
                                      for_update, err);
}

int kv_doc_get_keyed(kv_txn *txn, const char *key, size_t klen,
                     uint32_t docid, kv_buf *buf, kv_doc *out,
                     bool for_update, kv_err *err)
{
    int rc = doc_read_id(txn, docid, buf, out, for_update, err);
    if (rc == KVFTS_ENOTFOUND)
        return kv_seterr(err, KVFTS_ECORRUPT,
                         "doc '%.*s': its id %u holds no document", (int)klen,
                         key, docid);
    if (!rc && (out->key_len != klen || memcmp(out->key, key, klen) != 0))
        rc = kv_seterr(err, KVFTS_ECORRUPT,
                       "doc '%.*s': its id %u holds the document of '%.*s'",
                       (int)klen, key, docid, (int)out->key_len, out->key);
    return rc;
}

int kv_doc_scan(kv_txn *txn, kv_doc_fn fn, void *payload, kv_err *err)
{
    kv_cursor *c = NULL;
    kv_buf rec = KV_BUF_INIT;
    int rc = kv_cursor_open(&c, txn, KV_DOCS, err);
    if (!rc)
        rc = kv_cursor_seek(c, "", 0, err);
    while (rc == KVFTS_OK) {
        const char *k, *v;
        size_t kl, vl;
        kv_doc d;
        kv_cursor_key(c, &k, &kl);
        kv_cursor_val(c, &v, &vl);
        if (kl != 4)
            rc = kv_seterr(err, KVFTS_ECORRUPT,
                           "documents: corrupt doc id of %zu bytes", kl);
        kv_buf_reset(&rec);
        if (!rc)
            rc = kv_buf_append(&rec, v, vl, err);
        if (!rc)
            rc = decode_record(txn, &rec, vl,
                               kv_get_be32((const unsigned char *)k), &d, err);
        if (!rc)
            rc = fn(payload, d.key, d.key_len, &d, err);
        if (!rc)
            rc = kv_cursor_next(c, err);
    }
    kv_cursor_close(c);
    kv_buf_free(&rec);
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

int kv_doc_coder_get(kv_txn *txn, const char *json, size_t len,
                     kv_doc_coder *out, kv_err *err)
{
    out->cdict = NULL;
    out->compress = len >= ZSTD_MIN;
    if (!out->compress)
        return KVFTS_OK;
    kv_doc_codec *c = codec(txn, err);
    if (!c)
        return KVFTS_ENOMEM;
    ZSTD_CDict *cd = NULL;
    int rc = write_dict(c, txn, json, len, &cd, err);
    out->cdict = cd;
    return rc;
}

void kv_doc_cctx_free(kv_doc_cctx *x)
{
    if (x) {
        ZSTD_freeCCtx(x->c);
        kv_free(x);
    }
}

int kv_doc_encode(kv_doc_cctx **cx, const kv_doc_coder *cd, const char *key,
                  size_t klen, uint64_t cas, const char *json, size_t len,
                  kv_buf *out, kv_err *err)
{
    if (klen == 0 || klen > KVFTS_MAX_KEY)
        return kv_seterr(err, KVFTS_EINVAL, "key of %zu bytes", klen);
    if (cd->compress && !*cx) {
        if (!(*cx = kv_calloc(1, sizeof **cx)) ||
            !((*cx)->c = ZSTD_createCCtx()))
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }
    size_t body = DOC_HEADER + klen + 1;
    kv_buf_reset(out);
    int rc = kv_buf_reserve(out, body + (cd->compress ? ZSTD_compressBound(len)
                                                      : len), err);
    if (rc)
        return rc;
    unsigned char *p = (unsigned char *)out->data;
    p[0] = DOC_VERSION;
    kv_put_be64(p + 1, cas);
    p[DOC_HEADER - 1] = (unsigned char)klen;
    memcpy(p + DOC_HEADER, key, klen);
    ZSTD_CDict *dict = cd->cdict;
    size_t n = !cd->compress ? 0
             : dict ? ZSTD_compress_usingCDict((*cx)->c, p + body,
                                               out->cap - 1 - body, json, len,
                                               dict)
             : ZSTD_compressCCtx((*cx)->c, p + body, out->cap - 1 - body,
                                 json, len, ZSTD_LEVEL);
    if (cd->compress && !ZSTD_isError(n) && n < len) {
        p[body - 1] = dict ? DOC_ZDICT : DOC_ZSTD;
    } else {       /* short, incompressible, or the codec failed: as is */
        p[body - 1] = DOC_RAW;
        memcpy(p + body, json, len);
        n = len;
    }
    out->len = body + n;
    return KVFTS_OK;
}

int kv_doc_put_record(kv_txn *txn, uint32_t docid, const char *rec,
                      size_t len, kv_err *err)
{
    unsigned char id[4];
    kv_put_be32(id, docid);
    return kv_put(txn, KV_DOCS, id, 4, rec, len, err);
}

int kv_doc_put_recas(kv_txn *txn, const kv_doc *doc, kv_buf *buf,
                     uint64_t cas, kv_err *err)
{
    /* buf: the record as stored, then (compressed) the JSON decoded from
     * it; doc->json points into one or the other (decode_record). */
    size_t body = DOC_HEADER + doc->key_len + 1;
    if (buf->len < body || doc->json < buf->data ||
        doc->json + doc->json_len != buf->data + buf->len || cas == 0)
        return kv_seterr(err, KVFTS_EINVAL, "doc id %u: no record read to "
                         "store again", doc->docid);
    bool raw = (unsigned char)buf->data[body - 1] == DOC_RAW;
    size_t len = raw ? buf->len : (size_t)(doc->json - buf->data);
    kv_put_be64((unsigned char *)buf->data + 1, cas);
    return kv_doc_put_record(txn, doc->docid, buf->data, len, err);
}

static void key_record(unsigned char kr[KEY_RECORD], uint32_t docid)
{
    kr[0] = DOC_VERSION;
    kv_put_be32(kr + 1, docid);
}

int kv_key_put(kv_txn *txn, const char *key, size_t klen, uint32_t docid,
               kv_err *err)
{
    if (klen == 0 || klen > KVFTS_MAX_KEY)
        return kv_seterr(err, KVFTS_EINVAL, "key of %zu bytes", klen);
    unsigned char kr[KEY_RECORD];
    key_record(kr, docid);
    return kv_put(txn, KV_KEYS, key, klen, kr, sizeof kr, err);
}

/* ---- held key records ---------------------------------------------------- */

static uint32_t key_hash(const char *key, size_t klen)
{
    return (uint32_t)XXH3_64bits(key, klen);   /* as index/'s term table */
}

/* The slot of key in p's set: the one that holds it, or the empty one where
 * it would go. */
static size_t pending_slot(const kv_pending_keys *p, const char *key,
                           size_t klen)
{
    size_t mask = p->nslots - 1, i = key_hash(key, klen) & mask;
    for (;; i = (i + 1) & mask) {
        uint32_t s = p->slot[i];
        if (s == 0)
            return i;
        const unsigned char *e = (const unsigned char *)p->arena.data + s - 1;
        if (e[0] == klen && memcmp(e + 1, key, klen) == 0)
            return i;
    }
}

bool kv_pending_key_has(const kv_pending_keys *p, const char *key,
                        size_t klen)
{
    return p->n > 0 && p->slot[pending_slot(p, key, klen)] != 0;
}

static int pending_grow(kv_pending_keys *p, kv_err *err)
{
    size_t nslots = p->nslots ? p->nslots * 2 : 1024;
    uint32_t *slot = kv_calloc_written(nslots, sizeof *slot);  /* probed */
    if (!slot)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    uint32_t *old = p->slot;
    size_t nold = p->nslots;
    p->slot = slot;
    p->nslots = nslots;
    for (size_t i = 0; i < nold; i++) {
        if (!old[i])
            continue;
        const unsigned char *e = (const unsigned char *)p->arena.data +
                                 old[i] - 1;
        p->slot[pending_slot(p, (const char *)e + 1, e[0])] = old[i];
    }
    kv_free(old);
    return KVFTS_OK;
}

int kv_pending_key_add(kv_pending_keys *p, const char *key, size_t klen,
                       uint32_t docid, kv_err *err)
{
    if (klen == 0 || klen > KVFTS_MAX_KEY)
        return kv_seterr(err, KVFTS_EINVAL, "key of %zu bytes", klen);
    if (p->arena.len + 1 + klen + KEY_RECORD >= UINT32_MAX)
        return kv_seterr(err, KVFTS_ENOMEM, "too many held keys");
    int rc = KVFTS_OK;
    if ((p->n + 1) * 2 > p->nslots)
        rc = pending_grow(p, err);
    if (!rc)
        rc = kv_buf_reserve(&p->arena, 1 + klen + KEY_RECORD, err);
    if (rc)
        return rc;
    size_t at = p->arena.len;
    unsigned char *e = (unsigned char *)p->arena.data + at;
    e[0] = (unsigned char)klen;
    memcpy(e + 1, key, klen);
    key_record(e + 1 + klen, docid);
    p->arena.len += 1 + klen + KEY_RECORD;
    size_t i = pending_slot(p, key, klen);
    assert(p->slot[i] == 0);
    p->slot[i] = (uint32_t)at + 1;
    p->n++;
    return KVFTS_OK;
}

static int rec_cmp(const void *a, const void *b)
{
    const kv_rec *x = a, *y = b;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(x->key, y->key, n);
    return c ? c : (x->klen > y->klen) - (x->klen < y->klen);
}

int kv_pending_keys_store(kv_pending_keys *p, kv_txn *txn, kv_err *err)
{
    if (p->n == 0)
        return KVFTS_OK;
    kv_rec *v = kv_malloc(p->n * sizeof *v);
    if (!v)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    size_t n = 0;
    for (size_t off = 0; off < p->arena.len; n++) {
        const unsigned char *e = (const unsigned char *)p->arena.data + off;
        v[n].key = e + 1;
        v[n].klen = e[0];
        v[n].val = e + 1 + e[0];
        v[n].vlen = KEY_RECORD;
        off += 1 + e[0] + KEY_RECORD;
    }
    assert(n == p->n);
    qsort(v, n, sizeof *v, rec_cmp);
    int rc = kv_put_sorted(txn, KV_KEYS, v, n, err);
    kv_free(v);
    if (!rc)
        kv_pending_keys_reset(p);
    return rc;
}

void kv_pending_keys_reset(kv_pending_keys *p)
{
    if (p->n)
        memset(p->slot, 0, p->nslots * sizeof *p->slot);
    p->n = 0;
    kv_buf_reset(&p->arena);
}

void kv_pending_keys_free(kv_pending_keys *p)
{
    kv_buf_free(&p->arena);
    kv_free(p->slot);
    p->slot = NULL;
    p->nslots = 0;
    p->n = 0;
}

int kv_doc_put(kv_txn *txn, const char *key, size_t klen, const kv_doc *doc,
               bool new_id, kv_err *err)
{
    int rc = new_id ? kv_key_put(txn, key, klen, doc->docid, err) : KVFTS_OK;
    kv_doc_coder cd;
    if (!rc)
        rc = kv_doc_coder_get(txn, doc->json, doc->json_len, &cd, err);
    kv_doc_codec *c = rc ? NULL : codec(txn, err);
    if (!rc && !c)
        rc = KVFTS_ENOMEM;
    kv_buf rec = KV_BUF_INIT;
    if (!rc)
        rc = kv_doc_encode(&c->cx, &cd, key, klen, doc->cas, doc->json,
                           doc->json_len, &rec, err);
    if (!rc)
        rc = kv_doc_put_record(txn, doc->docid, rec.data, rec.len, err);
    kv_buf_free(&rec);
    return rc;
}

int kv_doc_del(kv_txn *txn, const char *key, size_t klen, uint32_t docid,
               kv_err *err)
{
    int rc = kv_del(txn, KV_KEYS, key, klen, err);
    if (rc)
        return rc;
    unsigned char id[4];
    kv_put_be32(id, docid);
    rc = kv_del(txn, KV_DOCS, id, 4, err);
    if (rc == KVFTS_ENOTFOUND)
        return kv_seterr(err, KVFTS_ECORRUPT,
                         "doc '%.*s': id %u holds no document", (int)klen,
                         key, docid);
    return rc;
}

int kv_docid_key(kv_txn *txn, uint32_t docid, kv_buf *buf, kv_err *err)
{
    unsigned char id[4];
    kv_put_be32(id, docid);
    int rc = kv_get_head(txn, KV_DOCS, id, 4, DOC_HEADER + KVFTS_MAX_KEY, buf,
                         err);
    if (rc)
        return rc;
    const unsigned char *p = (const unsigned char *)buf->data;
    size_t klen = buf->len >= DOC_HEADER ? p[DOC_HEADER - 1] : 0;
    if (p[0] != DOC_VERSION || klen == 0 || klen > KVFTS_MAX_KEY ||
        buf->len < DOC_HEADER + klen)
        return kv_seterr(err, KVFTS_ECORRUPT,
                         "doc id %u: corrupt record (%zu bytes)", docid,
                         buf->len);
    memmove(buf->data, buf->data + DOC_HEADER, klen);
    buf->len = klen;
    buf->data[klen] = '\0';
    return KVFTS_OK;
}

/* ---- sequences --------------------------------------------------------- */

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
