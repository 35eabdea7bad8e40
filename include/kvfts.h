/*
 * kvfts.h -- the public C API of kvfts, an embedded full-text and lookup
 * indexing engine for JSON documents stored by key in Berkeley DB.
 *
 * Conventions (see README.md "C API"):
 *  - Handles are opaque.  One handle is used by one thread at a time; several
 *    handles, in threads or processes, may share one database directory.
 *  - Every fallible call returns an int: KVFTS_OK (0) or a negative
 *    kvfts_status, and leaves a message readable with kvfts_errmsg(db).
 *  - Out-parameters come first.  The caller owns what it passes in and every
 *    `**out` result, freed with the matching *_free function or kvfts_free().
 *  - Text is passed as a pointer and a length; it need not be NUL-terminated.
 *
 * Threads, per object (as lmdb.h says it):
 *  - kvfts_db: one thread at a time (hand it over with a mutex or a join).
 *    Any number of handles may be open at once in one process, on one or
 *    several databases, each in its own thread; they share the database's
 *    environment, and their calls need no lock of the caller's.  Messages
 *    (kvfts_errmsg, kvfts_warning) are the handle's own.
 *  - kvfts_batch: belongs to its kvfts_db: the thread using the handle uses
 *    the batch.  Its analysis runs in worker threads of its own (one per
 *    core but the caller's, KVFTS_WORKERS=N to choose), invisible to the
 *    caller: they are joined before kvfts_batch_free() returns.  The merge
 *    a commit may run is split over threads of the library's too (one per
 *    core but the caller's), which it starts the first time and keeps,
 *    idle and with every signal blocked, until the process ends (a thread
 *    that has called Berkeley DB holds a slot of its thread table until
 *    then, so they are not started per batch).
 *  - kvfts_results, kvfts_docs, kvfts_terms: plain memory once returned;
 *    they may be read in any one thread at a time, also after the handle
 *    that made them is closed.
 *  - kvfts_strerror() and the option initializers: any thread.
 *  kvfts_open() opens descriptors 0-2 on /dev/null if they are closed, so
 *  that no database file takes one of them (output would land in it).
 */
#ifndef KVFTS_H
#define KVFTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVFTS_VERSION_STRING "0.1.0"

/* Every function of this header, and nothing else, is exported from the
 * shared library (it is built with -fvisibility=hidden), as libgit2's
 * GIT_EXTERN does. */
#if defined(__GNUC__)
#define KVFTS_EXTERN(type) extern __attribute__((visibility("default"))) type
#else
#define KVFTS_EXTERN(type) extern type
#endif

/** Status codes.  Negative, like libgit2 and LMDB; 0 is success. */
typedef enum kvfts_status {
    KVFTS_OK = 0,
    KVFTS_ERROR = -1,      /* storage or system failure; see kvfts_errmsg() */
    KVFTS_ENOMEM = -2,     /* out of memory */
    KVFTS_ENOTFOUND = -3,  /* no such document, counter, lookup or database */
    KVFTS_EEXISTS = -4,    /* add of an existing key; unique lookup taken */
    KVFTS_EINVAL = -5,     /* bad JSON, UTF-8, key, config, query, argument */
    KVFTS_EBUSY = -6,      /* locked, or a deadlock that retries did not clear */
    KVFTS_ECORRUPT = -7,   /* stored bytes fail validation */
    KVFTS_ITEROVER = -8,   /* iteration finished (not an error) */
    KVFTS_ECAS = -9,       /* the CAS given does not match the stored one */
    KVFTS_EROLLBACK = -10, /* a batch failed after it had written: every
                              write since its last commit is gone (the
                              message says why); not a refusal */
    KVFTS_ELIMIT = -11     /* a search reached its memory or time bound and
                              the caller asked for an exact answer */
} kvfts_status;

/** Largest document key, in bytes. */
#define KVFTS_MAX_KEY 250
/** Largest JSON document accepted, in bytes. */
#define KVFTS_MAX_DOC (20u * 1024u * 1024u)
/** Deepest nesting of arrays and objects accepted in a document. */
#define KVFTS_MAX_DEPTH 512

typedef struct kvfts_db kvfts_db;

