/*
 * kvfts_cmd_search.c -- `kvfts search QUERY`: run a query and print the hits.
 *
 * Output (README "The kvfts command"):
 *   default     one JSON line per hit, {"key":K,"score":S,"doc":{...}}, in
 *               rank order, then a last line {"total":N} with the exact
 *               number of matching documents (all pages);
 *   --keys      {"key":K,"score":S} lines (documents are not read), then
 *               {"total":N};
 *   --count     only the line {"total":N} (no scoring, no reading);
 *   partial     when a bound (--time-limit MS, --mem-limit BYTES[K|M|G], or
 *               the KVFTS_SEARCH_TIME_MS / KVFTS_SEARCH_MEM environment)
 *               cut the search, the last line also has "partial":true:
 *               {"total":N,"partial":true};
 *               with --exact the search fails instead (exit status 1);
 *   --format table
 *               a table for people: rank, key, score and an excerpt of the
 *               document (around the first query word found in a string
 *               value, else its longest string), fitted to the terminal's
 *               width when stdout is one (else 100 columns); then a line
 *               "N of TOTAL matches".
 * Exit status: 0 when something matched (or with --count), 3 when nothing
 * did, 2 for a bad query (the message names the byte offset), as the other
 * commands otherwise.
 */
#include "tool.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

/* ---- the excerpt of --format table -------------------------------------- */

typedef struct excerpt {
    const char *best;     /* longest string value */
    size_t best_len;
    const char *hit;      /* the value holding the first query word found */
    size_t hit_len, hit_at;
    size_t hit_word;      /* index of that word (lower is earlier) */
} excerpt;

static bool ieq(char a, char b)
{
    if (a >= 'A' && a <= 'Z')
        a = (char)(a - 'A' + 'a');
    if (b >= 'A' && b <= 'Z')
        b = (char)(b - 'A' + 'a');
    return a == b;
}

static const char *ifind(const char *s, size_t n, const char *w, size_t wl)
{
    for (size_t i = 0; wl && i + wl <= n; i++) {
        size_t j = 0;
        while (j < wl && ieq(s[i + j], w[j]))
            j++;
        if (j == wl)
            return s + i;
    }
    return NULL;
}

static bool word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || (unsigned char)c >= 0x80;
}

/* The n-th plain word of the query (operators and field names skipped). */
static bool query_word(const char *q, size_t n, const char **w, size_t *wl)
{
    size_t i = 0, k = 0;
    while (q[i]) {
        while (q[i] && !word_char(q[i]))
            i++;
        size_t s = i;
        while (q[i] && word_char(q[i]))
            i++;
        if (i == s)
            break;
        if (q[i] == ':')
            continue;
        size_t l = i - s;
        if ((l == 2 && !memcmp(q + s, "OR", 2)) ||
            (l == 3 && (!memcmp(q + s, "AND", 3) || !memcmp(q + s, "NOT", 3))))
            continue;
        if (k++ == n) {
            *w = q + s;
            *wl = l;
            return true;
        }
    }
    return false;
}

static void walk(excerpt *e, yajl_val v, const char *q)
{
    if (YAJL_IS_STRING(v)) {
        const char *s = YAJL_GET_STRING(v);
        size_t n = strlen(s);
        if (n > e->best_len) {
            e->best = s;
            e->best_len = n;
        }
        const char *w;
        size_t wl;
        for (size_t k = 0; k < e->hit_word && query_word(q, k, &w, &wl); k++) {
            const char *at = ifind(s, n, w, wl);
            if (at) {
                e->hit = s;
                e->hit_len = n;
                e->hit_at = (size_t)(at - s);
                e->hit_word = k;
                break;
            }
        }
    } else if (YAJL_IS_OBJECT(v)) {
        for (size_t i = 0; i < v->u.object.len; i++)
            walk(e, v->u.object.values[i], q);
    } else if (YAJL_IS_ARRAY(v)) {
        for (size_t i = 0; i < v->u.array.len; i++)
            walk(e, v->u.array.values[i], q);
    }
}

