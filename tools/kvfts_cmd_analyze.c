/*
 * kvfts_cmd_analyze.c -- `kvfts analyze`: print the terms the index would
 * hold, one JSON object per line.
 *
 *   kvfts analyze [--analyzer NAME] TEXT
 *   kvfts analyze --field PATH [-d DIR] TEXT
 *   kvfts analyze --doc [-d DIR] JSON
 *
 * TEXT or JSON "-" (or absent) is read from standard input.  Without
 * --analyzer or --field, TEXT is analyzed as an unscoped query would be
 * (field `_all`).  With -d DIR (or KVFTS_DB), the database's config decides
 * the analyzers of fields; without, the default config.  Output:
 *   {"term":"run","pos":0,"start":0,"end":7}
 *   {"field":"description","term":"run","pos":0,"start":0,"end":7}
 */
#include "tool.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

int cmd_analyze(int argc, char **argv)
{
    static const struct option opts[] = {
        { "analyzer", required_argument, NULL, 'a' },
        { "field", required_argument, NULL, 'f' },
        { "doc", no_argument, NULL, 'D' },
        { "db", required_argument, NULL, 'd' },
        { NULL, 0, NULL, 0 }
    };
    tool_common c = { NULL };
    const char *analyzer = NULL, *field = NULL;
    bool doc = false;
    int o;
    while ((o = getopt_long(argc, argv, "a:f:d:", opts, NULL)) != -1) {
        switch (o) {
        case 'a': analyzer = optarg; break;
        case 'f': field = optarg; break;
        case 'D': doc = true; break;
        case 'd': c.dir = optarg; break;
        default: return tool_bad_option("analyze", argv);
        }
    }
    if (argc - optind > 1)
        return tool_error(EXIT_USAGE, "analyze: one TEXT (or - for stdin)");
    if ((analyzer && field) || (doc && (analyzer || field)))
        return tool_error(EXIT_USAGE, "analyze: --analyzer, --field and "
                          "--doc exclude each other");
    const char *arg = optind < argc ? argv[optind] : "-";
    char *input = NULL;
    size_t len;
    if (strcmp(arg, "-") == 0) {
        int code = tool_read_file(&input, &len, "-");
        if (code)
            return code;
        arg = input;
    } else {
        len = strlen(arg);
    }
    int code = EXIT_OK;
    kvfts_db *db = NULL;
    kvfts_terms *terms = NULL;
    /* A database matters only where a config does: --field and --doc. */
    if (!analyzer && (c.dir || getenv("KVFTS_DB")))
        code = tool_open(&db, &c, false, true);
    int rc = KVFTS_OK;
    if (!code)
        rc = doc ? kvfts_analyze_doc(&terms, db, arg, len)
                 : kvfts_analyze(&terms, db, analyzer, field, arg, len);
    if (!code && rc) {
        code = tool_error(tool_exit_code(rc), "analyze: %s",
                          terms ? kvfts_terms_errmsg(terms)
                                : kvfts_strerror(rc));
    }
    for (size_t i = 0; !code && i < kvfts_terms_count(terms); i++) {
        const kvfts_term *t = kvfts_terms_at(terms, i);
        fputc('{', stdout);
        if (doc || field) {
            fputs("\"field\":", stdout);
            tool_json_str(stdout, t->field, strlen(t->field));
            fputc(',', stdout);
        }
        fputs("\"term\":", stdout);
        tool_json_str(stdout, t->term, t->term_len);
        printf(",\"pos\":%u,\"start\":%zu,\"end\":%zu}\n", (unsigned)t->pos,
               t->start, t->end);
    }
    kvfts_terms_free(terms);
    kvfts_close(db);
    free(input);
    return code;
}
