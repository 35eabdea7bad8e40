/*
 * tokenizer/include/tokenizer.h -- the analysis module of kvfts: the one header other
 * modules (index/, query/, lib/kvfts_analyze.c) include from tokenizer/.
 *
 * Two objects:
 *
 *  tok_tokenizer  one analyzer ("standard", "english", "keyword", "none", ...)
 *                 turning one text value into terms.  Owns its reusable
 *                 buffers, its Unicode tables and (for a Snowball language)
 *                 its own sb_stemmer and stem cache, so one tokenizer is used
 *                 by one thread at a time.
 *  tok_analysis   the "analysis" member of the database config, compiled:
 *                 which analyzer each field path uses, exclusions, `_all`,
 *                 positions, stop words; and the document walker that turns a
 *                 JSON document into (field, term, position, offsets).
 *
 * The pipeline of a text analyzer (tok_text.c has the details):
 *   UTF-8 validation -> segmentation of the value into runs of code points of
 *   general category L*, N*, M* or Co -> per run, utf8proc NFKC + full case
 *   folding + removal of marks (Mn, Mc, Me), and a new split of the result
 *   wherever normalization produced a separator ("½" -> "1", "2") -> terms
 *   longer than TOK_MAX_TERM bytes are skipped and counted -> stop words ->
 *   Snowball stemmer.  Terms never contain separators and are never empty.
 *   (Stemmed analyzers normalize with the marks kept, stem, then remove the
 *   marks from the stem: Snowball needs them -- tok_text.c explains.)
 *
 * Configuration format (the "analysis" member of the database config; every
 * key optional; other top-level members are ignored here):
 *
 *   {"analysis": {
 *      "default":   "standard",          analyzer of fields not listed below
 *      "fields":    {"description": "english", "package": "keyword",
 *                    "maintainer": "none", "*": "standard"},
 *      "exclude":   ["homepage"],        not indexed at all (nor anything
 *                                        under them: "address" excludes
 *                                        "address.city")
 *      "all":       true,                also index strings under "_all"
 *      "positions": true,                store positions (for phrases)
 *      "stopwords": ["the", "a"],        removed by text analyzers
 *      "field_lists": ["title"]          fields whose terms also get a
 *                                        posting list of their own
 *   }}
 *
 *  - Analyzer names: "standard", "keyword", "none", and every Snowball
 *    language of sb_stemmer_list() ("english", "french", "porter", ...).
 *    An unknown name is KVFTS_EINVAL with a message listing the valid names.
 *  - "field_lists" names exact dotted paths (not "_all").  A term of such a
 *    field is also indexed as TOK_LIST_MARK + the term, with the field's
 *    view alone: a field-scoped search reads that list, not the term's
 *    whole list filtered by field (the index module does both; the
 *    field's lengths count the term once).
 *  - "fields" keys are exact dotted paths ("address.city"); array elements
 *    use the array's path ("tags").  A nested form {"address": {"city":
 *    "english"}} means the same.  "*" sets the default (and must agree with
 *    "default" if both are given).
 *  - Unknown keys inside "analysis" are KVFTS_EINVAL naming the key.  (The
 *    JSON walker reports scalars only, so an unknown key whose value is an
 *    empty object or array is not seen; and a single string is accepted where
 *    a list is expected.)
 *  - No config, an empty one, or no "analysis": every string field
 *    "standard", `_all` on, positions on, no stop words.
 *
 * Field rules (tok_analysis_run_doc):
 *  - a string is analyzed with its field's analyzer under its dotted path and,
 *    if "all" is on, with the `_all` analyzer under "_all";
 *  - the `_all` analyzer is the default analyzer when that is a text analyzer
 *    (standard or a language), and "standard" when the default is "keyword"
 *    or "none" (a catch-all field of whole values would be useless);
 *  - a number or a boolean is ONE term, its text as written and normalized as
 *    by "keyword" ("42", "1e3", "true"), under its path only, not `_all`;
 *  - null, excluded fields and "none" fields produce nothing;
 *  - a document field named "_all" is refused (KVFTS_EINVAL): it would mix
 *    with the catch-all field.
 *  - Positions count per field per document.  Each further value of the same
 *    field (array element) starts TOK_VALUE_GAP positions after the previous
 *    one, so a phrase never matches across two values.  The `_all` copy of a
 *    value keeps its field's positions (counted by the `_all` analyzer when
 *    the field has another one): `_all` is the union of the fields, and a
 *    phrase in it matches within one field's value, as in the field.  Stop words and over-long tokens keep their
 *    position (a phrase query analyzed the same way leaves the same hole).
 *  - Offsets are byte offsets into the value as the JSON walker decodes it
 *    (the unescaped string), [start, end).
 */
#ifndef KVFTS_TOKENIZER_H
#define KVFTS_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kv.h"

/** Longest term, in bytes after normalization; longer tokens are skipped and
 *  counted in tok_stats.too_long. */
