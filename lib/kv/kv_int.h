/*
 * lib/kv/kv_int.h -- private to lib/kv/: the Berkeley DB side of the storage
 * layer, shared by kv_bdb.c (error translation, the spaces), kv_records.c
 * (records, cursors) and kv_env.c (the environment, its processes and
 * transactions).  kv_env.c explains the design.  Other modules see only
 * lib/kv/include/kv.h.
 */
#ifndef KVFTS_KV_INT_H
#define KVFTS_KV_INT_H

/* db.h uses the BSD types u_int and u_long. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif
#include "kv.h"

#include <db.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#define KV_PAGE 4096u              /* page size of the big databases */

/* A segment's file (kv_part.c), open in an instance. */
typedef struct kv_part {
    uint32_t id;
    DB *db[2];                   /* "terms", "postings" (in->parts_mu);
                                    read-only for a file of its own */
    DB *wdb[2];                  /* writable ones of such a file, opened
                                    when a merge step adds to it */
    int refs;                    /* transactions using it (in->parts_mu) */
    const struct kv_txn *creator;/* the transaction creating the file */
    char made[48];               /* the name it was made under (creator's
                                    transaction; kv_part.c: part_create) */
} kv_part;

/* One open instance of the Berkeley DB environment. */
typedef struct bdb_inst {
    DB_ENV *env;
    DB *db[KV_NSPACES];
    uint64_t cache;              /* the environment's cache, bytes */
    int users;                   /* handles and transactions (sh->mu) */
    bool dead;                   /* panicked: no new users (sh->mu) */
    atomic_bool wrote;           /* a write committed: checkpoint at close */
    atomic_bool panicked;        /* Berkeley DB said DB_RUNRECOVERY */
    struct shared_env *sh;
    /* The lock watchdog (kv_env.c): while this process has a write
     * transaction open it expires lock waits past their timeout. */
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cv;
    pthread_t wd;
    bool wd_started;             /* (wd_mu) */
    bool wd_stop;                /* (wd_mu) */
    int wd_writers;              /* write transactions open (wd_mu) */
    /* Segment files' handles (kv_part.c). */
    pthread_mutex_t parts_mu;
    kv_part **parts;
    size_t nparts, partcap;
    uint64_t kept;               /* hash of the last list kv_parts_retain() got */
    bool kept_set;
    struct bdb_inst *next_kept;  /* in the list of panicked ones (kv_env.c) */
} bdb_inst;

/* The registry's slots (kv_env.c): REG_MAX of REG_SLOT bytes at REG_SLOTS. */
#define REG_SLOTS 256              /* where every kvfts version has them */
#define REG_SLOT 16
#define REG_MAX 4096               /* processes at once */

/* The commit stamps, a shared page of the registry (kv_env.c), and the
 * Berkeley DB calls under way (kv_gate.c). */
typedef struct kv_stamps {
    char magic[8];
    atomic_uint_least64_t gen;       /* write commits begun, ever */
    atomic_int_least64_t inflight;   /* write commits under way */
    atomic_uint_least16_t slot[REG_MAX];  /* per registry slot: its share */
    atomic_uint_least32_t recovering;     /* 1 + the slot recovering, or 0 */
    atomic_uint_least32_t owed;           /* 1: a recovery began and has not
                                             succeeded since (kv_gate.c) */
    atomic_uint_least16_t busy[REG_MAX];  /* per slot: threads inside
                                             Berkeley DB calls (KV_BDB) */
} kv_stamps;
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_SHORT_LOCK_FREE == 2 &&
               ATOMIC_INT_LOCK_FREE == 2,
               "shared atomics must be lock-free");

/* A directory open in this process, shared by its handles. */
typedef struct shared_env {
    dev_t dev;                   /* identity of the directory */
    ino_t ino;
    int refs;                    /* kv_env handles (shared_mu) */
    char *dir;
    char *absdir;                /* its absolute path */
    char home[4200];             /* where the regions are (kv_env.c) */
    bool home_shm;               /* in a directory of /dev/shm */
    int reg_fd;                  /* DIR/kvfts.lock */
    int owner_fd;                /* HOME/kvfts.owner, read-locked, or -1 */
    long slot;                   /* our slot in it */
    kv_stamps *stamps;           /* mapped from it, or NULL */
    pthread_mutex_t door_mu;     /* held by the thread holding the door */
    bool door_mine;              /* this process holds the door (door_mu) */
    pthread_mutex_t mu;          /* guards inst, opening, and inst->users */
    pthread_cond_t cv;
    bdb_inst *inst;              /* the current instance */
    bool opening;                /* a thread is opening a new instance */
    atomic_llong failchk_at;     /* when this process last ran failchk */
    struct shared_env *next;
} shared_env;

struct kv_env {
    shared_env *sh;
    char *dir;
    bool read_only;
    void *slot;                  /* a layer above's per-handle state */
    void (*slot_free)(void *);   /* and how to free it */
    uint64_t txns;               /* transactions begun: serial numbers */
    char warning[KV_ERRMSG_MAX + 128]; /* a failure after a success */
};

