/*
 * test_tokenizer.c -- unit tests of tokenizer/ (cmocka).
 *
 * What is checked, and against what:
 *  - Unicode behaviour on fixed examples (README "Analysis" and issue 3).
 *  - The fast paths (ASCII and U+0080..U+07FF tables, BMP category bitmap,
 *    stem cache) against the reference path of the same tokenizer
 *    (tok_set_reference_mode: everything through utf8proc, no cache), and
 *    against an independent reimplementation here that uses only
 *    utf8proc_map / utf8proc_category / sb_stemmer, on random strings from a
 *    pool of tricky code points, on every code point alone, and on real text.
 *  - Every Snowball language; positions, offsets, the 128-byte limit.
 *  - Field extraction, config parsing and its errors.
 *  - Allocation failures (kv_alloc_fail_after) in the code that does not go
 *    through YAJL (see test_alloc_failures for why).
 *  - A differential test against SQLite FTS5 "unicode61 remove_diacritics 2"
 *    on Debian package descriptions (tests/data/tok_debian_sample.jsonl) and
 *    multilingual samples (tests/data/tok_multilingual.jsonl), and also on
 *    all of `apt-cache dumpavail` when it works (KVFTS_TOK_FULL_CATALOG=0:
 *    not).  Every difference is classified and each class is explained
 *    below; an unexplained difference fails the test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <libstemmer.h>
#include <utf8proc.h>

#include "tokenizer.h"

#if defined(__has_include)
#if __has_include(<sqlite3.h>)
#include <sqlite3.h>
#define HAVE_SQLITE 1
#endif
#endif

#define OPTS_STRIP (UTF8PROC_COMPOSE | UTF8PROC_COMPAT | UTF8PROC_CASEFOLD | \
                    UTF8PROC_STRIPMARK)
#define OPTS_KEEP (UTF8PROC_COMPOSE | UTF8PROC_COMPAT | UTF8PROC_CASEFOLD)

static uint32_t rnd(void);

/* ---- collecting terms -------------------------------------------------- */

typedef struct tterm {
    char field[64];
    char term[TOK_MAX_TERM * 2 + 1];
    size_t len;
    uint32_t pos;
    size_t start, end;
} tterm;

typedef struct tlist {
    tterm *v;
    size_t n, cap;
} tlist;

static void tl_push(tlist *l, const char *field, size_t flen, const char *t,
                    size_t n, uint32_t pos, size_t start, size_t end)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        assert_non_null(l->v);
    }
    tterm *e = &l->v[l->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->field, sizeof e->field, "%.*s", (int)flen, field);
    assert_true(n < sizeof e->term);
    memcpy(e->term, t, n);
    e->len = n;
    e->pos = pos;
    e->start = start;
    e->end = end;
}

static void tl_free(tlist *l)
{
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int collect(void *p, const char *t, size_t n, uint32_t pos,
                   size_t start, size_t end)
{
    tl_push(p, "", 0, t, n, pos, start, end);
    return 0;
}

static int collect_doc(void *p, const tok_term *t)
{
    assert_true(t->start <= t->end && t->end <= t->value_len);
    tl_push(p, t->field, t->field_len, t->term, t->term_len, t->pos,
            t->start, t->end);
    return 0;
}

/* "term term term" for a text analyzed with @p analyzer. */
static char *terms(const char *analyzer, const char *text)
{
    static char buf[8192];
    tok_tokenizer *t;
    kv_err err = KV_ERR_INIT;
    tlist l = { 0 };
    assert_int_equal(tok_new(&t, analyzer, &err), KVFTS_OK);
    int rc = tok_run(t, text, strlen(text), collect, &l, &err);
    assert_int_equal(rc, KVFTS_OK);
    buf[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < l.n; i++)
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s",
                                 i ? " " : "", l.v[i].term);
    tl_free(&l);
    tok_free(t);
    return buf;
}

/* "field:term@pos ..." for a document. */
static char *doc_terms(const char *config, const char *json)
{
    static char buf[16384];
    tok_analysis *a;
    kv_err err = KV_ERR_INIT;
    tlist l = { 0 };
    assert_int_equal(tok_analysis_new(&a, config, config ? strlen(config) : 0,
                                      &err), KVFTS_OK);
    int rc = tok_analysis_run_doc(a, json, strlen(json), collect_doc, &l,
                                  &err);
    if (rc)
        fail_msg("run_doc: %s", err.msg);
    buf[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < l.n; i++)
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s:%s@%u",
                                 i ? " " : "", l.v[i].field, l.v[i].term,
                                 l.v[i].pos);
    tl_free(&l);
    tok_analysis_free(a);
    return buf;
}

/* ---- Unicode behaviour ------------------------------------------------- */

static void test_unicode_examples(void **state)
{
    (void)state;
    assert_string_equal(terms("standard", "Café"), "cafe");
    assert_string_equal(terms("standard", "CAFÉ café cafe\xcc\x81"),
                        "cafe cafe cafe");
    assert_string_equal(terms("standard", "STRASSE Straße strasse"),
                        "strasse strasse strasse");
    assert_string_equal(terms("standard", "ＡＢＣ"), "abc");
    assert_string_equal(terms("standard", "ﬁsh ﬂow"), "fish flow");
    /* combining marks: precomposed and decomposed forms agree, marks go */
    assert_string_equal(terms("standard", "nai\xcc\x88ve naïve"),
                        "naive naive");
    assert_string_equal(terms("standard", "Ångström A\xcc\x8angstro\xcc\x88m"),
                        "angstrom angstrom");
    /* a lone mark after a separator is nothing */
    assert_string_equal(terms("standard", "a \xcc\x81 b"), "a b");
    /* CJK: a run of ideographs / kana is one token (no dictionary) */
    assert_string_equal(terms("standard", "日本語テキスト 中文"),
                        "日本語テキスト 中文");
    assert_string_equal(terms("standard", "ｶﾀｶﾅ"), "カタカナ");
    /* Hangul survives decomposition + composition */
    assert_string_equal(terms("standard", "한국어 검색"), "한국어 검색");
    /* emoji and punctuation separate */
    assert_string_equal(terms("standard", "emoji😀between🚀x"),
                        "emoji between x");
    assert_string_equal(terms("standard", "C++ & C#, foo_bar foo-bar."),
                        "c c foo bar foo bar");
    assert_string_equal(terms("standard", "don't e-mail \"quoted\""),
                        "don t e mail quoted");
    /* digits */
    assert_string_equal(terms("standard", "3.14 1,000 v2 ٣"),
                        "3 14 1 000 v2 ٣");
    /* normalization can cut a run: NFKC "½" = "1⁄2" */
    assert_string_equal(terms("standard", "½ ² ① Ⅻ"), "1 2 2 1 xii");
    /* symbols that NFKC would turn into letters stay separators */
    assert_string_equal(terms("standard", "a™ ℃ b"), "a b");
    /* Greek final sigma folds; Turkish dotted I folds to i + (removed) dot */
    assert_string_equal(terms("standard", "ΣΟΦΟΣ σοφος σοφοσ"),
                        "σοφοσ σοφοσ σοφοσ");
    assert_string_equal(terms("standard", "İstanbul"), "istanbul");
    /* private use (Co) is a token character, as in FTS5 */
    assert_string_equal(terms("standard", "a\xee\x80\x80" "b"),
                        "a\xee\x80\x80" "b");
    /* empty and separator-only */
    assert_string_equal(terms("standard", ""), "");
    assert_string_equal(terms("standard", " \t\n.,;!?"), "");
}

