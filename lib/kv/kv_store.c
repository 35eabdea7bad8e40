/*
 * kv_store.c -- the Berkeley DB 5.3 environment of a kvfts database, and the
 * only file that talks to Berkeley DB.  It owns opening (with recovery),
 * transactions (the one place they commit), deadlock handling, checkpoints
 * and log removal, and the translation of Berkeley DB's codes into kvfts's.
 *
 * Directory layout (one environment, "beside" each other):
 *
 *   DIR/keys.db       B-tree  user key            -> key record: doc id
 *   DIR/docs.db       B-tree  be32 internal id    -> doc record: CAS, key,
 *                                                    JSON (both in kv_doc.c)
 *   DIR/postings.db   B-tree  index/ owns keys and values
 *   DIR/lookups.db    B-tree, sorted duplicates:  "NAME::VALUE" -> user key
 *   DIR/counters.db   B-tree  NAME                -> be64 two's complement
 *   DIR/meta.db       B-tree  NAME                -> bytes; "format" = "kvfts 2"
 *   DIR/doclens.db    B-tree  index/ owns: be32 id -> field lengths
 *   DIR/__db.*, DIR/log.*     Berkeley DB regions and the transaction log
 *
 * The logical keys users see (DESIGN.md §2: "count::user", "meta::config",
 * "customer_ref::12345", "fts::_all::fox") map onto these files by prefix.
 *
 * Environment: DB_INIT_TXN|LOCK|LOG|MPOOL; DB_REGISTER|DB_RECOVER, so the
 * first process to open after a crash runs recovery, and processes that open
 * a healthy environment do not disturb the ones already in it.  Every
 * database is opened DB_MULTIVERSION, and readers use DB_TXN_SNAPSHOT
 * transactions: a reader never waits for a writer (a bulk load holds write
 * locks for a whole batch) and never sees half a transaction.  Deadlocks are
 * detected on every lock conflict (DB_LOCK_DEFAULT); the victim's operation
 * returns KV_RETRY, and kv_txn_run() aborts and retries the whole
 * transaction.  Commits are synchronous (the log is flushed), so a crash
 * loses no committed write.  After commits, a checkpoint runs once every
 * CHECKPOINT_KB of log, and DB_LOG_AUTO_REMOVE deletes log files no longer
 * needed for recovery, so the log does not grow without bound.
 *
 * One environment per directory per process: DB_REGISTER tracks processes
 * with fcntl() locks, which POSIX drops for the whole process when any
 * descriptor of the file is closed, so a second DB_ENV on the same directory
 * in one process would make other processes believe we crashed and run
 * recovery under us.  As SQLite does for its POSIX locks, handles of one
 * process share one DB_ENV (opened DB_THREAD) through a reference-counted
 * table keyed by the directory's device and inode, guarded by a mutex.  This
 * is the only process-wide state in kvfts.  kv_env is the per-handle view.
 *
 * Memory: DBTs are DB_DBT_USERMEM over kv_buf buffers, grown and retried on
 * DB_BUFFER_SMALL; no memory owned by Berkeley DB leaves this file.
 */
/* db.h uses the BSD types u_int and u_long. */
#define _DEFAULT_SOURCE
#include "kv.h"

#include <db.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#define DEFAULT_CACHE (64u * 1024u * 1024u)
#define CHECKPOINT_KB 16384        /* checkpoint after this much log */
#define MAX_RETRIES 50
#define FORMAT_KEY "format"
#define FORMAT_VAL "kvfts 2"
#define RESERVE_MB 32u             /* kept free for reopening, recovery */
#define OPEN_MB 4u                 /* free space an open needs */

/* One open environment, shared by the handles of this process. */
typedef struct shared_env {
    DB_ENV *env;
    DB *db[KV_NSPACES];
    dev_t dev;                   /* identity of the directory */
    ino_t ino;
    int refs;                    /* kv_env handles using it */
    uint64_t cache;              /* the environment's cache, bytes */
    bool wrote;                  /* a write committed: checkpoint at close */
    struct shared_env *next;
    char bdb_msg[256];           /* last message Berkeley DB printed */
    char corrupt_msg[256];       /* first message about a damaged page */
} shared_env;

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_env *shared_list;  /* guarded by shared_mu */

struct kv_env {
    shared_env *sh;
    DB_ENV *env;                 /* sh->env */
    DB **db;                     /* sh->db */
    char *dir;
    bool read_only;
    void *slot;                  /* a layer above's per-handle state */
    void (*slot_free)(void *);   /* and how to free it */
    uint64_t txns;               /* transactions begun: serial numbers */
};

struct kv_txn {
    kv_env *env;
    DB_TXN *txn;
    bool write;
    uint64_t serial;             /* this handle's n-th transaction */
};

struct kv_cursor {
    kv_txn *txn;
    DBC *dbc;
    kv_space space;
    kv_buf key;
    kv_buf val;
};

/* Pages are 4 KiB, what the kernel writes whole even when the process is
 * killed mid-write(2): Linux stops a buffered write between pages when
 * SIGKILL is pending, and recovery trusts a page whose first 4 KiB (with
 * its LSN) are new.  With 16 KiB pages about one run of e2e.resume (50
 * kills of a load) in three left postings.db damaged after recovery. */