#define TOK_MAX_TERM 128

/** First byte of a field list's term (tok_analysis_listed): no analyzed
 *  term begins with it (a keyword value that does is not indexed). */
#define TOK_LIST_MARK '\x01'

/** Position distance between two values of the same field. */
#define TOK_VALUE_GAP 100

/** The catch-all field. */
#define TOK_ALL_FIELD "_all"

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */

typedef struct tok_stats {
    uint64_t values;      /* values analyzed (strings, numbers, booleans) */
    uint64_t bytes;       /* bytes of those values */
    uint64_t tokens;      /* terms emitted (an `_all` copy counts apart) */
    uint64_t too_long;    /* tokens skipped: over TOK_MAX_TERM bytes */
    uint64_t stopped;     /* tokens removed as stop words */
    uint64_t slow_runs;   /* runs normalized through utf8proc (not by table) */
    uint64_t stem_hits;   /* stem cache hits */
    uint64_t stem_misses; /* stemmer calls */
} tok_stats;

/* ------------------------------------------------------------------------ */
/* One analyzer (tok_text.c, tok_stem.c)                                     */

typedef struct tok_tokenizer tok_tokenizer;

typedef enum tok_kind {
    TOK_STANDARD = 0,   /* normalize + segment */
    TOK_STEMMED,        /* standard + Snowball stemmer */
    TOK_KEYWORD,        /* the whole normalized value is one term */
    TOK_NONE            /* nothing is indexed */
} tok_kind;

/** Called once per term.  @p term (normalized, maybe stemmed; not
 *  NUL-terminated) lives only during the call.  @p start / @p end are byte
 *  offsets of the token in the text given to tok_run(), [start, end).
 *  A non-zero return stops tok_run(), which returns it (set err yourself). */
typedef int (*tok_emit_fn)(void *payload, const char *term, size_t term_len,
                           uint32_t pos, size_t start, size_t end);

/** Create the analyzer named @p analyzer (NULL: "standard").
 *  @param[out] out  caller owns; tok_free().  NULL on failure.
 *  @return KVFTS_OK, KVFTS_EINVAL (unknown name; the message lists the valid
 *          names), KVFTS_ENOMEM. */
int tok_new(tok_tokenizer **out, const char *analyzer, kv_err *err);

/** NULL: no-op. */
void tok_free(tok_tokenizer *t);

tok_kind tok_get_kind(const tok_tokenizer *t);
/** The analyzer's name; borrowed, lives as long as @p t. */
const char *tok_name(const tok_tokenizer *t);

/** Replace the stop words of a text analyzer with @p words (each normalized
 *  like a keyword first; a word that normalizes to nothing or to more than
 *  one term is KVFTS_EINVAL).  @p lens NULL: NUL-terminated.  No-op for
 *  keyword and none.  @return KVFTS_OK, KVFTS_EINVAL, KVFTS_ENOMEM. */
int tok_set_stopwords(tok_tokenizer *t, const char *const *words,
                      const size_t *lens, size_t n, kv_err *err);

/** Analyze @p text: emit every term with positions 0, 1, 2, ...
 *  Never allocates.
 *  @return KVFTS_OK, KVFTS_EINVAL (invalid UTF-8: message "invalid UTF-8 at
 *          byte N", err->pos = N), or what @p emit returned. */
int tok_run(tok_tokenizer *t, const char *text, size_t len,
            tok_emit_fn emit, void *payload, kv_err *err);

/** tok_run() with positions starting at @p first_pos; *@p next_pos (may be
 *  NULL) receives first_pos + the positions the value used (skipped and
 *  stopped tokens included). */
int tok_run_pos(tok_tokenizer *t, const char *text, size_t len,
                uint32_t first_pos, uint32_t *next_pos,
                tok_emit_fn emit, void *payload, kv_err *err);

/** Normalize @p text as the keyword analyzer does (NFKC, case fold, marks
 *  removed) into @p out (at most TOK_MAX_TERM bytes).  *@p out_len = 0 and
 *  the return is KVFTS_OK when the result is empty; when it is longer than
 *  TOK_MAX_TERM, *@p out_len = TOK_MAX_TERM + 1 and nothing useful is in
 *  @p out.  Works with any analyzer.  @return KVFTS_OK or KVFTS_EINVAL. */
int tok_keyword(tok_tokenizer *t, const char *text, size_t len,
                char out[TOK_MAX_TERM + 1], size_t *out_len, kv_err *err);

/** Counters since creation (or the last tok_stats_reset()). */
void tok_get_stats(const tok_tokenizer *t, tok_stats *out);
void tok_stats_reset(tok_tokenizer *t);

/** The analyzer names tok_new() accepts: i = 0, 1, 2 are "standard",
 *  "keyword", "none", then every Snowball language; NULL past the end.
 *  Static strings. */
const char *tok_analyzer_name(size_t i);

