/*
 * test_api.c -- unit tests of the public API (include/kvfts.h): documents
 * with CAS and add/replace rules, multi-get, counters and auto keys, counter
 * ranges, lookups kept exact through updates and deletes, config rules,
 * batches and key templates, a batch's held key records, keys.db
 * compressed or plain, read-only handles, two handles, allocation failures
 * (nothing changes, nothing leaks) and corrupt records.
 */
#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "kv.h"       /* only for fault injection and corrupting records */
#include "kvfts.h"

typedef struct fx {
    char *dir;
    kvfts_db *db;
} fx;

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.create = true;
    if (!f->dir || kvfts_open(&f->db, f->dir, &o) != KVFTS_OK) {
        fprintf(stderr, "setup: %s\n", kvfts_errmsg(f->db));
        return -1;
    }
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    kvfts_close(f->db);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

#define S(x) x, strlen(x)

/* The stored JSON of key, or NULL if absent (caller frees). */
static char *doc_of(kvfts_db *db, const char *key, uint64_t *cas)
{
    char *json = NULL;
    size_t n;
    int rc = kvfts_get(&json, &n, cas, db, S(key));
    if (rc == KVFTS_ENOTFOUND)
        return NULL;
    assert_int_equal(rc, KVFTS_OK);
    return json;
}

static void assert_doc(kvfts_db *db, const char *key, const char *want)
{
    char *got = doc_of(db, key, NULL);
    if (!want) {
        if (got)
            fail_msg("%s: expected no document, got %s", key, got);
        return;
    }
    if (!got)
        fail_msg("%s: expected %s, got none", key, want);
    assert_string_equal(got, want);
    kvfts_free(got);
}

static void assert_msg(kvfts_db *db, const char *needle)
{
    if (!strstr(kvfts_errmsg(db), needle))
        fail_msg("message '%s' lacks '%s'", kvfts_errmsg(db), needle);
}

/* ---- open --------------------------------------------------------------- */

static void test_open_errors(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    kvfts_db *db = NULL;
    assert_int_equal(kvfts_open(&db, tu_path(dir, "missing"), NULL),
                     KVFTS_ENOTFOUND);
    assert_non_null(db);
    assert_msg(db, "no such directory");
    kvfts_close(db);
    assert_int_equal(kvfts_open(&db, "", NULL), KVFTS_EINVAL);
    assert_msg(db, "no database directory");
    kvfts_close(db);
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.version = 99;
    assert_int_equal(kvfts_open(&db, dir, &o), KVFTS_EINVAL);
    assert_msg(db, "version 99");
    kvfts_close(db);
    assert_string_equal(kvfts_strerror(KVFTS_ECAS), "CAS mismatch");
    assert_non_null(kvfts_errmsg(NULL));
    kvfts_close(NULL);
    tu_rmtree(dir);
    free(dir);
}

/* ---- documents ---------------------------------------------------------- */

static void test_crud_and_cas(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    uint64_t c1, c2, c3, cas;
    assert_int_equal(kvfts_put(&c1, db, S("user::42"),
                               S("{ \"name\" : \"Max\", \"n\": [1, 2] }"), 0),
                     0);
    assert_true(c1 > 0);
    assert_string_equal(kvfts_errmsg(db), "");
    char *j = doc_of(db, "user::42", &cas);
    assert_string_equal(j, "{\"name\":\"Max\",\"n\":[1,2]}");
    assert_int_equal(cas, c1);
    kvfts_free(j);
    /* Every write changes the CAS. */
    assert_int_equal(kvfts_put(&c2, db, S("user::42"), S("{\"v\":2}"), 0), 0);
    assert_true(c2 != c1);
    /* add refuses an existing key and changes nothing. */
    assert_int_equal(kvfts_add(&cas, db, S("user::42"), S("{\"v\":3}")),
                     KVFTS_EEXISTS);
    assert_msg(db, "doc 'user::42' already exists");
    assert_doc(db, "user::42", "{\"v\":2}");
    /* replace refuses a missing key. */
    assert_int_equal(kvfts_replace(&cas, db, S("user::7"), S("{}"), 0),
                     KVFTS_ENOTFOUND);
    assert_doc(db, "user::7", NULL);
    /* A stale CAS is refused for put, replace and del; the doc stays. */
    assert_int_equal(kvfts_put(&cas, db, S("user::42"), S("{\"v\":4}"), c1),
                     KVFTS_ECAS);
    assert_msg(db, "CAS mismatch");
    assert_int_equal(kvfts_replace(&cas, db, S("user::42"), S("{\"v\":4}"),
                                   c1), KVFTS_ECAS);
    assert_int_equal(kvfts_del(db, S("user::42"), c1), KVFTS_ECAS);
    assert_doc(db, "user::42", "{\"v\":2}");
    /* The current CAS works. */
    assert_int_equal(kvfts_replace(&c3, db, S("user::42"), S("{\"v\":5}"), c2),
                     0);
    assert_true(c3 != c2);
    assert_doc(db, "user::42", "{\"v\":5}");
    /* A CAS on a missing document is not-found, not a silent create. */
    assert_int_equal(kvfts_put(&cas, db, S("user::8"), S("{}"), 5),
                     KVFTS_ENOTFOUND);
    assert_doc(db, "user::8", NULL);
    assert_int_equal(kvfts_del(db, S("user::42"), c3), 0);
    assert_doc(db, "user::42", NULL);
    assert_int_equal(kvfts_del(db, S("user::42"), 0), KVFTS_ENOTFOUND);
    /* A re-created document never gets an old CAS back. */
    assert_int_equal(kvfts_add(&cas, db, S("user::42"), S("{}")), 0);
    assert_true(cas > c3);
    kvfts_stats st;
    assert_int_equal(kvfts_get_stats(&st, db), 0);
    assert_int_equal(st.documents, 1);
}

static void test_bad_writes(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    uint64_t cas;
    assert_int_equal(kvfts_put(&cas, db, S("k"), S("{\"a\":1,}"), 0),
                     KVFTS_EINVAL);
    assert_msg(db, "doc 'k': invalid JSON at byte");
    assert_true(kvfts_errpos(db) >= 6);
    assert_int_equal(kvfts_put(&cas, db, S("k"), S("[1]"), 0), KVFTS_EINVAL);
    assert_int_equal(kvfts_put(&cas, db, S("k"), S("{\"a\":\"\xff\"}"), 0),
                     KVFTS_EINVAL);
    assert_msg(db, "UTF8");
    assert_int_equal(kvfts_put(&cas, db, S("fts::x"), S("{}"), 0),
                     KVFTS_EINVAL);
    assert_int_equal(kvfts_put(&cas, db, S("a\tb"), S("{}"), 0), KVFTS_EINVAL);
    assert_int_equal(kvfts_put(&cas, db, "", 0, S("{}"), 0), KVFTS_EINVAL);
    assert_int_equal(kvfts_write(&cas, db, (kvfts_write_mode)7, S("k"),
                                 S("{}"), 0), KVFTS_EINVAL);
    assert_int_equal(kvfts_write(&cas, db, KVFTS_INSERT, S("k"), S("{}"), 3),
                     KVFTS_EINVAL);
    kvfts_stats st;
    assert_int_equal(kvfts_get_stats(&st, db), 0);
    assert_int_equal(st.documents, 0);
}

static void test_multi_get(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    assert_int_equal(kvfts_put(NULL, db, S("a"), S("{\"x\":\"a\"}"), 0), 0);
    assert_int_equal(kvfts_put(NULL, db, S("c"), S("{\"x\":\"c\"}"), 0), 0);
    const char *keys[] = { "c", "b", "a", "c" };
    kvfts_docs *d;
    assert_int_equal(kvfts_multi_get(&d, db, keys, NULL, 4), 0);
    assert_int_equal(kvfts_docs_count(d), 4);
    const char *want[] = { "{\"x\":\"c\"}", NULL, "{\"x\":\"a\"}",
                           "{\"x\":\"c\"}" };
    for (size_t i = 0; i < 4; i++) {
        const kvfts_doc *x = kvfts_docs_at(d, i);
        assert_string_equal(x->key, keys[i]);
        if (want[i]) {
            assert_int_equal(x->status, KVFTS_OK);
            assert_string_equal(x->json, want[i]);
            assert_true(x->cas > 0);
        } else {
            assert_int_equal(x->status, KVFTS_ENOTFOUND);
            assert_null(x->json);
        }
    }
    assert_null(kvfts_docs_at(d, 4));
    kvfts_docs_free(d);
    /* Explicit lengths: keys need not be NUL-terminated. */
    const char *buf = "axc";
    const char *k2[] = { buf, buf + 2 };
    size_t lens[] = { 1, 1 };
    assert_int_equal(kvfts_multi_get(&d, db, k2, lens, 2), 0);
    assert_string_equal(kvfts_docs_at(d, 1)->key, "c");
    assert_int_equal(kvfts_docs_at(d, 1)->status, KVFTS_OK);
    kvfts_docs_free(d);
}

