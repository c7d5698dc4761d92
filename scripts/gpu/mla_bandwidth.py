"""One GPU call: MLA decode variants against the memory roofline and torch.compile, under graph replay.

    PYTHONPATH=. python3 scripts/gpu/mla_bandwidth.py OUT_DIR [--budget SECONDS] [--set run1|occupancy|stream]

1. The card's copy bandwidth (device-to-device copy of 2 GiB, read + write bytes over time).
2. Triton compiles every variant (``mla_bandwidth_variants.py``) in parallel worker processes,
   while this process compiles torch.compile (inductor, static shapes) at every bench shape.
3. Per bench shape: each variant of the shape's class, checked in bf16 against the float64
   reference, then timed under CUDA-graph replay (the L2 flushed inside each graph and the
   flush's own time subtracted), interleaved round by round with torch.compile + graph; every
   variant is also checked at a ragged length of its class, and its graph's output against its
   eager output (a race would differ).
4. Per class, the variant with the least geomean time over the class's shapes; the merged point
   ("final") is timed again on every shape beside "committed" and torch.compile.
5. The paged kernel (page size 64, every request at full length) at the final and committed
   points against the dense kernel, if time is left.
Prints a compact table last ("=== summary"); everything is written to OUT_DIR/mla_bandwidth.json.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mla_bandwidth_variants as mv  # noqa: E402

from kernels.mla import decode  # noqa: E402
from kernels.mla.baseline import mla_decode_torch  # noqa: E402
from kernels.mla.definition import PROBLEM  # noqa: E402
from kernels.mla.reference import reference  # noqa: E402
from kernels.timing import replay_ms  # noqa: E402

START = time.time()
TOLERANCE = PROBLEM.tolerance["bfloat16"]
WORKERS = 10


def elapsed() -> float:
    return time.time() - START


def log(text: str) -> None:
    print(f"[{elapsed():5.0f}s] {text}", flush=True)


def rel_err(out, ref) -> float:
    out64, ref64 = out.double(), ref.double()
    if not bool(torch.isfinite(out64).all()):
        return float("inf")
    return float((out64 - ref64).norm() / ref64.norm())


def copy_bandwidth_gbs() -> float:
    """Read + write bytes per second of a 2 GiB device-to-device copy (median of 10)."""
    src = torch.empty(2**30, dtype=torch.int16, device="cuda").random_()
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return 2 * src.numel() * 2 / (statistics.median(times[2:]) * 1e-3) / 1e9


def start_workers(out_dir: str, which: str) -> list:
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mla_bandwidth_variants.py")
    return [(subprocess.Popen([sys.executable, script, "--warm", str(i), str(WORKERS),
                               os.path.join(out_dir, f"warm_{i}.json"), which],
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(out_dir, f"warm_{i}.err"), "w")), i)
            for i in range(WORKERS)]


def wait_workers(workers: list, out_dir: str, deadline: float, which: str) -> dict:
    """name -> why it is left out: its compile failed, or its worker had not reached it by the
    deadline (a compile that hangs must not hang the timing process too)."""
    reported = {}
    for proc, i in workers:
        try:
            proc.wait(timeout=max(1.0, deadline - elapsed()))
        except subprocess.TimeoutExpired:
            proc.kill()
            log(f"warm-up worker {i} killed at the deadline")
        try:
            reported.update(json.load(open(os.path.join(out_dir, f"warm_{i}.json")))["errors"])
        except (OSError, ValueError) as error:  # none written, or cut off by the kill
            log(f"warm-up worker {i}: no report ({error!r:.120})")
    missing = {name: "not compiled by the warm-up deadline" for name in mv.variants(which) if name not in reported}
    return {**{name: err for name, err in reported.items() if err}, **missing}


class GraphTimer:
    """CUDA graphs of (L2 flush; fn) per provider, replayed interleaved; µs per call."""

    def __init__(self):
        self.flush_buffer = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
        self.flush_graph = self.capture(lambda: None)[0]
        self.graphs, self.outputs = {}, {}

    def capture(self, fn):
        fn()  # workspaces and lazy state outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.flush_buffer.zero_()
            out = fn()
        torch.cuda.synchronize()
        return graph, out

    def add(self, name, fn):
        self.graphs[name], self.outputs[name] = self.capture(fn)

    replay_ms = staticmethod(replay_ms)

    def run(self, rounds=7, replays=20) -> dict:
        names = list(self.graphs)
        samples = {name: [] for name in names}
        for graph in self.graphs.values():
            self.replay_ms(graph, 2)
        for r in range(rounds):
            flush = self.replay_ms(self.flush_graph, replays)
            for name in names[r % len(names):] + names[: r % len(names)]:
                samples[name].append(max(self.replay_ms(self.graphs[name], replays) - flush, 0.0) / replays * 1e3)
        return {name: statistics.median(v) for name, v in samples.items()}


def check_variant(name, knobs, inputs, ref) -> tuple[float, object]:
    """Relative error of the variant's eager bf16 output; and a zero-argument call for graphs."""
    with mv.using(knobs):
        err = rel_err(decode.mla_decode(**inputs), ref)

    def call():
        with mv.using(knobs):
            return decode.mla_decode(**inputs)
    return err, call


