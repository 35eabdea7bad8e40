/*
 * bench_report.c -- turning measurements into figures with targets, and
 * the figures into tables (stdout) and JSON.
 *
 * Figures and targets (issue 6).  Every figure is given for kvfts and for
 * each peer that ran, with kvfts's ratio to each (kvfts / FTS5, kvfts /
 * Xapian) and to the best peer: the faster (for load speeds, the one with
 * the higher figure) or the smaller of the two, figure by figure (issue
 * 15).  The targets are those of issue 6, on kvfts / FTS5:
 *   load docs/s, load MB/s    the ratio is the speed-up; target >= 2
 *   index size (data files)   target <= 1
 *   directory (du -sb)        the whole database directory after the
 *                             load's checkpoint against fts5.db; target
 *                             <= 1 (issue 14).  Beside it, no target: the
 *                             peak bytes of the regions outside the
 *                             directory (/dev/shm) during the load; and
 *                             the most freezer files seen: target 0
 *   peak load RSS             target: kvfts <= --mem + 64 MB (absolute)
 *   per class, top-10 and count: median <= 0.5, p99 <= 1
 *   match sets                identical to FTS5's for every query (100%);
 *                             Xapian's are compared and every difference
 *                             listed, but they are no target: Xapian
 *                             analyses text its own way (peer_xapian.cc)
 *   --readers                 no search of a reader fails, idle or during
 *                             the load (latencies are reported, no target)
 *   growth                    docs/s of the step to the largest size >=
 *                             0.8 x that of the step to 100,000 (or the
 *                             smallest size); peak RSS of every step's load
 *                             <= 400 MB; no freezer file at any step
 *   --incremental             the load over the loaded database at >= 0.5
 *                             of the first load's docs/s; no reader error
 *                             (the same load with every document changed
 *                             is reported beside it, no target of its own)
 * Missing a target is reported (MISS), not an error: the exit status says
 * whether the run completed.  The charts are in bench_chart.c.
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <yajl/yajl_gen.h>

#include "kvfts.h"
#include "peer_xapian.h"

/* ---- figures ------------------------------------------------------------ */

/* NAN unless finite. */
static double finite_or_nan(double v)
{
    return isfinite(v) ? v : NAN;
}

static bench_fig *fig_add(bench_result *r, const char *id, const char *label,
                          int unit, double kv, double fts, double xap)
{
    r->figs = bench_xrealloc(r->figs, (r->nfigs + 1) * sizeof *r->figs);
    bench_fig *f = &r->figs[r->nfigs++];
    memset(f, 0, sizeof *f);
    snprintf(f->id, sizeof f->id, "%s", id);
    snprintf(f->label, sizeof f->label, "%s", label);
    f->unit = unit;
    f->kv = kv;
    f->fts = r->vs ? fts : NAN;
    f->xap = r->xap_on ? xap : NAN;
    f->ratio = finite_or_nan(f->kv / f->fts);
    f->ratio_xap = finite_or_nan(f->kv / f->xap);
    /* The best peer: the higher speed, else the lower figure. */
    bool higher = unit == U_DOCS_S || unit == U_MB_S;
    bool fts_ok = !isnan(f->fts), xap_ok = !isnan(f->xap);
    bool pick_xap = xap_ok && (!fts_ok || (higher ? f->xap > f->fts
                                                  : f->xap < f->fts));
    f->best = pick_xap ? f->xap : f->fts;
    f->best_peer = pick_xap ? "xapian" : fts_ok ? "fts5" : NULL;
    f->ratio_best = finite_or_nan(f->kv / f->best);
    f->ok = -1;
    return f;
}

static void fig_target(bench_fig *f, int kind, double goal)
{
    f->target = kind;
    f->goal = goal;
    double v = kind == T_ABS_LE ? f->kv : f->ratio;
    if (isnan(v))
        f->ok = -1;
    else if (kind == T_RATIO_GE)
        f->ok = v >= goal;
    else
        f->ok = v <= goal;
}

static void load_figures(bench_result *r)
{
    const bench_corpus *c = &r->corpus;
    const bench_load *k = &r->kv, *f = &r->fts, *x = &r->xap;
    double docs = (double)c->docs, text = (double)c->text_bytes / 1e6;
    fig_target(fig_add(r, "load.docs_per_s", "load docs/s", U_DOCS_S,
                       bench_per(docs, k->secs), bench_per(docs, f->secs),
                       bench_per(docs, x->secs)),
               T_RATIO_GE, 2.0);
    fig_target(fig_add(r, "load.mb_per_s", "load MB/s (indexed text)",
                       U_MB_S, bench_per(text, k->secs),
                       bench_per(text, f->secs), bench_per(text, x->secs)),
               T_RATIO_GE, 2.0);
    fig_target(fig_add(r, "index.bytes", "index size (data files)", U_BYTES,
                       (double)k->data_bytes, (double)f->data_bytes,
                       (double)x->data_bytes),
               T_RATIO_LE, 1.0);
    fig_target(fig_add(r, "dir.bytes", "directory (du -sb)", U_BYTES,
                       (double)k->dir_bytes, (double)f->data_bytes,
                       (double)x->dir_bytes),
               T_RATIO_LE, 1.0);
    fig_add(r, "regions.outside_peak_bytes", "regions in /dev/shm (peak)",
            U_BYTES, k->regions_outside ? (double)k->outside_peak : NAN, NAN,
            NAN);
    fig_target(fig_add(r, "freezer.peak_files", "freezer files (peak)",
                       U_COUNT, (double)k->freezer_peak, NAN, NAN),
               T_ABS_LE, 0);
    fig_add(r, "index.size_per_input", "index size / input", U_X,
            bench_per((double)k->data_bytes, (double)c->bytes),
            bench_per((double)f->data_bytes, (double)c->bytes),
            bench_per((double)x->data_bytes, (double)c->bytes));
    fig_add(r, "index.bytes_per_posting", "index bytes / posting", U_COUNT,
            bench_per((double)k->data_bytes, (double)k->postings),
            bench_per((double)f->data_bytes, (double)f->postings),
            bench_per((double)x->data_bytes, (double)x->postings));
    fig_target(fig_add(r, "load.peak_rss_kb", "peak load RSS", U_KB,
                       (double)k->maxrss_kb, (double)f->maxrss_kb,
                       (double)x->maxrss_kb),
               T_ABS_LE, ((double)r->mem_mb + 64) * 1024);
}

