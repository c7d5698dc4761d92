#!/bin/bash
# The evaluation on the H200 (issue 10): whole judgements of both seeds, phase by phase, with kept
# referees (marathon bench judge), plus the paged MLA kernel's first GPU run. Writes under $OUT.
# Usage (device machine, repo root, carry [".device", ".whl"]): bash scripts/gpu/evaluation_bench.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TRITON_CACHE_DIR=/tmp/triton-cache TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache

step() { local limit=$1 name=$2; shift 2; echo "== $name (at most $limit s)"; local t0=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $? after $((SECONDS - t0)) s"
    tail -n 25 "$OUT/$name.txt"; grep -E "^  |Error|error" "$OUT/$name.err" | tail -n 12; }

step 200 bench_mla python3 -m marathon.cli bench judge --problem mla-decode --runs 3 --concurrent 4 --json "$OUT/bench_mla.json"
step 300 bench_kda python3 -m marathon.cli bench judge --problem kda --runs 3 --concurrent 4 --json "$OUT/bench_kda.json"
tar cf - -C /tmp triton-cache | xz -2 -T8 > "$OUT/triton-cache.tar.xz"; ls -la "$OUT"
