/*
 * kv_env.c -- the Berkeley DB 5.3 environment of a kvfts database: opening
 * it (with recovery), the processes that share it, transactions (the one
 * place they commit), deadlock handling, checkpoints and log removal.
 * With kv_bdb.c (error translation) and kv_records.c (records, cursors),
 * through lib/kv/kv_int.h, the only code that talks to Berkeley DB.
 *
 * Directory layout (one environment, "beside" each other):
 *
 *   DIR/keys.db       B-tree  user key            -> key record: doc id
 *                     (prefix-compressed when this version made it:
 *                     kv_spaces in kv_bdb.c)
 *   DIR/docs.db       B-tree  be32 internal id    -> doc record: CAS, key,
 *                                                    JSON (both in kv_doc.c)
 *   DIR/seg-XXXXXXXX.db  two B-trees, "terms" and "postings" (KV_TERMS,
 *                     KV_POSTINGS): index/ owns the format; a large segment's
 *                     file, or (seg-00000000.db) the small segments' shared
 *                     one (kv_part.c)
 *   DIR/seg-XXXXXXXX.PID.N.new  a segment file being made, until its
 *                     transaction renames it into place (kv_part.c:
 *                     part_create)
 *   DIR/lookups.db    B-tree, sorted duplicates:  "NAME::VALUE" -> user key
 *   DIR/counters.db   B-tree  NAME                -> be64 two's complement
 *   DIR/meta.db       B-tree  NAME                -> bytes; "format" = "kvfts 6"
 *   DIR/segs.db       B-tree  index/ owns: the segment list, the merge under
 *                     way, the files to remove, the segment ids' sequence
 *                     (a file of their own: a merge writes them while a
 *                     batch holds meta.db's pages, KV_SEGS in kv.h)
 *   DIR/doclens.db    B-tree  index/ owns: be32 id -> field lengths
 *   DIR/DB_CONFIG     the environment's settings (the cache size chosen at
 *                     init), read by every process that opens it
 *   DIR/log.*         the transaction log (one 1 MiB file after a checkpoint)
 *   DIR/kvfts.lock    the process registry (below)
 *   __db.*            Berkeley DB's shared regions, only while a process has
 *                     the database open, in /dev/shm/kvfts-ID or DIR (below)
 *
 * The logical keys users see ("count::user", "meta::config",
 * "customer_ref::12345", "fts::_all::fox") map onto these files by prefix.
 *
 * Transactions.  DB_INIT_TXN|LOCK|LOG|MPOOL.  Every database is opened
 * DB_MULTIVERSION, and readers use DB_TXN_SNAPSHOT transactions: a reader
 * never waits for a writer and never sees half a transaction.  Deadlocks are
 * detected on every lock conflict (DB_LOCK_DEFAULT); the victim's operation
 * returns KV_RETRY, and kv_txn_run() aborts and retries the whole
 * transaction.  Commits are synchronous (the log is flushed), so a crash
 * loses no committed write.  After commits, a checkpoint runs once every
 * CHECKPOINT_KB of log, and log files no longer needed for recovery are
 * removed, so the log does not grow without bound.  A commit's status is the
 * commit's: a checkpoint that fails after it is a warning of the handle
 * (kv_env_take_warning), never a failed write.
 *
 * Processes, crashes and recovery: the registry.  Berkeley DB keeps its
 * state in shared regions (__db.0NN, mapped by every process).  A process
 * that dies with the environment open leaves its locks, its transaction and
 * maybe a latch behind.  Berkeley DB's own DB_REGISTER answers that by
 * running recovery in the next process that opens, which makes every other
 * process fail with DB_RUNRECOVERY, and it allows one DB_ENV per process,
 * closed and reopened only as a whole.  kvfts keeps its own registry
 * instead, DIR/kvfts.lock, with Linux open-file-description locks (which,
 * unlike fcntl's process locks, closing another descriptor of the file does
 * not drop):
 *
 *   byte REG_DOOR          held exclusively while a process registers,
 *                          cleans up after a dead one, recovers, or removes
 *                          the environment at the last close;
 *   REG_SLOTS + 16*i ...   slot i: 'L' and the pid of a live process, which
 *                          holds a write lock on the slot's first byte as
 *                          long as it has the database open;
 *   REG_STAMPS ...         the commit stamps (below), mapped shared, past
 *                          the last slot (the slots stay where earlier
 *                          versions look for them: a process of one must
 *                          see this one's processes alive, or its last
 *                          close would remove the regions under them).
 *
 * Commit stamps, so that a handle can keep what it read (the config, the
 * segment list) from one search to the next without reading it again:
 * every write transaction's commit counts itself in gen and, while it runs,
 * in inflight (and in its process's slot count, which the process that
 * cleans up after a dead one subtracts).  A read transaction loads gen,
 * then inflight, begins, and loads gen again: with no commit under way and
 * gen unchanged, its snapshot holds exactly the commits counted in gen, and
 * gen + 1 is its stamp (kv_txn_stamp); otherwise 0, nothing to compare.
 * The first process to open (no other alive) writes the page afresh, or,
 * on a full disk, leaves it without its magic: then no process maps it and
 * stamps are 0 for all.  A process that dies between two of a commit's
 * counts leaves them uneven: stamps stay 0 until the last process closes.
 * A search (kv_txn_run_read) takes its stamp the same way but begins its
 * Berkeley DB transaction only at its first record read (kv__txn_live):
 * one answered from the handle's caches (a count from a term's header in
 * a cached dictionary chunk) touches no lock, mutex or page of the
 * environment; one whose first read comes after a commit runs again.
 *
 * A slot marked 'L' whose lock nobody holds belongs to a process that died.
 * The process that finds one runs Berkeley DB's failchk (which releases the
 * dead process's locks and aborts its transactions, with is_alive answered
 * from this registry, so a reused pid is not mistaken for the dead one);
 * only when the dead process was inside Berkeley DB (failchk says
 * DB_RUNRECOVERY), or when it died making the regions (they cannot be
 * joined: EAGAIN), does it run recovery, by removing the regions and opening
 * with DB_RECOVER.  Survivors that then get DB_RUNRECOVERY are not failed:
 * their instance of the environment is marked dead, the operation returns
 * KV_RETRY (kv_txn_run and batches redo it), and the next transaction opens
 * a new instance, joining the recovered environment.  Survivors also run
 * failchk themselves once a second or so when they begin a transaction, so
 * a dead reader's snapshot does not pin old page versions for ever.  Only
 * what the dead process had not committed is gone.
 *
 * A recovery waits for the survivors' Berkeley DB calls under way: one of
 * them could be a commit writing the log the recovery reads (kv_gate.c).
 *
 * Where the regions live (home_decide): in a private directory of /dev/shm
 * (a tmpfs: memory, like any shared mapping) when there is room, else in
 * the database directory; the first process to open chooses and writes its
 * choice in the registry's header, the others follow it.  The database
 * directory then holds the data, the log, DB_CONFIG and the registry, and
 * a full disk never keeps the database from opening for reads.  The last
 * process to close (no other live slot) checkpoints and removes the
 * regions, with the page-version "freezer" files Berkeley DB may have made
 * beside them; the next process creates them afresh.  (As SQLite does with
 * its -shm and -wal files.)  KVFTS_REGIONS_IN_DIR=1 keeps them in the
 * database directory (for tests of a full disk).  Regions a killed process
 * left behind for a database since deleted or moved are swept by the next
 * first open of any database (shm_sweep).
 *
 * One environment per directory per process: handles of one process share
 * an instance (opened DB_THREAD) through a reference-counted table keyed by
 * the directory's device and inode, guarded by a mutex.  This table is the
 * only process-wide state in kvfts.  kv_env is the per-handle view; a
 * kv_txn holds the instance it began in, which lives until its last user
 * is gone even when a new one has replaced it.
 */
/* F_OFD_* locks are Linux's. */
#define _GNU_SOURCE
#include "kv_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CACHE (64u * 1024u * 1024u)
#define CHECKPOINT_KB 16384        /* checkpoint after this much log */
#define FORMAT_KEY "format"
#define FORMAT_VAL "kvfts 6"
#define RESERVE_MB 32u             /* kept free for reopening, recovery */
#define OPEN_MB 4u                 /* free space an open needs */
#define FAILCHK_NS 1000000000ll    /* a survivor's failchk, at most this often */

#define REG_FILE "kvfts.lock"
#define OWNER_FILE "kvfts.owner"   /* in a home of SHM_DIR: see shm_sweep */
#define OWNER_MAGIC "kvfts-owner 1\n"
#define REG_DOOR 0
#define REG_HEAD 1                 /* the header: where the regions are */
#define REG_HEAD_LEN 255
#define REG_STAMPS 69632           /* past the slots, page aligned: mapped */
#define REG_STAMPS_LEN 20480
#define STAMPS_MAGIC "kvstamp2"    /* kvstamp1: 12288 bytes, no busy */
#define SHM_DIR "/dev/shm"

_Static_assert(sizeof(struct kv_stamps) <= REG_STAMPS_LEN,
               "the stamps fit their pages");
_Static_assert(REG_STAMPS >= REG_SLOTS + REG_MAX * REG_SLOT &&
               REG_STAMPS % 4096 == 0, "the stamps follow the slots");

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_env *shared_list;  /* guarded by shared_mu */

/* Test hook: checkpoints fail (kv_test_fail_checkpoints): after commits,
 * and at the last close. */
static _Thread_local bool tls_fail_checkpoints;

void kv_test_fail_checkpoints(bool on)
{
    tls_fail_checkpoints = on;
}

/* Test hook: kv_test_plain_files. */
static _Thread_local bool tls_plain_files;

void kv_test_plain_files(bool on)
{
    tls_plain_files = on;
}

/* Test hook: kv_test_after_stamp. */
static _Thread_local void (*tls_after_stamp)(void *);
static _Thread_local void *tls_after_stamp_arg;

void kv_test_after_stamp(void (*fn)(void *), void *arg)
{
    tls_after_stamp = fn;
    tls_after_stamp_arg = arg;
}

/* Test hook: kv_test_die_in_commit. */
static _Thread_local bool tls_die_in_commit;

void kv_test_die_in_commit(bool on)
{
    tls_die_in_commit = on;
}

/* Test hook: kv_test_die_in_compare. */
static int test_die_space = -1;
static atomic_int test_die_calls;

void kv_test_die_in_compare(kv_space s, int n)
{
    test_die_space = (int)s;
    atomic_store(&test_die_calls, n);
}

/* Test hooks: kv_test_die_after_recovery, kv_test_recoveries. */
static _Thread_local bool tls_die_after_recovery;
static atomic_int test_recoveries;

void kv_test_die_after_recovery(bool on)
{
    tls_die_after_recovery = on;
}

int kv_test_recoveries(void)
{
    return atomic_load(&test_recoveries);
}

