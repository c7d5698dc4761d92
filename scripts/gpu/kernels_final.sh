#!/bin/bash
# One GPU call for the tables of issues 11 and 12: FLA's kernels warmed for the keys the parity
# script needs (12 keys in parallel processes, about 70 s each), meanwhile Nsight Compute on our
# KDA at its default CONFIG; then our KDA against FLA side by side (speed at the bench shapes,
# bounded and Kimi gates; then correctness on FLA's kinds of inputs).
# Usage (device, repo root, carry [".whl"]): bash scripts/gpu/kernels_final.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TRITON_CACHE_DIR=/tmp/triton-cache
step() { echo "== $1 ($SECONDS s)"; }
step "FLA warm-up (parity and bench keys) and ncu on our KDA"
timeout 260 python3 scripts/gpu/fla_warm.py --scope bench parity --parallel 14 --job-timeout-s 250 \
    > "$OUT/fla_warm.txt" 2>&1 &
WARM=$!
timeout 200 python3 scripts/gpu/profile_kernels.py ${PROFILE_ARGS:---targets kda:1,32768,32,128 kda:1,8192,16,128} \
    > "$OUT/profile.txt" 2>&1; echo "   ncu exit $?"
grep -E "^==|^  \*" "$OUT/profile.txt" | cut -c1-400
wait $WARM; echo "   warm exit $?"; grep -c "exit 0" "$OUT/fla_warm.txt"; grep -v "exit 0" "$OUT/fla_warm.txt" | tail -n 4 | cut -c1-300
step "KDA vs FLA: speed, then correctness"
timeout ${PARITY_TIMEOUT:-250} python3 scripts/gpu/kda_fla_parity.py --reps 20 > "$OUT/kda_parity.txt" 2>&1
echo "   exit $?"; cut -c1-330 "$OUT/kda_parity.txt" | tail -n 24
step "done"
