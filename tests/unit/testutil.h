/*
 * testutil.h -- helpers shared by the cmocka unit tests: a fresh temporary
 * directory per test, removed afterwards.
 */
#ifndef KVFTS_TESTUTIL_H
#define KVFTS_TESTUTIL_H

#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline int tu_rm_one(const char *path, const struct stat *st, int flag,
                            struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/** Remove a directory tree. */
static inline void tu_rmtree(const char *dir)
{
    nftw(dir, tu_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/** Make a fresh directory under $TMPDIR (or /tmp); caller frees and
 *  removes it with tu_rmtree. */
static inline char *tu_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    if (!base || !base[0])
        base = "/tmp";
    size_t n = strlen(base) + 32;
    char *p = malloc(n);
    if (!p)
        return NULL;
    snprintf(p, n, "%s/kvfts-test-XXXXXX", base);
    if (!mkdtemp(p)) {
        free(p);
        return NULL;
    }
    return p;
}

/** A path inside dir (static buffer, overwritten by the next call). */
static inline const char *tu_path(const char *dir, const char *name)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

#endif /* KVFTS_TESTUTIL_H */