static void test_positions_offsets(void **state)
{
    (void)state;
    tok_tokenizer *t;
    kv_err err = KV_ERR_INIT;
    tlist l = { 0 };
    const char *text = "  Héllo, wörld! ½ x";
    assert_int_equal(tok_new(&t, "standard", &err), 0);
    assert_int_equal(tok_run(t, text, strlen(text), collect, &l, &err), 0);
    assert_int_equal(l.n, 5);
    assert_string_equal(l.v[0].term, "hello");
    assert_int_equal(l.v[0].pos, 0);
    assert_int_equal(l.v[0].start, 2);
    assert_int_equal(l.v[0].end, 8);            /* "Héllo" is 6 bytes */
    assert_string_equal(l.v[1].term, "world");
    assert_int_equal(l.v[1].pos, 1);
    assert_int_equal(l.v[1].start, 10);
    assert_int_equal(l.v[1].end, 16);
    assert_string_equal(l.v[2].term, "1");     /* both halves of "½" */
    assert_string_equal(l.v[3].term, "2");
    assert_int_equal(l.v[2].start, 18);
    assert_int_equal(l.v[3].end, 20);
    assert_int_equal(l.v[3].pos, 3);
    assert_string_equal(l.v[4].term, "x");
    assert_int_equal(l.v[4].pos, 4);
    assert_int_equal(l.v[4].start, 21);
    tl_free(&l);

    /* tok_run_pos: first position and the next one */
    uint32_t next = 0;
    assert_int_equal(tok_run_pos(t, "a b c", 5, 1000, &next, collect, &l,
                                 &err), 0);
    assert_int_equal(l.v[0].pos, 1000);
    assert_int_equal(l.v[2].pos, 1002);
    assert_int_equal(next, 1003);
    tl_free(&l);
    tok_free(t);
}

static void test_too_long(void **state)
{
    (void)state;
    tok_tokenizer *t;
    kv_err err = KV_ERR_INIT;
    tlist l = { 0 };
    tok_stats st;
    char text[4096];
    assert_int_equal(tok_new(&t, "standard", &err), 0);

    /* 128 letters is a term, 129 is not (but uses a position) */
    memset(text, 'A', 128);
    text[128] = ' ';
    memset(text + 129, 'b', 129);
    memcpy(text + 258, " c", 3);
    assert_int_equal(tok_run(t, text, strlen(text), collect, &l, &err), 0);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.v[0].len, 128);
    assert_int_equal(l.v[0].term[0], 'a');
    assert_string_equal(l.v[1].term, "c");
    assert_int_equal(l.v[1].pos, 2);
    tok_get_stats(t, &st);
    assert_int_equal(st.too_long, 1);
    assert_int_equal(st.tokens, 2);
    tl_free(&l);

    /* the limit applies after normalization: 100 "é" are 200 bytes in, 100
     * out; 65 "ß" are 130 bytes in and out ("ss") */
    size_t n = 0;
    for (int i = 0; i < 100; i++)
        n += (size_t)sprintf(text + n, "é");
    n += (size_t)sprintf(text + n, " ");
    for (int i = 0; i < 65; i++)
        n += (size_t)sprintf(text + n, "ß");
    n += (size_t)sprintf(text + n, " ");
    for (int i = 0; i < 300; i++)      /* slow path, 900 bytes */
        n += (size_t)sprintf(text + n, "語");
    tok_stats_reset(t);
    assert_int_equal(tok_run(t, text, n, collect, &l, &err), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.v[0].len, 100);
    tok_get_stats(t, &st);
    assert_int_equal(st.too_long, 2);
    tl_free(&l);
    tok_free(t);
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t len;
        size_t at;
    } bad[] = {
        { "ab \xc0\xaf", 5, 3 },                  /* overlong '/' */
        { "ab \xe0\x80\xaf", 6, 3 },              /* overlong, 3 bytes */
        { "ab \xf0\x80\x80\xaf", 7, 3 },          /* overlong, 4 bytes */
        { "x\xed\xa0\x80y", 5, 1 },               /* surrogate U+D800 */
        { "x\xed\xbf\xbf", 4, 1 },                /* surrogate U+DFFF */
        { "caf\xc3", 4, 3 },                      /* truncated */
        { "ab\xe2\x82", 4, 2 },                   /* truncated */
        { "\x80" "abc", 4, 0 },                   /* stray continuation */
        { "ab\xf4\x90\x80\x80", 6, 2 },           /* past U+10FFFF */
        { "ab\xff", 3, 2 },
        { "héllo wörld \xc3(", 16, 14 },          /* bad 2nd byte */
    };
    const char *names[] = { "standard", "english", "keyword", "none" };
    for (size_t k = 0; k < 4; k++) {
        tok_tokenizer *t;
        kv_err err = KV_ERR_INIT;
        assert_int_equal(tok_new(&t, names[k], &err), 0);
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            tlist l = { 0 };
            kv_err_clear(&err);
            int rc = tok_run(t, bad[i].s, bad[i].len, collect, &l, &err);
            assert_int_equal(rc, KVFTS_EINVAL);
            assert_int_equal(err.pos, (long long)bad[i].at);
            char want[64];
            snprintf(want, sizeof want, "invalid UTF-8 at byte %zu",
                     bad[i].at);
            if (!strstr(err.msg, want))
                fail_msg("%s: message \"%s\" lacks \"%s\"", names[k],
                         err.msg, want);
            tl_free(&l);
        }
        tok_free(t);
    }
    /* through the analysis: the message names the field */
    tok_analysis *a;
    kv_err err = KV_ERR_INIT;
    tlist l = { 0 };
    assert_int_equal(tok_analysis_new(&a, NULL, 0, &err), 0);
    assert_int_equal(tok_analysis_run_value(a, "title", 5, "ok \xed\xa0\x80",
                                            6, collect_doc, &l, &err),
                     KVFTS_EINVAL);
    assert_non_null(strstr(err.msg, "field \"title\": invalid UTF-8 at byte 3"));
    /* in a document, the JSON walker refuses it first, with the offset */
    const char doc[] = "{\"t\":\"ok \xc0\xaf\"}";
    assert_int_equal(tok_analysis_run_doc(a, doc, sizeof doc - 1, collect_doc,
                                          &l, &err), KVFTS_EINVAL);
    assert_non_null(strstr(err.msg, "UTF-8"));
    assert_true(err.pos >= 0);
    tl_free(&l);
    tok_analysis_free(a);
}

/* ---- analyzers --------------------------------------------------------- */

static void test_english(void **state)
{
    (void)state;
    assert_string_equal(terms("english", "running connections"),
                        "run connect");
    assert_string_equal(terms("english", "The Running, CONNECTED cats"),
                        "the run connect cat");
    assert_string_equal(terms("porter", "connections"), "connect");
    /* the unstemmed analyzer leaves them */
    assert_string_equal(terms("standard", "running connections"),
                        "running connections");
}

