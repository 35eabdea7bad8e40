#!/usr/bin/env bash
# e2e.bench: `kvfts bench` (kvfts-bench) on a tiny generated corpus with its
# own spec and query set (no real corpora, no network): the table has every
# figure and class, the JSON parses and shows equal match sets for every
# query (100% agreement) and sizes on disk; a query pair that does not mean
# the same is reported as a disagreement (exit status still 0: the run
# completed; the JSON's agreement.ok is false, the table says DIFFERS and
# stderr warns); the directory as a user sees it (du -sb) and no freezer
# file; the Xapian peer when built with it (the default peers are
# fts5,xapian): its columns, its load, its counts and match sets equal to
# kvfts's (the corpus is lower-case words and spaces, where the analyses
# agree), a disagreement of its own from a fourth query column, --vs fts5
# and --vs xapian alone; --vs none; a missing gnuplot is a warning;
# --incremental (the corpus loaded over itself while 2 readers search: no
# reader error, every document replaced, single-write latencies); the
# growth run, synthetic with a stand-in corpus.sh and a real corpus cycled
# (step rates, peak RSS, no freezer file, counts equal to FTS5's; the steps
# load no Xapian); and usage errors (exit 2) and a
# missing kvfts-bench (exit 1).
source "$(dirname "$0")/lib.sh"

BENCH_BIN="$(dirname "$KVFTS_BIN")/kvfts-bench"
if [ ! -x "$BENCH_BIN" ]; then
    echo "$T_NAME: SKIPPED: no kvfts-bench beside kvfts (built with libsqlite3-dev)"
    finish
fi

B="$T_DIR/bench"
mkdir -p "$B/corpora" "$B/queries"

# ~300 documents over a small vocabulary; the key comes from a number.
gen_corpus() {   # gen_corpus N SEED
    awk -v n="$1" -v seed="$2" 'BEGIN { srand(seed);
        split("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu", w, " ");
        split("red green blue", c, " ");
        for (i = 1; i <= n; i++) {
            s = ""; for (j = 0; j < 4 + i % 11; j++) s = s " " w[1 + int(rand() * 12)];
            t = w[1 + int(rand() * 12)] " " w[1 + int(rand() * 12)];
            printf "{\"id\":%d,\"title\":\"%s\",\"body\":\"%s\",\"color\":\"%s\",\"n\":%d}\n",
                   i, t, substr(s, 2), c[1 + i % 3], i % 7 } }'
}
gen_corpus 300 7 >"$T_DIR/tiny.jsonl"

cat >"$B/corpora/tiny.json" <<'EOF'
{"name":"tiny","title":"a tiny test corpus","synthetic":false,
 "key":"doc::{id}","fields":["title","body","color"],
 "config":{"analysis":{"exclude":["n"]}},"queries":"tiny.tsv"}
EOF
printf '%s\n' \
    '# class<TAB>kvfts<TAB>fts5' \
    '' \
    $'term-common\talpha\talpha' \
    $'term-rare\tgreen\tgreen' \
    $'and2\talpha beta\talpha AND beta' \
    $'and3\talpha beta gamma\talpha AND beta AND gamma' \
    $'or\tdelta OR zeta\tdelta OR zeta' \
    $'not\talpha -beta\talpha NOT beta' \
    $'phrase\t"alpha beta"\t"alpha beta"' \
    $'prefix\tep*\tep*' \
    $'field\ttitle:alpha\ttitle : alpha' \
    $'field\tcolor:(red OR blue) mu\tcolor : (red OR blue) AND mu' \
    >"$B/queries/tiny.tsv"

bench() {
    kv bench --bench-dir "$B" --corpus-file "$T_DIR/tiny.jsonl" --runs 1 \
        --work "$T_DIR/work" --out "$T_DIR/out" "$@"
}

# --- a full run -------------------------------------------------------------
expect_exit 0 bench --corpus tiny
for row in "load docs/s" "load MB/s" "index size (data files)" "peak load RSS"; do
    check "table row '$row'" grep -q "^$row " <<<"$OUT"
done
for c in term-common term-rare and2 and3 or not phrase prefix field; do
    for k in "top-10 median" "top-10 p99" "count median" "count p99"; do
        check "table row '$c $k'" grep -q "^$c $k " <<<"$OUT"
    done
