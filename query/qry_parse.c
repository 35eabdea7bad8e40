/*
 * qry_parse.c -- the query language: text -> plan (a tree of qry_node).
 *
 * Syntax (README "Query syntax"), by precedence, NOT > AND > OR:
 *
 *   query   := or EOF
 *   or      := and ( "OR" and )*
 *   and     := unary ( ["AND"] unary )*     juxtaposition is AND
 *   unary   := ( "-" | "NOT" ) primary | primary
 *   primary := "(" or ")" | FIELD ":" primary | WORD | WORD* | "PHRASE"
 *
 * Lexing: whitespace separates; '(' ')' '"' are tokens of their own; a word
 * is any other run of bytes.  "AND", "OR", "NOT" are operators only in upper
 * case and standing alone.  A '-' starting a word negates it ("-dog"); inside
 * a word it is text ("wi-fi").  "field:rest" scopes rest to a field (the
 * text before the first ':'); "field:" directly followed by '(' or '"'
 * scopes that group or phrase; an inner scope overrides an outer one.  A
 * word ending in '*' is a prefix.  Phrases have no escapes and no operators.
 *
 * Analysis happens here, as each leaf is read, with the analyzer of its
 * field (tok_analysis_field; default field "_all"):
 *   - a word giving one term is a TERM; several ("wi-fi") a PHRASE of them
 *     at their analyzed positions when positions are stored, else an AND;
 *     none (a stop word, punctuation) is EMPTY, which drops out of its AND
 *     or OR (an AND left with no positive kid matches nothing);
 *   - a quoted phrase is analyzed as one text: its terms keep the positions
 *     the analyzer gave them, so a stop word inside leaves the same hole the
 *     index has; a phrase needs positions (clear error if the config has
 *     them off);
 *   - in a field other than _all, a word that is a JSON number or true /
 *     false is also looked up as the one keyword term the index stores for
 *     such values (tok_keyword), ORed with the text analysis: "n:-5" finds
 *     {"n": -5}, "flag:false" finds {"flag": false} even when the field's
 *     analyzer stems "false";
 *   - a prefix is normalized without stemming or stop words (a "standard"
 *     analyzer, or keyword normalization for a keyword field) and must be
 *     one term; it matches the stored terms (stems, in a stemmed field).
 *   - a field that is excluded or analyzed "none" is an error (it can never
 *     match); a field never seen simply matches nothing.
 * Structural rules, checked on the syntax before analysis: every AND group
 * (a top level, a parenthesis, an OR branch) needs a positive item ("-dog"
 * alone, "a OR -b" are errors); operators need operands on both sides.
 * Positions in messages are byte offsets in the query text, from 0.
 */
#include "query.h"

#include <stdio.h>
#include <string.h>

typedef enum tok_type {
    T_EOF = 0, T_LPAREN, T_RPAREN, T_WORD, T_PHRASE, T_FIELD, T_AND, T_OR,
    T_NOT, T_MINUS
} tok_type;

typedef struct qtoken {
    tok_type type;
    size_t pos;           /* byte offset of the token */
    const char *text;     /* WORD, PHRASE: the text (no field, quotes, '*') */
    size_t len;
    const char *field;    /* WORD, PHRASE, FIELD: the field, or NULL */
    size_t flen;
    bool prefix;          /* WORD: ended in '*' */
} qtoken;

typedef struct parser {
    const char *q;
    size_t len;
    tok_analysis *an;
    tok_tokenizer *std;   /* for prefixes, made on first use */
    qtoken *toks;
    size_t ntoks, cap, at;
    bool positions;
    kv_err *err;
    /* scratch of one analysis */
    struct aterm { size_t off, len; uint32_t pos; } *at_terms;
    size_t nat, atcap;
    kv_buf abuf;
} parser;

static int perr(parser *p, size_t pos, const char *fmt, const char *what)
{
    char m[300];
    snprintf(m, sizeof m, fmt, what);
    kv_seterr(p->err, KVFTS_EINVAL, "query: %s at %zu", m, pos);
    p->err->pos = (long long)pos;
    return KVFTS_EINVAL;
}

/* ---- lexer --------------------------------------------------------------- */

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
           c == '\v';
}

static bool is_special(char c)
{
    return c == '(' || c == ')' || c == '"';
}