int kv_test_hold_open_lock(kv_env *e, kv_err *err)
{
    bdb_inst *in = e->sh->inst;
    u_int32_t id, one = 1;
    DBT obj = { .data = &one, .size = sizeof one };
    DB_LOCK lock;
    int ret = !in ? EINVAL : KV_BDB(e->sh, in->env->lock_id(in->env, &id));
    if (!ret)
        ret = KV_BDB(e->sh, in->env->lock_get(in->env, id, 0, &obj,
                                              DB_LOCK_WRITE, &lock));
    return ret ? kv_seterr(err, KVFTS_ERROR, "open lock: %s",
                           db_strerror(ret))
               : KVFTS_OK;
}

/* Test hook: kv_test_sleep_in_compare. */
static atomic_int test_sleep_ms;
static int test_sleep_fd = -1;

void kv_test_sleep_in_compare(int fd, int ms)
{
    test_sleep_fd = fd;
    atomic_store(&test_sleep_ms, ms);
}

/* Berkeley DB's own order (bytes, then the shorter first), and the hooks'
 * kill and sleep. */
static int die_compare(DB *db, const DBT *a, const DBT *b)
{
    (void)db;
    if (atomic_load(&test_die_calls) > 0 &&
        atomic_fetch_sub(&test_die_calls, 1) == 1)
        raise(SIGKILL);
    int ms = atomic_exchange(&test_sleep_ms, 0);
    if (ms > 0) {
        if (write(test_sleep_fd, "s", 1) != 1) {
            /* the test sees the byte missing */
        }
        kv__sleep_ms(ms);
    }
    size_t n = a->size < b->size ? a->size : b->size;
    int c = n ? memcmp(a->data, b->data, n) : 0;
    if (c)
        return c;
    return a->size < b->size ? -1 : a->size > b->size;
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

/*
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
 * database, with every commit before it, opens and reads as before.  The
 * regions' size follows the cache (REGION_MAX bounds what they may take:
 * the cache, about as much again for page versions' headers, mutexes and
 * locks, and a fixed part).
 */
#define REGION_MAX(cache) ((cache) * 2 + (48u << 20))

/* Bytes the region files at home may still allocate. */
static uint64_t region_growth(const char *dir, uint64_t cache)
{
    uint64_t have = 0;
    /* __db.001, __db.002, ...: numbered without gaps. */
    for (int i = 1; i <= 9; i++) {
        char name[16], p[4096];
        struct stat st;
        snprintf(name, sizeof name, "__db.%03d", i);
        if (kv__path_join(p, sizeof p, dir, name, NULL) || stat(p, &st) != 0)
            break;
        have += (uint64_t)st.st_blocks * 512u;
    }
    uint64_t max = REGION_MAX(cache);
    return have >= max ? 0 : max - have;
}

static uint64_t fs_avail(const char *path)
{
    struct statvfs v;
    if (statvfs(path, &v) != 0)
        return UINT64_MAX;          /* cannot tell: Berkeley DB will */
    return (uint64_t)v.f_bavail * v.f_frsize;
}

/* KVFTS_OK if the database's file system has extra_mb free, and the
 * regions' file system room for their growth (the same file system when
 * the regions are in the database directory). */
static int space_check(const shared_env *sh, uint64_t cache,
                       unsigned extra_mb, const char *what, kv_err *err)
{
    const char *dir = sh->dir;
    uint64_t growth = sh->home[0] ? region_growth(sh->home, cache)
                                  : REGION_MAX(cache);
    uint64_t avail = fs_avail(dir);
    uint64_t need = ((uint64_t)extra_mb << 20) + (sh->home_shm ? 0 : growth);
    const char *where = sh->home_shm ? "" : " + ";
    if (avail >= need) {
        if (!sh->home_shm || fs_avail(sh->home) >= growth)
            return KVFTS_OK;
        avail = fs_avail(sh->home);
        return kv_seterr(err, KVFTS_ERROR,
                         "database '%s': no room in %s for %s: %llu MB free, "
                         "its shared memory may still take %llu MB; free "
                         "some space there and retry", dir, SHM_DIR, what,
                         (unsigned long long)(avail >> 20),
                         (unsigned long long)((growth + (1u << 20) - 1) >>
                                              20));
    }
    return kv_seterr(err, KVFTS_ERROR,
                     "database '%s': no space left on device for %s: %llu "
                     "MB free, kvfts needs %llu MB free (%u MB%s%s%s) so "
                     "that the database can always be reopened and "
                     "recovered; free some space and retry",
                     dir, what, (unsigned long long)(avail >> 20),
                     (unsigned long long)((need + (1u << 20) - 1) >> 20),
                     extra_mb, extra_mb == RESERVE_MB ? " kept in reserve"
                                                      : " to open",
                     where, sh->home_shm ? "" : "MB its shared-memory files "
                     "may still take");
}

/* ---- DB_CONFIG: the cache size chosen at init ----------------------------
 *
 * The regions are made afresh by the first process to open, so what sizes
 * them must be stored with the database: Berkeley DB reads DIR/DB_CONFIG
 * at every open, and kvfts reads its set_cachesize line too, to size the
 * mutex table and the free-space check before the regions exist. */

static uint64_t config_cache(const char *dir)
{
    char p[4096], line[256];
    uint64_t cache = DEFAULT_CACHE;
    if (kv__path_join(p, sizeof p, dir, "DB_CONFIG", NULL))
        return cache;
    FILE *f = fopen(p, "r");
    if (!f)
        return cache;
    while (fgets(line, sizeof line, f)) {
        unsigned long long gb, b;
        int n;
        if (sscanf(line, " set_cachesize %llu %llu %d", &gb, &b, &n) == 3 &&
            gb < 1024 && (gb || b)) {
            cache = (uint64_t)gb * (1ull << 30) + b;
            break;
        }
    }
    fclose(f);
    return cache;
}

static int config_write(const char *dir, uint64_t cache, kv_err *err)
{
    char p[4096], tmp[4096];
    int rc = kv__path_join(p, sizeof p, dir, "DB_CONFIG", err);
    if (!rc)
        rc = kv__path_join(tmp, sizeof tmp, dir, "DB_CONFIG.tmp", err);
    if (rc)
        return rc;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return kv_seterr(err, KVFTS_ERROR, "database '%s': cannot write "
                         "DB_CONFIG: %s", dir, strerror(errno));
    fprintf(f, "# Berkeley DB environment settings of this kvfts database,\n"
               "# read by every process that opens it.\n"
               "set_cachesize %llu %llu 1\n",
            (unsigned long long)(cache >> 30),
            (unsigned long long)(cache & ((1ull << 30) - 1)));
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, p) != 0) {
        unlink(tmp);
        return kv_seterr(err, KVFTS_ERROR, "database '%s': cannot write "
                         "DB_CONFIG: %s", dir, strerror(errno));
    }
    return KVFTS_OK;
}

/* ---- the process registry (DIR/kvfts.lock) ------------------------------ */

static int reg_lock(int fd, off_t at, short type, bool wait)
{
    struct flock fl;
    kv__flock_byte(&fl, type, at);
    for (;;) {
        if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0)
            return 0;
        if (errno != EINTR || !wait)
            return -1;
    }
}

typedef struct reg_slot {
    char mark;                          /* 'L': registered */
    long pid;
} reg_slot;

/* Slots read 16 KiB at a time: a scan of all REG_MAX slots with a pread
 * each took about 1.9 ms, which the failchk check (maybe_failchk, once a
 * second) added to one search a second: the benchmark's ~2 ms p99
 * outliers.  A pid is parsed only from a registered slot (a strtol of
 * each of the 4,096 slots and 16 reads of 4 KiB took 26 us a scan, now
 * 6.5: a search a second pays it, where one rare term's count takes 2). */
typedef struct reg_iter {
    int fd;
    long base, n;          /* slots [base, base + n) are in b */
    char b[16384];
} reg_iter;

static void reg_iter_init(reg_iter *it, int fd)
{
    it->fd = fd;
    it->base = it->n = 0;
}

static bool reg_iter_read(reg_iter *it, long i, reg_slot *s)
{
    if (i < it->base || i >= it->base + it->n) {
        ssize_t got = pread(it->fd, it->b, sizeof it->b,
                            REG_SLOTS + (off_t)i * REG_SLOT);
        if (got < REG_SLOT)
            return false;
        it->base = i;
        it->n = got / REG_SLOT;
    }
    const char *at = it->b + (i - it->base) * REG_SLOT;
    s->mark = at[0];
    s->pid = 0;
    if (s->mark == 'L') {
        char b[REG_SLOT + 1];
        memcpy(b, at, REG_SLOT);
        b[REG_SLOT] = '\0';
        s->pid = strtol(b + 1, NULL, 10);
    }
    return true;
}

static void reg_write(int fd, long i, char mark, long pid)
{
    char b[REG_SLOT + 1];
    snprintf(b, sizeof b, "%c%14ld\n", mark, pid);
    if (pwrite(fd, b, REG_SLOT, REG_SLOTS + (off_t)i * REG_SLOT) != REG_SLOT) {
        /* The lock, not the mark, says who is alive: a mark not written
         * only makes a later process look at a free slot. */
    }
}

/* What the slots say, other than ours: live processes, and dead ones (a
 * mark without a lock).  The door must be held. */
static void reg_scan(shared_env *sh, int *alive, int *dead)
{
    *alive = *dead = 0;
    reg_slot s;
    reg_iter it;
    reg_iter_init(&it, sh->reg_fd);
    for (long i = 0; i < REG_MAX && reg_iter_read(&it, i, &s); i++) {
        if (i == sh->slot || s.mark != 'L')
            continue;
        if (kv__slot_alive(sh, i))
            (*alive)++;
        else
            (*dead)++;
    }
}

/* Whether path is a file of sh's regions. */
static bool in_home(const shared_env *sh, const char *path)
{
    size_t n = strlen(sh->home);
    return strncmp(path, sh->home, n) == 0 && path[n] == '/';
}

bool kv__dead_peer(const char *path)
{
    /* Called from inside a Berkeley DB wait (kv_stall.c), which may be
     * under shared_mu itself: never wait for it. */
    if (pthread_mutex_trylock(&shared_mu) != 0)
        return false;
    bool any = true;
    for (shared_env *sh = shared_list; sh && any && path; sh = sh->next)
        any = !in_home(sh, path);
    bool dead = false;
    for (shared_env *sh = shared_list; sh && !dead; sh = sh->next) {
        int alive, n = 0;
        if (sh->reg_fd >= 0 && (any || in_home(sh, path)))
            reg_scan(sh, &alive, &n);
        dead = n > 0;
    }
    pthread_mutex_unlock(&shared_mu);
    return dead;
}

/* Clear the marks of dead processes (after failchk or recovery), and take
 * the commits they died in out of the stamps' count. */
static void reg_clear_dead(shared_env *sh)
{
    reg_slot s;
    reg_iter it;
    reg_iter_init(&it, sh->reg_fd);
    for (long i = 0; i < REG_MAX && reg_iter_read(&it, i, &s); i++)
        if (i != sh->slot && s.mark == 'L' &&
            !kv__slot_alive(sh, i)) {
            if (sh->stamps) {
                unsigned k = atomic_exchange(&sh->stamps->slot[i], 0);
                atomic_fetch_sub(&sh->stamps->inflight, (long long)k);
                atomic_store(&sh->stamps->busy[i], 0);
            }
            reg_write(sh->reg_fd, i, '-', 0);
        }
}