/* ---- counters, auto keys, ranges ---------------------------------------- */

static void test_counters_auto_range(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    int64_t v;
    assert_int_equal(kvfts_counter_get(&v, db, S("user")), KVFTS_ENOTFOUND);
    assert_int_equal(kvfts_incr(&v, db, S("hits"), 1, NULL), 0);
    assert_int_equal(v, 1);
    assert_int_equal(kvfts_incr(&v, db, S("hits"), -3, NULL), 0);
    assert_int_equal(v, -2);
    int64_t init = 1000;
    assert_int_equal(kvfts_incr(&v, db, S("seq"), 1, &init), 0);
    assert_int_equal(v, 1000);
    assert_int_equal(kvfts_incr(&v, db, S("bad name"), 1, NULL), KVFTS_EINVAL);
    char *key;
    uint64_t cas;
    for (int i = 1; i <= 5; i++) {
        char want[32], json[32];
        snprintf(want, sizeof want, "user::%d", i);
        snprintf(json, sizeof json, "{\"i\":%d}", i);
        assert_int_equal(kvfts_put_auto(&key, &cas, db, S("user"), S(json)), 0);
        assert_string_equal(key, want);
        kvfts_free(key);
    }
    assert_int_equal(kvfts_counter_get(&v, db, S("user")), 0);
    assert_int_equal(v, 5);
    /* A failed auto write does not move the counter. */
    assert_int_equal(kvfts_put_auto(&key, &cas, db, S("user"), S("{")),
                     KVFTS_EINVAL);
    assert_null(key);
    assert_int_equal(kvfts_put_auto(&key, &cas, db, S("fts"), S("{}")),
                     KVFTS_EINVAL);
    assert_int_equal(kvfts_counter_get(&v, db, S("user")), 0);
    assert_int_equal(v, 5);
    assert_int_equal(kvfts_counter_get(&v, db, S("fts")), KVFTS_ENOTFOUND);
    /* The seeds' range multi-get skips missing documents. */
    assert_int_equal(kvfts_del(db, S("user::2"), 0), 0);
    assert_int_equal(kvfts_del(db, S("user::5"), 0), 0);
    kvfts_docs *d;
    assert_int_equal(kvfts_get_range(&d, db, S("user"), 1, 0), 0);
    assert_int_equal(kvfts_docs_count(d), 3);
    assert_string_equal(kvfts_docs_at(d, 0)->key, "user::1");
    assert_string_equal(kvfts_docs_at(d, 1)->key, "user::3");
    assert_string_equal(kvfts_docs_at(d, 2)->json, "{\"i\":4}");
    kvfts_docs_free(d);
    assert_int_equal(kvfts_get_range(&d, db, S("user"), 3, 3), 0);
    assert_int_equal(kvfts_docs_count(d), 1);
    kvfts_docs_free(d);
    assert_int_equal(kvfts_get_range(&d, db, S("nobody"), 1, 0),
                     KVFTS_ENOTFOUND);
    assert_int_equal(kvfts_get_range(&d, db, S("user"), 1, 20000000),
                     KVFTS_EINVAL);
}

/* ---- lookups and config ------------------------------------------------- */

static const char *lookup_cfg =
    "{\"lookups\":[{\"name\":\"customer_ref\",\"path\":\"customer_id\","
    "\"unique\":true},{\"name\":\"city\",\"path\":\"address.city\"}]}";

static void assert_lookup(kvfts_db *db, const char *name, const char *value,
                          const char *want)
{
    char *doc = NULL;
    size_t n;
    int rc = kvfts_lookup_doc(&doc, &n, db, S(name), S(value));
    if (!want) {
        assert_int_equal(rc, KVFTS_ENOTFOUND);
        return;
    }
    assert_int_equal(rc, KVFTS_OK);
    assert_string_equal(doc, want);
    kvfts_free(doc);
}

static void test_lookups(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    assert_int_equal(kvfts_set_config(db, S(lookup_cfg)), 0);
    assert_int_equal(kvfts_put(NULL, db, S("user::42"),
                               S("{\"customer_id\":12345,\"address\":{\"city\":"
                                 "\"Berlin\"}}"), 0), 0);
    assert_int_equal(kvfts_put(NULL, db, S("user::7"),
                               S("{\"customer_id\":\"777\",\"address\":{\"city\":"
                                 "\"Berlin\"}}"), 0), 0);
    assert_lookup(db, "customer_ref", "12345", "{\"ref\":\"user::42\"}");
    assert_lookup(db, "city", "Berlin", "{\"refs\":[\"user::42\",\"user::7\"]}");
    /* The seeds' two gets in one call. */
    kvfts_docs *d;
    assert_int_equal(kvfts_lookup(&d, db, S("customer_ref"), S("777")), 0);
    assert_int_equal(kvfts_docs_count(d), 1);
    assert_string_equal(kvfts_docs_at(d, 0)->key, "user::7");
    kvfts_docs_free(d);
    assert_int_equal(kvfts_lookup(&d, db, S("nope"), S("1")), KVFTS_EINVAL);
    assert_msg(db, "declared: customer_ref, city");

    /* A unique violation changes nothing at all. */
    assert_int_equal(kvfts_put(NULL, db, S("user::99"),
                               S("{\"customer_id\":\"12345\",\"address\":"
                                 "{\"city\":\"Paris\"}}"), 0), KVFTS_EEXISTS);
    assert_msg(db, "already refers to 'user::42'");
    assert_doc(db, "user::99", NULL);
    assert_lookup(db, "city", "Paris", NULL);
    assert_lookup(db, "customer_ref", "12345", "{\"ref\":\"user::42\"}");
    /* Rewriting a document with its own unique value is fine. */
    assert_int_equal(kvfts_put(NULL, db, S("user::42"),
                               S("{\"customer_id\":12345}"), 0), 0);
    assert_lookup(db, "city", "Berlin", "{\"refs\":[\"user::7\"]}");
    /* An update moves the lookup. */
    assert_int_equal(kvfts_put(NULL, db, S("user::42"),
                               S("{\"customer_id\":54321}"), 0), 0);
    assert_lookup(db, "customer_ref", "12345", NULL);
    assert_lookup(db, "customer_ref", "54321", "{\"ref\":\"user::42\"}");
    /* The freed value can be taken now. */
    assert_int_equal(kvfts_put(NULL, db, S("user::99"),
                               S("{\"customer_id\":12345}"), 0), 0);
    /* Delete removes the document's lookups. */
    assert_int_equal(kvfts_del(db, S("user::42"), 0), 0);
    assert_lookup(db, "customer_ref", "54321", NULL);
    /* Keys under a lookup's name are reserved. */
    assert_int_equal(kvfts_put(NULL, db, S("customer_ref::1"), S("{}"), 0),
                     KVFTS_EINVAL);
    char *cfg;
    size_t n;
    assert_int_equal(kvfts_get_config(&cfg, &n, db), 0);
    assert_string_equal(cfg, lookup_cfg);
    kvfts_free(cfg);
    kvfts_stats st;
    assert_int_equal(kvfts_get_stats(&st, db), 0);
    assert_int_equal(st.lookup_entries, 3);   /* 777, Berlin->7, 12345 */
    /* The config may change under documents: lookups are rebuilt. */
    assert_int_equal(kvfts_set_config(db, S("{\"lookups\":[{\"name\":"
                                            "\"c\",\"path\":\"address.city\","
                                            "\"unique\":true}]}")), 0);
    assert_lookup(db, "c", "Berlin", "{\"ref\":\"user::7\"}");
    assert_int_equal(kvfts_lookup_doc(&cfg, &n, db, S("customer_ref"),
                                      S("777")), KVFTS_EINVAL);
    assert_int_equal(kvfts_put(NULL, db, S("user::8"),
                               S("{\"address\":{\"city\":\"Rome\"},"
                                 "\"tag\":\"x\"}"), 0), 0);
    assert_int_equal(kvfts_put(NULL, db, S("user::9"),
                               S("{\"address\":{\"city\":\"Rome\"}}"), 0),
                     KVFTS_EEXISTS);
    assert_int_equal(kvfts_put(NULL, db, S("user::10"), S("{\"tag\":\"x\"}"),
                               0), 0);
    /* A config the documents violate (two share tag x) changes nothing. */
    assert_int_equal(kvfts_set_config(db, S("{\"lookups\":[{\"name\":\"t\","
                                            "\"path\":\"tag\",\"unique\":"
                                            "true}]}")), KVFTS_EEXISTS);
    assert_int_equal(kvfts_lookup_doc(&cfg, &n, db, S("t"), S("x")),
                     KVFTS_EINVAL);
    assert_lookup(db, "c", "Rome", "{\"ref\":\"user::8\"}");
    /* Back to the first config. */
    assert_int_equal(kvfts_set_config(db, S(lookup_cfg)), 0);
    assert_lookup(db, "customer_ref", "12345", "{\"ref\":\"user::99\"}");
    assert_lookup(db, "city", "Rome", "{\"refs\":[\"user::8\"]}");
    assert_int_equal(kvfts_lookup_doc(&cfg, &n, db, S("c"), S("Rome")),
                     KVFTS_EINVAL);
    uint64_t diffs = 99;
    assert_int_equal(kvfts_check(&diffs, db, NULL, NULL), 0);
    assert_int_equal(diffs, 0);
}