static int push_tok(parser *p, const qtoken *t)
{
    if (p->ntoks == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        qtoken *n = kv_realloc(p->toks, cap * sizeof *n);
        if (!n)
            return kv_seterr(p->err, KVFTS_ENOMEM, "out of memory");
        p->toks = n;
        p->cap = cap;
    }
    p->toks[p->ntoks++] = *t;
    return KVFTS_OK;
}

static int lex(parser *p)
{
    const char *q = p->q;
    size_t i = 0, n = p->len;
    int rc = KVFTS_OK;
    while (!rc && i < n) {
        char c = q[i];
        qtoken t = { T_EOF, i, NULL, 0, NULL, 0, false };
        if (is_space(c)) {
            i++;
            continue;
        }
        if (c == '(' || c == ')') {
            t.type = c == '(' ? T_LPAREN : T_RPAREN;
            i++;
            rc = push_tok(p, &t);
            continue;
        }
        if (c == '"') {
            const char *end = memchr(q + i + 1, '"', n - i - 1);
            if (!end)
                return perr(p, i, "unbalanced '%s'", "\"");
            t.type = T_PHRASE;
            t.text = q + i + 1;
            t.len = (size_t)(end - t.text);
            i = (size_t)(end - q) + 1;
            rc = push_tok(p, &t);
            continue;
        }
        if (c == '-') {
            if (i + 1 >= n || is_space(q[i + 1]) || q[i + 1] == ')')
                return perr(p, i, "'%s' without a term after it", "-");
            t.type = T_MINUS;
            i++;
            rc = push_tok(p, &t);
            continue;
        }
        size_t s = i;
        while (i < n && !is_space(q[i]) && !is_special(q[i]))
            i++;
        const char *w = q + s;
        size_t wl = i - s;
        if (wl == 3 && memcmp(w, "AND", 3) == 0)
            t.type = T_AND;
        else if (wl == 2 && memcmp(w, "OR", 2) == 0)
            t.type = T_OR;
        else if (wl == 3 && memcmp(w, "NOT", 3) == 0)
            t.type = T_NOT;
        if (t.type != T_EOF) {
            rc = push_tok(p, &t);
            continue;
        }
        const char *colon = wl > 1 ? memchr(w + 1, ':', wl - 1) : NULL;
        if (colon) {
            t.field = w;
            t.flen = (size_t)(colon - w);
            w = colon + 1;
            wl = (size_t)(q + i - w);
            if (wl == 0) {
                if (i >= n || (q[i] != '(' && q[i] != '"')) {
                    char f[160];
                    snprintf(f, sizeof f, "%.*s:",
                             (int)(t.flen > 120 ? 120 : t.flen), t.field);
                    return perr(p, s, "field '%s' without a term after it",
                                f);
                }
                t.type = T_FIELD;
                rc = push_tok(p, &t);
                continue;
            }
        }
        t.type = T_WORD;
        if (wl > 0 && w[wl - 1] == '*') {
            t.prefix = true;
            wl--;
        }
        t.text = w;
        t.len = wl;
        rc = push_tok(p, &t);
    }
    if (!rc) {
        qtoken t = { T_EOF, n, NULL, 0, NULL, 0, false };
        rc = push_tok(p, &t);
    }
    return rc;
}

/* ---- nodes --------------------------------------------------------------- */

/* A leaf's field and terms live in its own allocation (leaf_new); other
 * nodes have none. */
void qry_node_free(qry_node *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->nkids; i++)
        qry_node_free(n->kids[i]);
    kv_free(n->kids);
    kv_free(n);
}

/* A node, with @p extra bytes after it (a leaf's arrays and strings). */
static qry_node *node_new_extra(parser *p, qry_kind kind, size_t pos,
                                size_t extra)
{
    qry_node *n = kv_calloc(1, sizeof *n + extra);
    if (!n) {
        kv_seterr(p->err, KVFTS_ENOMEM, "out of memory");
        return NULL;
    }
    n->kind = kind;
    n->pos = pos;
    return n;
}

static qry_node *node_new(parser *p, qry_kind kind, size_t pos)
{
    return node_new_extra(p, kind, pos, 0);
}

