#!/usr/bin/env bash
# tools/check-exports.sh LIB HEADER -- ctest lint.exports: the shared
# library exports exactly the functions include/kvfts.h declares with
# KVFTS_EXTERN, and nothing else (no internal kv_*, tok_*, idx_*, qry_*
# symbol: the build uses -fvisibility=hidden), besides the pthread_* calls
# lib/kv/kv_stall.c puts in front of the C library's.  An empty or unreadable
# library fails too.
set -euo pipefail
lib=$1 header=$2
# pthread_*: the C library's waiting calls, which lib/kv/kv_stall.c
# defines in front of the C library's so that Berkeley DB's calls reach
# them (they must be exported to be found); every other caller's go on to
# the C library's.
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWwDdBbRrVvi]$/ && $3 !~ /^pthread_/ {print $3}' | sort -u)
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
