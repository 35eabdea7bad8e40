/*
 * kvfts_cmd_docs.c -- the document, counter and lookup commands: init, put,
 * add, replace, del, get, incr, lookup, stats, config.
 */
#include "tool.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* A JSON argument: literal text, "-" for stdin, "@FILE" for a file. */
static int json_arg(char **buf, const char **json, size_t *len,
                    const char *arg)
{
    *buf = NULL;
    if (strcmp(arg, "-") == 0 || arg[0] == '@') {
        int code = tool_read_file(buf, len, arg[0] == '@' ? arg + 1 : "-");
        *json = *buf;
        return code;
    }
    *json = arg;
    *len = strlen(arg);
    return EXIT_OK;
}

static int too_many(const char *cmd)
{
    return tool_error(EXIT_USAGE, "%s: wrong number of arguments (see kvfts "
                      "%s --help)", cmd, cmd);
}

int cmd_init(int argc, char **argv)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "db", required_argument, NULL, 'd' },
        { NULL, 0, NULL, 0 }
    };
    tool_common c = { NULL };
    const char *config = NULL;
    int o;
    while ((o = getopt_long(argc, argv, "d:c:", opts, NULL)) != -1) {
        if (o == 'd')
            c.dir = optarg;
        else if (o == 'c')
            config = optarg;
        else
            return tool_bad_option("init", argv);
    }
    if (optind < argc)
        c.dir = argv[optind++];
    if (optind != argc)
        return too_many("init");
    /* Read the config before creating anything: a missing or unreadable
     * file must not leave a new database behind. */
    char *text = NULL;
    size_t len = 0;
    int code = config ? tool_read_file(&text, &len, config) : EXIT_OK;
    if (code)
        return code;
    kvfts_db *db;
    code = tool_open(&db, &c, true, false);
    if (code) {
        free(text);
        return code;
    }
    if (config) {
        int rc = kvfts_set_config(db, text, len);
        if (rc)
            code = tool_fail(db, rc, config);
        free(text);
    }
    if (!code) {
        fputs("{\"ok\":true,\"db\":", stdout);
        const char *dir = c.dir ? c.dir : getenv("KVFTS_DB");
        tool_json_str(stdout, dir, strlen(dir));
        fputs("}\n", stdout);
    }
    kvfts_close(db);
    return code;
}

int cmd_write(int argc, char **argv)
{
    static const struct option opts[] = {
        { "cas", required_argument, NULL, 'C' },
        { "auto", required_argument, NULL, 'a' },
        { "db", required_argument, NULL, 'd' },
        { NULL, 0, NULL, 0 }
    };
    const char *cmd = argv[0];
    kvfts_write_mode mode = strcmp(cmd, "add") == 0       ? KVFTS_INSERT
                            : strcmp(cmd, "replace") == 0 ? KVFTS_REPLACE
                                                          : KVFTS_UPSERT;
    tool_common c = { NULL };
    uint64_t cas = 0;
    const char *auto_prefix = NULL;
    int o;
    while ((o = getopt_long(argc, argv, "d:", opts, NULL)) != -1) {
        if (o == 'd')
            c.dir = optarg;
        else if (o == 'C') {
            if (!tool_parse_u64(optarg, &cas) || cas == 0)
                return tool_error(EXIT_USAGE, "%s: --cas takes a positive "
                                  "integer, not '%s'", cmd, optarg);
        } else if (o == 'a' && mode == KVFTS_UPSERT)
            auto_prefix = optarg;
        else
            return tool_bad_option(cmd, argv);
    }
    int want = auto_prefix ? 1 : 2;
    if (argc - optind != want)
        return too_many(cmd);
    if (auto_prefix && cas)
        return tool_error(EXIT_USAGE, "put: --auto makes a new document; "
                          "--cas does not apply");
    char *buf;
    const char *json;
    size_t jlen;
    int code = json_arg(&buf, &json, &jlen, argv[argc - 1]);
    if (code)
        return code;
    kvfts_db *db;
    tool_wait_notice_arm();
    code = tool_open(&db, &c, false, false);
    if (code) {
        tool_wait_notice_disarm();
        free(buf);
        return code;
    }
    uint64_t new_cas = 0;
    char *made = NULL;
    const char *key;
    int rc;
    if (auto_prefix) {
        rc = kvfts_put_auto(&made, &new_cas, db, auto_prefix,
                            strlen(auto_prefix), json, jlen);
        key = made;
    } else {
        key = argv[optind];
        rc = kvfts_write(&new_cas, db, mode, key, strlen(key), json, jlen,
                         cas);
    }
    tool_wait_notice_disarm();
    if (rc) {
        code = tool_fail(db, rc, cmd);
    } else {
        fputs("{\"key\":", stdout);
        tool_json_str(stdout, key, strlen(key));
        printf(",\"cas\":%" PRIu64 "}\n", new_cas);
    }
    kvfts_free(made);
    free(buf);
    kvfts_close(db);
    return code;
}

