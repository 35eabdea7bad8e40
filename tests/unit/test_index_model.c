/*
 * test_index_model.c -- the inverted index (index/include/index.h and
 * index/idx_int.h) on a database, driven through the writer directly
 * (kv_env + idx_writer, as lib/kvfts_write.c drives it) and compared with
 * a model.
 *
 * The model is the live documents.  Every (field, term)'s live postings --
 * doc ids, tfs, views with their columns and positions -- its exact count,
 * the term lists, prefix walks, field statistics and document lengths are
 * computed from them by the tokenizer itself (tok_analysis_run_doc(): the
 * model needs no knowledge of stemming or of `_all`), and compared with
 * what the readers give: idx_term_get, idx_postings_next and _skip_to
 * (mixed, to random targets, at random decode levels; block-max bounds),
 * the postings of any field (whether a view holds a field and `_all` at
 * once or apart), idx_terms_scan, idx_prefix_postings, idx_get_stats,
 * idx_field_stats, the length reader; idx_check() must find nothing, and
 * idx_rebuild() must give the same answers (a segment per document, merged
 * by the policy, then one segment).
 *
 * A seeded random run (KVFTS_TEST_SEED=N replays another) of puts,
 * replaces (whole, one field, one word, identical, reordered) and deletes
 * of documents whose earlier versions live in older segments, with
 * flushes, commits, aborts, analysis workers, and merges (the policy's and
 * everything, in bounded steps, a merge left under way while writes go on)
 * runs that comparison after each phase, under two configs (stemmed,
 * keyword and excluded fields, numbers and booleans; no positions).  Half
 * the time it then rebuilds the index (from several segments with
 * deletions, often in the middle of a merge), compares the rebuilt one
 * too, before and after merging it, and commits it, the run going on
 * writing over it, or aborts it (rebuild equivalence).  A
 * bigger index is merged in the smallest steps with writes and checks in
 * between.  Directed tests: block boundaries and a term emptied by
 * deletions (before and after merges), skip_to across blocks and segments,
 * a replaced document in a prefix walk.
 *
 * KVFTS_TEST_ONLY=PATTERN runs the tests whose names match.
 */
#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "idx_int.h"
#include <string.h>

#define S(x) x, strlen(x)

/* A small deterministic PRNG (xorshift64*), so failures reproduce. */
static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 33) % n;
}

static char *xstrndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    assert_non_null(p);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

/* ---- the index against a model of the live documents ------------------- */

/* Interned strings: the model's fields and terms compare as pointers. */
typedef struct pool {
    char **s;
    uint32_t n, cap;
    uint32_t *slot;        /* string index + 1; 0: empty */
    uint32_t nslot;        /* a power of two, > 2 n */
} pool;

static uint32_t hash_bytes(const char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 16777619u;
    return h;
}

static void pool_insert(pool *P, uint32_t i)
{
    uint32_t h = hash_bytes(P->s[i], strlen(P->s[i])) & (P->nslot - 1);
    while (P->slot[h])
        h = (h + 1) & (P->nslot - 1);
    P->slot[h] = i + 1;
}

static const char *intern(pool *P, const char *s, size_t n)
{
    if ((P->n + 1) * 2 >= P->nslot) {
        free(P->slot);
        P->nslot = P->nslot ? P->nslot * 2 : 1024;
        P->slot = calloc(P->nslot, sizeof *P->slot);
        assert_non_null(P->slot);
        for (uint32_t i = 0; i < P->n; i++)
            pool_insert(P, i);
    }
    uint32_t h = hash_bytes(s, n) & (P->nslot - 1);
    for (; P->slot[h]; h = (h + 1) & (P->nslot - 1)) {
        const char *t = P->s[P->slot[h] - 1];
        if (strlen(t) == n && memcmp(t, s, n) == 0)
            return t;
    }
    if (P->n == P->cap) {
        P->cap = P->cap ? P->cap * 2 : 256;
        P->s = realloc(P->s, P->cap * sizeof *P->s);
        assert_non_null(P->s);
    }
    P->s[P->n] = xstrndup(s, n);
    P->slot[h] = ++P->n;
    return P->s[P->n - 1];
}

static void pool_free(pool *P)
{
    for (uint32_t i = 0; i < P->n; i++)
        free(P->s[i]);
    free(P->s);
    free(P->slot);
    memset(P, 0, sizeof *P);
}

/* Documents are made of parts, so that a replace can change one. */
#define MAX_BODY 24
typedef struct dparts {
    uint8_t title[4], ntitle;      /* 0: no title */
    uint16_t body[MAX_BODY];
    uint8_t nbody;
    bool has_body;
    uint8_t tags[3], ntags;
    bool has_tags;
    int8_t n, color;               /* -1: absent */
    bool skip, flag;
} dparts;

static const char *const title_words[] = {
    "alpha", "beta", "gamma", "delta", "echo", "fox", "golf", "Hotel"
};
static const char *const body_words[] = {
    "running", "runs", "run", "cats", "cat", "happy", "happily", "jumps",
    "jumping", "alpha", "beta", "fox", "quick", "brown", "lazy", "dog",
    "Caf\xc3\xa9", "STRASSE", "connection", "connected", "the", "rare"
};
static const char *const tag_words[] = {
    "red", "green", "blue", "big cat", "alpha", "Fox"
};
static const char *const colors[] = { "red", "blue", "cyan" };
#define NELEM(a) (sizeof (a) / sizeof *(a))

/* Fields a document may have: every one is checked, live or not. */
static const char *const all_fields[] = {
    "_all", "title", "body", "tags", "n", "meta.color", "flag", "skip"
};

typedef struct mdoc {
    bool live;
    uint32_t docid;
    uint64_t wflush;       /* flushes done before its last write */
    dparts parts;
    char *json;
} mdoc;

typedef struct model {
    uint64_t seed;
    const char *cfg;
    size_t cfg_len;
    bool positions;
    uint32_t nkeys;
    uint32_t big_vocab;    /* body words "w0".."wN" instead (0: the list) */
    char *dir;
    kv_env *env;
    idx_writer *w;
    tok_analysis *an;
    kv_txn *txn;
    mdoc *doc, *saved;     /* now; at the start of the transaction */
    kv_buf old;
    unsigned workers;
    /* what a run went through */
    uint64_t flushes, commits, aborts, old_replaces, old_deletes;
    uint64_t merge_steps, merges_done, all_merges, checks, checks_merging;
    uint64_t whole_merges; /* merges done in one transaction */
    uint64_t worker_ops;   /* operations analyzed by worker threads */
    uint64_t rebuilds;     /* rebuilds checked during a run, */
    uint64_t rebuilds_multi;      /* the index then in several segments */
    uint64_t rebuilds_merging;    /* a merge then under way */
    uint64_t rebuilds_kept;       /* committed: the run goes on from it */
    uint64_t rebuilds_left_merging;  /* committed in the middle of a merge */
    /* A handle's dictionary cache, kept across the run's committed
     * snapshots (every other check reads through it); small, so that it
     * fills and starts again. */
    idx_dict_cache *dict;
    uint64_t dict_checks, dict_full_seen;
} model;

static void random_parts(model *m, dparts *p)
{
    memset(p, 0, sizeof *p);
    p->ntitle = (uint8_t)rnd(5);
    for (uint32_t i = 0; i < p->ntitle; i++)
        p->title[i] = (uint8_t)rnd(NELEM(title_words));
    p->has_body = rnd(6) != 0;
    p->nbody = (uint8_t)rnd(m->big_vocab ? MAX_BODY + 1 : 17);
    for (uint32_t i = 0; i < p->nbody; i++) {
        if (m->big_vocab)    /* a few common words, many rare ones */
            p->body[i] = (uint16_t)(rnd(3) ? rnd(20) : rnd(m->big_vocab));
        else
            p->body[i] = (uint16_t)(rnd(8) ? rnd(NELEM(body_words) - 1)
                                           : NELEM(body_words) - 1);
    }
    p->has_tags = rnd(2);
    p->ntags = (uint8_t)rnd(4);
    for (uint32_t i = 0; i < p->ntags; i++)
        p->tags[i] = (uint8_t)rnd(NELEM(tag_words));
    p->n = (int8_t)(rnd(3) ? (int)rnd(5) : -1);
    p->color = (int8_t)(rnd(3) ? (int)rnd(3) : -1);
    p->skip = rnd(4) == 0;
    p->flag = rnd(5) == 0;
}

/* Change one part of p. */
static void change_part(model *m, dparts *p)
{
    dparts r;
    random_parts(m, &r);
    switch (rnd(6)) {
    case 0:
        memcpy(p->title, r.title, sizeof p->title);
        p->ntitle = r.ntitle;
        break;
    case 1:
        memcpy(p->body, r.body, sizeof p->body);
        p->nbody = r.nbody;
        p->has_body = r.has_body;
        break;
    case 2:
        if (p->nbody)      /* one word of the body */
            p->body[rnd(p->nbody)] = r.body[0];
        break;
    case 3:
        memcpy(p->tags, r.tags, sizeof p->tags);
        p->ntags = r.ntags;
        p->has_tags = r.has_tags;
        break;
    case 4:
        p->n = r.n;
        p->flag = r.flag;
        break;
    default:
        p->color = r.color;
        p->skip = r.skip;
        break;
    }
}

static void shuffle_body(dparts *p)
{
    for (uint32_t i = p->nbody; i > 1; i--) {
        uint32_t j = rnd(i);
        uint16_t t = p->body[i - 1];
        p->body[i - 1] = p->body[j];
        p->body[j] = t;
    }
}

