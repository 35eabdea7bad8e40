/*
 * bench/peer_xapian.h -- the C face of the Xapian peer of kvfts-bench
 * (bench/peer_xapian.cc, C++ on Debian's libxapian-dev).  Xapian is set up
 * as its users set it up: one database directory (the default backend,
 * glass), a TermGenerator without stemming (kvfts's `standard` analyzer
 * does not stem either), positions on, every indexed field indexed twice,
 * under its prefix ("X" + the field's name in capitals: XPACKAGE) and
 * unprefixed (Xapian's counterpart of kvfts's `_all` and of an FTS5
 * query without a column filter), with a gap of 100 positions between
 * fields so that no phrase spans two of them; the key as the unique-id
 * term "Q<key>" (replace_document, so a repeated key replaces, as in
 * kvfts) and in value slot 0; the fields as the document's data, what a
 * top-10 search reads.  The load commits as Xapian's users do: automatic
 * flushes every XAPIAN_FLUSH_THRESHOLD documents (10,000 by default), one
 * commit() at the end.
 *
 * Queries go through a QueryParser with the same prefixes, AND as the
 * default operator and FLAG_BOOLEAN | FLAG_PHRASE | FLAG_LOVEHATE |
 * FLAG_WILDCARD, parsed again on every run (as kvfts and FTS5 parse
 * theirs).  Top-10: BM25Weight (Xapian's default), get_mset(0, 10), every
 * hit's data read.  Count: BoolWeight, get_mset(0, 0, doccount), which
 * makes the matcher count every match: the count is exact (checked:
 * lower bound == upper bound, else an error).
 *
 * Every function returns 0 or -1; after -1, xap_errmsg() of the handle
 * says why (never NULL).  Handles are for one thread at a time.
 */
#ifndef KVFTS_BENCH_PEER_XAPIAN_H
#define KVFTS_BENCH_PEER_XAPIAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xap_db xap_db;

/** True when kvfts-bench was built with Xapian (else every other function
 *  fails with a message saying so). */
bool xap_available(void);
/** "1.4.22", or "" without Xapian.  Static. */
const char *xap_version(void);

/** Create (overwriting) the database @p dir for writing, with the fields
 *  @p fields (copied).  @p out is set even on failure (NULL only when out
 *  of memory): read xap_errmsg(), then xap_close(). */
int xap_create(xap_db **out, const char *dir, const char *const *fields,
               size_t nfields);
/** The same, but the database @p dir is opened to add to when it exists
 *  (the growth run's steps), created when it does not. */
int xap_append(xap_db **out, const char *dir, const char *const *fields,
               size_t nfields);
/** Add or replace the document of key @p key: vals[i] / lens[i] is the
 *  text of fields[i] (NULL: missing). */
int xap_add(xap_db *db, const char *key, size_t key_len,
            const char *const *vals, const size_t *lens);
/** Commit what xap_add() added. */
int xap_commit(xap_db *db);

/** Open @p dir read-only; @p out as for xap_create(). */
int xap_open(xap_db **out, const char *dir, const char *const *fields,
             size_t nfields);
/** Documents; terms and postings without the Q (unique-id) terms. */
int xap_stats(xap_db *db, uint64_t *docs, uint64_t *terms,
              uint64_t *postings);
/** Top-10 (BM25) of @p query; *hits: documents returned, *bytes: bytes of
 *  their data read. */
int xap_top(xap_db *db, const char *query, size_t *hits, size_t *bytes);
/** Exact number of matches of @p query (BoolWeight). */
int xap_count(xap_db *db, const char *query, uint64_t *count);
/** Calls @p fn with the key of every match (a NUL-terminated copy, valid
 *  during the call); a non-zero return of @p fn stops and is returned. */
int xap_keys(xap_db *db, const char *query,
             int (*fn)(void *payload, const char *key), void *payload);

/** The last failure's message; owned by @p db.  For NULL: "out of memory"
 *  (or, built without Xapian, that it was). */
const char *xap_errmsg(const xap_db *db);
/** Close; a database of xap_create() commits what is pending, as Xapian's
 *  destructor does.  NULL: no-op. */
void xap_close(xap_db *db);

#ifdef __cplusplus
}
#endif

#endif /* KVFTS_BENCH_PEER_XAPIAN_H */
