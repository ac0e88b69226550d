#!/usr/bin/env bash
# Compares one benchmark cell at two revisions on this machine. A shared
# machine's speed drifts by tens of percent between runs minutes apart, so
# figures from two runs of docs/gen-performance.sh cannot tell a change of
# a few percent; runs alternated in one sitting can. Builds BENCH at each
# revision (a git worktree each, sharing this checkout's target directory,
# so only what differs is rebuilt), then runs it RUNS times per revision,
# alternating, with PERF_BENCH_ONLY=CELL, and prints each run's ns per WQE,
# the medians and their ratio (B over A).
#
# usage: benches/ab.sh REV_A REV_B BENCH CELL [RUNS]
#   e.g. benches/ab.sh HEAD~3 HEAD scale scale_case 5
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,13p' "$0"; exit 2; }
rev_a=$1 rev_b=$2 bench=$3 cell=$4 runs=${5:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
target=$root/target
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/a" 2>/dev/null; git -C "$root" worktree remove --force "$work/b" 2>/dev/null; rm -rf "$work"' EXIT

build() { # REV DIR -> prints the bench executable's path (a copy)
    git -C "$root" worktree add -q --detach "$2" "$1"
    local exe
    exe=$(cd "$2" && CARGO_TARGET_DIR=$target cargo bench -q --workspace --bench "$bench" --no-run --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
    [ -n "$exe" ] || { echo "ab.sh: no $bench executable built at $1" >&2; exit 1; }
    cp "$exe" "$2.bin"
    echo "$2.bin"
}
bin_a=$(build "$rev_a" "$work/a")
bin_b=$(build "$rev_b" "$work/b")

run() { # BIN -> the first "N ns/WQE" of the cell's line
    PERF_BENCH_ONLY=$cell "$1" --bench 2>&1 | grep -o '[0-9.]* ns/WQE' | head -1 | cut -d' ' -f1
}
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
: > "$work/a.txt"
: > "$work/b.txt"
for i in $(seq "$runs"); do
    a=$(run "$bin_a")
    b=$(run "$bin_b")
    echo "run $i: A $a ns/WQE, B $b ns/WQE"
    echo "$a" >> "$work/a.txt"
    echo "$b" >> "$work/b.txt"
done
ma=$(median < "$work/a.txt")
mb=$(median < "$work/b.txt")
echo "$bench $cell: A ($rev_a) median $ma ns/WQE, B ($rev_b) median $mb ns/WQE, B / A $(echo "scale=3; $mb / $ma" | bc)"
