/*
 * bench_chart.c -- the SVG charts of kvfts-bench, drawn by gnuplot.
 *
 * A gnuplot script with its data inline (datablocks) is piped to
 * $KVFTS_GNUPLOT or the gnuplot in PATH (Debian: gnuplot-nox); without
 * gnuplot, or when it fails, the chart is skipped with a warning (the
 * figures are in the table and the JSON).
 *
 * The corpus chart: one horizontal bar per figure of the kvfts/FTS5 cost
 * ratio on a log scale around 1 (load throughput shown as a time, so lower
 * is better everywhere), green when its target is met, red when missed,
 * grey without a target, with each target marked (the RSS bound on kvfts
 * is drawn as the ratio it allows), and, when Xapian ran, the kvfts/Xapian
 * ratio of the same figure as a blue diamond on the bar.  The growth chart
 * plots, against the documents in the database on a log scale, the load
 * speed of each step (docs/s of the documents added since the previous
 * size), the peak RSS of each step's load with the 400 MB bound, and the
 * per-class latency (kvfts/FTS5, or kvfts alone).
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvfts.h"
#include "peer_xapian.h"

/* ---- gnuplot ------------------------------------------------------------ */

/* gnuplot's path: $KVFTS_GNUPLOT, else the first in PATH; NULL if none. */
static char *find_gnuplot(void)
{
    const char *env = getenv("KVFTS_GNUPLOT");
    if (env && *env)
        return access(env, X_OK) == 0 ? bench_strdup(env) : NULL;
    const char *path = getenv("PATH");
    char *dirs = bench_strdup(path && *path ? path : "/usr/bin:/bin");
    char *found = NULL, *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d && !found;
         d = strtok_r(NULL, ":", &save)) {
        char *p = bench_path(*d ? d : ".", "gnuplot");
        if (access(p, X_OK) == 0)
            found = p;
        else
            free(p);
    }
    free(dirs);
    return found;
}

/* Pipe @p script to gnuplot.  Missing gnuplot or a failed plot: a
 * warning (the figures are in the table and the JSON). */
static int run_gnuplot(const char *script, size_t len, const char *svg)
{
    char *bin = find_gnuplot();
    if (!bin) {
        bench_warn("gnuplot not found (install gnuplot-nox): no chart %s",
                   svg);
        return 0;
    }
    int fds[2];
    if (pipe(fds) != 0) {
        free(bin);
        return bench_fail(BENCH_ERR, "gnuplot: pipe: %s", strerror(errno));
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[1]);
        dup2(fds[0], STDIN_FILENO);
        execl(bin, "gnuplot", (char *)NULL);
        _exit(127);
    }
    close(fds[0]);
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    size_t off = 0;
    while (pid > 0 && off < len) {
        ssize_t w = write(fds[1], script + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    close(fds[1]);
    signal(SIGPIPE, old);
    int st = -1;
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bench_warn("gnuplot %s failed: no chart %s", bin, svg);
    free(bin);
    return 0;
}

/* A string for a gnuplot double-quoted literal: no quotes or backslashes. */
static void gp_text(char *out, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 1 < cap; s++)
        out[o++] = *s == '"' || *s == '\\' ? '\'' : *s;
    out[o] = '\0';
}

/* One bar per figure with a ratio: "i label value goal color xapian". */
static int chart_bars(FILE *f, const bench_result *r, double *lo, double *hi)
{
    fprintf(f, "$d << EOD\n");
    int n = 0;
    for (size_t i = 0; i < r->nfigs; i++) {
        const bench_fig *g = &r->figs[i];
        if (isnan(g->ratio) || g->unit == U_X || g->unit == U_COUNT ||
            g->unit == U_MB_S)
            continue;
        bool speed = g->target == T_RATIO_GE;     /* shown as a time */
        double v = speed ? 1 / g->ratio : g->ratio;
        /* An absolute bound on kvfts is drawn as the ratio it allows. */
        double goal = g->target == T_RATIO_LE ? g->goal
                    : speed ? 1 / g->goal
                    : g->target == T_ABS_LE ? g->goal / g->fts : NAN;
        unsigned color = g->ok == 1 ? 0x2ca02c : g->ok == 0 ? 0xd62728
                       : 0x999999;
        double x = speed ? 1 / g->ratio_xap : g->ratio_xap;
        char gs[32] = "NaN", xs[32] = "NaN";
        if (!isnan(goal))
            snprintf(gs, sizeof gs, "%.6g", goal);
        if (!isnan(x))
            snprintf(xs, sizeof xs, "%.6g", x);
        fprintf(f, "%d \"%s\" %.6g %s %u %s\n", n++, speed ? "load time"
                : g->label, v, gs, color, xs);
        *lo = fmin(*lo, isnan(goal) ? v : fmin(v, goal));
        *hi = fmax(*hi, isnan(goal) ? v : fmax(v, goal));
        if (!isnan(x)) {
            *lo = fmin(*lo, x);
            *hi = fmax(*hi, x);
        }
    }
    fprintf(f, "EOD\n");
    return n;
}