static const struct {
    const char *file;
    const char *name;
    u_int32_t flags;      /* DB->set_flags */
    u_int32_t pagesize;   /* 0 = Berkeley DB's choice */
} spaces[KV_NSPACES] = {
    [KV_DOCS] = { "docs.db", "documents", 0, 4096 },
    [KV_KEYS] = { "keys.db", "document keys", 0, 0 },
    [KV_POSTINGS] = { "postings.db", "postings", 0, 4096 },
    [KV_LOOKUPS] = { "lookups.db", "lookups", DB_DUPSORT, 0 },
    [KV_COUNTERS] = { "counters.db", "counters", 0, 0 },
    [KV_META] = { "meta.db", "meta", 0, 0 },
    [KV_DOCLENS] = { "doclens.db", "document lengths", 0, 0 },
};

/* ---- error translation ------------------------------------------------- */

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

static void on_bdb_error(const DB_ENV *dbenv, const char *pfx, const char *msg)
{
    (void)pfx;
    shared_env *sh = dbenv->app_private;
    if (!sh)
        return;
    snprintf(sh->bdb_msg, sizeof sh->bdb_msg, "%s", msg);
    if (!sh->corrupt_msg[0] && is_corruption(msg))
        snprintf(sh->corrupt_msg, sizeof sh->corrupt_msg, "%s", msg);
}

/* Translate a Berkeley DB return code; the one place that does. */
static int bdb_err(kv_env *env, int ret, kv_err *err, const char *what)
{
    shared_env *e = env ? env->sh : NULL;
    switch (ret) {
    case 0:
        return KVFTS_OK;
    case DB_NOTFOUND:
    case DB_KEYEMPTY:
        return kv_seterr(err, KVFTS_ENOTFOUND, "%s: not found", what);
    case DB_LOCK_DEADLOCK:
    case DB_LOCK_NOTGRANTED:
        return kv_seterr(err, KV_RETRY, "%s: deadlock, retrying", what);
    case ENOMEM:
        if (e && e->bdb_msg[0]) {   /* which table of the environment */
            kv_seterr(err, KVFTS_ENOMEM, "%s: out of memory (%s)", what,
                      e->bdb_msg);
            e->bdb_msg[0] = '\0';
            return KVFTS_ENOMEM;
        }
        return kv_seterr(err, KVFTS_ENOMEM, "%s: out of memory", what);
    case DB_RUNRECOVERY:
        /* This process found a damaged page and Berkeley DB panicked. */
        if (e && e->corrupt_msg[0])
            return kv_seterr(err, KVFTS_ECORRUPT, "%s: database file is "
                             "corrupt (%s)", what, e->corrupt_msg);
        /* Another process crashed and the next opener ran recovery: this
         * handle's view of the environment is gone, the data is not. */
        return kv_seterr(err, KVFTS_EBUSY,
                         "%s: the database was recovered after a crashed "
                         "process; close and reopen this handle", what);
    case DB_VERIFY_BAD:
        return kv_seterr(err, KVFTS_ECORRUPT, "%s: database file is corrupt",
                         what);
    case ENOSPC:
        return kv_seterr(err, KVFTS_ERROR, "%s: no space left on device",
                         what);
    default:
        if (e && e->bdb_msg[0] && ret != EINVAL) {
            kv_seterr(err, KVFTS_ERROR, "%s: %s (%s)", what, db_strerror(ret),
                      e->bdb_msg);
            e->bdb_msg[0] = '\0';
            return KVFTS_ERROR;
        }
        if (e && e->bdb_msg[0]) {
            kv_seterr(err, KVFTS_ERROR, "%s: %s", what, e->bdb_msg);
            e->bdb_msg[0] = '\0';
            return KVFTS_ERROR;
        }
        return kv_seterr(err, KVFTS_ERROR, "%s: %s", what, db_strerror(ret));
    }
}

/* ---- environment ------------------------------------------------------- */

static int path_join(char *out, size_t cap, const char *dir, const char *file,
                     kv_err *err)
{
    int n = snprintf(out, cap, "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= cap)
        return kv_seterr(err, KVFTS_EINVAL, "path too long: %s/%s", dir, file);
    return KVFTS_OK;
}

static int check_dir(const char *dir, bool create, kv_err *err)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return kv_seterr(err, KVFTS_EINVAL,
                             "database '%s': not a directory", dir);
        return KVFTS_OK;
    }
    if (errno != ENOENT)
        return kv_seterr(err, KVFTS_ERROR, "database '%s': %s", dir,
                         strerror(errno));
    if (!create)
        return kv_seterr(err, KVFTS_ENOTFOUND,
                         "database '%s': no such directory (create it with "
                         "'kvfts init %s')", dir, dir);
    if (mkdir(dir, 0755) != 0)
        return kv_seterr(err, KVFTS_ERROR, "database '%s': cannot create "
                         "directory: %s", dir, strerror(errno));
    return KVFTS_OK;
}

/* ---- free space ---------------------------------------------------------
 *
 * A file system that fills up must not take the database with it.  Two
 * things go wrong when Berkeley DB meets a full disk: its region files
 * (__db.0NN: the cache, locks, log buffer) are sparse files it maps and
 * grows as it allocates, so touching a page the file system cannot back
 * kills the process with SIGBUS; and once a write has failed for space,
 * the next open still needs room (the log buffer is flushed, the files are
 * registered in the log, recovery writes a checkpoint) and fails too.  So
 * kvfts keeps room free: an open needs the region files' possible growth
 * plus OPEN_MB, and a write transaction does not begin unless RESERVE_MB
 * more are free.  A write refused this way is a clear error, and the
 * database, with every commit before it, opens and reads as before.  (The
 * region sizes, measured: with the default 64 MiB cache, 45 MiB are
 * allocated at creation (mostly the lock table) and 135 MiB after loading
 * the Debian catalog, of files whose sizes reach 178 MiB; REGION_MAX bounds
 * them from that.) */