typedef struct kvfts_open_options {
    unsigned version;     /* KVFTS_OPEN_OPTIONS_VERSION */
    bool create;          /* create the directory and database if missing */
    bool read_only;       /* refuse every write through this handle */
    size_t cache_bytes;   /* Berkeley DB cache when creating; 0 = 64 MiB */
} kvfts_open_options;
#define KVFTS_OPEN_OPTIONS_VERSION 1
#define KVFTS_OPEN_OPTIONS_INIT { KVFTS_OPEN_OPTIONS_VERSION, false, false, 0 }

/** Open the database in directory @p path (recovering it after a crash).
 *  @param[out] out  set even on failure (NULL only on KVFTS_ENOMEM) so that
 *                   kvfts_errmsg() can explain; always kvfts_close() it.
 *  @param o         NULL for defaults.
 *  @return KVFTS_OK, KVFTS_ENOTFOUND (no database and !o->create),
 *          KVFTS_EBUSY, KVFTS_ECORRUPT, KVFTS_EINVAL, KVFTS_ERROR. */
KVFTS_EXTERN(int) kvfts_open(kvfts_db **out, const char *path, const kvfts_open_options *o);

/** Checkpoint and close.  NULL is a no-op. */
KVFTS_EXTERN(void) kvfts_close(kvfts_db *db);

/** The message of the last failure on @p db; owned by @p db, valid until the
 *  next call on it, never NULL ("" when there was no failure; a generic text
 *  when @p db is NULL). */
KVFTS_EXTERN(const char *) kvfts_errmsg(const kvfts_db *db);

/** The byte offset, in the input of the last failed call, that its message
 *  speaks of (e.g. where a JSON document stops being valid), or -1. */
KVFTS_EXTERN(long long) kvfts_errpos(const kvfts_db *db);

/** The latest warning on @p db since it was opened or
 *  kvfts_warning_clear(): a call that succeeded but met a failure that did
 *  not undo it -- a write is committed and durable, and the checkpoint that
 *  followed it failed (a full disk), or the merge of index segments that
 *  follows writes did (later writes merge again; `kvfts optimize` merges
 *  everything).  Owned by @p db, never NULL ("" when there is none). */
KVFTS_EXTERN(const char *) kvfts_warning(const kvfts_db *db);
/** Forget the warning: kvfts_warning() is "" until the next one. */
KVFTS_EXTERN(void) kvfts_warning_clear(kvfts_db *db);

/** A static description of a status code. */
KVFTS_EXTERN(const char *) kvfts_strerror(int status);

/** Free memory that kvfts returned through a `char **out`.  NULL: no-op. */
KVFTS_EXTERN(void) kvfts_free(void *p);

/* ------------------------------------------------------------------------ */
/* Configuration                                                             */

/** Store the database configuration (JSON; format in README.md
 *  "Configuration").  On a database with documents, the index and lookups
 *  are rebuilt under the new config in the same transaction.
 *  @return KVFTS_OK, KVFTS_EINVAL (bad config), KVFTS_EEXISTS (the documents
 *          violate a new unique lookup; nothing changed), ... */
KVFTS_EXTERN(int) kvfts_set_config(kvfts_db *db, const char *json, size_t json_len);

/** The stored configuration as compact JSON ("{}" when none was set).
 *  @param[out] out  caller owns; kvfts_free(). */
KVFTS_EXTERN(int) kvfts_get_config(char **out, size_t *out_len, kvfts_db *db);

/* ------------------------------------------------------------------------ */
/* Documents                                                                 */

/** How a write treats an existing document. */
typedef enum kvfts_write_mode {
    KVFTS_UPSERT = 0,   /* put: create or replace */
    KVFTS_INSERT = 1,   /* add: KVFTS_EEXISTS if the key exists */
    KVFTS_REPLACE = 2   /* replace: KVFTS_ENOTFOUND if the key is absent */
} kvfts_write_mode;

/** Store a JSON object under @p key, atomically with its lookups.
 *  @param[out] cas_out  the document's new CAS (may be NULL).
 *  @param cas  0 to write unconditionally; otherwise the write happens only
 *              if the stored document's CAS equals @p cas (KVFTS_ECAS if
 *              not; KVFTS_ENOTFOUND if there is no document).
 *  @return KVFTS_OK, KVFTS_EINVAL, KVFTS_EEXISTS, KVFTS_ENOTFOUND,
 *          KVFTS_ECAS, KVFTS_EBUSY, KVFTS_ERROR. */
