/*
 * bench_growth.c -- `kvfts bench --growth`: one database grown step by step
 * to each of --sizes, as a user's database grows, measured at every step.
 *
 * A step adds the documents from the previous size up to the next one
 * with one `kvfts load` (its default --mem batches) into the same
 * WORK/kvfts, and, with the peers, the same documents to WORK/fts5.db in one
 * transaction and to WORK/xapian (one commit).  Each step is measured as the benchmark's loads are
 * (bench_load.c): its wall time, so the rate at a size is the docs/s of the
 * last step, not an average since the start; the peak RSS of the loading
 * process; the regions and freezer files sampled while it runs; the whole
 * directory after it.  Then the query set runs on the grown databases
 * (match counts compared with each peer, not full match sets).
 *
 * The documents.  The synthetic corpus of the largest size, read in
 * order (kvfts-corpus draws its documents in order, so its first N are the
 * corpus of size N).  Or a real corpus (--corpus NAME) cycled: document j
 * is line j mod L of the corpus with a member "cycle": j div L put first
 * and the key template "c{cycle}::<the spec's key>", so every document is
 * new; "cycle" is excluded from analysis, so the text indexed is the
 * corpus's own.  Each step's documents are written to WORK/step.jsonl,
 * loaded from there, and removed.
 *
 * Targets (issue 14): the rate at the largest size at least 0.8 of the rate
 * at 100,000 (bench_growth_finish), the loading process's peak RSS at most
 * 400 MB and no freezer file seen, at every size.
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where a step's documents come from. */
typedef struct source {
    FILE *f;              /* the corpus, read in order */
    bool cycle;
    char **lines;         /* cycle: every non-blank line of the corpus */
    size_t nlines;
    uint64_t next;        /* documents handed out so far */
    char *buf;
    size_t cap;
} source;

static bool blank(const char *s)
{
    return s[strspn(s, " \t\r\n")] == '\0';
}

static int source_open(source *src, const char *path, bool cycle)
{
    memset(src, 0, sizeof *src);
    src->cycle = cycle;
    src->f = fopen(path, "r");
    if (!src->f)
        return bench_fail(BENCH_ERR, "growth: %s: %s", path, strerror(errno));
    if (!cycle)
        return 0;
    size_t cap = 0;
    while (getline(&src->buf, &src->cap, src->f) != -1) {
        if (blank(src->buf))
            continue;
        if (src->nlines == cap) {
            cap = cap ? cap * 2 : 4096;
            src->lines = bench_xrealloc(src->lines, cap * sizeof *src->lines);
        }
        src->lines[src->nlines++] = bench_strdup(src->buf);
    }
    if (src->nlines == 0)
        return bench_fail(BENCH_ERR, "growth: %s: no documents", path);
    return 0;
}

static void source_close(source *src)
{
    if (src->f)
        fclose(src->f);
    for (size_t i = 0; i < src->nlines; i++)
        free(src->lines[i]);
    free(src->lines);
    free(src->buf);
}

/* Line j of the cycled corpus, with "cycle" first, to @p out. */
static int put_cycled(FILE *out, const source *src, uint64_t j)
{
    const char *l = src->lines[j % src->nlines];
    l += strspn(l, " \t");
    if (*l != '{')
        return -1;
    l++;
    const char *rest = l + strspn(l, " \t\r\n");
    uint64_t cycle = j / src->nlines;
    if (*rest == '}')
        return fprintf(out, "{\"cycle\":%" PRIu64 "}\n", cycle) < 0 ? -1 : 0;
    return fprintf(out, "{\"cycle\":%" PRIu64 ",%s", cycle, l) < 0 ? -1 : 0;
}

/* The next @p n documents into @p path. */
static int write_step(source *src, const char *path, uint64_t n,
                      const char *corpus)
{
    FILE *out = fopen(path, "w");
    if (!out)
        return bench_fail(BENCH_ERR, "growth: %s: %s", path, strerror(errno));
    int code = 0;
    for (uint64_t i = 0; i < n && !code; i++) {
        if (src->cycle) {
            if (put_cycled(out, src, src->next) != 0)
                code = bench_fail(BENCH_ERR, "growth: %s: a line that is "
                                  "not a JSON object, or %s: %s", corpus,
                                  path, strerror(errno));
        } else {
            ssize_t r;
            while ((r = getline(&src->buf, &src->cap, src->f)) != -1 &&
                   blank(src->buf))
                ;
            if (r == -1)
                code = bench_fail(BENCH_ERR, "growth: %s has only %" PRIu64
                                  " documents", corpus, src->next);
            else if (fputs(src->buf, out) == EOF)
                code = bench_fail(BENCH_ERR, "growth: %s: %s", path,
                                  strerror(errno));
        }
        src->next++;
    }
    if (fclose(out) != 0 && !code)
        code = bench_fail(BENCH_ERR, "growth: %s: %s", path, strerror(errno));
    return code;
}

/* The spec's config with "cycle" excluded from analysis (compact JSON:
 * {"analysis":{...}} as bench_spec.c writes it).  malloc'd. */
