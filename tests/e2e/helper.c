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
 *   kvfts_test_helper search DIR SECONDS TOTAL
 *       search the corpus of test_readers.sh while it loads (TOTAL lines,
 *       batches of 1000): every search, one snapshot, must see whole
 *       batches and whole documents (below).  Prints the number of searches
 *       and their latency; exit 1 on any error or inconsistency.
 *   kvfts_test_helper ops DIR SRC FROM
 *   kvfts_test_helper opscheck DIR SRC N
 *       single-document writes over the lines of SRC, one transaction
 *       each, from op FROM; and which prefix of them DIR holds (below).
 *   kvfts_test_helper hold DIR KEY SECONDS
 *       begin a batch, write {} at KEY, print "held", then sleep SECONDS
 *       holding the batch's write transaction before committing it: another
 *       writer of KEY waits meanwhile.
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

/* ---- single-document writes (tests/e2e/test_resume.sh) ----------------
 * A fixed sequence of single-document transactions over the lines of SRC,
 * in cycles of six (m = 0, 1, ...): put item::4m+1 .. item::4m+4 (each its
 * line), delete item::2m+1, replace item::2m+2 with line L-(2m+1) (L = the
 * number of lines).  `ops` runs them from op FROM and prints each op's
 * number once it has committed; `opscheck` says which prefix of the
 * sequence the database holds. */

typedef struct lines {
    char *buf;
    char **at;      /* at[i], i >= 1: line i, NUL-terminated */
    size_t *len;
    long n;
} lines;

static int lines_read(lines *l, const char *path)
{
    memset(l, 0, sizeof *l);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 0, used = 0;
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (used + got + 1 > cap) {
            cap = (used + got + 1) * 2;
            char *nb = realloc(l->buf, cap);
            if (!nb) {
                fclose(f);
                return -1;
            }
            l->buf = nb;
        }
        memcpy(l->buf + used, chunk, got);
        used += got;
    }
    fclose(f);
    if (!l->buf)
        return -1;
    l->buf[used] = '\0';
    long n = 0;
    for (size_t i = 0; i < used; i++)
        n += l->buf[i] == '\n';
    l->at = calloc((size_t)n + 2, sizeof *l->at);
    l->len = calloc((size_t)n + 2, sizeof *l->len);
    if (!l->at || !l->len)
        return -1;
    char *p = l->buf;
    for (long i = 1; i <= n; i++) {
        char *nl = strchr(p, '\n');
        *nl = '\0';
        l->at[i] = p;
        l->len[i] = (size_t)(nl - p);
        p = nl + 1;
    }
    l->n = n;
    return 0;
}

static void lines_free(lines *l)
{
    free(l->buf);
    free(l->at);
    free(l->len);
}

typedef struct op {
    char kind;      /* 'p' put, 'd' delete, 'r' replace */
    long item;
    long line;      /* 0 for a delete */
} op;

static op op_of(long j, long nlines)
{
    long m = (j - 1) / 6, r = (j - 1) % 6;
    if (r < 4)
        return (op){ 'p', 4 * m + r + 1, 4 * m + r + 1 };
    if (r == 4)
        return (op){ 'd', 2 * m + 1, 0 };
    return (op){ 'r', 2 * m + 2, nlines - (2 * m + 1) };
}

/* The largest op number whose puts stay within the first half of the lines
 * (replacements come from the second half). */
static long ops_max(long nlines)
{
    return (nlines / 2 / 4) * 6;
}

static int do_ops(kvfts_db *db, const lines *l, long from)
{
    long last = ops_max(l->n);
    for (long j = from; j <= last; j++) {
        op o = op_of(j, l->n);
        char key[32];
        int kl = snprintf(key, sizeof key, "item::%ld", o.item);
        int rc;
        if (o.kind == 'p')
            rc = kvfts_put(NULL, db, key, (size_t)kl, l->at[o.line],
                           l->len[o.line], 0);
        else if (o.kind == 'r')
            rc = kvfts_replace(NULL, db, key, (size_t)kl, l->at[o.line],
                               l->len[o.line], 0);
        else
            rc = kvfts_del(db, key, (size_t)kl, 0);
        if (rc) {
            fprintf(stderr, "op %ld (%c %s): %s\n", j, o.kind, key,
                    kvfts_errmsg(db));
            return 1;
        }
        printf("%ld\n", j);
        fflush(stdout);
    }
    return 0;
}