done
expect_stdout_contains "match sets: 10 of 10 queries identical (100.0%)"
J="$T_DIR/out/tiny.json"
check "JSON parses" jq -e . "$J" >/dev/null
expect_eq "queries in JSON" "$(jq '.queries | length' "$J")" 10
expect_eq "agreement" "$(jq -c '[.agreement.ok, .agreement.percent]' "$J")" '[true,100]'
expect_eq "match sets equal" \
    "$(jq '[.queries[] | select(.equal and .kvfts_matches == .fts5_matches
                               and .kvfts_count == .fts5_count)] | length' "$J")" 10
expect_eq "sizes and memory > 0" \
    "$(jq '[.load.kvfts.data_bytes, .load.fts5.data_bytes, .load.kvfts.peak_rss_kb,
            .load.fts5.peak_rss_kb, .load.kvfts.postings] | all(. > 0)' "$J")" true
expect_eq "documents" "$(jq -c '[.corpus.docs, .load.kvfts.documents, .load.fts5.documents]' "$J")" \
    '[300,300,300]'
for row in "directory (du -sb)" "freezer files (peak)"; do
    check "table row '$row'" grep -q "^$row " <<<"$OUT"
done
# The whole directory holds more than the data files (the log, DB_CONFIG,
# the registry); no freezer file during or after the load; regions seen
# outside the directory have a size.
expect_eq "directory sizes" \
    "$(jq '.load.kvfts | .dir_bytes > .data_bytes and .dir_bytes > .log_bytes
                       and .freezer_files_peak == 0 and .freezer_files_after == 0
                       and ((.regions_outside_dir | not) or .regions_outside_peak_bytes > 0)' "$J")" true
expect_eq "size figures" \
    "$(jq -c '[.figures[] | select(.id == "dir.bytes" or .id == "freezer.peak_files")
               | [.id, .goal, .ok]]' "$J")" '[["dir.bytes",1,false],["freezer.peak_files",0,true]]'
# A count computed here, independently of both engines.
want=$(grep -c '"body":"[^"]*\balpha\b\|"title":"[^"]*\balpha\b' "$T_DIR/tiny.jsonl")
expect_eq "alpha count" "$(jq '.queries[0].kvfts_count' "$J")" "$want"
expect_eq "figures have targets" \
    "$(jq '[.figures[] | select(.id == "load.docs_per_s") | .goal] | .[0]' "$J")" 2
if command -v gnuplot >/dev/null; then
    check "chart written" grep -q '<svg' "$T_DIR/out/tiny.svg"
fi
check "work dir removed" test ! -e "$T_DIR/work"

