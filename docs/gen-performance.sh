#!/usr/bin/env bash
# Regenerates docs/performance.md and its plots (docs/plots/scale-*.svg,
# docs/plots/sim-speed.svg): builds the runner (the simulator-speed bench
# drives the paper's experiments through it), runs every benchmark of
# benches/ (`cargo bench -p perf-benches`, under 10 minutes on 2 cores),
# which write their figures to target/perf-bench/*.json, then renders the
# page from those records with `bench-report`. Every number on the page
# comes from this run.
#
# PERF_BENCH_QUICK=1 docs/gen-performance.sh renders from the quick smoke
# run instead (indicative only; the page says so).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p perf-runner
rm -rf target/perf-bench
cargo bench -p perf-benches
cargo run --release -q -p perf-benches --bin bench-report -- --out docs/performance.md --plots docs/plots
# Show which guarded ratios moved against benches/baseline.json (reported
# on the page too; not a failure here).
cargo run --release -q -p perf-benches --bin bench-guard -- --report-only
