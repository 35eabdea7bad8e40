/*
 * bench_spec.c -- what a benchmark corpus is: its spec, its query set and
 * its key template.
 *
 * A spec, bench/corpora/NAME.json:
 *
 *   {"name":"gcide", "title":"...", "synthetic":false,
 *    "key":"word::{id}", "fields":["headword","text"],
 *    "config":{...kvfts config...}, "queries":"gcide.tsv"}
 *
 * `key` is the `kvfts load --key` template, `fields` the indexed top-level
 * string fields, which become the FTS5 columns in that order (after a first
 * column `key UNINDEXED` holding the rendered key), `config` goes to
 * `kvfts init --config`, `queries` names a file of bench/queries/, and
 * `"xapian": false` (optional) leaves Xapian out unless --vs names it: a
 * corpus whose queries Xapian cannot answer in reasonable time (largevocab:
 * its wildcards of up to 180,000 expansions ran for over 20 minutes).
 * Unknown members are refused, so a typo does not silently change a
 * benchmark.
 *
 * A query set, bench/queries/NAME.tsv: `#` comments and blank lines are
 * ignored; every other line is CLASS<TAB>KVFTS QUERY<TAB>FTS5 QUERY, CLASS
 * one of bench_class_names, optionally followed by <TAB>XAPIAN QUERY (the
 * QueryParser syntax); without it the Xapian query is the FTS5 one with
 * "col : expr" written "col:expr", which is all the two syntaxes differ in
 * for the query classes of the benchmark.
 */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_gen.h>
#include <yajl/yajl_tree.h>

const char *const bench_class_names[NCLASS] = {
    "term-common", "term-rare", "and2", "and3", "or", "not", "phrase",
    "prefix", "field"
};