static void test_every_language(void **state)
{
    (void)state;
    /* One inflected word per Snowball language, and its stem after our
     * normalization (marks are removed from the stem: "häuser" -> "haus"). */
    static const char *const sample[][3] = {
        { "arabic", "الكتابات", "كتاب" },
        { "armenian", "տներում", "տներ" },
        { "basque", "etxeetan", "etxe" },
        { "catalan", "cantaven", "cant" },
        { "danish", "hestene", "hest" },
        { "dutch", "lopende", "lopend" },
        { "english", "running", "run" },
        { "finnish", "taloissa", "talo" },
        { "french", "continuellement", "continuel" },
        { "german", "Häuser", "haus" },
        { "greek", "βιβλια", "βιβλ" },
        { "hindi", "लड़कियों", NULL },
        { "hungarian", "házakban", "haz" },
        { "indonesian", "mempermainkan", "main" },
        { "irish", "gcathracha", "cathracha" },
        { "italian", "parlando", "parl" },
        { "lithuanian", "namuose", "nam" },
        { "nepali", "किताबहरू", NULL },
        { "norwegian", "hestene", "hest" },
        { "porter", "connections", "connect" },
        { "portuguese", "correndo", "corr" },
        { "romanian", "frumoasele", "frumoas" },
        { "russian", "книгами", "книг" },
        { "serbian", "knjigama", "knjig" },
        { "spanish", "corriendo", "corr" },
        { "swedish", "hästarna", "hast" },
        { "tamil", "புத்தகங்கள்", NULL },
        { "turkish", "kitaplar", "kitap" },
        { "yiddish", "שרײַבן", NULL },
    };
    size_t nlang = 0;
    for (const char **p = sb_stemmer_list(); *p; p++) {
        nlang++;
        size_t i = 0;
        while (i < sizeof sample / sizeof sample[0] &&
               strcmp(sample[i][0], *p) != 0)
            i++;
        if (i == sizeof sample / sizeof sample[0])
            fail_msg("no sample word for Snowball language \"%s\"", *p);
        char unstemmed[256];
        snprintf(unstemmed, sizeof unstemmed, "%s",
                 terms("standard", sample[i][1]));
        const char *stem = terms(*p, sample[i][1]);
        if (!*stem || strchr(stem, ' '))
            fail_msg("%s: \"%s\" -> \"%s\"", *p, sample[i][1], stem);
        if (strcmp(stem, unstemmed) == 0)
            fail_msg("%s: \"%s\" was not stemmed", *p, sample[i][1]);
        if (sample[i][2])
            assert_string_equal(stem, sample[i][2]);
        /* the analyzer name is valid */
        tok_tokenizer *t;
        kv_err err = KV_ERR_INIT;
        assert_int_equal(tok_new(&t, *p, &err), 0);
        assert_int_equal(tok_get_kind(t), TOK_STEMMED);
        tok_free(t);
    }
    assert_true(nlang >= 25);
    /* names list: builtins then every language */
    assert_string_equal(tok_analyzer_name(0), "standard");
    assert_string_equal(tok_analyzer_name(1), "keyword");
    assert_string_equal(tok_analyzer_name(2), "none");
    assert_string_equal(tok_analyzer_name(3), sb_stemmer_list()[0]);
    assert_null(tok_analyzer_name(3 + nlang));
}

/* The tokenizer skips the stemmer for words of ASCII digits only; that is
 * exact only if no language changes them. */
static void test_digits_unstemmed(void **state)
{
    (void)state;
    char w[64];
    for (const char **p = sb_stemmer_list(); *p; p++) {
        struct sb_stemmer *sb = sb_stemmer_new(*p, "UTF_8");
        assert_non_null(sb);
        for (int i = 0; i < 3000; i++) {
            int n = i < 1200 ? snprintf(w, sizeof w, "%d", i)
                             : i < 1300 ? snprintf(w, sizeof w, "%0*d",
                                                   1 + i % 20, i)
                                        : snprintf(w, sizeof w, "%u%u",
                                                   rnd(), rnd());
            const sb_symbol *r = sb_stemmer_stem(sb, (const sb_symbol *)w, n);
            if (sb_stemmer_length(sb) != n || memcmp(r, w, (size_t)n) != 0)
                fail_msg("%s stems \"%s\" to \"%.*s\"", *p, w,
                         sb_stemmer_length(sb), r);
        }
        sb_stemmer_delete(sb);
    }
}

static void test_keyword_none(void **state)
{
    (void)state;
    assert_string_equal(terms("keyword", "Hello, World — Café!"),
                        "hello, world — cafe!");
    assert_string_equal(terms("keyword", "ＡＢＣ-ﬁ"), "abc-fi");
    assert_string_equal(terms("keyword", "한국어"), "한국어");
    assert_string_equal(terms("keyword", ""), "");
    assert_string_equal(terms("none", "anything at all"), "");

    tok_tokenizer *t;
    kv_err err = KV_ERR_INIT;
    tlist l = { 0 };
    char big[300];
    assert_int_equal(tok_new(&t, "keyword", &err), 0);
    assert_int_equal(tok_run(t, "Café au lait", 13, collect, &l, &err), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.v[0].pos, 0);
    assert_int_equal(l.v[0].start, 0);
    assert_int_equal(l.v[0].end, 13);
    tl_free(&l);
    memset(big, 'x', sizeof big);
    assert_int_equal(tok_run(t, big, 129, collect, &l, &err), 0);
    assert_int_equal(l.n, 0);
    tok_stats st;
    tok_get_stats(t, &st);
    assert_int_equal(st.too_long, 1);
    /* tok_keyword() on any analyzer */
    char out[TOK_MAX_TERM + 1];
    size_t n;
    assert_int_equal(tok_keyword(t, "1E3", 3, out, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(out, "1e3", 3);
    tok_free(t);
    assert_int_equal(tok_new(&t, "french", &err), 0);
    assert_int_equal(tok_keyword(t, "Élan Vital", 11, out, &n, &err), 0);
    assert_int_equal(n, 10);
    assert_memory_equal(out, "elan vital", 10);
    assert_int_equal(tok_keyword(t, big, 200, out, &n, &err), 0);
    assert_int_equal(n, TOK_MAX_TERM + 1);
    tok_free(t);
}

static void test_stopwords(void **state)
{
    (void)state;
    tok_tokenizer *t;
    kv_err err = KV_ERR_INIT;
    tlist l = { 0 };
    const char *words[] = { "The", "A", "ÉTÉ" };
    assert_int_equal(tok_new(&t, "standard", &err), 0);
    assert_int_equal(tok_set_stopwords(t, words, NULL, 3, &err), 0);
    const char *text = "the cat and a dog été ete";
    assert_int_equal(tok_run(t, text, strlen(text), collect, &l, &err), 0);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.v[0].term, "cat");
    assert_int_equal(l.v[0].pos, 1);              /* stop words keep a pos */
    assert_string_equal(l.v[1].term, "and");
    assert_string_equal(l.v[2].term, "dog");
    assert_int_equal(l.v[2].pos, 4);
    tok_stats st;
    tok_get_stats(t, &st);
    assert_int_equal(st.stopped, 4);
    tl_free(&l);
    const char *two[] = { "don't" };
    assert_int_equal(tok_set_stopwords(t, two, NULL, 1, &err), KVFTS_EINVAL);
    assert_non_null(strstr(err.msg, "don't"));
    tok_free(t);
}

/* ---- fast path == utf8proc path --------------------------------------- */

/* Code points that exercise every path: ASCII letters, digits and
 * punctuation; Latin-1 and Latin Extended; combining marks; Greek (final
 * sigma, tonos); Cyrillic; Hebrew and Arabic with points; Devanagari with
 * vowel signs; Thai; CJK; kana (half-width too); Hangul syllables and
 * conjoining jamo; full-width forms; ligatures; compatibility numbers;
 * symbols; emoji; private use; controls. */
static const uint32_t pool[] = {
    'a', 'b', 'Z', 'q', '0', '9', ' ', '.', '-', '_', '\'', '\n', 0x00,
    0xC9, 0xE9, 0xDF, 0xC5, 0xF1, 0xD8, 0xFE, 0xAA, 0xB2, 0xB5, 0xBD, 0xAD,
    0xA0, 0x130, 0x131, 0x149, 0x17F, 0x1C4, 0x1C5, 0x1F0, 0x212B, 0x1E9E,
    0x300, 0x301, 0x308, 0x327, 0x345, 0x20DD, 0x1DC0,
    0x3A3, 0x3C3, 0x3C2, 0x390, 0x3AC, 0x1F80, 0x1FB3,
    0x418, 0x439, 0x451, 0x401, 0x4C1,
    0x5E9, 0x5C1, 0x5B8, 0x627, 0x64E, 0x653, 0x6F3, 0xFEFB,
    0x915, 0x93F, 0x94D, 0x928, 0x93C, 0x966,
    0xE01, 0xE31, 0xE48,
    0x65E5, 0x672C, 0x8A9E, 0x3042, 0x30AB, 0xFF76, 0xFF9E, 0x3000,
    0xD55C, 0xAD6D, 0x1100, 0x1161, 0x11A8, 0x3131,
    0xFF21, 0xFF41, 0xFF10, 0xFB01, 0xFB00, 0xFDFA, 0x2460, 0x2167, 0x2153,
    0x2122, 0x2103, 0x3392, 0x2044, 0x2014, 0x201C,
    0x1F600, 0x1F680, 0x1F1EB, 0x200D, 0xFE0F,
    0xE000, 0xF0000, 0x10400, 0x1D400, 0x20000,
};

static size_t put_utf8(char *o, uint32_t cp)
{
    utf8proc_uint8_t b[4];
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, b);
    memcpy(o, b, (size_t)n);
    return (size_t)n;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static size_t random_text(char *out, size_t max_cps)
{
    size_t n = 0, k = 1 + rnd() % max_cps;
    for (size_t i = 0; i < k; i++) {
        uint32_t cp;
        switch (rnd() % 8) {
        case 0:                        /* anywhere below U+0800 */
            do
                cp = 1 + rnd() % 0x7FF;
            while (cp == 0);
            break;
        case 1:                        /* anywhere in the BMP */
            do
                cp = rnd() % 0x10000;
            while (cp >= 0xD800 && cp <= 0xDFFF);
            break;
        default:
            cp = pool[rnd() % (sizeof pool / sizeof pool[0])];
        }
        n += put_utf8(out + n, cp);
    }
    return n;
}

static bool same_lists(const tlist *a, const tlist *b, bool offsets)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++) {
        if (a->v[i].len != b->v[i].len ||
            memcmp(a->v[i].term, b->v[i].term, a->v[i].len) != 0 ||
            a->v[i].pos != b->v[i].pos)
            return false;
        if (offsets && (a->v[i].start != b->v[i].start ||
                        a->v[i].end != b->v[i].end))
            return false;
    }
    return true;
}

