/*
 * kv_util.c -- errors, allocation, byte buffers and UTF-8 checks for every
 * module of kvfts.
 *
 * Errors: a kv_err is a fixed-size buffer owned by the caller, so that
 * reporting an error never allocates (an out-of-memory error must be
 * reportable).  Messages name what failed and where; callers add context
 * with kv_err_prefix() as the error travels up ("doc 'user::42': ...").
 *
 * Allocation: everything in kvfts allocates through kv_malloc() and friends,
 * which add one feature to libc: a per-thread fault hook for tests
 * (kv_alloc_fail_after) that fails the Nth allocation, as SQLite's fts5fault
 * tests do.  The hook is thread-local, so it is not shared state between
 * handles in different threads.
 *
 * UTF-8: kv_utf8_valid() is the strict check (RFC 3629): no overlong forms,
 * no surrogates, nothing above U+10FFFF.  It has an ASCII fast path because
 * almost every byte we check is ASCII.
 */
#include "kv.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------ */

void kv_err_clear(kv_err *err)
{
    if (!err)
        return;
    err->code = 0;
    err->pos = -1;
    err->msg[0] = '\0';
}

int kv_seterr(kv_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
    return code;
}

int kv_err_prefix(kv_err *err, const char *fmt, ...)
{
    if (!err)
        return 0;
    char head[KV_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(head, sizeof head - 2, fmt, ap);
    va_end(ap);
    if (n < 0)
        return err->code;
    size_t hl = strlen(head);
    memcpy(head + hl, ": ", 3);
    hl += 2;
    size_t ml = strnlen(err->msg, sizeof err->msg - 1);
    if (hl + ml >= sizeof err->msg)
        ml = sizeof err->msg - 1 - hl;
    memmove(err->msg + hl, err->msg, ml);
    memcpy(err->msg, head, hl);
    err->msg[hl + ml] = '\0';
    return err->code;
}

/* ---- allocation -------------------------------------------------------- */

static _Thread_local long fail_countdown;  /* 0 = hook off */
static _Thread_local long fail_count;
static _Thread_local bool fail_once;       /* only the Nth fails */

void kv_alloc_fail_after(long n)
{
    fail_countdown = n > 0 ? n : 0;
    fail_count = 0;
    fail_once = false;
}

void kv_alloc_fail_once(long n)
{
    kv_alloc_fail_after(n);
    fail_once = n > 0;
}

long kv_alloc_failures(void)
{
    return fail_count;
}

/* True if this allocation must fail under the test hook.  Once the countdown
 * reaches 1, every later allocation fails too, so that code paths which
 * retry or fall back are exercised as well. */
static bool hook_fails(void)
{
    if (fail_countdown == 0)
        return false;
    if (fail_countdown > 1) {
        fail_countdown--;
        return false;
    }
    fail_count++;
    if (fail_once)
        fail_countdown = 0;
    return true;
}

void *kv_malloc(size_t n)
{
    if (hook_fails())
        return NULL;
    return malloc(n ? n : 1);
}

void *kv_calloc(size_t n, size_t size)
{
    if (hook_fails())
        return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

/* Zeroed by memset rather than taken from calloc: a big calloc is fresh
 * mmap()ed memory that calloc knows to be zero, so a hash table's probes
 * would first read each page (mapping the shared zero page) and then write
 * it, a copy-on-write fault that flushes the TLBs of every core running
 * one of the process's threads (2% of a GCIDE load, in the string table's
 * rehash and the batch's pending keys). */
void *kv_calloc_written(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = kv_malloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void *kv_realloc(void *p, size_t n)
{
    if (hook_fails())
        return NULL;
    return realloc(p, n ? n : 1);
}

void kv_free(void *p)
{
    free(p);
}

bool kv_thread_start(pthread_t *th, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    bool ok = pthread_create(th, NULL, fn, arg) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return ok;
}

char *kv_strndup(const char *s, size_t n)
{
    char *d = kv_malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* ---- buffers ----------------------------------------------------------- */

int kv_buf_reserve(kv_buf *b, size_t extra, kv_err *err)
{
    if (extra < b->cap - b->len)      /* keep room for the NUL */
        return KVFTS_OK;
    if (extra > SIZE_MAX / 2 - b->len)
        return kv_seterr(err, KVFTS_ENOMEM, "buffer of %zu bytes too large",
                         b->len + extra);
    size_t need = b->len + extra + 1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    char *p = kv_realloc(b->data, cap);
    if (!p)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory (%zu bytes)", cap);
    b->data = p;
    b->cap = cap;
    return KVFTS_OK;
}

int kv_buf_append(kv_buf *b, const void *p, size_t n, kv_err *err)
{
    int rc = kv_buf_reserve(b, n, err);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return KVFTS_OK;
}

int kv_buf_appendf(kv_buf *b, kv_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return kv_seterr(err, KVFTS_ERROR, "formatting failed");
    int rc = kv_buf_reserve(b, (size_t)n, err);
    if (rc)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return KVFTS_OK;
}

int kv_buf_append_json_str(kv_buf *b, const char *s, size_t n, kv_err *err)
{
    static const char hex[] = "0123456789abcdef";
    /* Worst case every byte becomes \u00XX. */
    if (n > (SIZE_MAX - 2) / 6)
        return kv_seterr(err, KVFTS_ENOMEM, "string too large");
    int rc = kv_buf_reserve(b, n * 6 + 2, err);
    if (rc)
        return rc;
    char *o = b->data + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        /* Eight bytes at a time while none needs escaping (a control
         * character, '"' or '\\'): most of a document's text. */
        while (i + 8 <= n) {
            uint64_t x;
            memcpy(&x, s + i, 8);
            const uint64_t ones = 0x0101010101010101ull;
            const uint64_t high = 0x8080808080808080ull;
            uint64_t q = x ^ (ones * '"'), bs = x ^ (ones * '\\');
            uint64_t hit = ((x - ones * 0x20) & ~x) |
                           ((q - ones) & ~q) | ((bs - ones) & ~bs);
            if (hit & high) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                /* The lowest flagged byte is the first to escape (a
                 * borrow only flags bytes above a true one): copy the
                 * clean ones before it at once, not one per pass. */
                size_t k = (size_t)__builtin_ctzll(hit & high) / 8;
                memcpy(o, s + i, 8);
                o += k;
                i += k;
#endif
                break;
            }
            memcpy(o, s + i, 8);
            o += 8;
            i += 8;
        }
        if (i >= n)
            break;
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c < 0x20) {
            *o++ = '\\';
            switch (c) {
            case '\n': *o++ = 'n'; break;
            case '\r': *o++ = 'r'; break;
            case '\t': *o++ = 't'; break;
            case '\b': *o++ = 'b'; break;
            case '\f': *o++ = 'f'; break;
            default:
                *o++ = 'u'; *o++ = '0'; *o++ = '0';
                *o++ = hex[c >> 4]; *o++ = hex[c & 15];
            }
        } else {
            *o++ = (char)c;
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
    return KVFTS_OK;
}

void kv_buf_reset(kv_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void kv_buf_free(kv_buf *b)
{
    kv_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- UTF-8 ------------------------------------------------------------- */

bool kv_utf8_valid(const char *str, size_t n, size_t *bad_at)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time. */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        uint32_t cp;
        size_t len = kv_utf8_decode(s, n, i, &cp);
        if (len == 0) {
            if (bad_at)
                *bad_at = i;
            return false;
        }
        i += len;
    }
    return true;
}

void kv_put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

uint64_t kv_get_be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

void kv_put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

uint32_t kv_get_be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
           ((uint32_t)p[2] << 8) | p[3];
}