static void jput(char *buf, size_t cap, size_t *k, bool *first,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void jput(char *buf, size_t cap, size_t *k, bool *first,
                 const char *fmt, ...)
{
    if (first) {
        if (!*first)
            buf[(*k)++] = ',';
        *first = false;
    }
    va_list ap;
    va_start(ap, fmt);
    *k += (size_t)vsnprintf(buf + *k, cap - *k, fmt, ap);
    va_end(ap);
    assert_true(*k < cap);
}

/* Compact JSON, as the library stores it. */
/* kv_json_walk leaf callback: keep each non-null leaf (as the writer's
 * path check does) for idx_doc_write's leaves. */
static int keep_leaf(void *payload, const char *path, size_t plen,
                     kv_json_type type, const char *v, size_t vlen,
                     size_t pos)
{
    if (type == KV_JSON_NULL)
        return KVFTS_OK;
    return kv_leaves_add(payload, path, plen, type, v, vlen, pos, NULL);
}

static char *render(const model *m, const dparts *p)
{
    char buf[2048];
    size_t k = 0;
    bool first = true;
    buf[k++] = '{';
    if (p->ntitle) {
        jput(buf, sizeof buf, &k, &first, "\"title\":\"");
        for (uint32_t i = 0; i < p->ntitle; i++)
            jput(buf, sizeof buf, &k, NULL, "%s%s", i ? " " : "",
                 title_words[p->title[i]]);
        jput(buf, sizeof buf, &k, NULL, "\"");
    }
    if (p->has_body) {
        jput(buf, sizeof buf, &k, &first, "\"body\":\"");
        for (uint32_t i = 0; i < p->nbody; i++) {
            if (m->big_vocab)
                jput(buf, sizeof buf, &k, NULL, "%sw%u", i ? " " : "",
                     (unsigned)p->body[i]);
            else
                jput(buf, sizeof buf, &k, NULL, "%s%s", i ? " " : "",
                     body_words[p->body[i]]);
        }
        jput(buf, sizeof buf, &k, NULL, "\"");
    }
    if (p->has_tags) {
        jput(buf, sizeof buf, &k, &first, "\"tags\":[");
        for (uint32_t i = 0; i < p->ntags; i++)
            jput(buf, sizeof buf, &k, NULL, "%s\"%s\"", i ? "," : "",
                 tag_words[p->tags[i]]);
        jput(buf, sizeof buf, &k, NULL, "]");
    }
    if (p->n >= 0)
        jput(buf, sizeof buf, &k, &first, "\"n\":%d", p->n);
    if (p->color >= 0)
        jput(buf, sizeof buf, &k, &first, "\"meta\":{\"color\":\"%s\"}",
             colors[p->color]);
    if (p->skip)
        jput(buf, sizeof buf, &k, &first, "\"skip\":\"never indexed\"");
    if (p->flag)
        jput(buf, sizeof buf, &k, &first, "\"flag\":true");
    jput(buf, sizeof buf, &k, NULL, "}");
    return xstrndup(buf, k);
}

/* ---- the model's expectations ------------------------------------------- */

typedef struct occ {       /* one term occurrence of a live document */
    const char *field, *term, *src;
    uint32_t docid, pos;
} occ;

typedef struct xview {     /* a document's view of a term from one source */
    const char *src;
    uint32_t fid;          /* the source field's id */
    uint32_t npos;         /* distinct positions (the tf) */
    const uint32_t *pos;
} xview;

typedef struct xdoc {
    uint32_t docid;
    uint32_t tf;           /* sum of its views' */
    uint32_t nv;
    xview *v;              /* ascending field id */
} xdoc;

typedef struct xterm {     /* a (field, term)'s live postings */
    const char *field, *term;
    uint32_t nd;
    xdoc *d;
} xterm;

typedef struct xlen {
    uint32_t docid;
    const char *field;
    uint32_t len;
} xlen;

typedef struct expect {
    pool P;
    occ *o;
    uint32_t no, ocap;
    uint32_t *pos;
    xview *v;
    xdoc *d;
    xterm *t;
    uint32_t nv, nd, nt;
    const char **terms;    /* distinct terms, byte order */
    uint32_t nterms;
    uint32_t *term_docs;   /* per distinct term: documents with it */
    uint64_t postings;     /* (term, document) pairs */
    xlen *len;
    uint32_t nlen;
    const char *fname[16]; /* field ids looked up */
    uint32_t fid[16];
    uint32_t nfid;
} expect;

static void expect_free(expect *x)
{
    pool_free(&x->P);
    free(x->o);
    free(x->pos);
    free(x->v);
    free(x->d);
    free(x->t);
    free(x->terms);
    free(x->term_docs);
    free(x->len);
    memset(x, 0, sizeof *x);
}

typedef struct collect_ctx {
    expect *x;
    uint32_t docid;
} collect_ctx;

static int on_occ(void *payload, const tok_term *t)
{
    collect_ctx *c = payload;
    expect *x = c->x;
    if (x->no == x->ocap) {
        x->ocap = x->ocap ? x->ocap * 2 : 4096;
        x->o = realloc(x->o, x->ocap * sizeof *x->o);
        assert_non_null(x->o);
    }
    x->o[x->no++] = (occ){ intern(&x->P, t->field, t->field_len),
                           intern(&x->P, t->term, t->term_len),
                           intern(&x->P, t->src, t->src_len), c->docid,
                           t->pos };
    return 0;
}

static int occ_cmp(const void *a, const void *b)
{
    const occ *x = a, *y = b;
    int c;
    if (x->field != y->field && (c = strcmp(x->field, y->field)))
        return c;
    if (x->term != y->term && (c = strcmp(x->term, y->term)))
        return c;
    if (x->docid != y->docid)
        return x->docid < y->docid ? -1 : 1;
    if (x->src != y->src && (c = strcmp(x->src, y->src)))
        return c;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int xlen_cmp(const void *a, const void *b)
{
    const xlen *x = a, *y = b;
    if (x->docid != y->docid)
        return x->docid < y->docid ? -1 : 1;
    return strcmp(x->field, y->field);
}

typedef struct tdoc {
    const char *term;
    uint32_t docid;
} tdoc;

static int tdoc_cmp(const void *a, const void *b)
{
    const tdoc *x = a, *y = b;
    int c = x->term == y->term ? 0 : strcmp(x->term, y->term);
    if (c)
        return c;
    return x->docid < y->docid ? -1 : x->docid > y->docid;
}

static uint32_t field_fid(expect *x, kv_txn *txn, const char *name)
{
    for (uint32_t i = 0; i < x->nfid; i++)
        if (x->fname[i] == name)
            return x->fid[i];
    kv_err err = KV_ERR_INIT;
    uint32_t id;
    assert_int_equal(idx_field_id(txn, name, strlen(name), &id, &err), 0);
    assert_true(x->nfid < 16);
    x->fname[x->nfid] = name;
    x->fid[x->nfid++] = id;
    return id;
}

/* The model: every (field, term) of the live documents, as the tokenizer
 * analyzes them, with the field ids of txn. */
static void expect_build(model *m, expect *x, kv_txn *txn)
{
    memset(x, 0, sizeof *x);
    kv_err err = KV_ERR_INIT;
    for (uint32_t s = 0; s < m->nkeys; s++) {
        const mdoc *d = &m->doc[s];
        if (!d->live)
            continue;
        collect_ctx c = { x, d->docid };
        int rc = tok_analysis_run_doc(m->an, d->json, strlen(d->json),
                                      on_occ, &c, &err);
        if (rc)
            fail_msg("analysis of %s: %s", d->json, err.msg);
    }
    if (x->no)
        qsort(x->o, x->no, sizeof *x->o, occ_cmp);
    uint32_t cap = x->no + 1;
    x->pos = malloc(cap * sizeof *x->pos);
    x->v = malloc(cap * sizeof *x->v);
    x->d = malloc(cap * sizeof *x->d);
    x->t = malloc(cap * sizeof *x->t);
    x->len = malloc(cap * sizeof *x->len);
    assert_true(x->pos && x->v && x->d && x->t && x->len);
    uint32_t np = 0;
    for (uint32_t i = 0; i < x->no; i++) {
        const occ *o = &x->o[i], *p = i ? &x->o[i - 1] : NULL;
        bool nt = !p || p->field != o->field || p->term != o->term;
        bool nd = nt || p->docid != o->docid;
        bool nv = nd || p->src != o->src;
        if (nt)
            x->t[x->nt++] = (xterm){ o->field, o->term, 0, x->d + x->nd };
        xterm *t = &x->t[x->nt - 1];
        if (nd) {
            x->d[x->nd++] = (xdoc){ o->docid, 0, 0, x->v + x->nv };
            t->nd++;
        }
        xdoc *d = &x->d[x->nd - 1];
        if (nv) {
            x->v[x->nv++] = (xview){ o->src, field_fid(x, txn, o->src), 0,
                                     x->pos + np };
            d->nv++;
        }
        xview *v = &x->v[x->nv - 1];
        /* the index keeps one of a position repeated in a view */
        if (v->npos && v->pos[v->npos - 1] == o->pos)
            continue;
        x->pos[np++] = o->pos;
        v->npos++;
        d->tf++;
    }
    /* Views by field id, as the index orders a document's columns. */
    for (uint32_t i = 0; i < x->nd; i++) {
        xdoc *d = &x->d[i];
        for (uint32_t a = 1; a < d->nv; a++)
            for (uint32_t b = a; b > 0 && d->v[b].fid < d->v[b - 1].fid;
                 b--) {
                xview t = d->v[b];
                d->v[b] = d->v[b - 1];
                d->v[b - 1] = t;
            }
        for (uint32_t a = 1; a < d->nv; a++)
            assert_true(d->v[a].fid > d->v[a - 1].fid);
        for (uint32_t a = 0; a < d->nv; a++)
            assert_true(d->v[a].fid > 0);
    }
    /* Distinct terms, (term, document) pairs, lengths. */
    x->terms = malloc((x->nt + 1) * sizeof *x->terms);
    tdoc *td = malloc((x->nd + 1) * sizeof *td);
    assert_true(x->terms && td);
    uint32_t ntd = 0;
    for (uint32_t i = 0; i < x->nt; i++) {
        x->terms[i] = x->t[i].term;
        for (uint32_t k = 0; k < x->t[i].nd; k++) {
            td[ntd++] = (tdoc){ x->t[i].term, x->t[i].d[k].docid };
            x->len[x->nlen++] = (xlen){ x->t[i].d[k].docid, x->t[i].field,
                                        x->t[i].d[k].tf };
        }
    }
    qsort(x->terms, x->nt, sizeof *x->terms, str_cmp);
    for (uint32_t i = 0; i < x->nt; i++)
        if (x->nterms == 0 || x->terms[x->nterms - 1] != x->terms[i])
            x->terms[x->nterms++] = x->terms[i];
    x->term_docs = calloc(x->nterms + 1, sizeof *x->term_docs);
    qsort(td, ntd, sizeof *td, tdoc_cmp);
    for (uint32_t i = 0, k = 0; i < ntd; i++) {
        if (i && td[i].term == td[i - 1].term &&
            td[i].docid == td[i - 1].docid)
            continue;
        while (x->terms[k] != td[i].term)
            k++;
        x->term_docs[k]++;
        x->postings++;
    }
    free(td);
    qsort(x->len, x->nlen, sizeof *x->len, xlen_cmp);
    uint32_t u = 0;
    for (uint32_t i = 0; i < x->nlen; i++) {
        if (u && x->len[u - 1].docid == x->len[i].docid &&
            x->len[u - 1].field == x->len[i].field)
            x->len[u - 1].len += x->len[i].len;
        else
            x->len[u++] = x->len[i];
    }
    x->nlen = u;
}

/* ---- comparing the index with the model ------------------------------- */

typedef struct mcheck {
    model *m;
    kv_txn *txn;
    idx_reader *r;
    expect x;
    const char *what;
} mcheck;

#define MFAIL(c, ...)                                                       \
    do {                                                                    \
        print_error("%s (seed %llu): ", (c)->what,                         \
                    (unsigned long long)(c)->m->seed);                      \
        fail_msg(__VA_ARGS__);                                              \
    } while (0)

static bool is_all(const char *field)
{
    return strcmp(field, TOK_ALL_FIELD) == 0;
}

/* The current posting's views, tf and (with pos) positions against xd. */
static void check_views(mcheck *c, const xterm *t, const xdoc *xd,
                        idx_postings *p, bool pos)
{
    uint32_t tf = idx_postings_tf(p);
    if (tf != xd->tf)
        MFAIL(c, "fts::%s::%s doc %u: tf %u, expected %u", t->field, t->term,
              xd->docid, tf, xd->tf);
    uint32_t nv;
    const idx_view *v = idx_postings_views(p, &nv);
    if (nv != xd->nv)
        MFAIL(c, "fts::%s::%s doc %u: %u views, expected %u", t->field,
              t->term, xd->docid, nv, xd->nv);
    unsigned kind = is_all(t->field) ? IDX_KIND_ALL : IDX_KIND_FIELD;
    for (uint32_t i = 0; i < nv; i++) {
        const xview *e = &xd->v[i];
        if (v[i].col >> 2 != e->fid || !(v[i].col & kind) ||
            v[i].tf != e->npos)
            MFAIL(c, "fts::%s::%s doc %u: view %u is column %u tf %u, "
                  "expected field %u (%s) tf %u", t->field, t->term,
                  xd->docid, i, v[i].col, v[i].tf, e->fid, e->src, e->npos);
        if (!c->m->positions) {
            assert_null(v[i].pos);
        } else if (pos) {
            assert_non_null(v[i].pos);
            if (memcmp(v[i].pos, e->pos, (size_t)e->npos * 4) != 0)
                MFAIL(c, "fts::%s::%s doc %u: positions differ in view %u",
                      t->field, t->term, xd->docid, i);
        }
    }
}

/* Decode the current posting to a random level and check what it has. */
static void check_current(mcheck *c, const xterm *t, const xdoc *xd,
                          idx_postings *p)
{
    kv_err err = KV_ERR_INIT;
    uint32_t level = rnd(3);
    if (level == 0)
        return;
    int rc = idx_postings_need(p, level == 1 ? IDX_DECODE_TFS
                                             : IDX_DECODE_POSITIONS, &err);
    if (rc)
        MFAIL(c, "fts::%s::%s doc %u: need: %s", t->field, t->term,
              xd->docid, err.msg);
    check_views(c, t, xd, p, level == 2);
}

/* One (field, term): its count, then its postings with next, then with
 * skip_to mixed with next. */
static void check_term(mcheck *c, const xterm *t)
{
    kv_err err = KV_ERR_INIT;
    size_t fl = strlen(t->field), tl = strlen(t->term);
    idx_term_info info;
    int rc = idx_term_get(c->r, t->field, fl, t->term, tl, &info, &err);
    if (rc || info.df != t->nd)
        MFAIL(c, "fts::%s::%s: count %llu (%s), expected %u", t->field,
              t->term, (unsigned long long)info.df, rc ? err.msg : "ok",
              t->nd);
    assert_int_equal(info.positions, c->m->positions);
    idx_postings *p;
    rc = idx_postings_open(&p, c->r, t->field, fl, t->term, tl, &err);
    if (rc)
        MFAIL(c, "fts::%s::%s: open: %s", t->field, t->term, err.msg);
    assert_int_equal(idx_postings_info(p)->df, t->nd);
    uint32_t last_blast = 0, last_bmax = 0;
    for (uint32_t k = 0; k < t->nd; k++) {
        rc = idx_postings_next(p, &err);
        if (rc || idx_postings_docid(p) != t->d[k].docid)
            MFAIL(c, "fts::%s::%s: posting %u is doc %u (%s), expected %u",
                  t->field, t->term, k, rc ? 0 : idx_postings_docid(p),
                  rc ? err.msg : "ok", t->d[k].docid);
        /* A run (idx_postings_run) is the next live postings, in order,
         * and does not move the iterator. */
        if (rnd(3) == 0) {
            const uint32_t *run;
            uint32_t rn;
            rc = idx_postings_run(p, &run, &rn, &err);
            if (rc || rn == 0 || k + rn > t->nd)
                MFAIL(c, "fts::%s::%s: run at posting %u: %u ids (%s)",
                      t->field, t->term, k, rn, rc ? err.msg : "ok");
            for (uint32_t j = 0; j < rn; j++)
                if (run[j] != t->d[k + j].docid)
                    MFAIL(c, "fts::%s::%s: run at posting %u: id %u is %u, "
                          "expected %u", t->field, t->term, k, j, run[j],
                          t->d[k + j].docid);
            assert_int_equal(idx_postings_docid(p), t->d[k].docid);
        }
        check_current(c, t, &t->d[k], p);
        /* Block-max bound: no live posting from here to the block's end
         * has a larger tf. */
        uint32_t blast = idx_postings_block_last(p);
        uint32_t bmax = idx_postings_block_max_tf(p);
        assert_true(blast >= t->d[k].docid);
        if (blast != last_blast || bmax != last_bmax) {
            for (uint32_t j = k; j < t->nd && t->d[j].docid <= blast; j++)
                if (t->d[j].tf > bmax)
                    MFAIL(c, "fts::%s::%s: doc %u has tf %u, over the "
                          "bound %u of the block that doc %u is in (to %u)",
                          t->field, t->term, t->d[j].docid, t->d[j].tf,
                          bmax, t->d[k].docid, blast);
            last_blast = blast;
            last_bmax = bmax;
        }
    }
    for (int i = 0; i < 2; i++) {
        rc = idx_postings_next(p, &err);
        if (rc != KVFTS_ITEROVER)
            MFAIL(c, "fts::%s::%s: after the last expected posting: %d, "
                  "doc %u", t->field, t->term, rc, idx_postings_docid(p));
    }
    assert_int_equal(idx_postings_skip_to(p, 1, &err), KVFTS_ITEROVER);
    idx_postings_close(p);

    /* skip_to and next, mixed (for about 1,000 terms of a big index). */
    if (rnd(c->x.nt / 1000 + 1))
        return;
    rc = idx_postings_open(&p, c->r, t->field, fl, t->term, tl, &err);
    assert_int_equal(rc, 0);
    int64_t at = -1;       /* expected current posting; -1 before the first */
    uint32_t maxid = t->d[t->nd - 1].docid;
    for (;;) {
        uint32_t target = 0;
        int64_t want;
        bool skip = rnd(4) != 0;
        if (!skip) {
            rc = idx_postings_next(p, &err);
            want = at + 1;
        } else {
            uint32_t r = rnd(8);
            int64_t j = at + 1 + (int64_t)rnd(r < 4 ? 3 : 40);
            if (j >= t->nd)
                j = t->nd - 1;
            if (r == 0 && at >= 0)          /* behind or on the current */
                target = t->d[at].docid - rnd(t->d[at].docid);
            else if (r < 4)                  /* a posting's id */
                target = t->d[j].docid;
            else if (r < 7)                  /* between postings */
                target = t->d[j].docid + 1;
            else                             /* anywhere */
                target = 1 + rnd(maxid + 3);
            if (target == 0)
                target = 1;
            rc = idx_postings_skip_to(p, target, &err);
            if (at >= 0 && t->d[at].docid >= target) {
                want = at;               /* never backwards */
            } else {
                want = at + 1;
                while (want < t->nd && t->d[want].docid < target)
                    want++;
            }
        }
        if (want >= t->nd) {
            if (rc != KVFTS_ITEROVER)
                MFAIL(c, "fts::%s::%s: %s %u after doc %u: %d (doc %u), "
                      "expected the end", t->field, t->term,
                      skip ? "skip_to" : "next", target,
                      at >= 0 ? t->d[at].docid : 0, rc,
                      idx_postings_docid(p));
            break;
        }
        if (rc || idx_postings_docid(p) != t->d[want].docid)
            MFAIL(c, "fts::%s::%s: %s %u after doc %u: doc %u (%s), "
                  "expected %u", t->field, t->term, skip ? "skip_to" : "next",
                  target, at >= 0 ? t->d[at].docid : 0,
                  rc ? 0 : idx_postings_docid(p), rc ? err.msg : "ok",
                  t->d[want].docid);
        at = want;
        check_current(c, t, &t->d[at], p);
    }
    assert_int_equal(idx_postings_next(p, &err), KVFTS_ITEROVER);
    assert_int_equal(idx_postings_skip_to(p, maxid, &err), KVFTS_ITEROVER);
    idx_postings_close(p);
}

/* A term read with every view (field NULL: any column), against the
 * union of its fields in the model: the same (field, kind, positions)
 * whether a view holds a field and `_all` at once (kinds 3) or apart. */
typedef struct uview {
    uint32_t docid, fid, kind, tf;
    const uint32_t *pos;
} uview;

static int uview_cmp(const void *a, const void *b)
{
    const uview *x = a, *y = b;
    if (x->docid != y->docid)
        return x->docid < y->docid ? -1 : 1;
    if (x->fid != y->fid)
        return x->fid < y->fid ? -1 : 1;
    return x->kind < y->kind ? -1 : x->kind > y->kind;
}

static void check_any(mcheck *c, uint32_t ti)
{
    kv_err err = KV_ERR_INIT;
    const char *term = c->x.terms[ti];
    uint32_t n = 0, cap = 64;
    uview *want = malloc(cap * sizeof *want);
    for (uint32_t i = 0; i < c->x.nt; i++) {
        const xterm *t = &c->x.t[i];
        if (t->term != term)
            continue;
        for (uint32_t k = 0; k < t->nd; k++)
            for (uint32_t j = 0; j < t->d[k].nv; j++) {
                const xview *v = &t->d[k].v[j];
                if (n == cap)
                    want = realloc(want, (cap *= 2) * sizeof *want);
                want[n++] = (uview){ t->d[k].docid, v->fid,
                                     is_all(t->field) ? IDX_KIND_ALL
                                                      : IDX_KIND_FIELD,
                                     v->npos, v->pos };
            }
    }
    qsort(want, n, sizeof *want, uview_cmp);
    idx_postings *p;
    int rc = idx_postings_open(&p, c->r, NULL, 0, term, strlen(term), &err);
    if (rc)
        MFAIL(c, "fts::*::%s: open: %s", term, err.msg);
    assert_int_equal(idx_postings_info(p)->df, c->x.term_docs[ti]);
    uint32_t at = 0, docs = 0;
    while ((rc = idx_postings_next(p, &err)) == KVFTS_OK) {
        uint32_t id = idx_postings_docid(p);
        docs++;
        assert_int_equal(idx_postings_need(p, IDX_DECODE_POSITIONS, &err), 0);
        uint32_t nv, sum = 0;
        const idx_view *v = idx_postings_views(p, &nv);
        uview got[16];
        uint32_t ng = 0;
        for (uint32_t i = 0; i < nv; i++) {
            assert_true(i == 0 || v[i].col > v[i - 1].col);
            sum += v[i].tf;
            for (unsigned k = IDX_KIND_FIELD; k <= IDX_KIND_ALL; k <<= 1)
                if (v[i].col & k) {
                    assert_true(ng < 16);
                    got[ng++] = (uview){ id, v[i].col >> 2, k, v[i].tf,
                                         v[i].pos };
                }
        }
        assert_int_equal(idx_postings_tf(p), sum);
        qsort(got, ng, sizeof *got, uview_cmp);
        for (uint32_t i = 0; i < ng; i++, at++) {
            const uview *g = &got[i], *w = at < n ? &want[at] : NULL;
            if (!w || w->docid != g->docid || w->fid != g->fid ||
                w->kind != g->kind || w->tf != g->tf ||
                (c->m->positions &&
                 memcmp(w->pos, g->pos, (size_t)g->tf * 4) != 0))
                MFAIL(c, "fts::*::%s doc %u: view of field %u kind %u tf %u "
                      "is not the model's (doc %u field %u kind %u tf %u)",
                      term, id, g->fid, g->kind, g->tf, w ? w->docid : 0,
                      w ? w->fid : 0, w ? w->kind : 0, w ? w->tf : 0);
        }
    }
    if (rc != KVFTS_ITEROVER || at != n || docs != c->x.term_docs[ti])
        MFAIL(c, "fts::*::%s: %u views of %u documents read (%d), the model "
              "has %u of %u", term, at, docs, rc, n, c->x.term_docs[ti]);
    idx_postings_close(p);
    free(want);
}

/* Terms of one field (range [a, b) of the model's) by idx_terms_scan. */
typedef struct scan_ctx {
    mcheck *c;
    const xterm *t;
    uint32_t n, at;
    const char *prefix;
    int stop_after;        /* return 7 after this many calls (0: never) */
} scan_ctx;

static bool has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int on_scan(void *payload, const char *term, size_t tlen,
                   const idx_term_info *info)
{
    scan_ctx *s = payload;
    while (s->at < s->n && !has_prefix(s->t[s->at].term, s->prefix))
        s->at++;
    if (s->at == s->n)
        MFAIL(s->c, "terms of %s from '%s': '%.*s' more than the model's",
              s->t->field, s->prefix, (int)tlen, term);
    const xterm *x = &s->t[s->at++];
    if (strlen(x->term) != tlen || memcmp(x->term, term, tlen) != 0 ||
        info->df != x->nd)
        MFAIL(s->c, "terms of %s from '%s': '%.*s' (%llu), expected '%s' "
              "(%u)", x->field, s->prefix, (int)tlen, term,
              (unsigned long long)info->df, x->term, x->nd);
    return s->stop_after && (int)s->at >= s->stop_after ? 7 : 0;
}

typedef struct ppost_rec {
    uint32_t term;
    uint64_t df;
    uint32_t docid, tf;
} ppost_rec;

typedef struct pp_ctx {
    ppost_rec *r;
    uint32_t n, cap;
} pp_ctx;

static int on_prefix_posting(void *payload, uint32_t term, uint64_t df,
                             uint32_t docid, uint32_t tf)
{
    pp_ctx *c = payload;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 256;
        c->r = realloc(c->r, c->cap * sizeof *c->r);
        assert_non_null(c->r);
    }
    c->r[c->n++] = (ppost_rec){ term, df, docid, tf };
    return 0;
}

/* idx_terms_scan and idx_prefix_postings of field t[0].field, prefix. */
static void check_prefix(mcheck *c, const xterm *t, uint32_t n,
                         const char *prefix)
{
    kv_err err = KV_ERR_INIT;
    const char *f = t[0].field;
    scan_ctx s = { c, t, n, 0, prefix, 0 };
    int rc = idx_terms_scan(c->r, f, strlen(f), prefix, strlen(prefix),
                            on_scan, &s, &err);
    if (rc)
        MFAIL(c, "terms of %s from '%s': %s", f, prefix, err.msg);
    while (s.at < n && !has_prefix(t[s.at].term, prefix))
        s.at++;
    if (s.at != n)
        MFAIL(c, "terms of %s from '%s': '%s' missing", f, prefix,
              t[s.at].term);
    /* The walk stops where the callback says. */
    uint32_t matching = 0, first = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++)
        if (has_prefix(t[i].term, prefix)) {
            matching++;
            if (first == UINT32_MAX)
                first = i;
        }
    if (matching >= 2) {
        scan_ctx s2 = { c, t, n, 0, prefix, 0 };
        s2.stop_after = (int)first + 1;
        assert_int_equal(idx_terms_scan(c->r, f, strlen(f), prefix,
                                        strlen(prefix), on_scan, &s2, &err),
                         7);
    }
    /* Every posting of the prefix, grouped by term in byte order. */
    pp_ctx pp = { NULL, 0, 0 };
    rc = idx_prefix_postings(c->r, f, strlen(f), prefix, strlen(prefix),
                             UINT32_MAX, true, on_prefix_posting, &pp, &err);
    if (rc)
        MFAIL(c, "postings of %s from '%s': %d %s", f, prefix, rc, err.msg);
    uint32_t k = 0, ti = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!has_prefix(t[i].term, prefix))
            continue;
        for (uint32_t j = 0; j < t[i].nd; j++, k++)
            if (k >= pp.n || pp.r[k].term != ti || pp.r[k].df != t[i].nd ||
                pp.r[k].docid != t[i].d[j].docid ||
                pp.r[k].tf != t[i].d[j].tf)
                MFAIL(c, "postings of %s from '%s': record %u is term #%u "
                      "doc %u tf %u (count %llu), expected '%s' (#%u) doc "
                      "%u tf %u (count %u)", f, prefix, k,
                      k < pp.n ? pp.r[k].term : 0,
                      k < pp.n ? pp.r[k].docid : 0,
                      k < pp.n ? pp.r[k].tf : 0,
                      k < pp.n ? (unsigned long long)pp.r[k].df : 0ull,
                      t[i].term, ti, t[i].d[j].docid, t[i].d[j].tf,
                      t[i].nd);
        ti++;
    }
    if (k != pp.n)
        MFAIL(c, "postings of %s from '%s': %u records, the model has %u",
              f, prefix, pp.n, k);
    /* Without tfs (a count's walk): the same postings, tf 1 each. */
    pp_ctx p1 = { NULL, 0, 0 };
    rc = idx_prefix_postings(c->r, f, strlen(f), prefix, strlen(prefix),
                             UINT32_MAX, false, on_prefix_posting, &p1, &err);
    if (rc)
        MFAIL(c, "postings of %s from '%s' without tf: %d %s", f, prefix, rc,
              err.msg);
    for (uint32_t i = 0; i < pp.n && i < p1.n; i++)
        if (p1.r[i].term != pp.r[i].term || p1.r[i].df != pp.r[i].df ||
            p1.r[i].docid != pp.r[i].docid || p1.r[i].tf != 1)
            MFAIL(c, "postings of %s from '%s' without tf: record %u is "
                  "term #%u doc %u tf %u", f, prefix, i, p1.r[i].term,
                  p1.r[i].docid, p1.r[i].tf);
    if (p1.n != pp.n)
        MFAIL(c, "postings of %s from '%s' without tf: %u records, with "
              "tf %u", f, prefix, p1.n, pp.n);
    free(p1.r);
    /* At most one term: 1, after that term's postings. */
    if (matching >= 2) {
        pp.n = 0;
        rc = idx_prefix_postings(c->r, f, strlen(f), prefix, strlen(prefix),
                                 1, true, on_prefix_posting, &pp, &err);
        assert_int_equal(rc, 1);
        assert_int_equal(pp.n, t[first].nd);
    }
    free(pp.r);
}

