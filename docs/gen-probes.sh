#!/usr/bin/env bash
# Regenerates docs/isolation-probes.md: the held-out probes of
# runner/scenarios/probes/ (mixes that are not matrix cells, written to
# check the policies beyond the cells they were built against) under
# passthrough, perf and fairshare, with a free loop as in the matrix.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q --workspace
R=./target/release/perf-runner
POLICIES=passthrough,perf,fairshare
OUT=docs/isolation-probes.md
{
cat <<'HDR'
# Held-out probes

Mixes outside the matrix (`runner/scenarios/probes/`), judged by the same
contract ([isolation.md](isolation.md)): a policy passes a probe when
every tenant does. `docs/gen-probes.sh` regenerates this page; each block
below was printed by the command above it.

HDR
summary=""
for f in runner/scenarios/probes/*.toml; do
    name=$(basename "$f" .toml)
    text=$($R compare "$f" --policies "$POLICIES" --loop-cost zero 2>&1)
    row="| \`$name\` |"
    for p in ${POLICIES//,/ }; do
        verdicts=$(printf '%s\n' "$text" | awk -v p="$p" '$1 == p && ($NF == "PASS" || $NF == "FAIL") {print $NF}')
        if [ -z "$verdicts" ]; then
            row="$row ? |"
        elif printf '%s\n' "$verdicts" | grep -q FAIL; then
            row="$row fail |"
        else
            row="$row pass |"
        fi
    done
    summary="$summary$row"$'\n'
    printf '### %s\n\n```\n$ perf-runner compare %s --policies %s --loop-cost zero\n%s\n```\n\n' "$name" "$f" "$POLICIES" "$text" >> "$OUT.body"
done
echo "| probe | passthrough | perf | fairshare |"
echo "|---|---|---|---|"
printf '%s' "$summary"
echo
cat "$OUT.body"
rm -f "$OUT.body"
} > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