int cmd_del(int argc, char **argv)
{
    static const struct option opts[] = {
        { "cas", required_argument, NULL, 'C' },
        { "db", required_argument, NULL, 'd' },
        { NULL, 0, NULL, 0 }
    };
    tool_common c = { NULL };
    uint64_t cas = 0;
    int o;
    while ((o = getopt_long(argc, argv, "d:", opts, NULL)) != -1) {
        if (o == 'd')
            c.dir = optarg;
        else if (o == 'C') {
            if (!tool_parse_u64(optarg, &cas) || cas == 0)
                return tool_error(EXIT_USAGE, "del: --cas takes a positive "
                                  "integer, not '%s'", optarg);
        } else
            return tool_bad_option("del", argv);
    }
    if (argc - optind != 1)
        return too_many("del");
    kvfts_db *db;
    tool_wait_notice_arm();
    int code = tool_open(&db, &c, false, false);
    if (code) {
        tool_wait_notice_disarm();
        return code;
    }
    const char *key = argv[optind];
    int rc = kvfts_del(db, key, strlen(key), cas);
    tool_wait_notice_disarm();
    if (rc) {
        code = tool_fail(db, rc, "del");
    } else {
        fputs("{\"key\":", stdout);
        tool_json_str(stdout, key, strlen(key));
        fputs(",\"deleted\":true}\n", stdout);
    }
    kvfts_close(db);
    return code;
}

/* --range PREFIX FIRST..[LAST] */
static int get_range(kvfts_db *db, const char *prefix, const char *range)
{
    const char *dots = strstr(range, "..");
    if (!dots)
        return tool_error(EXIT_USAGE, "get --range: expected FIRST..LAST or "
                          "FIRST.., not '%s'", range);
    char first_s[32];
    size_t fl = (size_t)(dots - range);
    if (fl == 0 || fl >= sizeof first_s)
        return tool_error(EXIT_USAGE, "get --range: bad FIRST in '%s'", range);
    memcpy(first_s, range, fl);
    first_s[fl] = '\0';
    uint64_t first, last = 0;
    if (!tool_parse_u64(first_s, &first) ||
        (dots[2] && (!tool_parse_u64(dots + 2, &last) || last == 0)))
        return tool_error(EXIT_USAGE, "get --range: bad range '%s'", range);
    if (last && last < first)
        return EXIT_OK;
    kvfts_docs *docs;
    int rc = kvfts_get_range(&docs, db, prefix, strlen(prefix), first, last);
    if (rc)
        return tool_fail(db, rc, "get --range");
    for (size_t i = 0; i < kvfts_docs_count(docs); i++)
        tool_print_doc(stdout, kvfts_docs_at(docs, i));
    kvfts_docs_free(docs);
    return EXIT_OK;
}

