#!/bin/bash
# MLA decode on one GPU: bf16 correctness, a sweep of kernel configs and the benchmark against
# torch.compile + CUDA graph and eager (events and graph replay, L2 flushed, % of roofline), the
# paged cache (page sizes 64 and 1) against the dense kernel, then Nsight Compute on the default.
# Usage (GPU node, repository root):  bash scripts/gpu/bench_mla.sh      (MLA_NCU=0 skips ncu)
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { echo "== $1 ($SECONDS s)"; }
step "MLA sweep + bench"
timeout 260 python3 scripts/gpu/mla_sweep_and_bench.py "$OUT" > "$OUT/mla_sweep.txt" 2>&1; echo "   exit $?"
grep -E "^check.*FAIL|^point|^sweep|^scores|host us" "$OUT/mla_sweep.txt" | cut -c1-700
grep -E "^\|" "$OUT/mla_sweep.txt" | head -n 14
step "paged"
timeout 150 python3 scripts/gpu/mla_paged_bench.py --reps 20 > "$OUT/mla_paged.txt" 2>&1; echo "   exit $?"
tail -n 9 "$OUT/mla_paged.txt" | cut -c1-300
if [ "${MLA_NCU:-1}" = 1 ]; then
    step "ncu on the default"
    timeout 100 python3 scripts/gpu/profile_kernels.py --targets mla:1,64,8192 mla:32,64,8192 mla:64,128,4096 \
        mla:1,64,65536 > "$OUT/mla_profile.txt" 2>&1; echo "   exit $?"
    grep -E "^==|^  \*" "$OUT/mla_profile.txt" | cut -c1-330
fi
step "done"