static int read_all(char **out, const char *file)
{
    *out = NULL;
    FILE *f = fopen(file, "rb");
    if (!f)
        return bench_fail(errno == ENOENT ? BENCH_USAGE : BENCH_ERR, "%s: %s",
                          file, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = bench_xmalloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap)
            buf = bench_xrealloc(buf, cap *= 2);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return bench_fail(BENCH_ERR, "%s: read error", file);
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

/* ---- key templates ------------------------------------------------------ */

static size_t tmpl_path(bench_tmpl *t, const char *p, size_t n)
{
    for (size_t i = 0; i < t->npaths; i++)
        if (strlen(t->paths[i]) == n && memcmp(t->paths[i], p, n) == 0)
            return i;
    t->paths = bench_xrealloc(t->paths, (t->npaths + 1) * sizeof *t->paths);
    t->paths[t->npaths] = bench_strndup(p, n);
    return t->npaths++;
}

static void tmpl_add(bench_tmpl *t, char *lit, size_t path)
{
    t->parts = bench_xrealloc(t->parts, (t->nparts + 1) * sizeof *t->parts);
    t->parts[t->nparts].lit = lit;
    t->parts[t->nparts].path = path;
    t->nparts++;
}

int bench_tmpl_parse(bench_tmpl *t, const char *text, const char *where)
{
    memset(t, 0, sizeof *t);
    t->text = bench_strdup(text);
    const char *p = text;
    while (*p) {
        const char *open = strchr(p, '{');
        if (!open) {
            tmpl_add(t, bench_strdup(p), 0);
            break;
        }
        if (open > p) {
            tmpl_add(t, bench_strndup(p, (size_t)(open - p)), 0);
        }
        const char *close = strchr(open, '}');
        if (!close || close == open + 1) {
            bench_tmpl_free(t);
            return bench_fail(BENCH_USAGE, "%s: key template '%s': %s", where,
                              text, close ? "empty {}" : "'{' without '}'");
        }
        tmpl_add(t, NULL, tmpl_path(t, open + 1, (size_t)(close - open - 1)));
        p = close + 1;
    }
    if (t->npaths == 0) {
        bench_tmpl_free(t);
        return bench_fail(BENCH_USAGE, "%s: key template '%s' has no {path}",
                          where, text);
    }
    return 0;
}

void bench_tmpl_free(bench_tmpl *t)
{
    for (size_t i = 0; i < t->nparts; i++)
        free(t->parts[i].lit);
    for (size_t i = 0; i < t->npaths; i++)
        free(t->paths[i]);
    free(t->parts);
    free(t->paths);
    free(t->text);
    memset(t, 0, sizeof *t);
}

long bench_tmpl_render(char **buf, size_t *cap, const bench_tmpl *t,
                       const char *const *vals, const size_t *lens,
                       size_t *missing)
{
    size_t n = 0;
    for (size_t i = 0; i < t->nparts; i++) {
        const char *s;
        size_t len;
        if (t->parts[i].lit) {
            s = t->parts[i].lit;
            len = strlen(s);
        } else {
            size_t k = t->parts[i].path;
            if (!vals[k]) {
                *missing = k;
                return -1;
            }
            s = vals[k];
            len = lens[k];
        }
        if (n + len + 1 > *cap) {
            *cap = (n + len + 1) * 2;
            *buf = bench_xrealloc(*buf, *cap);
        }
        memcpy(*buf + n, s, len);
        n += len;
    }
    if (!*buf)
        *buf = bench_xmalloc(*cap = 16);
    (*buf)[n] = '\0';
    return (long)n;
}

/* ---- specs -------------------------------------------------------------- */

/* A YAJL tree back to compact JSON (for the config member). */
static void gen_tree(yajl_gen g, yajl_val v)
{
    if (YAJL_IS_OBJECT(v)) {
        yajl_gen_map_open(g);
        for (size_t i = 0; i < v->u.object.len; i++) {
            const char *k = v->u.object.keys[i];
            yajl_gen_string(g, (const unsigned char *)k, strlen(k));
            gen_tree(g, v->u.object.values[i]);
        }
        yajl_gen_map_close(g);
    } else if (YAJL_IS_ARRAY(v)) {
        yajl_gen_array_open(g);
        for (size_t i = 0; i < v->u.array.len; i++)
            gen_tree(g, v->u.array.values[i]);
        yajl_gen_array_close(g);
    } else if (YAJL_IS_STRING(v)) {
        yajl_gen_string(g, (const unsigned char *)v->u.string,
                        strlen(v->u.string));
    } else if (YAJL_IS_NUMBER(v)) {
        const char *s = v->u.number.r;
        yajl_gen_number(g, s, strlen(s));
    } else if (YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v)) {
        yajl_gen_bool(g, YAJL_IS_TRUE(v));
    } else {
        yajl_gen_null(g);
    }
}

static char *tree_json(yajl_val v)
{
    yajl_gen g = yajl_gen_alloc(NULL);
    gen_tree(g, v);
    const unsigned char *out;
    size_t len;
    yajl_gen_get_buf(g, &out, &len);
    char *s = bench_strndup((const char *)out, len);
    yajl_gen_free(g);
    return s;
}

static int spec_string(char **out, yajl_val v, const char *file,
                       const char *member)
{
    if (!YAJL_IS_STRING(v) || !*v->u.string)
        return bench_fail(BENCH_USAGE, "spec %s: '%s' must be a non-empty "
                          "string", file, member);
    free(*out);
    *out = bench_strdup(v->u.string);
    return 0;
}

static int spec_bool(bool *out, yajl_val v, const char *file,
                     const char *member)
{
    if (!YAJL_IS_TRUE(v) && !YAJL_IS_FALSE(v))
        return bench_fail(BENCH_USAGE, "spec %s: '%s' must be true or false",
                          file, member);
    *out = YAJL_IS_TRUE(v);
    return 0;
}

