#!/usr/bin/env bash
# bench/check-queries.sh NAME [CORPUS.jsonl] -- verify the query set of
# benchmark corpus NAME (bench/corpora/NAME.json, bench/queries/*.tsv).
#
# Loads the corpus into kvfts (`kvfts init --config` with the spec's config,
# `kvfts load --key` with its key template) and into SQLite FTS5 (the
# spec's fields as columns after `key UNINDEXED`, tokenize 'unicode61
# remove_diacritics 2', filled through a one-column staging table and
# json_extract), then runs every query on both and checks that the counts
# are equal and above zero.  On a difference it shows a few keys found by
# one engine only, to explain it.  It also checks the file's form: CLASS is
# one of the nine classes, at least 5 queries per class, at least 45 in all;
# a term-common count below 1,000 or a term-rare count above 100 is noted.
# CHECK_SETS=1 also compares the matching key sets, not only their sizes.
#
# CORPUS defaults to bench/data/NAME.jsonl (bench/data/synthetic-DOCS.jsonl
# for synthetic, DOCS = $CHECK_DOCS or 10000), built with bench/corpus.sh
# when missing or stale.  kvfts is $KVFTS_BIN or build/kvfts; sqlite3 and jq
# come from PATH.  CHECK_WORK=DIR keeps both databases in DIR and reuses
# them while they are newer than the corpus and the spec (handy when only
# the queries change).  Exit 0 when every query agrees, 1 otherwise.
set -euo pipefail
name=${1:?usage: check-queries.sh NAME [CORPUS.jsonl]}
here=$(cd "$(dirname "$0")/.." && pwd)
spec=$here/bench/corpora/$name.json
kvfts=${KVFTS_BIN:-$here/build/kvfts}
export KVFTS_BIN=$kvfts
classes="term-common term-rare and2 and3 or not phrase prefix field"

die() { echo "check-queries: $*" >&2; exit 1; }
[ -f "$spec" ] || die "$spec: no such spec"
[ -x "$kvfts" ] || die "$kvfts: not found (set KVFTS_BIN)"
command -v sqlite3 >/dev/null || die "sqlite3: not found"
command -v jq >/dev/null || die "jq: not found"

corpus=${2:-}
if [ -z "$corpus" ]; then
    if [ "$(jq -r .synthetic "$spec")" = true ]; then
        docs=${CHECK_DOCS:-10000}
        corpus=$here/bench/data/$name-$docs.jsonl
        bash "$here/bench/corpus.sh" "$name" "$corpus" "$docs"
    else
        corpus=$here/bench/data/$name.jsonl
        bash "$here/bench/corpus.sh" "$name" "$corpus"
    fi
fi
[ -s "$corpus" ] || die "$corpus: missing or empty"
queries=$here/bench/queries/$(jq -r .queries "$spec")
key=$(jq -r .key "$spec")
mapfile -t fields < <(jq -r '.fields[]' "$spec")

if [ -n "${CHECK_WORK:-}" ]; then
    work=$CHECK_WORK
    mkdir -p "$work"
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/check-queries.XXXXXX")
    trap 'rm -rf "$work"' EXIT
fi
db=$work/kvfts-db
sq=$work/fts5.db

sql_str() { local s=${1//\'/\'\'}; printf "'%s'" "$s"; }

# The key template as an SQL expression over staging column j.
key_sql() {
    local t=$1 e=""
    while [[ $t =~ ^([^{]*)\{([^}]*)\}(.*)$ ]]; do
        e+="$(sql_str "${BASH_REMATCH[1]}") || json_extract(j, "
        e+="$(sql_str "\$.\"${BASH_REMATCH[2]//./\".\"}\"")) || "
        t=${BASH_REMATCH[3]}
    done
    printf '%s%s' "$e" "$(sql_str "$t")"
}

# Are the databases in $work built from this corpus and spec?
loaded() {
    [ -f "$work/loaded" ] && [ "$work/loaded" -nt "$corpus" ] &&
        [ "$work/loaded" -nt "$spec" ] &&
        [ "$(cat "$work/loaded")" = "$name $corpus" ]
}

load_kvfts() {
    rm -rf "$db"
    jq .config "$spec" > "$work/config.json"
    "$kvfts" init "$db" --config "$work/config.json" >/dev/null
    local t0=$SECONDS
    KVFTS_DB=$db "$kvfts" load "$corpus" --key "$key" >/dev/null
    echo "check-queries: kvfts: loaded $corpus in $((SECONDS - t0)) s" >&2
}

load_fts5() {
    local cols="" sel="" f t0=$SECONDS
    rm -f "$sq"
    for f in "${fields[@]}"; do
        cols+=", \"$f\""
        sel+=", json_extract(j, $(sql_str "\$.\"$f\""))"
    done
    sqlite3 "$sq" >/dev/null <<EOF
