/*
 * kvfts_bench.c -- kvfts-bench (also `kvfts bench`): kvfts against SQLite
 * FTS5 and Xapian, side by side, on real corpora (README "Benchmarks").
 *
 *   kvfts-bench --corpus NAME [options]    one corpus: load, size, memory,
 *                                          query latency, match sets
 *   kvfts-bench --growth [--sizes ...]     one database grown step by
 *                                          step (bench_growth.c): the
 *                                          synthetic corpus, or with
 *                                          --corpus NAME that corpus
 *                                          cycled with distinct keys
 *   kvfts-bench --corpus NAME --incremental  also the corpus loaded again
 *                                          over itself while readers
 *                                          search, and single-document
 *                                          write latency (bench_readers.c)
 *   kvfts-bench --corpus NAME --readers N  also N searching processes, idle
 *                                          and while a load writes
 *                                          (bench_readers.c)
 *
 * A corpus run: build the corpus (bench/corpus.sh NAME, which caches it in
 * --data), count its documents and indexed text, load it into kvfts (the
 * real `kvfts` command beside this binary), into FTS5 and into Xapian (the
 * peers of --vs), each measured in its own process (bench_load.c), measure
 * what is on disk, time the query set on every engine in this process and
 * compare match sets (bench_run.c), then
 * print the table and write OUT/NAME.json and OUT/NAME.svg
 * (bench_report.c).  The databases live in --work (a real disk: sizes and
 * load times must be those of a disk) and are removed at the end unless
 * --keep.
 *
 * Where things are.  The bench/ directory (corpora/, queries/, corpus.sh)
 * comes from --bench-dir, $KVFTS_BENCH_DIR, the source tree this binary
 * was built from, or ../bench beside the binary.  The kvfts command is
 * $KVFTS_BIN or `kvfts` beside this binary.  A spec's query file is looked
 * for in ../queries/ next to the spec, then beside the spec.
 *
 * Exit status: 0 when the run completed, even if targets were missed (or
 * match sets differ: the table and the JSON's "agreement" say so, and a
 * warning goes to stderr); 1 when a step failed; 2 for bad usage, an
 * unknown corpus or a bad spec or query set.
 */
#include "bench.h"
#include "peer_xapian.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef KVFTS_BENCH_SOURCE_DIR
#define KVFTS_BENCH_SOURCE_DIR ""
#endif
#define TMPFS_MAGIC_NUMBER 0x01021994
#define WORK_MARK ".kvfts-bench-work"      /* marks a work dir as ours */

static const char usage_text[] =
    "usage: kvfts-bench --corpus NAME [--docs N] [--vs PEERS] [--runs N]\n"
    "                   [--mem MB] [--work DIR] [--out DIR] [--data DIR]\n"
    "                   [--keep] [--bench-dir DIR] [--spec FILE]\n"
    "                   [--queries FILE] [--corpus-file FILE]\n"
    "                   [--readers N] [--readers-batch N] [--readers-cache MB]\n"
    "                   [--incremental] [--incr-readers N] [--incr-batch N]\n"
    "                   [--latency-docs N]\n"
    "       kvfts-bench --growth [--sizes N,N,...] [--corpus NAME] ...\n"
    "\n"
    "Benchmark kvfts against SQLite FTS5 (unicode61 remove_diacritics 2,\n"
    "detail=full) and Xapian (field prefixes plus unprefixed terms,\n"
    "positions, BM25 top-10, BoolWeight exact counts) on the same corpus, in\n"
    "one run: load docs/s and MB/s, index size on disk, peak RSS of the\n"
    "load, and per query class the median and p99 latency of top-10 and of\n"
    "count (warm caches), kvfts's ratio to each peer and to the best of\n"
    "them, and whether the engines return the same match sets.  Prints a\n"
    "table with the targets, writes OUT/NAME.json and OUT/NAME.svg (the\n"
    "chart needs gnuplot).\n"
    "\n"
    "  --corpus NAME     a spec of bench/corpora/ (debian, gcide, linuxdoc,\n"
    "                    synthetic, largevocab); built with bench/corpus.sh\n"
    "                    into --data\n"
    "  --docs N          documents of a synthetic corpus (default 100000);\n"
    "                    of gcide or linuxdoc: only the first N\n"
    "  --vs PEERS        the peers: fts5, xapian, fts5,xapian or none\n"
    "                    (default fts5,xapian; fts5 when built without\n"
    "                    Xapian; none: kvfts alone)\n"
    "  --runs N          timed runs per query (default 11), after one warm-up\n"
    "  --mem MB          kvfts load --mem (default 128)\n"
    "  --work DIR        scratch databases (default bench/work/NAME; a disk,\n"
    "                    not a tmpfs); removed after the run unless --keep\n"
    "  --keep            keep the databases of --work after the run\n"
    "  --out DIR         results (default bench/results)\n"
    "  --data DIR        built corpora (default bench/data)\n"
    "  --growth          one database grown step by step to each of --sizes\n"
    "                    (default 10000,100000,500000,1000000,2000000,\n"
    "                    3000000,4000000,5000000): per step docs/s, peak\n"
    "                    RSS of the load, freezer files, directory size,\n"
    "                    latency per class; the synthetic corpus, writing\n"
    "                    OUT/growth.json and .svg, or with --corpus NAME\n"
    "                    (or --corpus-file) that corpus cycled with distinct\n"
    "                    keys, writing OUT/growth-NAME.json and .svg\n"
    "  --bench-dir DIR   the bench/ directory (or $KVFTS_BENCH_DIR)\n"
    "  --spec FILE       a corpus spec instead of bench/corpora/NAME.json\n"
    "  --queries FILE    a query set instead of the spec's\n"
    "  --corpus-file F   a JSON Lines file instead of building the corpus\n"
    "  --readers N       then N processes search (the query set's top-10\n"
    "                    searches, in turn) idle, and again while the\n"
    "                    corpus is loaded once more into the same database\n"
    "                    (under keys reload2::KEY, after a reload1:: load\n"
    "                    alone): their median and p99 latency during the\n"
    "                    load next to idle, searches/s, errors, and the\n"
    "                    load's time with and without readers (default 0:\n"
    "                    no such phase; at most 64)\n"
    "  --readers-batch N the loads of that phase commit every N documents\n"
    "                    (default 1000; 0: by --mem, as the benchmark's)\n"
    "  --readers-cache MB  Berkeley DB cache of that phase's database\n"
    "                    (default 512; the benchmark's 64 MB is too small\n"
    "                    for a batched load of the catalog: see README)\n";
