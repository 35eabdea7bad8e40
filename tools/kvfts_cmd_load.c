/*
 * kvfts_cmd_load.c -- bulk loading of JSON Lines (kvfts load) and the
 * converter that turns the Debian package catalog into JSON Lines
 * (kvfts debian-catalog).
 *
 * load: one document per line, blank lines ignored.  Lines go through one
 * kvfts_batch, which buffers the index postings and merges them in key
 * order when it commits: when its buffers reach --mem megabytes (default
 * 128), or every --batch documents if that is given.  A crash loses at most
 * the batch in progress; every earlier one is durable.  A line
 * the library refuses (bad JSON, bad key, missing key field, an existing key
 * under --mode add, a taken unique lookup) is reported as FILE:LINE:COLUMN
 * and either skipped (--skip-bad, counted in the summary) or ends the load
 * after committing everything before it.  The summary is one JSON line.
 *
 * --resume continues a load that stopped (killed, disk full, a bad line):
 * each line is added only if its key is not stored yet, and a stored key is
 * passed over without a word (counted as "existing").  Since a load commits
 * whole batches in file order, running the same command again with
 * --resume stores exactly the lines the first run did not.  It needs keys
 * that come from the documents (--key, --id-field): --auto keys cannot tell
 * which lines are stored.
 */
#include "tool.h"

#include <getopt.h>
#include <search.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct load_opts {
    const char *file;
    const char *key_template;
    const char *auto_prefix;
    kvfts_write_mode mode;
    uint64_t batch;          /* commit every N documents; 0: by memory */
    uint64_t mem_mb;         /* memory bound of a batch */
    bool skip_bad;
    bool resume;             /* add; a stored key is passed over */
    bool quiet;
} load_opts;

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

/* Whether the batch is intact is its own status: a write that fails with
 * anything but KVFTS_EROLLBACK changed nothing (kvfts.h).  Which of those
 * refusals are the line's fault, for --skip-bad, is a question of its own:
 * bad JSON or key, an existing key (add), a missing one (replace), a CAS or
 * unique-lookup conflict -- not the system's (out of memory, busy, I/O). */
static bool line_at_fault(int rc)
{
    return rc == KVFTS_EINVAL || rc == KVFTS_EEXISTS ||
           rc == KVFTS_ENOTFOUND || rc == KVFTS_ECAS;
}

/* Whether reading the next line could wait for input: nothing left in
 * the stream's buffer (glibc's fields; elsewhere assumed empty) and
 * nothing ready on its descriptor.  A load never holds its write
 * transaction while it waits for input (a FIFO or a pipe that pauses): it
 * commits first, so other writers are not blocked meanwhile (issue 13,
 * item 11).  A regular file is always ready: its loads commit as before. */
static bool input_may_wait(FILE *in)
{
#ifdef __GLIBC__
    if (in->_IO_read_ptr < in->_IO_read_end)
        return false;
#endif
    struct pollfd p = { fileno(in), POLLIN, 0 };
    return poll(&p, 1, 0) == 0;
}

