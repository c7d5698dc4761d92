#!/bin/bash
# Runs through the whole service on one GPU node (`marathon up`: Temporal dev server, API, CPU
# worker, GPU worker), started with POST /runs as a user would, the GPU worker killed once during
# the first problem's run (chaos): attempts recorded once, GPU busy, history bytes, per-phase times.
# Usage (GPU node, repository root; carry [".device", ".whl"]: the temporal CLI, bubblewrap, packages):
#   bash scripts/gpu/bench_service.sh        SERVICE_S=400 SERVICE_RUNS="kda:3:200 mla-decode:3:150"
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache} TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
RUNS=(); for spec in ${SERVICE_RUNS:-kda:3:200 mla-decode:3:150}; do RUNS+=(--problem "$spec"); done
FIRST=${SERVICE_RUNS:-kda}; FIRST=${FIRST%%:*}
echo "== service runs"; t0=$SECONDS
timeout "${SERVICE_S:-400}" python3 scripts/gpu/service_runs.py "${RUNS[@]}" --candidates "${SERVICE_CANDIDATES:-4}" \
    --kill-worker "$FIRST" --out "$OUT" --deadline-s "$(( ${SERVICE_S:-400} - 15 ))" 2>&1 | tail -n 40
echo "   exit after $((SECONDS - t0)) s"; ls -la "$OUT"