/* Terms no live document has in a field are not found there (each, or
 * about 200 of them in a big index). */
static void check_absent(mcheck *c, const char *field, const xterm *t,
                         uint32_t n)
{
    kv_err err = KV_ERR_INIT;
    uint32_t k = 0, every = c->x.nterms / 200 + 1;
    for (uint32_t i = 0; i < c->x.nterms; i++) {
        const char *term = c->x.terms[i];
        while (k < n && strcmp(t[k].term, term) < 0)
            k++;
        if ((k < n && t[k].term == term) || rnd(every))
            continue;
        idx_term_info info;
        int rc = idx_term_get(c->r, field, strlen(field), term, strlen(term),
                              &info, &err);
        if (rc != KVFTS_ENOTFOUND || info.df != 0)
            MFAIL(c, "fts::%s::%s: %d (count %llu), expected none", field,
                  term, rc, (unsigned long long)info.df);
        idx_postings *p = NULL;
        rc = idx_postings_open(&p, c->r, field, strlen(field), term,
                               strlen(term), &err);
        if (rc != KVFTS_ENOTFOUND)
            MFAIL(c, "fts::%s::%s: opens (%d), expected none", field, term,
                  rc);
        assert_null(p);
    }
}

static uint32_t model_len(const expect *x, uint32_t docid, const char *field)
{
    for (uint32_t i = 0; i < x->nlen; i++)
        if (x->len[i].docid == docid && strcmp(x->len[i].field, field) == 0)
            return x->len[i].len;
    return 0;
}