/* Test hooks: the reference ("utf8proc") path.  Analyze with table fast paths
 * off: every run goes through utf8proc_decompose_char / normalize, and the
 * stem cache is bypassed.  Tests compare it with the fast path. */
void tok_set_reference_mode(tok_tokenizer *t, bool on);

/* ------------------------------------------------------------------------ */
/* Field extraction (tok_analysis.c)                                         */

typedef struct tok_analysis tok_analysis;

/** One (field, term) a document produces.  Every pointer lives only during
 *  the callback. */
typedef struct tok_term {
    const char *field;     /* dotted path or "_all"; NUL-terminated */
    size_t field_len;
    const char *term;      /* not NUL-terminated */
    size_t term_len;
    uint32_t pos;          /* position within the field in this document;
                              for "_all", within the source field's values
                              as the `_all` analyzer counts them */
    size_t start, end;     /* byte offsets in the value, [start, end) */
    const char *value;     /* the decoded value the offsets refer to */
    size_t value_len;
    const char *src;       /* the field the value belongs to (the dotted
                              path, for "_all" terms too); NUL-terminated */
    size_t src_len;
    bool dual;             /* the field's analyzer is `_all`'s: this term is
                              emitted under the field and then, at the same
                              position, under "_all" */
    bool listed;           /* the field is in "field_lists" (never for
                              "_all" terms) */
} tok_term;

/** Non-zero return stops the walk; tok_analysis_run_doc() returns it. */
typedef int (*tok_term_fn)(void *payload, const tok_term *t);

/** Compile the "analysis" member of the database config @p config_json
 *  (NULL or length 0: defaults).
 *  @param[out] out  caller owns; tok_analysis_free().  NULL on failure.
 *  @return KVFTS_OK, KVFTS_EINVAL (bad JSON, unknown key, unknown analyzer,
 *          wrong type), KVFTS_ENOMEM. */
int tok_analysis_new(tok_analysis **out, const char *config_json, size_t len,
                     kv_err *err);
void tok_analysis_free(tok_analysis *a);   /* NULL: no-op */

/** Analyze the JSON document @p json (one object) and emit every
 *  (field, term) of it, in document order, field term before its `_all`
 *  copy.  Allocates only when a field path is seen for the first time.
 *  @return KVFTS_OK, KVFTS_EINVAL (bad JSON/UTF-8, too deep: err->pos is the
 *          byte offset in @p json; a field named "_all"), KVFTS_ENOMEM, or
 *          what @p emit returned. */
int tok_analysis_run_doc(tok_analysis *a, const char *json, size_t len,
                         tok_term_fn emit, void *payload, kv_err *err);
/** The same for a document whose leaves a writer kept as it checked the
 *  JSON (kv_leaves_add() of each leaf kv_json_walk() reported, nulls
 *  aside): the same terms, without parsing the JSON again. */
int tok_analysis_run_leaves(tok_analysis *a, const char *leaves, size_t len,
                            tok_term_fn emit, void *payload, kv_err *err);

/** The check run_doc() makes of each field path, for a writer that checks a
 *  document before it is analyzed (maybe later, in another thread): a field
 *  named "_all" is refused, and so is an indexed field whose name holds a
 *  NUL character.  @p pos: the byte offset to name in the message.
 *  @return KVFTS_OK, KVFTS_EINVAL (err->pos set), KVFTS_ENOMEM. */
int tok_analysis_check_path(tok_analysis *a, const char *path, size_t plen,
                            size_t pos, kv_err *err);

/** Analyze one value of field @p field as if it were a string of a document
 *  (field term, then its `_all` copy when `_all` is on and the field is
 *  indexed).  For `kvfts analyze --field`.  Invalid UTF-8 is KVFTS_EINVAL
 *  with message 'field "F": invalid UTF-8 at byte N'. */
int tok_analysis_run_value(tok_analysis *a, const char *field,
                           size_t field_len, const char *text, size_t len,
                           tok_term_fn emit, void *payload, kv_err *err);

/** The analyzer of field @p field (a path, or "_all") -- what query/ uses to
 *  analyze query terms.  Borrowed; lives as long as @p a.  NULL when the
 *  field is excluded or "none". */
tok_tokenizer *tok_analysis_field(tok_analysis *a, const char *field,
                                  size_t field_len);

bool tok_analysis_positions(const tok_analysis *a);   /* "positions" */
/** True when @p field is in "field_lists": its terms also have a list of
 *  their own, TOK_LIST_MARK + the term, whose views are the field's. */
bool tok_analysis_listed(const tok_analysis *a, const char *field,
                         size_t field_len);
bool tok_analysis_all(const tok_analysis *a);         /* "all" */

/** Sum of the counters of every analyzer of @p a. */
void tok_analysis_stats(const tok_analysis *a, tok_stats *out);
void tok_analysis_stats_reset(tok_analysis *a);

#endif /* KVFTS_TOKENIZER_H */