static bool starts(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* A logical key outside the documents: count::, meta::config, LOOKUP::V.
 * Returns -1 if @p key is an ordinary document key. */
static int get_logical(kvfts_db *db, const char *key, bool *missing)
{
    if (starts(key, "count::")) {
        const char *name = key + 7;
        int64_t v;
        int rc = kvfts_counter_get(&v, db, name, strlen(name));
        fputs("{\"key\":", stdout);
        tool_json_str(stdout, key, strlen(key));
        if (rc == KVFTS_OK)
            printf(",\"value\":%" PRId64 "}\n", v);
        else if (rc == KVFTS_ENOTFOUND) {
            fputs(",\"error\":\"not found\"}\n", stdout);
            *missing = true;
        } else {
            fputs(",\"error\":\"failed\"}\n", stdout);
            return tool_fail(db, rc, key);
        }
        return EXIT_OK;
    }
    if (strcmp(key, "meta::config") == 0) {
        char *cfg;
        size_t n;
        int rc = kvfts_get_config(&cfg, &n, db);
        if (rc)
            return tool_fail(db, rc, key);
        fputs("{\"key\":\"meta::config\",\"doc\":", stdout);
        fwrite(cfg, 1, n, stdout);
        fputs("}\n", stdout);
        kvfts_free(cfg);
        return EXIT_OK;
    }
    if (starts(key, "fts::")) {
        /* fts::FIELD::TERM; a FIELD has no "::" of its own here. */
        const char *f = key + 5, *sep2 = strstr(f, "::");
        if (!sep2)
            return -1;
        const char *term = sep2 + 2;
        char *json;
        size_t n;
        int rc = kvfts_term_get(&json, &n, db, f, (size_t)(sep2 - f), term,
                                strlen(term), 0);
        fputs("{\"key\":", stdout);
        tool_json_str(stdout, key, strlen(key));
        if (rc == KVFTS_OK) {
            fputs(",\"doc\":", stdout);
            fwrite(json, 1, n, stdout);
            fputs("}\n", stdout);
            kvfts_free(json);
        } else if (rc == KVFTS_ENOTFOUND) {
            fputs(",\"error\":\"not found\"}\n", stdout);
            *missing = true;
        } else {
            fputs(",\"error\":\"failed\"}\n", stdout);
            return tool_fail(db, rc, key);
        }
        return EXIT_OK;
    }
    const char *sep = strstr(key, "::");
    if (!sep || starts(key, "meta::"))
        return -1;
    char *doc;
    size_t n;
    const char *val = sep + 2;
    int rc = kvfts_lookup_doc(&doc, &n, db, key, (size_t)(sep - key), val,
                              strlen(val));
    if (rc == KVFTS_EINVAL)
        return -1;          /* not a declared lookup: a document key */
    fputs("{\"key\":", stdout);
    tool_json_str(stdout, key, strlen(key));
    if (rc == KVFTS_OK) {
        fputs(",\"doc\":", stdout);
        fwrite(doc, 1, n, stdout);
        fputs("}\n", stdout);
        kvfts_free(doc);
    } else if (rc == KVFTS_ENOTFOUND) {
        fputs(",\"error\":\"not found\"}\n", stdout);
        *missing = true;
    } else {
        fputs(",\"error\":\"failed\"}\n", stdout);
        return tool_fail(db, rc, key);
    }
    return EXIT_OK;
}

int cmd_get(int argc, char **argv)
{
    static const struct option opts[] = {
        { "range", required_argument, NULL, 'r' },
        { "db", required_argument, NULL, 'd' },
        { NULL, 0, NULL, 0 }
    };
    tool_common c = { NULL };
    const char *range_prefix = NULL;
    int o;
    while ((o = getopt_long(argc, argv, "d:", opts, NULL)) != -1) {
        if (o == 'd')
            c.dir = optarg;
        else if (o == 'r')
            range_prefix = optarg;
        else
            return tool_bad_option("get", argv);
    }
    if (range_prefix ? argc - optind != 1 : argc - optind < 1)
        return too_many("get");
    kvfts_db *db;
    int code = tool_open(&db, &c, false, true);
    if (code)
        return code;
    if (range_prefix) {
        code = get_range(db, range_prefix, argv[optind]);
        kvfts_close(db);
        return code;
    }
    /* Document keys go in one multi-get; logical keys are read in place.
     * Output keeps the request order. */
    size_t n = (size_t)(argc - optind);
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) {
        kvfts_close(db);
        return tool_error(EXIT_ERR, "get: out of memory");
    }
    size_t nk = 0;
    for (size_t i = 0; i < n; i++)
        keys[nk++] = argv[optind + (int)i];
    kvfts_docs *docs = NULL;
    int rc = kvfts_multi_get(&docs, db, keys, NULL, nk);
    bool missing = false;
    if (rc) {
        code = tool_fail(db, rc, "get");
    } else {
        for (size_t i = 0; i < nk && !code; i++) {
            const kvfts_doc *d = kvfts_docs_at(docs, i);
            if (d->status == KVFTS_ENOTFOUND) {
                int lc = get_logical(db, keys[i], &missing);
                if (lc >= 0) {
                    code = lc;
                    continue;
                }
                missing = true;
            }
            tool_print_doc(stdout, d);
        }
    }
    kvfts_docs_free(docs);
    free(keys);
    kvfts_close(db);
    if (!code && missing)
        code = EXIT_NOTFOUND;
    return code;
}

