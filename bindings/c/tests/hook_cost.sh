#!/bin/sh
# Instructions per hook call, counted by valgrind (callgrind), for every
# build of the batch kernels that `hook_cost` was compiled with (see
# tests/hook_cost.c). Instruction counts do not depend on how busy the
# machine is, so one run per (build, kernel) is the figure; they say nothing
# about cycles (a call, a spill and a load count one each).
#
#   hook_cost.sh HOOK_COST_BINARY JSON_OUT
set -eu
bin=$1
json=$2
command -v valgrind >/dev/null 2>&1 || { echo "hook-cost: needs valgrind (scripts/deps/micro.apt)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/elfen-hook-cost-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# kind id, name, units
kinds="0:loop:1000000 1:matrix:100000 2:flush:2000 3:stream:20000"
# build, baseline it is compared with, what it is
builds="plain:-:gcc
inst:plain:gcc -finstrument-functions
inst_so:plain:gcc -finstrument-functions, in a shared object linking libelfen_hook.a
fentry:plain:gcc -pg -mfentry
cplain:-:clang
cbare:cplain:clang -finstrument-function-entry-bare"

# Ir per unit of one (build, kind), or "" if the build is not compiled in.
ir_per_unit() {
    if ! "$bin" "$1" 0 1 >/dev/null 2>&1; then return 0; fi
    out=$(valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" --collect-atstart=no \
        --toggle-collect="elfen_k_$1_run" "$bin" "$1" "$2" "$3" 2>"$tmp/err") || {
        cat "$tmp/err" >&2; exit 1; }
    case "$out" in slow_checks=1) ;; *) echo "hook-cost: $1 kind $2: $out (a measured check took the slow path)" >&2; exit 1;; esac
    ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/err")
    awk -v ir="$ir" -v n="$3" 'BEGIN { printf "%.2f", ir / n }'
}

echo "elfen hook cost: instructions per work unit (valgrind --tool=callgrind, $(valgrind --version)); hook = build - its baseline"
printf '%-7s' kernel
echo "$builds" | while IFS=: read -r b base what; do printf ' | %-22s' "$b"; done
echo
rows=""
for k in $kinds; do
    id=${k%%:*}; rest=${k#*:}; name=${rest%%:*}; units=${rest#*:}
    printf '%-7s' "$name"
    plain=""; cplain=""
    lines=$(echo "$builds" | while IFS=: read -r b base what; do
        v=$(ir_per_unit "$b" "$id" "$units")
        echo "$b:$base:$v:$what"
    done)
    for l in $(echo "$lines" | tr ' ' '~'); do
        l=$(echo "$l" | tr '~' ' ')
        b=${l%%:*}; r=${l#*:}; base=${r%%:*}; r=${r#*:}; v=${r%%:*}; what=${r#*:}
        [ "$b" = plain ] && plain=$v
        [ "$b" = cplain ] && cplain=$v
        if [ -z "$v" ]; then printf ' | %-22s' "(not built)"; continue; fi
        case $base in plain) bv=$plain;; cplain) bv=$cplain;; *) bv="";; esac
        if [ -n "$bv" ]; then
            d=$(awk -v a="$v" -v b="$bv" 'BEGIN { printf "%.2f", a - b }')
            printf ' | %-22s' "$v (hook $d)"
            hook=$d
        else
            printf ' | %-22s' "$v"
            hook=null
        fi
        rows="$rows{\"kernel\": \"$name\", \"units\": $units, \"build\": \"$b\", \"compiled_with\": \"$what\", \"ir_per_unit\": $v, \"baseline\": \"$base\", \"hook_ir_per_call\": $hook},
"
    done
    echo
done
{
    echo "{"
    echo "  \"schema\": \"elfen-hook-cost/1\","
    echo "  \"tool\": \"$(valgrind --version) --tool=callgrind\","
    echo "  \"gcc\": \"$(${CC:-cc} --version | head -n 1)\","
    echo "  \"clang\": \"$( (command -v clang >/dev/null && clang --version | head -n 1) || echo none)\","
    echo "  \"machine\": \"$(uname -m) $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)\","
    echo "  \"rows\": ["
    printf '%s' "$rows" | sed '$ s/},$/}/' | sed 's/^/    /'
    echo "  ]"
    echo "}"
} >"$json"
echo "hook-cost: wrote $json"
