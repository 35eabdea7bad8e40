#!/usr/bin/env bash
# e2e.readers -- concurrent readers and writers on one database.
#
# 1. Four processes search continuously (kvfts_test_helper search) while a
#    fifth loads a corpus in batches of 1,000 (its merges' outputs files of
#    their own).  Every search is one
#    snapshot and is checked on its own: its match count must be the
#    query's count over item::1..N for N a whole number of batches, and
#    every hit a whole document that matches, numbered at most N (so no
#    half-written document or index entry is ever seen).  No reader may
#    fail; some searches must see the load half done; the loader succeeds
#    and the final index is exact.
# 2. Two loaders at once into one database (--auto a, --auto b): both
#    complete (serialised by Berkeley DB's locks, deadlock victims retried),
#    or one is refused with a clear error while the other completes; never
#    damage.
# 3. Two shell loops of `kvfts put` at once: all 400 documents stored.
# 4. `kvfts bench --readers 2` on a tiny corpus (when kvfts-bench is built).
. "$(dirname "$0")/lib.sh"

: "${KVFTS_TEST_HELPER:?KVFTS_TEST_HELPER must name kvfts_test_helper}"

TOTAL=60000       # ~2 s to load alone in a RelWithDebInfo build
BATCH=1000        # the helper's SEARCH_BATCH
READERS=4
SRC="$T_DIR/corpus.jsonl"
# Line I: {"n":I,"len":L,"pad":"<L x>","text":"w<I%7> v<I%11> common"},
# L = I%5 -- the shape the helper checks.
awk -v n=$TOTAL 'BEGIN {
    for (i = 1; i <= n; i++) {
        l = i % 5; p = ""
        for (j = 0; j < l; j++) p = p "x"
        printf "{\"n\":%d,\"len\":%d,\"pad\":\"%s\",\"text\":\"w%d v%d common\"}\n",
            i, l, p, i % 7, i % 11
    }
}' >"$SRC"
expect_eq "generated lines" "$(wc -l <"$SRC")" $TOTAL

strip_cas() { sed 's/^\({"key":"[^"]*"\),"cas":[0-9]*,/\1,/'; }

# mod_count N M R: how many of 1..N are R modulo M.
mod_count() {
    local n=$1 m=$2 r=$3
    if [ "$r" = 0 ]; then echo $((n / m)); else echo $(( n >= r ? (n - r) / m + 1 : 0 )); fi
}

# expect_count QUERY N: `kvfts search QUERY --count` prints N.
expect_count() {
    expect_exit 0 kv search "$1" --count
    expect_stdout "{\"total\":$2}"
}

# --- 1. four readers while a fifth process loads.
new_db readers
t0=$(now_ms)
RPIDS=()
for r in $(seq $READERS); do
    # 300 s is only a bound: a reader stops 0.5 s after it sees the whole
    # corpus.
    "$KVFTS_TEST_HELPER" search "$KVFTS_DB" 300 $TOTAL \
        >"$T_DIR/reader$r.out" 2>"$T_DIR/reader$r.err" &
    RPIDS+=($!)
    track_pid $!
done
# The loader's merges are done whole (KVFTS_MERGE_RANGE_KB: each output a
# file of its own, written unlogged and listed by the transaction that made
# it), so the readers open such files as soon as they are listed.
KVFTS_MERGE_RANGE_KB=16 "$KVFTS_BIN" load "$SRC" --auto item --batch $BATCH \
    --quiet >"$T_DIR/load.out" 2>"$T_DIR/load.err" &
LOADER=$!
track_pid $LOADER
wait $LOADER
rc=$?
load_ms=$(($(now_ms) - t0))
[ $rc = 0 ] || fail "loader exited $rc with $READERS readers running" \
    "$(cat "$T_DIR/load.err")"
pass
[[ "$(cat "$T_DIR/load.out")" == *"\"loaded\":$TOTAL,"* ]] ||
    fail "load summary: $(cat "$T_DIR/load.out")"