void bench_figures(bench_result *r)
{
    free(r->figs);
    r->figs = NULL;
    r->nfigs = 0;
    load_figures(r);
    static const struct {
        const char *id, *label;
        int kv, fts, xap;
        bool p99;
    } kinds[] = {
        { "top10.median_ms", "top-10 median", M_KV_TOP, M_FTS_TOP, M_XAP_TOP,
          false },
        { "top10.p99_ms", "top-10 p99", M_KV_TOP, M_FTS_TOP, M_XAP_TOP,
          true },
        { "count.median_ms", "count median", M_KV_COUNT, M_FTS_COUNT,
          M_XAP_COUNT, false },
        { "count.p99_ms", "count p99", M_KV_COUNT, M_FTS_COUNT, M_XAP_COUNT,
          true },
    };
    for (int c = 0; c < NCLASS; c++)
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
            const bench_class_stats *s = &r->cls[c];
            const double *v = kinds[k].p99 ? s->p99 : s->med;
            char id[64], label[48];
            snprintf(id, sizeof id, "%s.%s", bench_class_names[c],
                     kinds[k].id);
            snprintf(label, sizeof label, "%s %s", bench_class_names[c],
                     kinds[k].label);
            bench_fig *f = fig_add(r, id, label, U_MS,
                                   s->nq ? v[kinds[k].kv] : NAN,
                                   s->nq ? v[kinds[k].fts] : NAN,
                                   s->nq ? v[kinds[k].xap] : NAN);
            fig_target(f, T_RATIO_LE, kinds[k].p99 ? 1.0 : 0.5);
        }
    r->agree_n = r->agree_equal = 0;
    r->agree_matches = 0;
    r->count_n = r->vs ? r->qs->n : 0;
    r->count_equal = 0;
    r->xagree_n = r->xagree_equal = 0;
    r->xagree_matches = 0;
    r->xcount_n = r->xap_on ? r->qs->n : 0;
    r->xcount_equal = 0;
    for (size_t i = 0; i < r->qs->n; i++) {
        const bench_query *q = &r->qs->q[i];
        r->count_equal += r->vs && q->kv_count == q->fts_count;
        r->xcount_equal += r->xap_on && q->kv_count == q->xap_count;
        if (q->xap_compared) {
            r->xagree_n++;
            r->xagree_equal += q->xap_equal;
            r->xagree_matches += q->kv_matches;
        }
        if (!q->compared)
            continue;
        r->agree_n++;
        r->agree_equal += q->equal;
        r->agree_matches += q->kv_matches;
    }
}

/* ---- the table ---------------------------------------------------------- */


static void fmt_value(char *out, size_t cap, double v, int unit)
{
    if (isnan(v)) {
        snprintf(out, cap, "-");
        return;
    }
    switch (unit) {
    case U_DOCS_S: bench_thousands(out, cap, v); break;
    case U_MB_S: snprintf(out, cap, "%.1f", v); break;
    case U_BYTES: snprintf(out, cap, "%.1f MB", v / 1e6); break;
    case U_KB: snprintf(out, cap, "%.1f MB", v / 1024); break;
    case U_MS:
        snprintf(out, cap, v < 1 ? "%.3f ms" : v < 10 ? "%.2f ms"
                 : "%.1f ms", v);
        break;
    case U_X: snprintf(out, cap, "%.2f", v); break;
    default:
        snprintf(out, cap, v == (double)(uint64_t)v ? "%.0f" : "%.1f", v);
        break;
    }
}

static void fmt_target(char *out, size_t cap, const bench_fig *f)
{
    switch (f->target) {
    case T_RATIO_GE: snprintf(out, cap, ">= %.2f", f->goal); break;
    case T_RATIO_LE: snprintf(out, cap, "<= %.2f", f->goal); break;
    case T_ABS_LE:
        if (f->unit == U_KB)
            snprintf(out, cap, "<= %.0f MB", f->goal / 1024);
        else
            snprintf(out, cap, "<= %.0f", f->goal);
        break;
    default: out[0] = '\0'; break;
    }
}

static void print_header(FILE *out, const bench_result *r)
{
    char docs[32];
    bench_thousands(docs, sizeof docs, (double)r->corpus.docs);
    fprintf(out, "kvfts bench: %s -- %s\n", r->spec->name, r->spec->title);
    fprintf(out, "corpus: %s docs, %.1f MB of JSON Lines, %.1f MB of indexed "
            "text; %zu queries, %d timed runs each, warm caches\n", docs,
            (double)r->corpus.bytes / 1e6, (double)r->corpus.text_bytes / 1e6,
            r->qs->n, r->runs);
    fprintf(out, "kvfts %s (load --mem %u, 64 MB cache)", KVFTS_VERSION_STRING,
            r->mem_mb);
    if (r->vs)
        fprintf(out, " vs SQLite %s FTS5 (unicode61 remove_diacritics 2, "
                "detail=full, 64 MB cache)", sqlite3_libversion());
    if (r->xap_on)
        fprintf(out, "%s Xapian %s (field prefixes + unprefixed terms, "
                "positions, no stemming; BM25 top-10, BoolWeight counts)",
                r->vs ? " and" : " vs", xap_version());
    fprintf(out, "; %ld CPUs\n\n", sysconf(_SC_NPROCESSORS_ONLN));
}

static void print_diffs(FILE *out, const bench_result *r, bool xap)
{
    for (size_t i = 0; i < r->qs->n; i++) {
        const bench_query *q = &r->qs->q[i];
        if (xap ? !q->xap_compared || q->xap_equal : !q->compared || q->equal)
            continue;
        const char *peer = xap ? "xapian" : "fts5";
        fprintf(out, "  DIFFERS %s:%u [%s] kvfts '%s' (%" PRIu64 ") / %s "
                "'%s' (%" PRIu64 "): first difference '%s', only in %s\n",
                r->qs->file, q->line, bench_class_names[q->cls], q->kv,
                q->kv_matches, peer, xap ? q->xap : q->fts,
                xap ? q->xap_matches : q->fts_matches,
                xap ? q->xap_diff_key : q->diff_key,
                (xap ? q->xap_diff_in_kv : q->diff_in_kv) ? "kvfts" : peer);
    }
}

/* "0.42", or "" for NAN. */
static void fmt_ratio(char *out, size_t cap, double v)
{
    if (isnan(v))
        out[0] = '\0';
    else
        snprintf(out, cap, "%.2f", v);
}

/* The columns: kvfts, then per peer its figure; then per peer kvfts's
 * ratio to it, and with both peers the ratio to the best of them (its
 * name beside: F for FTS5, X for Xapian); the target and the mark. */
