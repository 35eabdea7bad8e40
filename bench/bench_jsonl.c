/*
 * bench_jsonl.c -- a streaming reader of JSON Lines for the benchmark: it
 * hands each document's indexed fields and key values to a callback
 * without building a tree.
 *
 * The file is fed to one YAJL handle in 1 MiB chunks with
 * yajl_allow_multiple_values, so documents need not be split into lines
 * first and nothing is parsed twice: the peer's load is not handicapped by
 * a slow DOM parse.  The callbacks keep a stack of the containers the
 * parser is in and the dotted path of the current member; a scalar is kept
 * when its path names a slot:
 *   - field slots take top-level strings only (what the FTS5 columns hold);
 *   - path slots take a string, number or boolean at a dotted path, as
 *     written (what `kvfts load --key '{path}'` puts in the key).
 * Nothing inside an array matches.  The values of a document live in one
 * growing buffer, addressed by offset until the document ends (a realloc
 * may move it), then passed as pointers valid during the callback only.
 * A member given twice keeps its last value.
 */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

#define CHUNK (1u << 20)
#define MAX_DEPTH 600     /* deeper than kvfts accepts (512) */

typedef struct frame {
    bool array;
    bool in_array;        /* this container or one above is an array */
    size_t base;          /* length of the path of this container */
} frame;

typedef struct jl {
    const char *const *fields;
    size_t nfields;
    const char *const *paths;
    size_t npaths;
    size_t nslots;
    jl_doc_fn fn;
    void *payload;
    frame stack[MAX_DEPTH];
    int depth;
    char *path;           /* dotted path of the current member */
    size_t plen, pcap;
    char *vals;           /* this document's values */
    size_t vlen, vcap;
    size_t *off, *len;    /* per slot; off = SIZE_MAX: no value */
    const char **ptrs;
    uint64_t bytes;       /* fed so far */
    uint64_t docs;
    int rc;               /* a callback's non-zero return */
    char msg[200];        /* our own parse error (not YAJL's) */
} jl;

static int jl_error(jl *s, const char *msg)
{
    snprintf(s->msg, sizeof s->msg, "document %llu: %s",
             (unsigned long long)s->docs + 1, msg);
    return 0;
}

static void keep(jl *s, size_t slot, const char *v, size_t n)
{
    if (s->vlen + n + 1 > s->vcap) {
        s->vcap = (s->vlen + n + 1) * 2;
        s->vals = bench_xrealloc(s->vals, s->vcap);
    }
    memcpy(s->vals + s->vlen, v, n);
    s->vals[s->vlen + n] = '\0';
    s->off[slot] = s->vlen;
    s->len[slot] = n;
    s->vlen += n + 1;
}

/* A scalar at the current path. */
static int scalar(jl *s, const char *v, size_t n, bool is_string)
{
    if (s->depth == 0)
        return jl_error(s, "not a JSON object");
    const frame *f = &s->stack[s->depth - 1];
    if (f->array || f->in_array)
        return 1;
    if (is_string && s->depth == 1)
        for (size_t i = 0; i < s->nfields; i++)
            if (strlen(s->fields[i]) == s->plen &&
                memcmp(s->fields[i], s->path, s->plen) == 0)
                keep(s, i, v, n);
    for (size_t i = 0; i < s->npaths; i++)
        if (strlen(s->paths[i]) == s->plen &&
            memcmp(s->paths[i], s->path, s->plen) == 0)
            keep(s, s->nfields + i, v, n);
    return 1;
}

static int cb_null(void *ctx)
{
    jl *s = ctx;
    return s->depth == 0 ? jl_error(s, "not a JSON object") : 1;
}

static int cb_bool(void *ctx, int b)
{
    return scalar(ctx, b ? "true" : "false", b ? 4 : 5, false);
}

static int cb_number(void *ctx, const char *v, size_t n)
{
    return scalar(ctx, v, n, false);
}

static int cb_string(void *ctx, const unsigned char *v, size_t n)
{
    return scalar(ctx, (const char *)v, n, true);
}

static int push(jl *s, bool array)
{
    if (s->depth == 0 && array)
        return jl_error(s, "not a JSON object");
    if (s->depth == MAX_DEPTH)
        return jl_error(s, "nested too deeply");
    if (s->depth == 0) {          /* a new document */
        s->vlen = 0;
        s->plen = 0;
        for (size_t i = 0; i < s->nslots; i++)
            s->off[i] = SIZE_MAX;
    }
    frame *f = &s->stack[s->depth];
    const frame *up = s->depth ? &s->stack[s->depth - 1] : NULL;
    f->array = array;
    f->in_array = up && (up->array || up->in_array);
    f->base = s->plen;
    s->depth++;
    return 1;
}