# --- the Xapian peer (when kvfts-bench was built with libxapian-dev) ---------
if [ "$(jq -r '.versions.xapian' "$J")" != null ]; then
    XAPIAN=1
    expect_eq "default peers" "$(jq -c '.settings.peers' "$J")" '["fts5","xapian"]'
    check "xapian columns" grep -qE '^figure +kvfts +fts5 +xapian +kvfts/fts5 +kvfts/xap +kvfts/best +target$' <<<"$OUT"
    expect_stdout_contains "match sets vs xapian: 10 of 10 queries identical (100.0%)"
    expect_eq "xapian counts and match sets equal kvfts's" \
        "$(jq '[.queries[] | select(.xapian_equal and .xapian_matches == .kvfts_matches
                                   and .xapian_count == .kvfts_count)] | length' "$J")" 10
    expect_eq "xapian agreement" "$(jq -c '[.xapian_agreement.ok, .xapian_counts_equal]' "$J")" '[true,10]'
    expect_eq "xapian load" \
        "$(jq -c '[.load.xapian.documents, (.load.xapian | .data_bytes > 0 and .peak_rss_kb > 0
                                            and .seconds > 0 and .postings > 0)]' "$J")" '[300,true]'
    # The best peer of a figure is the one with the lower latency.
    expect_eq "best peer" \
        "$(jq '[.figures[] | select(.id | endswith("_ms")) | select(.fts5 != null and .xapian != null)
                | (if .fts5 <= .xapian then "fts5" else "xapian" end) == .best_peer
                  and (.ratio_best - .kvfts / ([.fts5, .xapian] | min) | fabs) < 1e-3] | all' "$J")" true
    expect_eq "classes time xapian" \
        "$(jq '[.classes[] | .xapian_top10_median_ms > 0 and .xapian_count_median_ms > 0] | all' "$J")" true
    expect_eq "field queries become Xapian's syntax" \
        "$(jq -r '.queries[] | select(.line == 12) | .xapian' "$J")" 'color:(red OR blue) AND mu'

    # A Xapian query (the fourth column) that does not mean the same.
    { cat "$B/queries/tiny.tsv"; printf 'or\talpha OR beta\talpha OR beta\talpha OR gamma\n'; } >"$T_DIR/xbad.tsv"
    expect_exit 0 bench --corpus tiny --queries "$T_DIR/xbad.tsv"
    expect_stdout_contains "match sets: 11 of 11 queries identical"
    expect_stdout_contains "match sets vs xapian: 10 of 11 queries identical"
    expect_stdout_contains "/ xapian 'alpha OR gamma'"
    expect_stderr_contains "xapian: match sets differ on 1 of 11 queries"
    expect_eq "xapian disagreement" \
        "$(jq -c '[.agreement.ok, .xapian_agreement.ok, (.queries[] | select(.xapian_equal | not)
                   | .line, .xapian_first_difference.only_in)]' "$J")" '[true,false,13,"kvfts"]'

    expect_exit 0 bench --corpus tiny --vs xapian
    check "no fts5 column" test "$(grep -c fts5 <<<"$OUT")" = 0
    check "xapian alone" grep -qE '^figure +kvfts +xapian +kvfts/xap +target$' <<<"$OUT"
    expect_eq "xapian alone in JSON" "$(jq -c '[.settings.peers, .load.fts5, .agreement, .xapian_agreement.ok]' "$J")" \
        '[["xapian"],null,null,true]'
    # A spec that says "xapian": false leaves Xapian out of the default
    # peers, says so, and runs it when --vs names it.
    sed 's/"queries":"tiny.tsv"}/"queries":"tiny.tsv","xapian":false}/' \
        "$B/corpora/tiny.json" >"$B/corpora/tinynx.json"
    sed -i 's/"name":"tiny"/"name":"tinynx"/' "$B/corpora/tinynx.json"
    cp "$B/queries/tiny.tsv" "$B/queries/tinynx.tsv"
    sed -i 's/tiny.tsv/tinynx.tsv/' "$B/corpora/tinynx.json"
    expect_exit 0 bench --corpus tinynx
    expect_stderr_contains 'tinynx: Xapian left out (its spec says "xapian": false)'
    expect_eq "no xapian by the spec" \
        "$(jq -c '[.settings.peers, .load.xapian]' "$T_DIR/out/tinynx.json")" '[["fts5"],null]'
    expect_exit 0 bench --corpus tinynx --vs fts5,xapian
    expect_eq "xapian when named" \
        "$(jq -c '[.settings.peers, .xapian_agreement.ok]' "$T_DIR/out/tinynx.json")" \
        '[["fts5","xapian"],true]'
    sed 's/"xapian":false/"xapian":"no"/' "$B/corpora/tinynx.json" >"$B/corpora/tinybad.json"
    expect_exit 2 bench --corpus tinybad
    expect_stderr_contains "'xapian' must be true or false"
    rm -f "$B/corpora/tinynx.json" "$B/corpora/tinybad.json" "$B/queries/tinynx.tsv"
    expect_exit 0 bench --corpus tiny --vs fts5
    check "no xapian column" test "$(grep -ci xapian <<<"$OUT")" = 0
    expect_eq "fts5 alone in JSON" "$(jq -c '[.settings.peers, .load.xapian, .xapian_agreement]' "$J")" \
        '[["fts5"],null,null]'
else
    XAPIAN=0
    echo "$T_NAME: note: kvfts-bench built without Xapian: its peer is not tested"
fi

# --- a pair that does not mean the same: a disagreement ---------------------
{ cat "$B/queries/tiny.tsv"; printf 'or\talpha OR beta\talpha OR gamma\n'; } >"$T_DIR/bad.tsv"
expect_exit 0 bench --corpus tiny --queries "$T_DIR/bad.tsv" --vs fts5
expect_stdout_contains "match sets: 10 of 11 queries identical"
expect_stdout_contains "DIFFERS"
expect_stderr_contains "match sets differ on 1 of 11 queries"
expect_eq "agreement.ok" "$(jq '.agreement.ok' "$J")" false
expect_eq "the differing query" \
    "$(jq -c '[.queries[] | select(.equal | not) | .line, .first_difference.only_in]' "$J")" \
    '[13,"kvfts"]'