static void print_row(FILE *out, const bench_result *r, const bench_fig *f)
{
    char kv[32], fts[32], xap[32], ratio[32], rxap[32], rbest[40],
         tgt[32] = "";
    fmt_value(kv, sizeof kv, f->kv, f->unit);
    fmt_value(fts, sizeof fts, f->fts, f->unit);
    fmt_value(xap, sizeof xap, f->xap, f->unit);
    fmt_ratio(ratio, sizeof ratio, f->ratio);
    fmt_ratio(rxap, sizeof rxap, f->ratio_xap);
    fmt_ratio(rbest, sizeof rbest, f->ratio_best);
    if (rbest[0] && f->best_peer)
        snprintf(rbest + strlen(rbest), sizeof rbest - strlen(rbest), " %c",
                 f->best_peer[0] == 'x' ? 'X' : 'F');
    if (r->vs || f->target == T_ABS_LE)
        fmt_target(tgt, sizeof tgt, f);
    const char *mark = f->ok == 1 ? "ok" : f->ok == 0 ? "MISS" : "";
    fprintf(out, "%-28s %12s", f->label, kv);
    if (r->vs)
        fprintf(out, " %12s", fts);
    if (r->xap_on)
        fprintf(out, " %12s", xap);
    if (r->vs)
        fprintf(out, " %11s", ratio);
    if (r->xap_on)
        fprintf(out, " %11s", rxap);
    if (r->vs && r->xap_on)
        fprintf(out, " %11s", rbest);
    fprintf(out, " %10s  %s\n", tgt, mark);
}

static void print_reader_row(FILE *out, const char *what,
                             const bench_reader_phase *f)
{
    char label[48], q[32], qps[32], med[32], p99[32], max[32];
    snprintf(label, sizeof label, "%s (%.1f s)", what, f->secs);
    bench_thousands(q, sizeof q, (double)f->queries);
    bench_thousands(qps, sizeof qps, f->qps);
    fmt_value(med, sizeof med, f->med, U_MS);
    fmt_value(p99, sizeof p99, f->p99, U_MS);
    fmt_value(max, sizeof max, f->max, U_MS);
    fprintf(out, "%-28s %10s %8s %10s %10s %10s %7" PRIu64 "\n", label, q,
            qps, med, p99, max, f->errors);
}

/* The --readers section; returns 1 when its target (no errors) is met. */
static int print_readers(FILE *out, const bench_result *r)
{
    const bench_readers *rd = &r->readers;
    const bench_reader_phase *i = &rd->idle, *l = &rd->load;
    fprintf(out, "\nreaders: %d processes, each running the %zu queries' "
            "top-10 searches in turn\n", rd->n, r->qs->n);
    fprintf(out, "%-28s %10s %8s %10s %10s %10s %7s\n", "phase", "searches",
            "per s", "median", "p99", "max", "errors");
    print_reader_row(out, "idle", i);
    print_reader_row(out, "during the load", l);
    fprintf(out, "%-28s %10s %8.2f %10.2f %10.2f %10.2f\n", "during / idle",
            "", l->qps / i->qps, l->med / i->med, l->p99 / i->p99,
            l->max / i->max);
    char batch[48] = "--mem";
    if (rd->batch)
        snprintf(batch, sizeof batch, "--batch %" PRIu64, rd->batch);
    fprintf(out, "the load (%s, into the loaded database, %u MB cache): "
            "%.1f s with the readers, %.1f s alone (%.2fx); the first load: "
            "%.1f s\n", batch, rd->cache_mb, rd->reload.secs, rd->alone.secs,
            rd->reload.secs / rd->alone.secs, rd->first.secs);
    bool ok = i->errors == 0 && l->errors == 0;
    fprintf(out, "reader errors: %" PRIu64 "  %s\n", i->errors + l->errors,
            ok ? "ok" : "MISS");
    if (!ok)
        fprintf(out, "  first: %s\n", i->first_error[0] ? i->first_error
                                                       : l->first_error);
    return ok;
}

static const char *const lat_names[NLAT] = { "put (new key)", "replace",
                                              "delete" };

/* The --incremental section; returns 1 when its targets are met. */
static int print_incr(FILE *out, const bench_result *r)
{
    const bench_incr *in = &r->incr;
    double fresh = bench_per((double)r->corpus.docs, r->kv.secs);
    double again = bench_per((double)r->corpus.docs, in->load.secs);
    double ratio = again / fresh;
    bool rate_ok = ratio >= 0.5, rd_ok = in->readers.errors == 0;
    char a[32], b[32];
    bench_thousands(a, sizeof a, again);
    bench_thousands(b, sizeof b, fresh);
    fprintf(out, "\nincremental: the corpus loaded again over itself (same "
            "keys: every document replaced), --batch %" PRIu64 ", default "
            "cache, %d readers searching\n", in->batch, in->n);
    fprintf(out, "%-28s %12s docs/s vs %s docs/s fresh (--mem %u) = %.2f  "
            ">= 0.50  %s\n", "load over itself", a, b, r->mem_mb, ratio,
            rate_ok ? "ok" : "MISS");
    fprintf(out, "%-28s %.1f s, peak RSS %.1f MB, freezer files (peak) %"
            PRIu64 ", directory after %.1f MB\n", "", in->load.secs,
            (double)in->load.maxrss_kb / 1024, in->load.freezer_peak,
            (double)in->load.dir_bytes / 1e6);
    /* The documents as stored are not analyzed again: the same load with
     * every document changed tells what a replace costs. */
    double changed = bench_per((double)r->corpus.docs, in->changed.secs);
    bench_thousands(a, sizeof a, changed);
    fprintf(out, "%-28s %12s docs/s vs %s docs/s fresh = %.2f  (each "
            "document's old and new version analyzed)\n",
            "again, every doc changed", a, b, changed / fresh);
    fprintf(out, "%-28s %.1f s, peak RSS %.1f MB, freezer files (peak) %"
            PRIu64 ", directory after %.1f MB\n", "", in->changed.secs,
            (double)in->changed.maxrss_kb / 1024, in->changed.freezer_peak,
            (double)in->changed.dir_bytes / 1e6);
    if (in->n) {
        bool ch_ok = in->changed_readers.errors == 0;
        fprintf(out, "%-28s %10s %8s %10s %10s %10s %7s\n", "readers",
                "searches", "per s", "median", "p99", "max", "errors");
        print_reader_row(out, "during the load", &in->readers);
        print_reader_row(out, "during the changed",
                         &in->changed_readers);
        fprintf(out, "reader errors: %" PRIu64 "  %s\n",
                in->readers.errors + in->changed_readers.errors,
                rd_ok && ch_ok ? "ok" : "MISS");
        if (!rd_ok)
            fprintf(out, "  first: %s\n", in->readers.first_error);
        if (!ch_ok)
            fprintf(out, "  first (changed): %s\n",
                    in->changed_readers.first_error);
        rd_ok = rd_ok && ch_ok;
    }
    fprintf(out, "single-document writes into the loaded database (ms, "
            "median / p99):\n%-28s %24s %24s\n", "", "`kvfts` process",
            "library call");
    for (int op = 0; op < NLAT; op++) {
        char cell[2][48];
        for (int w = 0; w < NLATWAY; w++) {
            const bench_latency *l = &in->lat[w][op];
            int k = snprintf(cell[w], sizeof cell[w], "%.2f / %.2f (n %"
                             PRIu64, l->med, l->p99, l->n);
            if (l->errors)
                k += snprintf(cell[w] + k, sizeof cell[w] - (size_t)k,
                              ", %" PRIu64 " failed", l->errors);
            snprintf(cell[w] + k, sizeof cell[w] - (size_t)k, ")");
        }
        fprintf(out, "%-28s %24s %24s\n", lat_names[op], cell[0], cell[1]);
    }
    return rate_ok + (in->n ? rd_ok : 0);
}