int bench_write_svg(const char *svg, const bench_result *r)
{
    if (!r->vs) {                      /* no ratios: no chart */
        unlink(svg);                   /* (not one of an earlier run) */
        return 0;
    }
    char *script = NULL, title[256], docs[32];
    size_t len = 0;
    FILE *f = open_memstream(&script, &len);
    if (!f)
        return bench_fail(BENCH_ERR, "chart: %s", strerror(errno));
    double lo = 1, hi = 1;
    int n = chart_bars(f, r, &lo, &hi);
    bench_thousands(docs, sizeof docs, (double)r->corpus.docs);
    gp_text(title, sizeof title, r->spec->title);
    fprintf(f,
        "set terminal svg size 900,%d dynamic font 'sans,11' "
        "background rgb 'white'\n"
        "set output \"%s\"\n"
        "set title \"kvfts %s / SQLite %s FTS5%s%s: %s, %s docs\\n(lower is "
        "better; load throughput shown as time)\" noenhanced\n"
        "set logscale x\nset xrange [%.3g:%.3g]\nset yrange [%d.7:-0.7]\n"
        "set xlabel 'kvfts / FTS5 (log scale)'\n"
        "set ytics scale 0 nomirror font ',9' noenhanced\nset mxtics 10\n"
        "set grid xtics lc rgb '#dddddd'\nset key outside bottom center "
        "horizontal font ',9'\nset style fill solid 0.85 noborder\n"
        "set arrow from 1, graph 0 to 1, graph 1 nohead dt 2 lc rgb '#555555'\n"
        "plot $d using 3:1:(1):3:($1-0.38):($1+0.38):5:ytic(2) with "
        "boxxyerror lc rgb variable notitle, \\\n"
        "  $d using 4:($1-0.45):(0):(0.9) with vectors nohead lw 2.5 "
        "lc rgb 'black' title 'target', \\\n"
        "  $d using ($3 >= 1 ? $3 : 1/0):1:(sprintf('%%.2f', $3)) with "
        "labels left offset 0.5,0 font ',8' notitle, \\\n"
        "  $d using ($3 < 1 ? $3 : 1/0):1:(sprintf('%%.2f', $3)) with "
        "labels right offset -0.5,0 font ',8' notitle, \\\n"
        "%s"
        "  NaN with boxes lc rgb '#2ca02c' title 'met', \\\n"
        "  NaN with boxes lc rgb '#d62728' title 'missed', \\\n"
        "  NaN with boxes lc rgb '#999999' title 'no target'\n",
        160 + 18 * n, svg, KVFTS_VERSION_STRING, sqlite3_libversion(),
        r->xap_on ? " (bars) and Xapian " : "",
        r->xap_on ? xap_version() : "", title, docs, lo / 2, hi * 2,
        n ? n - 1 : 0,
        r->xap_on ? "  $d using 6:1 with points pt 13 ps 1.1 lc rgb "
                    "'#1f77b4' title 'kvfts / Xapian', \\\n" : "");
    fclose(f);
    int code = run_gnuplot(script, len, svg);
    free(script);
    return code;
}

static void growth_data(FILE *f, const bench_growth *g)
{
    fprintf(f, "$load << EOD\n");
    for (size_t i = 0; i < g->n; i++) {
        const bench_result *r = &g->r[i];
        double docs = (double)r->corpus.docs;
        fprintf(f, "%" PRIu64 " %.6g %.6g %.6g %.6g %.6g\n", r->at_docs,
                bench_per(docs, r->kv.secs),
                g->vs ? bench_per(docs, r->fts.secs) : NAN,
                (double)r->kv.maxrss_kb / 1024,
                g->vs ? (double)r->fts.maxrss_kb / 1024 : NAN,
                bench_per(docs, r->kv.user_s + r->kv.sys_s));
    }
    fprintf(f, "EOD\n$lat << EOD\ndocs");
    for (int c = 0; c < NCLASS; c++)
        fprintf(f, " %s", bench_class_names[c]);
    fputc('\n', f);
    for (int k = 0; k < 2; k++) {            /* top-10, then count */
        for (size_t i = 0; i < g->n; i++) {
            const bench_result *r = &g->r[i];
            fprintf(f, "%" PRIu64, r->at_docs);
            for (int c = 0; c < NCLASS; c++) {
                const bench_class_stats *s = &r->cls[c];
                double v = s->med[k ? M_KV_COUNT : M_KV_TOP];
                if (g->vs)
                    v /= s->med[k ? M_FTS_COUNT : M_FTS_TOP];
                fprintf(f, " %.6g", s->nq && isfinite(v) ? v : NAN);
            }
            fputc('\n', f);
        }
        fprintf(f, "\n\n");                  /* gnuplot: next index */
    }
    fprintf(f, "EOD\n");
}