/* The line item p holds after ops 1..n (0: absent), for p = 1..items. */
static void ops_state(long *state, long items, long n, long nlines)
{
    memset(state, 0, (size_t)(items + 1) * sizeof *state);
    for (long j = 1; j <= n; j++) {
        op o = op_of(j, nlines);
        if (o.item <= items)
            state[o.item] = o.kind == 'd' ? 0 : o.line;
    }
}

/* Prints K, the number of ops the database holds, if it holds exactly the
 * result of ops 1..K for K = N or N + 1 (the op in flight at a kill may
 * have committed before its number was printed); exit 1 otherwise. */
static int do_opscheck(kvfts_db *db, const lines *l, long n)
{
    long items = (n + 1) / 6 * 4 + 4;
    long *want = calloc((size_t)items + 1, sizeof *want);
    long *got = calloc((size_t)items + 1, sizeof *got);
    if (!want || !got) {
        free(want);
        free(got);
        return 1;
    }
    int code = 1;
    /* What the database holds, as line numbers: each stored document must
     * equal the line its item had at some point (its own or its
     * replacement), byte for byte. */
    long present = 0;
    for (long p = 1; p <= items; p++) {
        char key[32];
        int kl = snprintf(key, sizeof key, "item::%ld", p);
        char *json = NULL;
        size_t jl = 0;
        int rc = kvfts_get(&json, &jl, NULL, db, key, (size_t)kl);
        if (rc == KVFTS_ENOTFOUND)
            continue;
        if (rc) {
            fprintf(stderr, "get %s: %s\n", key, kvfts_errmsg(db));
            goto out;
        }
        present++;
        long alt = l->n - (p - 1);
        if (jl == l->len[p] && memcmp(json, l->at[p], jl) == 0)
            got[p] = p;
        else if (p % 2 == 0 && jl == l->len[alt] &&
                 memcmp(json, l->at[alt], jl) == 0)
            got[p] = alt;
        else
            got[p] = -1;
        kvfts_free(json);
    }
    kvfts_stats st;
    if (kvfts_get_stats(&st, db)) {
        fprintf(stderr, "stats: %s\n", kvfts_errmsg(db));
        goto out;
    }
    if (st.documents != (uint64_t)present) {
        fprintf(stderr, "stats: %llu documents, %ld items found\n",
                (unsigned long long)st.documents, present);
        goto out;
    }
    for (long k = n; k <= n + 1; k++) {
        ops_state(want, items, k, l->n);
        if (memcmp(want, got, (size_t)(items + 1) * sizeof *want) == 0) {
            printf("%ld\n", k);
            code = 0;
            goto out;
        }
    }
    ops_state(want, items, n, l->n);
    for (long p = 1; p <= items; p++)
        if (want[p] != got[p]) {
            fprintf(stderr, "after op %ld: item::%ld holds line %ld, "
                            "expected %ld (or the next op's result)\n",
                    n, p, got[p], want[p]);
            break;
        }
out:
    free(want);
    free(got);
    return code;
}

/* ---- searches while a load runs (tests/e2e/test_readers.sh) ------------
 * The corpus: line I (1-based) is
 *   {"n":I,"len":L,"pad":"<L x>","text":"w<I%7> v<I%11> common"}, L = I%5,
 * loaded with --auto item --batch SEARCH_BATCH, so item::I holds line I and
 * every snapshot holds item::1..N with N a multiple of SEARCH_BATCH or
 * TOTAL.  Each search is one snapshot and is checked on its own: its total
 * must equal the query's count over 1..N for such an N, and every hit must
 * be a whole document that matches the query, numbered at most that N. */

#define SEARCH_BATCH 1000

/* Which of items 1..N a query matches, as a predicate on I. */
typedef enum sq_kind { SQ_ALL, SQ_W, SQ_V, SQ_AND, SQ_NOT, SQ_OR } sq_kind;

typedef struct search_query {
    char text[48];
    sq_kind kind;
    long w, v;          /* residues: I % 7 == w, I % 11 == v */
} search_query;

static bool sq_match(const search_query *q, long i)
{
    bool w = i % 7 == q->w, v = i % 11 == q->v;
    switch (q->kind) {
    case SQ_ALL: return true;
    case SQ_W: return w;
    case SQ_V: return v;
    case SQ_AND: return w && v;
    case SQ_NOT: return w && !v;
    default: return w || v;
    }
}

