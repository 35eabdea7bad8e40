/*
 * tok_analysis.c -- the "analysis" config, compiled, and field extraction:
 * a JSON document in, (field, term, position, offsets) out.
 *
 * The config format and the field rules are written in tokenizer.h (the
 * README copies them).  This file owns:
 *
 *  - Parsing.  The config is read with kv_json_walk(), the one JSON parser
 *    of kvfts, which reports scalars with their dotted paths; "analysis.X"
 *    leaves are checked against the known keys and types, everything outside
 *    "analysis" is left to its owners.  Every analyzer name is resolved once
 *    into a tokenizer; fields that share an analyzer share the tokenizer.
 *    Stop words go to every text analyzer (standard and languages), `_all`'s
 *    included; never to keyword (a whole value is not a word).
 *
 *  - The field cache.  Resolving a path (exclusions, exact "fields" entries,
 *    default) is done once per distinct path and kept in an open-addressing
 *    table of field_ent, which also holds the per-document position counter
 *    of the field.  A generation number marks which document a counter
 *    belongs to, so starting a document costs nothing per field.  Corpora
 *    have few distinct paths, so after warm-up a document allocates nothing
 *    here; a corpus whose keys are data (a map keyed by ids) could grow the
 *    table without bound, so it is emptied between documents once it holds
 *    TOK_FIELD_CACHE_MAX paths.
 *
 *  - Positions.  Per field per document, values TOK_VALUE_GAP apart (see
 *    tokenizer.h).  When a field's analyzer is the `_all` analyzer (the usual
 *    case), each value is tokenized once and every term is emitted twice,
 *    under the field and under "_all" (marked dual), at the same position;
 *    otherwise the `_all` analyzer runs over the value with a counter of its
 *    own per field.
 */
#include "tok_int.h"

#include <string.h>

#define TOK_FIELD_CACHE_MAX 4096

typedef struct field_ent {
    char *path;              /* NUL-terminated; NULL = empty slot */
    size_t len;
    uint64_t hash;
    tok_tokenizer *tok;      /* NULL: not indexed (excluded or none) */
    bool listed;             /* in "field_lists" */
    uint32_t gen;            /* document the counters below belong to */
    uint32_t next;           /* first position not used yet */
    bool started;            /* a value of this field used a position */
    uint32_t all_next;       /* the same, for the `_all` analyzer's count */
    bool all_started;        /* (when it is not the field's analyzer) */
} field_ent;

typedef struct cfg_field {
    char *path;
    size_t len;
    tok_tokenizer *tok;
} cfg_field;

struct tok_analysis {
    tok_tokenizer **toks;    /* every tokenizer, owned, distinct names */
    size_t ntoks;
    tok_tokenizer *deflt;    /* default analyzer (maybe kind none) */
    tok_tokenizer *all_tok;  /* `_all` analyzer; NULL when "all" is off */
    tok_tokenizer *kw;       /* numbers and booleans */
    cfg_field *fields;       /* "fields" entries, in config order */
    size_t nfields;
    char **exclude;          /* excluded paths (with their subtrees) */
    size_t nexclude;
    char **lists;            /* "field_lists": fields with lists of their own */
    size_t nlists;
    bool all, positions;
    field_ent *cache;        /* the field cache */
    size_t cache_cap;        /* power of two */
    size_t cache_count;
    uint32_t gen;            /* current document */
};

/* ---- small helpers ----------------------------------------------------- */

static bool key_is(const char *k, size_t kl, const char *lit)
{
    size_t n = strlen(lit);
    return kl == n && memcmp(k, lit, n) == 0;
}

static uint32_t add_sat(uint32_t a, uint32_t b)
{
    return a > UINT32_MAX - b ? UINT32_MAX : a + b;
}

/* A growable array of strings. */
typedef struct strlist {
    char **s;
    size_t *len;
    size_t n, cap;
} strlist;

static int strlist_add(strlist *l, const char *s, size_t n, kv_err *err)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        char **ns = kv_realloc(l->s, cap * sizeof *ns);
        if (!ns)
            goto nomem;
        l->s = ns;
        size_t *nl = kv_realloc(l->len, cap * sizeof *nl);
        if (!nl)
            goto nomem;
        l->len = nl;
        l->cap = cap;
    }
    l->s[l->n] = kv_strndup(s, n);
    if (!l->s[l->n])
        goto nomem;
    l->len[l->n++] = n;
    return KVFTS_OK;
