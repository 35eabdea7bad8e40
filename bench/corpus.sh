#!/usr/bin/env bash
# bench/corpus.sh NAME OUT.jsonl [DOCS] -- build benchmark corpus NAME into
# OUT (JSON Lines), as bench/corpora/NAME.json describes it:
#   debian     this machine's Debian package catalog (tools/debian-corpus.sh)
#   gcide      GNU Collaborative International Dictionary of English entries
#              (Debian package dict-gcide)
#   linuxdoc   Linux kernel documentation pages (Debian package linux-doc-6.1)
#   synthetic  DOCS synthetic Zipf documents (DOCS required; seed 42 or
#              $CORPUS_SEED; the seed is not checked by the cache)
#   largevocab the same generator over a 4,000,000-word vocabulary (DOCS
#              required): prefixes of 1 to 3 letters pass 1,000 terms
# For gcide and linuxdoc, DOCS keeps only the first DOCS documents.
# Cached: nothing is done when OUT is newer than its sources and than the
# generator (and holds DOCS documents when DOCS is given).  Missing Debian
# packages are installed (as root, or through sudo).  The generator is
# $KVFTS_CORPUS_BIN, else kvfts-corpus beside $KVFTS_BIN, else
# build/kvfts-corpus.  OUT is written as OUT.tmp, then renamed.
set -euo pipefail
usage() {
    echo "usage: corpus.sh debian|gcide|linuxdoc|synthetic|largevocab OUT.jsonl" \
        "[DOCS]" >&2
    exit 2
}
[ $# -ge 2 ] && [ $# -le 3 ] || usage
name=$1 out=$2 docs=${3:-}
here=$(cd "$(dirname "$0")/.." && pwd)
seed=${CORPUS_SEED:-42}

die() { echo "corpus: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

need_pkg() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed" &&
        return 0
    echo "corpus: installing $1" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" \
        >/dev/null
}

generator() {
    local bin
    if [ -n "${KVFTS_CORPUS_BIN:-}" ]; then
        bin=$KVFTS_CORPUS_BIN
    elif [ -n "${KVFTS_BIN:-}" ]; then
        bin=$(dirname "$KVFTS_BIN")/kvfts-corpus
    else
        bin=$here/build/kvfts-corpus
    fi
    [ -x "$bin" ] || die "$bin: not found (build kvfts-corpus, or set" \
        "KVFTS_CORPUS_BIN)"
    echo "$bin"
}

# up_to_date OUT SOURCE...: OUT exists, is newer than every SOURCE (files,
# or directories searched for newer files) and has $docs lines if set.
up_to_date() {
    local o=$1 s
    shift
    [ -s "$o" ] || return 1
    for s in "$@"; do
        if [ -d "$s" ]; then
            [ -z "$(find "$s" -newer "$o" -print -quit)" ] || return 1
        else
            [ "$o" -nt "$s" ] || return 1
        fi
    done
    [ -z "$docs" ] || [ "$(wc -l < "$o")" = "$docs" ]
}

# first_docs CMD...: CMD's output, only the first $docs lines if set.
first_docs() {
    if [ -z "$docs" ]; then
        "$@"
    else
        { "$@" || [ $? = 141 ]; } | head -n "$docs"   # 141: SIGPIPE from head
    fi
}

if [ -n "$docs" ]; then
    [[ $docs =~ ^[1-9][0-9]*$ ]] || die "DOCS must be a positive integer," \
        "not '$docs'"
fi
case $name in
debian)
    [ -z "$docs" ] || die "debian: DOCS is not supported (the whole catalog" \
        "only)"
    exec bash "$here/tools/debian-corpus.sh" "$out"
    ;;
gcide)
    need_pkg dict-gcide
    dict=/usr/share/dictd/gcide.dict.dz index=/usr/share/dictd/gcide.index
    sources=("$dict" "$index")
    cmd=(gcide "$dict" "$index")
    ;;
linuxdoc)
    need_pkg linux-doc-6.1
    dir=/usr/share/doc/linux-doc-6.1/html/_sources
    sources=("$dir")
    cmd=(linuxdoc "$dir")
    ;;
synthetic)
    [ -n "$docs" ] || die "synthetic: DOCS is required"
    sources=()
    cmd=(synthetic "$docs" "$seed")
    ;;
largevocab)
    [ -n "$docs" ] || die "largevocab: DOCS is required"
    sources=()
    cmd=(synthetic "$docs" "$seed" 4000000)
    ;;
*)
    usage
    ;;
esac

bin=$(generator)
if up_to_date "$out" "$bin" "${sources[@]}"; then
    echo "corpus: $out is up to date ($(wc -l < "$out") documents)" >&2
    exit 0
fi
mkdir -p "$(dirname "$out")"
trap 'rm -f "$out.tmp"' EXIT
first_docs "$bin" "${cmd[@]}" > "$out.tmp"
n=$(wc -l < "$out.tmp")
[ "$n" -gt 0 ] || die "$name: no documents"
[ -z "$docs" ] || [ "$n" = "$docs" ] ||
    echo "corpus: $name has only $n documents (asked for $docs)" >&2
mv "$out.tmp" "$out"
trap - EXIT
echo "corpus: $out: $n documents, $(du -h "$out" | cut -f1)" >&2