void bench_print_table(FILE *out, const bench_result *r)
{
    print_header(out, r);
    fprintf(out, "%-28s %12s", "figure", "kvfts");
    if (r->vs)
        fprintf(out, " %12s", "fts5");
    if (r->xap_on)
        fprintf(out, " %12s", "xapian");
    if (r->vs)
        fprintf(out, " %11s", "kvfts/fts5");
    if (r->xap_on)
        fprintf(out, " %11s", "kvfts/xap");
    if (r->vs && r->xap_on)
        fprintf(out, " %11s", "kvfts/best");
    fprintf(out, " %10s\n", "target");
    int met = 0, missed = 0;
    for (size_t i = 0; i < r->nfigs; i++) {
        print_row(out, r, &r->figs[i]);
        met += r->figs[i].ok == 1;
        missed += r->figs[i].ok == 0;
    }
    if (r->vs || r->xap_on)
        fprintf(out, "(kvfts/peer of docs/s and MB/s is the speed-up, higher "
                "is better; of the rest, lower is better%s)\n",
                r->vs && r->xap_on ? "; best = the better peer of each "
                "figure, F FTS5, X Xapian; targets are on kvfts/fts5" : "");
    if (r->vs) {
        double pct = r->agree_n ? 100.0 * (double)r->agree_equal /
                                  (double)r->agree_n : 0;
        char m[32];
        bench_thousands(m, sizeof m, (double)r->agree_matches);
        fprintf(out, "\nmatch sets: %zu of %zu queries identical (%.1f%%), "
                "%s matches  %s\n", r->agree_equal, r->agree_n, pct, m,
                r->agree_equal == r->agree_n ? "ok" : "MISS");
        print_diffs(out, r, false);
        met += r->agree_equal == r->agree_n;
        missed += r->agree_equal != r->agree_n;
    }
    if (r->xap_on) {
        /* No target: Xapian's analysis differs (README, "Benchmarks"). */
        double pct = r->xagree_n ? 100.0 * (double)r->xagree_equal /
                                   (double)r->xagree_n : 0;
        char m[32];
        bench_thousands(m, sizeof m, (double)r->xagree_matches);
        fprintf(out, "%smatch sets vs xapian: %zu of %zu queries identical "
                "(%.1f%%), %s matches of kvfts%s\n", r->vs ? "" : "\n",
                r->xagree_equal, r->xagree_n, pct, m,
                r->xagree_equal == r->xagree_n ? "" : " (no target: Xapian "
                "splits and folds text its own way)");
        print_diffs(out, r, true);
    }
    if (r->readers.done) {
        int ok = print_readers(out, r);
        met += ok;
        missed += !ok;
    }
    if (r->incr.done) {
        int ok = print_incr(out, r);
        met += ok;
        missed += 1 + (r->incr.n > 0) - ok;
    }
    fprintf(out, "\ntargets: %d met, %d missed\n", met, missed);
}

/* ---- JSON --------------------------------------------------------------- */

static void jkey(yajl_gen g, const char *k)
{
    yajl_gen_string(g, (const unsigned char *)k, strlen(k));
}

static void jstr(yajl_gen g, const char *k, const char *v)
{
    jkey(g, k);
    if (v)
        yajl_gen_string(g, (const unsigned char *)v, strlen(v));
    else
        yajl_gen_null(g);
}

static void jint(yajl_gen g, const char *k, uint64_t v)
{
    jkey(g, k);
    yajl_gen_integer(g, (long long)v);
}

static void jnum(yajl_gen g, const char *k, double v)
{
    jkey(g, k);
    if (!isfinite(v)) {
        yajl_gen_null(g);
        return;
    }
    char buf[40];
    int n = snprintf(buf, sizeof buf, "%.6g", v);
    yajl_gen_number(g, buf, (size_t)n);
}

static void jbool(yajl_gen g, const char *k, bool v)
{
    jkey(g, k);
    yajl_gen_bool(g, v);
}

static void cpu_model(char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(out, cap, "%s", colon + 2);
            out[strcspn(out, "\n")] = '\0';
            break;
        }
    }
    if (f)
        fclose(f);
}

static void json_machine(yajl_gen g)
{
    char cpu[256], date[32];
    struct utsname u;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cpu_model(cpu, sizeof cpu);
    jkey(g, "machine");
    yajl_gen_map_open(g);
    jstr(g, "date", date);
    jint(g, "nproc", (uint64_t)sysconf(_SC_NPROCESSORS_ONLN));
    jstr(g, "cpu", cpu);
    jint(g, "mem_bytes", (uint64_t)sysconf(_SC_PHYS_PAGES) *
                         (uint64_t)sysconf(_SC_PAGESIZE));
    if (uname(&u) == 0) {
        jstr(g, "kernel", u.release);
        jstr(g, "arch", u.machine);
    }
    yajl_gen_map_close(g);
    jkey(g, "versions");
    yajl_gen_map_open(g);
    jstr(g, "kvfts", KVFTS_VERSION_STRING);
    jstr(g, "sqlite", sqlite3_libversion());
    jstr(g, "xapian", xap_available() ? xap_version() : NULL);
    yajl_gen_map_close(g);
}

static void json_load(yajl_gen g, const char *name, const bench_load *l)
{
    jkey(g, name);
    yajl_gen_map_open(g);
    jnum(g, "seconds", l->secs);
    jnum(g, "user_seconds", l->user_s);
    jnum(g, "system_seconds", l->sys_s);
    jint(g, "peak_rss_kb", l->maxrss_kb);
    jint(g, "data_bytes", l->data_bytes);
    jint(g, "log_bytes", l->log_bytes);
    jint(g, "region_bytes", l->region_bytes);
    jint(g, "dir_bytes", l->dir_bytes);
    jbool(g, "regions_outside_dir", l->regions_outside);
    jint(g, "regions_outside_peak_bytes", l->outside_peak);
    jint(g, "freezer_files_peak", l->freezer_peak);
    jint(g, "freezer_files_after", l->freezer_after);
    jint(g, "documents", l->docs);
    jint(g, "terms", l->terms);
    jint(g, "postings", l->postings);
    yajl_gen_map_close(g);
}