nomem:
    return kv_seterr(err, KVFTS_ENOMEM, "out of memory (config)");
}

static void strlist_free(strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        kv_free(l->s[i]);
    kv_free(l->s);
    kv_free(l->len);
    memset(l, 0, sizeof *l);
}

/* ---- config parsing ---------------------------------------------------- */

typedef struct cfg_parse {
    kv_err *err;
    strlist deflt;           /* "default" (last one wins) */
    strlist star;            /* "fields"."*" */
    strlist fpath, fname;    /* "fields" entries */
    strlist exclude, stop, lists;
    int all, positions;      /* -1 unset */
} cfg_parse;

static int want(cfg_parse *c, kv_json_type type, kv_json_type need,
                const char *path, size_t plen)
{
    if (type == need)
        return KVFTS_OK;
    return kv_seterr(c->err, KVFTS_EINVAL, "config \"%.*s\": must be %s",
                     (int)(plen > 100 ? 100 : plen), path,
                     need == KV_JSON_BOOL ? "true or false" : "a string");
}

static int cfg_leaf(void *payload, const char *path, size_t plen,
                    kv_json_type type, const char *v, size_t vlen, size_t pos)
{
    cfg_parse *c = payload;
    kv_err *err = c->err;
    int rc;
    (void)pos;
    if (plen < 8 || memcmp(path, "analysis", 8) != 0 ||
        (plen > 8 && path[8] != '.'))
        return KVFTS_OK;                 /* another module's member */
    if (plen == 8)
        return kv_seterr(err, KVFTS_EINVAL,
                         "config \"analysis\": must be an object");
    const char *k = path + 9;
    size_t kl = plen - 9;
    if (key_is(k, kl, "default")) {
        rc = want(c, type, KV_JSON_STRING, path, plen);
        return rc ? rc : strlist_add(&c->deflt, v, vlen, err);
    }
    if (key_is(k, kl, "all") || key_is(k, kl, "positions")) {
        rc = want(c, type, KV_JSON_BOOL, path, plen);
        if (!rc)
            *(k[0] == 'a' ? &c->all : &c->positions) = (v[0] == 't');
        return rc;
    }
    if (key_is(k, kl, "exclude") || key_is(k, kl, "stopwords")) {
        rc = want(c, type, KV_JSON_STRING, path, plen);
        return rc ? rc : strlist_add(k[0] == 'e' ? &c->exclude : &c->stop,
                                     v, vlen, err);
    }
    if (key_is(k, kl, "field_lists")) {
        rc = want(c, type, KV_JSON_STRING, path, plen);
        if (!rc && (vlen == 0 || key_is(v, vlen, TOK_ALL_FIELD)))
            rc = kv_seterr(err, KVFTS_EINVAL, "config \"analysis.field_lists"
                           "\": \"%.*s\" is not a field path (\"" TOK_ALL_FIELD
                           "\" is every field's)", (int)(vlen > 64 ? 64 : vlen),
                           v);
        return rc ? rc : strlist_add(&c->lists, v, vlen, err);
    }
    if (key_is(k, kl, "fields"))
        return kv_seterr(err, KVFTS_EINVAL,
                         "config \"analysis.fields\": must be an object of "
                         "field path -> analyzer name");
    if (kl >= 7 && memcmp(k, "fields.", 7) == 0) {
        if (kl == 7)
            return kv_seterr(err, KVFTS_EINVAL, "config \"analysis.fields\": "
                             "a field path may not be empty");
        if (key_is(k + 7, kl - 7, TOK_ALL_FIELD))
            return kv_seterr(err, KVFTS_EINVAL, "config \"analysis.fields."
                             TOK_ALL_FIELD "\": the catch-all field has no "
                             "analyzer of its own (it uses \"analysis."
                             "default\" when that is a text analyzer, else "
                             "standard)");
        rc = want(c, type, KV_JSON_STRING, path, plen);
        if (rc)
            return rc;
        if (kl == 8 && k[7] == '*')
            return strlist_add(&c->star, v, vlen, err);
        rc = strlist_add(&c->fpath, k + 7, kl - 7, err);
        return rc ? rc : strlist_add(&c->fname, v, vlen, err);
    }
    size_t first = 0;
    while (first < kl && k[first] != '.')
        first++;
    return kv_seterr(err, KVFTS_EINVAL, "config: unknown key "
                     "\"analysis.%.*s\" (valid: default, fields, exclude, "
                     "all, positions, stopwords, field_lists)",
                     (int)(first > 64 ? 64 : first), k);
}

