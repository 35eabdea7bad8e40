#!/usr/bin/env bash
# e2e.crash -- a loader killed with SIGKILL in the middle of a load: the
# database reopens (recovery), holds only whole batches (the counter and the
# documents agree, a multiple of the batch size), and every stored document
# equals its source line.  Then readers while a writer loads: the helper
# reading snapshots and the command's range reads see no error and no torn
# or partial batch.
#
# KVFTS_E2E_SEED fixes the random kill times (printed on each run).
. "$(dirname "$0")/lib.sh"

: "${KVFTS_TEST_HELPER:?KVFTS_TEST_HELPER must name kvfts_test_helper}"

TOTAL=200000      # ~8 s to load in a Debug build: every kill is mid-load
BATCH=1000
SRC="$T_DIR/big.jsonl"
# Line I: {"n":I,"len":L,"pad":"<L x>"} -- the shape the helper checks.
awk -v n=$TOTAL 'BEGIN {
    for (i = 1; i <= n; i++) {
        l = i % 23; p = ""
        for (j = 0; j < l; j++) p = p "x"
        printf "{\"n\":%d,\"len\":%d,\"pad\":\"%s\"}\n", i, l, p
    }
}' >"$SRC"
expect_eq "generated lines" "$(wc -l <"$SRC")" $TOTAL

SEED=${KVFTS_E2E_SEED:-$$}
RANDOM=$SEED
echo "$T_NAME: seed $SEED (set KVFTS_E2E_SEED to repeat)" >&2

strip_cas() { sed 's/^\({"key":"[^"]*"\),"cas":[0-9]*,/\1,/'; }
ndocs() { kv stats | sed -n 's/.*"documents":\([0-9]*\).*/\1/p'; }
read_counter() {   # CNT = count::item, 0 if the counter does not exist
    local l
    l=$(kv get count::item 2>&1)
    case $? in
    0) CNT=$(json_num value "$l") ;;
    3) CNT=0 ;;
    *) fail "get count::item failed: $l" ;;
    esac
}

# verify_prefix WHAT: the database holds exactly item::1..C, C = count::item
# a multiple of BATCH (or TOTAL), each equal to source line I.  Sets C.
verify_prefix() {
    local what=$1
    expect_exit 0 kv stats
    read_counter
    C=$CNT
    local d
    d=$(ndocs)
    expect_eq "$what: documents = count::item" "$d" "$C"
    if [ $((C % BATCH)) != 0 ] && [ "$C" != $TOTAL ]; then
        fail "$what: $C documents stored: not a whole number of $BATCH-document batches"
    fi
    pass
    # Killed before its first commit (a loaded machine): no counter, and
    # get --range has nothing to read (it says the counter is missing).
    if [ "$C" = 0 ]; then
        : >"$T_DIR/got.txt"
    else
        kv get --range item 1.. | strip_cas >"$T_DIR/got.txt" ||
            fail "$what: get --range item 1.. failed"
    fi
    awk -v c="$C" 'NR <= c { printf "{\"key\":\"item::%d\",\"doc\":%s}\n", NR, $0 }' \
        "$SRC" >"$T_DIR/want.txt"
    cmp -s "$T_DIR/want.txt" "$T_DIR/got.txt" ||
        fail "$what: stored documents differ from the source lines" \
            "$(diff "$T_DIR/want.txt" "$T_DIR/got.txt" | head -n 10)"
    pass
    # The index holds exactly the committed documents too.
    expect_exit 0 kv check
    expect_stdout_contains '"ok":true,"differences":0'
    kv term n 1 >"$T_DIR/term.txt" 2>/dev/null || true
    if [ "$C" -ge 1 ]; then
        grep -q '"count":1,' "$T_DIR/term.txt" ||
            fail "$what: fts::n::1 should hold item::1" "$(cat "$T_DIR/term.txt")"
    fi
    pass
}

# wait_committed MIN: poll until count::item >= MIN (a batch committed) or
# the loader ended; bounded.
wait_committed() {
    for _ in $(seq 600); do
        read_counter
        [ "$CNT" -ge "$1" ] && return 0
        kill -0 "$LOADER" 2>/dev/null || return 0
        sleep 0.05
    done
    fail "no batch committed within 30 s"
}

