#!/usr/bin/env bash
# e2e.crud -- documents through the kvfts command: init, put/get round trip,
# add/replace semantics, CAS on put/replace/del, delete, multi-get in request
# order with missing keys, JSON from stdin and @file, help, usage errors, and
# -d versus KVFTS_DB.
. "$(dirname "$0")/lib.sh"

DB="$T_DIR/db"

# --- init: creates the directory; a second init of the same database is fine.
expect_exit 0 kv init "$DB"
expect_stdout "{\"ok\":true,\"db\":\"$DB\"}"
check "init creates the directory" test -d "$DB"
expect_exit 0 kv init "$DB"
export KVFTS_DB="$DB"

# --- put/get round trip: whitespace removed, unicode kept byte for byte,
# member order and number spelling preserved.
expect_exit 0 kv put user::1 '{ "name" : "Zoë ✓ 日本",
   "tags" : [ "a" , "b" ],  "n" : 1.50e3, "ok" : true, "nil" : null,
   "addr" : { "city" : "Köln" } }'
CAS1=$(json_num cas) || fail "put printed no cas"
expect_stdout "{\"key\":\"user::1\",\"cas\":$CAS1}"
DOC1='{"name":"Zoë ✓ 日本","tags":["a","b"],"n":1.50e3,"ok":true,"nil":null,"addr":{"city":"Köln"}}'
expect_exit 0 kv get user::1
expect_stdout "{\"key\":\"user::1\",\"cas\":$CAS1,\"doc\":$DOC1}"

# Escapes inside strings survive as valid JSON (a quote and a newline).
expect_exit 0 kv put esc '{"q":"say \"hi\"\n"}'
CASE=$(json_num cas)
expect_exit 0 kv get esc
expect_stdout "{\"key\":\"esc\",\"cas\":$CASE,\"doc\":{\"q\":\"say \\\"hi\\\"\\n\"}}"

# A second init of a database holding documents keeps them.
expect_exit 0 kv init "$DB"
expect_exit 0 kv get user::1
expect_stdout "{\"key\":\"user::1\",\"cas\":$CAS1,\"doc\":$DOC1}"

# --- add: refuses an existing key (exit 4) and leaves it alone.
expect_error 4 "user::1" kv add user::1 '{"other":1}'
expect_exit 0 kv get user::1
expect_stdout "{\"key\":\"user::1\",\"cas\":$CAS1,\"doc\":$DOC1}"
expect_exit 0 kv add user::2 '{"v":2}'
CAS2=$(json_num cas)
check "add gives a new CAS" test "$CAS2" != "$CAS1"

# --- replace: refuses a missing key (exit 3) and does not create it.
expect_error 3 "missing::x" kv replace missing::x '{"v":1}'
expect_exit 3 kv get missing::x
expect_stdout '{"key":"missing::x","error":"not found"}'
expect_exit 0 kv replace user::2 '{"v":22}'
CAS2B=$(json_num cas)
check "replace changes the CAS" test "$CAS2B" != "$CAS2"
expect_exit 0 kv get user::2
expect_stdout "{\"key\":\"user::2\",\"cas\":$CAS2B,\"doc\":{\"v\":22}}"

# --- put without --cas over an existing document changes its CAS.
expect_exit 0 kv put user::2 '{"v":23}'
CAS2C=$(json_num cas)
check "put changes the CAS" test "$CAS2C" != "$CAS2B"

# --- CAS: the right one succeeds and changes the CAS; a stale one fails
# with exit 4 and changes nothing.
expect_exit 0 kv put user::1 '{"name":"v2"}' --cas "$CAS1"
CAS1B=$(json_num cas)
check "put --cas gives a new CAS" test "$CAS1B" != "$CAS1"
expect_error 4 "CAS" kv put user::1 '{"name":"stale"}' --cas "$CAS1"
expect_exit 0 kv get user::1
expect_stdout "{\"key\":\"user::1\",\"cas\":$CAS1B,\"doc\":{\"name\":\"v2\"}}"

expect_exit 0 kv replace user::1 '{"name":"v3"}' --cas "$CAS1B"
CAS1C=$(json_num cas)
check "replace --cas gives a new CAS" test "$CAS1C" != "$CAS1B"
expect_error 4 "CAS" kv replace user::1 '{"name":"stale"}' --cas "$CAS1B"
expect_exit 0 kv get user::1
expect_stdout "{\"key\":\"user::1\",\"cas\":$CAS1C,\"doc\":{\"name\":\"v3\"}}"

