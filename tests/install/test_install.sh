#!/usr/bin/env bash
# Install kvfts from the build tree into a temporary prefix, then build a
# program against it three ways (CMake find_package with the shared and the
# static library, and pkg-config) and run each.
set -euo pipefail
build=${KVFTS_BUILD_DIR:?}
src=${KVFTS_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/tests/install" -B "$tmp/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/b" >/dev/null
libdir=$(dirname "$(find "$tmp/prefix" -name libkvfts.so | head -n 1)")
pass=0
check() {
    local out
    out=$(LD_LIBRARY_PATH="$libdir" "$@" "$tmp/db-$pass")
    if [ "$out" != '{"a":1}' ]; then
        echo "FAIL: $* printed '$out'"; exit 1
    fi
    pass=$((pass + 1))
}
check "$tmp/b/consumer_shared"
check "$tmp/b/consumer_static"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
cc "$src/tests/install/consumer.c" $(pkg-config --cflags --libs kvfts) -o "$tmp/pc"
check "$tmp/pc"
echo "install: $pass passed, 0 failed"
