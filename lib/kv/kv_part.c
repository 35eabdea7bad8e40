/*
 * kv_part.c -- the partitioned spaces.  KV_TERMS and KV_POSTINGS hold
 * index/'s segments.  A large segment (its id has KV_PART_OWN) is a file
 * of its own, DIR/seg-XXXXXXXX.db (the id in hex); the small ones, which
 * single-document writes make by the thousand, share
 * DIR/seg-00000000.db, made with the database and never removed (like the
 * files of the other spaces, a missing one is an error).  Each file holds the two spaces as its two
 * databases, "terms" and "postings".  A record's key begins with the
 * segment id (be32): that picks the file.
 *
 * Why files: a merge replaces segments by one.  Deleting the inputs'
 * records one by one rewrote every page they were on, and under MVCC
 * every such page is copied until the deleting transaction ends; past a
 * million documents the copies outgrew the cache into __db.freezer files
 * and a load slowed to a quarter of its starting rate.  Removing a file is
 * a few log records, whatever its size, and gives its space back to the
 * file system at once (a freed B-tree page only goes to the file's free
 * list).  Each segment's file is written front to back, so its pages are
 * full.
 *
 * Handles.  Opening a database costs a file open and a few page reads, so
 * an instance keeps each partition's handles open for all its
 * transactions (kv_part, in bdb_inst.parts); a transaction holds a
 * reference on each partition it used until it ends.  A file is made,
 * with both its databases, for the write transaction that first puts a
 * record in it, and written without log records until that transaction
 * renames it into place as it commits (part_create): an abort removes it
 * again, and the handles go with it.
 * An existing file is opened in a snapshot transaction of its own, as
 * kv_env.c opens the fixed spaces, so that opening never waits for a
 * writer.
 *
 * Removal (kv__part_remove) closes this process's handles if no
 * transaction uses them, then removes the file in a transaction that does
 * not wait: while a handle of any process is open on it, Berkeley DB's
 * handle lock refuses, and the caller tries again later.  A process drops
 * its idle handles of partitions its latest segment list no longer names
 * (kv_parts_retain), so that the files can go.  A snapshot that names a
 * segment whose file is gone by the time it opens it (a merge removed it
 * meanwhile) gets KV_RETRY: kv_txn_run() begins a newer snapshot, which
 * no longer names it.
 */
#include "kv_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const sub_names[2] = { "terms", "postings" };

/* The file this thread last found missing (kv_txn_run() names it when
 * retrying with newer snapshots does not help: the file is lost). */
static _Thread_local char tls_gone[32];

char *kv__part_gone(void)
{
    return tls_gone;
}

bool kv__parted(kv_space s)
{
    return kv_spaces[s].file == NULL;
}

static int sub_of(kv_space s)
{
    return s == KV_TERMS ? 0 : 1;
}

static void part_file(char *out, size_t cap, uint32_t id)
{
    snprintf(out, cap, "seg-%08x.db", id);
}

/* A file name of a partition: "seg-" 8 lowercase hex digits ".db". */
static bool parse_part_file(const char *name, uint32_t *id)
{
    if (strlen(name) != 15 || strncmp(name, "seg-", 4) != 0 ||
        strcmp(name + 12, ".db") != 0)
        return false;
    uint32_t v = 0;
    for (int i = 4; i < 12; i++) {
        char ch = name[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0'
              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint32_t)d;
    }
    *id = v;
    return true;
}

static int id_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int kv__parts_list(const char *dir, uint32_t **ids, size_t *n, kv_err *err)
{
    *ids = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return kv_seterr(err, KVFTS_ERROR, "database '%s': %s", dir,
                         strerror(errno));
    size_t cap = 0;
    int rc = KVFTS_OK;
    struct dirent *de;
    while (!rc && (de = readdir(d)) != NULL) {
        uint32_t id;
        if (!parse_part_file(de->d_name, &id))
            continue;
        if (*n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            uint32_t *v = kv_realloc(*ids, ncap * sizeof *v);
            if (!v) {
                rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
                break;
            }
            *ids = v;
            cap = ncap;
        }
        (*ids)[(*n)++] = id;
    }
    closedir(d);
    if (rc) {
        kv_free(*ids);
        *ids = NULL;
        *n = 0;
        return rc;
    }
    if (*n)
        qsort(*ids, *n, sizeof **ids, id_cmp);
    return KVFTS_OK;
}

/* The process id in a segment file's making name (seg-ID.PID.N.new), or 0
 * (a name of another form). */
