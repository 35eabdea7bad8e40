/*
 * bench_run.c -- the query half of a benchmark: both engines opened in
 * this process, every query of the set timed on each, and the match sets
 * compared.
 *
 * kvfts is opened read-only through the library with its default 64 MiB
 * cache; FTS5 read-only with `PRAGMA cache_size=-65536`, the same 64 MiB.
 * Per query, four things are timed:
 *   kvfts top-10   kvfts_search(limit 10), reading every hit's document;
 *   FTS5 top-10    SELECT key, <fields> ... ORDER BY rank LIMIT 10, reading
 *                  every column;
 *   kvfts count    kvfts_search(count_only);
 *   FTS5 count     SELECT count(*) ... WHERE f MATCH ?.
 * The SQL statements are prepared once and re-bound (FTS5 parses the MATCH
 * text on every run, as kvfts parses its query).  Each query runs once
 * untimed (warm caches), then `runs` times with the four interleaved, the
 * engine that goes first alternating from run to run, so that drift and
 * cache effects between them hit both engines alike.
 *
 * Agreement: the full set of matching keys of each engine (kvfts:
 * keys_only without a limit; FTS5: SELECT key ... WHERE f MATCH ?), sorted
 * bytewise and compared; a difference records the first differing key and
 * which side has it.  The growth run compares counts only.
 */
#include "bench.h"

#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "kvfts.h"

/* Bytes read from results, so that reading them is not optimized away. */
static volatile size_t sink;

typedef struct engines {
    kvfts_db *kv;
    sqlite3 *fts;
    sqlite3_stmt *top, *count, *keys;
    int ncols;            /* columns of the top-10 statement */
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

/* Run mode m of q once; returns 0 or prints the error and returns 1. */
static int run_mode(engines *e, bench_query *q, int m, const char *file)
{
    int rc;
    switch (m) {
    case M_KV_TOP: rc = kv_top(e, q, &q->kv_top); break;
    case M_FTS_TOP: rc = fts_top(e, q, &q->fts_top); break;
    case M_KV_COUNT: rc = kv_count(e, q, &q->kv_count); break;
    default: rc = fts_count(e, q, &q->fts_count); break;
    }
    if (rc == 0)
        return 0;
    if (m == M_KV_TOP || m == M_KV_COUNT)
        return bench_fail(BENCH_ERR, "%s:%u: kvfts query '%s': %s", file,
                          q->line, q->kv, kvfts_errmsg(e->kv));
    return bench_fail(BENCH_ERR, "%s:%u: fts5 query '%s': %s", file, q->line,
                      q->fts, sqlite3_errmsg(e->fts));
}

/* ---- timing ------------------------------------------------------------- */

static int time_query(engines *e, bench_query *q, int runs, const char *file)
{
    static const int order[2][NMODE] = {
        { M_KV_TOP, M_FTS_TOP, M_KV_COUNT, M_FTS_COUNT },
        { M_FTS_TOP, M_KV_TOP, M_FTS_COUNT, M_KV_COUNT },
    };
    for (int m = 0; m < NMODE; m++)
        q->t[m] = bench_xmalloc((size_t)runs * sizeof(double));
    for (int r = -1; r < runs; r++) {           /* r = -1: warm-up */
        for (int i = 0; i < NMODE; i++) {
            int m = order[r < 0 ? 0 : r % 2][i];
            if (!e->fts && (m == M_FTS_TOP || m == M_FTS_COUNT))
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
                        int runs, bool fts)
{
    double *v = bench_xmalloc(qs->n * (size_t)runs * sizeof *v);
    for (int c = 0; c < NCLASS; c++) {
        memset(&cls[c], 0, sizeof cls[c]);
        for (size_t i = 0; i < qs->n; i++)
            cls[c].nq += qs->q[i].cls == c;
        for (int m = 0; m < NMODE; m++) {
            size_t n = 0;
            bool skip = !fts && (m == M_FTS_TOP || m == M_FTS_COUNT);
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
            if (!fts && (m == M_FTS_TOP || m == M_FTS_COUNT))
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

static void compare_sets(bench_query *q, keyset *a, keyset *b)
{
    qsort(a->k, a->n, sizeof *a->k, cmp_str);
    qsort(b->k, b->n, sizeof *b->k, cmp_str);
    q->compared = true;
    q->kv_matches = a->n;
    q->fts_matches = b->n;
    size_t i = 0;
    while (i < a->n && i < b->n && strcmp(a->k[i], b->k[i]) == 0)
        i++;
    q->equal = i == a->n && i == b->n;
    if (q->equal)
        return;
    /* The first differing key in sorted order is the smaller one. */
    q->diff_in_kv = i < a->n && (i == b->n || strcmp(a->k[i], b->k[i]) < 0);
    q->diff_key = bench_strdup(q->diff_in_kv ? a->k[i] : b->k[i]);
}

static int agree_query(engines *e, bench_query *q, const char *file)
{
    keyset a = { 0 }, b = { 0 };
    int code = 0;
    if (kv_keys(e, q, &a))
        code = bench_fail(BENCH_ERR, "%s:%u: kvfts query '%s': %s", file,
                          q->line, q->kv, kvfts_errmsg(e->kv));
    else if (fts_keys(e, q, &b))
        code = bench_fail(BENCH_ERR, "%s:%u: fts5 query '%s': %s", file,
                          q->line, q->fts, sqlite3_errmsg(e->fts));
    else
        compare_sets(q, &a, &b);
    keyset_free(&a);
    keyset_free(&b);
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

static void close_engines(engines *e)
{
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
              bench_load *kv, bench_load *fts, const bench_run_opts *o)
{
    engines e;
    memset(&e, 0, sizeof e);
    int code = open_kvfts(&e, kv, o->kv_dir);
    if (!code && o->fts_db)
        code = open_fts5(&e, fts, o->fts_db, o->spec);
    for (size_t i = 0; i < qs->n && !code; i++) {
        progress(i, qs->n, "queries");
        code = time_query(&e, &qs->q[i], o->runs, qs->file);
    }
    if (!code)
        progress(qs->n, qs->n, "queries");
    for (size_t i = 0; i < qs->n && !code && o->fts_db && o->match_sets; i++) {
        progress(i, qs->n, "match sets");
        code = agree_query(&e, &qs->q[i], qs->file);
    }
    if (!code && o->fts_db && o->match_sets)
        progress(qs->n, qs->n, "match sets");
    close_engines(&e);
    if (!code)
        class_stats(qs, cls, o->runs, o->fts_db != NULL);
    return code;
}
