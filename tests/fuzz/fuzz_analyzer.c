/*
 * fuzz_analyzer.c -- fuzz target for analysis (tokenizer/): arbitrary bytes
 * through the analyzers, and through the document walker that turns a JSON
 * document into (field, term, position) under a database configuration.
 *
 * Per input:
 *   1. The bytes are analyzed as one text value by "standard", "english",
 *      "keyword" and one more analyzer picked by the first byte (any name of
 *      tok_analyzer_name(): another Snowball language, or "none").  Each
 *      runs twice on its fast path (the second time with the stem cache
 *      warm) and once in reference mode (everything through utf8proc, no
 *      cache), and the three term streams must be equal, as must the return
 *      codes.  Every term must keep the documented promises: 1 to
 *      TOK_MAX_TERM bytes of UTF-8, offsets inside the text with start <
 *      end, positions strictly ascending; "keyword" gives at most one term.
 *      Refused input must be invalid UTF-8, reported at a byte inside it.
 *   2. tok_run_pos() from a non-zero first position must give the same
 *      terms shifted, with *next_pos past the last one; an emit callback
 *      that stops at the k-th term must get its code back.
 *   3. tok_keyword() must agree with the "keyword" analyzer's one term.
 *   4. tok_analysis_run_doc() analyzes the bytes as a document under a
 *      configuration with stemmed, keyword, excluded and "none" fields,
 *      stop words and `_all`; tok_analysis_run_value() analyzes them as a
 *      value of a field.  Every term's offsets must lie in its value.
 *
 * A broken invariant aborts; everything is freed before returning, so
 * LeakSanitizer reports any leak of the library.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) do { if (!(c)) abort(); } while (0)

#define STOPPED 12345   /* a code no library function returns */

/* The terms of one run, serialized, and what the checks need. */
typedef struct run {
    kv_buf terms;         /* per term: pos, start, end, len, then the bytes */
    size_t n;
    size_t len;           /* of the text */
    uint32_t last_pos;
    size_t stop_at;       /* return STOPPED at this term; 0: never */
    bool fail;            /* an append failed (out of memory) */
} run;

static int on_term(void *payload, const char *term, size_t term_len,
                   uint32_t pos, size_t start, size_t end)
{
    run *r = payload;
    CHECK(term_len >= 1 && term_len <= TOK_MAX_TERM);
    CHECK(kv_utf8_valid(term, term_len, NULL));
    CHECK(start < end && end <= r->len);
    CHECK(r->n == 0 || pos > r->last_pos);
    r->last_pos = pos;
    size_t rec[4] = { pos, start, end, term_len };
    if (kv_buf_append(&r->terms, rec, sizeof rec, NULL) ||
        kv_buf_append(&r->terms, term, term_len, NULL))
        r->fail = true;
    if (++r->n == r->stop_at)
        return STOPPED;
    return 0;
}

static bool same_terms(const run *a, const run *b)
{
    return a->n == b->n && a->terms.len == b->terms.len &&
           (a->terms.len == 0 ||
            memcmp(a->terms.data, b->terms.data, a->terms.len) == 0);
}

static void check_refusal(int rc, const kv_err *err, const char *s,
                          size_t len)
{
    if (rc == KVFTS_OK)
        return;
    CHECK(rc == KVFTS_EINVAL || rc == KVFTS_ENOMEM);
    if (rc == KVFTS_EINVAL) {
        CHECK(err->pos >= 0 && (size_t)err->pos < len);
        CHECK(!kv_utf8_valid(s, len, NULL));
    }
}