/* A replace by the content already stored (spelled with other whitespace):
 * a new CAS, the same document, postings, lookups and search results; and
 * so in a batch, beside a write that does change something. */
static uint64_t hits(kvfts_db *db, const char *q)
{
    kvfts_results *r = NULL;
    assert_int_equal(kvfts_search(&r, db, S(q), NULL), 0);
    uint64_t n = kvfts_results_total(r);
    kvfts_results_free(r);
    return n;
}

static void test_same_content_replace(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    assert_int_equal(kvfts_set_config(db, S(lookup_cfg)), 0);
    const char *compact = "{\"customer_id\":12345,\"address\":{\"city\":"
                          "\"Berlin\"},\"text\":\"quick brown fox\"}";
    const char *spaced = "{ \"customer_id\" : 12345, \"address\" : "
                         "{ \"city\" : \"Berlin\" }, \"text\" : "
                         "\"quick brown fox\" }";
    uint64_t c1 = 0, c2 = 0, c3 = 0;
    assert_int_equal(kvfts_put(&c1, db, S("user::1"), S(compact), 0), 0);
    kvfts_stats st1, st2;
    assert_int_equal(kvfts_get_stats(&st1, db), 0);
    assert_int_equal(kvfts_replace(&c2, db, S("user::1"), S(spaced), c1), 0);
    assert_true(c2 > c1);
    uint64_t got = 0;
    char *json = doc_of(db, "user::1", &got);
    assert_string_equal(json, compact);
    kvfts_free(json);
    assert_int_equal(got, c2);
    assert_int_equal(kvfts_get_stats(&st2, db), 0);
    assert_int_equal(st2.postings, st1.postings);
    assert_int_equal(st2.terms, st1.terms);
    assert_int_equal(st2.documents, 1);
    assert_int_equal(st2.lookup_entries, st1.lookup_entries);
    assert_lookup(db, "customer_ref", "12345", "{\"ref\":\"user::1\"}");
    assert_lookup(db, "city", "Berlin", "{\"refs\":[\"user::1\"]}");
    assert_int_equal(hits(db, "fox"), 1);
    assert_int_equal(hits(db, "text:brown"), 1);
    /* The old CAS no longer matches: the write counted. */
    assert_int_equal(kvfts_replace(NULL, db, S("user::1"), S(compact), c1),
                     KVFTS_ECAS);
    /* In a batch: the same content for user::1, a change for user::2. */
    assert_int_equal(kvfts_put(NULL, db, S("user::2"),
                               S("{\"text\":\"lazy dog\"}"), 0), 0);
    kvfts_batch *b = NULL;
    assert_int_equal(kvfts_batch_begin(&b, db), 0);
    assert_int_equal(kvfts_batch_write(b, KVFTS_REPLACE, S("user::1"),
                                       S(spaced)), 0);
    assert_int_equal(kvfts_batch_write(b, KVFTS_REPLACE, S("user::2"),
                                       S("{\"text\":\"quick cat\"}")), 0);
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    json = doc_of(db, "user::1", &c3);
    assert_string_equal(json, compact);
    kvfts_free(json);
    assert_true(c3 > c2);
    assert_int_equal(hits(db, "quick"), 2);
    assert_int_equal(hits(db, "fox"), 1);
    assert_int_equal(hits(db, "dog"), 0);
    assert_lookup(db, "customer_ref", "12345", "{\"ref\":\"user::1\"}");
    uint64_t diffs = 99;
    assert_int_equal(kvfts_check(&diffs, db, NULL, NULL), 0);
    assert_int_equal(diffs, 0);
}

static void test_config_errors(void **state)
{
    fx *f = *state;
    assert_int_equal(kvfts_set_config(f->db, S("{\"lookups\":[{\"name\":"
                                               "\"a\"}]}")), KVFTS_EINVAL);
    assert_msg(f->db, "are required");
    assert_int_equal(kvfts_set_config(f->db, S("{\"x\":1}")), KVFTS_EINVAL);
    assert_msg(f->db, "unknown member 'x'");
    char *cfg;
    assert_int_equal(kvfts_get_config(&cfg, NULL, f->db), 0);
    assert_string_equal(cfg, "{}");
    kvfts_free(cfg);
}

/* ---- batches ------------------------------------------------------------ */

/* A merge never waits for a batch.  kvfts_optimize on a second handle runs
 * to its end while a batch on the first has its transaction open.  The
 * batch's transaction holds meta.db's pages (its sequences, the config)
 * until it commits, and Berkeley DB locks pages: while the segment list
 * and the merge state lived in meta.db, the merge waited for the batch's
 * commit, here for ever (the same thread) until the busy timeout failed it.
 * They live in segs.db now, which a batch takes only at its flush. */
static void test_merge_beside_open_batch(void **state)
{
    fx *f = *state;
    char key[32], doc[64];
    for (int s = 0; s < 3; s++) {              /* three segments */
        kvfts_batch *b = NULL;
        assert_int_equal(kvfts_batch_begin(&b, f->db), KVFTS_OK);
        for (int i = 0; i < 50; i++) {
            snprintf(key, sizeof key, "s%d::%d", s, i);
            snprintf(doc, sizeof doc, "{\"t\":\"seg%d common\"}", s);
            assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key),
                                               S(doc)), KVFTS_OK);
        }
        assert_int_equal(kvfts_batch_commit(b), KVFTS_OK);
        kvfts_batch_free(b);
    }
    kvfts_stats st;
    assert_int_equal(kvfts_get_stats(&st, f->db), KVFTS_OK);
    assert_int_equal(st.segments, 3);
    kvfts_batch *b = NULL;
    assert_int_equal(kvfts_batch_begin(&b, f->db), KVFTS_OK);
    for (int i = 0; i < 10; i++) {             /* its transaction is open */
        snprintf(key, sizeof key, "late::%d", i);
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key),
                                           S("{\"t\":\"late common\"}")),
                         KVFTS_OK);
    }
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    kvfts_db *c = NULL;
    assert_int_equal(kvfts_open(&c, f->dir, &o), KVFTS_OK);
    if (kvfts_optimize(c, NULL, NULL) != KVFTS_OK)
        fail_msg("optimize beside an open batch: %s", kvfts_errmsg(c));
    assert_int_equal(kvfts_get_stats(&st, c), KVFTS_OK);
    assert_int_equal(st.segments, 1);
    assert_int_equal(kvfts_batch_commit(b), KVFTS_OK);
    kvfts_batch_free(b);
    assert_int_equal(kvfts_get_stats(&st, c), KVFTS_OK);
    assert_int_equal(st.segments, 2);
    assert_int_equal(st.documents, 160);
    kvfts_search_options so = KVFTS_SEARCH_OPTIONS_INIT;
    so.count_only = true;
    kvfts_results *r = NULL;
    assert_int_equal(kvfts_search(&r, c, S("common"), &so), KVFTS_OK);
    assert_int_equal(kvfts_results_total(r), 160);
    kvfts_results_free(r);
    uint64_t diffs = 1;
    assert_int_equal(kvfts_check(&diffs, c, NULL, NULL), KVFTS_OK);
    assert_int_equal(diffs, 0);
    kvfts_close(c);
}

/* A query and the number of documents it must match. */
typedef struct count_q {
    const char *q;
    uint64_t n;
} count_q;