/* Field statistics and every live document's lengths. */
static void check_lengths(mcheck *c)
{
    kv_err err = KV_ERR_INIT;
    model *m = c->m;
    uint32_t ids[NELEM(all_fields)];
    for (size_t f = 0; f < NELEM(all_fields); f++) {
        const char *name = all_fields[f];
        assert_int_equal(idx_field_id(c->txn, name, strlen(name), &ids[f],
                                      &err), 0);
        uint64_t docs = 0, total = 0, mdocs = 0, mtotal = 0;
        uint32_t sid = UINT32_MAX;
        assert_int_equal(idx_field_stats(c->txn, name, strlen(name), &docs,
                                         &total, &sid, &err), 0);
        assert_int_equal(sid, ids[f]);
        for (uint32_t i = 0; i < c->x.nlen; i++)
            if (strcmp(c->x.len[i].field, name) == 0) {
                mdocs++;
                mtotal += c->x.len[i].len;
            }
        if (docs != mdocs || total != mtotal)
            MFAIL(c, "field %s: %llu documents, %llu terms; the model %llu "
                  "and %llu", name, (unsigned long long)docs,
                  (unsigned long long)total, (unsigned long long)mdocs,
                  (unsigned long long)mtotal);
        if (mdocs)
            assert_true(ids[f] > 0);
    }
    /* Live documents in id order, as ranking reads them. */
    uint32_t *live = malloc((m->nkeys + 1) * sizeof *live), nl = 0;
    for (uint32_t s = 0; s < m->nkeys; s++)
        if (m->doc[s].live)
            live[nl++] = m->doc[s].docid;
    for (uint32_t i = 1; i < nl; i++)
        for (uint32_t j = i; j > 0 && live[j] < live[j - 1]; j--) {
            uint32_t t = live[j];
            live[j] = live[j - 1];
            live[j - 1] = t;
        }
    idx_lens_reader *lr;
    assert_int_equal(idx_lens_reader_open(&lr, c->txn, &err), 0);
    uint32_t li = 0;
    for (uint32_t i = 0; i < nl; i++) {
        for (; li < c->x.nlen && c->x.len[li].docid < live[i]; li++)
            ;
        for (size_t f = 0; f < NELEM(all_fields); f++) {
            uint32_t got, want = 0;
            for (uint32_t k = li; k < c->x.nlen &&
                 c->x.len[k].docid == live[i]; k++)
                if (strcmp(c->x.len[k].field, all_fields[f]) == 0)
                    want = c->x.len[k].len;
            assert_int_equal(idx_lens_reader_get(lr, live[i], ids[f], &got,
                                                 &err), 0);
            if (got != want)
                MFAIL(c, "doc %u: length of %s %u, expected %u", live[i],
                      all_fields[f], got, want);
        }
    }
    idx_lens_reader_close(lr);
    /* One lookup each, too. */
    for (uint32_t i = 0; i < nl; i += 7) {
        uint32_t got;
        assert_int_equal(idx_doc_field_len(c->txn, live[i], S("body"), &got,
                                           &err), 0);
        assert_int_equal(got, model_len(&c->x, live[i], "body"));
    }
    free(live);
}