/* Split: C11 compilers need only take string literals of 4,095 bytes. */
static const char usage_tail[] =
    "  --incremental     then the corpus loaded again into the loaded\n"
    "                    database, same keys (every document replaced),\n"
    "                    --incr-batch N (default 1000), default cache, while\n"
    "                    --incr-readers N (default 4) processes search:\n"
    "                    its docs/s against the first load's, reader errors;\n"
    "                    again with every document changed (\"_rev\":1\n"
    "                    added: each old and new version analyzed);\n"
    "                    then --latency-docs N (default 200) single puts,\n"
    "                    replaces and deletes, each as a `kvfts` process and\n"
    "                    as a library call: median and p99\n"
    "\n"
    "The kvfts command used is the one beside kvfts-bench, or $KVFTS_BIN.\n"
    "Exit status: 0 the run completed (targets may be missed; differing\n"
    "match sets are reported in the table, the JSON and on stderr),\n"
    "1 a step failed, 2 bad usage.\n";

typedef struct opts {
    const char *corpus;
    uint64_t docs;            /* 0: not given */
    bool vs;                  /* --vs has fts5 */
    bool xap;                 /* --vs has xapian */
    bool vs_given;            /* --vs was on the command line */
    int runs;
    unsigned mem_mb;
    const char *work, *out, *data;
    const char *bench_dir, *spec, *queries, *corpus_file;
    bool growth, keep;
    int readers;              /* --readers: 0 none */
    uint64_t readers_batch;   /* --readers-batch: 0 by --mem */
    unsigned readers_cache;   /* --readers-cache MB */
    bool incremental;         /* --incremental */
    int incr_readers;         /* --incr-readers */
    uint64_t incr_batch;      /* --incr-batch */
    uint64_t latency_docs;    /* --latency-docs */
    uint64_t sizes[BENCH_MAX_SIZES];
    size_t nsizes;
} opts;

/* ---- options ------------------------------------------------------------ */