# --- kvfts alone; no gnuplot --------------------------------------------------
expect_exit 0 bench --corpus tiny --vs none
check "no fts5 column" test "$(grep -c fts5 <<<"$OUT")" = 0
expect_eq "no peer in JSON" "$(jq -c '[.settings.peer, .load.fts5, .agreement]' "$J")" '[null,null,null]'
check "no stale chart" test ! -e "$T_DIR/out/tiny.svg"
KVFTS_GNUPLOT=/nonexistent/gnuplot expect_exit 0 bench --corpus tiny
expect_stderr_contains "gnuplot not found (install gnuplot-nox)"

# --- incremental: the corpus over itself while readers search ----------------
expect_exit 0 bench --corpus tiny --vs none --incremental --incr-readers 2 \
    --incr-batch 50 --latency-docs 5
expect_stdout_contains "incremental: the corpus loaded again over itself"
expect_stdout_contains "reader errors: 0  ok"
I=$(jq -c '.incremental' "$J")
expect_eq "incremental load" \
    "$(jq -c '[.batch, .load.documents, .readers, .during_load.errors, .readers_ok,
               .ratio > 0, .load.freezer_files_peak]' <<<"$I")" '[50,300,2,0,true,true,0]'
check "readers searched during it" test "$(jq '.during_load.searches' <<<"$I")" -gt 0
expect_eq "single writes" \
    "$(jq -c '[.single_writes_ms | to_entries[] | select(.value | type == "object")
               | [.key, .value.n, .value.errors, .value.median_ms > 0,
                  .value.p99_ms >= .value.median_ms]] | map(.[1:]) | unique' <<<"$I")" \
    '[[5,0,true,true]]'
expect_eq "single-write series" \
    "$(jq -c '[.single_writes_ms | keys[] | select(. != "api" and . != "process")]' <<<"$I")" \
    '["api_delete","api_put","api_replace","process_delete","process_put","process_replace"]'

# --- growth, with a stand-in corpus.sh for the synthetic corpus ---------------
cat >"$B/corpus.sh" <<EOF
#!/usr/bin/env bash
# test stand-in: corpus.sh NAME OUT DOCS
[ "\$1" = synthetic ] || exit 1
awk -v n="\$3" 'BEGIN { srand(3); split("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu", w, " ");
  split("red green blue", c, " ");
  for (i = 1; i <= n; i++) { s = ""; for (j = 0; j < 5; j++) s = s " " w[1 + int(rand() * 12)];
    printf "{\"id\":%d,\"title\":\"%s\",\"body\":\"%s\",\"color\":\"%s\"}\n", i, w[1 + i % 12], substr(s, 2), c[1 + i % 3] } }' >"\$2"
EOF
sed 's/"name":"tiny"/"name":"synthetic"/; s/"synthetic":false/"synthetic":true/' \
    "$B/corpora/tiny.json" >"$B/corpora/synthetic.json"
expect_exit 0 kv bench --bench-dir "$B" --growth --sizes 50,200 --runs 1 \
    --work "$T_DIR/gwork" --out "$T_DIR/out" --data "$T_DIR/data"
expect_stdout_contains "kvfts docs/s at 200 / at 50 ="
expect_stdout_contains "match counts: 20 of 20 (query, size) pairs equal  ok"
if [ "$XAPIAN" = 1 ]; then
    expect_stdout_contains "match counts vs xapian: 20 of 20 (query, size) pairs equal"
    expect_eq "growth xapian loads" \
        "$(jq -c '[.growth[].load.xapian.documents]' "$T_DIR/out/growth.json")" '[50,200]'
fi
check "growth table has every class" \
    test "$(grep -cE '^(term-common|term-rare|and2|and3|or|not|phrase|prefix|field) +(top-10|count) ' <<<"$OUT")" = 18
G="$T_DIR/out/growth.json"
expect_eq "growth JSON" "$(jq -c '[.growth[].docs, (.scale.to_docs)]' "$G")" '[50,200,200]'
# One database grown in steps: the second step adds 150 documents.
expect_eq "growth steps" \
    "$(jq -c '[.growth[] | [.step_docs, .step_docs_per_s > 0, .load.kvfts.peak_rss_kb > 0,
                            .load.kvfts.freezer_files_peak, .load.kvfts.dir_bytes > 0,
                            .load.fts5.data_bytes > 0]]' "$G")" \
    '[[50,true,true,0,true,true],[150,true,true,0,true,true]]'
