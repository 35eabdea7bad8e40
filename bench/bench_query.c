/*
 * bench_query.c -- query latency of kvfts against SQLite FTS5, in one
 * process and one run, on the same corpus (the first piece of the
 * benchmark; DESIGN.md §8).
 *
 *   bench_query KVFTS_DIR CORPUS.jsonl [RUNS]
 *
 * KVFTS_DIR must hold the corpus already (kvfts load ... --key
 * 'pkg::{package}').  The FTS5 peer is built here from CORPUS.jsonl: one
 * column per field, tokenize = 'unicode61 remove_diacritics 2', detail=full.
 * For each query class it prints the median over RUNS (default 15) of
 * top-10 (ranked, with documents) and of count, for both engines, the
 * ratio kvfts / FTS5, and whether the match counts agree.  Caches are warm:
 * each query runs once before it is timed.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <yajl/yajl_tree.h>

#include "kvfts.h"

static const char *const fields[] = {
    "package", "section", "maintainer", "version", "description",
    "homepage", "depends"
};
#define NF 7

static const struct {
    const char *cls, *kv, *fts;
} queries[] = {
    { "term, common", "python", "python" },
    { "term, rare", "zsh", "zsh" },
    { "AND, 2 terms", "python library", "python AND library" },
    { "AND, 3 terms", "python testing framework",
      "python AND testing AND framework" },
    { "OR", "perl OR ruby", "perl OR ruby" },
    { "NOT", "python -django", "python NOT django" },
    { "phrase", "\"command line\"", "\"command line\"" },
    { "prefix", "compres*", "compres*" },
    { "field", "section:python yaml", "section:python AND yaml" },
};
#define NQ (sizeof queries / sizeof *queries)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, "bench_query: %s: %s\n", what, why);
    exit(1);
}

static sqlite3 *load_fts5(const char *corpus)
{
    sqlite3 *db;
    if (sqlite3_open(":memory:", &db) != SQLITE_OK)
        die("sqlite3", "open");
    char *e = NULL;
    if (sqlite3_exec(db, "CREATE VIRTUAL TABLE f USING fts5(package, section,"
                     " maintainer, version, description, homepage, depends,"
                     " tokenize = 'unicode61 remove_diacritics 2');"
                     "BEGIN", NULL, NULL, &e) != SQLITE_OK)
        die("fts5", e);
    sqlite3_stmt *ins;
    sqlite3_prepare_v2(db, "INSERT INTO f VALUES (?,?,?,?,?,?,?)", -1, &ins,
                       NULL);
    FILE *in = fopen(corpus, "r");
    if (!in)
        die(corpus, "cannot open");
    char *line = NULL, err[128];
    size_t cap = 0;
    while (getline(&line, &cap, in) > 0) {
        yajl_val v = yajl_tree_parse(line, err, sizeof err);
        if (!v)
            continue;
        for (int i = 0; i < NF; i++) {
            const char *path[] = { fields[i], NULL };
            yajl_val x = yajl_tree_get(v, path, yajl_t_string);
            if (x)
                sqlite3_bind_text(ins, i + 1, YAJL_GET_STRING(x), -1,
                                  SQLITE_TRANSIENT);
            else
                sqlite3_bind_null(ins, i + 1);
        }
        sqlite3_step(ins);
        sqlite3_reset(ins);
        yajl_tree_free(v);
    }
    free(line);
    fclose(in);
    sqlite3_finalize(ins);
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    return db;
}

static long fts_run(sqlite3 *db, const char *sql, const char *q)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        die("fts5 prepare", sqlite3_errmsg(db));
    sqlite3_bind_text(st, 1, q, -1, SQLITE_STATIC);
    long n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        /* Touch the row as a caller would. */
        n = sqlite3_column_type(st, 0) == SQLITE_INTEGER
                ? sqlite3_column_int64(st, 0)
                : n + (sqlite3_column_bytes(st, 0) >= 0);
    }
    sqlite3_finalize(st);
    return n;
}

static long kv_run(kvfts_db *db, const char *q, bool count)
{
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    o.count_only = count;
    kvfts_results *r;
    if (kvfts_search(&r, db, q, strlen(q), &o) != KVFTS_OK)
        die(q, kvfts_errmsg(db));
    const char *k, *j;
    size_t n;
    long hits = 0;
    while (kvfts_results_next(r, &k, &j, &n, NULL) == KVFTS_OK)
        hits++;
    long total = (long)kvfts_results_total(r);
    kvfts_results_free(r);
    return count ? total : hits;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        die("usage", "bench_query KVFTS_DIR CORPUS.jsonl [RUNS]");
    int runs = argc > 3 ? atoi(argv[3]) : 15;
    if (runs < 1 || runs > 1000)
        runs = 15;
    kvfts_db *kv;
    if (kvfts_open(&kv, argv[1], NULL) != KVFTS_OK)
        die(argv[1], kvfts_errmsg(kv));
    fprintf(stderr, "bench_query: loading FTS5 from %s...\n", argv[2]);
    sqlite3 *fts = load_fts5(argv[2]);
    const char *top_sql = "SELECT package, description FROM f WHERE f MATCH ?"
                          " ORDER BY rank LIMIT 10";
    const char *count_sql = "SELECT count(*) FROM f WHERE f MATCH ?";
    double *t = malloc(sizeof(double) * (size_t)runs);
    printf("%-14s %9s | %9s %9s %6s | %9s %9s %6s\n", "query class",
           "matches", "kv top10", "fts top10", "ratio", "kv count",
           "fts count", "ratio");
    for (size_t i = 0; i < NQ; i++) {
        double m[4];
        long kc = kv_run(kv, queries[i].kv, true);
        long fc = fts_run(fts, count_sql, queries[i].fts);
        for (int mode = 0; mode < 4; mode++) {
            for (int r = -1; r < runs; r++) {     /* r = -1: warm-up */
                double t0 = now();
                switch (mode) {
                case 0: kv_run(kv, queries[i].kv, false); break;
                case 1: fts_run(fts, top_sql, queries[i].fts); break;
                case 2: kv_run(kv, queries[i].kv, true); break;
                default: fts_run(fts, count_sql, queries[i].fts); break;
                }
                if (r >= 0)
                    t[r] = (now() - t0) * 1e3;
            }
            m[mode] = median(t, runs);
        }
        printf("%-14s %9ld | %7.2fms %7.2fms %5.2fx | %7.2fms %7.2fms %5.2fx%s\n",
               queries[i].cls, kc, m[0], m[1], m[0] / m[1], m[2], m[3],
               m[2] / m[3], kc == fc ? "" : "  COUNTS DIFFER");
        fflush(stdout);
    }
    free(t);
    sqlite3_close(fts);
    kvfts_close(kv);
    return 0;
}