/* Map the stamps page, the door held; the first process alive writes it
 * afresh.  Fails only if the page is there and cannot be mapped: the
 * others count their commits in it. */
static int stamps_setup(shared_env *sh, kv_err *err)
{
    int fd = sh->reg_fd, alive, dead;
    reg_scan(sh, &alive, &dead);
    char m[8];
    if (alive == 0) {
        static const char zero[REG_STAMPS_LEN];
        if (pwrite(fd, zero, sizeof m, REG_STAMPS) != (ssize_t)sizeof m ||
            pwrite(fd, zero, sizeof zero, REG_STAMPS) != (ssize_t)sizeof zero ||
            pwrite(fd, STAMPS_MAGIC, 8, REG_STAMPS) != 8)
            return KVFTS_OK;           /* no page: stamps are 0 for all */
    }
    if (pread(fd, m, sizeof m, REG_STAMPS) != (ssize_t)sizeof m ||
        memcmp(m, STAMPS_MAGIC, 8) != 0)
        return KVFTS_OK;
    void *p = mmap(NULL, REG_STAMPS_LEN, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, REG_STAMPS);
    if (p == MAP_FAILED)
        return kv_seterr(err, KVFTS_ERROR, "database '%s': cannot map %s: "
                         "%s", sh->dir, REG_FILE, strerror(errno));
    sh->stamps = p;
    /* a slot's last holder may have died inside a call */
    atomic_store(&sh->stamps->busy[sh->slot], 0);
    return KVFTS_OK;
}

bool kv__recovery_pending(const char *path)
{
    if (pthread_mutex_trylock(&shared_mu) != 0)
        return false;
    bool pending = false;
    for (shared_env *sh = shared_list; sh && !pending; sh = sh->next)
        pending = sh->stamps && atomic_load(&sh->stamps->recovering) &&
                  in_home(sh, path);
    pthread_mutex_unlock(&shared_mu);
    return pending;
}

/* The door's lock belongs to the open file description, so to every
 * thread of the process: a thread takes door_mu first.  Without it a
 * second thread's try (maybe_failchk) got the door while another thread
 * held it (recovering, say), and its unlock then dropped that thread's
 * door, letting another process in.  -1 if not taken (busy, or an error:
 * errno). */
static int door_lock(shared_env *sh, bool wait)
{
    if (wait)
        pthread_mutex_lock(&sh->door_mu);
    else if (pthread_mutex_trylock(&sh->door_mu) != 0)
        return -1;
    if (reg_lock(sh->reg_fd, REG_DOOR, F_WRLCK, wait) != 0) {
        int e = errno;
        pthread_mutex_unlock(&sh->door_mu);
        errno = e;
        return -1;
    }
    sh->door_mine = true;
    return 0;
}

static void reg_door_unlock(shared_env *sh)
{
    if (!sh->door_mine)
        return;
    sh->door_mine = false;
    reg_lock(sh->reg_fd, REG_DOOR, F_UNLCK, false);
    pthread_mutex_unlock(&sh->door_mu);
}

/* Open the registry and take a slot.  Leaves the door locked. */
static int reg_join(shared_env *sh, kv_err *err)
{
    char p[4096];
    int rc = kv__path_join(p, sizeof p, sh->dir, REG_FILE, err);
    if (rc)
        return rc;
    sh->reg_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (sh->reg_fd < 0)
        return kv_seterr(err, KVFTS_ERROR, "database '%s': cannot open: %s "
                         "(the directory must be writable, even to read)",
                         sh->dir, strerror(errno));
    if (door_lock(sh, true) != 0)
        return kv_seterr(err, KVFTS_ERROR, "database '%s': cannot lock %s: "
                         "%s", sh->dir, REG_FILE, strerror(errno));
    reg_slot s;
    reg_iter it;
    reg_iter_init(&it, sh->reg_fd);
    long i;
    for (i = 0; i < REG_MAX; i++) {
        bool have = reg_iter_read(&it, i, &s);
        if (have && s.mark == 'L')
            continue;              /* live, or dead and not cleaned yet */
        if (reg_lock(sh->reg_fd, REG_SLOTS + (off_t)i * REG_SLOT, F_WRLCK,
                     false) == 0)
            break;
    }
    if (i == REG_MAX)
        return kv_seterr(err, KVFTS_EBUSY, "database '%s': more than %d "
                         "processes have it open", sh->dir, REG_MAX);
    sh->slot = i;
    reg_write(sh->reg_fd, i, 'L', (long)getpid());
    return KVFTS_OK;
}

static void reg_leave(shared_env *sh)
{
    if (sh->reg_fd < 0)
        return;
    if (sh->slot >= 0)
        reg_write(sh->reg_fd, sh->slot, '-', 0);
    close(sh->reg_fd);              /* drops the slot and the door */
    sh->reg_fd = -1;
    sh->slot = -1;
}


/* The registry's header: the home of the environment (the directory that
 * holds its regions) and the boot it was made in. */
typedef struct reg_head {
    bool valid;
    char kind;                      /* 'S': SHM_DIR/kvfts-ID; 'L': DIR */
    char id[40];                    /* hex */
    char boot[40];                  /* /proc/sys/kernel/random/boot_id */
} reg_head;

static void boot_id(char out[40])
{
    out[0] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f)
        return;
    if (!fgets(out, 40, f))
        out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

static void reg_head_read(int fd, reg_head *h)
{
    char b[REG_HEAD_LEN + 1];
    memset(h, 0, sizeof *h);
    ssize_t n = pread(fd, b, REG_HEAD_LEN, REG_HEAD);
    if (n <= 0)
        return;
    b[n] = '\0';
    char kind;
    if (sscanf(b, "kvfts-registry 1 home %c %39s boot %39s", &kind, h->id,
               h->boot) == 3 && (kind == 'S' || kind == 'L')) {
        h->kind = kind;
        h->valid = true;
    }
}

static int reg_head_write(int fd, const reg_head *h)
{
    char b[REG_HEAD_LEN];
    memset(b, ' ', sizeof b);
    int n = snprintf(b, sizeof b, "kvfts-registry 1 home %c %s boot %s\n",
                     h->kind, h->id, h->boot);
    if (n < 0 || (size_t)n >= sizeof b)
        return -1;
    b[n] = ' ';
    b[sizeof b - 1] = '\n';
    return pwrite(fd, b, sizeof b, REG_HEAD) == (ssize_t)sizeof b ? 0 : -1;
}

/* The path of a header's home into sh->home. */
static int home_path(shared_env *sh, const reg_head *h, kv_err *err)
{
    int n = h->kind == 'S'
                ? snprintf(sh->home, sizeof sh->home, "%s/kvfts-%s", SHM_DIR,
                           h->id)
                : snprintf(sh->home, sizeof sh->home, "%s", sh->dir);
    if (n < 0 || (size_t)n >= sizeof sh->home)
        return kv_seterr(err, KVFTS_EINVAL, "path too long: %s", sh->dir);
    sh->home_shm = h->kind == 'S';
    return KVFTS_OK;
}

/* Unlink the region and freezer files Berkeley DB left at home (__db.*). */
static void region_files_unlink(const char *home)
{
    char p[PATH_MAX + 32];
    DIR *h = opendir(home);
    struct dirent *f;
    while (h && (f = readdir(h)) != NULL)
        if (strncmp(f->d_name, "__db.", 5) == 0 &&
            snprintf(p, sizeof p, "%s/%s", home, f->d_name) < (int)sizeof p)
            unlink(p);
    if (h)
        closedir(h);
}

/* Remove a home of SHM_DIR: its region and freezer files, its owner file,
 * and itself. */
static void shm_dir_remove(const char *home)
{
    char p[PATH_MAX + 32];
    region_files_unlink(home);
    if (snprintf(p, sizeof p, "%s/%s", home, OWNER_FILE) < (int)sizeof p)
        unlink(p);
    rmdir(home);
}

/* Berkeley DB's environment region (__db.001) begins with its magic number
 * -- "these fields must never change in order" (dbinc/region.h) -- which
 * the process making the regions writes last (__env_turn_on). */
#define BDB_REGION_MAGIC 0x120897u

/* True if home holds regions that were never finished: a __db.001 too
 * short for the magic number or without it.  Berkeley DB's own open and
 * remove wait for such regions to be finished, three times, 3 + 6 + 9 s,
 * before giving up on them (BDB1546), so an open that ran into them took
 * 36 s.  Regions are made only with the door held, so a caller holding it
 * knows their maker died making them: nobody will finish them. */
static bool regions_half_made(const char *home)
{
    char p[PATH_MAX + 16];
    if (snprintf(p, sizeof p, "%s/__db.001", home) >= (int)sizeof p)
        return false;
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return false;
    uint32_t magic = 0;
    ssize_t n = pread(fd, &magic, sizeof magic, 0);
    close(fd);
    return n != (ssize_t)sizeof magic || magic != BDB_REGION_MAGIC;
}

/* Discard half-made regions: set their panic flag (the word after the
 * magic), as Berkeley DB's remove does, should anything be attached after
 * all, and unlink them. */
static void regions_discard(const char *home)
{
    char p[PATH_MAX + 16];
    int fd = snprintf(p, sizeof p, "%s/__db.001", home) < (int)sizeof p
                 ? open(p, O_WRONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
    struct stat st;
    uint32_t panic = 1;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= 8 &&
        pwrite(fd, &panic, sizeof panic, 4) != (ssize_t)sizeof panic) {
        /* unlinked all the same */
    }
    if (fd >= 0)
        close(fd);
    region_files_unlink(home);
}

/* Remove the regions (and freezer files) of the environment at home.
 * Finished regions go through Berkeley DB's remove, which marks them dead
 * for any process still attached (they reopen); half-made ones nobody can
 * be attached to are unlinked. */
static void regions_remove(const char *home)
{
    DB_ENV *e = NULL;
    if (regions_half_made(home)) {
        regions_discard(home);
    } else if (db_env_create(&e, 0) == 0) {
        e->set_errcall(e, kv__on_bdb_error);
        e->set_msgcall(e, kv__on_bdb_msg);
        e->remove(e, home, DB_FORCE);
    }
}

/* Remove the regions at home, and the home itself when it is a directory
 * of SHM_DIR. */
static void home_remove(const char *home, bool shm)
{
    struct stat st;
    if (stat(home, &st) != 0)
        return;
    regions_remove(home);
    if (shm)
        shm_dir_remove(home);
}

/*
 * Regions nobody will come back for.  A process killed with its database
 * open leaves its regions in SHM_DIR -- memory -- until that database is
 * opened again; if the database directory is deleted or moved meanwhile,
 * they would stay until the next boot.  So every region directory holds
 * OWNER_FILE, naming the database directory, and every process attached
 * holds a read lock on it (owner_hold).  The first process to open a
 * database sweeps SHM_DIR: a region directory whose owner file nobody
 * holds, and whose database no longer names it (its registry is gone, or
 * its header names another home), is removed.  One whose database still
 * names it is left to that database's next open, which recovers from it.
 * Directories without an owner file (being made, or made by an older
 * kvfts) and other users' are left alone.
 */
