"""Our KDA forward against FLA's chunk_kda on the GPU, like with like.

Part 1, correctness on FLA's kinds of inputs: unbounded gates (FLA's gate_logit_normalizer 0.1,
the Kimi model's gates, plain logsigmoid), head dims 60, 64, 100 and 128, fp16 and bf16, an
initial state and the final state, packed sequences. Each of ours and FLA's is compared with
the float64 reference (the chunked form, on the GPU): relative RMS of o and of the final state.
FLA's bar is 5e-3.

Part 2 (run first), speed side by side in one process (L2 flushed between calls, events and the wall clock,
medians of 30): bounded gates (clamped at -5) against FLA's safe-gate path and its default
path; general gates (the Kimi model's) against FLA's default path. Ratios are FLA / ours.

Usage (FLA installed where python3 finds it, FLA_FLASH_KDA=0):
    python3 scripts/gpu/kda_fla_parity.py [--reps 30] [--skip-speed]
Writes kda_fla_parity.json to $OUT (or the current folder).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("FLA_FLASH_KDA", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# (B, T, H, D, regime of kda-general, dtype, with an initial state)
CASES = [
    (1, 63, 1, 64, "strong_decay", "float16", True),
    (2, 500, 3, 60, "strong_decay", "float16", True),
    (2, 1000, 3, 64, "kimi", "bfloat16", True),
    (3, 1024, 4, 100, "kimi", "bfloat16", False),
    (4, 1024, 4, 128, "default", "float16", True),
    (2, 1500, 4, 128, "kimi", "bfloat16", True),
    (1, 4096, 8, 128, "strong_decay", "bfloat16", False),
]
PACKED_LENGTHS = [1, 63, 500, 1000, 64, 300]
# Few sequences x heads: where the plain scan leaves SMs idle (``--shapes small``).
SMALL_SHAPES = ((1, 8192, 8, 128), (1, 32768, 4, 128), (1, 4096, 4, 128))


def cu_seqlens(lengths, device="cuda"):
    """FLA's packed-sequence offsets for sequences of ``lengths``: int64 [N + 1], from 0."""
    import torch

    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int64, device=device)


def rel(out, ref) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def correctness(with_fla: bool = True) -> list[dict]:
    import torch

    from kernels.kda import kda_forward
    from kernels.kda.baseline import fla_chunk_kda
    from kernels.kda.general import make_inputs
    from kernels.kda.reference import kda_reference

    chunk_kda = fla_chunk_kda() if with_fla else None
    rows = []
    cases = [(c, None) for c in CASES] + [((1, sum(PACKED_LENGTHS), 4, 128, "kimi", "bfloat16", True),
                                           PACKED_LENGTHS)]
    for (batch, seq, heads, dim, regime, dtype, with_state), packed in cases:
        inputs = make_inputs((batch, seq, heads, dim), seed=7, device="cuda", dtype=dtype, regime=regime)
        inputs.pop("initial_state")  # this script draws its own (or none)
        cu = None
        sequences = batch
        if packed:
            cu = cu_seqlens(packed)
            sequences = len(packed)
        h0 = torch.randn(sequences, heads, dim, dim, device="cuda", generator=torch.Generator("cuda").manual_seed(3)) \
            * 0.1 if with_state else None
        ref_o, ref_h = kda_reference(**inputs, initial_state=h0, output_final_state=True, cu_seqlens=cu,
                                     method="chunked")
        ours_o, ours_h = kda_forward(**inputs, initial_state=h0, output_final_state=True, cu_seqlens=cu)
        row = {"shape": [batch, seq, heads, dim], "regime": regime, "dtype": dtype, "state": with_state,
               "packed": packed, "g_min": float(inputs["g"].min()),
               "ours_o": rel(ours_o, ref_o), "ours_state": rel(ours_h, ref_h),
               "ours_finite": bool(torch.isfinite(ours_o).all())}
        try:
            if chunk_kda is None:
                raise RuntimeError("not run (--no-fla)")
            fla_o, fla_h = chunk_kda(inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"],
                                     scale=inputs["scale"], initial_state=h0, output_final_state=True, cu_seqlens=cu)
            row.update(fla_o=rel(fla_o, ref_o), fla_state=rel(fla_h, ref_h))
        except Exception as error:  # FLA refuses some inputs (e.g. head dims); say which
            row["fla_error"] = f"{type(error).__name__}: {str(error)[:200]}"
        rows.append(row)
        print(f"| {row['shape']} {'packed' if packed else ''} | {regime} | {dtype} | {row['g_min']:.1f} | "
              f"{row['ours_o']:.2e} | {row['ours_state']:.2e} | {row.get('fla_o', float('nan')):.2e} | "
              f"{row.get('fla_state', float('nan')):.2e} | {row.get('fla_error', '')} |", flush=True)
    return rows


