/*
 * tok_text.c -- one analyzer: text in, terms out (README "Analysis").
 *
 * The rule.  A value is cut into runs: maximal sequences of code points whose
 * Unicode general category is L* (letters), N* (numbers), M* (marks) or Co
 * (private use); every other code point (spaces, punctuation, symbols,
 * controls, emoji) separates.  This is SQLite FTS5's unicode61 rule (its
 * default "L* N* Co" plus diacritics), widened to every mark so that scripts
 * written with spacing or non-Latin marks (Devanagari, Thai, Hebrew points)
 * are not cut inside words as FTS5 cuts them.  Each run is then normalized
 * with utf8proc -- NFKC, full case folding, and removal of the marks
 * (UTF8PROC_COMPOSE | COMPAT | CASEFOLD | STRIPMARK) -- and the result is cut
 * again wherever normalization produced a separator (NFKC turns "½" into
 * "1⁄2", so "½" gives the terms "1" and "2").  A run that normalizes to
 * nothing (only marks) gives no term and uses no position.
 *
 * We segment the original text first and normalize each run, rather than
 * normalize the whole value and segment the result, for two reasons: the
 * byte offsets of a token in the original value fall out for free, and a
 * symbol does not turn into a word ("™" -> "tm", "℃" -> "°c" would otherwise
 * become terms; they separate here as in FTS5).
 *
 * Speed.  utf8proc_map over whole texts runs at ~35 MB/s, so it is the slow
 * path, used only for runs that need it:
 *  - ASCII is classified and folded by a 128-byte table;
 *  - code points U+0080..U+07FF (Latin-1, Latin Extended, IPA, Greek,
 *    Cyrillic, Armenian, Hebrew, Arabic, ...) by a table of their individual
 *    normalized forms, built at tok_new() with utf8proc itself;
 *  - the category of other BMP code points by a bitmap built the same way.
 * A run made only of ASCII and of "simple" table entries (whose normalized
 * form is at most 6 bytes of token characters) is folded by concatenating
 * table entries; every other run takes the slow path below.
 *
 * Why concatenation is exact (and tests check it against utf8proc_map on
 * many strings): NFKC = compose(canonical-order(decompose(x))).  Decomposition
 * with case folding and mark stripping is per code point (that is how
 * utf8proc_decompose_char works).  Canonical ordering moves only code points
 * of non-zero combining class, and every such code point is a mark (checked
 * over all of Unicode by a test), so after stripping there is nothing to
 * reorder.  Composition needs a second element that is a mark or a Hangul
 * jamo; marks are stripped and jamo are outside U+0080..U+07FF.
 *
 * The slow path streams the run code point by code point through
 * utf8proc_decompose_char (ASCII by table), cutting pieces at separators,
 * composes each piece with utf8proc_normalize_utf32 (only Hangul composes
 * by then), and encodes it.  A piece is at most TOK_PIECE_MAX code points
 * before composition: composition merges at most 3 jamo into 1 syllable, so
 * a piece over 3 * TOK_MAX_TERM code points is over TOK_MAX_TERM bytes and is
 * skipped without being stored.  So no path allocates: every buffer is fixed
 * and lives in the tokenizer.
 *
 * UTF-8 is validated on the fly by the same decoder (strict: no overlongs,
 * surrogates, code points past U+10FFFF, truncated or stray bytes); the error
 * names the byte offset.
 *
 * Then, per term: longer than TOK_MAX_TERM bytes -> skipped and counted; in
 * the stop-word set -> dropped and counted; stemmed analyzers -> Snowball
 * (tok_stem.c).  Each candidate token (emitted, stopped or too long) uses one
 * position.
 *
 * Stemmed analyzers normalize with the marks KEPT (TOK_OPTS_KEEP), stem, and
 * remove the marks from the stem (strip_stem): Snowball's rules read accents
 * and vowel signs (Hindi, Tamil, Nepali, Arabic, Greek, Russian "й", French
 * "é"), and fed mark-less text they mostly do nothing.  The cut into pieces is
 * the same either way (marks are token characters), a piece of marks only
 * gives nothing in both, and the final term is mark-free like a standard
 * term.  With marks kept, composition and canonical ordering are live, so
 * the tables mark any entry whose form has a mark as not simple, and the slow
 * path orders marks before composing, exactly as utf8proc_map does.  Stop
 * words of a stemmed analyzer are compared before stemming, in this
 * marks-kept form (tok_set_stopwords normalizes them the same way).
 *
 * Keyword analyzer: the whole value, normalized the same way but without
 * cutting, is one term (empty: none; too long: skipped and counted).
 */
