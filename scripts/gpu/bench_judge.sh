#!/bin/bash
# The judge on one GPU: its trust boundary (scripts/gpu/judge_check.py: isolation, the outside
# clock, compromised processes, the GPU corpus; scripts/gpu/judge_v3_check.py: a candidate that
# owns its whole process), then whole judgements of the seeds phase by phase
# with kept referees (`marathon bench judge`, one judgement then JUDGE_CONCURRENT at once).
# Usage (GPU node, repository root; carry [".device", ".whl"] for bubblewrap and the packages):
#   bash scripts/gpu/bench_judge.sh          JUDGE_PROBLEMS="mla-decode kda" JUDGE_RUNS=3 JUDGE_CONCURRENT=4
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache} TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
step() { local limit=$1 name=$2; shift 2; echo "== $name (at most $limit s)"; local t0=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"; echo "   exit $? after $((SECONDS - t0)) s"
    tail -n 25 "$OUT/$name.txt"; grep -E "^  |Error|error" "$OUT/$name.err" | tail -n 12; }
step "${JUDGE_CHECK_S:-240}" judge_check env PYTHONUNBUFFERED=1 python3 scripts/gpu/judge_check.py
step "${JUDGE_V3_S:-600}" judge_v3_check env PYTHONUNBUFFERED=1 python3 scripts/gpu/judge_v3_check.py
for problem in ${JUDGE_PROBLEMS:-mla-decode kda}; do
    step "${JUDGE_BENCH_S:-240}" "bench_$problem" python3 -m marathon.cli bench judge --problem "$problem" \
        --runs "${JUDGE_RUNS:-3}" --concurrent "${JUDGE_CONCURRENT:-4}" --json "$OUT/bench_$problem.json"
done
