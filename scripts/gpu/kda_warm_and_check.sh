# Sourced by the KDA GPU scripts (after prelude.sh, with OUT and step set): FLA warmed for the
# bench keys in the background while our kernel is checked against the float64 recurrence on
# FLA's kinds of inputs (no FLA); returns once both are done.
export TRITON_CACHE_DIR=/tmp/triton-cache
step "FLA warm-up (bench keys); ours against the recurrence"
timeout 200 python3 scripts/gpu/fla_warm.py --scope bench --parallel 4 --job-timeout-s 190 \
    > "$OUT/fla_warm.txt" 2>&1 &
WARM=$!
mkdir -p "$OUT/check"; OUT="$OUT/check" timeout 150 python3 scripts/gpu/kda_fla_parity.py --skip-speed --no-fla > "$OUT/check.txt" 2>&1
echo "   exit $?"; grep -E "^\|" "$OUT/check.txt" | cut -c1-200
wait $WARM; echo "   warm exit $?"; tail -n 1 "$OUT/fla_warm.txt"