expect_error 4 "CAS" kv del user::1 --cas "$CAS1B"
expect_exit 0 kv get user::1
expect_stdout "{\"key\":\"user::1\",\"cas\":$CAS1C,\"doc\":{\"name\":\"v3\"}}"
expect_exit 0 kv del user::1 --cas "$CAS1C"
expect_stdout '{"key":"user::1","deleted":true}'

# --- del, then get: not found (exit 3); a second del is not found too.
expect_exit 3 kv get user::1
expect_stdout '{"key":"user::1","error":"not found"}'
expect_error 3 "user::1" kv del user::1
# A CAS given for a document that does not exist is not found, not created.
expect_exit 3 kv put user::1 '{"x":1}' --cas "$CAS1C"
expect_exit 3 kv get user::1

# --- multi-get: request order, missing keys reported inline, exit 3.
expect_exit 0 kv put a '{"v":"a"}'
CASA=$(json_num cas)
expect_exit 0 kv put b '{"v":"b"}'
CASB=$(json_num cas)
expect_exit 3 kv get a missing b
expect_stdout "{\"key\":\"a\",\"cas\":$CASA,\"doc\":{\"v\":\"a\"}}
{\"key\":\"missing\",\"error\":\"not found\"}
{\"key\":\"b\",\"cas\":$CASB,\"doc\":{\"v\":\"b\"}}"
expect_exit 0 kv get b a b
expect_stdout "{\"key\":\"b\",\"cas\":$CASB,\"doc\":{\"v\":\"b\"}}
{\"key\":\"a\",\"cas\":$CASA,\"doc\":{\"v\":\"a\"}}
{\"key\":\"b\",\"cas\":$CASB,\"doc\":{\"v\":\"b\"}}"

# --- JSON from stdin (-) and from a file (@FILE).
printf '{\n  "from" : "stdin",\n  "n" : [1, 2]\n}\n' >"$T_DIR/in.json"
expect_exit 0 kv put s - <"$T_DIR/in.json"
CASS=$(json_num cas)
expect_exit 0 kv get s
expect_stdout "{\"key\":\"s\",\"cas\":$CASS,\"doc\":{\"from\":\"stdin\",\"n\":[1,2]}}"
printf '{ "from" : "file" }' >"$T_DIR/f.json"
expect_exit 0 kv add f "@$T_DIR/f.json"
CASF=$(json_num cas)
expect_exit 0 kv get f
expect_stdout "{\"key\":\"f\",\"cas\":$CASF,\"doc\":{\"from\":\"file\"}}"
expect_exit 0 kv replace f - <<<'{"from":"stdin again"}'
CASF2=$(json_num cas)
expect_exit 0 kv get f
expect_stdout "{\"key\":\"f\",\"cas\":$CASF2,\"doc\":{\"from\":\"stdin again\"}}"
expect_error 3 "nonexistent.json" kv put g "@$T_DIR/nonexistent.json"
expect_exit 3 kv get g

# --- help and usage.
for c in "" put get load incr lookup; do
    # shellcheck disable=SC2086
    expect_exit 0 kv $c --help
    check "'kvfts $c --help' prints usage" test -n "$OUT"
done
expect_exit 0 kv get --help
[[ "$OUT" == *"--range"* ]] || fail "'kvfts get --help' does not mention --range"
pass
expect_usage_error 2 "frobnicate" kv frobnicate
expect_exit 2 kv
expect_error 2 "" kv put onlykey
expect_error 2 "" kv put k '{}' --cas notanumber

# --- -d versus KVFTS_DB: -d wins; KVFTS_DB alone works; neither is an error.
DB2="$T_DIR/db2"
expect_exit 0 kv init "$DB2"
expect_exit 0 kv -d "$DB2" put only-in-db2 '{"w":2}'
CASW=$(json_num cas)
expect_exit 3 kv get only-in-db2        # KVFTS_DB still names $DB
expect_exit 0 kv -d "$DB2" get only-in-db2
expect_stdout "{\"key\":\"only-in-db2\",\"cas\":$CASW,\"doc\":{\"w\":2}}"
expect_exit 0 env KVFTS_DB="$DB2" "$KVFTS_BIN" get only-in-db2
expect_stdout "{\"key\":\"only-in-db2\",\"cas\":$CASW,\"doc\":{\"w\":2}}"
expect_exit 3 kv -d "$DB2" get a
expect_error 2 "KVFTS_DB" env -u KVFTS_DB "$KVFTS_BIN" get a

# An unknown option is one error line naming it, exit 2, for every command.
for c in init put add replace del get incr lookup load stats config analyze \
         term terms check reindex search debian-catalog; do
    expect_error 2 "$c: unknown or incomplete option '--bogus'" kv "$c" --bogus x
done
finish
