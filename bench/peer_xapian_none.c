/*
 * peer_xapian_none.c -- peer_xapian.h when kvfts-bench is built without
 * Xapian (no libxapian-dev): every call fails and says so, so that
 * `--vs xapian` is refused with a clear message instead of the build.
 */
#include "peer_xapian.h"

#include <stdlib.h>

static const char not_built[] =
    "kvfts-bench was built without Xapian (install libxapian-dev and "
    "build again)";

bool xap_available(void) { return false; }
const char *xap_version(void) { return ""; }

int xap_create(xap_db **out, const char *dir, const char *const *fields,
               size_t nfields)
{
    (void)dir, (void)fields, (void)nfields;
    *out = NULL;
    return -1;
}

int xap_append(xap_db **out, const char *dir, const char *const *fields,
               size_t nfields)
{
    return xap_create(out, dir, fields, nfields);
}

int xap_add(xap_db *db, const char *key, size_t key_len,
            const char *const *vals, const size_t *lens)
{
    (void)db, (void)key, (void)key_len, (void)vals, (void)lens;
    return -1;
}

int xap_commit(xap_db *db) { (void)db; return -1; }

int xap_open(xap_db **out, const char *dir, const char *const *fields,
             size_t nfields)
{
    return xap_create(out, dir, fields, nfields);
}

int xap_stats(xap_db *db, uint64_t *docs, uint64_t *terms,
              uint64_t *postings)
{
    (void)db, (void)docs, (void)terms, (void)postings;
    return -1;
}

int xap_top(xap_db *db, const char *query, size_t *hits, size_t *bytes)
{
    (void)db, (void)query, (void)hits, (void)bytes;
    return -1;
}

int xap_count(xap_db *db, const char *query, uint64_t *count)
{
    (void)db, (void)query, (void)count;
    return -1;
}

int xap_keys(xap_db *db, const char *query,
             int (*fn)(void *payload, const char *key), void *payload)
{
    (void)db, (void)query, (void)fn, (void)payload;
    return -1;
}

const char *xap_errmsg(const xap_db *db) { (void)db; return not_built; }
void xap_close(xap_db *db) { (void)db; }
