/*
 * bench_readers.c -- `kvfts bench --readers N`: the latency of N searching
 * processes while a load writes into the database they search, next to the
 * same readers' latency with nothing else running (the reliability issue's
 * "4 processes searching continuously while a fifth loads a corpus").
 *
 * After the normal benchmark, in a new database WORK/kvfts (the
 * benchmark's is done with):
 *
 *   prepare  `kvfts init` with a cache of --readers-cache MB (default 512),
 *            the corpus loaded as by the benchmark (--mem), then loaded
 *            again under the keys "reload1::<key>", committing every
 *            --readers-batch documents (default 1,000), with no reader:
 *            the load's time alone.
 *   idle     N reader processes (forked from this one, each with its own
 *            read-only handle) run the query set's top-10 searches in turn,
 *            each starting at a different query, for as long as the first
 *            load took (at least 5 s, at most 30 s).
 *   load     N fresh readers do the same while the corpus is loaded a third
 *            time, under "reload2::<key>", in the same batches: a real
 *            load, every document, posting and length new, so the writer
 *            holds a batch's write locks and dirties the shared cache the
 *            readers read through.  The readers search a database that
 *            holds the corpus twice (then, batch by batch, three times), so
 *            their work per search stays close to idle's.  Rebuilding into
 *            an empty database instead would have them search an empty
 *            one until the first commit.
 *
 * Why its own cache: the database is opened DB_MULTIVERSION, so a batch
 * keeps the old version of every page it changes until it commits.  A
 * batch of 1,000 catalog documents touches most of postings.db; with the
 * benchmark's 64 MB cache the versions do not fit, Berkeley DB freezes
 * buffers into __db.freezer.* files by the thousand, the load runs at 39
 * docs/s instead of 2,800, and the mutex region, sized when the
 * environment was created, runs out: after 22,000 documents the load's
 * commit fails, and so does every reader's txn_begin ("unable to allocate
 * memory for mutex; resize mutex region"), and a new process cannot open
 * the database.  Readers or not.  --readers-cache 64 shows it.
 *
 * Each reader first runs every query once untimed (its handle's caches,
 * the field-length columns), then, while the parent says so, records the
 * wall time of each kvfts_search() (limit 10, every hit's document read)
 * and its result.  An error is counted and its first message kept, and
 * the reader goes on after a millisecond, so the table shows how many
 * searches failed, never a silently shorter run.  Samples go straight
 * into memory shared with the parent (mmap MAP_SHARED|MAP_ANONYMOUS,
 * created before the fork), so nothing is serialised afterwards.
 *
 * The figures: per phase the searches done, searches per second (all
 * readers), median, p99 (nearest rank) and maximum latency, errors; the
 * ratios load / idle; and the reload's wall time beside the benchmark's
 * load alone.
 *
 * --incremental (issue 14's "incremental" figure) runs on the benchmark's
 * own database, as the first load left it, with the cache it was made
 * with (the default): --incr-readers readers (default 4) search as above
 * while `kvfts load --batch N` (default 1,000) loads the corpus again with
 * the spec's own key template, so every document is replaced.  Its docs/s
 * is compared with the first load's.  Those documents are the ones stored,
 * which kvfts stores again without analyzing them; so the same load runs
 * once more, readers searching, with every document changed (a first
 * member "_rev":1: both versions of each analyzed, a posting added).  Then
 * single-document writes, each
 * timed: --latency-docs N documents (the corpus's first N lines) put under
 * new keys "lat::p::I", replaced by the next N lines, deleted; once as
 * `kvfts -d DIR put|replace|del` processes (what a shell script pays: exec,
 * open, write, close), once as kvfts_put / kvfts_replace / kvfts_del calls
 * on one open handle (keys "lat::a::I").  Median and p99 of each.
 */
#define _DEFAULT_SOURCE

#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvfts.h"

#define SAMPLES_MAX (1u << 21)   /* per reader and phase: 16 MB, touched
                                    only as used */
#define READY_TIMEOUT_S 300.0    /* for the warm-up pass of every reader */
#define STOP_TIMEOUT_S 60.0      /* for every reader to stop */