static int spec_fields(bench_spec *s, yajl_val v)
{
    if (!YAJL_IS_ARRAY(v) || v->u.array.len == 0)
        return bench_fail(BENCH_USAGE, "spec %s: 'fields' must be a "
                          "non-empty array of strings", s->file);
    s->fields = bench_xmalloc(v->u.array.len * sizeof *s->fields);
    for (size_t i = 0; i < v->u.array.len; i++) {
        yajl_val f = v->u.array.values[i];
        if (!YAJL_IS_STRING(f) || !*f->u.string || strchr(f->u.string, '"'))
            return bench_fail(BENCH_USAGE, "spec %s: 'fields' must hold "
                              "field names (strings without '\"')", s->file);
        s->fields[s->nfields++] = bench_strdup(f->u.string);
    }
    return 0;
}

static int spec_member(bench_spec *s, const char *k, yajl_val v)
{
    if (strcmp(k, "name") == 0)
        return spec_string(&s->name, v, s->file, k);
    if (strcmp(k, "title") == 0)
        return spec_string(&s->title, v, s->file, k);
    if (strcmp(k, "queries") == 0)
        return spec_string(&s->queries, v, s->file, k);
    if (strcmp(k, "fields") == 0)
        return spec_fields(s, v);
    if (strcmp(k, "synthetic") == 0)
        return spec_bool(&s->synthetic, v, s->file, k);
    if (strcmp(k, "xapian") == 0) {
        bool on = true;
        int code = spec_bool(&on, v, s->file, k);
        s->no_xapian = !on;
        return code;
    }
    if (strcmp(k, "config") == 0) {
        if (!YAJL_IS_OBJECT(v))
            return bench_fail(BENCH_USAGE, "spec %s: 'config' must be an "
                              "object", s->file);
        s->config = tree_json(v);
        return 0;
    }
    if (strcmp(k, "key") == 0) {
        if (!YAJL_IS_STRING(v))
            return bench_fail(BENCH_USAGE, "spec %s: 'key' must be a string",
                              s->file);
        bench_tmpl_free(&s->key);
        return bench_tmpl_parse(&s->key, v->u.string, s->file);
    }
    return bench_fail(BENCH_USAGE, "spec %s: unknown member '%s' (valid: "
                      "name, title, synthetic, key, fields, config, queries, "
                      "xapian)", s->file, k);
}

int bench_spec_load(bench_spec *s, const char *file)
{
    memset(s, 0, sizeof *s);
    s->file = bench_strdup(file);
    char *text;
    int code = read_all(&text, file);
    if (code)
        return code;
    char err[256];
    yajl_val root = yajl_tree_parse(text, err, sizeof err);
    free(text);
    if (!root || !YAJL_IS_OBJECT(root)) {
        if (root)
            snprintf(err, sizeof err, "not a JSON object");
        char *nl;
        while ((nl = strchr(err, '\n')))
            *nl = ' ';
        yajl_tree_free(root);
        return bench_fail(BENCH_USAGE, "spec %s: %s", file, err);
    }
    for (size_t i = 0; i < root->u.object.len && !code; i++)
        code = spec_member(s, root->u.object.keys[i], root->u.object.values[i]);
    yajl_tree_free(root);
    if (code)
        return code;
    const char *missing = !s->name ? "name" : !s->key.text ? "key"
                        : !s->fields ? "fields" : !s->queries ? "queries"
                        : NULL;
    if (missing)
        return bench_fail(BENCH_USAGE, "spec %s: '%s' is missing", file,
                          missing);
    if (!s->title)
        s->title = bench_strdup(s->name);
    return 0;
}

void bench_spec_free(bench_spec *s)
{
    for (size_t i = 0; i < s->nfields; i++)
        free(s->fields[i]);
    free(s->fields);
    bench_tmpl_free(&s->key);
    free(s->file);
    free(s->name);
    free(s->title);
    free(s->config);
    free(s->queries);
    memset(s, 0, sizeof *s);
}

/* ---- query sets --------------------------------------------------------- */