static void cfg_parse_free(cfg_parse *c)
{
    strlist_free(&c->deflt);
    strlist_free(&c->star);
    strlist_free(&c->fpath);
    strlist_free(&c->fname);
    strlist_free(&c->exclude);
    strlist_free(&c->stop);
    strlist_free(&c->lists);
}

/* The tokenizer named @p name, created on first use. */
static int get_tok(tok_analysis *a, const char *name, tok_tokenizer **out,
                   kv_err *err)
{
    for (size_t i = 0; i < a->ntoks; i++)
        if (strcmp(tok_name(a->toks[i]), name) == 0) {
            *out = a->toks[i];
            return KVFTS_OK;
        }
    tok_tokenizer **nt = kv_realloc(a->toks, (a->ntoks + 1) * sizeof *nt);
    if (!nt)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory (config)");
    a->toks = nt;
    int rc = tok_new(&a->toks[a->ntoks], name, err);
    if (rc)
        return rc;
    *out = a->toks[a->ntoks++];
    return KVFTS_OK;
}

static int build(tok_analysis *a, cfg_parse *c, kv_err *err)
{
    int rc = KVFTS_OK;
    const char *dname = "standard";
    if (c->deflt.n)
        dname = c->deflt.s[c->deflt.n - 1];
    if (c->star.n) {
        const char *sname = c->star.s[c->star.n - 1];
        if (c->deflt.n && strcmp(sname, dname) != 0)
            return kv_seterr(err, KVFTS_EINVAL, "config: \"analysis.default\""
                             " (\"%.40s\") and \"analysis.fields\".\"*\" "
                             "(\"%.40s\") disagree", dname, sname);
        dname = sname;
    }
    rc = get_tok(a, dname, &a->deflt, err);
    if (rc)
        return kv_err_prefix(err, "config \"analysis.default\"");
    rc = get_tok(a, "keyword", &a->kw, err);
    if (rc)
        return rc;
    a->all = c->all != 0;
    a->positions = c->positions != 0;
    if (a->all) {
        tok_kind k = tok_get_kind(a->deflt);
        if (k == TOK_STANDARD || k == TOK_STEMMED)
            a->all_tok = a->deflt;
        else if ((rc = get_tok(a, "standard", &a->all_tok, err)))
            return rc;
    }
    if (c->fpath.n) {
        a->fields = kv_calloc(c->fpath.n, sizeof *a->fields);
        if (!a->fields)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory (config)");
    }
    for (size_t i = 0; i < c->fpath.n; i++) {
        cfg_field *f = &a->fields[i];
        rc = get_tok(a, c->fname.s[i], &f->tok, err);
        if (rc)
            return kv_err_prefix(err, "config \"analysis.fields.%.100s\"",
                                 c->fpath.s[i]);
        f->path = c->fpath.s[i];       /* take ownership */
        f->len = c->fpath.len[i];
        c->fpath.s[i] = NULL;
        a->nfields++;
    }
    a->exclude = c->exclude.s;           /* take ownership */
    a->nexclude = c->exclude.n;
    c->exclude.s = NULL;
    c->exclude.n = 0;
    a->lists = c->lists.s;
    a->nlists = c->lists.n;
    c->lists.s = NULL;
    c->lists.n = 0;
    for (size_t i = 0; i < a->ntoks; i++) {
        rc = tok_set_stopwords(a->toks[i], (const char *const *)c->stop.s,
                               c->stop.len, c->stop.n, err);
        if (rc)
            return kv_err_prefix(err, "config \"analysis.stopwords\"");
    }
    return KVFTS_OK;
}