static void json_corpus(yajl_gen g, const bench_result *r)
{
    jkey(g, "corpus");
    yajl_gen_map_open(g);
    jstr(g, "name", r->spec->name);
    jstr(g, "title", r->spec->title);
    jstr(g, "file", r->corpus.path);
    jint(g, "docs", r->corpus.docs);
    jint(g, "bytes", r->corpus.bytes);
    jint(g, "text_bytes", r->corpus.text_bytes);
    jstr(g, "key", r->spec->key.text);
    jstr(g, "queries", r->qs->file);
    yajl_gen_map_close(g);
}

static void json_figures(yajl_gen g, const bench_result *r)
{
    static const char *const kinds[] = { NULL, "ratio >=", "ratio <=",
                                         "kvfts <=" };
    jkey(g, "figures");
    yajl_gen_array_open(g);
    for (size_t i = 0; i < r->nfigs; i++) {
        const bench_fig *f = &r->figs[i];
        yajl_gen_map_open(g);
        jstr(g, "id", f->id);
        jstr(g, "label", f->label);
        jnum(g, "kvfts", f->kv);
        jnum(g, "fts5", f->fts);
        jnum(g, "ratio", f->ratio);
        jnum(g, "xapian", f->xap);
        jnum(g, "ratio_xapian", f->ratio_xap);
        jstr(g, "best_peer", f->best_peer);
        jnum(g, "ratio_best", f->ratio_best);
        jstr(g, "target", kinds[f->target]);
        jnum(g, "goal", f->target ? f->goal : NAN);
        jkey(g, "ok");
        if (f->ok < 0)
            yajl_gen_null(g);
        else
            yajl_gen_bool(g, f->ok);
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
}

static void json_classes(yajl_gen g, const bench_result *r)
{
    static const char *const keys[NMODE] = {
        "kvfts_top10", "fts5_top10", "kvfts_count", "fts5_count",
        "xapian_top10", "xapian_count"
    };
    jkey(g, "classes");
    yajl_gen_map_open(g);
    for (int c = 0; c < NCLASS; c++) {
        jkey(g, bench_class_names[c]);
        yajl_gen_map_open(g);
        jint(g, "queries", r->cls[c].nq);
        for (int m = 0; m < NMODE; m++) {
            char k[48];
            snprintf(k, sizeof k, "%s_median_ms", keys[m]);
            jnum(g, k, r->cls[c].med[m]);
            snprintf(k, sizeof k, "%s_p99_ms", keys[m]);
            jnum(g, k, r->cls[c].p99[m]);
        }
        yajl_gen_map_close(g);
    }
    yajl_gen_map_close(g);
}

static void json_query(yajl_gen g, const bench_query *q, bool vs, bool xap)
{
    yajl_gen_map_open(g);
    jint(g, "line", q->line);
    jstr(g, "class", bench_class_names[q->cls]);
    jstr(g, "kvfts", q->kv);
    jstr(g, "fts5", q->fts);
    jint(g, "kvfts_count", q->kv_count);
    if (vs) {
        jint(g, "fts5_count", q->fts_count);
        jbool(g, "counts_equal", q->kv_count == q->fts_count);
    }
    if (xap) {
        jstr(g, "xapian", q->xap);
        jint(g, "xapian_count", q->xap_count);
        jbool(g, "xapian_counts_equal", q->kv_count == q->xap_count);
    }
    if (q->compared) {
        jint(g, "kvfts_matches", q->kv_matches);
        jint(g, "fts5_matches", q->fts_matches);
        jbool(g, "equal", q->equal);
        if (!q->equal) {
            jkey(g, "first_difference");
            yajl_gen_map_open(g);
            jstr(g, "key", q->diff_key);
            jstr(g, "only_in", q->diff_in_kv ? "kvfts" : "fts5");
            yajl_gen_map_close(g);
        }
    }
    if (q->xap_compared) {
        if (!q->compared)
            jint(g, "kvfts_matches", q->kv_matches);
        jint(g, "xapian_matches", q->xap_matches);
        jbool(g, "xapian_equal", q->xap_equal);
        if (!q->xap_equal) {
            jkey(g, "xapian_first_difference");
            yajl_gen_map_open(g);
            jstr(g, "key", q->xap_diff_key);
            jstr(g, "only_in", q->xap_diff_in_kv ? "kvfts" : "xapian");
            yajl_gen_map_close(g);
        }
    }
    jnum(g, "kvfts_top10_median_ms", q->med[M_KV_TOP]);
    jnum(g, "kvfts_count_median_ms", q->med[M_KV_COUNT]);
    if (vs) {
        jnum(g, "fts5_top10_median_ms", q->med[M_FTS_TOP]);
        jnum(g, "fts5_count_median_ms", q->med[M_FTS_COUNT]);
    }
    if (xap) {
        jnum(g, "xapian_top10_median_ms", q->med[M_XAP_TOP]);
        jnum(g, "xapian_count_median_ms", q->med[M_XAP_COUNT]);
    }
    yajl_gen_map_close(g);
}

/* "agreement" (with FTS5) or "xapian_agreement". */
static void json_agreement(yajl_gen g, const char *name, size_t n,
                           size_t equal, uint64_t matches)
{
    jkey(g, name);
    yajl_gen_map_open(g);
    jint(g, "queries", n);
    jint(g, "equal", equal);
    jnum(g, "percent", n ? 100.0 * (double)equal / (double)n : NAN);
    jint(g, "matches", matches);
    jbool(g, "ok", n > 0 && equal == n);
    yajl_gen_map_close(g);
}

static void json_reader_phase(yajl_gen g, const char *name,
                              const bench_reader_phase *f)
{
    jkey(g, name);
    yajl_gen_map_open(g);
    jnum(g, "seconds", f->secs);
    jint(g, "searches", f->queries);
    jnum(g, "searches_per_s", f->qps);
    jnum(g, "median_ms", f->med);
    jnum(g, "p99_ms", f->p99);
    jnum(g, "max_ms", f->max);
    jint(g, "errors", f->errors);
    jstr(g, "first_error", f->first_error[0] ? f->first_error : NULL);
    yajl_gen_map_close(g);
}

static void json_readers(yajl_gen g, const bench_readers *rd)
{
    const bench_reader_phase *i = &rd->idle, *l = &rd->load;
    jkey(g, "readers");
    yajl_gen_map_open(g);
    jint(g, "processes", (uint64_t)rd->n);
    jstr(g, "search", "top-10, documents read; the query set in turn");
    json_reader_phase(g, "idle", i);
    json_reader_phase(g, "during_load", l);
    jkey(g, "during_over_idle");
    yajl_gen_map_open(g);
    jnum(g, "searches_per_s", l->qps / i->qps);
    jnum(g, "median", l->med / i->med);
    jnum(g, "p99", l->p99 / i->p99);
    jnum(g, "max", l->max / i->max);
    yajl_gen_map_close(g);
    jkey(g, "load");
    yajl_gen_map_open(g);
    jint(g, "batch", rd->batch);
    jint(g, "cache_mb", rd->cache_mb);
    jstr(g, "key_alone", rd->key_alone);
    jstr(g, "key_with_readers", rd->key_reload);
    jnum(g, "seconds_with_readers", rd->reload.secs);
    jnum(g, "seconds_alone", rd->alone.secs);
    jnum(g, "with_over_alone", rd->reload.secs / rd->alone.secs);
    jnum(g, "first_load_seconds", rd->first.secs);
    jint(g, "documents", rd->reload.docs);
    yajl_gen_map_close(g);
    jbool(g, "ok", i->errors == 0 && l->errors == 0);
    yajl_gen_map_close(g);
}

static void json_incr(yajl_gen g, const bench_result *r)
{
    static const char *const ops[NLAT] = { "put", "replace", "delete" };
    static const char *const ways[NLATWAY] = { "process", "api" };
    const bench_incr *in = &r->incr;
    double fresh = bench_per((double)r->corpus.docs, r->kv.secs);
    double again = bench_per((double)r->corpus.docs, in->load.secs);
    jkey(g, "incremental");
    yajl_gen_map_open(g);
    jint(g, "batch", in->batch);
    jstr(g, "cache", "default (as made by kvfts init)");
    jstr(g, "keys", "the spec's own: every document replaced");
    json_load(g, "load", &in->load);
    jnum(g, "docs_per_s", again);
    jnum(g, "fresh_docs_per_s", fresh);
    jnum(g, "ratio", again / fresh);
    jnum(g, "goal", 0.5);
    jbool(g, "ok", again / fresh >= 0.5);
    jint(g, "readers", (uint64_t)in->n);
    if (in->n) {
        json_reader_phase(g, "during_load", &in->readers);
        jbool(g, "readers_ok", in->readers.errors == 0);
    }
    double changed = bench_per((double)r->corpus.docs, in->changed.secs);
    jkey(g, "changed");
    yajl_gen_map_open(g);
    jstr(g, "what", "the corpus again with a first member \"_rev\":1 added "
         "to every document: each old and new version analyzed (the load "
         "above stores unchanged documents without analysis)");
    json_load(g, "load", &in->changed);
    jnum(g, "docs_per_s", changed);
    jnum(g, "ratio", changed / fresh);
    if (in->n) {
        json_reader_phase(g, "during_load", &in->changed_readers);
        jbool(g, "readers_ok", in->changed_readers.errors == 0);
    }
    yajl_gen_map_close(g);
    jkey(g, "single_writes_ms");
    yajl_gen_map_open(g);
    jstr(g, "process", "kvfts -d DIR put|replace|del, one process each");
    jstr(g, "api", "kvfts_put / kvfts_replace / kvfts_del on one handle");
    for (int w = 0; w < NLATWAY; w++)
        for (int op = 0; op < NLAT; op++) {
            char k[48];
            const bench_latency *l = &in->lat[w][op];
            snprintf(k, sizeof k, "%s_%s", ways[w], ops[op]);
            jkey(g, k);
            yajl_gen_map_open(g);
            jint(g, "n", l->n);
            jint(g, "errors", l->errors);
            jnum(g, "median_ms", l->med);
            jnum(g, "p99_ms", l->p99);
            yajl_gen_map_close(g);
        }
    yajl_gen_map_close(g);
    yajl_gen_map_close(g);
}

/* The body shared by a corpus run and each size of a growth run. */
static void json_result(yajl_gen g, const bench_result *r, bool queries)
{
    json_corpus(g, r);
    jkey(g, "load");
    yajl_gen_map_open(g);
    json_load(g, "kvfts", &r->kv);
    if (r->vs)
        json_load(g, "fts5", &r->fts);
    if (r->xap_on)
        json_load(g, "xapian", &r->xap);
    yajl_gen_map_close(g);
    json_figures(g, r);
    json_classes(g, r);
    if (r->vs) {
        jint(g, "counts_compared", r->count_n);
        jint(g, "counts_equal", r->count_equal);
    }
    if (r->xap_on) {
        jint(g, "xapian_counts_compared", r->xcount_n);
        jint(g, "xapian_counts_equal", r->xcount_equal);
    }
    if (r->vs && queries)
        json_agreement(g, "agreement", r->agree_n, r->agree_equal,
                       r->agree_matches);
    if (r->xap_on && queries)
        json_agreement(g, "xapian_agreement", r->xagree_n, r->xagree_equal,
                       r->xagree_matches);
    if (r->readers.done)
        json_readers(g, &r->readers);
    if (r->incr.done)
        json_incr(g, r);
    if (!queries)
        return;
    jkey(g, "queries");
    yajl_gen_array_open(g);
    for (size_t i = 0; i < r->qs->n; i++)
        json_query(g, &r->qs->q[i], r->vs, r->xap_on);
    yajl_gen_array_close(g);
}

static yajl_gen json_begin(bool vs, bool xap, int runs, unsigned mem_mb)
{
    yajl_gen g = yajl_gen_alloc(NULL);
    yajl_gen_config(g, yajl_gen_beautify, 1);
    yajl_gen_config(g, yajl_gen_indent_string, "  ");
    yajl_gen_map_open(g);
    jstr(g, "benchmark", "kvfts-bench");
    jint(g, "format", 1);
    json_machine(g);
    jkey(g, "settings");
    yajl_gen_map_open(g);
    jstr(g, "peer", vs ? "fts5" : NULL);     /* format 1: the one peer */
    jkey(g, "peers");
    yajl_gen_array_open(g);
    if (vs)
        yajl_gen_string(g, (const unsigned char *)"fts5", 4);
    if (xap)
        yajl_gen_string(g, (const unsigned char *)"xapian", 6);
    yajl_gen_array_close(g);
    jint(g, "runs", (uint64_t)runs);
    jint(g, "mem_mb", mem_mb);
    jint(g, "cache_mb", 64);
    jstr(g, "sizes_compared", "data files: kvfts without log.* and __db.* "
         "(after the load's checkpoint); FTS5 fts5.db; Xapian every file of "
         "its directory; dir_bytes: the whole directory as du -sb counts it "
         "(kvfts and Xapian; FTS5 its file); regions outside it (in "
         "/dev/shm) sampled during the load, apart");
    jstr(g, "postings", "kvfts: (field, term, document), _all included; "
         "FTS5: (column, term, document) from fts5vocab; Xapian: (term, "
         "document), prefixed and unprefixed terms, not Q<key>");
    jstr(g, "best_peer", "per figure, the faster peer (for docs/s and MB/s "
         "the higher figure) or the smaller; ratio_best = kvfts / it");
    yajl_gen_map_close(g);
    return g;
}

static int json_end(yajl_gen g, const char *path)
{
    yajl_gen_map_close(g);
    const unsigned char *buf;
    size_t len;
    yajl_gen_get_buf(g, &buf, &len);
    FILE *f = fopen(path, "w");
    int code = 0;
    if (!f || fwrite(buf, 1, len, f) != len || fputc('\n', f) == EOF)
        code = bench_fail(BENCH_ERR, "%s: %s", path, strerror(errno));
    if (f && fclose(f) != 0 && !code)
        code = bench_fail(BENCH_ERR, "%s: %s", path, strerror(errno));
    yajl_gen_free(g);
    return code;
}

int bench_write_json(const char *path, const bench_result *r)
{
    yajl_gen g = json_begin(r->vs, r->xap_on, r->runs, r->mem_mb);
    json_result(g, r, true);
    int met = 0, missed = 0;
    for (size_t i = 0; i < r->nfigs; i++) {
        met += r->figs[i].ok == 1;
        missed += r->figs[i].ok == 0;
    }
    if (r->vs) {                      /* identical match sets, as the table */
        met += r->agree_equal == r->agree_n;
        missed += r->agree_equal != r->agree_n;
    }
    if (r->readers.done) {
        bool ok = r->readers.idle.errors == 0 && r->readers.load.errors == 0;
        met += ok;
        missed += !ok;
    }
    if (r->incr.done) {
        bool ok = bench_per((double)r->corpus.docs, r->incr.load.secs) /
                  bench_per((double)r->corpus.docs, r->kv.secs) >= 0.5;
        met += ok;
        missed += !ok;
        if (r->incr.n) {
            met += r->incr.readers.errors == 0;
            missed += r->incr.readers.errors != 0;
        }
    }
    jkey(g, "targets");
    yajl_gen_map_open(g);
    jint(g, "met", (uint64_t)met);
    jint(g, "missed", (uint64_t)missed);
    yajl_gen_map_close(g);
    return json_end(g, path);
}

/* ---- growth ------------------------------------------------------------- */

static double docs_per_s(const bench_result *r)
{
    return bench_per((double)r->corpus.docs, r->kv.secs);
}

#define GROWTH_RSS_KB (400.0 * 1024)

/* The target compares 5,000,000 documents with 100,000: the rate
 * of the step to the largest size against that of the step to 100,000
 * when that is a smaller size of the run, else to the smallest. */
void bench_growth_finish(bench_growth *g)
{
    g->scale = NAN;
    g->scale_ok = -1;
    g->rss_ok = g->freezer_ok = g->n ? 1 : -1;
    size_t base = g->n, top = 0, small = 0;
    for (size_t i = 0; i < g->n; i++) {
        uint64_t d = g->r[i].at_docs;
        if (d == 100000)
            base = i;
        if (d > g->r[top].at_docs)
            top = i;
        if (d < g->r[small].at_docs)
            small = i;
        if ((double)g->r[i].kv.maxrss_kb > GROWTH_RSS_KB)
            g->rss_ok = 0;
        if (g->r[i].kv.freezer_peak || g->r[i].kv.freezer_after)
            g->freezer_ok = 0;
    }
    if (base == g->n || base == top)
        base = small;
    if (g->n < 2 || base == top)
        return;
    g->scale_from = g->r[base].at_docs;
    g->scale_to = g->r[top].at_docs;
    g->scale = docs_per_s(&g->r[top]) / docs_per_s(&g->r[base]);
    g->scale_ok = g->scale >= 0.8;
}

static void print_growth_load(FILE *out, const bench_growth *g)
{
    fprintf(out, "%10s %10s %9s %9s %9s %7s %8s %7s %10s %9s %6s %10s\n",
            "docs", "kvfts d/s", "CPU d/s", g->vs ? "fts5 d/s" : "",
            g->vs ? "speed-up" : "", "RSS MB", "freezer", "B/p", "kvfts dir",
            "/dev/shm", g->vs ? "B/p" : "", g->vs ? "fts5 file" : "");
    for (size_t i = 0; i < g->n; i++) {
        const bench_result *r = &g->r[i];
        char d[32], kd[32], kc[32], fd[32] = "", ks[32], fs[32] = "",
             su[32] = "", fb[32] = "", sh[32] = "-";
        bench_thousands(d, sizeof d, (double)r->at_docs);
        bench_thousands(kd, sizeof kd, docs_per_s(r));
        bench_thousands(kc, sizeof kc, bench_per((double)r->corpus.docs,
                                                 r->kv.user_s + r->kv.sys_s));
        fmt_value(ks, sizeof ks, (double)r->kv.dir_bytes, U_BYTES);
        if (r->kv.regions_outside)
            fmt_value(sh, sizeof sh, (double)r->kv.outside_peak, U_BYTES);
        if (g->vs) {
            double fdps = bench_per((double)r->corpus.docs, r->fts.secs);
            bench_thousands(fd, sizeof fd, fdps);
            snprintf(su, sizeof su, "%.2f", docs_per_s(r) / fdps);
            fmt_value(fs, sizeof fs, (double)r->fts.data_bytes, U_BYTES);
            snprintf(fb, sizeof fb, "%.1f",
                     bench_per((double)r->fts.data_bytes,
                               (double)r->fts.postings));
        }
        fprintf(out, "%10s %10s %9s %9s %9s %7.0f %8" PRIu64 " %7.1f %10s "
                "%9s %6s %10s\n", d, kd, kc, fd, su,
                (double)r->kv.maxrss_kb / 1024,
                r->kv.freezer_peak > r->kv.freezer_after
                    ? r->kv.freezer_peak : r->kv.freezer_after,
                bench_per((double)r->kv.data_bytes, (double)r->kv.postings),
                ks, sh, fb, fs);
    }
    fprintf(out, "(d/s: docs/s of the step up to that size; CPU d/s: its "
            "documents per CPU second of the loading process (user + "
            "system), which other work on the machine moves less; RSS: peak of "
            "that step's load; freezer: most __db.freezer.* files seen; "
            "B/p: data bytes per posting; kvfts dir: du -sb after the "
            "step; /dev/shm: peak of the regions outside it)\n");
    if (g->xap_on) {
        fprintf(out, "%10s %13s %10s %11s\n", "docs", "xapian d/s",
                "xapian B/p", "xapian size");
        for (size_t i = 0; i < g->n; i++) {
            const bench_result *r = &g->r[i];
            char d[32], xd[32], xs[32];
            bench_thousands(d, sizeof d, (double)r->at_docs);
            bench_thousands(xd, sizeof xd, bench_per((double)r->corpus.docs,
                                                     r->xap.secs));
            fmt_value(xs, sizeof xs, (double)r->xap.data_bytes, U_BYTES);
            fprintf(out, "%10s %13s %10.1f %11s\n", d, xd,
                    bench_per((double)r->xap.data_bytes,
                              (double)r->xap.postings), xs);
        }
    }
    if (!isnan(g->scale)) {
        char a[32], b[32];
        bench_thousands(a, sizeof a, (double)g->scale_to);
        bench_thousands(b, sizeof b, (double)g->scale_from);
        fprintf(out, "target: kvfts docs/s at %s / at %s = %.2f  >= 0.80  "
                "%s\n", a, b, g->scale, g->scale_ok ? "ok" : "MISS");
    }
    if (g->rss_ok >= 0) {
        fprintf(out, "target: peak load RSS <= 400 MB at every size  %s\n",
                g->rss_ok ? "ok" : "MISS");
        fprintf(out, "target: no freezer file at any size  %s\n",
                g->freezer_ok ? "ok" : "MISS");
    }
}

static void print_growth_latency(FILE *out, const bench_growth *g)
{
    const char *what = g->vs && g->xap_on ? " (kvfts / fts5 / xapian)"
                     : g->vs ? " (kvfts / fts5)"
                     : g->xap_on ? " (kvfts / xapian)" : " (kvfts)";
    int w = g->vs && g->xap_on ? 25 : 17;
    fprintf(out, "\nmedian latency, ms%s\n%-12s %-7s", what, "class", "");
    for (size_t i = 0; i < g->n; i++) {
        char d[32];
        bench_thousands(d, sizeof d, (double)g->r[i].at_docs);
        fprintf(out, " %*s", w, d);
    }
    fputc('\n', out);
    for (int c = 0; c < NCLASS; c++)
        for (int k = 0; k < 2; k++) {
            int mk = k ? M_KV_COUNT : M_KV_TOP, mf = k ? M_FTS_COUNT
                                                       : M_FTS_TOP;
            int mx = k ? M_XAP_COUNT : M_XAP_TOP;
            fprintf(out, "%-12s %-7s", bench_class_names[c],
                    k ? "count" : "top-10");
            for (size_t i = 0; i < g->n; i++) {
                const bench_class_stats *s = &g->r[i].cls[c];
                char cell[64];
                int n = snprintf(cell, sizeof cell, "%.3f", s->med[mk]);
                if (g->vs)
                    n += snprintf(cell + n, sizeof cell - (size_t)n,
                                  " / %.3f", s->med[mf]);
                if (g->xap_on)
                    snprintf(cell + n, sizeof cell - (size_t)n, " / %.3f",
                             s->med[mx]);
                fprintf(out, " %*s", w, s->nq ? cell : "-");
            }
            fputc('\n', out);
        }
}

void bench_print_growth(FILE *out, const bench_growth *g)
{
    fprintf(out, "kvfts bench --growth: %s -- %s\n", g->spec->name,
            g->spec->title);
    if (g->cycled)
        fprintf(out, "cycled: its %" PRIu64 " documents again and again, "
                "each cycle under keys c<cycle>::<key>\n", g->base_docs);
    if (g->n)
        fprintf(out, "%zu queries, %d timed runs each, warm caches; kvfts %s "
                "(load --mem %u)%s%s%s%s; B/p = data bytes per posting\n\n",
                g->r[0].qs->n, g->r[0].runs, KVFTS_VERSION_STRING,
                g->r[0].mem_mb, g->vs ? " vs SQLite FTS5 " : "",
                g->vs ? sqlite3_libversion() : "",
                !g->xap_on ? "" : g->vs ? " and Xapian " : " vs Xapian ",
                g->xap_on ? xap_version() : "");
    print_growth_load(out, g);
    print_growth_latency(out, g);
    size_t equal = 0, total = 0, xequal = 0, xtotal = 0;
    for (size_t i = 0; i < g->n; i++) {
        total += g->r[i].count_n;
        equal += g->r[i].count_equal;
        xtotal += g->r[i].xcount_n;
        xequal += g->r[i].xcount_equal;
    }
    if (g->vs)
        fprintf(out, "\nmatch counts: %zu of %zu (query, size) pairs equal  "
                "%s\n", equal, total, equal == total ? "ok" : "MISS");
    if (g->xap_on)
        fprintf(out, "%smatch counts vs xapian: %zu of %zu (query, size) "
                "pairs equal\n", g->vs ? "" : "\n", xequal, xtotal);
}

int bench_write_growth_json(const char *path, const bench_growth *g)
{
    const bench_result *r0 = &g->r[0];
    yajl_gen y = json_begin(g->vs, g->xap_on, r0->runs, r0->mem_mb);
    jbool(y, "cycled", g->cycled);
    if (g->cycled)
        jint(y, "cycle_docs", g->base_docs);
    jkey(y, "growth");
    yajl_gen_array_open(y);
    for (size_t i = 0; i < g->n; i++) {
        yajl_gen_map_open(y);
        jint(y, "docs", g->r[i].at_docs);
        jint(y, "step_docs", g->r[i].corpus.docs);
        jnum(y, "step_docs_per_s", docs_per_s(&g->r[i]));
        jnum(y, "step_docs_per_cpu_s",
             bench_per((double)g->r[i].corpus.docs,
                       g->r[i].kv.user_s + g->r[i].kv.sys_s));
        json_result(y, &g->r[i], false);
        yajl_gen_map_close(y);
    }
    yajl_gen_array_close(y);
    jkey(y, "scale");
    yajl_gen_map_open(y);
    jint(y, "from_docs", g->scale_from);
    jint(y, "to_docs", g->scale_to);
    jnum(y, "docs_per_s_ratio", g->scale);
    jnum(y, "goal", 0.8);
    jkey(y, "ok");
    if (g->scale_ok < 0)
        yajl_gen_null(y);
    else
        yajl_gen_bool(y, g->scale_ok);
    yajl_gen_map_close(y);
    jkey(y, "rss");
    yajl_gen_map_open(y);
    uint64_t peak = 0;
    for (size_t i = 0; i < g->n; i++)
        peak = g->r[i].kv.maxrss_kb > peak ? g->r[i].kv.maxrss_kb : peak;
    jint(y, "peak_kb", peak);
    jint(y, "goal_kb", (uint64_t)GROWTH_RSS_KB);
    jkey(y, "ok");
    if (g->rss_ok < 0)
        yajl_gen_null(y);
    else
        yajl_gen_bool(y, g->rss_ok);
    yajl_gen_map_close(y);
    jkey(y, "freezer");
    yajl_gen_map_open(y);
    jkey(y, "ok");
    if (g->freezer_ok < 0)
        yajl_gen_null(y);
    else
        yajl_gen_bool(y, g->freezer_ok);
    yajl_gen_map_close(y);
    return json_end(y, path);
}