static int class_of(const char *name)
{
    for (int c = 0; c < NCLASS; c++)
        if (strcmp(bench_class_names[c], name) == 0)
            return c;
    return -1;
}

/* The Xapian query of an FTS5 one, when the line gives none: the same
 * text with FTS5's column filter "col : expr" written as Xapian's
 * "col:expr" (AND, OR, NOT, brackets, phrases and trailing-* prefixes are
 * written alike in both). */
static char *xapian_of(const char *fts)
{
    char *x = bench_strdup(fts), *o = x;
    for (const char *p = fts; *p; p++) {
        if (strncmp(p, " : ", 3) == 0) {
            *o++ = ':';
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return x;
}

static int parse_query(bench_queries *qs, char *line, unsigned lineno)
{
    char *t1 = strchr(line, '\t');
    char *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
    char *t3 = t2 ? strchr(t2 + 1, '\t') : NULL;
    if (!t2 || (t3 && strchr(t3 + 1, '\t')))
        return bench_fail(BENCH_USAGE, "%s:%u: expected CLASS<TAB>KVFTS "
                          "QUERY<TAB>FTS5 QUERY[<TAB>XAPIAN QUERY]", qs->file,
                          lineno);
    *t1 = *t2 = '\0';
    if (t3)
        *t3 = '\0';
    int cls = class_of(line);
    if (cls < 0)
        return bench_fail(BENCH_USAGE, "%s:%u: unknown class '%s' (valid: "
                          "term-common, term-rare, and2, and3, or, not, "
                          "phrase, prefix, field)", qs->file, lineno, line);
    if (!t1[1] || !t2[1] || (t3 && !t3[1]))
        return bench_fail(BENCH_USAGE, "%s:%u: empty query", qs->file,
                          lineno);
    qs->q = bench_xrealloc(qs->q, (qs->n + 1) * sizeof *qs->q);
    bench_query *q = &qs->q[qs->n++];
    memset(q, 0, sizeof *q);
    q->cls = cls;
    q->kv = bench_strdup(t1 + 1);
    q->fts = bench_strdup(t2 + 1);
    q->xap = t3 ? bench_strdup(t3 + 1) : xapian_of(t2 + 1);
    q->line = lineno;
    return 0;
}

int bench_queries_load(bench_queries *qs, const char *file)
{
    memset(qs, 0, sizeof *qs);
    qs->file = bench_strdup(file);
    char *text;
    int code = read_all(&text, file);
    if (code)
        return code;
    unsigned lineno = 0;
    char *save = NULL;
    for (char *p = text; p && !code; p = save) {
        char *nl = strchr(p, '\n');
        save = nl ? nl + 1 : NULL;
        if (nl)
            *nl = '\0';
        lineno++;
        size_t n = strlen(p);
        while (n && p[n - 1] == '\r')
            p[--n] = '\0';
        const char *s = p + strspn(p, " \t");
        if (*s == '\0' || *s == '#')
            continue;
        code = parse_query(qs, p, lineno);
        if (!save || !*save)
            break;
    }
    free(text);
    if (!code && qs->n == 0)
        code = bench_fail(BENCH_USAGE, "%s: no queries", file);
    return code;
}

void bench_queries_reset(bench_queries *qs)
{
    for (size_t i = 0; i < qs->n; i++) {
        bench_query *q = &qs->q[i];
        free(q->diff_key);
        free(q->xap_diff_key);
        for (int m = 0; m < NMODE; m++)
            free(q->t[m]);
        bench_query keep = { .cls = q->cls, .kv = q->kv, .fts = q->fts,
                             .xap = q->xap, .line = q->line };
        *q = keep;
    }
}

void bench_queries_free(bench_queries *qs)
{
    bench_queries_reset(qs);
    for (size_t i = 0; i < qs->n; i++) {
        free(qs->q[i].kv);
        free(qs->q[i].fts);
        free(qs->q[i].xap);
    }
    free(qs->q);
    free(qs->file);
    memset(qs, 0, sizeof *qs);
}
