#!/usr/bin/env bash
# Regenerates docs/results.md and docs/plots/ from `perf-runner compare` on
# each of the paper's experiments (runner/scenarios/paper/). Every built-in
# policy that `perf-runner policy list` prints is compared, plus hardware
# strict priority; set POLICIES=a,b,c to choose. Experiment 5 sweeps perf's
# `max_active_qps` parameter instead. RUN_EXP6=1 adds the 1000-tenant
# experiment (passthrough and perf only), left out by default for its cost:
# docs/results.md states its wall time and peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q --workspace
R=./target/release/perf-runner
POLICIES=${POLICIES:-$($R policy list | awk '$1 !~ /^wasm:/ {print $1}' | paste -sd, -)}
# Experiment 6's folder (its section, table and plots) is kept unless RUN_EXP6=1 redoes it.
mkdir -p docs/plots
find docs/plots -mindepth 1 -maxdepth 1 -name 'exp*' ! -name exp6 -exec rm -rf {} +

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
    local tp=${THROUGHPUT:-perf}
    echo "![throughput under $tp, $name](plots/$name/throughput-${tp//[^A-Za-z0-9_-]/_}.svg)"
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

## Loop cost

Virtual-time runs charge the dataplane loop's own work to the clock
(`--loop-cost`, default `measured`; the `loop` column is the loop core's
utilization). [loop-cost.md](loop-cost.md) gives the model, the machine
its figures were measured on, and where experiments 1 to 3 and 6 moved
compared with a free loop (`--loop-cost zero`), with the commands.

## Experiment 1: B_App_single + D_App_single

A 1 MB WRITE stream beside a 16 B WRITE ping-pong. Without isolation the
ping-pong waits behind the stream's NIC turns; `perf` splits the stream
into 16 KiB sub-requests each followed by zero-weight WRs, so the
ping-pong's next turn comes after at most one chunk. With the loop's own
work charged to the clock (the default, the `loop` column), 35 WQEs per
message keep the loop 46% busy under `perf`; the ping-pong's request is
taken in after the WQE in progress by an arrival step, so D keeps its
p99 within 1.5x of alone (x1.85 when it waited for the loop's bounded
round, 6.72 us before rounds were bounded, [loop-cost.md](loop-cost.md));
`fairshare` posts 14 per message (5 KiB chunks, each with a NOP) and keeps D within 1.5x of alone too.

HDR
compare runner/scenarios/paper/exp1.toml
cat <<'HDR'
## Experiment 2: B_App_single + M_App_single

16 B WRITEs in post lists of 32 beside the 1 MB stream: the message-rate
tenant gets one turn per bulk turn without isolation, one per chunk with
`perf`. With the loop charged, a 16 B message costs the loop about 121 ns
(a WQE, a CQE, a policy call), and each of the loop's bounded rounds its
own cost, so the message-rate tenant alone gets about 7.4 Mmsg/s, the
loop's limit, not the NIC's 12.4: the `alone` row shows the loop 98%
busy.

HDR
compare runner/scenarios/paper/exp2.toml
cat <<'HDR'
## Experiment 3: B_App_single + B_App_multi, 1 to 20 QPs