static int print_report(void *payload, const char *what)
{
    (void)payload;
    print_error("  check: %s\n", what);
    return 0;
}

/* Everything the readers give in txn against the model; through the
 * dictionary cache d if not NULL (txn then sees committed segments only:
 * an aborted one's id is given again). */
static void m_check(model *m, kv_txn *txn, idx_dict_cache *d,
                    const char *what)
{
    kv_err err = KV_ERR_INIT;
    mcheck c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.txn = txn;
    c.what = what;
    expect_build(m, &c.x, txn);
    idx_merge_stats ms;
    assert_int_equal(idx_merge_stats_get(txn, &ms, &err), 0);
    m->checks++;
    m->checks_merging += ms.merging;
    size_t held = idx_dict_cache_bytes(d);
    assert_int_equal(idx_reader_open_dict(&c.r, txn, d, &err), 0);
    bool shrank = idx_dict_cache_bytes(d) < held;
    for (uint32_t i = 0; i < c.x.nt; i++) {
        held = idx_dict_cache_bytes(d);
        check_term(&c, &c.x.t[i]);
        shrank |= idx_dict_cache_bytes(d) < held;
    }
    m->dict_checks += d != NULL;
    m->dict_full_seen += shrank;
    for (uint32_t i = 0; i < c.x.nterms; i++)
        check_any(&c, i);
    /* Per field: its terms, prefixes of them, terms it does not have. */
    for (uint32_t a = 0, b; a < c.x.nt; a = b) {
        for (b = a; b < c.x.nt && c.x.t[b].field == c.x.t[a].field; b++)
            ;
        char pfx[3] = { 0, 0, 0 };
        check_prefix(&c, c.x.t + a, b - a, "");
        for (int k = 0; k < 3; k++) {
            const char *t = c.x.t[a + rnd(b - a)].term;
            pfx[0] = t[0];
            pfx[1] = k == 2 ? t[1] : 0;
            check_prefix(&c, c.x.t + a, b - a, pfx);
        }
        check_prefix(&c, c.x.t + a, b - a, "\xff");
        check_absent(&c, c.x.t[a].field, c.x.t + a, b - a);
    }
    for (size_t f = 0; f < NELEM(all_fields); f++) {
        bool seen = false;
        for (uint32_t i = 0; i < c.x.nt && !seen; i++)
            seen = strcmp(c.x.t[i].field, all_fields[f]) == 0;
        if (!seen)
            check_absent(&c, all_fields[f], NULL, 0);
    }
    check_absent(&c, "no.such.field", NULL, 0);
    /* Every term of any field, with its documents. */
    {
        xterm *any = calloc(c.x.nterms + 1, sizeof *any);
        for (uint32_t i = 0; i < c.x.nterms; i++)
            any[i] = (xterm){ "(any)", c.x.terms[i], c.x.term_docs[i],
                              NULL };
        scan_ctx s = { &c, any, c.x.nterms, 0, "", 0 };
        assert_int_equal(idx_terms_scan(c.r, NULL, 0, "", 0, on_scan, &s,
                                        &err), 0);
        if (s.at != c.x.nterms)
            MFAIL(&c, "terms of any field: %u, the model has %u", s.at,
                  c.x.nterms);
        free(any);
    }
    idx_stats st;
    assert_int_equal(idx_get_stats(txn, &st, &err), 0);
    if (st.terms != c.x.nterms || st.postings != c.x.postings)
        MFAIL(&c, "stats: %llu terms, %llu postings; the model %u and %llu",
              (unsigned long long)st.terms, (unsigned long long)st.postings,
              c.x.nterms, (unsigned long long)c.x.postings);
    assert_int_equal(st.segments, ms.segments);
    check_lengths(&c);
    idx_reader_close(c.r);
    /* And the index's own check. */
    uint64_t diffs = 99;
    int rc = idx_check(txn, m->cfg, m->cfg_len, print_report, NULL, &diffs,
                       &err);
    if (rc || diffs)
        MFAIL(&c, "idx_check: %d (%s), %llu differences", rc, err.msg,
              (unsigned long long)diffs);
    expect_free(&c.x);
}

/* ---- driving the writer as the library does ------------------------------ */

static void model_open(model *m, const char *cfg, uint32_t nkeys,
                       uint32_t big_vocab)
{
    memset(m, 0, sizeof *m);
    kv_err err = KV_ERR_INIT;
    const char *s = getenv("KVFTS_TEST_SEED");
    m->seed = s && *s ? strtoull(s, NULL, 0) : 0x5eed2024ull;
    rng_state = m->seed ? m->seed : 1;
    m->cfg = cfg;
    m->cfg_len = strlen(cfg);
    m->nkeys = nkeys;
    m->big_vocab = big_vocab;
    m->doc = calloc(nkeys, sizeof *m->doc);
    m->saved = calloc(nkeys, sizeof *m->saved);
    m->dir = tu_tmpdir();
    assert_true(m->doc && m->saved && m->dir);
    kv_env_options o = { true, false, 0 };
    assert_int_equal(kv_env_open(&m->env, m->dir, &o, &err), 0);
    assert_int_equal(idx_writer_new(&m->w, cfg, m->cfg_len, 0, &err), 0);
    assert_int_equal(tok_analysis_new(&m->an, cfg, m->cfg_len, &err), 0);
    m->positions = tok_analysis_positions(m->an);
    assert_int_equal(idx_dict_cache_new(&m->dict, 16 * 1024, &err), 0);
}

static void model_close(model *m)
{
    if (m->txn)
        kv_txn_abort(m->txn);
    idx_writer_free(m->w);
    tok_analysis_free(m->an);
    idx_dict_cache_free(m->dict);
    kv_env_close(m->env);
    for (uint32_t i = 0; i < m->nkeys; i++) {
        free(m->doc[i].json);
        free(m->saved[i].json);
    }
    free(m->doc);
    free(m->saved);
    kv_buf_free(&m->old);
    tu_rmtree(m->dir);
    free(m->dir);
}