/* Each query of qs counts what it says, and `check` finds nothing. */
static void assert_counts_checked(kvfts_db *db, const count_q *qs, size_t n)
{
    kvfts_search_options so = KVFTS_SEARCH_OPTIONS_INIT;
    so.count_only = true;
    for (size_t i = 0; i < n; i++) {
        kvfts_results *r = NULL;
        assert_int_equal(kvfts_search(&r, db, S(qs[i].q), &so), KVFTS_OK);
        if (kvfts_results_total(r) != qs[i].n)
            fail_msg("%s: %llu, not %llu", qs[i].q,
                     (unsigned long long)kvfts_results_total(r),
                     (unsigned long long)qs[i].n);
        kvfts_results_free(r);
    }
    uint64_t diffs = 1;
    assert_int_equal(kvfts_check(&diffs, db, NULL, NULL), KVFTS_OK);
    assert_int_equal(diffs, 0);
}

/* A batch whose index buffer passes a megabyte is written as a segment
 * file of its own, which its transaction makes: with worker threads, a
 * consumer thread puts the segment's records (outside the transaction)
 * while the committing thread puts the documents (inside it).  Under
 * ThreadSanitizer (unit.api is one of its tests) the two side by side; the
 * answers and the check after the commit, and nothing after a rollback. */
static void test_batch_own_segment(void **state)
{
    fx *f = *state;
    setenv("KVFTS_WORKERS", "2", 1);
    char key[32], doc[256];
    for (int round = 0; round < 2; round++) {
        kvfts_batch *b = NULL;
        assert_int_equal(kvfts_batch_begin(&b, f->db), KVFTS_OK);
        for (int i = 0; i < 6000; i++) {
            snprintf(key, sizeof key, "r%d::%d", round, i);
            snprintf(doc, sizeof doc, "{\"t\":\"common w%d x%d y%d z%d "
                     "v%d u%d\",\"n\":\"n%d\"}", i, i % 97, i % 89, i % 83,
                     i * 7, i * 13, i);
            assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key),
                                               S(doc)), KVFTS_OK);
        }
        if (round == 1) {          /* rolled back: nothing of it stays */
            kvfts_batch_free(b);
            break;
        }
        assert_int_equal(kvfts_batch_commit(b), KVFTS_OK);
        kvfts_batch_free(b);
    }
    unsetenv("KVFTS_WORKERS");
    size_t nseg = 0, nnew = 0;
    DIR *d = opendir(f->dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "seg-8", 5) != 0)
            continue;
        nseg++;
        nnew += strstr(e->d_name, ".new") != NULL;
    }
    closedir(d);
    assert_int_equal(nseg, 1);                 /* one file, no .new left */
    assert_int_equal(nnew, 0);
    /* the counts, from the documents' own rule */
    uint64_t nx5 = 0, nx5y7 = 0, nx5z9 = 0;
    for (int i = 0; i < 6000; i++) {
        nx5 += i % 97 == 5;
        nx5y7 += i % 97 == 5 && i % 89 == 7;
        nx5z9 += i % 97 == 5 && i % 83 == 9;
    }
    assert_true(nx5 > 50 && nx5z9 == 1);
    const count_q qs[] = { { "common", 6000 }, { "x5", nx5 },
                           { "x5 y7", nx5y7 }, { "x5 z9", nx5z9 },
                           { "w4321", 1 }, { "\"common w17\"", 1 } };
    assert_doc(f->db, "r0::4321", "{\"t\":\"common w4321 x53 y49 z5 "
               "v30247 u56173\",\"n\":\"n4321\"}");
    assert_doc(f->db, "r1::4321", NULL);       /* rolled back */
    assert_counts_checked(f->db, qs, sizeof qs / sizeof qs[0]);
}

/* Merges after a batch's commit done whole, in one transaction each: their
 * output's file written outside the log by term ranges (1 KB of input
 * each here, KVFTS_MERGE_RANGE_KB) that the loading thread and a thread
 * of the process's merge in snapshots of their own (under ThreadSanitizer,
 * side by side), put in order by the committing thread.  Each batch also
 * replaces a document of the batch before, so the ranges cancel postings
 * with deletions.  Then the answers, from the documents' own rule, and
 * the check. */
static void test_merge_whole_in_ranges(void **state)
{
    fx *f = *state;
    setenv("KVFTS_WORKERS", "2", 1);
    setenv("KVFTS_MERGE_RANGE_KB", "1", 1);
    enum { BATCHES = 30, PER = 250 };
    char key[32], doc[256];
    for (int k = 0; k < BATCHES; k++) {
        kvfts_batch *b = NULL;
        assert_int_equal(kvfts_batch_begin(&b, f->db), KVFTS_OK);
        for (int i = 0; i < PER; i++) {
            int id = k * PER + i;
            snprintf(key, sizeof key, "m::%d", id);
            snprintf(doc, sizeof doc, "{\"t\":\"common w%d x%d g%d\"}", id,
                     id % 97, k);
            assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key),
                                               S(doc)), KVFTS_OK);
        }
        if (k > 0) {
            int id = k * PER - PER / 2;
            snprintf(key, sizeof key, "m::%d", id);
            snprintf(doc, sizeof doc, "{\"t\":\"common w%d x%d g%d re\"}",
                     id, id % 97, k);
            assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key),
                                               S(doc)), KVFTS_OK);
        }
        assert_int_equal(kvfts_batch_commit(b), KVFTS_OK);
        kvfts_batch_free(b);
    }
    unsetenv("KVFTS_MERGE_RANGE_KB");
    unsetenv("KVFTS_WORKERS");
    kvfts_stats st;
    assert_int_equal(kvfts_get_stats(&st, f->db), KVFTS_OK);
    assert_true(st.segments < BATCHES / 4);    /* merged, more than once */
    size_t nseg = 0, nnew = 0;
    DIR *d = opendir(f->dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        nseg += strncmp(e->d_name, "seg-8", 5) == 0;
        nnew += strstr(e->d_name, ".new") != NULL;
    }
    closedir(d);
    assert_true(nseg >= 1);            /* the merges' outputs, own files */
    assert_int_equal(nnew, 0);
    uint64_t nx5 = 0;
    for (int id = 0; id < BATCHES * PER; id++)
        nx5 += id % 97 == 5;
    const count_q qs[] = { { "common", BATCHES * PER }, { "x5", nx5 },
                           { "re", BATCHES - 1 }, { "g0", PER - 1 },
                           { "g1", PER }, { "g28", PER }, { "g29", PER + 1 },
                           { "w125 g0", 0 }, { "w125 g1 re", 1 },
                           { "w4321", 1 } };
    assert_counts_checked(f->db, qs, sizeof qs / sizeof qs[0]);
}