#include "tok_int.h"

#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <utf8proc.h>

#define TOK_OPTS_KEEP (UTF8PROC_COMPOSE | UTF8PROC_COMPAT | UTF8PROC_CASEFOLD)
#define TOK_OPTS (TOK_OPTS_KEEP | UTF8PROC_STRIPMARK)
#define TOK_PIECE_MAX (3 * TOK_MAX_TERM + 1)
#define TOK_DECOMP_MAX 32     /* longest single decomposition is 18 */
#define TOK_BUILTIN 3         /* standard, keyword, none */

/* fold2 flags */
#define F2_TOKEN 1u           /* the code point is L*, N*, M* or Co */
#define F2_SIMPLE 2u          /* its normalized form is in bytes[] and is
                                 made of token characters only */
#define F2_FITS 4u            /* its normalized form is in bytes[] (keyword) */

typedef struct fold2 {
    uint8_t flags;
    uint8_t len;              /* bytes of the normalized form */
    char bytes[6];
} fold2;

struct tok_tokenizer {
    tok_kind kind;
    char name[24];
    utf8proc_option_t opts;   /* TOK_OPTS; TOK_OPTS_KEEP when stemming */
    bool reference;           /* test hook: no tables, no stem cache */
    bool raw;                 /* no stop words, no stemming (internal) */
    tok_stemmer *stemmer;     /* TOK_STEMMED only */
    tok_wordset *stop;        /* NULL: no stop words */
    tok_stats stats;
    unsigned char ascii[128]; /* folded byte, 0 = separator */
    unsigned char lower[128]; /* ASCII lower case (keyword) */
    uint8_t bmp[0x10000 / 8]; /* bit set: BMP code point is a token char */
    fold2 f2[0x800];          /* entries for U+0080..U+07FF */
    int32_t piece[TOK_PIECE_MAX + TOK_DECOMP_MAX];
    char term[TOK_PIECE_MAX * 4 + 8];  /* encoded piece (fits any piece) */
    char stem[TOK_PIECE_MAX * 4 + 8];  /* a stem without its marks */
};

/* ---- code points ------------------------------------------------------- */

static inline bool cat_is_token(utf8proc_category_t c)
{
    /* LU..LO, MN..ME and ND..NO are the contiguous values 1..11. */
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_NO) ||
           c == UTF8PROC_CATEGORY_CO;
}

static inline bool is_tok(const tok_tokenizer *t, uint32_t cp)
{
    if (cp < 0x10000 && !t->reference)
        return (t->bmp[cp >> 3] >> (cp & 7)) & 1;
    return cat_is_token(utf8proc_category((utf8proc_int32_t)cp));
}

static inline bool is_mark(int32_t cp)
{
    utf8proc_category_t c = utf8proc_category(cp);
    return c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME;
}

/* Decode the code point at s[i] (i < n), strictly (kv.h). */
static inline size_t dec(const unsigned char *s, size_t n, size_t i,
                         uint32_t *out)
{
    return kv_utf8_decode(s, n, i, out);
}

static inline size_t enc(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Normalize the code points t->piece[0..np) (utf8proc, options @p opts) and
 * write them to @p out as UTF-8; *@p out_len gets the byte length. */
static int piece_to_utf8(tok_tokenizer *t, size_t np, utf8proc_option_t opts,
                         char *out, size_t *out_len, kv_err *err)
{
    utf8proc_ssize_t m = utf8proc_normalize_utf32(t->piece,
                                                  (utf8proc_ssize_t)np, opts);
    if (m < 0)
        return kv_seterr(err, KVFTS_ERROR, "utf8proc: %s",
                         utf8proc_errmsg(m));
    size_t len = 0;
    for (utf8proc_ssize_t k = 0; k < m; k++)
        len += enc(out + len, (uint32_t)t->piece[k]);
    *out_len = len;
    return KVFTS_OK;
}


static int bad_utf8(kv_err *err, size_t at)
{
    kv_seterr(err, KVFTS_EINVAL, "invalid UTF-8 at byte %zu", at);
    if (err)
        err->pos = (long long)at;
    return KVFTS_EINVAL;
}

/* The normalized form of one code point: NFKC-decomposed, case folded, marks
 * dropped (0 code points for a mark).  Never fails for a valid code point. */
static inline int decompose(uint32_t cp, int32_t *dst, utf8proc_option_t opts)
{
    int boundclass = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)cp, dst,
                                                 TOK_DECOMP_MAX, opts,
                                                 &boundclass);
    return n < 0 || n > TOK_DECOMP_MAX ? 0 : (int)n;
}

