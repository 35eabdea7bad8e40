#!/usr/bin/env bash
# e2e.regions -- Berkeley DB's regions (its shared memory) live in a private
# directory of /dev/shm, /dev/shm/kvfts-ID, named by the database's
# kvfts.lock.  A process killed with a database open leaves them there; if
# the database directory is then deleted, nothing would come back for them
# and they would hold memory until the next boot.  Opening any database
# sweeps such orphans (see shm_sweep in lib/kv/kv_env.c).  Checked here:
#   - the regions of a killed process whose database was deleted are gone
#     after another database is opened;
#   - the regions of a database still open elsewhere stay, and that process
#     goes on and commits;
#   - the regions of a killed process whose database still exists stay, and
#     that database reopens (recovery) with its committed documents, and its
#     last close removes them;
#   - a region directory without an owner file (an older kvfts, or one being
#     made) is left alone;
#   - regions left half made (their maker killed before it finished them:
#     __db.001 without Berkeley DB's magic number) are discarded and the
#     database recovered at once, both by a first open and by an open
#     beside a live process -- not after Berkeley DB's own 18 s of waiting
#     for them to be finished, twice (36 s);
#   - the next open after a writer was killed beside a live one (Berkeley
#     DB's failchk: the dead writer's transaction aborted, its locks freed)
#     prints only its own output: failchk's messages ("Freeing read locks
#     for locker ...") went to its stdout, ahead of the JSON;
#   - a writer waiting for a live one's lock while a process killed after
#     it began waiting goes uncleaned gives up after 5 s of that (a
#     recovery), commits before the holder would have let it, and the
#     holder's batch commits too.
. "$(dirname "$0")/lib.sh"

: "${KVFTS_TEST_HELPER:?KVFTS_TEST_HELPER must name kvfts_test_helper}"
H=$KVFTS_TEST_HELPER

shm_id() {   # shm_id DIR: the id of DIR's regions in /dev/shm, or nothing
    tr -d '\000' <"$1/kvfts.lock" |
        sed -n 's/kvfts-registry 1 home S \([0-9a-f]*\) .*/\1/p' | head -n 1
}

# hold NAME SECONDS: a helper holding a write transaction on database NAME
# (its regions mapped) for SECONDS; its pid in HOLD_PID once it holds it.
hold() {
    local out="$T_DIR/$1.held"
    "$H" hold "$T_DIR/$1" key "$2" >"$out" 2>&1 &
    HOLD_PID=$!
    track_pid $HOLD_PID
    local i
    for i in $(seq 1 200); do
        grep -q held "$out" 2>/dev/null && return 0
        kill -0 $HOLD_PID 2>/dev/null || break
        sleep 0.05
    done
    fail "helper hold $1 did not start" "$(cat "$out")"
}

if ! [ -d /dev/shm ] || [ "$(df -Pk /dev/shm | awk 'NR==2 {print $4}')" -lt 1000000 ]; then
    echo "$T_NAME: SKIPPED: no /dev/shm with 1 GB free, so regions stay in" \
        "the database directory and nothing is swept" >&2
    finish
fi

for n in gone live kept; do
    expect_exit 0 kv init "$T_DIR/$n"
    expect_exit 0 kv -d "$T_DIR/$n" put doc::1 '{"t":"committed"}'
done

hold gone 60
GONE_PID=$HOLD_PID
hold kept 60
KEPT_PID=$HOLD_PID
hold live 6
LIVE_PID=$HOLD_PID

