#!/bin/bash
# Issue 10/11 on the H200 after the memory fix: four kda judgements at once with kept referees,
# a kda run through the service (GPU worker killed once), then our KDA on FLA's kinds of inputs.
# Usage (device, repo root, carry [".device", ".whl", ".carry"]): bash scripts/gpu/memory_session.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -f .carry/triton-cache.tar.xz ] && tar xJf .carry/triton-cache.tar.xz -C /tmp
export TRITON_CACHE_DIR=/tmp/triton-cache TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
echo "== kda seed, 1 then 4 at once"; t0=$SECONDS
timeout 150 python3 -m marathon.cli bench judge --problem kda --runs 1 --concurrent 4 --json "$OUT/bench_kda4.json" \
    > "$OUT/bench_kda4.txt" 2> "$OUT/bench_kda4.err"; echo "   exit $? after $((SECONDS - t0)) s"
cat "$OUT/bench_kda4.txt"; grep "^  " "$OUT/bench_kda4.err" | cut -c1-700
nvidia-smi --query-gpu=memory.used --format=csv,noheader
echo "== service: kda"; t0=$SECONDS
timeout 230 python3 scripts/gpu/service_runs.py --problem kda:3:200 --candidates 4 --kill-worker kda --out "$OUT" \
    --deadline-s 215 2>&1 | tail -n 12; echo "   after $((SECONDS - t0)) s"
echo "== our KDA on FLA's kinds of inputs (no FLA)"; t0=$SECONDS
timeout 150 python3 scripts/gpu/kda_fla_parity.py --skip-speed --no-fla 2>&1 | tail -n 14; echo "   after $((SECONDS - t0)) s"
ls -la "$OUT"
