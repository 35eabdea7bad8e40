/*
 * fuzz_json.c -- fuzz target for JSON ingestion (lib/kv/kv_json.c, kv_doc.c's
 * key checks, kv_config.c): the path every document, key and configuration
 * takes before anything is stored.
 *
 * One input is used four ways:
 *   1. as a document: kv_json_walk() validates and compacts it, reporting
 *      every scalar.  When it is accepted, the compact form must be a fixed
 *      point (walking it again gives the same bytes and the same scalars, as
 *      the README promises of stored documents); when refused, the error
 *      must be KVFTS_EINVAL with a position inside the input, and the output
 *      buffer must hold exactly what it held before (nothing half-written).
 *   2. as a document walked by a callback that stops at the k-th scalar
 *      (k from the input's length): the walk returns the callback's code and
 *      again leaves nothing in the output.
 *   3. as a document key and a counter/lookup name (kv_key_check,
 *      kv_name_check), with a lookup declared so the lookup-prefix rule runs.
 *   4. as a database configuration (kv_config_parse).
 *
 * A broken invariant aborts (a finding for libFuzzer and for the replay
 * driver alike).  Every allocation is released before returning, so
 * LeakSanitizer reports any leak of the library.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) do { if (!(c)) abort(); } while (0)

#define STOPPED 12345   /* a code no library function returns */

/* What the scalars of one walk looked like: a running hash and a count. */
typedef struct leaves {
    uint64_t hash;
    size_t n;
    size_t stop_at;       /* stop (return STOPPED) at this scalar; 0: never */
    size_t input_len;
} leaves;

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001B3ull;
    return (h ^ n) * 0x100000001B3ull;
}

static int on_leaf(void *payload, const char *path, size_t path_len,
                   kv_json_type type, const char *value, size_t value_len,
                   size_t pos)
{
    leaves *l = payload;
    CHECK(type >= KV_JSON_STRING && type <= KV_JSON_NULL);
    CHECK(pos <= l->input_len);
    if (type != KV_JSON_STRING)
        CHECK(value_len > 0);
    /* Read every byte, so ASan checks the pointers and lengths. */
    l->hash = mix(l->hash, path, path_len);
    l->hash = mix(l->hash, value, value_len);
    l->hash = mix(l->hash, &type, sizeof type);
    if (++l->n == l->stop_at)
        return STOPPED;
    return 0;
}

static void fuzz_document(const char *json, size_t len)
{
    kv_err err = KV_ERR_INIT;
    kv_buf out = KV_BUF_INIT;
    leaves first = { 0, 0, 0, len };
    /* Output appended after existing content, as the store does. */
    CHECK(kv_buf_append(&out, "prefix", 6, &err) == KVFTS_OK);
    int rc = kv_json_walk(json, len, &out, on_leaf, &first, &err);
    if (rc == KVFTS_OK) {
        CHECK(out.len > 6 && memcmp(out.data, "prefix", 6) == 0);
        CHECK(out.data[6] == '{' && out.data[out.len - 1] == '}');
        kv_buf again = KV_BUF_INIT;
        leaves second = { 0, 0, 0, out.len - 6 };
        rc = kv_json_walk(out.data + 6, out.len - 6, &again, on_leaf, &second,
                          &err);
        CHECK(rc == KVFTS_OK);
        CHECK(again.len == out.len - 6 &&
              memcmp(again.data, out.data + 6, again.len) == 0);
        CHECK(second.n == first.n && second.hash == first.hash);
        kv_buf_free(&again);
    } else {
        CHECK(rc == KVFTS_EINVAL || rc == KVFTS_ENOMEM);
        CHECK(err.code == rc && err.msg[0] != '\0');
        if (rc == KVFTS_EINVAL && err.pos >= 0)
            CHECK((size_t)err.pos <= len);
        CHECK(out.len == 6 && memcmp(out.data, "prefix", 6) == 0);
    }

    /* Stop part-way: the callback's code comes back, nothing is written. */
    if (first.n > 0) {
        leaves stop = { 0, 0, 1 + len % first.n, len };
        kv_buf_reset(&out);
        rc = kv_json_walk(json, len, &out, on_leaf, &stop, &err);
        CHECK(rc == STOPPED && stop.n == stop.stop_at);
        CHECK(out.len == 0);
    }
    kv_buf_free(&out);
}

static void fuzz_names(const char *s, size_t len)
{
    kv_err err = KV_ERR_INIT;
    static const char *const lookups[] = { "customer_ref", "city" };
    int rc = kv_key_check(s, len, lookups, 2, &err);
    CHECK(rc == KVFTS_OK || (rc == KVFTS_EINVAL && err.msg[0]));
    if (rc == KVFTS_OK) {
        /* An accepted key is UTF-8 of 1..KVFTS_MAX_KEY bytes. */
        CHECK(len >= 1 && len <= KVFTS_MAX_KEY);
        CHECK(kv_utf8_valid(s, len, NULL));
    }
    rc = kv_name_check("counter", s, len, &err);
    CHECK(rc == KVFTS_OK || (rc == KVFTS_EINVAL && err.msg[0]));
}

static void fuzz_config(const char *json, size_t len)
{
    kv_err err = KV_ERR_INIT;
    kv_config cfg;
    memset(&cfg, 0, sizeof cfg);
    int rc = kv_config_parse(&cfg, json, len, &err);
    CHECK(rc == KVFTS_OK || rc == KVFTS_EINVAL || rc == KVFTS_ENOMEM);
    if (rc == KVFTS_OK) {
        CHECK(cfg.nlookups <= KV_MAX_LOOKUPS);
        for (size_t i = 0; i < cfg.nlookups; i++)
            CHECK(kv_config_lookup(&cfg, cfg.lookups[i].name,
                                   strlen(cfg.lookups[i].name)) != NULL);
    }
    kv_config_clear(&cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    fuzz_document(s, size);
    fuzz_names(s, size);
    fuzz_config(s, size);
    return 0;
}