pass
midload=0
for r in $(seq $READERS); do
    wait "${RPIDS[$((r - 1))]}"
    rc=$?
    [ $rc = 0 ] || fail "reader $r exited $rc during the load" \
        "$(head -n 5 "$T_DIR/reader$r.err")"
    pass
    line=$(cat "$T_DIR/reader$r.out")
    [[ "$line" =~ ^searches\ ([0-9]+)\ midload\ ([0-9]+)\ last\ ([0-9]+)\  ]] ||
        fail "reader $r printed '$line'"
    [ "${BASH_REMATCH[1]}" -gt 0 ] || fail "reader $r did no search"
    [ "${BASH_REMATCH[3]}" = $TOTAL ] ||
        fail "reader $r ended before it saw the whole load: $line"
    midload=$((midload + BASH_REMATCH[2]))
    pass
    echo "$T_NAME: reader $r: $line" >&2
done
echo "$T_NAME: load of $TOTAL documents with $READERS readers: ${load_ms} ms" >&2
[ $midload -gt 0 ] || fail "no search saw the load half done (the load ended too soon)"
pass
# The final state, exactly.
expect_exit 0 kv get count::item
expect_stdout "{\"key\":\"count::item\",\"value\":$TOTAL}"
expect_exit 0 kv stats
expect_eq "documents after the load" "$(json_num documents)" $TOTAL
expect_exit 0 kv check
expect_stdout_contains '"ok":true,"differences":0'
expect_count common $TOTAL
expect_count w3 "$(mod_count $TOTAL 7 3)"
expect_count v0 "$(mod_count $TOTAL 11 0)"
# 3 mod 7 and 5 mod 11 is 71 mod 77.
expect_count 'w3 v5' "$(mod_count $TOTAL 77 71)"
expect_count '"w3 v5"' "$(mod_count $TOTAL 77 71)"
expect_count 'w3 -v5' $(($(mod_count $TOTAL 7 3) - $(mod_count $TOTAL 77 71)))

# --- 2. two loaders at once into one database, on different prefixes.
HALF=50000
head -n $HALF "$SRC" >"$T_DIR/half.jsonl"
new_db writers
t0=$(now_ms)
WPIDS=()
for p in a b; do
    "$KVFTS_BIN" load "$T_DIR/half.jsonl" --auto $p --batch $BATCH --quiet \
        >"$T_DIR/load-$p.out" 2>"$T_DIR/load-$p.err" &
    WPIDS+=($!)
    track_pid $!
done
wait "${WPIDS[0]}"
RC_a=$?
wait "${WPIDS[1]}"
RC_b=$?
echo "$T_NAME: two loaders of $HALF documents at once: exit $RC_a and $RC_b," \
    "$(($(now_ms) - t0)) ms" >&2

# verify_loaded P N: count::P = N and P::1..N hold the first N lines.
verify_loaded() {
    local p=$1 n=$2
    expect_exit 0 kv get "count::$p"
    expect_stdout "{\"key\":\"count::$p\",\"value\":$n}"
    kv get --range "$p" 1.. | strip_cas >"$T_DIR/got.txt" ||
        fail "get --range $p 1.. failed"
    awk -v c="$n" -v p="$p" 'NR <= c { printf "{\"key\":\"%s::%d\",\"doc\":%s}\n", p, NR, $0 }' \
        "$T_DIR/half.jsonl" >"$T_DIR/want.txt"
    cmp -s "$T_DIR/want.txt" "$T_DIR/got.txt" ||
        fail "$p::1..$n differ from the source lines" \
            "$(diff "$T_DIR/want.txt" "$T_DIR/got.txt" | head -n 10)"
    pass
}

# A refused loader: exit 5 (busy) or 1, one clear error line, and whole
# batches of what it committed before.
refused() {
    local p=$1 rc=$2 l n
    [ "$rc" = 5 ] || [ "$rc" = 1 ] || fail "loader $p exited $rc"
    l=$(cat "$T_DIR/load-$p.err")
    if [ "$(wc -l <"$T_DIR/load-$p.err")" != 1 ] || ! [[ "$l" =~ ^kvfts:\ [^:]+:\ .+ ]]; then
        fail "loader $p exited $rc without one clear error line" "$l"
    fi
    echo "$T_NAME: loader $p refused (exit $rc): $l" >&2
    n=0
    if run kv get "count::$p" && [ "$RC" = 0 ]; then n=$(json_num value); fi
    [ $((n % BATCH)) = 0 ] || fail "refused loader $p left $n documents: part of a batch"
    pass
    verify_loaded "$p" "$n"
    DOCS_p=$n
}

if [ $RC_a = 0 ] && [ $RC_b = 0 ]; then
    verify_loaded a $HALF
    verify_loaded b $HALF
    want_docs=$((2 * HALF))
