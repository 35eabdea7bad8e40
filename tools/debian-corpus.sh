#!/usr/bin/env bash
# tools/debian-corpus.sh OUT.jsonl -- build the Debian package catalog corpus
# on this machine: every package apt knows (apt-cache dumpavail) as one JSON
# line with package, section, maintainer, version, description (the full
# English long description from apt's Translation-en lists), homepage and
# depends.  Cached: rebuilt only when apt's lists are newer than OUT.
set -euo pipefail
out=${1:?usage: debian-corpus.sh OUT.jsonl}
here=$(cd "$(dirname "$0")/.." && pwd)
kvfts=${KVFTS_BIN:-$here/build/kvfts}
lists=/var/lib/apt/lists

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

if ! ls "$lists"/*_i18n_Translation-en* >/dev/null 2>&1 ||
   ! ls "$lists"/*_Packages* >/dev/null 2>&1; then
    echo "corpus: fetching apt's package lists with English descriptions" >&2
    as_root apt-get update -qq -o Acquire::Languages=en
fi
if [ -s "$out" ] && [ -z "$(find "$lists" -newer "$out" -name '*Packages*' -o -newer "$out" -name '*Translation*' | head -1)" ]; then
    echo "corpus: $out is up to date ($(wc -l < "$out") packages)" >&2
    exit 0
fi
mkdir -p "$(dirname "$out")"
trans=$(mktemp)
trap 'rm -f "$trans"' EXIT
for f in "$lists"/*_i18n_Translation-en*; do
    /usr/lib/apt/apt-helper cat-file "$f" >> "$trans"
    echo >> "$trans"
done
apt-cache dumpavail | "$kvfts" debian-catalog --translations "$trans" > "$out.tmp"
mv "$out.tmp" "$out"
echo "corpus: $out: $(wc -l < "$out") packages, $(du -h "$out" | cut -f1)" >&2
