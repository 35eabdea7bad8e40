#!/usr/bin/env bash
# soak_resume.sh -- a keyed load of a real corpus (this machine's Debian
# package catalog, its first 20,000 packages) killed with SIGKILL at random
# moments until 50 kills have landed in a running load, each time resumed
# with `kvfts load --resume`: after
# every kill the database reopens (recovery) and holds exactly the first
# whole batches of the file (the key of the last stored line is there, the
# next one is not); at the end every line is stored once, equal to its
# source line, `kvfts check` finds no difference and a search counts what a
# clean load of the same lines counts.
#
# Without apt's lists (no Debian catalog can be built) the committed
# 400-package sample stands in, and the test says so.
#
# NOT in ctest yet (named soak_*, not test_*): it finds an open bug.  On
# tmpfs, about one run in three ends with a database that crash recovery
# left damaged (postings.db: "corrupt term header", "DB_PAGE_NOTFOUND",
# "multiple databases specified but not supported by file"; kvfts check
# reports missing entries), first seen after the documents moved to
# internal-id keys (commit ecb758f); the code before it passed 11 runs of
# 11.  It becomes an e2e test (rename to test_resume.sh) with the fix.
# Run it by hand:
#   KVFTS_BIN=build/kvfts KVFTS_SOURCE_DIR=$PWD TMPDIR=/dev/shm \
#       bash tests/e2e/soak_resume.sh
# KVFTS_E2E_SEED fixes the random kill times (printed on each run).
. "$(dirname "$0")/lib.sh"

KILLS=50
BATCH=250
LINES=20000
WINDOW=580        # kill 20 .. 20 + WINDOW ms after the start
SRC="$T_DIR/catalog.jsonl"
src_dir=$KVFTS_SOURCE_DIR
if [ -s "$src_dir/bench/data/debian.jsonl" ]; then
    head -n $LINES "$src_dir/bench/data/debian.jsonl" >"$SRC"
elif KVFTS_BIN=$KVFTS_BIN bash "$src_dir/tools/debian-corpus.sh" \
        "$T_DIR/full.jsonl" 2>"$T_DIR/corpus.err"; then
    head -n $LINES "$T_DIR/full.jsonl" >"$SRC"
else
    echo "$T_NAME: no Debian catalog here ($(tail -1 "$T_DIR/corpus.err")):" \
         "using the 400-package sample" >&2
    cp "$src_dir/tests/data/tok_debian_sample.jsonl" "$SRC"
    BATCH=5
    WINDOW=60
