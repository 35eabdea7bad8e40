/*
 * tools/tool.h -- the internal header of the kvfts command: what the command
 * files share.  Like LMDB's tools, the command uses only the public API
 * (include/kvfts.h) and libc (plus YAJL's generator for output).
 */
#ifndef KVFTS_TOOL_H
#define KVFTS_TOOL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kvfts.h"

#include <getopt.h>

/* Exit statuses: documented in README.md "The kvfts command". */
enum {
    EXIT_OK = 0,
    EXIT_ERR = 1,        /* storage or system failure */
    EXIT_USAGE = 2,      /* bad arguments or bad input (JSON, key, config) */
    EXIT_NOTFOUND = 3,   /* no such document, counter, lookup or database */
    EXIT_CONFLICT = 4,   /* already exists, CAS mismatch, unique lookup taken */
    EXIT_BUSY = 5,       /* locked / deadlocked */
    EXIT_CORRUPT = 6     /* stored data failed validation */
};

/* Options every command takes. */
typedef struct tool_common {
    const char *dir;     /* -d DIR, or $KVFTS_DB */
} tool_common;

/** Exit status for a kvfts status code. */
int tool_exit_code(int status);

/** Print "kvfts: <what>: <message of db or status>" to stderr; returns the
 *  exit status for @p status. */
int tool_fail(kvfts_db *db, int status, const char *what);
/** Print "kvfts: <formatted>" to stderr; returns @p code. */
int tool_error(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** "kvfts: CMD: unknown option 'X' (see kvfts CMD --help)" for the
 *  argument getopt_long() just refused; returns EXIT_USAGE. */
int tool_bad_option(const char *cmd, char **argv);

/** For a command whose arguments may start with '-' (a query "-cat", a
 *  DELTA "-5", a lookup VALUE "-5"): argv rearranged for getopt_long() so
 *  that every argument that is neither one of @p opts / @p shortopts nor
 *  the value of one that takes a value comes after a "--", in order.  The
 *  options' own table decides which take a value, so no command keeps a
 *  second list.  An unknown "--name" stays an option (getopt reports it).
 *  Returns a malloc'd array of *argc + 2 entries (free() it, not its
 *  strings) with *argc updated, or NULL when out of memory. */
char **tool_args(int *argc, char **argv, const struct option *opts,
                 const char *shortopts);

/** Open the database named by -d / KVFTS_DB.  On failure prints the error
 *  and returns its exit status (non-zero); *out is then NULL. */
int tool_open(kvfts_db **out, const tool_common *c, bool create,
              bool read_only);

/** Parse the options of a command that takes only -d DIR / --db DIR and,
 *  if @p limit is not NULL, --limit N.  Returns 0 or an exit status. */
int tool_db_opts(int argc, char **argv, tool_common *c, uint64_t *limit,
                 const char *cmd);

/** EXIT_USAGE with "kvfts: PATH: is a directory, not a file" if @p f, just
 *  opened from @p path, is a directory (read(2) would fail with EISDIR, a
 *  "read error"); else EXIT_OK. */
int tool_check_regular(FILE *f, const char *path);

/** Read a whole file ("-" = stdin) into a malloc'd buffer; a directory is
 *  EXIT_USAGE (tool_check_regular). */
int tool_read_file(char **out, size_t *len, const char *path);

/** Parse a signed/unsigned decimal, whole string; false if invalid. */
bool tool_parse_i64(const char *s, int64_t *out);
bool tool_parse_u64(const char *s, uint64_t *out);

/** Write s[0..n) as a JSON string literal. */
void tool_json_str(FILE *f, const char *s, size_t n);

/** Print one document as a JSON line: {"key":..,"cas":..,"doc":..}. */
void tool_print_doc(FILE *f, const kvfts_doc *d);

/* Progress display on a terminal (stderr), at most a few times a second. */
typedef struct tool_progress {
    bool on;             /* stderr is a terminal and not --quiet */
    double start;        /* seconds (monotonic) */
    double last;
    uint64_t total_bytes;/* 0 if unknown (a pipe) */
} tool_progress;

/* Signals that end a process (Ctrl-C, kill, a closed terminal, a closed
 * pipe) are caught while a command runs: a process that dies with the
 * database open counts as crashed, and the next process to open it runs
 * recovery, which fails every other process using it (a load in another
 * terminal, say).  tool_signals_hold() notes SIGINT, SIGTERM, SIGHUP and
 * SIGQUIT (a second one ends the process at once) and ignores SIGPIPE
 * (output to a closed pipe fails instead); long commands poll
 * tool_interrupted() and stop at a safe point; tool_signals_release(),
 * once the database is closed, ends the process by the signal noted, as it
 * would have ended. */
void tool_signals_hold(void);
bool tool_interrupted(void);
void tool_signals_release(void);
/* Output went to a closed pipe: say nothing, and let
 * tool_signals_release() end the process by SIGPIPE, as without kvfts's
 * holding it.  Returns EXIT_ERR. */
int tool_broken_pipe(void);

/* A single-document write (open included) that has not finished after a
 * second is waiting for another process's write transaction (a load's
 * batch): tool_wait_notice_arm() starts a timer that then says so once on
 * stderr, "waiting for another writer (up to N s; KVFTS_BUSY_TIMEOUT)";
 * tool_wait_notice_disarm() stops it.  The library gives up after
 * KVFTS_BUSY_TIMEOUT seconds with KVFTS_EBUSY (exit 5).  tool_open()
 * arms it around opening for writing unless it is armed already.
 * Returns whether this call armed it. */
bool tool_wait_notice_arm(void);
void tool_wait_notice_disarm(void);

double tool_now(void);
void tool_progress_init(tool_progress *p, bool enabled, uint64_t total_bytes);
void tool_progress_update(tool_progress *p, uint64_t docs, uint64_t bytes,
                          bool final);

/* Commands: each returns the process exit status. */
int cmd_init(int argc, char **argv);
int cmd_optimize(int argc, char **argv);
int cmd_write(int argc, char **argv);     /* put, add, replace */
int cmd_del(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_incr(int argc, char **argv);
int cmd_lookup(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_load(int argc, char **argv);
int cmd_debian_catalog(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_term(int argc, char **argv);
int cmd_terms(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_reindex(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif /* KVFTS_TOOL_H */
