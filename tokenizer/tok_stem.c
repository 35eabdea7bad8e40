/*
 * tok_stem.c -- Snowball stemming with a stem cache, and stop-word sets.
 *
 * Stemmer.  Each stemmed tokenizer owns one sb_stemmer (libstemmer keeps its
 * working buffer inside the stemmer, and the stem it returns lives only until
 * the next call, so a stemmer can never be shared between tokenizers or
 * threads).  We feed it the term normalized with NFKC and case folding but
 * with its marks still in place (Snowball's Hindi, Nepali, Tamil, Arabic,
 * Greek, Russian, French... rules read vowel signs and accents: fed
 * "लडकय" instead of "लड़कियों" the Hindi stemmer does nothing), and the
 * caller (tok_text.c) removes the marks from the stem afterwards, so the
 * term ends up as mark-free as a standard term.  The stem is copied before
 * anything else can call the stemmer.  libstemmer
 * allocates with its own malloc, which our allocation hook cannot fail; a
 * NULL stem from it is reported as KVFTS_ENOMEM.
 *
 * Stem cache.  Stemming a word costs a few hundred nanoseconds, about as much
 * as all the rest of the pipeline for that word, while the words of real text
 * follow Zipf's law: a few thousand distinct words make most of any corpus.
 * So each stemmer keeps a direct-mapped cache of TOK_STEM_SLOTS recent
 * word -> stem pairs for words of at most TOK_STEM_KEY bytes (a slot is a
 * fixed 64-byte record: no allocation after creation, one cache line per
 * probe, and a collision simply replaces the slot).  Nothing on Debian fits
 * this: the general hash tables (glib's GHashTable, uthash, hsearch(3)) grow
 * without bound, allocate per entry, or are process-global, while what we
 * want is a tiny fixed-size cache with replacement -- thirty lines by hand.
 * The cache holds the final term (stem with marks removed).  A cached term
 * is by construction what the stemmer gave for the same bytes, so the cache
 * changes speed, never terms (the tests check this with
 * the cache bypassed).
 *
 * Stop-word sets.  An open-addressing hash set of short strings, built once
 * from the config and then read-only, so lookups never allocate.
 */
#include "tok_int.h"

#include <libstemmer.h>
#include <string.h>

/* ---- stemmer + cache --------------------------------------------------- */

#define TOK_STEM_SLOTS 8192u         /* power of two: 512 KiB */
#define TOK_STEM_KEY 30              /* longest cached word and stem */

typedef struct stem_slot {
    uint8_t klen;                    /* 0 = empty (words are never empty) */
    uint8_t slen;
    char key[TOK_STEM_KEY];
    char stem[TOK_STEM_KEY];
    char pad[2];
} stem_slot;                         /* 64 bytes */

struct tok_stemmer {
    struct sb_stemmer *sb;
    stem_slot *slots;                /* TOK_STEM_SLOTS of them */
};

const char *tok_analyzer_name(size_t i)
{
    static const char *const builtin[] = { "standard", "keyword", "none" };
    if (i < 3)
        return builtin[i];
    const char **l = sb_stemmer_list();
    for (size_t k = 3; *l; k++, l++)
        if (k == i)
            return *l;
    return NULL;
}

bool tok__is_language(const char *name)
{
    if (!name)
        return false;
    for (const char **p = sb_stemmer_list(); *p; p++)
        if (strcmp(*p, name) == 0)
            return true;
    return false;
}

int tok__stemmer_new(tok_stemmer **out, const char *language, kv_err *err)
{
    int rc = KVFTS_OK;
    tok_stemmer *s = NULL;
    *out = NULL;
    if (!tok__is_language(language)) {
        rc = kv_seterr(err, KVFTS_EINVAL, "no Snowball stemmer \"%s\"",
                       language ? language : "(null)");
        goto fail;
    }
    s = kv_calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->slots = kv_calloc(TOK_STEM_SLOTS, sizeof *s->slots);
    if (!s->slots)
        goto nomem;
    s->sb = sb_stemmer_new(language, "UTF_8");
    if (!s->sb)        /* the language exists, so only malloc can fail */
        goto nomem;
    *out = s;
    return KVFTS_OK;
nomem:
    rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory (stemmer \"%s\")",
                   language);
fail:
    tok__stemmer_free(s);
    return rc;
}