static void m_begin(model *m)
{
    kv_err err = KV_ERR_INIT;
    assert_null(m->txn);
    assert_int_equal(kv_txn_begin(&m->txn, m->env, true, &err), 0);
}

static void m_flush(model *m)
{
    kv_err err = KV_ERR_INIT;
    int rc = idx_flush(m->w, m->txn, &err);
    if (rc)
        fail_msg("flush: %s", err.msg);
    m->flushes++;
}

static void save_docs(mdoc *to, const mdoc *from, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        free(to[i].json);
        to[i] = from[i];
        to[i].json = from[i].json ? xstrndup(from[i].json,
                                             strlen(from[i].json)) : NULL;
    }
}

static void m_commit(model *m)
{
    kv_err err = KV_ERR_INIT;
    m_flush(m);
    int rc = kv_txn_commit(m->txn, &err);
    m->txn = NULL;
    if (rc)
        fail_msg("commit: %s", err.msg);
    m->commits++;
    save_docs(m->saved, m->doc, m->nkeys);
}

static void m_abort(model *m)
{
    kv_txn_abort(m->txn);
    m->txn = NULL;
    idx_discard(m->w);
    save_docs(m->doc, m->saved, m->nkeys);
    m->aborts++;
}

/* Write (or, parts NULL, delete) the document of slot in the open
 * transaction, as lib/kvfts_write.c does: read the stored version, hand
 * both to the writer, store the new one. */
static void m_write(model *m, uint32_t slot, const dparts *parts)
{
    kv_err err = KV_ERR_INIT;
    mdoc *d = &m->doc[slot];
    char key[16];
    snprintf(key, sizeof key, "k%04u", slot);
    size_t kl = strlen(key);
    kv_doc old;
    memset(&old, 0, sizeof old);
    int rc = kv_doc_get(m->txn, key, kl, &m->old, &old, true, &err);
    assert_true(rc == KVFTS_OK || rc == KVFTS_ENOTFOUND);
    bool exists = rc == KVFTS_OK;
    assert_int_equal(exists, d->live);
    if (exists) {
        assert_int_equal(old.docid, d->docid);
        assert_int_equal(old.json_len, strlen(d->json));
        assert_memory_equal(old.json, d->json, old.json_len);
        if (d->wflush < m->flushes && parts)
            m->old_replaces++;
        else if (d->wflush < m->flushes)
            m->old_deletes++;
        /* one change per document per segment */
        if (idx_doc_buffered(m->w, old.docid))
            m_flush(m);
    }
    if (!parts) {
        assert_true(exists);
        rc = idx_doc_write(m->w, old.docid, old.json, old.json_len, NULL, 0,
                           NULL, 0, &err);
        if (!rc)
            rc = kv_doc_del(m->txn, key, kl, old.docid, &err);
        if (rc)
            fail_msg("delete %s: %s", key, err.msg);
        d->live = false;
        free(d->json);
        d->json = NULL;
        return;
    }
    char *json = render(m, parts);
    kv_doc nd;
    memset(&nd, 0, sizeof nd);
    nd.docid = old.docid;
    nd.json = json;
    nd.json_len = strlen(json);
    rc = kv_seq_next(m->txn, "cas", &nd.cas, &err);
    if (!rc && !exists) {
        uint64_t id;
        rc = kv_seq_next(m->txn, "docid", &id, &err);
        nd.docid = (uint32_t)id;
    }
    /* Every other new version is analyzed from the leaves a writer's
     * check of its JSON keeps (kvfts_write.c), the others from the JSON:
     * the model and the rebuild must agree either way. */
    kv_buf lv = KV_BUF_INIT;
    bool leaves = nd.cas % 2 == 0;
    if (!rc && leaves)
        rc = kv_json_walk(json, nd.json_len, NULL, keep_leaf, &lv, &err);
    if (!rc)
        rc = idx_doc_write(m->w, nd.docid, exists ? old.json : NULL,
                           exists ? old.json_len : 0, json, nd.json_len,
                           leaves ? lv.data : NULL, lv.len, &err);
    kv_buf_free(&lv);
    if (!rc)
        rc = kv_doc_put(m->txn, key, kl, &nd, !exists, &err);
    if (rc)
        fail_msg("write %s: %s", key, err.msg);
    d->live = true;
    d->docid = nd.docid;
    d->wflush = m->flushes;
    d->parts = *parts;
    free(d->json);
    d->json = json;
}

/* Merge work, each step its own transaction, as the library does. */
static void m_merge(model *m, bool all, unsigned steps, uint64_t max_bytes)
{
    kv_err err = KV_ERR_INIT;
    for (unsigned i = 0; i < steps; i++) {
        kv_txn *t;
        idx_merge_stats before, after;
        bool more = false;
        assert_int_equal(kv_txn_begin(&t, m->env, true, &err), 0);
        assert_int_equal(idx_merge_stats_get(t, &before, &err), 0);
        /* A quarter of the time, a merge the policy starts is done whole
         * in this transaction, its output's file unlogged: in ranges of
         * 1 .. 4096 bytes of input (a file of its own then, whatever its
         * size) on 0 .. 2 helper threads, or on this thread alone when
         * no range size is given and no helper. */
        bool once = rnd(4) == 0;
        idx_merge_opts o = { all, max_bytes, once ? UINT64_MAX : 0,
                             rnd(3) ? 1 + rnd(4096) : 0, rnd(3) };
        int rc = idx_merge_step(t, &o, &more, &err);
        if (rc)
            fail_msg("merge step (seed %llu): %s",
                     (unsigned long long)m->seed, err.msg);
        assert_int_equal(idx_merge_stats_get(t, &after, &err), 0);
        assert_int_equal(kv_txn_commit(t, &err), 0);
        m->merge_steps++;
        if (after.segments < before.segments) {
            m->merges_done++;
            m->all_merges += all;
            m->whole_merges += once && !all && !before.merging &&
                               !after.merging;
        }
        if (!more)
            break;
    }
}

static void m_check_now(model *m, const char *what)
{
    kv_err err = KV_ERR_INIT;
    kv_txn *t;
    assert_int_equal(kv_txn_begin(&t, m->env, false, &err), 0);
    m_check(m, t, m->checks % 2 ? m->dict : NULL, what);
    kv_txn_abort(t);
}

static void m_segments(model *m, idx_merge_stats *st)
{
    kv_err err = KV_ERR_INIT;
    kv_txn *t;
    assert_int_equal(kv_txn_begin(&t, m->env, false, &err), 0);
    assert_int_equal(idx_merge_stats_get(t, st, &err), 0);
    kv_txn_abort(t);
}

/* One random operation on a random key. */
static void m_random_op(model *m)
{
    m->worker_ops += m->workers > 0;
    uint32_t slot = rnd(m->nkeys);
    mdoc *d = &m->doc[slot];
    dparts p;
    if (!d->live) {
        random_parts(m, &p);
        m_write(m, slot, &p);
        return;
    }
    uint32_t r = rnd(100);
    if (r < 25) {
        m_write(m, slot, NULL);
        return;
    }
    p = d->parts;
    if (r < 50)
        random_parts(m, &p);
    else if (r < 80)
        change_part(m, &p);
    else if (r >= 90)
        shuffle_body(&p);
    m_write(m, slot, &p);     /* r in [80, 90): the same document */
}

/* The index rebuilt from the documents answers the same: a segment per
 * document (a buffer bound of one byte), merged by the policy in the same
 * transaction (aborted), then in one segment (committed). */
static void m_rebuild_checks(model *m)
{
    kv_err err = KV_ERR_INIT;
    kv_txn *t;
    idx_merge_stats st;
    assert_int_equal(kv_txn_begin(&t, m->env, true, &err), 0);
    int rc = idx_rebuild(t, m->cfg, m->cfg_len, 1, NULL, NULL, &err);
    if (rc)
        fail_msg("rebuild: %s", err.msg);
    assert_int_equal(idx_merge_stats_get(t, &st, &err), 0);
    assert_true(st.segments >= 2 && !st.merging);
    m_check(m, t, NULL, "rebuilt, a segment per document");
    bool more = true;
    idx_merge_opts o = { false, 1 << 20, UINT64_MAX, 0, 0 };
    for (int i = 0; more && i < 10000; i++)
        assert_int_equal(idx_merge_step(t, &o, &more, &err), 0);
    assert_false(more);
    m_check(m, t, NULL, "rebuilt and merged by the policy");
    kv_txn_abort(t);
    m_check_now(m, "after aborting a rebuild");
    assert_int_equal(kv_txn_begin(&t, m->env, true, &err), 0);
    assert_int_equal(idx_rebuild(t, m->cfg, m->cfg_len, 0, NULL, NULL, &err),
                     0);
    assert_int_equal(kv_txn_commit(t, &err), 0);
    m_segments(m, &st);
    assert_true(st.segments <= 1);
    m_check_now(m, "rebuilt in one segment");
}

/* The index rebuilt from the documents in the middle of a run, while the
 * index it replaces has several segments, deletions and replaced postings
 * not yet merged away, maybe a merge under way: the rebuilt index (made of
 * segments of a random size bound, then merged by the policy a random
 * number of steps, maybe left in the middle of a merge) answers as the
 * model does.  Half the time it is committed and the run goes on writing
 * over it -- the same writer, replacing and deleting documents of the
 * rebuilt segments, merging them -- else it is aborted and the index must
 * be as it was. */
