#!/usr/bin/env bash
# e2e.search: `kvfts search` -- the seeds' searches, output formats (JSON
# lines with a final {"total":N}, --keys, --count, --format table), paging,
# --sort key, exit statuses (3: nothing matched, 2: a bad query with its
# position), and a generated corpus whose match counts are computed here
# with awk, independently of kvfts.
source "$(dirname "$0")/lib.sh"

new_db seed
expect_exit 0 kv put the_fox '{"text":"The quick brown fox jumps over the lazy dog"}'
expect_exit 0 kv put the_cat '{"text":"The quick brown fox jumps over the lazy cat"}'

keys() { jq -r 'select(.key) | .key' <<<"$OUT" | tr '\n' ' ' | sed 's/ $//'; }

expect_exit 0 kv search cat --keys
expect_eq "cat" "$(keys)" "the_cat"
expect_exit 0 kv search fox --keys
expect_eq "fox" "$(keys)" "the_fox the_cat"
expect_exit 0 kv search 'quick cat' --keys
expect_eq "quick cat" "$(keys)" "the_cat"
expect_exit 0 kv search '"lazy dog"' --keys
expect_eq '"lazy dog"' "$(keys)" "the_fox"
expect_exit 0 kv search '-cat fox' --keys
expect_eq "-cat fox" "$(keys)" "the_fox"
expect_exit 0 kv search --keys -- '-cat fox'
expect_eq "-- -cat fox" "$(keys)" "the_fox"
expect_exit 0 kv search 'text:(cat OR dog)' --keys --sort key
expect_eq "sort key" "$(keys)" "the_cat the_fox"

# Default output: documents with the hits, and the total last.
expect_exit 0 kv search dog
expect_eq "lines" "$(wc -l <<<"$OUT")" 2
expect_eq "doc" "$(head -1 <<<"$OUT" | jq -c .doc)" \
    '{"text":"The quick brown fox jumps over the lazy dog"}'
expect_eq "key" "$(head -1 <<<"$OUT" | jq -r .key)" the_fox
# score = idf = ln(1 + (2 - 1 + 0.5) / (1 + 0.5)) = ln 2 (tf 1, dl = avgdl)
expect_eq "score" "$(head -1 <<<"$OUT" | jq '.score * 1e6 | round')" \
    "$(awk 'BEGIN { printf "%d", log(2) * 1e6 + 0.5 }')"
expect_stdout_contains '{"total":1}'

# Nothing matched: exit 3, still a total line; --count always exits 0.
expect_exit 3 kv search wolf
expect_stdout '{"total":0}'
expect_exit 0 kv search wolf --count
expect_stdout '{"total":0}'
expect_exit 0 kv search 'fox OR wolf' --count
expect_stdout '{"total":2}'

# Bad queries: exit 2 with the position.
expect_error 2 "query: unbalanced '(' at 6" kv search 'quick (fox'
expect_error 2 "query: unbalanced '\"' at 4" kv search 'fox "lazy'
expect_error 2 "'OR' without a term after it at 4" kv search 'fox OR'
expect_error 2 "empty query at 0" kv search ''
expect_error 2 "only negative terms" kv search -- '-fox'
expect_usage_error 2 "--format is json or table" kv search fox --format xml
expect_usage_error 2 "give one QUERY" kv search

# Table format.
expect_exit 0 kv search fox --format table
expect_stdout_contains "the_fox"
expect_stdout_contains "2 of 2 matches"
check "table header" grep -q '^ *# *key *score *excerpt' <<<"$OUT"

# A generated corpus: counts computed by awk from the same text.
new_db corpus
awk 'BEGIN { srand(11); split("alpha beta gamma delta epsilon zeta eta theta", w, " ");
     for (i = 1; i <= 500; i++) { s = ""; for (j = 0; j < 3 + i % 9; j++) s = s " " w[1 + int(rand() * 8)];
       printf "{\"id\":\"d%03d\",\"body\":\"%s\",\"n\":%d}\n", i, substr(s, 2), i % 5 } }' >"$T_DIR/c.jsonl"
