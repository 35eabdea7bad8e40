/*
 * kv_json.c -- the one JSON pass of kvfts: validate, compact, and report
 * every scalar with its dotted path, in a single streaming walk (YAJL's
 * event parser; no DOM is built, so a document costs one pass and no
 * per-value allocation).
 *
 * Invariants of an accepted document:
 *  - exactly one JSON value, an object, with no trailing bytes but white space;
 *  - strings and object keys are strict UTF-8 after unescaping (YAJL checks
 *    the byte structure only, so we re-check: overlong forms, surrogates and
 *    code points past U+10FFFF are refused; so is an escaped high surrogate
 *    not followed by an escaped low one, which YAJL would silently turn into
 *    '?' or into an unrelated code point: see lone_surrogate());
 *  - at most KVFTS_MAX_DOC bytes and KVFTS_MAX_DEPTH levels of nesting.
 *
 * Compact form: no white space between tokens; strings re-escaped minimally
 * ('"', '\\' and control characters only; other characters stay raw UTF-8);
 * numbers copied exactly as written, so no precision is lost.
 *
 * Paths: keys joined by '.', arrays add nothing ("tags" for every element of
 * "tags": [...]).  This is the path used by lookups and by field extraction.
 */
#include "kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

typedef struct walk {
    kv_buf *out;              /* compact output, or NULL */
    kv_json_leaf_fn leaf;
    void *payload;
    kv_err *err;
    yajl_handle h;
    int rc;                   /* first failure (sticky) */
    bool need_comma;          /* compact output: a ',' goes before the next */
    bool started;             /* the top-level value has begun */
    unsigned depth;
    kv_buf path;              /* current dotted path */
    size_t base[KVFTS_MAX_DEPTH + 2]; /* path length at the start of a level */
} walk;

static size_t consumed(walk *w)
{
    return yajl_get_bytes_consumed(w->h);
}

/* Offset of the byte a failure is about: YAJL's count stops just past the
 * token at fault, so the token's last byte is one before it. */
static size_t fault_at(walk *w)
{
    size_t n = consumed(w);
    return n ? n - 1 : 0;
}

/* fault_at() for an error YAJL reports itself.  A '/' (the start of a
 * comment, which we do not allow) is the one byte YAJL's lexer gives back
 * before it fails, so its count stops just before the '/', not past it. */
static size_t yajl_fault_at(walk *w, const char *json, size_t len)
{
    size_t n = consumed(w);
    if (n < len && json[n] == '/')
        return n;
    return fault_at(w);
}

static int fail(walk *w, int code, const char *what)
{
    if (w->rc == 0) {
        size_t at = fault_at(w);
        kv_seterr(w->err, code, "invalid JSON at byte %zu: %s", at, what);
        w->err->pos = (long long)at;
        w->rc = code;
    }
    return 0;   /* tells YAJL to stop */
}

static int emit(walk *w, const char *s, size_t n)
{
    if (!w->out)
        return KVFTS_OK;
    return kv_buf_append(w->out, s, n, w->err);
}

/* Separator before a value or key in the compact output. */
static int sep(walk *w)
{
    if (w->need_comma)
        return emit(w, ",", 1);
    return KVFTS_OK;
}

static int check_top(walk *w, bool is_object)
{
    if (!w->started) {
        w->started = true;
        if (!is_object)
            return fail(w, KVFTS_EINVAL, "a document must be a JSON object");
    }
    return 1;
}

static int scalar(walk *w, kv_json_type type, const char *s, size_t n)
{
    if (!check_top(w, false))
        return 0;
    int rc = sep(w);
    if (!rc) {
        if (type == KV_JSON_STRING)
            rc = w->out ? kv_buf_append_json_str(w->out, s, n, w->err) : 0;
        else
            rc = emit(w, s, n);
    }
    if (rc) {
        w->rc = rc;
        return 0;
    }
    w->need_comma = true;
    if (w->leaf) {
        rc = w->leaf(w->payload, w->path.data ? w->path.data : "", w->path.len,
                     type, s, n, consumed(w));
        if (rc) {
            w->rc = rc;
            return 0;
        }
    }
    return 1;
}

