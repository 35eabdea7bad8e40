/*
 * lib/kv/kv_stall.c -- Berkeley DB's waits, ended when they wait in vain.
 *
 * Berkeley DB 5.3 keeps its mutexes, page latches and lock waits in the
 * shared regions as process-shared pthread objects: mutexes, rwlocks (the
 * page latches) and condition variables (a lock wait).  Nothing releases
 * one when the process holding it is killed (SIGKILL, the OOM killer), and
 * a thread already waiting for it waits for ever: the survivors hung, and
 * with them the next process at the registry's door.  Recovery does not
 * help a thread already asleep on the old regions.  And glibc >= 2.25's
 * pthread_cond_destroy waits until every waiter registered on the
 * condition has left, which a killed waiter never does: failchk, aborting
 * a killed lock waiter's transaction, initialises its locker's mutex
 * afresh and hung there, holding the lock region.
 *
 * So kvfts defines the waiting calls itself: pthread_mutex_lock,
 * pthread_rwlock_rdlock and _wrlock, pthread_cond_wait and _timedwait,
 * and pthread_cond_destroy.  The dynamic linker binds Berkeley DB's calls
 * to these (the executable, or libkvfts.so loaded before the C library,
 * comes first in its lookup order); a call from anywhere but libdb goes
 * straight on to the C library's.  For Berkeley DB's calls:
 *   - A wait is made of slices of STALL_SLICE_MS.  From the first second
 *     on, after each slice, it asks whether it waits in vain (vain()):
 *       (a) the object lies in a mapping of a file since deleted: another
 *           process recovered the environment and removed these regions;
 *           or a recovery of them is under way, which waits for the calls
 *           under way (kv_env.c), this one among them;
 *       (b) a mutex's owner, or a write-held latch's, is a thread that no
 *           longer exists, seen twice in a row;
 *       (c) after STALL_GUESS_MS, a latch held by readers (glibc does not
 *           record them) while a process registered in a database this
 *           process has open is dead (kv__dead_peer): a guess (and (d)
 *           below, for lock waits).
 *     It then returns EOWNERDEAD.  Berkeley DB takes a failed lock as
 *     fatal: it panics the environment and returns DB_RUNRECOVERY, which
 *     kv_env.c handles as it does another process's recovery: this process
 *     joins a recovered environment and the transaction runs again (kv_env.c
 *     says which).  A guess that was wrong costs one recovery.
 *   - A condition wait is a wait for a lock, which a live holder may keep
 *     for long and a dead one's failchk releases.  Failchk runs where a
 *     transaction begins (kv_env.c), so a process that died holding a
 *     lock after the others had begun theirs left them all waiting in it,
 *     and one of them could hold the registry's door, where the next
 *     failchk would run: (a) ends such a wait, and also
 *       (d) a process registered in a database this process has open has
 *           been seen dead, and not yet cleaned up after, for
 *           STALL_GUESS_MS of this wait (failchk clears its mark within a
 *           second wherever a transaction begins).  Failchk would have
 *           asked for recovery anyway where the dead process held a write
 *           lock: every file's open takes one (Berkeley DB's meta-data
 *           lock).  A live holder keeps a wait going only while nobody
 *           begins a transaction; it costs one recovery then.
 *   - A thread that never waits but loops inside Berkeley DB on a state a
 *     killed process left is caught by a check every so many calls
 *     (spinning()).
 *   - pthread_cond_destroy returns at once.  Berkeley DB destroys one only
 *     to initialise it again (or with its region), and the only waiters
 *     then left on it are dead ones.
 * The thread running a recovery never gives up: the dead process it
 * recovers from is still registered while it does, and (c) and the spin
 * check took its many calls in a slow recovery for a wait in vain (seen:
 * recoveries failing with DB_RUNRECOVERY in the sanitizer build).
 * A process killed inside the short section where a lock wait's own mutex
 * is held still leaves a waiter that glibc itself blocks on; that is not
 * covered.  Under ThreadSanitizer, whose runtime defines these calls, none
 * of this is built.
 */
