/*
 * corpus.c -- kvfts-corpus: turn real texts on this machine (and one
 * synthetic generator) into the JSON Lines corpora of the benchmark
 * (issue 6, README "Benchmarks").  bench/corpus.sh drives it and caches the output;
 * bench/corpora/NAME.json says how each corpus is loaded and indexed.
 *
 *   kvfts-corpus gcide [DICT_DZ INDEX]   one document per dictionary entry
 *   kvfts-corpus linuxdoc [DIR]          one document per kernel doc page
 *   kvfts-corpus synthetic N [SEED [VOCAB]]  N synthetic Zipf documents
 *                                        (VOCAB words, default 200,000)
 *
 * Output: one compact JSON object per line on stdout, flat top-level string
 * fields only, always valid JSON and valid UTF-8.  Errors print
 * `kvfts-corpus: <what>: <why>` and exit 1; usage errors exit 2.
 *
 * gcide.  Debian's dict-gcide holds the GNU Collaborative International
 * Dictionary of English in dictd form: gcide.dict.dz (gzip/dictzip; read
 * through `gzip -dc`) and gcide.index, lines `headword TAB offset TAB
 * length`, offset and length in dictd's base64 (A-Za-z0-9+/, most
 * significant digit first) into the uncompressed dict.  Many index lines
 * point at one entry: a main entry ("White") is also reached from each
 * sub-entry it defines ("ermine moth"), and some lines repeat exactly.  A
 * document is one entry (one distinct offset/length), named by the index
 * line whose headword the entry text starts with (else its first index
 * line): that line gives `headword`, and ids 1..N follow those lines'
 * order.  `00-*` meta entries are skipped.  The text is ASCII, with GCIDE's
 * bracket notation for letters (`fa[,c]ade`, `[ae]`, `[=a]`) and three
 * stray Windows-1252 bytes: the letters whose meaning is certain become
 * Unicode letters (façade, æ, ā: see ENTITIES), stray bytes are decoded as
 * Windows-1252, and white space is tidied (lines trimmed, runs of blanks
 * and of empty lines collapsed).
 *
 * linuxdoc.  Debian's linux-doc-6.1 ships each page's reStructuredText
 * source as a file named *.rst.txt under html/_sources.  The files are
 * walked, then sorted by relative path (byte order) so ids are stable;
 * `title` is the first section title (see find_title), else the path;
 * `text` is the whole file.
 *
 * synthetic.  Not text, and said so: its spec has "synthetic": true and a
 * title starting with SYNTHETIC.  Words are drawn from a fixed
 * 200,000-word vocabulary with Zipf weights 1/rank (exponent exactly 1.0)
 * by Vose's alias method; the word of rank r is r written in bijective
 * base 75 over a table of consonant-vowel syllables (rank 1 "ka", 2 "lo",
 * 76 "kaka"), so words are unique lower-case ASCII of 2 to 6 letters,
 * independent of N and SEED, and a two-syllable prefix ("kalo*") expands
 * to at most 76 terms.  Fields: title 4-8 words, body 10-70 words (both
 * uniform), tag "tag1".."tag50" (Zipf).  Randomness is splitmix64 (Steele,
 * Lea and Flood 2014) seeded with SEED (default 42), consumed in document
 * order, so a given SEED always gives the same bytes on any machine and
 * the N-document corpus is the first N lines of any larger one.  VOCAB
 * (default 200,000, at most 30,000,000) sets the vocabulary's size: the
 * word of a rank is the same at any VOCAB, a larger one adds rarer words
 * of up to 8 letters.  The large-vocabulary corpus (bench/corpora/
 * largevocab.json) takes 4,000,000, so that prefixes of 1, 2 and 3 letters
 * ("k*", "ka*", "kal*") expand to more than 1,000 terms.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROG "kvfts-corpus"
#define GCIDE_DICT "/usr/share/dictd/gcide.dict.dz"
#define GCIDE_INDEX "/usr/share/dictd/gcide.index"
#define LINUXDOC_DIR "/usr/share/doc/linux-doc-6.1/html/_sources"
#define RST_SUFFIX ".rst.txt"

/* ---- errors and memory --------------------------------------------------- */

/* Print `kvfts-corpus: <what>: <why>`; returns -1 for `return fail(...)`. */
static int fail(const char *what, const char *why)
{
    fprintf(stderr, PROG ": %s: %s\n", what, why);
    return -1;
}

/* A command-line tool has nothing to roll back: out of memory ends it. */
static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fail("memory", "out of memory");
        exit(1);
    }
    return q;
}

