/*
 * bench/bench.h -- the internal header of kvfts-bench, the side-by-side
 * benchmark of kvfts, SQLite FTS5 and Xapian (README "Benchmarks", issues 6
 * and 15).  One header
 * for the harness's files, in "interface to bench_X.c" sections:
 *
 *   kvfts_bench.c   main: options, finding the bench/ directory and the
 *                   binaries, the corpus run and the growth run
 *   bench_spec.c    corpus specs (bench/corpora/NAME.json), query sets
 *                   (bench/queries/NAME.tsv), key templates
 *   bench_jsonl.c   a streaming JSON Lines reader (YAJL callbacks) that
 *                   picks the indexed fields and the key's values
 *   bench_load.c    the loads: kvfts (the real command, fork+exec), FTS5
 *                   and Xapian (this binary), each measured in a clean
 *                   child; sizes
 *   bench_run.c     timed queries on every engine and match-set agreement
 *   bench_readers.c --readers N: searching processes idle and during a load;
 *                   --incremental: the corpus loaded again over itself
 *                   while readers search, and single-document latency
 *   bench_growth.c  --growth: one database grown step by step to each size
 *   bench_report.c  figures and targets, the tables and JSON
 *   bench_chart.c   the SVG charts (gnuplot)
 *   bench_util.c    messages, allocation, paths, formatting
 *   peer_xapian.cc  the Xapian peer (C++) behind the C API of peer_xapian.h
 *                   (peer_xapian_none.c when built without Xapian)
 *
 * Nothing here is part of the library: the harness uses only kvfts.h,
 * libsqlite3, libxapian (through peer_xapian.h) and YAJL.  Fallible functions print one line
 * "kvfts-bench: <what>: <why>" and return an exit status (BENCH_ERR or
 * BENCH_USAGE), 0 on success.
 */
#ifndef KVFTS_BENCH_H
#define KVFTS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit statuses of kvfts-bench. */
enum {
    BENCH_OK = 0,      /* the run completed (targets may be missed) */
    BENCH_ERR = 1,     /* a step failed */
    BENCH_USAGE = 2    /* bad arguments, unknown corpus, bad spec or queries */
};

/* The query classes of the issue, in report order. */
enum {
    CLS_TERM_COMMON, CLS_TERM_RARE, CLS_AND2, CLS_AND3, CLS_OR, CLS_NOT,
    CLS_PHRASE, CLS_PREFIX, CLS_FIELD, NCLASS
};
extern const char *const bench_class_names[NCLASS];

/* What is timed per query: top-10 and count on each engine. */
enum { M_KV_TOP, M_FTS_TOP, M_KV_COUNT, M_FTS_COUNT, M_XAP_TOP, M_XAP_COUNT,
       NMODE };

#define BENCH_MAX_SIZES 16
#define BENCH_MAX_READERS 64

/* ---- interface to bench_util.c ------------------------------------------ */