static int on_null(void *ctx)
{
    return scalar(ctx, KV_JSON_NULL, "null", 4);
}

static int on_bool(void *ctx, int v)
{
    return scalar(ctx, KV_JSON_BOOL, v ? "true" : "false", v ? 4 : 5);
}

static int on_number(void *ctx, const char *s, size_t n)
{
    return scalar(ctx, KV_JSON_NUMBER, s, n);
}

static int on_string(void *ctx, const unsigned char *s, size_t n)
{
    walk *w = ctx;
    size_t bad;
    if (!kv_utf8_valid((const char *)s, n, &bad)) {
        char what[160];
        snprintf(what, sizeof what, "invalid UTF-8 in the string of field "
                 "\"%.100s\"", w->path.data ? w->path.data : "");
        return fail(w, KVFTS_EINVAL, what);
    }
    return scalar(w, KV_JSON_STRING, (const char *)s, n);
}

static int open_level(walk *w, bool is_object)
{
    if (!check_top(w, is_object))
        return 0;
    if (w->depth >= KVFTS_MAX_DEPTH)
        return fail(w, KVFTS_EINVAL,
                    "nesting deeper than " KVFTS_STR(KVFTS_MAX_DEPTH)
                    " levels");
    int rc = sep(w);
    if (!rc)
        rc = emit(w, is_object ? "{" : "[", 1);
    if (rc) {
        w->rc = rc;
        return 0;
    }
    w->need_comma = false;
    w->depth++;
    w->base[w->depth] = w->path.len;
    return 1;
}

static int close_level(walk *w, bool is_object)
{
    int rc = emit(w, is_object ? "}" : "]", 1);
    if (rc) {
        w->rc = rc;
        return 0;
    }
    w->path.len = w->base[w->depth];
    if (w->path.data)
        w->path.data[w->path.len] = '\0';
    w->depth--;
    w->need_comma = true;
    return 1;
}

static int on_start_map(void *ctx)
{
    return open_level(ctx, true);
}

static int on_end_map(void *ctx)
{
    return close_level(ctx, true);
}

static int on_start_array(void *ctx)
{
    return open_level(ctx, false);
}

static int on_end_array(void *ctx)
{
    return close_level(ctx, false);
}

static int on_map_key(void *ctx, const unsigned char *s, size_t n)
{
    walk *w = ctx;
    size_t bad;
    if (!kv_utf8_valid((const char *)s, n, &bad))
        return fail(w, KVFTS_EINVAL, "invalid UTF-8 in object key");
    int rc = sep(w);
    if (!rc && w->out)
        rc = kv_buf_append_json_str(w->out, (const char *)s, n, w->err);
    if (!rc)
        rc = emit(w, ":", 1);
    /* path = base of this object + "." + key */
    size_t b = w->base[w->depth];
    w->path.len = b;
    if (!rc && b > 0)
        rc = kv_buf_append(&w->path, ".", 1, w->err);
    if (!rc)
        rc = kv_buf_append(&w->path, s, n, w->err);
    if (rc) {
        w->rc = rc;
        return 0;
    }
    w->need_comma = false;
    return 1;
}

static const yajl_callbacks callbacks = {
    on_null, on_bool, NULL, NULL, on_number, on_string,
    on_start_map, on_map_key, on_end_map, on_start_array, on_end_array
};

/* YAJL 2.1 does not check its own allocations (yajl_alloc() uses the lexer
 * it failed to get; yajl_buf asserts), so failing them would crash inside
 * YAJL.  Its allocations therefore bypass kv_malloc's fault hook and go to
 * libc directly; a real out-of-memory inside YAJL is YAJL's to survive. */
static void *y_malloc(void *ctx, size_t n)
{
    (void)ctx;
    return malloc(n);
}

static void *y_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    return realloc(p, n);
}