#define REGION_MAX(cache) ((cache) * 2 + (64u << 20))

/* Bytes the region files of dir may still allocate. */
static uint64_t region_growth(const char *dir, uint64_t cache)
{
    uint64_t have = 0;
    /* __db.001, __db.002, ...: numbered without gaps. */
    for (int i = 1; i <= 9; i++) {
        char name[16], p[4096];
        struct stat st;
        snprintf(name, sizeof name, "__db.%03d", i);
        if (path_join(p, sizeof p, dir, name, NULL) || stat(p, &st) != 0)
            break;
        have += (uint64_t)st.st_blocks * 512u;
    }
    uint64_t max = REGION_MAX(cache);
    return have >= max ? 0 : max - have;
}

/* KVFTS_OK if dir's file system has region growth + extra_mb free. */
static int space_check(const char *dir, uint64_t cache, unsigned extra_mb,
                       const char *what, kv_err *err)
{
    struct statvfs v;
    if (statvfs(dir, &v) != 0)
        return KVFTS_OK;            /* cannot tell: Berkeley DB will */
    uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
    uint64_t growth = region_growth(dir, cache);
    uint64_t need = growth + ((uint64_t)extra_mb << 20);
    if (avail >= need)
        return KVFTS_OK;
    return kv_seterr(err, KVFTS_ERROR,
                     "database '%s': no space left on device for %s: %llu "
                     "MB free, kvfts needs %llu MB free (%u MB%s%llu MB its "
                     "shared-memory files may still take) so that the "
                     "database can always be reopened and recovered; free "
                     "some space and retry",
                     dir, what, (unsigned long long)(avail >> 20),
                     (unsigned long long)((need + (1u << 20) - 1) >> 20),
                     extra_mb, extra_mb == RESERVE_MB ? " kept in reserve + "
                                                      : " to open + ",
                     (unsigned long long)((growth + (1u << 20) - 1) >> 20));
}

static int open_space(shared_env *sh, kv_space s, bool create,
                      const char *dir, kv_err *err)
{
    DB *db = NULL;
    int ret = db_create(&db, sh->env, 0);
    if (ret)
        return kv_seterr(err, KVFTS_ERROR, "db_create: %s", db_strerror(ret));
    if (spaces[s].flags)
        db->set_flags(db, spaces[s].flags);
    if (spaces[s].pagesize)
        db->set_pagesize(db, spaces[s].pagesize);
    /* meta.db's presence was checked before (kv_env_open), so a missing file
     * here is a space added by a newer kvfts: create it.  An existing file
     * is opened inside a snapshot transaction: opening reads the B-tree's
     * root page, and under an ordinary lock that waits for any writer
     * holding it (a load's batch splitting the root holds it until it
     * commits), so a new reader would wait for a whole batch. */
    (void)create;
    char path[4096];
    struct stat st;
    DB_TXN *snap = NULL;
    if (path_join(path, sizeof path, dir, spaces[s].file, NULL) == KVFTS_OK &&
        stat(path, &st) == 0 &&
        sh->env->txn_begin(sh->env, NULL, &snap, DB_TXN_SNAPSHOT) != 0)
        snap = NULL;
    u_int32_t flags = DB_MULTIVERSION | DB_THREAD | DB_CREATE |
                      (snap ? 0 : DB_AUTO_COMMIT);
    ret = db->open(db, snap, spaces[s].file, NULL, DB_BTREE, flags, 0644);
    if (snap) {
        int cret = ret ? snap->abort(snap) : snap->commit(snap, 0);
        if (!ret)
            ret = cret;
    }
    if (ret) {
        db->close(db, 0);
        if (ret == ENOENT)
            return kv_seterr(err, KVFTS_ENOTFOUND,
                             "database '%s': no kvfts database here (create "
                             "it with 'kvfts init %s')", dir, dir);
        int code = (ret == EINVAL || ret == DB_OLD_VERSION)
                       ? KVFTS_ECORRUPT : KVFTS_ERROR;
        return kv_seterr(err, code, "database '%s': cannot open %s: %s%s%s",
                         dir, spaces[s].file, db_strerror(ret),
                         sh->bdb_msg[0] ? ": " : "", sh->bdb_msg);
    }
    sh->db[s] = db;
    return KVFTS_OK;
}

