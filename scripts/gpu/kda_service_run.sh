#!/bin/bash
# Issue 10 on the H200: one kda run from its seed through the whole service (marathon up: dev
# server, API, CPU worker, GPU worker priming its referees on a fresh node), to completion.
# Usage (device, repo root, carry [".device", ".whl"]): bash scripts/gpu/kda_service_run.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TRITON_CACHE_DIR=/tmp/triton-cache TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
t0=$SECONDS
timeout "${SERVICE_S:-540}" python3 scripts/gpu/service_runs.py --problem kda:3:500 --candidates 4 --out "$OUT" \
    --deadline-s "$(( ${SERVICE_S:-540} - 20 ))" 2>&1 | tail -n 30
echo "   exit after $((SECONDS - t0)) s"; ls -la "$OUT"
