/*
 * test_threads.c -- the library on threads (issue 13, item 1): two
 * databases, each with a writer thread and a reader thread on handles of
 * their own, all four at once.  A writer loads documents through batches
 * (whose analysis runs in worker threads), changes the config (which
 * rebuilds the index and lookups under it) and provokes refusals, whose
 * messages must be its own and not another thread's; a reader searches and
 * reads the config meanwhile.  Afterwards each database holds exactly what
 * its writer wrote, and check finds no difference.
 *
 * Run plain, and under ThreadSanitizer in CI (tools/test.sh, build-tsan),
 * where any data race between the threads -- the library's or its worker
 * threads' -- fails the test.
 */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include "kvfts.h"

#define S(x) x, strlen(x)
#define ROUNDS 6
#define PER_BATCH 150

static const char *const configs[2] = {
    "{\"lookups\":[{\"name\":\"grp\",\"path\":\"g\"}]}",
    "{\"lookups\":[{\"name\":\"grp\",\"path\":\"g\"},{\"name\":\"uid\","
    "\"path\":\"u\",\"unique\":true}],\"analysis\":{\"fields\":{\"title\":"
    "\"english\"}}}",
};

typedef struct worker {
    const char *dir;
    int which;              /* 0 or 1: the database, and the key prefix */
    atomic_int *done;       /* set by the writer when it finishes */
    char failure[512];      /* empty if all went well */
    long searches;
} worker;

#define FAIL(w, ...) \
    do { snprintf((w)->failure, sizeof (w)->failure, __VA_ARGS__); \
         goto out; } while (0)

static void *writer_main(void *arg)
{
    worker *w = arg;
    kvfts_db *db = NULL;
    kvfts_batch *b = NULL;
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    if (kvfts_open(&db, w->dir, &o))
        FAIL(w, "open: %s", kvfts_errmsg(db));
    for (int round = 0; round < ROUNDS; round++) {
        if (kvfts_batch_begin(&b, db))
            FAIL(w, "batch_begin: %s", kvfts_errmsg(db));
        for (int i = 0; i < PER_BATCH; i++) {
            char key[64], json[256];
            int n = round * PER_BATCH + i;
            snprintf(key, sizeof key, "db%d::%d", w->which, n);
            snprintf(json, sizeof json, "{\"title\":\"running words number%d "
                     "shared%d\",\"g\":\"g%d\",\"u\":\"u%d-%d\"}", n,
                     w->which, n % 7, w->which, n);
            int rc = kvfts_batch_write(b, KVFTS_UPSERT, S(key), S(json));
            if (rc)
                FAIL(w, "batch_write %s: %s", key, kvfts_errmsg(db));
        }
        /* A refusal in the batch: its message names this thread's key. */
        char bad[64];
        snprintf(bad, sizeof bad, "db%d::bad%d", w->which, round);
        int rc = kvfts_batch_write(b, KVFTS_UPSERT, S(bad), S("{\"x\":"));
        if (rc != KVFTS_EINVAL || !strstr(kvfts_errmsg(db), bad))
            FAIL(w, "refusal of %s: %d '%s'", bad, rc, kvfts_errmsg(db));
        if (kvfts_batch_commit(b))
            FAIL(w, "batch_commit: %s", kvfts_errmsg(db));
        kvfts_batch_free(b);
        b = NULL;
        /* A config change, rebuilding the index under it. */
        const char *cfg = configs[round % 2];
        if (kvfts_set_config(db, cfg, strlen(cfg)))
            FAIL(w, "set_config: %s", kvfts_errmsg(db));
        /* A single write refused by the storage layer (its message). */
        char dup[64];
        snprintf(dup, sizeof dup, "db%d::0", w->which);
        rc = kvfts_add(NULL, db, S(dup), S("{\"t\":1}"));
        if (rc != KVFTS_EEXISTS || !strstr(kvfts_errmsg(db), dup))
            FAIL(w, "add of %s: %d '%s'", dup, rc, kvfts_errmsg(db));
    }
out:
    kvfts_batch_free(b);
    kvfts_close(db);
    atomic_store(w->done, 1);
    return NULL;
}