.mode ascii
.separator "\037" "\n"
CREATE TABLE s(j TEXT);
.import '${corpus//\'/\'\'}' s
CREATE VIRTUAL TABLE f USING fts5(key UNINDEXED$cols,
    tokenize = 'unicode61 remove_diacritics 2');
INSERT INTO f(key$cols) SELECT $(key_sql "$key")$sel FROM s;
DROP TABLE s;
EOF
    echo "check-queries: fts5: loaded $corpus in $((SECONDS - t0)) s" >&2
}

# The count, or the error message (a failing engine does not stop us).
kvfts_count() {
    { KVFTS_DB=$db "$kvfts" search "$1" --count 2>&1 || true; } | jq -Rr \
        'fromjson? // . | if type == "object" then .total else . end'
}

fts5_count() {
    sqlite3 "$sq" "SELECT count(*) FROM f WHERE f MATCH $(sql_str "$1")" \
        2>&1 || true
}

# Up to 5 keys that only one engine finds (none: the sets are equal).
explain() {
    { KVFTS_DB=$db "$kvfts" search "$1" --keys --limit 0 --sort key \
        2>/dev/null || true; } | jq -r 'select(.key) | .key' |
        LC_ALL=C sort > "$work/k"
    { sqlite3 "$sq" "SELECT key FROM f WHERE f MATCH $(sql_str "$2")" \
        2>/dev/null || true; } | LC_ALL=C sort > "$work/f"
    LC_ALL=C comm -23 "$work/k" "$work/f" | awk 'NR <= 5 {
        print "    only kvfts: " $0 }'
    LC_ALL=C comm -13 "$work/k" "$work/f" | awk 'NR <= 5 {
        print "    only fts5:  " $0 }'
}

is_class() { [[ " $classes " == *" $1 "* ]]; }

check() {
    local bad=0 n=0 lineno=0 class kq fq rest kc fc st
    declare -A per
    while IFS= read -r line || [ -n "$line" ]; do
        lineno=$((lineno + 1))
        [[ -z $line || $line == \#* ]] && continue
        IFS=$'\t' read -r class kq fq rest <<< "$line"
        if ! is_class "$class" || [ -z "$kq" ] || [ -z "$fq" ] ||
           [ -n "${rest:-}" ]; then
            echo "$queries:$lineno: not CLASS<TAB>KVFTS<TAB>FTS5 with a" \
                "known class: $line"
            bad=$((bad + 1))
            continue
        fi
        n=$((n + 1))
        per[$class]=$((${per[$class]:-0} + 1))
        kc=$(kvfts_count "$kq")
        fc=$(fts5_count "$fq")
        st=ok
        if ! [[ $kc =~ ^[0-9]+$ && $fc =~ ^[0-9]+$ ]]; then
            st=ERROR
        elif [ "$kc" != "$fc" ]; then
            st=DIFFER
        elif [ "${CHECK_SETS:-0}" = 1 ] &&
             [ -n "$(explain "$kq" "$fq")" ]; then
            st=DIFFER
        elif [ "$kc" = 0 ]; then
            st=NO-MATCH
        elif [ "$class" = term-common ] && [ "$kc" -lt 1000 ]; then
            st="ok (note: common term below 1,000)"
        elif [ "$class" = term-rare ] && [ "$kc" -gt 100 ]; then
            st="ok (note: rare term above 100)"
        fi
        if [ "$st" = ERROR ]; then
            printf '%-11s %9s %9s  %-34s %s\n' "$class" - - "$kq" "$st"
            [[ $kc =~ ^[0-9]+$ ]] || echo "    kvfts: $kc"
            [[ $fc =~ ^[0-9]+$ ]] || echo "    fts5:  $fc"
        else
            printf '%-11s %9s %9s  %-34s %s\n' "$class" "$kc" "$fc" "$kq" "$st"
        fi
        if [[ $st != ok* ]]; then
            bad=$((bad + 1))
            [ "$st" != DIFFER ] || explain "$kq" "$fq"
        fi
    done < "$queries"
    for class in $classes; do
        if [ "${per[$class]:-0}" -lt 5 ]; then
            echo "class $class: ${per[$class]:-0} queries (at least 5 wanted)"
            bad=$((bad + 1))
        fi
    done
    if [ "$n" -lt 45 ]; then
        echo "$n queries (at least 45 wanted)"
        bad=$((bad + 1))
    fi
    echo "check-queries: $name: $n queries, $bad problems"
    [ "$bad" = 0 ]
}

if ! loaded; then
    rm -f "$work/loaded"
    load_kvfts
    load_fts5
    echo "$name $corpus" > "$work/loaded"
fi
printf '%-11s %9s %9s  %s\n' class kvfts fts5 query
check
