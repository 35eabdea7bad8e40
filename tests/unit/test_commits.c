/*
 * test_commits.c -- many single-document commits through one handle (issue
 * 13, item 9): Berkeley DB's environment must not wear out.  Before, the
 * mutex region ran out after about 65,000 commits ("BDB2034 unable to
 * allocate memory for mutex; resize mutex region") and every later write
 * failed.  Here 300,000 documents are put, one transaction each, through
 * the C API; afterwards stats and a search still work and see every
 * document, and the region use Berkeley DB reports (mutexes, the records of
 * committed transactions MVCC keeps, lockers, lock objects, transactions)
 * peaks no higher in the last 200,000 commits than in the first 100,000.
 *
 * What grows per commit is bounded by the cache: under MVCC each page
 * version in the cache keeps the record of the transaction that wrote it,
 * with a mutex, until Berkeley DB evicts the page.  So the test runs with a
 * 4 MiB cache, which the database outgrows in its first 20,000 commits;
 * with the default 64 MiB the same plateau comes later, below the mutex
 * region's size (kv_env.c sizes it to the cache).
 *
 * KVFTS_COMMITS=N changes the number of commits (at least 63,000; the
 * sanitizer build runs 63,000), KVFTS_COMMITS_CACHE_MB the cache, and
 * KVFTS_COMMITS_VERBOSE=1 prints the region use every 10,000 commits.
 */
#define _DEFAULT_SOURCE   /* db.h needs u_int and u_long */
#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include <db.h>

#include "kv_int.h"   /* the environment's Berkeley DB handle, for its stats */
#include "kvfts.h"

#define S(x) x, strlen(x)
/* A small cache, which the database outgrows early: what Berkeley DB keeps
 * per commit is bounded by the cache, so it stops growing once the cache
 * is full (with the default 64 MiB that happens after the 300,000th). */
#define CACHE_MB 4
/* Measured from here on (the cache fills in the first 20,000). */
#define WARMUP 20000

typedef struct region_use {
    unsigned long mutexes;     /* mutexes in use */
    unsigned long mutex_max;   /* mutexes the region holds */
    unsigned long lockers;     /* lockers in use */
    unsigned long objects;     /* lock objects in use */
    unsigned long txns;        /* active transactions (incl. MVCC records) */
    unsigned long snapshots;   /* transactions kept for snapshots */
} region_use;

static region_use measure(kv_env *env)
{
    DB_ENV *de = env->sh->inst->env;
    region_use u = { 0 };
    DB_MUTEX_STAT *ms = NULL;
    assert_int_equal(de->mutex_stat(de, &ms, 0), 0);
    u.mutexes = ms->st_mutex_inuse;
    u.mutex_max = ms->st_mutex_cnt;
    free(ms);
    DB_LOCK_STAT *ls = NULL;
    assert_int_equal(de->lock_stat(de, &ls, 0), 0);
    u.lockers = ls->st_nlockers;
    u.objects = ls->st_nobjects;
    free(ls);
    DB_TXN_STAT *ts = NULL;
    assert_int_equal(de->txn_stat(de, &ts, 0), 0);
    u.txns = ts->st_nactive;
    u.snapshots = ts->st_nsnapshot;
    free(ts);
    return u;
}

static void print_use(const char *when, long n, const region_use *u)
{
    printf("# %s %ld commits: mutexes %lu of %lu, lockers %lu, lock objects "
           "%lu, active txns %lu, snapshot txns %lu\n", when, n, u->mutexes,
           u->mutex_max, u->lockers, u->objects, u->txns, u->snapshots);
}

/* The largest of each measure over a stretch of commits. */
static void peak(region_use *p, const region_use *u)
{
    if (u->mutexes > p->mutexes)
        p->mutexes = u->mutexes;
    if (u->lockers > p->lockers)
        p->lockers = u->lockers;
    if (u->objects > p->objects)
        p->objects = u->objects;
    if (u->txns > p->txns)
        p->txns = u->txns;
    if (u->snapshots > p->snapshots)
        p->snapshots = u->snapshots;
}