def measure_shape(shape, providers: dict, compiled, log_row: dict, stop_at: float = float("inf")) -> dict:
    """Check and time ``providers`` (name -> knobs) at one bench shape beside torch.compile;
    past ``stop_at`` seconds only the committed and final points are still added."""
    inputs = PROBLEM.make_inputs(shape, 9, "cuda", "bfloat16")
    ref = reference(**inputs)
    timer = GraphTimer()
    for name, knobs in providers.items():
        if elapsed() > stop_at and name not in ("committed", "final"):
            log_row.setdefault("skipped", []).append(name)
            continue
        try:
            err, call = check_variant(name, knobs, inputs, ref)
            log_row.setdefault("error", {})[name] = err
            if err <= TOLERANCE:
                timer.add(name, call)
        except Exception as error:
            log_row.setdefault("failed", {})[name] = repr(error)[:300]
    if compiled is not None:
        try:
            log_row.setdefault("error", {})["torch.compile"] = rel_err(compiled(**inputs), ref)
            timer.add("torch.compile", lambda: compiled(**inputs))
        except Exception as error:
            log_row.setdefault("failed", {})["torch.compile"] = repr(error)[:300]
    times = timer.run()
    for name, out in timer.outputs.items():
        graph_err = rel_err(out, ref)
        if name != "torch.compile" and graph_err > TOLERANCE:
            times.pop(name)
            log_row.setdefault("failed", {})[name] = f"graph replay output wrong: rel err {graph_err:.2e}"
    log_row["graph_us"] = times
    return times


def ragged_errors(variants: dict, log: dict) -> None:
    for cls, shape in mv.RAGGED.items():
        inputs = PROBLEM.make_inputs(shape, 3, "cuda", "bfloat16")
        ref = reference(**inputs)
        for name, (vcls, knobs) in variants.items():
            if mv.applies(vcls, shape):
                try:
                    log.setdefault(name, {})[str(shape)] = check_variant(name, knobs, inputs, ref)[0]
                except Exception as error:
                    log.setdefault(name, {})[str(shape)] = repr(error)[:200]


def best_per_class(variants: dict, results: dict, ragged: dict) -> dict:
    """class -> (name, geomean µs) over the class's bench shapes, among variants correct everywhere."""
    best = {}
    for cls in ("small", "batched"):
        shapes = [s for s in mv.BENCH_SHAPES if mv.shape_class(s) == cls]
        scores = {}
        for name, (vcls, _) in variants.items():
            times = [results.get(str(s), {}).get("graph_us", {}).get(name) for s in shapes]
            checks = [v for v in ragged.get(name, {}).values()]
            if vcls in (cls, "all") and all(times) and all(isinstance(c, float) and c <= TOLERANCE for c in checks):
                scores[name] = statistics.geometric_mean(times)
        ranked = sorted(scores.items(), key=lambda kv: kv[1])
        best[cls] = ranked[:6]
    return best