KVFTS_EXTERN(int) kvfts_write(uint64_t *cas_out, kvfts_db *db, kvfts_write_mode mode,
                const char *key, size_t key_len,
                const char *json, size_t json_len, uint64_t cas);

/** kvfts_write() with KVFTS_UPSERT, KVFTS_INSERT and KVFTS_REPLACE. */
KVFTS_EXTERN(int) kvfts_put(uint64_t *cas_out, kvfts_db *db, const char *key, size_t key_len,
              const char *json, size_t json_len, uint64_t cas);
KVFTS_EXTERN(int) kvfts_add(uint64_t *cas_out, kvfts_db *db, const char *key, size_t key_len,
              const char *json, size_t json_len);
KVFTS_EXTERN(int) kvfts_replace(uint64_t *cas_out, kvfts_db *db, const char *key,
                  size_t key_len, const char *json, size_t json_len,
                  uint64_t cas);

/** Store @p json under the key "PREFIX::<n>", n taken from counter
 *  count::PREFIX in the same transaction.
 *  @param[out] key_out  the new key, NUL-terminated; caller owns, kvfts_free().
 *  @param[out] cas_out  may be NULL. */
KVFTS_EXTERN(int) kvfts_put_auto(char **key_out, uint64_t *cas_out, kvfts_db *db,
                   const char *prefix, size_t prefix_len,
                   const char *json, size_t json_len);

/** Delete a document and its lookups.  @p cas as for kvfts_write().
 *  @return KVFTS_OK, KVFTS_ENOTFOUND, KVFTS_ECAS, KVFTS_EINVAL, ... */
KVFTS_EXTERN(int) kvfts_del(kvfts_db *db, const char *key, size_t key_len, uint64_t cas);

/** One document of a multi-get.  Pointers are borrowed from the kvfts_docs
 *  that holds it and live until kvfts_docs_free(). */
typedef struct kvfts_doc {
    const char *key;     /* NUL-terminated */
    size_t key_len;
    int status;          /* KVFTS_OK or KVFTS_ENOTFOUND */
    const char *json;    /* compact JSON, NUL-terminated; NULL if not found */
    size_t json_len;
    uint64_t cas;        /* 0 if not found */
} kvfts_doc;

typedef struct kvfts_docs kvfts_docs;

/** Read many documents in one snapshot.  Results are in request order; a
 *  missing key is an entry with status KVFTS_ENOTFOUND, not a failure.
 *  @param[out] out  caller owns; kvfts_docs_free().  NULL on failure.
 *  @param key_lens  NULL: every key is NUL-terminated. */
KVFTS_EXTERN(int) kvfts_multi_get(kvfts_docs **out, kvfts_db *db, const char *const *keys,
                    const size_t *key_lens, size_t n);

/** Read PREFIX::first .. PREFIX::last (inclusive) in one snapshot, leaving out
 *  the missing ones (the seeds' counter-range multi-get).  last = 0 means
 *  "up to the value of counter count::PREFIX". */
KVFTS_EXTERN(int) kvfts_get_range(kvfts_docs **out, kvfts_db *db, const char *prefix,
                    size_t prefix_len, uint64_t first, uint64_t last);

KVFTS_EXTERN(size_t) kvfts_docs_count(const kvfts_docs *docs);
/** Borrowed; valid until kvfts_docs_free().  NULL if @p i is out of range. */
KVFTS_EXTERN(const kvfts_doc *) kvfts_docs_at(const kvfts_docs *docs, size_t i);
KVFTS_EXTERN(void) kvfts_docs_free(kvfts_docs *docs);

/** Read one document.
 *  @param[out] json_out  compact JSON, NUL-terminated; caller owns, kvfts_free().
 *  @param[out] cas_out   may be NULL.
 *  @return KVFTS_OK, KVFTS_ENOTFOUND, ... */
KVFTS_EXTERN(int) kvfts_get(char **json_out, size_t *json_len_out, uint64_t *cas_out,
              kvfts_db *db, const char *key, size_t key_len);

/* ------------------------------------------------------------------------ */
/* Counters and lookups                                                      */

