/*
 * kv_bdb.c -- the bottom of lib/kv/'s Berkeley DB side: the physical
 * databases (spaces), Berkeley DB's messages (kept per thread), and the
 * translation of its return codes into kvfts's.
 */
#include "kv_int.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The last message Berkeley DB printed in this thread, and the first one
 * about a damaged page: per thread, so that one thread's failure never
 * carries another's message (Berkeley DB calls the error callback in the
 * thread that failed). */
static _Thread_local char tls_bdb_msg[256];
static _Thread_local bool tls_recovered;   /* kv_retry_recovered */
static _Thread_local char tls_corrupt_msg[256];


char *kv__bdb_msg(void)
{
    return tls_bdb_msg;
}

char *kv__corrupt_msg(void)
{
    return tls_corrupt_msg;
}

void kv__bdb_msgs_clear(void)
{
    tls_bdb_msg[0] = tls_corrupt_msg[0] = '\0';
}

/* Pages are 4 KiB, what the kernel writes whole even when the process is
 * killed mid-write(2): Linux stops a buffered write between pages when
 * SIGKILL is pending, and recovery trusts a page whose first 4 KiB (with
 * its LSN) are new.  With 16 KiB pages about one run of e2e.resume (50
 * kills of a load) in three left postings.db damaged after recovery.
 *
 * keys.db is a compressed B-tree (DB->set_bt_compress with Berkeley DB's
 * own prefix compression): a leaf item is a chunk of sorted key records,
 * each stored as the length of the prefix it shares with the one before,
 * the rest of the key and its record (GCIDE's 126,236 keys "word::N":
 * about 11 bytes a key in a chunk, against 28 in a plain B-tree's leaf).
 * Its pages are KV_PAGE too (once Berkeley DB's choice): the chunk size
 * follows from the page size and bt_minkey.  A read
 * finds the chunk through the B-tree and decompresses it from its start
 * to the key; a write decompresses and rewrites the whole chunk.  Chunks
 * are at most the B-tree's overflow size, which bt_minkey sets: 16 keeps
 * them at 117 bytes (about 10 keys).  Berkeley DB's default of 2 makes
 * them 1,007 bytes: with a put per document that made a load 20% slower,
 * and a read of a key decompresses 4x as much.  With 16, kvfts_get of a
 * GCIDE key runs about 9% more instructions than with a plain keys.db
 * (36,000 against 33,000; 8 made it 39,000, for a keys.db 0.14 MB
 * smaller), a read of a missing key 20% more.  A batch stores its key
 * records sorted, in one bulk put (kv_pending_keys in kv_doc.c), which
 * rewrites each chunk it touches once.  GCIDE's keys.db: 1.75 MB, against
 * 7.0 MB plain with a put per document and 4.4 MB plain with the batch's
 * bulk puts.  Only a file created now is made compressed: Berkeley DB
 * reads the flag (and bt_minkey) from the file's meta page, and refuses
 * to open a file made without compression with compression set, so a
 * database made by an earlier version keeps its plain keys.db, in the
 * same format. */
const kv_space_def kv_spaces[KV_NSPACES] = {
    [KV_DOCS] = { "docs.db", "documents", 0, KV_PAGE, 0 },
    [KV_KEYS] = { "keys.db", "document keys", 0, KV_PAGE, 16 },
    [KV_POSTINGS] = { NULL, "postings", 0, KV_PAGE, 0 },
    [KV_LOOKUPS] = { "lookups.db", "lookups", DB_DUPSORT, 0, 0 },
    [KV_COUNTERS] = { "counters.db", "counters", 0, 0, 0 },
    [KV_META] = { "meta.db", "meta", 0, 0, 0 },
    [KV_DOCLENS] = { "doclens.db", "document lengths", 0, 0, 0 },
    [KV_TERMS] = { NULL, "terms", 0, KV_PAGE, 0 },
    [KV_SEGS] = { "segs.db", "segment list", 0, 0, 0 },
};

