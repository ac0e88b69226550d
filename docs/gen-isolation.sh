#!/usr/bin/env bash
# Regenerates docs/isolation-matrix.md and docs/plots/isolation/ from
# `perf-runner matrix` on every RNIC profile (the calibrated one and the
# costly end of the model's brackets) and from `perf-runner compare` of the
# paper's experiments 1 to 3 under the flagship, and 100 random mixes
# (`matrix --random`) with a free and a charged loop. The matrix's cells are
# independent and run on one thread per core.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q --workspace
R=./target/release/perf-runner
PROFILES=${PROFILES:-"cx6-100g cx6-100g-costly"}
mkdir -p docs/plots/isolation
{
cat <<'HDR'
# The isolation matrix, measured

Every table here was printed by the command above it (virtual time,
deterministic for the seed); `docs/gen-isolation.sh` regenerates this page
and the heatmaps. The contract, the cells and the policies are explained in
[isolation.md](isolation.md). Per cell and configuration: `ok` (every
tenant within its entitlement), the worst throughput ratio (`0.41`:
achieved / entitled), or the worst p99 over alone (`x2.3`) of a
latency-bound tenant; `*` marks a backlogged cell.

HDR
for p in $PROFILES; do
    echo "## Profile \`$p\`"
    echo
    echo "![isolation heatmap, $p](plots/isolation/matrix-$p.svg)"
    echo
    echo '```'
    echo "\$ perf-runner matrix --profile $p --json docs/plots/isolation/matrix-$p.json --svg docs/plots/isolation/matrix-$p.svg"
    /usr/bin/time -f "(wall %e s, peak RSS %M KB)" $R matrix --profile "$p" \
        --json "docs/plots/isolation/matrix-$p.json" --svg "docs/plots/isolation/matrix-$p.svg" 2>&1
    echo '```'
    echo
done
echo "## The loop charged (\`--loop-cost measured\`)"
echo
echo "The same cells with the dataplane loop's measured cost charged to the"
echo "virtual clock in every run and alone run ([loop-cost.md](loop-cost.md))."
echo
echo '```'
echo "\$ perf-runner matrix --profile cx6-100g --loop-cost measured --json docs/plots/isolation/matrix-cx6-100g-loop.json --svg docs/plots/isolation/matrix-cx6-100g-loop.svg"
/usr/bin/time -f "(wall %e s, peak RSS %M KB)" $R matrix --profile cx6-100g --loop-cost measured \
    --json docs/plots/isolation/matrix-cx6-100g-loop.json --svg docs/plots/isolation/matrix-cx6-100g-loop.svg 2>&1
echo '```'
echo
echo "## Random mixes (\`--random\`)"
echo
echo "Cells drawn from the whole space of tenant shapes rather than listed"
echo "([isolation.md](isolation.md#random-mixes)): 100 of them from mix seed 2,"
echo "with a free loop and then with the loop charged. No policy was tuned on"
echo "them."
echo
for cost in zero measured; do
    echo '```'
    echo "\$ perf-runner matrix --random 100 --mix-seed 2 --policies perf,fairshare --hw none --loop-cost $cost --json docs/plots/isolation/random-s2-$cost.json"
    /usr/bin/time -f "(wall %e s, peak RSS %M KB)" $R matrix --random 100 --mix-seed 2 --policies perf,fairshare --hw none \
        --loop-cost "$cost" --json "docs/plots/isolation/random-s2-$cost.json" 2>&1
    echo '```'
    echo
done
echo "## The paper's experiments under the flagship"
echo
echo "With a free dataplane loop, as in the first two matrices (\`--loop-cost zero\`), then"
echo "with the loop's measured cost charged to the clock (the default of"
echo "\`compare\`; [loop-cost.md](loop-cost.md))."
echo
for cost in zero measured; do
    for e in exp1 exp2 exp3-q5; do
        echo '```'
        echo "\$ perf-runner compare runner/scenarios/paper/$e.toml --policies perf,fairshare --loop-cost $cost"
        $R compare "runner/scenarios/paper/$e.toml" --policies perf,fairshare --loop-cost "$cost"
        echo '```'
        echo
    done
done
} > docs/isolation-matrix.md.tmp
mv docs/isolation-matrix.md.tmp docs/isolation-matrix.md
