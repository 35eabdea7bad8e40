/*
 * fuzz_main.c -- the standalone driver of the fuzz targets: a main() that
 * feeds files to LLVMFuzzerTestOneInput(), so that a compiler without
 * libFuzzer (gcc) still runs every target over its committed corpus as an
 * ordinary ctest test, in the plain and the sanitizer build (utf8proc's and
 * libgit2's fuzzers do the same).
 *
 *   fuzz_<target> PATH...
 *
 * A PATH that is a directory stands for the regular files directly inside it
 * (hidden ones skipped), taken in name order so that a run is reproducible;
 * any other PATH is one input.  Each input is read into a buffer of exactly
 * its size, so an over-read by one byte lands outside the allocation where
 * AddressSanitizer sees it, as under libFuzzer.  The target's return value
 * is ignored (libFuzzer requires 0); a finding is a crash or a sanitizer
 * report, which ends the process with that input's name printed first.
 *
 * Exit status: 0 when every input ran; 1 if a path could not be read or no
 * input was found at all (an empty corpus is a packaging mistake, not a
 * pass).
 */
#define _XOPEN_SOURCE 700

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Run one file through the target.  Returns 0 or -1 (message printed). */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap)
            break;
        unsigned char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "fuzz: %s: cannot read\n", path);
        free(buf);
        return -1;
    }
    /* An exact-size copy: bytes past the input are outside the allocation.
     * An empty input still gets a valid pointer, as under libFuzzer. */
    unsigned char *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        fprintf(stderr, "fuzz: %s: out of memory\n", path);
        return -1;
    }
    memcpy(exact, buf, len);
    free(buf);
    fprintf(stderr, "fuzz: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run every regular, non-hidden file of directory @p dir, in name order.
 * *count is increased by the inputs run.  Returns 0 or -1. */
static int run_dir(const char *dir, size_t *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "fuzz: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **nn = realloc(names, ncap * sizeof *nn);
            if (!nn) {
                rc = -1;
                break;
            }
            names = nn;
            cap = ncap;
        }
        size_t plen = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(plen))) {
            rc = -1;
            break;
        }
        snprintf(names[n++], plen, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (rc)
        fprintf(stderr, "fuzz: %s: out of memory\n", dir);
    else if (n)
        qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (!rc && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(names[i]))
                rc = -1;
            else
                (*count)++;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    size_t count = 0;
    int rc = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "fuzz: %s: %s\n", argv[i], strerror(errno));
            rc = 1;
        } else if (S_ISDIR(st.st_mode)) {
            if (run_dir(argv[i], &count))
                rc = 1;
        } else if (run_file(argv[i])) {
            rc = 1;
        } else {
            count++;
        }
    }
    if (count == 0) {
        fprintf(stderr, "fuzz: no inputs found\n");
        rc = 1;
    }
    printf("fuzz: %zu inputs ran%s\n", count, rc ? " (with errors)" : "");
    return rc;
}