static int run_load(kvfts_db *db, const load_opts *o, FILE *in,
                    uint64_t total_bytes)
{
    kvfts_batch *b = NULL;
    int rc = kvfts_batch_begin(&b, db);
    if (rc)
        return tool_fail(db, rc, "load");
    kvfts_batch_set_mem(b, (size_t)o->mem_mb * 1024 * 1024);
    kvfts_batch_set_split(b, true);   /* its batches are its own */
    tool_progress prog;
    tool_progress_init(&prog, !o->quiet, total_bytes);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    uint64_t lineno = 0, loaded = 0, skipped = 0, bytes = 0, committed = 0;
    uint64_t existing = 0;
    int code = EXIT_OK;
    bool interrupted = false;
    double t0 = tool_now();
    const char *fname = o->file;
    size_t tlen = o->key_template ? strlen(o->key_template) : 0;
    size_t plen = o->auto_prefix ? strlen(o->auto_prefix) : 0;
    for (;;) {
        if (kvfts_batch_pending(b) > 0 && input_may_wait(in)) {
            rc = kvfts_batch_commit(b);
            if (rc) {
                code = tool_fail(db, rc, "load: commit");
                loaded = committed;
                goto out;
            }
            committed = loaded;
        }
        if ((n = getline(&line, &cap, in)) == -1)
            break;
        if (tool_interrupted())     /* Ctrl-C or kill: stop at this line */
            break;
        lineno++;
        bytes += (uint64_t)n;
        size_t len = (size_t)n;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (blank(line, len))
            continue;
        if (o->auto_prefix)
            rc = kvfts_batch_write_auto(NULL, b, o->auto_prefix, plen, line,
                                        len);
        else
            rc = kvfts_batch_write_template(NULL, b, o->mode, o->key_template,
                                            tlen, line, len);
        if (rc == KVFTS_OK) {
            loaded++;
        } else if (rc == KVFTS_EEXISTS && o->resume) {
            existing++;       /* refused before any write: batch intact */
        } else if (rc != KVFTS_EROLLBACK && line_at_fault(rc)) {
            long long pos = kvfts_errpos(db);
            if (pos >= 0)
                tool_error(0, "load: %s:%" PRIu64 ":%lld: %s", fname, lineno,
                           pos + 1, kvfts_errmsg(db));
            else
                tool_error(0, "load: %s:%" PRIu64 ": %s", fname, lineno,
                           kvfts_errmsg(db));
            if (!o->skip_bad) {
                code = tool_exit_code(rc);
                break;
            }
            skipped++;
        } else if (rc != KVFTS_EROLLBACK) {
            /* Refused for the system's reasons: the batch is intact, so
             * the lines before this one are committed below; stop here. */
            code = tool_error(tool_exit_code(rc), "load: %s:%" PRIu64 ": %s",
                              fname, lineno, kvfts_errmsg(db));
            break;
        } else {
            /* The batch was rolled back: what was committed stays. */
            code = tool_fail(db, rc, "load");
            loaded = committed;
            goto out;
        }
        if ((o->batch && kvfts_batch_pending(b) >= o->batch) ||
            kvfts_batch_full(b)) {
            rc = kvfts_batch_commit(b);
            if (rc) {
                code = tool_fail(db, rc, "load: commit");
                loaded = committed;
                goto out;
            }
            committed = loaded;
        }
        tool_progress_update(&prog, loaded, bytes, false);
    }
    /* The lines read so far are committed (below), then the load stops. */
    if (!code && tool_interrupted()) {
        interrupted = true;
        code = tool_error(EXIT_ERR, "load: interrupted at %s:%" PRIu64
                          ": the lines before it are committed; "
                          "'--resume' goes on", fname, lineno + 1);
    }
    if (ferror(in) && !code)
        code = tool_error(EXIT_ERR, "load: %s: read error", fname);
    rc = kvfts_batch_commit(b);
    if (rc) {
        if (!code)
            code = tool_fail(db, rc, "load: commit");
        loaded = committed;
    }
out:
    tool_progress_update(&prog, loaded, bytes, true);
    size_t parts = kvfts_batch_split_commits(b);
    kvfts_batch_free(b);
    free(line);
    double secs = tool_now() - t0;
    printf("{\"loaded\":%" PRIu64 ",\"skipped\":%" PRIu64 ",\"lines\":%" PRIu64
           ",\"bytes\":%" PRIu64 ",\"seconds\":%.3f,\"docs_per_s\":%.0f",
           loaded, skipped, lineno, bytes, secs,
           secs > 0 ? (double)loaded / secs : 0.0);
    if (o->resume)
        printf(",\"existing\":%" PRIu64, existing);
    /* Commits too big for the cache, made in parts (see --mem). */
    if (parts)
        printf(",\"split_commits\":%zu", parts);
    printf("%s%s}\n", interrupted ? ",\"interrupted\":true" : "",
           code ? ",\"stopped\":true" : "");
    return code;
}

