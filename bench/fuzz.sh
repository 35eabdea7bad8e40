#!/usr/bin/env bash
# bench/fuzz.sh [SECONDS_PER_TARGET] -- build the libFuzzer targets of
# tests/fuzz/ with clang into build-fuzz (-DKVFTS_FUZZ=ON: libFuzzer +
# AddressSanitizer + UndefinedBehaviorSanitizer) and run each target for
# SECONDS_PER_TARGET seconds (default 600), one after the other.
#
# Each target starts from its committed corpus (tests/fuzz/corpus/TARGET,
# read only) plus what earlier runs found (build-fuzz/fuzz-run/TARGET/
# corpus, where new inputs go); crash, leak, timeout and out-of-memory
# inputs are written to build-fuzz/fuzz-run/TARGET/artifacts/.  Printed per
# target: executions, seconds, executions per second, corpus size, and any
# finding.  Exit status 1 if any target found anything (or failed to run),
# 0 otherwise.
#
# Environment: KVFTS_FUZZ_TARGETS (default "json analyzer query postings docrec"),
# KVFTS_FUZZ_BUILD (default build-fuzz), KVFTS_FUZZ_ARGS (more libFuzzer
# options, e.g. "-max_len=8192").
#
# To turn findings into committed seeds: minimize a crash with
#   build-fuzz/tests/fuzz/fuzz_T -minimize_crash=1 -runs=10000 CRASH
# and merge new inputs into the committed corpus with
#   build-fuzz/tests/fuzz/fuzz_T -merge=1 tests/fuzz/corpus/T build-fuzz/fuzz-run/T/corpus
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
targets=${KVFTS_FUZZ_TARGETS:-json analyzer query postings docrec}
build=${KVFTS_FUZZ_BUILD:-build-fuzz}
jobs=$(nproc 2>/dev/null || echo 2)

case $secs in
    ''|*[!0-9]*) echo "usage: bench/fuzz.sh [SECONDS_PER_TARGET]" >&2; exit 2 ;;
esac
command -v clang >/dev/null || { echo "fuzz: clang is needed" >&2; exit 2; }

echo "== build $build (clang, libFuzzer + ASan + UBSan)"
CC=clang cmake -S . -B "$build" -DKVFTS_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
build_targets=()
for t in $targets; do build_targets+=(--target "fuzz_$t"); done
cmake --build "$build" -j"$jobs" "${build_targets[@]}" >/dev/null || exit 1

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
found=0
summary=()
for t in $targets; do
    run=$build/fuzz-run/$t
    mkdir -p "$run/corpus" "$run/artifacts"
    dict=()
    [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
    echo "== fuzz $t for ${secs}s (log: $run/log)"
    touch "$run/.start"     # artifacts newer than this are this run's
    start=$(date +%s)
    # shellcheck disable=SC2086   # KVFTS_FUZZ_ARGS is a list of options
    "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -rss_limit_mb=2048 \
        -timeout=10 -print_final_stats=1 -artifact_prefix="$run/artifacts/" \
        "${dict[@]}" ${KVFTS_FUZZ_ARGS:-} \
        "$run/corpus" "tests/fuzz/corpus/$t" >"$run/log" 2>&1
    rc=$?
    took=$(( $(date +%s) - start ))
    execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$run/log")
    execs=${execs:-0}
    ncorp=$(find "$run/corpus" "tests/fuzz/corpus/$t" -type f | wc -l)
    arts=$(find "$run/artifacts" -type f -newer "$run/.start")
    line="$t: $execs executions in ${took}s ($(( execs / (took > 0 ? took : 1) ))/s), corpus $ncorp inputs"
    if [ "$rc" -ne 0 ] || [ -n "$arts" ]; then
        found=1
        line="$line, FINDING (exit $rc)"
        grep -m1 -E "ERROR: |runtime error|SUMMARY" "$run/log" | sed 's/^/    /'
        for a in $arts; do echo "    artifact: $a"; done
    fi
    echo "$line"
    summary+=("$line")
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $found
