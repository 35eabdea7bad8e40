/*
 * bench_run.c -- the query half of a benchmark: every engine opened in
 * this process, every query of the set timed on each, and the match sets
 * compared.
 *
 * kvfts is opened read-only through the library with its default 64 MiB
 * cache; FTS5 read-only with `PRAGMA cache_size=-65536`, the same 64 MiB;
 * Xapian read-only (it has no cache setting: it reads through the OS page
 * cache, as it always does).  Per query, up to six things are timed:
 *   kvfts top-10   kvfts_search(limit 10), reading every hit's document;
 *   FTS5 top-10    SELECT key, <fields> ... ORDER BY rank LIMIT 10, reading
 *                  every column;
 *   Xapian top-10  BM25, get_mset(0, 10), reading every hit's data
 *                  (peer_xapian.h);
 *   kvfts count    kvfts_search(count_only);
 *   FTS5 count     SELECT count(*) ... WHERE f MATCH ?;
 *   Xapian count   BoolWeight, get_mset(0, 0, doccount): exact.
 * The SQL statements are prepared once and re-bound (FTS5 parses the MATCH
 * text on every run, as kvfts parses its query, and as Xapian's
 * QueryParser parses its own).  Each query runs once untimed (warm
 * caches), then `runs` times with the modes interleaved, the engine that
 * goes first rotating from run to run, so that drift and cache effects
 * between them hit every engine alike.
 *
 * Agreement: the full set of matching keys of each engine (kvfts:
 * keys_only without a limit; FTS5: SELECT key ... WHERE f MATCH ?;
 * Xapian: the key (value slot 0) of every match), sorted bytewise and
 * kvfts's compared with each peer's; a difference records the first
 * differing key and which side has it.  The growth run compares counts
 * only.
 */
#include "bench.h"

#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "kvfts.h"
#include "peer_xapian.h"

/* Bytes read from results, so that reading them is not optimized away. */
static volatile size_t sink;

typedef struct engines {
    kvfts_db *kv;
    sqlite3 *fts;
    sqlite3_stmt *top, *count, *keys;
    int ncols;            /* columns of the top-10 statement */
    xap_db *xap;
} engines;

/* ---- one query on one engine -------------------------------------------- */

static int kv_top(engines *e, const bench_query *q, size_t *hits)
{
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    o.limit = 10;
    kvfts_results *r;
    int rc = kvfts_search(&r, e->kv, q->kv, strlen(q->kv), &o);
    if (rc)
        return rc;
    const char *key, *doc;
    size_t len, n = 0, bytes = 0;
    while (kvfts_results_next(r, &key, &doc, &len, NULL) == KVFTS_OK) {
        n++;
        bytes += len + (unsigned char)key[0] + (unsigned char)doc[0];
    }
    sink += bytes;
    kvfts_results_free(r);
    *hits = n;
    return 0;
}

static int kv_count(engines *e, const bench_query *q, uint64_t *count)
{
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    o.count_only = true;
    kvfts_results *r;
    int rc = kvfts_search(&r, e->kv, q->kv, strlen(q->kv), &o);
    if (rc)
        return rc;
    *count = kvfts_results_total(r);
    kvfts_results_free(r);
    return 0;
}

static int fts_top(engines *e, const bench_query *q, size_t *hits)
{
    sqlite3_stmt *st = e->top;
    sqlite3_bind_text(st, 1, q->fts, -1, SQLITE_STATIC);
    size_t n = 0, bytes = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        n++;
        for (int c = 0; c < e->ncols; c++) {
            const unsigned char *t = sqlite3_column_text(st, c);
            bytes += (size_t)sqlite3_column_bytes(st, c) + (t ? t[0] : 0);
        }
    }
    sqlite3_reset(st);
    sink += bytes;
    *hits = n;
    return rc == SQLITE_DONE ? 0 : rc;
}