static int usage_error(const char *fmt, const char *arg)
{
    fputs("kvfts-bench: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs(" (see kvfts-bench --help)\n", stderr);
    return BENCH_USAGE;
}

static bool parse_u64(const char *s, uint64_t *out, uint64_t lo, uint64_t hi)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static int parse_sizes(opts *o, const char *arg)
{
    char *s = bench_strdup(arg), *save = NULL;
    o->nsizes = 0;
    int code = 0;
    for (char *t = strtok_r(s, ",", &save); t && !code;
         t = strtok_r(NULL, ",", &save)) {
        if (o->nsizes == BENCH_MAX_SIZES ||
            !parse_u64(t, &o->sizes[o->nsizes++], 1, 1000000000))
            code = usage_error("--sizes takes up to 16 document counts, "
                               "e.g. 10000,100000, not '%s'", arg);
    }
    free(s);
    if (!code && o->nsizes == 0)
        code = usage_error("--sizes takes document counts, not '%s'", arg);
    return code;
}

/* --vs: "none" or a comma-separated list of fts5 and xapian. */
static int parse_vs(opts *o, const char *arg)
{
    o->vs = o->xap = false;
    o->vs_given = true;
    if (strcmp(arg, "none") == 0)
        return 0;
    size_t len = strlen(arg);
    /* strtok_r() would skip empty names: "fts5," is refused, not fts5. */
    int code = len == 0 || arg[0] == ',' || arg[len - 1] == ',' ||
               strstr(arg, ",,") ? BENCH_USAGE : 0;
    char *s = bench_strdup(arg), *save = NULL;
    for (char *t = strtok_r(s, ",", &save); t && !code;
         t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "fts5") == 0)
            o->vs = true;
        else if (strcmp(t, "xapian") == 0)
            o->xap = true;
        else
            code = BENCH_USAGE;
    }
    free(s);
    if (code || (!o->vs && !o->xap))
        code = usage_error("--vs is fts5, xapian, fts5,xapian or none, not "
                           "'%s'", arg);
    if (!code && o->xap && !xap_available())
        code = usage_error("--vs '%s': kvfts-bench was built without Xapian "
                           "(install libxapian-dev and build again)", arg);
    return code;
}

static int parse_opt(opts *o, int c, const char *arg)
{
    uint64_t v;
    switch (c) {
    case 'c': o->corpus = arg; return 0;
    case 'n':
        if (!parse_u64(arg, &o->docs, 1, 1000000000))
            return usage_error("--docs takes a document count, not '%s'",
                               arg);
        return 0;
    case 'v': return parse_vs(o, arg);
    case 'r':
        if (!parse_u64(arg, &v, 1, 100000))
            return usage_error("--runs takes 1 to 100000, not '%s'", arg);
        o->runs = (int)v;
        return 0;
    case 'm':
        if (!parse_u64(arg, &v, 1, 1024 * 1024))
            return usage_error("--mem takes megabytes (1 to 1048576), not "
                               "'%s'", arg);
        o->mem_mb = (unsigned)v;
        return 0;
    case 'w': o->work = arg; return 0;
    case 'o': o->out = arg; return 0;
    case 'd': o->data = arg; return 0;
    case 'g': o->growth = true; return 0;
    case 's': return parse_sizes(o, arg);
    case 'k': o->keep = true; return 0;
    case 'b': o->bench_dir = arg; return 0;
    case 'S': o->spec = arg; return 0;
    case 'q': o->queries = arg; return 0;
    case 'f': o->corpus_file = arg; return 0;
    case 'R':
        if (!parse_u64(arg, &v, 0, BENCH_MAX_READERS))
            return usage_error("--readers takes 0 to 64 processes, not '%s'",
                               arg);
        o->readers = (int)v;
        return 0;
    case 'B':
        if (!parse_u64(arg, &o->readers_batch, 0, 1000000))
            return usage_error("--readers-batch takes 0 to 1000000 "
                               "documents, not '%s'", arg);
        return 0;
    case 'C':
        if (!parse_u64(arg, &v, 1, 1024 * 1024))
            return usage_error("--readers-cache takes megabytes (1 to "
                               "1048576), not '%s'", arg);
        o->readers_cache = (unsigned)v;
        return 0;
    case 'I': o->incremental = true; return 0;
    case 'N':
        if (!parse_u64(arg, &v, 0, BENCH_MAX_READERS))
            return usage_error("--incr-readers takes 0 to 64 processes, not "
                               "'%s'", arg);
        o->incr_readers = (int)v;
        return 0;
    case 'T':
        if (!parse_u64(arg, &o->incr_batch, 1, 1000000))
            return usage_error("--incr-batch takes 1 to 1000000 documents, "
                               "not '%s'", arg);
        return 0;
    case 'L':
        if (!parse_u64(arg, &o->latency_docs, 0, 100000))
            return usage_error("--latency-docs takes 0 to 100000, not '%s'",
                               arg);
        return 0;
    default: return BENCH_USAGE;
    }
}