static const struct option incr_opts[] = {
    { "initial", required_argument, NULL, 'i' },
    { "delta", required_argument, NULL, 'D' },
    { "db", required_argument, NULL, 'd' },
    { NULL, 0, NULL, 0 }
};

static int incr_run(int argc, char **av);

int cmd_incr(int argc, char **argv)
{
    /* A negative DELTA ("-5") is positional, not an option. */
    char **av = tool_args(&argc, argv, incr_opts, "d:");
    if (!av)
        return tool_error(EXIT_ERR, "incr: out of memory");
    int code = incr_run(argc, av);
    free(av);
    return code;
}

static int incr_run(int argc, char **av)
{
    const struct option *opts = incr_opts;
    tool_common c = { NULL };
    int64_t delta = 1, initial = 0;
    bool has_initial = false, has_delta = false;
    int o, code = EXIT_OK;
    while ((o = getopt_long(argc, av, "d:", opts, NULL)) != -1 && !code) {
        if (o == 'd')
            c.dir = optarg;
        else if (o == 'i') {
            if (!tool_parse_i64(optarg, &initial))
                code = tool_error(EXIT_USAGE, "incr: --initial takes an "
                                  "integer, not '%s'", optarg);
            has_initial = true;
        } else if (o == 'D') {
            if (!tool_parse_i64(optarg, &delta))
                code = tool_error(EXIT_USAGE, "incr: bad DELTA '%s'", optarg);
            has_delta = true;
        } else
            code = tool_bad_option("incr", av);
    }
    int npos = argc - optind;
    if (!code && (npos < 1 || npos > 2 || (npos == 2 && has_delta)))
        code = too_many("incr");
    if (!code && npos == 2 && !tool_parse_i64(av[optind + 1], &delta))
        code = tool_error(EXIT_USAGE, "incr: DELTA must be an integer, not "
                          "'%s'", av[optind + 1]);
    const char *name = code ? NULL : av[optind];
    kvfts_db *db = NULL;
    if (!code) {
        tool_wait_notice_arm();
        code = tool_open(&db, &c, false, false);
    }
    if (!code) {
        int64_t v;
        int rc = kvfts_incr(&v, db, name, strlen(name), delta,
                            has_initial ? &initial : NULL);
        tool_wait_notice_disarm();
        if (rc) {
            code = tool_fail(db, rc, "incr");
        } else {
            fputs("{\"counter\":\"count::", stdout);
            /* the name inside the JSON string, escaped, without quotes */
            for (const char *p = name; *p; p++) {
                if (*p == '"' || *p == '\\')
                    fputc('\\', stdout);
                fputc(*p, stdout);
            }
            printf("\",\"value\":%" PRId64 "}\n", v);
        }
    }
    tool_wait_notice_disarm();
    kvfts_close(db);
    return code;
}

static const struct option lookup_opts[] = {
    { "ref", no_argument, NULL, 'r' },
    { "db", required_argument, NULL, 'd' },
    { NULL, 0, NULL, 0 }
};

