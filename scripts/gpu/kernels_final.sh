#!/bin/bash
# One GPU call for issue 11's table: FLA's kernels warmed for the keys the parity script needs
# (12 keys in parallel processes, about 70 s each) while our KDA's points are timed without FLA
# (kda_sweep.py --no-fla, per-kernel times) and the best is profiled with Nsight Compute; then
# the best point against FLA side by side (speed at the bench shapes, bounded and Kimi gates;
# then correctness on FLA's kinds of inputs).
# Usage (device, repo root, carry [".whl"]): bash scripts/gpu/kernels_final.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TRITON_CACHE_DIR=/tmp/triton-cache
step() { echo "== $1 ($SECONDS s)"; }
step "FLA warm-up (parity and bench keys), our points without FLA"
timeout 280 python3 scripts/gpu/fla_warm.py --scope bench parity --parallel 11 --job-timeout-s 270 \
    > "$OUT/fla_warm.txt" 2>&1 &
WARM=$!
timeout 200 python3 scripts/gpu/kda_sweep.py --reps 10 --no-fla --shapes 1,8192,16,128 1,32768,32,128 \
    8,4096,32,128 > "$OUT/kda_sweep.txt" 2>&1; echo "   sweep exit $?"
grep -vE "^\s*kernels:|UserWarning|_warn_once" "$OUT/kda_sweep.txt" | cut -c1-700 | tail -n 14
BEST=$(cat "$OUT/kda_best_point.json" 2>/dev/null || echo '{}')
step "ncu on the best point"
timeout 120 python3 scripts/gpu/profile_kernels.py --point "best=$BEST" \
    --targets kda@best:1,32768,32,128 kda@best:1,8192,16,128 > "$OUT/profile.txt" 2>&1; echo "   ncu exit $?"
grep -E "^==|^  \*" "$OUT/profile.txt" | cut -c1-330
wait $WARM; echo "   warm exit $?"; grep -c "exit 0" "$OUT/fla_warm.txt"
grep -v "exit 0" "$OUT/fla_warm.txt" | tail -n 3 | cut -c1-200
step "KDA (best point) vs FLA: speed, then correctness"
echo "$BEST" > /tmp/best.json
timeout ${PARITY_TIMEOUT:-240} python3 scripts/gpu/kda_fla_parity.py --reps 20 --config /tmp/best.json \
    > "$OUT/kda_parity.txt" 2>&1
echo "   exit $?"; cut -c1-300 "$OUT/kda_parity.txt" | tail -n 26
step "done"