/* The query's matches among items 1..n (by counting: n is small). */
static long sq_count(const search_query *q, long n, long *memo_n, long *memo)
{
    for (long i = *memo_n + 1; i <= n; i++)
        *memo += sq_match(q, i);
    *memo_n = n;
    return *memo;
}

/* The largest N (0, a multiple of SEARCH_BATCH, or total) at which @p q
 * has exactly @p got matches, or -1 if there is none. */
static long sq_snapshot(const search_query *q, uint64_t got, long total)
{
    long memo_n = 0, memo = 0, found = -1;
    for (long n = 0;; n += SEARCH_BATCH) {
        if (n > total)
            n = total;
        long c = sq_count(q, n, &memo_n, &memo);
        if ((uint64_t)c == got)
            found = n;
        if ((uint64_t)c > got || n == total)
            break;
    }
    return found;
}

/* Line I's text member, as loaded. */
static int search_text(char *buf, size_t cap, long i)
{
    return snprintf(buf, cap, "\"text\":\"w%ld v%ld common\"}", i % 7,
                    i % 11);
}

/* A hit must be item::I (1 <= I <= n) holding line I whole, and match q. */
static int search_hit(const search_query *q, const char *key,
                      const char *json, long n, long *item)
{
    long i = -1;
    char tail;
    if (sscanf(key, "item::%ld%c", &i, &tail) != 1 || i < 1 || i > n) {
        fprintf(stderr, "search '%s': hit %s is not one of item::1..%ld\n",
                q->text, key, n);
        return 1;
    }
    *item = i;
    if (!sq_match(q, i)) {
        fprintf(stderr, "search '%s': hit %s does not match\n", q->text, key);
        return 1;
    }
    if (!json)
        return 0;
    kvfts_doc d = { key, strlen(key), KVFTS_OK, json, strlen(json), 0 };
    char want[64];
    search_text(want, sizeof want, i);
    size_t wl = strlen(want);
    if (check_doc(&d) || d.json_len < wl ||
        strcmp(json + d.json_len - wl, want) != 0) {
        fprintf(stderr, "search '%s': torn document %s: %.120s\n", q->text,
                key, json);
        return 1;
    }
    return 0;
}

