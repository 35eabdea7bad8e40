/*
 * test_query.c -- unit tests of the query evaluator (query/include/query.h) and of
 * kvfts_search():
 *   - the parser: every syntax form, precedence, analysis of words (phrases
 *     from several terms, stop words, numbers, stemming), and every error
 *     with the byte offset it names;
 *   - the seeds' searches on the_fox / the_cat;
 *   - a reference evaluator written here, independently of query/: brute
 *     force over the stored documents (their terms and positions from
 *     kvfts_analyze_doc) with its own BM25, compared on random queries over
 *     random corpora, after inserts, replaces and deletes: same match sets,
 *     same scores within 1e-9;
 *   - paging, count, sort by key, prefixes of any size (no cap; the union
 *     of a large one against an OR of its terms; huge ones of 1 to 3
 *     letters against a reference, FTS5's counts and the bounds), phrases
 *     without positions;
 *   - a differential test against SQLite FTS5 (unicode61 remove_diacritics
 *     2, detail=full, one column per field) on tests/data/
 *     tok_debian_sample.jsonl and, when apt-cache works, on the whole Debian
 *     catalog: identical match sets for 40+ queries of every class; a
 *     document on which they differ must be one where the two tokenizers
 *     give different token streams (the deliberate differences of README
 *     "Analysis"), which the test checks and prints.
 */
#include "testutil.h"

#include <math.h>
#include <sys/stat.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kv.h"
#include "kvfts.h"
#include "query.h"
#include "tokenizer.h"

#if __has_include(<sqlite3.h>)
#include <sqlite3.h>
#define HAVE_SQLITE 1
#endif

#define S(x) x, strlen(x)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 33) % n;
}

/* ---- fixtures ------------------------------------------------------------ */

typedef struct fx {
    char *dir;
    kvfts_db *db;
} fx;

static void fx_open(fx *f, const char *config)
{
    f->dir = tu_tmpdir();
    assert_non_null(f->dir);
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.create = true;
    assert_int_equal(kvfts_open(&f->db, f->dir, &o), 0);
    if (config)
        assert_int_equal(kvfts_set_config(f->db, S(config)), 0);
}

static void fx_close(fx *f)
{
    kvfts_close(f->db);
    tu_rmtree(f->dir);
    free(f->dir);
}

static void put(fx *f, const char *key, const char *json)
{
    int rc = kvfts_put(NULL, f->db, S(key), S(json), 0);
    if (rc)
        fail_msg("put %s: %s", key, kvfts_errmsg(f->db));
}

/* Keys of a search, in rank order, joined by spaces ("" for none). */
static int search_keys(fx *f, const char *q, char *out, size_t cap,
                       uint64_t *total)
{
    kvfts_results *r = NULL;
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    o.limit = 0;
    int rc = kvfts_search(&r, f->db, S(q), &o);
    out[0] = 0;
    if (rc)
        return rc;
    const char *k;
    size_t n = 0;
    while (kvfts_results_next(r, &k, NULL, NULL, NULL) == KVFTS_OK)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? " " : "", k);
    if (total)
        *total = kvfts_results_total(r);
    kvfts_results_free(r);
    return 0;
}

/* ---- the parser ---------------------------------------------------------- */

static void expect_plan(tok_analysis *a, const char *q, const char *want)
{
    qry_node *n = NULL;
    kv_err err = KV_ERR_INIT;
    int rc = qry_parse(&n, a, S(q), &err);
    if (rc)
        fail_msg("parse '%s': %s", q, err.msg);
    kv_buf b = KV_BUF_INIT;
    assert_int_equal(qry_node_dump(n, &b, &err), 0);
    if (strcmp(b.data, want) != 0)
        fail_msg("parse '%s': got %s, want %s", q, b.data, want);
    kv_buf_free(&b);
    qry_node_free(n);
}

static void expect_error(tok_analysis *a, const char *q, size_t qlen,
                         const char *msg, long long pos)
{
    qry_node *n = NULL;
    kv_err err = KV_ERR_INIT;
    int rc = qry_parse(&n, a, q, qlen, &err);
    if (rc != KVFTS_EINVAL)
        fail_msg("parse '%s': rc %d, want EINVAL", q, rc);
    assert_null(n);
    if (!strstr(err.msg, msg))
        fail_msg("parse '%s': message '%s' lacks '%s'", q, err.msg, msg);
    char at[32];
    snprintf(at, sizeof at, " at %lld", pos);
    if (!strstr(err.msg, at) || err.pos != pos)
        fail_msg("parse '%s': message '%s' (pos %lld), want position %lld", q,
                 err.msg, err.pos, pos);
}