void kv__inst_mark_dead(bdb_inst *in)
{
    shared_env *sh = in->sh;
    pthread_mutex_lock(&sh->mu);
    in->dead = true;
    pthread_mutex_unlock(&sh->mu);
}

/* How long a write transaction waits for a lock another process holds
 * (kv_env.c sets it; kv__bdb_err names it when it expires). */
unsigned kv__busy_timeout(void)
{
    static atomic_uint cached;      /* 0: not read yet */
    unsigned v = atomic_load(&cached);
    if (v)
        return v;
    v = 30;
    const char *e = getenv("KVFTS_BUSY_TIMEOUT");
    if (e && *e) {
        char *end = NULL;
        errno = 0;
        unsigned long n = strtoul(e, &end, 10);
        /* at most 4000: db_timeout_t is microseconds in 32 bits */
        if (!errno && end && !*end && n > 0 && n <= 4000)
            v = (unsigned)n;
    }
    atomic_store(&cached, v);
    return v;
}

/* ---- closing a database handle ---------------------------------------------- */

/* Handles Berkeley DB would not close: in a panicked environment DB->close
 * returns DB_RUNRECOVERY and frees nothing.  Kept reachable until exit
 * (as kv_env.c keeps panicked instances), not lost: one per handle open
 * in an environment when another process recovered it. */
static pthread_mutex_t lost_mu = PTHREAD_MUTEX_INITIALIZER;
static DB **lost_dbs;                   /* (lost_mu) */
static size_t nlost, lostcap;           /* (lost_mu) */

void kv__db_close(DB *db, u_int32_t flags)
{
    if (!db || KV_BDB(db->dbenv ? db->dbenv->app_private : NULL,
                      db->close(db, flags)) == 0)
        return;
    pthread_mutex_lock(&lost_mu);
    if (nlost == lostcap) {
        size_t cap = lostcap ? lostcap * 2 : 16;
        DB **n = realloc(lost_dbs, cap * sizeof *n);
        if (n) {
            lost_dbs = n;
            lostcap = cap;
        }
    }
    if (nlost < lostcap)
        lost_dbs[nlost++] = db;
    pthread_mutex_unlock(&lost_mu);
}

/* ---- error translation ------------------------------------------------- */

bool kv_retry_recovered(void)
{
    bool r = tls_recovered;
    tls_recovered = false;
    return r;
}

bool kv_retry_next(int rc, int *deadlocks, int *recoveries)
{
    if (rc != KV_RETRY)
        return false;
    int n;
    if (kv_retry_recovered()) {
        n = ++*recoveries;
        if (n >= KV_MAX_RECOVERIES)
            return false;
        n = n < 10 ? n : 10;
    } else {
        n = ++*deadlocks;
        if (n >= KV_MAX_RETRIES)
            return false;
    }
    /* Back off a little, more each time, so the winner can finish. */
    struct timespec ts = { 0, (long)n * 1000000L };
    nanosleep(&ts, NULL);
    return true;
}

/* Messages with which Berkeley DB reports a damaged file.  It then panics
 * the environment, and every later call returns DB_RUNRECOVERY; this tells
 * that panic apart from the one another process's recovery causes. */
static bool is_corruption(const char *msg)
{
    static const char *const signs[] = {
        "illegal page type", "checksum", "corrupt", "bad page",
        "unexpected file type or format"
    };
    for (size_t i = 0; i < sizeof signs / sizeof signs[0]; i++)
        if (strstr(msg, signs[i]))
            return true;
    return false;
}

/* Berkeley DB's informational messages: failchk's "Freeing read locks for
 * locker ..." and "Aborting txn ..." for a dead process, among others.
 * Without a handler Berkeley DB writes them to the process's stdout, into
 * the output of whatever command opened the database after a crash (JSON
 * that no longer parses).  They report cleanup, not errors: dropped. */
void kv__on_bdb_msg(const DB_ENV *dbenv, const char *msg)
{
    (void)dbenv;
    (void)msg;
}

