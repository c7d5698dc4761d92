#!/bin/bash
# One GPU call for issue 12's tables: the MLA decode sweep and benchmark (ours at the best point
# against torch.compile + CUDA graph and eager; events and graph; % roofline), the paged
# benchmark (page sizes 64 and 1 against the dense kernel), and Nsight Compute on the default.
# Usage (device, repo root, carry [".whl"]): bash scripts/gpu/mla_final.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { echo "== $1 ($SECONDS s)"; }
step "ncu on the default"
timeout 100 python3 scripts/gpu/profile_kernels.py --targets mla:1,64,8192 mla:32,64,8192 mla:64,128,4096 \
    mla:1,64,65536 > "$OUT/mla_profile.txt" 2>&1; echo "   exit $?"
grep -E "^==|^  \*" "$OUT/mla_profile.txt" | cut -c1-330
step "MLA sweep + bench"
timeout 260 python3 scripts/gpu/mla_sweep_and_bench.py "$OUT" > "$OUT/mla_sweep.txt" 2>&1; echo "   exit $?"
grep -E "^check.*FAIL|^point|^sweep|^scores|host us" "$OUT/mla_sweep.txt" | cut -c1-700
grep -E "^\|" "$OUT/mla_sweep.txt" | head -n 14
step "paged"
timeout 150 python3 scripts/gpu/mla_paged_bench.py --reps 20 > "$OUT/mla_paged.txt" 2>&1; echo "   exit $?"
tail -n 9 "$OUT/mla_paged.txt" | cut -c1-300
step "done"