static void test_parse_forms(void **state)
{
    (void)state;
    tok_analysis *a = NULL;
    kv_err err = KV_ERR_INIT;
    const char *cfg = "{\"analysis\":{\"fields\":{\"body\":\"english\","
                      "\"pkg\":\"keyword\"}}}";
    assert_int_equal(tok_analysis_new(&a, S(cfg), &err), 0);
    static const char *const cases[][2] = {
        { "fox", "_all:fox" },
        { "quick fox", "AND(_all:quick, _all:fox)" },
        { "quick AND fox", "AND(_all:quick, _all:fox)" },
        { "quick OR fox", "OR(_all:quick, _all:fox)" },
        { "-dog cat", "AND(-_all:dog, _all:cat)" },
        { "NOT dog cat", "AND(-_all:dog, _all:cat)" },
        { "cat NOT dog", "AND(_all:cat, -_all:dog)" },
        { "\"quick brown fox\"", "_all:\"quick brown fox\"" },
        { "qui*", "_all:qui*" },
        { "QUI*", "_all:qui*" },
        { "title:fox", "title:fox" },
        { "_all:fox", "_all:fox" },
        { "title:\"lazy dog\"", "title:\"lazy dog\"" },
        { "title:(a OR b)", "OR(title:a, title:b)" },
        { "title:(a c:d)", "AND(title:a, c:d)" },
        { "title:qu*", "title:qu*" },
        /* precedence: NOT > AND > OR */
        { "a b OR c", "OR(AND(_all:a, _all:b), _all:c)" },
        { "a OR b c", "OR(_all:a, AND(_all:b, _all:c))" },
        { "a -b OR c", "OR(AND(_all:a, -_all:b), _all:c)" },
        { "a OR b AND c OR d", "OR(_all:a, AND(_all:b, _all:c), _all:d)" },
        { "(a OR b) c", "AND(OR(_all:a, _all:b), _all:c)" },
        { "-(a OR b) c", "AND(-OR(_all:a, _all:b), _all:c)" },
        { "((a))", "_all:a" },
        { "a (b c)", "AND(_all:a, _all:b, _all:c)" },
        { "a OR (b OR c)", "OR(_all:a, _all:b, _all:c)" },
        { "a and or", "AND(_all:a, _all:and, _all:or)" },
        /* analysis */
        { "wi-fi", "_all:\"wi fi\"" },
        { "Café STRASSE", "AND(_all:cafe, _all:strasse)" },
        { "\"Wi-Fi  router\"", "_all:\"wi fi router\"" },
        { "...", "EMPTY" },
        { "fox ...", "_all:fox" },
        { "body:running", "body:run" },
        { "body:runn*", "body:runn*" },
        { "pkg:Lib-Foo", "pkg:lib-foo" },
        { "pkg:Lib-F*", "pkg:lib-f*" },
        { "n:42", "n:42" },
        { "n:-5", "OR(n:-5, n:5)" },
        { "n:3.14", "OR(n:3.14, n:\"3 14\")" },
        { "n:1E3", "n:1e3" },
        { "f:false", "f:false" },
        { "body:false", "OR(body:false, body:fals)" },
        { "_all:42", "_all:42" },
        { "a:b:c", "a:\"b c\"" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect_plan(a, cases[i][0], cases[i][1]);
    tok_analysis_free(a);

    /* Stop words keep their position: a phrase leaves a hole. */
    cfg = "{\"analysis\":{\"stopwords\":[\"the\",\"a\"]}}";
    assert_int_equal(tok_analysis_new(&a, S(cfg), &err), 0);
    expect_plan(a, "the fox", "_all:fox");
    expect_plan(a, "\"fox the dog\"", "_all:\"fox _ dog\"");
    expect_plan(a, "\"the fox\"", "_all:fox");
    expect_plan(a, "the", "EMPTY");
    expect_plan(a, "the -fox", "EMPTY");
    expect_plan(a, "the OR fox", "_all:fox");
    tok_analysis_free(a);

    /* Positions off: several terms of one word become an AND. */
    cfg = "{\"analysis\":{\"positions\":false}}";
    assert_int_equal(tok_analysis_new(&a, S(cfg), &err), 0);
    expect_plan(a, "wi-fi", "AND(_all:wi, _all:fi)");
    expect_plan(a, "\"fox\"", "_all:fox");
    expect_error(a, S("x \"lazy dog\""), "phrase needs positions", 2);
    tok_analysis_free(a);
}

static void test_parse_errors(void **state)
{
    (void)state;
    tok_analysis *a = NULL;
    kv_err err = KV_ERR_INIT;
    const char *cfg = "{\"analysis\":{\"exclude\":[\"secret\"],"
                      "\"fields\":{\"raw\":\"none\"}}}";
    assert_int_equal(tok_analysis_new(&a, S(cfg), &err), 0);
    static const struct { const char *q, *msg; long long pos; } cases[] = {
        { "quick (brown fox", "unbalanced '('", 6 },
        { "a (b (c)", "unbalanced '('", 2 },
        { "a b)", "unbalanced ')'", 3 },
        { ")", "unbalanced ')'", 0 },
        { "a \"lazy dog", "unbalanced '\"'", 2 },
        { "OR a", "'OR' without a term before it", 0 },
        { "a OR", "'OR' without a term after it", 2 },
        { "a OR OR b", "'OR' without a term after it", 2 },
        { "a OR AND b", "'OR' without a term after it", 2 },
        { "AND a", "'AND' without a term before it", 0 },
        { "a AND", "'AND' without a term after it", 2 },
        { "a AND OR b", "'AND' without a term after it", 2 },
        { "(AND a)", "'AND' without a term before it", 1 },
        { "a NOT", "'NOT' without a term after it", 2 },
        { "a NOT NOT b", "'NOT' without a term after it", 2 },
        { "a - b", "'-' without a term after it", 2 },
        { "a -", "'-' without a term after it", 2 },
        { "a (-)", "'-' without a term after it", 3 },
        { "NOT", "'NOT' without a term after it", 0 },
        { "", "empty query", 0 },
        { "   ", "empty query", 0 },
        { "a ()", "empty parentheses", 2 },
        { "-dog", "only negative terms", 0 },
        { "NOT dog -cat", "only negative terms", 0 },
        { "a OR -b", "only negative terms", 5 },
        { "a (-b)", "only negative terms", 3 },
        { "text:", "field 'text:' without a term after it", 0 },
        { "x text: y", "field 'text:' without a term after it", 2 },
        { "*", "prefix '*' must be one word", 0 },
        { "a wi-f*", "prefix 'wi-f*' must be one word", 2 },
        { "secret:x", "field 'secret' is not indexed", 0 },
        { "a raw:(b)", "field 'raw' is not indexed", 2 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect_error(a, S(cases[i].q), cases[i].msg, cases[i].pos);
    expect_error(a, "ab \xff", 4, "invalid UTF-8", 3);
    char deep[300];
    memset(deep, '(', 100);
    strcpy(deep + 100, "a");
    memset(deep + 101, ')', 100);
    deep[201] = 0;
    expect_error(a, S(deep), "nested deeper than 64", 64);
    tok_analysis_free(a);
}

/* ---- the seeds ----------------------------------------------------------- */

static void test_seeds(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL);
    put(&f, "the_fox", "{\"text\":\"The quick brown fox jumps over the lazy "
        "dog\"}");
    put(&f, "the_cat", "{\"text\":\"The quick brown fox jumps over the lazy "
        "cat\"}");
    char got[512];
    uint64_t total = 0;
    static const char *const cases[][2] = {
        { "cat", "the_cat" },
        { "quick cat", "the_cat" },
        { "\"lazy dog\"", "the_fox" },
        { "-cat fox", "the_fox" },
        { "fox -cat", "the_fox" },
        { "text:cat OR text:dog", NULL },
        { "\"lazy fox\"", "" },
        { "wolf", "" },
        { "wolf fox", "" },
        { "cat OR wolf", "the_cat" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        assert_int_equal(search_keys(&f, cases[i][0], got, sizeof got,
                                     &total), 0);
        if (cases[i][1] && strcmp(got, cases[i][1]) != 0)
            fail_msg("'%s': got '%s', want '%s'", cases[i][0], got,
                     cases[i][1]);
    }
    /* fox: both, equal scores: the older document (lower id) first */
    assert_int_equal(search_keys(&f, "fox", got, sizeof got, &total), 0);
    assert_string_equal(got, "the_fox the_cat");
    assert_int_equal(total, 2);

    /* Documents come with the hits. */
    kvfts_results *r = NULL;
    assert_int_equal(kvfts_search(&r, f.db, S("dog"), NULL), 0);
    const char *k, *doc;
    size_t dl;
    double score;
    assert_int_equal(kvfts_results_next(r, &k, &doc, &dl, &score), 0);
    assert_string_equal(k, "the_fox");
    assert_string_equal(doc, "{\"text\":\"The quick brown fox jumps over the "
                        "lazy dog\"}");
    assert_int_equal(dl, strlen(doc));
    /* N = 2, df = 1, tf = 1, dl = avgdl: idf * 2.2 / 2.2 */
    assert_true(fabs(score - log(1 + 1.5 / 1.5)) < 1e-12);
    assert_int_equal(kvfts_results_next(r, &k, &doc, &dl, &score),
                     KVFTS_ITEROVER);
    kvfts_results_free(r);

    /* A bad query: EINVAL, the message names the position. */
    assert_int_equal(kvfts_search(&r, f.db, S("quick (fox"), NULL),
                     KVFTS_EINVAL);
    assert_null(r);
    assert_string_equal(kvfts_errmsg(f.db), "query: unbalanced '(' at 6");
    assert_int_equal(kvfts_errpos(f.db), 6);
    fx_close(&f);
}

/* ---- the reference evaluator --------------------------------------------- */

/* A query tree as the test builds it (independent of qry_node). */
typedef enum rk { R_TERM, R_PHRASE, R_PREFIX, R_AND, R_OR } rk;
typedef struct rq {
    rk kind;
    bool neg;
    const char *field;          /* "_all", "title", "body", "tags" */
    const char *words[3];
    int nwords;
    struct rq *kids[4];
    int nkids;
} rq;

/* One stored document, analyzed. */
typedef struct rocc {
    char field[16];
    char src[16];               /* the field the term came from */
    char term[32];
    uint32_t pos;               /* within src */
} rocc;

typedef struct rdoc {
    char key[32];
    char *json;
    rocc *occ;
    size_t nocc;
    double dl[4];               /* rdl() of each of fields[] */
} rdoc;

typedef struct rcorpus {
    rdoc docs[400];
    size_t n;
} rcorpus;

static const char *const vocab[] = {
    "alpha", "alps", "alpine", "beta", "bet", "better", "gamma", "gam",
    "delta", "deli", "echo", "eco", "fox", "dog", "cat", "owl"
};
#define NVOCAB (sizeof vocab / sizeof *vocab)
static const char *const fields[] = { "_all", "title", "body", "tags" };

static double rdl_count(const rdoc *d, const char *field);

static void rdoc_analyze(fx *f, rdoc *d)
{
    kvfts_terms *t = NULL;
    assert_int_equal(kvfts_analyze_doc(&t, f->db, S(d->json)), 0);
    d->nocc = kvfts_terms_count(t);
    d->occ = calloc(d->nocc + 1, sizeof *d->occ);
    for (size_t i = 0; i < d->nocc; i++) {
        const kvfts_term *x = kvfts_terms_at(t, i);
        snprintf(d->occ[i].field, sizeof d->occ[i].field, "%s", x->field);
        snprintf(d->occ[i].src, sizeof d->occ[i].src, "%s", x->source);
        snprintf(d->occ[i].term, sizeof d->occ[i].term, "%s", x->term);
        d->occ[i].pos = x->pos;
    }
    kvfts_terms_free(t);
    for (int i = 0; i < 4; i++)
        d->dl[i] = rdl_count(d, fields[i]);
}

static void random_text(char *out, size_t cap, int words)
{
    size_t n = 0;
    for (int i = 0; i < words; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s%s", i ? " " : "",
                              rnd(6) ? "" : "The ", vocab[rnd(rnd(3) ? 8
                                                               : NVOCAB)]);
}

static char *random_doc(void)
{
    char title[200], body[1200], t1[100], t2[100];
    random_text(title, sizeof title, 1 + (int)rnd(4));
    random_text(body, sizeof body, 1 + (int)rnd(40));
    random_text(t1, sizeof t1, 1 + (int)rnd(2));
    random_text(t2, sizeof t2, 1 + (int)rnd(2));
    char *j = malloc(2000);
    int kind = (int)rnd(4);
    if (kind == 0)
        snprintf(j, 2000, "{\"body\":\"%s\"}", body);
    else if (kind == 1)
        snprintf(j, 2000, "{\"title\":\"%s\",\"body\":\"%s\",\"n\":%u}",
                 title, body, rnd(5));
    else
        snprintf(j, 2000, "{\"title\":\"%s\",\"tags\":[\"%s\",\"%s\"],"
                 "\"body\":\"%s\"}", title, t1, t2, body);
    return j;
}

static int field_index(const char *field);

/* tf of (field, term) in d, and its sorted distinct positions.  Positions
 * count within the source field (an "_all" term's too), so a position here
 * is the source field's number above the position's bits: a phrase never
 * spans two fields. */
static uint32_t rtf(const rdoc *d, const char *field, const char *term,
                    uint32_t *pos, uint32_t cap)
{
    uint32_t n = 0;
    for (size_t i = 0; i < d->nocc; i++) {
        if (strcmp(d->occ[i].field, field) || strcmp(d->occ[i].term, term))
            continue;
        assert_true(field_index(d->occ[i].src) > 0 && d->occ[i].pos < 1u << 24);
        uint32_t p = (uint32_t)field_index(d->occ[i].src) << 24 |
                     d->occ[i].pos;
        uint32_t j = n;
        bool dup = false;
        for (uint32_t k = 0; k < n; k++)
            dup |= pos[k] == p;
        if (dup || n == cap)
            continue;
        while (j > 0 && pos[j - 1] > p) {
            pos[j] = pos[j - 1];
            j--;
        }
        pos[j] = p;
        n++;
    }
    return n;
}

static double rdl_count(const rdoc *d, const char *field)
{
    /* field length = the number of distinct (term, position) pairs */
    double n = 0;
    for (size_t i = 0; i < d->nocc; i++) {
        if (strcmp(d->occ[i].field, field))
            continue;
        bool dup = false;
        for (size_t k = 0; k < i; k++)
            dup |= !strcmp(d->occ[k].field, field) &&
                   !strcmp(d->occ[k].src, d->occ[i].src) &&
                   !strcmp(d->occ[k].term, d->occ[i].term) &&
                   d->occ[k].pos == d->occ[i].pos;
        n += !dup;
    }
    return n;
}

static int field_index(const char *field)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(fields[i], field))
            return i;
    return -1;
}

static double rdl(const rdoc *d, const char *field)
{
    return d->dl[field_index(field)];
}

typedef struct rstats {
    double N, avgdl;
} rstats;

/* Memo of the corpus-wide figures while one query is evaluated. */
typedef struct rmemo {
    bool have_stats[4];
    rstats stats[4];
    char df_key[256][48];
    double df[256];
    int ndf;
} rmemo;
static rmemo memo;

static rstats rfield(const rcorpus *c, const char *field)
{
    int fi = field_index(field);
    if (memo.have_stats[fi])
        return memo.stats[fi];
    rstats s = { 0, 0 };
    double total = 0;
    for (size_t i = 0; i < c->n; i++) {
        double l = rdl(&c->docs[i], field);
        if (l > 0) {
            s.N++;
            total += l;
        }
    }
    s.avgdl = s.N ? total / s.N : 0;
    memo.have_stats[fi] = true;
    memo.stats[fi] = s;
    return s;
}

static double rdf(const rcorpus *c, const char *field, const char *term)
{
    uint32_t pos[256];
    char k[48];
    snprintf(k, sizeof k, "%s/%s", field, term);
    for (int i = 0; i < memo.ndf; i++)
        if (!strcmp(memo.df_key[i], k))
            return memo.df[i];
    double df = 0;
    for (size_t i = 0; i < c->n; i++)
        df += rtf(&c->docs[i], field, term, pos, 256) > 0;
    if (memo.ndf < 256) {
        strcpy(memo.df_key[memo.ndf], k);
        memo.df[memo.ndf++] = df;
    }
    return df;
}

/* Okapi BM25 with k1 = 1.2, b = 0.75 and the "+1" idf, from scratch. */
static double ref_bm25(double N, double df, double tf, double dl, double avgdl)
{
    double idf = log((N - df + 0.5) / (df + 0.5) + 1.0);
    double k1 = 1.2, b = 0.75;
    return idf * (tf * (k1 + 1)) / (tf + k1 * (1 - b + b * (dl / avgdl)));
}

static bool reval(const rcorpus *c, const rdoc *d, const rq *q, double *score)
{
    uint32_t pos[3][256];
    switch (q->kind) {
    case R_TERM: {
        uint32_t tf = rtf(d, q->field, q->words[0], pos[0], 256);
        if (!tf)
            return false;
        rstats s = rfield(c, q->field);
        *score += ref_bm25(s.N, rdf(c, q->field, q->words[0]), tf,
                           rdl(d, q->field), s.avgdl);
        return true;
    }
    case R_PHRASE: {
        uint32_t n[3];
        for (int i = 0; i < q->nwords; i++)
            if (!(n[i] = rtf(d, q->field, q->words[i], pos[i], 256)))
                return false;
        uint32_t pf = 0;
        for (uint32_t a = 0; a < n[0]; a++) {
            bool all = true;
            for (int i = 1; i < q->nwords; i++) {
                bool found = false;
                for (uint32_t k = 0; k < n[i]; k++)
                    found |= pos[i][k] == pos[0][a] + (uint32_t)i;
                all &= found;
            }
            pf += all;
        }
        if (!pf)
            return false;
        rstats s = rfield(c, q->field);
        /* (sum of idf) * tf-normalization of the phrase frequency */
        double idf = 0;
        for (int i = 0; i < q->nwords; i++) {
            double df = rdf(c, q->field, q->words[i]);
            idf += log((s.N - df + 0.5) / (df + 0.5) + 1.0);
        }
        double dl = rdl(d, q->field);
        *score += idf * (pf * 2.2) / (pf + 1.2 * (0.25 + 0.75 * dl / s.avgdl));
        return true;
    }
    case R_PREFIX: {
        /* every term of the field in the corpus starting with the prefix */
        bool any = false;
        size_t pl = strlen(q->words[0]);
        char seen[64][32];
        int nseen = 0;
        for (size_t i = 0; i < c->n; i++)
            for (size_t j = 0; j < c->docs[i].nocc; j++) {
                const rocc *o = &c->docs[i].occ[j];
                if (strcmp(o->field, q->field) ||
                    strncmp(o->term, q->words[0], pl))
                    continue;
                bool dup = false;
                for (int k = 0; k < nseen; k++)
                    dup |= !strcmp(seen[k], o->term);
                if (!dup && nseen < 64)
                    strcpy(seen[nseen++], o->term);
            }
        for (int k = 0; k < nseen; k++) {
            rq t = { R_TERM, false, q->field, { seen[k] }, 1, { 0 }, 0 };
            any |= reval(c, d, &t, score);
        }
        return any;
    }
    case R_AND: {
        double s = 0;
        for (int i = 0; i < q->nkids; i++) {
            double ks = 0;
            bool m = reval(c, d, q->kids[i], &ks);
            if (m == q->kids[i]->neg)
                return false;
            if (!q->kids[i]->neg)
                s += ks;
        }
        *score += s;
        return true;
    }
    case R_OR: {
        bool any = false;
        for (int i = 0; i < q->nkids; i++)
            any |= reval(c, d, q->kids[i], score);
        return any;
    }
    }
    return false;
}

static rq *rq_new(rk kind)
{
    rq *q = calloc(1, sizeof *q);
    q->kind = kind;
    q->field = fields[rnd(4)];
    return q;
}

static void rq_free(rq *q)
{
    for (int i = 0; i < q->nkids; i++)
        rq_free(q->kids[i]);
    free(q);
}

static rq *random_query(int depth)
{
    int r = (int)rnd(depth > 1 ? 5 : 10);
    rq *q;
    if (r >= 5 || depth > 2) {
        int leaf = (int)rnd(10);
        if (leaf < 6) {
            q = rq_new(R_TERM);
            q->words[0] = vocab[rnd(rnd(4) ? 8 : NVOCAB)];
            q->nwords = 1;
            if (!rnd(15))
                q->words[0] = "zebra";           /* absent */
        } else if (leaf < 9) {
            q = rq_new(R_PHRASE);
            q->nwords = 2 + (int)rnd(2);
            for (int i = 0; i < q->nwords; i++)
                q->words[i] = vocab[rnd(8)];
        } else {
            static const char *const pre[] = { "al", "alp", "be", "bet",
                                               "g", "del", "ec", "zz" };
            q = rq_new(R_PREFIX);
            q->words[0] = pre[rnd(8)];
            q->nwords = 1;
        }
        return q;
    }
    q = rq_new(r < 3 ? R_AND : R_OR);
    q->nkids = 2 + (int)rnd(3);
    for (int i = 0; i < q->nkids; i++) {
        q->kids[i] = random_query(depth + 1);
        if (q->kind == R_AND && i > 0 && !rnd(3))
            q->kids[i]->neg = true;
    }
    return q;
}

static void render(const rq *q, char *out, size_t cap, size_t *n)
{
    if (q->neg)
        *n += (size_t)snprintf(out + *n, cap - *n, rnd(2) ? "-" : "NOT ");
    bool scoped = strcmp(q->field, "_all") != 0 || rnd(4) == 0;
    switch (q->kind) {
    case R_TERM:
    case R_PREFIX:
        *n += (size_t)snprintf(out + *n, cap - *n, "%s%s%s%s",
                               scoped ? q->field : "", scoped ? ":" : "",
                               q->words[0], q->kind == R_PREFIX ? "*" : "");
        return;
    case R_PHRASE:
        *n += (size_t)snprintf(out + *n, cap - *n, "%s%s\"%s %s%s%s\"",
                               scoped ? q->field : "", scoped ? ":" : "",
                               q->words[0], q->words[1],
                               q->nwords > 2 ? " " : "",
                               q->nwords > 2 ? q->words[2] : "");
        return;
    case R_AND:
    case R_OR:
        *n += (size_t)snprintf(out + *n, cap - *n, "(");
        for (int i = 0; i < q->nkids; i++) {
            if (i)
                *n += (size_t)snprintf(out + *n, cap - *n, "%s",
                                       q->kind == R_OR ? " OR " :
                                       rnd(3) ? " " : " AND ");
            render(q->kids[i], out, cap, n);
        }
        *n += (size_t)snprintf(out + *n, cap - *n, ")");
        return;
    }
}

/* Field-scoping a composite query is not rendered above: leaves carry
 * their fields.  Make sure every AND has a positive kid first. */
static void fix_and(rq *q)
{
    if (q->kind != R_AND && q->kind != R_OR)
        return;
    for (int i = 0; i < q->nkids; i++)
        fix_and(q->kids[i]);
    if (q->kind == R_AND)
        q->kids[0]->neg = false;
    else
        for (int i = 0; i < q->nkids; i++)
            q->kids[i]->neg = false;
}

static int queries_run, queries_matching;

typedef struct rhit {
    char key[32];
    double score;
} rhit;

static void compare_query(fx *f, const rcorpus *c, const rq *q,
                          const char *text)
{
    /* reference */
    memset(&memo, 0, sizeof memo);
    size_t nref = 0;
    rhit *ref = calloc(c->n + 1, sizeof *ref);
    for (size_t i = 0; i < c->n; i++) {
        double s = 0;
        if (reval(c, &c->docs[i], q, &s)) {
            strcpy(ref[nref].key, c->docs[i].key);
            ref[nref++].score = s;
        }
    }
    /* kvfts: every hit */
    kvfts_results *r = NULL;
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    o.limit = 0;
    o.keys_only = true;
    int rc = kvfts_search(&r, f->db, S(text), &o);
    if (rc)
        fail_msg("'%s': %s", text, kvfts_errmsg(f->db));
    if (kvfts_results_total(r) != nref || kvfts_results_count(r) != nref)
        fail_msg("'%s': %llu matches, the reference has %zu", text,
                 (unsigned long long)kvfts_results_total(r), nref);
    const char *k;
    double score, prev = INFINITY;
    while (kvfts_results_next(r, &k, NULL, NULL, &score) == KVFTS_OK) {
        size_t i = 0;
        while (i < nref && strcmp(ref[i].key, k))
            i++;
        if (i == nref)
            fail_msg("'%s': %s matched, not in the reference", text, k);
        if (fabs(ref[i].score - score) > 1e-9)
            fail_msg("'%s': %s scores %.15g, the reference %.15g", text, k,
                     score, ref[i].score);
        if (score > prev)
            fail_msg("'%s': not in score order at %s", text, k);
        prev = score;
    }
    queries_run++;
    queries_matching += nref > 0;
    kvfts_results_free(r);
    /* count mode agrees */
    o.count_only = true;
    assert_int_equal(kvfts_search(&r, f->db, S(text), &o), 0);
    if (kvfts_results_total(r) != nref)
        fail_msg("'%s': counts %llu, the reference %zu", text,
                 (unsigned long long)kvfts_results_total(r), nref);
    assert_int_equal(kvfts_results_count(r), 0);
    kvfts_results_free(r);
    free(ref);
}

static void run_random_queries(fx *f, const rcorpus *c, int nq)
{
    for (int i = 0; i < nq; i++) {
        rq *q = random_query(0);
        fix_and(q);
        char text[2048];
        size_t n = 0;
        render(q, text, sizeof text, &n);
        compare_query(f, c, q, text);
        rq_free(q);
    }
}

static void corpus_put(fx *f, rcorpus *c, size_t i, const char *key)
{
    rdoc *d = &c->docs[i];
    char k[32];
    snprintf(k, sizeof k, "%s", key);
    free(d->json);
    free(d->occ);
    snprintf(d->key, sizeof d->key, "%s", k);
    d->json = random_doc();
    put(f, d->key, d->json);
    rdoc_analyze(f, d);
}

/* One round of the reference comparison: a random corpus loaded in a
 * batch, queried; then replaced, deleted and added to one document at a
 * time (segments, deletions, merges), queried again. */
static void reference_round(int round)
{
    fx f;
    fx_open(&f, NULL);
    rcorpus *c = calloc(1, sizeof *c);
    size_t ndocs = 20 + rnd(120);
    kvfts_batch *b = NULL;
    assert_int_equal(kvfts_batch_begin(&b, f.db), 0);
    for (size_t i = 0; i < ndocs; i++) {
        rdoc *d = &c->docs[c->n++];
        snprintf(d->key, sizeof d->key, "d%03zu", i);
        d->json = random_doc();
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(d->key),
                                           S(d->json)), 0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    for (size_t i = 0; i < c->n; i++)
        rdoc_analyze(&f, &c->docs[i]);
    run_random_queries(&f, c, 60);

    /* replaces, deletes, new documents */
    for (int op = 0; op < 30; op++) {
        size_t i = rnd((uint32_t)c->n);
        int what = (int)rnd(3);
        if (what == 0) {
            corpus_put(&f, c, i, c->docs[i].key);
        } else if (what == 1 && c->n > 5) {
            assert_int_equal(kvfts_del(f.db, S(c->docs[i].key), 0), 0);
            free(c->docs[i].json);
            free(c->docs[i].occ);
            c->docs[i] = c->docs[--c->n];
        } else if (c->n < 400) {
            char key[32];
            snprintf(key, sizeof key, "n%03d-%d", op, round);
            c->docs[c->n].json = NULL;
            c->docs[c->n].occ = NULL;
            corpus_put(&f, c, c->n, key);
            c->n++;
        }
    }
    run_random_queries(&f, c, 60);
    for (size_t i = 0; i < c->n; i++) {
        free(c->docs[i].json);
        free(c->docs[i].occ);
    }
    free(c);
    fx_close(&f);
}

static void test_reference(void **state)
{
    (void)state;
    const char *env = getenv("KVFTS_QUERY_ROUNDS");
    int rounds = env ? atoi(env) : 8;
    for (int round = 0; round < rounds; round++)
        reference_round(round);
    /* Rounds that once failed, from the random state they began at:
     * 'title:"gam beta"' counted 1 of 2 matches (a count reused a run of
     * ids kept from before a segment's cursor ran out, which stopped
     * short of the bound the count took from the blocks). */
    static const uint64_t failed[] = { 0x8fd95da669d94e45ull };
    uint64_t keep = rng_state;
    for (size_t i = 0; i < sizeof failed / sizeof *failed; i++) {
        rng_state = failed[i];
        reference_round(1);
    }
    rng_state = keep;
    /* the random queries are not all trivially empty */
    printf("[ ref      ] %d random queries, %d with matches\n", queries_run,
           queries_matching);
    assert_true(queries_matching * 3 > queries_run);
}

/* ---- block-max top-k and counts, on lists of many blocks ----------------
 *
 * A corpus of a few thousand documents over a small vocabulary with skewed
 * word frequencies and lengths, so that common terms have dozens of blocks
 * with different max tfs and lengths; loaded in batches (segments), then
 * partly replaced and deleted (deletions in newer segments).  For terms,
 * field terms, ORs, ANDs, AND NOTs and phrases: the count (count_only and
 * the total of a top-k search) equals a brute-force count over the
 * documents' words, and the top k for several k, which block-max pruning
 * computes, is the first k of the exhaustive ranking (limit 0, which never
 * prunes): the same keys with the same scores, bit for bit. */

#define TK_VOCAB 20
#define TK_RARE 20                 /* "zulu": the first word of 1 title in
                                      40, never drawn by tk_word */
static const char *const tk_vocab[TK_VOCAB + 1] = {
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
    "hotel", "india", "juliet", "kilo", "lima", "mike", "november",
    "oscar", "papa", "quebec", "romeo", "sierra", "tango", "zulu"
};

typedef struct tkdoc {
    bool live;
    uint8_t nw[2];                 /* words of title, body */
    uint8_t w[2][96];
} tkdoc;

/* A skewed word: low indexes are common. */
static uint8_t tk_word(void)
{
    double u = (double)rnd(1u << 20) / (double)(1u << 20);
    return (uint8_t)(TK_VOCAB * u * u * u);
}

static void tk_make(tkdoc *d, char *json, size_t cap)
{
    d->live = true;
    d->nw[0] = (uint8_t)(1 + rnd(4));
    d->nw[1] = (uint8_t)(rnd(8) ? 1 + rnd(rnd(4) ? 20 : 95) : 0);
    size_t n = (size_t)snprintf(json, cap, "{\"title\":\"");
    for (int f = 0; f < 2; f++) {
        if (f)
            n += (size_t)snprintf(json + n, cap - n, "\",\"body\":\"");
        for (int i = 0; i < d->nw[f]; i++) {
            d->w[f][i] = f == 0 && i == 0 && rnd(40) == 0 ? TK_RARE
                                                        : tk_word();
            n += (size_t)snprintf(json + n, cap - n, "%s%s", i ? " " : "",
                                  tk_vocab[d->w[f][i]]);
        }
    }
    snprintf(json + n, cap - n, "\"}");
}

static bool tk_has(const tkdoc *d, int field, int w)
{
    for (int f = 0; f < 2; f++)
        if (field < 0 || field == f)
            for (int i = 0; i < d->nw[f]; i++)
                if (d->w[f][i] == w)
                    return true;
    return false;
}

/* Words w[0 .. nw) side by side in one field. */
static bool tk_phrase(const tkdoc *d, int field, const int *w, int nw)
{
    for (int f = 0; f < 2; f++)
        for (int i = 0; (field < 0 || field == f) && i + nw <= d->nw[f];
             i++) {
            int k = 0;
            while (k < nw && d->w[f][i + k] == w[k])
                k++;
            if (k == nw)
                return true;
        }
    return false;
}

typedef struct tkq {
    char text[128];
    int kind;                      /* 0 term, 1 body:term, 2 OR, 3 AND,
                                      4 AND NOT, 5 phrase, 6 body:phrase,
                                      7 "a b a", 8 "a a" (a word repeated:
                                      one cursor for both), 9 a -(b OR c),
                                      10 a -body:b, 11 a -title:b */
    int a, b, c;
} tkq;

static bool tk_match(const tkdoc *d, const tkq *q)
{
    switch (q->kind) {
    case 0: return tk_has(d, -1, q->a);
    case 1: return tk_has(d, 1, q->a);
    case 2: return tk_has(d, -1, q->a) || tk_has(d, -1, q->b) ||
                   tk_has(d, -1, q->c);
    case 3: return tk_has(d, -1, q->a) && tk_has(d, -1, q->b);
    case 4: return tk_has(d, -1, q->a) && !tk_has(d, -1, q->b);
    case 5: return tk_phrase(d, -1, (int[]){ q->a, q->b }, 2);
    case 6: return tk_phrase(d, 1, (int[]){ q->a, q->b }, 2);
    case 7: return tk_phrase(d, -1, (int[]){ q->a, q->b, q->a }, 3);
    case 8: return tk_phrase(d, -1, (int[]){ q->a, q->a }, 2);
    case 9: return tk_has(d, -1, q->a) && !tk_has(d, -1, q->b) &&
                   !tk_has(d, -1, q->c);
    case 10: return tk_has(d, -1, q->a) && !tk_has(d, 1, q->b);
    default: return tk_has(d, -1, q->a) && !tk_has(d, 0, q->b);
    }
}

static void tk_query(tkq *q)
{
    q->kind = (int)rnd(11);
    q->a = rnd(2) ? (int)rnd(4) : tk_word();
    q->b = tk_word();
    q->c = tk_word();
    const char *a = tk_vocab[q->a], *b = tk_vocab[q->b], *c = tk_vocab[q->c];
    switch (q->kind) {
    case 0: snprintf(q->text, sizeof q->text, "%s", a); break;
    case 1: snprintf(q->text, sizeof q->text, "body:%s", a); break;
    case 2: snprintf(q->text, sizeof q->text, "%s OR %s OR %s", a, b, c);
        break;
    case 3: snprintf(q->text, sizeof q->text, "%s %s", a, b); break;
    case 4: snprintf(q->text, sizeof q->text, "%s -%s", a, b); break;
    case 5: snprintf(q->text, sizeof q->text, "\"%s %s\"", a, b); break;
    case 6: snprintf(q->text, sizeof q->text, "body:\"%s %s\"", a, b);
        break;
    case 7: snprintf(q->text, sizeof q->text, "\"%s %s %s\"", a, b, a);
        break;
    case 8: snprintf(q->text, sizeof q->text, "\"%s %s\"", a, a); break;
    case 9: snprintf(q->text, sizeof q->text, "%s -(%s OR %s)", a, b, c);
        break;
    default: snprintf(q->text, sizeof q->text, "%s -body:%s", a, b); break;
    }
}

/* A phrase query (tk_query's kinds 5 to 8). */
static void tk_phrase_query(tkq *q)
{
    tk_query(q);
    if (q->kind < 5 || q->kind > 8) {   /* a phrase of the query's words */
        q->kind = 5 + (int)rnd(2);
        snprintf(q->text, sizeof q->text, "%s\"%s %s\"",
                 q->kind == 6 ? "body:" : "", tk_vocab[q->a],
                 tk_vocab[q->b]);
    }
}

static void tk_check(fx *f, const tkdoc *docs, size_t n, const tkq *q)
{
    uint64_t want = 0;
    for (size_t i = 0; i < n; i++)
        want += docs[i].live && tk_match(&docs[i], q);
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    kvfts_results *r = NULL;
    o.count_only = true;
    assert_int_equal(kvfts_search(&r, f->db, S(q->text), &o), 0);
    if (kvfts_results_total(r) != want)
        fail_msg("'%s': count %llu, brute force %llu", q->text,
                 (unsigned long long)kvfts_results_total(r),
                 (unsigned long long)want);
    kvfts_results_free(r);
    /* exhaustive ranking */
    o.count_only = false;
    o.keys_only = true;
    o.limit = 0;
    assert_int_equal(kvfts_search(&r, f->db, S(q->text), &o), 0);
    assert_int_equal(kvfts_results_total(r), want);
    size_t nall = kvfts_results_count(r);
    assert_int_equal(nall, want);
    char (*keys)[16] = calloc(nall + 1, sizeof *keys);
    double *scores = calloc(nall + 1, sizeof *scores);
    const char *k;
    double sc;
    for (size_t i = 0; kvfts_results_next(r, &k, NULL, NULL, &sc) ==
         KVFTS_OK; i++) {
        snprintf(keys[i], sizeof keys[i], "%s", k);
        scores[i] = sc;
    }
    kvfts_results_free(r);
    static const size_t ks[] = { 1, 3, 10, 37 };
    for (size_t j = 0; j < sizeof ks / sizeof *ks; j++) {
        o.limit = ks[j];
        assert_int_equal(kvfts_search(&r, f->db, S(q->text), &o), 0);
        if (kvfts_results_total(r) != want)
            fail_msg("'%s' top %zu: total %llu, expected %llu", q->text,
                     ks[j], (unsigned long long)kvfts_results_total(r),
                     (unsigned long long)want);
        size_t i = 0;
        while (kvfts_results_next(r, &k, NULL, NULL, &sc) == KVFTS_OK) {
            if (i >= nall || strcmp(k, keys[i]) || sc != scores[i])
                fail_msg("'%s' top %zu: hit %zu is %s (%.17g), the "
                         "exhaustive ranking has %s (%.17g)", q->text, ks[j],
                         i, k, sc, i < nall ? keys[i] : "nothing",
                         i < nall ? scores[i] : 0.0);
            i++;
        }
        assert_int_equal(i, nall < ks[j] ? nall : ks[j]);
        kvfts_results_free(r);
    }
    free(keys);
    free(scores);
}

/* A NOT of a common word and a rare one is counted as the word's count
 * less what the two share (and_count), and equals the brute force. */
static void tk_check_nots(fx *f, const tkdoc *docs, size_t n)
{
    static const tkq nots[] = {
        { "alpha -zulu", 4, 0, TK_RARE, 0 },
        { "alpha -(zulu OR zulu)", 9, 0, TK_RARE, TK_RARE },
        { "bravo -title:zulu", 11, 1, TK_RARE, 0 },
    };
    for (size_t i = 0; i < sizeof nots / sizeof *nots; i++) {
        uint64_t before = qry_test_not_subtracted();
        tk_check(f, docs, n, &nots[i]);
        if (qry_test_not_subtracted() == before)
            fail_msg("'%s' was not counted by subtraction", nots[i].text);
    }
}

static void test_topk_counts(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL);
    size_t n = 3000;
    tkdoc *docs = calloc(n, sizeof *docs);
    char json[2048], key[32];
    for (size_t i = 0; i < n;) {       /* three batches: three segments */
        kvfts_batch *b = NULL;
        assert_int_equal(kvfts_batch_begin(&b, f.db), 0);
        for (size_t end = i + n / 3; i < end; i++) {
            tk_make(&docs[i], json, sizeof json);
            snprintf(key, sizeof key, "k%04zu", i);
            assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key),
                                               S(json)), 0);
        }
        assert_int_equal(kvfts_batch_commit(b), 0);
        kvfts_batch_free(b);
    }
    tkq q;
    for (int i = 0; i < 40; i++) {
        tk_query(&q);
        tk_check(&f, docs, n, &q);
    }
    tk_check_nots(&f, docs, n);
    /* One segment: a phrase count checks its dense candidates from whole
     * blocks (qry_test_phrase_block_rounds), not posting by posting. */
    assert_int_equal(kvfts_optimize(f.db, NULL, NULL), 0);
    uint64_t rounds = qry_test_phrase_block_rounds();
    for (int i = 0; i < 40; i++) {
        tk_phrase_query(&q);
        tk_check(&f, docs, n, &q);
    }
    assert_true(qry_test_phrase_block_rounds() > rounds);
    /* A word said 2,000 times is one cursor, not 2,000 walked per
     * candidate (35 s and 231 MB for "the" x 5,000 on the catalog), in a
     * phrase (no document has it: at most 96 words a field), an AND or an
     * OR (both match where the word does); two words so repeated open two
     * cursors.  The AND and OR rank as the clauses would (a repeated
     * term's score added once per clause): their top 10 is compared with
     * that of the AND/OR of the distinct words, whose order it keeps. */
    {
        static char many[2 * 2000 * 12 + 8];
        static const char *const ops[] = { "\"", " ", " OR " };
        uint64_t want[2][2] = { { 0, 0 }, { 0, 0 } };
        for (size_t i = 0; i < n; i++) {
            bool a0 = docs[i].live && tk_has(&docs[i], -1, 0);
            bool a1 = docs[i].live && tk_has(&docs[i], -1, 1);
            want[0][0] += a0;
            want[0][1] += a0;
            want[1][0] += a0 && a1;
            want[1][1] += a0 || a1;
        }
        for (int op = 0; op < 3; op++)
            for (int w = 0; w < 2; w++) {
                const char *sep = op ? ops[op] : " ";
                size_t m = (size_t)snprintf(many, sizeof many, "%s",
                                            op ? "" : "\"");
                for (int i = 0; i < 2000; i++)
                    m += (size_t)snprintf(many + m, sizeof many - m, "%s%s",
                                          i ? sep : "",
                                          tk_vocab[w && i % 2 ? 1 : 0]);
                snprintf(many + m, sizeof many - m, "%s", op ? "" : "\"");
                uint64_t before = qry_test_cursors();
                kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
                o.count_only = true;
                kvfts_results *r = NULL;
                assert_int_equal(kvfts_search(&r, f.db, S(many), &o), 0);
                assert_int_equal(kvfts_results_total(r),
                                 op ? want[w][op - 1] : 0);
                kvfts_results_free(r);
                assert_int_equal(qry_test_cursors() - before,
                                 (uint64_t)w + 1);
                if (!op)
                    continue;
                /* ranked: each hit's score is 2,000 times the one word's
                 * (w: 1,000 times the two words'), as a sum of clauses,
                 * in descending order */
                o.count_only = false;
                o.keys_only = true;
                assert_int_equal(kvfts_search(&r, f.db, S(many), &o), 0);
                kvfts_results *r1 = NULL;
                const char *one = w ? (op == 1 ? "alpha bravo"
                                               : "alpha OR bravo") : "alpha";
                kvfts_search_options o1 = o;
                o1.limit = 0;
                assert_int_equal(kvfts_search(&r1, f.db, S(one), &o1), 0);
                size_t n1 = kvfts_results_count(r1);
                const char *k, *k1;
                double sc, sc1, prev = INFINITY;
                size_t hits = 0;
                while (kvfts_results_next(r, &k, NULL, NULL, &sc) ==
                       KVFTS_OK) {
                    double single = -1;
                    for (size_t j = 0; j < n1; j++) {
                        assert_int_equal(kvfts_results_next(r1, &k1, NULL,
                                                            NULL, &sc1), 0);
                        if (!strcmp(k, k1))
                            single = sc1;
                    }
                    kvfts_results_free(r1);
                    assert_int_equal(kvfts_search(&r1, f.db, S(one), &o1),
                                     0);
                    assert_true(single > 0);
                    assert_true(fabs(sc - (w ? 1000.0 : 2000.0) * single) <=
                                1e-9 * sc);
                    assert_true(sc <= prev);
                    prev = sc;
                    hits++;
                }
                assert_int_equal(hits, 10);
                kvfts_results_free(r);
                kvfts_results_free(r1);
            }
    }
    /* replaces in a batch, then single deletes and puts: deletions and
     * postings of the same ids in newer segments */
    kvfts_batch *b = NULL;
    assert_int_equal(kvfts_batch_begin(&b, f.db), 0);
    for (int j = 0; j < 400; j++) {
        size_t i = rnd((uint32_t)n);
        tk_make(&docs[i], json, sizeof json);
        snprintf(key, sizeof key, "k%04zu", i);
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key),
                                           S(json)), 0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    for (int j = 0; j < 30; j++) {
        size_t i = rnd((uint32_t)n);
        snprintf(key, sizeof key, "k%04zu", i);
        if (docs[i].live)
            assert_int_equal(kvfts_del(f.db, S(key), 0), 0);
        docs[i].live = false;
        i = rnd((uint32_t)n);
        tk_make(&docs[i], json, sizeof json);
        snprintf(key, sizeof key, "k%04zu", i);
        put(&f, key, json);
    }
    for (int i = 0; i < 80; i++) {
        tk_query(&q);
        tk_check(&f, docs, n, &q);
    }
    tk_check_nots(&f, docs, n);     /* over deletions in newer segments */
    /* Phrases over those segments, counted from whole blocks too, where a
     * term's candidates are cut to its live ids by its run, or by its
     * block where nothing newer deletes (idx_postings_plain). */
    rounds = qry_test_phrase_block_rounds();
    for (int i = 0; i < 40; i++) {
        tk_phrase_query(&q);
        tk_check(&f, docs, n, &q);
    }
    assert_true(qry_test_phrase_block_rounds() > rounds);
    /* Out of time in the ranking walk (the clock forced past every
     * deadline): the best of the first 1,023 matches, flagged partial;
     * KVFTS_ELIMIT when exact; a count is not timed; no limit, no cut. */
    {
        static const char qq[] = "alpha OR bravo OR charlie OR delta";
        uint64_t want = 0;
        for (size_t i = 0; i < n; i++)
            want += docs[i].live && (tk_has(&docs[i], -1, 0) ||
                                     tk_has(&docs[i], -1, 1) ||
                                     tk_has(&docs[i], -1, 2) ||
                                     tk_has(&docs[i], -1, 3));
        assert_true(want > 2048);
        kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
        kvfts_results *r = NULL;
        o.time_limit_ms = 60000;
        qry_test_clock_expired(true);
        assert_int_equal(kvfts_search(&r, f.db, S(qq), &o), 0);
        assert_true(kvfts_results_partial(r));
        assert_int_equal(kvfts_results_total(r), 1023);
        assert_int_equal(kvfts_results_count(r), 10);
        kvfts_results_free(r);
        o.exact = true;
        assert_int_equal(kvfts_search(&r, f.db, S(qq), &o), KVFTS_ELIMIT);
        assert_non_null(strstr(kvfts_errmsg(f.db), "reached its time limit"));
        o.exact = false;
        o.count_only = true;
        assert_int_equal(kvfts_search(&r, f.db, S(qq), &o), 0);
        assert_false(kvfts_results_partial(r));
        assert_int_equal(kvfts_results_total(r), want);
        kvfts_results_free(r);
        o.count_only = false;
        o.time_limit_ms = 0;
        assert_int_equal(kvfts_search(&r, f.db, S(qq), &o), 0);
        assert_false(kvfts_results_partial(r));
        assert_int_equal(kvfts_results_total(r), want);
        kvfts_results_free(r);
        qry_test_clock_expired(false);
    }
    /* A phrase, a prefix or a group said 1,000 times in an OR or an AND
     * is walked once: as many cursors as once, the same count. */
    {
        static const char *const clause[] = { "\"alpha bravo\"", "alp*",
                                              "(alpha OR bravo)" };
        static char many[1000 * 24 + 8];
        for (int c = 0; c < 3; c++)
            for (int op = 0; op < 2; op++) {
                size_t m = 0;
                for (int i = 0; i < 1000; i++)
                    m += (size_t)snprintf(many + m, sizeof many - m, "%s%s",
                                          i ? (op ? " OR " : " ") : "",
                                          clause[c]);
                kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
                o.count_only = true;
                kvfts_results *r = NULL;
                uint64_t before = qry_test_cursors();
                assert_int_equal(kvfts_search(&r, f.db, S(clause[c]), &o), 0);
                uint64_t once = qry_test_cursors() - before;
                uint64_t want = kvfts_results_total(r);
                kvfts_results_free(r);
                assert_true(want > 0);
                before = qry_test_cursors();
                assert_int_equal(kvfts_search(&r, f.db, S(many), &o), 0);
                assert_int_equal(qry_test_cursors() - before, once);
                assert_int_equal(kvfts_results_total(r), want);
                kvfts_results_free(r);
            }
    }
    free(docs);
    fx_close(&f);
}