typedef struct buf {
    char *p;        /* bytes, not NUL-terminated unless buf_nul() */
    size_t len;     /* bytes used */
    size_t cap;     /* bytes allocated */
} buf;

static void buf_reserve(buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

static void buf_add(buf *b, const char *s, size_t n)
{
    buf_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void buf_addc(buf *b, char c)
{
    buf_reserve(b, 1);
    b->p[b->len++] = c;
}

static char *buf_nul(buf *b)
{
    buf_addc(b, '\0');
    b->len--;
    return b->p;
}

/* ---- UTF-8 repair -------------------------------------------------------- */

/* Windows-1252 0x80..0x9F; 0 where the code page leaves the byte undefined. */
static const uint16_t CP1252[32] = {
    0x20AC, 0, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021,
    0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0, 0x017D, 0,
    0, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
    0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0, 0x017E, 0
};

static void put_utf8(buf *b, uint32_t c)
{
    char t[3];
    if (c < 0x800) {
        t[0] = (char)(0xC0 | c >> 6);
        t[1] = (char)(0x80 | (c & 0x3F));
        buf_add(b, t, 2);
        return;
    }
    t[0] = (char)(0xE0 | c >> 12);
    t[1] = (char)(0x80 | (c >> 6 & 0x3F));
    t[2] = (char)(0x80 | (c & 0x3F));
    buf_add(b, t, 3);
}

/* Length of the well-formed UTF-8 sequence at s (RFC 3629: no overlongs,
 * surrogates or code points past U+10FFFF), 0 if there is none. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2
        : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) ||
        (c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

/* Append s to b as valid UTF-8: well-formed sequences as they are, any
 * other byte decoded as Windows-1252 (U+FFFD where that is undefined).
 * Returns the number of bytes repaired. */
static size_t utf8_repair(buf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t bad = 0, i = 0;
    buf_reserve(b, n);
    while (i < n) {
        size_t k = utf8_seq(u + i, n - i);
        if (k) {
            buf_add(b, s + i, k);
            i += k;
            continue;
        }
        uint32_t c = u[i] >= 0xA0 ? u[i] : CP1252[u[i] - 0x80];
        put_utf8(b, c ? c : 0xFFFD);
        bad++;
        i++;
    }
    return bad;
}

/* ---- JSON output --------------------------------------------------------- */

/* Append s (valid UTF-8) as a JSON string: quote, backslash and control
 * characters escaped, everything else as it is. */
static void json_str(buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    buf_reserve(b, n + 2);
    buf_addc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            buf_addc(b, (char)c);
            continue;
        }
        buf_addc(b, '\\');
        switch (c) {
        case '"': buf_addc(b, '"'); break;
        case '\\': buf_addc(b, '\\'); break;
        case '\n': buf_addc(b, 'n'); break;
        case '\t': buf_addc(b, 't'); break;
        case '\r': buf_addc(b, 'r'); break;
        case '\b': buf_addc(b, 'b'); break;
        case '\f': buf_addc(b, 'f'); break;
        default:
            buf_add(b, "u00", 3);
            buf_addc(b, hex[c >> 4]);
            buf_addc(b, hex[c & 15]);
        }
    }
    buf_addc(b, '"');
}

/* Append `"name":"value"` (with a leading comma unless first). */
static void json_field(buf *b, const char *name, const char *v, size_t n)
{
    if (b->len > 1)
        buf_addc(b, ',');
    json_str(b, name, strlen(name));
    buf_addc(b, ':');
    json_str(b, v, n);
}

static void json_id(buf *b, uint64_t id)
{
    char t[24];
    int n = snprintf(t, sizeof t, "%" PRIu64, id);
    json_field(b, "id", t, (size_t)n);
}

/* Write the line in b (without its newline) to stdout and empty b. */
static int emit_line(buf *b)
{
    buf_addc(b, '\n');
    size_t n = b->len;
    b->len = 0;
    if (fwrite(b->p, 1, n, stdout) == n)
        return 0;
    return fail("stdout", strerror(errno));
}

static int finish_output(void)
{
    if (fflush(stdout) != 0 || ferror(stdout))
        return fail("stdout", strerror(errno));
    return 0;
}

/* ---- reading files ------------------------------------------------------- */

static int read_fd(buf *out, int fd, const char *file)
{
    for (;;) {
        buf_reserve(out, 1 << 16);
        ssize_t r = read(fd, out->p + out->len, out->cap - out->len);
        if (r == 0)
            return 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return fail(file, strerror(errno));
        out->len += (size_t)r;
    }
}