struct kv_txn {
    kv_env *env;
    uint64_t stamp;              /* kv_txn_stamp() */
    bdb_inst *inst;              /* the instance it began in */
    DB_TXN *txn;           /* NULL while a lazy read (kv_txn_run_read) has
                              not begun it: kv__txn_live does */
    const atomic_uint_least64_t *gen;  /* the stamps' gen, for a lazy read */
    bool write;
    uint64_t serial;             /* this handle's n-th transaction */
    /* Values of sequences reserved by this transaction, not yet handed out
     * (kv_seq_next): they go with it when it commits or aborts. */
    struct kv_seq_cache {
        kv_space space;
        char name[16];
        uint64_t next, end;      /* next <= end: values left */
        uint64_t grab;           /* the next reservation's size */
    } seqs[4];
    /* Segment files this transaction used (kv_part.c): a reference on
     * each, and its handles. */
    struct kv_tpart {
        kv_part *p;
        DB *db[2];
        DB *wdb[2];              /* p->wdb, once a write asked for it */
        bool unlogged;           /* this transaction makes p's file: its
                                    records are written outside it */
    } *used, *lastp;             /* used: inline, or grown on the heap */
    size_t nused, usedcap;
    struct kv_tpart inline_used[8];
};

/* How long a write transaction waits for a lock another holds, seconds:
 *  KVFTS_BUSY_TIMEOUT, else 30. */
unsigned kv__busy_timeout(void);

struct kv_cursor {
    kv_txn *txn;
    DBC *dbc;          /* the current one */
    /* A cursor of a partitioned space: one Berkeley DB cursor per segment
     * file it was positioned in; dbc is the last one's. */
    struct kv_pcur {
        uint32_t id;
        DBC *dbc;
    } *pcs;                      /* inline_pcs, or grown on the heap */
    size_t npcs, pccap;
    struct kv_pcur inline_pcs[4];
    kv_space space;
    kv_buf key;
    kv_buf val;
    kv_buf skey;       /* the search key of a DB_SET/DB_SET_RANGE */
};

/* The physical databases: file, name for messages, flags, page size, and
 * how a new file is made compressed (kv_bdb.c). */
typedef struct kv_space_def {
    const char *file;     /* NULL: partitioned, a file per segment */
    const char *name;
    u_int32_t flags;      /* DB->set_flags */
    u_int32_t pagesize;   /* 0 = Berkeley DB's choice */
    u_int32_t compress_minkey;  /* not 0: a file created now is a
                                   prefix-compressed B-tree with this
                                   DB->set_bt_minkey */
} kv_space_def;
extern const kv_space_def kv_spaces[KV_NSPACES];

/* kv_bdb.c */
/** Translate a Berkeley DB return code (the one place that does).  @p in is
 *  the instance the call ran in (NULL before one is open); DB_RUNRECOVERY
 *  without a damaged page marks it dead and is KV_RETRY. */
int kv__bdb_err(bdb_inst *in, int ret, kv_err *err, const char *what);
/* Begin t's Berkeley DB transaction if it is a lazy read not begun yet
 * (kv_txn_run_read); every use of t->txn in a read goes through it. */
int kv__txn_live(kv_txn *t, kv_err *err);
/* Fix read transaction txn's snapshot now (see kv_bdb.c). */
void kv__snapshot_pin(bdb_inst *in, DB_TXN *txn);
/** Berkeley DB's error callback: keeps the message per thread. */
void kv__on_bdb_error(const DB_ENV *dbenv, const char *pfx, const char *msg);
/** Berkeley DB's message callback: drops its informational messages. */
void kv__on_bdb_msg(const DB_ENV *dbenv, const char *msg);
/** This thread's last Berkeley DB message, and first damaged-page one. */
char *kv__bdb_msg(void);
char *kv__corrupt_msg(void);
void kv__bdb_msgs_clear(void);
void kv__inst_mark_dead(bdb_inst *in);
/* kv_env.c: whether a process registered in a database this process has
 * open is dead (its registry slot unlocked); false if that cannot be told
 * now.  Only the database whose regions hold file @p path if one does
 * (else any).  For kv_stall.c's guesses. */
bool kv__dead_peer(const char *path);
/* kv_gate.c: every Berkeley DB call is KV_BDB(sh, call), sh the directory
 * it is in: the call counts as under way (a recovery waits for it), and
 * first waits while a recovery is under way.  Evaluates to call's value. */
void kv__bdb_in(shared_env *sh);
int kv__bdb_out(int ret);
#define KV_BDB(sh, call) (kv__bdb_in(sh), kv__bdb_out(call))
/* kv_gate.c: a recovery about to begin (the door held) marks it and waits
 * for the calls under way; kv__survivors_go ends the mark, and says
 * whether the recovery succeeded.  kv__recovery_owed: one began and did
 * not succeed (its maker died or failed): the regions it left must not be
 * joined, only recovered again. */
