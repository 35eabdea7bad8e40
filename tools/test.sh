#!/usr/bin/env bash
# tools/test.sh -- the README's second command, and what CI runs: install
# what is missing, build with warnings as errors and run every test (unit
# and end-to-end), run the threaded tests under ThreadSanitizer, then build
# with AddressSanitizer + UndefinedBehaviorSanitizer and run them all again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --deps-only
jobs=$(nproc 2>/dev/null || echo 2)
# Tests make many small databases and fsync each commit: give them a tmpfs
# when there is one with room (durability across power loss is not what
# they test; kill -9 recovery works the same).
if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR==2 {print $4}')" -gt 2000000 ]; then
    export TMPDIR=/dev/shm/kvfts-tests.$$
    mkdir -p "$TMPDIR"
    trap 'rm -rf "$TMPDIR"' EXIT
fi

run() {   # run BUILD_DIR CMAKE_ARGS...
    local dir=$1; shift
    echo "== build $dir ($*)"
    cmake -S . -B "$dir" -DKVFTS_WERROR=ON "$@" >/dev/null
    cmake --build "$dir" -j"$jobs" >/dev/null
    echo "== test $dir"
    ctest --test-dir "$dir" --output-on-failure -j"$jobs"
}

run build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== build build-clang (clang, warnings are errors; unit tests)"
CC=clang cmake -S . -B build-clang -DKVFTS_WERROR=ON >/dev/null
cmake --build build-clang -j"$jobs" >/dev/null
ctest --test-dir build-clang --output-on-failure -j"$jobs" -R '^unit\.'
# ThreadSanitizer: the tests that run the library on threads -- two
# databases with a writer and a reader thread each (unit.threads), batches
# with analysis worker threads (unit.api), a deadlock between two threads
# (unit.kv).  TSAN_OPTIONS (halt_on_error, tools/tsan.supp) comes from
# ctest, set by tests/CMakeLists.txt when KVFTS_TSAN is on.
echo "== build build-tsan (clang, ThreadSanitizer; the threaded tests)"
CC=clang cmake -S . -B build-tsan -DKVFTS_WERROR=ON -DKVFTS_TSAN=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-tsan -j"$jobs" --target test_threads test_api test_kv >/dev/null
ctest --test-dir build-tsan --output-on-failure -j"$jobs" \
    -R '^unit\.(threads|api|kv)$'
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run build-sanitize -DCMAKE_BUILD_TYPE=Debug -DKVFTS_SANITIZE=ON
echo "== all tests passed (plain, ThreadSanitizer and ASan+UBSan)"