static void y_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static bool all_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
            return false;
    return true;
}

static unsigned hex4(const char *s)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v = v * 16 + (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

/* Whether "\u" occurs in s[0, len): eight bytes a step, a byte that is
 * a backslash followed by a 'u' found as a zero byte of (word ^ '\'s) |
 * (next word ^ 'u's) (glibc's memmem, a byte at a time for a two-byte
 * needle, was 5% of a load's analysis). */
static bool has_u_escape(const char *s, size_t len)
{
    const uint64_t ones = 0x0101010101010101ull, highs = ones << 7;
    size_t i = 0;
    for (; i + 9 <= len; i += 8) {
        uint64_t a, b;
        memcpy(&a, s + i, 8);
        memcpy(&b, s + i + 1, 8);
        uint64_t v = (a ^ ones * '\\') | (b ^ ones * 'u');
        if ((v - ones) & ~v & highs)
            return true;
    }
    for (; i + 1 < len; i++)
        if (s[i] == '\\' && s[i + 1] == 'u')
            return true;
    return false;
}

/* Offset of the first "\uD800".."\uDBFF" escape not followed by a
 * "\uDC00".."\uDFFF" escape, or len if none.  YAJL 2.1 decodes such an
 * escape to '?' (or, before any "\uXXXX", to a made-up code point), so a
 * stored document would differ from the one given.  Only for text YAJL
 * accepted: backslashes then occur only in strings, each starting an escape,
 * and "\u" is followed by four hex digits.  (A lone low surrogate decodes
 * to invalid UTF-8, which on_string() refuses.) */
static size_t lone_surrogate(const char *json, size_t len)
{
    const char *p = json, *end = json + len;
    /* Most documents have no "\u" at all: one scan says so, where the
     * loop below stops at every escape (a text's "\n"s). */
    if (!has_u_escape(json, len))
        return len;
    while ((p = memchr(p, '\\', (size_t)(end - p))) != NULL && end - p >= 2) {
        if (p[1] != 'u' || end - p < 6) {
            p += 2;
            continue;
        }
        unsigned cp = hex4(p + 2);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end - p < 12 || p[6] != '\\' || p[7] != 'u' ||
                hex4(p + 8) < 0xDC00 || hex4(p + 8) > 0xDFFF)
                return (size_t)(p - json);
            p += 12;
        } else {
            p += 6;
        }
    }
    return len;
}

/* Copy YAJL's short error text ("parse error: ...\n") into err. */
static void yajl_reason(walk *w, const char *json, size_t len, bool at_end)
{
    size_t at = at_end ? len : yajl_fault_at(w, json, len);
    unsigned char *msg = yajl_get_error(w->h, 0, (const unsigned char *)json,
                                        len);
    const char *m = msg ? (const char *)msg : "malformed";
    size_t mlen = strlen(m);
    while (mlen && (m[mlen - 1] == '\n' || m[mlen - 1] == ' '))
        mlen--;
    kv_seterr(w->err, KVFTS_EINVAL, "invalid JSON at byte %zu: %.*s", at,
              (int)mlen, m);
    w->err->pos = (long long)at;
    if (msg)
        yajl_free_error(w->h, msg);
}