/* Print at most @p width columns (one per code point) of an excerpt. */
static void print_excerpt(const char *doc, const char *q, size_t width)
{
    excerpt e = { NULL, 0, NULL, 0, 0, SIZE_MAX };
    yajl_val v = doc ? yajl_tree_parse(doc, NULL, 0) : NULL;
    if (v)
        walk(&e, v, q);
    const char *s = e.hit ? e.hit : e.best;
    size_t n = e.hit ? e.hit_len : e.best_len, at = 0;
    if (e.hit && e.hit_at > width / 3) {
        at = e.hit_at - width / 3;
        while (at < n && ((unsigned char)s[at] & 0xC0) == 0x80)
            at++;
        fputs("…", stdout);
        width--;
    }
    size_t cols = 0;
    bool space = false;
    for (size_t i = at; s && i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c & 0xC0) != 0x80) {
            if (cols == width) {
                break;
            }
            cols++;
        }
        if (c < 0x20) {
            if (!space)
                putchar(' ');
            space = true;
            continue;
        }
        space = c == ' ';
        putchar(c);
    }
    putchar('\n');
    yajl_tree_free(v);
}

static size_t term_width(void)
{
    struct winsize ws;
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 &&
        ws.ws_col >= 40)
        return ws.ws_col;
    return 100;
}

/* ---- the command --------------------------------------------------------- */

/* A byte count: digits with an optional K, M or G (binary units). */
static bool parse_size(const char *s, size_t *out)
{
    char num[32];
    size_t n = strlen(s), shift = 0;
    if (n == 0 || n >= sizeof num)
        return false;
    switch (s[n - 1]) {
    case 'K': case 'k': shift = 10; n--; break;
    case 'M': case 'm': shift = 20; n--; break;
    case 'G': case 'g': shift = 30; n--; break;
    default: break;
    }
    memcpy(num, s, n);
    num[n] = '\0';
    uint64_t u;
    if (!tool_parse_u64(num, &u) || u == 0 || u > (SIZE_MAX >> 1) >> shift)
        return false;
    *out = (size_t)u << shift;
    return true;
}


static const struct option search_opts[] = {
    { "limit", required_argument, NULL, 'l' },
    { "offset", required_argument, NULL, 'o' },
    { "count", no_argument, NULL, 'c' },
    { "keys", no_argument, NULL, 'k' },
    { "format", required_argument, NULL, 'f' },
    { "sort", required_argument, NULL, 's' },
    { "query-file", required_argument, NULL, 'q' },
    { "db", required_argument, NULL, 'd' },
    { "exact", no_argument, NULL, 'x' },
    { "time-limit", required_argument, NULL, 't' },
    { "mem-limit", required_argument, NULL, 'm' },
    { NULL, 0, NULL, 0 }
};

static int search_run(int argc, char **argv);

int cmd_search(int argc, char **argv)
{
    /* A query may start with '-' ("-cat fox"): every argument that is not
     * an option (or an option's value) is positional. */
    char **av = tool_args(&argc, argv, search_opts, "d:");
    if (!av)
        return tool_error(EXIT_ERR, "search: out of memory");
    int code = search_run(argc, av);
    free(av);
    return code;
}

