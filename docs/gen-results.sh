#!/usr/bin/env bash
# Regenerates docs/results.md from the scenario runs it quotes.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p perf-runner
R=./target/release/perf-runner
run() { echo '```'; echo "\$ perf-runner $*"; $R "$@"; echo '```'; echo; }
{
cat <<'HDR'
# Results

Every table here was printed by the command above it (virtual time,
`cx6-100g` profile, deterministic for the scenario's seed), and
`docs/gen-results.sh` regenerates this page. Each tenant's `alone` row is
the same tenant and seed with no other tenant; the ratios in brackets are
shared / alone. Gb/s is payload goodput; Mmsg/s counts application messages;
a `lat` tenant's latency is half the round trip; a `bw` tenant's latency is
post-to-completion with its whole window outstanding (128 x 1 MB takes
~11 ms to drain at line rate, hence the large figures).

## Experiment 1: B_App_single + D_App_single (`b_single-d_single.toml`)

Without isolation the 16 B ping-pong waits behind the bulk tenant's 64 KiB
NIC turns (5.3x its latency alone, as in the calibration). With `perf`, the
bulk tenant's messages go out as 16 KiB sub-requests, each followed by 16
zero-weight WRs, so the ping-pong's next turn comes after at most one chunk:
its mean stays under 2 us and its p99 within 1.5x of alone while the bulk
tenant keeps its line rate. Hardware strict priority is shown for reference.

HDR
run run runner/scenarios/b_single-d_single.toml --policy passthrough --alone
run run runner/scenarios/b_single-d_single.toml --policy perf --alone
run run runner/scenarios/b_single-d_single.toml --policy passthrough --hw sp --alone
cat <<'HDR'
## Experiment 2: B_App_single + M_App_single (`b_single-m_single.toml`)

The message-rate tenant gets one 16-WQE turn per 64 KiB bulk turn without
isolation; with `perf` it gets a turn after every 16 KiB chunk and its
zero-weight WRs, keeping most of its rate alone while the bulk tenant keeps
most of the link.

HDR
run run runner/scenarios/b_single-m_single.toml --policy passthrough --alone
run run runner/scenarios/b_single-m_single.toml --policy perf --alone
cat <<'HDR'
## Experiment 3: B_App_single + B_App_multi, 5 QPs (`b_single-b_multi.toml`)

Without isolation the NIC's round-robin over QPs gives the 5-QP tenant five
shares. `perf` caps each tenant at 2 active QPs (the others' requests are
held in software and rotated in through in-NIC hand-offs on the tenant's
control QP) and sizes sub-requests at 16 KiB / active QPs, so each tenant
moves the same bytes per NIC round.

HDR
run run runner/scenarios/b_single-b_multi.toml --policy passthrough --alone
run run runner/scenarios/b_single-b_multi.toml --policy perf --alone
} > docs/results.md