/** Add @p delta to counter count::NAME and return its new value, atomically
 *  across processes.  A missing counter starts at 0, or, when @p initial is
 *  not NULL, is created holding *initial (the delta is then not applied, as
 *  in memcached and Couchbase).  Overflow is KVFTS_EINVAL. */
KVFTS_EXTERN(int) kvfts_incr(int64_t *out, kvfts_db *db, const char *name, size_t name_len,
               int64_t delta, const int64_t *initial);

/** Read counter count::NAME.  @return KVFTS_OK or KVFTS_ENOTFOUND. */
KVFTS_EXTERN(int) kvfts_counter_get(int64_t *out, kvfts_db *db, const char *name,
                      size_t name_len);

/** Follow lookup NAME::VALUE: the documents it refers to, in key order.
 *  @return KVFTS_OK, KVFTS_ENOTFOUND (no such entry), KVFTS_EINVAL (NAME is
 *          not a declared lookup). */
KVFTS_EXTERN(int) kvfts_lookup(kvfts_docs **out, kvfts_db *db, const char *name,
                 size_t name_len, const char *value, size_t value_len);

/** The lookup document NAME::VALUE itself, as JSON: {"ref":"KEY"} for a
 *  unique lookup, {"refs":["K1","K2",...]} otherwise.
 *  @param[out] out  caller owns; kvfts_free(). */
KVFTS_EXTERN(int) kvfts_lookup_doc(char **out, size_t *out_len, kvfts_db *db,
                     const char *name, size_t name_len,
                     const char *value, size_t value_len);

/* ------------------------------------------------------------------------ */
/* Batches: many writes in one transaction                                   */

typedef struct kvfts_batch kvfts_batch;

/** Start a batch on @p db.  Writes through the batch are applied at once in
 *  one open transaction and become durable and visible together at
 *  kvfts_batch_commit().  A kvfts_batch_write() that fails with any status
 *  but KVFTS_EROLLBACK was refused before it wrote anything: nothing
 *  changed and the batch goes on.  KVFTS_EROLLBACK (a failure after the
 *  write began: disk full, out of memory, a damaged record) means the whole
 *  batch since its last commit was rolled back; the batch is empty and
 *  usable again.  Don't use @p db for other writes meanwhile.
 *  @param[out] out  caller owns; kvfts_batch_free() (aborts if uncommitted). */
KVFTS_EXTERN(int) kvfts_batch_begin(kvfts_batch **out, kvfts_db *db);

/** As kvfts_write(), inside the batch.  Messages go to kvfts_errmsg(db). */
KVFTS_EXTERN(int) kvfts_batch_write(kvfts_batch *b, kvfts_write_mode mode,
                      const char *key, size_t key_len,
                      const char *json, size_t json_len);

/** As kvfts_batch_write(), with the key made from @p key_template: every
 *  "{path}" in it is replaced by the scalar at that dotted path of the
 *  document (a string as is, a number or boolean as written), e.g.
 *  "pkg::{package}" or "{id}".  The key is taken in the same pass that
 *  validates the JSON.  A missing value is KVFTS_EINVAL, and so is more
 *  than one value at a path (an array of several): a key takes one.
 *  @param[out] key_out  may be NULL; else caller owns, kvfts_free(). */
KVFTS_EXTERN(int) kvfts_batch_write_template(char **key_out, kvfts_batch *b,
                               kvfts_write_mode mode,
                               const char *key_template, size_t template_len,
                               const char *json, size_t json_len);

/** As kvfts_put_auto(), inside the batch.
 *  @param[out] key_out  may be NULL; else caller owns, kvfts_free(). */
KVFTS_EXTERN(int) kvfts_batch_write_auto(char **key_out, kvfts_batch *b, const char *prefix,
                           size_t prefix_len, const char *json,
                           size_t json_len);

/** Number of writes applied since the last commit. */
KVFTS_EXTERN(size_t) kvfts_batch_pending(const kvfts_batch *b);

/** Bound the memory the batch buffers (index postings and its replay log)
 *  to about @p bytes (default 128 MiB). */
KVFTS_EXTERN(void) kvfts_batch_set_mem(kvfts_batch *b, size_t bytes);

