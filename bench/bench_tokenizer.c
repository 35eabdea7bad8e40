/*
 * bench_tokenizer.c -- throughput of the analyzers of tokenizer/, one core.
 *
 *   bench_tokenizer FILE [ANALYZER...]
 *
 * FILE is JSON Lines (first byte '{') or plain text.  For JSON Lines, every
 * string value of every document is extracted first (not timed) and the
 * analyzers are timed on those values, as the index will call them; then
 * tok_analysis_run_doc() is timed on the whole documents with the default
 * config (JSON walk + field paths + `_all`), to show the cost of extraction.
 * Plain text is analyzed line by line.  Default analyzers: standard,
 * english, keyword.  Each measurement is repeated until it has run for at
 * least a second (and at least 3 times); the best pass is reported, in MB/s
 * of input text (1 MB = 10^6 bytes), with terms per second.
 *
 * Make a corpus from the Debian catalog with, e.g.:
 *   apt-cache dumpavail | grep -v '^ \.$' > /tmp/debian.txt
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer.h"

typedef struct span {
    size_t off, len;
} span;

typedef struct corpus {
    char *text;        /* the values, back to back */
    size_t len;
    span *v;           /* one per value (line or JSON string) */
    size_t n, cap;
} corpus;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void add_span(corpus *c, size_t off, size_t len)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 1024;
        c->v = realloc(c->v, c->cap * sizeof *c->v);
        if (!c->v) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    c->v[c->n].off = off;
    c->v[c->n].len = len;
    c->n++;
}

typedef struct extract {
    corpus *c;
    kv_buf *out;
} extract;

static int on_leaf(void *p, const char *path, size_t plen, kv_json_type type,
                   const char *v, size_t vlen, size_t pos)
{
    extract *x = p;
    (void)path;
    (void)plen;
    (void)pos;
    if (type != KV_JSON_STRING)
        return 0;
    add_span(x->c, x->out->len, vlen);
    return kv_buf_append(x->out, v, vlen, NULL);
}

static uint64_t nterms;

static int count_term(void *p, const char *t, size_t n, uint32_t pos,
                      size_t s, size_t e)
{
    (void)p;
    (void)t;
    (void)n;
    (void)pos;
    (void)s;
    (void)e;
    nterms++;
    return 0;
}

static int count_doc_term(void *p, const tok_term *t)
{
    (void)p;
    (void)t;
    nterms++;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_tokenizer FILE [ANALYZER...]\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    kv_buf raw = KV_BUF_INIT;
    char chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (kv_buf_append(&raw, chunk, got, NULL)) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
    fclose(f);

    corpus c = { 0 };
    kv_buf vals = KV_BUF_INIT;
    bool jsonl = raw.len && raw.data[0] == '{';
    size_t ndocs = 0;
    kv_err err = KV_ERR_INIT;
    for (size_t i = 0; i < raw.len;) {
        char *nl = memchr(raw.data + i, '\n', raw.len - i);
        size_t e = nl ? (size_t)(nl - raw.data) : raw.len;
        if (jsonl) {
            extract x = { &c, &vals };
            if (e > i && kv_json_walk(raw.data + i, e - i, NULL, on_leaf, &x,
                                      &err)) {
                fprintf(stderr, "line %zu: %s\n", ndocs + 1, err.msg);
                return 1;
            }
        } else {
            add_span(&c, vals.len, e - i);
            kv_buf_append(&vals, raw.data + i, e - i, NULL);
        }
        ndocs++;
        i = e + 1;
    }
    c.text = vals.data;
    c.len = vals.len;
    printf("%s: %s, %zu %s, %zu values, %.1f MB of text\n", argv[1],
           jsonl ? "JSON Lines" : "text", ndocs, jsonl ? "documents" : "lines",
           c.n, (double)c.len / 1e6);

    const char *defaults[] = { "standard", "english", "keyword" };
    int nan = argc > 2 ? argc - 2 : 3;
    for (int k = 0; k < nan; k++) {
        const char *name = argc > 2 ? argv[k + 2] : defaults[k];
        tok_tokenizer *t;
        if (tok_new(&t, name, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double best = 1e30, total = 0;
        uint64_t terms = 0;
        for (int rep = 0; rep < 3 || total < 1.0; rep++) {
            nterms = 0;
            double t0 = now();
            for (size_t i = 0; i < c.n; i++)
                if (tok_run(t, c.text + c.v[i].off, c.v[i].len, count_term,
                            NULL, &err)) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
            double dt = now() - t0;
            total += dt;
            if (dt < best)
                best = dt;
            terms = nterms;
        }
        tok_stats st;
        tok_get_stats(t, &st);
        printf("  %-10s %8.1f MB/s  %6.2f Mterms/s  (%llu terms; stem cache "
               "hit %.1f%%; slow runs %.3f%%)\n", name,
               (double)c.len / best / 1e6, (double)terms / best / 1e6,
               (unsigned long long)terms,
               st.stem_hits + st.stem_misses
                   ? 100.0 * (double)st.stem_hits /
                         (double)(st.stem_hits + st.stem_misses)
                   : 0.0,
               st.tokens ? 100.0 * (double)st.slow_runs / (double)st.tokens
                         : 0.0);
        tok_free(t);
    }

    if (jsonl) {
        tok_analysis *a;
        if (tok_analysis_new(&a, NULL, 0, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double best = 1e30, total = 0;
        uint64_t terms = 0;
        for (int rep = 0; rep < 3 || total < 1.0; rep++) {
            nterms = 0;
            double t0 = now();
            for (size_t i = 0; i < raw.len;) {
                char *nl = memchr(raw.data + i, '\n', raw.len - i);
                size_t e = nl ? (size_t)(nl - raw.data) : raw.len;
                if (e > i && tok_analysis_run_doc(a, raw.data + i, e - i,
                                                  count_doc_term, NULL, &err)) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
                i = e + 1;
            }
            double dt = now() - t0;
            total += dt;
            if (dt < best)
                best = dt;
            terms = nterms;
        }
        printf("  %-10s %8.1f MB/s of JSON  %6.1f kdocs/s  (%llu field "
               "terms incl. _all; default config)\n", "documents",
               (double)raw.len / best / 1e6, (double)ndocs / best / 1e3,
               (unsigned long long)terms);
        tok_analysis_free(a);
    }
    kv_buf_free(&raw);
    kv_buf_free(&vals);
    free(c.v);
    return 0;
}