static int search_run(int argc, char **argv)
{
    const struct option *opts = search_opts;
    tool_common c = { NULL };
    kvfts_search_options so = KVFTS_SEARCH_OPTIONS_INIT;
    bool table = false;
    const char *qfile = NULL;
    uint64_t u;
    int o;
    /* Bounds from the environment, which the options override. */
    const char *env = getenv("KVFTS_SEARCH_TIME_MS");
    if (env && tool_parse_u64(env, &u) && u <= UINT32_MAX)
        so.time_limit_ms = (unsigned)u;
    env = getenv("KVFTS_SEARCH_MEM");
    if (env)
        (void)parse_size(env, &so.mem_limit);
    while ((o = getopt_long(argc, argv, "d:", opts, NULL)) != -1) {
        switch (o) {
        case 'd':
            c.dir = optarg;
            break;
        case 'l':
        case 'o':
            if (!tool_parse_u64(optarg, &u) || u > SIZE_MAX / 2)
                return tool_error(EXIT_USAGE, "search: --%s takes a number, "
                                  "not '%s'", o == 'l' ? "limit" : "offset",
                                  optarg);
            if (o == 'l')
                so.limit = (size_t)u;
            else
                so.offset = (size_t)u;
            break;
        case 'c':
            so.count_only = true;
            break;
        case 'x':
            so.exact = true;
            break;
        case 't':
            if (!tool_parse_u64(optarg, &u) || u > UINT32_MAX)
                return tool_error(EXIT_USAGE, "search: --time-limit takes "
                                  "milliseconds, not '%s'", optarg);
            so.time_limit_ms = (unsigned)u;
            break;
        case 'm':
            if (!parse_size(optarg, &so.mem_limit))
                return tool_error(EXIT_USAGE, "search: --mem-limit takes "
                                  "bytes (with K, M or G), not '%s'",
                                  optarg);
            break;
        case 'k':
            so.keys_only = true;
            break;
        case 'q':
            qfile = optarg;
            break;
        case 'f':
            if (strcmp(optarg, "json") && strcmp(optarg, "table"))
                return tool_error(EXIT_USAGE, "search: --format is json or "
                                  "table, not '%s'", optarg);
            table = strcmp(optarg, "table") == 0;
            break;
        case 's':
            if (strcmp(optarg, "key") && strcmp(optarg, "score"))
                return tool_error(EXIT_USAGE, "search: --sort is key or "
                                  "score, not '%s'", optarg);
            so.sort = strcmp(optarg, "key") == 0 ? KVFTS_SORT_KEY
                                                 : KVFTS_SORT_SCORE;
            break;
        default:
            return tool_bad_option("search", argv);
        }
    }
    if (argc - optind != (qfile ? 0 : 1))
        return tool_error(EXIT_USAGE, "search: give one QUERY (quote it), "
                          "or --query-file FILE");
    /* A query too long for a command line (Linux takes 128 KiB a word)
     * comes from a file or stdin ("-"), with its final newline dropped. */
    char *qbuf = NULL;
    size_t qlen = 0;
    if (qfile) {
        int code = tool_read_file(&qbuf, &qlen, qfile);
        if (code)
            return code;
        while (qlen && (qbuf[qlen - 1] == '\n' || qbuf[qlen - 1] == '\r'))
            qbuf[--qlen] = '\0';
    }
    const char *q = qbuf ? qbuf : argv[optind];
    if (!qbuf)
        qlen = strlen(q);
    kvfts_db *db;
    int code = tool_open(&db, &c, false, true);
    if (code) {
        free(qbuf);
        return code;
    }
    kvfts_results *r = NULL;
    int rc = kvfts_search(&r, db, q, qlen, &so);
    if (rc) {
        code = tool_fail(db, rc, "search");
        kvfts_close(db);
        free(qbuf);
        return code;
    }
    uint64_t total = kvfts_results_total(r);
    const char *partial = kvfts_results_partial(r) ? ",\"partial\":true" : "";
    if (so.count_only) {
        printf("{\"total\":%" PRIu64 "%s}\n", total, partial);
    } else {
        const char *key, *doc;
        size_t dl;
        double score;
        size_t width = term_width(), rank = so.offset, shown = 0;
        size_t keyw = 0;
        if (table) {
            /* Key column: a quarter of the width, 12 to 40 columns. */
            keyw = width / 4 < 12 ? 12 : width / 4 > 40 ? 40 : width / 4;
            printf("%4s  %-*s  %8s  %s\n", "#", (int)keyw, "key", "score",
                   "excerpt");
        }
        while (kvfts_results_next(r, &key, &doc, &dl, &score) == KVFTS_OK) {
            shown++;
            rank++;
            if (table) {
                printf("%4zu  %-*.*s  %8.4f  ", rank, (int)keyw, (int)keyw,
                       key, score);
                size_t used = 4 + 2 + keyw + 2 + 8 + 2;
                print_excerpt(doc, q, width > used + 10 ? width - used : 10);
                continue;
            }
            fputs("{\"key\":", stdout);
            tool_json_str(stdout, key, strlen(key));
            printf(",\"score\":%.9g", score);
            if (doc) {
                fputs(",\"doc\":", stdout);
                fwrite(doc, 1, dl, stdout);
            }
            fputs("}\n", stdout);
        }
        if (table)
            printf("%zu of %" PRIu64 " matches%s\n", shown, total,
                   *partial ? " (partial: a search bound was reached)" : "");
        else
            printf("{\"total\":%" PRIu64 "%s}\n", total, partial);
        if (total == 0)
            code = EXIT_NOTFOUND;
    }
    if (fflush(stdout) != 0 && !code)
        code = errno == EPIPE ? tool_broken_pipe()
                              : tool_error(EXIT_ERR, "search: writing the "
                                           "output failed");
    kvfts_results_free(r);
    kvfts_close(db);
    free(qbuf);
    return code;
}