static long made_pid(const char *name)
{
    const char *p = name + 13;   /* past "seg-" 8 digits "." */
    char *end;
    long pid = strtol(p, &end, 10);
    return end != p && *end == '.' && pid > 0 ? pid : 0;
}

void kv__parts_sweep(const char *dir, bool dead_only)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 16 || strncmp(de->d_name, "seg-", 4) != 0 ||
            strcmp(de->d_name + n - 4, ".new") != 0)
            continue;
        if (dead_only) {
            long pid = n > 16 ? made_pid(de->d_name) : 0;
            if (pid <= 0 || pid == (long)getpid() ||
                kill((pid_t)pid, 0) == 0 || errno != ESRCH)
                continue;       /* alive, or cannot tell */
        }
        if (kv__path_join(path, sizeof path, dir, de->d_name, NULL) ==
            KVFTS_OK)
            (void)unlink(path);
    }
    closedir(d);
}

/* ---- the instance's handles --------------------------------------------- */

/* A new database handle of a segment file (its pages are KV_PAGE).  A
 * panicked environment (another process's recovery) is KV_RETRY, as for
 * any call. */
static int db_new(bdb_inst *in, DB **out, kv_err *err)
{
    int ret = db_create(out, in->env, 0);
    if (ret)
        return kv__bdb_err(in, ret, err, "db_create");
    (*out)->set_pagesize(*out, KV_PAGE);
    return KVFTS_OK;
}

/* A snapshot named segment file @p file, which is not there (any more). */
static int gone(const char *file, kv_err *err)
{
    snprintf(tls_gone, sizeof tls_gone, "%s", file);
    return kv_seterr(err, KV_RETRY, "segment file %s is gone (merged away "
                     "after this snapshot began); retrying", file);
}

static void part_close_dbs(kv_part *p)
{
    for (int k = 0; k < 2; k++) {
        if (p->db[k]) {
            kv__db_close(p->db[k], DB_NOSYNC);
            p->db[k] = NULL;
        }
        if (p->wdb[k]) {
            kv__db_close(p->wdb[k], DB_NOSYNC);
            p->wdb[k] = NULL;
        }
    }
}

/* Take p out of in->parts and free it (parts_mu held). */
static void part_forget(bdb_inst *in, size_t at)
{
    kv_part *p = in->parts[at];
    part_close_dbs(p);
    in->parts[at] = in->parts[--in->nparts];
    kv_free(p);
}

void kv__parts_close(bdb_inst *in)
{
    pthread_mutex_lock(&in->parts_mu);
    while (in->nparts)
        part_forget(in, in->nparts - 1);
    kv_free(in->parts);
    in->parts = NULL;
    in->partcap = 0;
    in->kept_set = false;
    pthread_mutex_unlock(&in->parts_mu);
}

/* A name to make segment file id under before its transaction renames it
 * into place (part_create): "seg-" 8 hex digits, the process id and a
 * number of this process's, ".new".  Never the name of a file there: one
 * an abort or a crash left (the transaction's rename undone) is never in
 * the way, and no undo can move one over a file being made. */
static void part_new_file(char *out, size_t cap, uint32_t id)
{
    static atomic_uint made;
    snprintf(out, cap, "seg-%08x.%ld.%u.new", id, (long)getpid(),
             atomic_fetch_add(&made, 1));
}

/* Remove file (a segment file being made, or left half made) outside any
 * transaction; unlink(2) when Berkeley DB cannot open it (a crash can leave
 * it without pages). */
static void part_unmake(bdb_inst *in, const char *file)
{
    char path[4096];
    if (in->env->dbremove(in->env, NULL, file, NULL, 0) != 0 &&
        kv__path_join(path, sizeof path, in->sh->dir, file, NULL) == KVFTS_OK)
        (void)unlink(path);
}