/* Stamp a new database, or check that an existing one is ours. */
static int check_format(kv_env *e, kv_err *err)
{
    kv_txn *t = NULL;
    kv_buf v = KV_BUF_INIT;
    int rc = kv_txn_begin(&t, e, !e->read_only, err);
    if (rc)
        return rc;
    rc = kv_get(t, KV_META, FORMAT_KEY, strlen(FORMAT_KEY), &v, false, err);
    if (rc == KVFTS_ENOTFOUND && e->read_only) {
        rc = kv_seterr(err, KVFTS_ECORRUPT,
                       "database '%s': not a kvfts database (no format mark)",
                       e->dir);
    } else if (rc == KVFTS_ENOTFOUND) {
        rc = kv_put(t, KV_META, FORMAT_KEY, strlen(FORMAT_KEY), FORMAT_VAL,
                    strlen(FORMAT_VAL), err);
        if (rc == KVFTS_OK) {
            rc = kv_txn_commit(t, err);
            t = NULL;
        }
    } else if (rc == KVFTS_OK &&
               (v.len != strlen(FORMAT_VAL) ||
                memcmp(v.data, FORMAT_VAL, v.len) != 0)) {
        bool older = v.len > 6 && memcmp(v.data, "kvfts ", 6) == 0;
        rc = kv_seterr(err, KVFTS_ECORRUPT,
                       "database '%s': unknown format '%.*s' (expected '%s')%s",
                       e->dir, (int)(v.len > 40 ? 40 : v.len), v.data,
                       FORMAT_VAL, older ? ": made by another kvfts version; "
                       "load its documents into a new database" : "");
    }
    kv_txn_abort(t);
    kv_buf_free(&v);
    return rc;
}

static void shared_close(shared_env *sh)
{
    if (!sh)
        return;
    /* Only a process that wrote checkpoints when it closes: a checkpoint
     * flushes every dirty page of the shared cache, a writer's too, and a
     * reader closing during a load would wait for the load's pages. */
    if (sh->env && sh->db[KV_META] && sh->wrote) {
        sh->env->txn_checkpoint(sh->env, 0, 0, 0);
        char **list = NULL;
        if (sh->env->log_archive(sh->env, &list, DB_ARCH_REMOVE) == 0 && list)
            free(list);     /* Berkeley DB allocated it with malloc */
    }
    /* Nor does a reader flush a database as it closes it (DB_NOSYNC: the
     * log, not the files, makes commits durable). */
    for (int s = 0; s < KV_NSPACES; s++)
        if (sh->db[s])
            sh->db[s]->close(sh->db[s], sh->wrote ? 0 : DB_NOSYNC);
    if (sh->env)
        sh->env->close(sh->env, 0);
    kv_free(sh);
}

/* Open the environment of dir for the first handle in this process. */
static int shared_open(shared_env **out, const char *dir,
                       const kv_env_options *o, kv_err *err)
{
    *out = NULL;
    shared_env *sh = kv_calloc(1, sizeof *sh);
    if (!sh)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    int rc = KVFTS_OK;
    int ret = db_env_create(&sh->env, 0);
    if (ret) {
        sh->env = NULL;
        rc = kv_seterr(err, KVFTS_ERROR, "db_env_create: %s",
                       db_strerror(ret));
        goto fail;
    }
    DB_ENV *env = sh->env;
    env->app_private = sh;
    env->set_errcall(env, on_bdb_error);
    size_t cache = o->cache_bytes ? o->cache_bytes : DEFAULT_CACHE;
    env->set_cachesize(env, (u_int32_t)(cache >> 30),
                       (u_int32_t)(cache & ((1u << 30) - 1)), 1);
    env->set_lk_detect(env, DB_LOCK_DEFAULT);
    /* A batch of a bulk load touches many pages; each is a lock. */
    env->set_lk_max_locks(env, 400000);
    env->set_lk_max_objects(env, 400000);
    env->set_lk_max_lockers(env, 4000);
    env->set_lg_bsize(env, 4u * 1024u * 1024u);
    env->set_lg_max(env, 10u * 1024u * 1024u);
    env->set_tx_max(env, 1000);
    env->log_set_config(env, DB_LOG_AUTO_REMOVE, 1);

    u_int32_t flags = DB_CREATE | DB_INIT_TXN | DB_INIT_LOCK | DB_INIT_LOG |
                      DB_INIT_MPOOL | DB_RECOVER | DB_REGISTER | DB_THREAD;
    rc = space_check(dir, cache, OPEN_MB, "opening", err);
    if (rc)
        goto fail;
    ret = env->open(env, dir, flags, 0644);
    if (ret) {
        if (ret == EACCES || ret == EROFS || ret == EPERM)
            rc = kv_seterr(err, KVFTS_ERROR,
                           "database '%s': cannot open: %s (the directory "
                           "must be writable, even to read)", dir,
                           strerror(ret));
        else if (ret == DB_RUNRECOVERY)   /* the damaged file, if named */
            rc = kv_seterr(err, KVFTS_ECORRUPT,
                           "database '%s': recovery failed: %s", dir,
                           sh->corrupt_msg[0] ? sh->corrupt_msg
                           : sh->bdb_msg[0] ? sh->bdb_msg : db_strerror(ret));
        else
            rc = kv_seterr(err, KVFTS_ERROR, "database '%s': %s%s%s", dir,
                           db_strerror(ret), sh->bdb_msg[0] ? ": " : "",
                           sh->bdb_msg);
        goto fail;
    }
    u_int32_t gb = 0, bytes = 0;
    int ncache = 0;
    if (env->get_cachesize(env, &gb, &bytes, &ncache) == 0)
        sh->cache = ((uint64_t)gb << 30) + bytes;
    else
        sh->cache = cache;
    for (int s = 0; s < KV_NSPACES; s++) {
        rc = open_space(sh, (kv_space)s, o->create, dir, err);
        if (rc)
            goto fail;
    }
    *out = sh;
    return KVFTS_OK;
fail:
    if (sh->env && !sh->db[KV_META]) {
        /* Don't checkpoint an environment that never fully opened. */
        for (int s = 0; s < KV_NSPACES; s++)
            if (sh->db[s])
                sh->db[s]->close(sh->db[s], 0);
        sh->env->close(sh->env, 0);
        sh->env = NULL;
        memset(sh->db, 0, sizeof sh->db);
    }
    shared_close(sh);
    return rc;
}