def merged_point(best: dict, variants: dict) -> dict:
    """The committed knobs with the best small-class and batched variants' overrides (the two
    classes' knobs are disjoint)."""
    point = {}
    for cls in ("batched", "small"):
        if best.get(cls):
            point.update(variants[best[cls][0][0]][1])
    return point


def paged_inputs(inputs: dict, page: int = 64) -> dict:
    """The dense cache of ``inputs`` in shuffled pages of ``page`` tokens, every request full."""
    kv = inputs["kv"]
    batch, seq, width = kv.shape
    pages = batch * seq // page
    order = torch.randperm(pages, device=kv.device)
    cache = torch.empty(pages, page, width, dtype=kv.dtype, device=kv.device)
    cache[order] = kv.reshape(pages, page, width)
    return {"q": inputs["q"], "kv_cache": cache, "block_table": order.to(torch.int32).reshape(batch, seq // page),
            "cache_seqlens": torch.full((batch,), seq, dtype=torch.int32, device=kv.device),
            "scale": inputs["scale"]}


def measure_paged(shapes, points: dict, result: dict) -> None:
    from kernels.mla.paged import mla_decode_paged

    for shape in shapes:
        inputs = PROBLEM.make_inputs(shape, 9, "cuda", "bfloat16")
        paged = paged_inputs(inputs)
        ref = reference(**inputs)
        timer, row = GraphTimer(), result.setdefault(str(shape), {})
        for name, knobs in points.items():
            for kind, fn, args in (("dense", decode.mla_decode, inputs), ("paged", mla_decode_paged, paged)):
                def call(fn=fn, args=args, knobs=knobs):
                    with mv.using(knobs):
                        return fn(**args)
                row.setdefault("error", {})[f"{kind} {name}"] = rel_err(call(), ref)
                timer.add(f"{kind} {name}", call)
        row["graph_us"] = timer.run(rounds=5)
        log(f"paged {shape}: " + ", ".join(f"{k} {v:.1f}" for k, v in row["graph_us"].items()))


def summary(result: dict, copy_gbs: float) -> None:
    print("=== summary (µs per call under CUDA-graph replay, L2 flushed; read = KV cache bytes / time)", flush=True)
    print(f"device {result['device']} | copy bandwidth {copy_gbs:.0f} GB/s (read + write)")
    print("| B,H,S | torch.compile | committed | final | final GB/s read | % of copy bw | final vs compile |"
          " best variant here (µs) |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in mv.BENCH_SHAPES:
        sweep = result["sweep"].get(str(shape), {}).get("graph_us", {})
        final = result["final"].get(str(shape), {}).get("graph_us", {})
        compile_us, fin = final.get("torch.compile") or sweep.get("torch.compile"), final.get("final")
        committed = final.get("committed") or sweep.get("committed")
        ranked = sorted((v, k) for k, v in sweep.items() if k != "torch.compile")
        best = f"{ranked[0][1]} ({ranked[0][0]:.1f})" if ranked else "-"
        gbs = shape[0] * shape[2] * 576 * 2 / (fin * 1e-6) / 1e9 if fin else 0.0

        def fmt(x):
            return f"{x:.1f}" if x else "-"
        ratio = f"{compile_us / fin:.2f}x" if fin and compile_us else "-"
        print(f"| {shape[0]},{shape[1]},{shape[2]} | {fmt(compile_us)} | {fmt(committed)} | {fmt(fin)} | {gbs:.0f} |"
              f" {100 * gbs / copy_gbs:.0f} | {ratio} | {best} |")
    ratios = [result["final"][str(s)]["graph_us"]["torch.compile"] / result["final"][str(s)]["graph_us"]["final"]
              for s in mv.BENCH_SHAPES if {"final", "torch.compile"} <= set(result["final"].get(str(s), {})
                                                                            .get("graph_us", {}))]
    if ratios:
        print(f"geomean final vs torch.compile: {statistics.geometric_mean(ratios):.2f}x over {len(ratios)} shapes")
    for cls, ranked in result["best"].items():
        print(f"best {cls}: " + "; ".join(f"{name} {us:.1f}" for name, us in ranked))
    print("final point (CONFIG overrides on the committed one):", json.dumps(result["final_point"]))
    if result.get("failed"):
        print("failed or wrong:", json.dumps(result["failed"])[:1500])


def sweep(variants: dict, compiled: dict, result: dict, stop_at: float) -> None:
    for shape in mv.BENCH_SHAPES:
        chosen = {name: knobs for name, (cls, knobs) in variants.items() if mv.applies(cls, shape)}
        if elapsed() > stop_at:
            chosen = {"committed": {}}
            log(f"{shape}: out of time, committed point only")
        row = result["sweep"].setdefault(str(shape), {})
        try:
            times = measure_shape(shape, chosen, compiled.get(shape), row, stop_at)
        except Exception as error:
            log(f"{shape}: sweep failed: {error!r:.300}")
            continue
        ranked = sorted(times.items(), key=lambda kv: kv[1])
        log(f"{shape}: " + ", ".join(f"{k} {v:.1f}" for k, v in ranked[:8]) + f" ... ({len(ranked)} timed)")
        save(result)


def save(result: dict) -> None:
    with open(os.path.join(result["out_dir"], "mla_bandwidth.json"), "w") as handle:
        json.dump(result, handle, indent=1, default=str)


def main(out_dir: str, budget: float, which: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    decode._MAX_WORKSPACES = 10**6  # graphs keep pointers into the workspaces: never free one
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "unknown"
    result = {"out_dir": out_dir, "commit": commit, "sweep": {}, "final": {}, "paged": {}, "failed": {},
              "device": f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
                        f"triton {__import__('triton').__version__}"}
    variants = mv.variants(which)
    result["variants"], result["set"] = variants, which
    result["copy_gbs"] = copy_gbs = copy_bandwidth_gbs()
    log(f"{result['device']}; copy {copy_gbs:.0f} GB/s; {len(variants)} variants; commit {commit}")
    workers = start_workers(out_dir, which)
    compiled_fn, compiled = torch.compile(mla_decode_torch, dynamic=False), {}
    for shape in mv.BENCH_SHAPES:
        inputs = PROBLEM.make_inputs(shape, 9, "cuda", "bfloat16")
        try:
            compiled_fn(**inputs)
            compiled[shape] = compiled_fn
        except Exception as error:
            result["failed"][f"torch.compile {shape}"] = repr(error)[:300]
        log(f"torch.compile warm at {shape}")
    result["failed"].update(wait_workers(workers, out_dir, deadline=0.45 * budget, which=which))
    log(f"warm-up done; failures: {sorted(result['failed'])}")
    ok = {name: v for name, v in variants.items() if name not in result["failed"] or name == "committed"}
    result["ragged"] = {}
    ragged_errors(ok, result["ragged"])
    sweep(ok, compiled, result, stop_at=0.72 * budget)
    result["best"] = best = best_per_class(ok, result["sweep"], result["ragged"])
    result["final_point"] = final = merged_point(best, ok)
    for shape in mv.BENCH_SHAPES:
        if elapsed() < 0.85 * budget:
            try:
                measure_shape(shape, {"final": final, "committed": {}}, compiled.get(shape),
                              result["final"].setdefault(str(shape), {}))
            except Exception as error:
                log(f"{shape}: final pass failed: {error!r:.300}")
    log("final pass done")
    for row in result["sweep"].values():
        result["failed"].update(row.get("failed", {}))
    save(result)
    summary(result, copy_gbs)
    # Last: the paged kernel compiles here (its points were not known to the warm-up workers).
    if elapsed() < 0.8 * budget:
        print("paged, page size 64, every request full (µs per call, graph replay; dense beside it):")
        try:
            measure_paged(((1, 64, 8192), (32, 64, 8192), (64, 128, 4096)), {"final": final, "committed": {}},
                          result["paged"])
        except Exception as error:
            log(f"paged failed: {error!r:.300}")
        save(result)
    log("done")


if __name__ == "__main__":
    args = sys.argv[1:]
    budget = float(args[args.index("--budget") + 1]) if "--budget" in args else 430.0
    which = args[args.index("--set") + 1] if "--set" in args else "run1"
    main(args[0] if args and not args[0].startswith("--") else "/tmp/mla_out", budget, which)