static int node_add_kid(parser *p, qry_node *n, qry_node *kid)
{
    qry_node **k = kv_realloc(n->kids, (n->nkids + 1) * sizeof *k);
    if (!k) {
        qry_node_free(kid);
        return kv_seterr(p->err, KVFTS_ENOMEM, "out of memory");
    }
    n->kids = k;
    n->kids[n->nkids++] = kid;
    return KVFTS_OK;
}

/* 1 when field (field, flen) is in "field_lists": its leaves' terms are
 * those of its own lists (TOK_LIST_MARK + the term), else 0. */
static size_t list_mark(const parser *p, const char *field, size_t flen)
{
    return tok_analysis_listed(p->an, field, flen) ? 1 : 0;
}

/* A leaf with field and count terms (from the analysis scratch), in one
 * allocation: the node, then its terms' pointers, lengths and offsets,
 * then its field's and terms' bytes (a search parses a leaf per word: six
 * allocations each were a sixth of a one-term count).  The terms of a
 * field in "field_lists" are its list's: TOK_LIST_MARK + the term. */
static qry_node *leaf_new(parser *p, qry_kind kind, size_t pos,
                          const char *field, size_t flen, size_t from,
                          size_t count)
{
    size_t mark = list_mark(p, field, flen);
    size_t extra = count * (sizeof(char *) + sizeof(size_t) +
                            sizeof(uint32_t)) + flen + 1;
    for (size_t i = 0; i < count; i++)
        extra += mark + p->at_terms[from + i].len + 1;
    qry_node *n = node_new_extra(p, kind, pos, extra);
    if (!n)
        return NULL;
    n->terms = (char **)(n + 1);
    n->tlens = (size_t *)(n->terms + count);
    n->offs = (uint32_t *)(n->tlens + count);
    char *c = (char *)(n->offs + count);
    n->field = c;
    memcpy(c, field, flen);
    c += flen + 1;
    n->flen = flen;
    for (size_t i = 0; i < count; i++) {
        const struct aterm *a = &p->at_terms[from + i];
        n->terms[i] = c;
        if (mark)
            c[0] = TOK_LIST_MARK;
        memcpy(c + mark, p->abuf.data + a->off, a->len);
        c += mark + a->len + 1;
        n->tlens[i] = mark + a->len;
        n->offs[i] = a->pos - p->at_terms[from].pos;
    }
    n->nterms = count;
    return n;
}

/* ---- analysis of leaves -------------------------------------------------- */

static int collect(void *payload, const char *term, size_t term_len,
                   uint32_t pos, size_t start, size_t end)
{
    parser *p = payload;
    (void)start;
    (void)end;
    if (p->nat == p->atcap) {
        size_t cap = p->atcap ? p->atcap * 2 : 16;
        struct aterm *a = kv_realloc(p->at_terms, cap * sizeof *a);
        if (!a)
            return kv_seterr(p->err, KVFTS_ENOMEM, "out of memory");
        p->at_terms = a;
        p->atcap = cap;
    }
    p->at_terms[p->nat].off = p->abuf.len;
    p->at_terms[p->nat].len = term_len;
    p->at_terms[p->nat].pos = pos;
    p->nat++;
    return kv_buf_append(&p->abuf, term, term_len, p->err);
}

static int add_scratch(parser *p, const char *term, size_t len)
{
    return collect(p, term, len, 0, 0, 0);
}

/* JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool is_json_scalar(const char *s, size_t n)
{
    if ((n == 4 && memcmp(s, "true", 4) == 0) ||
        (n == 5 && memcmp(s, "false", 5) == 0))
        return true;
    size_t i = 0;
    if (i < n && s[i] == '-')
        i++;
    if (i >= n)
        return false;
    if (s[i] == '0')
        i++;
    else if (s[i] >= '1' && s[i] <= '9')
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    else
        return false;
    if (i < n && s[i] == '.') {
        size_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return false;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return false;
    }
    return i == n;
}

static tok_tokenizer *field_analyzer(parser *p, const char *field, size_t flen,
                                     size_t pos)
{
    tok_tokenizer *t = tok_analysis_field(p->an, field, flen);
    if (!t) {
        char f[160];
        snprintf(f, sizeof f, "%.*s", (int)(flen > 120 ? 120 : flen), field);
        perr(p, pos, "field '%s' is not indexed (excluded, or analyzer "
             "\"none\")", f);
    }
    return t;
}

static int analyze_prefix(parser *p, const qtoken *t, const char *field,
                          size_t flen, qry_node **out)
{
    tok_tokenizer *ft = field_analyzer(p, field, flen, t->pos);
    if (!ft)
        return KVFTS_EINVAL;
    p->nat = 0;
    kv_buf_reset(&p->abuf);
    int rc;
    if (tok_get_kind(ft) == TOK_KEYWORD) {
        char kw[TOK_MAX_TERM + 1];
        size_t kl = 0;
        rc = tok_keyword(ft, t->text, t->len, kw, &kl, p->err);
        if (!rc && kl > 0 && kl <= TOK_MAX_TERM)
            rc = add_scratch(p, kw, kl);
    } else {
        if (!p->std && (rc = tok_new(&p->std, "standard", p->err)) != 0)
            return rc;
        rc = tok_run(p->std, t->text, t->len, collect, p, p->err);
    }
    if (rc == KVFTS_EINVAL)
        return perr(p, t->pos, "%.200s", p->err->msg);
    if (rc)
        return rc;
    if (p->nat != 1) {
        char w[160];
        snprintf(w, sizeof w, "%.*s", (int)(t->len > 120 ? 120 : t->len),
                 t->text);
        return perr(p, t->pos, "prefix '%s*' must be one word (letters or "
                    "digits)", w);
    }
    *out = leaf_new(p, QRY_PREFIX, t->pos, field, flen, 0, 1);
    return *out ? KVFTS_OK : KVFTS_ENOMEM;
}

/* A word or a phrase in field (field, flen). */
static int analyze_leaf(parser *p, const qtoken *t, const char *field,
                        size_t flen, qry_node **out)
{
    *out = NULL;
    if (t->field) {
        field = t->field;
        flen = t->flen;
    }
    if (t->prefix)
        return analyze_prefix(p, t, field, flen, out);
    tok_tokenizer *ft = field_analyzer(p, field, flen, t->pos);
    if (!ft)
        return KVFTS_EINVAL;
    p->nat = 0;
    kv_buf_reset(&p->abuf);
    int rc = tok_run(ft, t->text, t->len, collect, p, p->err);
    if (rc == KVFTS_EINVAL)
        return perr(p, t->pos + (t->type == T_PHRASE) +
                    (p->err->pos > 0 ? (size_t)p->err->pos : 0),
                    "%s", "invalid UTF-8");
    if (rc)
        return rc;
    size_t nan = p->nat;
    qry_node *n = NULL;
    if (nan > 1 && t->type == T_PHRASE && !p->positions)
        return perr(p, t->pos, "phrase needs positions, which the config "
                    "turns off (\"positions\": false)%s", "");
    if (nan == 0) {
        n = node_new(p, QRY_EMPTY, t->pos);
    } else if (nan == 1) {
        n = leaf_new(p, QRY_TERM, t->pos, field, flen, 0, 1);
    } else if (p->positions) {
        n = leaf_new(p, QRY_PHRASE, t->pos, field, flen, 0, nan);
    } else {
        n = node_new(p, QRY_AND, t->pos);
        for (size_t i = 0; n && i < nan; i++) {
            qry_node *k = leaf_new(p, QRY_TERM, t->pos, field, flen, i, 1);
            if (!k || node_add_kid(p, n, k)) {
                qry_node_free(n);
                n = NULL;
            }
        }
    }
    if (!n)
        return KVFTS_ENOMEM;
    /* Numbers and booleans are stored as one keyword term of their field. */
    bool is_all = flen == strlen(TOK_ALL_FIELD) &&
                  memcmp(field, TOK_ALL_FIELD, flen) == 0;
    tok_kind kind = tok_get_kind(ft);
    if (!is_all && (kind == TOK_STANDARD || kind == TOK_STEMMED) &&
        is_json_scalar(t->text, t->len)) {
        char kw[TOK_MAX_TERM + 1];
        size_t kl = 0;
        rc = tok_keyword(ft, t->text, t->len, kw, &kl, p->err);
        if (rc) {
            qry_node_free(n);
            return rc;
        }
        size_t mark = list_mark(p, field, flen);
        bool same = n->kind == QRY_TERM && n->tlens[0] == mark + kl &&
                    memcmp(n->terms[0] + mark, kw, kl) == 0;
        if (!same && kl > 0 && kl <= TOK_MAX_TERM) {
            size_t from = p->nat;
            qry_node *o = node_new(p, QRY_OR, t->pos), *k = NULL;
            rc = o ? add_scratch(p, kw, kl) : KVFTS_ENOMEM;
            if (!rc && !(k = leaf_new(p, QRY_TERM, t->pos, field, flen, from,
                                      1)))
                rc = KVFTS_ENOMEM;
            if (!rc && (rc = node_add_kid(p, o, k)) == 0) {
                rc = node_add_kid(p, o, n);
                n = NULL;
            }
            if (rc) {
                qry_node_free(o);
                qry_node_free(n);
                return rc;
            }
            n = o;
        }
    }
    *out = n;
    return KVFTS_OK;
}

