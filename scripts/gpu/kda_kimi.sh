#!/bin/bash
# One GPU call for the exact diagonal blocks (issue 11): FLA warmed for the bench keys while our
# kernel is checked against the float64 recurrence on FLA's kinds of inputs (no FLA), then speed
# side by side with FLA (bounded and Kimi gates) at the default and at the split chunk-64 point.
# Usage (device, repo root, carry [".whl"]): bash scripts/gpu/kda_kimi.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { echo "== $1 ($SECONDS s)"; }
source scripts/gpu/kda_warm_and_check.sh
step "speed at the default"
mkdir -p "$OUT/default" "$OUT/split64"
OUT="$OUT/default" timeout 150 python3 scripts/gpu/kda_fla_parity.py --reps 20 --skip-correctness \
    > "$OUT/default.txt" 2>&1; echo "   exit $?"; grep -E "^\||^geomean" "$OUT/default.txt" | cut -c1-300
step "speed at split, chunk 64"
echo '{"prep_variant": "split", "chunk": 64, "prep_block_k": 16, "prep_num_warps": 4, "wy_block_k": 64,
 "wy_num_warps": 8, "scan_num_stages": 3}' > /tmp/split64.json
OUT="$OUT/split64" timeout 150 python3 scripts/gpu/kda_fla_parity.py --reps 20 --skip-correctness \
    --config /tmp/split64.json > "$OUT/split64.txt" 2>&1; echo "   exit $?"
grep -E "^\||^geomean" "$OUT/split64.txt" | cut -c1-300
step "done"
