#!/bin/bash
# Issue 10 on the H200: the kda seed judged twice (kept referee), then kda and mla-decode runs
# through the whole service, the GPU worker killed once during a kda evaluation. A Triton cache
# carried in .carry/triton-cache.tar.xz (FLA's compiled kernels) spares FLA's first compiles.
# Usage (device, repo root, carry [".device", ".whl", ".carry"]): bash scripts/gpu/service_session.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -f .carry/triton-cache.tar.xz ] && tar xJf .carry/triton-cache.tar.xz -C /tmp
export TRITON_CACHE_DIR=/tmp/triton-cache TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
echo "== kda seed, 2 judgements"; t0=$SECONDS
timeout "${KDA_BENCH_S:-170}" python3 -m marathon.cli bench judge --problem kda --runs 2 --json "$OUT/bench_kda.json" \
    > "$OUT/bench_kda.txt" 2> "$OUT/bench_kda.err"; echo "   exit $? after $((SECONDS - t0)) s"
cat "$OUT/bench_kda.txt"; grep "^  " "$OUT/bench_kda.err" | cut -c1-900
echo "== service runs"; t0=$SECONDS
timeout "${SERVICE_S:-400}" python3 scripts/gpu/service_runs.py --problem kda:3:200 --problem mla-decode:3:150 \
    --candidates 4 --kill-worker kda --out "$OUT" --deadline-s "$(( ${SERVICE_S:-400} - 15 ))" 2>&1 | tail -n 40
echo "   exit after $((SECONDS - t0)) s"; ls -la "$OUT"
