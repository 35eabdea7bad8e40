#!/usr/bin/env bash
# e2e.crashpoints -- crash safety at the file operations themselves.  A
# keyed load of catalog packages dies by SIGKILL at a chosen call of the
# ones that change files (tests/e2e/crashpoint.c, preloaded): the Nth
# rename, unlink, create, pwrite (a page), write (the log), fsync or
# ftruncate, just before or just after it, N at random; then resumed.  The
# kinds take turns, so every one is hit several times.  Random kill times
# (e2e.resume) land mostly in computation; these land between the steps of
# a segment file's making (a temporary name, then a rename), of its
# removal (renamed aside, then unlinked), of a log record's write and of a
# checkpoint.  After each death, as in e2e.resume: the database opens
# (recovery), holds exactly the first whole batches of the file, and
# `kvfts check` finds no difference; at the end every line is stored and
# searches count what a clean load counts.
#
# Loads use batches of 100 and merge steps of 64 KiB, so that a few
# thousand documents make dozens of segments, merges in many steps, and
# segment files made and removed.  KVFTS_E2E_SEED repeats a run's choices.
. "$(dirname "$0")/lib.sh"
: "${KVFTS_CRASHPOINT_LIB:?KVFTS_CRASHPOINT_LIB must name the crashpoint library}"

POINTS=42
[ "${KVFTS_E2E_SANITIZED:-0}" = 1 ] && POINTS=14
BATCH=100
LINES=6000
SRC="$T_DIR/catalog.jsonl"
SAMPLE=0
catalog_lines $LINES "$SRC" || { BATCH=10 SAMPLE=1; }
TOTAL=$(wc -l <"$SRC")
catalog_keys "$SRC" "$T_DIR/keys.txt"
expect_eq "a unique key per line" "$(sort -u "$T_DIR/keys.txt" | grep -c '^pkg::')" \
    "$TOTAL"

SEED=${KVFTS_E2E_SEED:-$$}
RANDOM=$SEED
echo "$T_NAME: seed $SEED (set KVFTS_E2E_SEED to repeat), $TOTAL lines," \
     "$POINTS crash points" >&2

DB="$T_DIR/db"
export KVFTS_DB="$DB" KVFTS_MERGE_STEP_KB=64
expect_exit 0 kv init "$DB"

# Whole batches (catalog_prefix), and check finds nothing.
verify() {
    local what=$1
    catalog_prefix "$what"
    run kv check
    [ "$RC" = 0 ] || fail "$what: kvfts check: exit $RC: $OUT $ERR"
    pass
}

kinds=(rename unlink create pwrite write fsync truncate)
# Calls of each kind in a whole load here, about (a resumed one makes
# fewer; an N past them lets the load finish).
most=(8 20 60 1500 40 150 3)
# The 400-package sample makes far fewer (a tenth of the pages, no segment
# file of its own).
[ $SAMPLE = 1 ] && most=(2 6 10 150 6 20 1)
# ASan's runtime must come first among the libraries; the preload goes
# before it (it only forwards the calls).
asan=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
died=0 prev=0
tally=(0 0 0 0 0 0 0)
for ((i = 0; i < POINTS; i++)); do
    k=$((i % ${#kinds[@]}))
    at=${kinds[$k]}
    when=before
    [ $(((i / ${#kinds[@]}) % 2)) = 1 ] && when=after
    n=$((1 + RANDOM % ${most[$k]}))
    what="point $((i + 1)) ($when $at $n)"
    ASAN_OPTIONS=$asan LD_PRELOAD=$KVFTS_CRASHPOINT_LIB KVFTS_CRASH_AT=$at \
        KVFTS_CRASH_N=$n KVFTS_CRASH_WHEN=$when \
        "$KVFTS_BIN" load "$SRC" --key 'pkg::{package}' --resume \
        --batch $BATCH --quiet >"$T_DIR/load.out" 2>"$T_DIR/load.err"
    rc=$?
    case $rc in
    137) died=$((died + 1)) tally[k]=$((tally[k] + 1)) ;;
    0) ;;
    *) fail "$what: the load exited $rc" "$(cat "$T_DIR/load.err")" ;;
    esac
    verify "after $what"
    [ "$D" -ge "$prev" ] || fail "after $what: $D documents, $prev before"
    prev=$D
    if [ "$D" = "$TOTAL" ]; then
        expect_exit 0 rm -rf "$DB"
        expect_exit 0 kv init "$DB"
        prev=0
    fi
done
per=""
for ((k = 0; k < ${#kinds[@]}; k++)); do
    per+=" ${kinds[$k]} ${tally[$k]}"
done
echo "$T_NAME: $died of $POINTS loads died at their point (${per# }), 0" \
     "documents lost" >&2
need=$((POINTS / 3))    # about two in three die: 3 (ASan, 14) to 4.5 sd above
[ $SAMPLE = 1 ] && need=1
check "loads died at their point ($died of $POINTS, at least $need)" \
    [ "$died" -ge "$need" ]

# Resume to the end; the index equals a clean load's.
expect_exit 0 kv load "$SRC" --key 'pkg::{package}' --resume --batch $BATCH \
    --quiet
verify "after the last resume"
expect_eq "every line stored" "$D" "$TOTAL"
catalog_counts_clean "$SRC"
finish