/* What one reader shares with the parent. */
typedef struct reader_shm {
    atomic_int ready;            /* warm-up done, handle open */
    atomic_uint_fast64_t n;      /* samples recorded */
    atomic_uint_fast64_t errors; /* failed searches (after the warm-up) */
    atomic_uint_fast64_t dropped;/* samples beyond SAMPLES_MAX */
    char first_error[256];       /* written once, before errors becomes 1 */
} reader_shm;

typedef struct shm {
    atomic_int record;           /* the parent's "time searches now" */
    atomic_int stop;             /* the parent's "exit now" */
    reader_shm r[BENCH_MAX_READERS];
} shm;

typedef struct phase_ctx {
    shm *sh;
    double *samples;             /* [reader][SAMPLES_MAX], milliseconds */
    pid_t pid[BENCH_MAX_READERS];
    int n;
    const char *dir;
    const bench_queries *qs;
    size_t cache_bytes;          /* for the readers' kvfts_open */
} phase_ctx;

/* ---- a reader (a forked child) ------------------------------------------ */

/* Bytes read from results, so that reading them is not optimized away. */
static volatile size_t sink;

static int reader_open(kvfts_db **db, const phase_ctx *p, reader_shm *me)
{
    const char *dir = p->dir;
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.read_only = true;
    o.cache_bytes = p->cache_bytes;
    int rc = kvfts_open(db, dir, &o);
    if (rc != KVFTS_OK && atomic_load(&me->errors) == 0)
        snprintf(me->first_error, sizeof me->first_error, "open %s: %s", dir,
                 kvfts_errmsg(*db));
    if (rc != KVFTS_OK) {
        kvfts_close(*db);
        *db = NULL;
    }
    return rc;
}

/* One top-10 search, every hit's document read; 0 or the status. */
static int reader_search(kvfts_db *db, const bench_query *q, size_t *bytes)
{
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    o.limit = 10;
    kvfts_results *r;
    int rc = kvfts_search(&r, db, q->kv, strlen(q->kv), &o);
    if (rc)
        return rc;
    const char *key, *doc;
    size_t len;
    while (kvfts_results_next(r, &key, &doc, &len, NULL) == KVFTS_OK)
        *bytes += len + (unsigned char)key[0] + (unsigned char)doc[0];
    kvfts_results_free(r);
    return 0;
}

static void reader_error(reader_shm *me, kvfts_db *db, const bench_query *q,
                         int rc)
{
    if (atomic_load(&me->errors) == 0)
        snprintf(me->first_error, sizeof me->first_error,
                 "query '%s': %s (%s)", q->kv,
                 db ? kvfts_errmsg(db) : "no handle", kvfts_strerror(rc));
    atomic_fetch_add(&me->errors, 1);
}

static void reader_main(phase_ctx *p, int i)
{
    reader_shm *me = &p->sh->r[i];
    double *out = p->samples + (size_t)i * SAMPLES_MAX;
    const bench_queries *qs = p->qs;
    kvfts_db *db = NULL;
    size_t bytes = 0;
    if (reader_open(&db, p, me) != KVFTS_OK) {
        atomic_fetch_add(&me->errors, 1);
        _exit(BENCH_ERR);
    }
    for (size_t k = 0; k < qs->n; k++) {        /* warm, untimed */
        int rc = reader_search(db, &qs->q[k], &bytes);
        if (rc) {
            reader_error(me, db, &qs->q[k], rc);
            _exit(BENCH_ERR);
        }
    }
    atomic_store(&me->ready, 1);
    size_t k = (size_t)i * qs->n / (size_t)p->n;
    while (!atomic_load(&p->sh->stop)) {
        const bench_query *q = &qs->q[k++ % qs->n];
        bool rec = atomic_load(&p->sh->record);
        double t0 = bench_now();
        int rc = reader_search(db, q, &bytes);
        double ms = (bench_now() - t0) * 1e3;
        rec = rec && atomic_load(&p->sh->record);
        if (rc) {
            /* Counted, and the same handle goes on after a pause: a new
             * one would not help (the failures seen were the environment
             * running out of room), and opening one in a loop hammers
             * the environment's registry. */
            reader_error(me, db, q, rc);
            struct timespec ts = { 0, 1000 * 1000 };
            nanosleep(&ts, NULL);
            continue;
        }
        if (!rec)
            continue;
        uint_fast64_t n = atomic_load(&me->n);
        if (n < SAMPLES_MAX) {
            out[n] = ms;
            atomic_store(&me->n, n + 1);
        } else {
            atomic_fetch_add(&me->dropped, 1);
        }
    }
    kvfts_close(db);
    sink += bytes;
    _exit(BENCH_OK);
}

