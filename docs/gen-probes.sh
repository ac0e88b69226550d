#!/usr/bin/env bash
# Regenerates docs/isolation-probes.md: the held-out probes of
# runner/scenarios/probes/ (mixes that are not matrix cells, written to
# check the policies beyond the cells they were built against) under
# passthrough, perf and fairshare, with a free loop as in the matrix, and
# fairshare again with the loop's measured cost charged (compare's default).
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
below was printed by the command above it. The first three columns run
with a free loop, as the matrix does; the last runs `fairshare` as
`compare` does by default, with the loop's measured cost charged to the
clock ([loop-cost.md](loop-cost.md)), where a ping-pong also waits for
the loop's round in progress.

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
    # The same probe as `compare` runs it by default: the loop's
    # measured cost charged to the clock (docs/loop-cost.md).
    charged=$($R compare "$f" --policies fairshare 2>&1)
    if printf '%s\n' "$charged" | awk '$1 == "fairshare" && $NF == "FAIL"' | grep -q .; then
        row="$row fail |"
    elif printf '%s\n' "$charged" | awk '$1 == "fairshare" && $NF == "PASS"' | grep -q .; then
        row="$row pass |"
    else
        row="$row ? |"
    fi
    summary="$summary$row"$'\n'
    printf '### %s\n\n```\n$ perf-runner compare %s --policies %s --loop-cost zero\n%s\n```\n\n' "$name" "$f" "$POLICIES" "$text" >> "$OUT.body"
    printf '```\n$ perf-runner compare %s --policies fairshare\n%s\n```\n\n' "$f" "$charged" >> "$OUT.body"
done
echo "| probe | passthrough | perf | fairshare | fairshare, loop charged |"
echo "|---|---|---|---|---|"
printf '%s' "$summary"
printf '%s' "$summary" | awk -F'|' '{for (i = 3; i <= 6; i++) n[i] += ($i ~ /pass/)} END {printf "| **passed, of %d** | %d | %d | %d | %d |\n", NR, n[3], n[4], n[5], n[6]}'
echo
cat "$OUT.body"
rm -f "$OUT.body"
} > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