/* Make p's file with both databases for the write transaction t (parts_mu
 * held): under a name of its own (seg-ID.PID.N.new), with handles that
 * write no log records, used outside the transaction (kv__part_db_id hands
 * out no DB_TXN for them).  kv__parts_seal, before t commits, puts the file
 * on disk and renames it into place inside t.
 *
 * Why outside the log: a segment is written once, front to back, into a
 * file no one else can see until the rename.  Logging its pages wrote every
 * byte twice (the log, then the file) and checksummed the log: about a
 * third of a load's writes.  An abort or a crash loses nothing that needs
 * undoing: the file is removed (kv__parts_end; kv__parts_sweep after a
 * crash), and a committed rename finds it complete because it was synced
 * first.  Pages written so carry Berkeley DB's "not logged" LSN; a later
 * transaction that adds to the file (a merge's next step) logs its changes
 * against that LSN as usual.
 *
 * Why not let the transaction make it: Berkeley DB 5.3 logs a file made in
 * a transaction as "create a skeleton file (pages 0 and 1), rename it into
 * place", and recovery redoes both when the making is after its starting
 * checkpoint: it renames a new skeleton over the segment file that is
 * there, then rebuilds the pages from the log.  A page it read from the old
 * file before the rename (a database's meta page, read when recovery opens
 * the files) is newer than the log's records, so none is redone, and, clean
 * in the cache, it is never written to the new file: e2e.resume found
 * seg-80000056.db's postings meta page all zeros after recovery
 * (reproduced with db5.3_recover on a copy taken before recovery).  A
 * rename whose source is gone is skipped by recovery, and one whose
 * transaction did not commit is undone, back to the .new name: the abort
 * removes that file (kv__parts_end); one a crash left goes with the
 * recovery, the failchk that finds its process dead, or the last process
 * to close (kv__parts_sweep). */
static int part_create(kv_txn *t, kv_part *p, kv_err *err)
{
    bdb_inst *in = t->inst;
    char *made = p->made;
    part_new_file(made, sizeof p->made, p->id);
    int rc = KVFTS_OK;
    for (int k = 0; k < 2 && !rc; k++) {
        DB *db = NULL;
        if ((rc = db_new(in, &db, err)))
            break;
        int ret = KV_BDB(in->sh, db->set_flags(db, DB_TXN_NOT_DURABLE));
        if (!ret)
            ret = KV_BDB(in->sh, db->open(db, NULL, made, sub_names[k],
                                          DB_BTREE, DB_CREATE | DB_EXCL |
                                          DB_THREAD, 0644));
        if (ret) {
            kv__db_close(db, DB_NOSYNC);
            rc = kv__bdb_err(in, ret, err, made);
        } else {
            p->db[k] = db;
        }
    }
    if (rc) {
        part_close_dbs(p);
        part_unmake(in, made);
        return rc;
    }
    p->creator = t;
    return KVFTS_OK;
}

/* The directory's entries to disk (a file made in it). */
static int sync_dir(bdb_inst *in, kv_err *err)
{
    int fd = open(in->sh->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return kv_seterr(err, KVFTS_ERROR, "database '%s': sync: %s",
                         in->sh->dir, strerror(e));
    }
    close(fd);
    return KVFTS_OK;
}

int kv__parts_seal(kv_txn *t, kv_err *err)
{
    bdb_inst *in = t->inst;
    int rc = KVFTS_OK;
    bool synced_dir = false;
    for (size_t i = 0; i < t->nused && !rc; i++) {
        struct kv_tpart *tp = &t->used[i];
        if (!tp->unlogged)
            continue;
        kv_part *p = tp->p;
        char file[32];
        part_file(file, sizeof file, p->id);
        /* One file: a sync of either database writes both.  Outside
         * parts_mu: the handles are this transaction's alone. */
        int ret = KV_BDB(in->sh, p->db[0]->sync(p->db[0], 0));
        pthread_mutex_lock(&in->parts_mu);
        part_close_dbs(p);
        pthread_mutex_unlock(&in->parts_mu);
        tp->db[0] = tp->db[1] = NULL;
        tp->unlogged = false;
        if (ret) {
            rc = kv__bdb_err(in, ret, err, p->made);
            break;
        }
        if (!synced_dir) {
            rc = sync_dir(in, err);
            synced_dir = true;
            if (rc)
                break;
        }
        ret = KV_BDB(in->sh, in->env->dbrename(in->env, t->txn, p->made,
                                               NULL, file, 0));
        if (ret)
            rc = kv__bdb_err(in, ret, err, file);
    }
    return rc;
}

/* Open database k of p's existing file, in a snapshot of its own
 * (parts_mu held): read-only if it is a file of a segment's own, unless
 * @p writable (p->wdb, for a merge step that adds to it: kv__part_db_id).
 *
 * Why read-only: Berkeley DB refused readers of another process a durable
 * handle on a file made with not-durable ones (part_create) soon after the
 * commit that listed it ("BDB3039 Cannot open DURABLE and NOT DURABLE
 * handles in the same file", EINVAL), again and again for over a second
 * (`kvfts bench --incremental`, four readers; what inside Berkeley DB
 * keeps the file not durable so long is not pinned down).  A read-only
 * handle is not checked. */
