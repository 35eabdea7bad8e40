#!/usr/bin/env bash
# e2e.reader_kill -- readers killed with SIGKILL while a load runs: the
# load finishes, and the readers that are not killed never fail.
#
# A corpus is loaded in batches of 1,000 (`kvfts load --auto item`, with
# analysis worker threads) while three processes search it in a loop
# (kvfts_test_helper search: each search one snapshot, checked against the
# whole batches it may see; see tests/e2e/test_readers.sh) and, one after
# another, victims start and are SIGKILLed a random 5..150 ms later: a
# helper searching in a loop, `kvfts search` of every key (a long
# snapshot), `kvfts check` (a snapshot of everything, read for long).  A
# victim dies holding whatever it held: a read transaction, page and
# mutex locks, its slot in the environment.  Rounds (a fresh database
# each) go on until KILLS victims have died mid-run.  Then:
#   - the loader exits 0 having loaded every line;
#   - every surviving reader exits 0, did searches, none failed, and its
#     last snapshot held the whole corpus;
#   - the counter, the documents and `kvfts check` are exact, and a new
#     reader searches without error.
# Last, an optimize with a victim killed during it: it finishes too.  A
# load or reader still running after LIMIT seconds fails the test, with
# where each process waits (a hang is the failure this test looks for).
#
# KVFTS_E2E_SEED fixes the random kill times (printed on each run).
. "$(dirname "$0")/lib.sh"

: "${KVFTS_TEST_HELPER:?KVFTS_TEST_HELPER must name kvfts_test_helper}"

KILLS=20          # victims killed mid-run, over all rounds
TOTAL=60000       # the helper's corpus (batches of 1000)
BATCH=1000
READERS=3
export KVFTS_WORKERS=2
# Under LeakSanitizer: Berkeley DB loses a few of its own allocations on
# its paths for an environment panicked under a call (tools/lsan.supp says
# which, and why they are suppressed here only).
if [ "${KVFTS_E2E_SANITIZED:-0}" = 1 ]; then
    export LSAN_OPTIONS="suppressions=$KVFTS_SOURCE_DIR/tools/lsan.supp"
fi

SEED=${KVFTS_E2E_SEED:-$$}
RANDOM=$SEED
echo "$T_NAME: seed $SEED (set KVFTS_E2E_SEED to repeat)" >&2

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

sleep_ms() { sleep "$(($1 / 1000)).$(printf '%03d' $(($1 % 1000)))"; }

# victim K: start victim kind K % 3 in the background; VICTIM its pid
# (the program's own: each is started by `&` directly, not in a subshell).
victim() {
    case $(($1 % 3)) in
    0) "$KVFTS_TEST_HELPER" search "$KVFTS_DB" 300 $TOTAL >/dev/null 2>&1 & ;;
    1) "$KVFTS_BIN" search common --limit 0 --keys >/dev/null 2>&1 & ;;
    *) "$KVFTS_BIN" check >/dev/null 2>&1 & ;;
    esac
    VICTIM=$!
    track_pid $VICTIM
}

# stuck WHAT PID...: fail, saying where each process PID waits (a load
# that alone takes seconds has not ended in LIMIT seconds).
stuck() {
    local what=$1 p d=()
    shift
    for p in "$@"; do
        if [ -d "/proc/$p" ]; then
            d+=("pid $p: $({ tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | cut -c1-100)"
                "  state $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null), waiting in $(cat "/proc/$p/wchan" 2>/dev/null)")
        else
            d+=("pid $p: ended")
        fi
    done
    fail "$what" "${d[@]}"
}

LIMIT=120         # seconds: a load of TOTAL lines takes a few alone

# kill_victims PID: while PID runs, start victims and kill each 5..150 ms
# later; counts those that were still running in KILLED.  Fails if PID
# runs for more than LIMIT seconds.
kill_victims() {
    local until=$(($(now_ms) + LIMIT * 1000))
    while kill -0 "$1" 2>/dev/null; do
        [ "$(now_ms)" -lt $until ] ||
            stuck "round $round: the load has not ended in $LIMIT s with readers killed around it" \
                "$1" "${RPIDS[@]}"
        victim $((RANDOM))
        sleep_ms $((5 + RANDOM % 146))
        kill_child $VICTIM && KILLED=$((KILLED + 1))
        wait $VICTIM 2>/dev/null
    done
}