int kv_env_open(kv_env **out, const char *dir, const kv_env_options *o,
                kv_err *err)
{
    kv_env_options def = { false, false, 0 };
    if (!o)
        o = &def;
    *out = NULL;
    int rc = check_dir(dir, o->create, err);
    if (rc)
        return rc;
    struct stat st;
    if (!o->create) {
        char p[4096];
        rc = path_join(p, sizeof p, dir, spaces[KV_META].file, err);
        if (rc)
            return rc;
        if (stat(p, &st) != 0)
            return kv_seterr(err, KVFTS_ENOTFOUND,
                             "database '%s': no kvfts database here (create "
                             "it with 'kvfts init %s')", dir, dir);
    }
    if (stat(dir, &st) != 0)
        return kv_seterr(err, KVFTS_ERROR, "database '%s': %s", dir,
                         strerror(errno));
    kv_env *e = kv_calloc(1, sizeof *e);
    if (!e)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    e->read_only = o->read_only;
    e->dir = kv_strndup(dir, strlen(dir));
    if (!e->dir) {
        kv_free(e);
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }

    pthread_mutex_lock(&shared_mu);
    shared_env *sh = shared_list;
    while (sh && !(sh->dev == st.st_dev && sh->ino == st.st_ino))
        sh = sh->next;
    if (sh) {
        sh->refs++;
    } else {
        rc = shared_open(&sh, dir, o, err);
        if (rc == KVFTS_OK) {
            sh->dev = st.st_dev;
            sh->ino = st.st_ino;
            sh->refs = 1;
            sh->next = shared_list;
            shared_list = sh;
        }
    }
    pthread_mutex_unlock(&shared_mu);
    if (rc) {
        kv_free(e->dir);
        kv_free(e);
        return rc;
    }
    e->sh = sh;
    e->env = sh->env;
    e->db = sh->db;
    rc = check_format(e, err);
    if (rc) {
        kv_env_close(e);
        return rc;
    }
    *out = e;
    return KVFTS_OK;
}

void **kv_txn_slot(kv_txn *t, void (*slot_free)(void *))
{
    t->env->slot_free = slot_free;
    return &t->env->slot;
}

uint64_t kv_txn_serial(const kv_txn *t)
{
    return t->serial;
}

void kv_env_close(kv_env *e)
{
    if (!e)
        return;
    if (e->slot && e->slot_free)
        e->slot_free(e->slot);
    shared_env *sh = e->sh;
    if (sh) {
        pthread_mutex_lock(&shared_mu);
        if (--sh->refs == 0) {
            shared_env **pp = &shared_list;
            while (*pp != sh)
                pp = &(*pp)->next;
            *pp = sh->next;
            shared_close(sh);
        }
        pthread_mutex_unlock(&shared_mu);
    }
    kv_free(e->dir);
    kv_free(e);
}

bool kv_env_read_only(const kv_env *e)
{
    return e->read_only;
}

const char *kv_env_dir(const kv_env *e)
{
    return e->dir;
}

int kv_env_checkpoint(kv_env *e, kv_err *err)
{
    if (e->read_only)
        return KVFTS_OK;
    int ret = e->env->txn_checkpoint(e->env, 0, 0, 0);
    if (ret)
        return bdb_err(e, ret, err, "checkpoint");
    char **list = NULL;
    ret = e->env->log_archive(e->env, &list, DB_ARCH_REMOVE);
    if (list)
        free(list);
    if (ret)
        return bdb_err(e, ret, err, "log removal");
    return KVFTS_OK;
}

int kv_env_log_bytes(kv_env *e, uint64_t *out, kv_err *err)
{
    DB_LOG_STAT *st = NULL;
    int ret = e->env->log_stat(e->env, &st, 0);
    if (ret)
        return bdb_err(e, ret, err, "log statistics");
    *out = (uint64_t)st->st_w_mbytes * 1024 * 1024 + st->st_w_bytes;
    free(st);       /* allocated by Berkeley DB with malloc */
    return KVFTS_OK;
}

int kv_env_sizes(kv_env *e, uint64_t *db_bytes, uint64_t *log_bytes,
                 kv_err *err)
{
    *db_bytes = *log_bytes = 0;
    DIR *d = opendir(e->dir);
    if (!d)
        return kv_seterr(err, KVFTS_ERROR, "database '%s': %s", e->dir,
                         strerror(errno));
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        bool is_db = n > 3 && strcmp(de->d_name + n - 3, ".db") == 0;
        bool is_log = strncmp(de->d_name, "log.", 4) == 0;
        if (!is_db && !is_log)
            continue;
        char p[4096];
        struct stat st;
        if (path_join(p, sizeof p, e->dir, de->d_name, NULL) == 0 &&
            stat(p, &st) == 0) {
            if (is_db)
                *db_bytes += (uint64_t)st.st_size;
            else
                *log_bytes += (uint64_t)st.st_size;
        }
    }
    closedir(d);
    return KVFTS_OK;
}