int kv_json_walk(const char *json, size_t len, kv_buf *compact,
                 kv_json_leaf_fn leaf, void *payload, kv_err *err)
{
    kv_err local = KV_ERR_INIT;
    if (!err)
        err = &local;
    err->pos = -1;
    if (len > KVFTS_MAX_DOC)
        return kv_seterr(err, KVFTS_EINVAL,
                         "document of %zu bytes is larger than the %u-byte "
                         "limit", len, (unsigned)KVFTS_MAX_DOC);
    if (all_space(json, len)) {
        err->pos = 0;
        return kv_seterr(err, KVFTS_EINVAL,
                         "invalid JSON at byte 0: empty document");
    }
    static const yajl_alloc_funcs afuncs = { y_malloc, y_realloc, y_free, NULL };
    walk w = { .out = compact, .leaf = leaf, .payload = payload, .err = err };
    w.h = yajl_alloc(&callbacks, (yajl_alloc_funcs *)&afuncs, &w);
    if (!w.h)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory (JSON parser)");
    yajl_config(w.h, yajl_allow_comments, 0);
    size_t out_start = compact ? compact->len : 0;

    yajl_status st = yajl_parse(w.h, (const unsigned char *)json, len);
    bool parsed_all = false;  /* an error from complete_parse is at the end */
    if (st == yajl_status_ok) {
        parsed_all = true;
        st = yajl_complete_parse(w.h);
    }
    int rc = KVFTS_OK;
    size_t at;
    if (st == yajl_status_ok && (at = lone_surrogate(json, len)) < len) {
        err->pos = (long long)at;
        rc = kv_seterr(err, KVFTS_EINVAL, "invalid JSON at byte %zu: "
                       "\\u%.4s is half of a surrogate pair", at,
                       json + at + 2);
    }
    if (st != yajl_status_ok) {
        if (w.rc)
            rc = w.rc;      /* our own callback stopped the walk */
        else if (st == yajl_status_error) {
            yajl_reason(&w, json, len, parsed_all);
            rc = KVFTS_EINVAL;
        } else {
            rc = kv_seterr(err, KVFTS_ERROR, "JSON walk stopped");
        }
    }
    yajl_free(w.h);
    kv_buf_free(&w.path);
    if (rc && compact) {
        compact->len = out_start;
        if (compact->data)
            compact->data[out_start] = '\0';
    }
    return rc;
}

/* ---- leaves kept -----------------------------------------------------------
 *
 * leaf = u32 path length | u32 value length | u32 pos | u8 type |
 *        path | NUL | value | NUL            (u32s in this host's order)
 */

#define LEAF_HEAD 13

int kv_leaves_add(kv_buf *out, const char *path, size_t path_len,
                  kv_json_type type, const char *value, size_t value_len,
                  size_t pos, kv_err *err)
{
    if (path_len > UINT32_MAX || value_len > UINT32_MAX || pos > UINT32_MAX)
        return kv_seterr(err, KVFTS_EINVAL, "JSON leaf too large to keep");
    int rc = kv_buf_reserve(out, LEAF_HEAD + path_len + value_len + 2, err);
    if (rc)
        return rc;
    char *p = out->data + out->len;
    uint32_t h[3] = { (uint32_t)path_len, (uint32_t)value_len,
                      (uint32_t)pos };
    memcpy(p, h, 12);
    p[12] = (char)type;
    memcpy(p + LEAF_HEAD, path, path_len);
    p[LEAF_HEAD + path_len] = '\0';
    memcpy(p + LEAF_HEAD + path_len + 1, value, value_len);
    p[LEAF_HEAD + path_len + 1 + value_len] = '\0';
    out->len += LEAF_HEAD + path_len + value_len + 2;
    out->data[out->len] = '\0';
    return KVFTS_OK;
}

int kv_leaves_walk(const char *buf, size_t len, kv_json_leaf_fn leaf,
                   void *payload, kv_err *err)
{
    size_t at = 0;
    while (at < len) {
        uint32_t h[3];
        if (len - at < LEAF_HEAD)
            break;
        memcpy(h, buf + at, 12);
        kv_json_type type = (kv_json_type)(unsigned char)buf[at + 12];
        size_t need = LEAF_HEAD + (size_t)h[0] + h[1] + 2;
        if (need > len - at || type < KV_JSON_STRING || type > KV_JSON_NULL)
            break;
        const char *path = buf + at + LEAF_HEAD;
        int rc = leaf(payload, path, h[0], type, path + h[0] + 1, h[1], h[2]);
        if (rc)
            return rc;
        at += need;
    }
    if (at != len)
        return kv_seterr(err, KVFTS_ECORRUPT, "kept JSON leaves damaged at "
                         "byte %zu of %zu", at, len);
    return KVFTS_OK;
}
