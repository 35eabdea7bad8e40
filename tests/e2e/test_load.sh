#!/usr/bin/env bash
# e2e.load -- bulk loading of JSON Lines: key templates, --id-field, --auto,
# --mode add/replace, --batch, stdin; a bad line in the middle stops the
# load with exactly the lines before it committed, or is skipped and
# counted with --skip-bad; the error names FILE:LINE:COL.  And the Debian
# catalog converter on a hand-written stanza file.
. "$(dirname "$0")/lib.sh"

N=2500
SRC="$T_DIR/docs.jsonl"
# Line I: {"n":I,"len":L,"pad":"<L x>"}, L = I mod 23 (compact, as stored).
gen() {   # gen FIRST LAST
    awk -v a="$1" -v b="$2" 'BEGIN {
        for (i = a; i <= b; i++) {
            l = i % 23; p = ""
            for (j = 0; j < l; j++) p = p "x"
            printf "{\"n\":%d,\"len\":%d,\"pad\":\"%s\"}\n", i, l, p
        }
    }'
}
gen 1 $N >"$SRC"
expect_eq "generated lines" "$(wc -l <"$SRC")" $N

# expected_range PREFIX FILE [FIRST LAST]: the `get --range` lines (without
# the CAS) for documents PREFIX::I holding line I of FILE.
expected_range() {
    awk -v p="$1" -v a="${3:-1}" -v b="${4:-999999999}" \
        'NR >= a && NR <= b { printf "{\"key\":\"%s::%d\",\"doc\":%s}\n", p, NR, $0 }' "$2"
}
strip_cas() { sed 's/^\({"key":"[^"]*"\),"cas":[0-9]*,/\1,/'; }
# got_range PREFIX RANGE: `get --range` output without the CAS, in a file.
got_range() {
    kv get --range "$1" "$2" | strip_cas >"$T_DIR/got.txt"
}
ndocs() { kv stats | sed -n 's/.*"documents":\([0-9]*\).*/\1/p'; }
summary_has() {   # summary_has '"loaded":2500' ...
    local s
    for s in "$@"; do
        [[ "$OUT" == *"$s"* ]] || fail "load summary lacks $s"
        pass
    done
}
same_file() {   # same_file WHAT EXPECTED GOT
    cmp -s "$2" "$3" || fail "$1: content differs" \
        "$(diff "$2" "$3" | head -n 10)"
    pass
}

# --- --key template: everything loaded, summary, stats, content.
new_db tmpl
expect_exit 0 kv load "$SRC" --key 'doc::{n}' --quiet
summary_has "\"loaded\":$N," '"skipped":0,' "\"lines\":$N,"
[[ "$OUT" == *'"stopped"'* ]] && fail "a complete load says stopped"
pass
check "summary is one JSON line" test "$(printf '%s\n' "$OUT" | wc -l)" = 1
expect_eq "documents after load" "$(ndocs)" $N
got_range doc "1..$N"
expected_range doc "$SRC" >"$T_DIR/want.txt"
same_file "documents loaded with --key" "$T_DIR/want.txt" "$T_DIR/got.txt"

# --mode add over existing keys fails at the first line and changes nothing.
gen 1 3 | sed 's/"pad":"[x]*"/"pad":"changed"/' >"$T_DIR/changed.jsonl"
expect_exit 4 kv load "$T_DIR/changed.jsonl" --key 'doc::{n}' --mode add
expect_stderr_contains "$T_DIR/changed.jsonl:1:"
expect_stderr_contains "doc::1"
summary_has '"loaded":0,'
got_range doc 1..3
expected_range doc "$SRC" 1 3 >"$T_DIR/want.txt"
same_file "documents after a refused --mode add" "$T_DIR/want.txt" "$T_DIR/got.txt"
# --mode replace of a missing key: not found; of existing keys: replaced.
printf '{"n":999999,"len":0,"pad":""}\n' >"$T_DIR/new.jsonl"
expect_exit 3 kv load "$T_DIR/new.jsonl" --key 'doc::{n}' --mode replace
expect_exit 3 kv get doc::999999
expect_exit 0 kv load "$T_DIR/changed.jsonl" --key 'doc::{n}' --mode replace
summary_has '"loaded":3,'
got_range doc 1..3
expected_range doc "$T_DIR/changed.jsonl" >"$T_DIR/want.txt"
same_file "documents after --mode replace" "$T_DIR/want.txt" "$T_DIR/got.txt"
expect_eq "documents after replace" "$(ndocs)" $N

