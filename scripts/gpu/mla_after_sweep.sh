#!/bin/bash
# The second GPU call after mla_bandwidth.sh set the defaults (about 8 minutes): Nsight Compute on
# the committed MLA decode kernel at every bench shape (DRAM throughput, stall reasons), the paged
# benchmark (page sizes 64 and 1 against the dense kernel), then MLA decode's standard benchmark
# with every shape under graph replay. Usage (device, repo root): bash scripts/gpu/mla_after_sweep.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { echo "== $1 ($SECONDS s)"; }
step "ncu"
timeout 150 python3 scripts/gpu/profile_kernels.py --targets mla:1,64,8192 mla:1,128,8192 mla:32,64,8192 \
    mla:64,128,4096 mla:1,64,65536 > "$OUT/mla_profile.txt" 2>&1; echo "   exit $?"
grep -E "^==|^  \*" "$OUT/mla_profile.txt" | cut -c1-330
step "paged bench"
timeout 130 python3 scripts/gpu/mla_paged_bench.py --reps 20 > "$OUT/mla_paged.txt" 2>&1
echo "   exit $?"; tail -n 9 "$OUT/mla_paged.txt" | cut -c1-400
step "bench --graph-all"
timeout 200 python3 -m kernels.bench mla-decode --graph-all --reps 10 --json "$OUT/mla_bench.json" \
    > "$OUT/mla_bench.txt" 2>&1; echo "   exit $?"; grep -vE "^\s*$" "$OUT/mla_bench.txt" | tail -n 14 | cut -c1-300
step "done"