static int read_file(buf *out, const char *file)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(file, strerror(errno));
    int rc = read_fd(out, fd, file);
    close(fd);
    return rc;
}

/* Read a file that may be gzip-compressed (dictzip is gzip): a plain file
 * as it is, a compressed one through `gzip -dc`, so no zlib is needed. */
static int read_maybe_gzip(buf *out, const char *file)
{
    if (read_file(out, file))
        return -1;
    if (out->len < 2 || (unsigned char)out->p[0] != 0x1F ||
        (unsigned char)out->p[1] != 0x8B)
        return 0;
    out->len = 0;
    int fds[2];
    if (pipe(fds))
        return fail("pipe", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return fail("fork", strerror(errno));
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execlp("gzip", "gzip", "-dc", "--", file, (char *)NULL);
        fprintf(stderr, PROG ": gzip: %s\n", strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    int rc = read_fd(out, fds[0], file);
    close(fds[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (rc == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        rc = fail(file, "gzip -dc failed");
    return rc;
}

/* ---- gcide --------------------------------------------------------------- */

/* GCIDE's bracket notation for letters, only where the meaning is certain
 * (Webster 1913 pronunciation marks and etymology spellings).  Everything
 * else ("[Obs.]", "[-e]", "[th]", "[root]") is left as written. */
static const struct { const char *from, *to; } ENTITIES[] = {
    { "['a]", u8"\u00e1" }, { "['e]", u8"\u00e9" }, { "['i]", u8"\u00ed" },
    { "['o]", u8"\u00f3" }, { "['u]", u8"\u00fa" }, { "['y]", u8"\u00fd" },
    { "['A]", u8"\u00c1" }, { "['E]", u8"\u00c9" }, { "['I]", u8"\u00cd" },
    { "['O]", u8"\u00d3" }, { "['U]", u8"\u00da" },
    { "[`a]", u8"\u00e0" }, { "[`e]", u8"\u00e8" }, { "[`i]", u8"\u00ec" },
    { "[`o]", u8"\u00f2" }, { "[`u]", u8"\u00f9" }, { "[`A]", u8"\u00c0" },
    { "[`E]", u8"\u00c8" },
    { "[\"a]", u8"\u00e4" }, { "[\"e]", u8"\u00eb" }, { "[\"i]", u8"\u00ef" },
    { "[\"o]", u8"\u00f6" }, { "[\"u]", u8"\u00fc" }, { "[\"y]", u8"\u00ff" },
    { "[\"A]", u8"\u00c4" }, { "[\"E]", u8"\u00cb" }, { "[\"I]", u8"\u00cf" },
    { "[\"O]", u8"\u00d6" }, { "[\"U]", u8"\u00dc" }, { "[aum]", u8"\u00e4" },
    { "[^a]", u8"\u00e2" }, { "[^e]", u8"\u00ea" }, { "[^i]", u8"\u00ee" },
    { "[^o]", u8"\u00f4" }, { "[^u]", u8"\u00fb" }, { "[^A]", u8"\u00c2" },
    { "[^E]", u8"\u00ca" }, { "[^O]", u8"\u00d4" },
    { "[=a]", u8"\u0101" }, { "[=e]", u8"\u0113" }, { "[=i]", u8"\u012b" },
    { "[=o]", u8"\u014d" }, { "[=u]", u8"\u016b" }, { "[=y]", u8"\u0233" },
    { "[=A]", u8"\u0100" }, { "[=E]", u8"\u0112" }, { "[=I]", u8"\u012a" },
    { "[=O]", u8"\u014c" }, { "[=U]", u8"\u016a" }, { "[imac]", u8"\u012b" },
    { "[=ae]", u8"\u01e3" },
    { "[a^]", u8"\u0103" }, { "[e^]", u8"\u0115" }, { "[i^]", u8"\u012d" },
    { "[o^]", u8"\u014f" }, { "[u^]", u8"\u016d" },
    { "[~a]", u8"\u00e3" }, { "[~e]", u8"\u1ebd" }, { "[~n]", u8"\u00f1" },
    { "[~o]", u8"\u00f5" }, { "[~N]", u8"\u00d1" },
    { "[,c]", u8"\u00e7" }, { "[,C]", u8"\u00c7" }, { "[*a]", u8"\u00e5" },
    { "[ae]", u8"\u00e6" }, { "[AE]", u8"\u00c6" }, { "[oe]", u8"\u0153" },
    { "[OE]", u8"\u0152" }, { "[eth]", u8"\u00f0" }, { "[thorn]", u8"\u00fe" },
    { "[yogh]", u8"\u021d" }, { "[sect]", u8"\u00a7" }, { "[deg]", u8"\u00b0" },
};

/* Append the entity at s (which starts with '[') and return its length, or
 * 0 when s does not start with one of ENTITIES. */
static size_t put_entity(buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < sizeof ENTITIES / sizeof *ENTITIES; i++) {
        size_t k = strlen(ENTITIES[i].from);
        if (k <= n && memcmp(s, ENTITIES[i].from, k) == 0) {
            buf_add(b, ENTITIES[i].to, strlen(ENTITIES[i].to));
            return k;
        }
    }
    return 0;
}

/* Append one line of an entry, trimmed, blanks collapsed, entities
 * converted. */
static void tidy_line(buf *b, const char *s, size_t n)
{
    bool space = false;
    size_t start = b->len;
    for (size_t i = 0; i < n;) {
        if (s[i] == ' ' || s[i] == '\t' || s[i] == '\r') {
            space = b->len > start;
            i++;
            continue;
        }
        if (space)
            buf_addc(b, ' ');
        space = false;
        size_t k = s[i] == '[' ? put_entity(b, s + i, n - i) : 0;
        if (k == 0)
            buf_addc(b, s[i]);
        i += k ? k : 1;
    }
}

/* The entry text s (valid UTF-8) tidied into b: empty lines at either end
 * dropped, runs of empty lines kept as one. */
static void tidy_text(buf *b, const char *s, size_t n)
{
    size_t pending = 0;     /* newlines owed before the next text */
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(s + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - s) : n;
        size_t before = b->len;
        if (pending && b->len)
            buf_add(b, "\n\n", pending > 1 ? 2 : 1);
        size_t mark = b->len;
        tidy_line(b, s + i, e - i);
        if (b->len == mark) {
            b->len = before;
            pending++;
        } else {
            pending = 1;
        }
        i = e + 1;
    }
}

typedef struct gentry {
    const char *hw;     /* headword, in the index buffer */
    size_t hw_len;
    uint64_t off, len;  /* bytes of the uncompressed dict */
    size_t line;        /* index line number, 1-based */
} gentry;

static int b64_value(uint64_t *out, const char *s, size_t n)
{
    static const char alpha[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint64_t v = 0;
    if (n == 0 || n > 10)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const char *p = s[i] ? strchr(alpha, s[i]) : NULL;
        if (!p)
            return -1;
        v = v * 64 + (uint64_t)(p - alpha);
    }
    *out = v;
    return 0;
}

/* Parse one index line (NUL-terminated, no newline) into e. */
static int parse_index_line(gentry *e, char *line)
{
    char *t1 = strchr(line, '\t');
    char *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
    if (!t2 || strchr(t2 + 1, '\t'))
        return -1;
    e->hw = line;
    e->hw_len = (size_t)(t1 - line);
    if (b64_value(&e->off, t1 + 1, (size_t)(t2 - t1 - 1)) ||
        b64_value(&e->len, t2 + 1, strlen(t2 + 1)))
        return -1;
    return 0;
}

/* Split the index (modified in place) into entries, meta entries skipped. */
static int read_index(gentry **out, size_t *count, buf *idx, const char *file)
{
    gentry *v = NULL;
    size_t n = 0, cap = 0, lineno = 0;
    char *p = buf_nul(idx), *end = idx->p + idx->len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        *e = '\0';
        lineno++;
        if (e > p && strncmp(p, "00-", 3) != 0) {
            if (n == cap)
                v = xrealloc(v, (cap = cap ? cap * 2 : 4096) * sizeof *v);
            if (parse_index_line(&v[n], p)) {
                char what[4200];
                snprintf(what, sizeof what, "%s:%zu", file, lineno);
                free(v);
                return fail(what, "not `headword TAB offset TAB length` in "
                            "dictd base64");
            }
            v[n++].line = lineno;
        }
        p = e + 1;
    }
    *out = v;
    *count = n;
    return 0;
}

static int cmp_entry_pos(const void *a, const void *b)
{
    const gentry *x = a, *y = b;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

static int cmp_entry_line(const void *a, const void *b)
{
    const gentry *x = a, *y = b;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* Does the entry text start with headword hw (then a blank or '\')? */
static bool starts_with_hw(const char *text, size_t n, const gentry *e)
{
    while (n && (*text == '\n' || *text == ' ')) {
        text++;
        n--;
    }
    return n > e->hw_len && memcmp(text, e->hw, e->hw_len) == 0 &&
        (text[e->hw_len] == ' ' || text[e->hw_len] == '\\');
}

/* Reduce v[0..n) (sorted by position) to one entry per distinct
 * offset/length: the index line of the headword the text starts with, else
 * the first index line. */
static size_t merge_entries(gentry *v, size_t n, const buf *dict)
{
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && v[j].off == v[i].off && v[j].len == v[i].len)
            j++;
        gentry best = v[i];     /* first index line: v sorted by line within */
        const char *text = dict->p + v[i].off;
        for (size_t k = i; k < j; k++)
            if (starts_with_hw(text, v[i].len, &v[k])) {
                best = v[k];
                break;
            }
        v[out++] = best;
        i = j;
    }
    return out;
}

static int check_bounds(const gentry *v, size_t n, const buf *dict,
                        const char *file)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].off > dict->len || v[i].len > dict->len - v[i].off) {
            char what[4200];
            snprintf(what, sizeof what, "%s:%zu", file, v[i].line);
            return fail(what, "entry lies beyond the end of the dict");
        }
    return 0;
}