# wait_bounded PID: wait for PID (RC: its exit status), at most LIMIT s.
wait_bounded() {
    local until=$(($(now_ms) + LIMIT * 1000))
    while kill -0 "$1" 2>/dev/null; do
        [ "$(now_ms)" -lt $until ] || stuck "pid $1 has not ended in $LIMIT s" "$@"
        sleep 0.1
    done
    wait "$1"
    RC=$?
}

KILLED=0
round=0
t0=$(now_ms)
while [ $KILLED -lt $KILLS ]; do
    round=$((round + 1))
    [ $round -le 6 ] || fail "$KILLED victims killed in 6 rounds: the loads end too soon"
    new_db "r$round"
    RPIDS=()
    for r in $(seq $READERS); do
        "$KVFTS_TEST_HELPER" search "$KVFTS_DB" 300 $TOTAL \
            >"$T_DIR/reader$r.out" 2>"$T_DIR/reader$r.err" &
        RPIDS+=($!)
        track_pid $!
    done
    before=$KILLED
    "$KVFTS_BIN" load "$SRC" --auto item --batch $BATCH --quiet \
        >"$T_DIR/load.out" 2>"$T_DIR/load.err" &
    LOADER=$!
    track_pid $LOADER
    kill_victims $LOADER
    wait $LOADER
    rc=$?
    [ $rc = 0 ] || fail "round $round: the loader exited $rc while readers were killed" \
        "$(cat "$T_DIR/load.err")"
    pass
    [[ "$(cat "$T_DIR/load.out")" == *"\"loaded\":$TOTAL,"* ]] ||
        fail "round $round: load summary: $(cat "$T_DIR/load.out")"
    pass
    for r in $(seq $READERS); do
        wait_bounded "${RPIDS[$((r - 1))]}"
        rc=$RC
        [ $rc = 0 ] || fail "round $round: reader $r exited $rc" \
            "$(head -n 5 "$T_DIR/reader$r.err")"
        line=$(cat "$T_DIR/reader$r.out")
        [[ "$line" =~ ^searches\ ([0-9]+)\ midload\ [0-9]+\ last\ ([0-9]+)\  ]] ||
            fail "round $round: reader $r printed '$line'"
        [ "${BASH_REMATCH[1]}" -gt 0 ] || fail "round $round: reader $r did no search"
        [ "${BASH_REMATCH[2]}" = $TOTAL ] ||
            fail "round $round: reader $r did not see the whole load: $line"
        pass
    done
    echo "$T_NAME: round $round: $((KILLED - before)) readers killed during the load;" \
         "reader 1: $(cat "$T_DIR/reader1.out")" >&2
    expect_exit 0 kv get count::item
    expect_stdout "{\"key\":\"count::item\",\"value\":$TOTAL}"
    expect_exit 0 kv stats
    expect_eq "round $round: documents" "$(json_num documents)" $TOTAL
    expect_exit 0 kv check
    expect_stdout_contains '"ok":true,"differences":0'
    expect_exit 0 kv search 'w3 v5' --count
    expect_stdout "{\"total\":$(( (TOTAL - 38) / 77 + 1 ))}"
done
echo "$T_NAME: $KILLED readers killed during $round loads, $(($(now_ms) - t0)) ms" >&2

# An optimize while a reader is killed: it finishes, and so does a reader.
"$KVFTS_TEST_HELPER" search "$KVFTS_DB" 300 $TOTAL >"$T_DIR/reader1.out" \
    2>"$T_DIR/reader1.err" &
READER=$!
track_pid $READER
victim 0
sleep_ms 50
"$KVFTS_BIN" optimize >"$T_DIR/opt.out" 2>"$T_DIR/opt.err" &
OPT=$!
track_pid $OPT
sleep_ms $((RANDOM % 50))
kill_child $VICTIM
wait $VICTIM 2>/dev/null
wait_bounded $OPT $READER
rc=$RC
[ $rc = 0 ] || fail "optimize exited $rc after a reader was killed" "$(cat "$T_DIR/opt.err")"
pass
wait_bounded $READER
rc=$RC
[ $rc = 0 ] || fail "a reader during optimize exited $rc" "$(head -n 5 "$T_DIR/reader1.err")"
pass
expect_exit 0 kv stats
expect_eq "segments after optimize" "$(json_num segments)" 1
expect_exit 0 kv check
expect_stdout_contains '"ok":true,"differences":0'
finish