int cmd_load(int argc, char **argv)
{
    static const struct option opts[] = {
        { "key", required_argument, NULL, 'k' },
        { "id-field", required_argument, NULL, 'i' },
        { "auto", required_argument, NULL, 'a' },
        { "mode", required_argument, NULL, 'm' },
        { "batch", required_argument, NULL, 'b' },
        { "mem", required_argument, NULL, 'M' },
        { "skip-bad", no_argument, NULL, 's' },
        { "resume", no_argument, NULL, 'r' },
        { "quiet", no_argument, NULL, 'q' },
        { "db", required_argument, NULL, 'd' },
        { NULL, 0, NULL, 0 }
    };
    tool_common c = { NULL };
    load_opts o = { .mode = KVFTS_UPSERT, .batch = 0, .mem_mb = 128 };
    char *id_tmpl = NULL;
    int opt, nkey = 0;
    bool mode_given = false;
    while ((opt = getopt_long(argc, argv, "d:q", opts, NULL)) != -1) {
        switch (opt) {
        case 'd': c.dir = optarg; break;
        case 'k': o.key_template = optarg; nkey++; break;
        case 'i': {
            size_t n = strlen(optarg) + 3;
            free(id_tmpl);
            id_tmpl = malloc(n);
            if (!id_tmpl)
                return tool_error(EXIT_ERR, "load: out of memory");
            snprintf(id_tmpl, n, "{%s}", optarg);
            o.key_template = id_tmpl;
            nkey++;
            break;
        }
        case 'a': o.auto_prefix = optarg; nkey++; break;
        case 'm':
            mode_given = true;
            if (strcmp(optarg, "put") == 0)
                o.mode = KVFTS_UPSERT;
            else if (strcmp(optarg, "add") == 0)
                o.mode = KVFTS_INSERT;
            else if (strcmp(optarg, "replace") == 0)
                o.mode = KVFTS_REPLACE;
            else {
                free(id_tmpl);
                return tool_error(EXIT_USAGE, "load: --mode is put, add or "
                                  "replace, not '%s'", optarg);
            }
            break;
        case 'b':
            if (!tool_parse_u64(optarg, &o.batch) || o.batch == 0 ||
                o.batch > 1000000) {
                free(id_tmpl);
                return tool_error(EXIT_USAGE, "load: --batch takes 1 to "
                                  "1000000, not '%s'", optarg);
            }
            break;
        case 'M':
            if (!tool_parse_u64(optarg, &o.mem_mb) || o.mem_mb == 0 ||
                o.mem_mb > 1024 * 1024) {
                free(id_tmpl);
                return tool_error(EXIT_USAGE, "load: --mem takes megabytes "
                                  "(1 to 1048576), not '%s'", optarg);
            }
            break;
        case 's': o.skip_bad = true; break;
        case 'r': o.resume = true; break;
        case 'q': o.quiet = true; break;
        default:
            free(id_tmpl);
            return tool_bad_option("load", argv);
        }
    }
    int code = EXIT_OK;
    if (argc - optind != 1)
        code = tool_error(EXIT_USAGE, "load: give one FILE (or - for stdin)");
    else if (nkey != 1)
        code = tool_error(EXIT_USAGE, "load: give exactly one of --key "
                          "TEMPLATE, --id-field PATH, --auto PREFIX");
    else if (o.auto_prefix && o.mode != KVFTS_UPSERT)
        code = tool_error(EXIT_USAGE, "load: --auto always adds new "
                          "documents; --mode does not apply");
    else if (o.resume && o.auto_prefix)
        code = tool_error(EXIT_USAGE, "load: --resume needs keys from the "
                          "documents (--key or --id-field): --auto keys "
                          "cannot tell which lines are stored");
    else if (o.resume && mode_given && o.mode != KVFTS_INSERT)
        code = tool_error(EXIT_USAGE, "load: --resume adds the lines whose "
                          "key is not stored; --mode must be add or absent");
    if (o.resume)
        o.mode = KVFTS_INSERT;
    if (code) {
        free(id_tmpl);
        return code;
    }
    o.file = argv[optind];
    FILE *in = strcmp(o.file, "-") == 0 ? stdin : fopen(o.file, "r");
    if (!in) {
        free(id_tmpl);
        return tool_error(EXIT_NOTFOUND, "load: %s: cannot open", o.file);
    }
    code = tool_check_regular(in, o.file);
    if (code) {
        if (in != stdin)
            fclose(in);
        free(id_tmpl);
        return code;
    }
    /* Reads of 1 MiB, not stdio's 4 KiB: 11,662 read(2)s for the catalog
     * took about 60 ms of a 1.1 s load.  A pipe's read still returns what is
     * there, so a slow producer is not waited for any longer. */
    static char inbuf[1u << 20];       /* glibc sizes no buffer of its own */
    (void)setvbuf(in, inbuf, _IOFBF, sizeof inbuf);
    uint64_t total = 0;
    struct stat st;
    if (in != stdin && fstat(fileno(in), &st) == 0 && S_ISREG(st.st_mode))
        total = (uint64_t)st.st_size;
    kvfts_db *db;
    code = tool_open(&db, &c, false, false);
    if (!code) {
        code = run_load(db, &o, in, total);
        kvfts_close(db);
    }
    if (in != stdin)
        fclose(in);
    free(id_tmpl);
    return code;
}

