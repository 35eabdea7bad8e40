/*
 * lib/kv/include/kv.h -- the internal interface of the bottom layer of kvfts ("kv"):
 * errors, allocation, byte buffers, UTF-8 checks, the JSON walker, and the
 * Berkeley DB storage of documents, doc ids, counters, lookups and metadata.
 *
 * Every other module includes only this header from lib/.  Nothing here knows
 * about tokenizing, postings or queries.
 */
#ifndef KVFTS_KV_H
#define KVFTS_KV_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvfts.h"

#define KVFTS_XSTR(x) #x
#define KVFTS_STR(x) KVFTS_XSTR(x)

/* ------------------------------------------------------------------------ */
/* Errors (kv_util.c)                                                        */

#define KV_ERRMSG_MAX 512

/** A fixed buffer for an error, so that reporting one never allocates.
 *  code is a kvfts_status; pos is a byte offset into the input the message
 *  speaks of, or -1. */
typedef struct kv_err {
    int code;
    long long pos;
    char msg[KV_ERRMSG_MAX];
} kv_err;

#define KV_ERR_INIT { 0, -1, "" }

void kv_err_clear(kv_err *err);
/** Set err (if not NULL) to @p code and a formatted message; returns code. */
int kv_seterr(kv_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** Prepend "context: " to the message already in err; returns err->code. */
int kv_err_prefix(kv_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------ */
/* Allocation (kv_util.c).  All of kvfts allocates through these.            */

void *kv_malloc(size_t n);
void *kv_calloc(size_t n, size_t size);
/** kv_calloc() for a table that will be probed (read, then written) at
 *  once: zeroed by writing every byte (see kv_util.c). */
void *kv_calloc_written(size_t n, size_t size);
void *kv_realloc(void *p, size_t n);
void kv_free(void *p);
/** NUL-terminated copy of s[0..n). */
char *kv_strndup(const char *s, size_t n);

/** Start fn(arg) on a new thread *th with every signal blocked (they go to
 *  the process's other threads: a library's helper must not take the
 *  caller's SIGINT); false if no thread could be had. */
bool kv_thread_start(pthread_t *th, void *(*fn)(void *), void *arg);

/** Test hook: make the allocation @p n calls from now (1 = the next) fail,
 *  and every later one until reset; n <= 0 disables.  Per thread. */
void kv_alloc_fail_after(long n);
/** Test hook: make only the allocation @p n calls from now fail. */
void kv_alloc_fail_once(long n);
/** Allocations that were made to fail since the hook was last set. */
long kv_alloc_failures(void);

/* ------------------------------------------------------------------------ */
/* Byte buffers (kv_util.c)                                                  */

/** A growable byte buffer.  data is NUL-terminated whenever len < cap. */
typedef struct kv_buf {
    char *data;
    size_t len;
    size_t cap;
} kv_buf;

#define KV_BUF_INIT { NULL, 0, 0 }

int kv_buf_reserve(kv_buf *b, size_t extra, kv_err *err);
int kv_buf_append(kv_buf *b, const void *p, size_t n, kv_err *err);
int kv_buf_appendf(kv_buf *b, kv_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** Append s as a JSON string literal, quotes included. */
int kv_buf_append_json_str(kv_buf *b, const char *s, size_t n, kv_err *err);
void kv_buf_reset(kv_buf *b);     /* len = 0, keeps memory */
void kv_buf_free(kv_buf *b);      /* frees memory; b is reusable */

/* ------------------------------------------------------------------------ */
/* UTF-8 (kv_util.c)                                                         */

/** Decode the code point at s[i] (i < n) strictly: no overlong forms,
 *  surrogates, or code points past U+10FFFF.  Returns its length in bytes
 *  (1 to 4), or 0 if the bytes there are not well-formed UTF-8.  Inline:
 *  the tokenizer calls it per character. */
static inline size_t kv_utf8_decode(const unsigned char *s, size_t n,
                                    size_t i, uint32_t *out)
{
    unsigned c = s[i];
    if (c < 0x80) {
        *out = c;
        return 1;
    }
    uint32_t cp;
    size_t len;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;          /* stray continuation, C0/C1 overlong, F5..FF */
    }
    if (len > n - i)
        return 0;          /* truncated */
    for (size_t k = 1; k < len; k++) {
        unsigned b = s[i + k];
        if ((b & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (b & 0x3F);
    }
    if (len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)))
        return 0;          /* overlong or surrogate */
    if (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))
        return 0;
    *out = cp;
    return len;
}

/** True if s[0..n) is well-formed UTF-8 (no overlongs, surrogates, or code
 *  points past U+10FFFF).  On false, *bad_at (if not NULL) is the offset of
 *  the first bad byte. */
bool kv_utf8_valid(const char *s, size_t n, size_t *bad_at);

/** 64-bit big-endian encoding helpers (keys sort numerically). */
void kv_put_be64(unsigned char *p, uint64_t v);
uint64_t kv_get_be64(const unsigned char *p);
void kv_put_be32(unsigned char *p, uint32_t v);
uint32_t kv_get_be32(const unsigned char *p);

/* ------------------------------------------------------------------------ */
/* JSON walker (kv_json.c)                                                   */

typedef enum kv_json_type {
    KV_JSON_STRING = 1,   /* value: the decoded UTF-8 string */
    KV_JSON_NUMBER,       /* value: the number's text as written */
    KV_JSON_BOOL,         /* value: "true" or "false" */
    KV_JSON_NULL          /* value: "null" */
} kv_json_type;

/** Called for every scalar of a document, in document order.  @p path is the
 *  dotted path of object keys leading to it ("address.city"); an array adds
 *  nothing to the path, so array elements are reported under the array's
 *  path.  @p path and @p value live only during the call.  @p pos is the byte
 *  offset just past the value in the input.  A non-zero return stops the walk
 *  and is returned by kv_json_walk() (set err yourself). */
typedef int (*kv_json_leaf_fn)(void *payload, const char *path, size_t path_len,
                               kv_json_type type, const char *value,
                               size_t value_len, size_t pos);

/** Validate a JSON document in one streaming pass (YAJL): it must be one
 *  object, well-formed, UTF-8, at most KVFTS_MAX_DOC bytes and
 *  KVFTS_MAX_DEPTH deep.  If @p compact is not NULL, the compact form is
 *  appended to it.  If @p leaf is not NULL it is called for each scalar.
 *  @return KVFTS_OK, KVFTS_EINVAL (err->pos = byte offset of the problem,
 *          message "invalid JSON at byte N: reason"), KVFTS_ENOMEM, or what
 *          @p leaf returned. */
int kv_json_walk(const char *json, size_t len, kv_buf *compact,
                 kv_json_leaf_fn leaf, void *payload, kv_err *err);

/** A document's leaves as a kv_json_walk() reported them, kept in a buffer
 *  so that a second reader (the analysis, in another thread) takes them
 *  without parsing the JSON again: append one leaf to @p out. */
int kv_leaves_add(kv_buf *out, const char *path, size_t path_len,
                  kv_json_type type, const char *value, size_t value_len,
                  size_t pos, kv_err *err);
/** Call @p leaf for each leaf of @p buf (kv_leaves_add()'s), in order, as
 *  kv_json_walk() did (path and value NUL-terminated).  @return KVFTS_OK,
 *  what @p leaf returned, or KVFTS_ECORRUPT for a damaged buffer. */
int kv_leaves_walk(const char *buf, size_t len, kv_json_leaf_fn leaf,
                   void *payload, kv_err *err);

/* ------------------------------------------------------------------------ */
/* Storage (kv_store.c): one Berkeley DB transactional environment.          */

/** The physical databases inside the one environment.  Logical keys (what
 *  users and tools see) map onto them as described in kv_store.c. */
typedef enum kv_space {
    KV_DOCS = 0,    /* be32 internal id -> doc record: CAS, key, JSON */
    KV_KEYS,        /* user key -> key record: internal id (kv_doc.c) */
    KV_POSTINGS,    /* index/ owns the format: segments' postings blocks */
    KV_LOOKUPS,     /* "NAME::VALUE" -> user key, sorted duplicates */
    KV_COUNTERS,    /* NAME -> be64 two's-complement value */
    KV_META,        /* NAME -> bytes (config, sequences, statistics) */
    KV_DOCLENS,     /* index/ owns the format: be32 id -> field lengths */
    KV_TERMS,       /* index/ owns the format: segments' term dictionaries */
    KV_SEGS,        /* index/ owns the format: the segment list, the merge
                       under way, the files to remove, the segment ids'
                       sequence.  Apart from KV_META so that a merge never
                       waits for a batch's locks on meta.db's pages */
    KV_NSPACES
} kv_space;

typedef struct kv_env kv_env;
typedef struct kv_txn kv_txn;
typedef struct kv_cursor kv_cursor;

typedef struct kv_env_options {
    bool create;
    bool read_only;
    size_t cache_bytes;    /* 0 = default */
} kv_env_options;

int kv_env_open(kv_env **out, const char *dir, const kv_env_options *o,
                kv_err *err);
void kv_env_close(kv_env *env);
bool kv_env_read_only(const kv_env *env);
const char *kv_env_dir(const kv_env *env);
/** Flush the log, checkpoint, remove logs no longer needed. */
int kv_env_checkpoint(kv_env *env, kv_err *err);
/** Bytes written to the transaction log by this environment since it was
 *  opened (all processes): the cost of writes, for benchmarks. */
int kv_env_log_bytes(kv_env *env, uint64_t *out, kv_err *err);
/** Sizes of database files and log files in the directory. */
int kv_env_sizes(kv_env *env, uint64_t *db_bytes, uint64_t *log_bytes,
                 kv_err *err);

/** If a checkpoint failed after a commit of this handle succeeded (the disk
 *  filled), copy its message into @p buf and clear it; false if none.  A
 *  write's status is its commit's: a failed checkpoint is reported apart. */
bool kv_env_take_warning(kv_env *env, char *buf, size_t cap);
/** Test hook: in this thread, checkpoints fail as a full disk would make
 *  them: those after commits, and the one a process makes as it closes the
 *  database (the last process then leaves the regions for a recovery). */
void kv_test_fail_checkpoints(bool on);
/** Test hook: in this thread, the process kills itself (SIGKILL) in the
 *  next write commit, after counting it in the commit stamps and before
 *  Berkeley DB commits it. */
void kv_test_die_in_commit(bool on);
/** Test hook: in this thread, the next read transaction calls fn(arg) once
 *  its stamp is set and before kv_txn_begin returns: where a commit of
 *  another handle must not change what the transaction reads. */
void kv_test_after_stamp(void (*fn)(void *), void *arg);
/** Test hook: in this thread, files created are made as earlier versions
 *  made them (keys.db a plain B-tree). */
void kv_test_plain_files(bool on);
/** Test hook: space @p s of environments this process opens from now on
 *  compares keys through a function that kills the process (SIGKILL) at
 *  its @p n th call from now: inside Berkeley DB, holding a page latch.
 *  n = 0: it only compares. */
void kv_test_die_in_compare(kv_space s, int n);
/** Test hook: with kv_test_die_in_compare's function in place, its next
 *  call writes one byte to @p fd and then sleeps @p ms milliseconds:
 *  a thread inside a Berkeley DB call, for that long. */
void kv_test_sleep_in_compare(int fd, int ms);
/** Test hook: in this thread, a recovery kills the process (SIGKILL) once
 *  Berkeley DB's recovery has run and before it is marked done. */
void kv_test_die_after_recovery(bool on);
/** Test hook: recoveries this process has run to the end. */
int kv_test_recoveries(void);
/** Test hook: take and keep the lock Berkeley DB takes around every open
 *  of a database file (its environment's "meta-data lock": a write lock on
 *  the 4-byte object 1), as a process killed inside DB->open holds it. */
int kv_test_hold_open_lock(kv_env *env, kv_err *err);
/** Whether Berkeley DB's waits in this process end when they wait for a
 *  dead process (lib/kv/kv_stall.c): false only where that is not built
 *  (ThreadSanitizer). */
bool kv_stall_guarded(void);

/** Begin a transaction: a write transaction, or a snapshot read (readers
 *  never wait for writers). */
int kv_txn_begin(kv_txn **out, kv_env *env, bool write, kv_err *err);
/** The environment @p txn began in (another thread may begin its own
 *  transactions there, one at a time per environment handle). */
kv_env *kv_txn_env(const kv_txn *txn);
/** Commit durably; frees the transaction whatever happens. */
int kv_txn_commit(kv_txn *txn, kv_err *err);
/** Abort; NULL is a no-op. */
void kv_txn_abort(kv_txn *txn);
/** Write the cache's dirty pages to their files now (no sync), so that the
 *  checkpoint after the commit finds little left to write: a writer calls
 *  it while other threads are still busy with its transaction's work.
 *  Best effort: a failure is left to that checkpoint to report. */
void kv_txn_trickle(kv_txn *txn);

/** Status kv functions return when Berkeley DB chose this transaction as a
 *  deadlock victim: the caller must abort and may retry.  Never leaves kv
 *  through kv_txn_run(). */
#define KV_RETRY (-100)
/** Whether the last KV_RETRY this thread got meant that the environment was
 *  recovered (a process died inside Berkeley DB), not a deadlock; reading
 *  it clears it.  A storm of killed processes may force one recovery each:
 *  retries after them are counted apart (kv_retry_next). */
bool kv_retry_recovered(void);
/** The retry policy of every loop that runs a transaction again: after
 *  @p rc (KV_RETRY), whether to run it again, counting deadlocks in
 *  @p deadlocks (up to KV_MAX_RETRIES) and recoveries in @p recoveries (up
 *  to KV_MAX_RECOVERIES), and sleeping a little, more each time. */
#define KV_MAX_RETRIES 50
#define KV_MAX_RECOVERIES 1000
bool kv_retry_next(int rc, int *deadlocks, int *recoveries);

/** Run @p fn in a transaction, committing if it returns KVFTS_OK and aborting
 *  otherwise; on a deadlock (KV_RETRY) abort and run it again, up to a bound,
 *  then KVFTS_EBUSY.  This is the one place write transactions commit
 *  (replication acknowledgements belong here). */
typedef int (*kv_txn_fn)(kv_txn *txn, void *payload, kv_err *err);
int kv_txn_run(kv_env *env, bool write, kv_txn_fn fn, void *payload,
               kv_err *err);
/** As kv_txn_run() for a read, whose Berkeley DB transaction begins only
 *  at its first read of a record: a read answered from the handle's
 *  caches kept by stamp (kv_txn_stamp) never begins one, and costs no
 *  lock, mutex or page of the environment.  The stamp is set when @p fn
 *  starts; if a commit lands before the first record read, that read
 *  returns KV_RETRY and @p fn runs again in an ordinary snapshot. */
int kv_txn_run_read(kv_env *env, kv_txn_fn fn, void *payload, kv_err *err);

/** Read @p key from @p space into @p val (replacing its contents).
 *  for_update takes a write lock at once (read-modify-write).
 *  @return KVFTS_OK, KVFTS_ENOTFOUND, KV_RETRY, KVFTS_ERROR. */
int kv_get(kv_txn *txn, kv_space space, const void *key, size_t klen,
           kv_buf *val, bool for_update, kv_err *err);
/** A slot in @p txn's handle for per-handle state of the file that owns it
 *  (kv_doc.c's document codec); kv_env_close() frees what it holds with
 *  @p slot_free. */
void **kv_txn_slot(kv_txn *txn, void (*slot_free)(void *));
/** A number that tells @p txn apart from every other transaction of its
 *  handle (they count up from 1). */
uint64_t kv_txn_serial(const kv_txn *txn);
/** The commit stamp of read transaction @p txn: two read transactions of
 *  one directory with the same nonzero stamp see the same committed state
 *  (no write transaction of any process committed between them), so what
 *  a handle read in one holds for the other.  0 when that cannot be told
 *  (a write transaction, a commit under way when it began, a process that
 *  died in one, no shared page in the registry). */
uint64_t kv_txn_stamp(const kv_txn *txn);
/** As kv_get(), but only the first @p head bytes of the value (fewer if it
 *  is shorter); for reading a record's header without its body. */
int kv_get_head(kv_txn *txn, kv_space space, const void *key, size_t klen,
                size_t head, kv_buf *val, kv_err *err);
/** Store key -> val (replacing; in KV_LOOKUPS, adding a duplicate). */
int kv_put(kv_txn *txn, kv_space space, const void *key, size_t klen,
           const void *val, size_t vlen, kv_err *err);
/** One record of kv_put_sorted(). */
typedef struct kv_rec {
    const void *key;
    size_t klen;
    const void *val;
    size_t vlen;
} kv_rec;
/** kv_put() of @p n records at once (Berkeley DB's bulk put,
 *  DB_MULTIPLE_KEY), in ascending key order (memcmp), no key twice; not for
 *  KV_LOOKUPS or the partitioned spaces.  In a compressed B-tree the run is
 *  merged into the chunks it falls among in one pass. */
int kv_put_sorted(kv_txn *txn, kv_space space, const kv_rec *v, size_t n,
                  kv_err *err);
/** Delete key (all its duplicates).  @return KVFTS_OK or KVFTS_ENOTFOUND. */
int kv_del(kv_txn *txn, kv_space space, const void *key, size_t klen,
           kv_err *err);
/** Delete every record whose key begins with @p prefix (plen 0: all of
 *  the space; a partitioned space needs the 4-byte segment id). */
int kv_del_prefix(kv_txn *txn, kv_space space, const void *prefix,
                  size_t plen, kv_err *err);
/** KV_LOOKUPS only: delete the one pair key -> val. */
int kv_del_pair(kv_txn *txn, kv_space space, const void *key, size_t klen,
                const void *val, size_t vlen, kv_err *err);
/** KV_TERMS and KV_POSTINGS are partitioned: every key begins with a be32
 *  segment id.  A segment whose id has KV_PART_OWN set is a file of its
 *  own (kv_part.c), removed whole; the others, small, share one file
 *  (partition 0), and their records are deleted one by one.  A cursor of
 *  these spaces stays in the file of the key it was last positioned with:
 *  it needs a key of 4 bytes or more, and next, prev and last stop at that
 *  file's ends.  kv_walk() and kv_count() go through every file, in
 *  partition order. */
#define KV_PART_OWN 0x80000000u

/** Remove segment @p id's file (KV_PART_OWN set): KVFTS_EBUSY while a transaction or a
 *  handle of any process uses it (try again later), KVFTS_OK if it is
 *  gone (or was). */
int kv_part_remove(kv_env *env, uint32_t id, kv_err *err);
/** Writing a segment file that @p txn makes from another thread.  The
 *  records of a file being made go outside the transaction (kv_part.c), so
 *  another thread may put them while @p txn's own goes on with other
 *  spaces.  kv_partw_open (on @p txn's thread) makes the file of segment
 *  @p id (KV_PART_OWN set) if @p txn has not yet; *out is NULL, and the
 *  records must go through kv_put(), when the file is not one @p txn makes
 *  (it exists, or is the shared one).  kv_partw_put() (KV_TERMS or
 *  KV_POSTINGS, keys of segment @p id) from one thread at a time, until
 *  @p txn commits or aborts; kv_partw_free() any time after the last. */
typedef struct kv_partw kv_partw;
int kv_partw_open(kv_partw **out, kv_txn *txn, uint32_t id, kv_err *err);
int kv_partw_put(kv_partw *w, kv_space space, const void *key, size_t klen,
                 const void *val, size_t vlen, kv_err *err);
/** Write the file's pages so far to disk (the commit then has only the
 *  rest to write), from the thread that puts. */
int kv_partw_sync(kv_partw *w, kv_err *err);
void kv_partw_free(kv_partw *w);
/** The segment files present in @p txn's directory, in id order (0: the
 *  shared one; kv_free() *ids).  The directory as it is now, not as of
 *  the transaction's snapshot. */
int kv_parts_list(kv_txn *txn, uint32_t **ids, size_t *n, kv_err *err);
/** The segments listed now are @p ids: close this process's idle handles
 *  of every other segment file, so that a merge can remove it. */
void kv_parts_retain(kv_txn *txn, const uint32_t *ids, size_t n);

/** Number of records in a space (walks it; for stats and tests). */
int kv_count(kv_txn *txn, kv_space space, uint64_t *out, kv_err *err);

/** Call @p fn on every record of a space in key order, read in bulk inside
 *  @p txn (no page locks of its own, so a snapshot reader never waits for
 *  a writer).  A non-zero return from @p fn stops the walk and is
 *  returned.  Key and value are borrowed for the call. */
typedef int (*kv_walk_fn)(void *payload, const char *key, size_t klen,
                          const char *val, size_t vlen, kv_err *err);
int kv_walk(kv_txn *txn, kv_space space, kv_walk_fn fn, void *payload,
            kv_err *err);

/** Cursor over a space, in key order (duplicates in value order). */
int kv_cursor_open(kv_cursor **out, kv_txn *txn, kv_space space, kv_err *err);
void kv_cursor_close(kv_cursor *c);
/** Position at the first key >= key (klen 0: the first key).
 *  @return KVFTS_OK, KVFTS_ITEROVER, KV_RETRY, KVFTS_ERROR. */
int kv_cursor_seek(kv_cursor *c, const void *key, size_t klen, kv_err *err);
/** Position at the last key <= key (KVFTS_ITEROVER if none), reading
 *  the value of that record only (not of the next one, as a seek then a
 *  prev would).  A partitioned cursor goes no further back than the start
 *  of the key's file, and no further on than its end. */
int kv_cursor_seek_floor(kv_cursor *c, const void *key, size_t klen,
                         kv_err *err);
/** Position at the next record. */
int kv_cursor_next(kv_cursor *c, kv_err *err);
/** The next record's key alone (kv_cursor_val() is then empty): none of
 *  its value is read, nor its overflow pages. */
int kv_cursor_next_key(kv_cursor *c, kv_err *err);
/** Position at the first duplicate of exactly @p key. */
int kv_cursor_seek_exact(kv_cursor *c, const void *key, size_t klen,
                         kv_err *err);
/** Position at the previous record. */
int kv_cursor_prev(kv_cursor *c, kv_err *err);
/** Position at the last record of the space. */
int kv_cursor_last(kv_cursor *c, kv_err *err);
/** Position at the next duplicate of the current key. */
int kv_cursor_next_dup(kv_cursor *c, kv_err *err);
/** The current record; borrowed, valid until the cursor moves. */
void kv_cursor_key(const kv_cursor *c, const char **key, size_t *klen);
void kv_cursor_val(const kv_cursor *c, const char **val, size_t *vlen);
/** Delete the current record. */
int kv_cursor_del(kv_cursor *c, kv_err *err);

/** Many records in one call (Berkeley DB's bulk get): a copy of the records
 *  from the first key >= @p key (or, @p key NULL, of those after the last
 *  record the cursor returned), as many as fit a buffer of 16 KiB or more
 *  (grown for a record that does not fit).  Walk them with kv_bulk_next().
 *  @return KVFTS_OK, KVFTS_ITEROVER, KV_RETRY, KVFTS_ERROR. */
typedef struct kv_bulk {
    kv_buf buf;
    size_t size;          /* bytes handed to Berkeley DB */
    void *it;             /* iterator inside buf; NULL: walked */
} kv_bulk;

#define KV_BULK_INIT { KV_BUF_INIT, 0, NULL }

int kv_cursor_bulk(kv_cursor *c, const void *key, size_t klen, kv_bulk *b,
                   kv_err *err);
/** The next record of @p b (borrowed from it); false after the last. */
bool kv_bulk_next(kv_bulk *b, const char **key, size_t *klen,
                  const char **val, size_t *vlen);
void kv_bulk_free(kv_bulk *b);

/* ------------------------------------------------------------------------ */
/* Keys (kv_doc.c)                                                           */

/** The reserved logical prefixes; no document key may start with them. */
#define KV_PREFIX_FTS "fts::"
#define KV_PREFIX_COUNT "count::"
#define KV_PREFIX_META "meta::"
#define KV_SEP "::"

/** Check a document key: UTF-8, 1..KVFTS_MAX_KEY bytes, no control
 *  characters, not under a reserved prefix or a declared lookup name. */
int kv_key_check(const char *key, size_t klen, const char *const *lookups,
                 size_t nlookups, kv_err *err);

/** Check a counter or lookup name: 1..128 bytes of [A-Za-z0-9_.-:] not
 *  starting or ending with ':'. */
int kv_name_check(const char *what, const char *name, size_t nlen,
                  kv_err *err);

/* ------------------------------------------------------------------------ */
/* Documents (kv_doc.c)                                                      */

/** A stored document record. */
typedef struct kv_doc {
    uint64_t cas;        /* changes on every write, never 0 */
    uint32_t docid;      /* dense internal id, never 0 */
    const char *key;     /* the user key (not NUL-terminated) and */
    size_t key_len;
    const char *json;    /* compact JSON; both point into the kv_buf read */
    size_t json_len;     /* into */
} kv_doc;


/** Read the document at key into @p buf and decode it into @p out.
 *  @return KVFTS_OK, KVFTS_ENOTFOUND, KVFTS_ECORRUPT, KV_RETRY, ... */
int kv_doc_get(kv_txn *txn, const char *key, size_t klen, kv_buf *buf,
               kv_doc *out, bool for_update, kv_err *err);
/** kv_doc_get() of @p key whose key record names @p docid (read with
 *  kv_key_docid()): the document record, checked to be @p key's. */
int kv_doc_get_keyed(kv_txn *txn, const char *key, size_t klen,
                     uint32_t docid, kv_buf *buf, kv_doc *out,
                     bool for_update, kv_err *err);
/** Read the document of internal id @p docid (one B-tree read).
 *  @return KVFTS_OK, KVFTS_ENOTFOUND, KVFTS_ECORRUPT, KV_RETRY, ... */
int kv_doc_get_id(kv_txn *txn, uint32_t docid, kv_buf *buf, kv_doc *out,
                  kv_err *err);
/** Called per stored document by kv_doc_scan(); @p key and @p doc live only
 *  during the call.  A non-zero return stops the scan and is returned. */
typedef int (*kv_doc_fn)(void *payload, const char *key, size_t klen,
                         const kv_doc *doc, kv_err *err);
/** Visit every document in internal-id order, in @p txn. */
int kv_doc_scan(kv_txn *txn, kv_doc_fn fn, void *payload, kv_err *err);
/** The internal id the key record of @p key names (KVFTS_ENOTFOUND if
 *  there is none). */
int kv_key_docid(kv_txn *txn, const char *key, size_t klen, uint32_t *out,
                 bool for_update, kv_err *err);
/** Store a document record (and its key record when @p new_id). */
int kv_doc_put(kv_txn *txn, const char *key, size_t klen, const kv_doc *doc,
               bool new_id, kv_err *err);
/** How a document record is compressed: read on the writing thread (it may
 *  train and store the database's dictionary), then used by any thread to
 *  encode the record (kv_doc_encode()) until the transaction ends. */
typedef struct kv_doc_coder {
    void *cdict;           /* zstd dictionary, or NULL */
    bool compress;         /* long enough to try */
} kv_doc_coder;
int kv_doc_coder_get(kv_txn *txn, const char *json, size_t len,
                     kv_doc_coder *out, kv_err *err);
/** One thread's compression context (made by kv_doc_encode()). */
typedef struct kv_doc_cctx kv_doc_cctx;
void kv_doc_cctx_free(kv_doc_cctx *x);          /* NULL: no-op */
/** The document record of (key, cas, json) into @p out: touches no
 *  database, so any thread may call it with its own @p cx. */
int kv_doc_encode(kv_doc_cctx **cx, const kv_doc_coder *cd, const char *key,
                  size_t klen, uint64_t cas, const char *json, size_t len,
                  kv_buf *out, kv_err *err);
/** Store an encoded document record under @p docid. */
int kv_doc_put_record(kv_txn *txn, uint32_t docid, const char *rec,
                      size_t len, kv_err *err);
/** Store document @p doc again, unchanged but for its CAS, now @p cas:
 *  @p doc and @p buf as a read (kv_doc_get_keyed()) left them; its record
 *  goes back as it was stored (nothing compressed again), with the new CAS
 *  written into @p buf. */
int kv_doc_put_recas(kv_txn *txn, const kv_doc *doc, kv_buf *buf,
                     uint64_t cas, kv_err *err);
/** Store the key record of @p key -> @p docid. */
int kv_key_put(kv_txn *txn, const char *key, size_t klen, uint32_t docid,
               kv_err *err);
/** Key records of new documents held back to be stored together (a
 *  batch's, until its index buffer is written): sorted, in one bulk put
 *  (kv_put_sorted()), instead of one B-tree insert per document in the
 *  order the documents come.  Keys in file order land all over the B-tree
 *  ("word::10" sorts before "word::2"), and the pages they split stay half
 *  empty; sorted, a load into an empty keys.db appends at the B-tree's
 *  right edge, whose pages Berkeley DB leaves full (GCIDE's plain keys.db:
 *  7.0 MB before, 4.4 MB).  In a compressed keys.db (kv_bdb.c) an insert
 *  rewrites a chunk of keys; the bulk put rewrites each chunk it touches
 *  once.  While a key is held here it is not in KV_KEYS: a writer asks
 *  kv_pending_key_has() first, and stores the held keys before it reads
 *  that key again. */
typedef struct kv_pending_keys {
    kv_buf arena;          /* per key: u8 length, the key, its key record */
    uint32_t *slot;        /* hash set: arena offset + 1, 0 = empty */
    size_t nslots;         /* a power of two, or 0 */
    size_t n;              /* keys held */
} kv_pending_keys;
#define KV_PENDING_KEYS_INIT { KV_BUF_INIT, NULL, 0, 0 }
/** Hold the key record @p key -> @p docid; @p key must not be held. */
int kv_pending_key_add(kv_pending_keys *p, const char *key, size_t klen,
                       uint32_t docid, kv_err *err);
bool kv_pending_key_has(const kv_pending_keys *p, const char *key,
                        size_t klen);
/** Store the held key records in @p txn, in key order, and empty @p p
 *  (kept as it was on failure: the caller aborts the transaction and
 *  resets it). */
int kv_pending_keys_store(kv_pending_keys *p, kv_txn *txn, kv_err *err);
/** Forget the held keys (their transaction aborted); keeps the memory. */
void kv_pending_keys_reset(kv_pending_keys *p);
void kv_pending_keys_free(kv_pending_keys *p);
/** Delete the document record and its key record. */
int kv_doc_del(kv_txn *txn, const char *key, size_t klen, uint32_t docid,
               kv_err *err);
/** Key of internal id @p docid (into buf, NUL-terminated); reads only the
 *  head of the document record. */
int kv_docid_key(kv_txn *txn, uint32_t docid, kv_buf *buf, kv_err *err);

/** Next value of a 64-bit sequence kept in KV_META under @p name (first 1):
 *  larger than every value handed out before, in this transaction or any
 *  committed one (a transaction reserves runs of values: there are gaps). */
int kv_seq_next(kv_txn *txn, const char *name, uint64_t *out, kv_err *err);
/** kv_seq_next(), at most @p max: KVFTS_EINVAL "sequence NAME exhausted"
 *  past it. */
int kv_seq_next_max(kv_txn *txn, const char *name, uint64_t max,
                    uint64_t *out, kv_err *err);
/** Whether kv_seq_next_max(@p max) would give a value (changes nothing). */
int kv_seq_room(kv_txn *txn, const char *name, uint64_t max, bool *room,
                kv_err *err);
/** The last value handed out by sequence @p name (0 if none yet). */
int kv_seq_get(kv_txn *txn, const char *name, bool for_update, uint64_t *out,
               kv_err *err);
/** kv_seq_next_max() and kv_seq_get() of a sequence kept in @p space
 *  (the others keep theirs in KV_META): same record, "seq::NAME". */
int kv_seq_next_in(kv_txn *txn, kv_space space, const char *name,
                   uint64_t max, uint64_t *out, kv_err *err);
int kv_seq_get_in(kv_txn *txn, kv_space space, const char *name,
                  bool for_update, uint64_t *out, kv_err *err);
/** Reserve @p n values of a sequence at once: *first .. *first + n - 1. */
int kv_seq_reserve(kv_txn *txn, const char *name, uint64_t n, uint64_t *first,
                   kv_err *err);

/* ------------------------------------------------------------------------ */
/* Counters (kv_doc.c)                                                       */

int kv_counter_get(kv_txn *txn, const char *name, size_t nlen, int64_t *out,
                   bool for_update, kv_err *err);
int kv_counter_incr(kv_txn *txn, const char *name, size_t nlen, int64_t delta,
                    const int64_t *initial, int64_t *out, kv_err *err);

/* ------------------------------------------------------------------------ */
/* Configuration (kv_config.c)                                               */

#define KV_MAX_LOOKUPS 64
#define KV_MAX_LOOKUP_VALUE 1024

typedef struct kv_lookup_def {
    char *name;      /* "customer_ref" */
    char *path;      /* dotted path in the document, "customer_id" */
    bool unique;
} kv_lookup_def;

/** The parsed configuration.  Sections that belong to other modules (e.g.
 *  "fields" for tokenizer/) are kept as raw JSON in the stored config and
 *  parsed by those modules. */
typedef struct kv_config {
    kv_lookup_def lookups[KV_MAX_LOOKUPS];
    size_t nlookups;
    const char *lookup_names[KV_MAX_LOOKUPS];  /* views of lookups[i].name */
} kv_config;

/** Parse and check @p json into @p out (cleared first).  Unknown top-level
 *  keys are refused, naming the valid ones. */
int kv_config_parse(kv_config *out, const char *json, size_t len, kv_err *err);
void kv_config_clear(kv_config *c);
const kv_lookup_def *kv_config_lookup(const kv_config *c, const char *name,
                                      size_t nlen);

/* ------------------------------------------------------------------------ */
/* Lookups (kv_lookup.c)                                                     */

/** The lookup values a document produces: (lookup index, value) pairs, with
 *  duplicates removed.  Collected with kv_lookup_collect(). */
typedef struct kv_lookup_vals {
    kv_buf keys;        /* "NAME::VALUE\0" records back to back */
    size_t n;
    size_t *offs;       /* start of each record in keys.data */
    unsigned char *uniq;/* 1 if that lookup is unique */
    size_t cap;
} kv_lookup_vals;

/** Collect the lookup values of compact JSON @p json under @p cfg into @p out
 *  (reset first). */
int kv_lookup_collect(kv_lookup_vals *out, const kv_config *cfg,
                      const char *json, size_t len, kv_err *err);
void kv_lookup_vals_free(kv_lookup_vals *v);

/** Move the lookups of document @p key from @p old_vals (may be NULL) to
 *  @p new_vals (may be NULL): checks every unique constraint first, and only
 *  if all hold, deletes the old pairs and adds the new.
 *  @return KVFTS_OK, KVFTS_EEXISTS (a unique value is taken by another key;
 *          nothing changed), KV_RETRY, KVFTS_ERROR. */
int kv_lookup_update(kv_txn *txn, const char *key, size_t klen,
                     const kv_lookup_vals *old_vals,
                     const kv_lookup_vals *new_vals, kv_err *err);

/** Append the keys of lookup entry "NAME::VALUE" to @p keys as
 *  NUL-terminated strings; *n = how many.  KVFTS_ENOTFOUND if none. */
int kv_lookup_refs(kv_txn *txn, const char *lkey, size_t lklen, kv_buf *keys,
                   size_t *n, kv_err *err);

#endif /* KVFTS_KV_H */