/* The peak of the last two thirds is within a quarter (plus a little
 * slack) of the first third's: use moves with the cache's contents, but
 * does not grow with the number of commits.  (Before, mutexes in use grew
 * by about 0.13 per commit, 27,000 over 200,000 commits.) */
static void assert_no_growth(const char *what, unsigned long first,
                             unsigned long rest)
{
    if (rest > first + first / 4 + 64)
        fail_msg("%s grew with the number of commits: peak %lu in the "
                 "first third, %lu after", what, first, rest);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_many_single_commits(void **state)
{
    (void)state;
    long total = 300000;
    const char *e = getenv("KVFTS_COMMITS");
    if (e && atol(e) > 0)
        total = atol(e);
    long mark = total / 3;
    if (mark < WARMUP + 1000)
        fail_msg("KVFTS_COMMITS=%ld: at least %d", total, 3 * (WARMUP + 1000));
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.create = true;
    o.cache_bytes = (size_t)CACHE_MB << 20;
    e = getenv("KVFTS_COMMITS_CACHE_MB");
    if (e && atol(e) > 0)
        o.cache_bytes = (size_t)atol(e) << 20;
    kvfts_db *db = NULL;
    assert_int_equal(kvfts_open(&db, dir, &o), KVFTS_OK);
    /* A second handle on the same environment, for Berkeley DB's stats. */
    kv_env *env = NULL;
    kv_err err = KV_ERR_INIT;
    assert_int_equal(kv_env_open(&env, dir, NULL, &err), 0);
    region_use first = { 0 }, rest = { 0 };
    double t0 = now();
    for (long i = 1; i <= total; i++) {
        char key[32], json[96];
        snprintf(key, sizeof key, "d%ld", i);
        snprintf(json, sizeof json, "{\"n\":%ld,\"t\":\"w%ld common\"}", i,
                 i % 1000);
        int rc = kvfts_put(NULL, db, S(key), S(json), 0);
        if (rc)
            fail_msg("commit %ld of %ld failed: %s", i, total,
                     kvfts_errmsg(db));
        if (i % 1000 == 0 && i >= WARMUP) {
            region_use u = measure(env);
            peak(i <= mark ? &first : &rest, &u);
            if (i == mark || (getenv("KVFTS_COMMITS_VERBOSE") &&
                              i % 10000 == 0))
                print_use("after", i, &u);
        }
    }
    printf("# %ld single-document commits in %.1f s\n", total, now() - t0);
    region_use end = measure(env);
    print_use("after", total, &end);
    print_use("peak up to", mark, &first);
    print_use("peak after", mark, &rest);
    assert_no_growth("mutexes in use", first.mutexes, rest.mutexes);
    assert_no_growth("MVCC transaction records", first.snapshots,
                     rest.snapshots);
    assert_no_growth("lockers", first.lockers, rest.lockers);
    assert_no_growth("lock objects", first.objects, rest.objects);
    assert_no_growth("active transactions", first.txns, rest.txns);
    assert_true(end.mutexes < end.mutex_max);
    /* stats and a search still work, and see every document. */
    kvfts_stats st;
    assert_int_equal(kvfts_get_stats(&st, db), KVFTS_OK);
    assert_int_equal(st.documents, (uint64_t)total);
    kvfts_results *r = NULL;
    assert_int_equal(kvfts_search(&r, db, S("common"), NULL), KVFTS_OK);
    assert_int_equal(kvfts_results_total(r), (uint64_t)total);
    kvfts_results_free(r);
    assert_int_equal(kvfts_search(&r, db, S("w7"), NULL), KVFTS_OK);
    assert_int_equal(kvfts_results_total(r), (uint64_t)(total / 1000));
    kvfts_results_free(r);
    /* And one more write. */
    assert_int_equal(kvfts_put(NULL, db, S("last"), S("{\"t\":\"x\"}"), 0),
                     KVFTS_OK);
    kv_env_close(env);
    kvfts_close(db);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_single_commits),
    };
    return cmocka_run_group_tests_name("unit.commits", tests, NULL, NULL);
}