/* ---- recursive descent --------------------------------------------------- */

static const qtoken *peek(parser *p)
{
    return &p->toks[p->at];
}

static const char *op_name(tok_type t)
{
    switch (t) {
    case T_AND: return "AND";
    case T_OR: return "OR";
    case T_NOT: return "NOT";
    default: return "-";
    }
}

static int parse_or(parser *p, const char *field, size_t flen, int depth,
                    qry_node **out);

static int parse_primary(parser *p, const char *field, size_t flen, int depth,
                         qry_node **out)
{
    const qtoken *t = peek(p);
    *out = NULL;
    switch (t->type) {
    case T_LPAREN: {
        size_t at = t->pos;
        if (depth >= QRY_MAX_DEPTH)
            return perr(p, at, "parentheses nested deeper than %s",
                        KVFTS_STR(QRY_MAX_DEPTH));
        p->at++;
        if (peek(p)->type == T_RPAREN)
            return perr(p, at, "empty parentheses%s", "");
        /* "(" at the end: name the parenthesis, not an "empty query". */
        if (peek(p)->type == T_EOF)
            return perr(p, at, "unbalanced '%s'", "(");
        int rc = parse_or(p, field, flen, depth + 1, out);
        if (rc)
            return rc;
        if (peek(p)->type != T_RPAREN) {
            qry_node_free(*out);
            *out = NULL;
            return perr(p, at, "unbalanced '%s'", "(");
        }
        p->at++;
        return KVFTS_OK;
    }
    case T_FIELD:
        if (!field_analyzer(p, t->field, t->flen, t->pos))
            return KVFTS_EINVAL;
        p->at++;
        if (peek(p)->type == T_PHRASE) {
            qtoken ph = *peek(p);
            ph.field = t->field;
            ph.flen = t->flen;
            ph.pos = t->pos;
            p->at++;
            return analyze_leaf(p, &ph, field, flen, out);
        }
        return parse_primary(p, t->field, t->flen, depth, out);
    case T_WORD:
    case T_PHRASE:
        p->at++;
        return analyze_leaf(p, t, field, flen, out);
    case T_RPAREN:
        return perr(p, t->pos, "unbalanced '%s'", ")");
    case T_EOF:
        return perr(p, t->pos, "a term expected%s", "");
    default:
        return perr(p, t->pos, "'%s' without a term after it",
                    op_name(t->type));
    }
}

static bool ends_group(tok_type t)
{
    return t == T_EOF || t == T_RPAREN || t == T_OR;
}

