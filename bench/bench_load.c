/*
 * bench_load.c -- loading a corpus into each engine, measured, and what
 * the loads leave on disk.
 *
 * kvfts is loaded by the real command, `kvfts -d WORK/kvfts load CORPUS
 * --key TEMPLATE --mem MB` after `kvfts init WORK/kvfts [--config]`: what a
 * user runs, batches, checkpoint on close and all.  FTS5 is loaded by this
 * binary (`kvfts-bench --internal-fts5 ...`) into the file WORK/fts5.db
 * with SQLite's default pragmas (rollback journal, synchronous=FULL: as
 * durable as kvfts, which syncs each commit), all rows in ONE transaction,
 * documents read with the streaming reader of bench_jsonl.c.  Xapian is
 * loaded the same way (`kvfts-bench --internal-xapian ...`) into the
 * directory WORK/xapian, as peer_xapian.h describes: Xapian's own
 * automatic flushes, one commit at the end.
 *
 * Measuring.  Each load runs as the child of a small "measurer", this
 * binary freshly exec'd as `kvfts-bench --internal-measure OUT CMD...`: it
 * forks, execs CMD, takes the wall clock around it and the child's
 * rusage from wait4() (ru_maxrss: peak RSS), and prints them as one line.
 * Why not fork the load from the harness directly: a forked child starts
 * with the parent's resident pages counted in its RSS, and the harness
 * grows (query caches, match sets) between the loads of a growth run.  The
 * measurer is a fresh, few-megabyte process, so the peak it reports is the
 * load's own.  sync() before each load keeps earlier dirty pages out of it.
 *
 * Sizes.  kvfts's directory holds data files (*.db), Berkeley DB's
 * transaction logs (log.*), DB_CONFIG, the process registry kvfts.lock and,
 * only if /dev/shm has no room, the shared-memory region files (__db.*).
 * Two figures compare with FTS5's fts5.db after its commit: the data files
 * alone, and the whole directory as a user sees it with `du -sb` (every
 * file and directory, apparent sizes), after the checkpoint `kvfts load`
 * does when it closes.  Xapian's figure is that of every file of
 * WORK/xapian after its commit (data and directory alike).
 *
 * The regions while a load runs.  By default the library keeps them (and
 * the "freezer" files Berkeley DB writes old page versions to when its
 * cache is full) in /dev/shm/kvfts-ID, named in the registry's header
 * ("kvfts-registry 1 home S ID ..." at byte 1 of DIR/kvfts.lock), and
 * removes them when the last process closes; so the directory after a
 * load never shows them.  The harness therefore samples that home every
 * 100 ms while the load runs: the peak bytes there (memory, counted apart
 * from the directory) and the most __db.freezer.* files seen at once.
 * Reading the header is the one place the harness looks at a file of the
 * library's own; a run whose header cannot be read reports 0.
 */
/* wait4(), sync() and nftw() are BSD / XSI, beyond _POSIX_C_SOURCE. */
#define _DEFAULT_SOURCE
#define _XOPEN_SOURCE 700

#include "bench.h"
#include "peer_xapian.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <poll.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the corpus --------------------------------------------------------- */

typedef struct scan_state {
    const bench_spec *spec;
    bench_corpus *c;
    char *key;
    size_t keycap;
} scan_state;

static int key_missing(const bench_spec *s, const char *corpus, uint64_t doc,
                       size_t path)
{
    return bench_fail(BENCH_ERR, "corpus %s: document %" PRIu64 ": no value "
                      "at '%s' for the key template '%s'", corpus, doc,
                      s->key.paths[path], s->key.text);
}

static int scan_doc(void *payload, const char *const *vals, const size_t *lens,
                    uint64_t bytes)
{
    scan_state *st = payload;
    const bench_spec *s = st->spec;
    (void)bytes;
    st->c->docs++;
    for (size_t i = 0; i < s->nfields; i++)
        if (vals[i])
            st->c->text_bytes += lens[i];
    size_t missing;
    if (bench_tmpl_render(&st->key, &st->keycap, &s->key, vals + s->nfields,
                          lens + s->nfields, &missing) < 0)
        return key_missing(s, st->c->path, st->c->docs, missing);
    return 0;
}

