#!/bin/bash
# One GPU call for the two-pass flat preparation (issue 11): FLA warmed for the bench keys while
# our kernel is checked against the float64 recurrence on FLA's kinds of inputs (no FLA), then
# speed side by side with FLA (bounded and Kimi gates), then Nsight Compute on our kernels.
# Usage (device, repo root, carry [".whl"]): bash scripts/gpu/kda_two_pass.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { echo "== $1 ($SECONDS s)"; }
source scripts/gpu/kda_warm_and_check.sh
step "speed at the default"
mkdir -p "$OUT/default"
OUT="$OUT/default" timeout 170 python3 scripts/gpu/kda_fla_parity.py --reps 20 --skip-correctness \
    > "$OUT/default.txt" 2>&1; echo "   exit $?"; grep -E "^\||^geomean" "$OUT/default.txt" | cut -c1-300
step "ncu"
timeout 90 python3 scripts/gpu/profile_kernels.py --targets kda:1,32768,32,128 > "$OUT/kda_profile.txt" 2>&1
echo "   exit $?"; grep -E "^==|^  \*" "$OUT/kda_profile.txt" | cut -c1-330
step "done"
