#!/usr/bin/env bash
# e2e.index: the inverted index through the command -- the seeds' example,
# term/terms/get fts::, stats, check, reindex after a config change, a
# load whose index equals a reindex of the same documents, and the same
# load with field lists answering as it does.
source "$(dirname "$0")/lib.sh"

new_db seed
expect_exit 0 kv put the_fox '{"text":"The quick brown fox jumps over the lazy dog"}'
expect_exit 0 kv put the_cat '{"text":"The quick brown fox jumps over the lazy cat"}'
expect_exit 0 kv term _all fox
expect_stdout '{"count":2,"refs":["the_cat","the_fox"]}'
expect_exit 0 kv term _all cat
expect_stdout '{"count":1,"refs":["the_cat"]}'
expect_exit 0 kv term text lazy --limit 1
expect_stdout '{"count":2,"refs":["the_cat"]}'
expect_error 3 "no index entry fts::_all::wolf" kv term _all wolf
expect_exit 0 kv get fts::_all::dog
expect_stdout '{"key":"fts::_all::dog","doc":{"count":1,"refs":["the_fox"]}}'
expect_exit 0 kv terms text la
expect_stdout '{"term":"lazy","count":2}'
expect_exit 0 kv terms _all --limit 2
expect_stdout "$(printf '%s\n%s' '{"term":"brown","count":2}' '{"term":"cat","count":1}')"
expect_exit 0 kv check
expect_stdout_contains '"ok":true,"differences":0'

# Updates and deletes keep entries exact.
expect_exit 0 kv put the_cat '{"text":"A sleepy cat"}'
expect_exit 0 kv term _all fox
expect_stdout '{"count":1,"refs":["the_fox"]}'
expect_exit 0 kv del the_fox
expect_error 3 "no index entry" kv term _all fox
expect_exit 0 kv stats
expect_stdout_contains '"documents":1,"terms":3,"postings":3,'

# A config change re-indexes what is stored: an english field stems.
cat >"$T_DIR/cfg.json" <<'JSON'
{"analysis": {"fields": {"text": "english"}}}
JSON
expect_exit 0 kv put run '{"text":"running connections"}'
expect_exit 0 kv term text running
expect_exit 0 "$KVFTS_BIN" init "$KVFTS_DB" --config "$T_DIR/cfg.json"
expect_exit 0 kv term text run
expect_stdout '{"count":1,"refs":["run"]}'
expect_exit 0 kv term text connect
expect_error 3 "no index entry" kv term text running
expect_exit 0 kv check
expect_stdout_contains '"ok":true'

# A generated corpus: the loaded index equals a rebuild of it.
new_db corpus
awk 'BEGIN { srand(7); split("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu", w, " ");
     for (i = 1; i <= 3000; i++) { s = "w" i; for (j = 0; j < 1 + i % 17; j++) s = s " " w[1 + int(rand() * 12)];
       printf "{\"id\":\"d%d\",\"body\":\"%s\",\"n\":%d}\n", i, s, i % 7 } }' >"$T_DIR/corpus.jsonl"
expect_exit 0 kv load "$T_DIR/corpus.jsonl" --id-field id --mem 1 --quiet
expect_stdout_contains '"loaded":3000,'
expect_exit 0 kv check
expect_stdout_contains '"ok":true'
for t in alpha mu w1 w2999; do
    kv term body "$t" >"$T_DIR/before.$t" || fail "term body $t"
done
# Expected counts, computed from the file: documents whose body has the word.
want=$(grep -c '"body":"[^"]*\balpha\b' "$T_DIR/corpus.jsonl")
expect_exit 0 kv term body alpha --limit 1
expect_stdout_contains "{\"count\":$want,"
expect_exit 0 kv reindex
expect_stdout_contains '"documents":3000'
for t in alpha mu w1 w2999; do
    kv term body "$t" >"$T_DIR/after.$t" || fail "term body $t after reindex"
    cmp -s "$T_DIR/before.$t" "$T_DIR/after.$t" ||
        fail "fts::body::$t differs after reindex"
    pass
done
expect_exit 0 kv check
expect_stdout_contains '"ok":true'

# Field lists: the same corpus loaded with body's own lists answers every
# body-scoped search as the database without them does (keys and scores),
# after a delete too, lists none of their terms, counts their postings
# apart, and checks clean.
cat >"$T_DIR/lists.json" <<'JSON'
{"analysis": {"field_lists": ["body"]}}
JSON
new_db lists --config "$T_DIR/lists.json"
expect_exit 0 kv load "$T_DIR/corpus.jsonl" --id-field id --mem 1 --quiet
expect_stdout_contains '"loaded":3000,'
expect_exit 0 kv del d17             # in both: the statistics stay equal
KVFTS_DB="$T_DIR/corpus" kv del d17 >/dev/null || fail "del d17 without lists"
for q in 'body:alpha' 'body:alpha body:mu' 'body:(beta OR w42)' 'body:"alpha beta"' \
         'body:al*' 'body:w1*' 'gamma -body:delta' 'body:kappa n:3'; do
    KVFTS_DB="$T_DIR/corpus" kv search "$q" --limit 0 >"$T_DIR/without" 2>&1 ||
        fail "search $q without lists"
    kv search "$q" --limit 0 >"$T_DIR/with" 2>&1 || fail "search $q with lists"
    [ -s "$T_DIR/with" ] || fail "search $q: no output"
    cmp -s "$T_DIR/without" "$T_DIR/with" || fail "search $q: answers differ"
    pass
done
KVFTS_DB="$T_DIR/corpus" kv terms body >"$T_DIR/without" || fail "terms without"
kv terms body >"$T_DIR/with" || fail "terms with lists"
cmp -s "$T_DIR/without" "$T_DIR/with" || fail "kvfts terms body differs with lists"
pass
kv stats | grep -q '"field_list_postings":[1-9]' || fail "no list postings"
pass
KVFTS_DB="$T_DIR/corpus" kv stats | grep -q '"field_list_postings":0}' ||
    fail "list postings without lists"
pass
expect_exit 0 kv check
expect_stdout_contains '"ok":true'
finish