elif [ $RC_a = 0 ]; then
    verify_loaded a $HALF
    refused b $RC_b
    want_docs=$((HALF + DOCS_p))
elif [ $RC_b = 0 ]; then
    verify_loaded b $HALF
    refused a $RC_a
    want_docs=$((HALF + DOCS_p))
else
    fail "both loaders failed: exit $RC_a and $RC_b" \
        "$(cat "$T_DIR/load-a.err" "$T_DIR/load-b.err")"
fi
expect_exit 0 kv stats
expect_eq "documents after two loaders" "$(json_num documents)" "$want_docs"
expect_exit 0 kv check
expect_stdout_contains '"ok":true,"differences":0'
expect_count common "$want_docs"

# --- 3. two loops of single-document writes at once.
new_db puts
for p in p q; do
    (
        for i in $(seq 200); do
            "$KVFTS_BIN" put "$p::$i" "{\"w\":\"$p\",\"i\":$i,\"text\":\"word$i common\"}" \
                >/dev/null 2>>"$T_DIR/put-$p.err" || echo "put $p::$i: exit $?" >>"$T_DIR/put-$p.err"
        done
    ) &
    WPIDS+=($!)
    track_pid $!
done
wait "${WPIDS[2]}"
wait "${WPIDS[3]}"
# A put that waits a second for the other loop's says so ("waiting for
# another writer", issue 13 item 11): that is not a failure, anything else is.
for p in p q; do
    grep -v '^kvfts: waiting for another writer ' "$T_DIR/put-$p.err" \
        >"$T_DIR/put-$p.bad" || true
    [ ! -s "$T_DIR/put-$p.bad" ] || fail "writer $p failed" "$(head -n 5 "$T_DIR/put-$p.bad")"
    pass
done
expect_exit 0 kv stats
expect_eq "documents after two put loops" "$(json_num documents)" 400
expect_exit 0 kv get p::1 p::200 q::1 q::200
expect_exit 0 kv check
expect_stdout_contains '"ok":true,"differences":0'
expect_count common 400
expect_count word17 2

# --- 4. kvfts bench --readers on a tiny corpus: the table's readers rows and
# the JSON's figures, no reader error.
BENCH_BIN="$(dirname "$KVFTS_BIN")/kvfts-bench"
if [ -x "$BENCH_BIN" ]; then
    B="$T_DIR/bench"
    mkdir -p "$B/corpora" "$B/queries"
    cat >"$B/corpora/tiny.json" <<'EOF'
{"name":"tiny","title":"the readers test corpus","synthetic":false,
 "key":"item::{n}","fields":["text"],"queries":"tiny.tsv"}
EOF
    printf '%s\n' $'term-common\tcommon\tcommon' $'and2\tw3 v5\tw3 AND v5' \
        $'phrase\t"w4 v7"\t"w4 v7"' $'prefix\tw*\tw*' >"$B/queries/tiny.tsv"
    head -n 3000 "$SRC" >"$T_DIR/tiny.jsonl"
    expect_exit 0 kv bench --bench-dir "$B" --corpus tiny --corpus-file "$T_DIR/tiny.jsonl" \
        --runs 1 --vs none --work "$T_DIR/work" --out "$T_DIR/out" --readers 2 --readers-batch 500
    expect_stdout_contains "readers: 2 processes"
    expect_stdout_contains "reader errors: 0  ok"
    check "table row 'during the load'" grep -q "^during the load (" <<<"$OUT"
    J="$T_DIR/out/tiny.json"
    expect_eq "JSON readers" "$(jq -c '.readers | [.processes, .ok, .idle.errors,
        .during_load.errors, .idle.searches > 0, .during_load.searches > 0,
        .idle.p99_ms >= .idle.median_ms, .load.batch, .load.documents]' "$J")" \
        '[2,true,0,0,true,true,true,500,3000]'
    expect_exit 2 kv bench --corpus tiny --readers 65
    expect_stderr_contains "kvfts-bench: --readers takes 0 to 64 processes, not '65'"
    expect_exit 2 kv bench --growth --readers 2
    expect_stderr_contains "kvfts-bench: --readers and --incremental go with --corpus, not --growth"
else
    echo "$T_NAME: no kvfts-bench beside kvfts: kvfts bench --readers not tested" >&2
fi

finish
