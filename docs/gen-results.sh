#!/usr/bin/env bash
# Regenerates docs/results.md and docs/plots/ from `perf-runner compare` on
# each of the paper's experiments (runner/scenarios/paper/). Every built-in
# policy that `perf-runner policy list` prints is compared, plus hardware
# strict priority; set POLICIES=a,b,c to choose. RUN_EXP6=1 adds the
# 1000-tenant experiment, left out by default: its 150 ms run takes about
# 2 s and 1.6 GB under `passthrough`, but about 100 s and 5.6 GB under `perf`
# (16.7 million WQEs posted, mostly zero-weight WRs), per row.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p perf-runner
R=./target/release/perf-runner
POLICIES=${POLICIES:-$($R policy list | awk '$1 !~ /^wasm:/ {print $1}' | paste -sd, -)}
rm -rf docs/plots
mkdir -p docs/plots

# compare EXP-FILE [extra flags]: the command, its table, its plots.
compare() {
    local file=$1; shift
    local name; name=$(basename "$file" .toml)
    echo '```'
    echo "\$ perf-runner compare $file --policies $POLICIES --hw sp${*:+ $*}"
    mkdir -p "docs/plots/$name"
    $R compare "$file" --policies "$POLICIES" --hw sp --plot "docs/plots/$name" --json "docs/plots/$name/compare.json" "$@"
    echo '```'
    echo
    for svg in docs/plots/"$name"/latency-cdf-*.svg; do
        echo "![latency CDF, $name](plots/$name/$(basename "$svg"))"
    done
    echo "![throughput under perf, $name](plots/$name/throughput-perf.svg)"
    echo
}

{
cat <<'HDR'
# Results

Every table here was printed by the command above it (virtual time,
`cx6-100g` profile, deterministic for the scenario's seed), and
`docs/gen-results.sh` regenerates this page and the plots under
`docs/plots/` (one folder per experiment, also holding `compare.json`).
Rows are configurations: each policy on the NIC's round-robin, `sp` the
NIC's strict priority between traffic classes (the sensitive tenant in
class 1) with no dataplane isolation, and `alone:GROUP` that tenant alone
(same seed), so "x times worse than alone" is read off directly.
Gb/s is payload goodput; Mmsg/s counts application messages; latency is
in us (a `lat` tenant's is half the round trip for WRITE and SEND, the whole
READ; a `bw` tenant's is post-to-completion with its whole window of 128
outstanding messages, hence the large figures for 1 MB messages). NIC is
the wire utilization of the sending host; WQE/msg and call/msg are the
dataplane's cost per application message in virtual time (WQEs posted and
policy hook calls; zero-weight WRs and sub-requests are what `perf` pays).

## Experiment 1: B_App_single + D_App_single

A 1 MB WRITE stream beside a 16 B WRITE ping-pong. Without isolation the
ping-pong waits behind the stream's NIC turns; `perf` splits the stream
into 16 KiB sub-requests each followed by zero-weight WRs, so the
ping-pong's next turn comes after at most one chunk.

HDR
compare runner/scenarios/paper/exp1.toml
cat <<'HDR'
## Experiment 2: B_App_single + M_App_single

16 B WRITEs in post lists of 32 beside the 1 MB stream: the message-rate
tenant gets one turn per bulk turn without isolation, one per chunk with
`perf`.

HDR
compare runner/scenarios/paper/exp2.toml
cat <<'HDR'
## Experiment 3: B_App_single + B_App_multi, 1 to 20 QPs

The NIC round-robins QPs, so without isolation the multi-QP tenant's share
grows with its QP count; `perf` caps active QPs per tenant and rotates the
rest in through in-NIC hand-offs. One scenario file per QP count.
With 10 or 20 QPs of 128 outstanding 1 MB messages each, the multi-QP
tenant has more bytes in flight than the 50 ms window moves, so its
completion-counted Gb/s is coarse: completions bunch, and over one window
the count can even read above the line rate (alone with 20 QPs); the NIC
column shows the link itself stays busy.

HDR
for q in 1 2 5 10 20; do
    echo "### B_App_multi with $q QPs"
    echo
    compare "runner/scenarios/paper/exp3-q$q.toml"
done
cat <<'HDR'
## Experiment 4: M_App_multi (10 QPs) + D_App_single

HDR
compare runner/scenarios/paper/exp4.toml
cat <<'HDR'
## Experiment 5: B_App_single + M_App_multi (10 QPs)

The paper also varies the number of active QPs a tenant may use (1, 2, 4,
8); that is a parameter of the policy, not of the scenario, and is not
swept here.

HDR
compare runner/scenarios/paper/exp5.toml
if [ "${RUN_EXP6:-0}" = 1 ]; then
cat <<'HDR'
## Experiment 6: 1000 B_App tenants x 8 QPs + one M_App_single

The scale experiment, with a 150 ms run (50 ms warm-up). With 8000 bulk
QPs sharing the link, a QP's 1 MB message takes about 100 ms to complete,
so the bulk tenants' completion-counted Gb/s is coarse; the NIC's wire
figures show the link. The 1000 bulk tenants are one `[[tenant]]` entry
with `count = 1000`; their row is their sum.

HDR
compare runner/scenarios/paper/exp6.toml
fi
cat <<'HDR'
## Experiment 7: SEND and READ variants of experiments 1 and 2

HDR
for v in send-1 send-2 read-1 read-2; do
    echo "### exp7-$v"
    echo
    compare "runner/scenarios/paper/exp7-$v.toml"
done
} > docs/results.md
