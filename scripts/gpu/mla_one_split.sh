#!/bin/bash
# One GPU call after the one-split change (the split kernel writes the output itself): MLA
# decode's bench with every shape under graph replay (ours, torch.compile, eager), the paged
# benchmark, and ncu where one split applies. Usage (device, repo root): bash scripts/gpu/mla_one_split.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { echo "== $1 ($SECONDS s)"; }
step "bench --graph-all"
timeout 330 python3 -m kernels.bench mla-decode --graph-all --reps 20 --json "$OUT/mla_bench.json" \
    > "$OUT/mla_bench.txt" 2>&1; echo "   exit $?"; grep -vE "^\s*$" "$OUT/mla_bench.txt" | tail -n 14 | cut -c1-300
step "paged bench"
timeout 150 python3 scripts/gpu/mla_paged_bench.py --reps 20 > "$OUT/mla_paged.txt" 2>&1
echo "   exit $?"; tail -n 8 "$OUT/mla_paged.txt" | cut -c1-400
step "ncu"
timeout 60 python3 scripts/gpu/profile_kernels.py --targets mla:64,128,4096 > "$OUT/mla_profile.txt" 2>&1
echo "   exit $?"; grep -E "^==|^  \*" "$OUT/mla_profile.txt" | cut -c1-330
step "done"