static int cb_start_map(void *ctx)
{
    return push(ctx, false);
}

static int cb_start_array(void *ctx)
{
    return push(ctx, true);
}

static int cb_map_key(void *ctx, const unsigned char *k, size_t n)
{
    jl *s = ctx;
    const frame *f = &s->stack[s->depth - 1];
    size_t need = f->base + 1 + n + 1;
    if (need > s->pcap) {
        s->pcap = need * 2;
        s->path = bench_xrealloc(s->path, s->pcap);
    }
    s->plen = f->base;
    if (s->plen)
        s->path[s->plen++] = '.';
    memcpy(s->path + s->plen, k, n);
    s->plen += n;
    return 1;
}

static int doc_done(jl *s)
{
    for (size_t i = 0; i < s->nslots; i++)
        s->ptrs[i] = s->off[i] == SIZE_MAX ? NULL : s->vals + s->off[i];
    s->docs++;
    s->rc = s->fn(s->payload, s->ptrs, s->len, s->bytes);
    return s->rc == 0;
}

static int cb_end(void *ctx)
{
    jl *s = ctx;
    s->depth--;
    s->plen = s->stack[s->depth].base;
    return s->depth == 0 ? doc_done(s) : 1;
}

static const yajl_callbacks callbacks = {
    cb_null, cb_bool, NULL, NULL, cb_number, cb_string, cb_start_map,
    cb_map_key, cb_end, cb_start_array, cb_end
};

static void parse_error(jl *s, yajl_handle h, const unsigned char *chunk,
                        size_t n, char *err, size_t errcap)
{
    if (s->msg[0]) {
        snprintf(err, errcap, "%s", s->msg);
        return;
    }
    unsigned char *m = yajl_get_error(h, 0, chunk, n);
    snprintf(err, errcap, "document %llu: %s", (unsigned long long)s->docs + 1,
             (const char *)m);
    yajl_free_error(h, m);
    char *nl;
    while ((nl = strchr(err, '\n')))
        *nl = ' ';
}

static int feed(jl *s, yajl_handle h, FILE *f, char *err, size_t errcap)
{
    unsigned char *buf = bench_xmalloc(CHUNK);
    size_t n;
    yajl_status st = yajl_status_ok;
    while (st == yajl_status_ok && (n = fread(buf, 1, CHUNK, f)) > 0) {
        s->bytes += n;
        st = yajl_parse(h, buf, n);
        if (st == yajl_status_error)
            parse_error(s, h, buf, n, err, errcap);
    }
    if (st == yajl_status_ok && ferror(f)) {
        snprintf(err, errcap, "read error: %s", strerror(errno));
        st = yajl_status_error;
    }
    if (st == yajl_status_ok) {
        st = yajl_complete_parse(h);
        if (st == yajl_status_error)
            parse_error(s, h, buf, 0, err, errcap);
    }
    free(buf);
    if (st == yajl_status_ok)
        return 0;
    if (st == yajl_status_client_canceled && s->rc)
        return s->rc;            /* the callback's own stop */
    if (st == yajl_status_client_canceled)
        snprintf(err, errcap, "%s", s->msg);
    return -1;
}

int jl_scan(const char *path, const char *const *fields, size_t nfields,
            const char *const *paths, size_t npaths, jl_doc_fn fn,
            void *payload, char *err, size_t errcap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errcap, "%s", strerror(errno));
        return -1;
    }
    jl *s = bench_xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->fields = fields;
    s->nfields = nfields;
    s->paths = paths;
    s->npaths = npaths;
    s->nslots = nfields + npaths;
    s->fn = fn;
    s->payload = payload;
    s->off = bench_xmalloc((s->nslots + 1) * sizeof *s->off);
    s->len = bench_xmalloc((s->nslots + 1) * sizeof *s->len);
    s->ptrs = bench_xmalloc((s->nslots + 1) * sizeof *s->ptrs);
    yajl_handle h = yajl_alloc(&callbacks, NULL, s);
    yajl_config(h, yajl_allow_multiple_values, 1);
    int rc = feed(s, h, f, err, errcap);
    yajl_free(h);
    fclose(f);
    free(s->off);
    free(s->len);
    free(s->ptrs);
    free(s->vals);
    free(s->path);
    free(s);
    return rc;
}