/* Linetypes 11-19: one distinct color per query class. */
static const char class_colors[] =
    "set linetype 11 lc rgb '#1f77b4' lw 1.5 pt 7 ps 0.6\n"
    "set linetype 12 lc rgb '#ff7f0e' lw 1.5 pt 7 ps 0.6\n"
    "set linetype 13 lc rgb '#2ca02c' lw 1.5 pt 7 ps 0.6\n"
    "set linetype 14 lc rgb '#d62728' lw 1.5 pt 7 ps 0.6\n"
    "set linetype 15 lc rgb '#9467bd' lw 1.5 pt 7 ps 0.6\n"
    "set linetype 16 lc rgb '#8c564b' lw 1.5 pt 7 ps 0.6\n"
    "set linetype 17 lc rgb '#e377c2' lw 1.5 pt 7 ps 0.6\n"
    "set linetype 18 lc rgb '#7f7f7f' lw 1.5 pt 7 ps 0.6\n"
    "set linetype 19 lc rgb '#17becf' lw 1.5 pt 7 ps 0.6\n";

int bench_write_growth_svg(const char *svg, const bench_growth *g)
{
    char *script = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&script, &len);
    if (!f)
        return bench_fail(BENCH_ERR, "chart: %s", strerror(errno));
    growth_data(f, g);
    const char *lat = g->vs ? "kvfts / FTS5, median" : "kvfts median, ms";
    double rss_top = 450;
    for (size_t i = 0; i < g->n; i++)
        if ((double)g->r[i].kv.maxrss_kb / 1024 * 1.1 > rss_top)
            rss_top = (double)g->r[i].kv.maxrss_kb / 1024 * 1.1;
    fprintf(f,
        "set terminal svg size 1200,900 dynamic enhanced font 'sans,11' "
        "background rgb 'white'\nset output \"%s\"\n"
        "set multiplot layout 2,2 title 'kvfts %s growth: %s' noenhanced\n"
        "set logscale x\nset autoscale xfix\nset offsets graph 0.04, graph "
        "0.04, 0, 0\nset grid lc rgb '#dddddd'\nset xlabel 'documents'\n"
        "%s"
        "set key bottom left font ',9' noenhanced\nset format x '%%.0s%%c'\n"
        "set title 'load speed (docs/s of each step)'\nset ylabel 'docs/s'\n"
        "set yrange [0:*]\n"
        "plot $load using 1:2 with linespoints lw 2 title 'kvfts', "
        "$load using 1:6 with linespoints lw 1 pt 6 title 'kvfts per CPU "
        "second'%s\n"
        "set title 'peak RSS of each step''s load'\nset ylabel 'MB'\n"
        "set yrange [0:%.0f]\n"
        /* The bound as an arrow: a constant function strays into the key
         * on these log axes (as in the latency graphs). */
        "set arrow 2 from graph 0, first 400 to graph 1, first 400 nohead "
        "dt 2 lc rgb 'black' front\n"
        "plot $load using 1:4 with linespoints lw 2 title 'kvfts'%s, "
        "NaN with lines dt 2 lc rgb 'black' title '400 MB'\n"
        "unset arrow 2\n"
        "set logscale y\nset yrange [*:*]\nset key outside right font ',8'\n"
        "set title 'top-10 (%s)'\nset ylabel ''\n%s"
        "plot for [c=2:%d] $lat index 0 using 1:c with linespoints lt c+9 "
        "title columnheader(c)%s\n"
        "set title 'count (%s)'\n"
        "plot for [c=2:%d] $lat index 1 using 1:c with linespoints lt c+9 "
        "notitle\nunset multiplot\n",
        svg, KVFTS_VERSION_STRING, g->spec->name, class_colors,
        g->vs ? ", $load using 1:3 with linespoints lw 2 title 'FTS5'" : "",
        rss_top,
        g->vs ? ", $load using 1:5 with linespoints lw 2 title 'FTS5'" : "",
        lat,
        /* The 0.5 target as a line across the graph (a constant function
         * drawn on these log axes strayed into the key). */
        g->vs ? "set arrow 1 from graph 0, first 0.5 to graph 1, first 0.5 "
                "nohead dt 2 lc rgb 'black' front\n" : "",
        NCLASS + 1, g->vs ? ", NaN with lines dt 2 lc rgb 'black' "
        "title 'target'" : "", lat, NCLASS + 1);
    fclose(f);
    int code = run_gnuplot(script, len, svg);
    free(script);
    return code;
}
