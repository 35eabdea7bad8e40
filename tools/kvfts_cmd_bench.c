/*
 * kvfts_cmd_bench.c -- `kvfts bench ARGS...`: run kvfts-bench, the
 * side-by-side benchmark of kvfts, SQLite FTS5 and Xapian
 * (bench/kvfts_bench.c).
 *
 * kvfts-bench is a separate program because it links libsqlite3 (and
 * libxapian, C++), which the kvfts command does not need; it is built
 * only when libsqlite3-dev is installed, beside kvfts.  This command execs
 * $KVFTS_BENCH_BIN, or the kvfts-bench in the directory of the running
 * kvfts (/proc/self/exe), with the same arguments, and sets $KVFTS_BIN
 * (unless already set) so that the benchmark loads with this very kvfts.
 */
#include "tool.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The kvfts-bench beside @p self (a malloc'd path), or NULL. */
static char *beside(const char *self)
{
    const char *slash = strrchr(self, '/');
    size_t dir = slash ? (size_t)(slash - self) + 1 : 0;
    char *p = malloc(dir + sizeof "kvfts-bench");
    if (p) {
        memcpy(p, self, dir);
        memcpy(p + dir, "kvfts-bench", sizeof "kvfts-bench");
    }
    return p;
}

int cmd_bench(int argc, char **argv)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return tool_error(EXIT_ERR, "bench: /proc/self/exe: %s",
                          strerror(errno));
    self[n] = '\0';
    const char *env = getenv("KVFTS_BENCH_BIN");
    char *bin = env && *env ? strdup(env) : beside(self);
    if (!bin)
        return tool_error(EXIT_ERR, "bench: out of memory");
    if (access(bin, X_OK) != 0) {
        free(bin);
        return tool_error(EXIT_ERR, "bench: kvfts-bench not found (it is "
                          "built when libsqlite3-dev is installed)");
    }
    setenv("KVFTS_BIN", self, 0);
    argv[0] = bin;
    (void)argc;
    execv(bin, argv);
    int e = errno;
    free(bin);
    return tool_error(EXIT_ERR, "bench: kvfts-bench: %s", strerror(e));
}
