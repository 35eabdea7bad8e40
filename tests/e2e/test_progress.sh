#!/usr/bin/env bash
# e2e.progress: long-running commands show progress on a terminal and only
# there.  script(1) gives kvfts a pseudo-terminal.
source "$(dirname "$0")/lib.sh"

command -v script >/dev/null || fail "script(1) (util-linux) is needed"
new_db prog
seq 1 60000 | awk '{ printf "{\"id\":\"d%d\",\"t\":\"word%d common\"}\n", $1, $1 % 500 }' \
    >"$T_DIR/in.jsonl"
# On a terminal: a progress line with documents, MB, docs/s and an ETA
# (the file's size is known), ending at 100%.
script -qec "'$KVFTS_BIN' -d '$KVFTS_DB' load '$T_DIR/in.jsonl' --id-field id --batch 5000" \
    /dev/null >"$T_DIR/tty.out" 2>&1 || fail "load on a pty failed" "$(cat "$T_DIR/tty.out")"
tr '\r' '\n' <"$T_DIR/tty.out" >"$T_DIR/lines"
grep -Eq '^ *[0-9]+% [0-9]+ docs +[0-9.]+ MB +[0-9]+ docs/s +[0-9.]+ MB/s' "$T_DIR/lines" ||
    fail "no progress line on a terminal" "$(head -c 600 "$T_DIR/lines")"
pass
grep -q 'ETA [0-9]*:[0-9][0-9]' "$T_DIR/lines" || grep -q '^100% 60000 docs' "$T_DIR/lines" ||
    fail "progress shows neither an ETA nor the final 100% line" "$(head -c 600 "$T_DIR/lines")"
pass
grep -q '^100% 60000 docs' "$T_DIR/lines" || fail "no final 100% progress line" "$(tail -c 600 "$T_DIR/lines")"
pass
grep -q '"loaded":60000,' "$T_DIR/lines" || fail "summary missing" "$(tail -c 300 "$T_DIR/lines")"
pass
# --quiet, or not a terminal: no progress, only the summary on stdout.
new_db quiet
script -qec "'$KVFTS_BIN' -d '$KVFTS_DB' load '$T_DIR/in.jsonl' --id-field id --quiet" \
    /dev/null >"$T_DIR/q.out" 2>&1 || fail "quiet load failed"
grep -q 'docs/s  ' "$T_DIR/q.out" && fail "--quiet still printed progress"
pass
new_db pipe
expect_exit 0 kv load "$T_DIR/in.jsonl" --id-field id
[ -z "$ERR" ] || fail "progress printed to a non-terminal stderr" "$ERR"
pass
# reindex shows its progress too.
script -qec "'$KVFTS_BIN' -d '$KVFTS_DB' reindex" /dev/null >"$T_DIR/r.out" 2>&1 ||
    fail "reindex failed" "$(cat "$T_DIR/r.out")"
tr '\r' '\n' <"$T_DIR/r.out" | grep -q '60000 docs' || fail "no reindex progress" "$(cat "$T_DIR/r.out")"
pass
finish