fi
TOTAL=$(wc -l <"$SRC")
check "corpus has lines" [ "$TOTAL" -gt 0 ]
# The key of line I (1-based): pkg::<package>.
awk '{ if (match($0, /"package": ?"[^"]*"/)) {
           s = substr($0, RSTART, RLENGTH); sub(/"package": ?"/, "", s)
           sub(/"$/, "", s); print "pkg::" s } else print "?" }' \
    "$SRC" >"$T_DIR/keys.txt"
expect_eq "a key per line" "$(grep -c '^pkg::' "$T_DIR/keys.txt")" "$TOTAL"
expect_eq "keys are unique" "$(sort -u "$T_DIR/keys.txt" | wc -l)" "$TOTAL"

SEED=${KVFTS_E2E_SEED:-$$}
RANDOM=$SEED
echo "$T_NAME: seed $SEED (set KVFTS_E2E_SEED to repeat), $TOTAL lines," \
     "$KILLS kills" >&2

DB="$T_DIR/db"
expect_exit 0 kv init "$DB"
export KVFTS_DB="$DB"
key_of() { sed -n "${1}p" "$T_DIR/keys.txt"; }

# The stored documents are exactly lines 1..D, D a whole number of batches.
verify_prefix() {
    local what=$1 d
    run kv stats
    [ "$RC" = 0 ] || fail "$what: kvfts stats: exit $RC: $ERR"
    d=$(json_num documents)
    if [ $((d % BATCH)) != 0 ] && [ "$d" != "$TOTAL" ]; then
        fail "$what: $d documents: not a whole number of $BATCH-line batches"
    fi
    if [ "$d" -gt 0 ]; then
        expect_exit 0 kv get "$(key_of "$d")"
    fi
    if [ "$d" -lt "$TOTAL" ]; then
        expect_exit 3 kv get "$(key_of $((d + 1)))"
    fi
    D=$d
}

kills=0 finished=0 prev=0 i=0
# Until KILLS kills have landed in a running load (a load that finished
# first starts the database over); at most 3 * KILLS tries.
while [ $kills -lt $KILLS ] && [ $i -lt $((3 * KILLS)) ]; do
    i=$((i + 1))
    # The binary itself, not the kv function: $! must be the loader.
    "$KVFTS_BIN" load "$SRC" --key 'pkg::{package}' --resume --batch $BATCH \
        --quiet >"$T_DIR/load.out" 2>"$T_DIR/load.err" &
    pid=$!
    track_pid $pid
    # From before the first commit to well into the load.
    sleep "0.$(printf '%03d' $((20 + RANDOM % WINDOW)))"
    if kill -KILL $pid 2>/dev/null; then
        kills=$((kills + 1))
    fi
    wait $pid 2>/dev/null
    verify_prefix "after kill $i"
    [ "$D" -ge "$prev" ] || fail "after kill $i: $D documents, $prev before"
    prev=$D
    if [ "$D" = "$TOTAL" ]; then
        finished=$((finished + 1))
        # Start over so that the next kills land in a load.
        expect_exit 0 rm -rf "$DB"
        expect_exit 0 kv init "$DB"
        prev=0
    fi
done
echo "$T_NAME: $kills loads killed, $finished finished before the kill" >&2
check "$KILLS kills landed in a running load" [ "$kills" = "$KILLS" ]

# Resume to the end.
expect_exit 0 kv load "$SRC" --key 'pkg::{package}' --resume --batch $BATCH \
    --quiet
got_loaded=$(json_num loaded)
got_existing=$(json_num existing)
expect_eq "resumed: loaded + existing = lines" \
    $((got_loaded + got_existing)) "$TOTAL"
verify_prefix "after the last resume"
expect_eq "every line stored" "$D" "$TOTAL"
expect_exit 0 kv check
expect_eq "check: no difference" "$(json_num differences)" 0

# Every stored document equals its source line (both normalised by jq).
paste -d '\t' "$T_DIR/keys.txt" "$SRC" | awk -F '\t' 'NR % 7 == 1' \
    >"$T_DIR/sample.tsv"
cut -f1 "$T_DIR/sample.tsv" | xargs "$KVFTS_BIN" get >"$T_DIR/got.jsonl" ||
    fail "multi-get of the sample failed"
jq -c -R 'split("\t") | {key: .[0], doc: (.[1] | fromjson)}' \
    "$T_DIR/sample.tsv" >"$T_DIR/want.jsonl" || fail "jq on the source failed"
jq -c '{key, doc}' "$T_DIR/got.jsonl" >"$T_DIR/got-nocas.jsonl" ||
    fail "jq on the stored documents failed"
expect_eq "documents compared" "$(wc -l <"$T_DIR/got-nocas.jsonl")" \
    "$(wc -l <"$T_DIR/sample.tsv")"
cmp -s "$T_DIR/want.jsonl" "$T_DIR/got-nocas.jsonl" ||
    fail "stored documents differ from their lines: diff $T_DIR/want.jsonl $T_DIR/got-nocas.jsonl"
pass

# The index matches a clean load of the same lines.
CLEAN="$T_DIR/clean"
expect_exit 0 kv init "$CLEAN"
expect_exit 0 kv -d "$CLEAN" load "$SRC" --key 'pkg::{package}' --quiet
for q in library 'python OR perl' '"command line"' 'lib*' 'game -data'; do
    run kv search "$q" --count
    got="$RC $OUT"
    run kv -d "$CLEAN" search "$q" --count
    expect_eq "count of '$q' equals a clean load's" "$got" "$RC $OUT"
done
finish