/* ---- transactions ------------------------------------------------------ */

static int txn_begin(kv_txn **out, kv_env *e, bool write, u_int32_t flags,
                     kv_err *err)
{
    *out = NULL;
    if (write && e->read_only)
        return kv_seterr(err, KVFTS_EINVAL, "database '%s' is open read-only",
                         e->dir);
    if (write) {
        int rc = space_check(e->dir, e->sh->cache, RESERVE_MB, "a write",
                             err);
        if (rc)
            return rc;
    }
    kv_txn *t = kv_calloc(1, sizeof *t);
    if (!t)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    t->env = e;
    t->write = write;
    t->serial = ++e->txns;
    int ret = e->env->txn_begin(e->env, NULL, &t->txn, flags);
    if (ret) {
        kv_free(t);
        return bdb_err(e, ret, err, "begin transaction");
    }
    *out = t;
    return KVFTS_OK;
}

int kv_txn_begin(kv_txn **out, kv_env *e, bool write, kv_err *err)
{
    return txn_begin(out, e, write, write ? 0 : DB_TXN_SNAPSHOT, err);
}

/* Not DB_TXN_BULK, although it halves a fresh load's log (records put on
 * pages the transaction allocated are not logged; the pages are flushed at
 * commit): with it, a batch killed mid-transaction could leave a database
 * that Berkeley DB 5.3's recovery crashes on (in __bam_repl_recover) at
 * every open, for good.  The 50-kill test (now e2e.resume) found it within
 * a few kills on tmpfs -- with 16 KiB pages, whose torn writes may have
 * been the cause (see spaces[] above). */

int kv_txn_commit(kv_txn *t, kv_err *err)
{
    kv_env *e = t->env;
    bool write = t->write;
    int ret = t->txn->commit(t->txn, 0);
    kv_free(t);
    if (ret)
        return bdb_err(e, ret, err, "commit");
    if (write) {
        e->sh->wrote = true;
        /* Cheap unless CHECKPOINT_KB of log were written since the last. */
        ret = e->env->txn_checkpoint(e->env, CHECKPOINT_KB, 0, 0);
        if (ret)
            return bdb_err(e, ret, err, "checkpoint");
    }
    return KVFTS_OK;
}

void kv_txn_abort(kv_txn *t)
{
    if (!t)
        return;
    t->txn->abort(t->txn);
    kv_free(t);
}

int kv_txn_run(kv_env *e, bool write, kv_txn_fn fn, void *payload,
               kv_err *err)
{
    for (int attempt = 0;; attempt++) {
        kv_txn *t = NULL;
        int rc = kv_txn_begin(&t, e, write, err);
        if (rc == KVFTS_OK) {
            rc = fn(t, payload, err);
            if (rc == KVFTS_OK)
                return kv_txn_commit(t, err);
            kv_txn_abort(t);
        }
        if (rc != KV_RETRY)
            return rc;
        if (attempt + 1 >= MAX_RETRIES)
            return kv_seterr(err, KVFTS_EBUSY,
                             "database '%s': still deadlocked after %d "
                             "retries; another writer holds its locks",
                             e->dir, MAX_RETRIES);
        /* Back off a little, more each time, so the winner can finish. */
        struct timespec ts = { 0, (long)(attempt + 1) * 1000000L };
        nanosleep(&ts, NULL);
    }
}

/* ---- records ----------------------------------------------------------- */

static void dbt_in(DBT *d, const void *p, size_t n)
{
    memset(d, 0, sizeof *d);
    d->data = (void *)p;
    d->size = (u_int32_t)n;
}

static void dbt_user(DBT *d, kv_buf *b)
{
    memset(d, 0, sizeof *d);
    d->data = b->data;
    d->ulen = (u_int32_t)(b->cap ? b->cap - 1 : 0);
    d->flags = DB_DBT_USERMEM;
}

static int check_len(size_t n, kv_err *err)
{
    if (n > UINT32_MAX / 2)
        return kv_seterr(err, KVFTS_EINVAL, "record of %zu bytes too large",
                         n);
    return KVFTS_OK;
}

/* Read the value at key into val; with head > 0 only its first head bytes
 * (DB_DBT_PARTIAL: Berkeley DB copies no more than that). */
static int get_value(kv_txn *t, kv_space s, const void *key, size_t klen,
                     size_t head, kv_buf *val, bool for_update, kv_err *err)
{
    int rc = check_len(klen, err);
    if (rc)
        return rc;
    DB *db = t->env->db[s];
    DBT k, v;
    dbt_in(&k, key, klen);
    size_t want = head ? head + 1 : 256;
    if ((rc = kv_buf_reserve(val, want, err)) != 0)
        return rc;
    for (;;) {
        dbt_user(&v, val);
        if (head) {
            v.flags |= DB_DBT_PARTIAL;
            v.doff = 0;
            v.dlen = (u_int32_t)head;
        }
        int ret = db->get(db, t->txn, &k, &v,
                          for_update && t->write ? DB_RMW : 0);
        if (ret == DB_BUFFER_SMALL) {
            val->len = 0;
            rc = kv_buf_reserve(val, v.size, err);
            if (rc)
                return rc;
            continue;
        }
        if (ret)
            return bdb_err(t->env, ret, err, spaces[s].name);
        val->len = v.size;
        val->data[val->len] = '\0';
        return KVFTS_OK;
    }
}

