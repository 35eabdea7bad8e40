/*
 * lib/kv/kv_gate.c -- Berkeley DB calls under way, and a recovery waiting
 * for them.
 *
 * A thread inside a Berkeley DB call when another process's recovery
 * begins goes on with that call -- a commit writing and flushing its log
 * record, a page written out of the cache -- into the same log and data
 * files the recovery reads and writes: seen as "Log file corrupt" in the
 * recovering process and as acknowledged batches lost.  So every Berkeley
 * DB call of kvfts is KV_BDB(sh, call): for the call's length its thread
 * counts in its process's busy count in the registry's shared stamps page
 * (kv_env.c).  A recovery, with the registry's door held, sets the
 * page's recovering mark, which new calls wait behind (they then meet the
 * panicked environment's DB_RUNRECOVERY), and waits until no live process
 * has a call under way (kv__survivors_wait), at most RECOVER_WAIT_NS.  A
 * call blocked inside Berkeley DB (a lock wait for a holder that will
 * never release it) is ended by kv_stall.c, which sees the mark
 * (kv__recovery_pending).  Without the stamps page (a full disk) a
 * recovery does not wait, as before this existed.
 *
 * A recovery that fails (Berkeley DB's recovery stopped with an error)
 * or whose process dies leaves regions that look whole but hold an
 * environment half recovered: a process that joined them and ran failchk
 * went on writing into it, and the next recovery lost a run of committed
 * batches (seen in e2e.reader_kill: 14 batches of a load gone, its keys
 * reused).  So the page's owed mark is set before a recovery begins and
 * cleared only when one succeeds; while it is set the next process at
 * the door recovers instead of joining (kv_env.c, inst_open_checked).
 *
 * Counting costs two atomic operations per call, on a 16-bit count that
 * shares its cache line with 31 other slots' (other processes'): not
 * measurable in the benchmark, which runs one process.
 */
/* F_OFD_* locks are Linux's. */
#define _GNU_SOURCE
#include "kv_int.h"

#include <fcntl.h>
#include <string.h>
#include <time.h>

#define RECOVER_WAIT_NS 10000000000ll  /* a recovery waits at most this */

long long kv__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

void kv__sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

void kv__flock_byte(struct flock *fl, short type, off_t at)
{
    memset(fl, 0, sizeof *fl);
    fl->l_type = type;
    fl->l_whence = SEEK_SET;
    fl->l_start = at;
    fl->l_len = 1;
}

/* True if another open file description holds a lock on byte at. */
static bool reg_held(int fd, off_t at)
{
    struct flock fl;
    kv__flock_byte(&fl, F_WRLCK, at);
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return true;                    /* cannot tell: take it as alive */
    return fl.l_type != F_UNLCK;
}

/* Set in the thread that recovers, while it does: its own calls (the
 * recovery's) do not wait behind its mark. */
static _Thread_local bool tls_recovering;

bool kv__slot_alive(shared_env *sh, long i)
{
    return reg_held(sh->reg_fd, REG_SLOTS + (off_t)i * REG_SLOT);
}

/* The counts this thread's calls under way took (kv__bdb_out gives them
 * back): one, or a few if a callback of Berkeley DB's ever called it. */
#define BDB_NEST 4
static _Thread_local atomic_uint_least16_t *tls_busy[BDB_NEST];
static _Thread_local int tls_nest;

static atomic_uint_least16_t *busy_enter(shared_env *sh)
{
    if (!sh || !sh->stamps || sh->slot < 0 || tls_recovering)
        return NULL;
    kv_stamps *st = sh->stamps;
    atomic_uint_least16_t *b = &st->busy[sh->slot];
    long long checked = 0;
    for (;;) {
        atomic_fetch_add(b, 1);
        uint_least32_t r = atomic_load(&st->recovering);
        if (!r)
            return b;
        /* A recovery is under way: wait outside, then go on into the
         * panicked environment, which says DB_RUNRECOVERY.  Its maker may
         * have died recovering: then go on at once. */
        long long now = kv__now_ns();
        if (now - checked >= 100000000ll) {
            checked = now;
            if ((long)r - 1 != sh->slot && !kv__slot_alive(sh, (long)r - 1))
                return b;
        }
        atomic_fetch_sub(b, 1);
        kv__sleep_ms(2);
    }
}

void kv__bdb_in(shared_env *sh)
{
    atomic_uint_least16_t *b = busy_enter(sh);
    if (tls_nest < BDB_NEST)
        tls_busy[tls_nest] = b;
    else if (b)
        atomic_fetch_sub(b, 1);    /* too deep to give back: not counted */
    tls_nest++;
}

int kv__bdb_out(int ret)
{
    if (--tls_nest < BDB_NEST && tls_busy[tls_nest])
        atomic_fetch_sub(tls_busy[tls_nest], 1);
    return ret;
}

/* The door held, before a recovery removes the regions: mark it, and wait
 * (at most RECOVER_WAIT_NS) until no live process, this one included, has
 * a thread inside a Berkeley DB call. */
void kv__survivors_wait(shared_env *sh)
{
    if (!sh->stamps || sh->slot < 0)
        return;
    kv_stamps *st = sh->stamps;
    atomic_store(&st->owed, 1);
    atomic_store(&st->recovering, (uint_least32_t)sh->slot + 1);
    tls_recovering = true;
    long long end = kv__now_ns() + RECOVER_WAIT_NS;
    for (long ms = 1;; ms = ms < 20 ? ms * 2 : ms) {
        bool busy = false;
        for (long i = 0; i < REG_MAX && !busy; i++)
            busy = atomic_load(&st->busy[i]) > 0 &&
                   (i == sh->slot || kv__slot_alive(sh, i));
        if (!busy || kv__now_ns() >= end)
            return;
        kv__sleep_ms(ms);
    }
}

void kv__survivors_go(shared_env *sh, bool recovered)
{
    if (sh->stamps) {
        if (recovered)
            atomic_store(&sh->stamps->owed, 0);
        atomic_store(&sh->stamps->recovering, 0);
    }
    tls_recovering = false;
}

bool kv__recovery_owed(shared_env *sh)
{
    return sh->stamps && atomic_load(&sh->stamps->owed);
}

bool kv__recovering_here(void)
{
    return tls_recovering;
}
