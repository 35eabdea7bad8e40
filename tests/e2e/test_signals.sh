#!/usr/bin/env bash
# e2e.signals -- commands ended by a signal do not take a load in another
# process down with them.  A process that dies with the database open
# counts as crashed, and the next process to open it runs recovery, which
# fails every other process using the database; so the kvfts command holds
# SIGINT, SIGTERM, SIGHUP and SIGQUIT while it runs and ignores SIGPIPE.
# While a load runs: searches interrupted (SIGINT, SIGTERM) and range reads
# piped into `head` (SIGPIPE) -- the load finishes, every document stored,
# and `kvfts check` passes.  Then a load ended by SIGTERM stops at a line
# boundary, commits what it read, says so, and dies by the signal.
. "$(dirname "$0")/lib.sh"

TOTAL=250000
SRC="$T_DIR/src.jsonl"
awk -v n=$TOTAL 'BEGIN {
    for (i = 1; i <= n; i++)
        printf "{\"n\":%d,\"text\":\"w%d x%d common\"}\n", i, i % 7, i % 11
}' >"$SRC"
new_db sig

"$KVFTS_BIN" load "$SRC" --auto item --batch 1000 --quiet \
    >"$T_DIR/load.out" 2>"$T_DIR/load.err" &
LOADER=$!
track_pid $LOADER
ended=0 during=0
for i in $(seq 60); do
    kill -0 $LOADER 2>/dev/null || break
    # Ended 1-12 ms after they start: in opening, searching or closing
    # (a command takes about 10 ms).
    t="0.$(printf '%03d' $((1 + RANDOM % 12)))"
    timeout -s INT "$t" "$KVFTS_BIN" search 'common OR w3' --limit 500 \
        >/dev/null 2>&1
    rc=$?
    [ $rc = 124 ] && ended=$((ended + 1))
    timeout -s TERM "$t" "$KVFTS_BIN" get --range item 1..2000 \
        >/dev/null 2>&1
    [ $? = 124 ] && ended=$((ended + 1))
    # The reader of a pipe that goes away: SIGPIPE, exit 141, silently.
    "$KVFTS_BIN" search common --limit 2000 2>"$T_DIR/pipe.err" | head -c 1 \
        >/dev/null
    rc=${PIPESTATUS[0]}
    if [ "$rc" != 141 ] && [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
        fail "search into a closed pipe: exit $rc" "$(cat "$T_DIR/pipe.err")"
    fi
    [ -s "$T_DIR/pipe.err" ] &&
        fail "search into a closed pipe printed: $(cat "$T_DIR/pipe.err")"
    during=$((during + 1))
done
wait $LOADER
rc=$?
[ $rc = 0 ] || fail "the load failed (exit $rc) while other commands were" \
    "ended by signals" "$(cat "$T_DIR/load.err")"
pass
echo "$T_NAME: $during rounds during the load, $ended commands ended by" \
     "SIGINT/SIGTERM" >&2
check "commands were ended by signals during the load" [ "$ended" -gt 0 ]
expect_exit 0 kv stats
expect_eq "documents" "$(json_num documents)" $TOTAL
expect_exit 0 kv check
expect_eq "check: differences" "$(json_num differences)" 0

# A load ended by SIGTERM: it commits the lines it read and stops.
new_db term
"$KVFTS_BIN" load "$SRC" --auto item --batch 1000 --quiet \
    >"$T_DIR/load.out" 2>"$T_DIR/load.err" &
LOADER=$!
track_pid $LOADER
for _ in $(seq 600); do
    run kv get count::item
    [ "$RC" = 0 ] && [ "$(json_num value)" -ge 3000 ] && break
    sleep 0.05
done
kill -TERM $LOADER
wait $LOADER
rc=$?
expect_eq "a load ended by SIGTERM dies by it" "$rc" 143
grep -q '"interrupted":true' "$T_DIR/load.out" ||
    fail "no \"interrupted\" in the summary: $(cat "$T_DIR/load.out")"
grep -q "load: interrupted at" "$T_DIR/load.err" ||
    fail "no interruption message: $(cat "$T_DIR/load.err")"
pass
L=$(json_num loaded "$(cat "$T_DIR/load.out")")
expect_exit 0 kv stats
expect_eq "documents after SIGTERM = loaded" "$(json_num documents)" "$L"
expect_exit 0 kv check
expect_eq "check after SIGTERM" "$(json_num differences)" 0
finish