static int emit_gcide(const gentry *v, size_t n, const buf *dict,
                      size_t *repaired)
{
    buf line = { 0 }, raw = { 0 }, text = { 0 };
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        raw.len = text.len = 0;
        *repaired += utf8_repair(&raw, dict->p + v[i].off, v[i].len);
        tidy_text(&text, raw.p, raw.len);
        buf_addc(&line, '{');
        json_id(&line, i + 1);
        raw.len = 0;
        *repaired += utf8_repair(&raw, v[i].hw, v[i].hw_len);
        json_field(&line, "headword", raw.p, raw.len);
        json_field(&line, "text", text.p, text.len);
        buf_addc(&line, '}');
        rc = emit_line(&line);
    }
    free(line.p);
    free(raw.p);
    free(text.p);
    return rc;
}

static int cmd_gcide(int argc, char **argv)
{
    if (argc != 0 && argc != 2)
        return 2;
    const char *dict_file = argc ? argv[0] : GCIDE_DICT;
    const char *index_file = argc ? argv[1] : GCIDE_INDEX;
    buf dict = { 0 }, idx = { 0 };
    gentry *v = NULL;
    size_t n = 0, repaired = 0;
    int rc = -1;
    if (read_file(&idx, index_file) ||
        read_index(&v, &n, &idx, index_file) ||
        read_maybe_gzip(&dict, dict_file) ||
        check_bounds(v, n, &dict, index_file))
        goto done;
    qsort(v, n, sizeof *v, cmp_entry_pos);
    size_t lines = n;
    n = merge_entries(v, n, &dict);
    qsort(v, n, sizeof *v, cmp_entry_line);
    if (emit_gcide(v, n, &dict, &repaired) || finish_output())
        goto done;
    fprintf(stderr, PROG ": gcide: %zu entries from %zu index lines (meta "
            "entries skipped), %zu bytes repaired as Windows-1252\n", n,
            lines, repaired);
    rc = 0;
done:
    free(v);
    free(dict.p);
    free(idx.p);
    return rc ? 1 : 0;
}

