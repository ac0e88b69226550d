#!/usr/bin/env bash
# The verbs backend's device tests (dataplane/tests/all/verbs_device.rs)
# on a machine without an RDMA device: cargo runs the test binaries
# through `perf-runner exec`, so their libibverbs is perf-verbs and their
# device, perfsim0, a `perf-runner serve` daemon's simulated NIC.
# `loopback_write_read_send` is left out: it posts a SEND with immediate,
# which perf-verbs does not offer yet (docs/unmodified-apps.md).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'kill "$serve" 2>/dev/null || true; wait "$serve" 2>/dev/null || true; rm -rf "$dir"' EXIT
target/release/perf-runner serve --policy passthrough --socket "$dir/serve.sock" --ctl "$dir/ctl.sock" > "$dir/serve.log" &
serve=$!
for _ in $(seq 100); do [ -S "$dir/serve.sock" ] && break; sleep 0.1; done
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$PWD/target/release/perf-runner exec --connect $dir/serve.sock --"
cargo test --release --workspace --features perf-dataplane/verbs --test all -- \
    verbs_device::err_drain verbs_device::host_gated verbs_device::opening