/* Part 1-3 for one analyzer. */
static void fuzz_analyzer(const char *name, const char *s, size_t len)
{
    kv_err err = KV_ERR_INIT;
    tok_tokenizer *t = NULL, *ref = NULL;
    run fast = { KV_BUF_INIT, 0, len, 0, 0, false };
    run again = fast, slow = fast, shifted = fast, stop = fast;
    if (tok_new(&t, name, &err) || tok_new(&ref, name, &err))
        goto done;   /* out of memory only: every name here is valid */
    tok_set_reference_mode(ref, true);

    int rc = tok_run(t, s, len, on_term, &fast, &err);
    check_refusal(rc, &err, s, len);
    int rc2 = tok_run(t, s, len, on_term, &again, &err);
    int rc3 = tok_run(ref, s, len, on_term, &slow, &err);
    if (fast.fail || again.fail || slow.fail)
        goto done;
    CHECK(rc2 == rc && rc3 == rc);
    CHECK(same_terms(&fast, &again) && same_terms(&fast, &slow));
    if (tok_get_kind(t) == TOK_KEYWORD)
        CHECK(fast.n <= 1);
    if (tok_get_kind(t) == TOK_NONE)
        CHECK(fast.n == 0);

    /* Shifted positions: same terms, positions + first. */
    const uint32_t first = 1000;
    uint32_t next = 0;
    rc2 = tok_run_pos(t, s, len, first, &next, on_term, &shifted, &err);
    CHECK(rc2 == rc && shifted.n == fast.n);
    if (rc == KVFTS_OK && fast.n > 0 && !shifted.fail)
        CHECK(shifted.last_pos == fast.last_pos + first &&
              next > shifted.last_pos);

    /* Stopping part-way. */
    if (rc == KVFTS_OK && fast.n > 0) {
        stop.stop_at = 1 + len % fast.n;
        rc2 = tok_run(t, s, len, on_term, &stop, &err);
        CHECK(rc2 == STOPPED && stop.n == stop.stop_at);
    }

    /* tok_keyword is the keyword analyzer's normalization. */
    if (tok_get_kind(t) == TOK_KEYWORD) {
        char kw[TOK_MAX_TERM + 1];
        size_t kwlen = 0;
        rc2 = tok_keyword(ref, s, len, kw, &kwlen, &err);
        CHECK(rc2 == rc);
        if (rc == KVFTS_OK && fast.n == 1 && !fast.fail) {
            size_t rec[4];
            memcpy(rec, fast.terms.data, sizeof rec);
            CHECK(kwlen == rec[3] &&
                  memcmp(kw, fast.terms.data + sizeof rec, kwlen) == 0);
        }
        if (rc == KVFTS_OK && fast.n == 0)
            CHECK(kwlen == 0 || kwlen == TOK_MAX_TERM + 1);
    }
done:
    tok_free(t);
    tok_free(ref);
    kv_buf_free(&fast.terms);
    kv_buf_free(&again.terms);
    kv_buf_free(&slow.terms);
    kv_buf_free(&shifted.terms);
    kv_buf_free(&stop.terms);
}

/* Part 4: the document walker. */
typedef struct doc_run {
    size_t n;
    uint64_t hash;
} doc_run;

static int on_doc_term(void *payload, const tok_term *t)
{
    doc_run *d = payload;
    CHECK(t->field[t->field_len] == '\0');   /* "" is a valid key */
    CHECK(t->term_len >= 1 && t->term_len <= TOK_MAX_TERM);
    CHECK(t->start < t->end && t->end <= t->value_len);
    for (size_t i = 0; i < t->term_len; i++)
        d->hash = (d->hash ^ (unsigned char)t->term[i]) * 0x100000001B3ull;
    for (size_t i = t->start; i < t->end; i++)
        d->hash = (d->hash ^ (unsigned char)t->value[i]) * 0x100000001B3ull;
    d->n++;
    return 0;
}

static void fuzz_document(const char *s, size_t len)
{
    static const char cfg[] =
        "{\"analysis\":{\"default\":\"standard\","
        "\"fields\":{\"body\":\"english\",\"pkg\":\"keyword\","
        "\"title\":\"french\",\"raw\":\"none\"},"
        "\"exclude\":[\"secret\"],\"all\":true,\"positions\":true,"
        "\"stopwords\":[\"the\",\"a\",\"of\"]}}";
    kv_err err = KV_ERR_INIT;
    tok_analysis *a = NULL;
    if (tok_analysis_new(&a, cfg, sizeof cfg - 1, &err))
        return;   /* out of memory only */
    doc_run d = { 0, 0 };
    int rc = tok_analysis_run_doc(a, s, len, on_doc_term, &d, &err);
    CHECK(rc == KVFTS_OK || rc == KVFTS_EINVAL || rc == KVFTS_ENOMEM);
    if (rc == KVFTS_EINVAL && err.pos >= 0)
        CHECK((size_t)err.pos <= len);
    /* The same document again: the field table is warm now. */
    doc_run d2 = { 0, 0 };
    CHECK(tok_analysis_run_doc(a, s, len, on_doc_term, &d2, &err) == rc);
    if (rc == KVFTS_OK)
        CHECK(d2.n == d.n && d2.hash == d.hash);

    static const char *const fields[] = { "body", "pkg", "raw", "other" };
    const char *f = fields[len % 4];
    d.n = 0;
    rc = tok_analysis_run_value(a, f, strlen(f), s, len, on_doc_term, &d,
                                &err);
    CHECK(rc == KVFTS_OK || rc == KVFTS_EINVAL || rc == KVFTS_ENOMEM);
    tok_analysis_free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    size_t nnames = 0;
    while (tok_analyzer_name(nnames))
        nnames++;
    fuzz_analyzer("standard", s, size);
    fuzz_analyzer("english", s, size);
    fuzz_analyzer("keyword", s, size);
    if (size > 0)
        fuzz_analyzer(tok_analyzer_name(data[0] % nnames), s, size);
    fuzz_document(s, size);
    return 0;
}