/* ---- linuxdoc ------------------------------------------------------------ */

typedef struct pathlist {
    char **v;       /* paths relative to the root, malloc'd */
    size_t n, cap;
} pathlist;

static bool has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n > k && strcmp(s + n - k, suf) == 0;
}

/* out = a + "/" + b (without the "/" when either is empty); fails when it
 * does not fit. */
static int join(char *out, size_t cap, const char *a, const char *b)
{
    int n = snprintf(out, cap, "%s%s%s", a, *a && *b ? "/" : "", b);
    if (n < 0 || (size_t)n >= cap)
        return fail(b, "path too long");
    return 0;
}

static void pathlist_add(pathlist *pl, const char *path)
{
    if (pl->n == pl->cap)
        pl->v = xrealloc(pl->v, (pl->cap = pl->cap ? pl->cap * 2 : 1024) *
                         sizeof *pl->v);
    pl->v[pl->n] = xrealloc(NULL, strlen(path) + 1);
    strcpy(pl->v[pl->n++], path);
}

/* Collect every regular *.rst.txt below root/rel (rel "" for the root);
 * symbolic links are not followed. */
static int walk(pathlist *pl, const char *root, const char *rel)
{
    char dir[PATH_MAX];
    if (join(dir, sizeof dir, root, rel))
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return fail(dir, strerror(errno));
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        char sub[PATH_MAX], full[PATH_MAX];
        struct stat st;
        if (de->d_name[0] == '.')
            continue;
        if (join(sub, sizeof sub, rel, de->d_name) ||
            join(full, sizeof full, root, sub))
            rc = -1;
        else if (lstat(full, &st))
            rc = fail(full, strerror(errno));
        else if (S_ISDIR(st.st_mode))
            rc = walk(pl, root, sub);
        else if (S_ISREG(st.st_mode) && has_suffix(sub, RST_SUFFIX))
            pathlist_add(pl, sub);
    }
    closedir(d);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct span {
    const char *p;
    size_t n;
} span;