/* ---- paging, count, sort, caps ------------------------------------------- */

/* A phrase's count over a newer segment that took a word out of some
 * documents: the older segment's block still holds them, and a round that
 * starts on one of them (the other word's cursor stepped past it, to a
 * live id) must not count it from that block (idx_postings_plain looks
 * for deletions from the round's first candidate, not from the cursor).
 * Ids 1-300 "alpha bravo", 301-500 "bravo" alone: both words' blocks end
 * after the 128th and 256th of ids 1-300, so rounds start at 129 and 257;
 * 121-140 then lose "bravo" in a second batch (a second segment). */
/* ---- field lists ---------------------------------------------------------
 *
 * Two databases, the same documents, replaces and deletes, one with
 * "field_lists" for both fields: every field-scoped query answers the same
 * (count, and every hit of the exhaustive ranking with its score, bit for
 * bit), and equals the brute force; the lists exist (their postings are
 * counted apart, the terms and postings are the same), no term listing
 * shows them, and kvfts_check() finds the index equal to a fresh
 * analysis, the lists included. */

static int count_term(void *payload, const char *term, size_t len,
                      uint64_t count)
{
    (void)count;
    if (len && term[0] == '\x01')
        fail_msg("a field list's term listed: %.*s", (int)len, term);
    ++*(uint64_t *)payload;
    return 0;
}

