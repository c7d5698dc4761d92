#!/bin/bash
# One GPU call for issue 12's paged target: the paged benchmark (page sizes 64 and 1 against the
# dense kernel, page 64 also at the dense kernel's lengths and, with .out/paged_before.py, the
# previous paged kernel side by side), then Nsight Compute on the paged and dense kernels at the
# batched shapes. Usage (device, repo root, carry [".out"]): bash scripts/gpu/mla_paged_session.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { echo "== $1 ($SECONDS s)"; }
step "paged bench"
before=(); [ -f .out/paged_before.py ] && before=(--before .out/paged_before.py)
timeout 240 python3 scripts/gpu/mla_paged_bench.py --reps 30 "${before[@]}" > "$OUT/mla_paged.txt" 2>&1
echo "   exit $?"; tail -n 9 "$OUT/mla_paged.txt" | cut -c1-400
step "ncu"
timeout 200 python3 scripts/gpu/profile_kernels.py --targets mla-paged:32,64,8192,64 mla:32,64,8192 \
    mla-paged:64,128,4096,64 mla:64,128,4096 mla-paged:1,64,8192,64 > "$OUT/mla_paged_profile.txt" 2>&1
echo "   exit $?"; grep -E "^==|^  \*" "$OUT/mla_paged_profile.txt" | cut -c1-330
step "done"