static bool is_blank(span l)
{
    for (size_t i = 0; i < l.n; i++)
        if (l.p[i] != ' ' && l.p[i] != '\t')
            return false;
    return true;
}

/* A reST section adornment: at least 3 copies of one ASCII punctuation
 * character and nothing else (trailing blanks allowed). */
static bool is_adornment(span l)
{
    while (l.n && (l.p[l.n - 1] == ' ' || l.p[l.n - 1] == '\t'))
        l.n--;
    if (l.n < 3 || l.p[0] == '\0' ||
        !strchr("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", l.p[0]))
        return false;
    for (size_t i = 1; i < l.n; i++)
        if (l.p[i] != l.p[0])
            return false;
    return true;
}

static span trim(span l)
{
    while (l.n && (*l.p == ' ' || *l.p == '\t')) {
        l.p++;
        l.n--;
    }
    while (l.n && (l.p[l.n - 1] == ' ' || l.p[l.n - 1] == '\t'))
        l.n--;
    return l;
}

/* Can l be a section title's text?  Not blank, not an adornment, not a
 * comment or directive. */
static bool is_title_text(span l)
{
    return !is_blank(l) && !is_adornment(l) &&
        !(l.n >= 2 && l.p[0] == '.' && l.p[1] == '.');
}

/* The first section title of a reST text: a title line underlined (and
 * maybe overlined, then it may be indented) by an adornment line, after a
 * blank line or at the start.  Returns false if there is none. */
static bool find_title(span *out, const char *s, size_t n)
{
    span l[3] = { { NULL, 0 }, { NULL, 0 }, { NULL, 0 } };  /* i-2, i-1, i */
    size_t seen = 0;
    for (size_t i = 0; i <= n;) {
        const char *nl = memchr(s + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - s) : n;
        l[0] = l[1];
        l[1] = l[2];
        l[2] = (span){ s + i, e - i };
        seen++;
        bool under = seen >= 2 && is_adornment(l[2]) &&
            is_title_text(l[1]) && l[1].p[0] != ' ' && l[1].p[0] != '\t' &&
            (seen == 2 || is_blank(l[0]) || is_adornment(l[0]));
        bool over = seen >= 3 && is_adornment(l[0]) && is_adornment(l[2]) &&
            l[0].p[0] == l[2].p[0] && is_title_text(l[1]);
        if (under || over) {
            *out = trim(l[1]);
            return true;
        }
        i = e + 1;
    }
    return false;
}

/* Emit one page; *titled says whether it has a section title. */
static int emit_page(buf *line, const buf *text, uint64_t id,
                     const char *path, bool *titled)
{
    span title;
    size_t plen = strlen(path) - strlen(RST_SUFFIX);
    *titled = find_title(&title, text->p, text->len);
    if (!*titled)
        title = (span){ path, plen };
    buf_addc(line, '{');
    json_id(line, id);
    json_field(line, "path", path, plen);
    json_field(line, "title", title.p, title.n);
    json_field(line, "text", text->p, text->len);
    buf_addc(line, '}');
    return emit_line(line);
}

static int emit_linuxdoc(const pathlist *pl, const char *root,
                         size_t *repaired, size_t *no_title)
{
    buf raw = { 0 }, text = { 0 }, line = { 0 };
    int rc = 0;
    for (size_t i = 0; i < pl->n && rc == 0; i++) {
        char full[PATH_MAX];
        raw.len = text.len = 0;
        if ((rc = join(full, sizeof full, root, pl->v[i])) != 0 ||
            (rc = read_file(&raw, full)) != 0)
            break;
        *repaired += utf8_repair(&text, raw.p, raw.len);
        bool titled;
        rc = emit_page(&line, &text, i + 1, pl->v[i], &titled);
        *no_title += !titled;
    }
    free(raw.p);
    free(text.p);
    free(line.p);
    return rc;
}