static int lookup_run(int argc, char **argv);

int cmd_lookup(int argc, char **argv)
{
    /* A VALUE may start with '-' ("-5"): it is positional, as incr's DELTA. */
    char **av = tool_args(&argc, argv, lookup_opts, "d:");
    if (!av)
        return tool_error(EXIT_ERR, "lookup: out of memory");
    int code = lookup_run(argc, av);
    free(av);
    return code;
}

static int lookup_run(int argc, char **argv)
{
    const struct option *opts = lookup_opts;
    tool_common c = { NULL };
    bool ref_only = false;
    int o;
    while ((o = getopt_long(argc, argv, "d:", opts, NULL)) != -1) {
        if (o == 'd')
            c.dir = optarg;
        else if (o == 'r')
            ref_only = true;
        else
            return tool_bad_option("lookup", argv);
    }
    if (argc - optind != 2)
        return too_many("lookup");
    const char *name = argv[optind], *value = argv[optind + 1];
    kvfts_db *db;
    int code = tool_open(&db, &c, false, true);
    if (code)
        return code;
    int rc;
    if (ref_only) {
        char *doc;
        size_t n;
        rc = kvfts_lookup_doc(&doc, &n, db, name, strlen(name), value,
                              strlen(value));
        if (!rc) {
            fwrite(doc, 1, n, stdout);
            fputc('\n', stdout);
            kvfts_free(doc);
        }
    } else {
        kvfts_docs *docs;
        rc = kvfts_lookup(&docs, db, name, strlen(name), value, strlen(value));
        if (!rc) {
            for (size_t i = 0; i < kvfts_docs_count(docs); i++)
                tool_print_doc(stdout, kvfts_docs_at(docs, i));
            kvfts_docs_free(docs);
        }
    }
    if (rc)
        code = tool_fail(db, rc, "lookup");
    kvfts_close(db);
    return code;
}

int cmd_stats(int argc, char **argv)
{
    tool_common c = { NULL };
    int code = tool_db_opts(argc, argv, &c, NULL, "stats");
    if (code)
        return code;
    if (optind != argc)
        return too_many("stats");
    kvfts_db *db;
    code = tool_open(&db, &c, false, true);
    if (code)
        return code;
    kvfts_stats s;
    int rc = kvfts_get_stats(&s, db);
    if (rc)
        code = tool_fail(db, rc, "stats");
    else
        printf("{\"documents\":%" PRIu64 ",\"terms\":%" PRIu64
               ",\"postings\":%" PRIu64 ",\"blocks\":%" PRIu64
               ",\"postings_bytes\":%" PRIu64 ",\"fields\":%" PRIu64
               ",\"skipped_tokens\":%" PRIu64 ",\"counters\":%" PRIu64
               ",\"lookup_entries\":%" PRIu64 ",\"disk_bytes\":%" PRIu64
               ",\"log_bytes\":%" PRIu64 ",\"segments\":%" PRIu64
               ",\"merging\":%s,\"field_list_postings\":%" PRIu64 "}\n",
               s.documents, s.terms, s.postings, s.blocks, s.postings_bytes,
               s.fields, s.skipped_tokens, s.counters, s.lookup_entries,
               s.disk_bytes, s.log_bytes, s.segments,
               s.merging ? "true" : "false", s.field_list_postings);
    kvfts_close(db);
    return code;
}

int cmd_config(int argc, char **argv)
{
    tool_common c = { NULL };
    int code = tool_db_opts(argc, argv, &c, NULL, "config");
    if (code)
        return code;
    if (optind != argc)
        return too_many("config");
    kvfts_db *db;
    code = tool_open(&db, &c, false, true);
    if (code)
        return code;
    char *cfg;
    size_t n;
    int rc = kvfts_get_config(&cfg, &n, db);
    if (rc) {
        code = tool_fail(db, rc, "config");
    } else {
        fwrite(cfg, 1, n, stdout);
        fputc('\n', stdout);
        kvfts_free(cfg);
    }
    kvfts_close(db);
    return code;
}