expect_exit 0 kv load "$T_DIR/c.jsonl" --id-field id --quiet
count_awk() {   # count_awk AWK-CONDITION-ON-BODY
    awk -v FS='"body":"' '{ split($2, a, "\""); b = " " a[1] " "; if ('"$1"') n++ } END { print n + 0 }' "$T_DIR/c.jsonl"
}
for spec in \
    'alpha|b ~ / alpha /' \
    'alpha beta|b ~ / alpha / && b ~ / beta /' \
    'alpha OR beta|b ~ / alpha / || b ~ / beta /' \
    'alpha -beta|b ~ / alpha / && b !~ / beta /' \
    '"alpha beta"|b ~ / alpha beta /' \
    'body:(gamma OR delta) eta|(b ~ / gamma / || b ~ / delta /) && b ~ / eta /' \
    'e*|b ~ / e/' \
    'NOT zeta theta|b ~ / theta / && b !~ / zeta /'; do
    q=${spec%%|*}
    want=$(count_awk "${spec#*|}")
    expect_exit 0 kv search "$q" --count
    expect_eq "count '$q'" "$(json_num total)" "$want"
    expect_exit 0 kv search "$q" --keys --limit 0
    expect_eq "total '$q'" "$(json_num total "$(tail -1 <<<"$OUT")")" "$want"
    expect_eq "hits '$q'" "$(($(wc -l <<<"$OUT") - 1))" "$want"
done
# n is a number: a keyword term under its path only
expect_exit 0 kv search 'n:3' --count
expect_eq "n:3" "$(json_num total)" "$(awk '/"n":3}/ { n++ } END { print n + 0 }' "$T_DIR/c.jsonl")"

# Paging: offset + limit walk the same ranking as one big page.
expect_exit 0 kv search 'alpha OR beta' --keys --limit 0
all=$(jq -r 'select(.key) | .key' <<<"$OUT")
paged=""
for off in 0 7 14 21 28; do
    run kv search 'alpha OR beta' --keys --limit 7 --offset $off
    paged+=$(jq -r 'select(.key) | .key' <<<"$OUT")$'\n'
done
expect_eq "paging" "$(head -35 <<<"$all")" "$(sed '/^$/d' <<<"$paged")"
# Scores are in descending order.
check "descending scores" jq -s -e '[.[] | select(.score) | .score] | . == (sort | reverse)' <<<"$OUT"

# A huge prefix answers (no expansion limit); its bounds flag a partial
# answer, or fail with --exact.  1,100 documents, each with its own term.
new_db huge
for i in $(seq 1 1100); do printf '{"id":%d,"w":"t%04d common"}\n' "$i" "$i"; done \
    > "$T_DIR/huge.jsonl"
expect_exit 0 kv load "$T_DIR/huge.jsonl" --id-field id --quiet
expect_exit 0 kv search 't*' --count
expect_stdout '{"total":1100}'
expect_exit 0 kv search 't* common' --keys --limit 2
expect_eq "huge total" "$(tail -1 <<<"$OUT")" '{"total":1100}'
expect_exit 0 kv search 't*' --count --mem-limit 1K
expect_stdout '{"total":1023,"partial":true}'
expect_exit 0 kv search 't*' --keys --limit 1 --mem-limit 1K
expect_eq "partial total" "$(tail -1 <<<"$OUT")" '{"total":1023,"partial":true}'
KVFTS_SEARCH_MEM=1K expect_exit 0 kv search 't*' --count
expect_stdout '{"total":1023,"partial":true}'
expect_error 1 "prefix 't*' at 0: its expansion in field '_all' holds documents past the memory limit of the search (a byte per document, 1024 bytes)" \
    kv search 't*' --count --mem-limit 1K --exact
expect_exit 0 kv search 't*' --count --mem-limit 1M --exact
expect_stdout '{"total":1100}'
expect_usage_error 2 "--mem-limit takes bytes" kv search 't*' --mem-limit 0
expect_usage_error 2 "--time-limit takes milliseconds" kv search 't*' --time-limit x

finish