int bench_corpus_scan(bench_corpus *c, const bench_spec *s)
{
    struct stat sb;
    if (stat(c->path, &sb) != 0)
        return bench_fail(BENCH_ERR, "corpus %s: %s", c->path,
                          strerror(errno));
    c->bytes = (uint64_t)sb.st_size;
    c->docs = c->text_bytes = 0;
    scan_state st = { s, c, NULL, 0 };
    char err[256];
    int rc = jl_scan(c->path, (const char *const *)s->fields, s->nfields,
                     (const char *const *)s->key.paths, s->key.npaths,
                     scan_doc, &st, err, sizeof err);
    free(st.key);
    if (rc < 0)
        return bench_fail(BENCH_ERR, "corpus %s: %s", c->path, err);
    if (rc == 0 && c->docs == 0)
        return bench_fail(BENCH_ERR, "corpus %s: no documents", c->path);
    return rc;
}

/* ---- running and measuring --------------------------------------------- */

/* Run argv (absolute path in argv[0]) with stdout to @p out ("-": ours),
 * wait; returns its exit status, 128 + signal, or -1 if it did not run. */
static int run_child(char *const *argv, const char *out, struct rusage *ru)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (strcmp(out, "-") != 0) {
            int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
                _exit(127);
            close(fd);
        }
        execv(argv[0], argv);
        fprintf(stderr, "kvfts-bench: %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    struct rusage dummy;
    while (wait4(pid, &status, 0, ru ? ru : &dummy) < 0)
        if (errno != EINTR)
            return -1;
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

/* --internal-measure OUT CMD ARGS...: run CMD, print
 * "WALL_S MAXRSS_KB USER_S SYS_S STATUS". */
static int internal_measure(int argc, char **argv)
{
    if (argc < 4)
        return BENCH_USAGE;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    double t0 = bench_now();
    int st = run_child(argv + 3, argv[2], &ru);
    double secs = bench_now() - t0;
    printf("%.6f %ld %.6f %.6f %d\n", secs, ru.ru_maxrss,
           (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6,
           st);
    return st < 0 ? BENCH_ERR : BENCH_OK;
}

/* ---- the regions while a load runs ------------------------------------- */

/* The regions' home of the kvfts database @p dir, from its registry's
 * header: true and the path in @p out when they live outside @p dir. */
static bool regions_home(const char *dir, char *out, size_t cap)
{
    char *reg = bench_path(dir, "kvfts.lock");
    int fd = open(reg, O_RDONLY | O_CLOEXEC);
    free(reg);
    if (fd < 0)
        return false;
    char b[256];
    ssize_t n = pread(fd, b, sizeof b - 1, 1);
    close(fd);
    if (n <= 0)
        return false;
    b[n] = '\0';
    char kind, id[40];
    if (sscanf(b, "kvfts-registry 1 home %c %39s", &kind, id) != 2 ||
        kind != 'S')
        return false;
    snprintf(out, cap, "/dev/shm/kvfts-%s", id);
    return true;
}

/* Freezer files in @p dir and the bytes of all its files. */
static void scan_home(const char *dir, uint64_t *freezers, uint64_t *bytes)
{
    *freezers = *bytes = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "__db.freezer.", 13) == 0)
            (*freezers)++;
        struct stat sb;
        if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(sb.st_mode))
            *bytes += (uint64_t)sb.st_size;
    }
    if (d)
        closedir(d);
}

/* One sample of a kvfts database's regions while its load runs. */
static void sample_regions(bench_load *l, const char *dir)
{
    char home[300];
    uint64_t fr, bytes;
    if (regions_home(dir, home, sizeof home)) {
        /* The registry may still name a home the load's last close has
         * just removed: only a home seen with files counts. */
        scan_home(home, &fr, &bytes);
        if (bytes > 0)
            l->regions_outside = true;
        if (bytes > l->outside_peak)
            l->outside_peak = bytes;
        if (fr > l->freezer_peak)
            l->freezer_peak = fr;
    }
    scan_home(dir, &fr, &bytes);
    if (fr > l->freezer_peak)
        l->freezer_peak = fr;
}

/* Run argv under the measurer; fills l's times and peak RSS and, when
 * @p watch is a kvfts database, samples its regions meanwhile.  Returns
 * the command's exit status, or -1 (message printed) if it could not run. */