#define _GNU_SOURCE
#include "kv_int.h"

#if defined(__SANITIZE_THREAD__)
#define KV_STALL_OFF 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KV_STALL_OFF 1
#endif
#endif

#ifndef KV_STALL_OFF

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STALL_SLICE_MS 500
#define STALL_FIRST_MS 1000       /* a wait shorter than this is not looked at */
#define STALL_GUESS_MS 5000       /* (c): a latch wait at least this long */
#define SPIN_EVERY (1u << 20)     /* calls between two of a thread's spin checks */

#define KV_EXPORT __attribute__((visibility("default")))

static struct {
    int (*mutex_lock)(pthread_mutex_t *);
    int (*rdlock)(pthread_rwlock_t *);
    int (*wrlock)(pthread_rwlock_t *);
    int (*cond_wait)(pthread_cond_t *, pthread_mutex_t *);
    int (*cond_timedwait)(pthread_cond_t *, pthread_mutex_t *,
                          const struct timespec *);
    int (*cond_destroy)(pthread_cond_t *);
    uintptr_t lo, hi;             /* libdb's code; lo == hi: not found */
} real;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static int find_libdb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    const char *name = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    if (!name || strncmp(name, "/libdb-", 7) != 0)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (real.lo == real.hi || lo < real.lo)
            real.lo = lo;
        if (lo + ph->p_memsz > real.hi)
            real.hi = lo + ph->p_memsz;
    }
    return real.lo != real.hi;
}

/* The next definition of @p name after ours (the C library's, or a
 * sanitizer's in front of it), into the function pointer at @p fn.
 * (Through memcpy: ISO C has no cast from dlsym's void * to a function.) */
static void next_fn(void *fn, size_t size, const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "kvfts: %s not found in the C library\n", name);
        abort();
    }
    memcpy(fn, &f, size);
}

#define NEXT(field, name) next_fn(&real.field, sizeof real.field, name)

static void real_init(void)
{
    NEXT(mutex_lock, "pthread_mutex_lock");
    NEXT(rdlock, "pthread_rwlock_rdlock");
    NEXT(wrlock, "pthread_rwlock_wrlock");
    NEXT(cond_wait, "pthread_cond_wait");
    NEXT(cond_timedwait, "pthread_cond_timedwait");
    NEXT(cond_destroy, "pthread_cond_destroy");
    dl_iterate_phdr(find_libdb, NULL);
}

/* True if the call came from Berkeley DB's code. */
static inline bool from_bdb(const void *ra)
{
    pthread_once(&real_once, real_init);
    return (uintptr_t)ra - real.lo < real.hi - real.lo;
}

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timespec mono_at(long long ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000 };
    return ts;
}

typedef struct stall {
    long long start;              /* mono_ms() when the wait began */
    int dead_owner;               /* (b): the owner seen gone last slice */
    long long dead_since;         /* (d): see dead_uncleaned() */
} stall;

/* What else than (a) and (b) may end a wait: */
typedef enum {
    GUESS_NONE,                   /* a mutex */
    GUESS_LATCH,                  /* (c) */
    GUESS_LOCK                    /* (d) */
} guess_kind;

/* (a): the mapping holding @p obj is of a deleted file, or a recovery of
 * the regions it is in is under way (kv__recovery_pending).  The mapped
 * file's path goes to @p where (cap PATH_MAX; "" if none): the guesses
 * look only at the processes of that environment. */
