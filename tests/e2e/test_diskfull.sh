#!/usr/bin/env bash
# e2e.diskfull -- a load into a small tmpfs (mounted by the test) until the
# space runs out: the load stops with a clear error naming the free space,
# having committed whole batches; the database then opens, reads, passes
# `kvfts check` and holds exactly the batches committed before the error;
# on a disk too full to write but not to read, writes are refused with the
# same clear error while reads go on; with space freed the load goes on to
# the end.  A file system too small for the
# database's shared memory gives a clear error at `kvfts init`, not a
# crash (Berkeley DB's region files are mapped: without kvfts's check a full
# tmpfs killed the process with SIGBUS).  The shared memory normally lives in
# /dev/shm, apart from the database; the last part keeps it in the database
# directory (KVFTS_REGIONS_IN_DIR) to test that case.
#
# Mounting needs root (as in CI) or, failing that, a user namespace
# (unshare -rm); with neither the test says so and is skipped (exit 77).

if [ "$(id -u)" != 0 ] && [ -z "${KVFTS_E2E_USERNS:-}" ]; then
    if unshare -rm true 2>/dev/null; then
        KVFTS_E2E_USERNS=1 exec unshare -rm bash "$0" "$@"
    fi
    echo "e2e.diskfull: cannot mount a tmpfs (not root, no user" \
         "namespaces): skipped" >&2
    exit 77
fi
. "$(dirname "$0")/lib.sh"

MNT="$T_DIR/mnt"
SMALL="$T_DIR/small"
mkdir -p "$MNT" "$SMALL"
unmount_all() {
    umount "$MNT" 2>/dev/null
    umount "$SMALL" 2>/dev/null
    t_cleanup
}
trap unmount_all EXIT
mount -t tmpfs -o size=48m kvfts-e2e "$MNT" ||
    fail "mount -t tmpfs on $MNT failed"
pass

# A 16 MB cache keeps the shared-memory files small (kvfts keeps room for
# them to grow to 2 x cache + 48 MB, and 32 MB more in reserve).
export KVFTS_CACHE_MB=16
TOTAL=30000
BATCH=500
SRC="$T_DIR/src.jsonl"
# Line I: {"n":I,"text":"<60 words of a 1,000-word random vocabulary>"},
# every 10th line also holds the word "tenth" (a count any prefix predicts).
awk -v n=$TOTAL -v seed="${KVFTS_E2E_SEED:-7}" 'BEGIN {
    srand(seed)
    for (v = 0; v < 1000; v++) {
        s = ""
        for (c = 0; c < 6; c++) s = s sprintf("%c", 97 + int(rand() * 26))
        voc[v] = s
    }
    for (i = 1; i <= n; i++) {
        t = ""
        for (w = 0; w < 60; w++) t = t (w ? " " : "") voc[int(rand() * 1000)]
        if (i % 10 == 0) t = t " tenth"
        printf "{\"n\":%d,\"text\":\"%s\"}\n", i, t
    }
}' >"$SRC"
expect_eq "generated lines" "$(wc -l <"$SRC")" $TOTAL

DB="$MNT/db"
expect_exit 0 kv init "$DB"
export KVFTS_DB="$DB"

# verify C WHAT: the database holds exactly item::1..C, each its line.
verify() {
    local c=$1 what=$2
    run kv stats
    [ "$RC" = 0 ] || fail "$what: kvfts stats: exit $RC: $ERR"
    expect_eq "$what: documents" "$(json_num documents)" "$c"
    expect_exit 0 kv get count::item
    expect_eq "$what: count::item" "$(json_num value)" "$c"
    expect_exit 0 kv check
    expect_eq "$what: check differences" "$(json_num differences)" 0
    kv get --range item 1..$c |
        sed 's/^{"key":"item::\([0-9]*\)","cas":[0-9]*,"doc":\(.*\)}$/\2/' \
        >"$T_DIR/got.jsonl" || fail "$what: get --range item 1..$c failed"
    head -n "$c" "$SRC" | cmp -s - "$T_DIR/got.jsonl" ||
        fail "$what: stored documents differ from lines 1..$c"
    pass
    expect_exit 0 kv search tenth --count
    expect_stdout "{\"total\":$((c / 10))}"
}

# --- 1. load until the space runs out.
run kv load "$SRC" --auto item --batch $BATCH
[ "$RC" = 1 ] || fail "load into a full tmpfs: exit $RC (expected 1)" "$OUT $ERR"
pass
expect_stderr_contains "no space left on device"
expect_stderr_contains "MB free"
expect_stdout_contains '"stopped":true'
L=$(json_num loaded)
LOAD_ERR=$ERR
echo "$T_NAME: the load stopped after $L documents:" \
     "$(df -Pk "$MNT" | awk 'NR==2 {print $4 " KB free of " $2}')" >&2
check "some batches were committed" [ "$L" -gt 0 ]
check "not everything fitted" [ "$L" -lt $TOTAL ]
check "whole batches" [ $((L % BATCH)) = 0 ]

# --- 2. the database opens, reads and holds exactly what was committed.
verify "$L" "after the full disk"
# --- 3. a disk too full to write, not too full to read: fill it until
# fewer MB are free than kvfts keeps in reserve for writes (32 MB; the
# shared memory is in /dev/shm, so its growth is not counted here), more
# than an open needs (4).
check "the load's error names the reserve" \
    [ "${LOAD_ERR#*32 MB kept in reserve}" != "$LOAD_ERR" ]
G=0
avail_mb=$(( $(df -Pk "$MNT" | awk 'NR==2 {print $4}') / 1024 ))
fill=$((avail_mb - G - 20))
check "room to fill ($avail_mb MB free, growth $G MB)" [ "$fill" -gt 0 ]
expect_exit 0 dd if=/dev/zero of="$MNT/filler" bs=1M count=$fill
expect_error 1 "no space left on device for a write" kv put extra '{"a":1}'
expect_exit 3 kv get extra
expect_error 1 "no space left on device" kv incr other
verify "$L" "with the disk full"
expect_exit 0 rm "$MNT/filler"

# --- 4. space freed: the load goes on to the end.
expect_exit 0 mount -o remount,size=600m "$MNT"
tail -n +$((L + 1)) "$SRC" >"$T_DIR/rest.jsonl"
expect_exit 0 kv load "$T_DIR/rest.jsonl" --auto item --batch $BATCH --quiet
expect_eq "rest loaded" "$(json_num loaded)" $((TOTAL - L))
verify $TOTAL "after freeing space"

# --- 5. a file system too small for the shared memory: a clear error.
# (With it in /dev/shm, the open succeeds, and the first write -- the
# format mark init stamps -- names the reserve it needs.)
expect_exit 0 mount -t tmpfs -o size=24m kvfts-e2e-small "$SMALL"
expect_error 1 "no space left on device for a write" kv init "$SMALL/db1"
KVFTS_REGIONS_IN_DIR=1 expect_error 1 "no space left on device for opening" \
    kv init "$SMALL/db2"
finish