static int run_measured(bench_load *l, const bench_env *e, char **argv,
                        size_t argc, const char *out, const char *what,
                        const char *watch)
{
    char **mv = bench_xmalloc((argc + 4) * sizeof *mv);
    mv[0] = (char *)e->self;
    mv[1] = "--internal-measure";
    mv[2] = (char *)out;
    memcpy(mv + 3, argv, argc * sizeof *argv);
    mv[argc + 3] = NULL;
    int fds[2];
    if (pipe(fds) != 0) {
        free(mv);
        return bench_fail(-1, "%s: pipe: %s", what, strerror(errno));
    }
    fflush(NULL);
    sync();
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        if (dup2(fds[1], STDOUT_FILENO) < 0)
            _exit(127);
        execv(mv[0], mv);
        _exit(127);
    }
    close(fds[1]);
    free(mv);
    char line[256];
    size_t n = 0;
    while (pid > 0 && n + 1 < sizeof line) {
        struct pollfd pf = { fds[0], POLLIN, 0 };
        int pr = poll(&pf, 1, 100);
        if (pr == 0 || (pr < 0 && errno == EINTR)) {
            if (watch)
                sample_regions(l, watch);
            continue;
        }
        ssize_t r = read(fds[0], line + n, sizeof line - 1 - n);
        if (r > 0)
            n += (size_t)r;
        else if (r == 0 || errno != EINTR)
            break;
    }
    line[n] = '\0';
    close(fds[0]);
    int status;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    long rss = 0;
    int st = -1;
    if (pid < 0 || sscanf(line, "%lf %ld %lf %lf %d", &l->secs, &rss,
                          &l->user_s, &l->sys_s, &st) != 5 || st < 0)
        return bench_fail(-1, "%s: could not run %s", what, argv[0]);
    l->maxrss_kb = (uint64_t)rss;
    return st;
}

int bench_run_timed(char *const *argv, double *secs)
{
    double t0 = bench_now();
    int st = run_child(argv, "/dev/null", NULL);
    *secs = bench_now() - t0;
    return st;
}

/* ---- sizes -------------------------------------------------------------- */

static bench_load *walk_load;    /* nftw() passes no payload */

static int walk_file(const char *path, const struct stat *sb, int type,
                     struct FTW *ftw)
{
    uint64_t n = (uint64_t)sb->st_size;
    walk_load->dir_bytes += n;        /* du -sb: directories count too */
    if (type != FTW_F)
        return 0;
    const char *name = path + ftw->base;
    if (strncmp(name, "log.", 4) == 0)
        walk_load->log_bytes += n;
    else if (strncmp(name, "__db.", 5) == 0)
        walk_load->region_bytes += n;
    else if (strcmp(name, "kvfts.lock") != 0 && strcmp(name, "DB_CONFIG"))
        walk_load->data_bytes += n;
    walk_load->freezer_after += strncmp(name, "__db.freezer.", 13) == 0;
    return 0;
}

static int dir_sizes(bench_load *l, const char *dir)
{
    l->data_bytes = l->log_bytes = l->region_bytes = l->dir_bytes = 0;
    l->freezer_after = 0;
    walk_load = l;
    int rc = nftw(dir, walk_file, 16, FTW_PHYS);
    walk_load = NULL;
    if (rc != 0)
        return bench_fail(BENCH_ERR, "%s: %s", dir, strerror(errno));
    return 0;
}

int bench_kvfts_sizes(bench_load *l, const bench_env *e)
{
    char *dir = bench_path(e->work, "kvfts");
    int code = dir_sizes(l, dir);
    free(dir);
    return code;
}

/* ---- kvfts -------------------------------------------------------------- */

static int kvfts_init(const bench_env *e, const bench_spec *s,
                      const char *dir)
{
    char *cfg = NULL, *out = bench_path(e->work, "kvfts-init.out");
    char *argv[] = { (char *)e->kvfts, "init", (char *)dir, "--config", NULL,
                     NULL };
    int code = 0;
    if (s->config) {
        cfg = bench_path(e->work, "config.json");
        FILE *f = fopen(cfg, "w");
        if (!f || fputs(s->config, f) < 0 || fclose(f) != 0)
            code = bench_fail(BENCH_ERR, "%s: %s", cfg, strerror(errno));
        argv[4] = cfg;
    } else {
        argv[3] = NULL;
    }
    int st = code ? 0 : run_child(argv, out, NULL);
    if (!code && st != 0)
        code = bench_fail(BENCH_ERR, "kvfts init %s: %s", dir,
                          st < 0 ? strerror(errno) : "failed (see above)");
    free(cfg);
    free(out);
    return code;
}

