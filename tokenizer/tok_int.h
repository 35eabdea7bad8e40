/*
 * tokenizer/tok_int.h -- private to tokenizer/: the interface between its
 * files (the stemmer and stem cache of tok_stem.c, stop-word sets).  Other
 * modules cannot include it: only tokenizer/include/ is on their include
 * path.
 */
#ifndef KVFTS_TOK_INT_H
#define KVFTS_TOK_INT_H

#include "tokenizer.h"

/* ------------------------------------------------------------------------ */
/* Inside tokenizer/ only: the interface to tok_stem.c (stemmer + stem cache,
 * stop-word sets).  Other modules must not call these.                      */

/** A fast hash of a short byte string (terms, field paths). */
static inline uint64_t tok__hash(const char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 32;
    return h;
}

typedef struct tok_stemmer tok_stemmer;

/** True if @p name is a language of sb_stemmer_list(). */
bool tok__is_language(const char *name);
/** @return KVFTS_OK, KVFTS_EINVAL (not a language), KVFTS_ENOMEM. */
int tok__stemmer_new(tok_stemmer **out, const char *language, kv_err *err);
void tok__stemmer_free(tok_stemmer *s);
/** Turns the raw stem into the term (tok_text.c removes its marks);
 *  *out lives until the next call. */
typedef int (*tok_stem_post_fn)(void *ctx, const char *stem, size_t len,
                                const char **out, size_t *out_len,
                                kv_err *err);
/** Stem @p word and pass the stem through @p post; *term points into @p s
 *  or @p post's buffer and lives until the next call.  @p use_cache false
 *  bypasses the cache (reference mode).
 *  @return KVFTS_OK, KVFTS_ENOMEM (libstemmer's own malloc failed), or what
 *          @p post returned. */
int tok__stem(tok_stemmer *s, const char *word, size_t len, bool use_cache,
              tok_stem_post_fn post, void *post_ctx, const char **term,
              size_t *term_len, tok_stats *st, kv_err *err);

/** A set of short strings (stop words). */
typedef struct tok_wordset tok_wordset;
int tok__wordset_new(tok_wordset **out, kv_err *err);
void tok__wordset_free(tok_wordset *w);
int tok__wordset_add(tok_wordset *w, const char *s, size_t n, kv_err *err);
bool tok__wordset_has(const tok_wordset *w, const char *s, size_t n);
size_t tok__wordset_count(const tok_wordset *w);


#endif /* KVFTS_TOK_INT_H */