static void test_batch(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    kvfts_db *other = NULL;
    assert_int_equal(kvfts_open(&other, f->dir, NULL), 0);
    assert_int_equal(kvfts_put(NULL, db, S("pkg::old"), S("{}"), 0), 0);
    kvfts_batch *b;
    assert_int_equal(kvfts_batch_begin(&b, db), 0);
    kvfts_batch *b2;
    assert_int_equal(kvfts_batch_begin(&b2, db), KVFTS_EINVAL);
    char *key;
    assert_int_equal(kvfts_batch_write_template(&key, b, KVFTS_UPSERT,
                                                S("pkg::{package}"),
                                                S("{\"package\":\"bash\"}")),
                     0);
    assert_string_equal(key, "pkg::bash");
    kvfts_free(key);
    assert_int_equal(kvfts_batch_write_template(NULL, b, KVFTS_UPSERT,
                                                S("{a}-{b.c}"),
                                                S("{\"b\":{\"c\":7},\"a\":"
                                                  "[\"x\"]}")), 0);
    /* Refused documents leave the batch usable.  An array of several
     * values at a template's path is no one key (issue 13, 15). */
    assert_int_equal(kvfts_batch_write_template(NULL, b, KVFTS_UPSERT,
                                                S("{a}-{b.c}"),
                                                S("{\"b\":{\"c\":7},\"a\":"
                                                  "[\"x\",\"y\"]}")),
                     KVFTS_EINVAL);
    assert_msg(db, "more than one value at 'a'");
    assert_int_equal(kvfts_batch_write_template(NULL, b, KVFTS_UPSERT,
                                                S("pkg::{package}"),
                                                S("{\"name\":1}")),
                     KVFTS_EINVAL);
    assert_msg(db, "no value at 'package'");
    assert_int_equal(kvfts_batch_write(b, KVFTS_INSERT, S("pkg::old"),
                                       S("{}")), KVFTS_EEXISTS);
    assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S("pkg::x"),
                                       S("{oops}")), KVFTS_EINVAL);
    assert_int_equal(kvfts_batch_write_template(NULL, b, KVFTS_UPSERT,
                                                S("pkg::{package"),
                                                S("{}")), KVFTS_EINVAL);
    assert_msg(db, "is not closed");
    assert_int_equal(kvfts_batch_write_auto(&key, b, S("item"), S("{}")), 0);
    assert_string_equal(key, "item::1");
    kvfts_free(key);
    assert_int_equal(kvfts_batch_pending(b), 3);
    /* Single writes on the same handle are refused while the batch is open. */
    assert_int_equal(kvfts_put(NULL, db, S("z"), S("{}"), 0), KVFTS_EINVAL);
    /* Another handle sees nothing before the commit (snapshot reads). */
    assert_doc(other, "pkg::bash", NULL);
    assert_int_equal(kvfts_batch_commit(b), 0);
    assert_int_equal(kvfts_batch_pending(b), 0);
    assert_doc(other, "pkg::bash", "{\"package\":\"bash\"}");
    assert_doc(other, "x-7", "{\"b\":{\"c\":7},\"a\":[\"x\"]}");
    assert_doc(other, "item::1", "{}");
    /* Uncommitted writes vanish with the batch. */
    assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S("gone"), S("{}")),
                     0);
    kvfts_batch_free(b);
    assert_doc(other, "gone", NULL);
    int64_t v;
    assert_int_equal(kvfts_counter_get(&v, other, S("item")), 0);
    assert_int_equal(v, 1);
    assert_int_equal(kvfts_put(NULL, db, S("z"), S("{}"), 0), 0);
    kvfts_close(other);
}

/* A batch holds its new documents' key records and stores them sorted when
 * it writes its index buffer.  A key written again in the same batch is
 * found (its held record is stored first); a batch that rolls back leaves
 * none; keys that come in any order, in two batches whose keys interleave,
 * read back one by one, by range and as the check counts them. */
static void test_batch_held_keys(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    enum { N = 600 };
    char key[32], json[64];
    kvfts_batch *b;
    assert_int_equal(kvfts_batch_begin(&b, db), 0);
    for (int i = 1; i <= 50; i++) {
        snprintf(key, sizeof key, "w::%d", i);
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key), S("{}")),
                         0);
    }
    kvfts_batch_free(b);
    assert_doc(db, "w::1", NULL);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(kvfts_batch_begin(&b, db), 0);
        for (int j = 0; j < N; j++) {
            int i = (j * 7919) % N + 1;       /* 1..N, far from sorted */
            if (i % 2 == round)
                continue;                     /* odd keys first, then even */
            snprintf(key, sizeof key, "w::%d", i);
            snprintf(json, sizeof json, "{\"n\":%d,\"t\":\"one\"}", i);
            assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key),
                                               S(json)), 0);
            if (i % 25 == 0) {
                assert_int_equal(kvfts_batch_write(b, KVFTS_INSERT, S(key),
                                                   S("{}")), KVFTS_EEXISTS);
                snprintf(json, sizeof json, "{\"n\":%d,\"t\":\"two\"}", i);
                assert_int_equal(kvfts_batch_write(b, KVFTS_REPLACE, S(key),
                                                   S(json)), 0);
            }
        }
        assert_int_equal(kvfts_batch_commit(b), 0);
        kvfts_batch_free(b);
    }
    for (int i = 1; i <= N; i++) {
        snprintf(key, sizeof key, "w::%d", i);
        snprintf(json, sizeof json, "{\"n\":%d,\"t\":\"%s\"}", i,
                 i % 25 == 0 ? "two" : "one");
        assert_doc(db, key, json);
    }
    kvfts_docs *d;
    assert_int_equal(kvfts_get_range(&d, db, S("w"), 1, N + 5), 0);
    size_t found = 0;
    for (size_t i = 0; i < kvfts_docs_count(d); i++)
        found += kvfts_docs_at(d, i)->status == KVFTS_OK;
    assert_int_equal(found, N);
    kvfts_docs_free(d);
    /* Single writes and deletes among them. */
    assert_int_equal(kvfts_del(db, S("w::300"), 0), 0);
    assert_int_equal(kvfts_put(NULL, db, S("w::3000"), S("{}"), 0), 0);
    assert_doc(db, "w::300", NULL);
    assert_doc(db, "w::3000", "{}");
    assert_doc(db, "w::301", "{\"n\":301,\"t\":\"one\"}");
    uint64_t diffs = 1;
    assert_int_equal(kvfts_check(&diffs, db, NULL, NULL), 0);
    assert_int_equal(diffs, 0);
}

/* keys.db is a compressed B-tree when this version makes it; a database
 * whose plain keys.db an earlier version made (kv_test_plain_files) opens,
 * stays plain and answers the same to the same writes. */
static void test_keys_compressed_or_plain(void **state)
{
    fx *f = *state;
    char *pdir = tu_tmpdir();
    assert_non_null(pdir);
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.create = true;
    kvfts_db *p = NULL;
    kv_test_plain_files(true);
    assert_int_equal(kvfts_open(&p, pdir, &o), 0);
    kv_test_plain_files(false);
    kvfts_close(p);
    assert_int_equal(kvfts_open(&p, pdir, NULL), 0);  /* no hook: stays plain */
    enum { N = 3000 };
    char key[32], json[64];
    kvfts_db *dbs[2] = { f->db, p };
    for (int d = 0; d < 2; d++) {
        kvfts_batch *b;
        assert_int_equal(kvfts_batch_begin(&b, dbs[d]), 0);
        for (int j = 0; j < N; j++) {
            int i = (j * 7919) % N + 1;
            snprintf(key, sizeof key, "entry::%d", i);
            snprintf(json, sizeof json, "{\"n\":%d}", i);
            assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key),
                                               S(json)), 0);
            if (j == N / 2)
                assert_int_equal(kvfts_batch_commit(b), 0);
        }
        assert_int_equal(kvfts_batch_commit(b), 0);
        kvfts_batch_free(b);
        for (int i = 1; i <= N; i += 97) {
            snprintf(key, sizeof key, "entry::%d", i);
            assert_int_equal(kvfts_del(dbs[d], S(key), 0), 0);
            snprintf(key, sizeof key, "entry::%d", i + 1);
            assert_int_equal(kvfts_replace(NULL, dbs[d], S(key), S("{}"), 0),
                             0);
            snprintf(key, sizeof key, "entry::%dz", i);
            assert_int_equal(kvfts_put(NULL, dbs[d], S(key), S("{}"), 0), 0);
        }
    }
    kvfts_close(p);
    assert_int_equal(kvfts_open(&p, pdir, NULL), 0);
    dbs[1] = p;
    for (int i = 1; i <= N + 1; i++) {
        for (int z = 0; z < 2; z++) {
            snprintf(key, sizeof key, z ? "entry::%dz" : "entry::%d", i);
            uint64_t cas0 = 0, cas1 = 0;
            char *a = doc_of(dbs[0], key, &cas0), *c = doc_of(dbs[1], key,
                                                            &cas1);
            assert_true((a == NULL) == (c == NULL));
            if (a)
                assert_string_equal(a, c);
            kvfts_free(a);
            kvfts_free(c);
        }
    }
    kvfts_docs *r[2];
    for (int d = 0; d < 2; d++)
        assert_int_equal(kvfts_get_range(&r[d], dbs[d], S("entry"), 90, 400),
                         0);
    assert_int_equal(kvfts_docs_count(r[0]), kvfts_docs_count(r[1]));
    for (size_t i = 0; i < kvfts_docs_count(r[0]); i++) {
        const kvfts_doc *x = kvfts_docs_at(r[0], i), *y = kvfts_docs_at(r[1], i);
        assert_string_equal(x->key, y->key);
        assert_int_equal(x->status, y->status);
        if (x->json)
            assert_string_equal(x->json, y->json);
    }
    for (int d = 0; d < 2; d++) {
        kvfts_docs_free(r[d]);
        uint64_t diffs = 1;
        assert_int_equal(kvfts_check(&diffs, dbs[d], NULL, NULL), 0);
        assert_int_equal(diffs, 0);
    }
    kvfts_close(p);
    /* The compressed file is the smaller by far. */
    char path[4096];
    struct stat st[2];
    snprintf(path, sizeof path, "%s/keys.db", f->dir);
    assert_int_equal(stat(path, &st[0]), 0);
    snprintf(path, sizeof path, "%s/keys.db", pdir);
    assert_int_equal(stat(path, &st[1]), 0);
    assert_true(st[0].st_size * 2 < st[1].st_size);
    tu_rmtree(pdir);
    free(pdir);
}

