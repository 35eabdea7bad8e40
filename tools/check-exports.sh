#!/usr/bin/env bash
# tools/check-exports.sh LIB HEADER -- ctest lint.exports: the shared
# library exports exactly the functions include/kvfts.h declares with
# KVFTS_EXTERN, and nothing else (no internal kv_*, tok_*, idx_*, qry_*
# symbol: the build uses -fvisibility=hidden).  An empty or unreadable
# library fails too.
set -euo pipefail
lib=$1 header=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWwDdBbRrVvi]$/ {print $3}' | sort -u)
declared=$(tr '\n' ' ' <"$header" | grep -oE 'KVFTS_EXTERN\([^)]*\) *[a-z_0-9]+ *\(' |
           sed -E 's/.*\) *([a-z_0-9]+) *\($/\1/' | sort -u)
[ -n "$exported" ] || { echo "$lib exports nothing (or nm failed)"; exit 1; }
bad=0
extra=$(comm -23 <(printf '%s\n' "$exported") <(printf '%s\n' "$declared"))
missing=$(comm -13 <(printf '%s\n' "$exported") <(printf '%s\n' "$declared"))
if [ -n "$extra" ]; then
    echo "exported beyond kvfts.h:"; printf '  %s\n' $extra; bad=1
fi
if [ -n "$missing" ]; then
    echo "declared in kvfts.h but not exported:"; printf '  %s\n' $missing; bad=1
fi
[ "$bad" = 0 ] && echo "libkvfts.so exports exactly the $(printf '%s\n' "$exported" | wc -l) functions of kvfts.h"
exit "$bad"
