#!/usr/bin/env bash
# tools/quickstart.sh -- the README's first command: install, build, build the
# Debian package catalog corpus, index it into a kvfts database, run
# searches, and read documents back by key, through lookups and by counter
# range.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
K=$PWD/build/kvfts
corpus=bench/data/debian.jsonl
bash tools/debian-corpus.sh "$corpus"

db=build/demo-db
rm -rf "$db"
export KVFTS_DB=$db
step() { printf '\n== %s\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }
# Show the first N lines, each cut to 200 characters, reading all input (an
# early close would kill the writer with SIGPIPE under pipefail).
first() { awk -v n="$1" 'NR <= n { print substr($0, 1, 200) }'; }

cat > build/demo-config.json <<'JSON'
{"lookups": [{"name": "section", "path": "section"},
             {"name": "homepage", "path": "homepage"}]}
JSON
step "create a database with two lookups" $K init "$db" --config build/demo-config.json
step "load the catalog" $K load "$corpus" --key 'pkg::{package}'
step "statistics" $K stats
step "an index entry: which packages mention 'bourne' (the seeds' form)" \
    $K term description bourne --limit 5
search() {
    printf '\n== search: %s\n$ kvfts search %q --limit 5 --keys\n' "$1" "$2"
    $K search "$2" --limit 5 --keys
}
search "one term" 'shell'
search "every word (AND)" 'python testing framework'
search "a phrase" '"regular expression"'
search "a prefix" 'compres*'
search "a field filter" 'section:python yaml'
search "OR and NOT" '(bash OR zsh) -completion'
printf '\n== the top hit of a search, with its document, as a table\n'
printf '$ kvfts search %q --limit 3 --format table\n' 'fast json parser'
$K search 'fast json parser' --limit 3 --format table
printf '\n== the most common terms of the section field starting with "py"\n$ %s\n' "$K terms section py"
$K terms section py | first 5
step "multi-get by key (a missing key is reported, not fatal)" \
    $K get pkg::bash pkg::coreutils pkg::no-such-package || true
printf '\n== follow a lookup: the packages in section "shells"\n'
printf '$ %s\n' "$K lookup section shells --ref"
$K lookup section shells --ref | first 1
printf '\n== the documents behind it (first 3)\n$ %s\n' "$K lookup section shells"
$K lookup section shells | first 3
step "atomic counters and auto keys" $K put --auto note '{"text":"kvfts quickstart"}'
step "counter range multi-get" $K get --range note 1..
printf '\nDone.  The database is in %s; try: KVFTS_DB=%s %s --help\n' "$db" "$db" "$K"