int tok_analysis_new(tok_analysis **out, const char *config_json, size_t len,
                     kv_err *err)
{
    int rc = KVFTS_OK;
    cfg_parse c = { .err = err, .all = -1, .positions = -1 };
    tok_analysis *a = kv_calloc(1, sizeof *a);
    *out = NULL;
    if (!a) {
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory (analysis)");
        goto fail;
    }
    a->cache_cap = 64;
    a->cache = kv_calloc(a->cache_cap, sizeof *a->cache);
    if (!a->cache) {
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory (analysis)");
        goto fail;
    }
    if (config_json && len) {
        rc = kv_json_walk(config_json, len, NULL, cfg_leaf, &c, err);
        if (rc)
            goto fail;
    }
    rc = build(a, &c, err);
    if (rc)
        goto fail;
    cfg_parse_free(&c);
    *out = a;
    return KVFTS_OK;
fail:
    cfg_parse_free(&c);
    tok_analysis_free(a);
    return rc;
}

static void cache_clear(tok_analysis *a)
{
    for (size_t i = 0; i < a->cache_cap; i++) {
        kv_free(a->cache[i].path);
        a->cache[i].path = NULL;
    }
    a->cache_count = 0;
}

void tok_analysis_free(tok_analysis *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->ntoks; i++)
        tok_free(a->toks[i]);
    kv_free(a->toks);
    for (size_t i = 0; i < a->nfields; i++)
        kv_free(a->fields[i].path);
    kv_free(a->fields);
    for (size_t i = 0; i < a->nexclude; i++)
        kv_free(a->exclude[i]);
    kv_free(a->exclude);
    for (size_t i = 0; i < a->nlists; i++)
        kv_free(a->lists[i]);
    kv_free(a->lists);
    if (a->cache)
        cache_clear(a);
    kv_free(a->cache);
    kv_free(a);
}

/* ---- fields ------------------------------------------------------------ */

/* The analyzer of document path @p path, or NULL if it is not indexed. */
static tok_tokenizer *resolve(const tok_analysis *a, const char *path,
                              size_t len)
{
    for (size_t i = 0; i < a->nexclude; i++) {
        size_t el = strlen(a->exclude[i]);
        if (len >= el && memcmp(path, a->exclude[i], el) == 0 &&
            (len == el || path[el] == '.'))
            return NULL;
    }
    tok_tokenizer *t = a->deflt;
    for (size_t i = a->nfields; i-- > 0;)      /* the last entry wins */
        if (a->fields[i].len == len &&
            memcmp(a->fields[i].path, path, len) == 0) {
            t = a->fields[i].tok;
            break;
        }
    return tok_get_kind(t) == TOK_NONE ? NULL : t;
}

static field_ent *cache_slot(field_ent *tab, size_t cap, uint64_t h,
                             const char *path, size_t len)
{
    size_t i = (size_t)h & (cap - 1);
    for (;;) {
        field_ent *e = &tab[i];
        if (!e->path || (e->hash == h && e->len == len &&
                         memcmp(e->path, path, len) == 0))
            return e;
        i = (i + 1) & (cap - 1);
    }
}

static int field_get(tok_analysis *a, const char *path, size_t len,
                     field_ent **out, kv_err *err)
{
    uint64_t h = tok__hash(path, len);
    field_ent *e = cache_slot(a->cache, a->cache_cap, h, path, len);
    if (e->path) {
        *out = e;
        return KVFTS_OK;
    }
    if ((a->cache_count + 1) * 2 > a->cache_cap) {
        size_t ncap = a->cache_cap * 2;
        field_ent *nt = kv_calloc(ncap, sizeof *nt);
        if (!nt)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory (fields)");
        for (size_t i = 0; i < a->cache_cap; i++)
            if (a->cache[i].path)
                *cache_slot(nt, ncap, a->cache[i].hash, a->cache[i].path,
                            a->cache[i].len) = a->cache[i];
        kv_free(a->cache);
        a->cache = nt;
        a->cache_cap = ncap;
        e = cache_slot(nt, ncap, h, path, len);
    }
    char *copy = kv_strndup(path, len);
    if (!copy)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory (fields)");
    memset(e, 0, sizeof *e);
    e->path = copy;
    e->len = len;
    e->hash = h;
    e->tok = resolve(a, path, len);
    e->listed = tok_analysis_listed(a, path, len);
    a->cache_count++;
    *out = e;
    return KVFTS_OK;
}