def load_variants(specs: list[str]) -> dict:
    """``NAME=FILE.json`` each (knob values over the default point): NAME -> the rendered
    standalone candidate's ``kernel``, timed beside ours (kernels/kda/space.py renders it)."""
    import tempfile

    from kernels.config_source import import_source
    from kernels.kda import space

    found = {}
    folder = tempfile.mkdtemp(prefix="kda_variants_")
    for spec in specs:
        name, _, path = spec.partition("=")
        if not name.isidentifier() or not path:
            raise SystemExit(f"--variant takes NAME=FILE.json with NAME an identifier, got {spec!r}")
        point = {**space.DEFAULT, **json.loads(Path(path).read_text())}
        found[name] = import_source(space.render(point), f"kda_variant_{name}", folder).kernel
        print(f"variant {name}: {space.describe(point)}", flush=True)
    return found


def speed(reps: int, variants: dict | None = None, shapes: str = "bench") -> list[dict]:
    import torch

    from kernels import timing
    from kernels.kda.baseline import baselines, general_baselines
    from kernels.kda.chunk import kernel as ours
    from kernels.kda.definition import BENCH_SHAPES
    from kernels.kda.definition import make_inputs as bounded_inputs
    from kernels.kda.general import make_inputs as general_inputs

    # The judge's own baselines: fla-safe-gate and fla for kda, fla for kda-general; all of them
    # from the inputs' initial state, handing over the final state (the problems' contract).
    variants = variants or {}
    bounded = {"ours": ours, **variants, **{k.replace("-", "_"): f for k, f in baselines("cuda").items()}}
    general = {"ours": ours, **variants, **general_baselines("cuda")}

    rows = []
    flusher = timing.L2Flusher()
    for regime, make, providers in (
        ("bounded", lambda s, seed: bounded_inputs(s, seed, "cuda", "bfloat16"),
         bounded),
        ("kimi", lambda s, seed: general_inputs(s, seed, "cuda", "bfloat16", regime="kimi"),
         general),
    ):
        for shape in BENCH_SHAPES if shapes == "bench" else SMALL_SHAPES:
            sets = [make(shape, seed) for seed in (101, 102)]
            samples = timing.time_interleaved(providers, sets, reps=reps, warmup=3, flusher=flusher)
            medians = {label: sample.summary() for label, sample in samples.items()}
            row = {"regime": regime, "shape": list(shape), "timings": medians}
            ours = medians["ours"]["median_ms"]
            row["ratios"] = {label: m["median_ms"] / ours for label, m in medians.items() if label != "ours"}
            rows.append(row)
            print(f"| {regime} | {shape} | " + " | ".join(f"{label} {m['median_ms']:.3f} ms"
                                                       for label, m in medians.items())
                  + " | " + " | ".join(f"{k} / ours {v:.2f}x" for k, v in row["ratios"].items()) + " |", flush=True)
            del sets
            torch.cuda.empty_cache()
    for regime in ("bounded", "kimi"):
        for label in ("fla_safe_gate", "fla"):
            ratios = [r["ratios"][label] for r in rows if r["regime"] == regime and label in r["ratios"]]
            if ratios:
                geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
                print(f"geomean {regime} {label} / ours: {geomean:.3f}x over {len(ratios)} shapes")
                for name in variants:
                    mine = [r["ratios"][label] / r["ratios"][name] for r in rows
                            if r["regime"] == regime and label in r["ratios"]]
                    geomean = math.exp(sum(math.log(x) for x in mine) / len(mine))
                    print(f"geomean {regime} {label} / {name}: {geomean:.3f}x over {len(mine)} shapes "
                          f"(per shape {', '.join(f'{x:.2f}' for x in mine)})")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-correctness", action="store_true",
                        help="speed only (part 1 needs eight more FLA keys warm: fla_warm.py --scope parity)")
    parser.add_argument("--config", help="a JSON file of knob values that replace chunk.CONFIG's (e.g. a sweep's best)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FILE.json",
                        help="also time this point (knob values over the default) beside ours, e.g. "
                             "subchunk=scripts/gpu/kda_subchunk.json; repeatable")
    parser.add_argument("--shapes", choices=("bench", "small"), default="bench",
                        help="part 2's shapes: the kda problem's bench shapes, or SMALL_SHAPES (B x H small)")
    parser.add_argument("--no-fla", action="store_true",
                        help="part 1 without FLA (its first call per new head count or dim compiles for about 70 s)")
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", "."))
    results = {}
    if args.config:
        from kernels.kda import chunk

        chunk.CONFIG.update(json.loads(Path(args.config).read_text()))
        results["config"] = dict(chunk.CONFIG)
        print("CONFIG", json.dumps(chunk.CONFIG), flush=True)
    # Speed first: its four FLA keys are warm sooner than part 1's eight.
    if not args.skip_speed:
        results["speed"] = speed(args.reps, load_variants(args.variant), args.shapes)
        (out / "kda_fla_parity.json").write_text(json.dumps(results, indent=2))
    if args.skip_correctness:
        return 0
    print("| shape | gates | dtype | g min | ours o | ours state | FLA o | FLA state | FLA refused |")
    print("|---|---|---|---|---|---|---|---|---|")
    results["correctness"] = correctness(with_fla=not args.no_fla)
    (out / "kda_fla_parity.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