void kv__on_bdb_error(const DB_ENV *dbenv, const char *pfx, const char *msg)
{
    (void)dbenv;
    (void)pfx;
    snprintf(tls_bdb_msg, sizeof tls_bdb_msg, "%s", msg);
    if (!tls_corrupt_msg[0] && is_corruption(msg))
        snprintf(tls_corrupt_msg, sizeof tls_corrupt_msg, "%s", msg);
}

/* "WHAT: not found", copied rather than formatted: not found is an
 * everyday answer (a load asks for each new document's key), and
 * vsnprintf was 0.5% of a load. */
static int not_found(kv_err *err, const char *what)
{
    if (!err)
        return KVFTS_ENOTFOUND;
    static const char tail[] = ": not found";
    size_t n = strlen(what);
    if (n > sizeof err->msg - sizeof tail)
        n = sizeof err->msg - sizeof tail;
    memcpy(err->msg, what, n);
    memcpy(err->msg + n, tail, sizeof tail);
    err->code = KVFTS_ENOTFOUND;
    return KVFTS_ENOTFOUND;
}

/* Translate a Berkeley DB return code; the one place that does.  @p in is
 * the instance the call ran in (NULL before one is open). */
int kv__bdb_err(bdb_inst *in, int ret, kv_err *err, const char *what)
{
    switch (ret) {
    case 0:
        return KVFTS_OK;
    case DB_NOTFOUND:
    case DB_KEYEMPTY:
        return not_found(err, what);
    case DB_LOCK_DEADLOCK:
        return kv_seterr(err, KV_RETRY, "%s: deadlock, retrying", what);
    case DB_LOCK_NOTGRANTED:
        /* No call waits with DB_TXN_NOWAIT/DB_LOCK_NOWAIT: this is a write
         * transaction's lock timeout (DB_TIME_NOTGRANTED), not a deadlock,
         * and it is not retried. */
        return kv_seterr(err, KVFTS_EBUSY, "%s: waited %u s for another "
                         "writer; giving up (KVFTS_BUSY_TIMEOUT)", what,
                         kv__busy_timeout());
    case ENOMEM:
        if (tls_bdb_msg[0]) {   /* which table of the environment */
            kv_seterr(err, KVFTS_ENOMEM, "%s: out of memory (%s)", what,
                      tls_bdb_msg);
            tls_bdb_msg[0] = '\0';
            return KVFTS_ENOMEM;
        }
        return kv_seterr(err, KVFTS_ENOMEM, "%s: out of memory", what);
    case DB_RUNRECOVERY:
        if (in)
            atomic_store(&in->panicked, true);
        /* This thread found a damaged page and Berkeley DB panicked. */
        if (tls_corrupt_msg[0])
            return kv_seterr(err, KVFTS_ECORRUPT, "%s: database file is "
                             "corrupt (%s)", what, tls_corrupt_msg);
        /* Another process recovered the environment (after a crash), or
         * this one's must be: the next transaction opens a new instance
         * and the caller redoes what it was doing. */
        if (in)
            kv__inst_mark_dead(in);
        tls_recovered = true;
        return kv_seterr(err, KV_RETRY, "%s: the environment was recovered "
                         "after a crashed process; retrying", what);
    case DB_VERIFY_BAD:
        return kv_seterr(err, KVFTS_ECORRUPT, "%s: database file is corrupt",
                         what);
    case DB_PAGE_NOTFOUND:   /* a B-tree page names a page past the file */
        return kv_seterr(err, KVFTS_ECORRUPT, "%s: database file is corrupt "
                         "(%s)", what, db_strerror(ret));
    case ENOSPC:
        return kv_seterr(err, KVFTS_ERROR, "%s: no space left on device",
                         what);
    default:
        if (tls_bdb_msg[0]) {
            if (ret != EINVAL)
                kv_seterr(err, KVFTS_ERROR, "%s: %s (%s)", what,
                          db_strerror(ret), tls_bdb_msg);
            else
                kv_seterr(err, KVFTS_ERROR, "%s: %s", what, tls_bdb_msg);
            tls_bdb_msg[0] = '\0';
            return KVFTS_ERROR;
        }
        return kv_seterr(err, KVFTS_ERROR, "%s: %s", what, db_strerror(ret));
    }
}