static int part_open(kv_txn *t, kv_part *p, int k, const char *file,
                     bool writable, kv_err *err)
{
    bool rdonly = !writable && (p->id & KV_PART_OWN) != 0;
    bdb_inst *in = t->inst;
    DB *db = NULL;
    int rc = db_new(in, &db, err);
    if (rc)
        return rc;
    int ret = kv__db_open(in->env, db, file, sub_names[k], true, rdonly);
    if (ret) {
        kv__db_close(db, 0);
        return ret == ENOENT ? gone(file, err)
                             : kv__bdb_err(in, ret, err, file);
    }
    if (writable)
        p->wdb[k] = db;
    else
        p->db[k] = db;
    return KVFTS_OK;
}

/* The transaction's entry for partition id, taking a reference on the
 * instance's kv_part (created if this process has none yet). */
static int txn_part(kv_txn *t, uint32_t id, struct kv_tpart **out,
                    kv_err *err)
{
    if (t->lastp && t->lastp->p->id == id) {
        *out = t->lastp;
        return KVFTS_OK;
    }
    for (size_t i = 0; i < t->nused; i++)
        if (t->used[i].p->id == id) {
            *out = t->lastp = &t->used[i];
            return KVFTS_OK;
        }
    void *arr = t->used;
    if (!kv__grow_inline(&arr, t->inline_used,
                         sizeof t->inline_used / sizeof t->inline_used[0],
                         t->nused, &t->usedcap, sizeof *t->used))
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    if (arr != t->used)
        t->lastp = NULL;       /* it pointed into the old array */
    t->used = arr;
    bdb_inst *in = t->inst;
    pthread_mutex_lock(&in->parts_mu);
    kv_part *p = NULL;
    for (size_t i = 0; i < in->nparts && !p; i++)
        if (in->parts[i]->id == id)
            p = in->parts[i];
    if (!p && in->nparts == in->partcap) {
        size_t ncap = in->partcap ? in->partcap * 2 : 16;
        kv_part **v = kv_realloc(in->parts, ncap * sizeof *v);
        if (v) {
            in->parts = v;
            in->partcap = ncap;
        }
    }
    if (!p && in->nparts < in->partcap && (p = kv_calloc(1, sizeof *p))) {
        p->id = id;
        in->parts[in->nparts++] = p;
    }
    DB *db0 = NULL, *db1 = NULL;
    if (p) {
        p->refs++;
        if (!p->creator) {     /* handles already open: no second lock */
            db0 = p->db[0];
            db1 = p->db[1];
        }
    }
    pthread_mutex_unlock(&in->parts_mu);
    if (!p)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    t->used[t->nused] = (struct kv_tpart){ p, { db0, db1 }, { NULL, NULL },
                                           false };
    *out = t->lastp = &t->used[t->nused++];
    return KVFTS_OK;
}

static int part_db_id(kv_txn *t, kv_space s, uint32_t id, bool create,
                      DB **out, DB_TXN **tx, kv_err *err);

int kv__part_db_id(kv_txn *t, kv_space s, uint32_t id, bool create, DB **out,
                   DB_TXN **tx, kv_err *err)
{
    int rc = part_db_id(t, s, id, create, out, tx, err);
    if (rc || !create || !t->write || !(id & KV_PART_OWN) || !*tx)
        return rc;
    /* A write into an existing file of a segment's own (a merge step
     * adding to its output): a writable handle beside the read-only one,
     * kept by the transaction like the others (a step puts thousands). */
    struct kv_tpart *tp = t->lastp;
    int k = sub_of(s);
    if (tp->wdb[k]) {
        *out = tp->wdb[k];
        return KVFTS_OK;
    }
    char file[32];
    part_file(file, sizeof file, id);
    bdb_inst *in = t->inst;
    kv_part *p = tp->p;
    pthread_mutex_lock(&in->parts_mu);
    if (!p->wdb[k])
        rc = part_open(t, p, k, file, true, err);
    if (!rc)
        *out = tp->wdb[k] = p->wdb[k];
    pthread_mutex_unlock(&in->parts_mu);
    return rc;
}