# A template with two fields and text around them.
printf '%s\n' '{"a":"x","b":{"c":7}}' '{"a":"y","b":{"c":8}}' >"$T_DIR/two.jsonl"
expect_exit 0 kv load "$T_DIR/two.jsonl" --key 'k::{a}-{b.c}'
expect_exit 0 kv get k::x-7 k::y-8
OUT=$(printf '%s\n' "$OUT" | strip_cas)
expect_stdout '{"key":"k::x-7","doc":{"a":"x","b":{"c":7}}}
{"key":"k::y-8","doc":{"a":"y","b":{"c":8}}}'

# --- --id-field: the field's value is the key.
new_db idf
awk '{ sub(/^\{/, "{\"id\":\"u-" NR "\","); print }' "$SRC" >"$T_DIR/ids.jsonl"
expect_exit 0 kv load "$T_DIR/ids.jsonl" --id-field id --quiet
summary_has "\"loaded\":$N,"
expect_eq "documents after --id-field load" "$(ndocs)" $N
expect_exit 0 kv get u-1 u-1234 u-$N
OUT=$(printf '%s\n' "$OUT" | strip_cas)
expect_stdout "$(awk 'NR == 1 || NR == 1234 || NR == 2500 {
    match($0, /"u-[0-9]+"/); k = substr($0, RSTART, RLENGTH)
    printf "{\"key\":%s,\"doc\":%s}\n", k, $0 }' "$T_DIR/ids.jsonl")"