static int fts_count(engines *e, const bench_query *q, uint64_t *count)
{
    sqlite3_stmt *st = e->count;
    sqlite3_bind_text(st, 1, q->fts, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *count = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return rc == SQLITE_ROW ? 0 : rc;
}

static int xap_top_q(engines *e, const bench_query *q, size_t *hits)
{
    size_t bytes;
    int rc = xap_top(e->xap, q->xap, hits, &bytes);
    sink += bytes;
    return rc;
}

/* Run mode m of q once; returns 0 or prints the error and returns 1. */
static int run_mode(engines *e, bench_query *q, int m, const char *file)
{
    int rc;
    switch (m) {
    case M_KV_TOP: rc = kv_top(e, q, &q->kv_top); break;
    case M_FTS_TOP: rc = fts_top(e, q, &q->fts_top); break;
    case M_KV_COUNT: rc = kv_count(e, q, &q->kv_count); break;
    case M_FTS_COUNT: rc = fts_count(e, q, &q->fts_count); break;
    case M_XAP_TOP: rc = xap_top_q(e, q, &q->xap_top); break;
    default: rc = xap_count(e->xap, q->xap, &q->xap_count); break;
    }
    if (rc == 0)
        return 0;
    if (m == M_XAP_TOP || m == M_XAP_COUNT)
        return bench_fail(BENCH_ERR, "%s:%u: xapian query '%s': %s", file,
                          q->line, q->xap, xap_errmsg(e->xap));
    if (m == M_KV_TOP || m == M_KV_COUNT)
        return bench_fail(BENCH_ERR, "%s:%u: kvfts query '%s': %s", file,
                          q->line, q->kv, kvfts_errmsg(e->kv));
    return bench_fail(BENCH_ERR, "%s:%u: fts5 query '%s': %s", file, q->line,
                      q->fts, sqlite3_errmsg(e->fts));
}

/* ---- timing ------------------------------------------------------------- */

/* Whether mode m runs: its engine is open. */
static bool mode_on(const engines *e, int m)
{
    if (m == M_FTS_TOP || m == M_FTS_COUNT)
        return e->fts != NULL;
    if (m == M_XAP_TOP || m == M_XAP_COUNT)
        return e->xap != NULL;
    return true;
}

static int time_query(engines *e, bench_query *q, int runs, const char *file)
{
    static const int order[3][NMODE] = {
        { M_KV_TOP, M_FTS_TOP, M_XAP_TOP, M_KV_COUNT, M_FTS_COUNT,
          M_XAP_COUNT },
        { M_FTS_TOP, M_XAP_TOP, M_KV_TOP, M_FTS_COUNT, M_XAP_COUNT,
          M_KV_COUNT },
        { M_XAP_TOP, M_KV_TOP, M_FTS_TOP, M_XAP_COUNT, M_KV_COUNT,
          M_FTS_COUNT },
    };
    /* Each open engine goes first in turn: with two, orders 0 and 1 put
     * kvfts first, then the peer (the other's modes are skipped). */
    int rotate = 1 + (e->fts != NULL) + (e->xap != NULL);
    for (int m = 0; m < NMODE; m++)
        q->t[m] = bench_xmalloc((size_t)runs * sizeof(double));
    for (int r = -1; r < runs; r++) {           /* r = -1: warm-up */
        for (int i = 0; i < NMODE; i++) {
            int m = order[r < 0 ? 0 : r % rotate][i];
            if (!mode_on(e, m))
                continue;
            double t0 = bench_now();
            if (run_mode(e, q, m, file))
                return BENCH_ERR;
            if (r >= 0)
                q->t[m][r] = (bench_now() - t0) * 1e3;
        }
    }
    return 0;
}

static void class_stats(bench_queries *qs, bench_class_stats cls[NCLASS],
                        int runs, const engines *e)
{
    double *v = bench_xmalloc(qs->n * (size_t)runs * sizeof *v);
    for (int c = 0; c < NCLASS; c++) {
        memset(&cls[c], 0, sizeof cls[c]);
        for (size_t i = 0; i < qs->n; i++)
            cls[c].nq += qs->q[i].cls == c;
        for (int m = 0; m < NMODE; m++) {
            size_t n = 0;
            bool skip = !mode_on(e, m);
            for (size_t i = 0; i < qs->n && !skip; i++)
                if (qs->q[i].cls == c) {
                    memcpy(v + n, qs->q[i].t[m], (size_t)runs * sizeof *v);
                    n += (size_t)runs;
                }
            bench_sort(v, n);
            cls[c].med[m] = bench_median_sorted(v, n);
            cls[c].p99[m] = bench_p99_sorted(v, n);
        }
    }
    for (size_t i = 0; i < qs->n; i++)
        for (int m = 0; m < NMODE; m++) {
            bench_query *q = &qs->q[i];
            q->med[m] = NAN;
            if (!mode_on(e, m))
                continue;
            memcpy(v, q->t[m], (size_t)runs * sizeof *v);
            bench_sort(v, (size_t)runs);
            q->med[m] = bench_median_sorted(v, (size_t)runs);
        }
    free(v);
}

/* ---- match sets --------------------------------------------------------- */

typedef struct keyset {
    char **k;
    size_t n, cap;
} keyset;

static void keyset_add(keyset *s, const char *k)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->k = bench_xrealloc(s->k, s->cap * sizeof *s->k);
    }
    s->k[s->n++] = bench_strdup(k);
}

