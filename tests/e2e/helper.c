/*
 * helper.c -- a small program the end-to-end tests run for what the kvfts
 * command cannot do in one process:
 *
 *   kvfts_test_helper incr DIR NAME N
 *       increment counter count::NAME N times through one handle (each call
 *       its own transaction); exit 1 on the first failure.
 *   kvfts_test_helper read DIR PREFIX SECONDS
 *       for SECONDS, read PREFIX::1..count::PREFIX in snapshots and check
 *       every document is whole: it parses as {"n":I,...} with I equal to its
 *       key's number and "pad" of the stated length.  Prints the number of
 *       snapshots read; exit 1 on any error or torn document.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvfts.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int do_incr(kvfts_db *db, const char *name, long n)
{
    for (long i = 0; i < n; i++) {
        int64_t v;
        int rc = kvfts_incr(&v, db, name, strlen(name), 1, NULL);
        if (rc) {
            fprintf(stderr, "incr %ld: %s\n", i, kvfts_errmsg(db));
            return 1;
        }
    }
    return 0;
}

/* A document written by the load tests: {"n":I,"len":L,"pad":"xxx..."}. */
static int check_doc(const kvfts_doc *d)
{
    const char *sep = strrchr(d->key, ':');
    long want = sep ? atol(sep + 1) : -1;
    long n = -1, len = -1;
    if (sscanf(d->json, "{\"n\":%ld,\"len\":%ld,\"pad\":\"", &n, &len) != 2)
        return -1;
    const char *pad = strstr(d->json, "\"pad\":\"");
    if (!pad || n != want)
        return -1;
    pad += 7;
    const char *end = strchr(pad, '"');
    if (!end || end - pad != len)
        return -1;
    return 0;
}

static int do_read(kvfts_db *db, const char *prefix, double seconds)
{
    double until = now() + seconds;
    long snapshots = 0, docs = 0;
    while (now() < until) {
        kvfts_docs *ds = NULL;
        int rc = kvfts_get_range(&ds, db, prefix, strlen(prefix), 1, 0);
        if (rc == KVFTS_ENOTFOUND)
            continue;           /* the counter does not exist yet */
        if (rc) {
            fprintf(stderr, "read: %s\n", kvfts_errmsg(db));
            return 1;
        }
        for (size_t i = 0; i < kvfts_docs_count(ds); i++) {
            const kvfts_doc *d = kvfts_docs_at(ds, i);
            if (check_doc(d)) {
                fprintf(stderr, "read: torn document %s: %.80s\n", d->key,
                        d->json);
                kvfts_docs_free(ds);
                return 1;
            }
        }
        docs += (long)kvfts_docs_count(ds);
        kvfts_docs_free(ds);
        snapshots++;
    }
    printf("%ld %ld\n", snapshots, docs);
    return snapshots > 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: kvfts_test_helper incr DIR NAME N | "
                        "read DIR PREFIX SECONDS\n");
        return 2;
    }
    kvfts_db *db = NULL;
    int rc = kvfts_open(&db, argv[2], NULL);
    if (rc) {
        fprintf(stderr, "open: %s\n", kvfts_errmsg(db));
        kvfts_close(db);
        return 1;
    }
    int code = 2;
    if (strcmp(argv[1], "incr") == 0)
        code = do_incr(db, argv[3], atol(argv[4]));
    else if (strcmp(argv[1], "read") == 0)
        code = do_read(db, argv[3], atof(argv[4]));
    kvfts_close(db);
    return code;
}