/** Print "kvfts-bench: <formatted>" on stderr; returns @p code. */
int bench_fail(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** "kvfts-bench: warning: <formatted>" on stderr. */
void bench_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/** A progress note on stderr, only when it is a terminal. */
void bench_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/** True when stderr is a terminal (progress is shown). */
bool bench_tty(void);
double bench_now(void);                  /* monotonic seconds */
/** malloc'd "a/b"; exits on out of memory (the harness is a program). */
char *bench_path(const char *dir, const char *name);
char *bench_strdup(const char *s);
char *bench_strndup(const char *s, size_t n);
void *bench_xmalloc(size_t n);
void *bench_xrealloc(void *p, size_t n);
bool bench_is_dir(const char *path);
bool bench_is_file(const char *path);
/** malloc'd directory part of @p path ("." if none). */
char *bench_dir_of(const char *path);
/** mkdir -p; 0 or BENCH_ERR (message printed). */
int bench_make_dirs(const char *dir);
/** 1234567 -> "1,234,567" */
void bench_thousands(char *out, size_t cap, double v);
/** a / b, or NAN when b is not positive. */
double bench_per(double a, double b);
/** Sort @p v (n samples) ascending. */
void bench_sort(double *v, size_t n);
/** Of sorted samples: the median, and the 99th percentile by nearest rank
 *  (the smallest sample with at least 99% at or below it); NAN if none. */
double bench_median_sorted(const double *v, size_t n);
double bench_p99_sorted(const double *v, size_t n);

/* ---- interface to bench_spec.c ------------------------------------------ */

/* A key template, "pkg::{package}": literal text and dotted paths. */
typedef struct bench_tmpl {
    char *text;           /* the template as given */
    size_t nparts;
    struct {
        char *lit;        /* literal text, or NULL for a path */
        size_t path;      /* index into paths[] */
    } *parts;
    char **paths;         /* distinct dotted paths, in order of appearance */
    size_t npaths;
} bench_tmpl;

/* bench/corpora/NAME.json */
typedef struct bench_spec {
    char *file;           /* the spec's path */
    char *name, *title;
    bool synthetic;
    bench_tmpl key;       /* the `kvfts load --key` template */
    char **fields;        /* indexed top-level string fields = FTS5 columns */
    size_t nfields;
    char *config;         /* compact JSON for kvfts init --config; NULL */
    char *queries;        /* file name under bench/queries/ */
    bool no_xapian;       /* "xapian": false: Xapian only if --vs names it */
} bench_spec;

/* One line of a query set, and what running it measured. */
typedef struct bench_query {
    int cls;
    char *kv, *fts, *xap; /* the query in each engine's syntax */
    unsigned line;        /* line in the .tsv */
    double *t[NMODE];     /* runs samples per mode, milliseconds */
    double med[NMODE];    /* median per mode */
    uint64_t kv_count, fts_count, xap_count;  /* from the count queries */
    size_t kv_top, fts_top, xap_top;          /* hits of the top-10 queries */
    /* match-set agreement with FTS5 (when compared) */
    bool compared;
    uint64_t kv_matches, fts_matches;
    bool equal;
    char *diff_key;       /* first differing key, or NULL */
    bool diff_in_kv;      /* that key is only in kvfts's set (else FTS5's) */
    /* the same with Xapian */
    bool xap_compared;
    uint64_t xap_matches;
    bool xap_equal;
    char *xap_diff_key;
    bool xap_diff_in_kv;
} bench_query;

typedef struct bench_queries {
    char *file;
    bench_query *q;
    size_t n;
} bench_queries;

int bench_spec_load(bench_spec *s, const char *file);
void bench_spec_free(bench_spec *s);
int bench_queries_load(bench_queries *qs, const char *file);
/** Forget what running the queries measured (before running them again). */
void bench_queries_reset(bench_queries *qs);
void bench_queries_free(bench_queries *qs);
/** Parse a template; returns 0 or BENCH_USAGE (message printed). */
int bench_tmpl_parse(bench_tmpl *t, const char *text, const char *where);
void bench_tmpl_free(bench_tmpl *t);
/** Render into buf (growing it); vals[i] / lens[i] are the values of
 *  t->paths[i] (NULL: missing).  Returns the length, or -1 and the missing
 *  path's index in *missing. */
long bench_tmpl_render(char **buf, size_t *cap, const bench_tmpl *t,
                       const char *const *vals, const size_t *lens,
                       size_t *missing);

/* ---- interface to bench_jsonl.c ----------------------------------------- */

/* Called per document with the values picked: slot i is names[i]. */
typedef int (*jl_doc_fn)(void *payload, const char *const *vals,
                         const size_t *lens, uint64_t bytes_read);

/** Stream the JSON Lines file @p path: each top-level value must be an
 *  object.  Slots [0, nfields) take top-level string members by name;
 *  slots [nfields, nfields + npaths) take the scalar (string, number or
 *  boolean as written) at a dotted path.  A non-zero return of @p fn stops
 *  the scan and is returned.  On a read or parse error, writes a message to
 *  @p err and returns -1. */
int jl_scan(const char *path, const char *const *fields, size_t nfields,
            const char *const *paths, size_t npaths, jl_doc_fn fn,
            void *payload, char *err, size_t errcap);

/* ---- interface to bench_load.c ------------------------------------------ */

typedef struct bench_corpus {
    char *path;           /* the JSON Lines file */
    uint64_t docs;        /* documents (objects) in it */
    uint64_t bytes;       /* its size */
    uint64_t text_bytes;  /* bytes of the indexed fields' strings */
} bench_corpus;

/* One engine's load, measured in its own process. */
typedef struct bench_load {
    bool done;
    double secs;          /* wall clock of the loading process */
    double user_s, sys_s; /* its CPU time */
    uint64_t maxrss_kb;   /* its peak RSS (wait4's ru_maxrss) */
    uint64_t data_bytes;  /* data files on disk after the load */
    uint64_t log_bytes;   /* kvfts: log.* files */
    uint64_t region_bytes;/* kvfts: __db.* region files in the directory */
    uint64_t dir_bytes;   /* kvfts: the whole directory after the load, as
                             `du -sb` counts it (files and directories) */
    bool regions_outside; /* kvfts: the regions lived outside the directory
                             during the load (/dev/shm/kvfts-ID) */
    uint64_t outside_peak;/* kvfts: their peak bytes there, sampled */
    uint64_t freezer_peak;/* kvfts: most __db.freezer.* files seen at once
                             during the load, wherever the regions were */
    uint64_t freezer_after;/* kvfts: __db.freezer.* files in the directory
                             after the load */
    uint64_t docs;        /* documents the engine holds */
    uint64_t terms;       /* kvfts: fts:: entries; FTS5: (column, term);
                             Xapian: terms, prefixed or not, but Q<key> */
    uint64_t postings;    /* kvfts: stats.postings; FTS5: (column, term, doc);
                             Xapian: the sum of those terms' frequencies */
} bench_load;

/* Where things are, for one run. */
typedef struct bench_env {
    const char *self;     /* this binary (/proc/self/exe) */
    const char *kvfts;    /* the kvfts command */
    const char *work;     /* scratch directory of this corpus */
    unsigned mem_mb;      /* kvfts load --mem */
} bench_env;

/** Count documents and indexed text bytes (also checks every document has
 *  the key's values). */
int bench_corpus_scan(bench_corpus *c, const bench_spec *s);
/** kvfts init WORK/kvfts [--config] + kvfts load, measured. */
int bench_load_kvfts(bench_load *l, const bench_env *e, const bench_spec *s,
                     const bench_corpus *c);
/** kvfts load of the corpus again into the loaded WORK/kvfts, with the
 *  key template @p key, committing every @p batch documents (0: by
 *  --mem, as the first load), measured (the --readers phase). */
int bench_reload_kvfts(bench_load *l, const bench_env *e, const char *key,
                       uint64_t batch, const bench_corpus *c);
/** FTS5 into WORK/fts5.db, measured (runs `kvfts-bench --internal-fts5`). */
int bench_load_fts5(bench_load *l, const bench_env *e, const bench_spec *s,
                    const bench_corpus *c);
/** Xapian into WORK/xapian/, measured (`kvfts-bench --internal-xapian`);
 *  its size is that of every file in the directory (du -sb). */
int bench_load_xapian(bench_load *l, const bench_env *e, const bench_spec *s,
                      const bench_corpus *c);
/** `kvfts init WORK/kvfts [--config]` alone (the growth run's first step). */
int bench_init_kvfts(const bench_env *e, const bench_spec *s);
/** The growth run's steps: the corpus @p c (one step's documents) added to
 *  WORK/kvfts with key template @p key, or to WORK/fts5.db (made by the
 *  first step), measured as the first loads are. */
int bench_add_kvfts(bench_load *l, const bench_env *e, const char *key,
                    const bench_corpus *c);
int bench_add_fts5(bench_load *l, const bench_env *e, const bench_spec *s,
                   const char *key, const bench_corpus *c);
/** The same for WORK/xapian (`kvfts-bench --internal-xapian-add`). */
int bench_add_xapian(bench_load *l, const bench_env *e, const bench_spec *s,
                     const char *key, const bench_corpus *c);
/** Sizes of WORK/kvfts now (dir_bytes, data, log, region bytes, freezer
 *  files in it) into @p l. */
int bench_kvfts_sizes(bench_load *l, const bench_env *e);
/** Run argv (argv[0] an absolute path), stdout to /dev/null; returns its
 *  exit status, 128 + signal, or -1; *secs its wall time. */
int bench_run_timed(char *const *argv, double *secs);
/** Remove the databases of WORK (nothing else in it). */
void bench_work_clean(const char *work);
/** Remove WORK/kvfts only. */
void bench_kvfts_clean(const char *work);
/** The internal modes: --internal-measure, --internal-fts5 and
 *  --internal-xapian. */
int bench_internal(int argc, char **argv);

/* ---- interface to bench_run.c ------------------------------------------- */

typedef struct bench_class_stats {
    size_t nq;            /* queries of the class */
    double med[NMODE], p99[NMODE];   /* over all samples; NAN if none */
} bench_class_stats;

typedef struct bench_run_opts {
    const char *kv_dir;   /* WORK/kvfts */
    const char *fts_db;   /* WORK/fts5.db, or NULL (no FTS5 peer) */
    const char *xap_dir;  /* WORK/xapian, or NULL (no Xapian peer) */
    const bench_spec *spec;
    int runs;
    bool match_sets;      /* compare full match sets (else counts only) */
} bench_run_opts;

/** Time every query (warm once, then runs times, engines interleaved) and
 *  compare match sets; fills qs->q[i] and cls[]; also the engines' stats
 *  (terms, postings, documents) into kv / fts. */
int bench_run(bench_queries *qs, bench_class_stats cls[NCLASS],
              bench_load *kv, bench_load *fts, bench_load *xap,
              const bench_run_opts *o);

/* ---- interface to bench_readers.c --------------------------------------- */

/* What the readers measured in one phase. */
typedef struct bench_reader_phase {
    double secs;          /* wall clock of the phase */
    uint64_t queries;     /* timed searches, all readers */
    uint64_t errors;      /* failed searches */
    uint64_t dropped;     /* searches done but not kept (sample space) */
    double qps;           /* searches per second, all readers */
    double med, p99, max; /* latency of one search, ms; NAN if none */
    char first_error[256];/* the first failure's message, or "" */
} bench_reader_phase;

typedef struct bench_readers {
    int n;                /* reader processes; 0: no readers phase */
    uint64_t batch;       /* the reloads' --batch; 0: by --mem */
    unsigned cache_mb;    /* Berkeley DB cache of the phase's database */
    bool done;
    double idle_target;   /* seconds the idle phase was to last */
    bench_reader_phase idle, load;
    bench_load first;     /* the fresh load (as the benchmark's) */
    bench_load alone;     /* reload 1, no readers */
    bench_load reload;    /* reload 2, with the readers */
    char key_alone[300];  /* their key templates, "reloadN::<spec key>" */
    char key_reload[300];
} bench_readers;

/** The --readers phase, in a new WORK/kvfts made with a cache of
 *  rd->cache_mb: load the corpus, load it again under other keys (alone),
 *  run rd->n readers idle, then while the corpus is loaded a third time.
 *  Errors of searches are counted in rd, not failures of the run. */
int bench_readers_run(bench_readers *rd, const bench_env *e,
                      const bench_spec *s, const bench_corpus *c,
                      const bench_queries *qs);

/* Latency of single-document writes: median and p99, ms. */
typedef struct bench_latency {
    uint64_t n, errors;
    double med, p99;
} bench_latency;
enum { LAT_PUT, LAT_REPLACE, LAT_DELETE, NLAT };
enum { LAT_PROCESS, LAT_API, NLATWAY };

/* --incremental: the corpus loaded again over itself (same keys, every
 * document replaced), --batch N, the database's default cache, while
 * readers search; then single-document writes. */
typedef struct bench_incr {
    int n;                /* readers; 0: no such phase */
    uint64_t batch;       /* the load's --batch */
    size_t ndocs;         /* documents per latency series */
    bool done;
    bench_load load;      /* the load over the loaded database */
    bench_reader_phase readers;
    /* then again with every document changed (a field "_rev" added):
     * the first reload stores documents as they were, which kvfts
     * recognizes and does not analyze again; this one analyzes both
     * versions of each */
    bench_load changed;
    bench_reader_phase changed_readers;
    bench_latency lat[NLATWAY][NLAT];
} bench_incr;

/** The --incremental phase, on WORK/kvfts as the benchmark left it. */
int bench_incr_run(bench_incr *in, const bench_env *e, const bench_spec *s,
                   const bench_corpus *c, const bench_queries *qs);

/* ---- interface to bench_report.c ---------------------------------------- */

/* Target kinds of a figure. */
enum { T_NONE, T_RATIO_GE, T_RATIO_LE, T_ABS_LE };

/* One row of the report. */
typedef struct bench_fig {
    char id[64];          /* JSON name, e.g. "or.top10.median_ms" */
    char label[48];       /* table label */
    int unit;             /* U_* below */
    double kv, fts, xap;  /* NAN: not measured */
    double ratio;         /* kv / fts; NAN without the peer */
    double ratio_xap;     /* kv / xap; NAN without Xapian */
    double best;          /* the better of fts and xap (lower, or higher
                             for speeds); NAN without either */
    double ratio_best;    /* kv / best */
    const char *best_peer;/* "fts5", "xapian" or NULL */
    int target;           /* T_* (of ratio, kvfts / FTS5) */
    double goal;          /* the target's number */
    int ok;               /* 1 ok, 0 miss, -1 no target or not measured */
} bench_fig;
enum { U_DOCS_S, U_MB_S, U_BYTES, U_X, U_KB, U_MS, U_COUNT };

/* Everything one corpus run produced. */
typedef struct bench_result {
    const bench_spec *spec;
    const bench_queries *qs;
    bench_corpus corpus;
    bench_load kv, fts, xap;
    bool vs;              /* the FTS5 peer ran */
    bool xap_on;          /* the Xapian peer ran */
    int runs;
    unsigned mem_mb;
    bench_class_stats cls[NCLASS];
    bench_fig *figs;
    size_t nfigs;
    size_t agree_n, agree_equal;     /* queries compared / equal */
    uint64_t agree_matches;          /* matches of the compared queries */
    size_t count_n, count_equal;     /* queries whose counts were compared /
                                        equal (the growth run's check) */
    size_t xagree_n, xagree_equal;   /* the same three with Xapian */
    uint64_t xagree_matches;
    size_t xcount_n, xcount_equal;
    bench_readers readers;           /* --readers (readers.n 0: none) */
    bench_incr incr;                 /* --incremental (incr.n 0: none) */
    uint64_t at_docs;                /* growth: documents in the databases
                                        after this step (corpus: the step) */
} bench_result;

/* The growth run: one result per size, each the step up to that size. */
typedef struct bench_growth {
    const bench_spec *spec;
    bench_result r[BENCH_MAX_SIZES];
    size_t n;
    bool vs, xap_on;      /* the peers that ran */
    bool cycled;          /* a real corpus cycled with distinct keys */
    uint64_t base_docs;   /* documents of that corpus (one cycle) */
    int rss_ok, freezer_ok;   /* peak RSS <= 400 MB, no freezer file, at
                                 every size (-1: no sizes) */
    double scale;         /* docs/s at the largest size / at 100k (or the
                             smallest); NAN with fewer than two sizes */
    uint64_t scale_from, scale_to;
    int scale_ok;
} bench_growth;

/* ---- interface to bench_growth.c ---------------------------------------- */

typedef struct bench_growth_opts {
    const uint64_t *sizes;
    size_t nsizes;
    const char *corpus;   /* the full file: synthetic of the largest size,
                             or the real corpus to cycle */
    bool cycle;           /* cycle @p corpus with distinct keys */
    int runs;
    unsigned mem_mb;
    /* Called after each step with the results so far (the JSON is written
     * as the run goes, so a long run stopped early keeps its steps). */
    int (*after_step)(bench_growth *g, void *payload);
    void *payload;
} bench_growth_opts;

/** Grow WORK/kvfts (and WORK/fts5.db, WORK/xapian with the peers) to each
 *  size in turn, each step a load of the next documents, then the
 *  queries. */
int bench_growth_run(bench_growth *g, const bench_env *e,
                     bench_queries *qs, const bench_growth_opts *o);

/* ---- interface to bench_report.c (continued) ---------------------------- */

/** Compute r->figs from the measurements (targets included). */
void bench_figures(bench_result *r);
void bench_print_table(FILE *f, const bench_result *r);
int bench_write_json(const char *path, const bench_result *r);
/** The growth target (g->scale*) from the sizes' results. */
void bench_growth_finish(bench_growth *g);
void bench_print_growth(FILE *f, const bench_growth *g);
int bench_write_growth_json(const char *path, const bench_growth *g);

/* ---- interface to bench_chart.c ----------------------------------------- */

/** Write the chart with gnuplot ($KVFTS_GNUPLOT or gnuplot in PATH); warns
 *  and returns 0 when gnuplot is missing or fails.  Without the peer there
 *  is no ratio to draw: removes an earlier chart at @p path instead. */
int bench_write_svg(const char *path, const bench_result *r);
int bench_write_growth_svg(const char *path, const bench_growth *g);

#endif /* KVFTS_BENCH_H */
