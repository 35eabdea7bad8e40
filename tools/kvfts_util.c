/*
 * kvfts_util.c -- helpers shared by the kvfts commands: opening the
 * database, error lines and exit statuses, reading inputs, JSON output and
 * the progress line.
 */
#include "tool.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- signals (see tool.h) ------------------------------------------------ */

/* The first signal is noted, to be acted on at a safe point; another one
 * a second or more later ends the process at once (a command stuck
 * waiting, for a lock say, can still be stopped; the database then
 * recovers as after a crash).  Not sooner: timeout(1) and a shell's
 * process group can deliver one signal twice. */
static volatile sig_atomic_t got_signal;
static volatile sig_atomic_t got_at;        /* CLOCK_MONOTONIC seconds */
static bool broken_pipe;

static void on_signal(int sig)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);     /* async-signal-safe */
    if (got_signal) {
        if (ts.tv_sec - got_at >= 1) {
            signal(sig, SIG_DFL);
            raise(sig);
        }
        return;
    }
    got_at = (sig_atomic_t)ts.tv_sec;
    got_signal = sig;
}

void tool_signals_hold(void)
{
    static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* SA_RESTART: Berkeley DB's system calls are not all ready for EINTR;
     * so a read blocked on a pipe or terminal also waits for its line
     * (a second signal, a second later, ends it). */
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        /* A signal ignored when we started (a background job's SIGINT)
         * stays ignored. */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        sigaction(sigs[i], &sa, NULL);
    }
    signal(SIGPIPE, SIG_IGN);
}

/* ---- waiting for another writer --------------------------------------- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool armed;          /* the thread runs */
    bool done;           /* the write finished (mu) */
} notice = { .mu = PTHREAD_MUTEX_INITIALIZER,
             .cv = PTHREAD_COND_INITIALIZER };

/* The library's timeout, read as lib/kv/kv_env.c reads it (for the
 * message only). */
static unsigned busy_timeout(void)
{
    const char *e = getenv("KVFTS_BUSY_TIMEOUT");
    if (e && *e) {
        char *end = NULL;
        errno = 0;
        unsigned long n = strtoul(e, &end, 10);
        if (!errno && !*end && n > 0 && n <= 4000)
            return (unsigned)n;
    }
    return 30;
}

static void *notice_main(void *arg)
{
    (void)arg;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_mutex_lock(&notice.mu);
    int r = 0;
    while (!notice.done && r != ETIMEDOUT)
        r = pthread_cond_timedwait(&notice.cv, &notice.mu, &ts);
    if (!notice.done)
        fprintf(stderr, "kvfts: waiting for another writer (up to %u s; "
                "KVFTS_BUSY_TIMEOUT)\n", busy_timeout());
    pthread_mutex_unlock(&notice.mu);
    return NULL;
}