/* ---- tables ------------------------------------------------------------ */

static void build_tables(tok_tokenizer *t)
{
    for (unsigned c = 0; c < 128; c++) {
        bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                     (c >= 'A' && c <= 'Z');
        unsigned char low = (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32)
                                                   : (unsigned char)c;
        t->lower[c] = low;
        t->ascii[c] = alnum ? low : 0;
    }
    for (uint32_t cp = 0; cp < 0x10000; cp++)
        if (cat_is_token(utf8proc_category((utf8proc_int32_t)cp)))
            t->bmp[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    for (uint32_t cp = 0x80; cp < 0x800; cp++) {
        fold2 *e = &t->f2[cp];
        int32_t d[TOK_DECOMP_MAX];
        /* The normalized form of cp alone; with marks kept (stemmed
         * analyzers) that is the composed form, so an entry with a mark in
         * it cannot be concatenated and is not simple. */
        int nd = decompose(cp, d, t->opts);
        if (t->opts == TOK_OPTS_KEEP) {
            utf8proc_ssize_t m = utf8proc_normalize_utf32(d, nd, t->opts);
            nd = m < 0 ? 0 : (int)m;
        }
        bool fits = true, all_tok = true;
        size_t len = 0;
        for (int k = 0; k < nd; k++) {
            char b[4];
            size_t l = enc(b, (uint32_t)d[k]);
            if (len + l > sizeof e->bytes) {
                fits = false;
                break;
            }
            memcpy(e->bytes + len, b, l);
            len += l;
            if (!cat_is_token(utf8proc_category(d[k])) || is_mark(d[k]))
                all_tok = false;
        }
        e->len = fits ? (uint8_t)len : 0;
        e->flags = 0;
        if (is_tok(t, cp))
            e->flags |= F2_TOKEN;
        if (fits && all_tok)
            e->flags |= F2_SIMPLE;
        if (fits)
            e->flags |= F2_FITS;
    }
}

/* The tables depend only on the options: build both variants once per
 * process (0.6 ms: every BMP code point's category) and copy them into each
 * tokenizer, which the query parser makes per search. */
static tok_tokenizer protos[2];
static pthread_once_t protos_once = PTHREAD_ONCE_INIT;

static void build_protos(void)
{
    protos[0].opts = TOK_OPTS;
    build_tables(&protos[0]);
    protos[1].opts = TOK_OPTS_KEEP;
    build_tables(&protos[1]);
}

static void copy_tables(tok_tokenizer *t)
{
    pthread_once(&protos_once, build_protos);
    const tok_tokenizer *p = &protos[t->opts == TOK_OPTS_KEEP];
    memcpy(t->ascii, p->ascii, sizeof t->ascii);
    memcpy(t->lower, p->lower, sizeof t->lower);
    memcpy(t->bmp, p->bmp, sizeof t->bmp);
    memcpy(t->f2, p->f2, sizeof t->f2);
}

/* ---- terms ------------------------------------------------------------- */

/* The stem with its marks removed (and so with the normalization of a
 * standard term): ASCII as is, anything else through utf8proc. */
static int strip_stem(void *ctx, const char *stem, size_t len,
                      const char **out, size_t *out_len, kv_err *err)
{
    tok_tokenizer *t = ctx;
    const unsigned char *s = (const unsigned char *)stem;
    size_t i = 0;
    while (i < len && s[i] < 0x80)
        i++;
    if (i == len) {
        *out = stem;
        *out_len = len;
        return KVFTS_OK;
    }
    int32_t d[TOK_DECOMP_MAX];
    size_t np = 0;
    for (i = 0; i < len;) {
        uint32_t cp;
        size_t l = dec(s, len, i, &cp);
        if (!l)                        /* Snowball wrote bad UTF-8? */
            return kv_seterr(err, KVFTS_ERROR, "stemmer returned invalid "
                             "UTF-8");
        int nd = decompose(cp, d, TOK_OPTS);
        if (np + (size_t)nd > TOK_PIECE_MAX) {
            np = TOK_PIECE_MAX + 1;
            break;
        }
        memcpy(t->piece + np, d, (size_t)nd * sizeof *d);
        np += (size_t)nd;
        i += l;
    }
    if (np > TOK_PIECE_MAX) {          /* reported as too long */
        *out = stem;
        *out_len = TOK_MAX_TERM + 1;
        return KVFTS_OK;
    }
    int rc = piece_to_utf8(t, np, TOK_OPTS, t->stem, out_len, err);
    if (!rc)
        *out = t->stem;
    return rc;
}

/* True if term is ASCII digits only.  No Snowball algorithm changes such a
 * word (their suffixes and prefixes are letters; a test checks every
 * language on many digit strings), and numbers are a large share of the
 * distinct words of real text (sizes, versions, dates), so they skip the
 * stemmer and the stem cache. */
static inline bool all_digits(const char *term, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)(term[i] - '0') > 9)
            return false;
    return true;
}