The NIC round-robins QPs, so without isolation the multi-QP tenant's share
grows with its QP count. `perf` follows PeRF's own rule (docs/policies.md):
each tenant keeps 2 active QPs plus a share of the spare ones under
`max_qps_limit`, rotated through in-NIC hand-offs, so with 2 or more QPs
the multi-QP tenant keeps about two thirds, as PeRF does; `fairshare`
shares the wire by fair admission whatever the QP counts
([isolation.md](isolation.md)). One scenario file per QP count.
With 10 or 20 QPs of 128 outstanding 1 MB messages each, the multi-QP
tenant has more bytes in flight than the 50 ms window moves, and its
completions bunch; Gb/s counts what each QP sent inside the window
([scenarios.md](scenarios.md#units-in-reports)), so it stays under the
line rate, a little below what the NIC column shows the link carried (a
message per QP is still in flight when the window closes).

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
## Experiment 5: B_App_single + M_App_multi (10 QPs), 1 to 8 active QPs

The paper varies the number of QPs a tenant may have active at once (1,
2, 4, 8): here `perf`'s run-time parameter `max_active_qps`
(`--policy perf:max_active_qps=N`, docs/policies.md). The NIC
round-robins the active QPs, so each QP the message-rate tenant may use
is one more turn per round against the bulk tenant's one: its message rate
grows with the cap and B's bandwidth falls, from B-favouring (1) to about
an even split of turns at 8 (the bulk tenant's QP is capped too, but has
only one).

HDR
POLICIES=passthrough,perf:max_active_qps=1,perf:max_active_qps=2,perf:max_active_qps=4,perf:max_active_qps=8 \
    THROUGHPUT=perf:max_active_qps=2 compare runner/scenarios/paper/exp5.toml
cat <<'HDR'
## Experiment 6: 1000 B_App tenants x 8 QPs + one M_App_single

The scale experiment: 8000 bulk QPs and one message-rate QP on one NIC,
`passthrough` and `perf` only. With 8000 QPs the dataplane's shared
completion queues (2^20 entries each) bound every data QP's send and
receive queue to 128 slots (`DataplaneConfig::for_qps`), instead of 2048
and 1024. With 8000 QPs sharing the link a bulk QP's 1 MB message takes
tens of ms, so the bulk tenants' Gb/s, counted by what each QP sent
inside a short window, is coarse; the NIC column shows the link. The 1000 bulk tenants are one
`[[tenant]]` entry with `count = 1000`; their row is their sum. Its cost
is stated under the table (`/usr/bin/time` of the command); the section
is regenerated by `docs/gen-exp6.sh` (or `RUN_EXP6=1
docs/gen-results.sh`), otherwise kept from its last run.

The run is 10 ms (5 ms measured). Memory: with 2048-slot send queues,
`perf` filled every bulk QP's queue with 16 KB chunks and their
zero-weight WRs (a 1 MB message is 64 x 17 WQEs), and the simulator's
per-QP queue grew to its 2048 entries of about 200 B each (our estimate
from the entry's fields), about 3 GB over 8000 QPs; with queues sized to
the shared CQs (128 slots) and tenant queues that grow on demand, the
peak is the figure below, most of it the tenants' registered buffers
(1 MB per tenant on each host: the simulator moves real bytes). CPU: the
loop visits only the tenants and QPs with something to do (ready sets,
`dataplane/src/engine/ready.rs`), so the command below takes seconds; it
took 587 s when every round walked all 1000 tenants and 8001 QPs (the
figures are the same either way: the equivalence test runs both walks).

Reading the table: under the NIC's plain round-robin over 8001 QPs each
bulk QP's turn carries a whole 1 MB message, so a round is most of a
second of wire time and nobody completes anything in the 5 ms window (the NIC is
busy all along); under `perf` the bulk tenants are time-sliced (more than
4 bandwidth tenants beside a message-sensitive one) and split into
chunks, and the message-rate tenant gets the table's Mmsg/s (under half
of its 12.4 alone on the NIC) beside the bulk tenants' goodput, with the
loop nearly always busy (the `loop` column: its own work is charged,
[loop-cost.md](loop-cost.md)). A paused tenant's QPs stand still: until
the dataplane stopped rotating them, every one of the 999 paused bulk
tenants handed its QPs off each 1 ms quantum, a WAIT and a SEND_ENABLE in
the NIC that moved no data and took the loop's time; the fix moved this
row from 79.3 Gb/s, 4.70 Mmsg/s and a p99 of 107 us for the message-rate
tenant to the figures above (`policy_suite::a_paused_tenant_posts_no_handoffs_and_resumes_rotating`).

HDR
[ "${RUN_EXP6:-0}" = 1 ] && docs/gen-exp6.sh >&2
if [ -f docs/plots/exp6/section.md ]; then
    cat docs/plots/exp6/section.md
else
    echo "(Not run yet: \`RUN_EXP6=1 docs/gen-results.sh\`.)"
    echo
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
