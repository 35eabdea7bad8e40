#!/usr/bin/env bash
# tools/setup.sh [--deps-only] -- install the Debian packages kvfts needs
# (only those missing) and build it into build/ (warnings are errors).
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="gcc clang make cmake pkg-config libdb5.3-dev libutf8proc-dev libstemmer-dev
      libyajl-dev libcmocka-dev libstreamvbyte-dev libxxhash-dev libzstd-dev jq sqlite3
      libsqlite3-dev gnuplot-nox g++ libxapian-dev libclang-rt-14-dev"

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" \
        || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi
[ "${1:-}" = "--deps-only" ] && exit 0

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" >/dev/null
echo "setup: built build/kvfts" >&2
