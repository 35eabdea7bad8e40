# shellcheck shell=bash
# tests/e2e/lib.sh -- shared functions of the end-to-end tests (sourced by
# every tests/e2e/test_*.sh; not a test itself).
#
# Environment (set by tests/CMakeLists.txt):
#   KVFTS_BIN           the kvfts command under test
#   KVFTS_TEST_HELPER   tests/e2e/helper.c built (incr / read)
#   KVFTS_SOURCE_DIR    the source tree
#   TMPDIR              where the scratch directory goes (default /tmp)
#
# A test script sources this file, runs checks and ends with `finish`.  Each
# check either counts one pass or calls fail(), which prints what differed
# and exits non-zero at once (later checks would only repeat the damage).
# The last line is always "e2e.<name>: P passed, F failed".
#
#   run CMD...                    run CMD; stdout in $OUT, stderr in $ERR,
#                                 exit status in $RC (no check)
#   expect_exit CODE CMD...       run CMD and check its exit status
#   expect_stdout TEXT            stdout of the last run is exactly TEXT
#   expect_stdout_file FILE       stdout of the last run equals FILE's content
#   expect_stderr_contains TEXT   stderr of the last run contains TEXT
#   expect_error CODE TEXT CMD... exit CODE, and stderr is one line
#                                 "kvfts: <what>: <why>" containing TEXT
#   expect_usage_error CODE TEXT CMD...
#                                 as expect_error, for command-line mistakes
#                                 caught before any command runs: one line
#                                 "kvfts: <message>" containing TEXT
#   expect_eq WHAT GOT WANT       two values are equal
#   check COND_DESCRIPTION CMD... CMD (a test, e.g. [[ ... ]]) succeeds
#   kv ARGS...                    the kvfts command
#   json_num NAME [TEXT]          the number in "NAME":<n> of TEXT ($OUT)
#   track_pid PID                 kill PID (if still running) on exit
#   catalog_lines N FILE          N packages of the Debian catalog
#   catalog_keys FILE OUT         their keys, pkg::<package>
#   catalog_prefix WHAT           the database holds whole batches of them
#   catalog_counts_clean FILE     searches count as in a clean load of FILE
#
# Scripts run with `set -u -o pipefail`, not `set -e`: every failure goes
# through fail() so that it says what went wrong.

set -u -o pipefail

: "${KVFTS_BIN:?KVFTS_BIN must name the kvfts binary}"
[ -x "$KVFTS_BIN" ] || { echo "KVFTS_BIN '$KVFTS_BIN' is not executable" >&2; exit 2; }

T_NAME="e2e.$(basename "$0" .sh)"
T_NAME="${T_NAME/e2e.test_/e2e.}"
T_PASS=0
T_FAIL=0
T_PIDS=()
# The scratch directory is world-traversable (0755) so a test can run the
# command as an unprivileged user inside it.
T_DIR=$(mktemp -d "${TMPDIR:-/tmp}/kvfts-${T_NAME#e2e.}.XXXXXX") ||
    { echo "$T_NAME: mktemp failed" >&2; exit 2; }
chmod 755 "$T_DIR"
OUT=""
ERR=""
RC=0
T_LAST_CMD=""