static char *config_without_cycle(const char *config)
{
    const char *c = config ? config : "{}";
    size_t n = strlen(c) + 64;
    char *out = bench_xmalloc(n);
    const char *ex = strstr(c, "\"exclude\":[");
    const char *an = strstr(c, "\"analysis\":{");
    if (ex) {
        size_t at = (size_t)(ex - c) + 11;
        snprintf(out, n, "%.*s\"cycle\"%s%s", (int)at, c,
                 c[at] == ']' ? "" : ",", c + at);
    } else if (an) {
        size_t at = (size_t)(an - c) + 12;
        snprintf(out, n, "%.*s\"exclude\":[\"cycle\"]%s%s", (int)at, c,
                 c[at] == '}' ? "" : ",", c + at);
    } else {
        const char *rest = c + 1 + strspn(c + 1, " ");
        snprintf(out, n, "{\"analysis\":{\"exclude\":[\"cycle\"]}%s%s",
                 *rest == '}' ? "" : ",", rest);
    }
    return out;
}

/* One step: the next documents up to @p size, loaded and queried. */
static int step(bench_growth *g, const bench_env *e, bench_queries *qs,
                const bench_growth_opts *o, source *src, const char *key,
                uint64_t size)
{
    bench_result *r = &g->r[g->n];
    memset(r, 0, sizeof *r);
    r->spec = g->spec;
    r->qs = qs;
    r->vs = g->vs;
    r->xap_on = g->xap_on;
    r->runs = o->runs;
    r->mem_mb = o->mem_mb;
    r->at_docs = size;
    r->corpus.path = bench_strdup(o->corpus);
    g->n++;
    bench_queries_reset(qs);
    char *file = bench_path(e->work, "step.jsonl");
    bench_corpus part = { file, 0, 0, 0 };
    int code = write_step(src, file, size - src->next, o->corpus);
    if (!code)
        code = bench_corpus_scan(&part, g->spec);
    r->corpus.docs = part.docs;
    r->corpus.bytes = part.bytes;
    r->corpus.text_bytes = part.text_bytes;
    if (!code) {
        bench_note("growth: kvfts: %" PRIu64 " more documents, to %" PRIu64,
                   part.docs, size);
        code = bench_add_kvfts(&r->kv, e, key, &part);
    }
    if (!code && g->vs) {
        bench_note("growth: fts5: %" PRIu64 " more documents", part.docs);
        code = bench_add_fts5(&r->fts, e, g->spec, key, &part);
    }
    if (!code && g->xap_on) {
        bench_note("growth: xapian: %" PRIu64 " more documents", part.docs);
        code = bench_add_xapian(&r->xap, e, g->spec, key, &part);
    }
    unlink(file);
    free(file);
    char *kv_dir = bench_path(e->work, "kvfts");
    char *fts_db = bench_path(e->work, "fts5.db");
    char *xap_dir = bench_path(e->work, "xapian");
    bench_run_opts ro = { kv_dir, g->vs ? fts_db : NULL,
                          g->xap_on ? xap_dir : NULL, g->spec, o->runs,
                          false };
    if (!code) {
        bench_note("growth: queries at %" PRIu64 " documents", size);
        code = bench_run(qs, r->cls, &r->kv, &r->fts, &r->xap, &ro);
    }
    free(kv_dir);
    free(fts_db);
    free(xap_dir);
    if (!code && r->kv.docs != size)
        bench_warn("growth: kvfts holds %" PRIu64 " documents after the step "
                   "to %" PRIu64, r->kv.docs, size);
    if (!code)
        bench_figures(r);
    return code;
}

int bench_growth_run(bench_growth *g, const bench_env *e, bench_queries *qs,
                     const bench_growth_opts *o)
{
    source src;
    bench_work_clean(e->work);
    int code = source_open(&src, o->corpus, o->cycle);
    g->cycled = o->cycle;
    g->base_docs = o->cycle ? src.nlines : 0;
    bench_spec spec = *g->spec;
    char *config = o->cycle ? config_without_cycle(spec.config) : NULL;
    if (config)
        spec.config = config;
    if (!code)
        code = bench_init_kvfts(e, &spec);
    size_t klen = strlen(g->spec->key.text) + 16;
    char *key = bench_xmalloc(klen);
    snprintf(key, klen, "%s%s", o->cycle ? "c{cycle}::" : "",
             g->spec->key.text);
    for (size_t i = 0; i < o->nsizes && !code; i++) {
        if (o->sizes[i] <= src.next) {
            code = bench_fail(BENCH_USAGE, "--sizes must grow: %" PRIu64
                              " after %" PRIu64, o->sizes[i], src.next);
            break;
        }
        bench_note("growth: %" PRIu64 " documents (%zu of %zu)", o->sizes[i],
                   i + 1, o->nsizes);
        code = step(g, e, qs, o, &src, key, o->sizes[i]);
        if (!code) {
            const bench_result *r = &g->r[g->n - 1];
            fprintf(stderr, "growth: %" PRIu64 " docs: %.0f docs/s over the "
                    "step (%.0f per CPU second), peak RSS %.0f MB, freezer "
                    "files %" PRIu64 "\n", o->sizes[i],
                    bench_per((double)r->corpus.docs, r->kv.secs),
                    bench_per((double)r->corpus.docs,
                              r->kv.user_s + r->kv.sys_s),
                    (double)r->kv.maxrss_kb / 1024, r->kv.freezer_peak);
        }
        if (!code && o->after_step)
            code = o->after_step(g, o->payload);
    }
    free(key);
    free(config);
    source_close(&src);
    return code;
}