/* and := unary ( [AND] unary )* ; at least one positive unary. */
static int parse_and(parser *p, const char *field, size_t flen, int depth,
                     qry_node **out)
{
    *out = NULL;
    qry_node *n = node_new(p, QRY_AND, peek(p)->pos);
    if (!n)
        return KVFTS_ENOMEM;
    bool positive = false;
    size_t first_neg = 0;
    bool any_neg = false;
    int rc = KVFTS_OK;
    while (!rc && !ends_group(peek(p)->type)) {
        const qtoken *t = peek(p);
        if (t->type == T_AND) {
            if (n->nkids == 0) {
                rc = perr(p, t->pos, "'%s' without a term before it", "AND");
                break;
            }
            p->at++;
            tok_type nx = peek(p)->type;
            if (ends_group(nx) || nx == T_AND)
                rc = perr(p, t->pos, "'%s' without a term after it", "AND");
            continue;
        }
        bool neg = false;
        if (t->type == T_NOT || t->type == T_MINUS) {
            tok_type nx = p->toks[p->at + 1].type;
            if (ends_group(nx) || nx == T_AND || nx == T_NOT ||
                nx == T_MINUS) {
                rc = perr(p, t->pos, "'%s' without a term after it",
                          op_name(t->type));
                break;
            }
            if (!any_neg)
                first_neg = t->pos;
            any_neg = neg = true;
            p->at++;
        }
        qry_node *k = NULL;
        rc = parse_primary(p, field, flen, depth, &k);
        if (!rc) {
            k->neg = neg;
            positive |= !neg;
            rc = node_add_kid(p, n, k);
        }
    }
    if (!rc && n->nkids == 0) {
        const qtoken *t = peek(p);
        if (t->type == T_OR)
            rc = perr(p, t->pos, "'%s' without a term before it", "OR");
        else if (t->type == T_RPAREN)
            rc = perr(p, t->pos, "unbalanced '%s'", ")");
        else
            rc = perr(p, t->pos, "empty query%s", "");
    }
    if (!rc && !positive)
        rc = perr(p, first_neg, "only negative terms (a NOT needs a "
                  "positive term in the same group)%s", "");
    if (rc) {
        qry_node_free(n);
        return rc;
    }
    *out = n;
    return KVFTS_OK;
}

static int parse_or(parser *p, const char *field, size_t flen, int depth,
                    qry_node **out)
{
    *out = NULL;
    qry_node *n = node_new(p, QRY_OR, peek(p)->pos);
    if (!n)
        return KVFTS_ENOMEM;
    int rc;
    for (;;) {
        qry_node *k = NULL;
        rc = parse_and(p, field, flen, depth, &k);
        if (!rc)
            rc = node_add_kid(p, n, k);
        if (rc || peek(p)->type != T_OR)
            break;
        const qtoken *t = peek(p);
        p->at++;
        tok_type nx = peek(p)->type;
        if (nx == T_EOF || nx == T_RPAREN || nx == T_OR || nx == T_AND) {
            rc = perr(p, t->pos, "'%s' without a term after it", "OR");
            break;
        }
    }
    if (rc) {
        qry_node_free(n);
        return rc;
    }
    *out = n;
    return KVFTS_OK;
}

/* ---- simplification ------------------------------------------------------ */

/* Flatten nested ANDs / ORs, drop EMPTY kids, replace one-kid groups by the
 * kid.  An AND with no positive kid left matches nothing: EMPTY. */
static int simplify(parser *p, qry_node **np)
{
    qry_node *n = *np;
    if (n->kind != QRY_AND && n->kind != QRY_OR)
        return KVFTS_OK;
    size_t m = 0;
    qry_node **kids = NULL;
    size_t cap = 0;
    int rc = KVFTS_OK;
    for (size_t i = 0; i < n->nkids; i++) {
        rc = simplify(p, &n->kids[i]);
        if (rc)
            break;
        qry_node *k = n->kids[i];
        size_t add = 1;
        bool splice = k->kind == n->kind && !k->neg;
        if (k->kind == QRY_EMPTY)
            add = 0;
        else if (splice)
            add = k->nkids;
        if (m + add > cap) {
            cap = (m + add) * 2;
            qry_node **x = kv_realloc(kids, cap * sizeof *x);
            if (!x) {
                rc = kv_seterr(p->err, KVFTS_ENOMEM, "out of memory");
                break;
            }
            kids = x;
        }
        if (k->kind == QRY_EMPTY) {
            qry_node_free(k);
        } else if (splice) {
            for (size_t j = 0; j < k->nkids; j++)
                kids[m++] = k->kids[j];
            k->nkids = 0;
            qry_node_free(k);
        } else {
            kids[m++] = k;
        }
        n->kids[i] = NULL;
    }
    if (rc) {
        for (size_t i = 0; i < m; i++)
            qry_node_free(kids[i]);
        kv_free(kids);
        return rc;
    }
    kv_free(n->kids);
    n->kids = kids;
    n->nkids = m;
    size_t pos = 0;
    for (size_t i = 0; i < m; i++)
        pos += !kids[i]->neg;
    if (pos == 0) {
        for (size_t i = 0; i < m; i++)
            qry_node_free(kids[i]);
        kv_free(kids);
        n->kids = NULL;
        n->nkids = 0;
        n->kind = QRY_EMPTY;
    } else if (m == 1) {
        qry_node *k = kids[0];
        k->neg = n->neg;
        n->nkids = 0;
        qry_node_free(n);
        *np = k;
    }
    return KVFTS_OK;
}