void kv__survivors_wait(shared_env *sh);
void kv__survivors_go(shared_env *sh, bool recovered);
bool kv__recovery_owed(shared_env *sh);
/* kv_gate.c: whether this thread is recovering (between the two). */
bool kv__recovering_here(void);
/* kv_gate.c: whether the process in registry slot @p i holds it (is
 * alive): another open file description has its byte locked (true if
 * that cannot be told). */
bool kv__slot_alive(shared_env *sh, long i);
/* kv_gate.c: @p fl set to lock (@p type) byte @p at of a file. */
struct flock;
void kv__flock_byte(struct flock *fl, short type, off_t at);
long long kv__now_ns(void);                  /* CLOCK_MONOTONIC */
void kv__sleep_ms(long ms);
/* kv_env.c: whether a recovery of the regions at @p path (a file) is under
 * way in another process or thread; false if that cannot be told now.
 * For kv_stall.c. */
bool kv__recovery_pending(const char *path);
/* kv_bdb.c: close a database handle; one Berkeley DB would not close (its
 * environment panicked) is kept reachable, not leaked. */
void kv__db_close(DB *db, u_int32_t flags);
int kv__path_join(char *out, size_t cap, const char *dir, const char *file,
                  kv_err *err);
/** Open (B-tree, MVCC, free-threaded) database @p sub of @p file: an
 *  existing one inside a snapshot transaction of its own, so that opening
 *  never waits for a writer holding its root page; a missing one is
 *  created (auto-commit); @p rdonly: an existing one for reading only.  A
 *  Berkeley DB return code. */
int kv__db_open(DB_ENV *env, DB *db, const char *file, const char *sub,
                bool exists, bool rdonly);
/** Room for element @p n of *@p arr, an array that starts as @p inline_arr
 *  (@p ninline elements of @p size bytes) and moves to the heap, doubling,
 *  once that is full; *@p cap is its capacity.  False without memory. */
bool kv__grow_inline(void **arr, void *inline_arr, size_t ninline, size_t n,
                     size_t *cap, size_t size);

/* kv_part.c: the partitioned spaces (KV_TERMS, KV_POSTINGS). */
bool kv__parted(kv_space s);
/** The database of space @p s in the segment file that @p key's first four
 *  bytes name; @p create: a write transaction creates the file if it is
 *  missing.  A missing file in a snapshot is KV_RETRY. */
int kv__part_db(kv_txn *t, kv_space s, const void *key, size_t klen,
                bool create, DB **out, DB_TXN **tx, kv_err *err);
/** This thread's last missing segment file ("" if none): settable. */
char *kv__part_gone(void);
/** The partition (file) of a key of 4 bytes or more. */
uint32_t kv__part_of(const void *key);
/** As kv__part_db, by segment id.  @p tx: the Berkeley DB transaction to
 *  use the database in (NULL while @p t makes the file: kv_part.c). */
int kv__part_db_id(kv_txn *t, kv_space s, uint32_t id, bool create, DB **out,
                   DB_TXN **tx, kv_err *err);
/** The database of @p w's file for key (of space @p s): EINVAL for a key
 *  of another space or segment (kv_partw_put, kv_records.c). */
int kv__partw_db(const kv_partw *w, kv_space s, const void *key,
                 size_t klen, bdb_inst **in, DB **db, kv_err *err);
/** Before @p t commits: the files it made go to disk and are renamed into
 *  place inside it. */
int kv__parts_seal(kv_txn *t, kv_err *err);
/** @p t ends (after its Berkeley DB transaction committed or aborted):
 *  drop its references; an abort closes the handles of files it created. */
void kv__parts_end(kv_txn *t, bool committed);
/** Close every segment file's handles (the instance closes). */
void kv__parts_close(bdb_inst *in);
/** Remove a segment's file unless a handle of any process is open on it
 *  (KVFTS_EBUSY); a missing file is KVFTS_OK. */
int kv__part_remove(bdb_inst *in, uint32_t id, kv_err *err);
/** The small segments' shared file (partition 0) exists, or is created
 *  (@p create) as the other spaces' files are. */
int kv__part_shared_check(bdb_inst *in, bool create, kv_err *err);
/** The segment files in @p dir, by id (kv_free() the array). */
int kv__parts_list(const char *dir, uint32_t **ids, size_t *n, kv_err *err);
/** Remove the segment files a crash left half made (seg-ID.PID.N.new, made
 *  outside any transaction before their transaction renames them into
 *  place): all of them after a recovery, or by the last process to close,
 *  when no process is making one; @p dead_only: those of processes that no
 *  longer exist (after failchk rolled a dead one's transactions back). */
void kv__parts_sweep(const char *dir, bool dead_only);

#endif /* KVFTS_KV_INT_H */