static void test_read_only(void **state)
{
    fx *f = *state;
    assert_int_equal(kvfts_put(NULL, f->db, S("k"), S("{\"a\":1}"), 0), 0);
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.read_only = true;
    kvfts_db *ro;
    assert_int_equal(kvfts_open(&ro, f->dir, &o), 0);
    assert_doc(ro, "k", "{\"a\":1}");
    assert_int_equal(kvfts_put(NULL, ro, S("k"), S("{}"), 0), KVFTS_EINVAL);
    assert_msg(ro, "read-only");
    int64_t v;
    assert_int_equal(kvfts_incr(&v, ro, S("c"), 1, NULL), KVFTS_EINVAL);
    kvfts_batch *b;
    assert_int_equal(kvfts_batch_begin(&b, ro), KVFTS_EINVAL);
    kvfts_close(ro);
}

/* ---- faults ------------------------------------------------------------- */

/* Fail the Nth allocation of a put for every N until the put succeeds: each
 * failure is KVFTS_ENOMEM and leaves the previous version and its lookups in
 * place (LeakSanitizer checks that nothing leaks). */
static void test_alloc_failures(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    assert_int_equal(kvfts_set_config(db, S(lookup_cfg)), 0);
    assert_int_equal(kvfts_put(NULL, db, S("u::1"),
                               S("{\"customer_id\":1,\"address\":{\"city\":"
                                 "\"A\"}}"), 0), 0);
    int failures = 0;
    for (long n = 1; n < 10000; n++) {
        kvfts_warning_clear(db);
        kv_alloc_fail_after(n);
        int rc = kvfts_put(NULL, db, S("u::1"),
                           S("{\"customer_id\":2,\"address\":{\"city\":"
                             "\"B\"}}"), 0);
        long hit = kv_alloc_failures();
        kv_alloc_fail_after(0);
        if (rc == KVFTS_OK) {
            /* The failure may hit the merge work after the commit: the
             * put stands, the handle has a warning. */
            if (hit)
                assert_non_null(strstr(kvfts_warning(db), "merging"));
            break;
        }
        failures++;
        assert_int_equal(rc, KVFTS_ENOMEM);
        assert_doc(db, "u::1", "{\"customer_id\":1,\"address\":{\"city\":"
                               "\"A\"}}");
        assert_lookup(db, "customer_ref", "1", "{\"ref\":\"u::1\"}");
        assert_lookup(db, "city", "B", NULL);
    }
    assert_true(failures > 3);
    assert_lookup(db, "customer_ref", "2", "{\"ref\":\"u::1\"}");
    assert_lookup(db, "customer_ref", "1", NULL);

    /* Same for a batch write: the failed write and the batch roll back. */
    failures = 0;
    for (long n = 1; n < 10000; n++) {
        kvfts_batch *b;
        assert_int_equal(kvfts_batch_begin(&b, db), 0);
        kvfts_warning_clear(db);
        kv_alloc_fail_after(n);
        int rc = kvfts_batch_write(b, KVFTS_UPSERT, S("u::2"),
                                   S("{\"customer_id\":3}"));
        if (rc == KVFTS_OK)
            rc = kvfts_batch_commit(b);
        long hit = kv_alloc_failures();
        kv_alloc_fail_after(0);
        kvfts_batch_free(b);
        if (rc == KVFTS_OK) {   /* a failure after the commit: a warning */
            if (hit)
                assert_non_null(strstr(kvfts_warning(db), "merging"));
            break;
        }
        failures++;
        /* Out of memory before the write changed anything: ENOMEM, the
         * batch goes on; after it had: the batch rolled back, saying why. */
        if (rc == KVFTS_EROLLBACK)
            assert_msg(db, "out of memory");
        else
            assert_int_equal(rc, KVFTS_ENOMEM);
        assert_doc(db, "u::2", NULL);
        assert_lookup(db, "customer_ref", "3", NULL);
    }
    assert_true(failures > 3);
    assert_doc(db, "u::2", "{\"customer_id\":3}");

    /* And opening a second handle. */
    for (long n = 1; n < 1000; n++) {
        kvfts_db *h = NULL;
        kv_alloc_fail_after(n);
        int rc = kvfts_open(&h, f->dir, NULL);
        long hit = kv_alloc_failures();
        kv_alloc_fail_after(0);
        kvfts_close(h);
        if (rc == KVFTS_OK && hit == 0)
            break;
        assert_int_equal(rc, KVFTS_ENOMEM);
    }
}

/* A batch allowed to split (as `kvfts load` runs it) survives running out
 * of memory once anywhere in a commit of many writes: the commit goes in
 * parts and every document lands, indexed; without split the same failure
 * rolls everything back. */
static void test_batch_split(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    int split_ok = 0, whole_failed = 0;
    /* Every one of the first allocations (the hook counts this thread's:
     * the segment's encoding runs on others), then a sample. */
    for (long n = 1; n < 400; n += n < 64 ? 1 : 7) {
        for (int split = 0; split < 2; split++) {
            kvfts_batch *b;
            assert_int_equal(kvfts_batch_begin(&b, db), 0);
            kvfts_batch_set_split(b, split);
            char key[32], json[64];
            for (int i = 0; i < 20; i++) {
                snprintf(key, sizeof key, "s%ld-%d-%d", n, split, i);
                snprintf(json, sizeof json, "{\"t\":\"w%d common\"}", i);
                assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key),
                                                   S(json)), 0);
            }
            kvfts_warning_clear(db);
            kv_alloc_fail_once(n);
            int rc = kvfts_batch_commit(b);
            long hit = kv_alloc_failures();
            kv_alloc_fail_after(0);
            size_t parts = kvfts_batch_split_commits(b);
            kvfts_batch_free(b);
            snprintf(key, sizeof key, "s%ld-%d-19", n, split);
            if (!hit || (rc == KVFTS_OK && parts == 0)) {
                /* no failure; one in the merging after the commit (a
                 * warning); or one with a fallback (an analysis job that
                 * could not be queued runs in the caller's thread) */
                assert_int_equal(rc, KVFTS_OK);
                if (hit && kvfts_warning(db)[0])
                    assert_non_null(strstr(kvfts_warning(db), "merging"));
                assert_doc(db, key, "{\"t\":\"w19 common\"}");
                continue;
            }
            if (split) {
                assert_int_equal(rc, KVFTS_OK);
                assert_true(parts >= 1);
                assert_doc(db, key, "{\"t\":\"w19 common\"}");
                split_ok++;
            } else {
                assert_int_equal(rc, KVFTS_EROLLBACK);
                assert_msg(db, "out of memory");
                assert_doc(db, key, NULL);
                whole_failed++;
            }
        }
    }
    assert_true(split_ok > 5);
    assert_true(whole_failed > 5);
    uint64_t diffs = 1;
    assert_int_equal(kvfts_check(&diffs, db, NULL, NULL), 0);
    assert_int_equal(diffs, 0);
}

/* A damaged record is reported as corruption by every path that reads it. */
static void test_corrupt_record(void **state)
{
    fx *f = *state;
    kv_env *env;
    kv_err err = KV_ERR_INIT;
    assert_int_equal(kv_env_open(&env, f->dir, NULL, &err), 0);
    kv_txn *t;
    assert_int_equal(kv_txn_begin(&t, env, true, &err), 0);
    assert_int_equal(kv_put(t, KV_KEYS, "bad", 3, "\x02\x00\x00\x00\x07", 5,
                            &err), 0);
    assert_int_equal(kv_put(t, KV_DOCS, "\x00\x00\x00\x07", 4, "\x02garbage",
                            8, &err), 0);
    assert_int_equal(kv_put(t, KV_COUNTERS, "c", 1, "\x01", 1, &err), 0);
    assert_int_equal(kv_txn_commit(t, &err), 0);
    kv_env_close(env);
    char *j;
    size_t n;
    assert_int_equal(kvfts_get(&j, &n, NULL, f->db, S("bad")),
                     KVFTS_ECORRUPT);
    assert_msg(f->db, "corrupt record");
    assert_int_equal(kvfts_put(NULL, f->db, S("bad"), S("{}"), 0),
                     KVFTS_ECORRUPT);
    assert_int_equal(kvfts_del(f->db, S("bad"), 0), KVFTS_ECORRUPT);
    int64_t v;
    assert_int_equal(kvfts_incr(&v, f->db, S("c"), 1, NULL), KVFTS_ECORRUPT);
}