static int parse_opts(opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        { "corpus", required_argument, NULL, 'c' },
        { "docs", required_argument, NULL, 'n' },
        { "vs", required_argument, NULL, 'v' },
        { "runs", required_argument, NULL, 'r' },
        { "mem", required_argument, NULL, 'm' },
        { "work", required_argument, NULL, 'w' },
        { "out", required_argument, NULL, 'o' },
        { "data", required_argument, NULL, 'd' },
        { "growth", no_argument, NULL, 'g' },
        { "sizes", required_argument, NULL, 's' },
        { "keep", no_argument, NULL, 'k' },
        { "bench-dir", required_argument, NULL, 'b' },
        { "spec", required_argument, NULL, 'S' },
        { "queries", required_argument, NULL, 'q' },
        { "corpus-file", required_argument, NULL, 'f' },
        { "readers", required_argument, NULL, 'R' },
        { "readers-batch", required_argument, NULL, 'B' },
        { "readers-cache", required_argument, NULL, 'C' },
        { "incremental", no_argument, NULL, 'I' },
        { "incr-readers", required_argument, NULL, 'N' },
        { "incr-batch", required_argument, NULL, 'T' },
        { "latency-docs", required_argument, NULL, 'L' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    static const uint64_t sizes[] = { 10000, 100000, 500000, 1000000,
                                      2000000, 3000000, 4000000, 5000000 };
    memset(o, 0, sizeof *o);
    o->vs = true;
    o->xap = xap_available();
    o->runs = 11;
    o->mem_mb = 128;
    o->readers_batch = 1000;
    o->readers_cache = 512;
    o->incr_readers = 4;
    o->incr_batch = 1000;
    o->latency_docs = 200;
    memcpy(o->sizes, sizes, sizeof sizes);
    o->nsizes = sizeof sizes / sizeof *sizes;
    opterr = 0;
    int c, code = 0;
    while (!code && (c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage_text, stdout);
            fputs(usage_tail, stdout);
            exit(BENCH_OK);
        }
        if (c == '?' || c == ':')
            return usage_error(c == ':' ? "option '%s' needs a value"
                               : "unknown option '%s'", argv[optind - 1]);
        code = parse_opt(o, c, optarg);
    }
    if (code)
        return code;
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (o->growth && o->docs)
        return usage_error("%s--growth loads each of --sizes; drop --docs",
                           "");
    if (o->growth && (o->readers || o->incremental))
        return usage_error("%s--readers and --incremental go with --corpus, "
                           "not --growth", "");
    if (!o->growth && !o->corpus && !o->spec)
        return usage_error("%sgive --corpus NAME or --growth", "");
    return 0;
}

/* ---- where things are --------------------------------------------------- */

static char *self_exe(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    return bench_strdup(buf);
}

static bool bench_dir_ok(const char *d)
{
    char *a = bench_path(d, "corpora"), *b = bench_path(d, "corpus.sh");
    bool ok = bench_is_dir(a) || bench_is_file(b);
    free(a);
    free(b);
    return ok;
}

/* The bench/ directory, or NULL (message printed). */
static char *find_bench_dir(const opts *o, const char *self)
{
    const char *given = o->bench_dir ? o->bench_dir
                      : getenv("KVFTS_BENCH_DIR");
    if (given && *given) {
        if (!bench_is_dir(given)) {
            bench_fail(BENCH_USAGE, "bench dir %s: not a directory", given);
            return NULL;
        }
        return bench_strdup(given);
    }
    if (*KVFTS_BENCH_SOURCE_DIR && bench_dir_ok(KVFTS_BENCH_SOURCE_DIR))
        return bench_strdup(KVFTS_BENCH_SOURCE_DIR);
    char *exe_dir = bench_dir_of(self), *up = bench_path(exe_dir, "../bench");
    free(exe_dir);
    if (bench_dir_ok(up))
        return up;
    free(up);
    bench_fail(BENCH_USAGE, "bench dir: not found (looked in %s and beside "
               "the binary; give --bench-dir DIR or set KVFTS_BENCH_DIR)",
               *KVFTS_BENCH_SOURCE_DIR ? KVFTS_BENCH_SOURCE_DIR : "-");
    return NULL;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names of bench/corpora/ *.json, sorted, for the unknown-corpus message. */
static void known_corpora(char *out, size_t cap, const char *bench)
{
    char *dir = bench_path(bench, "corpora");
    DIR *d = opendir(dir);
    char **names = NULL;
    size_t n = 0, o = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l <= 5 || strcmp(e->d_name + l - 5, ".json") != 0)
            continue;
        names = bench_xrealloc(names, (n + 1) * sizeof *names);
        names[n++] = bench_strndup(e->d_name, l - 5);
    }
    if (d)
        closedir(d);
    qsort(names, n, sizeof *names, cmp_name);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (o + strlen(names[i]) + 3 < cap)
            o += (size_t)snprintf(out + o, cap - o, "%s%s", i ? ", " : "",
                                  names[i]);
        free(names[i]);
    }
    free(names);
    free(dir);
}

