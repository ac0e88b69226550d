#!/usr/bin/env bash
# Regenerates docs/performance.md and its plots (docs/plots/performance/scale-*.svg,
# docs/plots/performance/sim-speed.svg): builds the runner (the simulator-speed bench
# drives the paper's experiments through it), times the CI smoke mode
# (`PERF_BENCH_QUICK=1 cargo bench --workspace --bench '*'`), then runs every
# benchmark of benches/ in full (`cargo bench --workspace --bench '*'`, timed too),
# which write their figures to target/perf-bench/*.json, and renders the
# page from those records with `bench-report`. Every number on the page
# comes from this run.
set -euo pipefail
cd "$(dirname "$0")/.."
# The workspace selection, as CI builds it (a -p selection resolves the
# dependencies' features differently and rebuilds the tree).
cargo build --release -q --workspace
cargo bench -q --workspace --bench '*' --no-run
rm -rf target/perf-bench
t0=$(date +%s.%N)
PERF_BENCH_QUICK=1 cargo bench -q --workspace --bench '*' >/dev/null
t1=$(date +%s.%N)
rm -rf target/perf-bench
cargo bench --workspace --bench '*'
t2=$(date +%s.%N)
target/release/bench-report --out docs/performance.md --plots docs/plots/performance \
    --quick-wall-s "$(echo "$t1 - $t0" | bc)" --full-wall-s "$(echo "$t2 - $t1" | bc)"
# Which guarded ratios moved against benches/baseline.json (on the page
# too; not a failure here).
target/release/bench-guard --report-only
