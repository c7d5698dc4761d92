#!/bin/bash
# The steady loop on a GPU node, through the whole service: kda and mla-decode runs at once, 4
# evaluations in flight each, ~7 minutes after the stack is up, the GPU worker killed once;
# prints NVML GPU busy over the steady window, warm judgement wall time, evaluations per hour,
# history bytes per 100 attempts (scripts/gpu/steady_loop_proof.py).
# Usage, from the repository root (without network: .whl/ and .device/temporal.xz beside it, see
# prelude.sh): bash scripts/gpu/steady_loop_proof.sh
# Ends within 10 minutes: stack start-up (referees warm for kda and mla-decode) ~1-2 min,
# RUN_S (default 400 s) of runs, the stop and the teardown.
source scripts/gpu/prelude.sh
OUT=${OUT:-$SCRATCH/out}; mkdir -p "$OUT"
export TRITON_CACHE_DIR="$SCRATCH/triton-cache" TORCHINDUCTOR_CACHE_DIR="$SCRATCH/inductor-cache"
t0=$SECONDS
timeout 585 python3 scripts/gpu/steady_loop_proof.py --run-s "${RUN_S:-400}" --in-flight "${IN_FLIGHT:-4}" \
    --out "$OUT" 2>&1 | tail -n 40
echo "   exit after $((SECONDS - t0)) s"; ls -la "$OUT"