/* "loaded":N from the load's summary line. */
static uint64_t loaded_docs(const char *file)
{
    FILE *f = fopen(file, "r");
    char line[512] = "";
    if (f) {
        if (!fgets(line, sizeof line, f))
            line[0] = '\0';
        fclose(f);
    }
    const char *p = strstr(line, "\"loaded\":");
    return p ? strtoull(p + 9, NULL, 10) : 0;
}

/* kvfts load of the corpus into @p dir with key template @p key, measured
 * (committing every @p batch documents, or by --mem when 0); then what is
 * on disk. */
static int load_measured(bench_load *l, const bench_env *e, const char *dir,
                         const char *key, uint64_t batch,
                         const bench_corpus *c)
{
    char *out = bench_path(e->work, "kvfts-load.json");
    char mem[32], nb[32];
    snprintf(mem, sizeof mem, "%u", e->mem_mb);
    snprintf(nb, sizeof nb, "%" PRIu64, batch);
    char *argv[] = { (char *)e->kvfts, "-d", (char *)dir, "load", c->path,
                     "--key", (char *)key, "--mem", mem, NULL, NULL, NULL,
                     NULL };
    size_t argc = 9;
    if (batch) {
        argv[argc++] = "--batch";
        argv[argc++] = nb;
    }
    /* --quiet off a terminal; on one, the load shows its progress line. */
    if (!bench_tty())
        argv[argc++] = "--quiet";
    argv[argc] = NULL;
    int code = 0;
    int st = run_measured(l, e, argv, argc, out, "kvfts load", dir);
    if (st != 0)
        code = bench_fail(BENCH_ERR, "kvfts load %s: %s", c->path,
                          st < 0 ? "did not run" : "failed (see above)");
    if (!code) {
        l->docs = loaded_docs(out);
        code = dir_sizes(l, dir);
        l->done = code == 0;
    }
    free(out);
    return code;
}

int bench_init_kvfts(const bench_env *e, const bench_spec *s)
{
    char *dir = bench_path(e->work, "kvfts");
    int code = kvfts_init(e, s, dir);
    free(dir);
    return code;
}

int bench_add_kvfts(bench_load *l, const bench_env *e, const char *key,
                    const bench_corpus *c)
{
    return bench_reload_kvfts(l, e, key, 0, c);
}

int bench_load_kvfts(bench_load *l, const bench_env *e, const bench_spec *s,
                     const bench_corpus *c)
{
    memset(l, 0, sizeof *l);
    char *dir = bench_path(e->work, "kvfts");
    int code = kvfts_init(e, s, dir);
    if (!code)
        code = load_measured(l, e, dir, s->key.text, 0, c);
    free(dir);
    return code;
}

int bench_reload_kvfts(bench_load *l, const bench_env *e, const char *key,
                       uint64_t batch, const bench_corpus *c)
{
    memset(l, 0, sizeof *l);
    char *dir = bench_path(e->work, "kvfts");
    int code = load_measured(l, e, dir, key, batch, c);
    free(dir);
    return code;
}

/* ---- FTS5 --------------------------------------------------------------- */

/* FTS5's load of @p c into WORK/fts5.db: a new file, or (@p add) rows
 * added to the one there. */
static int fts5_measured(bench_load *l, const bench_env *e,
                         const bench_spec *s, const char *key,
                         const bench_corpus *c, bool add)
{
    memset(l, 0, sizeof *l);
    char *db = bench_path(e->work, "fts5.db");
    size_t argc = 5 + s->nfields;
    char **argv = bench_xmalloc((argc + 1) * sizeof *argv);
    argv[0] = (char *)e->self;
    argv[1] = add ? "--internal-fts5-add" : "--internal-fts5";
    argv[2] = db;
    argv[3] = c->path;
    argv[4] = (char *)key;
    memcpy(argv + 5, s->fields, s->nfields * sizeof *argv);
    argv[argc] = NULL;
    /* Its stdout is not the measurer's: that carries the measurement. */
    int st = run_measured(l, e, argv, argc, "/dev/null", "fts5 load", NULL);
    free(argv);
    int code = 0;
    struct stat sb;
    if (st != 0)
        code = bench_fail(BENCH_ERR, "fts5 load %s: %s", c->path,
                          st < 0 ? "did not run" : "failed (see above)");
    else if (stat(db, &sb) != 0)
        code = bench_fail(BENCH_ERR, "%s: %s", db, strerror(errno));
    else
        l->data_bytes = l->dir_bytes = (uint64_t)sb.st_size;
    l->done = code == 0;
    free(db);
    return code;
}