static void keyset_free(keyset *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->k[i]);
    free(s->k);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int kv_keys(engines *e, const bench_query *q, keyset *s)
{
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    o.limit = 0;
    o.keys_only = true;
    kvfts_results *r;
    int rc = kvfts_search(&r, e->kv, q->kv, strlen(q->kv), &o);
    if (rc)
        return rc;
    const char *key;
    while (kvfts_results_next(r, &key, NULL, NULL, NULL) == KVFTS_OK)
        keyset_add(s, key);
    kvfts_results_free(r);
    return 0;
}

static int fts_keys(engines *e, const bench_query *q, keyset *s)
{
    sqlite3_bind_text(e->keys, 1, q->fts, -1, SQLITE_STATIC);
    int rc;
    while ((rc = sqlite3_step(e->keys)) == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(e->keys, 0);
        keyset_add(s, k ? k : "");
    }
    sqlite3_reset(e->keys);
    return rc == SQLITE_DONE ? 0 : rc;
}

static int xap_key(void *payload, const char *key)
{
    keyset_add(payload, key);
    return 0;
}

/* Compare kvfts's sorted set @p a with a peer's @p b (sorted here):
 * whether they are equal, and if not the first differing key (malloc'd)
 * and whether it is only in kvfts's. */
static bool compare_sets(const keyset *a, keyset *b, char **diff_key,
                         bool *diff_in_kv)
{
    qsort(b->k, b->n, sizeof *b->k, cmp_str);
    size_t i = 0;
    while (i < a->n && i < b->n && strcmp(a->k[i], b->k[i]) == 0)
        i++;
    if (i == a->n && i == b->n)
        return true;
    /* The first differing key in sorted order is the smaller one. */
    *diff_in_kv = i < a->n && (i == b->n || strcmp(a->k[i], b->k[i]) < 0);
    *diff_key = bench_strdup(*diff_in_kv ? a->k[i] : b->k[i]);
    return false;
}

static int agree_query(engines *e, bench_query *q, const char *file)
{
    keyset a = { 0 }, b = { 0 }, x = { 0 };
    int code = 0;
    if (kv_keys(e, q, &a))
        code = bench_fail(BENCH_ERR, "%s:%u: kvfts query '%s': %s", file,
                          q->line, q->kv, kvfts_errmsg(e->kv));
    else if (e->fts && fts_keys(e, q, &b))
        code = bench_fail(BENCH_ERR, "%s:%u: fts5 query '%s': %s", file,
                          q->line, q->fts, sqlite3_errmsg(e->fts));
    else if (e->xap && xap_keys(e->xap, q->xap, xap_key, &x))
        code = bench_fail(BENCH_ERR, "%s:%u: xapian query '%s': %s", file,
                          q->line, q->xap, xap_errmsg(e->xap));
    if (!code)
        qsort(a.k, a.n, sizeof *a.k, cmp_str);
    if (!code && e->fts) {
        q->compared = true;
        q->kv_matches = a.n;
        q->fts_matches = b.n;
        q->equal = compare_sets(&a, &b, &q->diff_key, &q->diff_in_kv);
    }
    if (!code && e->xap) {
        q->xap_compared = true;
        q->kv_matches = a.n;
        q->xap_matches = x.n;
        q->xap_equal = compare_sets(&a, &x, &q->xap_diff_key,
                                    &q->xap_diff_in_kv);
    }
    keyset_free(&a);
    keyset_free(&b);
    keyset_free(&x);
    return code;
}

/* ---- opening ------------------------------------------------------------ */

static int open_kvfts(engines *e, bench_load *kv, const char *dir)
{
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.read_only = true;
    kvfts_stats s;
    int rc = kvfts_open(&e->kv, dir, &o);
    if (rc == KVFTS_OK)
        rc = kvfts_get_stats(&s, e->kv);
    if (rc != KVFTS_OK)
        return bench_fail(BENCH_ERR, "kvfts %s: %s", dir,
                          kvfts_errmsg(e->kv));
    kv->docs = s.documents;
    kv->terms = s.terms;
    kv->postings = s.postings;
    return 0;
}