static bool shm_name(const char *name)
{
    if (strncmp(name, "kvfts-", 6) != 0 || strlen(name) != 6 + 32)
        return false;
    for (const char *c = name + 6; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return false;
    return true;
}

/* Whether the database named by the owner file at fd has left the home
 * with this id: its registry is gone, or its header names another home. */
static bool shm_orphan(int fd, const char *id)
{
    char b[PATH_MAX + 64];
    ssize_t n = pread(fd, b, sizeof b - 1, 0);
    size_t magic = strlen(OWNER_MAGIC);
    if (n <= (ssize_t)magic || memcmp(b, OWNER_MAGIC, magic) != 0)
        return false;
    b[n] = '\0';
    char p[PATH_MAX + 80];
    if (snprintf(p, sizeof p, "%s/%s", b + magic, REG_FILE) >= (int)sizeof p)
        return false;
    int rfd = open(p, O_RDONLY | O_CLOEXEC);
    if (rfd < 0)
        return errno == ENOENT || errno == ENOTDIR;
    reg_head h;
    reg_head_read(rfd, &h);
    close(rfd);
    return !(h.valid && h.kind == 'S' && strcmp(h.id, id) == 0);
}

static void shm_sweep(const char *keep_id)
{
    DIR *d = opendir(SHM_DIR);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!shm_name(e->d_name) || strcmp(e->d_name + 6, keep_id) == 0)
            continue;
        char home[PATH_MAX], p[PATH_MAX + 32];
        snprintf(home, sizeof home, "%s/%s", SHM_DIR, e->d_name);
        snprintf(p, sizeof p, "%s/%s", home, OWNER_FILE);
        int fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue;
        /* No process uses it: its files go without Berkeley DB's
         * DB_ENV->remove, which would join the stale regions first. */
        if (reg_lock(fd, 0, F_WRLCK, false) == 0 &&
            shm_orphan(fd, e->d_name + 6))
            shm_dir_remove(home);
        close(fd);
    }
    closedir(d);
}

/* Write the owner file of a new home in SHM_DIR (see shm_name). */
static int owner_write(const shared_env *sh)
{
    char p[PATH_MAX + 32];
    if (snprintf(p, sizeof p, "%s/%s", sh->home, OWNER_FILE) >= (int)sizeof p)
        return -1;
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    size_t m = strlen(OWNER_MAGIC), n = strlen(sh->absdir);
    bool ok = write(fd, OWNER_MAGIC, m) == (ssize_t)m &&
              write(fd, sh->absdir, n) == (ssize_t)n;
    close(fd);
    return ok ? 0 : -1;
}

/* Hold the owner file of the home, shared, while this process has it. */
static void owner_hold(shared_env *sh)
{
    char p[PATH_MAX + 32];
    if (!sh->home_shm ||
        snprintf(p, sizeof p, "%s/%s", sh->home, OWNER_FILE) >= (int)sizeof p)
        return;
    sh->owner_fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (sh->owner_fd >= 0 && reg_lock(sh->owner_fd, 0, F_RDLCK, true) != 0) {
        close(sh->owner_fd);
        sh->owner_fd = -1;
    }
}

/*
 * Where the regions live.  They are Berkeley DB's working memory, not the
 * user's data: by default they go to a private directory of SHM_DIR (a
 * tmpfs, memory like any shared mapping), so that the database directory
 * holds only the data, the log and two small files, and a full disk never
 * keeps the database from opening.  Without a usable SHM_DIR (no such
 * tmpfs, or less room in it than the regions may take) they stay in the
 * database directory.  The first process to open (no other alive) chooses
 * and writes its choice into the registry's header; the others follow it.
 * *@p recover tells whether the environment must be recovered from the
 * log: a process died with it open and its regions are gone or stale (a
 * new boot), or regions were left behind.  The door must be held.
 */
static int home_decide(shared_env *sh, uint64_t cache, bool *recover,
                       kv_err *err)
{
    reg_head h;
    char boot[40];
    int alive, dead;
    reg_head_read(sh->reg_fd, &h);
    boot_id(boot);
    reg_scan(sh, &alive, &dead);
    bool new_boot = h.valid && boot[0] && strcmp(h.boot, boot) != 0;
    *recover = false;
    if (alive > 0 && !new_boot) {
        if (!h.valid)
            return kv_seterr(err, KVFTS_ECORRUPT, "database '%s': %s has no "
                             "valid header while processes have it open",
                             sh->dir, REG_FILE);
        int rc = home_path(sh, &h, err);
        char p[PATH_MAX];
        struct stat st;
        if (!rc && (kv__path_join(p, sizeof p, sh->home, "__db.001", NULL) ||
                    stat(p, &st) != 0))
            rc = kv_seterr(err, KVFTS_EBUSY, "database '%s': its shared "
                           "memory (%s) vanished while %d other process(es) "
                           "had it open; close them and retry", sh->dir,
                           sh->home, alive);
        return rc;
    }
    /* The first process: whatever regions a previous one left are stale. */
    if (h.valid) {
        char old[PATH_MAX + 64];
        int n = h.kind == 'S'
                    ? snprintf(old, sizeof old, "%s/kvfts-%s", SHM_DIR, h.id)
                    : snprintf(old, sizeof old, "%s", sh->dir);
        char p[PATH_MAX + 80];
        struct stat st;
        bool left = n > 0 && (size_t)n < sizeof old &&
                    snprintf(p, sizeof p, "%s/__db.001", old) > 0 &&
                    stat(p, &st) == 0;
        if (left || dead || new_boot)
            *recover = true;
        if (left || h.kind == 'S')
            home_remove(old, h.kind == 'S');
    } else {
        char p[PATH_MAX];
        struct stat st;
        if (kv__path_join(p, sizeof p, sh->dir, "__db.001", NULL) == 0 &&
            stat(p, &st) == 0) {
            *recover = true;        /* regions without a registry */
            home_remove(sh->dir, false);
        }
    }
    reg_head nh = { true, 'L', "", "" };
    snprintf(nh.boot, sizeof nh.boot, "%s", boot[0] ? boot : "unknown");
    unsigned char rnd[16];
    FILE *f = fopen("/dev/urandom", "r");
    bool got = f && fread(rnd, 1, sizeof rnd, f) == sizeof rnd;
    if (f)
        fclose(f);
    if (!got) {
        long long t = kv__now_ns() ^ ((long long)getpid() << 32);
        memcpy(rnd, &t, 8);
        memcpy(rnd + 8, &sh->ino, sizeof sh->ino < 8 ? sizeof sh->ino : 8);
    }
    for (int i = 0; i < 16; i++)
        snprintf(nh.id + 2 * i, 3, "%02x", rnd[i]);
    struct statvfs v;
    char shm[PATH_MAX];
    snprintf(shm, sizeof shm, "%s/kvfts-%s", SHM_DIR, nh.id);
    if (!getenv("KVFTS_REGIONS_IN_DIR") && statvfs(SHM_DIR, &v) == 0 &&
        (uint64_t)v.f_bavail * v.f_frsize >= REGION_MAX(cache) +
                                             (64u << 20) &&
        mkdir(shm, 0700) == 0)
        nh.kind = 'S';
    int rc = home_path(sh, &nh, err);
    if (!rc && nh.kind == 'S' && owner_write(sh) != 0) {
        home_remove(shm, true);
        nh.kind = 'L';
        rc = home_path(sh, &nh, err);
    }
    if (!rc && reg_head_write(sh->reg_fd, &nh) != 0) {
        if (nh.kind == 'S')
            home_remove(shm, true);
        rc = kv_seterr(err, KVFTS_ERROR, "database '%s': cannot write %s: "
                       "%s", sh->dir, REG_FILE, strerror(errno));
    }
    if (!rc && !getenv("KVFTS_REGIONS_IN_DIR"))
        shm_sweep(nh.id);
    return rc;
}

/* Berkeley DB's failchk asks whether a thread of control is alive.  Our
 * own threads are; another process is alive while its registry slot is
 * locked (a pid alone could be reused by an unrelated process). */
static int is_alive(DB_ENV *dbenv, pid_t pid, db_threadid_t tid,
                    u_int32_t flags)
{
    (void)tid;
    (void)flags;
    shared_env *sh = dbenv->app_private;
    if (pid == getpid())
        return 1;
    if (!sh || sh->reg_fd < 0)
        return kill(pid, 0) == 0 || errno == EPERM;
    reg_slot s;
    reg_iter it;
    reg_iter_init(&it, sh->reg_fd);
    for (long i = 0; i < REG_MAX && reg_iter_read(&it, i, &s); i++)
        if (s.mark == 'L' && s.pid == (long)pid)
            return kv__slot_alive(sh, i);
    return 0;                       /* not registered: not one of ours */
}

/* ---- opening an instance -------------------------------------------------- */

static int open_space(bdb_inst *in, kv_space s, bool create, kv_err *err)
{
    DB *db = NULL;
    const char *dir = in->sh->dir;
    int ret = db_create(&db, in->env, 0);
    if (ret)
        return kv__bdb_err(in, ret, err, "db_create");
    if (kv_spaces[s].flags)
        db->set_flags(db, kv_spaces[s].flags);
    if (kv_spaces[s].pagesize)
        db->set_pagesize(db, kv_spaces[s].pagesize);
    if (test_die_space == (int)s)
        db->set_bt_compare(db, die_compare);
    /* An existing file is opened inside a snapshot transaction: opening
     * reads the B-tree's root page, and under an ordinary lock that waits
     * for any writer holding it (a load's batch splitting the root holds it
     * until it commits), so a new reader would wait for a whole batch.  A
     * missing file is created only by a handle that may write (a space
     * added by a newer kvfts); a read never creates anything. */
    char path[4096];
    struct stat st;
    bool exists = kv__path_join(path, sizeof path, dir, kv_spaces[s].file,
                            NULL) == KVFTS_OK && stat(path, &st) == 0;
    if (!exists && !create) {
        kv__db_close(db, 0);
        return kv_seterr(err, KVFTS_ECORRUPT, "database '%s': %s is "
                         "missing%s", dir, kv_spaces[s].file,
                         s == KV_SEGS ? " (a database written by a kvfts "
                         "before format 5 has none: load its source into a "
                         "new database)" : "");
    }
    if (!exists && kv_spaces[s].compress_minkey && !tls_plain_files) {
        /* only a new file: an existing one says in its meta page */
        ret = db->set_bt_compress(db, NULL, NULL);
        if (!ret)
            ret = db->set_bt_minkey(db, kv_spaces[s].compress_minkey);
        if (ret) {
            kv__db_close(db, 0);
            return kv_seterr(err, KVFTS_ERROR, "database '%s': %s: cannot "
                             "set compression: %s", dir, kv_spaces[s].file,
                             db_strerror(ret));
        }
    }
    ret = kv__db_open(in->env, db, kv_spaces[s].file, NULL, exists, false);
    if (ret) {
        kv__db_close(db, 0);
        if (ret == ENOENT)
            return kv_seterr(err, KVFTS_ENOTFOUND,
                             "database '%s': no kvfts database here (create "
                             "it with 'kvfts init %s')", dir, dir);
        if (ret == DB_RUNRECOVERY)
            return kv__bdb_err(in, ret, err, kv_spaces[s].file);
        int code = (ret == EINVAL || ret == DB_OLD_VERSION)
                       ? KVFTS_ECORRUPT : KVFTS_ERROR;
        return kv_seterr(err, code, "database '%s': cannot open %s: %s%s%s",
                         dir, kv_spaces[s].file, db_strerror(ret),
                         kv__bdb_msg()[0] ? ": " : "", kv__bdb_msg());
    }
    in->db[s] = db;
    return KVFTS_OK;
}

