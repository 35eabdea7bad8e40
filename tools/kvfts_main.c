/*
 * kvfts_main.c -- the kvfts command: dispatch to subcommands and help.
 *
 * Conventions (README.md "The kvfts command"): every command takes -d DIR or
 * $KVFTS_DB; output is JSON lines on stdout; errors are one line on stderr,
 * "kvfts: <what>: <why>", with an exit status that tells not-found,
 * conflict and bad input apart (tool.h).
 */
#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *usage;
} command;

static const command commands[] = {
    { "init", cmd_init,
      "kvfts init DIR [--config FILE]\n"
      "  Create a database in DIR (and the directory).  --config stores a\n"
      "  JSON config (lookups, analysis); allowed while the database is empty.\n" },
    { "put", cmd_write,
      "kvfts put KEY JSON [--cas N] | kvfts put --auto PREFIX JSON\n"
      "  Store JSON (an object; '-' reads stdin, @FILE reads a file) under KEY,\n"
      "  creating or replacing it.  --cas N: only if the stored CAS is N.\n"
      "  --auto PREFIX: key PREFIX::<n>, n from counter count::PREFIX.\n"
      "  Prints {\"key\":KEY,\"cas\":NEW_CAS}.\n" },
    { "add", cmd_write,
      "kvfts add KEY JSON\n"
      "  Store JSON under KEY; fails (exit 4) if KEY exists.\n" },
    { "replace", cmd_write,
      "kvfts replace KEY JSON [--cas N]\n"
      "  Replace the document at KEY; fails (exit 3) if it does not exist,\n"
      "  (exit 4) if --cas N does not match.\n" },
    { "del", cmd_del,
      "kvfts del KEY [--cas N]\n"
      "  Delete the document at KEY and its lookups.\n" },
    { "get", cmd_get,
      "kvfts get KEY... | kvfts get --range PREFIX FIRST..[LAST]\n"
      "  Multi-get: one JSON line per key, in order; a missing key prints\n"
      "  {\"key\":K,\"error\":\"not found\"} and the exit status is 3.\n"
      "  Logical keys work too: count::NAME, meta::config, LOOKUP::VALUE.\n"
      "  --range PREFIX 1..N reads PREFIX::1..PREFIX::N (N omitted: the value\n"
      "  of counter count::PREFIX), skipping missing documents.\n" },
    { "incr", cmd_incr,
      "kvfts incr NAME [DELTA] [--initial N]\n"
      "  Add DELTA (default 1, may be negative) to counter count::NAME and\n"
      "  print {\"counter\":\"count::NAME\",\"value\":V}.  A missing counter\n"
      "  starts at 0, or with --initial N is created holding N.\n" },
    { "lookup", cmd_lookup,
      "kvfts lookup NAME VALUE [--ref]\n"
      "  Follow lookup NAME::VALUE and print the documents it refers to;\n"
      "  --ref prints the lookup document itself ({\"ref\":..} / {\"refs\":[..]}).\n" },
    { "load", cmd_load,
      "kvfts load FILE.jsonl|- [--key TEMPLATE | --id-field PATH | --auto PREFIX]\n"
      "           [--mode put|add|replace] [--mem MB] [--batch N] [--skip-bad]\n"
      "           [--resume] [--quiet]\n"
      "  Bulk-load JSON Lines, one transaction per batch: a batch ends when its\n"
      "  buffers reach --mem MB (default 256) or, if given, after N documents.\n"
      "  --key 'pkg::{package}' builds keys from fields; --id-field id uses\n"
      "  the value of field id as the key; --auto user makes user::<n>.\n"
      "  A bad line stops the load (everything before it is committed) unless\n"
      "  --skip-bad, which reports and counts it.  --resume continues a load\n"
      "  that stopped: lines whose key is stored are passed over (\"existing\").\n"
      "  Progress on a terminal.\n" },
    { "analyze", cmd_analyze,
      "kvfts analyze [--analyzer NAME | --field PATH] TEXT | kvfts analyze --doc JSON\n"
      "  Print the terms the index would hold, with positions and byte\n"
      "  offsets: of TEXT under an analyzer (standard, english, keyword, ...),\n"
      "  as a value of field PATH under the database's config (-d DIR), or,\n"
      "  with --doc, of every field of a JSON document.\n" },
    { "search", cmd_search,
      "kvfts search QUERY [--limit N] [--offset N] [--count] [--keys]\n"
      "             [--sort score|key] [--format json|table]\n"
      "             [--time-limit MS] [--mem-limit BYTES[K|M|G]] [--exact]\n"
      "kvfts search --query-file FILE|- [...]\n"
      "  Find documents: 'quick fox' (both), 'a OR b', '-dog' / 'NOT dog',\n"
      "  '\"a phrase\"', 'qui*' (prefix), 'field:term', 'field:(a OR b)',\n"
      "  parentheses; NOT binds tighter than AND, AND than OR.  Prints\n"
      "  {\"key\":K,\"score\":S,\"doc\":{..}} per hit by BM25 rank (--keys: no\n"
      "  doc; --sort key: by key), then {\"total\":N}; --count prints\n"
      "  only {\"total\":N}.  --limit defaults to 10 (0: all).  Exit 3 when\n"
      "  nothing matches, 2 for a bad query.  A query has at most 10,000\n"
      "  words and 256 KiB (--query-file reads a long one).  A prefix may\n"
      "  expand to any number of terms; expanding it is bounded by\n"
      "  --mem-limit (default 256M; env KVFTS_SEARCH_MEM) and\n"
      "  --time-limit (default none; env KVFTS_SEARCH_TIME_MS), which also\n"
      "  bounds ranking the matches (not a --count): past one the answer is\n"
      "  what was found, with \"partial\":true on the last line;\n"
      "  --exact makes that an error (exit 1).\n" },
    { "term", cmd_term,
      "kvfts term FIELD TERM [--limit N]\n"
      "  Print the index entry fts::FIELD::TERM as {\"count\":N,\"refs\":[...]}:\n"
      "  the exact number of documents holding TERM and their keys in key\n"
      "  order (at most N with --limit).  TERM as stored: see kvfts analyze.\n" },
    { "terms", cmd_terms,
      "kvfts terms FIELD [PREFIX] [--limit N]\n"
      "  List the terms of FIELD (starting with PREFIX) with their counts.\n" },
    { "check", cmd_check,
      "kvfts check\n"
      "  Verify that every index entry, lookup and doc id equals what a fresh\n"
      "  analysis of the stored documents gives; print each difference and\n"
      "  exit 6 if there is any.\n" },
    { "reindex", cmd_reindex,
      "kvfts reindex\n"
      "  Rebuild every index entry and lookup from the stored documents, in\n"
      "  one transaction, with progress on a terminal.\n" },
    { "optimize", cmd_optimize,
      "kvfts optimize\n"
      "  Merge the index's segments into one, dropping deleted and replaced\n"
      "  postings: the smallest index and the fastest searches.  Writes never\n"
      "  need it (they merge as they go); run it after a load or a large\n"
      "  update.  Works in steps of about 8 MB, each committed, with progress\n"
      "  on a terminal; other processes read and write meanwhile, and an\n"
      "  interrupted optimize goes on where it stopped when run again.\n" },
    { "stats", cmd_stats,
      "kvfts stats\n"
      "  Print document, counter and lookup counts and sizes on disk.\n" },
    { "config", cmd_config,
      "kvfts config\n"
      "  Print the stored configuration (meta::config).\n" },
    { "bench", cmd_bench,
      "kvfts bench --corpus NAME [--docs N] [--vs PEERS] [--runs N] [--mem MB]\n"
      "            [--work DIR] [--out DIR] [--data DIR] [--keep] [--bench-dir DIR]\n"
      "            [--spec FILE] [--queries FILE] [--corpus-file FILE]\n"
      "            [--readers N]\n"
      "kvfts bench --growth [--sizes 10000,100000,1000000,5000000] [...]\n"
      "  Benchmark kvfts against SQLite FTS5 and Xapian (--vs fts5,xapian, the\n"
      "  default when built with libxapian-dev; fts5, xapian or none for fewer)\n"
      "  on a corpus of bench/corpora/ (debian, gcide, linuxdoc, synthetic,\n"
      "  largevocab), in one run: load docs/s and MB/s, index size, peak load\n"
      "  RSS, and per query class the median and p99 of top-10 and count,\n"
      "  kvfts's ratio to each peer and to the best, and whether they return\n"
      "  the same match sets.\n"
      "  Prints a table with the targets; writes OUT/NAME.json and OUT/NAME.svg.\n"
      "  --readers N: then N processes search, idle and while the corpus is\n"
      "  loaded again; their median and p99 latency during the load next to\n"
      "  idle.  --growth: the synthetic corpus at each size.  Runs kvfts-bench\n"
      "  (built with libsqlite3-dev); 'kvfts-bench --help' tells more.\n" },
    { "debian-catalog", cmd_debian_catalog,
      "kvfts debian-catalog [FILE|-]\n"
      "  Turn 'apt-cache dumpavail' output into JSON Lines with fields\n"
      "  package, section, maintainer, version, description, homepage,\n"
      "  depends (load them with --key 'pkg::{package}').\n" },
};

