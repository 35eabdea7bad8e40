/*
 * fuzz_docrec.c -- fuzz target for the document records (lib/kv/kv_doc.c):
 * arbitrary bytes as a record of docs.db, optionally with arbitrary bytes
 * as the database's zstd dictionary (meta.db "docdict").  Bytes read from
 * disk are untrusted: a damaged record or dictionary must be
 * refused with KVFTS_ECORRUPT, never read or written out of bounds, and a
 * record that decodes must be a sane document.
 *
 * Input layout: byte 0 is a mode; bit 0 set: bytes 1-2 are a big-endian
 * length L and the next L bytes are stored as the dictionary record; the
 * rest is the document record of internal id 1, whose key record names the
 * key "k".  The committed corpus holds real records of each encoding (as
 * is, zstd, zstd with the dictionary) cut from a loaded catalog.
 *
 * Per input, inside one write transaction that is then aborted (so nothing
 * stays): the record is read by id (kv_doc_get_id), by key (kv_doc_get),
 * for its key alone (kv_docid_key) and by a scan (kv_doc_scan).  Each must
 * succeed or say KVFTS_ECORRUPT; a decoded document has a 1..250-byte key
 * and JSON that starts with '{' and ends with '}', the same every way.
 *
 * One environment serves the whole run; each input gets a handle of its
 * own (a fresh document codec, so a dictionary cached for an earlier input
 * cannot decide this one).  The directory is removed at exit.
 */
#include "testutil.h"     /* first: it sets _XOPEN_SOURCE for nftw() */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz_docrec: line " \
    "%d: %s\n", __LINE__, #c); abort(); } } while (0)

static char *dir;
static kv_env *anchor;   /* keeps the shared environment open */

static void cleanup(void)
{
    kv_env_close(anchor);
    if (dir) {
        tu_rmtree(dir);
        free(dir);
    }
}

static void setup(void)
{
    kv_err err = KV_ERR_INIT;
    kv_env_options o = { true, false, 0 };
    dir = tu_tmpdir();
    CHECK(dir);
    if (kv_env_open(&anchor, dir, &o, &err) != KVFTS_OK) {
        fprintf(stderr, "fuzz_docrec: %s\n", err.msg);
        abort();
    }
    atexit(cleanup);
}

typedef struct seen {
    int n;
    char *json;           /* a copy: the scan's buffers die with it */
    size_t json_len;
} seen;

static int on_doc(void *payload, const char *key, size_t klen,
                  const kv_doc *doc, kv_err *err)
{
    (void)err;
    seen *s = payload;
    CHECK(key == doc->key && klen == doc->key_len);
    s->n++;
    free(s->json);
    s->json = malloc(doc->json_len ? doc->json_len : 1);
    CHECK(s->json);
    memcpy(s->json, doc->json, doc->json_len);
    s->json_len = doc->json_len;
    return KVFTS_OK;
}

static void check_doc(const kv_doc *d)
{
    CHECK(d->docid == 1 && d->cas != 0);
    CHECK(d->key_len >= 1 && d->key_len <= KVFTS_MAX_KEY);
    CHECK(d->json_len >= 2 && d->json[0] == '{' &&
          d->json[d->json_len - 1] == '}');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!anchor)
        setup();
    if (size < 1)
        return 0;
    const uint8_t *dict = NULL;
    size_t dlen = 0, off = 1;
    if (data[0] & 1) {
        if (size < 3)
            return 0;
        dlen = (size_t)data[1] << 8 | data[2];
        off = 3;
        if (dlen > size - off)
            dlen = size - off;
        dict = data + off;
        off += dlen;
    }
    kv_err err = KV_ERR_INIT;
    kv_env *env = NULL;
    CHECK(kv_env_open(&env, dir, NULL, &err) == KVFTS_OK);
    kv_txn *t = NULL;
    CHECK(kv_txn_begin(&t, env, true, &err) == KVFTS_OK);
    static const unsigned char id1[4] = { 0, 0, 0, 1 };
    static const unsigned char keyrec[5] = { 2, 0, 0, 0, 1 };
    CHECK(kv_put(t, KV_KEYS, "k", 1, keyrec, sizeof keyrec, &err) == 0);
    CHECK(kv_put(t, KV_DOCS, id1, 4, data + off, size - off, &err) == 0);
    if (dict)
        CHECK(kv_put(t, KV_META, "docdict", 7, dict, dlen, &err) == 0);

    kv_buf b1 = KV_BUF_INIT, b2 = KV_BUF_INIT, b3 = KV_BUF_INIT;
    kv_doc d1, d2;
    int r1 = kv_doc_get_id(t, 1, &b1, &d1, &err);
    CHECK(r1 == KVFTS_OK || r1 == KVFTS_ECORRUPT);
    int r2 = kv_doc_get(t, "k", 1, &b2, &d2, false, &err);
    CHECK(r2 == KVFTS_OK || r2 == KVFTS_ECORRUPT);
    int r3 = kv_docid_key(t, 1, &b3, &err);
    CHECK(r3 == KVFTS_OK || r3 == KVFTS_ECORRUPT);
    seen s = { 0, NULL, 0 };
    int r4 = kv_doc_scan(t, on_doc, &s, &err);
    CHECK(r4 == KVFTS_OK || r4 == KVFTS_ECORRUPT);
    /* Every read that succeeds returns the same well-formed document, and
     * without a dictionary the reads also agree on whether they succeed.
     * With one (arbitrary bytes here) they need not: zstd 1.5 decodes with
     * its prefetching sequence decoder the first time a context meets a
     * dictionary and with the plain one afterwards, and on a damaged
     * dictionary the two can disagree, so a later read may say ECORRUPT
     * where the first succeeded (corpus/docrec/zstd-cold-warm, found by
     * this target; zstd alone, with a fresh context per call, decodes it
     * every time).  Memory safety is what the sanitizers check either way. */
    bool strict = dict == NULL;
    if (r1 == KVFTS_OK) {
        check_doc(&d1);
        CHECK(r3 == KVFTS_OK && b3.len == d1.key_len &&
              memcmp(b3.data, d1.key, d1.key_len) == 0);
        CHECK(!strict || (r4 == KVFTS_OK && s.n == 1));
        if (r4 == KVFTS_OK)
            CHECK(s.n == 1 && s.json_len == d1.json_len &&
                  memcmp(s.json, d1.json, d1.json_len) == 0);
        /* By key: the same document if its key is "k", else refused. */
        if (d1.key_len == 1 && d1.key[0] == 'k') {
            CHECK(!strict || r2 == KVFTS_OK);
            if (r2 == KVFTS_OK)
                CHECK(d2.json_len == d1.json_len &&
                      memcmp(d2.json, d1.json, d1.json_len) == 0);
        } else {
            CHECK(r2 == KVFTS_ECORRUPT);
        }
    } else {
        CHECK(!strict || (r2 == KVFTS_ECORRUPT && r4 == KVFTS_ECORRUPT));
        if (r2 == KVFTS_OK)
            check_doc(&d2);
        if (r4 == KVFTS_OK)
            CHECK(s.n == 1 && s.json_len >= 2 && s.json[0] == '{' &&
                  s.json[s.json_len - 1] == '}');
    }
    free(s.json);
    kv_buf_free(&b1);
    kv_buf_free(&b2);
    kv_buf_free(&b3);
    kv_txn_abort(t);
    kv_env_close(env);
    return 0;
}