/** True once the buffers have reached the memory bound: commit now.  (A
 *  batch never committed merges its buffer into the open transaction by
 *  itself at twice the bound, so memory stays bounded either way.) */
KVFTS_EXTERN(bool) kvfts_batch_full(const kvfts_batch *b);

/** Commit what was written; the batch stays open for more writes. */
KVFTS_EXTERN(int) kvfts_batch_commit(kvfts_batch *b);

/** Let a commit that changes more pages than Berkeley DB's cache holds go
 *  in parts instead of failing with KVFTS_ENOMEM: the writes are committed
 *  in order, in two or more transactions, each all or nothing, and later
 *  batches get half the memory bound.  Off by default (a batch is one
 *  transaction); `kvfts load` turns it on: its batches are its own. */
KVFTS_EXTERN(void) kvfts_batch_set_split(kvfts_batch *b, bool on);

/** How many commits of @p b went in parts. */
KVFTS_EXTERN(size_t) kvfts_batch_split_commits(const kvfts_batch *b);

/** Abort anything uncommitted and free.  NULL: no-op. */
KVFTS_EXTERN(void) kvfts_batch_free(kvfts_batch *b);

/* ------------------------------------------------------------------------ */
/* Analysis: what the index will hold                                        */

typedef struct kvfts_terms kvfts_terms;

/** One term of an analysis.  Pointers are borrowed from the kvfts_terms
 *  that holds it and live until kvfts_terms_free(). */
typedef struct kvfts_term {
    const char *field;   /* dotted path, "_all", or "" (no field given) */
    const char *term;    /* NUL-terminated */
    size_t term_len;
    uint32_t pos;        /* position within the field; an "_all" term's
                            within its source field (so two fields' terms
                            never make a phrase) */
    size_t start, end;   /* byte offsets in the text (or decoded value) */
    const char *source;  /* the field whose value held the term (for "_all"
                            terms too); "" for text analyzed without one */
} kvfts_term;

/** Analyze @p text as the index would: with analyzer @p analyzer
 *  ("standard", "english", "keyword", ...), or as a value of field @p field
 *  under @p db's config (its field term and its "_all" copy), or, both NULL,
 *  as "_all" text.  @p db may be NULL (the default config).
 *  @param[out] out  set even on failure (NULL only on KVFTS_ENOMEM); the
 *                   message is in kvfts_terms_errmsg(); kvfts_terms_free().
 *  @return KVFTS_OK, KVFTS_EINVAL (unknown analyzer: the message lists the
 *          valid names; invalid UTF-8: it names the byte), KVFTS_ENOMEM. */
KVFTS_EXTERN(int) kvfts_analyze(kvfts_terms **out, kvfts_db *db, const char *analyzer,
                  const char *field, const char *text, size_t len);

/** Every (field, term, position) the JSON document @p json produces under
 *  @p db's config (NULL: the default config).  Ownership as kvfts_analyze. */
KVFTS_EXTERN(int) kvfts_analyze_doc(kvfts_terms **out, kvfts_db *db, const char *json,
                      size_t len);

KVFTS_EXTERN(size_t) kvfts_terms_count(const kvfts_terms *t);
/** Borrowed until kvfts_terms_free(); NULL if @p i is out of range. */
KVFTS_EXTERN(const kvfts_term *) kvfts_terms_at(const kvfts_terms *t, size_t i);
/** Message of the failure that produced @p t ("" if none); never NULL. */
KVFTS_EXTERN(const char *) kvfts_terms_errmsg(const kvfts_terms *t);
KVFTS_EXTERN(void) kvfts_terms_free(kvfts_terms *t);          /* NULL: no-op */

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */

typedef struct kvfts_stats {
    uint64_t documents;     /* live documents */
    uint64_t counters;      /* count:: entries */
    uint64_t lookup_entries;/* NAME::VALUE -> key pairs */
    uint64_t disk_bytes;    /* database files, logs excluded */
    uint64_t log_bytes;     /* transaction log files */
    uint64_t terms;         /* distinct terms, whatever their fields */
    uint64_t postings;      /* live (term, document) pairs, whatever the
                               fields: one per word of a document */
    uint64_t blocks;        /* postings block records */
    uint64_t postings_bytes;/* keys and values of the index records, dead
                               postings awaiting a merge included */
    uint64_t fields;        /* fields ever indexed */
    uint64_t skipped_tokens;/* tokens over 128 bytes left out, cumulative */
    uint64_t segments;      /* index segments (kvfts_optimize() makes 1) */
    bool merging;           /* a merge of segments is under way */
    uint64_t field_list_postings; /* postings of the "field_lists" fields'
                               own lists (not in terms and postings) */
} kvfts_stats;

