/*
 * crashpoint.c -- a process dies at a chosen file operation, for
 * e2e.crashpoints.  Preloaded (LD_PRELOAD) into a kvfts process, it stands
 * in front of the C library's calls with which Berkeley DB (and kvfts)
 * change files, counts the calls of one kind, and raises SIGKILL just
 * before or just after the Nth:
 *
 *   KVFTS_CRASH_AT    rename | unlink | create | pwrite | write | fsync |
 *                     truncate
 *   KVFTS_CRASH_N     N, from 1
 *   KVFTS_CRASH_WHEN  before (the default) | after
 *
 * "create" is an open(2) with O_CREAT; "write" a write(2) to a file (not
 * descriptors 0-2: the log's records go out by write(2), pages by
 * pwrite(2)); "fsync" is fsync(2) or fdatasync(2).  Random kill times (e.g.
 * e2e.resume) land mostly in long computations; these land in the windows
 * between the steps of a file operation -- a segment file made under a
 * temporary name and renamed, a file removed by renaming it aside, a log
 * record half written -- which recovery must mend.
 *
 * Not a library of kvfts: it links with nothing but libdl and is built for
 * the e2e tests only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

enum { AT_NONE, AT_RENAME, AT_UNLINK, AT_CREATE, AT_PWRITE, AT_WRITE,
       AT_FSYNC, AT_TRUNCATE };

static const char *const at_names[] = {
    "", "rename", "unlink", "create", "pwrite", "write", "fsync", "truncate"
};

static atomic_int cfg_state;       /* 0 unread, 1 being read, 2 read */
static int cfg_at;                 /* AT_* */
static long cfg_n;
static int cfg_after;
static atomic_long calls;

static void cfg_read(void)
{
    int s = atomic_load(&cfg_state);
    if (s == 2)
        return;
    int zero = 0;
    if (!atomic_compare_exchange_strong(&cfg_state, &zero, 1)) {
        while (atomic_load(&cfg_state) != 2)
            ;              /* another thread reads it: a few instructions */
        return;
    }
    const char *at = getenv("KVFTS_CRASH_AT");
    const char *n = getenv("KVFTS_CRASH_N");
    const char *when = getenv("KVFTS_CRASH_WHEN");
    for (int i = 1; at && i < (int)(sizeof at_names / sizeof at_names[0]);
         i++)
        if (strcmp(at, at_names[i]) == 0)
            cfg_at = i;
    cfg_n = n ? atol(n) : 0;
    cfg_after = when && strcmp(when, "after") == 0;
    atomic_store(&cfg_state, 2);
}

/* Before call number N of kind @p at: count it, and die there unless the
 * death is to come after it.  True if this call is the Nth. */
static int point_before(int at)
{
    cfg_read();
    if (cfg_at != at || cfg_n <= 0)
        return 0;
    int nth = atomic_fetch_add(&calls, 1) + 1 == cfg_n;
    if (nth && !cfg_after)
        raise(SIGKILL);
    return nth;
}

static void point_after(int nth)
{
    if (nth)
        raise(SIGKILL);
}

/* The C library's function @p name, once (ISO C has no cast from a data
 * pointer to a function pointer: copied through memcpy). */
#define REAL(fn, name)                                                    \
    do {                                                                  \
        if (!(fn)) {                                                      \
            void *p_ = dlsym(RTLD_NEXT, name);                            \
            if (!p_)                                                      \
                abort();                                                  \
            memcpy(&(fn), &p_, sizeof p_);                                \
        }                                                                 \
    } while (0)

int rename(const char *from, const char *to)
{
    static int (*fn)(const char *, const char *);
    REAL(fn, "rename");
    int nth = point_before(AT_RENAME);
    int r = fn(from, to);
    point_after(nth);
    return r;
}

int unlink(const char *path)
{
    static int (*fn)(const char *);
    REAL(fn, "unlink");
    int nth = point_before(AT_UNLINK);
    int r = fn(path);
    point_after(nth);
    return r;
}

int open(const char *path, int flags, ...)
{
    static int (*fn)(const char *, int, ...);
    REAL(fn, "open");
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    int nth = flags & O_CREAT ? point_before(AT_CREATE) : 0;
    int r = fn(path, flags, mode);
    point_after(nth);
    return r;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    static ssize_t (*fn)(int, const void *, size_t, off_t);
    REAL(fn, "pwrite");
    int nth = point_before(AT_PWRITE);
    ssize_t r = fn(fd, buf, n, off);
    point_after(nth);
    return r;
}

ssize_t write(int fd, const void *buf, size_t n)
{
    static ssize_t (*fn)(int, const void *, size_t);
    REAL(fn, "write");
    int nth = fd > 2 ? point_before(AT_WRITE) : 0;
    ssize_t r = fn(fd, buf, n);
    point_after(nth);
    return r;
}

int fsync(int fd)
{
    static int (*fn)(int);
    REAL(fn, "fsync");
    int nth = point_before(AT_FSYNC);
    int r = fn(fd);
    point_after(nth);
    return r;
}

int fdatasync(int fd)
{
    static int (*fn)(int);
    REAL(fn, "fdatasync");
    int nth = point_before(AT_FSYNC);
    int r = fn(fd);
    point_after(nth);
    return r;
}

int ftruncate(int fd, off_t len)
{
    static int (*fn)(int, off_t);
    REAL(fn, "ftruncate");
    int nth = point_before(AT_TRUNCATE);
    int r = fn(fd, len);
    point_after(nth);
    return r;
}