/* A candidate token: count its position, then skip, stop, stem or emit. */
static int finish(tok_tokenizer *t, const char *term, size_t len,
                  size_t start, size_t end, uint32_t *pos, tok_emit_fn emit,
                  void *payload, kv_err *err)
{
    uint32_t p = *pos;
    if (p < UINT32_MAX)
        (*pos)++;
    if (len > TOK_MAX_TERM) {
        t->stats.too_long++;
        return KVFTS_OK;
    }
    if (!t->raw) {
        if (t->stop && tok__wordset_has(t->stop, term, len)) {
            t->stats.stopped++;
            return KVFTS_OK;
        }
        if (t->kind == TOK_STEMMED && !all_digits(term, len)) {
            const char *stem;
            size_t slen;
            int rc = tok__stem(t->stemmer, term, len, !t->reference,
                               strip_stem, t, &stem, &slen, &t->stats, err);
            if (rc)
                return rc;
            if (slen == 0) {
                /* The stem lost everything but marks: keep the word
                 * (mark-free), never emit an empty term. */
                rc = strip_stem(t, term, len, &stem, &slen, err);
                if (rc)
                    return rc;
            }
            if (slen > TOK_MAX_TERM) {
                t->stats.too_long++;
                return KVFTS_OK;
            }
            term = stem;
            len = slen;
        }
    }
    t->stats.tokens++;
    return emit(payload, term, len, p, start, end);
}

/* Canonical ordering of combining marks, as utf8proc_decompose does after
 * decomposing (needed only when marks are kept). */
static void canonical_order(int32_t *b, size_t n)
{
    for (size_t i = 0; i + 1 < n;) {
        int c1 = utf8proc_get_property(b[i])->combining_class;
        int c2 = utf8proc_get_property(b[i + 1])->combining_class;
        if (c1 > c2 && c2 > 0) {
            int32_t x = b[i];
            b[i] = b[i + 1];
            b[i + 1] = x;
            if (i > 0)
                i--;
            continue;
        }
        i++;
    }
}

/* Compose and encode the piece t->piece[0..np) and finish it. */
static int flush_piece(tok_tokenizer *t, size_t np, bool over, bool base,
                       size_t start, size_t end, uint32_t *pos,
                       tok_emit_fn emit, void *payload, kv_err *err)
{
    if (!base)
        return KVFTS_OK;       /* only marks: nothing, as in standard */
    if (over) {
        if (*pos < UINT32_MAX)
            (*pos)++;
        t->stats.too_long++;
        return KVFTS_OK;
    }
    if (t->opts == TOK_OPTS_KEEP)
        canonical_order(t->piece, np);
    size_t len;
    int rc = piece_to_utf8(t, np, t->opts, t->term, &len, err);
    if (rc)
        return rc;
    return finish(t, t->term, len, start, end, pos, emit, payload, err);
}

/* The slow path for the run s[start..end) (valid UTF-8, token characters):
 * stream every code point through decomposition, cut pieces where the
 * normalized text has separators, finish each piece. */
