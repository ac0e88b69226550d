#!/usr/bin/env bash
# Regenerates experiment 6's section of docs/results.md into
# docs/plots/exp6/section.md (docs/gen-results.sh includes it, and runs
# this script when RUN_EXP6=1): `compare` of passthrough and perf on the
# 1000-tenant scenario, under /usr/bin/time for its wall time and peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q --workspace
R=./target/release/perf-runner
S=runner/scenarios/paper/exp6.toml
rm -rf docs/plots/exp6
mkdir -p docs/plots/exp6
out=docs/plots/exp6/section.md
{
    echo '```'
    echo "\$ perf-runner compare $S --policies passthrough,perf --no-alone"
    /usr/bin/time -o docs/plots/exp6/time.txt -f "%e s wall, %M KB peak RSS" \
        $R compare "$S" --policies passthrough,perf --no-alone --plot docs/plots/exp6 --json docs/plots/exp6/compare.json
    echo '```'
    echo
    ms=$(awk -F' *= *' '$1=="duration_ms"{print $2}' "$S")
    echo "Cost of that command (both rows, one process, rows one after the other)"
    echo "on the machine that generated this page ($(nproc) cores, shared with"
    echo "other work, so the wall time is an upper bound), for $ms ms of simulated time:"
    echo "$(cat docs/plots/exp6/time.txt)."
    echo
    echo "![throughput under perf, exp6](plots/exp6/throughput-perf.svg)"
    echo
} > "$out.tmp"
mv "$out.tmp" "$out"