int kv_get(kv_txn *t, kv_space s, const void *key, size_t klen, kv_buf *val,
           bool for_update, kv_err *err)
{
    return get_value(t, s, key, klen, 0, val, for_update, err);
}

int kv_get_head(kv_txn *t, kv_space s, const void *key, size_t klen,
                size_t head, kv_buf *val, kv_err *err)
{
    return get_value(t, s, key, klen, head ? head : 1, val, false, err);
}

int kv_put(kv_txn *t, kv_space s, const void *key, size_t klen,
           const void *val, size_t vlen, kv_err *err)
{
    int rc = check_len(klen, err);
    if (!rc)
        rc = check_len(vlen, err);
    if (rc)
        return rc;
    DB *db = t->env->db[s];
    DBT k, v;
    dbt_in(&k, key, klen);
    dbt_in(&v, val, vlen);
    int ret = db->put(db, t->txn, &k, &v, s == KV_LOOKUPS ? DB_NODUPDATA : 0);
    if (ret == DB_KEYEXIST)
        return KVFTS_OK;   /* the pair is already there */
    return bdb_err(t->env, ret, err, spaces[s].name);
}

int kv_del(kv_txn *t, kv_space s, const void *key, size_t klen, kv_err *err)
{
    DB *db = t->env->db[s];
    DBT k;
    dbt_in(&k, key, klen);
    int ret = db->del(db, t->txn, &k, 0);
    return bdb_err(t->env, ret, err, spaces[s].name);
}

int kv_del_pair(kv_txn *t, kv_space s, const void *key, size_t klen,
                const void *val, size_t vlen, kv_err *err)
{
    DB *db = t->env->db[s];
    DBC *c = NULL;
    int ret = db->cursor(db, t->txn, &c, 0);
    if (ret)
        return bdb_err(t->env, ret, err, spaces[s].name);
    DBT k, v;
    dbt_in(&k, key, klen);
    dbt_in(&v, val, vlen);
    ret = c->get(c, &k, &v, DB_GET_BOTH | DB_RMW);
    if (ret == 0)
        ret = c->del(c, 0);
    int rc = bdb_err(t->env, ret, err, spaces[s].name);
    int cret = c->close(c);
    if (!rc && cret)
        rc = bdb_err(t->env, cret, err, spaces[s].name);
    return rc;
}

