#!/usr/bin/env bash
# tools/check-layers.sh BUILD_DIR -- check, from the object files of a
# build, that the code reads bottom to top:
#
#   lib/kv/  <-  tokenizer/  <-  index/  <-  query/  <-  lib/ (the API glue)
#            <-  tools/
#
#  1. no file calls a function defined in a module above its own;
#  2. tools/ calls nothing of the library but its public API (kvfts_*);
#  3. no two files call each other, and no longer circle of calls exists
#     between files.
#
# It reads which symbols each object defines and which it uses (nm), so
# it sees calls, not includes: the include paths (CMakeLists.txt) already
# keep a module from including a header that is not its own.  ctest runs
# it as lint.layers.  Prints each violation; exit 1 if there is one.
set -euo pipefail
build=${1:?usage: check-layers.sh BUILD_DIR}

# Object files of the modules, the glue and the kvfts command, with the
# source file each one comes from (CMake names them SRC.c.o).
mapfile -t objs < <(find "$build" -path '*/CMakeFiles/kvfts_kv.dir/*.c.o' -o \
    -path '*/CMakeFiles/kvfts_tokenizer.dir/*.c.o' -o \
    -path '*/CMakeFiles/kvfts_index.dir/*.c.o' -o \
    -path '*/CMakeFiles/kvfts_query.dir/*.c.o' -o \
    -path '*/CMakeFiles/kvfts_api.dir/*.c.o' -o \
    -path '*/CMakeFiles/kvfts.dir/*.c.o' | sort)
[ "${#objs[@]}" -gt 0 ] || { echo "check-layers: no object files in $build" >&2; exit 2; }

src_of() {   # the source path (from the top of the tree) of object $1
    local o=$1 m
    case $o in
    */kvfts_kv.dir/*)        m=${o#*kvfts_kv.dir/} ;;
    */kvfts_tokenizer.dir/*) m=tokenizer/${o#*kvfts_tokenizer.dir/} ;;
    */kvfts_index.dir/*)     m=index/${o#*kvfts_index.dir/} ;;
    */kvfts_query.dir/*)     m=query/${o#*kvfts_query.dir/} ;;
    */kvfts_api.dir/*)       m=${o#*kvfts_api.dir/} ;;
    */kvfts.dir/*)           m=${o#*kvfts.dir/} ;;
    esac
    echo "${m%.o}"
}

top=$(cd "$(dirname "$0")/.." && pwd)
{
    for o in "${objs[@]}"; do
        s=$(src_of "$o")
        [ -f "$top/$s" ] || continue     # a stale object of a removed file
        nm --defined-only "$o" | awk -v s="$s" '$2 ~ /^[TDBRC]$/ { print "D", s, $3 }'
        nm --undefined-only "$o" | awk -v s="$s" '{ print "U", s, $NF }'
    done
} | awk '
function rank(f) {
    if (f ~ /^lib\/kv\//) return 0
    if (f ~ /^tokenizer\//) return 1
    if (f ~ /^index\//) return 2
    if (f ~ /^query\//) return 3
    if (f ~ /^lib\//) return 4
    if (f ~ /^tools\//) return 5
    return -1
}
# pthread_*: C library calls, which lib/kv/kv_stall.c defines in front of
# the C library (for Berkeley DB only): calling them is calling libc.
$1 == "D" && $3 ~ /^pthread_/ { next }
$1 == "D" { def[$3] = $2; next }
$1 == "U" { nu++; ufile[nu] = $2; usym[nu] = $3 }
END {
    bad = 0
    for (i = 1; i <= nu; i++) {
        f = ufile[i]; s = usym[i]
        if (!(s in def)) continue           # libc, Berkeley DB, ...
        g = def[s]
        if (g == f) continue
        if (rank(g) > rank(f)) {
            printf "calls up a layer: %s calls %s (%s)\n", f, s, g; bad = 1
        }
        if (rank(f) == 5 && rank(g) < 5 && s !~ /^kvfts_/) {
            printf "tools/ past the public API: %s calls %s (%s)\n", f, s, g; bad = 1
        }
        if (!((f, g) in edge)) { edge[f, g] = s; nout[f]++; out[f, nout[f]] = g }
        files[f] = 1; files[g] = 1
    }
    # circles between files: depth-first search, grey = on the stack
    for (f in files) color[f] = 0
    for (f in files) if (color[f] == 0) dfs(f)
    exit bad || cyc
}
function dfs(f,    k, g) {
    color[f] = 1; stack[++sp] = f
    for (k = 1; k <= nout[f]; k++) {
        g = out[f, k]
        if (color[g] == 1) {
            printf "circle of calls:"
            for (j = sp; j >= 1 && stack[j] != g; j--) ;
            for (; j <= sp; j++) printf " %s ->", stack[j]
            printf " %s (%s calls %s)\n", g, f, edge[f, g]
            cyc = 1
        } else if (color[g] == 0) {
            dfs(g)
        }
    }
    color[f] = 2; sp--
}
' && echo "check-layers: ${#objs[@]} files, layered, no circles"