static int spec_path(char **out, const opts *o, const char *bench,
                     const char *name)
{
    if (o->spec) {
        *out = bench_strdup(o->spec);
        if (!bench_is_file(*out))
            return bench_fail(BENCH_USAGE, "spec %s: no such file", o->spec);
        return 0;
    }
    if (strchr(name, '/') || name[0] == '.' || !name[0])
        return bench_fail(BENCH_USAGE, "corpus '%s': not a corpus name", name);
    char file[512], known[512];
    snprintf(file, sizeof file, "corpora/%s.json", name);
    *out = bench_path(bench, file);
    if (bench_is_file(*out))
        return 0;
    known_corpora(known, sizeof known, bench);
    return bench_fail(BENCH_USAGE, "corpus '%s': unknown (no %s; known: %s)",
                      name, *out, known[0] ? known : "none");
}

/* --queries, an absolute name, or the spec's file in ../queries/ next to
 * the spec (bench/corpora -> bench/queries), else beside the spec. */
static int queries_path(char **out, const opts *o, const bench_spec *s)
{
    if (o->queries || s->queries[0] == '/') {
        *out = bench_strdup(o->queries ? o->queries : s->queries);
        return 0;
    }
    char *dir = bench_dir_of(s->file), *up = bench_path(dir, "../queries");
    char *a = bench_path(up, s->queries), *b = bench_path(dir, s->queries);
    bool beside = !bench_is_file(a) && bench_is_file(b);
    *out = beside ? b : a;
    free(beside ? a : b);
    free(dir);
    free(up);
    return 0;
}

/* ---- building the corpus ------------------------------------------------ */

/* Copy a file to stderr (what corpus.sh said, when it failed). */
static void replay(const char *file)
{
    FILE *f = fopen(file, "r");
    char buf[4096];
    size_t n;
    while (f && (n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, stderr);
    if (f)
        fclose(f);
}

/* bash corpus.sh NAME OUT [DOCS].  Its messages go to stderr on a
 * terminal; otherwise to @p log, shown only if it fails. */
static int run_corpus_sh(const char *sh, const char *name, const char *out,
                         uint64_t docs, const char *log)
{
    char n[32];
    snprintf(n, sizeof n, "%" PRIu64, docs);
    char *argv[] = { "bash", (char *)sh, (char *)name, (char *)out,
                     docs ? n : NULL, NULL };
    bench_note("building corpus %s into %s", name, out);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = bench_tty() ? -1 : open(log, O_WRONLY | O_CREAT | O_TRUNC,
                                         0644);
        if (fd >= 0)
            dup2(fd, STDERR_FILENO);
        dup2(STDERR_FILENO, STDOUT_FILENO);   /* our stdout is the table */
        execvp("bash", argv);
        _exit(127);
    }
    int st = -1;
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    int code = 0;
    if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (!bench_tty())
            replay(log);
        code = bench_fail(BENCH_ERR, "corpus %s: %s %s %s%s%s failed", name,
                          sh, name, out, docs ? " " : "", docs ? n : "");
    } else if (!bench_is_file(out)) {
        code = bench_fail(BENCH_ERR, "corpus %s: %s did not make %s", name,
                          sh, out);
    }
    unlink(log);
    return code;
}

/* The corpus file: --corpus-file, or DATA/NAME[-N].jsonl built by
 * bench/corpus.sh (an existing file is used as is when there is no
 * corpus.sh). */
static int corpus_file(char **out, const opts *o, const char *bench,
                       const char *data, const char *work,
                       const bench_spec *s, uint64_t docs)
{
    if (o->corpus_file) {
        *out = bench_strdup(o->corpus_file);
        if (!bench_is_file(*out))
            return bench_fail(BENCH_USAGE, "corpus file %s: no such file",
                              *out);
        return 0;
    }
    char name[300];
    if (docs)
        snprintf(name, sizeof name, "%s-%" PRIu64 ".jsonl", s->name, docs);
    else
        snprintf(name, sizeof name, "%s.jsonl", s->name);
    *out = bench_path(data, name);
    char *sh = bench_path(bench, "corpus.sh");
    char *log = bench_path(work, "corpus.log");
    int code = 0;
    if (bench_is_file(sh))
        code = bench_make_dirs(data) ? BENCH_ERR
             : run_corpus_sh(sh, s->name, *out, docs, log);
    else if (!bench_is_file(*out))
        code = bench_fail(BENCH_ERR, "corpus %s: no %s to build %s", s->name,
                          sh, *out);
    free(sh);
    free(log);
    return code;
}