#define NCOMMANDS (sizeof commands / sizeof *commands)

static void usage(FILE *f)
{
    fprintf(f,
            "kvfts %s -- full-text and lookup indexing of JSON documents\n\n"
            "usage: kvfts [-d DIR] COMMAND [ARGS]   (DIR may also come from "
            "KVFTS_DB)\n\ncommands:\n", KVFTS_VERSION_STRING);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const char *u = commands[i].usage;
        const char *nl = strchr(u, '\n');
        fprintf(f, "  %.*s\n", (int)(nl - u), u);
    }
    fprintf(f, "\n'kvfts COMMAND --help' describes one command.  Exit status: "
               "0 ok, 1 error, 2 bad input,\n3 not found, 4 conflict (exists, "
               "CAS), 5 busy, 6 corrupt.\n");
}

/* Descriptors 0-2 open (on /dev/null if closed) before any file is: a
 * command run with stdout closed must not print its results into a file of
 * the database that took descriptor 1 (the library does the same). */
static void std_fds_open(void)
{
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
            int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
            if (n >= 0 && n != fd) {
                dup2(n, fd);
                close(n);
            }
        }
}

int main(int argc, char **argv)
{
    std_fds_open();
    opterr = 0;     /* the commands report bad options in one line */
    /* Global options before the command: -d DIR, --help, --version. */
    int i = 1;
    while (i < argc && argv[i][0] == '-') {
        if (strcmp(argv[i], "-d") == 0 || strcmp(argv[i], "--db") == 0) {
            if (i + 1 >= argc)
                return tool_error(EXIT_USAGE, "-d needs a directory");
            setenv("KVFTS_DB", argv[i + 1], 1);
            i += 2;
        } else if (strncmp(argv[i], "--db=", 5) == 0) {
            setenv("KVFTS_DB", argv[i] + 5, 1);
            i++;
        } else if (strcmp(argv[i], "-h") == 0 ||
                   strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return EXIT_OK;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("kvfts %s\n", KVFTS_VERSION_STRING);
            return EXIT_OK;
        } else {
            return tool_error(EXIT_USAGE, "unknown option '%s' (see kvfts "
                              "--help)", argv[i]);
        }
    }
    if (i >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[i];
    for (size_t c = 0; c < NCOMMANDS; c++) {
        if (strcmp(commands[c].name, name) != 0)
            continue;
        for (int k = i + 1; k < argc; k++) {
            if (strcmp(argv[k], "--") == 0)
                break;
            if (strcmp(argv[k], "--help") == 0 || strcmp(argv[k], "-h") == 0) {
                fputs(commands[c].usage, stdout);
                return EXIT_OK;
            }
        }
        /* bench runs other programs, which would inherit SIGPIPE
         * ignored: it keeps the default behaviour (its databases are its
         * own). */
        bool hold = strcmp(name, "bench") != 0;
        if (hold)
            tool_signals_hold();
        int code = commands[c].run(argc - i, argv + i);
        if (hold)
            tool_signals_release();
        return code;
    }
    return tool_error(EXIT_USAGE, "unknown command '%s' (see kvfts --help)",
                      name);
}