/* ---- waiting for another writer --------------------------------------- */

/* A write transaction that waits for a lock (another process's batch)
 * gives up after kv__busy_timeout() seconds with DB_LOCK_NOTGRANTED
 * (DB_TIME_NOTGRANTED; kv__bdb_err makes it KVFTS_EBUSY).  Berkeley DB
 * checks a lock timeout only when a request first blocks and when the
 * deadlock detector runs, so while this process has a write transaction
 * open a watchdog thread of its instance runs the detector in
 * DB_LOCK_EXPIRE mode every WATCHDOG_MS. */
#define WATCHDOG_MS 200

static void *watchdog_main(void *arg)
{
    bdb_inst *in = arg;
    pthread_mutex_lock(&in->wd_mu);
    while (!in->wd_stop) {
        if (in->wd_writers > 0) {
            pthread_mutex_unlock(&in->wd_mu);
            KV_BDB(in->sh, in->env->lock_detect(in->env, 0, DB_LOCK_EXPIRE,
                                                NULL));
            pthread_mutex_lock(&in->wd_mu);
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += WATCHDOG_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            if (!in->wd_stop)
                pthread_cond_timedwait(&in->wd_cv, &in->wd_mu, &ts);
        } else {
            pthread_cond_wait(&in->wd_cv, &in->wd_mu);
        }
    }
    pthread_mutex_unlock(&in->wd_mu);
    return NULL;
}

/* A write transaction begins (@p delta 1) or ends (-1) in @p in. */
static void watchdog_writers(bdb_inst *in, int delta)
{
    pthread_mutex_lock(&in->wd_mu);
    in->wd_writers += delta;
    if (delta > 0 && !in->wd_started && !in->wd_stop) {
        in->wd_started = kv_thread_start(&in->wd, watchdog_main, in);
    }
    pthread_cond_signal(&in->wd_cv);
    pthread_mutex_unlock(&in->wd_mu);
}

static void watchdog_stop(bdb_inst *in)
{
    pthread_mutex_lock(&in->wd_mu);
    in->wd_stop = true;
    bool started = in->wd_started;
    pthread_cond_signal(&in->wd_cv);
    pthread_mutex_unlock(&in->wd_mu);
    if (started)
        pthread_join(in->wd, NULL);
}

static void inst_free(bdb_inst *in)
{
    pthread_mutex_destroy(&in->parts_mu);
    pthread_mutex_destroy(&in->wd_mu);
    pthread_cond_destroy(&in->wd_cv);
    kv_free(in);
}

/* Instances whose environment panicked (another process recovered it, or
 * a damaged page): Berkeley DB refuses calls there, DB->close included,
 * so their handles cannot be freed (LeakSanitizer found them lost).  They
 * are kept here, reachable, until the process exits: one per recovery the
 * process lives through. */
static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
static bdb_inst *kept_panicked;   /* (kept_mu) */

/* Write every dirty page to the files, then a checkpoint record, unless
 * nothing was logged since the last (@p flags DB_FORCE: even then; @p kb:
 * only after that much log).  Berkeley DB's status; ENOSPC under the test
 * hook, as a full disk would make it. */
static int ckp_write(bdb_inst *in, u_int32_t kb, u_int32_t flags)
{
    if (tls_fail_checkpoints)
        return ENOSPC;
    return KV_BDB(in->sh, in->env->txn_checkpoint(in->env, kb, 0, flags));
}

/* Remove the log files no recovery needs any more (after a checkpoint). */
static int log_remove(bdb_inst *in)
{
    char **list = NULL;
    int ret = KV_BDB(in->sh, in->env->log_archive(in->env, &list,
                                                  DB_ARCH_REMOVE));
    if (list)
        free(list);     /* Berkeley DB allocated it with malloc */
    return ret;
}

/* Close an instance: its databases, then the environment.  @p checkpoint:
 * flush every dirty page first (the last process, or one that wrote).
 * False if that checkpoint failed: then pages of committed writes may be
 * in the cache only, and the regions must not be removed without a
 * recovery (shared_close). */
static bool inst_close(bdb_inst *in, bool checkpoint)
{
    if (!in)
        return true;
    watchdog_stop(in);
    if (atomic_load(&in->panicked)) {
        pthread_mutex_lock(&kept_mu);
        in->next_kept = kept_panicked;
        kept_panicked = in;
        pthread_mutex_unlock(&kept_mu);
        return false;
    }
    /* The checkpoint writes every dirty page and syncs each file it
     * wrote, unless nothing was logged since the last one (which did).
     * Closing the databases then syncs nothing more (DB_NOSYNC): a sync
     * each at close was five of a one-document load's fifteen syncs. */
    bool flushed = true;
    if (in->env && in->db[KV_META] && checkpoint) {
        flushed = ckp_write(in, 0, 0) == 0;
        if (flushed)
            (void)log_remove(in);
    }
    /* A process that wrote nothing does not flush a database as it closes
     * it either (DB_NOSYNC: the log, not the files, makes commits
     * durable); a reader closing during a load would wait for the load's
     * pages.  After a failed checkpoint the close tries its own sync. */
    kv__parts_close(in);
    for (int s = 0; s < KV_NSPACES; s++)
        if (in->db[s])
            kv__db_close(in->db[s], checkpoint && !flushed ? 0 : DB_NOSYNC);
    if (in->env)
        KV_BDB(in->sh, in->env->close(in->env, 0));
    inst_free(in);
    return flushed;
}

/* The bytes of @p dir's database files (*.db) and log files (log.*);
 * errno if the directory cannot be read. */
static int dir_sizes(const char *dir, uint64_t *db_bytes, uint64_t *log_bytes)
{
    *db_bytes = *log_bytes = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        bool is_db = n > 3 && strcmp(de->d_name + n - 3, ".db") == 0;
        bool is_log = strncmp(de->d_name, "log.", 4) == 0;
        struct stat st;
        if ((is_db || is_log) && fstatat(dirfd(d), de->d_name, &st, 0) == 0)
            *(is_db ? db_bytes : log_bytes) += (uint64_t)st.st_size;
    }
    closedir(d);
    return 0;
}

/* The size of the log files of an environment made for @p dir: 1 MiB, or
 * a 256th of the directory's database files (*.db) up to 16 MiB, a power
 * of two.  A switch to a new log file syncs the last one (fdatasync, with
 * a disk cache flush) and creates a file: with 1 MiB files the 4M-to-5M
 * step of the growth benchmark (550 MB of log) made 550 of them, and ran
 * about 5% faster with files of 4-16 MiB (alternating runs; no faster
 * above 4).  Joining processes may ask for another size: Berkeley DB takes
 * a new size at any time, for the files it makes from then on.  After a
 * load's checkpoint the directory keeps the current file only, and it is
 * part of what a user sees (du -sb): with 4 MiB files that was 4 MB of a
 * 72-80 MB catalog or dictionary, so small databases keep 1 MiB files, and
 * a large one's last file is at most 0.4% of it.  Berkeley DB wants the
 * log buffer (256 KiB) at most a quarter of a file. */
static u_int32_t log_file_bytes(const char *dir)
{
    uint64_t data = 0, logs;
    if (dir_sizes(dir, &data, &logs))
        data = 0;
    u_int32_t bytes = 1024u * 1024u;
    while (bytes < 16u * 1024u * 1024u && (uint64_t)bytes * 2 * 256 <= data)
        bytes *= 2;
    return bytes;
}

/* A Berkeley DB environment handle for sh's directory, configured as every
 * kvfts process configures it. */
static int env_create(shared_env *sh, uint64_t cache, DB_ENV **out,
                      kv_err *err)
{
    DB_ENV *env = NULL;
    int ret = db_env_create(&env, 0);
    if (ret)
        return kv_seterr(err, KVFTS_ERROR, "db_env_create: %s",
                         db_strerror(ret));
    env->app_private = sh;
    env->set_errcall(env, kv__on_bdb_error);
    env->set_msgcall(env, kv__on_bdb_msg);
    env->set_cachesize(env, (u_int32_t)(cache >> 30),
                       (u_int32_t)(cache & ((1u << 30) - 1)), 1);
    env->set_lk_detect(env, DB_LOCK_DEFAULT);
    /* A lock timeout (a write transaction's, see kv__busy_timeout) is
     * DB_LOCK_NOTGRANTED, told apart from a deadlock. */
    env->set_flags(env, DB_TIME_NOTGRANTED, 1);

    /* Locks: a write transaction locks the pages it writes, and every
     * transaction's write set is bounded (a batch's segment, a merge
     * step), so a table sized to a few batches suffices. */
    env->set_lk_max_locks(env, 100000);
    env->set_lk_max_objects(env, 100000);
    env->set_lk_max_lockers(env, 4000);
    /* The lock objects' hash table: by default a bucket per object, each
     * with a statistics record (over 100 bytes), which Berkeley DB zeroes
     * when it makes the region -- 15 MB of shared memory written at every
     * first open, half a `kvfts` command's 20 ms.  A transaction holds a
     * few hundred locks at most (a merge's own-file cursors take none), so
     * 16,384 buckets keep chains short. */
    env->set_lk_tablesize(env, 16384);
    /* Under multiversion concurrency each page version a committed
     * transaction left in the cache keeps that transaction's record, with
     * a mutex, until the version is freed -- which Berkeley DB does only
     * when it needs the space.  Mutexes are sized to that: one per buffer
     * and one per such record, plus the fixed ones.  (The default was
     * exhausted after about 65,000 single-document commits.) */
    env->mutex_set_max(env, (u_int32_t)(cache / KV_PAGE * 2 + 20000));
    /* All made at creation (3 ms of a first open).  Made as needed
     * (mutex_set_init 1,024) a one-document load took 8 ms instead of 12,
     * and Berkeley DB grew the region through 800,000 single commits; but
     * growth benchmark runs with it broke databases twice: a dictionary
     * chunk that did not parse after the 5M step, and a search spinning in
     * __bam_search after the 500k step, its docs.db holding a zeroed page
     * in the B-tree (db5.3_verify).  Runs without it never did. */
    env->set_lg_bsize(env, 256u * 1024u);
    env->set_lg_max(env, log_file_bytes(sh->absdir));
    env->set_tx_max(env, 1000);
    env->set_thread_count(env, 256);
    env->set_isalive(env, is_alive);
    /* The regions live at the home (see home_decide); the databases and
     * the log in the database directory. */
    env->add_data_dir(env, sh->absdir);
    env->set_create_dir(env, sh->absdir);
    env->set_lg_dir(env, sh->absdir);
    *out = env;
    return KVFTS_OK;
}

