#!/usr/bin/env bash
# e2e.lookups -- lookup documents declared by `init --config`: unique and
# non-unique lookups kept exact on put, update and delete; a unique
# violation leaves the database unchanged; numbers and strings give the
# same lookup value; lookup names are reserved key prefixes; bad configs are
# refused; a config change on a database with documents rebuilds the
# lookups, or changes nothing when the documents violate a new unique one.
. "$(dirname "$0")/lib.sh"

CFG="$T_DIR/config.json"
cat >"$CFG" <<'EOF'
{
  "lookups": [
    { "name": "customer_ref", "path": "customer_id", "unique": true },
    { "name": "by_city", "path": "address.city" },
    { "name": "by_tag", "path": "tags", "unique": false }
  ]
}
EOF
CFG_COMPACT='{"lookups":[{"name":"customer_ref","path":"customer_id","unique":true},{"name":"by_city","path":"address.city"},{"name":"by_tag","path":"tags","unique":false}]}'

new_db db --config "$CFG"
expect_exit 0 kv config
expect_stdout "$CFG_COMPACT"
expect_exit 0 kv get meta::config
expect_stdout "{\"key\":\"meta::config\",\"doc\":$CFG_COMPACT}"

# get_line VAR KEY: VAR = the `kvfts get KEY` line of an existing document.
get_line() {
    local l
    l=$(kv get "$2") || fail "get $2 failed: $l"
    printf -v "$1" '%s' "$l"
}
stats() { kv stats | sed 's/,"disk_bytes".*//'; }

# --- put documents; lookups follow.
U42='{"name":"Max","customer_id":12345,"address":{"city":"Berlin"},"tags":["vip","new"]}'
U2='{"name":"Bea","customer_id":"2","address":{"city":"Paris"},"tags":["new"]}'
U1='{"name":"Al","customer_id":"1","address":{"city":"Paris"}}'
expect_exit 0 kv put user::42 "$U42"
# user::2 before user::1: the refs list is in key order, not write order.
expect_exit 0 kv put user::2 "$U2"
expect_exit 0 kv put user::1 "$U1"
get_line L42 user::42; get_line L1 user::1; get_line L2 user::2
[[ "$L42" == '{"key":"user::42","cas":'*",\"doc\":$U42}" ]] || fail "get user::42: $L42"
pass

# The seed's two gets in one command, the lookup document itself, and the
# logical key through get.
expect_exit 0 kv lookup customer_ref 12345
expect_stdout "$L42"
expect_exit 0 kv lookup customer_ref 12345 --ref
expect_stdout '{"ref":"user::42"}'
expect_exit 0 kv get customer_ref::12345
expect_stdout '{"key":"customer_ref::12345","doc":{"ref":"user::42"}}'
expect_exit 0 kv lookup customer_ref 1 --ref
expect_stdout '{"ref":"user::1"}'

# Non-unique: every document with the value, in key order.
expect_exit 0 kv lookup by_city Paris --ref
expect_stdout '{"refs":["user::1","user::2"]}'
expect_exit 0 kv get by_city::Paris
expect_stdout '{"key":"by_city::Paris","doc":{"refs":["user::1","user::2"]}}'
expect_exit 0 kv lookup by_city Paris
expect_stdout "$L1
$L2"
expect_exit 0 kv lookup by_city Berlin --ref
expect_stdout '{"refs":["user::42"]}'
# Each element of an array is a value.
expect_exit 0 kv lookup by_tag new --ref
expect_stdout '{"refs":["user::2","user::42"]}'
expect_exit 0 kv lookup by_tag vip --ref
expect_stdout '{"refs":["user::42"]}'
expect_error 3 "" kv lookup by_city Rome
expect_exit 3 kv get by_city::Rome
expect_stdout '{"key":"by_city::Rome","error":"not found"}'
expect_error 2 "nosuch" kv lookup nosuch x