int qry_parse(qry_node **out, tok_analysis *a, const char *q, size_t len,
              kv_err *err)
{
    *out = NULL;
    parser p = { 0 };
    p.q = q;
    p.len = len;
    p.an = a;
    p.err = err;
    p.positions = tok_analysis_positions(a);
    qry_node *n = NULL;
    size_t bad;
    int rc = KVFTS_OK;
    if (len > QRY_MAX_QUERY)
        rc = perr(&p, QRY_MAX_QUERY, "query longer than %s bytes",
                  KVFTS_STR(QRY_MAX_QUERY));
    else if (!kv_utf8_valid(q, len, &bad))
        rc = perr(&p, bad, "%s", "invalid UTF-8");
    else if (memchr(q, 0, len))
        rc = perr(&p, (size_t)((const char *)memchr(q, 0, len) - q),
                  "%s", "NUL byte");
    if (!rc)
        rc = lex(&p);
    for (size_t i = 0, words = 0; !rc && i < p.ntoks; i++)
        if ((p.toks[i].type == T_WORD || p.toks[i].type == T_PHRASE) &&
            ++words > QRY_MAX_TERMS)
            rc = perr(&p, p.toks[i].pos, "more than %s terms",
                      KVFTS_STR(QRY_MAX_TERMS));
    if (!rc && p.toks[0].type == T_EOF)
        rc = perr(&p, 0, "empty query%s", "");
    if (!rc)
        rc = parse_or(&p, TOK_ALL_FIELD, strlen(TOK_ALL_FIELD), 0, &n);
    if (!rc && peek(&p)->type != T_EOF)
        rc = perr(&p, peek(&p)->pos, "unbalanced '%s'", ")");
    if (!rc)
        rc = simplify(&p, &n);
    if (rc) {
        qry_node_free(n);
        n = NULL;
    }
    tok_free(p.std);
    kv_free(p.toks);
    kv_free(p.at_terms);
    kv_buf_free(&p.abuf);
    *out = n;
    return rc;
}

/* ---- dump ---------------------------------------------------------------- */

int qry_node_dump(const qry_node *n, kv_buf *out, kv_err *err)
{
    int rc = KVFTS_OK;
    if (n->neg)
        rc = kv_buf_append(out, "-", 1, err);
    switch (n->kind) {
    case QRY_EMPTY:
        return rc ? rc : kv_buf_append(out, "EMPTY", 5, err);
    case QRY_TERM:
    case QRY_PREFIX:
        if (!rc)
            rc = kv_buf_appendf(out, err, "%s:%s%s", n->field, n->terms[0],
                                n->kind == QRY_PREFIX ? "*" : "");
        return rc;
    case QRY_PHRASE:
        if (!rc)
            rc = kv_buf_appendf(out, err, "%s:\"", n->field);
        for (size_t i = 0; !rc && i < n->nterms; i++) {
            if (i)
                rc = kv_buf_append(out, " ", 1, err);
            for (uint32_t g = i ? n->offs[i - 1] + 1 : 0;
                 !rc && i && g < n->offs[i]; g++)
                rc = kv_buf_append(out, "_ ", 2, err);
            if (!rc)
                rc = kv_buf_append(out, n->terms[i], n->tlens[i], err);
        }
        return rc ? rc : kv_buf_append(out, "\"", 1, err);
    case QRY_AND:
    case QRY_OR:
        if (!rc)
            rc = kv_buf_append(out, n->kind == QRY_AND ? "AND(" : "OR(", n->kind
                               == QRY_AND ? 4 : 3, err);
        for (size_t i = 0; !rc && i < n->nkids; i++) {
            if (i)
                rc = kv_buf_append(out, ", ", 2, err);
            if (!rc)
                rc = qry_node_dump(n->kids[i], out, err);
        }
        return rc ? rc : kv_buf_append(out, ")", 1, err);
    }
    return rc;
}