bool tok_analysis_listed(const tok_analysis *a, const char *field,
                         size_t field_len)
{
    for (size_t i = 0; i < a->nlists; i++)
        if (strlen(a->lists[i]) == field_len &&
            memcmp(a->lists[i], field, field_len) == 0)
            return true;
    return false;
}

tok_tokenizer *tok_analysis_field(tok_analysis *a, const char *field,
                                  size_t field_len)
{
    if (key_is(field, field_len, TOK_ALL_FIELD))
        return a->all_tok;
    return resolve(a, field, field_len);
}

bool tok_analysis_positions(const tok_analysis *a)
{
    return a->positions;
}

bool tok_analysis_all(const tok_analysis *a)
{
    return a->all;
}

void tok_analysis_stats(const tok_analysis *a, tok_stats *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < a->ntoks; i++) {
        tok_stats s;
        tok_get_stats(a->toks[i], &s);
        out->values += s.values;
        out->bytes += s.bytes;
        out->tokens += s.tokens;
        out->too_long += s.too_long;
        out->stopped += s.stopped;
        out->slow_runs += s.slow_runs;
        out->stem_hits += s.stem_hits;
        out->stem_misses += s.stem_misses;
    }
}

void tok_analysis_stats_reset(tok_analysis *a)
{
    for (size_t i = 0; i < a->ntoks; i++)
        tok_stats_reset(a->toks[i]);
}

/* ---- documents --------------------------------------------------------- */

typedef struct doc_ctx {
    tok_analysis *a;
    tok_term_fn emit;
    void *payload;
    kv_err *err;
    field_ent *f;            /* field of the value being analyzed */
    const char *value;
    size_t value_len;
    uint32_t fbase, abase;   /* first positions of the value */
    bool dual;               /* also emit each term under "_all" */
} doc_ctx;

static int emit_all(void *payload, const char *term, size_t len, uint32_t pos,
                    size_t start, size_t end)
{
    doc_ctx *c = payload;
    tok_term t = { .field = TOK_ALL_FIELD, .field_len = 4, .term = term,
                   .term_len = len, .pos = pos, .start = start, .end = end,
                   .value = c->value, .value_len = c->value_len,
                   .src = c->f ? c->f->path : TOK_ALL_FIELD,
                   .src_len = c->f ? c->f->len : 4, .dual = c->dual };
    return c->emit(c->payload, &t);
}

static int emit_field(void *payload, const char *term, size_t len,
                      uint32_t pos, size_t start, size_t end)
{
    doc_ctx *c = payload;
    tok_term t = { .field = c->f->path, .field_len = c->f->len, .term = term,
                   .term_len = len, .pos = pos, .start = start, .end = end,
                   .value = c->value, .value_len = c->value_len,
                   .src = c->f->path, .src_len = c->f->len, .dual = c->dual,
                   .listed = c->f->listed };
    int rc = c->emit(c->payload, &t);
    if (rc || !c->dual)
        return rc;
    return emit_all(c, term, len, pos, start, end);
}

/* Analyze one value of field c->f (a string, or a number/boolean). */
static int analyze_value(doc_ctx *c, field_ent *f, bool is_string,
                         const char *v, size_t vlen)
{
    tok_analysis *a = c->a;
    int rc;
    if (f->gen != a->gen) {
        f->gen = a->gen;
        f->next = f->all_next = 0;
        f->started = f->all_started = false;
    }
    c->f = f;
    c->value = v;
    c->value_len = vlen;
    c->fbase = f->started ? add_sat(f->next, TOK_VALUE_GAP) : 0;
    c->dual = false;
    uint32_t fnext;
    if (!is_string) {
        rc = tok_run_pos(a->kw, v, vlen, c->fbase, &fnext, emit_field, c,
                         c->err);
    } else {
        bool all = a->all_tok != NULL;
        c->dual = all && f->tok == a->all_tok;
        rc = tok_run_pos(f->tok, v, vlen, c->fbase, &fnext, emit_field, c,
                         c->err);
        if (!rc && all && !c->dual) {
            c->abase = f->all_started ? add_sat(f->all_next, TOK_VALUE_GAP)
                                      : 0;
            uint32_t anext;
            rc = tok_run_pos(a->all_tok, v, vlen, c->abase, &anext,
                             emit_all, c, c->err);
            if (!rc && anext != c->abase) {
                f->all_started = true;
                f->all_next = anext;
            }
        }
    }
    if (!rc && fnext != c->fbase) {
        f->started = true;
        f->next = fnext;
    }
    return rc;
}