/* ---- the parent's side ------------------------------------------------- */

/* Reap reader @p i (its status in *st) if it has exited, waiting up to
 * @p until; false if it is still running then. */
static bool reap(phase_ctx *p, int i, int *st, double until)
{
    for (;;) {
        pid_t r = waitpid(p->pid[i], st, WNOHANG);
        if (r == p->pid[i] || (r < 0 && errno != EINTR))
            return true;
        if (bench_now() > until)
            return false;
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

/* Stop the readers and reap them; BENCH_ERR if one did not exit 0.  A
 * reader that does not stop within STOP_TIMEOUT_S (stuck in a Berkeley DB
 * lock or mutex) is killed and reported. */
static int phase_stop(phase_ctx *p)
{
    atomic_store(&p->sh->stop, 1);
    double until = bench_now() + STOP_TIMEOUT_S;
    int code = 0;
    for (int i = 0; i < p->n; i++) {
        if (p->pid[i] <= 0)
            continue;
        int st = 0;
        const char *e = p->sh->r[i].first_error;
        if (!reap(p, i, &st, until)) {
            kill(p->pid[i], SIGKILL);
            while (waitpid(p->pid[i], &st, 0) < 0 && errno == EINTR)
                ;
            code = bench_fail(BENCH_ERR, "reader %d did not stop within %.0f "
                              "s (stuck in the database?); killed%s%s", i + 1,
                              STOP_TIMEOUT_S, e[0] ? "; its first error: " :
                              "", e);
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            code = bench_fail(BENCH_ERR, "reader %d %s %d%s%s", i + 1,
                              WIFEXITED(st) ? "exited" : "killed by signal",
                              WIFEXITED(st) ? WEXITSTATUS(st)
                                            : WTERMSIG(st),
                              e[0] ? ": " : "", e);
        }
        p->pid[i] = 0;
    }
    return code;
}

/* Fork the readers and wait until each has warmed up. */
static int phase_start(phase_ctx *p)
{
    memset(p->sh, 0, sizeof *p->sh);
    fflush(NULL);
    for (int i = 0; i < p->n; i++) {
        p->pid[i] = fork();
        if (p->pid[i] == 0)
            reader_main(p, i);
        if (p->pid[i] < 0) {
            int e = errno;
            phase_stop(p);
            return bench_fail(BENCH_ERR, "readers: fork: %s", strerror(e));
        }
    }
    double until = bench_now() + READY_TIMEOUT_S;
    for (int i = 0; i < p->n; i++) {
        while (!atomic_load(&p->sh->r[i].ready)) {
            int st;
            if (waitpid(p->pid[i], &st, WNOHANG) == p->pid[i]) {
                p->pid[i] = 0;
                const char *e = p->sh->r[i].first_error;
                phase_stop(p);
                return bench_fail(BENCH_ERR, "reader %d: %s", i + 1,
                                  e[0] ? e : "exited before its first "
                                  "searches");
            }
            if (bench_now() > until) {
                phase_stop(p);
                return bench_fail(BENCH_ERR, "readers: not ready after %.0f "
                                  "s", READY_TIMEOUT_S);
            }
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    return 0;
}

static uint64_t phase_count(const phase_ctx *p)
{
    uint64_t n = 0;
    for (int i = 0; i < p->n; i++)
        n += atomic_load(&p->sh->r[i].n);
    return n;
}

/* The phase's figures from the shared samples. */
static void phase_stats(bench_reader_phase *f, const phase_ctx *p,
                        double secs)
{
    memset(f, 0, sizeof *f);
    f->secs = secs;
    uint64_t n = phase_count(p);
    double *v = bench_xmalloc((size_t)n * sizeof *v);
    size_t k = 0;
    for (int i = 0; i < p->n; i++) {
        const reader_shm *r = &p->sh->r[i];
        uint64_t ri = atomic_load(&r->n);
        memcpy(v + k, p->samples + (size_t)i * SAMPLES_MAX,
               (size_t)ri * sizeof *v);
        k += (size_t)ri;
        f->errors += atomic_load(&r->errors);
        f->dropped += atomic_load(&r->dropped);
        if (r->first_error[0] && !f->first_error[0])
            snprintf(f->first_error, sizeof f->first_error, "%s",
                     r->first_error);
    }
    bench_sort(v, k);
    f->queries = k;
    f->qps = bench_per((double)(k + f->dropped), secs);
    f->med = bench_median_sorted(v, k);
    f->p99 = bench_p99_sorted(v, k);
    f->max = k ? v[k - 1] : NAN;
    free(v);
}

/* The idle phase: record for @p secs, with a progress line on a tty. */
static int run_idle(phase_ctx *p, bench_reader_phase *f, double secs)
{
    int code = phase_start(p);
    if (code)
        return code;
    double t0 = bench_now(), t;
    atomic_store(&p->sh->record, 1);
    while ((t = bench_now() - t0) < secs) {
        if (bench_tty()) {
            fprintf(stderr, "\rreaders idle: %d readers, %" PRIu64 " searches"
                    ", %.1f/%.1f s   ", p->n, phase_count(p), t, secs);
            fflush(stderr);
        }
        struct timespec ts = { 0, 250 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    atomic_store(&p->sh->record, 0);
    t = bench_now() - t0;
    if (bench_tty())
        fprintf(stderr, "\rreaders idle: %d readers, %" PRIu64 " searches, "
                "%.1f s   \n", p->n, phase_count(p), t);
    code = phase_stop(p);
    phase_stats(f, p, t);
    return code;
}

/* The load phase: record while the corpus is loaded once more. */
static int run_load(phase_ctx *p, bench_readers *rd, const bench_env *e,
                    const bench_corpus *c)
{
    int code = phase_start(p);
    if (code)
        return code;
    double t0 = bench_now();
    atomic_store(&p->sh->record, 1);
    code = bench_reload_kvfts(&rd->reload, e, rd->key_reload, rd->batch, c);
    atomic_store(&p->sh->record, 0);
    double t = bench_now() - t0;
    int stop = phase_stop(p);
    phase_stats(&rd->load, p, t);
    if (bench_tty())
        fprintf(stderr, "readers during the load: %d readers, %" PRIu64
                " searches, %" PRIu64 " errors, %.1f s\n", p->n,
                rd->load.queries, rd->load.errors, t);
    return code ? code : stop;
}

/* A new WORK/kvfts with a cache of rd->cache_mb (KVFTS_CACHE_MB reaches
 * every kvfts command the phase runs; the first opener sizes the cache),
 * the corpus loaded into it as by the benchmark, then loaded again alone. */
static int prepare(bench_readers *rd, const bench_env *e, const bench_spec *s,
                   const bench_corpus *c)
{
    char mb[32];
    snprintf(mb, sizeof mb, "%u", rd->cache_mb);
    setenv("KVFTS_CACHE_MB", mb, 1);
    bench_kvfts_clean(e->work);
    bench_note("%s: readers: a new database with a %u MB cache", s->name,
               rd->cache_mb);
    int code = bench_load_kvfts(&rd->first, e, s, c);
    snprintf(rd->key_alone, sizeof rd->key_alone, "reload1::%s", s->key.text);
    snprintf(rd->key_reload, sizeof rd->key_reload, "reload2::%s",
             s->key.text);
    if (!code) {
        bench_note("%s: readers: loading the corpus again, no readers",
                   s->name);
        code = bench_reload_kvfts(&rd->alone, e, rd->key_alone, rd->batch, c);
    }
    return code;
}

int bench_readers_run(bench_readers *rd, const bench_env *e,
                      const bench_spec *s, const bench_corpus *c,
                      const bench_queries *qs)
{
    int n = rd->n;
    if (qs->n == 0)
        return bench_fail(BENCH_ERR, "readers: the query set is empty");
    const char *old = getenv("KVFTS_CACHE_MB");
    char *saved = old ? bench_strdup(old) : NULL;
    int code = prepare(rd, e, s, c);
    size_t bytes = sizeof(shm) + (size_t)n * SAMPLES_MAX * sizeof(double);
    void *mem = code ? MAP_FAILED : mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (!code && mem == MAP_FAILED)
        code = bench_fail(BENCH_ERR, "readers: mmap %zu bytes: %s", bytes,
                          strerror(errno));
    char *dir = bench_path(e->work, "kvfts");
    phase_ctx p = { mem, (double *)((char *)mem + sizeof(shm)), { 0 }, n,
                    dir, qs, (size_t)rd->cache_mb * 1024 * 1024 };
    double secs = rd->first.secs;
    rd->idle_target = secs < 5 ? 5 : secs > 30 ? 30 : secs;
    if (!code) {
        bench_note("%s: %d readers, idle (%.1f s)", s->name, n,
                   rd->idle_target);
        code = run_idle(&p, &rd->idle, rd->idle_target);
    }
    if (!code) {
        bench_note("%s: %d readers while loading the corpus a third time",
                   s->name, n);
        code = run_load(&p, rd, e, c);
    }
    rd->done = code == 0;
    if (mem != MAP_FAILED)
        munmap(mem, bytes);
    free(dir);
    if (saved)
        setenv("KVFTS_CACHE_MB", saved, 1);
    else
        unsetenv("KVFTS_CACHE_MB");
    free(saved);
    if (!code && (rd->idle.errors || rd->load.errors))
        bench_warn("readers: %" PRIu64 " searches failed idle, %" PRIu64
                   " during the load; the first: %s", rd->idle.errors,
                   rd->load.errors, rd->idle.first_error[0]
                   ? rd->idle.first_error : rd->load.first_error);
    return code;
}

/* ---- --incremental ------------------------------------------------------ */

/* The first 2 * n non-blank lines of the corpus (fewer if it is short). */
static size_t read_lines(char ***out, const char *path, size_t n)
{
    FILE *f = fopen(path, "r");
    char *buf = NULL, **v = bench_xmalloc((2 * n + 1) * sizeof *v);
    size_t cap = 0, k = 0;
    ssize_t len;
    while (f && k < 2 * n && (len = getline(&buf, &cap, f)) != -1) {
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = '\0';
        if (buf[strspn(buf, " \t")])
            v[k++] = bench_strdup(buf);
    }
    if (f)
        fclose(f);
    free(buf);
    *out = v;
    return k;
}

static void lat_stats(bench_latency *l, double *v, size_t n)
{
    bench_sort(v, n);
    l->n = n;
    l->med = bench_median_sorted(v, n);
    l->p99 = bench_p99_sorted(v, n);
}

/* Single writes as `kvfts` processes. */
static void lat_process(bench_incr *in, const bench_env *e, const char *dir,
                        char **lines, size_t n)
{
    static const char *const cmds[NLAT] = { "put", "replace", "del" };
    double *v = bench_xmalloc((n + 1) * sizeof *v);
    for (int op = 0; op < NLAT; op++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            char key[64];
            snprintf(key, sizeof key, "lat::p::%zu", i);
            char *json = op == LAT_PUT ? lines[i] : lines[n + i];
            char *argv[] = { (char *)e->kvfts, "-d", (char *)dir,
                             (char *)cmds[op], key,
                             op == LAT_DELETE ? NULL : json, NULL };
            double secs;
            int st = bench_run_timed(argv, &secs);
            if (st != 0)
                in->lat[LAT_PROCESS][op].errors++;
            else
                v[k++] = secs * 1e3;
        }
        lat_stats(&in->lat[LAT_PROCESS][op], v, k);
    }
    free(v);
}

/* Single writes as library calls on one handle. */
static int lat_api(bench_incr *in, const char *dir, char **lines, size_t n)
{
    kvfts_db *db = NULL;
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    int rc = kvfts_open(&db, dir, &o);
    if (rc != KVFTS_OK) {
        int code = bench_fail(BENCH_ERR, "incremental: open %s: %s", dir,
                              kvfts_errmsg(db));
        kvfts_close(db);
        return code;
    }
    double *v = bench_xmalloc((n + 1) * sizeof *v);
    for (int op = 0; op < NLAT; op++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            char key[64];
            int kl = snprintf(key, sizeof key, "lat::a::%zu", i);
            const char *json = op == LAT_PUT ? lines[i] : lines[n + i];
            double t0 = bench_now();
            if (op == LAT_PUT)
                rc = kvfts_put(NULL, db, key, (size_t)kl, json, strlen(json),
                               0);
            else if (op == LAT_REPLACE)
                rc = kvfts_replace(NULL, db, key, (size_t)kl, json,
                                   strlen(json), 0);
            else
                rc = kvfts_del(db, key, (size_t)kl, 0);
            double ms = (bench_now() - t0) * 1e3;
            if (rc != KVFTS_OK)
                in->lat[LAT_API][op].errors++;
            else
                v[k++] = ms;
        }
        lat_stats(&in->lat[LAT_API][op], v, k);
    }
    free(v);
    kvfts_close(db);
    return 0;
}

/* The corpus with every document changed: a first member "_rev":1 added
 * (written to @p path; the lines that are not an object are copied). */
static int write_changed(const char *from, const char *path)
{
    FILE *in = fopen(from, "r"), *out = in ? fopen(path, "w") : NULL;
    if (!in || !out) {
        int code = bench_fail(BENCH_ERR, "incremental: %s: %s",
                              in ? path : from, strerror(errno));
        if (in)
            fclose(in);
        return code;
    }
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    int ok = 1;
    while (ok && (len = getline(&buf, &cap, in)) != -1) {
        size_t lead = strspn(buf, " \t");
        if (buf[lead] != '{') {
            ok = fputs(buf, out) >= 0;
            continue;
        }
        size_t next = lead + 1 + strspn(buf + lead + 1, " \t");
        ok = fprintf(out, "{\"_rev\":1%s%s", buf[next] == '}' ? "" : ",",
                     buf + lead + 1) >= 0;
    }
    free(buf);
    fclose(in);
    if (fclose(out) != 0 || !ok)
        return bench_fail(BENCH_ERR, "incremental: writing %s failed", path);
    return 0;
}

/* One reload of @p c over WORK/kvfts with the readers of @p p searching. */
static int reload_phase(phase_ctx *p, const bench_env *e, const bench_spec *s,
                        const bench_corpus *c, uint64_t batch,
                        bench_load *load, bench_reader_phase *readers)
{
    int code = p->n ? phase_start(p) : 0;
    double t0 = bench_now();
    if (!code) {
        atomic_store(&p->sh->record, 1);
        code = bench_reload_kvfts(load, e, s->key.text, batch, c);
        atomic_store(&p->sh->record, 0);
        double t = bench_now() - t0;
        int stop = p->n ? phase_stop(p) : 0;
        if (p->n)
            phase_stats(readers, p, t);
        code = code ? code : stop;
    }
    return code;
}

int bench_incr_run(bench_incr *in, const bench_env *e, const bench_spec *s,
                   const bench_corpus *c, const bench_queries *qs)
{
    if (qs->n == 0 && in->n > 0)
        return bench_fail(BENCH_ERR, "incremental: the query set is empty");
    int n = in->n;
    size_t bytes = sizeof(shm) + (size_t)n * SAMPLES_MAX * sizeof(double);
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return bench_fail(BENCH_ERR, "incremental: mmap %zu bytes: %s", bytes,
                          strerror(errno));
    char *dir = bench_path(e->work, "kvfts");
    phase_ctx p = { mem, (double *)((char *)mem + sizeof(shm)), { 0 }, n,
                    dir, qs, 0 };
    bench_note("%s: incremental: %d readers while the corpus is loaded over "
               "itself (--batch %" PRIu64 ")", s->name, n, in->batch);
    int code = reload_phase(&p, e, s, c, in->batch, &in->load, &in->readers);
    bench_corpus changed = *c;
    changed.path = bench_path(e->work, "changed.jsonl");
    if (!code)
        code = write_changed(c->path, changed.path);
    if (!code) {
        bench_note("%s: incremental: again, every document changed (\"_rev\" "
                   "added)", s->name);
        code = reload_phase(&p, e, s, &changed, in->batch, &in->changed,
                            &in->changed_readers);
    }
    unlink(changed.path);
    free(changed.path);
    munmap(mem, bytes);
    char **lines = NULL;
    size_t nl = in->ndocs ? read_lines(&lines, c->path, in->ndocs) : 0;
    size_t ln = nl / 2;
    if (!code && ln) {
        bench_note("%s: single writes: %zu puts, replaces, deletes as "
                   "processes, then as calls", s->name, ln);
        lat_process(in, e, dir, lines, ln);
        code = lat_api(in, dir, lines, ln);
    }
    for (size_t i = 0; i < nl; i++)
        free(lines[i]);
    free(lines);
    free(dir);
    in->done = code == 0;
    if (!code && in->readers.errors)
        bench_warn("incremental: %" PRIu64 " searches failed during the "
                   "load; the first: %s", in->readers.errors,
                   in->readers.first_error);
    return code;
}