static bool cat_tok(utf8proc_int32_t cp)
{
    utf8proc_category_t c = utf8proc_category(cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_NO) ||
           c == UTF8PROC_CATEGORY_CO;
}

static bool all_marks(const utf8proc_int32_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        utf8proc_category_t c = utf8proc_category(b[i]);
        if (c < UTF8PROC_CATEGORY_MN || c > UTF8PROC_CATEGORY_ME)
            return false;
    }
    return true;
}

/* utf8proc_map of s[0..n) with @p opts; returns malloc'd UTF-8. */
static char *map(const char *s, size_t n, utf8proc_option_t opts,
                 size_t *out_len)
{
    utf8proc_uint8_t *o = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s,
                                      (utf8proc_ssize_t)n, &o, opts);
    assert_true(r >= 0);
    *out_len = (size_t)r;
    return (char *)o;
}

/* The independent reference: cut the original into runs with
 * utf8proc_category, utf8proc_map each run, cut the result again, and for a
 * stemmer language stem the marks-kept form and strip the stem. */
static void reference_terms(const char *s, size_t n, struct sb_stemmer *sb,
                            tlist *out)
{
    utf8proc_ssize_t i = 0;
    uint32_t pos = 0;
    while ((size_t)i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                              (utf8proc_ssize_t)n - i, &cp);
        assert_true(l > 0);
        if (!cat_tok(cp)) {
            i += l;
            continue;
        }
        utf8proc_ssize_t start = i;
        while ((size_t)i < n) {
            l = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                 (utf8proc_ssize_t)n - i, &cp);
            if (!cat_tok(cp))
                break;
            i += l;
        }
        size_t ml;
        char *m = map(s + start, (size_t)(i - start),
                      sb ? OPTS_KEEP : OPTS_STRIP, &ml);
        /* cut m at separators */
        utf8proc_ssize_t j = 0;
        while ((size_t)j < ml) {
            utf8proc_int32_t buf[1024];
            size_t nb = 0;
            utf8proc_ssize_t ps = j;
            while ((size_t)j < ml) {
                utf8proc_int32_t c;
                utf8proc_ssize_t cl = utf8proc_iterate(
                    (const utf8proc_uint8_t *)m + j,
                    (utf8proc_ssize_t)ml - j, &c);
                if (!cat_tok(c))
                    break;
                if (nb < 1024)
                    buf[nb++] = c;
                j += cl;
            }
            size_t plen = (size_t)(j - ps);
            if (plen && !all_marks(buf, nb)) {
                uint32_t p = pos++;
                if (plen <= TOK_MAX_TERM) {
                    if (!sb) {
                        tl_push(out, "", 0, m + ps, plen, p, 0, 0);
                    } else {
                        const sb_symbol *st = sb_stemmer_stem(
                            sb, (const sb_symbol *)m + ps, (int)plen);
                        size_t sl;
                        char *ss = map((const char *)st,
                                       (size_t)sb_stemmer_length(sb),
                                       OPTS_STRIP, &sl);
                        if (sl == 0) {   /* tokenizer keeps unstemmed */
                            free(ss);
                            ss = map(m + ps, plen, OPTS_STRIP, &sl);
                        }
                        if (sl <= TOK_MAX_TERM)
                            tl_push(out, "", 0, ss, sl, p, 0, 0);
                        free(ss);
                    }
                }
            }
            while ((size_t)j < ml) {
                utf8proc_int32_t c;
                utf8proc_ssize_t cl = utf8proc_iterate(
                    (const utf8proc_uint8_t *)m + j,
                    (utf8proc_ssize_t)ml - j, &c);
                if (cat_tok(c))
                    break;
                j += cl;
            }
        }
        free(m);
    }
}

/* Compare fast, reference mode and the independent reference on s. */
static void check_paths(tok_tokenizer *fast, tok_tokenizer *ref,
                        struct sb_stemmer *sb, const char *s, size_t n)
{
    tlist a = { 0 }, b = { 0 }, c = { 0 };
    kv_err err = KV_ERR_INIT;
    assert_int_equal(tok_run(fast, s, n, collect, &a, &err), 0);
    assert_int_equal(tok_run(ref, s, n, collect, &b, &err), 0);
    reference_terms(s, n, sb, &c);
    if (!same_lists(&a, &b, true) || !same_lists(&a, &c, false)) {
        fprintf(stderr, "text (%zu bytes):", n);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %02x", (unsigned char)s[i]);
        fprintf(stderr, "\n");
        for (size_t i = 0; i < a.n || i < b.n || i < c.n; i++)
            fprintf(stderr, "  fast %-12s ref %-12s indep %s\n",
                    i < a.n ? a.v[i].term : "-", i < b.n ? b.v[i].term : "-",
                    i < c.n ? c.v[i].term : "-");
        fail_msg("fast path and utf8proc path differ (%s)", tok_name(fast));
    }
    tl_free(&a);
    tl_free(&b);
    tl_free(&c);
}

static void test_fast_equals_utf8proc(void **state)
{
    (void)state;
    const char *names[] = { "standard", "english", "french", "russian",
                            "hindi" };
    char text[4096];
    kv_err err = KV_ERR_INIT;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        tok_tokenizer *fast, *ref;
        struct sb_stemmer *sb = NULL;
        assert_int_equal(tok_new(&fast, names[k], &err), 0);
        assert_int_equal(tok_new(&ref, names[k], &err), 0);
        tok_set_reference_mode(ref, true);
        if (k > 0)
            sb = sb_stemmer_new(names[k], "UTF_8");
        /* random strings */
        int rounds = k == 0 ? 20000 : 3000;
        for (int r = 0; r < rounds; r++) {
            size_t n = random_text(text, r % 10 == 0 ? 200 : 12);
            check_paths(fast, ref, sb, text, n);
        }
        /* long runs over the limits, both paths */
        size_t n = 0;
        for (int i = 0; i < 140; i++)
            n += put_utf8(text + n, 0xE9);
        check_paths(fast, ref, sb, text, n);
        n = 0;
        for (int i = 0; i < 500; i++)
            n += put_utf8(text + n, i % 3 == 0 ? 0x1100 : i % 3 == 1
                                  ? 0x1161 : 0x11A8);
        check_paths(fast, ref, sb, text, n);
        tok_free(fast);
        tok_free(ref);
        sb_stemmer_delete(sb);
    }
}