static int cmd_linuxdoc(int argc, char **argv)
{
    if (argc > 1)
        return 2;
    const char *root = argc ? argv[0] : LINUXDOC_DIR;
    pathlist pl = { 0 };
    size_t repaired = 0, no_title = 0;
    int rc = walk(&pl, root, "");
    if (rc == 0 && pl.n == 0)
        rc = fail(root, "no *" RST_SUFFIX " files");
    if (rc == 0) {
        qsort(pl.v, pl.n, sizeof *pl.v, cmp_str);
        rc = emit_linuxdoc(&pl, root, &repaired, &no_title);
    }
    if (rc == 0)
        rc = finish_output();
    if (rc == 0)
        fprintf(stderr, PROG ": linuxdoc: %zu pages, %zu without a section "
                "title (path used), %zu bytes repaired as Windows-1252\n",
                pl.n, no_title, repaired);
    for (size_t i = 0; i < pl.n; i++)
        free(pl.v[i]);
    free(pl.v);
    return rc ? 1 : 0;
}

/* ---- synthetic ----------------------------------------------------------- */

#define VOCAB 200000
#define VOCAB_MAX 30000000     /* < 75^4: words of at most 8 letters */
#define NTAGS 50
#define NSYL 75
#define DEFAULT_SEED 42

static const char CONSONANTS[] = "klmnprstbdgfvhz";    /* 15 */
static const char VOWELS[] = "aoiue";                  /* 5 */

/* splitmix64: a 64-bit state advanced by a constant, then mixed. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* Syllable i (0..74): consonant i mod 15, vowel (i/15 + i) mod 5 -- a
 * bijection, ordered so that neighbouring ranks differ in both letters. */
static void syllable(char out[2], unsigned i)
{
    out[0] = CONSONANTS[i % 15];
    out[1] = VOWELS[(i / 15 + i) % 5];
}

typedef struct vocab {
    char *chars;        /* all words, back to back */
    uint32_t *start;    /* word of rank r is chars[start[r-1] .. start[r]) */
} vocab;

/* Rank r in bijective base NSYL, most significant syllable first. */
static size_t make_word(char *out, uint32_t r)
{
    unsigned digit[8];
    size_t nd = 0;
    while (r > 0) {
        r--;
        digit[nd++] = r % NSYL;
        r /= NSYL;
    }
    for (size_t i = 0; i < nd; i++)
        syllable(out + 2 * i, digit[nd - 1 - i]);
    return 2 * nd;
}

static void vocab_build(vocab *v, uint32_t n)
{
    v->chars = xrealloc(NULL, (size_t)n * 8);
    v->start = xrealloc(NULL, ((size_t)n + 1) * sizeof *v->start);
    uint32_t at = 0;
    for (uint32_t r = 1; r <= n; r++) {
        v->start[r - 1] = at;
        at += (uint32_t)make_word(v->chars + at, r);
    }
    v->start[n] = at;
}

typedef struct alias {
    uint32_t n;
    uint32_t *keep;     /* keep slot i when the low 32 bits are below this */
    uint32_t *other;    /* else take this slot */
} alias;

/* Vose's alias table for weights 1/1, 1/2, ... 1/n (Zipf, exponent 1). */
static void alias_zipf(alias *a, uint32_t n)
{
    double *p = xrealloc(NULL, n * sizeof *p), sum = 0;
    uint32_t *small = xrealloc(NULL, n * sizeof *small);
    uint32_t *large = xrealloc(NULL, n * sizeof *large), ns = 0, nl = 0;
    a->n = n;
    a->keep = xrealloc(NULL, n * sizeof *a->keep);
    a->other = xrealloc(NULL, n * sizeof *a->other);
    for (uint32_t i = 0; i < n; i++)
        sum += 1.0 / (double)(i + 1);
    for (uint32_t i = 0; i < n; i++) {
        p[i] = (double)n / (double)(i + 1) / sum;
        if (p[i] < 1.0)
            small[ns++] = i;
        else
            large[nl++] = i;
    }
    while (ns && nl) {
        uint32_t s = small[--ns], l = large[nl - 1];
        a->keep[s] = (uint32_t)(p[s] * 4294967296.0);
        a->other[s] = l;
        p[l] -= 1.0 - p[s];
        if (p[l] < 1.0) {
            nl--;
            small[ns++] = l;
        }
    }
    while (nl) {
        a->keep[large[--nl]] = UINT32_MAX;
        a->other[large[nl]] = large[nl];
    }
    while (ns) {       /* rounding leftovers: probability 1 */
        a->keep[small[--ns]] = UINT32_MAX;
        a->other[small[ns]] = small[ns];
    }
    free(p);
    free(small);
    free(large);
}