# SIGKILL PID if it is still this shell's child (running, or exited and
# not yet reaped): bash reaps a finished background job at once, and by
# the time a test kills its PID again -- at the end, in t_cleanup -- the
# number may be another process's, another test's under ctest -j.  Status
# 0 if the signal was sent.
kill_child() {
    local st rest
    { read -r st </proc/"$1"/stat; } 2>/dev/null || return 1
    rest=${st##*) }                     # state, ppid, ...
    rest=${rest#* }
    [ "${rest%% *}" = "$$" ] && kill -KILL "$1" 2>/dev/null
}

t_cleanup() {
    local p
    for p in "${T_PIDS[@]}"; do
        kill_child "$p"
        wait "$p" 2>/dev/null
    done
    # chmod'ed directories from permission tests must be removable.
    chmod -R u+rwX "$T_DIR" 2>/dev/null
    rm -rf "$T_DIR"
}
trap t_cleanup EXIT
trap 'echo "$T_NAME: interrupted" >&2; exit 130' INT TERM

track_pid() { T_PIDS+=("$1"); }

kv() { "$KVFTS_BIN" "$@"; }

# catalog_lines N FILE: the first N packages of this machine's Debian
# catalog, one JSON document a line, into FILE (bench/data's copy, else
# built from apt's lists by tools/debian-corpus.sh).  Without apt's lists,
# the committed 400-package sample, said on stderr, and status 1 (callers
# shrink their batches).
catalog_lines() {
    local n=$1 out=$2 src=$KVFTS_SOURCE_DIR
    if [ -s "$src/bench/data/debian.jsonl" ]; then
        head -n "$n" "$src/bench/data/debian.jsonl" >"$out"
    elif KVFTS_BIN=$KVFTS_BIN bash "$src/tools/debian-corpus.sh" \
            "$T_DIR/full.jsonl" 2>"$T_DIR/corpus.err"; then
        head -n "$n" "$T_DIR/full.jsonl" >"$out"
    else
        echo "$T_NAME: no Debian catalog here" \
             "($(tail -1 "$T_DIR/corpus.err")): using the 400-package sample" >&2
        cp "$src/tests/data/tok_debian_sample.jsonl" "$out"
        return 1
    fi
}

# catalog_keys FILE OUT: the key of each line of FILE, pkg::<package> ("?"
# for a line without a package), a line each, into OUT.
catalog_keys() {
    awk '{ if (match($0, /"package": ?"[^"]*"/)) {
               s = substr($0, RSTART, RLENGTH); sub(/"package": ?"/, "", s)
               sub(/"$/, "", s); print "pkg::" s } else print "?" }' \
        "$1" >"$2"
}

# catalog_key I: the key of line I (1-based) of the catalog lines, from
# $T_DIR/keys.txt (catalog_keys).
catalog_key() { sed -n "${1}p" "$T_DIR/keys.txt"; }

# catalog_prefix WHAT: $KVFTS_DB holds exactly lines 1..D of the catalog
# lines, D a whole number of $BATCH-line batches or all $TOTAL: the key of
# line D is stored, that of line D + 1 is not.  Sets D.
catalog_prefix() {
    local what=$1 d
    run kv stats
    [ "$RC" = 0 ] || fail "$what: kvfts stats: exit $RC: $ERR"
    d=$(json_num documents)
    if [ $((d % BATCH)) != 0 ] && [ "$d" != "$TOTAL" ]; then
        fail "$what: $d documents: not a whole number of $BATCH-line batches"
    fi
    if [ "$d" -gt 0 ]; then
        expect_exit 0 kv get "$(catalog_key "$d")"
    fi
    if [ "$d" -lt "$TOTAL" ]; then
        expect_exit 3 kv get "$(catalog_key $((d + 1)))"
    fi
    D=$d
}

# catalog_counts_clean FILE: load FILE (catalog lines) into a new database
# and check that searches of $KVFTS_DB count what searches of that clean
# load count.
catalog_counts_clean() {
    local clean="$T_DIR/clean" q got
    expect_exit 0 kv init "$clean"
    expect_exit 0 kv -d "$clean" load "$1" --key 'pkg::{package}' --quiet
    for q in library 'python OR perl' '"command line"' 'lib*' 'game -data'; do
        run kv search "$q" --count
        got="$RC $OUT"
        run kv -d "$clean" search "$q" --count
        expect_eq "count of '$q' equals a clean load's" "$got" "$RC $OUT"
    done
}

# Quote a command for messages.
t_show() {
    local s="" a
    for a in "$@"; do
        if [[ "$a" =~ ^[A-Za-z0-9_./:=@,+-]+$ ]]; then
            s+="$a "
        else
            s+="$(printf '%q' "$a") "
        fi
    done
    s="${s% }"
    # Keep very long arguments readable.
    if [ "${#s}" -gt 400 ]; then s="${s:0:400}..."; fi
    printf '%s' "${s//$KVFTS_BIN/kvfts}"
}

t_summary() {
    echo "$T_NAME: $T_PASS passed, $T_FAIL failed"
}

# fail MESSAGE [DETAIL...]: report and stop the script.
fail() {
    T_FAIL=$((T_FAIL + 1))
    {
        echo "FAIL: $1"
        shift
        local d
        for d in "$@"; do
            printf '%s\n' "$d" | sed 's/^/    /'
        done
        if [ -n "$T_LAST_CMD" ]; then
            echo "  last command: $T_LAST_CMD"
            echo "  exit status: $RC"
            echo "  stdout (first 20 lines):"
            printf '%s\n' "$OUT" | head -n 20 | sed 's/^/    | /'
            echo "  stderr (first 20 lines):"
            printf '%s\n' "$ERR" | head -n 20 | sed 's/^/    | /'
        fi
    } >&2
    t_summary
    exit 1
}

pass() { T_PASS=$((T_PASS + 1)); }

finish() {
    t_summary
    exit 0
}

# run CMD...: stdin is inherited, so `run kv put k - <file` works.
run() {
    T_LAST_CMD=$(t_show "$@")
    "$@" >"$T_DIR/.out" 2>"$T_DIR/.err"
    RC=$?
    OUT=$(cat "$T_DIR/.out")
    ERR=$(cat "$T_DIR/.err")
    return 0
}

expect_exit() {
    local want=$1
    shift
    run "$@"
    [ "$RC" = "$want" ] || fail "exit status $RC, expected $want"
    pass
}

expect_stdout() {
    if [ "$OUT" != "$1" ]; then
        fail "stdout differs" "expected:" "$1" "got:" "$OUT" \
            "diff (expected -> got):" \
            "$(diff <(printf '%s\n' "$1") <(printf '%s\n' "$OUT") | head -n 20)"
    fi
    pass
}

expect_stdout_file() {
    if ! cmp -s "$1" "$T_DIR/.out"; then
        fail "stdout differs from $1" "diff (expected -> got):" \
            "$(diff "$1" "$T_DIR/.out" | head -n 20)"
    fi
    pass
}

expect_stdout_contains() {
    [[ "$OUT" == *"$1"* ]] || fail "stdout does not contain: $1"
    pass
}

expect_stderr_contains() {
    [[ "$ERR" == *"$1"* ]] || fail "stderr does not contain: $1"
    pass
}

# The documented error format: exactly one line "kvfts: <what>: <why>".
expect_error() {
    local code=$1 text=$2
    shift 2
    expect_exit "$code" "$@"
    local n
    n=$(wc -l <"$T_DIR/.err")
    [ "$n" = 1 ] || fail "stderr has $n lines, expected one error line"
    [[ "$ERR" =~ ^kvfts:\ [^:]+:\ .+ ]] ||
        fail "stderr is not 'kvfts: <what>: <why>'"
    expect_stderr_contains "$text"
}

expect_usage_error() {
    local code=$1 text=$2
    shift 2
    expect_exit "$code" "$@"
    local n
    n=$(wc -l <"$T_DIR/.err")
    [ "$n" = 1 ] || fail "stderr has $n lines, expected one error line"
    [[ "$ERR" =~ ^kvfts:\ .+ ]] || fail "stderr does not start with 'kvfts: '"
    expect_stderr_contains "$text"
}

expect_eq() {
    [ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"
    pass
}

# check DESCRIPTION CMD...: CMD must succeed.
check() {
    local what=$1
    shift
    "$@" || fail "$what"
    pass
}

# json_num NAME [TEXT]: the integer after "NAME": in TEXT (default $OUT).
json_num() {
    local text=${2-$OUT}
    [[ "$text" =~ \"$1\":(-?[0-9]+) ]] || { echo ""; return 1; }
    echo "${BASH_REMATCH[1]}"
}

# new_db NAME [init args...]: create a database $T_DIR/NAME and export it
# as KVFTS_DB.
new_db() {
    local d="$T_DIR/$1"
    shift
    expect_exit 0 kv init "$d" "$@"
    export KVFTS_DB="$d"
}

# Milliseconds since the epoch (for timing messages only).
now_ms() { date +%s%3N; }

# as_unprivileged WHAT: set as_user to the command prefix that runs a
# program as an unprivileged user (empty when not root: we are one; as
# root, setpriv to nobody, since root ignores permission bits), or to
# (skip) -- saying that WHAT is skipped -- when no user can be switched to.
as_unprivileged() {
    as_user=()
    [ "$(id -u)" = 0 ] || return 0
    if command -v setpriv >/dev/null &&
        setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null &&
        setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$KVFTS_BIN"
    then
        as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    else
        echo "$T_NAME: SKIPPED $1: running as root and cannot switch to an" \
            "unprivileged user" >&2
        as_user=(skip)
    fi
}