/* Every code point alone and between letters, standard analyzer. */
static void test_every_code_point(void **state)
{
    (void)state;
    tok_tokenizer *fast, *ref;
    kv_err err = KV_ERR_INIT;
    assert_int_equal(tok_new(&fast, "standard", &err), 0);
    assert_int_equal(tok_new(&ref, "standard", &err), 0);
    tok_set_reference_mode(ref, true);
    for (uint32_t cp = 1; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        /* the design's invariant: a non-zero combining class is a mark */
        const utf8proc_property_t *p = utf8proc_get_property((int32_t)cp);
        if (p->combining_class)
            assert_true(p->category >= UTF8PROC_CATEGORY_MN &&
                        p->category <= UTF8PROC_CATEGORY_ME);
        if (cp >= 0x30000 && cp < 0xE0000)   /* unassigned planes */
            continue;
        char s[16];
        size_t n = 0;
        s[n++] = 'x';
        n += put_utf8(s + n, cp);
        s[n++] = 'y';
        check_paths(fast, ref, NULL, s, n);
        check_paths(fast, ref, NULL, s + 1, n - 2);
    }
    tok_free(fast);
    tok_free(ref);
}

/* ---- field extraction -------------------------------------------------- */

static void test_fields(void **state)
{
    (void)state;
    /* nested objects, arrays of objects, _all, positions with gaps; the
     * _all copy keeps its field's positions */
    assert_string_equal(
        doc_terms(NULL, "{\"a\":{\"b\":\"Hi there\"},"
                        "\"d\":[{\"e\":\"one\"},{\"e\":\"two\"}]}"),
        "a.b:hi@0 _all:hi@0 a.b:there@1 _all:there@1 "
        "d.e:one@0 _all:one@0 d.e:two@101 _all:two@101");
    /* arrays of strings use the array's path */
    assert_string_equal(doc_terms(NULL, "{\"tags\":[\"x y\",\"z\"]}"),
                        "tags:x@0 _all:x@0 tags:y@1 _all:y@1 "
                        "tags:z@102 _all:z@102");
    /* numbers and booleans: one keyword term, path only; null: nothing;
     * empty strings: nothing and no gap */
    assert_string_equal(
        doc_terms(NULL, "{\"n\":42,\"f\":-1.5E3,\"b\":true,\"z\":null,"
                        "\"e\":\"\",\"s\":[\"\",\"w\"]}"),
        "n:42@0 f:-1.5e3@0 b:true@0 s:w@0 _all:w@0");
    /* config: analyzers per field, exclude subtree, none, all off */
    const char *cfg =
        "{\"lookups\":{\"x\":1},\"analysis\":{\"default\":\"standard\","
        "\"fields\":{\"description\":\"english\",\"package\":\"keyword\","
        "\"maintainer\":\"none\",\"address.city\":\"keyword\"},"
        "\"exclude\":[\"homepage\",\"address.geo\"],\"stopwords\":[\"the\"]}}";
    assert_string_equal(
        doc_terms(cfg, "{\"package\":\"Foo-Bar\",\"description\":\"The "
                       "running dogs\",\"maintainer\":\"Joe\","
                       "\"homepage\":\"http://x\",\"address\":{\"city\":"
                       "\"New York\",\"geo\":{\"lat\":1.5},\"zip\":\"10001\"}}"),
        "package:foo-bar@0 _all:foo@0 _all:bar@1 "
        "description:run@1 description:dog@2 _all:running@1 _all:dogs@2 "
        "address.city:new york@0 _all:new@0 _all:york@1 "
        "address.zip:10001@0 _all:10001@0");
    assert_string_equal(doc_terms("{\"analysis\":{\"all\":false}}",
                                  "{\"a\":\"x\",\"b\":7}"), "a:x@0 b:7@0");
    /* the nested form of "fields" and "*" as default */
    assert_string_equal(
        doc_terms("{\"analysis\":{\"fields\":{\"a\":{\"b\":\"keyword\"},"
                  "\"*\":\"english\"}}}", "{\"a\":{\"b\":\"X Y\"},\"c\":"
                  "\"cats\"}"),
        "a.b:x y@0 _all:x@0 _all:y@1 c:cat@0 _all:cat@0");
    /* default keyword: _all falls back to standard */
    assert_string_equal(doc_terms("{\"analysis\":{\"default\":\"keyword\"}}",
                                  "{\"a\":\"X Y\"}"),
                        "a:x y@0 _all:x@0 _all:y@1");
    /* default none: nothing at all but listed fields */
    assert_string_equal(
        doc_terms("{\"analysis\":{\"default\":\"none\",\"fields\":{\"a\":"
                  "\"standard\"}}}", "{\"a\":\"x\",\"b\":\"y\",\"c\":3}"),
        "a:x@0 _all:x@0");
    /* positions of _all continue across fields; exclusions are exact
     * paths or subtrees, not prefixes of names */
    assert_string_equal(
        doc_terms("{\"analysis\":{\"exclude\":[\"ab\"]}}",
                  "{\"ab\":\"no\",\"abc\":\"yes\",\"ab.c\":\"no\"}"),
        "abc:yes@0 _all:yes@0");
}

static void test_fields_errors(void **state)
{
    (void)state;
    tok_analysis *a;
    kv_err err = KV_ERR_INIT;
    tlist l = { 0 };
    assert_int_equal(tok_analysis_new(&a, "{}", 2, &err), 0);
    assert_true(tok_analysis_all(a));
    assert_true(tok_analysis_positions(a));
    const char d1[] = "{\"x\":{\"_all\":\"a\"},\"_all\":\"b\"}";
    assert_int_equal(tok_analysis_run_doc(a, d1, sizeof d1 - 1, collect_doc,
                                          &l, &err), KVFTS_EINVAL);
    assert_non_null(strstr(err.msg, "reserved"));
    tl_free(&l);
    /* not JSON, not an object */
    assert_int_equal(tok_analysis_run_doc(a, "[1]", 3, collect_doc, &l, &err),
                     KVFTS_EINVAL);
    assert_int_equal(tok_analysis_run_doc(a, "{\"a\":", 5, collect_doc, &l,
                                          &err), KVFTS_EINVAL);
    /* 10,000 levels: refused cleanly by the walker's depth limit */
    size_t depth = 10000, n = 0;
    char *deep = malloc(depth * 6 + 16);
    for (size_t i = 0; i < depth; i++)
        n += (size_t)sprintf(deep + n, "{\"a\":");
    n += (size_t)sprintf(deep + n, "\"x\"");
    for (size_t i = 0; i < depth; i++)
        deep[n++] = '}';
    assert_int_equal(tok_analysis_run_doc(a, deep, n, collect_doc, &l, &err),
                     KVFTS_EINVAL);
    assert_non_null(strstr(err.msg, "nesting"));
    assert_true(err.pos > 0);
    free(deep);
    tl_free(&l);
    /* an emit error stops the walk and comes back */
    tok_analysis_free(a);
}

static int count_terms(void *p, const tok_term *t)
{
    (void)t;
    (*(size_t *)p)++;
    return 0;
}

