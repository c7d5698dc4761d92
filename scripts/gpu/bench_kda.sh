#!/bin/bash
# KDA forward against FLA's chunk_kda on one GPU: correctness of ours against the float64
# recurrence on FLA's kinds of inputs, speed side by side with FLA (bounded gates against its
# safe_gate path, Kimi-model gates against its default path), then Nsight Compute on our kernels.
# FLA compiles and autotunes ~70 s per new shape key in each process: its keys are warmed in
# parallel processes while our kernel is checked.
# The points in KDA_VARIANTS (NAME=FILE.json, knob values over the default) are checked the same
# way and timed beside ours in the same process: unless set, the subchunk preparation at the
# bench shapes, and with KDA_SHAPES=small (B x H small: kda_fla_parity.py's SMALL_SHAPES) also
# the scan cut along the sequence (scan_segments=auto), alone and with the subchunk preparation.
# Usage (GPU node, repository root; fla-core installed or carried as a wheel in .whl/):
#   bash scripts/gpu/bench_kda.sh            # options through the environment:
#   KDA_REPS=20 KDA_CONFIG=point.json KDA_NCU=0 KDA_VARIANTS="a=a.json b=b.json" bash scripts/gpu/bench_kda.sh
#   KDA_SHAPES=small KDA_NCU=0 bash scripts/gpu/bench_kda.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
step() { echo "== $1 ($SECONDS s)"; }
step "FLA warm-up (bench keys) while ours is checked against the recurrence"
SHAPES=${KDA_SHAPES:-bench}
timeout 200 python3 scripts/gpu/fla_warm.py --scope "$SHAPES" --parallel 4 --job-timeout-s 190 \
    > "$OUT/fla_warm.txt" 2>&1 &
WARM=$!
DEFAULT_VARIANTS="subchunk=scripts/gpu/kda_subchunk.json"
[ "$SHAPES" = small ] && DEFAULT_VARIANTS="$DEFAULT_VARIANTS segments=scripts/gpu/kda_segments.json \
    subchunk_segments=scripts/gpu/kda_subchunk_segments.json"
read -r -a VARIANTS <<< "${KDA_VARIANTS-$DEFAULT_VARIANTS}"
VARIANT_ARGS=(); CHECKS=()
for spec in "${VARIANTS[@]}"; do
    VARIANT_ARGS+=(--variant "$spec"); name=${spec%%=*}
    mkdir -p "$OUT/check_$name"; OUT="$OUT/check_$name" timeout 150 python3 scripts/gpu/kda_fla_parity.py \
        --skip-speed --no-fla --config "${spec#*=}" > "$OUT/check_$name.txt" 2>&1 &
    CHECKS+=($!)
done
mkdir -p "$OUT/check"; OUT="$OUT/check" timeout 150 python3 scripts/gpu/kda_fla_parity.py --skip-speed --no-fla \
    > "$OUT/check.txt" 2>&1
echo "   exit $?"; grep -E "^\|" "$OUT/check.txt" | cut -c1-200
for i in "${!VARIANTS[@]}"; do
    wait "${CHECKS[$i]}"; echo "   variant ${VARIANTS[$i]%%=*}: exit $?"
    grep -E "^\|" "$OUT/check_${VARIANTS[$i]%%=*}.txt" | cut -c1-200
done
wait $WARM; echo "   warm exit $?"; tail -n 1 "$OUT/fla_warm.txt"
step "speed against FLA (bounded: safe_gate; Kimi gates: default)"
CONFIG_ARGS=(); [ -n "${KDA_CONFIG:-}" ] && CONFIG_ARGS=(--config "$KDA_CONFIG")
mkdir -p "$OUT/speed"
OUT="$OUT/speed" timeout 240 python3 scripts/gpu/kda_fla_parity.py --reps "${KDA_REPS:-20}" --skip-correctness \
    --shapes "$SHAPES" "${CONFIG_ARGS[@]}" "${VARIANT_ARGS[@]}" > "$OUT/speed.txt" 2>&1; echo "   exit $?"; grep -E "^\||^geomean" "$OUT/speed.txt" | cut -c1-300
if [ "${KDA_NCU:-1}" = 1 ]; then
    step "ncu"
    timeout 90 python3 scripts/gpu/profile_kernels.py --targets kda:1,32768,32,128 > "$OUT/kda_profile.txt" 2>&1
    echo "   exit $?"; grep -E "^==|^  \*" "$OUT/kda_profile.txt" | cut -c1-330
fi
step "done"