void tok__stemmer_free(tok_stemmer *s)
{
    if (!s)
        return;
    sb_stemmer_delete(s->sb);
    kv_free(s->slots);
    kv_free(s);
}

int tok__stem(tok_stemmer *s, const char *word, size_t len, bool use_cache,
              tok_stem_post_fn post, void *post_ctx, const char **term,
              size_t *term_len, tok_stats *st, kv_err *err)
{
    stem_slot *slot = NULL;
    if (use_cache && len <= TOK_STEM_KEY) {
        slot = &s->slots[tok__hash(word, len) & (TOK_STEM_SLOTS - 1)];
        if (slot->klen == len && memcmp(slot->key, word, len) == 0) {
            st->stem_hits++;
            *term = slot->stem;
            *term_len = slot->slen;
            return KVFTS_OK;
        }
    }
    st->stem_misses++;
    const sb_symbol *r = sb_stemmer_stem(s->sb, (const sb_symbol *)word,
                                         (int)len);
    if (!r)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory (stemmer)");
    const char *out;
    size_t rl;
    int rc = post(post_ctx, (const char *)r,
                  (size_t)sb_stemmer_length(s->sb), &out, &rl, err);
    if (rc)
        return rc;
    if (slot && rl <= TOK_STEM_KEY) {
        slot->klen = (uint8_t)len;
        slot->slen = (uint8_t)rl;
        memcpy(slot->key, word, len);
        memcpy(slot->stem, out, rl);
        out = slot->stem;
    }
    *term = out;
    *term_len = rl;
    return KVFTS_OK;
}

/* ---- stop-word sets ---------------------------------------------------- */

typedef struct word_ent {
    uint64_t hash;
    char *s;                         /* NULL = empty slot */
    size_t n;
} word_ent;

struct tok_wordset {
    word_ent *tab;
    size_t cap;                      /* power of two */
    size_t count;
};

int tok__wordset_new(tok_wordset **out, kv_err *err)
{
    tok_wordset *w = kv_calloc(1, sizeof *w);
    *out = NULL;
    if (!w)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory (stop words)");
    w->cap = 16;
    w->tab = kv_calloc(w->cap, sizeof *w->tab);
    if (!w->tab) {
        kv_free(w);
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory (stop words)");
    }
    *out = w;
    return KVFTS_OK;
}

void tok__wordset_free(tok_wordset *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->cap; i++)
        kv_free(w->tab[i].s);
    kv_free(w->tab);
    kv_free(w);
}

static word_ent *find_slot(word_ent *tab, size_t cap, uint64_t h,
                           const char *s, size_t n)
{
    size_t i = (size_t)h & (cap - 1);
    for (;;) {
        word_ent *e = &tab[i];
        if (!e->s || (e->hash == h && e->n == n && memcmp(e->s, s, n) == 0))
            return e;
        i = (i + 1) & (cap - 1);
    }
}

int tok__wordset_add(tok_wordset *w, const char *s, size_t n, kv_err *err)
{
    if ((w->count + 1) * 2 > w->cap) {
        size_t ncap = w->cap * 2;
        word_ent *nt = kv_calloc(ncap, sizeof *nt);
        if (!nt)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory (stop words)");
        for (size_t i = 0; i < w->cap; i++)
            if (w->tab[i].s)
                *find_slot(nt, ncap, w->tab[i].hash, w->tab[i].s,
                           w->tab[i].n) = w->tab[i];
        kv_free(w->tab);
        w->tab = nt;
        w->cap = ncap;
    }
    uint64_t h = tok__hash(s, n);
    word_ent *e = find_slot(w->tab, w->cap, h, s, n);
    if (e->s)
        return KVFTS_OK;             /* already there */
    char *copy = kv_strndup(s, n);
    if (!copy)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory (stop words)");
    e->hash = h;
    e->s = copy;
    e->n = n;
    w->count++;
    return KVFTS_OK;
}

bool tok__wordset_has(const tok_wordset *w, const char *s, size_t n)
{
    if (!w || w->count == 0)
        return false;
    uint64_t h = tok__hash(s, n);
    return find_slot(w->tab, w->cap, h, s, n)->s != NULL;
}

size_t tok__wordset_count(const tok_wordset *w)
{
    return w ? w->count : 0;
}