static int64_t sql_int(sqlite3 *db, const char *sql, int col, int *rc)
{
    sqlite3_stmt *st = NULL;
    int64_t v = 0;
    if (*rc == SQLITE_OK)
        *rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (*rc == SQLITE_OK && (*rc = sqlite3_step(st)) == SQLITE_ROW) {
        v = sqlite3_column_int64(st, col);
        *rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return v;
}

/* SELECT key, "f1", ... FROM f WHERE f MATCH ? ORDER BY rank LIMIT 10 */
static char *top_sql(const bench_spec *s)
{
    size_t cap = 128;
    for (size_t i = 0; i < s->nfields; i++)
        cap += strlen(s->fields[i]) + 4;
    char *sql = bench_xmalloc(cap);
    size_t n = (size_t)snprintf(sql, cap, "SELECT key");
    for (size_t i = 0; i < s->nfields; i++)
        n += (size_t)snprintf(sql + n, cap - n, ", \"%s\"", s->fields[i]);
    snprintf(sql + n, cap - n, " FROM f WHERE f MATCH ? ORDER BY rank "
             "LIMIT 10");
    return sql;
}

static int open_fts5(engines *e, bench_load *fts, const char *file,
                     const bench_spec *s)
{
    int rc = sqlite3_open_v2(file, &e->fts, SQLITE_OPEN_READONLY, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(e->fts, "PRAGMA cache_size=-65536;"
                          "CREATE VIRTUAL TABLE temp.v USING "
                          "fts5vocab(main, f, col)", NULL, NULL, NULL);
    fts->docs = (uint64_t)sql_int(e->fts, "SELECT count(*) FROM f", 0, &rc);
    fts->terms = (uint64_t)sql_int(e->fts, "SELECT count(*), sum(doc) FROM "
                                   "temp.v", 0, &rc);
    fts->postings = (uint64_t)sql_int(e->fts, "SELECT count(*), sum(doc) "
                                      "FROM temp.v", 1, &rc);
    char *top = top_sql(s);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(e->fts, top, -1, &e->top, NULL);
    free(top);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(e->fts, "SELECT count(*) FROM f WHERE f "
                                "MATCH ?", -1, &e->count, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(e->fts, "SELECT key FROM f WHERE f MATCH ?",
                                -1, &e->keys, NULL);
    e->ncols = 1 + (int)s->nfields;
    if (rc != SQLITE_OK)
        return bench_fail(BENCH_ERR, "fts5 %s: %s", file,
                          e->fts ? sqlite3_errmsg(e->fts) : "out of memory");
    return 0;
}

static int open_xapian(engines *e, bench_load *xap, const char *dir,
                       const bench_spec *s)
{
    if (xap_open(&e->xap, dir, (const char *const *)s->fields, s->nfields) ||
        xap_stats(e->xap, &xap->docs, &xap->terms, &xap->postings))
        return bench_fail(BENCH_ERR, "xapian %s: %s", dir,
                          xap_errmsg(e->xap));
    return 0;
}

static void close_engines(engines *e)
{
    xap_close(e->xap);
    sqlite3_finalize(e->top);
    sqlite3_finalize(e->count);
    sqlite3_finalize(e->keys);
    sqlite3_close(e->fts);
    kvfts_close(e->kv);
}

/* ---- the run ------------------------------------------------------------ */

static void progress(size_t i, size_t n, const char *what)
{
    if (!bench_tty())
        return;
    fprintf(stderr, "\r%s: %zu/%zu   %s", what, i, n, i == n ? "\n" : "");
    fflush(stderr);
}

int bench_run(bench_queries *qs, bench_class_stats cls[NCLASS],
              bench_load *kv, bench_load *fts, bench_load *xap,
              const bench_run_opts *o)
{
    engines e;
    memset(&e, 0, sizeof e);
    int code = open_kvfts(&e, kv, o->kv_dir);
    if (!code && o->fts_db)
        code = open_fts5(&e, fts, o->fts_db, o->spec);
    if (!code && o->xap_dir)
        code = open_xapian(&e, xap, o->xap_dir, o->spec);
    bool peers = o->fts_db || o->xap_dir;
    for (size_t i = 0; i < qs->n && !code; i++) {
        progress(i, qs->n, "queries");
        code = time_query(&e, &qs->q[i], o->runs, qs->file);
    }
    if (!code)
        progress(qs->n, qs->n, "queries");
    for (size_t i = 0; i < qs->n && !code && peers && o->match_sets; i++) {
        progress(i, qs->n, "match sets");
        code = agree_query(&e, &qs->q[i], qs->file);
    }
    if (!code && peers && o->match_sets)
        progress(qs->n, qs->n, "match sets");
    if (!code)
        class_stats(qs, cls, o->runs, &e);
    close_engines(&e);
    return code;
}
