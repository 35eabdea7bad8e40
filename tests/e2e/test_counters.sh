#!/usr/bin/env bash
# e2e.counters -- counters (incr with default, positive and negative deltas,
# --initial, overflow), count::NAME reads, auto keys (put --auto) and range
# multi-gets that skip missing documents; and two processes incrementing
# one counter 10,000 times each end at exactly 20,000.
. "$(dirname "$0")/lib.sh"

: "${KVFTS_TEST_HELPER:?KVFTS_TEST_HELPER must name kvfts_test_helper}"

new_db db

# --- incr: a missing counter starts at 0; default delta 1.
expect_exit 3 kv get count::c
expect_stdout '{"key":"count::c","error":"not found"}'
expect_exit 0 kv incr c
expect_stdout '{"counter":"count::c","value":1}'
expect_exit 0 kv incr c 5
expect_stdout '{"counter":"count::c","value":6}'
expect_exit 0 kv incr c -3
expect_stdout '{"counter":"count::c","value":3}'
expect_exit 0 kv incr c -10
expect_stdout '{"counter":"count::c","value":-7}'
expect_exit 0 kv incr c 0
expect_stdout '{"counter":"count::c","value":-7}'
expect_exit 0 kv get count::c
expect_stdout '{"key":"count::c","value":-7}'
expect_error 2 "" kv incr c notanumber
expect_exit 0 kv get count::c
expect_stdout '{"key":"count::c","value":-7}'

# --- --initial: creates the counter holding N; ignored once it exists.
expect_exit 0 kv incr d --initial 100
expect_stdout '{"counter":"count::d","value":100}'
expect_exit 0 kv incr d --initial 100
expect_stdout '{"counter":"count::d","value":101}'
expect_exit 0 kv incr d 10 --initial 5
expect_stdout '{"counter":"count::d","value":111}'
# A negative initial value.
expect_exit 0 kv incr neg --initial -5
expect_stdout '{"counter":"count::neg","value":-5}'
expect_exit 0 kv incr neg -1
expect_stdout '{"counter":"count::neg","value":-6}'

# --- multi-get of counters and documents together, in request order.
expect_exit 3 kv get count::d count::nope count::c
expect_stdout '{"key":"count::d","value":111}
{"key":"count::nope","error":"not found"}
{"key":"count::c","value":-7}'

# --- overflow: refused as bad input, value unchanged (both directions).
MAX=9223372036854775807
MIN=-9223372036854775808
expect_exit 0 kv incr big --initial $MAX
expect_stdout "{\"counter\":\"count::big\",\"value\":$MAX}"
expect_error 2 "overflow" kv incr big
expect_exit 0 kv get count::big
expect_stdout "{\"key\":\"count::big\",\"value\":$MAX}"
expect_error 2 "overflow" kv incr big $MAX
expect_exit 0 kv get count::big
expect_stdout "{\"key\":\"count::big\",\"value\":$MAX}"
expect_exit 0 kv incr small --initial=$MIN
expect_stdout "{\"counter\":\"count::small\",\"value\":$MIN}"
expect_error 2 "overflow" kv incr small -1
expect_exit 0 kv get count::small
expect_stdout "{\"key\":\"count::small\",\"value\":$MIN}"

# --- put --auto: keys PREFIX::1, ::2, ... from count::PREFIX.
for i in 1 2 3 4; do
    expect_exit 0 kv put --auto user "{\"i\":$i}"
    [[ "$OUT" == "{\"key\":\"user::$i\",\"cas\":"* ]] ||
        fail "put --auto #$i did not make user::$i"
    pass
done
expect_exit 0 kv get count::user
expect_stdout '{"key":"count::user","value":4}'
# A rejected document does not use up a number.
expect_exit 2 kv put --auto user '{"bad":'
expect_exit 0 kv get count::user
expect_stdout '{"key":"count::user","value":4}'
expect_exit 0 kv del user::2

# Expected range output, built from the documents we wrote.
range_line() {   # range_line I: the get line of user::I
    kv get "user::$1" | sed -n '1p'
}
L1=$(range_line 1); L3=$(range_line 3); L4=$(range_line 4)
[[ "$L1" == '{"key":"user::1","cas":'*',"doc":{"i":1}}' ]] || fail "get user::1: $L1"
pass

# FIRST.. : up to the counter's value, skipping the deleted one, exit 0.
expect_exit 0 kv get --range user 1..
expect_stdout "$L1
$L3
$L4"
expect_exit 0 kv get --range user 2..3
expect_stdout "$L3"
expect_exit 0 kv get --range user 2..2
expect_stdout ""
expect_exit 0 kv get --range user 3..10
expect_stdout "$L3
$L4"
# --auto after a delete continues from the counter, never reusing user::2.
expect_exit 0 kv put --auto user '{"i":5}'
[[ "$OUT" == '{"key":"user::5","cas":'* ]] || fail "put --auto after del: $OUT"
pass
expect_exit 3 kv get user::2
expect_error 2 "" kv get --range user 1-3

# --- concurrency: two processes, 10,000 increments each, one counter.
N=10000
t0=$(now_ms)
"$KVFTS_TEST_HELPER" incr "$KVFTS_DB" par $N >"$T_DIR/h1.out" 2>"$T_DIR/h1.err" &
P1=$!
track_pid $P1
"$KVFTS_TEST_HELPER" incr "$KVFTS_DB" par $N >"$T_DIR/h2.out" 2>"$T_DIR/h2.err" &
P2=$!
track_pid $P2
wait $P1; RC1=$?
wait $P2; RC2=$?
t1=$(now_ms)
echo "concurrent increments: 2 x $N in $((t1 - t0)) ms" >&2
[ $RC1 = 0 ] || fail "incrementer 1 exited $RC1" "$(cat "$T_DIR/h1.err")"
pass
[ $RC2 = 0 ] || fail "incrementer 2 exited $RC2" "$(cat "$T_DIR/h2.err")"
pass
expect_exit 0 kv get count::par
expect_stdout "{\"key\":\"count::par\",\"value\":$((2 * N))}"

# Two kvfts processes adding auto-keyed documents at once: no number is
# given twice and none is lost.
M=40
(for i in $(seq 1 $M); do kv put --auto cc "{\"w\":1,\"i\":$i}" >/dev/null || exit 1; done) &
P1=$!
track_pid $P1
(for i in $(seq 1 $M); do kv put --auto cc "{\"w\":2,\"i\":$i}" >/dev/null || exit 1; done) &
P2=$!
track_pid $P2
wait $P1; RC1=$?
wait $P2; RC2=$?
[ $RC1 = 0 ] && [ $RC2 = 0 ] || fail "concurrent put --auto failed ($RC1, $RC2)"
pass
expect_exit 0 kv get count::cc
expect_stdout "{\"key\":\"count::cc\",\"value\":$((2 * M))}"
expect_exit 0 kv get --range cc 1..
expect_eq "documents from two concurrent put --auto" \
    "$(printf '%s\n' "$OUT" | grep -c '"doc":')" "$((2 * M))"

finish