KVFTS_EXTERN(int) kvfts_get_stats(kvfts_stats *out, kvfts_db *db);

/* ------------------------------------------------------------------------ */
/* The inverted index                                                        */

/** The index entry fts::FIELD::TERM in the seeds' form,
 *  {"count":N,"refs":["key1","key2",...]}: N is the exact number of live
 *  documents holding TERM in FIELD, refs their keys in key order, at most
 *  @p limit of them (0: all).  TERM is matched as stored (see
 *  kvfts_analyze()).
 *  @param[out] out  caller owns; kvfts_free().
 *  @return KVFTS_OK, KVFTS_ENOTFOUND (no such entry), ... */
KVFTS_EXTERN(int) kvfts_term_get(char **out, size_t *out_len, kvfts_db *db,
                   const char *field, size_t field_len, const char *term,
                   size_t term_len, size_t limit);

/** Called per term, in byte order; non-zero stops the walk (and is
 *  returned). */
typedef int (*kvfts_term_fn)(void *payload, const char *term, size_t len,
                             uint64_t count);

/** Every term of @p field starting with @p prefix (may be empty). */
KVFTS_EXTERN(int) kvfts_term_list(kvfts_db *db, const char *field, size_t field_len,
                    const char *prefix, size_t prefix_len, kvfts_term_fn fn,
                    void *payload);

/** Called once per difference kvfts_check() finds (one line of text). */
typedef int (*kvfts_report_fn)(void *payload, const char *what);

/** Verify, in one snapshot, that the index, the lookups and the doc-id
 *  table equal what a fresh analysis of the stored documents gives.  Holds
 *  that analysis in memory (about 40 bytes per posting).
 *  @param[out] differences  how many were found (0: consistent).
 *  @return KVFTS_OK (even with differences: see *differences), or an
 *          error that stopped the check. */
KVFTS_EXTERN(int) kvfts_check(uint64_t *differences, kvfts_db *db, kvfts_report_fn report,
                void *payload);

/** Progress of a long operation: items done so far. */
typedef void (*kvfts_progress_fn)(void *payload, uint64_t done);

/** Rebuild every index entry and lookup from the stored documents, in one
 *  transaction (after a config change, or to repair).  @p progress may be
 *  NULL.  @return KVFTS_OK, KVFTS_EEXISTS (the documents violate a unique
 *  lookup), ... */
KVFTS_EXTERN(int) kvfts_reindex(kvfts_db *db, kvfts_progress_fn progress, void *payload);

/** Called after each step of kvfts_optimize(): index bytes merged so far
 *  of @p total in the merge under way, and the segments there are now.
 *  Non-zero stops the optimize (what is merged stays merged; the next
 *  kvfts_optimize() or the merging writers do goes on from there). */
typedef int (*kvfts_merge_fn)(void *payload, uint64_t done, uint64_t total,
                              uint64_t segments);

/** Merge the index's segments into one, dropping deleted and replaced
 *  postings: the smallest index and the fastest searches.  Writes never
 *  need it (each write merges a bounded amount as it goes, keeping a few
 *  segments per size level); run it after a load or a large update.  It
 *  works in steps of about 8 MB, each its own transaction, so readers and
 *  writers go on meanwhile and an interrupted optimize resumes where it
 *  stopped.  @p progress may be NULL. */
KVFTS_EXTERN(int) kvfts_optimize(kvfts_db *db, kvfts_merge_fn progress,
                                 void *payload);

/** Flush and checkpoint, removing log files no longer needed. */
KVFTS_EXTERN(int) kvfts_checkpoint(kvfts_db *db);

/* ------------------------------------------------------------------------ */
/* Search                                                                    */

/** Order of search results. */
typedef enum kvfts_sort {
    KVFTS_SORT_SCORE = 0,  /* BM25 score descending, ties by doc age */
    KVFTS_SORT_KEY = 1     /* document key ascending (bytewise) */
} kvfts_sort;

