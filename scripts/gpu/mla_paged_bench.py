"""Paged MLA decode against the dense kernel on the GPU: the same requests held
densely and in a paged cache of page size 64 (FlashMLA's) and 1 (SGLang's Triton path), pages
shuffled; errors against float64 and times side by side (L2 flushed, events and the wall clock,
medians), plus CUDA-graph replay. Ragged lengths: each request its own length, drawn in
[S/2, S] (and S itself for the first); "p64 full" is page size 64 with every request of length S,
the dense kernel's work exactly (the like-for-like ratio). ``--before FILE`` also times another
paged module's ``mla_decode_paged`` (e.g. the previous commit's, from ``git show``) at page 64.

Usage: python3 scripts/gpu/mla_paged_bench.py [--reps 30] [--before FILE]. Writes
mla_paged_bench.json to $OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SHAPES = [(1, 64, 8192), (1, 128, 8192), (32, 64, 8192), (64, 128, 4096), (1, 64, 65536), (4, 16, 4096)]
PAGE_SIZES = (64, 1)


def main() -> int:
    import torch

    from kernels import timing
    from kernels.mla import mla_decode, mla_decode_paged
    from kernels.mla.definition import make_inputs
    from kernels.mla.reference import paged_reference

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--before", help="a paged module's source file, timed at page 64 as 'before'")
    args = parser.parse_args()
    before = None
    if args.before:
        import importlib.util

        spec = importlib.util.spec_from_file_location("paged_before", args.before)
        before = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(before)
    flusher = timing.L2Flusher()
    rows = []
    print("| B,H,S | dense µs | paged 64 µs | paged 1 µs | paged 64 / dense | paged 1 / dense | graph dense | "
          "graph p64 | graph p1 | graph p64 full | graph p64 full / dense | graph p64 before | err p64 | err p1 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for batch, heads, seq in SHAPES:
        inputs = make_inputs((batch, heads, seq), seed=5, device="cuda", dtype="bfloat16")
        q, kv, scale = inputs["q"], inputs["kv"], inputs["scale"]
        gen = torch.Generator("cuda").manual_seed(9)
        lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=gen, device="cuda", dtype=torch.int32)
        lengths[0] = seq
        providers = {"dense": lambda: mla_decode(q, kv, scale)}
        errors = {}
        for page_size in PAGE_SIZES:
            pages_per = -(-seq // page_size)
            order = torch.randperm(batch * pages_per, generator=gen, device="cuda")
            cache = torch.empty(batch * pages_per, page_size, 576, dtype=kv.dtype, device="cuda")
            padded = torch.zeros(batch, pages_per * page_size, 576, dtype=kv.dtype, device="cuda")
            padded[:, :seq] = kv
            cache[order] = padded.reshape(batch * pages_per, page_size, 576)
            table = order.reshape(batch, pages_per).to(torch.int32).contiguous()
            out = mla_decode_paged(q, cache, table, lengths, scale)
            if batch * heads * seq <= 64 * 8192 * 8:
                errors[page_size] = float((out.double() - paged_reference(q, cache, table, lengths, scale).double())
                                          .norm() / out.double().norm())
            providers[f"paged{page_size}"] = (lambda c=cache, t=table: mla_decode_paged(q, c, t, lengths, scale))
            if page_size == 64:
                full = torch.full_like(lengths, seq)
                providers["paged64full"] = (lambda c=cache, t=table: mla_decode_paged(q, c, t, full, scale))
                if before is not None:
                    providers["paged64before"] = (
                        lambda c=cache, t=table: before.mla_decode_paged(q, c, t, lengths, scale))
        samples = timing.time_interleaved({k: (lambda f=f: f()) for k, f in providers.items()}, [{}],
                                          reps=args.reps, warmup=3, flusher=flusher)
        med = {k: v.summary()["median_ms"] * 1e3 for k, v in samples.items()}
        graph = {}
        for label, fn in providers.items():
            try:
                graph[label] = timing.time_graph_replay(lambda f=fn: f(), {}).summary()["median_ms"] * 1e3
            except Exception as error:
                graph[label] = f"{type(error).__name__}"
        row = {"shape": [batch, heads, seq], "events_us": med, "graph_us": graph, "errors": errors}
        rows.append(row)

        def show(x):
            return f"{x:.1f}" if isinstance(x, float) else str(x)

        def ratio(x, y):
            return f"{x / y:.2f}" if isinstance(x, float) and isinstance(y, float) else "-"

        print(f"| {batch},{heads},{seq} | {med['dense']:.1f} | {med['paged64']:.1f} | {med['paged1']:.1f} | "
              f"{med['paged64'] / med['dense']:.2f} | {med['paged1'] / med['dense']:.2f} | {show(graph['dense'])} | "
              f"{show(graph['paged64'])} | {show(graph['paged1'])} | {show(graph['paged64full'])} | "
              f"{ratio(graph['paged64full'], graph['dense'])} | {show(graph.get('paged64before', '-'))} | "
              f"{errors.get(64, float('nan')):.1e} | "
              f"{errors.get(1, float('nan')):.1e} |", flush=True)
        torch.cuda.empty_cache()
    out = Path(os.environ.get("OUT", "."))
    (out / "mla_paged_bench.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
