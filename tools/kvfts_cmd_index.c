/*
 * kvfts_cmd_index.c -- the index commands: term, terms, check, reindex.
 */
#include "tool.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cmd_term(int argc, char **argv)
{
    tool_common c = { NULL };
    uint64_t limit = 0;
    int code = tool_db_opts(argc, argv, &c, &limit, "term");
    if (code)
        return code;
    if (argc - optind != 2)
        return tool_error(EXIT_USAGE, "term: give FIELD and TERM");
    const char *field = argv[optind], *term = argv[optind + 1];
    kvfts_db *db;
    if ((code = tool_open(&db, &c, false, true)) != 0)
        return code;
    char *json;
    size_t n;
    int rc = kvfts_term_get(&json, &n, db, field, strlen(field), term,
                            strlen(term), (size_t)limit);
    if (rc) {
        code = tool_fail(db, rc, "term");
    } else {
        fwrite(json, 1, n, stdout);
        fputc('\n', stdout);
        kvfts_free(json);
    }
    kvfts_close(db);
    return code;
}

typedef struct list_state {
    uint64_t limit, n;
} list_state;

static int print_term(void *payload, const char *term, size_t len,
                      uint64_t count)
{
    list_state *st = payload;
    if (st->limit && st->n >= st->limit)
        return 1;           /* enough: stop the walk */
    fputs("{\"term\":", stdout);
    tool_json_str(stdout, term, len);
    printf(",\"count\":%" PRIu64 "}\n", count);
    st->n++;
    return 0;
}

int cmd_terms(int argc, char **argv)
{
    tool_common c = { NULL };
    list_state st = { 0, 0 };
    int code = tool_db_opts(argc, argv, &c, &st.limit, "terms");
    if (code)
        return code;
    if (argc - optind < 1 || argc - optind > 2)
        return tool_error(EXIT_USAGE, "terms: give FIELD [PREFIX]");
    const char *field = argv[optind];
    const char *prefix = argc - optind == 2 ? argv[optind + 1] : "";
    kvfts_db *db;
    if ((code = tool_open(&db, &c, false, true)) != 0)
        return code;
    int rc = kvfts_term_list(db, field, strlen(field), prefix, strlen(prefix),
                             print_term, &st);
    if (rc && rc != 1)
        code = tool_fail(db, rc, "terms");
    kvfts_close(db);
    return code;
}

static int print_difference(void *payload, const char *what)
{
    (void)payload;
    fputs("{\"difference\":", stdout);
    tool_json_str(stdout, what, strlen(what));
    fputs("}\n", stdout);
    return 0;
}

int cmd_check(int argc, char **argv)
{
    tool_common c = { NULL };
    int code = tool_db_opts(argc, argv, &c, NULL, "check");
    if (code)
        return code;
    if (optind != argc)
        return tool_error(EXIT_USAGE, "check: no arguments");
    kvfts_db *db;
    if ((code = tool_open(&db, &c, false, true)) != 0)
        return code;
    uint64_t diffs = 0;
    double t0 = tool_now();
    int rc = kvfts_check(&diffs, db, print_difference, NULL);
    if (rc) {
        code = tool_fail(db, rc, "check");
    } else {
        printf("{\"ok\":%s,\"differences\":%" PRIu64 ",\"seconds\":%.3f}\n",
               diffs ? "false" : "true", diffs, tool_now() - t0);
        if (diffs)
            code = tool_error(EXIT_CORRUPT, "check: %" PRIu64 " difference(s) "
                              "between the index and the documents; "
                              "'kvfts reindex' rebuilds it", diffs);
    }
    kvfts_close(db);
    return code;
}

static void show_progress(void *payload, uint64_t done)
{
    tool_progress_update(payload, done, 0, false);
}

int cmd_reindex(int argc, char **argv)
{
    tool_common c = { NULL };
    int code = tool_db_opts(argc, argv, &c, NULL, "reindex");
    if (code)
        return code;
    if (optind != argc)
        return tool_error(EXIT_USAGE, "reindex: no arguments");
    kvfts_db *db;
    if ((code = tool_open(&db, &c, false, false)) != 0)
        return code;
    tool_progress prog;
    tool_progress_init(&prog, true, 0);
    int rc = kvfts_reindex(db, show_progress, &prog);
    kvfts_stats st;
    if (!rc)
        rc = kvfts_get_stats(&st, db);
    if (rc) {
        code = tool_fail(db, rc, "reindex");
    } else {
        tool_progress_update(&prog, st.documents, 0, true);
        printf("{\"documents\":%" PRIu64 ",\"terms\":%" PRIu64
               ",\"postings\":%" PRIu64 ",\"seconds\":%.3f}\n", st.documents,
               st.terms, st.postings, tool_now() - prog.start);
    }
    kvfts_close(db);
    return code;
}

/* ---- optimize ------------------------------------------------------------ */

typedef struct optimize_ui {
    bool on;                /* stderr is a terminal */
    double start, last;
    uint64_t steps;
} optimize_ui;

static int optimize_step(void *payload, uint64_t done, uint64_t total,
                         uint64_t segments)
{
    optimize_ui *u = payload;
    u->steps++;
    double now = tool_now();
    if (u->on && now - u->last >= 0.25) {
        u->last = now;
        double pct = total ? 100.0 * (double)done / (double)total : 100.0;
        char eta[32] = "";
        if (done && total > done) {
            int left = (int)((now - u->start) *
                             ((double)total / (double)done - 1.0));
            snprintf(eta, sizeof eta, "  ETA %d:%02d", left / 60, left % 60);
        }
        fprintf(stderr, "\rmerging: %3.0f%% of %.1f MB, %" PRIu64
                " segment(s)%s   ", pct, (double)total / 1e6, segments, eta);
        fflush(stderr);
    }
    return tool_interrupted();      /* Ctrl-C: stop after this step */
}

int cmd_optimize(int argc, char **argv)
{
    tool_common c = { NULL };
    int code = tool_db_opts(argc, argv, &c, NULL, "optimize");
    if (code)
        return code;
    if (optind != argc)
        return tool_error(EXIT_USAGE, "optimize: no arguments");
    kvfts_db *db;
    if ((code = tool_open(&db, &c, false, false)) != 0)
        return code;
    kvfts_stats before, after;
    int rc = kvfts_get_stats(&before, db);
    optimize_ui u = { isatty(2) != 0, tool_now(), 0, 0 };
    if (!rc)
        rc = kvfts_optimize(db, optimize_step, &u);
    if (u.on && u.steps)
        fputs("\n", stderr);
    if (!rc)
        rc = kvfts_get_stats(&after, db);
    if (rc) {
        code = tool_fail(db, rc, "optimize");
    } else if (tool_interrupted()) {
        code = tool_error(EXIT_ERR, "optimize: interrupted with %" PRIu64
                          " segment(s) left: what is merged stays merged; "
                          "run it again to go on", after.segments);
    } else {
        printf("{\"segments_before\":%" PRIu64 ",\"segments\":%" PRIu64
               ",\"postings_bytes_before\":%" PRIu64
               ",\"postings_bytes\":%" PRIu64 ",\"seconds\":%.3f}\n",
               before.segments, after.segments, before.postings_bytes,
               after.postings_bytes, tool_now() - u.start);
    }
    kvfts_close(db);
    return code;
}