static int search_cmp_lat(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One search, checked; *n_out is the snapshot's N, *us_out how long
 * kvfts_search() took (it reads the whole page), in microseconds. */
static int search_once(kvfts_db *db, const search_query *q, int how,
                       long total, unsigned char *seen, long *n_out,
                       double *us_out)
{
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    o.count_only = how == 0;           /* 0 count, 1 top-10, 2 every key */
    o.limit = how == 2 ? 0 : 10;
    o.keys_only = how == 2;
    kvfts_results *r = NULL;
    double t0 = now();
    int rc = kvfts_search(&r, db, q->text, strlen(q->text), &o);
    *us_out = (now() - t0) * 1e6;
    if (rc != KVFTS_OK) {
        fprintf(stderr, "search '%s': %s\n", q->text, kvfts_errmsg(db));
        return 1;
    }
    uint64_t got = kvfts_results_total(r);
    long n = sq_snapshot(q, got, total);
    int code = 0;
    if (n < 0) {
        fprintf(stderr, "search '%s': %llu matches: no whole number of "
                "%d-document batches has that many\n", q->text,
                (unsigned long long)got, SEARCH_BATCH);
        code = 1;
    }
    if (how == 2)
        memset(seen, 0, (size_t)total + 1);
    const char *key, *json;
    size_t hits = 0;
    while (!code && kvfts_results_next(r, &key, &json, NULL, NULL) ==
                    KVFTS_OK) {
        long i;
        code = search_hit(q, key, how == 1 ? json : NULL, n, &i);
        if (!code && how == 2 && seen[i]++) {
            fprintf(stderr, "search '%s': %s twice\n", q->text, key);
            code = 1;
        }
        hits++;
    }
    size_t want = how == 0 ? 0 : how == 1 ? (got < 10 ? got : 10) : got;
    if (!code && hits != want) {
        fprintf(stderr, "search '%s': %zu hits of %llu, expected %zu\n",
                q->text, hits, (unsigned long long)got, want);
        code = 1;
    }
    kvfts_results_free(r);
    *n_out = n;
    return code;
}

/* For SECONDS (or until 0.5 s after it first saw all TOTAL documents),
 * search in a loop, each search checked as above.  Prints one line:
 * "searches S midload M last L median_us X p99_us Y max_us Z" (M: searches
 * whose snapshot held some but not all documents); exit 1 on any error. */
static int do_search(kvfts_db *db, double seconds, long total)
{
    static const search_query qs[] = {
        { "common", SQ_ALL, 0, 0 },   { "w3", SQ_W, 3, 0 },
        { "v5", SQ_V, 0, 5 },         { "w3 v5", SQ_AND, 3, 5 },
        { "w0 -v1", SQ_NOT, 0, 1 },   { "w6 OR v10", SQ_OR, 6, 10 },
        { "text:w2", SQ_W, 2, 0 },    { "\"w4 v7\"", SQ_AND, 4, 7 },
        { "w*", SQ_ALL, 0, 0 },       { "text:(w1 v2)", SQ_AND, 1, 2 },
    };
    const size_t nq = sizeof qs / sizeof *qs;
    unsigned char *seen = calloc((size_t)total + 1, 1);
    size_t cap = 4096, n = 0;
    double *lat = malloc(cap * sizeof *lat);
    if (!seen || !lat) {
        free(seen);
        free(lat);
        return 1;
    }
    double start = now(), done_at = 0;
    long midload = 0, last = 0;
    int code = 0;
    for (size_t k = 0; !code; k++) {
        double t = now();
        if (t > start + seconds || (done_at && t > done_at + 0.5))
            break;
        /* Every key of a query whose matches are few, else count / top-10. */
        const search_query *q = &qs[k % nq];
        int how = q->kind == SQ_AND ? 2 : (int)(k / nq % 2);
        double us;
        code = search_once(db, q, how, total, seen, &last, &us);
        if (n == cap) {
            double *nl = realloc(lat, 2 * cap * sizeof *lat);
            if (!nl) {
                code = 1;
                break;
            }
            lat = nl;
            cap *= 2;
        }
        lat[n++] = us;
        midload += last > 0 && last < total;
        if (last == total && !done_at)
            done_at = now();
    }
    qsort(lat, n, sizeof *lat, search_cmp_lat);
    printf("searches %zu midload %ld last %ld median_us %.0f p99_us %.0f "
           "max_us %.0f\n", n, midload, last, n ? lat[n / 2] : 0.0,
           n ? lat[(size_t)((double)(n - 1) * 0.99)] : 0.0,
           n ? lat[n - 1] : 0.0);
    free(seen);
    free(lat);
    return code || n == 0;
}

static int do_hold(kvfts_db *db, const char *key, double seconds)
{
    kvfts_batch *b = NULL;
    int rc = kvfts_batch_begin(&b, db);
    if (!rc)
        rc = kvfts_batch_write(b, KVFTS_UPSERT, key, strlen(key), "{}", 2);
    if (!rc) {
        printf("held\n");
        fflush(stdout);
        struct timespec ts = { (time_t)seconds,
                               (long)((seconds - (double)(time_t)seconds)
                                      * 1e9) };
        nanosleep(&ts, NULL);
        rc = kvfts_batch_commit(b);
    }
    if (rc)
        fprintf(stderr, "hold: %s\n", kvfts_errmsg(db));
    kvfts_batch_free(b);
    return rc != 0;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: kvfts_test_helper incr DIR NAME N | "
                        "read DIR PREFIX SECONDS | ops DIR SRC FROM | "
                        "opscheck DIR SRC N | search DIR SECONDS TOTAL | "
                        "hold DIR KEY SECONDS\n");
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
    else if (strcmp(argv[1], "hold") == 0)
        code = do_hold(db, argv[3], atof(argv[4]));
    else if (strcmp(argv[1], "search") == 0)
        code = do_search(db, atof(argv[3]), atol(argv[4]));
    else if (strcmp(argv[1], "ops") == 0 || strcmp(argv[1], "opscheck") == 0) {
        lines l;
        if (lines_read(&l, argv[3]) != 0 || l.n < 16) {
            fprintf(stderr, "%s: cannot read 16 lines or more\n", argv[3]);
            code = 1;
        } else if (argv[1][3] == '\0') {
            code = do_ops(db, &l, atol(argv[4]));
        } else {
            code = do_opscheck(db, &l, atol(argv[4]));
        }
        lines_free(&l);
    }
    kvfts_close(db);
    return code;
}