/* A write whose commit succeeded reports success even when the checkpoint
 * after it fails (a disk that fills then): the write is durable, and the
 * failure is the handle's warning, not the write's status (issue 13, 2). */
static void test_checkpoint_failure_after_commit(void **state)
{
    fx *f = *state;
    assert_string_equal(kvfts_warning(f->db), "");
    kv_test_fail_checkpoints(true);
    uint64_t cas = 0;
    int rc = kvfts_put(&cas, f->db, S("k1"), S("{\"a\":\"durable\"}"), 0);
    kvfts_batch *b = NULL;
    int brc = kvfts_batch_begin(&b, f->db);
    if (!brc)
        brc = kvfts_batch_write(b, KVFTS_UPSERT, S("k2"), S("{\"a\":2}"));
    if (!brc)
        brc = kvfts_batch_commit(b);
    kvfts_batch_free(b);
    kv_test_fail_checkpoints(false);
    assert_int_equal(rc, KVFTS_OK);
    assert_int_equal(brc, KVFTS_OK);
    assert_true(cas != 0);
    if (!strstr(kvfts_warning(f->db), "committed") ||
        !strstr(kvfts_warning(f->db), "checkpoint"))
        fail_msg("warning '%s'", kvfts_warning(f->db));
    /* Durable: a new handle (the first is closed) reads both. */
    kvfts_close(f->db);
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    assert_int_equal(kvfts_open(&f->db, f->dir, &o), KVFTS_OK);
    assert_doc(f->db, "k1", "{\"a\":\"durable\"}");
    assert_doc(f->db, "k2", "{\"a\":2}");
    assert_string_equal(kvfts_warning(f->db), "");
    /* The last close's checkpoint fails too: that process leaves the
     * regions (the cache, with pages the files may lack) and its mark, and
     * the next open recovers from the log rather than open the files as
     * they are. */
    assert_int_equal(kvfts_put(NULL, f->db, S("k3"), S("{\"a\":3}"), 0),
                     KVFTS_OK);
    kv_test_fail_checkpoints(true);
    kvfts_close(f->db);
    kv_test_fail_checkpoints(false);
    int before = kv_test_recoveries();
    assert_int_equal(kvfts_open(&f->db, f->dir, &o), KVFTS_OK);
    assert_doc(f->db, "k3", "{\"a\":3}");
    assert_doc(f->db, "k1", "{\"a\":\"durable\"}");
    assert_int_equal(kv_test_recoveries(), before + 1);
}

/* Keys are checked against the config the write's transaction reads, not
 * the handle's cached one (issue 13, 5): handle B declares a lookup 'pkg';
 * a put of 'pkg::x' through handle A, whose cached config predates it, is
 * refused, in a single write and in a batch, and check stays clean.  And
 * the other way round: once B drops the lookup, A may write pkg::x. */
static void test_stale_config_two_handles(void **state)
{
    fx *f = *state;
    kvfts_db *a = f->db;
    /* A has read the (empty) config: it wrote and searched. */
    assert_int_equal(kvfts_put(NULL, a, S("d1"), S("{\"package\":\"p1\"}"), 0),
                     KVFTS_OK);
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    kvfts_db *b = NULL;
    assert_int_equal(kvfts_open(&b, f->dir, &o), KVFTS_OK);
    assert_int_equal(kvfts_set_config(b, S("{\"lookups\":[{\"name\":\"pkg\","
                                           "\"path\":\"package\"}]}")), 0);
    assert_int_equal(kvfts_put(NULL, a, S("pkg::x"), S("{\"a\":1}"), 0),
                     KVFTS_EINVAL);
    assert_msg(a, "reserved");
    assert_doc(a, "pkg::x", NULL);
    kvfts_batch *bt = NULL;
    assert_int_equal(kvfts_batch_begin(&bt, a), KVFTS_OK);
    assert_int_equal(kvfts_batch_write(bt, KVFTS_UPSERT, S("pkg::y"),
                                       S("{\"a\":1}")), KVFTS_EINVAL);
    assert_int_equal(kvfts_batch_write(bt, KVFTS_UPSERT, S("d2"),
                                       S("{\"package\":\"p2\"}")), KVFTS_OK);
    assert_int_equal(kvfts_batch_commit(bt), KVFTS_OK);
    kvfts_batch_free(bt);
    assert_doc(a, "pkg::y", NULL);
    assert_lookup(a, "pkg", "p2", "{\"refs\":[\"d2\"]}");
    uint64_t diffs = 1;
    assert_int_equal(kvfts_check(&diffs, a, NULL, NULL), 0);
    assert_int_equal(diffs, 0);
    /* B drops the lookup: A, which cached it, now accepts pkg::x. */
    assert_int_equal(kvfts_set_config(b, S("{}")), 0);
    assert_int_equal(kvfts_put(NULL, a, S("pkg::x"), S("{\"a\":1}"), 0),
                     KVFTS_OK);
    assert_doc(a, "pkg::x", "{\"a\":1}");
    kvfts_close(b);
}

/* Lookup values are whole strings: a NUL (written \u0000) would cut the
 * value short and make "a\u0000b" collide with "a" (issue 13, 4).  It is
 * refused with a clear message, before anything is written. */
static void test_lookup_value_nul(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    assert_int_equal(kvfts_set_config(db, S("{\"lookups\":[{\"name\":\"cust\","
                                            "\"path\":\"c\",\"unique\":true}]}")),
                     0);
    assert_int_equal(kvfts_put(NULL, db, S("k1"), S("{\"c\":\"a\"}"), 0), 0);
    assert_int_equal(kvfts_put(NULL, db, S("k2"), S("{\"c\":\"a\\u0000b\"}"),
                               0), KVFTS_EINVAL);
    assert_msg(db, "NUL");
    assert_doc(db, "k2", NULL);
    assert_lookup(db, "cust", "a", "{\"ref\":\"k1\"}");
    /* A field that is no lookup may hold a NUL. */
    assert_int_equal(kvfts_put(NULL, db, S("k3"), S("{\"t\":\"a\\u0000b\"}"),
                               0), 0);
    /* A config whose new lookup would meet a NUL changes nothing. */
    assert_int_equal(kvfts_set_config(db, S("{\"lookups\":[{\"name\":\"tt\","
                                            "\"path\":\"t\"}]}")), KVFTS_EINVAL);
    assert_msg(db, "NUL");
    uint64_t diffs = 1;
    assert_int_equal(kvfts_check(&diffs, db, NULL, NULL), 0);
    assert_int_equal(diffs, 0);
}

/* A refusal leaves nothing behind (issue 13, 3): with the doc ids used up,
 * a new document is refused ("doc ids exhausted") before its lookups, its
 * auto key's counter or the CAS sequence move -- in a single write and in
 * a batch, which goes on (its earlier writes stay; a rewrite of a stored
 * document, which needs no id, still works).  And a batch that fails after
 * it wrote says KVFTS_EROLLBACK, never a refusal's status. */