static void m_rebuild_mid(model *m)
{
    kv_err err = KV_ERR_INIT;
    kv_txn *t;
    idx_merge_stats before, st;
    if (rnd(2))        /* one smallest step of a merge of everything */
        m_merge(m, true, 1, 1);
    m_segments(m, &before);
    assert_int_equal(kv_txn_begin(&t, m->env, true, &err), 0);
    static const size_t bounds[] = { 1, 2048, 65536, 0 };
    size_t bound = bounds[rnd(NELEM(bounds))];
    int rc = idx_rebuild(t, m->cfg, m->cfg_len, bound, NULL, NULL, &err);
    if (rc)
        fail_msg("rebuild (seed %llu): %s", (unsigned long long)m->seed,
                 err.msg);
    m->rebuilds++;
    m->rebuilds_multi += before.segments > 1;
    m->rebuilds_merging += before.merging;
    assert_int_equal(idx_merge_stats_get(t, &st, &err), 0);
    assert_false(st.merging);
    if (bound == 1)
        assert_true(st.segments >= 2 || st.segments == 0 ||
                    m->nkeys == 1);
    m_check(m, t, NULL, "rebuilt during the run");
    bool more = true;
    unsigned steps = rnd(4) ? 1 + rnd(20) : 100000;
    for (unsigned i = 0; more && i < steps; i++) {
        /* done whole or not, but without ranges: their threads read
         * committed segments, and these are not yet */
        idx_merge_opts o = { rnd(4) == 0, rnd(2) ? 1 : 1u << 20,
                             rnd(2) ? UINT64_MAX : 0, 0, 0 };
        rc = idx_merge_step(t, &o, &more, &err);
        if (rc)
            fail_msg("merge of a rebuilt index (seed %llu): %s",
                     (unsigned long long)m->seed, err.msg);
    }
    m_check(m, t, NULL, "rebuilt during the run, then merged");
    if (rnd(2)) {
        assert_int_equal(idx_merge_stats_get(t, &st, &err), 0);
        assert_int_equal(kv_txn_commit(t, &err), 0);
        m->rebuilds_kept++;
        m->rebuilds_left_merging += st.merging;
        m_check_now(m, "a rebuild committed during the run");
    } else {
        kv_txn_abort(t);
        m_segments(m, &st);
        assert_int_equal(st.segments, before.segments);
        assert_int_equal(st.merging, before.merging);
        m_check_now(m, "a rebuild aborted during the run");
    }
}

/* A seeded random run: nops operations, checked every phase operations. */
static void model_run(model *m, uint32_t nops, uint32_t phase)
{
    kv_err err = KV_ERR_INIT;
    for (uint32_t op = 1; op <= nops; op++) {
        if (!m->txn)
            m_begin(m);
        m_random_op(m);
        uint32_t r = rnd(100);
        if (r < 6)
            m_flush(m);
        else if (r < 11)
            m_commit(m);
        else if (r == 11)
            m_abort(m);
        if (!m->txn && rnd(3) == 0)    /* merge work between writes */
            m_merge(m, rnd(6) == 0, 1 + rnd(3), rnd(2) ? 1 : 1u << 20);
        if (op % phase == 0) {
            if (m->txn)
                m_commit(m);
            char what[64];
            snprintf(what, sizeof what, "after operation %u", op);
            m_check_now(m, what);
            if (rnd(2) == 0)
                m_rebuild_mid(m);
            /* the next phase with workers or without (the first phase
             * after the start always with: a run must test both) */
            if (rnd(3) == 0 || (op == phase && !m->workers)) {
                m->workers = m->workers ? 0 : 2;
                assert_int_equal(idx_writer_workers(m->w, m->workers, &err),
                                 0);
            }
        }
    }
    if (m->txn)
        m_commit(m);
    m_check_now(m, "at the end");
    m_merge(m, true, 100000, 1u << 20);
    idx_merge_stats st;
    m_segments(m, &st);
    assert_true(st.segments <= 1 && !st.merging);
    m_check_now(m, "after merging everything");
    m_rebuild_checks(m);
}

static const char model_cfg[] =
    "{\"analysis\":{\"fields\":{\"body\":\"english\",\"tags\":\"keyword\"},"
    "\"exclude\":[\"skip\"]}}";

static void test_model(void **state)
{
    (void)state;
    model m;
    model_open(&m, model_cfg, 150, 0);
    model_run(&m, 3000, 300);
    /* The run went through what it is meant to test. */
    print_message("model: seed %llu, %llu flushes, %llu commits, %llu "
                  "aborts, %llu/%llu replaces/deletes of older segments' "
                  "documents, %llu merge steps, %llu merges (%llu of all), "
                  "%llu checks (%llu during a merge), %llu operations "
                  "analyzed by workers\n",
                  (unsigned long long)m.seed, (unsigned long long)m.flushes,
                  (unsigned long long)m.commits, (unsigned long long)m.aborts,
                  (unsigned long long)m.old_replaces,
                  (unsigned long long)m.old_deletes,
                  (unsigned long long)m.merge_steps,
                  (unsigned long long)m.merges_done,
                  (unsigned long long)m.all_merges,
                  (unsigned long long)m.checks,
                  (unsigned long long)m.checks_merging,
                  (unsigned long long)m.worker_ops);
    assert_true(m.aborts > 0 && m.old_replaces > 0 && m.old_deletes > 0);
    assert_true(m.worker_ops > 0 && m.worker_ops < 3000);
    assert_true(m.merges_done > m.all_merges && m.all_merges > 0);
    print_message("model: %llu merges done whole in one transaction\n",
                  (unsigned long long)m.whole_merges);
    assert_true(m.whole_merges > 0);
    print_message("model: %llu checks through the dictionary cache, which "
                  "filled and started again or lost merged segments in %llu\n",
                  (unsigned long long)m.dict_checks,
                  (unsigned long long)m.dict_full_seen);
    assert_true(m.dict_checks > 0 && m.dict_full_seen > 0);
    print_message("model: %llu rebuilds during the run (%llu of several "
                  "segments, %llu in the middle of a merge), %llu "
                  "committed (%llu left in the middle of a merge)\n",
                  (unsigned long long)m.rebuilds,
                  (unsigned long long)m.rebuilds_multi,
                  (unsigned long long)m.rebuilds_merging,
                  (unsigned long long)m.rebuilds_kept,
                  (unsigned long long)m.rebuilds_left_merging);
    assert_true(m.rebuilds_multi > 0 && m.rebuilds_merging > 0);
    assert_true(m.rebuilds_kept > 0 && m.rebuilds_kept < m.rebuilds);
    model_close(&m);
}

/* The same without positions, with `_all` off and stemmed titles. */
static void test_model_no_positions(void **state)
{
    (void)state;
    model m;
    model_open(&m, "{\"analysis\":{\"positions\":false,\"fields\":"
               "{\"title\":\"english\"}}}", 60, 0);
    assert_false(m.positions);
    model_run(&m, 800, 200);
    assert_true(m.merges_done > 0);
    model_close(&m);
}

/* A merge spread over many steps while writes go on: a bigger index (many
 * rare words, a few common ones whose postings span blocks), merged in
 * steps of the smallest size, with a batch of changes written and the
 * model checked between steps. */
static void test_model_merge_steps(void **state)
{
    (void)state;
    model m;
    model_open(&m, model_cfg, 1400, 3000);
    for (int seg = 0; seg < 5; seg++) {
        m_begin(&m);
        for (int i = 0; i < 400; i++)
            m_random_op(&m);
        m_commit(&m);
    }
    idx_merge_stats st;
    int writing_steps = 0;
    for (int step = 0; step < 200; step++) {
        m_merge(&m, true, 1, 1);
        m_segments(&m, &st);
        if (!st.merging)
            break;
        writing_steps += st.done < st.total;
        m_begin(&m);
        for (int i = 0; i < 30; i++)
            m_random_op(&m);
        m_commit(&m);
        char what[64];
        snprintf(what, sizeof what, "merge step %d", step);
        m_check_now(&m, what);
    }
    print_message("index of %llu bytes; merge steps: %d while writing the output, %llu in "
                  "all, %llu checks during the merge\n", (unsigned long long)st.bytes, writing_steps,
                  (unsigned long long)m.merge_steps,
                  (unsigned long long)m.checks_merging);
    assert_true(writing_steps >= 1);     /* it did span transactions */
    m_check_now(&m, "after the merge");
    m_merge(&m, true, 100000, 1u << 20);
    m_check_now(&m, "after merging everything");
    model_close(&m);
}

/* ---- directed tests on the writer ----------------------------------------- */

/* The postings ids of the model for (field, term). */
static uint32_t model_ids(model *m, kv_txn *txn, const char *field,
                          const char *term, uint32_t *ids, uint32_t cap)
{
    expect x;
    expect_build(m, &x, txn);
    uint32_t n = 0;
    for (uint32_t i = 0; i < x.nt; i++)
        if (strcmp(x.t[i].field, field) == 0 &&
            strcmp(x.t[i].term, term) == 0)
            for (uint32_t k = 0; k < x.t[i].nd && n < cap; k++)
                ids[n++] = x.t[i].d[k].docid;
    expect_free(&x);
    return n;
}

/* The entry of term in the newest segment. */
static void newest_entry(kv_txn *txn, const char *term, idx_entry *out,
                         uint32_t *seg, uint32_t *ord)
{
    kv_err err = KV_ERR_INIT;
    idx_segs s;
    memset(&s, 0, sizeof s);
    assert_int_equal(idx_segs_read(&s, txn, false, &err), 0);
    assert_true(s.n > 0);
    *seg = s.v[s.n - 1].id;
    idx_seg_walk *w;
    assert_int_equal(idx_seg_walk_open(&w, txn, *seg, term, strlen(term),
                                       &err), 0);
    const char *t;
    size_t tl;
    const idx_entry *e;
    assert_int_equal(idx_seg_walk_next(w, &t, &tl, &e, ord, &err), 0);
    assert_int_equal(tl, strlen(term));
    assert_memory_equal(t, term, tl);
    *out = *e;              /* counts and flags only */
    out->cols = NULL;
    out->df = out->ndelc = NULL;
    out->dels = NULL;
    out->blk = NULL;
    idx_seg_walk_close(w);
    idx_segs_free(&s);
}