/* Open a new instance of the environment, with the door held.  @p recover:
 * run recovery (the regions are removed first). */
static int inst_open(shared_env *sh, bool create, bool recover,
                     bool failchk, bdb_inst **out, kv_err *err)
{
    *out = NULL;
    uint64_t cache = config_cache(sh->dir);
    int rc = space_check(sh, cache, OPEN_MB, "opening", err);
    if (rc)
        return rc;
    bdb_inst *in = kv_calloc(1, sizeof *in);
    if (!in)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    in->sh = sh;
    in->cache = cache;
    pthread_mutex_init(&in->wd_mu, NULL);
    pthread_mutex_init(&in->parts_mu, NULL);
    pthread_cond_init(&in->wd_cv, NULL);
    atomic_init(&in->wrote, false);
    atomic_init(&in->panicked, false);
    /* Half-made regions: their maker died making them (the door is held),
     * and nobody will finish them.  Those and the old regions of a
     * recovery are removed; recovery rebuilds them from the log. */
    if (recover || regions_half_made(sh->home)) {
        regions_remove(sh->home);
        recover = true;
        if (sh->home_shm)
            mkdir(sh->home, 0700);
    }
    rc = env_create(sh, cache, &in->env, err);
    if (rc) {
        inst_free(in);
        return rc;
    }
    kv__bdb_msgs_clear();
    u_int32_t flags = DB_CREATE | DB_INIT_TXN | DB_INIT_LOCK | DB_INIT_LOG |
                      DB_INIT_MPOOL | DB_THREAD | (recover ? DB_RECOVER : 0);
    int ret = KV_BDB(sh, in->env->open(in->env, sh->home, flags, 0644));
    if (ret) {
        if (ret == EACCES || ret == EROFS || ret == EPERM)
            rc = kv_seterr(err, KVFTS_ERROR,
                           "database '%s': cannot open: %s (the directory "
                           "must be writable, even to read)", sh->dir,
                           strerror(ret));
        else if (ret == DB_RUNRECOVERY && kv__corrupt_msg()[0])
            rc = kv_seterr(err, KVFTS_ECORRUPT,
                           "database '%s': recovery failed: %s", sh->dir,
                           kv__corrupt_msg());
        else if (ret == DB_RUNRECOVERY)
            rc = kv_seterr(err, KV_RETRY, "database '%s': the environment "
                           "needs recovery", sh->dir);
        else if (ret == EAGAIN && !recover)
            /* BDB1546 "unable to join the environment": the regions exist
             * but were never finished.  Regions are made only with the
             * door held, as it is now, so their maker died making them (a
             * process killed while it recovered or opened first); no one
             * else ever will finish them.  Recovery removes and remakes
             * them. */
            rc = kv_seterr(err, KV_RETRY, "database '%s': the regions were "
                           "left half made", sh->dir);
        else
            rc = kv_seterr(err, recover ? KVFTS_ECORRUPT : KVFTS_ERROR,
                           "database '%s': %s%s%s%s", sh->dir,
                           recover ? "recovery failed: " : "",
                           db_strerror(ret), kv__bdb_msg()[0] ? ": " : "",
                           kv__bdb_msg());
        KV_BDB(sh, in->env->close(in->env, 0));
        in->env = NULL;
        inst_close(in, false);
        return rc;
    }
    if (recover)
        kv__parts_sweep(sh->dir, false);
    u_int32_t gb = 0, bytes = 0;
    int ncache = 0;
    if (in->env->get_cachesize(in->env, &gb, &bytes, &ncache) == 0)
        in->cache = ((uint64_t)gb << 30) + bytes;
    if (failchk) {
        /* Before any database is opened: an open takes a lock on its file,
         * which a dead process may hold, and while this process holds the
         * door nobody else would release it (a hang seen in
         * e2e.reader_kill: the door's holder waited in __fop_file_setup,
         * every other process at the door). */
        ret = KV_BDB(sh, in->env->failchk(in->env, 0));
        if (ret)      /* DB_RUNRECOVERY: it died inside Berkeley DB; or
                         failchk could not release something it held */
            rc = kv_seterr(err, KV_RETRY, "database '%s': failchk: %s: "
                           "recovering", sh->dir, db_strerror(ret));
        else          /* its transactions rolled back: what it was making */
            kv__parts_sweep(sh->dir, true);
    }
    for (int s = 0; s < KV_NSPACES && !rc; s++)
        if (!kv__parted((kv_space)s))
            rc = open_space(in, (kv_space)s, create, err);
    char old[4096];
    struct stat st;
    if (!rc && kv__path_join(old, sizeof old, sh->dir, "postings.db",
                             NULL) == KVFTS_OK && stat(old, &st) == 0)
        rc = kv_seterr(err, KVFTS_ECORRUPT, "database '%s' was written by an "
                       "older kvfts (its segments are inside postings.db, "
                       "not in files of their own): load its source into "
                       "a new database",
                       sh->dir);
    if (!rc)
        rc = kv__part_shared_check(in, create, err);
    if (rc) {
        inst_close(in, false);
        return rc;
    }
    *out = in;
    return KVFTS_OK;
}

/* Open an instance with the door held: clean up after dead processes
 * (failchk; recovery when that is not enough) and join or create. */
static int inst_open_checked(shared_env *sh, bool create, bool recover,
                             bdb_inst **out, kv_err *err)
{
    int alive, dead;
    reg_scan(sh, &alive, &dead);
    if (kv__recovery_owed(sh))
        recover = true;  /* the last one did not succeed: not to be joined */
    int rc;
    for (;;) {
        /* With a dead process: failchk releases what it held, or cannot
         * (KV_RETRY): then recover. */
        if (recover)
            kv__survivors_wait(sh);
        rc = inst_open(sh, create, recover, dead && !recover, out, err);
        if (rc == KV_RETRY && !recover) {   /* or found panicked */
            recover = true;
            continue;
        }
        break;
    }
    bool recovered = recover && !rc;
    if (recovered && tls_die_after_recovery)
        raise(SIGKILL);
    if (recovered)
        atomic_fetch_add(&test_recoveries, 1);
    kv__survivors_go(sh, recovered);
    if (rc)
        return rc;
    if (dead)
        reg_clear_dead(sh);
    atomic_store(&sh->failchk_at, kv__now_ns());
    return KVFTS_OK;
}

/* ---- instances in use ----------------------------------------------------- */

/* Drop a use of in; the last use of a replaced instance closes it. */
static void inst_release(bdb_inst *in)
{
    shared_env *sh = in->sh;
    pthread_mutex_lock(&sh->mu);
    bool close_it = --in->users == 0 && in != sh->inst;
    pthread_mutex_unlock(&sh->mu);
    if (close_it)
        inst_close(in, false);
}

/* A use of the current instance, opening a new one when it died (another
 * process's recovery panicked it). */
static int inst_acquire(shared_env *sh, bool create, bdb_inst **out,
                        kv_err *err)
{
    pthread_mutex_lock(&sh->mu);
    for (;;) {
        if (sh->inst && !sh->inst->dead) {
            sh->inst->users++;
            *out = sh->inst;
            pthread_mutex_unlock(&sh->mu);
            return KVFTS_OK;
        }
        if (!sh->opening)
            break;
        pthread_cond_wait(&sh->cv, &sh->mu);
    }
    sh->opening = true;
    bdb_inst *old = sh->inst;
    pthread_mutex_unlock(&sh->mu);

    bdb_inst *in = NULL;
    int rc = door_lock(sh, true) == 0
                 ? KVFTS_OK
                 : kv_seterr(err, KVFTS_ERROR, "database '%s': cannot lock "
                             "%s: %s", sh->dir, REG_FILE, strerror(errno));
    if (!rc) {
        rc = inst_open_checked(sh, create, false, &in, err);
        reg_door_unlock(sh);
    }

    pthread_mutex_lock(&sh->mu);
    sh->opening = false;
    bool close_old = false;
    if (!rc) {
        sh->inst = in;
        in->users = 2;             /* the directory's, and the caller's */
        *out = in;
        if (old)
            close_old = --old->users == 0;
    }
    pthread_cond_broadcast(&sh->cv);
    pthread_mutex_unlock(&sh->mu);
    if (close_old)
        inst_close(old, false);
    return rc;
}

/* Survivors clean up after a dead process too (failchk, at most once every
 * FAILCHK_NS): a dead reader's snapshot would otherwise pin old page
 * versions in the cache, and a dead writer's locks block every writer.
 * Returns KV_RETRY when the environment needs recovery (it is then marked
 * dead, and the next transaction recovers it). */
static int maybe_failchk(bdb_inst *in, kv_err *err)
{
    shared_env *sh = in->sh;
    long long now = kv__now_ns(), last = atomic_load(&sh->failchk_at);
    if (now - last < FAILCHK_NS ||
        !atomic_compare_exchange_strong(&sh->failchk_at, &last, now))
        return KVFTS_OK;
    int alive, dead;
    if (door_lock(sh, false) != 0)
        return KVFTS_OK;           /* someone else is at the door */
    reg_scan(sh, &alive, &dead);
    int rc = KVFTS_OK;
    if (dead) {
        int ret = KV_BDB(sh, in->env->failchk(in->env, 0));
        if (ret == 0) {
            reg_clear_dead(sh);
            kv__parts_sweep(sh->dir, true);
        } else {
            rc = kv__bdb_err(in, DB_RUNRECOVERY, err, "failchk");
        }
    }
    reg_door_unlock(sh);
    return rc;
}

/* ---- handles ------------------------------------------------------------ */

/* Stamp a new database, or check that an existing one is ours.  The mark
 * is read in a snapshot: a write transaction would wait for any batch that
 * holds the page (its sequences share it) until the batch commits, so a
 * second writer could not even open the database meanwhile. */