GONE=$(shm_id "$T_DIR/gone")
KEPT=$(shm_id "$T_DIR/kept")
LIVE=$(shm_id "$T_DIR/live")
for id in "$GONE" "$KEPT" "$LIVE"; do
    check "a database's regions are in /dev/shm/kvfts-ID (got '$id')" \
        [ ${#id} = 32 ]
    check "/dev/shm/kvfts-$id holds the regions and the owner file" \
        test -f "/dev/shm/kvfts-$id/__db.001" -a \
        -f "/dev/shm/kvfts-$id/kvfts.owner"
done

# An older kvfts's region directory: no owner file.
OLD=/dev/shm/kvfts-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
mkdir "$OLD" && echo junk >"$OLD/__db.001" || fail "cannot make $OLD"
trap 'rm -rf "$OLD"; t_cleanup' EXIT

kill -9 $GONE_PID $KEPT_PID
wait $GONE_PID $KEPT_PID 2>/dev/null
rm -rf "${T_DIR:?}/gone"
check "the killed process left its regions" [ -d "/dev/shm/kvfts-$GONE" ]

# The first open of another database sweeps.
expect_exit 0 kv init "$T_DIR/other"
check "the regions of a deleted database are gone" \
    [ ! -e "/dev/shm/kvfts-$GONE" ]
check "the regions of a database open elsewhere stay" \
    [ -f "/dev/shm/kvfts-$LIVE/__db.001" ]
check "the regions of a crashed database that still exists stay" \
    [ -f "/dev/shm/kvfts-$KEPT/__db.001" ]
check "a region directory without an owner file stays" [ -f "$OLD/__db.001" ]

wait $LIVE_PID
expect_eq "the process whose regions stayed commits (helper exit)" $? 0
expect_exit 0 kv -d "$T_DIR/live" get key
expect_stdout_contains '"doc":{}'

expect_exit 0 kv -d "$T_DIR/kept" get doc::1
expect_stdout_contains '"committed"'
expect_exit 0 kv -d "$T_DIR/kept" check
expect_stdout_contains '"ok":true'
check "the recovered database's old regions are gone after its close" \
    [ ! -e "/dev/shm/kvfts-$KEPT" ]
for n in live kept other; do
    id=$(shm_id "$T_DIR/$n")
    check "$n closed: no regions left in /dev/shm" [ ! -e "/dev/shm/kvfts-$id" ]
done

# unmake DIR: clear the magic number of DIR's regions, as they are before
# their maker finishes them.
unmake() {
    local f="/dev/shm/kvfts-$(shm_id "$1")/__db.001"
    check "$1 has regions to unmake ($f)" [ -f "$f" ]
    printf '\0\0\0\0' | dd of="$f" bs=4 count=1 conv=notrunc status=none
}

# timed_get NAME WHAT: `kv get doc::1` of database NAME finds the committed
# document within 10 s.
timed_get() {
    local t0
    t0=$(now_ms)
    expect_exit 0 kv -d "$T_DIR/$1" get doc::1
    expect_stdout_contains '"committed"'
    local ms=$(($(now_ms) - t0))
    [ $ms -lt 10000 ] || fail "$2: the open took $ms ms"
    pass
}

# A writer killed holding its transaction while another waits for it: the
# next open cleans up after it and prints its document and nothing else.
expect_exit 0 kv init "$T_DIR/dead"
expect_exit 0 kv -d "$T_DIR/dead" put doc::1 '{"t":"committed"}'
hold dead 60
DEAD_PID=$HOLD_PID
"$H" hold "$T_DIR/dead" waiter 2 >"$T_DIR/waiter.out" 2>&1 &
WAITER_PID=$!
track_pid $WAITER_PID
sleep 0.5
kill -9 $DEAD_PID
wait $DEAD_PID 2>/dev/null
expect_exit 0 kv -d "$T_DIR/dead" get doc::1
expect_stdout '{"key":"doc::1","cas":1,"doc":{"t":"committed"}}'
wait $WAITER_PID
expect_eq "the writer that waited for the killed one commits (helper exit)" $? 0
expect_exit 0 kv -d "$T_DIR/dead" get waiter
expect_stdout_contains '"doc":{}'

# A writer waiting for a live one's lock while a process killed after it
# had begun waiting goes uncleaned (nobody begins a transaction, where
# failchk runs): after 5 s of that the wait gives up, the environment is
# recovered (lib/kv/kv_stall.c, (d)) and the writer's put runs again and
# commits, before the holder would have let it; the holder's batch, whose
# environment the recovery replaced, runs again at its commit.  Both land.
expect_exit 0 kv init "$T_DIR/bystander"
expect_exit 0 kv -d "$T_DIR/bystander" put doc::1 '{"t":"committed"}'
hold bystander 20
HOLDER_PID=$HOLD_PID
KVFTS_BUSY_TIMEOUT=60 "$KVFTS_BIN" -d "$T_DIR/bystander" put doc::b \
    '{"t":"waited"}' >"$T_DIR/b.out" 2>&1 &
B_PID=$!
track_pid $B_PID
"$H" hold "$T_DIR/bystander" victim 60 >"$T_DIR/victim.out" 2>&1 &
VICTIM_PID=$!
track_pid $VICTIM_PID
# The victim dies only once the put has begun its transaction (the three
# hold registry slots, 'L' and a pid each from byte 256 on): a put that
# began after it would clean up after it at its door (failchk) and then
# wait for the holder.
for i in $(seq 1 200); do
    slots=$(dd if="$T_DIR/bystander/kvfts.lock" bs=16 skip=16 count=4096 \
            2>/dev/null | tr -cd L | wc -c)
    [ "$slots" -ge 3 ] && break
    sleep 0.05
done
check "the holder, the put and the victim are registered ($slots)" \
    [ "$slots" -ge 3 ]
sleep 0.5
kill -9 $VICTIM_PID
wait $VICTIM_PID 2>/dev/null
wait $B_PID
expect_eq "the waiting put commits (kvfts exit; $(cat "$T_DIR/b.out"))" $? 0
check "it commits while the holder still holds its lock" kill -0 $HOLDER_PID
wait $HOLDER_PID
expect_eq "the holder's batch commits after the recovery (helper exit)" $? 0
expect_exit 0 kv -d "$T_DIR/bystander" get doc::b
expect_stdout_contains '"waited"'
expect_exit 0 kv -d "$T_DIR/bystander" get key
expect_stdout_contains '"doc":{}'
expect_exit 0 kv -d "$T_DIR/bystander" check
expect_stdout_contains '"ok":true'

# Half made, found by the first open (no process has the database open).
expect_exit 0 kv init "$T_DIR/half"
expect_exit 0 kv -d "$T_DIR/half" put doc::1 '{"t":"committed"}'
hold half 60
kill -9 $HOLD_PID
wait $HOLD_PID 2>/dev/null
unmake "$T_DIR/half"
timed_get half "half-made regions, first open"
expect_exit 0 kv -d "$T_DIR/half" check
expect_stdout_contains '"ok":true'

# Half made beside a live process: found under the door by the next open.
hold half 4
LIVE_PID=$HOLD_PID
unmake "$T_DIR/half"
timed_get half "half-made regions beside a live process"
wait $LIVE_PID
echo "$T_NAME: the holder beside discarded regions exited $?" >&2
expect_exit 0 kv -d "$T_DIR/half" check
expect_stdout_contains '"ok":true'
expect_exit 0 kv -d "$T_DIR/half" put doc::2 '{"t":"after"}'
expect_exit 0 kv -d "$T_DIR/half" get doc::2
expect_stdout_contains '"after"'

finish