/* Every hit of q in db, "key score" lines, and the total. */
static char *all_hits(kvfts_db *db, const char *q, uint64_t *total)
{
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    o.limit = 0;
    o.keys_only = true;
    kvfts_results *r;
    if (kvfts_search(&r, db, S(q), &o))
        fail_msg("'%s': %s", q, kvfts_errmsg(db));
    *total = kvfts_results_total(r);
    kv_buf out = KV_BUF_INIT;
    kv_err e = KV_ERR_INIT;
    const char *k;
    double sc;
    char line[80];
    while (kvfts_results_next(r, &k, NULL, NULL, &sc) == KVFTS_OK) {
        snprintf(line, sizeof line, "%s %.17g\n", k, sc);
        assert_int_equal(kv_buf_append(&out, line, strlen(line), &e), 0);
    }
    kvfts_results_free(r);
    assert_int_equal(kv_buf_append(&out, "", 0, &e), 0);
    return out.data;
}

static void test_field_lists(void **state)
{
    (void)state;
    fx f[2];
    fx_open(&f[0], NULL);
    fx_open(&f[1], "{\"analysis\":{\"field_lists\":[\"title\",\"body\"]}}");
    size_t n = 1500;
    tkdoc *docs = calloc(n, sizeof *docs);
    char json[2048], key[32];
    for (size_t i = 0; i < n; i++) {
        tk_make(&docs[i], json, sizeof json);
        snprintf(key, sizeof key, "k%04zu", i);
        for (int d = 0; d < 2; d++)
            put(&f[d], key, json);
        if (i % 500 == 499)          /* segments of their own, merged */
            for (int d = 0; d < 2; d++)
                assert_int_equal(kvfts_optimize(f[d].db, NULL, NULL), 0);
    }
    for (int j = 0; j < 60; j++) {   /* deletes and replaces */
        size_t i = rnd((uint32_t)n);
        snprintf(key, sizeof key, "k%04zu", i);
        if (docs[i].live)
            for (int d = 0; d < 2; d++)
                assert_int_equal(kvfts_del(f[d].db, S(key), 0), 0);
        docs[i].live = false;
        i = rnd((uint32_t)n);
        tk_make(&docs[i], json, sizeof json);
        snprintf(key, sizeof key, "k%04zu", i);
        for (int d = 0; d < 2; d++)
            put(&f[d], key, json);
    }
    char q[160];
    for (int i = 0; i < 120; i++) {
        const char *fl = rnd(2) ? "title" : "body";
        const char *a = tk_vocab[rnd(2) ? rnd(4) : tk_word()];
        const char *b = tk_vocab[tk_word()];
        switch (rnd(7)) {
        case 0: snprintf(q, sizeof q, "%s:%s", fl, a); break;
        case 1: snprintf(q, sizeof q, "%s:%s %s", fl, a, b); break;
        case 2: snprintf(q, sizeof q, "%s:(%s OR %s)", fl, a, b); break;
        case 3: snprintf(q, sizeof q, "%s -%s:%s", a, fl, b); break;
        case 4: snprintf(q, sizeof q, "%s:\"%s %s\"", fl, a, b); break;
        case 5: snprintf(q, sizeof q, "%s:%.2s*", fl, a); break;
        default: snprintf(q, sizeof q, "%s:%s title:%s", fl, a, b); break;
        }
        uint64_t t0, t1;
        char *h0 = all_hits(f[0].db, q, &t0), *h1 = all_hits(f[1].db, q, &t1);
        if (t0 != t1 || strcmp(h0, h1) != 0)
            fail_msg("'%s': %llu hits without field lists, %llu with",
                     q, (unsigned long long)t0, (unsigned long long)t1);
        free(h0);
        free(h1);
    }
    /* the brute force, through the field lists */
    static const tkq fq[] = {
        { "body:alpha", 1, 0, 0, 0 },
        { "body:\"alpha bravo\"", 6, 0, 1, 0 },
        { "alpha -title:zulu", 11, 0, TK_RARE, 0 },
    };
    for (size_t i = 0; i < sizeof fq / sizeof *fq; i++)
        tk_check(&f[1], docs, n, &fq[i]);
    kvfts_stats st[2];
    for (int d = 0; d < 2; d++)
        assert_int_equal(kvfts_get_stats(&st[d], f[d].db), 0);
    assert_int_equal(st[0].terms, st[1].terms);
    assert_int_equal(st[0].postings, st[1].postings);
    assert_int_equal(st[0].field_list_postings, 0);
    assert_true(st[1].field_list_postings > 0);
    for (int d = 0; d < 2; d++) {
        uint64_t nt = 0;
        assert_int_equal(kvfts_term_list(f[d].db, S("title"), "", 0,
                                         count_term, &nt), 0);
        assert_true(nt > 0);
        uint64_t diffs = 1;
        assert_int_equal(kvfts_check(&diffs, f[d].db, NULL, NULL), 0);
        assert_int_equal(diffs, 0);
    }
    /* A bad list: "_all" is every field's. */
    assert_int_equal(kvfts_set_config(f[0].db, S("{\"analysis\":{"
                                      "\"field_lists\":[\"_all\"]}}")),
                     KVFTS_EINVAL);
    assert_non_null(strstr(kvfts_errmsg(f[0].db), "field_lists"));
    free(docs);
    for (int d = 0; d < 2; d++)
        fx_close(&f[d]);
}