int bench_load_fts5(bench_load *l, const bench_env *e, const bench_spec *s,
                    const bench_corpus *c)
{
    return fts5_measured(l, e, s, s->key.text, c, false);
}

int bench_add_fts5(bench_load *l, const bench_env *e, const bench_spec *s,
                   const char *key, const bench_corpus *c)
{
    return fts5_measured(l, e, s, key, c, true);
}

/* What a peer's loader (in the measured child) keeps whatever the peer:
 * the corpus, the key template and its rendering, the progress line. */
typedef struct peer_loader {
    const char *name;      /* "fts5", "xapian": messages and progress */
    const char *corpus;
    bench_tmpl key;
    size_t nfields;
    char *keybuf;
    size_t keycap;
    uint64_t docs;
    double t0, last;
    bool progress;
} peer_loader;

/* Set up P for `--internal-PEER DB CORPUS TEMPLATE FIELD...`. */
static int peer_start(peer_loader *P, const char *name, int argc,
                      char **argv)
{
    memset(P, 0, sizeof *P);
    P->name = name;
    P->corpus = argv[3];
    P->nfields = (size_t)argc - 5;
    P->progress = bench_tty();
    P->t0 = P->last = bench_now();
    char what[32];
    snprintf(what, sizeof what, "%s load", name);
    return bench_tmpl_parse(&P->key, argv[4], what);
}

static void peer_progress(peer_loader *P, uint64_t bytes, bool final)
{
    double now = bench_now();
    if (!P->progress || (!final && now - P->last < 0.25))
        return;
    P->last = now;
    double s = now - P->t0 > 0 ? now - P->t0 : 1e-9;
    fprintf(stderr, "\r%s: %" PRIu64 " docs  %.1f MB  %.0f docs/s   %s",
            P->name, P->docs, (double)bytes / 1e6, (double)P->docs / s,
            final ? "\n" : "");
    fflush(stderr);
}

/* The next document's key into P->keybuf: its length, or a failure. */
static long peer_key(peer_loader *P, const char *const *vals,
                     const size_t *lens)
{
    size_t missing;
    P->docs++;
    long kn = bench_tmpl_render(&P->keybuf, &P->keycap, &P->key,
                                vals + P->nfields, lens + P->nfields,
                                &missing);
    if (kn < 0)
        bench_fail(BENCH_ERR, "%s load: %s: document %" PRIu64 ": no value "
                   "at '%s' for the key", P->name, P->corpus, P->docs,
                   P->key.paths[missing]);
    return kn;
}

/* Scan the corpus into fn, then (after the caller's commit) the final
 * progress line. */
static int peer_scan(peer_loader *P, const char *const *fields,
                     int (*fn)(void *, const char *const *, const size_t *,
                               uint64_t), void *payload)
{
    char err[256];
    int rc = jl_scan(P->corpus, fields, P->nfields,
                     (const char *const *)P->key.paths, P->key.npaths, fn,
                     payload, err, sizeof err);
    if (rc < 0)
        return bench_fail(BENCH_ERR, "%s load: %s: %s", P->name, P->corpus,
                          err);
    return rc > 0 ? rc : 0;
}

static void peer_finish(peer_loader *P, int code)
{
    if (!code) {
        struct stat sb;
        peer_progress(P, stat(P->corpus, &sb) == 0 ? (uint64_t)sb.st_size
                                                    : 0, true);
    }
    bench_tmpl_free(&P->key);
    free(P->keybuf);
}

/* The FTS5 loader, in the measured child. */
typedef struct fts5_loader {
    peer_loader P;
    sqlite3 *db;
    sqlite3_stmt *ins;
} fts5_loader;