/* A 0-based rank: the high 32 bits pick a slot, the low 32 the coin. */
static uint32_t alias_draw(const alias *a, uint64_t *rng)
{
    uint64_t x = splitmix64(rng);
    uint32_t slot = (uint32_t)(((x >> 32) * a->n) >> 32);
    return (uint32_t)x < a->keep[slot] ? slot : a->other[slot];
}

static uint32_t uniform(uint64_t *rng, uint32_t lo, uint32_t hi)
{
    return lo + (uint32_t)(((splitmix64(rng) >> 32) * (hi - lo + 1)) >> 32);
}

/* Append `"name":"w1 w2 ..."` with k Zipf words; the words are [a-z], so
 * nothing needs escaping. */
static void synth_words(buf *b, const char *name, uint32_t k,
                        const vocab *v, const alias *a, uint64_t *rng)
{
    buf_addc(b, ',');
    json_str(b, name, strlen(name));
    buf_add(b, ":\"", 2);
    for (uint32_t i = 0; i < k; i++) {
        uint32_t r = alias_draw(a, rng);
        if (i)
            buf_addc(b, ' ');
        buf_add(b, v->chars + v->start[r], v->start[r + 1] - v->start[r]);
    }
    buf_addc(b, '"');
}

static int parse_u64(uint64_t *out, const char *s)
{
    char *end;
    if (!*s || *s == '-' || *s == '+')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int cmd_synthetic(int argc, char **argv)
{
    uint64_t n, seed = DEFAULT_SEED, nvocab = VOCAB;
    if (argc < 1 || argc > 3 || parse_u64(&n, argv[0]) ||
        (argc >= 2 && parse_u64(&seed, argv[1])) ||
        (argc == 3 && (parse_u64(&nvocab, argv[2]) || nvocab < 1 ||
                       nvocab > VOCAB_MAX)))
        return 2;
    vocab v;
    alias words, tags;
    vocab_build(&v, (uint32_t)nvocab);
    alias_zipf(&words, (uint32_t)nvocab);
    alias_zipf(&tags, NTAGS);
    uint64_t rng = seed;
    buf line = { 0 };
    int rc = 0;
    for (uint64_t id = 1; id <= n && rc == 0; id++) {
        char tag[16];
        buf_addc(&line, '{');
        json_id(&line, id);
        synth_words(&line, "title", uniform(&rng, 4, 8), &v, &words, &rng);
        synth_words(&line, "body", uniform(&rng, 10, 70), &v, &words, &rng);
        int k = snprintf(tag, sizeof tag, "tag%" PRIu32,
                         alias_draw(&tags, &rng) + 1);
        json_field(&line, "tag", tag, (size_t)k);
        buf_addc(&line, '}');
        rc = emit_line(&line);
    }
    if (rc == 0)
        rc = finish_output();
    free(line.p);
    free(v.chars);
    free(v.start);
    free(words.keep);
    free(words.other);
    free(tags.keep);
    free(tags.other);
    return rc ? 1 : 0;
}

/* ---- main ---------------------------------------------------------------- */

static int usage(FILE *f)
{
    fputs("usage: " PROG " gcide [DICT_DZ INDEX]   dictionary entries "
          "(dict-gcide)\n"
          "       " PROG " linuxdoc [DIR]         kernel documentation pages "
          "(linux-doc-6.1)\n"
          "       " PROG " synthetic N [SEED [VOCAB]]  N synthetic Zipf "
          "documents (seed 42,\n"
          "                                  200000 words)\n"
          "JSON Lines on stdout.  Defaults: " GCIDE_DICT " " GCIDE_INDEX ", "
          LINUXDOC_DIR ".\n", f);
    return f == stdout ? 0 : 2;
}

int main(int argc, char **argv)
{
    static char outbuf[1 << 20];
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
    if (argc < 2)
        return usage(stderr);
    const char *cmd = argv[1];
    int rc;
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return usage(stdout);
    if (strcmp(cmd, "gcide") == 0)
        rc = cmd_gcide(argc - 2, argv + 2);
    else if (strcmp(cmd, "linuxdoc") == 0)
        rc = cmd_linuxdoc(argc - 2, argv + 2);
    else if (strcmp(cmd, "synthetic") == 0)
        rc = cmd_synthetic(argc - 2, argv + 2);
    else
        rc = 2;
    return rc == 2 ? usage(stderr) : rc;
}
