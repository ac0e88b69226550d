#!/usr/bin/env bash
# Compiles client/examples/pingpong.c with the system's C compiler against
# the perf-client static library, starts `perf-runner serve`, runs the
# example against it, and stops the daemon with SIGTERM (it must drain and
# exit 0). Needs `cargo build --release -p perf-runner -p perf-client`.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(mktemp -d)
trap 'kill "$daemon" 2>/dev/null || true; rm -rf "$dir"' EXIT
"${CC:-cc}" -O2 -Wall -Wextra -Werror -I client/include client/examples/pingpong.c \
    target/release/libperf_client.a -lpthread -ldl -lm -o "$dir/pingpong"
target/release/perf-runner serve --socket "$dir/serve.sock" --ctl "$dir/ctl.sock" > "$dir/serve.log" &
daemon=$!
for _ in $(seq 100); do [ -S "$dir/serve.sock" ] && break; sleep 0.1; done
"$dir/pingpong" "$dir/serve.sock" "${1:-200}"
kill -TERM "$daemon"
wait "$daemon"
cat "$dir/serve.log"