static int stop_at_3(void *p, const tok_term *t)
{
    (void)t;
    return ++*(size_t *)p == 3 ? 42 : 0;
}

static void test_huge_strings(void **state)
{
    (void)state;
    tok_analysis *a;
    kv_err err = KV_ERR_INIT;
    size_t words = 5 * 1024 * 1024 / 6;            /* "word5 " x ~870k */
    char *doc = malloc(words * 6 + 64);
    size_t n = (size_t)sprintf(doc, "{\"t\":\"");
    for (size_t i = 0; i < words; i++) {
        memcpy(doc + n, "word5 ", 6);
        n += 6;
    }
    n += (size_t)sprintf(doc + n, "\"}");
    assert_int_equal(tok_analysis_new(&a, NULL, 0, &err), 0);
    size_t count = 0;
    assert_int_equal(tok_analysis_run_doc(a, doc, n, count_terms, &count,
                                          &err), 0);
    assert_int_equal(count, 2 * words);            /* field + _all */
    count = 0;
    assert_int_equal(tok_analysis_run_doc(a, doc, n, stop_at_3, &count, &err),
                     42);
    /* one 5 MB run: a single over-long token, counted, in both analyzers
     * and in the keyword analyzer */
    n = (size_t)sprintf(doc, "{\"t\":\"");
    for (size_t i = 0; i < words * 6; i++)
        doc[n++] = (char)('a' + i % 26);
    n += (size_t)sprintf(doc + n, "\"}");
    tok_analysis_stats_reset(a);
    count = 0;
    assert_int_equal(tok_analysis_run_doc(a, doc, n, count_terms, &count,
                                          &err), 0);
    assert_int_equal(count, 0);
    tok_stats st;
    tok_analysis_stats(a, &st);
    assert_int_equal(st.too_long, 1);               /* tokenized once */
    tok_analysis_free(a);
    assert_int_equal(tok_analysis_new(&a, "{\"analysis\":{\"default\":"
                                      "\"keyword\",\"all\":false}}", 46, &err),
                     0);
    assert_int_equal(tok_analysis_run_doc(a, doc, n, count_terms, &count,
                                          &err), 0);
    assert_int_equal(count, 0);
    tok_analysis_stats(a, &st);
    assert_int_equal(st.too_long, 1);
    tok_analysis_free(a);
    free(doc);
}

static void expect_config_error(const char *cfg, const char *needle)
{
    tok_analysis *a = (tok_analysis *)1;
    kv_err err = KV_ERR_INIT;
    int rc = tok_analysis_new(&a, cfg, strlen(cfg), &err);
    if (rc != KVFTS_EINVAL)
        fail_msg("config %s: rc %d, want EINVAL", cfg, rc);
    assert_null(a);
    if (!strstr(err.msg, needle))
        fail_msg("config %s: message \"%s\" lacks \"%s\"", cfg, err.msg,
                 needle);
}

static void test_config_errors(void **state)
{
    (void)state;
    expect_config_error("{\"analysis\":{\"fields\":{\"d\":\"englsh\"}}}",
                        "config \"analysis.fields.d\": unknown analyzer "
                        "\"englsh\" (valid: standard, keyword, none, arabic,");
    expect_config_error("{\"analysis\":{\"default\":\"x\"}}",
                        "english, finnish, french");
    expect_config_error("{\"analysis\":{\"colour\":1}}",
                        "unknown key \"analysis.colour\"");
    expect_config_error("{\"analysis\":{\"positions\":{\"x\":true}}}",
                        "unknown key \"analysis.positions\"");
    expect_config_error("{\"analysis\":{\"all\":\"yes\"}}",
                        "\"analysis.all\": must be true or false");
    expect_config_error("{\"analysis\":{\"default\":1}}",
                        "must be a string");
    expect_config_error("{\"analysis\":\"standard\"}", "must be an object");
    expect_config_error("{\"analysis\":{\"fields\":\"x\"}}",
                        "must be an object");
    expect_config_error("{\"analysis\":{\"default\":\"standard\",\"fields\":"
                        "{\"*\":\"english\"}}}", "disagree");
    expect_config_error("{\"analysis\":{\"stopwords\":[\"x y\"]}}",
                        "analysis.stopwords");
    expect_config_error("{\"analysis\":", "invalid JSON");
    /* valid ones */
    tok_analysis *a;
    kv_err err = KV_ERR_INIT;
    const char *ok = "{\"other\":{\"analysis\":5},\"analysis\":{\"default\":"
                     "\"french\",\"positions\":false,\"all\":true,"
                     "\"exclude\":\"x\",\"fields\":{\"a.b\":\"none\"}}}";
    assert_int_equal(tok_analysis_new(&a, ok, strlen(ok), &err), 0);
    assert_false(tok_analysis_positions(a));
    assert_null(tok_analysis_field(a, "a.b", 3));
    assert_null(tok_analysis_field(a, "x", 1));
    assert_null(tok_analysis_field(a, "x.y", 3));
    assert_string_equal(tok_name(tok_analysis_field(a, "c", 1)), "french");
    assert_string_equal(tok_name(tok_analysis_field(a, "_all", 4)), "french");
    tok_analysis_free(a);
    assert_int_equal(tok_analysis_new(&a, NULL, 0, &err), 0);
    assert_string_equal(tok_name(tok_analysis_field(a, "any", 3)),
                        "standard");
    tok_analysis_free(a);
}

/* ---- allocation failures ----------------------------------------------- */

/* Fail the n-th allocation (and every later one) for n = 1, 2, ... until
 * the operation succeeds without a failure; each failing run must return
 * KVFTS_ENOMEM and free everything (ASan / valgrind check the leaks).
 *
 * Only code paths that do not go through kv_json_walk() are driven here:
 * YAJL 2.1.0 does not check its own allocations (yajl_alloc writes through
 * the NULL it got from the allocator), so failing an allocation inside the
 * walker crashes in YAJL -- a kv/YAJL problem reported to the foundation,
 * not something the tokenizer can work around. */
static int op_tok_new(const char *name)
{
    tok_tokenizer *t = NULL;
    kv_err err = KV_ERR_INIT;
    const char *stop[] = { "the", "a", "of", "and", "to", "in", "is", "it",
                           "for", "on", "as", "at", "by", "an", "be", "or",
                           "this", "that" };
    int rc = tok_new(&t, name, &err);
    if (!rc)
        rc = tok_set_stopwords(t, stop, NULL, sizeof stop / sizeof stop[0],
                               &err);
    if (!rc) {
        tlist l = { 0 };
        const char *text = "Some text, ½ 한국어";
        rc = tok_run(t, text, strlen(text), collect, &l, &err);
        tl_free(&l);
    }
    if (rc)
        assert_int_equal(err.code, rc);
    tok_free(t);
    return rc;
}

static int op_analysis(void)
{
    tok_analysis *a = NULL;
    kv_err err = KV_ERR_INIT;
    int rc = tok_analysis_new(&a, NULL, 0, &err);
    for (int i = 0; !rc && i < 200; i++) {  /* grows the field cache */
        char field[32];
        int fl = snprintf(field, sizeof field, "f%d.x", i);
        size_t count = 0;
        rc = tok_analysis_run_value(a, field, (size_t)fl, "Some words",
                                    10, count_terms, &count, &err);
        if (!rc)
            assert_int_equal(count, 4);
    }
    tok_analysis_free(a);
    return rc;
}

static void test_alloc_failures(void **state)
{
    (void)state;
    const char *names[] = { "standard", "english", "keyword" };
    for (int which = 0; which < 4; which++) {
        long n;
        for (n = 1; n < 10000; n++) {
            kv_alloc_fail_after(n);
            int rc = which < 3 ? op_tok_new(names[which]) : op_analysis();
            long failed = kv_alloc_failures();
            kv_alloc_fail_after(0);
            if (failed == 0) {
                assert_int_equal(rc, KVFTS_OK);
                break;
            }
            if (rc != KVFTS_ENOMEM)
                fail_msg("op %d, allocation %ld failed: rc %d", which, n, rc);
        }
        assert_true(n > 1);      /* it did allocate, and we failed each */
    }
}