MIDLOAD=0
for it in 1 2 3 4 5; do
    new_db "crash$it"
    # Kill times spread over 0.2-1.0 s, randomly.
    ms=$((200 + (it - 1) * 160 + RANDOM % 161))
    "$KVFTS_BIN" load "$SRC" --auto item --batch $BATCH --quiet \
        >"$T_DIR/load.out" 2>"$T_DIR/load.err" &
    LOADER=$!
    track_pid $LOADER
    how="${ms} ms after start"
    if [ $it -ge 4 ]; then
        # Make sure some batches are committed before the kill.
        wait_committed $BATCH
        how="${ms} ms after the first commit"
    fi
    sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
    kill_child $LOADER
    wait $LOADER 2>/dev/null
    rc=$?
    if [ $rc = 137 ]; then
        :
    elif [ $rc = 0 ]; then
        echo "$T_NAME: iteration $it: the load finished before the kill" >&2
    else
        fail "iteration $it: loader exited $rc before the kill" "$(cat "$T_DIR/load.err")"
    fi
    pass
    # Reopen: recovery, then the invariants.
    verify_prefix "iteration $it (killed $how)"
    echo "$T_NAME: iteration $it: killed $how: $C documents survived" >&2
    [ "$C" -gt 0 ] && [ "$C" -lt $TOTAL ] && MIDLOAD=$((MIDLOAD + 1))
    # The recovered database takes writes, and the counter goes on.
    expect_exit 0 kv put --auto item "{\"n\":$((C + 1)),\"len\":0,\"pad\":\"\"}"
    expect_stdout "{\"key\":\"item::$((C + 1))\",\"cas\":$(json_num cas)}"
    expect_exit 0 kv get count::item
    expect_stdout "{\"key\":\"count::item\",\"value\":$((C + 1))}"
done
[ $MIDLOAD -gt 0 ] || fail "no kill happened in the middle of a load"
pass

# A second kill of a load into a database that has already been recovered
# once (appending to what survived).
new_db twice
"$KVFTS_BIN" load "$SRC" --auto item --batch $BATCH --quiet >/dev/null 2>&1 &
LOADER=$!
track_pid $LOADER
wait_committed $BATCH
kill_child $LOADER
wait $LOADER 2>/dev/null
verify_prefix "first kill"
C1=$C
# Load the lines after C1 so item::I keeps holding line I.
tail -n +$((C1 + 1)) "$SRC" >"$T_DIR/rest.jsonl"
"$KVFTS_BIN" load "$T_DIR/rest.jsonl" --auto item --batch $BATCH --quiet >/dev/null 2>&1 &
LOADER=$!
track_pid $LOADER
wait_committed $((C1 + BATCH))
sleep 0.3
kill_child $LOADER
wait $LOADER 2>/dev/null
verify_prefix "second kill"
[ "$C" -gt "$C1" ] || fail "second load committed nothing ($C1 -> $C)"
pass

# --- readers while a writer loads.
READ_N=120000     # ~4 s to load in a Debug build, longer than the reader
head -n $READ_N "$SRC" >"$T_DIR/read.jsonl"
new_db rw
"$KVFTS_BIN" load "$T_DIR/read.jsonl" --auto item --batch $BATCH --quiet \
    >"$T_DIR/load.out" 2>"$T_DIR/load.err" &
LOADER=$!
track_pid $LOADER
"$KVFTS_TEST_HELPER" read "$KVFTS_DB" item 3 >"$T_DIR/reader.out" 2>"$T_DIR/reader.err" &
READER=$!
track_pid $READER
# Meanwhile the command reads too: each range read is one snapshot of whole
# batches, every document equal to its line.
reads=0
while kill -0 $READER 2>/dev/null && [ $reads -lt 20 ]; do
    kv get --range item 1.. >"$T_DIR/snap.txt" 2>"$T_DIR/snap.err"
    rc=$?
    # Before the first commit there is no counter to end the range: exit 3.
    if [ $rc = 3 ] && grep -q "count::item" "$T_DIR/snap.err"; then
        : >"$T_DIR/snap.txt"
    elif [ $rc != 0 ]; then
        fail "get --range during the load exited $rc" "$(cat "$T_DIR/snap.err")"
    fi
    k=$(wc -l <"$T_DIR/snap.txt")
    if [ $((k % BATCH)) != 0 ] && [ "$k" != $READ_N ]; then
        fail "a reader saw $k documents: part of a batch"
    fi
    strip_cas <"$T_DIR/snap.txt" >"$T_DIR/got.txt"
    awk -v c="$k" 'NR <= c { printf "{\"key\":\"item::%d\",\"doc\":%s}\n", NR, $0 }' \
        "$T_DIR/read.jsonl" >"$T_DIR/want.txt"
    cmp -s "$T_DIR/want.txt" "$T_DIR/got.txt" ||
        fail "a reader during the load saw documents unlike their lines" \
            "$(diff "$T_DIR/want.txt" "$T_DIR/got.txt" | head -n 10)"
    reads=$((reads + 1))
done
wait $READER
rc=$?
[ $rc = 0 ] || fail "reader exited $rc during the load" "$(cat "$T_DIR/reader.err")"
pass
overlap="the load was still running when the reader finished"
kill -0 $LOADER 2>/dev/null || overlap="the load finished before the reader"
echo "$T_NAME: reader: $(cat "$T_DIR/reader.out") (snapshots docs); $reads range reads; $overlap" >&2
wait $LOADER 2>/dev/null
rc=$?
[ $rc = 0 ] || fail "loader exited $rc with a reader running" "$(cat "$T_DIR/load.err")"
pass
[[ "$(cat "$T_DIR/load.out")" == *"\"loaded\":$READ_N,"* ]] ||
    fail "load summary: $(cat "$T_DIR/load.out")"
pass
verify_prefix "after the load with readers"
expect_eq "documents after the load with readers" "$C" $READ_N

finish