int kv__db_open(DB_ENV *env, DB *db, const char *file, const char *sub,
                bool exists, bool rdonly)
{
    shared_env *sh = env->app_private;
    DB_TXN *snap = NULL;
    if (exists && KV_BDB(sh, env->txn_begin(env, NULL, &snap,
                                            DB_TXN_SNAPSHOT)) != 0)
        snap = NULL;
    u_int32_t flags = DB_MULTIVERSION | DB_THREAD |
                      (exists ? 0 : DB_CREATE) | (snap ? 0 : DB_AUTO_COMMIT) |
                      (exists && rdonly ? DB_RDONLY : 0);
    int ret = KV_BDB(sh, db->open(db, snap, file, sub, DB_BTREE, flags,
                                  0644));
    /* The open of an existing file changes nothing that must survive a
     * crash: its commit need not flush the log (seven opens cost seven
     * log syncs, a third of a one-document load's).  What it logs (the
     * file's registration) precedes, in the one sequential log, any
     * record that refers to the file, and a durable commit of one flushes
     * it too. */
    if (snap) {
        int cret = ret ? KV_BDB(sh, snap->abort(snap))
                       : KV_BDB(sh, snap->commit(snap, DB_TXN_NOSYNC));
        if (!ret)
            ret = cret;
    }
    return ret;
}

bool kv__grow_inline(void **arr, void *inline_arr, size_t ninline, size_t n,
                     size_t *cap, size_t size)
{
    if (!*arr) {
        *arr = inline_arr;
        *cap = ninline;
    }
    if (n < *cap)
        return true;
    size_t ncap = *cap * 2;
    bool heap = *arr != inline_arr;
    void *v = kv_realloc(heap ? *arr : NULL, ncap * size);
    if (!v)
        return false;
    if (!heap)
        memcpy(v, inline_arr, *cap * size);
    *arr = v;
    *cap = ncap;
    return true;
}

int kv__path_join(char *out, size_t cap, const char *dir, const char *file,
                     kv_err *err)
{
    int n = snprintf(out, cap, "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= cap)
        return kv_seterr(err, KVFTS_EINVAL, "path too long: %s/%s", dir, file);
    return KVFTS_OK;
}

void kv__snapshot_pin(bdb_inst *in, DB_TXN *txn)
{
    DB *db = in->db[KV_META];
    if (!db)
        return;
    DB_MPOOLFILE *mpf = db->get_mpf(db);
    db_pgno_t pg = 0;
    void *page;
    if (mpf && KV_BDB(in->sh, mpf->get(mpf, &pg, txn, 0, &page)) == 0)
        (void)KV_BDB(in->sh, mpf->put(mpf, page, DB_PRIORITY_UNCHANGED, 0));
}

/* A lazy read (kv_txn_run_read) begins its snapshot at its first record
 * read: as kv_txn_begin does, with the stamp loaded before it began.  If
 * gen moved since, a commit may be in the snapshot but not in the stamp:
 * KV_RETRY, and kv_txn_run_read runs the whole read again. */
int kv__txn_live(kv_txn *t, kv_err *err)
{
    if (t->txn)
        return KVFTS_OK;
    bdb_inst *in = t->inst;
    kv__bdb_msg()[0] = '\0';
    int ret = KV_BDB(in->sh, in->env->txn_begin(in->env, NULL, &t->txn,
                                                DB_TXN_SNAPSHOT));
    if (ret) {
        t->txn = NULL;
        return kv__bdb_err(in, ret, err, "begin transaction");
    }
    kv__snapshot_pin(in, t->txn);
    if (atomic_load(t->gen) + 1 != t->stamp)
        return kv_seterr(err, KV_RETRY, "database '%s': a commit landed "
                         "before the read's first record; retrying",
                         t->env->dir);
    return KVFTS_OK;
}