static void *reader_main(void *arg)
{
    worker *w = arg;
    kvfts_db *db = NULL;
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    if (kvfts_open(&db, w->dir, &o))
        FAIL(w, "open: %s", kvfts_errmsg(db));
    char q[32];
    snprintf(q, sizeof q, "shared%d", w->which);
    uint64_t last = 0;
    while (!atomic_load(w->done) || w->searches < 3) {
        kvfts_results *r = NULL;
        int rc = kvfts_search(&r, db, S(q), NULL);
        if (rc)
            FAIL(w, "search: %s", kvfts_errmsg(db));
        /* Whole batches only, never fewer than before. */
        uint64_t total = kvfts_results_total(r);
        const char *key;
        while (kvfts_results_next(r, &key, NULL, NULL, NULL) == KVFTS_OK)
            if (strncmp(key, w->which ? "db1::" : "db0::", 5) != 0) {
                kvfts_results_free(r);
                FAIL(w, "search of %s found %s", q, key);
            }
        kvfts_results_free(r);
        if (total % PER_BATCH != 0 || total < last)
            FAIL(w, "search saw %llu documents (before: %llu)",
                 (unsigned long long)total, (unsigned long long)last);
        last = total;
        /* A bad query: the message is this thread's. */
        rc = kvfts_search(&r, db, S("(unbalanced"), NULL);
        if (rc != KVFTS_EINVAL || !strstr(kvfts_errmsg(db), "unbalanced"))
            FAIL(w, "bad query: %d '%s'", rc, kvfts_errmsg(db));
        char *cfg = NULL;
        size_t n;
        if (kvfts_get_config(&cfg, &n, db))
            FAIL(w, "get_config: %s", kvfts_errmsg(db));
        kvfts_free(cfg);
        w->searches++;
        struct timespec pause = { 0, 2000000 };   /* let the writer work */
        nanosleep(&pause, NULL);
    }
out:
    kvfts_close(db);
    return NULL;
}

static void test_two_databases_four_threads(void **state)
{
    (void)state;
    char *dirs[2];
    atomic_int done[2];
    atomic_init(&done[0], 0);
    atomic_init(&done[1], 0);
    worker w[4];
    memset(w, 0, sizeof w);
    for (int d = 0; d < 2; d++) {
        dirs[d] = tu_tmpdir();
        assert_non_null(dirs[d]);
        kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
        o.create = true;
        kvfts_db *db = NULL;
        assert_int_equal(kvfts_open(&db, dirs[d], &o), KVFTS_OK);
        kvfts_close(db);
        w[d] = (worker){ .dir = dirs[d], .which = d, .done = &done[d] };
        w[2 + d] = (worker){ .dir = dirs[d], .which = d, .done = &done[d] };
    }
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL,
                                        i < 2 ? writer_main : reader_main,
                                        &w[i]), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++)
        if (w[i].failure[0])
            fail_msg("%s thread of database %d: %s",
                     i < 2 ? "writer" : "reader", w[i].which, w[i].failure);
    for (int d = 0; d < 2; d++) {
        printf("# database %d: %ld searches while loading\n", d,
               w[2 + d].searches);
        kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
        kvfts_db *db = NULL;
        assert_int_equal(kvfts_open(&db, dirs[d], &o), KVFTS_OK);
        kvfts_stats st;
        assert_int_equal(kvfts_get_stats(&st, db), KVFTS_OK);
        assert_int_equal(st.documents, ROUNDS * PER_BATCH);
        uint64_t diffs = 1;
        assert_int_equal(kvfts_check(&diffs, db, NULL, NULL), KVFTS_OK);
        assert_int_equal(diffs, 0);
        kvfts_docs *ds = NULL;
        assert_int_equal(kvfts_lookup(&ds, db, S("grp"), S("g3")), KVFTS_OK);
        assert_true(kvfts_docs_count(ds) > 0);
        kvfts_docs_free(ds);
        kvfts_close(db);
        tu_rmtree(dirs[d]);
        free(dirs[d]);
    }
}

int main(void)
{
    /* Worker threads for every batch, whatever the machine's cores. */
    setenv("KVFTS_WORKERS", "3", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_databases_four_threads),
    };
    return cmocka_run_group_tests_name("unit.threads", tests, NULL, NULL);
}