static bool mapping_vain(const void *obj, char *where)
{
    where[0] = '\0';
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return false;
    char *line = NULL;
    size_t cap = 0;
    bool v = false;
    ssize_t n;
    uintptr_t a = (uintptr_t)obj;
    while ((n = getline(&line, &cap, f)) > 0) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) != 2 || a < lo || a >= hi)
            continue;
        while (n > 0 && line[n - 1] == '\n')
            line[--n] = '\0';
        v = n >= 10 && strcmp(line + n - 10, " (deleted)") == 0;
        const char *path = strchr(line, '/');
        if (path && strlen(path) < PATH_MAX)
            strcpy(where, path);
        if (!v && path)
            v = kv__recovery_pending(path);
        break;
    }
    free(line);
    fclose(f);
    return v;
}

static bool thread_gone(int tid)
{
    return tid > 0 && kill(tid, 0) != 0 && errno == ESRCH;
}

/* A dead peer (of the environment at @p where) seen in every check for
 * STALL_GUESS_MS: *@p since is mono_ms() when the first of those checks
 * saw it (0: the last check did not).  Rule (d), and spinning(). */
static bool dead_uncleaned(long long *since, const char *where,
                           long long now)
{
    if (!kv__dead_peer(where)) {
        *since = 0;
        return false;
    }
    if (!*since)
        *since = now;
    return now - *since >= STALL_GUESS_MS;
}

/* Whether a wait of Berkeley DB's for @p obj is in vain (see the top):
 * @p owner is the holder's thread id if known, else 0; @p guess says what
 * else may end it. */
static bool vain(stall *s, const void *obj, int owner, guess_kind guess)
{
    long long now = mono_ms(), waited = now - s->start;
    if (waited < STALL_FIRST_MS || kv__recovering_here())
        return false;
    int saved = errno;
    char where[PATH_MAX];
    bool v = mapping_vain(obj, where);
    if (!v && owner > 0 && thread_gone(owner)) {
        v = s->dead_owner == owner;
        s->dead_owner = owner;
    } else {
        s->dead_owner = 0;
    }
    if (!v && guess == GUESS_LATCH && waited >= STALL_GUESS_MS)
        v = kv__dead_peer(where);
    if (!v && guess == GUESS_LOCK)
        v = dead_uncleaned(&s->dead_since, where, now);
    errno = saved;
    return v;
}

/* A thread that loops inside Berkeley DB without waiting: a process killed
 * in the middle of changing a page's chain of versions can leave it so
 * that __memp_fget retries for ever, taking and releasing its mutexes and
 * latches.  So every SPIN_EVERY of its calls here (a fraction of a second
 * in such a loop; the check reads /proc/self/maps, 7 us in a small
 * process, and the registry), a thread
 * looks whether @p obj is in regions since removed (then it is in an
 * environment another process recovered), or whether a dead process has
 * been left uncleaned for STALL_GUESS_MS (nobody else is running failchk:
 * everybody may be in such a loop).  True: give up, as vain() does. */
static _Thread_local unsigned tls_calls;
static _Thread_local long long tls_dead_since;   /* mono_ms(); 0: none */

static bool spinning(const void *obj)
{
    if (__builtin_expect(++tls_calls % SPIN_EVERY != 0, 1) ||
        kv__recovering_here())
        return false;
    int saved = errno;
    char where[PATH_MAX];
    bool v = mapping_vain(obj, where) ||
             dead_uncleaned(&tls_dead_since, where, mono_ms());
    if (v)
        tls_dead_since = 0;
    errno = saved;
    return v;
}

/* Berkeley DB's mutex wait (see the top). */
static int mutex_wait(pthread_mutex_t *m, bool spin_check)
{
    if (spin_check && spinning(m))
        return EOWNERDEAD;
    int r = pthread_mutex_trylock(m);
    if (r != EBUSY)
        return r;
    stall s = { mono_ms(), 0, 0 };
    for (;;) {
        struct timespec at = mono_at(mono_ms() + STALL_SLICE_MS);
        r = pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &at);
        if (r != ETIMEDOUT)
            return r;
        if (vain(&s, m, m->__data.__owner, GUESS_NONE))
            return EOWNERDEAD;
    }
}

KV_EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
    if (!from_bdb(__builtin_return_address(0)))
        return real.mutex_lock(m);
    return mutex_wait(m, true);
}