static void test_phrase_after_deletion(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL);
    char key[32];
    kvfts_batch *b = NULL;
    assert_int_equal(kvfts_batch_begin(&b, f.db), 0);
    for (int i = 1; i <= 500; i++) {
        snprintf(key, sizeof key, "k%04d", i);
        const char *json = i <= 300 ? "{\"t\":\"alpha bravo\"}"
                                    : "{\"t\":\"bravo\"}";
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key), S(json)),
                         0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    assert_int_equal(kvfts_batch_begin(&b, f.db), 0);
    for (int i = 121; i <= 140; i++) {
        snprintf(key, sizeof key, "k%04d", i);
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key),
                                           S("{\"t\":\"alpha charlie\"}")),
                         0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    uint64_t rounds = qry_test_phrase_block_rounds();
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    kvfts_results *r = NULL;
    o.count_only = true;
    assert_int_equal(kvfts_search(&r, f.db, S("\"alpha bravo\""), &o), 0);
    assert_int_equal(kvfts_results_total(r), 280);
    kvfts_results_free(r);
    assert_true(qry_test_phrase_block_rounds() > rounds);
    /* the same from a ranked search of all of them */
    o.count_only = false;
    o.keys_only = true;
    o.limit = 0;
    assert_int_equal(kvfts_search(&r, f.db, S("\"alpha bravo\""), &o), 0);
    assert_int_equal(kvfts_results_total(r), 280);
    assert_int_equal(kvfts_results_count(r), 280);
    kvfts_results_free(r);
    fx_close(&f);
}

static void test_paging_sort_count(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL);
    /* k<i> holds "word" i times among fillers: scores rise with i */
    char key[16], json[512];
    for (int i = 1; i <= 25; i++) {
        int n = snprintf(json, sizeof json, "{\"t\":\"");
        for (int j = 0; j < 25; j++)
            n += snprintf(json + n, sizeof json - (size_t)n, "%s ",
                          j < i ? "word" : "filler");
        snprintf(json + n, sizeof json - (size_t)n, "\"}");
        snprintf(key, sizeof key, "k%02d", 26 - i);
        put(&f, key, json);
    }
    put(&f, "other", "{\"t\":\"filler\"}");
    /* rank order: k01 (25 x word) .. k25 */
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    kvfts_results *r = NULL;
    const char *k, *doc;
    double s;
    assert_int_equal(kvfts_search(&r, f.db, S("word"), &o), 0);
    assert_int_equal(kvfts_results_total(r), 25);
    assert_int_equal(kvfts_results_count(r), 10);     /* default limit */
    for (int i = 1; i <= 10; i++) {
        assert_int_equal(kvfts_results_next(r, &k, &doc, NULL, &s), 0);
        snprintf(key, sizeof key, "k%02d", i);
        assert_string_equal(k, key);
        assert_non_null(doc);
    }
    kvfts_results_free(r);
    o.offset = 20;
    o.limit = 10;
    o.keys_only = true;
    assert_int_equal(kvfts_search(&r, f.db, S("word"), &o), 0);
    assert_int_equal(kvfts_results_count(r), 5);
    for (int i = 21; i <= 25; i++) {
        assert_int_equal(kvfts_results_next(r, &k, &doc, NULL, NULL), 0);
        snprintf(key, sizeof key, "k%02d", i);
        assert_string_equal(k, key);
        assert_null(doc);
    }
    assert_int_equal(kvfts_results_next(r, &k, NULL, NULL, NULL),
                     KVFTS_ITEROVER);
    kvfts_results_free(r);
    o.offset = 100;
    assert_int_equal(kvfts_search(&r, f.db, S("word"), &o), 0);
    assert_int_equal(kvfts_results_count(r), 0);
    assert_int_equal(kvfts_results_total(r), 25);
    kvfts_results_free(r);
    /* sort by key: "filler" matches k02..k25 and other, in byte order */
    o.offset = 3;
    o.limit = 4;
    o.sort = KVFTS_SORT_KEY;
    assert_int_equal(kvfts_search(&r, f.db, S("filler"), &o), 0);
    static const char *const want[] = { "k05", "k06", "k07", "k08" };
    for (int i = 0; i < 4; i++) {
        assert_int_equal(kvfts_results_next(r, &k, NULL, NULL, &s), 0);
        assert_string_equal(k, want[i]);
        assert_true(s > 0);
    }
    kvfts_results_free(r);
    o.offset = 24;
    assert_int_equal(kvfts_search(&r, f.db, S("filler"), &o), 0);
    assert_int_equal(kvfts_results_total(r), 25);
    assert_int_equal(kvfts_results_next(r, &k, NULL, NULL, NULL), 0);
    assert_string_equal(k, "other");
    kvfts_results_free(r);
    /* count */
    kvfts_search_options c = KVFTS_SEARCH_OPTIONS_INIT;
    c.count_only = true;
    assert_int_equal(kvfts_search(&r, f.db, S("word OR filler"), &c), 0);
    assert_int_equal(kvfts_results_total(r), 26);
    assert_int_equal(kvfts_results_next(r, &k, NULL, NULL, NULL),
                     KVFTS_ITEROVER);
    kvfts_results_free(r);
    /* options version */
    c.version = 99;
    assert_int_equal(kvfts_search(&r, f.db, S("word"), &c), KVFTS_EINVAL);
    assert_null(r);
    fx_close(&f);
}