# --- --auto: item::1..N in line order, counter = N; a second load goes on.
new_db auto
expect_exit 0 kv load "$SRC" --auto item --quiet
summary_has "\"loaded\":$N,"
expect_exit 0 kv get count::item
expect_stdout "{\"key\":\"count::item\",\"value\":$N}"
got_range item 1..
expected_range item "$SRC" >"$T_DIR/want.txt"
same_file "documents loaded with --auto" "$T_DIR/want.txt" "$T_DIR/got.txt"
gen 1 10 >"$T_DIR/ten.jsonl"
expect_exit 0 kv load "$T_DIR/ten.jsonl" --auto item
expect_exit 0 kv get count::item
expect_stdout "{\"key\":\"count::item\",\"value\":$((N + 10))}"
run kv get "item::$((N + 1))" "item::$((N + 10))"
OUT=$(printf '%s\n' "$OUT" | strip_cas)
expect_stdout "{\"key\":\"item::$((N + 1))\",\"doc\":$(sed -n 1p "$T_DIR/ten.jsonl")}
{\"key\":\"item::$((N + 10))\",\"doc\":$(sed -n 10p "$T_DIR/ten.jsonl")}"

# --- stdin, --batch 100, blank lines ignored.
new_db stdin
{ gen 1 1000; echo; echo "   "; gen 1001 $N; } >"$T_DIR/blank.jsonl"
expect_exit 0 kv load - --key 'doc::{n}' --batch 100 <"$T_DIR/blank.jsonl"
summary_has "\"loaded\":$N," '"skipped":0,' "\"lines\":$((N + 2)),"
expect_eq "documents after stdin load" "$(ndocs)" $N
got_range doc "1..$N"
expected_range doc "$SRC" >"$T_DIR/want.txt"
same_file "documents loaded from stdin" "$T_DIR/want.txt" "$T_DIR/got.txt"

# --- a bad line in the middle (line 1234): trailing garbage after a valid
# object, so the offending byte is unambiguous: column = its length + 1.
BADLINE=1234
GOOD_PART=$(sed -n "${BADLINE}p" "$SRC")
BADCOL=$((${#GOOD_PART} + 1))
awk -v b=$BADLINE 'NR == b { $0 = $0 "x" } { print }' "$SRC" >"$T_DIR/bad.jsonl"
expect_eq "bad file lines" "$(wc -l <"$T_DIR/bad.jsonl")" $N

for batch in 1000 100; do
    new_db "stop$batch"
    expect_exit 2 kv load "$T_DIR/bad.jsonl" --key 'doc::{n}' --batch $batch
    check "one error line (batch $batch)" test "$(printf '%s\n' "$ERR" | wc -l)" = 1
    expect_stderr_contains "$T_DIR/bad.jsonl:$BADLINE:$BADCOL:"
    summary_has "\"loaded\":$((BADLINE - 1))," '"stopped":true'
    expect_eq "documents before the bad line (batch $batch)" "$(ndocs)" $((BADLINE - 1))
    got_range doc "1..$N"
    expected_range doc "$SRC" 1 $((BADLINE - 1)) >"$T_DIR/want.txt"
    same_file "documents before the bad line" "$T_DIR/want.txt" "$T_DIR/got.txt"
done

# From stdin the error names "-".
new_db stopstdin
expect_exit 2 kv load - --key 'doc::{n}' <"$T_DIR/bad.jsonl"
expect_stderr_contains "-:$BADLINE:$BADCOL:"
expect_eq "documents before the bad line (stdin)" "$(ndocs)" $((BADLINE - 1))

# --skip-bad: every other line is stored, the bad one is counted.
new_db skip
expect_exit 0 kv load "$T_DIR/bad.jsonl" --key 'doc::{n}' --skip-bad
summary_has "\"loaded\":$((N - 1)),\"skipped\":1,"
expect_stderr_contains "$T_DIR/bad.jsonl:$BADLINE:$BADCOL:"
expect_eq "documents with --skip-bad" "$(ndocs)" $((N - 1))
got_range doc "1..$N"
awk -v b=$BADLINE 'NR != b' "$SRC" >"$T_DIR/src-but-bad.jsonl"
awk -v b=$BADLINE 'NR != b { printf "{\"key\":\"doc::%d\",\"doc\":%s}\n", NR, $0 }' \
    "$SRC" >"$T_DIR/want.txt"
same_file "documents with --skip-bad" "$T_DIR/want.txt" "$T_DIR/got.txt"

# --- a line without the key field (line 10): stops there, 9 stored; with
# --skip-bad it is skipped.
awk 'NR == 10 { $0 = "{\"m\":10}" } { print }' "$SRC" | head -n 20 >"$T_DIR/nokey.jsonl"
new_db nokey
expect_exit 2 kv load "$T_DIR/nokey.jsonl" --key 'doc::{n}'
expect_stderr_contains "$T_DIR/nokey.jsonl:10"
expect_stderr_contains "'n'"
expect_eq "documents before the keyless line" "$(ndocs)" 9
expect_exit 0 kv load "$T_DIR/nokey.jsonl" --key 'doc::{n}' --skip-bad
summary_has '"loaded":19,"skipped":1,'
expect_eq "documents with the keyless line skipped" "$(ndocs)" 19
# Bad keys made from fields are bad lines too (a reserved prefix).
printf '%s\n' '{"k":"ok1"}' '{"k":"count::x"}' '{"k":"ok2"}' >"$T_DIR/badkey.jsonl"
expect_exit 0 kv load "$T_DIR/badkey.jsonl" --id-field k --skip-bad
summary_has '"loaded":2,"skipped":1,'
expect_stderr_contains "$T_DIR/badkey.jsonl:2"

# --- usage errors.
expect_error 2 "" kv load "$SRC"
expect_error 2 "" kv load "$SRC" --key 'doc::{n}' --auto item
expect_error 2 "" kv load "$SRC" --key 'doc::{n}' --batch 0
expect_error 3 "nonexistent.jsonl" kv load "$T_DIR/nonexistent.jsonl" --key 'doc::{n}'

# --- debian-catalog: two packages (one with a multi-line Description and a
# " ." paragraph break, one whose long text comes from the translations).
cat >"$T_DIR/Packages" <<'EOF'
Package: alpha
Version: 1.2-3
Installed-Size: 120
Maintainer: Jane Doe <jane@example.org>
Architecture: amd64
Depends: libc6 (>= 2.34), libfoo1 | libbar2
Section: utils
Priority: optional
Homepage: https://alpha.example.org/
Description: the alpha tool
 Alpha does "things".
 .
 Second paragraph.
Description-md5: 0123456789abcdef0123456789abcdef

Package: beta
Version: 2.0~rc1
Maintainer: Bob Ünicode <bob@example.org>
Section: libs
Description: beta library
Description-md5: fedcba9876543210fedcba9876543210
EOF
cat >"$T_DIR/Translation-en" <<'EOF'
Package: beta
Description-md5: fedcba9876543210fedcba9876543210
Description-en: beta library
 Beta is a library.
 .
 It has two paragraphs.

Package: gamma
Description-md5: 11111111111111111111111111111111
Description-en: not in the catalog
 Unused.
EOF
ALPHA='{"package":"alpha","section":"utils","maintainer":"Jane Doe <jane@example.org>","version":"1.2-3","description":"the alpha tool\nAlpha does \"things\".\n\nSecond paragraph.","homepage":"https://alpha.example.org/","depends":"libc6 (>= 2.34), libfoo1 | libbar2"}'
BETA_SHORT='{"package":"beta","section":"libs","maintainer":"Bob Ünicode <bob@example.org>","version":"2.0~rc1","description":"beta library"}'
BETA_LONG='{"package":"beta","section":"libs","maintainer":"Bob Ünicode <bob@example.org>","version":"2.0~rc1","description":"beta library\nBeta is a library.\n\nIt has two paragraphs."}'
expect_exit 0 kv debian-catalog "$T_DIR/Packages"
expect_stdout "$ALPHA
$BETA_SHORT"
expect_exit 0 kv debian-catalog - <"$T_DIR/Packages"
expect_stdout "$ALPHA
$BETA_SHORT"
expect_exit 0 kv debian-catalog --translations "$T_DIR/Translation-en" "$T_DIR/Packages"
expect_stdout "$ALPHA
$BETA_LONG"
printf '%s\n' "$OUT" >"$T_DIR/catalog.jsonl"
# ... and the result loads as documents pkg::<package>.
new_db catalog
expect_exit 0 kv load "$T_DIR/catalog.jsonl" --key 'pkg::{package}'
summary_has '"loaded":2,'
run kv get pkg::alpha pkg::beta
OUT=$(printf '%s\n' "$OUT" | strip_cas)
expect_stdout "{\"key\":\"pkg::alpha\",\"doc\":$ALPHA}
{\"key\":\"pkg::beta\",\"doc\":$BETA_LONG}"
: >"$T_DIR/empty"
expect_error 3 "" kv debian-catalog "$T_DIR/empty"


# A small cache (issue 13, item 10): KVFTS_CACHE_MB=4 at init and a load
# of 20,000 documents in batches of 500 failed after exactly 10,000 (the
# mutex region ran out, or a spurious "recovered after a crashed process").
# The cache chosen at init is the database's (DB_CONFIG): later commands
# without the variable use it, and so does their free-space check.
KVFTS_CACHE_MB=4 expect_exit 0 kv init "$T_DIR/small"
awk 'BEGIN { for (i = 0; i < 20000; i++)
    printf "{\"id\":\"p%d\",\"package\":\"pkg%d\",\"description\":\"a package that does things number %d with words of text\",\"tags\":[\"t%d\",\"u%d\"]}\n",
        i, i, i, i % 50, i % 7 }' >"$T_DIR/small.jsonl"
KVFTS_CACHE_MB=4 expect_exit 0 kv -d "$T_DIR/small" load "$T_DIR/small.jsonl" \
    --id-field id --batch 500 --quiet
summary_has '"loaded":20000,'
check "DB_CONFIG keeps the 4 MiB cache" \
    grep -q '^set_cachesize 0 4194304 1$' "$T_DIR/small/DB_CONFIG"
expect_exit 0 kv -d "$T_DIR/small" load "$T_DIR/small.jsonl" --id-field id \
    --batch 500 --mode replace --quiet
summary_has '"loaded":20000,'
expect_exit 0 kv -d "$T_DIR/small" check
expect_stdout_contains '"differences":0'
expect_exit 0 kv -d "$T_DIR/small" search 'pkg19999' --count
expect_stdout '{"total":1}'

finish