static int rwlock_wait(pthread_rwlock_t *l, bool write)
{
    if (spinning(l))
        return EOWNERDEAD;
    int r = write ? pthread_rwlock_trywrlock(l) : pthread_rwlock_tryrdlock(l);
    if (r != EBUSY)
        return r;
    stall s = { mono_ms(), 0, 0 };
    for (;;) {
        struct timespec at = mono_at(mono_ms() + STALL_SLICE_MS);
        r = write ? pthread_rwlock_clockwrlock(l, CLOCK_MONOTONIC, &at)
                  : pthread_rwlock_clockrdlock(l, CLOCK_MONOTONIC, &at);
        if (r != ETIMEDOUT)
            return r;
        if (vain(&s, l, (int)l->__data.__cur_writer, GUESS_LATCH))
            return EOWNERDEAD;
    }
}

KV_EXPORT int pthread_rwlock_rdlock(pthread_rwlock_t *l)
{
    if (!from_bdb(__builtin_return_address(0)))
        return real.rdlock(l);
    return rwlock_wait(l, false);
}

KV_EXPORT int pthread_rwlock_wrlock(pthread_rwlock_t *l)
{
    if (!from_bdb(__builtin_return_address(0)))
        return real.wrlock(l);
    return rwlock_wait(l, true);
}

/* A condition wait in slices, until @p until (CLOCK_REALTIME, the clock of
 * Berkeley DB's conditions) if not NULL. */
static int cond_wait_sliced(pthread_cond_t *c, pthread_mutex_t *m,
                            const struct timespec *until)
{
    stall s = { mono_ms(), 0, 0 };
    long long end = -1;
    if (until) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        long long left = (long long)(until->tv_sec - now.tv_sec) * 1000 +
                         (until->tv_nsec - now.tv_nsec) / 1000000;
        end = s.start + (left > 0 ? left : 0);
    }
    for (;;) {
        long long at = mono_ms() + STALL_SLICE_MS;
        if (end >= 0 && end < at)
            at = end;
        struct timespec ts = mono_at(at);
        int r = pthread_cond_clockwait(c, m, CLOCK_MONOTONIC, &ts);
        if (r != ETIMEDOUT)
            return r;             /* woken; the caller checks what for */
        if (end >= 0 && mono_ms() >= end)
            return ETIMEDOUT;
        if (mono_ms() - s.start < STALL_FIRST_MS)
            continue;
        /* The check reads /proc: not with m held, or a process killed
         * meanwhile would leave m held for ever (a wait's own section of
         * Berkeley DB holds it only for a few instructions). */
        pthread_mutex_unlock(m);
        bool v = vain(&s, c, 0, GUESS_LOCK);
        r = mutex_wait(m, false);
        if (r)
            return r;
        if (v)
            return EOWNERDEAD;
    }
}

KV_EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    if (!from_bdb(__builtin_return_address(0)))
        return real.cond_wait(c, m);
    return cond_wait_sliced(c, m, NULL);
}

KV_EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                     const struct timespec *until)
{
    if (!from_bdb(__builtin_return_address(0)))
        return real.cond_timedwait(c, m, until);
    return cond_wait_sliced(c, m, until);
}

KV_EXPORT int pthread_cond_destroy(pthread_cond_t *c)
{
    if (!from_bdb(__builtin_return_address(0)))
        return real.cond_destroy(c);
    return 0;
}

bool kv_stall_guarded(void)
{
    pthread_once(&real_once, real_init);
    void *p = dlsym(RTLD_DEFAULT, "pthread_cond_destroy");
    int (*bound)(pthread_cond_t *);
    memcpy(&bound, &p, sizeof bound);
    return real.lo != real.hi && bound == pthread_cond_destroy;
}

#else /* KV_STALL_OFF */

bool kv_stall_guarded(void)
{
    return false;
}

#endif