static void write_json(model *m, uint32_t slot, const char *json)
{
    /* documents of the directed tests are given whole: parts unused */
    kv_err err = KV_ERR_INIT;
    mdoc *d = &m->doc[slot];
    char key[16];
    snprintf(key, sizeof key, "k%04u", slot);
    kv_doc old;
    memset(&old, 0, sizeof old);
    int rc = kv_doc_get(m->txn, key, strlen(key), &m->old, &old, true, &err);
    bool exists = rc == KVFTS_OK;
    if (exists && idx_doc_buffered(m->w, old.docid))
        m_flush(m);
    kv_doc nd;
    memset(&nd, 0, sizeof nd);
    nd.docid = old.docid;
    nd.json = json;
    nd.json_len = json ? strlen(json) : 0;
    rc = kv_seq_next(m->txn, "cas", &nd.cas, &err);
    if (!rc && !exists && json) {
        uint64_t id;
        rc = kv_seq_next(m->txn, "docid", &id, &err);
        nd.docid = (uint32_t)id;
    }
    if (!rc)
        rc = idx_doc_write(m->w, nd.docid, exists ? old.json : NULL,
                           exists ? old.json_len : 0, json, nd.json_len,
                           NULL, 0, &err);
    if (!rc)
        rc = json ? kv_doc_put(m->txn, key, strlen(key), &nd, !exists, &err)
                  : kv_doc_del(m->txn, key, strlen(key), old.docid, &err);
    if (rc)
        fail_msg("write %s: %s", key, err.msg);
    free(d->json);
    d->live = json != NULL;
    d->docid = nd.docid;
    d->json = json ? xstrndup(json, strlen(json)) : NULL;
}

/* One block, one block plus one, a block emptied by deletions, a term
 * whose every posting is deleted, before and after merges. */
static void test_block_boundaries(void **state)
{
    (void)state;
    model m;
    model_open(&m, "", IDX_BLOCK_DOCS + 10, 0);
    kv_err err = KV_ERR_INIT;
    char json[128];
    /* "common" three times in each: too long to be inline. */
    m_begin(&m);
    for (uint32_t i = 0; i < IDX_BLOCK_DOCS + 1; i++) {
        snprintf(json, sizeof json, "{\"t\":\"common w%u common x%u common\"}",
                 i, i % 7);
        write_json(&m, i, json);
    }
    m_commit(&m);
    kv_txn *t;
    idx_entry e;
    uint32_t seg, ord;
    assert_int_equal(kv_txn_begin(&t, m.env, false, &err), 0);
    newest_entry(t, "common", &e, &seg, &ord);
    assert_true(e.flags & IDX_E_EXTERNAL);
    assert_int_equal(e.ndocs, IDX_BLOCK_DOCS + 1);
    assert_true(e.nblocks >= 2);
    /* The block records, in id order: IDX_BLOCK_DOCS documents (one
     * record, or halves of it if it is too many bytes for one), then a
     * record of the one document left. */
    kv_cursor *c;
    unsigned char key[13];
    idx_key_block(key, seg, ord, 0);
    assert_int_equal(kv_cursor_open(&c, t, KV_POSTINGS, &err), 0);
    int rc = kv_cursor_seek(c, key, 9, &err);
    idx_block b;
    idx_block_init(&b);
    uint32_t blocks = 0, docs = 0, last_n = 0, last_first = 0;
    for (; rc == KVFTS_OK; rc = kv_cursor_next(c, &err)) {
        const char *k, *v;
        size_t kl, vl;
        kv_cursor_key(c, &k, &kl);
        kv_cursor_val(c, &v, &vl);
        if (kl != 13 || memcmp(k, key, 9) != 0)
            break;
        last_first = kv_get_be32((const unsigned char *)k + 9);
        assert_int_equal(last_first, m.doc[docs].docid);
        assert_int_equal(idx_block_decode(&b, last_first, v, vl, 1,
                                          IDX_DEC_POS, &err), 0);
        for (uint32_t i = 0; i < b.l.n; i++)
            assert_int_equal(b.l.ids[i], m.doc[docs + i].docid);
        last_n = b.l.n;
        docs += b.l.n;
        blocks++;
    }
    assert_true(rc == KVFTS_OK || rc == KVFTS_ITEROVER);
    kv_cursor_close(c);
    idx_block_free(&b);
    assert_int_equal(blocks, e.nblocks);
    assert_int_equal(docs, IDX_BLOCK_DOCS + 1);
    assert_int_equal(last_n, 1);
    assert_int_equal(last_first, m.doc[IDX_BLOCK_DOCS].docid);
    kv_txn_abort(t);
    m_check_now(&m, "one block plus one");
    /* Delete the first half: the first block half cancelled. */
    m_begin(&m);
    for (uint32_t i = 0; i <= IDX_BLOCK_DOCS / 2; i++)
        write_json(&m, i, NULL);
    m_commit(&m);
    m_check_now(&m, "the first half deleted");
    m_merge(&m, true, 1000, 1);
    m_check_now(&m, "merged");
    /* Delete the rest: the term goes, before and after merging. */
    m_begin(&m);
    for (uint32_t i = IDX_BLOCK_DOCS / 2 + 1; i <= IDX_BLOCK_DOCS; i++)
        write_json(&m, i, NULL);
    m_commit(&m);
    for (int merged = 0; merged < 2; merged++) {
        m_check_now(&m, merged ? "all deleted, merged" : "all deleted");
        assert_int_equal(kv_txn_begin(&t, m.env, false, &err), 0);
        idx_reader *r;
        idx_term_info info;
        assert_int_equal(idx_reader_open(&r, t, &err), 0);
        assert_int_equal(idx_term_get(r, S("t"), S("common"), &info, &err),
                         KVFTS_ENOTFOUND);
        assert_int_equal(idx_term_get(r, S("_all"), S("common"), &info,
                                      &err), KVFTS_ENOTFOUND);
        idx_reader_close(r);
        idx_stats st;
        assert_int_equal(idx_get_stats(t, &st, &err), 0);
        assert_int_equal(st.terms, 0);
        assert_int_equal(st.postings, 0);
        kv_txn_abort(t);
        m_merge(&m, true, 1000, 1);
    }
    /* The index goes on. */
    m_begin(&m);
    write_json(&m, 0, "{\"t\":\"common again\"}");
    m_commit(&m);
    m_check_now(&m, "written again");
    model_close(&m);
}

/* skip_to and next across blocks and segments, with a replaced and a
 * deleted range in a newer segment. */
static void test_skip_to(void **state)
{
    (void)state;
    model m;
    model_open(&m, "", 1000, 0);
    kv_err err = KV_ERR_INIT;
    char json[64];
    for (uint32_t s = 0; s < 4; s++) {         /* four segments */
        m_begin(&m);
        for (uint32_t i = s * 250; i < (s + 1) * 250; i++) {
            /* every third document has "x" */
            snprintf(json, sizeof json, "{\"t\":\"%s\"}",
                     (i + 1) % 3 ? "y" : "x y");
            write_json(&m, i, json);
        }
        m_commit(&m);
    }
    m_begin(&m);
    for (uint32_t i = 300; i < 600; i++)       /* "x" moves to others */
        write_json(&m, i, i % 2 ? "{\"t\":\"x y\"}" : "{\"t\":\"y\"}");
    for (uint32_t i = 700; i < 760; i++)
        write_json(&m, i, NULL);
    m_commit(&m);
    kv_txn *t;
    assert_int_equal(kv_txn_begin(&t, m.env, false, &err), 0);
    uint32_t ids[1000];
    uint32_t n = model_ids(&m, t, "t", "x", ids, 1000);
    assert_true(n > 300);
    idx_reader *r;
    assert_int_equal(idx_reader_open(&r, t, &err), 0);
    idx_postings *p;
    assert_int_equal(idx_postings_open(&p, r, S("t"), S("x"), &err), 0);
    assert_int_equal(idx_postings_info(p)->df, n);
    const uint32_t targets[] = { 1, 3, 4, 200, 201, 299, 300, 301, 390, 391,
                                 599, 600, 700, 701, 759, 761, 999, 1000 };
    uint32_t k = 0;
    for (size_t i = 0; i < NELEM(targets); i++) {
        while (k < n && ids[k] < targets[i])
            k++;
        int rc = idx_postings_skip_to(p, targets[i], &err);
        if (k == n) {
            assert_int_equal(rc, KVFTS_ITEROVER);
            break;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(idx_postings_docid(p), ids[k]);
        assert_int_equal(idx_postings_need(p, IDX_DECODE_POSITIONS, &err), 0);
        uint32_t nv;
        const idx_view *v = idx_postings_views(p, &nv);
        assert_int_equal(nv, 1);
        assert_int_equal(v[0].tf, 1);
        assert_int_equal(v[0].pos[0], 0);
    }
    idx_postings_close(p);
    idx_reader_close(r);
    kv_txn_abort(t);
    m_check_now(&m, "five segments");
    model_close(&m);
}

/* A document whose term changed views (a deletion and a posting in one
 * segment) is still in a prefix walk before any merge. */
static void test_prefix_replaced(void **state)
{
    (void)state;
    model m;
    model_open(&m, "", 4, 0);
    kv_err err = KV_ERR_INIT;
    m_begin(&m);
    write_json(&m, 0, "{\"t\":\"apple pie\"}");
    write_json(&m, 1, "{\"t\":\"apricot\"}");
    m_commit(&m);
    m_begin(&m);
    write_json(&m, 0, "{\"t\":\"pie apple\"}");   /* apple moves */
    m_commit(&m);
    kv_txn *t;
    assert_int_equal(kv_txn_begin(&t, m.env, false, &err), 0);
    idx_reader *r;
    assert_int_equal(idx_reader_open(&r, t, &err), 0);
    pp_ctx pp = { NULL, 0, 0 };
    assert_int_equal(idx_prefix_postings(r, S("t"), S("ap"), 100, true,
                                         on_prefix_posting, &pp, &err), 0);
    assert_int_equal(pp.n, 2);
    assert_true(pp.r[0].term == 0 && pp.r[0].docid == m.doc[0].docid &&
                pp.r[0].tf == 1 && pp.r[0].df == 1);
    assert_true(pp.r[1].term == 1 && pp.r[1].docid == m.doc[1].docid);
    free(pp.r);
    idx_reader_close(r);
    kv_txn_abort(t);
    m_check_now(&m, "replaced");
    model_close(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_boundaries),
        cmocka_unit_test(test_skip_to),
        cmocka_unit_test(test_prefix_replaced),
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_model_no_positions),
        cmocka_unit_test(test_model_merge_steps),
    };
    const char *only = getenv("KVFTS_TEST_ONLY");   /* e.g. "test_model*" */
    if (only && *only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests_name("unit.index_model", tests, NULL,
                                       NULL);
}