/* ---- one measurement: loads, sizes, queries ------------------------------ */

typedef struct ctx {
    const opts *o;
    char *self, *kvfts, *bench, *out, *data, *work;
    bool claimed;             /* the work dir is ours (marked) */
} ctx;

static void check_docs(const bench_result *r)
{
    if (r->kv.docs != r->corpus.docs)
        bench_warn("kvfts holds %" PRIu64 " documents, the corpus has %"
                   PRIu64 " (repeated keys?): match sets will differ",
                   r->kv.docs, r->corpus.docs);
    if (r->vs && r->fts.docs != r->corpus.docs)
        bench_warn("fts5 holds %" PRIu64 " rows, the corpus has %" PRIu64,
                   r->fts.docs, r->corpus.docs);
    if (r->xap_on && r->xap.docs != r->corpus.docs)
        bench_warn("xapian holds %" PRIu64 " documents, the corpus has %"
                   PRIu64, r->xap.docs, r->corpus.docs);
}

static int measure(ctx *x, bench_result *r, bench_queries *qs,
                   bool match_sets)
{
    bench_env env = { x->self, x->kvfts, x->work, x->o->mem_mb };
    const bench_spec *s = r->spec;
    bench_note("%s: counting documents in %s", s->name, r->corpus.path);
    int code = bench_corpus_scan(&r->corpus, s);
    bench_work_clean(x->work);
    if (!code) {
        bench_note("%s: loading kvfts (%" PRIu64 " docs)", s->name,
                   r->corpus.docs);
        code = bench_load_kvfts(&r->kv, &env, s, &r->corpus);
    }
    if (!code && r->vs) {
        bench_note("%s: loading fts5", s->name);
        code = bench_load_fts5(&r->fts, &env, s, &r->corpus);
    }
    if (!code && r->xap_on) {
        bench_note("%s: loading xapian", s->name);
        code = bench_load_xapian(&r->xap, &env, s, &r->corpus);
    }
    char *kv_dir = bench_path(x->work, "kvfts");
    char *fts_db = bench_path(x->work, "fts5.db");
    char *xap_dir = bench_path(x->work, "xapian");
    bench_run_opts ro = { kv_dir, r->vs ? fts_db : NULL,
                          r->xap_on ? xap_dir : NULL, s, r->runs,
                          match_sets };
    if (!code) {
        bench_note("%s: queries (%zu, %d runs each)", s->name, qs->n, r->runs);
        code = bench_run(qs, r->cls, &r->kv, &r->fts, &r->xap, &ro);
    }
    free(kv_dir);
    free(fts_db);
    free(xap_dir);
    if (!code && x->o->incremental)
        code = bench_incr_run(&r->incr, &env, s, &r->corpus, qs);
    if (!code && r->readers.n)
        code = bench_readers_run(&r->readers, &env, s, &r->corpus, qs);
    if (!code) {
        check_docs(r);
        bench_figures(r);
    }
    if (!x->o->keep)
        bench_work_clean(x->work);
    return code;
}

static void warn_tmpfs(const char *dir)
{
    struct statfs sf;
    if (statfs(dir, &sf) == 0 && (unsigned long)sf.f_type ==
                                 TMPFS_MAGIC_NUMBER)
        bench_warn("work dir %s is a tmpfs: sizes and load times are not "
                   "those of a disk (see --work)", dir);
}

/* True when @p dir holds nothing but "." and "..". */
static bool dir_empty(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool empty = d != NULL;
    while (empty && (e = readdir(d)))
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    if (d)
        closedir(d);
    return empty;
}

/* The work dir is ours: new, empty, or marked by an earlier run.  Only then
 * are its databases (kvfts/, fts5.db) removed and re-made, so that a
 * mistaken --work never deletes someone's kvfts/ directory. */
static int claim_work(const char *work)
{
    char *mark = bench_path(work, WORK_MARK);
    int code = 0;
    if (!bench_is_file(mark) && !dir_empty(work))
        code = bench_fail(BENCH_USAGE, "work dir %s: not empty and not made "
                          "by kvfts-bench (give a new or empty --work)", work);
    FILE *f = code ? NULL : fopen(mark, "w");
    if (!code && (!f || fclose(f) != 0))
        code = bench_fail(BENCH_ERR, "%s: %s", mark, strerror(errno));
    free(mark);
    return code;
}

