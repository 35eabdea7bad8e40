#!/usr/bin/env bash
# e2e.bad_input -- what the command refuses, with exit 2 (bad input) or 3
# (no database), one error line saying why, and nothing written: malformed
# JSON (with the byte offset), non-object documents, invalid UTF-8 in keys,
# values and member names, empty/overlong keys and control characters,
# reserved prefixes, too deep nesting, and missing, non-directory and
# unwritable database directories.
#
# Offsets: "invalid JSON at byte N" names the 0-based byte offset of the
# first byte that makes the text invalid (as "invalid UTF-8 at byte N" does
# for keys); columns in FILE:LINE:COL (test_load.sh) are 1-based.
. "$(dirname "$0")/lib.sh"

new_db db

# Everything refused below must leave exactly these documents.
expect_exit 0 kv put keep '{"v":1}'
KEEP=$(kv get keep)
ndocs() { kv stats | sed -n 's/.*"documents":\([0-9]*\).*/\1/p'; }
expect_eq "documents" "$(ndocs)" 1

# --- malformed JSON, with the offset of the offending byte.
expect_error 2 "invalid JSON at byte 7" kv put k '{"a":1}x'      # trailing x
expect_error 2 "invalid JSON at byte 7" kv put k '{"a":1,,"b":2}' # 2nd comma
expect_error 2 "invalid JSON at byte 0" kv put k ']'
expect_error 2 "invalid JSON at byte" kv put k '{"a":1'             # EOF
expect_error 2 "invalid JSON at byte" kv put k '{"a":tru}'
expect_error 2 "invalid JSON at byte" kv put k ''
expect_error 2 "invalid JSON at byte" kv put k '{"a":1} {"b":2}'
expect_error 2 "invalid JSON at byte" kv put k '{a:1}'
# The message names the document's key.
expect_stderr_contains "'k'"
# Only an object is a document.
expect_error 2 "object" kv put k '[1,2]'
expect_error 2 "object" kv put k '"text"'
expect_error 2 "object" kv put k '42'
expect_error 2 "object" kv put k 'null'
expect_exit 3 kv get k

# --- invalid UTF-8: in a value, a member name, a key (0xC3 0x28: a lead
# byte followed by a non-continuation byte), and other malformed sequences.
BAD=$(printf '\xc3\x28')
expect_error 2 "UTF" kv put k "{\"a\":\"x${BAD}y\"}"
expect_error 2 "UTF" kv put k "{\"a${BAD}\":1}"
expect_error 2 "UTF-8 at byte 1" kv put "k${BAD}" '{"a":1}'
expect_error 2 "UTF" kv add "k${BAD}" '{"a":1}'
for seq in '\xc0\xaf' '\xed\xa0\x80' '\xf4\x90\x80\x80' '\xff' '\x80' '\xe2\x82'; do
    b=$(printf "$seq")
    expect_error 2 "UTF" kv put k "{\"a\":\"${b}\"}"
    expect_error 2 "UTF" kv put "k${b}" '{"a":1}'
done
# Valid multi-byte text is fine, in keys and values.
expect_exit 0 kv put 'clé::日本' '{"é":"✓ 😀"}'
CASU=$(json_num cas)
expect_exit 0 kv get 'clé::日本'
expect_stdout "{\"key\":\"clé::日本\",\"cas\":$CASU,\"doc\":{\"é\":\"✓ 😀\"}}"
expect_exit 0 kv del 'clé::日本'

# --- keys: 1 to 250 bytes, no control characters.
expect_error 2 "empty" kv put '' '{"a":1}'
K250=$(head -c 250 /dev/zero | tr '\0' k)
K251="${K250}k"
expect_eq "test key length" "${#K251}" 251
expect_error 2 "250" kv put "$K251" '{"a":1}'
expect_exit 0 kv put "$K250" '{"a":250}'
CAS250=$(json_num cas)
expect_exit 0 kv get "$K250"
expect_stdout "{\"key\":\"$K250\",\"cas\":$CAS250,\"doc\":{\"a\":250}}"
expect_exit 0 kv del "$K250"
# Bytes, not characters: 125 x "é" is 250 bytes, 126 x is 252.
E125=$(for _ in $(seq 125); do printf 'é'; done)
expect_eq "test key bytes" "$(printf '%s' "$E125" | wc -c)" 250
expect_exit 0 kv put "$E125" '{"a":1}'
expect_exit 0 kv del "$E125"
expect_error 2 "250" kv put "${E125}é" '{"a":1}'
expect_error 2 "control" kv put "$(printf 'a\tb')" '{"a":1}'
expect_error 2 "control" kv put "$(printf 'a\001b')" '{"a":1}'
expect_error 2 "control" kv put "$(printf 'a\nb')" '{"a":1}'
expect_error 2 "control" kv put "$(printf 'a\177b')" '{"a":1}'
# A control character inside a JSON string must be escaped.
expect_error 2 "invalid JSON" kv put k "$(printf '{"a":"x\001y"}')"