static int slow_run(tok_tokenizer *t, const unsigned char *s, size_t start,
                    size_t end, uint32_t *pos, tok_emit_fn emit,
                    void *payload, kv_err *err)
{
    int32_t d[TOK_DECOMP_MAX];
    size_t np = 0, pstart = 0, pend = 0;
    bool open = false, over = false, base = false, first = true;
    int rc = KVFTS_OK;
    t->stats.slow_runs++;
    for (size_t i = start; i < end;) {
        uint32_t cp = 0;     /* the run is valid: dec() sets it */
        size_t l = dec(s, end, i, &cp);
        int nd;
        if (cp < 0x80 && !t->reference) {
            d[0] = t->ascii[cp];
            nd = 1;
        } else {
            nd = decompose(cp, d, t->opts);
        }
        for (int k = 0; k < nd; k++) {
            if (is_tok(t, (uint32_t)d[k])) {
                if (!open) {
                    open = true;
                    over = false;
                    base = false;
                    np = 0;
                    pstart = first ? start : i;   /* leading marks too */
                    first = false;
                }
                if (!base && (t->opts == TOK_OPTS || !is_mark(d[k])))
                    base = true;
                if (np < TOK_PIECE_MAX)
                    t->piece[np++] = d[k];
                else
                    over = true;
                pend = i + l;
            } else if (open) {
                open = false;
                rc = flush_piece(t, np, over, base, pstart, pend, pos, emit,
                                 payload, err);
                if (rc)
                    return rc;
            }
        }
        if (nd == 0 && open)
            pend = i + l;              /* a removed mark ends with its base */
        i += l;
    }
    if (open)                          /* the last piece ends with the run */
        rc = flush_piece(t, np, over, base, pstart, end, pos, emit, payload,
                         err);
    return rc;
}

/* standard and stemmed analyzers */
static int run_text(tok_tokenizer *t, const unsigned char *s, size_t n,
                    uint32_t *pos, tok_emit_fn emit, void *payload,
                    kv_err *err)
{
    const unsigned char *ascii = t->ascii;
    char *term = t->term;
    size_t i = 0;
    while (i < n) {
        /* Skip separators. */
        unsigned c = s[i];
        if (c < 0x80) {
            if (!ascii[c]) {
                i++;
                continue;
            }
        } else {
            uint32_t cp;
            size_t l = dec(s, n, i, &cp);
            if (!l)
                return bad_utf8(err, i);
            if (!is_tok(t, cp)) {
                i += l;
                continue;
            }
        }
        /* A run: fold by table while it stays simple. */
        size_t start = i, tl = 0;
        bool slow = t->reference;
        while (i < n) {
            c = s[i];
            if (c < 0x80) {
                unsigned char f = ascii[c];
                if (!f)
                    break;
                if (tl <= TOK_MAX_TERM)
                    term[tl] = (char)f;
                tl++;
                i++;
                continue;
            }
            uint32_t cp;
            size_t l = dec(s, n, i, &cp);
            if (!l)
                return bad_utf8(err, i);
            if (cp < 0x800) {
                const fold2 *e = &t->f2[cp];
                if (!(e->flags & F2_TOKEN))
                    break;
                if (!(e->flags & F2_SIMPLE)) {
                    slow = true;
                } else {
                    if (tl <= TOK_MAX_TERM)
                        memcpy(term + tl, e->bytes, e->len);
                    tl += e->len;
                }
            } else {
                if (!is_tok(t, cp))
                    break;
                slow = true;
            }
            i += l;
        }
        int rc;
        if (slow)
            rc = slow_run(t, s, start, i, pos, emit, payload, err);
        else if (tl)
            rc = finish(t, term, tl, start, i, pos, emit, payload, err);
        else
            rc = KVFTS_OK;             /* only marks: nothing */
        if (rc)
            return rc;
    }
    return KVFTS_OK;
}

/* Normalize all of s[0..n) as one keyword into t->term; *len is its length,
 * or TOK_MAX_TERM + 1 if it is longer than TOK_MAX_TERM. */