static int check_format(kv_env *e, kv_err *err)
{
    kv_txn *t = NULL;
    kv_buf v = KV_BUF_INIT;
    int rc = kv_txn_begin(&t, e, false, err);
    if (rc)
        return rc;
    rc = kv_get(t, KV_META, FORMAT_KEY, strlen(FORMAT_KEY), &v, false, err);
    if (rc == KVFTS_ENOTFOUND && !e->read_only) {
        /* a new database: stamp it, unless another opener just did */
        kv_txn_abort(t);
        t = NULL;
        rc = kv_txn_begin(&t, e, true, err);
        if (rc) {
            kv_buf_free(&v);
            return rc;
        }
        rc = kv_get(t, KV_META, FORMAT_KEY, strlen(FORMAT_KEY), &v, true,
                    err);
    }
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

/* The last handle of the process closes the directory: the last process
 * to close removes the regions (after a checkpoint); another checkpoints
 * if it wrote. */
static void shared_close(shared_env *sh)
{
    if (!sh)
        return;
    bdb_inst *in = sh->inst;
    sh->inst = NULL;
    if (in && --in->users > 0) {
        /* Transactions still open: a bug of the caller.  Leave the
         * instance to them (leaked) rather than close under them. */
        in = NULL;
    }
    if (sh->reg_fd >= 0) {
        door_lock(sh, true);
        int alive = 0, dead = 0;
        reg_scan(sh, &alive, &dead);
        /* A panicked environment (a damaged page) is left for the next
         * process, which recovers it. */
        bool panicked = in && atomic_load(&in->panicked);
        bool last = alive == 0 && dead == 0 && in && !in->dead && !panicked;
        /* The last process removes the regions -- the cache with them --
         * and the next one opens without recovery: only after a checkpoint
         * that wrote every dirty page.  If it failed (a full disk, a file
         * that would not open), the regions and our mark stay, and the next
         * process recovers from the log. */
        bool flushed = inst_close(in, last || (in && atomic_load(&in->wrote)));
        if (last && flushed) {
            /* Nobody else has the database open (the door is held): a
             * half-made segment file is a dead process's, which failchk
             * rolled back without a recovery (kv__parts_sweep). */
            kv__parts_sweep(sh->dir, false);
            home_remove(sh->home, sh->home_shm);
        } else if (panicked || (last && !flushed)) {
            sh->slot = -1;  /* our mark stays: the next process recovers */
        }
        reg_leave(sh);             /* drops the door with the descriptor */
        reg_door_unlock(sh);       /* and door_mu (the unlock finds no fd) */
        if (sh->stamps)
            munmap(sh->stamps, REG_STAMPS_LEN);
    } else if (in) {
        inst_close(in, atomic_load(&in->wrote));
    }
    if (sh->owner_fd >= 0)
        close(sh->owner_fd);
    pthread_mutex_destroy(&sh->mu);
    pthread_mutex_destroy(&sh->door_mu);
    pthread_cond_destroy(&sh->cv);
    kv_free(sh->dir);
    free(sh->absdir);       /* from realpath(3) */
    kv_free(sh);
}

/* Open the directory for the first handle in this process. */
static int shared_open(shared_env **out, const char *dir,
                       const kv_env_options *o, kv_err *err)
{
    *out = NULL;
    shared_env *sh = kv_calloc(1, sizeof *sh);
    if (!sh)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    sh->reg_fd = -1;
    sh->owner_fd = -1;
    sh->slot = -1;
    pthread_mutex_init(&sh->mu, NULL);
    pthread_mutex_init(&sh->door_mu, NULL);
    pthread_cond_init(&sh->cv, NULL);
    atomic_init(&sh->failchk_at, 0);
    sh->dir = kv_strndup(dir, strlen(dir));
    sh->absdir = realpath(dir, NULL);
    if (!sh->dir || !sh->absdir) {
        int e = errno;
        shared_close(sh);
        return sh->dir ? kv_seterr(err, KVFTS_ERROR, "database '%s': %s",
                                   dir, strerror(e))
                       : kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }
    int rc = reg_join(sh, err);
    if (!rc)   /* before a dead process's slot is cleared: its count */
        rc = stamps_setup(sh, err);
    if (!rc && o->create) {
        char p[4096];
        struct stat st;
        if (kv__path_join(p, sizeof p, dir, "DB_CONFIG", NULL) == KVFTS_OK &&
            stat(p, &st) != 0)
            rc = config_write(dir, o->cache_bytes ? o->cache_bytes
                                                  : DEFAULT_CACHE, err);
    }
    bdb_inst *in = NULL;
    bool recover = false;
    if (!rc)
        rc = home_decide(sh, config_cache(dir), &recover, err);
    if (!rc)
        owner_hold(sh);
    if (!rc)
        rc = inst_open_checked(sh, o->create && !o->read_only, recover, &in,
                               err);
    if (sh->reg_fd >= 0)
        reg_door_unlock(sh);
    if (rc) {
        shared_close(sh);
        return rc;
    }
    sh->inst = in;
    in->users = 1;                 /* the directory's own use */
    *out = sh;
    return KVFTS_OK;
}

/* Another program's directory (a meta.db that is an SQLite file, or
 * junk): refused before anything in it is touched -- no registry, no
 * regions, no table files.  Ours has DB_CONFIG (written at init) or a
 * meta.db that is a Berkeley DB B-tree (its magic number at byte 12); a
 * kvfts database whose meta.db is damaged still has DB_CONFIG, and goes on
 * to the messages about damage. */
static int check_ours(const char *dir, const char *meta, kv_err *err)
{
    char p[4096];
    struct stat st;
    if (kv__path_join(p, sizeof p, dir, "DB_CONFIG", NULL) == KVFTS_OK &&
        stat(p, &st) == 0)
        return KVFTS_OK;
    unsigned char head[16];
    ssize_t n = -1;
    int fd = open(meta, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, head, sizeof head);
        close(fd);
    }
    if (n == (ssize_t)sizeof head) {
        uint32_t m = (uint32_t)head[12] | (uint32_t)head[13] << 8 |
                     (uint32_t)head[14] << 16 | (uint32_t)head[15] << 24;
        if (m == 0x053162u || m == 0x62310500u)   /* DB_BTREEMAGIC, swapped */
            return KVFTS_OK;
    }
    return kv_seterr(err, KVFTS_ENOTFOUND, "database '%s': not a kvfts "
                     "database (its meta.db is another program's file, and "
                     "it has no DB_CONFIG); nothing in it was changed", dir);
}

/* Descriptors 0-2 must be open before any file of the database is: a
 * process started with one of them closed would get it for a database
 * file, and then its output (printf, an error message) would be written
 * into that file -- results into the registry, a message over a region's
 * header.  As SQLite does, a closed one is opened on /dev/null.  (Done under
 * shared_mu; another thread of the process opening files meanwhile could
 * still take the number: a program that closes 0-2 should reopen them
 * before it starts threads.) */
static void std_fds_open(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF)
            continue;
        int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (n >= 0 && n != fd) {
            dup2(n, fd);
            close(n);
        }
    }
}