# --- reserved prefixes, for every write command.
for p in fts count meta; do
    expect_error 2 "$p::" kv put "$p::x" '{"a":1}'
    expect_error 2 "$p::" kv add "$p::x" '{"a":1}'
    expect_error 2 "$p::" kv replace "$p::x" '{"a":1}'
done
expect_error 2 "" kv put --auto fts '{"a":1}'

# --- nesting: at most 512 levels (the document object is level 1).
nest() {   # nest N: {"a": N nested arrays }
    local o c
    o=$(head -c "$1" /dev/zero | tr '\0' '[')
    c=$(head -c "$1" /dev/zero | tr '\0' ']')
    printf '{"a":%s%s}' "$o" "$c"
}
expect_error 2 "nest" kv put deep "$(nest 600)"
expect_error 2 "nest" kv put deep "$(nest 512)"
nest 511 >"$T_DIR/deep511.json"
expect_exit 0 kv put deep "@$T_DIR/deep511.json"
CASD=$(json_num cas)
expect_exit 0 kv get deep
expect_stdout "{\"key\":\"deep\",\"cas\":$CASD,\"doc\":$(cat "$T_DIR/deep511.json")}"
expect_exit 0 kv del deep

# Nothing refused above was written.
expect_eq "documents after refused writes" "$(ndocs)" 1
expect_exit 0 kv get keep
expect_stdout "$KEEP"

# --- database directories.
MISSING="$T_DIR/no-such-db"
expect_error 3 "$MISSING" kv -d "$MISSING" get keep
check "a read does not create the directory" test ! -e "$MISSING"
expect_error 3 "$MISSING" kv -d "$MISSING" put a '{"a":1}'
check "a write does not create the directory" test ! -e "$MISSING"
# An empty directory is not a database either.
mkdir "$T_DIR/emptydir"
expect_error 3 "$T_DIR/emptydir" kv -d "$T_DIR/emptydir" get keep
echo "not a directory" >"$T_DIR/plainfile"
expect_error 2 "$T_DIR/plainfile" kv -d "$T_DIR/plainfile" get keep
expect_error 2 "$T_DIR/plainfile" kv init "$T_DIR/plainfile"

# Unwritable directories.  root ignores permission bits, so when the tests
# run as root the command runs as user nobody (setpriv) in a directory that
# nobody owns; chmod 555 is then what stops it.  A positive control in the
# same setup (chmod 755) shows that the failure comes from the permissions.
# If no unprivileged user can be switched to, this part is skipped (and
# says so) rather than faked.
as_unprivileged "unwritable-directory checks"
if [ "${as_user[0]-}" != skip ]; then
    RO="$T_DIR/ro"
    mkdir "$RO"
    [ "$(id -u)" = 0 ] && chown 65534:65534 "$RO"
    chmod 555 "$RO"
    # init in a read-only directory, and of a new directory inside it.
    expect_error 1 "$RO" "${as_user[@]}" "$KVFTS_BIN" init "$RO"
    expect_stderr_contains "ermission"
    check "nothing created in a read-only directory" test -z "$(ls -A "$RO")"
    expect_error 1 "$RO/db" "${as_user[@]}" "$KVFTS_BIN" init "$RO/db"
    check "no database directory created" test ! -e "$RO/db"
    # An existing database made read-only (directory and files): a write
    # is refused with a clear message, and the data is intact.
    chmod 755 "$RO"
    expect_exit 0 "${as_user[@]}" "$KVFTS_BIN" init "$RO"   # control
    expect_exit 0 "${as_user[@]}" "$KVFTS_BIN" -d "$RO" put a '{"a":1}'
    CASRO=$(json_num cas)
    chmod -R a-w "$RO"
    expect_error 1 "$RO" "${as_user[@]}" "$KVFTS_BIN" -d "$RO" put a '{"a":2}'
    chmod -R u+w "$RO"
    expect_exit 0 "${as_user[@]}" "$KVFTS_BIN" -d "$RO" get a
    expect_stdout "{\"key\":\"a\",\"cas\":$CASRO,\"doc\":{\"a\":1}}"
fi

finish