/* No limit refuses a prefix: 1,001 expansions (a pseudo-term) and 1,000
 * (terms of their own) both answer with every document. */
static void test_prefix_cap(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL);
    kvfts_batch *b = NULL;
    assert_int_equal(kvfts_batch_begin(&b, f.db), 0);
    char key[32], json[64];
    for (int i = 0; i < QRY_SCORED_EXPANSION + 1; i++) {
        snprintf(key, sizeof key, "d%d", i);
        snprintf(json, sizeof json, "{\"w\":\"t%04d u%04d\"}", i,
                 i % QRY_SCORED_EXPANSION);
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key), S(json)),
                         0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    kvfts_results *r = NULL;
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    /* 1,001 terms: answered, ranked as one term (every match alike here) */
    assert_int_equal(kvfts_search(&r, f.db, S("x OR t*"), &o), 0);
    assert_int_equal(kvfts_results_total(r), QRY_SCORED_EXPANSION + 1);
    assert_int_equal(kvfts_results_count(r), 10);
    assert_false(kvfts_results_partial(r));
    kvfts_results_free(r);
    o.count_only = true;
    /* exactly 1,000 terms: every document found */
    assert_int_equal(kvfts_search(&r, f.db, S("w:u*"), &o), 0);
    assert_int_equal(kvfts_results_total(r), QRY_SCORED_EXPANSION + 1);
    kvfts_results_free(r);
    assert_int_equal(kvfts_search(&r, f.db, S("t00*"), &o), 0);
    assert_int_equal(kvfts_results_total(r), 100);
    kvfts_results_free(r);
    /* version 1 options have no bounds: what follows them is not read */
    o.mem_limit = 16;
    o.exact = true;
    assert_int_equal(kvfts_search(&r, f.db, S("t*"), &o), KVFTS_ELIMIT);
    o.version = 1;
    assert_int_equal(kvfts_search(&r, f.db, S("t*"), &o), 0);
    assert_int_equal(kvfts_results_total(r), QRY_SCORED_EXPANSION + 1);
    assert_false(kvfts_results_partial(r));
    kvfts_results_free(r);
    fx_close(&f);
}

/* Every hit of q in key order: keys[i] (8 bytes each) and scores[i]. */
static size_t hits_scores(fx *f, const char *q, char (*keys)[8],
                          double *scores, size_t cap)
{
    kvfts_results *r = NULL;
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    o.limit = 0;
    o.keys_only = true;
    o.sort = KVFTS_SORT_KEY;
    if (kvfts_search(&r, f->db, S(q), &o))
        fail_msg("'%s': %s", q, kvfts_errmsg(f->db));
    const char *k;
    size_t n = 0;
    while (n < cap &&
           kvfts_results_next(r, &k, NULL, NULL, &scores[n]) == KVFTS_OK)
        snprintf(keys[n++], 8, "%s", k);
    assert_int_equal(kvfts_results_total(r), n);
    kvfts_results_free(r);
    return n;
}

/* A ranked phrase is walked a round of blocks at a time (next serves the
 * round's matches); an AND's other kid then skips it to ids inside the
 * round, at a match or between.  Every hit of the AND, its count and its
 * top 10 against the documents as made. */
static bool rounds_phrase(int i)
{
    return i % 4 != 0 && i % 3 != 0;      /* "alpha bravo" */
}

static bool rounds_charlie(int i)
{
    return i % 10 != 0 && i % 7 != 3;
}

static void test_phrase_rounds_skipped(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL);
    char key[32], json[128];
    kvfts_batch *b = NULL;
    assert_int_equal(kvfts_batch_begin(&b, f.db), 0);
    size_t want = 0;
    for (int i = 1; i <= 3000; i++) {
        snprintf(key, sizeof key, "k%04d", i);
        snprintf(json, sizeof json, "{\"t\":\"%s%s delta\"}",
                 i % 4 == 0 ? "echo" : rounds_phrase(i) ? "alpha bravo"
                                                        : "bravo alpha",
                 rounds_charlie(i) ? " charlie" : "");
        want += rounds_phrase(i) && rounds_charlie(i);
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key), S(json)),
                         0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    /* the phrase (2,250 documents have its words) leads, charlie (2,443)
     * is skipped to its ids and skips it */
    static char keys[3000][8];
    static double scores[3000];
    const char *q = "\"alpha bravo\" charlie";
    size_t n = hits_scores(&f, q, keys, scores, 3000);
    assert_int_equal(n, want);
    for (size_t j = 0; j < n; j++) {
        int i = atoi(keys[j] + 1);
        assert_true(rounds_phrase(i) && rounds_charlie(i));
    }
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    kvfts_results *r = NULL;
    o.count_only = true;
    assert_int_equal(kvfts_search(&r, f.db, S(q), &o), 0);
    assert_int_equal(kvfts_results_total(r), want);
    kvfts_results_free(r);
    o.count_only = false;
    o.keys_only = true;
    o.limit = 10;
    assert_int_equal(kvfts_search(&r, f.db, S(q), &o), 0);
    assert_int_equal(kvfts_results_total(r), want);
    assert_int_equal(kvfts_results_count(r), 10);
    kvfts_results_free(r);
    /* and the phrase alone, ranked: every document that has it */
    size_t alone = 0;
    for (int i = 1; i <= 3000; i++)
        alone += rounds_phrase(i);
    assert_int_equal(hits_scores(&f, "\"alpha bravo\"", keys, scores, 3000),
                     alone);
    fx_close(&f);
}

/* A prefix with many expansions is read in one walk (a union of triples);
 * it must answer exactly what the OR of its terms answers: same hits, same
 * scores, alone and under AND, NOT and a field. */
static void test_prefix_union(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL);
    kvfts_batch *b = NULL;
    assert_int_equal(kvfts_batch_begin(&b, f.db), 0);
    char key[32], json[256];
    for (int i = 0; i < 600; i++) {
        snprintf(key, sizeof key, "d%03d", i);
        snprintf(json, sizeof json, "{\"t\":\"pre%u x%u\",\"b\":\"pre%u "
                 "pre%u common%u filler\"}", rnd(30), rnd(3), rnd(30),
                 rnd(30), rnd(2));
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key), S(json)),
                         0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    put(&f, "d005", "{\"t\":\"pre7 pre7 pre8\"}");   /* an update */
    char or_all[600] = "", or_t[600] = "";
    size_t n = 0, m = 0;
    for (int i = 0; i < 30; i++) {
        n += (size_t)snprintf(or_all + n, sizeof or_all - n, "%spre%d",
                              i ? " OR " : "(", i);
        m += (size_t)snprintf(or_t + m, sizeof or_t - m, "%spre%d",
                              i ? " OR " : "t:(", i);
    }
    snprintf(or_all + n, sizeof or_all - n, ")");
    snprintf(or_t + m, sizeof or_t - m, ")");
    char not_b[300] = "filler -b:(pre2";     /* pre2* has 11 terms */
    for (int i = 20; i < 30; i++)
        snprintf(not_b + strlen(not_b), sizeof not_b - strlen(not_b),
                 " OR pre%d", i);
    strcat(not_b, ")");
    const char *pairs[][2] = {
        { "pre*", or_all },
        { "pre* common1", NULL },
        { "filler -b:pre2*", not_b },
        { "t:pre*", or_t },
        { "t:pre* x1", NULL },
    };
    char q2[800];
    static char ka[600][8], kb[600][8];
    static double sa[600], sb[600];
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        const char *q = pairs[i][0], *alt = pairs[i][1];
        if (!alt) {       /* replace the prefix by its OR in place */
            const char *star = strstr(q, "pre*");
            bool field = star > q + 1 && star[-1] == ':';
            const char *start = field ? star - 2 : star;
            snprintf(q2, sizeof q2, "%.*s%s%s", (int)(start - q), q,
                     field ? or_t : or_all, star + 4);
            alt = q2;
        }
        size_t na = hits_scores(&f, q, ka, sa, 600);
        size_t nb = hits_scores(&f, alt, kb, sb, 600);
        assert_true(na > 0);
        assert_int_equal(na, nb);
        for (size_t h = 0; h < na; h++) {
            assert_string_equal(ka[h], kb[h]);
            if (fabs(sa[h] - sb[h]) > 1e-9)
                fail_msg("'%s': %s scores %.15g, as an OR %.15g", q, ka[h],
                         sa[h], sb[h]);
        }
    }
    fx_close(&f);
}

/* ---- huge prefixes --------------------------------------------------------
 *
 * A corpus with a large vocabulary: words of three letters from {a, b, c}
 * and three random ones, so that every prefix of 1, 2 and 3 letters expands
 * to more than QRY_SCORED_EXPANSION terms.  Loaded in two batches (the
 * second replaces and deletes documents: several segments, deletions), then
 * checked against a reference computed here from kvfts_analyze_doc():
 * the same match sets; the scores of the rule for huge expansions (the
 * prefix as one term: tf = the document's occurrences of expansions, df =
 * the matching documents); counts equal to FTS5's; and the bounds. */

#define HUGE_DOCS 3000

typedef struct hdoc {
    char key[16];
    char *json;
    char **terms;         /* the analyzed terms of field w */
    size_t nterms;
    bool live;
} hdoc;

static char *huge_text(void)
{
    int words = 5 + (int)rnd(36);
    char *j = malloc(16 + (size_t)words * 7);
    size_t n = (size_t)sprintf(j, "{\"w\":\"");
    for (int i = 0; i < words; i++) {
        if (i)
            j[n++] = ' ';
        for (int k = 0; k < 3; k++)
            j[n++] = (char)('a' + rnd(3));
        for (int k = 0; k < 3; k++)
            j[n++] = (char)('a' + rnd(26));
    }
    strcpy(j + n, "\"}");
    return j;
}

static void hdoc_set(fx *f, hdoc *d, char *json)
{
    for (size_t i = 0; i < d->nterms; i++)
        free(d->terms[i]);
    free(d->terms);
    free(d->json);
    d->json = json;
    kvfts_terms *t = NULL;
    assert_int_equal(kvfts_analyze_doc(&t, f->db, S(json)), 0);
    size_t n = kvfts_terms_count(t);
    d->terms = calloc(n + 1, sizeof *d->terms);
    d->nterms = 0;
    for (size_t i = 0; i < n; i++) {
        const kvfts_term *x = kvfts_terms_at(t, i);
        if (!strcmp(x->field, "w"))
            d->terms[d->nterms++] = strdup(x->term);
    }
    kvfts_terms_free(t);
    d->live = true;
}

static int huge_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Distinct terms of the live documents starting with p. */
static size_t huge_expansions(const hdoc *docs, const char *p)
{
    size_t cap = 1024, n = 0, pl = strlen(p);
    char **v = malloc(cap * sizeof *v);
    for (size_t i = 0; i < HUGE_DOCS; i++)
        for (size_t k = 0; docs[i].live && k < docs[i].nterms; k++)
            if (!strncmp(docs[i].terms[k], p, pl)) {
                if (n == cap)
                    v = realloc(v, (cap *= 2) * sizeof *v);
                v[n++] = docs[i].terms[k];
            }
    qsort(v, n, sizeof *v, huge_cmp);
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += i == 0 || strcmp(v[i], v[i - 1]) != 0;
    free(v);
    return d;
}

/* Every hit of q (limit 0), checked against the reference: the documents
 * with a term starting with p, scored as the prefix as one term.  With
 * bounds (o), the hits must be a subset.  Returns the total. */