int kv_env_open(kv_env **out, const char *dir, const kv_env_options *o,
                kv_err *err)
{
    kv_env_options def = { false, false, 0 };
    if (!o)
        o = &def;
    *out = NULL;
    pthread_mutex_lock(&shared_mu);
    std_fds_open();
    pthread_mutex_unlock(&shared_mu);
    int rc = check_dir(dir, o->create, err);
    if (rc)
        return rc;
    struct stat st;
    char p[4096];
    rc = kv__path_join(p, sizeof p, dir, kv_spaces[KV_META].file, err);
    if (rc)
        return rc;
    if (stat(p, &st) == 0)
        rc = check_ours(dir, p, err);      /* also before an init */
    else if (!o->create)
        rc = kv_seterr(err, KVFTS_ENOTFOUND,
                       "database '%s': no kvfts database here (create it "
                       "with 'kvfts init %s')", dir, dir);
    if (rc)
        return rc;
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
    for (int attempt = 0;; attempt++) {
        rc = check_format(e, err);
        if (rc != KV_RETRY || attempt >= 3)
            break;
    }
    if (rc) {
        if (rc == KV_RETRY)
            err->code = rc = KVFTS_EBUSY;
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

uint64_t kv_txn_stamp(const kv_txn *t)
{
    return t->stamp;
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

bool kv_env_take_warning(kv_env *e, char *buf, size_t cap)
{
    if (!e->warning[0])
        return false;
    snprintf(buf, cap, "%s", e->warning);
    e->warning[0] = '\0';
    return true;
}

/* Checkpoint in in, removing log files no longer needed. */
static int checkpoint(bdb_inst *in, u_int32_t kb, kv_err *err)
{
    int ret = ckp_write(in, kb, 0);
    if (ret)
        return kv__bdb_err(in, ret, err, "checkpoint");
    ret = log_remove(in);
    return ret ? kv__bdb_err(in, ret, err, "log removal") : KVFTS_OK;
}

int kv_env_checkpoint(kv_env *e, kv_err *err)
{
    if (e->read_only)
        return KVFTS_OK;
    bdb_inst *in = NULL;
    int rc = inst_acquire(e->sh, false, &in, err);
    if (rc)
        return rc;
    rc = checkpoint(in, 0, err);
    inst_release(in);
    return rc;
}

int kv_env_log_bytes(kv_env *e, uint64_t *out, kv_err *err)
{
    bdb_inst *in = NULL;
    int rc = inst_acquire(e->sh, false, &in, err);
    if (rc)
        return rc;
    DB_LOG_STAT *st = NULL;
    int ret = KV_BDB(in->sh, in->env->log_stat(in->env, &st, 0));
    if (ret) {
        rc = kv__bdb_err(in, ret, err, "log statistics");
    } else {
        *out = (uint64_t)st->st_w_mbytes * 1024 * 1024 + st->st_w_bytes;
        free(st);       /* allocated by Berkeley DB with malloc */
    }
    inst_release(in);
    return rc;
}

int kv_env_sizes(kv_env *e, uint64_t *db_bytes, uint64_t *log_bytes,
                 kv_err *err)
{
    int ret = dir_sizes(e->dir, db_bytes, log_bytes);
    return ret ? kv_seterr(err, KVFTS_ERROR, "database '%s': %s", e->dir,
                           strerror(ret))
               : KVFTS_OK;
}

int kv_part_remove(kv_env *e, uint32_t id, kv_err *err)
{
    if (e->read_only)
        return kv_seterr(err, KVFTS_EINVAL, "database '%s' is open read-only",
                         e->dir);
    bdb_inst *in = NULL;
    int rc = inst_acquire(e->sh, false, &in, err);
    if (rc)
        return rc;
    rc = kv__part_remove(in, id, err);
    inst_release(in);
    return rc;
}

int kv_parts_list(kv_txn *t, uint32_t **ids, size_t *n, kv_err *err)
{
    return kv__parts_list(t->env->dir, ids, n, err);
}

/* ---- transactions ------------------------------------------------------ */

/* Berkeley DB fixes a snapshot transaction's snapshot at its first page
 * read (txn_begin leaves its read LSN unset), not at txn_begin.  So a read
 * transaction reads one page (kv__snapshot_pin: meta.db's meta page, from
 * the buffer pool directly: a DB->get of a key no record has cost 4.4k
 * instructions, this about 1k; unit.kv's test_commit_stamps fails without
 * it) before it loads gen again: a commit landing between the two loads
 * and a later first read would otherwise be in a snapshot stamped as
 * before it, and the handle's caches kept by stamp (a segment list,
 * dictionary chunks, field ids) would be used with a snapshot they do not
 * belong to: a merge's inputs listed in a snapshot where their records
 * are gone.
 * A lazy read (kv_txn_run_read) does the same at its first record read
 * (kv__txn_live), with the gen it loaded here. */
static int txn_begin(kv_txn **out, kv_env *e, bool write, bool lazy,
                     kv_err *err)
{
    *out = NULL;
    if (write && e->read_only)
        return kv_seterr(err, KVFTS_EINVAL, "database '%s' is open read-only",
                         e->dir);
    bdb_inst *in = NULL;
    int rc = inst_acquire(e->sh, !e->read_only, &in, err);
    if (rc)
        return rc;
    rc = maybe_failchk(in, err);
    if (!rc && write)
        rc = space_check(e->sh, in->cache, RESERVE_MB, "a write", err);
    kv_txn *t = NULL;
    if (!rc && !(t = kv_calloc(1, sizeof *t)))
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    if (rc) {
        inst_release(in);
        return rc;
    }
    t->env = e;
    t->inst = in;
    t->write = write;
    t->serial = ++e->txns;
    kv__bdb_msg()[0] = '\0';
    kv_stamps *st = e->sh->stamps;
    uint64_t gen = 0;
    bool steady = false;
    if (st && !write) {
        gen = atomic_load(&st->gen);
        steady = atomic_load(&st->inflight) == 0;
    }
    int ret = 0;
    if (lazy && steady) {
        t->gen = &st->gen;         /* kv__txn_live begins it */
        t->stamp = gen + 1;
    } else {
        ret = KV_BDB(in->sh, in->env->txn_begin(in->env, NULL, &t->txn,
                                                write ? 0 : DB_TXN_SNAPSHOT));
        if (!ret && steady)
            kv__snapshot_pin(in, t->txn);
        if (steady && atomic_load(&st->gen) == gen)
            t->stamp = gen + 1;
    }
    if (!ret && !write && tls_after_stamp) {
        void (*fn)(void *) = tls_after_stamp;
        tls_after_stamp = NULL;             /* once */
        fn(tls_after_stamp_arg);
    }
    if (!ret && write) {
        ret = KV_BDB(in->sh,
                     t->txn->set_timeout(t->txn,
                                         (db_timeout_t)kv__busy_timeout() *
                                             1000000u,
                                         DB_SET_LOCK_TIMEOUT));
        if (ret)
            KV_BDB(in->sh, t->txn->abort(t->txn));
        else
            watchdog_writers(in, 1);
    }
    if (ret) {
        rc = kv__bdb_err(in, ret, err, "begin transaction");
        inst_release(in);
        kv_free(t);
        return rc;
    }
    *out = t;
    return KVFTS_OK;
}

int kv_txn_begin(kv_txn **out, kv_env *e, bool write, kv_err *err)
{
    return txn_begin(out, e, write, false, err);
}

/* Not DB_TXN_BULK, although it halves a fresh load's log (records put on
 * pages the transaction allocated are not logged; the pages are flushed at
 * commit) and made loads of the catalog and GCIDE 3.5% and 7% faster:
 * with it, a batch killed mid-transaction could leave a database that
 * Berkeley DB 5.3's recovery crashes on (in __bam_repl_recover) at every
 * open, for good.  The 50-kill test (e2e.resume) found it within a few
 * kills on tmpfs with 16 KiB pages, and again with today's 4 KiB pages
 * (e2e.crash, e2e.crashpoints and e2e.resume failed in each of three runs:
 * segmentation faults in the recovering open), so torn pages are not the
 * cause. */

/* A write whose commit met a recovery (Berkeley DB said DB_RUNRECOVERY:
 * another process panicked the environment meanwhile) may or may not have
 * landed.  Recovery decided which from the log: the commit is there if
 * its record reached the log file.  So the log says it too: the commit
 * record (Berkeley DB's __txn_regop, record type 10, opcode 1 = commit,
 * after the common header: type, transaction id, previous LSN) of
 * transaction @p txnid, at or after @p from, the log's end before the
 * commit began, and before the recovery's own records.  Looked up in the
 * recovered environment. */
#define LOG_TXN_REGOP 10u
#define LOG_TXN_COMMIT 1u
#define LOG_TXN_RECYCLE 14u      /* __txn_recycle: ids start again after it */

static void log_end(DB_ENV *env, DB_LSN *out)
{
    DB_LOG_STAT *ls = NULL;
    out->file = out->offset = 0;
    if (KV_BDB(env->app_private, env->log_stat(env, &ls, 0)) == 0 && ls) {
        out->file = ls->st_cur_file;
        out->offset = ls->st_cur_offset;
        free(ls);
    }
}

static int commit_landed(kv_env *e, u_int32_t txnid, DB_LSN from,
                         bool *landed, kv_err *err)
{
    *landed = false;
    bdb_inst *in;
    int rc = inst_acquire(e->sh, false, &in, err);
    if (rc)
        return rc;
    DB_LOGC *c = NULL;
    int ret = KV_BDB(in->sh, in->env->log_cursor(in->env, &c, 0));
    DB_LSN lsn;
    DBT rec;
    memset(&rec, 0, sizeof rec);
    /* Backwards from the end to @p from.  A recovery logs a recycle
     * record and numbers transactions afresh after it: only a commit
     * older than the first recycle record after @p from is this one. */
    for (ret = ret ? ret : KV_BDB(in->sh, c->get(c, &lsn, &rec, DB_LAST));
         !ret; ret = KV_BDB(in->sh, c->get(c, &lsn, &rec, DB_PREV))) {
        if (log_compare(&lsn, &from) < 0)
            break;
        u_int32_t h[5];
        if (rec.size < sizeof h[0])
            continue;
        memcpy(h, rec.data, rec.size < sizeof h ? sizeof h[0] : sizeof h);
        if (h[0] == LOG_TXN_RECYCLE)
            *landed = false;
        else if (rec.size >= sizeof h && h[0] == LOG_TXN_REGOP &&
                 h[1] == txnid && h[4] == LOG_TXN_COMMIT)
            *landed = true;
    }
    if (c)
        KV_BDB(in->sh, c->close(c, 0));
    rc = ret && ret != DB_NOTFOUND ? kv__bdb_err(in, ret, err, "reading "
                                                 "the log") : KVFTS_OK;
    inst_release(in);
    return rc;
}

int kv_txn_commit(kv_txn *t, kv_err *err)
{
    kv_env *e = t->env;
    bdb_inst *in = t->inst;
    bool write = t->write;
    if (write && t->txn && t->nused) {
        /* the segment files it made: on disk, then renamed inside it */
        int src = kv__parts_seal(t, err);
        if (src) {
            kv_txn_abort(t);
            return src;
        }
    }
    kv_stamps *st = write ? e->sh->stamps : NULL;
    if (st) {
        atomic_fetch_add(&st->slot[e->sh->slot], 1);
        atomic_fetch_add(&st->inflight, 1);
        atomic_fetch_add(&st->gen, 1);
    }
    if (write && tls_die_in_commit)
        raise(SIGKILL);
    u_int32_t txnid = 0;
    DB_LSN from = { 0, 0 };
    if (write && t->txn) {
        txnid = t->txn->id(t->txn);
        log_end(in->env, &from);
    }
    int ret = t->txn ? KV_BDB(in->sh, t->txn->commit(t->txn, 0)) : 0;
    if (st) {
        atomic_fetch_sub(&st->inflight, 1);
        atomic_fetch_sub(&st->slot[e->sh->slot], 1);
    }
    kv__parts_end(t, ret == 0);
    kv_free(t);
    if (write)
        watchdog_writers(in, -1);
    int rc = kv__bdb_err(in, ret, err, "commit");
    if (ret == DB_RUNRECOVERY && rc == KV_RETRY && txnid && from.file) {
        /* Landed: the write is done.  Not: KV_RETRY, run it again. */
        bool landed;
        inst_release(in);
        kv_err lerr = KV_ERR_INIT;
        if (commit_landed(e, txnid, from, &landed, &lerr) != KVFTS_OK)
            return kv_seterr(err, KVFTS_ERROR, "commit: the environment was "
                             "recovered during the commit, and whether it "
                             "landed cannot be told: %s", lerr.msg);
        if (!landed)      /* KV_RETRY, counted as a recovery */
            return kv__bdb_err(NULL, DB_RUNRECOVERY, err, "commit");
        kv_err_clear(err);
        return KVFTS_OK;
    }
    if (!rc && write) {
        atomic_store(&in->wrote, true);
        /* The write is durable now, whatever follows: a checkpoint that
         * fails (disk full) is the handle's warning, not the write's
         * status.  Cheap unless CHECKPOINT_KB of log were written since
         * the last one. */
        kv_err cerr = KV_ERR_INIT;
        if (checkpoint(in, CHECKPOINT_KB, &cerr))
            snprintf(e->warning, sizeof e->warning, "the write is committed, "
                     "but the checkpoint after it failed: %s", cerr.msg);
    }
    inst_release(in);
    return rc;
}

void kv_txn_trickle(kv_txn *t)
{
    int wrote = 0;
    if (t && t->write)
        (void)KV_BDB(t->inst->sh, t->inst->env->memp_trickle(t->inst->env,
                                                             100, &wrote));
}

kv_env *kv_txn_env(const kv_txn *t)
{
    return t->env;
}

void kv_txn_abort(kv_txn *t)
{
    if (!t)
        return;
    bdb_inst *in = t->inst;
    if (t->txn)
        KV_BDB(in->sh, t->txn->abort(t->txn));
    kv__parts_end(t, false);
    if (t->write)
        watchdog_writers(in, -1);
    kv_free(t);
    inst_release(in);
}

static int txn_run(kv_env *e, bool write, bool lazy, kv_txn_fn fn,
                   void *payload, kv_err *err)
{
    int deadlocks = 0, recoveries = 0;
    for (int attempt = 0;; attempt++) {
        kv_txn *t = NULL;
        kv__part_gone()[0] = '\0';
        int rc = txn_begin(&t, e, write, lazy && attempt == 0, err);
        if (rc == KVFTS_OK) {
            rc = fn(t, payload, err);
            if (rc == KVFTS_OK) {
                /* A commit that meets another process's recovery (the
                 * environment was panicked meanwhile) runs again, in the
                 * recovered environment: a read, and a write that did not
                 * land (kv_txn_commit looks in the log). */
                rc = kv_txn_commit(t, err);
                if (rc != KV_RETRY)
                    return rc;
            } else {
                kv_txn_abort(t);
            }
        }
        if (rc != KV_RETRY)
            return rc;
        if (lazy && attempt == 0) {  /* a commit, not a lock: at once */
            kv_retry_recovered();
            continue;
        }
        if (kv_retry_next(rc, &deadlocks, &recoveries))
            continue;
        if (kv__part_gone()[0])
            return kv_seterr(err, KVFTS_ECORRUPT, "database '%s': segment "
                             "file %s is missing (the segment list names it)",
                             e->dir, kv__part_gone());
        if (recoveries >= KV_MAX_RECOVERIES)
            return kv_seterr(err, KVFTS_EBUSY, "database '%s': recovered "
                             "%d times while retrying (processes keep dying "
                             "inside Berkeley DB)", e->dir, recoveries);
        return kv_seterr(err, KVFTS_EBUSY,
                         "database '%s': still deadlocked after %d "
                         "retries; another writer holds its locks",
                         e->dir, KV_MAX_RETRIES);
    }
}

int kv_txn_run(kv_env *e, bool write, kv_txn_fn fn, void *payload,
               kv_err *err)
{
    return txn_run(e, write, false, fn, payload, err);
}

int kv_txn_run_read(kv_env *e, kv_txn_fn fn, void *payload, kv_err *err)
{
    return txn_run(e, false, true, fn, payload, err);
}
