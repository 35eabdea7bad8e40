/*
 * bench_util.c -- the small helpers every file of kvfts-bench uses:
 * messages ("kvfts-bench: what: why", warnings, progress notes on a
 * terminal), the clock, allocation that exits on failure (the harness is a
 * program, not a library: running out of memory ends the run with a
 * message), paths and directories, and number formatting.
 */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int tty = -1;

bool bench_tty(void)
{
    if (tty < 0)
        tty = isatty(STDERR_FILENO);
    return tty;
}

int bench_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fputs("kvfts-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

void bench_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fputs("kvfts-bench: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void bench_note(const char *fmt, ...)
{
    if (!bench_tty())
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("kvfts-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void *bench_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fputs("kvfts-bench: out of memory\n", stderr);
        exit(BENCH_ERR);
    }
    return p;
}

void *bench_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fputs("kvfts-bench: out of memory\n", stderr);
        exit(BENCH_ERR);
    }
    return q;
}

char *bench_strndup(const char *s, size_t n)
{
    char *p = bench_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *bench_strdup(const char *s)
{
    return bench_strndup(s, strlen(s));
}

char *bench_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = bench_xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

bool bench_is_dir(const char *p)
{
    struct stat sb;
    return p && stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

bool bench_is_file(const char *p)
{
    struct stat sb;
    return p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

char *bench_dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return bench_strdup(".");
    return bench_strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

/* mkdir -p */
int bench_make_dirs(const char *dir)
{
    char *p = bench_strdup(dir);
    int code = 0;
    for (char *s = p + 1; ; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            code = bench_fail(BENCH_ERR, "%s: %s", p, strerror(errno));
        *s = c;
        if (c == '\0' || code)
            break;
    }
    if (!code && !bench_is_dir(dir))
        code = bench_fail(BENCH_ERR, "%s: not a directory", dir);
    free(p);
    return code;
}

/* 1234567 -> "1,234,567" */
void bench_thousands(char *out, size_t cap, double v)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%.0f", v);
    size_t n = strlen(digits), o = 0;
    for (size_t i = 0; i < n && o + 2 < cap; i++) {
        out[o++] = digits[i];
        if (digits[i] != '-' && (n - 1 - i) % 3 == 0 && i + 1 < n)
            out[o++] = ',';
    }
    out[o] = '\0';
}
double bench_per(double a, double b)
{
    return b > 0 ? a / b : NAN;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void bench_sort(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
}

double bench_median_sorted(const double *v, size_t n)
{
    if (n == 0)
        return NAN;
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bench_p99_sorted(const double *v, size_t n)
{
    if (n == 0)
        return NAN;
    size_t k = (size_t)ceil(0.99 * (double)n);
    return v[k ? k - 1 : 0];
}