bool tool_wait_notice_arm(void)
{
    if (notice.armed)
        return false;
    notice.done = false;
    /* Signals stay with the main thread (tool_signals_hold). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    notice.armed = pthread_create(&notice.thread, NULL, notice_main,
                                  NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return notice.armed;
}

void tool_wait_notice_disarm(void)
{
    if (!notice.armed)
        return;
    pthread_mutex_lock(&notice.mu);
    notice.done = true;
    pthread_cond_signal(&notice.cv);
    pthread_mutex_unlock(&notice.mu);
    pthread_join(notice.thread, NULL);
    notice.armed = false;
}

bool tool_interrupted(void)
{
    return got_signal != 0;
}

int tool_broken_pipe(void)
{
    broken_pipe = true;
    return EXIT_ERR;
}

void tool_signals_release(void)
{
    fflush(stdout);
    fflush(stderr);
    int sig = got_signal ? got_signal : broken_pipe ? SIGPIPE : 0;
    if (sig) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

int tool_exit_code(int status)
{
    switch (status) {
    case KVFTS_OK: return EXIT_OK;
    case KVFTS_EINVAL: return EXIT_USAGE;
    case KVFTS_ENOTFOUND: return EXIT_NOTFOUND;
    case KVFTS_EEXISTS:
    case KVFTS_ECAS: return EXIT_CONFLICT;
    case KVFTS_EBUSY: return EXIT_BUSY;
    case KVFTS_ECORRUPT: return EXIT_CORRUPT;
    default: return EXIT_ERR;
    }
}

int tool_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("kvfts: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

int tool_bad_option(const char *cmd, char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    if (optopt && arg[0] == '-' && arg[1] != '-')
        return tool_error(EXIT_USAGE, "%s: unknown or incomplete option "
                          "'-%c' (see kvfts %s --help)", cmd, optopt, cmd);
    return tool_error(EXIT_USAGE, "%s: unknown or incomplete option '%s' "
                      "(see kvfts %s --help)", cmd, arg, cmd);
}

/* The entry of opts that "--NAME" or "--NAME=V" names: exact, or a
 * unique prefix, as getopt_long() takes it; NULL if none or ambiguous. */
static const struct option *long_opt(const struct option *opts,
                                     const char *arg)
{
    const char *name = arg + 2;
    size_t n = strcspn(name, "=");
    const struct option *hit = NULL;
    for (const struct option *o = opts; o->name; o++) {
        if (strncmp(o->name, name, n) != 0)
            continue;
        if (strlen(o->name) == n)
            return o;
        if (hit)
            return NULL;
        hit = o;
    }
    return hit;
}

char **tool_args(int *argc, char **argv, const struct option *opts,
                 const char *shortopts)
{
    int n = *argc;
    char **out = malloc((size_t)(n + 2) * sizeof *out);
    char **pos = malloc((size_t)(n + 1) * sizeof *pos);
    if (!out || !pos) {
        free(out);
        free(pos);
        return NULL;
    }
    int no = 0, np = 0;
    bool rest = false, missing = false;
    if (n > 0)
        out[no++] = argv[0];
    for (int i = 1; i < n; i++) {
        const char *a = argv[i];
        if (rest) {
            pos[np++] = argv[i];
        } else if (strcmp(a, "--") == 0) {
            rest = true;
        } else if (a[0] == '-' && a[1] == '-') {
            out[no++] = argv[i];
            const struct option *o = long_opt(opts, a);
            if (o && o->has_arg == required_argument && !strchr(a, '=')) {
                if (i + 1 < n)
                    out[no++] = argv[++i];
                else
                    missing = true;
            }
        } else if (a[0] == '-' && a[1] && strchr(shortopts, a[1]) &&
                   a[1] != ':') {
            out[no++] = argv[i];
            const char *c = strchr(shortopts, a[1]);
            if (c[1] == ':' && !a[2]) {
                if (i + 1 < n)
                    out[no++] = argv[++i];
                else
                    missing = true;
            }
        } else {
            pos[np++] = argv[i];   /* a word, "-", or "-5", "-cat" */
        }
    }
    if (missing) {
        /* The last option lacks its value: keep it last, with no "--" to
         * be taken for the value, so getopt_long() reports it. */
        memmove(out + 1 + np, out + 1, (size_t)(no - 1) * sizeof *out);
        memcpy(out + 1, pos, (size_t)np * sizeof *out);
        no += np;
    } else {
        out[no++] = "--";
        for (int i = 0; i < np; i++)
            out[no++] = pos[i];
    }
    out[no] = NULL;
    free(pos);
    *argc = no;
    return out;
}

int tool_fail(kvfts_db *db, int status, const char *what)
{
    const char *msg = db ? kvfts_errmsg(db) : "";
    if (!msg[0])
        msg = kvfts_strerror(status);
    return tool_error(tool_exit_code(status), "%s: %s", what, msg);
}

int tool_open(kvfts_db **out, const tool_common *c, bool create,
              bool read_only)
{
    *out = NULL;
    const char *dir = c->dir ? c->dir : getenv("KVFTS_DB");
    if (!dir || !dir[0])
        return tool_error(EXIT_USAGE, "no database: give -d DIR or set "
                          "KVFTS_DB");
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.create = create;
    o.read_only = read_only;
    const char *mb = getenv("KVFTS_CACHE_MB");
    uint64_t cache_mb;
    if (mb && tool_parse_u64(mb, &cache_mb) && cache_mb > 0 &&
        cache_mb < 1024 * 1024)
        o.cache_bytes = (size_t)cache_mb * 1024 * 1024;
    kvfts_db *db = NULL;
    /* Opening for writing begins a write transaction, which may wait for
     * another process's (a load's batch). */
    bool notice_mine = !read_only && !create && tool_wait_notice_arm();
    int rc = kvfts_open(&db, dir, &o);
    if (notice_mine)
        tool_wait_notice_disarm();
    if (rc) {
        int code = tool_fail(db, rc, "open");
        kvfts_close(db);
        return code;
    }
    *out = db;
    return EXIT_OK;
}

int tool_check_regular(FILE *f, const char *path)
{
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode))
        return tool_error(EXIT_USAGE, "%s: is a directory, not a file", path);
    return EXIT_OK;
}