static int setup_dirs(ctx *x, const char *name)
{
    const opts *o = x->o;
    char sub[300];
    snprintf(sub, sizeof sub, "work/%s", name);
    x->work = o->work ? bench_strdup(o->work) : bench_path(x->bench, sub);
    x->out = o->out ? bench_strdup(o->out) : bench_path(x->bench, "results");
    x->data = o->data ? bench_strdup(o->data) : bench_path(x->bench, "data");
    int code = bench_make_dirs(x->work);
    if (!code)
        code = claim_work(x->work);
    if (!code)
        x->claimed = true;
    if (!code)
        code = bench_make_dirs(x->out);
    if (!code)
        warn_tmpfs(x->work);
    return code;
}

/* After the run: the work dir goes if nothing but our marker is left. */
static void release_work(const ctx *x)
{
    if (!x->claimed || x->o->keep)
        return;
    char *mark = bench_path(x->work, WORK_MARK);
    unlink(mark);
    free(mark);
    rmdir(x->work);
    if (!x->o->work) {                /* the default: bench/work/NAME */
        char *parent = bench_dir_of(x->work);
        rmdir(parent);
        free(parent);
    }
}

static void report_disagreement(const bench_result *r)
{
    if (r->vs && r->agree_equal != r->agree_n)
        bench_warn("match sets differ on %zu of %zu queries (see the table)",
                   r->agree_n - r->agree_equal, r->agree_n);
    if (r->xap_on && r->xagree_equal != r->xagree_n)
        bench_warn("xapian: match sets differ on %zu of %zu queries (see the "
                   "table)", r->xagree_n - r->xagree_equal, r->xagree_n);
}

/* ---- the two runs ------------------------------------------------------- */

static int load_spec(ctx *x, bench_spec *s, bench_queries *qs,
                     const char *name)
{
    char *sp = NULL, *qp = NULL;
    int code = spec_path(&sp, x->o, x->bench, name);
    if (!code)
        code = bench_spec_load(s, sp);
    if (!code)
        code = queries_path(&qp, x->o, s);
    if (!code)
        code = bench_queries_load(qs, qp);
    free(sp);
    free(qp);
    return code;
}

static int write_outputs(ctx *x, const char *name, const bench_result *r)
{
    char file[300];
    snprintf(file, sizeof file, "%s.json", name);
    char *json = bench_path(x->out, file);
    snprintf(file, sizeof file, "%s.svg", name);
    char *svg = bench_path(x->out, file);
    int code = bench_write_json(json, r);
    if (!code)
        code = bench_write_svg(svg, r);
    free(json);
    free(svg);
    return code;
}