/* ---- debian-catalog ---------------------------------------------------- */

/* apt's catalog is RFC 822 stanzas.  The Packages records carry only the
 * one-line Description (Debian moved long descriptions to the
 * Translation-en lists); --translations FILE joins the full English text by
 * Description-md5, using POSIX hsearch(3) from libc as the index. */

enum { F_PACKAGE, F_SECTION, F_MAINTAINER, F_VERSION, F_DESCRIPTION,
       F_HOMEPAGE, F_DEPENDS, F_MD5, F_DESC_EN, NFIELDS };

static const char *const field_names[NFIELDS] = {
    "Package", "Section", "Maintainer", "Version", "Description",
    "Homepage", "Depends", "Description-md5", "Description-en"
};
/* What a catalog line prints, in order (lower-cased names). */
static const int emitted[] = { F_PACKAGE, F_SECTION, F_MAINTAINER, F_VERSION,
                               F_DESCRIPTION, F_HOMEPAGE, F_DEPENDS };

typedef struct stanza {
    char *val[NFIELDS];
    size_t len[NFIELDS], cap[NFIELDS];
    int cur;               /* field the continuation lines belong to */
} stanza;

static int stanza_append(stanza *s, int f, const char *p, size_t n)
{
    if (s->len[f] + n + 1 > s->cap[f]) {
        size_t cap = s->cap[f] ? s->cap[f] * 2 : 256;
        while (cap < s->len[f] + n + 1)
            cap *= 2;
        char *v = realloc(s->val[f], cap);
        if (!v)
            return -1;
        s->val[f] = v;
        s->cap[f] = cap;
    }
    memcpy(s->val[f] + s->len[f], p, n);
    s->len[f] += n;
    s->val[f][s->len[f]] = '\0';
    return 0;
}

static void stanza_reset(stanza *s)
{
    for (int f = 0; f < NFIELDS; f++)
        s->len[f] = 0;
    s->cur = -1;
}

static void stanza_free(stanza *s)
{
    for (int f = 0; f < NFIELDS; f++)
        free(s->val[f]);
}

/* Feed one line (without its newline) to s.  Returns 1 when a blank line
 * ends a stanza, -1 on out of memory, 0 otherwise. */
static int stanza_line(stanza *s, const char *line, size_t len)
{
    if (len == 0)
        return 1;
    if (line[0] == ' ' || line[0] == '\t') {
        /* Continuation: " ." is an empty line of a long description. */
        if (s->cur < 0)
            return 0;
        const char *p = line + 1;
        size_t pl = len - 1;
        if (pl == 1 && p[0] == '.')
            pl = 0;
        if (stanza_append(s, s->cur, "\n", 1))
            return -1;
        return stanza_append(s, s->cur, p, pl);
    }
    s->cur = -1;
    const char *colon = memchr(line, ':', len);
    if (!colon)
        return 0;
    size_t kl = (size_t)(colon - line);
    for (int f = 0; f < NFIELDS; f++) {
        if (strlen(field_names[f]) == kl &&
            strncmp(field_names[f], line, kl) == 0) {
            const char *v = colon + 1;
            while (*v == ' ')
                v++;
            s->cur = f;
            s->len[f] = 0;
            return stanza_append(s, f, v, len - (size_t)(v - line));
        }
    }
    return 0;
}

/* Read every stanza of in, calling each() at its end.  -1 on out of memory. */
static int read_stanzas(FILE *in, int (*each)(stanza *s, void *p), void *p)
{
    stanza s;
    memset(&s, 0, sizeof s);
    s.cur = -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int r = 0;
    while (r >= 0 && (n = getline(&line, &cap, in)) != -1) {
        size_t len = (size_t)n;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        r = stanza_line(&s, line, len);
        if (r == 1) {
            r = each(&s, p);
            stanza_reset(&s);
        }
    }
    if (r >= 0)
        r = each(&s, p);
    stanza_free(&s);
    free(line);
    return r < 0 ? -1 : 0;
}

