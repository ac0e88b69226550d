#!/bin/sh
# Installs, on a fresh Debian (or Ubuntu) machine, the packages that building
# perf-dataplane with the `verbs` feature needs:
#   libibverbs-dev  rdma-core's libibverbs headers, library and libibverbs.pc
#   librdmacm-dev   librdmacm headers and librdmacm.pc (rdma-sys probes both)
#   libclang-dev    libclang for rdma-sys's bindgen build script (pulls in
#                   clang's builtin headers through libclang-common-*-dev)
#   pkg-config      how rdma-sys's build script finds the two libraries
# and the unmodified verbs programs the tests run through `perf-runner exec`
# (runner/tests/serve/verbs_apps.rs; skipped loudly where they are missing):
#   perftest        ib_write_bw, ib_read_lat, ... (4.5 on bookworm)
#   ibverbs-utils   ibv_devinfo, ibv_rc_pingpong (rdma-core 44 on bookworm)
# Non-interactive; run as root, or as a user with sudo.
set -eu

if [ "$(id -u)" -eq 0 ]; then
    SUDO=
else
    SUDO=sudo
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends \
    libibverbs-dev \
    librdmacm-dev \
    libclang-dev \
    pkg-config \
    perftest \
    ibverbs-utils