static int fts5_doc(void *payload, const char *const *vals,
                    const size_t *lens, uint64_t bytes)
{
    fts5_loader *L = payload;
    const size_t nf = L->P.nfields;
    long kn = peer_key(&L->P, vals, lens);
    if (kn < 0)
        return BENCH_ERR;
    sqlite3_bind_text(L->ins, 1, L->P.keybuf, (int)kn, SQLITE_STATIC);
    for (size_t i = 0; i < nf; i++) {
        if (vals[i])
            sqlite3_bind_text(L->ins, (int)i + 2, vals[i], (int)lens[i],
                              SQLITE_STATIC);
        else
            sqlite3_bind_null(L->ins, (int)i + 2);
    }
    int rc = sqlite3_step(L->ins);
    sqlite3_reset(L->ins);
    if (rc != SQLITE_DONE)
        return bench_fail(BENCH_ERR, "fts5 load: %s: document %" PRIu64
                          ": %s", L->P.corpus, L->P.docs,
                          sqlite3_errmsg(L->db));
    peer_progress(&L->P, bytes, false);
    return 0;
}

/* CREATE VIRTUAL TABLE and INSERT for the fields. */
static void fts5_sql(char **create, char **insert, char *const *fields,
                     size_t nf)
{
    size_t cap = 256;
    for (size_t i = 0; i < nf; i++)
        cap += strlen(fields[i]) + 8;
    *create = bench_xmalloc(cap);
    *insert = bench_xmalloc(cap);
    size_t c = (size_t)snprintf(*create, cap, "CREATE VIRTUAL TABLE IF NOT "
                                "EXISTS f USING fts5(key UNINDEXED");
    size_t n = (size_t)snprintf(*insert, cap, "INSERT INTO f VALUES (?");
    for (size_t i = 0; i < nf; i++) {
        c += (size_t)snprintf(*create + c, cap - c, ", \"%s\"", fields[i]);
        n += (size_t)snprintf(*insert + n, cap - n, ",?");
    }
    snprintf(*create + c, cap - c, ", tokenize = 'unicode61 "
             "remove_diacritics 2')");
    snprintf(*insert + n, cap - n, ")");
}