static int keyword_norm(tok_tokenizer *t, const unsigned char *s, size_t n,
                        size_t *len, kv_err *err)
{
    char *o = t->term;
    size_t tl = 0, i = 0;
    if (!t->reference && t->opts == TOK_OPTS) {
        for (; i < n; ) {
            unsigned c = s[i];
            if (c < 0x80) {
                if (tl <= TOK_MAX_TERM)
                    o[tl] = (char)t->lower[c];
                tl++;
                i++;
                continue;
            }
            uint32_t cp;
            size_t l = dec(s, n, i, &cp);
            if (!l)
                return bad_utf8(err, i);
            if (cp >= 0x800 || !(t->f2[cp].flags & F2_FITS))
                break;
            if (tl <= TOK_MAX_TERM)
                memcpy(o + tl, t->f2[cp].bytes, t->f2[cp].len);
            tl += t->f2[cp].len;
            i += l;
        }
        if (i == n) {
            *len = tl > TOK_MAX_TERM ? TOK_MAX_TERM + 1 : tl;
            return KVFTS_OK;
        }
    }
    /* Slow path: decompose everything, compose once. */
    t->stats.slow_runs++;
    size_t np = 0;
    bool over = false;
    int32_t d[TOK_DECOMP_MAX];
    for (i = 0; i < n; ) {
        uint32_t cp;
        size_t l = dec(s, n, i, &cp);
        if (!l)
            return bad_utf8(err, i);
        i += l;
        if (over)
            continue;                  /* still validate the rest */
        int nd;
        if (cp < 0x80 && !t->reference) {
            d[0] = t->lower[cp];
            nd = 1;
        } else {
            nd = decompose(cp, d, TOK_OPTS);
        }
        if (np + (size_t)nd > TOK_PIECE_MAX) {
            over = true;
            continue;
        }
        memcpy(t->piece + np, d, (size_t)nd * sizeof *d);
        np += (size_t)nd;
    }
    if (over) {
        *len = TOK_MAX_TERM + 1;
        return KVFTS_OK;
    }
    int rc = piece_to_utf8(t, np, TOK_OPTS, o, &tl, err);
    if (rc)
        return rc;
    *len = tl > TOK_MAX_TERM ? TOK_MAX_TERM + 1 : tl;
    return KVFTS_OK;
}

static int run_keyword(tok_tokenizer *t, const unsigned char *s, size_t n,
                       uint32_t *pos, tok_emit_fn emit, void *payload,
                       kv_err *err)
{
    size_t len;
    int rc = keyword_norm(t, s, n, &len, err);
    if (rc || len == 0)
        return rc;
    uint32_t p = *pos;
    if (p < UINT32_MAX)
        (*pos)++;
    if (len > TOK_MAX_TERM) {
        t->stats.too_long++;
        return KVFTS_OK;
    }
    t->stats.tokens++;
    return emit(payload, t->term, len, p, 0, n);
}

/* ---- the API ----------------------------------------------------------- */

int tok_run_pos(tok_tokenizer *t, const char *text, size_t len,
                uint32_t first_pos, uint32_t *next_pos, tok_emit_fn emit,
                void *payload, kv_err *err)
{
    const unsigned char *s = (const unsigned char *)text;
    uint32_t pos = first_pos;
    int rc = KVFTS_OK;
    size_t bad;
    if (!text)
        len = 0;
    t->stats.values++;
    t->stats.bytes += len;
    switch (t->kind) {
    case TOK_STANDARD:
    case TOK_STEMMED:
        rc = run_text(t, s, len, &pos, emit, payload, err);
        break;
    case TOK_KEYWORD:
        rc = run_keyword(t, s, len, &pos, emit, payload, err);
        break;
    case TOK_NONE:
        if (len && !kv_utf8_valid(text, len, &bad))
            rc = bad_utf8(err, bad);
        break;
    }
    if (next_pos)
        *next_pos = pos;
    return rc;
}

int tok_run(tok_tokenizer *t, const char *text, size_t len, tok_emit_fn emit,
            void *payload, kv_err *err)
{
    return tok_run_pos(t, text, len, 0, NULL, emit, payload, err);
}

int tok_keyword(tok_tokenizer *t, const char *text, size_t len,
                char out[TOK_MAX_TERM + 1], size_t *out_len, kv_err *err)
{
    size_t n = 0;
    int rc = keyword_norm(t, (const unsigned char *)text, text ? len : 0, &n,
                          err);
    *out_len = 0;
    if (rc)
        return rc;
    if (n <= TOK_MAX_TERM)
        memcpy(out, t->term, n);
    *out_len = n;
    return KVFTS_OK;
}