/* ---- differential test against SQLite FTS5 ----------------------------- */

#ifdef HAVE_SQLITE

typedef struct fts {
    sqlite3 *db;
    fts5_tokenizer mod;
    Fts5Tokenizer *tok;
} fts;

static int fts_cb(void *ctx, int flags, const char *t, int n, int start,
                  int end)
{
    (void)flags;
    tl_push(ctx, "", 0, t, (size_t)n, 0, (size_t)start, (size_t)end);
    return SQLITE_OK;
}

static void fts_open(fts *f)
{
    fts5_api *api = NULL;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(":memory:", &f->db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(f->db, "SELECT fts5(?1)", -1, &st,
                                        NULL), SQLITE_OK);
    sqlite3_bind_pointer(st, 1, &api, "fts5_api_ptr", NULL);
    sqlite3_step(st);
    sqlite3_finalize(st);
    assert_non_null(api);
    void *ud = NULL;
    assert_int_equal(api->xFindTokenizer(api, "unicode61", &ud, &f->mod),
                     SQLITE_OK);
    const char *args[] = { "remove_diacritics", "2" };
    assert_int_equal(f->mod.xCreate(ud, args, 2, &f->tok), SQLITE_OK);
}

static void fts_close(fts *f)
{
    f->mod.xDelete(f->tok);
    sqlite3_close(f->db);
}

static void fts_run(fts *f, const char *s, size_t n, tlist *out)
{
    assert_int_equal(f->mod.xTokenize(f->tok, out, FTS5_TOKENIZE_DOCUMENT, s,
                                      (int)n, fts_cb), SQLITE_OK);
}

/* Why a region of text may tokenize differently.  Each class is a property
 * of one code point of the region, decided by probing both tokenizers with
 * that code point alone, so a class can never hide a difference that the
 * code point does not explain. */
enum {
    D_MARK,     /* a mark (M*): FTS5 keeps only its Latin diacritics inside
                   a token and separates on every other mark (Devanagari
                   vowel signs, Hebrew points, enclosing marks), and never
                   starts a token with one; we treat every mark as part of
                   the word and remove it */
    D_COMPAT,   /* NFKC changes the code point (full-width forms, ligatures,
                   ½, ², ①, half-width kana): FTS5 does no compatibility
                   normalization */
    D_CATEGORY, /* the two disagree on whether the code point is a token
                   character: FTS5's tables are from Unicode 6.1, utf8proc
                   2.8's from Unicode 15.0 (new letters, emoji modifiers,
                   re-categorized symbols) */
    D_FOLD,     /* both keep it, folded differently: full case folding
                   (ß -> ss, ŉ -> ʼn) where FTS5 folds simply, and marks
                   removed from non-Latin letters (Greek tonos, Cyrillic
                   й -> и) where remove_diacritics 2 covers Latin only */
    D_COMPOSE,  /* no code point differs alone, but NFKC composes the
                   sequence: Hangul conjoining jamo (U+1100 block) become a
                   syllable; FTS5 works code point by code point.  Detected
                   by comparing utf8proc_map of the region with the
                   concatenation of utf8proc_map of each code point */
    D_UNEXPLAINED,
    D_NCLASS
};
static const char *const dclass_name[D_NCLASS] = {
    "mark", "compat", "category", "fold", "compose", "UNEXPLAINED"
};

typedef struct diff_state {
    fts *f;
    tok_tokenizer *ours;
    uint8_t *cls;              /* per code point: 0 unknown, else class+1,
                                  or 0xFF when the two agree on it */
    size_t docs, equal_docs, regions[D_NCLASS];
    size_t ascii_docs, ascii_equal;     /* texts of ASCII only */
    char example[D_NCLASS][200];
    size_t tokens_ours, tokens_fts;
} diff_state;

static void probe(diff_state *d, const char *s, size_t n, tlist *a, tlist *b)
{
    kv_err err = KV_ERR_INIT;
    assert_int_equal(tok_run(d->ours, s, n, collect, a, &err), 0);
    fts_run(d->f, s, n, b);
}

/* The class of code point cp, or 0xFF if both treat it the same. */
static uint8_t cp_class(diff_state *d, uint32_t cp)
{
    if (d->cls[cp])
        return d->cls[cp];
    uint8_t c = 0xFF;
    utf8proc_category_t cat = utf8proc_category((int32_t)cp);
    char one[8], mid[16];
    size_t n1 = put_utf8(one, cp), nm = 0;
    mid[nm++] = 'a';
    memcpy(mid + nm, one, n1);
    nm += n1;
    mid[nm++] = 'a';
    size_t l1, l2;
    char *m1 = map(one, n1, OPTS_STRIP, &l1);
    char *m2 = map(one, n1, UTF8PROC_COMPOSE | UTF8PROC_CASEFOLD |
                   UTF8PROC_STRIPMARK, &l2);
    tlist a = { 0 }, b = { 0 }, a1 = { 0 }, b1 = { 0 };
    probe(d, mid, nm, &a, &b);
    probe(d, one, n1, &a1, &b1);
    if (cat >= UTF8PROC_CATEGORY_MN && cat <= UTF8PROC_CATEGORY_ME)
        c = D_MARK;
    else if (l1 != l2 || memcmp(m1, m2, l1) != 0)
        c = D_COMPAT;
    else if ((a.n == 1) != (b.n == 1) || (a1.n == 1) != (b1.n == 1))
        c = D_CATEGORY;
    else if (!same_lists(&a, &b, false) || a1.n != b1.n ||
             (a1.n == 1 && (a1.v[0].len != b1.v[0].len ||
                            memcmp(a1.v[0].term, b1.v[0].term,
                                   a1.v[0].len) != 0)))
        c = D_FOLD;
    free(m1);
    free(m2);
    tl_free(&a);
    tl_free(&b);
    tl_free(&a1);
    tl_free(&b1);
    d->cls[cp] = c;
    return c;
}

/* Classify the region s[lo..hi) where the token lists differ. */
static void classify(diff_state *d, const char *s, size_t lo, size_t hi)
{
    int best = D_UNEXPLAINED;
    for (size_t i = lo; i < hi;) {
        int32_t cp;
        utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                              (utf8proc_ssize_t)(hi - i), &cp);
        if (l <= 0)
            break;
        uint8_t c = cp_class(d, (uint32_t)cp);
        if (c != 0xFF && c < best)
            best = c;
        i += (size_t)l;
    }
    if (best == D_UNEXPLAINED) {
        size_t wl, cl = 0;
        char *whole = map(s + lo, hi - lo, OPTS_STRIP, &wl);
        char *cat = malloc((hi - lo) * 18 * 4 + 1);
        for (size_t i = lo; i < hi;) {
            int32_t cp;
            utf8proc_ssize_t l = utf8proc_iterate(
                (const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(hi - i),
                &cp);
            size_t pl;
            char *part = map(s + i, (size_t)l, OPTS_STRIP, &pl);
            memcpy(cat + cl, part, pl);
            cl += pl;
            free(part);
            i += (size_t)l;
        }
        if (wl != cl || memcmp(whole, cat, wl) != 0)
            best = D_COMPOSE;
        free(whole);
        free(cat);
    }
    if (d->regions[best]++ == 0)
        snprintf(d->example[best], sizeof d->example[best], "\"%.*s\"",
                 (int)(hi - lo > 80 ? 80 : hi - lo), s + lo);
    if (best == D_UNEXPLAINED)
        fprintf(stderr, "unexplained difference in \"%.*s\"\n",
                (int)(hi - lo), s + lo);
}