typedef struct kvfts_search_options {
    unsigned version;     /* KVFTS_SEARCH_OPTIONS_VERSION */
    size_t limit;         /* hits to return; 0 = all of them */
    size_t offset;        /* hits to skip first (paging) */
    bool count_only;      /* only count: no scoring, no hits */
    bool keys_only;       /* return keys and scores, not documents */
    kvfts_sort sort;      /* KVFTS_SORT_SCORE or KVFTS_SORT_KEY */
    /* Version 2: bounds on a search's work (README "Huge prefixes").  A
     * prefix may expand to any number of terms; these stop the expansion
     * when it would hold more memory or take longer than allowed, and the
     * time limit also stops the walk that ranks the matches.  Then the
     * answer is what was found (kvfts_results_partial() is true), or
     * KVFTS_ELIMIT with exact.  A count (count_only) is timed in its
     * prefixes' expansion only. */
    size_t mem_limit;     /* bytes an expansion may hold; 0 = 256 MiB */
    unsigned time_limit_ms;   /* time to expand prefixes and rank the
                                 matches; 0 = no limit */
    bool exact;           /* an answer cut by a bound is KVFTS_ELIMIT */
} kvfts_search_options;
#define KVFTS_SEARCH_OPTIONS_VERSION 2
#define KVFTS_SEARCH_OPTIONS_INIT \
    { KVFTS_SEARCH_OPTIONS_VERSION, 10, 0, false, false, KVFTS_SORT_SCORE, \
      0, 0, false }

typedef struct kvfts_results kvfts_results;

/** Run query @p q (syntax in README.md "Query syntax") in one snapshot:
 *  find every matching document, rank them (BM25, or by key), and read the
 *  documents of the requested page in one multi-get.
 *  @param[out] out  caller owns; kvfts_results_free().  NULL on failure.
 *  @param o         NULL for KVFTS_SEARCH_OPTIONS_INIT; version 1 options
 *                   are taken too (no bounds but the default memory one).
 *  @return KVFTS_OK (also when nothing matches: see kvfts_results_total;
 *          and when a bound cut the answer: see kvfts_results_partial),
 *          KVFTS_EINVAL (a bad query: the message names the byte offset,
 *          "query: unbalanced '(' at 7", also in kvfts_errpos(); a phrase
 *          without positions), KVFTS_ELIMIT (a bound reached, with
 *          o->exact), KVFTS_ENOMEM, KVFTS_ECORRUPT, KVFTS_EBUSY,
 *          KVFTS_ERROR. */
KVFTS_EXTERN(int) kvfts_search(kvfts_results **out, kvfts_db *db, const char *q,
                 size_t q_len, const kvfts_search_options *o);

/** The next hit, in rank order.  Every output pointer may be NULL.
 *  @p key_out (NUL-terminated) and @p doc_out (compact JSON, NUL-terminated;
 *  NULL with keys_only) point into @p r and stay valid until
 *  kvfts_results_free(r).  @p score_out is the BM25 score (also with
 *  KVFTS_SORT_KEY).
 *  @return KVFTS_OK, or KVFTS_ITEROVER after the last hit. */
KVFTS_EXTERN(int) kvfts_results_next(kvfts_results *r, const char **key_out,
                       const char **doc_out, size_t *doc_len_out,
                       double *score_out);

/** The exact number of documents matching the query (all pages); when
 *  kvfts_results_partial(), the number found before the bound stopped the
 *  search. */
KVFTS_EXTERN(uint64_t) kvfts_results_total(const kvfts_results *r);

/** True when a memory or time bound (kvfts_search_options) stopped part of
 *  the search: the hits are the best of the matches found, the total
 *  counts those (a prefix cut under a NOT excludes fewer documents). */
KVFTS_EXTERN(bool) kvfts_results_partial(const kvfts_results *r);

/** Hits held by @p r (at most the limit). */
KVFTS_EXTERN(size_t) kvfts_results_count(const kvfts_results *r);

KVFTS_EXTERN(void) kvfts_results_free(kvfts_results *r);      /* NULL: no-op */

#ifdef __cplusplus
}
#endif
#endif /* KVFTS_H */