static uint64_t huge_check(fx *f, const hdoc *docs, const char *q,
                           const char *p, const kvfts_search_options *bo,
                           bool *partial)
{
    size_t pl = strlen(p);
    double N = 0, total_len = 0, df = 0;
    static uint32_t tf[HUGE_DOCS];
    for (size_t i = 0; i < HUGE_DOCS; i++) {
        tf[i] = 0;
        if (!docs[i].live)
            continue;
        N++;
        total_len += (double)docs[i].nterms;
        for (size_t k = 0; k < docs[i].nterms; k++)
            tf[i] += strncmp(docs[i].terms[k], p, pl) == 0;
        df += tf[i] > 0;
    }
    kvfts_results *r = NULL;
    kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
    if (bo)
        o = *bo;
    o.limit = 0;
    o.keys_only = true;
    int rc = kvfts_search(&r, f->db, S(q), &o);
    if (rc)
        fail_msg("'%s': %s", q, kvfts_errmsg(f->db));
    *partial = kvfts_results_partial(r);
    uint64_t total = kvfts_results_total(r);
    if (!*partial && total != (uint64_t)df)
        fail_msg("'%s': %llu matches, the reference has %.0f", q,
                 (unsigned long long)total, df);
    if (*partial && total > (uint64_t)df)
        fail_msg("'%s' (partial): %llu matches, more than the reference's "
                 "%.0f", q, (unsigned long long)total, df);
    assert_int_equal(kvfts_results_count(r), total);
    const char *k;
    double score, prev = INFINITY;
    while (kvfts_results_next(r, &k, NULL, NULL, &score) == KVFTS_OK) {
        size_t i = (size_t)atoi(k + 1);
        assert_true(i < HUGE_DOCS);
        if (!docs[i].live || !tf[i])
            fail_msg("'%s': %s matched, not in the reference", q, k);
        if (score > prev)
            fail_msg("'%s': not in score order at %s", q, k);
        prev = score;
        if (*partial)     /* its idf counts the documents found */
            continue;
        double want = ref_bm25(N, df, tf[i] > 255 ? 255 : tf[i],
                               (double)docs[i].nterms, total_len / N);
        if (fabs(want - score) > 1e-9)
            fail_msg("'%s': %s scores %.15g, the reference %.15g", q, k,
                     score, want);
    }
    kvfts_results_free(r);
    return total;
}

static void test_prefix_huge(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, NULL);
    hdoc *docs = calloc(HUGE_DOCS, sizeof *docs);
    kvfts_batch *b = NULL;
    assert_int_equal(kvfts_batch_begin(&b, f.db), 0);
    for (size_t i = 0; i < HUGE_DOCS; i++) {
        snprintf(docs[i].key, sizeof docs[i].key, "d%04zu", i);
        hdoc_set(&f, &docs[i], huge_text());
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(docs[i].key),
                                           S(docs[i].json)), 0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    /* a second segment of replaces, then deletes */
    assert_int_equal(kvfts_batch_begin(&b, f.db), 0);
    for (int op = 0; op < 200; op++) {
        hdoc *d = &docs[rnd(HUGE_DOCS)];
        hdoc_set(&f, d, huge_text());
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(d->key),
                                           S(d->json)), 0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    for (int op = 0; op < 20; op++) {
        hdoc *d = &docs[rnd(HUGE_DOCS)];
        if (d->live)
            assert_int_equal(kvfts_del(f.db, S(d->key), 0), 0);
        d->live = false;
    }

    static const char *const prefixes[] = { "a", "c", "ab", "ca", "abc",
                                            "bca", "cc" };
    uint64_t counts[sizeof prefixes / sizeof *prefixes];
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        const char *p = prefixes[i];
        size_t terms = huge_expansions(docs, p);
        if (terms <= QRY_SCORED_EXPANSION)
            fail_msg("'%s*' expands to %zu terms: not a huge prefix", p,
                     terms);
        char q[32];
        bool partial;
        snprintf(q, sizeof q, "%s*", p);
        counts[i] = huge_check(&f, docs, q, p, NULL, &partial);
        assert_false(partial);
        snprintf(q, sizeof q, "w:%s*", p);
        assert_int_equal(huge_check(&f, docs, q, p, NULL, &partial),
                         counts[i]);
        assert_false(partial);
        printf("[ huge     ] %s*: %zu terms, %llu matches\n", p, terms,
               (unsigned long long)counts[i]);
        /* count mode agrees */
        kvfts_results *r = NULL;
        kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
        o.count_only = true;
        assert_int_equal(kvfts_search(&r, f.db, S(q), &o), 0);
        assert_int_equal(kvfts_results_total(r), counts[i]);
        kvfts_results_free(r);
    }
    /* under AND and NOT: the match set of the AND of two reference sets */
    {
        kvfts_results *r = NULL;
        kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
        o.count_only = true;
        assert_int_equal(kvfts_search(&r, f.db, S("ab* -w:abc*"), &o), 0);
        uint64_t want = 0;
        for (size_t i = 0; i < HUGE_DOCS; i++) {
            bool ab = false, abc = false;
            for (size_t k = 0; docs[i].live && k < docs[i].nterms; k++) {
                ab |= !strncmp(docs[i].terms[k], "ab", 2);
                abc |= !strncmp(docs[i].terms[k], "abc", 3);
            }
            want += ab && !abc;
        }
        assert_int_equal(kvfts_results_total(r), want);
        kvfts_results_free(r);
    }

    /* The memory bound: ids past it are left out, flagged partial; with
     * exact, KVFTS_ELIMIT. */
    kvfts_search_options bo = KVFTS_SEARCH_OPTIONS_INIT;
    bo.mem_limit = HUGE_DOCS / 2;
    bool partial;
    uint64_t n = huge_check(&f, docs, "ab*", "ab", &bo, &partial);
    assert_true(partial);
    assert_true(n > 0 && n < counts[2]);
    bo.exact = true;
    kvfts_results *r = NULL;
    assert_int_equal(kvfts_search(&r, f.db, S("x OR ab*"), &bo),
                     KVFTS_ELIMIT);
    assert_null(r);
    assert_string_equal(kvfts_errmsg(f.db), "query: prefix 'ab*' at 5: its "
                        "expansion in field '_all' holds documents past the "
                        "memory limit of the search (a byte per document, "
                        "1500 bytes)");
    /* a bound not reached: complete, even with exact */
    bo.mem_limit = 1 << 20;
    assert_int_equal(huge_check(&f, docs, "ab*", "ab", &bo, &partial),
                     counts[2]);
    assert_false(partial);
    /* The time bound: 1 ms may or may not cut it on this machine; either
     * way the answer is consistent (a subset, flagged, or all of it). */
    bo.exact = false;
    bo.time_limit_ms = 1;
    n = huge_check(&f, docs, "a*", "a", &bo, &partial);
    assert_true(partial ? n <= counts[0] : n == counts[0]);
    bo.exact = true;
    int rc = kvfts_search(&r, f.db, S("a*"), &bo);
    assert_true(rc == KVFTS_OK || rc == KVFTS_ELIMIT);
    if (rc == KVFTS_OK) {
        assert_false(kvfts_results_partial(r));
        kvfts_results_free(r);
    }

#ifdef HAVE_SQLITE
    /* FTS5 (the reference for counts) gives the same counts. */
    sqlite3 *sq;
    assert_int_equal(sqlite3_open(":memory:", &sq), SQLITE_OK);
    assert_int_equal(sqlite3_exec(sq, "CREATE VIRTUAL TABLE t USING fts5(w,"
                                  " tokenize='unicode61 remove_diacritics "
                                  "2')", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_stmt *ins, *cnt;
    assert_int_equal(sqlite3_prepare_v2(sq, "INSERT INTO t(w) VALUES (?)", -1,
                                        &ins, NULL), SQLITE_OK);
    for (size_t i = 0; i < HUGE_DOCS; i++) {
        if (!docs[i].live)
            continue;
        const char *w = docs[i].json + 6;   /* {"w":"...": the words */
        sqlite3_reset(ins);
        sqlite3_bind_text(ins, 1, w, (int)strlen(w) - 2, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
    }
    sqlite3_finalize(ins);
    assert_int_equal(sqlite3_prepare_v2(sq, "SELECT count(*) FROM t WHERE t "
                                        "MATCH ?", -1, &cnt, NULL),
                     SQLITE_OK);
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        char q[32];
        snprintf(q, sizeof q, "%s*", prefixes[i]);
        sqlite3_reset(cnt);
        sqlite3_bind_text(cnt, 1, q, -1, SQLITE_TRANSIENT);
        assert_int_equal(sqlite3_step(cnt), SQLITE_ROW);
        assert_int_equal((uint64_t)sqlite3_column_int64(cnt, 0), counts[i]);
    }
    sqlite3_finalize(cnt);
    sqlite3_close(sq);
#endif
    for (size_t i = 0; i < HUGE_DOCS; i++) {
        for (size_t k = 0; k < docs[i].nterms; k++)
            free(docs[i].terms[k]);
        free(docs[i].terms);
        free(docs[i].json);
    }
    free(docs);
    fx_close(&f);
}

static void test_positions_off(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "{\"analysis\":{\"positions\":false}}");
    put(&f, "a", "{\"t\":\"the lazy dog\"}");
    put(&f, "b", "{\"t\":\"dog lazy\"}");
    kvfts_results *r = NULL;
    assert_int_equal(kvfts_search(&r, f.db, S("fox OR \"lazy dog\""), NULL),
                     KVFTS_EINVAL);
    assert_string_equal(kvfts_errmsg(f.db), "query: phrase needs positions, "
                        "which the config turns off (\"positions\": false) "
                        "at 7");
    /* a hyphenated word is an AND without positions */
    char got[256];
    assert_int_equal(search_keys(&f, "lazy-dog", got, sizeof got, NULL), 0);
    assert_string_equal(got, "b a");
    fx_close(&f);
}

/* ---- differential against SQLite FTS5 ------------------------------------ */

#ifdef HAVE_SQLITE
#define NCOLS 7
static const char *const cols[NCOLS] = {
    "package", "section", "maintainer", "version", "description", "homepage",
    "depends"
};

typedef struct loader {
    char *vals[NCOLS];
    size_t lens[NCOLS];
} loader;

static int leaf(void *payload, const char *path, size_t path_len,
                kv_json_type type, const char *value, size_t value_len,
                size_t pos)
{
    loader *l = payload;
    (void)pos;
    if (type != KV_JSON_STRING)
        return 0;
    for (int i = 0; i < NCOLS; i++)
        if (strlen(cols[i]) == path_len && !memcmp(cols[i], path, path_len)) {
            free(l->vals[i]);
            l->vals[i] = strndup(value, value_len);
            l->lens[i] = value_len;
        }
    return 0;
}

typedef struct diffdb {
    sqlite3 *sq;
    fx f;
    size_t ndocs;
} diffdb;

/* Load a JSON Lines file into both engines: kvfts key = package. */
static void diff_load(diffdb *d, const char *path, bool via_command)
{
    assert_int_equal(sqlite3_open(":memory:", &d->sq), SQLITE_OK);
    char *e = NULL;
    int rc = sqlite3_exec(d->sq, "CREATE VIRTUAL TABLE t USING fts5(package, "
                          "section, maintainer, version, description, "
                          "homepage, depends, tokenize = 'unicode61 "
                          "remove_diacritics 2', detail = full);"
                          "CREATE VIRTUAL TABLE v USING fts5vocab(t, "
                          "instance); BEGIN", NULL, NULL, &e);
    if (rc)
        fail_msg("sqlite: %s", e);
    sqlite3_stmt *ins;
    assert_int_equal(sqlite3_prepare_v2(d->sq, "INSERT INTO t(rowid, package,"
                                        " section, maintainer, version, "
                                        "description, homepage, depends) "
                                        "VALUES (?,?,?,?,?,?,?,?)", -1, &ins,
                                        NULL), SQLITE_OK);
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    kv_err err = KV_ERR_INIT;
    kvfts_batch *b = NULL;
    if (!via_command)
        assert_int_equal(kvfts_batch_begin(&b, d->f.db), 0);
    d->ndocs = 0;
    while ((n = getline(&line, &cap, in)) > 0) {
        loader l = { { 0 }, { 0 } };
        assert_int_equal(kv_json_walk(line, (size_t)n, NULL, leaf, &l, &err),
                         0);
        sqlite3_reset(ins);
        sqlite3_bind_int64(ins, 1, (sqlite3_int64)++d->ndocs);
        for (int i = 0; i < NCOLS; i++)
            sqlite3_bind_text(ins, 2 + i, l.vals[i] ? l.vals[i] : "", -1,
                              SQLITE_TRANSIENT);
        assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
        if (b)
            assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT,
                                               S(l.vals[0]), line,
                                               (size_t)n), 0);
        for (int i = 0; i < NCOLS; i++)
            free(l.vals[i]);
    }
    free(line);
    fclose(in);
    sqlite3_finalize(ins);
    assert_int_equal(sqlite3_exec(d->sq, "COMMIT", NULL, NULL, NULL), 0);
    if (b) {
        assert_int_equal(kvfts_batch_commit(b), 0);
        kvfts_batch_free(b);
    } else {
        const char *bin = getenv("KVFTS_BIN");
        assert_non_null(bin);
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "'%s' -d '%s' load '%s' --key '{package}' "
                 "--quiet >/dev/null", bin, d->f.dir, path);
        kvfts_close(d->f.db);
        assert_int_equal(system(cmd), 0);
        kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
        assert_int_equal(kvfts_open(&d->f.db, d->f.dir, &o), 0);
    }
}