/* Translation stanzas go into the hsearch table: md5 -> full text. */
static int add_translation(stanza *s, void *p)
{
    size_t *count = p;
    if (!s->len[F_MD5] || !s->len[F_DESC_EN])
        return 0;
    ENTRY e = { strdup(s->val[F_MD5]), strdup(s->val[F_DESC_EN]) };
    ENTRY *got = e.key && e.data ? hsearch(e, ENTER) : NULL;
    if (!got || got->key != e.key) {   /* failed, or a repeated md5 */
        free(e.key);
        free(e.data);
        return got ? 0 : -1;
    }
    (*count)++;
    return 0;
}

typedef struct emit_state {
    uint64_t count;
    bool joined;       /* translations were loaded */
    uint64_t long_desc;
} emit_state;

static int emit_package(stanza *s, void *p)
{
    emit_state *st = p;
    if (!s->len[F_PACKAGE])
        return 0;
    const char *desc = s->val[F_DESCRIPTION];
    size_t dlen = s->len[F_DESCRIPTION];
    if (st->joined && s->len[F_MD5]) {
        ENTRY q = { s->val[F_MD5], NULL };
        ENTRY *hit = hsearch(q, FIND);
        if (hit) {
            desc = hit->data;
            dlen = strlen(desc);
            st->long_desc++;
        }
    }
    fputc('{', stdout);
    for (size_t i = 0; i < sizeof emitted / sizeof *emitted; i++) {
        int f = emitted[i];
        const char *v = f == F_DESCRIPTION ? desc : s->val[f];
        size_t vl = f == F_DESCRIPTION ? dlen : s->len[f];
        if (!vl)
            continue;
        if (i)
            fputc(',', stdout);
        fputc('"', stdout);
        for (const char *k = field_names[f]; *k; k++)
            fputc(*k >= 'A' && *k <= 'Z' ? *k + 32 : *k, stdout);
        fputs("\":", stdout);
        tool_json_str(stdout, v, vl);
    }
    fputs("}\n", stdout);
    st->count++;
    return 0;
}

int cmd_debian_catalog(int argc, char **argv)
{
    static const struct option opts[] = {
        { "translations", required_argument, NULL, 't' },
        { NULL, 0, NULL, 0 }
    };
    const char *trans = NULL;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 't')
            trans = optarg;
        else
            return tool_bad_option("debian-catalog", argv);
    }
    if (argc - optind > 1)
        return tool_error(EXIT_USAGE, "debian-catalog: at most one FILE");
    const char *path = optind < argc ? argv[optind] : "-";
    emit_state st = { 0, false, 0 };
    if (trans) {
        FILE *t = fopen(trans, "r");
        if (!t)
            return tool_error(EXIT_NOTFOUND, "debian-catalog: %s: cannot "
                              "open", trans);
        int bad = tool_check_regular(t, trans);
        if (bad) {
            fclose(t);
            return bad;
        }
        size_t nt = 0;
        int r = hcreate(400000) ? read_stanzas(t, add_translation, &nt) : -1;
        fclose(t);
        if (r)
            return tool_error(EXIT_ERR, "debian-catalog: out of memory");
        st.joined = true;
        fprintf(stderr, "kvfts: debian-catalog: %zu translated descriptions "
                "from %s\n", nt, trans);
    }
    FILE *in = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!in)
        return tool_error(EXIT_NOTFOUND, "debian-catalog: %s: cannot open",
                          path);
    int bad = tool_check_regular(in, path);
    if (bad) {
        if (in != stdin)
            fclose(in);
        return bad;
    }
    int r = read_stanzas(in, emit_package, &st);
    if (in != stdin)
        fclose(in);
    /* The translation strings live until exit, as hsearch's table does. */
    if (r)
        return tool_error(EXIT_ERR, "debian-catalog: out of memory");
    if (st.count == 0)
        return tool_error(EXIT_NOTFOUND, "debian-catalog: no packages in %s "
                          "(on Debian, run 'apt-get update' first)", path);
    if (trans)
        fprintf(stderr, "kvfts: debian-catalog: %llu packages, %llu with a "
                "long description\n", (unsigned long long)st.count,
                (unsigned long long)st.long_desc);
    return EXIT_OK;
}