int kv_walk(kv_txn *t, kv_space s, kv_walk_fn fn, void *payload,
            kv_err *err)
{
    kv_cursor *c = NULL;
    kv_bulk b = KV_BULK_INIT;
    int rc = kv_cursor_open(&c, t, s, err);
    bool first = true;
    while (!rc) {
        rc = kv_cursor_bulk(c, first ? "" : NULL, 0, &b, err);
        first = false;
        const char *k, *v;
        size_t kl, vl;
        while (!rc && kv_bulk_next(&b, &k, &kl, &v, &vl))
            rc = fn(payload, k, kl, v, vl, err);
    }
    kv_cursor_close(c);
    kv_bulk_free(&b);
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

static int count_one(void *payload, const char *k, size_t kl, const char *v,
                     size_t vl, kv_err *err)
{
    (void)k, (void)kl, (void)v, (void)vl, (void)err;
    ++*(uint64_t *)payload;
    return KVFTS_OK;
}

/* Counted by kv_walk(): DB->stat() walks the tree with page locks of its
 * own, so in a snapshot reader it waited for a bulk load to commit
 * (`kvfts stats` hung for the whole load). */
int kv_count(kv_txn *t, kv_space s, uint64_t *out, kv_err *err)
{
    uint64_t n = 0;
    int rc = kv_walk(t, s, count_one, &n, err);
    if (!rc)
        *out = n;
    return rc;
}

/* ---- cursors ----------------------------------------------------------- */

int kv_cursor_open(kv_cursor **out, kv_txn *t, kv_space s, kv_err *err)
{
    *out = NULL;
    kv_cursor *c = kv_calloc(1, sizeof *c);
    if (!c)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    c->txn = t;
    c->space = s;
    int rc = kv_buf_reserve(&c->key, 256, err);
    if (!rc)
        rc = kv_buf_reserve(&c->val, 1024, err);
    if (rc) {
        kv_cursor_close(c);
        return rc;
    }
    DB *db = t->env->db[s];
    int ret = db->cursor(db, t->txn, &c->dbc, 0);
    if (ret) {
        kv_cursor_close(c);
        return bdb_err(t->env, ret, err, spaces[s].name);
    }
    *out = c;
    return KVFTS_OK;
}

void kv_cursor_close(kv_cursor *c)
{
    if (!c)
        return;
    if (c->dbc)
        c->dbc->close(c->dbc);
    kv_buf_free(&c->key);
    kv_buf_free(&c->val);
    kv_free(c);
}

/* c->get with USERMEM buffers, growing them on DB_BUFFER_SMALL (the cursor
 * does not move when that happens).  For DB_SET/DB_SET_RANGE the search key
 * must already be in c->key. */
static int cursor_get(kv_cursor *c, u_int32_t flag, kv_err *err)
{
    for (;;) {
        DBT k, v;
        dbt_user(&k, &c->key);
        dbt_user(&v, &c->val);
        if (flag == DB_SET_RANGE || flag == DB_SET)
            k.size = (u_int32_t)c->key.len;
        int ret = c->dbc->get(c->dbc, &k, &v, flag);
        if (ret == DB_BUFFER_SMALL) {
            int rc = 0;
            if (k.size > k.ulen) {
                size_t keep = c->key.len;
                c->key.len = 0;
                rc = kv_buf_reserve(&c->key, k.size, err);
                c->key.len = keep;
            }
            if (!rc && v.size > v.ulen) {
                c->val.len = 0;
                rc = kv_buf_reserve(&c->val, v.size, err);
            }
            if (rc)
                return rc;
            continue;
        }
        if (ret == DB_NOTFOUND)
            return KVFTS_ITEROVER;
        if (ret)
            return bdb_err(c->txn->env, ret, err, spaces[c->space].name);
        c->key.len = k.size;
        c->key.data[k.size] = '\0';
        c->val.len = v.size;
        c->val.data[v.size] = '\0';
        return KVFTS_OK;
    }
}

int kv_cursor_seek(kv_cursor *c, const void *key, size_t klen, kv_err *err)
{
    if (klen == 0)
        return cursor_get(c, DB_FIRST, err);
    kv_buf_reset(&c->key);
    int rc = kv_buf_append(&c->key, key, klen, err);
    if (rc)
        return rc;
    return cursor_get(c, DB_SET_RANGE, err);
}

/* ---- bulk reads ---------------------------------------------------------- */

#define BULK_MIN (16 * 1024)

int kv_cursor_bulk(kv_cursor *c, const void *key, size_t klen, kv_bulk *b,
                   kv_err *err)
{
    b->it = NULL;
    if (key) {
        kv_buf_reset(&c->key);
        int rc = kv_buf_append(&c->key, key, klen, err);
        if (rc)
            return rc;
    }
    size_t want = BULK_MIN;   /* grown only for a record that needs it */
    for (;;) {
        /* Berkeley DB wants a multiple of 1024 bytes, aligned for u_int32_t
         * access (malloc's alignment). */
        want = (want + 1023) & ~(size_t)1023;
        if (b->buf.cap < want + 1) {
            b->buf.len = 0;
            int rc = kv_buf_reserve(&b->buf, want, err);
            if (rc)
                return rc;
        }
        DBT k, v;
        dbt_user(&k, &c->key);
        k.size = (u_int32_t)c->key.len;
        memset(&v, 0, sizeof v);
        v.data = b->buf.data;
        v.ulen = (u_int32_t)want;
        v.flags = DB_DBT_USERMEM;
        int ret = c->dbc->get(c->dbc, &k, &v, (key ? DB_SET_RANGE : DB_NEXT) |
                                              DB_MULTIPLE_KEY);
        if (ret == DB_BUFFER_SMALL) {
            want = (size_t)v.size > want * 2 ? (size_t)v.size : want * 2;
            if (k.size > k.ulen)
                return kv_seterr(err, KVFTS_ECORRUPT, "%s: key of %u bytes",
                                 spaces[c->space].name, k.size);
            continue;
        }
        if (ret == DB_NOTFOUND)
            return KVFTS_ITEROVER;
        if (ret)
            return bdb_err(c->txn->env, ret, err, spaces[c->space].name);
        b->size = want;
        b->it = (u_int8_t *)b->buf.data + want - sizeof(u_int32_t);
        return KVFTS_OK;
    }
}

bool kv_bulk_next(kv_bulk *b, const char **key, size_t *klen,
                  const char **val, size_t *vlen)
{
    if (!b->it)
        return false;
    DBT d;
    memset(&d, 0, sizeof d);
    d.data = b->buf.data;
    d.ulen = (u_int32_t)b->size;
    void *p = b->it, *kp, *vp;
    u_int32_t kl, vl;
    DB_MULTIPLE_KEY_NEXT(p, &d, kp, kl, vp, vl);
    b->it = p;
    if (!p)
        return false;
    *key = kp;
    *klen = kl;
    *val = vp;
    *vlen = vl;
    return true;
}

void kv_bulk_free(kv_bulk *b)
{
    kv_buf_free(&b->buf);
    b->it = NULL;
}

int kv_cursor_seek_exact(kv_cursor *c, const void *key, size_t klen,
                         kv_err *err)
{
    kv_buf_reset(&c->key);
    int rc = kv_buf_append(&c->key, key, klen, err);
    if (rc)
        return rc;
    return cursor_get(c, DB_SET, err);
}

int kv_cursor_next(kv_cursor *c, kv_err *err)
{
    return cursor_get(c, DB_NEXT, err);
}

int kv_cursor_prev(kv_cursor *c, kv_err *err)
{
    return cursor_get(c, DB_PREV, err);
}

int kv_cursor_last(kv_cursor *c, kv_err *err)
{
    return cursor_get(c, DB_LAST, err);
}

int kv_cursor_next_dup(kv_cursor *c, kv_err *err)
{
    return cursor_get(c, DB_NEXT_DUP, err);
}

void kv_cursor_key(const kv_cursor *c, const char **key, size_t *klen)
{
    *key = c->key.data;
    *klen = c->key.len;
}

void kv_cursor_val(const kv_cursor *c, const char **val, size_t *vlen)
{
    *val = c->val.data;
    *vlen = c->val.len;
}

int kv_cursor_del(kv_cursor *c, kv_err *err)
{
    int ret = c->dbc->del(c->dbc, 0);
    return bdb_err(c->txn->env, ret, err, spaces[c->space].name);
}