static int run_corpus(ctx *x)
{
    bench_spec s;
    bench_queries qs;
    bench_result r;
    memset(&s, 0, sizeof s);
    memset(&qs, 0, sizeof qs);
    memset(&r, 0, sizeof r);
    const char *name = x->o->corpus ? x->o->corpus : "";
    int code = load_spec(x, &s, &qs, name);
    if (!code)
        code = setup_dirs(x, s.name);
    uint64_t docs = x->o->docs ? x->o->docs : s.synthetic ? 100000 : 0;
    if (!code)
        code = corpus_file(&r.corpus.path, x->o, x->bench, x->data, x->work,
                           &s, docs);
    r.spec = &s;
    r.qs = &qs;
    r.vs = x->o->vs;
    r.xap_on = x->o->xap && !(s.no_xapian && !x->o->vs_given);
    if (!code && x->o->xap && !r.xap_on)
        fprintf(stderr, "kvfts-bench: %s: Xapian left out (its spec says "
                "\"xapian\": false); --vs fts5,xapian runs it\n", s.name);
    r.runs = x->o->runs;
    r.mem_mb = x->o->mem_mb;
    r.readers.n = x->o->readers;
    r.readers.batch = x->o->readers_batch;
    r.readers.cache_mb = x->o->readers_cache;
    r.incr.n = x->o->incr_readers;
    r.incr.batch = x->o->incr_batch;
    r.incr.ndocs = (size_t)x->o->latency_docs;
    if (!code)
        code = measure(x, &r, &qs, true);
    if (!code) {
        bench_print_table(stdout, &r);
        fflush(stdout);
        code = write_outputs(x, s.name, &r);
        report_disagreement(&r);
    }
    free(r.corpus.path);
    free(r.figs);
    bench_queries_free(&qs);
    bench_spec_free(&s);
    return code;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* After each step: the JSON and the chart so far. */
typedef struct growth_out {
    char *json, *svg;
} growth_out;

static int growth_partial(bench_growth *g, void *payload)
{
    const growth_out *o = payload;
    bench_growth_finish(g);
    int code = bench_write_growth_json(o->json, g);
    return code ? code : bench_write_growth_svg(o->svg, g);
}

static int run_growth(ctx *x)
{
    bench_spec s;
    bench_queries qs;
    bench_growth *g = bench_xmalloc(sizeof *g);
    memset(&s, 0, sizeof s);
    memset(&qs, 0, sizeof qs);
    memset(g, 0, sizeof *g);
    uint64_t sizes[BENCH_MAX_SIZES];
    size_t n = x->o->nsizes;
    memcpy(sizes, x->o->sizes, n * sizeof *sizes);
    qsort(sizes, n, sizeof *sizes, cmp_u64);
    const char *name = x->o->corpus ? x->o->corpus : "synthetic";
    int code = load_spec(x, &s, &qs, name);
    char sub[300], base[300];
    snprintf(base, sizeof base, "%s%s", s.synthetic ? "growth" : "growth-",
             s.synthetic ? "" : s.name);
    snprintf(sub, sizeof sub, "%s", base);
    if (!code)
        code = setup_dirs(x, sub);
    g->spec = &s;
    g->vs = x->o->vs;
    g->xap_on = x->o->xap && !(s.no_xapian && !x->o->vs_given);
    char *file = NULL;
    if (!code)
        code = corpus_file(&file, x->o, x->bench, x->data, x->work, &s,
                           s.synthetic ? sizes[n - 1] : 0);
    bench_env env = { x->self, x->kvfts, x->work, x->o->mem_mb };
    char jn[320], sn[320];
    snprintf(jn, sizeof jn, "%s.json", base);
    snprintf(sn, sizeof sn, "%s.svg", base);
    growth_out gout = { x->out ? bench_path(x->out, jn) : NULL,
                        x->out ? bench_path(x->out, sn) : NULL };
    bench_growth_opts go = { sizes, n, file, !s.synthetic, x->o->runs,
                             x->o->mem_mb, growth_partial, &gout };
    if (!code)
        code = bench_growth_run(g, &env, &qs, &go);
    if (x->work && !x->o->keep)
        bench_work_clean(x->work);
    if (!code) {
        bench_growth_finish(g);
        bench_print_growth(stdout, g);
        fflush(stdout);
        code = bench_write_growth_json(gout.json, g);
        if (!code)
            code = bench_write_growth_svg(gout.svg, g);
    }
    free(gout.json);
    free(gout.svg);
    for (size_t i = 0; i < g->n; i++) {
        free(g->r[i].corpus.path);
        free(g->r[i].figs);
    }
    free(file);
    free(g);
    bench_queries_free(&qs);
    bench_spec_free(&s);
    return code;
}

/* ---- main --------------------------------------------------------------- */

static int find_binaries(ctx *x)
{
    x->self = self_exe();
    if (!x->self)
        return bench_fail(BENCH_ERR, "/proc/self/exe: %s", strerror(errno));
    const char *env = getenv("KVFTS_BIN");
    if (env && *env) {
        x->kvfts = bench_strdup(env);
    } else {
        char *d = bench_dir_of(x->self);
        x->kvfts = bench_path(d, "kvfts");
        free(d);
    }
    if (access(x->kvfts, X_OK) != 0)
        return bench_fail(BENCH_ERR, "kvfts command %s: %s (set KVFTS_BIN)",
                          x->kvfts, strerror(errno));
    /* bench/corpus.sh finds kvfts-corpus (and debian-corpus.sh kvfts)
     * beside $KVFTS_BIN. */
    setenv("KVFTS_BIN", x->kvfts, 1);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strncmp(argv[1], "--internal-", 11) == 0)
        return bench_internal(argc, argv);
    opts o;
    int code = parse_opts(&o, argc, argv);
    if (code)
        return code;
    ctx x;
    memset(&x, 0, sizeof x);
    x.o = &o;
    code = find_binaries(&x);
    if (!code) {
        x.bench = find_bench_dir(&o, x.self);
        if (!x.bench)
            code = BENCH_USAGE;
    }
    if (!code)
        code = o.growth ? run_growth(&x) : run_corpus(&x);
    release_work(&x);
    free(x.self);
    free(x.kvfts);
    free(x.bench);
    free(x.out);
    free(x.data);
    free(x.work);
    return code;
}