static bool same_tok(const tterm *x, const tterm *y)
{
    return x->len == y->len && memcmp(x->term, y->term, x->len) == 0 &&
           x->start == y->start && x->end == y->end;
}

/* Compare the two tokenizations of one text, region by region. */
static void diff_text(diff_state *d, const char *s, size_t n)
{
    tlist a = { 0 }, b = { 0 };
    probe(d, s, n, &a, &b);
    d->docs++;
    d->tokens_ours += a.n;
    d->tokens_fts += b.n;
    size_t i = 0, j = 0;
    bool equal = true;
    while (i < a.n || j < b.n) {
        if (i < a.n && j < b.n && same_tok(&a.v[i], &b.v[j])) {
            i++;
            j++;
            continue;
        }
        equal = false;
        /* the smallest byte range covering the differing tokens */
        size_t lo = SIZE_MAX, hi = 0;
        if (i < a.n) {
            lo = a.v[i].start;
            hi = a.v[i].end;
        }
        if (j < b.n) {
            lo = lo < b.v[j].start ? lo : b.v[j].start;
            hi = hi > b.v[j].end ? hi : b.v[j].end;
        }
        for (bool grew = true; grew;) {
            grew = false;
            while (i < a.n && a.v[i].start < hi) {
                hi = hi > a.v[i].end ? hi : a.v[i].end;
                i++;
                grew = true;
            }
            while (j < b.n && b.v[j].start < hi) {
                hi = hi > b.v[j].end ? hi : b.v[j].end;
                j++;
                grew = true;
            }
        }
        classify(d, s, lo, hi);
    }
    if (equal)
        d->equal_docs++;
    size_t k = 0;
    while (k < n && !(s[k] & 0x80))
        k++;
    if (k == n) {
        d->ascii_docs++;
        d->ascii_equal += equal;
    }
    tl_free(&a);
    tl_free(&b);
}

/* Descriptions from a JSON Lines file ({"description": ...} per line). */
static int desc_leaf(void *p, const char *path, size_t plen,
                     kv_json_type type, const char *v, size_t vlen,
                     size_t pos)
{
    (void)pos;
    if (type == KV_JSON_STRING && plen == 11 &&
        memcmp(path, "description", 11) == 0)
        diff_text(p, v, vlen);
    return 0;
}

static FILE *open_data(const char *name)
{
    char path[1024];
    const char *src = getenv("KVFTS_SOURCE_DIR");
    const char *dirs[] = { src, ".", "..", "../..", "../../.." };
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        if (!dirs[i])
            continue;
        snprintf(path, sizeof path, "%s/tests/data/%s", dirs[i], name);
        FILE *f = fopen(path, "r");
        if (f)
            return f;
    }
    fail_msg("tests/data/%s not found (set KVFTS_SOURCE_DIR)", name);
    return NULL;
}

static void diff_file(diff_state *d, const char *name)
{
    FILE *f = open_data(name);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    kv_err err = KV_ERR_INIT;
    while ((n = getline(&line, &cap, f)) > 0)
        assert_int_equal(kv_json_walk(line, (size_t)n, NULL, desc_leaf, d,
                                      &err), 0);
    free(line);
    fclose(f);
}

/* Every Description of `apt-cache dumpavail` (continuation lines joined,
 * " ." paragraph marks dropped). */
static void diff_catalog(diff_state *d)
{
    FILE *p = popen("apt-cache dumpavail 2>/dev/null", "r");
    assert_non_null(p);
    char *line = NULL, *desc = NULL;
    size_t cap = 0, dlen = 0, dcap = 0;
    bool in_desc = false;
    ssize_t n;
    for (;;) {
        n = getline(&line, &cap, p);
        bool cont = n > 0 && line[0] == ' ';
        if (in_desc && !cont) {
            diff_text(d, desc, dlen);
            in_desc = false;
        }
        if (n <= 0)
            break;
        if (cont && in_desc) {
            if (strcmp(line, " .\n") == 0)
                continue;
        } else if (strncmp(line, "Description:", 12) == 0) {
            in_desc = true;
            dlen = 0;
        } else {
            continue;
        }
        if (dlen + (size_t)n + 1 > dcap) {
            dcap = (dlen + (size_t)n + 1) * 2;
            desc = realloc(desc, dcap);
        }
        const char *from = cont ? line + 1 : line + 12;
        size_t fl = strlen(from);
        memcpy(desc + dlen, from, fl);
        dlen += fl;
    }
    free(line);
    free(desc);
    pclose(p);
}

static void report(const diff_state *d, const char *what)
{
    printf("[ diff     ] %s: %zu texts, %zu identical (ASCII-only: %zu of "
           "%zu); %zu tokens (FTS5 %zu)\n", what, d->docs, d->equal_docs,
           d->ascii_equal, d->ascii_docs, d->tokens_ours, d->tokens_fts);
    for (int c = 0; c < D_NCLASS; c++)
        if (d->regions[c])
            printf("[ diff     ]   %-11s %6zu regions, e.g. %s\n",
                   dclass_name[c], d->regions[c], d->example[c]);
}

static void test_differential_fts5(void **state)
{
    (void)state;
    fts f;
    kv_err err = KV_ERR_INIT;
    fts_open(&f);
    diff_state d = { .f = &f };
    d.cls = calloc(0x110000, 1);
    assert_int_equal(tok_new(&d.ours, "standard", &err), 0);

    diff_file(&d, "tok_debian_sample.jsonl");
    report(&d, "Debian sample");
    assert_int_equal(d.docs, 400);
    assert_int_equal(d.regions[D_UNEXPLAINED], 0);
    /* ASCII text can only differ if something is wrong */
    assert_true(d.ascii_docs >= 200);
    assert_int_equal(d.ascii_equal, d.ascii_docs);

    diff_state m = { .f = &f, .ours = d.ours, .cls = d.cls };
    diff_file(&m, "tok_multilingual.jsonl");
    report(&m, "multilingual");
    assert_int_equal(m.regions[D_UNEXPLAINED], 0);
    assert_true(m.regions[D_MARK] > 0 && m.regions[D_COMPAT] > 0 &&
                m.regions[D_FOLD] > 0 && m.regions[D_COMPOSE] > 0);

    /* The whole catalog when apt-cache has one (Debian, CI); the fixed
     * sample above is what makes the test deterministic.
     * KVFTS_TOK_FULL_CATALOG=0 turns this part off (e.g. under valgrind). */
    const char *full = getenv("KVFTS_TOK_FULL_CATALOG");
    if (!full || *full != '0') {
        diff_state c = { .f = &f, .ours = d.ours, .cls = d.cls };
        diff_catalog(&c);
        if (c.docs == 0)
            printf("[ diff     ] apt-cache dumpavail gave no descriptions: "
                   "full-catalog comparison not run (the sample was)\n");
        else
            report(&c, "apt-cache dumpavail");
        assert_int_equal(c.regions[D_UNEXPLAINED], 0);
        assert_int_equal(c.ascii_equal, c.ascii_docs);
    }
    tok_free(d.ours);
    free(d.cls);
    fts_close(&f);
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
        cmocka_unit_test(test_unicode_examples),
        cmocka_unit_test(test_positions_offsets),
        cmocka_unit_test(test_too_long),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_english),
        cmocka_unit_test(test_every_language),
        cmocka_unit_test(test_digits_unstemmed),
        cmocka_unit_test(test_keyword_none),
        cmocka_unit_test(test_stopwords),
        cmocka_unit_test(test_fast_equals_utf8proc),
        cmocka_unit_test(test_every_code_point),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_fields_errors),
        cmocka_unit_test(test_huge_strings),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_differential_fts5),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