static void test_refusal_leaves_nothing(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    assert_int_equal(kvfts_set_config(db, S("{\"lookups\":[{\"name\":\"u\","
                                            "\"path\":\"u\",\"unique\":true}]}")),
                     0);
    assert_int_equal(kvfts_put(NULL, db, S("old"), S("{\"u\":\"o\"}"), 0), 0);
    /* Use the doc ids up: the sequence at its largest value. */
    kv_env *env;
    kv_err err = KV_ERR_INIT;
    assert_int_equal(kv_env_open(&env, f->dir, NULL, &err), 0);
    kv_txn *t;
    assert_int_equal(kv_txn_begin(&t, env, true, &err), 0);
    unsigned char b8[8];
    kv_put_be64(b8, UINT32_MAX);
    assert_int_equal(kv_put(t, KV_META, S("seq::docid"), b8, 8, &err), 0);
    uint64_t cas_before;
    assert_int_equal(kv_seq_get(t, "cas", false, &cas_before, &err), 0);
    assert_int_equal(kv_txn_commit(t, &err), 0);
    assert_int_equal(kvfts_put(NULL, db, S("new"), S("{\"u\":\"x\"}"), 0),
                     KVFTS_EINVAL);
    assert_msg(db, "doc ids exhausted");
    char *k = NULL;
    assert_int_equal(kvfts_put_auto(&k, NULL, db, S("auto"),
                                    S("{\"u\":\"y\"}")), KVFTS_EINVAL);
    assert_null(k);
    kvfts_batch *b = NULL;
    assert_int_equal(kvfts_batch_begin(&b, db), 0);
    assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S("old"),
                                       S("{\"u\":\"o2\"}")), 0);
    assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S("new2"),
                                       S("{\"u\":\"z\"}")), KVFTS_EINVAL);
    assert_int_equal(kvfts_batch_pending(b), 1);
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    /* Nothing of the refused writes is stored. */
    assert_doc(db, "new", NULL);
    assert_doc(db, "new2", NULL);
    assert_doc(db, "old", "{\"u\":\"o2\"}");
    assert_lookup(db, "u", "x", NULL);
    assert_lookup(db, "u", "y", NULL);
    assert_lookup(db, "u", "z", NULL);
    assert_lookup(db, "u", "o2", "{\"ref\":\"old\"}");
    int64_t v = 0;
    assert_int_equal(kvfts_counter_get(&v, db, S("auto")), KVFTS_ENOTFOUND);
    assert_int_equal(kv_txn_begin(&t, env, false, &err), 0);
    uint64_t cas_after;
    assert_int_equal(kv_seq_get(t, "cas", false, &cas_after, &err), 0);
    kv_txn_abort(t);
    kv_env_close(env);
    /* Only the rewrite of "old" took CAS values (a batch reserves a run). */
    assert_true(cas_after > cas_before);
    assert_true(cas_after - cas_before <= 2);
    uint64_t diffs = 1;
    assert_int_equal(kvfts_check(&diffs, db, NULL, NULL), 0);
    assert_int_equal(diffs, 0);
}

/* A damaged length record whose key names a doc id near 2^31 is corruption,
 * reported by the search that reads the length column, not an 8 GiB
 * allocation in the middle of it (issue 13, 6): ids are bounded by the
 * doc-id sequence. */
static void test_damaged_length_key(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    for (int i = 0; i < 8; i++) {
        char k[8];
        snprintf(k, sizeof k, "d%d", i);
        assert_int_equal(kvfts_put(NULL, db, S(k), S("{\"t\":\"common\"}"), 0),
                         0);
    }
    kvfts_results *r = NULL;
    assert_int_equal(kvfts_search(&r, db, S("common"), NULL), 0);
    assert_int_equal(kvfts_results_total(r), 8);
    kvfts_results_free(r);
    kv_env *env;
    kv_err err = KV_ERR_INIT;
    assert_int_equal(kv_env_open(&env, f->dir, NULL, &err), 0);
    kv_txn *t;
    assert_int_equal(kv_txn_begin(&t, env, true, &err), 0);
    /* the span of ids from 0x7fffffc0: document 0x7ffffff0 (gap 0x30),
     * one field (id 1) of length 1 */
    unsigned char id[4];
    kv_put_be32(id, 0x7fffffc0u);
    assert_int_equal(kv_put(t, KV_DOCLENS, id, 4, "\x02\x60\x01\x01\x01", 5,
                            &err), 0);
    uint64_t gen;   /* cached columns are stale now, as after a write */
    assert_int_equal(kv_seq_next(t, "lensgen", &gen, &err), 0);
    assert_int_equal(kv_txn_commit(t, &err), 0);
    kv_env_close(env);
    /* A fresh handle: no column cached. */
    kvfts_close(f->db);
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    assert_int_equal(kvfts_open(&f->db, f->dir, &o), KVFTS_OK);
    db = f->db;
    assert_int_equal(kvfts_search(&r, db, S("common"), NULL), KVFTS_ECORRUPT);
    assert_msg(db, "past the last id handed out");
    assert_null(r);
}

/* The answer of db to q (keys, scores, total), as text. */
static void answer(kvfts_db *db, const char *q, bool count, char *out,
                   size_t cap)
{
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    o.limit = 7;
    o.count_only = count;
    kvfts_results *r = NULL;
    assert_int_equal(kvfts_search(&r, db, S(q), &o), KVFTS_OK);
    size_t n = (size_t)snprintf(out, cap, "%llu:",
                                (unsigned long long)kvfts_results_total(r));
    const char *k;
    double s;
    while (n < cap && kvfts_results_next(r, &k, NULL, NULL, &s) == KVFTS_OK)
        n += (size_t)snprintf(out + n, cap - n, " %s=%.17g", k, s);
    assert_true(n < cap);
    kvfts_results_free(r);
}

/* What a handle keeps between searches (dictionary chunks, segment list,
 * config, length columns, terms' blocks read whole) follows what other
 * handles commit: after each round of another handle's writes and merges,
 * the searching handle answers as a fresh one does.  Enough documents that
 * "common" and the w's span several blocks once merged (the block cache
 * holds such terms, from their second walk on). */
static void test_caches_follow_other_handles(void **state)
{
    fx *f = *state;
    kvfts_db *a = f->db, *b = NULL;
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    assert_int_equal(kvfts_open(&b, f->dir, &o), KVFTS_OK);
    const char *qs[] = { "common", "w3", "w7 OR w11", "common -w2", "w5*",
                         "t:rare", "\"common w4\"", "u:late", "u:late w3",
                         "t:rare common", "w12 common", "u:late common" };
    char doc[256], key[16], got[4096], want[4096];
    for (int round = 0; round < 6; round++) {
        /* b: new documents, longer replacements, deletions, and at times
         * a merge to one segment (segments merged away, lengths changed) */
        for (int i = 0; i < 160; i++) {
            int d = (round * 17 + i * 7) % 480;
            snprintf(key, sizeof key, "d%d", d);
            if ((i + round) % 9 == 0) {
                int rc = kvfts_del(b, S(key), 0);
                assert_true(rc == KVFTS_OK || rc == KVFTS_ENOTFOUND);
                continue;
            }
            int n = snprintf(doc, sizeof doc, "{\"t\":\"%s common w%d",
                             round == 3 && i == 5 ? "rare" : "",
                             (d + round) % 13);
            for (int k = 0; k < (d + round) % 5; k++)
                n += snprintf(doc + n, sizeof doc - (size_t)n, " w%d common",
                              (d * k + round) % 13);
            /* field u first appears in round 2: a handle that looked it
             * up before must not keep "never indexed" */
            snprintf(doc + n, sizeof doc - (size_t)n, "%s\"}",
                     round >= 2 && i % 3 == 0 ? "\",\"u\":\"late" : "");
            assert_int_equal(kvfts_put(NULL, b, S(key), S(doc), 0), KVFTS_OK);
        }
        /* the newest document: a rare term's AND skips a common term's
         * blocks to its end (a seek, not a step) */
        if (round == 3)
            assert_int_equal(kvfts_put(NULL, b, S("zlast"),
                                       S("{\"t\":\"rare common w12\"}"), 0),
                             KVFTS_OK);
        if (round % 2)
            assert_int_equal(kvfts_optimize(b, NULL, NULL), KVFTS_OK);
        if (round == 4)      /* field ids given again, in another order */
            assert_int_equal(kvfts_reindex(b, NULL, NULL), KVFTS_OK);
        kvfts_db *c = NULL;
        assert_int_equal(kvfts_open(&c, f->dir, &o), KVFTS_OK);
        for (size_t q = 0; q < sizeof qs / sizeof *qs; q++)
            for (int count = 0; count < 2; count++) {
                answer(a, qs[q], count, got, sizeof got);   /* twice: */
                answer(a, qs[q], count, got, sizeof got);   /* cached */
                answer(c, qs[q], count, want, sizeof want);
                assert_string_equal(got, want);
            }
        kvfts_close(c);
    }
    kvfts_close(b);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_errors),
        T(test_crud_and_cas),
        T(test_bad_writes),
        T(test_multi_get),
        T(test_counters_auto_range),
        T(test_lookups),
        T(test_same_content_replace),
        T(test_config_errors),
        T(test_batch_own_segment),
        T(test_merge_whole_in_ranges),
        T(test_batch),
        T(test_merge_beside_open_batch),
        T(test_batch_held_keys),
        T(test_keys_compressed_or_plain),
        T(test_read_only),
        T(test_alloc_failures),
        T(test_batch_split),
        T(test_corrupt_record),
        T(test_checkpoint_failure_after_commit),
        T(test_stale_config_two_handles),
        T(test_lookup_value_nul),
        T(test_refusal_leaves_nothing),
        T(test_damaged_length_key),
        T(test_caches_follow_other_handles),
    };
    return cmocka_run_group_tests_name("unit.api", tests, NULL, NULL);
}
