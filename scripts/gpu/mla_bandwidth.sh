#!/bin/bash
# One GPU call (about 8 minutes at most): MLA decode's variants checked in bf16 and timed under
# CUDA-graph replay with the L2 flushed, interleaved with torch.compile + graph; the best per shape
# class merged and timed again; the paged kernel at that point; then (MLA_NCU=1) Nsight Compute on
# the committed kernel and two small-batch points at batch 1. Prints the summary table; details in
# $OUT/mla_bandwidth.json and $OUT/mla_bandwidth.txt.
# Usage (device, repo root): [MLA_SET=run1|occupancy|stream] [MLA_NCU=1] bash scripts/gpu/mla_bandwidth.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# One Triton cache for the warm-up workers and the timing process.
export TRITON_CACHE_DIR=/tmp/mla_triton_cache
budget=420; [ "${MLA_NCU:-0}" = 1 ] && budget=240
timeout $((budget + 35)) python3 scripts/gpu/mla_bandwidth.py "$OUT" --budget $budget --set "${MLA_SET:-run1}" \
    > "$OUT/mla_bandwidth.txt" 2>&1
echo "exit $?"
if grep -q "^=== summary" "$OUT/mla_bandwidth.txt"; then
    grep -E "^\[" "$OUT/mla_bandwidth.txt" | cut -c1-700 | tail -n 25
    sed -n '/^=== summary/,$p' "$OUT/mla_bandwidth.txt" | cut -c1-1600
else
    tail -n 60 "$OUT/mla_bandwidth.txt" | cut -c1-600
fi
if [ "${MLA_NCU:-0}" = 1 ]; then
    echo "== ncu ($SECONDS s)"
    small='{"small_batch_heads": 256, "small_block_h": 32, "small_num_warps": 4, "small_block_n": 32,
            "small_num_stages": 3, "small_min_split_tokens": 128}'
    twice='{"small_batch_heads": 256, "small_block_h": 16, "small_num_warps": 4, "small_block_n": 32,
            "small_num_stages": 2, "small_min_split_tokens": 64, "small_sm_count": 264}'
    timeout 170 python3 scripts/gpu/profile_kernels.py --point "h32=$small" --point "x2=$twice" \
        --targets mla:1,64,8192 mla@h32:1,64,8192 mla@x2:1,64,8192 mla:1,64,65536 mla:32,64,8192 \
        > "$OUT/mla_profile.txt" 2>&1; echo "   exit $?"
    grep -E "^==|^  \*" "$OUT/mla_profile.txt" | cut -c1-330
fi
