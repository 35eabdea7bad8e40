/*
 * kvfts_analyze.c -- the public face of tokenizer/: show what the index
 * would hold for a text or a document (`kvfts analyze`).
 *
 * A kvfts_terms is one allocation pattern: an array of kvfts_term whose
 * string pointers point into one byte arena (field and term strings, each
 * NUL-terminated), fixed up once at the end so the arena may grow while
 * terms are collected.  It also carries the message of a failure, because
 * these calls work without a database (db NULL), where kvfts_errmsg() has
 * nowhere to keep it: *out is set even on failure (NULL only when the
 * kvfts_terms itself cannot be allocated).
 *
 * Configuration: with a db, its stored config (api_config_json(), from
 * lib/kvfts_core.c) decides the analyzers of fields; without one, the default
 * config (every field "standard", `_all` on).  The analysis object is built
 * per call: analyze is a diagnostic, not a hot path.
 */
#include "kvfts_int.h"

#include <stdio.h>
#include <string.h>


typedef struct rec {
    size_t field, term, src; /* offsets into the arena */
    size_t term_len;
    uint32_t pos;
    size_t start, end;
} rec;

struct kvfts_terms {
    kvfts_term *v;          /* built at the end */
    rec *r;
    size_t n, cap;
    kv_buf arena;
    const char *only_field; /* collect only this field (NULL: all) */
    size_t only_len;
    char errmsg[KV_ERRMSG_MAX];
};

static int push(kvfts_terms *t, const char *field, size_t flen,
                const char *src, size_t slen, const char *term, size_t tlen,
                uint32_t pos, size_t start, size_t end, kv_err *err)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 32;
        rec *nr = kv_realloc(t->r, cap * sizeof *nr);
        if (!nr)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory (terms)");
        t->r = nr;
        t->cap = cap;
    }
    rec *r = &t->r[t->n];
    r->field = t->arena.len;
    int rc = kv_buf_append(&t->arena, field, flen, err);
    if (!rc)
        rc = kv_buf_append(&t->arena, "", 1, err);
    r->src = t->arena.len;
    if (!rc)
        rc = kv_buf_append(&t->arena, src, slen, err);
    if (!rc)
        rc = kv_buf_append(&t->arena, "", 1, err);
    r->term = t->arena.len;
    if (!rc)
        rc = kv_buf_append(&t->arena, term, tlen, err);
    if (!rc)
        rc = kv_buf_append(&t->arena, "", 1, err);
    if (rc)
        return rc;
    r->term_len = tlen;
    r->pos = pos;
    r->start = start;
    r->end = end;
    t->n++;
    return KVFTS_OK;
}

typedef struct sink {
    kvfts_terms *t;
    kv_err *err;
} sink;

static int on_term(void *p, const char *term, size_t len, uint32_t pos,
                   size_t start, size_t end)
{
    sink *s = p;
    return push(s->t, "", 0, "", 0, term, len, pos, start, end, s->err);
}

static int on_field_term(void *p, const tok_term *x)
{
    sink *s = p;
    if (s->t->only_field && (x->field_len != s->t->only_len ||
                             memcmp(x->field, s->t->only_field,
                                    x->field_len) != 0))
        return KVFTS_OK;
    return push(s->t, x->field, x->field_len, x->src, x->src_len, x->term,
                x->term_len, x->pos, x->start, x->end, s->err);
}

/* Point the kvfts_term array into the (final) arena. */
static int finish(kvfts_terms *t, kv_err *err)
{
    t->v = kv_calloc(t->n ? t->n : 1, sizeof *t->v);
    if (!t->v)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory (terms)");
    for (size_t i = 0; i < t->n; i++) {
        t->v[i].field = t->arena.data + t->r[i].field;
        t->v[i].term = t->arena.data + t->r[i].term;
        t->v[i].term_len = t->r[i].term_len;
        t->v[i].pos = t->r[i].pos;
        t->v[i].start = t->r[i].start;
        t->v[i].end = t->r[i].end;
        t->v[i].source = t->arena.data + t->r[i].src;
    }
    return KVFTS_OK;
}

static int new_analysis(tok_analysis **a, kvfts_db *db, kv_err *err)
{
    const char *json = NULL;
    size_t len = 0;
    if (db) {
        int rc = api_config_json(&json, &len, db);
        if (rc)
            return kv_seterr(err, rc, "cannot read the database config: %s",
                             kvfts_errmsg(db));
    }
    return tok_analysis_new(a, json, len, err);
}

/* Common end: build the array, or keep the message. */
static int done(kvfts_terms *t, int rc, kv_err *err)
{
    if (!rc)
        rc = finish(t, err);
    if (rc) {
        snprintf(t->errmsg, sizeof t->errmsg, "%s",
                 err->msg[0] ? err->msg : kvfts_strerror(rc));
        t->n = 0;
    }
    return rc;
}

int kvfts_analyze(kvfts_terms **out, kvfts_db *db, const char *analyzer,
                  const char *field, const char *text, size_t len)
{
    kv_err err = KV_ERR_INIT;
    tok_tokenizer *tok = NULL;
    tok_analysis *a = NULL;
    int rc = KVFTS_OK;
    kvfts_terms *t = kv_calloc(1, sizeof *t);
    *out = t;
    if (!t)
        return KVFTS_ENOMEM;
    sink s = { t, &err };
    if (!text && len) {
        rc = kv_seterr(&err, KVFTS_EINVAL, "no text");
        goto fail;
    }
    if (analyzer && field) {
        rc = kv_seterr(&err, KVFTS_EINVAL, "give an analyzer or a field, "
                       "not both");
        goto fail;
    }
    if (analyzer) {
        rc = tok_new(&tok, analyzer, &err);
        if (!rc)
            rc = tok_run(tok, text, len, on_term, &s, &err);
    } else {
        /* A field's own terms; no field: what an unscoped query (field
         * `_all`) becomes. */
        if (!field)
            field = TOK_ALL_FIELD;
        t->only_field = field;
        t->only_len = strlen(field);
        rc = new_analysis(&a, db, &err);
        if (!rc)
            rc = tok_analysis_run_value(a, field, strlen(field), text, len,
                                        on_field_term, &s, &err);
    }
fail:
    tok_free(tok);
    tok_analysis_free(a);
    return done(t, rc, &err);
}

int kvfts_analyze_doc(kvfts_terms **out, kvfts_db *db, const char *json,
                      size_t len)
{
    kv_err err = KV_ERR_INIT;
    tok_analysis *a = NULL;
    kvfts_terms *t = kv_calloc(1, sizeof *t);
    *out = t;
    if (!t)
        return KVFTS_ENOMEM;
    sink s = { t, &err };
    int rc = new_analysis(&a, db, &err);
    if (!rc)
        rc = tok_analysis_run_doc(a, json ? json : "", json ? len : 0,
                                  on_field_term, &s, &err);
    tok_analysis_free(a);
    return done(t, rc, &err);
}

size_t kvfts_terms_count(const kvfts_terms *t)
{
    return t ? t->n : 0;
}

const kvfts_term *kvfts_terms_at(const kvfts_terms *t, size_t i)
{
    return t && i < t->n ? &t->v[i] : NULL;
}

const char *kvfts_terms_errmsg(const kvfts_terms *t)
{
    return t ? t->errmsg : "out of memory";
}

void kvfts_terms_free(kvfts_terms *t)
{
    if (!t)
        return;
    kv_free(t->v);
    kv_free(t->r);
    kv_buf_free(&t->arena);
    kv_free(t);
}