expect_eq "growth targets" "$(jq -c '[.rss.ok, .freezer.ok, .cycled]' "$G")" '[true,true,false]'
expect_stdout_contains "target: no freezer file at any size  ok"
check "corpora built" test -s "$T_DIR/data/synthetic-200.jsonl"
# A real corpus cycled with distinct keys: 300 documents to 200, then 700.
expect_exit 0 bench --growth --corpus tiny --sizes 700,200 --data "$T_DIR/data"
G="$T_DIR/out/growth-tiny.json"
expect_eq "cycled growth" \
    "$(jq -c '[.cycled, .cycle_docs, [.growth[] | .docs, .step_docs, .load.kvfts.documents]]' "$G")" \
    '[true,300,[200,200,200,700,500,700]]'
expect_stdout_contains "match counts: 20 of 20 (query, size) pairs equal  ok"
if [ "$XAPIAN" = 1 ]; then
    # Xapian grows with the same steps: its database holds every document.
    expect_stdout_contains "match counts vs xapian: 20 of 20 (query, size) pairs equal"
    expect_eq "cycled growth, xapian" \
        "$(jq -c '[.growth[] | .load.xapian.documents, .load.xapian.data_bytes > 0]' "$G")" \
        '[200,true,700,true]'
fi

# --- usage and missing pieces -------------------------------------------------
bench_error() {   # bench_error CODE TEXT ARGS...: one line "kvfts-bench: ..."
    local code=$1 text=$2
    shift 2
    expect_exit "$code" kv bench "$@"
    [ "$(wc -l <"$T_DIR/.err")" = 1 ] || fail "stderr is not one line"
    [[ "$ERR" == "kvfts-bench: "* ]] || fail "stderr does not start with 'kvfts-bench: '"
    expect_stderr_contains "$text"
}
bench_error 2 "corpus 'nope': unknown" --bench-dir "$B" --corpus nope
expect_stderr_contains "known: synthetic, tiny"
bench_error 2 "unknown option '--frobnicate'" --corpus tiny --frobnicate
bench_error 2 "--runs takes 1 to 100000, not '0'" --corpus tiny --runs 0
bench_error 2 "--vs is fts5, xapian, fts5,xapian or none, not 'lucene'" --corpus tiny --vs lucene
bench_error 2 "--vs is fts5, xapian, fts5,xapian or none, not 'fts5,'" --corpus tiny --vs fts5,
if [ "$XAPIAN" = 0 ]; then
    bench_error 2 "built without Xapian" --corpus tiny --vs xapian
fi
bench_error 2 "give --corpus NAME or --growth" --runs 3
bench_error 2 "drop --docs" --growth --docs 10
bench_error 2 "bench dir $T_DIR/none: not a directory" --bench-dir "$T_DIR/none" --corpus tiny
mkdir -p "$T_DIR/mine/kvfts" && echo precious >"$T_DIR/mine/kvfts/file"
bench_error 2 "work dir $T_DIR/mine: not empty and not made by kvfts-bench" \
    --bench-dir "$B" --corpus tiny --corpus-file "$T_DIR/tiny.jsonl" --work "$T_DIR/mine"
check "a foreign work dir is left alone" test -s "$T_DIR/mine/kvfts/file"
expect_exit 0 bench --corpus tiny --keep
check "--keep keeps the databases" test -d "$T_DIR/work/kvfts" -a -s "$T_DIR/work/fts5.db"
if [ "$XAPIAN" = 1 ]; then
    check "--keep keeps xapian's" test -s "$T_DIR/work/xapian/iamglass"
fi
expect_exit 0 bench --corpus tiny
check "a kept work dir is reused, then removed" test ! -e "$T_DIR/work"
printf 'phrase\tonly two columns\n' >"$T_DIR/short.tsv"
bench_error 2 "short.tsv:1: expected CLASS<TAB>KVFTS QUERY<TAB>FTS5 QUERY" \
    --bench-dir "$B" --corpus tiny --queries "$T_DIR/short.tsv"
printf 'fuzzy\ta\ta\n' >"$T_DIR/cls.tsv"
bench_error 2 "cls.tsv:1: unknown class 'fuzzy'" --bench-dir "$B" --corpus tiny --queries "$T_DIR/cls.tsv"
expect_exit 0 kv bench --help
expect_stdout_contains "--growth"
KVFTS_BENCH_BIN="$T_DIR/none/kvfts-bench" expect_error 1 \
    "bench: kvfts-bench not found (it is built when libsqlite3-dev is installed)" kv bench --corpus tiny

finish