static int part_db_id(kv_txn *t, kv_space s, uint32_t id, bool create,
                      DB **out, DB_TXN **tx, kv_err *err)
{
    struct kv_tpart *tp = NULL;
    int rc = txn_part(t, id, &tp, err);
    if (rc)
        return rc;
    int k = sub_of(s);
    if (tp->db[k]) {
        *out = tp->db[k];
        *tx = tp->unlogged ? NULL : t->txn;
        return KVFTS_OK;
    }
    char file[32], path[4096];
    part_file(file, sizeof file, id);   /* not on the path above */
    bdb_inst *in = t->inst;
    pthread_mutex_lock(&in->parts_mu);
    kv_part *p = tp->p;
    if (!p->db[k]) {
        rc = kv__path_join(path, sizeof path, in->sh->dir, file, err);
        struct stat st;
        bool exists = !rc && stat(path, &st) == 0;
        if (rc) {
            /* reported */
        } else if (!exists && id == 0) {
            rc = kv_seterr(err, KVFTS_ECORRUPT, "database '%s': %s is "
                           "missing", in->sh->dir, file);
        } else if (p->creator == t) {
            rc = kv_seterr(err, KVFTS_ERROR, "segment file %s: its making "
                           "failed in this transaction", file);
        } else if (!exists && create && t->write) {
            rc = part_create(t, p, err);
            tp->unlogged = rc == KVFTS_OK;
        } else if (exists) {
            rc = part_open(t, p, k, file, false, err);
        } else if (create) {
            rc = kv_seterr(err, KVFTS_EINVAL, "%s: a read-only transaction "
                           "cannot create segment file %s",
                           kv_spaces[s].name, file);
        } else {
            rc = gone(file, err);
        }
    }
    if (!rc && p->creator && p->creator != t)
        rc = kv_seterr(err, KVFTS_ERROR, "segment file %s is being created "
                       "by another transaction", file);
    if (!rc) {
        tp->db[0] = p->db[0];
        tp->db[1] = p->db[1];
    }
    pthread_mutex_unlock(&in->parts_mu);
    if (!rc) {
        *out = tp->db[k];
        *tx = tp->unlogged ? NULL : t->txn;
    }
    return rc;
}

struct kv_partw {
    bdb_inst *in;
    uint32_t id;
    DB *db[2];
};

int kv_partw_open(kv_partw **out, kv_txn *t, uint32_t id, kv_err *err)
{
    *out = NULL;
    if (!(id & KV_PART_OWN) || !t->write)
        return KVFTS_OK;
    DB *db[2] = { NULL, NULL };
    DB_TXN *tx[2] = { NULL, NULL };
    int rc = kv__part_db_id(t, KV_TERMS, id, true, &db[0], &tx[0], err);
    if (!rc)
        rc = kv__part_db_id(t, KV_POSTINGS, id, true, &db[1], &tx[1], err);
    if (rc || tx[0] || tx[1])
        return rc;         /* not a file this transaction makes */
    kv_partw *w = kv_calloc(1, sizeof *w);
    if (!w)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    *w = (kv_partw){ t->inst, id, { db[0], db[1] } };
    *out = w;
    return KVFTS_OK;
}

int kv__partw_db(const kv_partw *w, kv_space s, const void *key,
                 size_t klen, bdb_inst **in, DB **db, kv_err *err)
{
    if ((s != KV_TERMS && s != KV_POSTINGS) || klen < 4 ||
        kv_get_be32(key) != w->id)
        return kv_seterr(err, KVFTS_EINVAL, "segment file %08x: a record "
                         "of another space or segment", w->id);
    *in = w->in;
    *db = w->db[sub_of(s)];
    return KVFTS_OK;
}

int kv_partw_sync(kv_partw *w, kv_err *err)
{
    int ret = KV_BDB(w->in->sh, w->db[0]->sync(w->db[0], 0));
    return kv__bdb_err(w->in, ret, err, "segment file");
}

void kv_partw_free(kv_partw *w)
{
    kv_free(w);
}

uint32_t kv__part_of(const void *key)
{
    uint32_t id = kv_get_be32(key);
    return id & KV_PART_OWN ? id : 0;
}

int kv__part_db(kv_txn *t, kv_space s, const void *key, size_t klen,
                bool create, DB **out, DB_TXN **tx, kv_err *err)
{
    if (klen < 4)
        return kv_seterr(err, KVFTS_EINVAL, "%s: key of %zu bytes has no "
                         "segment id", kv_spaces[s].name, klen);
    return kv__part_db_id(t, s, kv__part_of(key), create, out, tx, err);
}

static void used_free(kv_txn *t)
{
    if (t->used != t->inline_used)
        kv_free(t->used);
    t->used = NULL;
    t->nused = t->usedcap = 0;
    t->lastp = NULL;
}