/* FTS5's own tokenizer (unicode61 remove_diacritics 2), to explain a
 * difference: the terms of one text, in order. */
typedef struct ftoks {
    char buf[1 << 16];
    size_t len;
    size_t n;
} ftoks;

static int fts_cb(void *ctx, int flags, const char *t, int n, int start,
                  int end)
{
    ftoks *f = ctx;
    (void)flags;
    (void)start;
    (void)end;
    if (f->len + (size_t)n + 1 < sizeof f->buf) {
        memcpy(f->buf + f->len, t, (size_t)n);
        f->len += (size_t)n;
        f->buf[f->len++] = ' ';
    }
    f->n++;
    return SQLITE_OK;
}

/* Do both engines give one document the same terms, field by field?  If
 * not, *why says where they part. */
static bool same_tokens(diffdb *d, sqlite3_int64 rowid, const char *key,
                        char *why, size_t whycap)
{
    fts5_api *api = NULL;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(d->sq, "SELECT fts5(?1)", -1, &st,
                                        NULL), SQLITE_OK);
    sqlite3_bind_pointer(st, 1, &api, "fts5_api_ptr", NULL);
    sqlite3_step(st);
    sqlite3_finalize(st);
    assert_non_null(api);
    void *ud = NULL;
    fts5_tokenizer mod;
    Fts5Tokenizer *tok = NULL;
    assert_int_equal(api->xFindTokenizer(api, "unicode61", &ud, &mod),
                     SQLITE_OK);
    const char *args[] = { "remove_diacritics", "2" };
    assert_int_equal(mod.xCreate(ud, args, 2, &tok), SQLITE_OK);

    char *json = NULL;
    size_t jl;
    assert_int_equal(kvfts_get(&json, &jl, NULL, d->f.db, S(key)), 0);
    kvfts_terms *t = NULL;
    assert_int_equal(kvfts_analyze_doc(&t, d->f.db, json, jl), 0);
    assert_int_equal(sqlite3_prepare_v2(d->sq, "SELECT package, section, "
                                        "maintainer, version, description, "
                                        "homepage, depends FROM t WHERE "
                                        "rowid = ?", -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(st, 1, rowid);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    static ftoks theirs, ours;
    bool same = true;
    for (int c = 0; c < NCOLS && same; c++) {
        theirs.len = theirs.n = ours.len = ours.n = 0;
        const char *text = (const char *)sqlite3_column_text(st, c);
        mod.xTokenize(tok, &theirs, FTS5_TOKENIZE_DOCUMENT, text,
                      (int)strlen(text), fts_cb);
        for (size_t i = 0; i < kvfts_terms_count(t); i++) {
            const kvfts_term *x = kvfts_terms_at(t, i);
            if (!strcmp(x->field, cols[c]))
                fts_cb(&ours, 0, x->term, (int)x->term_len, 0, 0);
        }
        if (ours.len != theirs.len || memcmp(ours.buf, theirs.buf,
                                             ours.len)) {
            size_t k = 0;
            while (k < ours.len && k < theirs.len && ours.buf[k] ==
                   theirs.buf[k])
                k++;
            while (k > 0 && ours.buf[k - 1] != ' ')
                k--;
            snprintf(why, whycap, "field %s: kvfts '%.40s' / FTS5 '%.40s'",
                     cols[c], ours.buf + k, theirs.buf + k);
            same = false;
        }
    }
    sqlite3_finalize(st);
    mod.xDelete(tok);
    kvfts_terms_free(t);
    kvfts_free(json);
    return same;
}

typedef struct qpair {
    const char *kvfts, *fts5;
    const char *klass;
} qpair;

static const qpair queries[] = {
    /* single terms, common and rare */
    { "library", "library", "term" },
    { "python", "python", "term" },
    { "the", "the", "term" },
    { "gnome", "gnome", "term" },
    { "documentation", "documentation", "term" },
    { "kernel", "kernel", "term" },
    { "emulator", "emulator", "term" },
    { "asterisk", "asterisk", "rare term" },
    { "opencv", "opencv", "rare term" },
    { "norwegian", "norwegian", "rare term" },
    { "adwaita", "adwaita", "rare term" },
    { "zzznothing", "zzznothing", "absent term" },
    /* 2- and 3-term AND */
    { "python library", "python AND library", "2 AND" },
    { "development files", "development AND files", "2 AND" },
    { "qt port", "qt AND port", "2 AND" },
    { "perl module", "perl AND module", "2 AND" },
    { "debug symbols", "debug AND symbols", "2 AND" },
    { "python 3 module", "python AND 3 AND module", "3 AND" },
    { "gnu binary utilities", "gnu AND binary AND utilities", "3 AND" },
    { "data files for", "data AND files AND for", "3 AND" },
    /* OR */
    { "perl OR ruby", "perl OR ruby", "OR" },
    { "gnome OR kde OR xfce", "gnome OR kde OR xfce", "OR" },
    { "(python OR perl) module", "(python OR perl) AND module", "OR" },
    /* NOT */
    { "python -library", "python NOT library", "NOT" },
    { "library NOT development", "library NOT development", "NOT" },
    { "files -(data OR documentation)", "files NOT (data OR documentation)",
      "NOT" },
    /* phrases */
    { "\"development files\"", "\"development files\"", "phrase" },
    { "\"debug symbols\"", "\"debug symbols\"", "phrase" },
    { "\"python 3\"", "\"python 3\"", "phrase" },
    { "\"command line tool\"", "\"command line tool\"", "phrase" },
    { "\"for the\"", "\"for the\"", "phrase" },
    { "wi-fi", "\"wi fi\"", "phrase" },
    /* prefixes */
    { "librar*", "librar*", "prefix" },
    { "libg*", "libg*", "prefix" },
    { "pyth*", "pyth*", "prefix" },
    { "doc*", "doc*", "prefix" },
    { "xz*", "xz*", "prefix" },
    { "a*", "a*", "prefix" },     /* the catalog: > 1,000 expansions */
    { "emul* game*", "emul* AND game*", "prefix" },
    /* field-scoped */
    { "package:python", "package : python", "field" },
    { "description:python", "description : python", "field" },
    { "package:libx*", "package : libx*", "field" },
    { "package:(perl OR ruby)", "package : (perl OR ruby)", "field" },
    { "description:\"debug symbols\"", "description : \"debug symbols\"",
      "field" },
    { "package:dbg library", "package : dbg AND library", "field" },
    { "python -package:python", "python NOT package : python", "field" },
};

#define MAXK 100000

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run every query on both; returns the number of documents that differ
 * (all explained: the test fails on an unexplained one). */
static size_t diff_queries(diffdb *d, const char *what)
{
    size_t explained = 0;
    sqlite3_stmt *st, *pk;
    assert_int_equal(sqlite3_prepare_v2(d->sq, "SELECT package FROM t WHERE t"
                                        " MATCH ? ORDER BY package", -1, &st,
                                        NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(d->sq, "SELECT rowid FROM t WHERE "
                                        "package = ?", -1, &pk, NULL),
                     SQLITE_OK);
    char **ours = malloc(MAXK * sizeof *ours), **theirs = malloc(MAXK *
                                                                  sizeof
                                                                  *theirs);
    size_t total_matches = 0;
    for (size_t qi = 0; qi < sizeof queries / sizeof *queries; qi++) {
        const qpair *q = &queries[qi];
        size_t no = 0, nt = 0;
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, q->fts5, -1, SQLITE_STATIC);
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW && nt < MAXK)
            theirs[nt++] = strdup((const char *)sqlite3_column_text(st, 0));
        if (rc != SQLITE_DONE)
            fail_msg("fts5 '%s': %s", q->fts5, sqlite3_errmsg(d->sq));
        kvfts_results *r = NULL;
        kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
        o.limit = 0;
        o.keys_only = true;
        o.sort = KVFTS_SORT_KEY;
        if (kvfts_search(&r, d->f.db, S(q->kvfts), &o))
            fail_msg("kvfts '%s': %s", q->kvfts, kvfts_errmsg(d->f.db));
        const char *k;
        while (kvfts_results_next(r, &k, NULL, NULL, NULL) == KVFTS_OK &&
               no < MAXK)
            ours[no++] = strdup(k);
        kvfts_results_free(r);
        qsort(theirs, nt, sizeof *theirs, cmp_str);   /* byte order */
        size_t i = 0, j = 0, ndiff = 0;
        while (i < no || j < nt) {
            int c = i == no ? 1 : j == nt ? -1 : strcmp(ours[i], theirs[j]);
            if (c == 0) {
                i++;
                j++;
                continue;
            }
            const char *key = c < 0 ? ours[i++] : theirs[j++];
            sqlite3_reset(pk);
            sqlite3_bind_text(pk, 1, key, -1, SQLITE_STATIC);
            assert_int_equal(sqlite3_step(pk), SQLITE_ROW);
            char why[300] = "";
            if (same_tokens(d, sqlite3_column_int64(pk, 0), key, why,
                            sizeof why))
                fail_msg("%s: query %s ('%s' / FTS5 '%s'): '%s' only in %s, "
                         "and both engines tokenize it alike: unexplained",
                         what, q->klass, q->kvfts, q->fts5, key,
                         c < 0 ? "kvfts" : "FTS5");
            printf("[ diff     ] %s: '%s': %s only in %s -- explained: the "
                   "tokenizers differ on it (README \"Analysis\"): %s\n",
                   what, q->kvfts, key, c < 0 ? "kvfts" : "FTS5", why);
            ndiff++;
        }
        explained += ndiff;
        total_matches += no;
        printf("[ diff     ] %s: %-12s %-36s %6zu matches, %zu differ\n",
               what, q->klass, q->kvfts, no, ndiff);
        for (size_t x = 0; x < no; x++)
            free(ours[x]);
        for (size_t x = 0; x < nt; x++)
            free(theirs[x]);
    }
    printf("[ diff     ] %s: %zu queries, %zu matches in all, %zu explained "
           "differences\n", what, sizeof queries / sizeof *queries,
           total_matches, explained);
    free(ours);
    free(theirs);
    sqlite3_finalize(st);
    sqlite3_finalize(pk);
    return explained;
}

static void test_differential_fts5(void **state)
{
    (void)state;
    assert_true(sizeof queries / sizeof *queries >= 40);
    const char *src = getenv("KVFTS_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/tok_debian_sample.jsonl",
             src ? src : "..");
    diffdb d;
    fx_open(&d.f, NULL);
    diff_load(&d, path, false);
    assert_int_equal(d.ndocs, 400);
    /* the sample is the fixed, deterministic part: no difference at all */
    assert_int_equal(diff_queries(&d, "sample"), 0);
    sqlite3_close(d.sq);
    fx_close(&d.f);

    /* The whole catalog when apt works (KVFTS_QUERY_FULL_CATALOG=0: off). */
    const char *full = getenv("KVFTS_QUERY_FULL_CATALOG");
    if (full && *full == '0') {
        printf("[ diff     ] KVFTS_QUERY_FULL_CATALOG=0: full-catalog "
               "comparison not run (the sample was)\n");
        return;
    }
    if (system("apt-cache dumpavail 2>/dev/null | head -c 1 | grep -q .")) {
        printf("[ diff     ] apt-cache dumpavail gives nothing here: "
               "full-catalog comparison not run (the sample was)\n");
        return;
    }
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "KVFTS_BIN='%s' bash '%s/tools/debian-corpus.sh'"
             " debian-catalog.jsonl 2>/dev/null", getenv("KVFTS_BIN"),
             src ? src : "..");
    assert_int_equal(system(cmd), 0);
    fx_open(&d.f, NULL);
    diff_load(&d, "debian-catalog.jsonl", true);
    assert_true(d.ndocs > 10000);
    diff_queries(&d, "catalog");
    sqlite3_close(d.sq);
    fx_close(&d.f);
}
#else
static void test_differential_fts5(void **state)
{
    (void)state;
    fail_msg("sqlite3.h not found: the FTS5 differential test cannot run");
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_forms),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_seeds),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_topk_counts),
        cmocka_unit_test(test_field_lists),
        cmocka_unit_test(test_phrase_after_deletion),
        cmocka_unit_test(test_phrase_rounds_skipped),
        cmocka_unit_test(test_paging_sort_count),
        cmocka_unit_test(test_prefix_cap),
        cmocka_unit_test(test_prefix_union),
        cmocka_unit_test(test_prefix_huge),
        cmocka_unit_test(test_positions_off),
        cmocka_unit_test(test_differential_fts5),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