static int unknown_analyzer(kv_err *err, const char *name)
{
    char list[400];
    size_t used = 0;
    list[0] = '\0';
    for (size_t i = 0; tok_analyzer_name(i); i++) {
        const char *nm = tok_analyzer_name(i);
        size_t l = strlen(nm);
        if (used + l + 3 >= sizeof list)
            break;
        if (used) {
            memcpy(list + used, ", ", 2);
            used += 2;
        }
        memcpy(list + used, nm, l + 1);
        used += l;
    }
    return kv_seterr(err, KVFTS_EINVAL, "unknown analyzer \"%.64s\" "
                     "(valid: %s)", name, list);
}

int tok_new(tok_tokenizer **out, const char *analyzer, kv_err *err)
{
    int rc = KVFTS_OK;
    tok_tokenizer *t = NULL;
    tok_kind kind;
    *out = NULL;
    if (!analyzer)
        analyzer = "standard";
    if (strcmp(analyzer, "standard") == 0)
        kind = TOK_STANDARD;
    else if (strcmp(analyzer, "keyword") == 0)
        kind = TOK_KEYWORD;
    else if (strcmp(analyzer, "none") == 0)
        kind = TOK_NONE;
    else if (tok__is_language(analyzer))
        kind = TOK_STEMMED;
    else
        return unknown_analyzer(err, analyzer);

    t = kv_calloc(1, sizeof *t);
    if (!t) {
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory (tokenizer)");
        goto fail;
    }
    t->kind = kind;
    t->opts = kind == TOK_STEMMED ? TOK_OPTS_KEEP : TOK_OPTS;
    snprintf(t->name, sizeof t->name, "%s", analyzer);
    if (kind != TOK_NONE)
        copy_tables(t);
    if (kind == TOK_STEMMED) {
        rc = tok__stemmer_new(&t->stemmer, analyzer, err);
        if (rc)
            goto fail;
    }
    *out = t;
    return KVFTS_OK;
fail:
    tok_free(t);
    return rc;
}

void tok_free(tok_tokenizer *t)
{
    if (!t)
        return;
    tok__stemmer_free(t->stemmer);
    tok__wordset_free(t->stop);
    kv_free(t);
}

tok_kind tok_get_kind(const tok_tokenizer *t)
{
    return t->kind;
}

const char *tok_name(const tok_tokenizer *t)
{
    return t->name;
}

void tok_get_stats(const tok_tokenizer *t, tok_stats *out)
{
    *out = t->stats;
}

void tok_stats_reset(tok_tokenizer *t)
{
    memset(&t->stats, 0, sizeof t->stats);
}

void tok_set_reference_mode(tok_tokenizer *t, bool on)
{
    t->reference = on;
}

/* Collects the terms of one stop word. */
typedef struct one_word {
    size_t count;
    char term[TOK_MAX_TERM];
    size_t len;
} one_word;

static int collect_one(void *payload, const char *term, size_t len,
                       uint32_t pos, size_t start, size_t end)
{
    one_word *w = payload;
    (void)pos;
    (void)start;
    (void)end;
    if (w->count++ == 0) {
        memcpy(w->term, term, len);
        w->len = len;
    }
    return 0;
}

int tok_set_stopwords(tok_tokenizer *t, const char *const *words,
                      const size_t *lens, size_t n, kv_err *err)
{
    int rc = KVFTS_OK;
    tok_wordset *set = NULL;
    if (t->kind != TOK_STANDARD && t->kind != TOK_STEMMED)
        return KVFTS_OK;
    tok_stats saved = t->stats;
    bool raw = t->raw;
    t->raw = true;              /* normalize only: no stop, no stem */
    if (n) {
        rc = tok__wordset_new(&set, err);
        for (size_t i = 0; !rc && i < n; i++) {
            size_t l = lens ? lens[i] : strlen(words[i]);
            one_word w = { 0, "", 0 };
            rc = tok_run(t, words[i], l, collect_one, &w, err);
            if (!rc && w.count != 1)
                rc = kv_seterr(err, KVFTS_EINVAL, "stop word \"%.*s\" is "
                               "not one word for the analyzer",
                               (int)(l > 64 ? 64 : l), words[i]);
            if (!rc)
                rc = tok__wordset_add(set, w.term, w.len, err);
        }
    }
    t->raw = raw;
    t->stats = saved;
    if (rc)
        goto fail;
    tok__wordset_free(t->stop);
    t->stop = set;
    return KVFTS_OK;
fail:
    tok__wordset_free(set);
    return rc;
}