static int fts5_open(fts5_loader *L, const char *file, char *const *fields)
{
    char *create, *insert;
    fts5_sql(&create, &insert, fields, L->P.nfields);
    int rc = sqlite3_open_v2(file, &L->db, SQLITE_OPEN_READWRITE |
                             SQLITE_OPEN_CREATE, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(L->db, create, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(L->db, "BEGIN", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(L->db, insert, -1, &L->ins, NULL);
    free(create);
    free(insert);
    if (rc != SQLITE_OK)
        return bench_fail(BENCH_ERR, "fts5 load: %s: %s", file,
                          L->db ? sqlite3_errmsg(L->db) : "out of memory");
    return 0;
}

/* --internal-fts5 DB CORPUS TEMPLATE FIELD...: a new DB;
 * --internal-fts5-add ...: the rows added to DB (growth steps). */
static int internal_fts5(int argc, char **argv, bool add)
{
    if (argc < 6)
        return BENCH_USAGE;
    fts5_loader L;
    memset(&L, 0, sizeof L);
    int code = peer_start(&L.P, "fts5", argc, argv);
    char *journal = bench_xmalloc(strlen(argv[2]) + 16);
    sprintf(journal, "%s-journal", argv[2]);
    if (!add) {
        unlink(argv[2]);
        unlink(journal);
    }
    free(journal);
    if (!code)
        code = fts5_open(&L, argv[2], argv + 5);
    if (!code)
        code = peer_scan(&L.P, (const char *const *)(argv + 5), fts5_doc,
                         &L);
    sqlite3_finalize(L.ins);
    if (!code && sqlite3_exec(L.db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        code = bench_fail(BENCH_ERR, "fts5 load: commit: %s",
                          sqlite3_errmsg(L.db));
    if (sqlite3_close(L.db) != SQLITE_OK && !code)
        code = bench_fail(BENCH_ERR, "fts5 load: close: %s",
                          sqlite3_errmsg(L.db));
    peer_finish(&L.P, code);
    return code;
}

/* ---- Xapian ------------------------------------------------------------- */

/* Xapian's load of @p c into WORK/xapian: a new database, or (@p add)
 * documents added to the one there. */
static int xapian_measured(bench_load *l, const bench_env *e,
                           const bench_spec *s, const char *key,
                           const bench_corpus *c, bool add)
{
    memset(l, 0, sizeof *l);
    char *dir = bench_path(e->work, "xapian");
    size_t argc = 5 + s->nfields;
    char **argv = bench_xmalloc((argc + 1) * sizeof *argv);
    argv[0] = (char *)e->self;
    argv[1] = add ? "--internal-xapian-add" : "--internal-xapian";
    argv[2] = dir;
    argv[3] = c->path;
    argv[4] = (char *)key;
    memcpy(argv + 5, s->fields, s->nfields * sizeof *argv);
    argv[argc] = NULL;
    int st = run_measured(l, e, argv, argc, "/dev/null", "xapian load",
                          NULL);
    free(argv);
    int code = 0;
    if (st != 0)
        code = bench_fail(BENCH_ERR, "xapian load %s: %s", c->path,
                          st < 0 ? "did not run" : "failed (see above)");
    else
        code = dir_sizes(l, dir);
    if (!code) {                  /* no log.* or __db.* there: all data */
        l->data_bytes += l->log_bytes + l->region_bytes;
        l->log_bytes = l->region_bytes = 0;
    }
    l->done = code == 0;
    free(dir);
    return code;
}

int bench_load_xapian(bench_load *l, const bench_env *e, const bench_spec *s,
                      const bench_corpus *c)
{
    return xapian_measured(l, e, s, s->key.text, c, false);
}

int bench_add_xapian(bench_load *l, const bench_env *e, const bench_spec *s,
                     const char *key, const bench_corpus *c)
{
    return xapian_measured(l, e, s, key, c, true);
}

/* The Xapian loader, in the measured child. */
typedef struct xap_loader {
    peer_loader P;
    xap_db *db;
} xap_loader;

static int xap_doc(void *payload, const char *const *vals,
                   const size_t *lens, uint64_t bytes)
{
    xap_loader *L = payload;
    long kn = peer_key(&L->P, vals, lens);
    if (kn < 0)
        return BENCH_ERR;
    if (xap_add(L->db, L->P.keybuf, (size_t)kn, vals, lens) != 0)
        return bench_fail(BENCH_ERR, "xapian load: %s: document %" PRIu64
                          ": %s", L->P.corpus, L->P.docs, xap_errmsg(L->db));
    peer_progress(&L->P, bytes, false);
    return 0;
}

/* --internal-xapian DIR CORPUS TEMPLATE FIELD...: a new DIR;
 * --internal-xapian-add ...: the documents added to DIR (growth steps). */
static int internal_xapian(int argc, char **argv, bool add)
{
    if (argc < 6)
        return BENCH_USAGE;
    xap_loader L;
    memset(&L, 0, sizeof L);
    const char *const *fields = (const char *const *)(argv + 5);
    int code = peer_start(&L.P, "xapian", argc, argv);
    if (!code && (add ? xap_append : xap_create)(&L.db, argv[2], fields,
                                               L.P.nfields) != 0)
        code = bench_fail(BENCH_ERR, "xapian load: %s", xap_errmsg(L.db));
    if (!code)
        code = peer_scan(&L.P, fields, xap_doc, &L);
    if (!code && xap_commit(L.db) != 0)
        code = bench_fail(BENCH_ERR, "xapian load: %s", xap_errmsg(L.db));
    xap_close(L.db);
    peer_finish(&L.P, code);
    return code;
}

int bench_internal(int argc, char **argv)
{
    if (strcmp(argv[1], "--internal-measure") == 0)
        return internal_measure(argc, argv);
    if (strcmp(argv[1], "--internal-fts5") == 0)
        return internal_fts5(argc, argv, false);
    if (strcmp(argv[1], "--internal-fts5-add") == 0)
        return internal_fts5(argc, argv, true);
    if (strcmp(argv[1], "--internal-xapian") == 0)
        return internal_xapian(argc, argv, false);
    if (strcmp(argv[1], "--internal-xapian-add") == 0)
        return internal_xapian(argc, argv, true);
    return bench_fail(BENCH_USAGE, "unknown option '%s'", argv[1]);
}

/* ---- cleaning up -------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *sb, int type,
                    struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

void bench_kvfts_clean(const char *work)
{
    char *dir = bench_path(work, "kvfts");
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

void bench_work_clean(const char *work)
{
    static const char *const files[] = {
        "fts5.db", "fts5.db-journal", "config.json", "kvfts-init.out",
        "kvfts-load.json"
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char *p = bench_path(work, files[i]);
        unlink(p);
        free(p);
    }
    static const char *const dirs[] = { "kvfts", "xapian" };
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        char *dir = bench_path(work, dirs[i]);
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        free(dir);
    }
}