int tool_read_file(char **out, size_t *len, const char *path)
{
    *out = NULL;
    *len = 0;
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f)
        return tool_error(EXIT_NOTFOUND, "%s: %s", path, strerror(errno));
    int code = tool_check_regular(f, path);
    if (code) {
        if (f != stdin)
            fclose(f);
        return code;
    }
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (n + 1 < cap)
            break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    if (f != stdin)
        fclose(f);
    if (!buf)
        return tool_error(EXIT_ERR, "%s: out of memory", path);
    if (bad) {
        free(buf);
        return tool_error(EXIT_ERR, "%s: read error", path);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return EXIT_OK;
}

bool tool_parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return false;
    *out = (int64_t)v;
    return true;
}

bool tool_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = (uint64_t)v;
    return true;
}

void tool_json_str(FILE *f, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    fputc('"', f);
    size_t run = 0;   /* start of the pending run of plain bytes */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        fwrite(s + run, 1, i - run, f);
        run = i + 1;
        fputc('\\', f);
        if (c == '"' || c == '\\')
            fputc(c, f);
        else if (c == '\n')
            fputc('n', f);
        else if (c == '\t')
            fputc('t', f);
        else if (c == '\r')
            fputc('r', f);
        else
            fprintf(f, "u00%c%c", hex[c >> 4], hex[c & 15]);
    }
    fwrite(s + run, 1, n - run, f);
    fputc('"', f);
}

void tool_print_doc(FILE *f, const kvfts_doc *d)
{
    fputs("{\"key\":", f);
    tool_json_str(f, d->key, d->key_len);
    if (d->status == KVFTS_OK) {
        fprintf(f, ",\"cas\":%" PRIu64 ",\"doc\":", d->cas);
        fwrite(d->json, 1, d->json_len, f);
        fputs("}\n", f);
    } else {
        fprintf(f, ",\"error\":\"%s\"}\n", kvfts_strerror(d->status));
    }
}

double tool_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void tool_progress_init(tool_progress *p, bool enabled, uint64_t total_bytes)
{
    p->on = enabled && isatty(STDERR_FILENO);
    p->start = p->last = tool_now();
    p->total_bytes = total_bytes;
}

void tool_progress_update(tool_progress *p, uint64_t docs, uint64_t bytes,
                          bool final)
{
    if (!p->on)
        return;
    double now = tool_now();
    if (!final && now - p->last < 0.25)
        return;
    p->last = now;
    double secs = now - p->start;
    double rate = secs > 0 ? (double)docs / secs : 0;
    double mb = (double)bytes / 1e6;
    char eta[32] = "";
    if (p->total_bytes && bytes && !final) {
        double left = secs * ((double)p->total_bytes / (double)bytes - 1.0);
        int s = left > 0 ? (int)left : 0;
        snprintf(eta, sizeof eta, "  ETA %d:%02d", s / 60, s % 60);
    }
    char pct[16] = "";
    if (p->total_bytes)
        snprintf(pct, sizeof pct, "%3.0f%% ",
                 100.0 * (double)bytes / (double)p->total_bytes);
    fprintf(stderr, "\r%s%" PRIu64 " docs  %.1f MB  %.0f docs/s  %.1f MB/s%s"
            "   ", pct, docs, mb, rate, secs > 0 ? mb / secs : 0, eta);
    if (final)
        fputc('\n', stderr);
    fflush(stderr);
}

int tool_db_opts(int argc, char **argv, tool_common *c, uint64_t *limit,
                      const char *cmd)
{
    static const struct option opts[] = {
        { "limit", required_argument, NULL, 'l' },
        { "db", required_argument, NULL, 'd' },
        { NULL, 0, NULL, 0 }
    };
    int o;
    while ((o = getopt_long(argc, argv, "d:", opts, NULL)) != -1) {
        if (o == 'd')
            c->dir = optarg;
        else if (o == 'l' && limit) {
            if (!tool_parse_u64(optarg, limit))
                return tool_error(EXIT_USAGE, "%s: --limit takes a "
                                  "number, not '%s'", cmd, optarg);
        } else
            return tool_bad_option(cmd, argv);
    }
    return EXIT_OK;
}