void kv__parts_end(kv_txn *t, bool committed)
{
    if (!t->nused) {
        used_free(t);
        return;
    }
    bdb_inst *in = t->inst;
    pthread_mutex_lock(&in->parts_mu);
    for (size_t i = 0; i < t->nused; i++) {
        kv_part *p = t->used[i].p;
        p->refs--;
        if (p->creator != t)
            continue;
        p->creator = NULL;
        if (committed)
            continue;
        /* The abort renamed the file back to its .new name; its handles
         * can only be closed, and the file removed. */
        part_close_dbs(p);
        part_unmake(in, p->made);
        for (size_t j = 0; j < in->nparts && !p->refs; j++)
            if (in->parts[j] == p) {
                part_forget(in, j);
                break;
            }
    }
    pthread_mutex_unlock(&in->parts_mu);
    used_free(t);
}

void kv_parts_retain(kv_txn *t, const uint32_t *ids, size_t n)
{
    /* The list as a hash (FNV-1a over the ids and their number): the same
     * list as last time costs a lock and no allocation.  A collision only
     * leaves idle handles open until the list changes again. */
    uint64_t h = 1469598103934665603ull ^ n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ids[i]) * 1099511628211ull;
    bdb_inst *in = t->inst;
    pthread_mutex_lock(&in->parts_mu);
    if (in->kept_set && h == in->kept) {
        pthread_mutex_unlock(&in->parts_mu);
        return;
    }
    in->kept = h;
    in->kept_set = true;
    for (size_t j = in->nparts; j-- > 0;) {
        kv_part *p = in->parts[j];
        if (p->refs || p->creator || p->id == 0)
            continue;
        bool listed = false;
        for (size_t i = 0; i < n && !listed; i++)
            listed = ids[i] == p->id;
        if (!listed)
            part_forget(in, j);
    }
    pthread_mutex_unlock(&in->parts_mu);
}

int kv__part_shared_check(bdb_inst *in, bool create, kv_err *err)
{
    char file[32], path[4096];
    part_file(file, sizeof file, 0);
    int rc = kv__path_join(path, sizeof path, in->sh->dir, file, err);
    struct stat st;
    if (rc || stat(path, &st) == 0)
        return rc;
    if (!create)
        return kv_seterr(err, KVFTS_ECORRUPT, "database '%s': %s is "
                         "missing", in->sh->dir, file);
    for (int k = 0; k < 2 && !rc; k++) {
        DB *db = NULL;
        if ((rc = db_new(in, &db, err)))
            return rc;
        int ret = kv__db_open(in->env, db, file, sub_names[k], false, false);
        if (ret)
            rc = kv__bdb_err(in, ret, err, file);
        kv__db_close(db, 0);
    }
    return rc;
}

int kv__part_remove(bdb_inst *in, uint32_t id, kv_err *err)
{
    if (!(id & KV_PART_OWN))
        return kv_seterr(err, KVFTS_EINVAL, "segment %u has no file of its "
                         "own", id);
    char file[32];
    part_file(file, sizeof file, id);
    pthread_mutex_lock(&in->parts_mu);
    for (size_t j = 0; j < in->nparts; j++) {
        kv_part *p = in->parts[j];
        if (p->id != id)
            continue;
        if (p->refs || p->creator) {
            pthread_mutex_unlock(&in->parts_mu);
            return kv_seterr(err, KVFTS_EBUSY, "segment file %s is in use "
                             "by a transaction", file);
        }
        part_forget(in, j);
        break;
    }
    pthread_mutex_unlock(&in->parts_mu);
    DB_TXN *tx = NULL;
    int ret = KV_BDB(in->sh, in->env->txn_begin(in->env, NULL, &tx,
                                                DB_TXN_NOWAIT));
    if (ret)
        return kv__bdb_err(in, ret, err, "begin transaction");
    ret = KV_BDB(in->sh, in->env->dbremove(in->env, tx, file, NULL, 0));
    if (ret) {
        KV_BDB(in->sh, tx->abort(tx));
    } else {
        ret = KV_BDB(in->sh, tx->commit(tx, 0));
    }
    if (ret == ENOENT)
        return KVFTS_OK;        /* removed already */
    if (ret == DB_LOCK_NOTGRANTED || ret == DB_LOCK_DEADLOCK)
        return kv_seterr(err, KVFTS_EBUSY, "segment file %s is open in "
                         "another process", file);
    return kv__bdb_err(in, ret, err, file);
}
