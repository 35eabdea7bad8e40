#!/usr/bin/env bash
# tools/check-doc-refs.sh -- ctest lint.docrefs: what the code cites must be
# in the repository.  Every Markdown file named in a source, header, script
# or CMake file must exist, and every README section cited (README, then
# the section's title in double quotes) must be a heading of README.md.
# A maintainer with only the repository must find what a comment points to
# (issue 13, item 8).
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
files=$(git ls-files -- '*.c' '*.h' '*.sh' '*.in' 'CMakeLists.txt' \
        '*/CMakeLists.txt' 2>/dev/null ||
        find . -path ./build\* -prune -o \( -name '*.[ch]' -o -name '*.sh' \
             -o -name CMakeLists.txt -o -name '*.in' \) -print)
bad=0
# Markdown files.
while IFS=: read -r f md; do
    [ -e "$md" ] || [ -n "$(git ls-files -- "*/$md" 2>/dev/null)" ] || {
        echo "$f: cites $md, which is not in the repository"; bad=1; }
done < <(grep -oE '\b[A-Za-z0-9_-]+\.md\b' $files /dev/null | sort -u)
# README sections.
headings=$(sed -n 's/^##* //p' README.md)
while IFS= read -r hit; do
    f=${hit%%:*}
    sec=$(printf '%s' "${hit#*:}" | sed -E 's/^README(\.md)? "([^"]*)"$/\2/')
    grep -qxF -- "$sec" <<<"$headings" || {
        echo "$f: cites README section \"$sec\", which README.md does not have"
        bad=1; }
done < <(grep -oE 'README(\.md)? "[^"]+"' $files /dev/null | sort -u)
[ "$bad" = 0 ] && echo "every Markdown file and README section the code cites exists"
exit "$bad"
