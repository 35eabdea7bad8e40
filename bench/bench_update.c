/*
 * bench_update.c -- what one single-document write costs as a term's
 * postings list grows: the seeds warn that an ever-growing "refs" array
 * makes every write rewrite the whole list.  kvfts stores postings in
 * blocks of at most 128 documents, so a write touches one block per term.
 *
 * For each N (default 1,000 10,000 100,000 1,000,000): bulk-load N documents
 * that all hold the term "common", then time 200 single puts of new
 * documents holding it and 200 replaces of documents in the middle of the
 * list, and report the transaction-log bytes each wrote (Berkeley DB logs
 * every byte a write changes) and the microseconds it took.  If writes
 * touched the whole list, bytes per put would grow with N; they stay flat.
 *
 *   bench_update [DIR] [N...]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv.h"
#include "kvfts.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int die(kvfts_db *db, const char *what)
{
    fprintf(stderr, "bench_update: %s: %s\n", what, kvfts_errmsg(db));
    exit(1);
}

static uint64_t log_bytes(kv_env *env)
{
    uint64_t b = 0;
    kv_err err = KV_ERR_INIT;
    if (kv_env_log_bytes(env, &b, &err)) {
        fprintf(stderr, "bench_update: %s\n", err.msg);
        exit(1);
    }
    return b;
}

static void run(const char *base, long n)
{
    char dir[4096], key[64], doc[128];
    snprintf(dir, sizeof dir, "%s/n%ld", base, n);
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.create = true;
    o.cache_bytes = 256u * 1024u * 1024u;
    kvfts_db *db = NULL;
    if (kvfts_open(&db, dir, &o))
        die(db, dir);
    kvfts_batch *b;
    if (kvfts_batch_begin(&b, db))
        die(db, "batch");
    double t0 = now();
    for (long i = 0; i < n; i++) {
        int kl = snprintf(key, sizeof key, "d%09ld", i);
        int jl = snprintf(doc, sizeof doc, "{\"t\":\"common u%ld\"}", i);
        if (kvfts_batch_write(b, KVFTS_UPSERT, key, (size_t)kl, doc,
                              (size_t)jl))
            die(db, "load");
        if (kvfts_batch_full(b) && kvfts_batch_commit(b))
            die(db, "commit");
    }
    if (kvfts_batch_commit(b))
        die(db, "commit");
    kvfts_batch_free(b);
    double load = now() - t0;
    kv_env *env = NULL;
    kv_err err = KV_ERR_INIT;
    if (kv_env_open(&env, dir, NULL, &err)) {
        fprintf(stderr, "bench_update: %s\n", err.msg);
        exit(1);
    }
    enum { PUTS = 200 };
    /* New documents: appended to the end of "common"'s list. */
    uint64_t l0 = log_bytes(env);
    t0 = now();
    for (int i = 0; i < PUTS; i++) {
        int kl = snprintf(key, sizeof key, "new%05d", i);
        int jl = snprintf(doc, sizeof doc, "{\"t\":\"common v%d\"}", i);
        if (kvfts_put(NULL, db, key, (size_t)kl, doc, (size_t)jl, 0))
            die(db, "put");
    }
    double put_us = (now() - t0) / PUTS * 1e6;
    uint64_t put_bytes = (log_bytes(env) - l0) / PUTS;
    /* Replaces in the middle of the list: one block rewritten per term. */
    l0 = log_bytes(env);
    t0 = now();
    for (int i = 0; i < PUTS; i++) {
        int kl = snprintf(key, sizeof key, "d%09ld", n / 2 + i % (n / 2));
        int jl = snprintf(doc, sizeof doc, "{\"t\":\"common x%d\"}", i);
        if (kvfts_put(NULL, db, key, (size_t)kl, doc, (size_t)jl, 0))
            die(db, "replace");
    }
    double rep_us = (now() - t0) / PUTS * 1e6;
    uint64_t rep_bytes = (log_bytes(env) - l0) / PUTS;
    kvfts_stats st;
    if (kvfts_get_stats(&st, db))
        die(db, "stats");
    printf("%9ld  %8.1f  %9" PRIu64 "  %7.0f  %9" PRIu64 "  %7.0f  %9" PRIu64
           "\n", n, load, put_bytes, put_us, rep_bytes, rep_us, st.blocks);
    fflush(stdout);
    kv_env_close(env);
    kvfts_close(db);
}

int main(int argc, char **argv)
{
    const char *base = argc > 1 ? argv[1] : "/tmp/kvfts-bench-update";
    long sizes[16] = { 1000, 10000, 100000, 1000000 };
    int ns = 4;
    if (argc > 2) {
        ns = 0;
        for (int i = 2; i < argc && ns < 16; i++)
            sizes[ns++] = atol(argv[i]);
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", base, base);
    if (system(cmd) != 0)
        return 1;
    printf("docs with  load (s)  log bytes  us/put   log bytes  us/put   "
           "blocks\n\"common\"             /new put           /replace"
           "              (all terms)\n");
    for (int i = 0; i < ns; i++)
        run(base, sizes[i]);
    return 0;
}