int tok_analysis_check_path(tok_analysis *a, const char *path, size_t plen,
                            size_t pos, kv_err *err)
{
    if (key_is(path, plen, TOK_ALL_FIELD)) {
        kv_seterr(err, KVFTS_EINVAL, "field name \"" TOK_ALL_FIELD "\" "
                  "is reserved (the catch-all field), near byte %zu", pos);
        if (err)
            err->pos = (long long)pos;
        return KVFTS_EINVAL;
    }
    if (!memchr(path, 0, plen))
        return KVFTS_OK;
    field_ent *f;
    int rc = field_get(a, path, plen, &f, err);
    if (!rc && f->tok) {
        kv_seterr(err, KVFTS_EINVAL, "field name with a NUL character "
                  "cannot be indexed, near byte %zu", pos);
        if (err)
            err->pos = (long long)pos;
        return KVFTS_EINVAL;
    }
    return rc;
}

static int doc_leaf(void *payload, const char *path, size_t plen,
                    kv_json_type type, const char *v, size_t vlen, size_t pos)
{
    doc_ctx *c = payload;
    field_ent *f;
    if (type == KV_JSON_NULL)
        return KVFTS_OK;
    int rc = tok_analysis_check_path(c->a, path, plen, pos, c->err);
    if (!rc)
        rc = field_get(c->a, path, plen, &f, c->err);
    if (rc || !f->tok)
        return rc;
    return analyze_value(c, f, type == KV_JSON_STRING, v, vlen);
}

/* Start a new document: fresh position counters. */
static void new_doc(tok_analysis *a)
{
    if (a->cache_count > TOK_FIELD_CACHE_MAX)
        cache_clear(a);
    if (++a->gen == 0) {               /* wrapped: forget every counter */
        for (size_t i = 0; i < a->cache_cap; i++)
            a->cache[i].gen = 0;
        a->gen = 1;
    }
}

/* A document's leaves to doc_leaf: parsed from its JSON, or as kept. */
static int run_doc(tok_analysis *a, const char *buf, size_t len, bool kept,
                   tok_term_fn emit, void *payload, kv_err *err)
{
    kv_err local = KV_ERR_INIT;
    doc_ctx c = { .a = a, .emit = emit, .payload = payload,
                  .err = err ? err : &local };
    new_doc(a);
    return kept ? kv_leaves_walk(buf, len, doc_leaf, &c, c.err)
                : kv_json_walk(buf, len, NULL, doc_leaf, &c, c.err);
}

int tok_analysis_run_doc(tok_analysis *a, const char *json, size_t len,
                         tok_term_fn emit, void *payload, kv_err *err)
{
    return run_doc(a, json, len, false, emit, payload, err);
}

int tok_analysis_run_leaves(tok_analysis *a, const char *leaves, size_t len,
                            tok_term_fn emit, void *payload, kv_err *err)
{
    return run_doc(a, leaves, len, true, emit, payload, err);
}

int tok_analysis_run_value(tok_analysis *a, const char *field,
                           size_t field_len, const char *text, size_t len,
                           tok_term_fn emit, void *payload, kv_err *err)
{
    kv_err local = KV_ERR_INIT;
    doc_ctx c = { .a = a, .emit = emit, .payload = payload,
                  .err = err ? err : &local };
    field_ent *f;
    int rc = KVFTS_OK;
    new_doc(a);
    if (key_is(field, field_len, TOK_ALL_FIELD)) {
        c.value = text;
        c.value_len = len;
        if (a->all_tok)
            rc = tok_run_pos(a->all_tok, text, len, 0, NULL, emit_all, &c,
                             c.err);
    } else {
        rc = field_get(a, field, field_len, &f, c.err);
        if (!rc && f->tok)
            rc = analyze_value(&c, f, true, text, len);
    }
    if (rc == KVFTS_EINVAL)
        kv_err_prefix(c.err, "field \"%.*s\"",
                      (int)(field_len > 100 ? 100 : field_len), field);
    return rc;
}