# --- unique violation: nothing is written, the database is unchanged.
STATS0=$(stats)
U43='{"name":"Dup","customer_id":"12345","address":{"city":"Rome"},"tags":["dup"]}'
expect_error 4 "customer_ref" kv put user::43 "$U43"
expect_error 4 "customer_ref" kv add user::43 "$U43"
expect_exit 3 kv get user::43
expect_exit 0 kv lookup customer_ref 12345 --ref
expect_stdout '{"ref":"user::42"}'
expect_exit 3 kv lookup by_city Rome --ref      # no partial lookup writes
expect_exit 3 kv lookup by_tag dup --ref
# An update of another document onto a taken value is refused too, and
# leaves that document and its lookups as they were.
expect_error 4 "customer_ref" kv put user::1 '{"name":"Al","customer_id":12345,"address":{"city":"Oslo"}}'
expect_error 4 "customer_ref" kv replace user::1 '{"customer_id":"12345"}'
expect_exit 0 kv get user::1
expect_stdout "$L1"
expect_exit 0 kv lookup customer_ref 1 --ref
expect_stdout '{"ref":"user::1"}'
expect_exit 3 kv lookup by_city Oslo --ref
expect_exit 0 kv lookup by_city Paris --ref
expect_stdout '{"refs":["user::1","user::2"]}'
expect_eq "stats after refused writes" "$(stats)" "$STATS0"

# Numbers and strings are the same value: a number 12345 and the string
# "12345" both map to customer_ref::12345 (the string was refused above);
# the other way round too.
expect_exit 0 kv put user::50 '{"customer_id":"777"}'
expect_exit 0 kv lookup customer_ref 777 --ref
expect_stdout '{"ref":"user::50"}'
expect_error 4 "customer_ref" kv put user::51 '{"customer_id":777}'
expect_exit 3 kv get user::51

# Rewriting a document with its own unique value is not a violation.
expect_exit 0 kv put user::42 "$U42"
expect_exit 0 kv lookup customer_ref 12345 --ref
expect_stdout '{"ref":"user::42"}'

# --- update moves the lookups (old value's entries removed).
U42B='{"name":"Max","customer_id":999,"address":{"city":"Paris"},"tags":["vip"]}'
expect_exit 0 kv put user::42 "$U42B"
get_line L42B user::42
expect_error 3 "" kv lookup customer_ref 12345
expect_exit 3 kv get customer_ref::12345
expect_exit 0 kv lookup customer_ref 999
expect_stdout "$L42B"
expect_exit 3 kv lookup by_city Berlin --ref
expect_exit 0 kv lookup by_city Paris --ref
expect_stdout '{"refs":["user::1","user::2","user::42"]}'
expect_exit 0 kv lookup by_tag new --ref
expect_stdout '{"refs":["user::2"]}'
# The freed value can be taken by another document now.
expect_exit 0 kv put user::43 "$U43"
expect_exit 0 kv lookup customer_ref 12345 --ref
expect_stdout '{"ref":"user::43"}'
# A document without the path has no entry.
expect_exit 0 kv replace user::43 '{"name":"no id"}'
expect_exit 3 kv lookup customer_ref 12345 --ref
expect_exit 3 kv lookup by_city Rome --ref

# --- delete removes the document's entries.
expect_exit 0 kv del user::42
expect_exit 3 kv lookup customer_ref 999
expect_exit 3 kv get customer_ref::999
expect_exit 0 kv lookup by_city Paris --ref
expect_stdout '{"refs":["user::1","user::2"]}'
expect_exit 3 kv lookup by_tag vip --ref
expect_stdout ""

# --- lookup values are at most 1024 bytes: a longer one fails the write.
V1024=$(head -c 1024 /dev/zero | tr '\0' v)
expect_exit 0 kv put user::60 "{\"customer_id\":\"$V1024\"}"
expect_exit 0 kv lookup customer_ref "$V1024" --ref
expect_stdout '{"ref":"user::60"}'
expect_error 2 "" kv put user::61 "{\"customer_id\":\"${V1024}w\"}"
expect_exit 3 kv get user::61

# --- lookup names are reserved key prefixes.
expect_error 2 "customer_ref" kv put customer_ref::x '{"a":1}'
expect_error 2 "by_city" kv add by_city::Paris '{"a":1}'
expect_exit 0 kv lookup by_city Paris --ref
expect_stdout '{"refs":["user::1","user::2"]}'

