#!/bin/bash
# One GPU call (about 8 minutes): MLA decode's variants (small-batch tiles and split lengths,
# programmatic-dependent combine, warp specialization, batched tiles) checked in bf16 and timed
# under CUDA-graph replay with the L2 flushed, interleaved with torch.compile + graph; the best
# per shape class merged and timed again; the paged kernel at that point. Prints the summary
# table; details in $OUT/mla_bandwidth.json and $OUT/mla_bandwidth.txt.
# Usage (device, repo root): bash scripts/gpu/mla_bandwidth.sh
source scripts/gpu/prelude.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# One Triton cache for the warm-up workers and the timing process.
export TRITON_CACHE_DIR=/tmp/mla_triton_cache
timeout 455 python3 scripts/gpu/mla_bandwidth.py "$OUT" --budget 420 > "$OUT/mla_bandwidth.txt" 2>&1
echo "exit $?"
if grep -q "^=== summary" "$OUT/mla_bandwidth.txt"; then
    grep -E "^\[" "$OUT/mla_bandwidth.txt" | cut -c1-400 | tail -n 25
    sed -n '/^=== summary/,$p' "$OUT/mla_bandwidth.txt" | cut -c1-1600
else
    tail -n 60 "$OUT/mla_bandwidth.txt" | cut -c1-600
fi