# --- bad configs: exit 2, a message saying what is wrong, nothing stored.
bad_config() {   # bad_config TEXT-IN-MESSAGE... -- CONFIG-JSON
    local json=${*: -1}
    local n=$((${#@} - 1))
    local want=("${@:1:$n}")
    local dir="$T_DIR/bad$RANDOM$RANDOM"
    printf '%s\n' "$json" >"$T_DIR/bad.json"
    expect_error 2 "${want[0]}" kv init "$dir" --config "$T_DIR/bad.json"
    local w
    for w in "${want[@]:1}"; do expect_stderr_contains "$w"; done
    expect_exit 0 kv -d "$dir" config
    expect_stdout '{}'
}
bad_config "lookupz" '{"lookupz":[]}'
bad_config "uniq" '{"lookups":[{"name":"a","path":"x","uniq":true}]}'
bad_config "unique" "true" '{"lookups":[{"name":"a","path":"x","unique":"yes"}]}'
bad_config "'a'" "twice" '{"lookups":[{"name":"a","path":"x"},{"name":"a","path":"y"}]}'
bad_config "fts" '{"lookups":[{"name":"fts","path":"x"}]}'
bad_config "count" '{"lookups":[{"name":"count","path":"x"}]}'
bad_config "name" '{"lookups":[{"path":"x"}]}'
bad_config "invalid JSON" '{"lookups":[{"name":"a","path":"x"}'

# A bad config on a database that has one keeps the old one.
printf '%s\n' '{"lookups":[{"name":"a","path":"x","uniq":true}]}' >"$T_DIR/bad.json"
EMPTY="$T_DIR/empty"
expect_exit 0 kv init "$EMPTY" --config "$CFG"
expect_exit 2 kv init "$EMPTY" --config "$T_DIR/bad.json"
expect_exit 0 kv -d "$EMPTY" config
expect_stdout "$CFG_COMPACT"

# --- a config change on a database holding documents (include/kvfts.h:
# the lookups are rebuilt in the same transaction; a new unique lookup the
# documents violate fails with exit 4 and changes nothing).
# Documents now: user::1 (Al, "1", Paris), user::2 (Bea, "2", Paris),
# user::43 (name "no id"), user::50 ("777"), user::60 (the long value).
STATS1=$(stats)
printf '%s\n' '{"lookups":[{"name":"one_city","path":"address.city","unique":true}]}' \
    >"$T_DIR/uniq.json"
expect_error 4 "one_city" kv init "$KVFTS_DB" --config "$T_DIR/uniq.json"
expect_exit 0 kv config
expect_stdout "$CFG_COMPACT"
expect_exit 0 kv lookup customer_ref 1 --ref
expect_stdout '{"ref":"user::1"}'
expect_exit 2 kv lookup one_city Paris
expect_eq "stats after a refused config change" "$(stats)" "$STATS1"

printf '%s\n' '{"lookups":[{"name":"by_name","path":"name"}]}' >"$T_DIR/new.json"
expect_exit 0 kv init "$KVFTS_DB" --config "$T_DIR/new.json"
expect_exit 0 kv config
expect_stdout '{"lookups":[{"name":"by_name","path":"name"}]}'
expect_exit 0 kv lookup by_name Al --ref
expect_stdout '{"refs":["user::1"]}'
expect_exit 0 kv lookup by_name "no id" --ref
expect_stdout '{"refs":["user::43"]}'
expect_exit 0 kv lookup by_name Bea
expect_stdout "$L2"
# The old lookups are gone, entries and names.
expect_error 2 "customer_ref" kv lookup customer_ref 1
expect_exit 3 kv get customer_ref::1 by_city::Paris
expect_stdout '{"key":"customer_ref::1","error":"not found"}
{"key":"by_city::Paris","error":"not found"}'
expect_eq "lookup entries after the rebuild" \
    "$(kv stats | sed -n 's/.*"lookup_entries":\([0-9]*\).*/\1/p')" 3
# customer_ref:: is an ordinary key prefix again; by_name:: is reserved.
expect_exit 0 kv put customer_ref::x '{"a":1}'
expect_error 2 "by_name" kv put by_name::x '{"a":1}'

finish
