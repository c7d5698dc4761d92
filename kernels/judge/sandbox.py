"""The candidate's process: load it under guard, call it, time it, hand outputs back.

Started by ``runner.py`` as a fresh ``python -I`` with a scrubbed environment. Nothing here
decides correctness: the candidate's outputs go to the referee process, which alone holds
the reference. The sandbox reports what it observed (policy violations, launches, input
mutation, timings, kernel resources) on the nonce-framed pipe and exits with ``os._exit``
so no candidate finalizer runs after the report.

Phases: (1) correctness calls on the verify shapes, outputs saved, then wait for the
parent's "continue" (sent only if the referee accepted them); (2) timing on the bench
shapes, interleaved with the primary baseline, then re-check calls and sampled timed
outputs, saved for the referee; final report.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from kernels.judge import protocol


class Reject(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _limit_resources(config: dict[str, Any]) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    file_cap = int(config.get("max_file_bytes", 4 << 30))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_cap, file_cap))
    memory_cap = config.get("max_memory_bytes")
    if memory_cap:  # CPU mode only: address-space limits break CUDA's reservations
        resource.setrlimit(resource.RLIMIT_AS, (int(memory_cap), int(memory_cap)))


class Sandbox:
    def __init__(self, config: dict[str, Any]):
        import torch

        from kernels.judge import guards
        from kernels.registry import get_problem

        self.config = config
        self.torch = torch
        self.guards = guards
        self.problem = get_problem(config["problem"])
        self.device = config["device"]
        self.dtype = config["dtype"]
        self.workdir = Path(config["workdir"])
        self.candidate_file = str(self.workdir / "candidate.py")
        self.kernel = None
        self.snapshot: dict[str, int] = {}
        self.baseline_label = ""
        self.baseline = None

    # loading -------------------------------------------------------------------
    def load_baseline(self) -> None:
        try:
            baselines = self.problem.load_baselines(self.device)
        except Exception as error:  # e.g. FLA needs a GPU: fall back to the reference on CPU
            if self.device != "cpu":
                raise
            baselines = {"reference": self.problem.load_reference()}
            self.config["baseline_note"] = f"baseline unavailable on cpu ({error}); timed the reference"
        self.baseline_label, self.baseline = next(iter(baselines.items()))

    def load_candidate(self, source: str) -> None:
        import types

        Path(self.candidate_file).write_text(source)
        try:
            code = compile(source, self.candidate_file, "exec")
        except SyntaxError as error:
            raise Reject("compile_error", f"line {error.lineno}: SyntaxError: {error.msg}: {(error.text or '').strip()}") from None
        if self.device == "cuda":
            self._warm_triton_driver()
        self.guards.install(self.candidate_file)
        self.snapshot = self.guards.watched_functions()
        module = types.ModuleType("candidate")
        module.__file__ = self.candidate_file
        module.__dict__["__builtins__"] = self.guards.candidate_builtins()
        sys.modules["candidate"] = module
        self.guards.STATE.allow_exec = 1
        threads = threading.active_count()
        try:
            with self.guards.guarded():
                exec(code, module.__dict__)
        except BaseException as error:
            raise self.classify(error, "while importing the candidate") from None
        finally:
            self.guards.STATE.allow_exec = 0
        self.check_policy("while importing the candidate")
        # A thread started at import could do a call's work later, outside every checked call.
        if threading.active_count() != threads:
            raise Reject("forbidden", "the candidate started threads while importing")
        kernel = module.__dict__.get("kernel")
        if not callable(kernel):
            raise Reject("compile_error", "the candidate must define a function kernel(**inputs)")
        self.kernel = kernel

    @staticmethod
    def _warm_triton_driver() -> None:
        """Triton builds its driver helpers on first use and writes them to its cache. Outside
        a launch the guards refuse writes outside the sandbox, so build them now: an honest
        candidate that asks for device properties in host code must not be charged with it."""
        try:
            import triton

            driver = triton.runtime.driver.active
            driver.utils.get_device_properties(driver.get_current_device())
        except Exception:  # a nicety: the first launch builds them anyway
            pass

    # calling -------------------------------------------------------------------
    def check_policy(self, when: str) -> None:
        state = self.guards.STATE
        if state.violations:
            raise Reject("forbidden", f"{state.violations[0]} ({when})")
        changed = self.guards.changed_functions(self.snapshot)
        if changed:
            raise Reject("forbidden", f"the candidate replaced {', '.join(changed)} ({when}): timer and harness patches are not allowed")

    def classify(self, error: BaseException, when: str) -> Reject:
        state = self.guards.STATE
        if state.violations:
            return Reject("forbidden", f"{state.violations[0]} ({when})")
        text = str(error).strip()
        kinds = {cls.__name__ for cls in type(error).__mro__}
        where = self._candidate_line(error)
        if "CompilationError" in kinds:
            return Reject("compile_error", f"Triton compilation failed{where}: {text[:3000]}")
        if "InterpreterError" in kinds:
            return self._classify_interpreted(error, when)
        lowered = text.lower()
        if isinstance(error, MemoryError) or "out of memory" in lowered or "not enough memory" in lowered \
                or "cannot allocate memory" in lowered:
            return Reject("runtime_error", f"out of memory {when}{where}: {type(error).__name__}: {text[:600]}")
        if "illegal memory access" in lowered or "cuda error" in lowered or "misaligned address" in lowered:
            return Reject("runtime_error", f"CUDA error {when}{where}: {text[:800]}")
        if isinstance(error, (SystemExit, KeyboardInterrupt, GeneratorExit)):
            return Reject("runtime_error", f"the candidate raised {type(error).__name__} {when}: an exit is not a result")
        return Reject("runtime_error", f"{type(error).__name__} {when}{where}: {text[:1500]}")

    # Errors the Triton front end raises while it builds a kernel body. On a GPU they stop the
    # compile (CompilationError); the interpreter runs the body as Python and raises them while
    # the kernel "runs", wrapped in an InterpreterError. Calling them compile errors keeps the
    # verdict the same on both devices, so the loop's notebook learns the same lesson.
    FRONT_END_ERRORS = (ValueError, TypeError, NameError, AttributeError, AssertionError, IndexError,
                        NotImplementedError)

    def _classify_interpreted(self, error: BaseException, when: str) -> Reject:
        cause = error.__cause__ or error.__context__ or error
        where = self._candidate_line(cause)
        text = f"{type(cause).__name__}: {str(cause).strip()}"
        # The interpreter's tl.device_assert is a plain assert with the user's message: a run-time check.
        if isinstance(cause, self.FRONT_END_ERRORS) and "device_assert" not in where:
            return Reject("compile_error",
                          f"Triton kernel does not compile{where}: {text[:3000]} "
                          "(found by the Triton interpreter on the CPU)")
        return Reject("runtime_error", f"Triton kernel failed {when}{where}: {text[:1500]} (Triton interpreter)")

    def _candidate_line(self, error: BaseException) -> str:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == self.candidate_file]
        if not frames:
            return ""
        frame = frames[-1]
        return f" at line {frame.lineno} ({(frame.line or '').strip()[:160]})"

    def poison(self, shape: tuple[int, ...], dtype_name: str) -> None:
        """Fill freshly freed memory of the output's size with NaN so an unwritten output shows."""
        torch = self.torch
        dtype = getattr(torch, dtype_name)
        numel = 1
        for n in shape:
            numel *= n
        value = float("nan") if dtype.is_floating_point else -1
        blocks = [torch.empty(size, dtype=dtype, device=self.device) for size in (1 << 20, numel * 2, numel, numel)]
        for block in blocks:
            block.fill_(value)
        del block, blocks  # freed last-in first-out: the output-sized blocks come back first

    def call_checked(self, inputs: dict[str, Any], shape: tuple[int, ...], when: str):
        """Call the candidate under every guard; return a CPU copy of its output."""
        torch = self.torch
        out_shape, out_dtype = self.problem.output(shape, self.dtype)
        clones = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        self.poison(out_shape, out_dtype)
        launches = self.guards.STATE.own_launches
        threads = threading.active_count()
        try:
            with self.guards.guarded():
                out = self.kernel(**inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()
        except BaseException as error:
            raise self.classify(error, when) from None
        self.check_policy(when)
        if threading.active_count() != threads:
            raise Reject("forbidden", f"the candidate started threads ({when})")
        if self.guards.STATE.own_launches == launches:
            raise Reject("forbidden", f"no Triton kernel of the candidate was launched ({when}): the work must run in Triton")
        if type(out) is not torch.Tensor:
            raise Reject("incorrect", f"output must be a plain torch.Tensor, got {type(out).__module__}.{type(out).__name__} ({when})")
        if tuple(out.shape) != tuple(out_shape) or str(out.dtype).removeprefix("torch.") != out_dtype:
            raise Reject("incorrect", f"output must be {tuple(out_shape)} {out_dtype}, got {tuple(out.shape)} "
                         f"{str(out.dtype).removeprefix('torch.')} ({when})")
        if out.device.type != torch.device(self.device).type or (out.numel() and out.data_ptr() == 0):
            raise Reject("incorrect", f"output must live on {self.device} with storage ({when})")
        for name, clone in clones.items():
            if not torch.equal(inputs[name], clone):
                raise Reject("incorrect", f"the call modified its input '{name}' ({when}): inputs must stay unchanged")
        return out.detach().to("cpu", copy=True)

    def make(self, shape, seed):
        return self.problem.make_inputs(tuple(shape), seed, self.device, self.dtype)

    # phases --------------------------------------------------------------------
    def correctness(self) -> dict[str, Any]:
        from kernels.judge import plan

        outputs = {}
        seeds = self.config["seeds"]
        for j, shape in enumerate(self.config["verify"]):
            shape = tuple(shape)
            label = self.problem.describe_shape(shape)
            sets = []
            for i, seed in enumerate(seeds):
                inputs = self.make(shape, seed)
                outputs[f"v{j}/seed{i}"] = self.call_checked(inputs, shape, f"at {label}, seed {seed}")
                sets.append(inputs)
            # Same buffers, new contents: a result cached by address shows here.
            first, second = sets[0], sets[1]
            for name, value in first.items():
                if isinstance(value, self.torch.Tensor):
                    value.copy_(second[name])
                else:
                    first[name] = second[name]
            outputs[f"v{j}/ptr"] = self.call_checked(first, shape, f"at {label}, seed 0's buffers refilled")
            cut = plan.causal_cut(self.problem, shape)
            for k, perturb_seed in enumerate(self.config["perturb_seeds"] if cut is not None else ()):
                inputs = self.make(shape, seeds[0])
                plan.perturb_after(self.problem, inputs, self.make(shape, perturb_seed), cut)
                outputs[f"v{j}/causal{k}"] = self.call_checked(inputs, shape, f"at {label}, inputs after t={cut} changed")
            del sets, first, second
        return outputs

    def timing(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        outputs: dict[str, Any] = {}
        results = []
        graph_shapes = {tuple(s) for s in self.config.get("graph_shapes", [])}
        for j, shape in enumerate(self.config["bench"]):
            shape = tuple(shape)
            sets = [self.make(shape, seed) for seed in self.config["bench_seeds"]]
            kept: list[Any] = []
            candidate = self._timed_candidate(sets, kept, shape)
            providers = {"candidate": candidate, "baseline": self.baseline}
            entry: dict[str, Any] = {"shape": list(shape)}
            try:
                samples = self._time(providers, sets)
                if shape in graph_shapes and self.device == "cuda":
                    entry["graph"] = self._graph(providers, sets[0])
            except Reject:
                raise
            except BaseException as error:
                raise self.classify(error, f"while timing {self.problem.describe_shape(shape)}") from None
            self.check_policy("while timing")
            for index in sorted(candidate.spot_samples, reverse=True):
                del samples["candidate"].event_ms[index], samples["candidate"].wall_ms[index]
            entry["spot_checks"] = len(candidate.spot_samples)
            entry["candidate"] = samples["candidate"].summary()
            entry["baseline"] = samples["baseline"].summary()
            for k, (_, holds, out) in enumerate(kept):
                outputs[f"b{j}/timed{k}@{holds}"] = out.detach().to("cpu", copy=True)
            del kept, sets, providers, candidate
            recheck = self.make(shape, self.config["bench_seeds"][0])
            outputs[f"b{j}/recheck"] = self.call_checked(recheck, shape, f"after timing {self.problem.describe_shape(shape)}")
            results.append(entry)
        return outputs, results

    def _timed_candidate(self, sets, kept, shape):
        """The candidate as a timing provider, with launch counting and output sampling.

        At one random timed call on set 0 (unknown to the candidate), set 0's buffers are
        refilled with set 1's values first: a result cached by address during timing then
        comes back stale. Kept outputs are tagged with the bench seed their inputs held.
        """
        import random

        state = self.guards.STATE
        torch = self.torch
        watched = sets[0]
        marker = next(k for k, v in watched.items() if isinstance(v, torch.Tensor))
        warmup, reps = self.config["warmup"], self.config["reps"]
        timed = max(1, (reps + 1) // 2)  # timed calls on set 0
        pick = random.SystemRandom()
        # Refill set 0 with set 1's values at a random call in the first half of the timed
        # calls, and back with set 0's own values in the second half: a cache filled at any
        # point before the second refill comes back stale.
        first = pick.randrange(warmup, warmup + max(1, timed // 2))
        second = pick.randrange(first + 1, warmup + timed) if first + 1 < warmup + timed else None
        last = warmup + timed - 1
        originals = {k: v.clone() for k, v in watched.items() if isinstance(v, torch.Tensor)}
        original_scalars = {k: v for k, v in watched.items() if not isinstance(v, torch.Tensor)}
        calls = {"set0": 0, "holds": 0, "all": 0}
        # Spot checks: at random timed calls (unknown to the candidate) the full guards run, torch
        # compute refused included, so a candidate that computes in torch only while it is timed
        # is caught. Their samples carry the guards' overhead and are dropped from the timing.
        warm_calls = warmup * len(sets)
        spot_count = min(2, reps // 3)
        spots = set(pick.sample(range(warm_calls, warm_calls + reps), spot_count))
        label = self.problem.describe_shape(shape)

        def refill(inputs, holds):
            source = sets[1] if holds == 1 else {**originals, **original_scalars}
            for name, value in watched.items():
                if isinstance(value, torch.Tensor):
                    value.copy_(source[name])
                else:  # scalars travel by value: this call and later ones see the new one
                    watched[name] = inputs[name] = source[name]
            calls["holds"] = holds

        def candidate(**inputs):
            on_watched = inputs[marker] is watched[marker]
            swap = on_watched and len(sets) > 1 and calls["set0"] in (first, second)
            if swap:
                refill(inputs, 1 if calls["set0"] == first else 0)
            launches = state.own_launches
            threads = threading.active_count()
            index = calls["all"]
            calls["all"] += 1
            if index in spots:
                try:
                    with self.guards.guarded():
                        out = self.kernel(**inputs)
                except BaseException as error:
                    self.check_policy(f"in a spot-checked timed call at {label}")
                    raise self.classify(error, f"in a spot-checked timed call at {label}") from None
                self.check_policy(f"in a spot-checked timed call at {label}")
                candidate.spot_samples.append(index - warm_calls)
            else:
                out = self.guards.call_watched(self.kernel, inputs)
            if threading.active_count() != threads:
                raise Reject("forbidden", f"a timed call started threads at {self.problem.describe_shape(shape)}")
            if state.own_launches == launches:
                raise Reject("forbidden", f"a timed call launched no Triton kernel of the candidate at {self.problem.describe_shape(shape)}")
            if on_watched:
                # Cloned at once: a candidate may legitimately hand back the same buffer each call.
                if swap or calls["set0"] == last:
                    kept.append(("swap" if swap else "last", calls["holds"], out.clone()))
                calls["set0"] += 1
            return out

        candidate.spot_samples = []  # indices into the timed samples that were spot checks
        return candidate

    def _time(self, providers, sets):
        from kernels import timing

        reps, warmup = self.config["reps"], self.config["warmup"]
        if self.device == "cuda":
            return timing.time_interleaved(providers, sets, reps=reps, warmup=warmup)
        # Interpreter timing: wall clock, interleaved and rotated the same way, no L2 to flush.
        for fn in providers.values():
            for inputs in sets:
                for _ in range(warmup):
                    fn(**inputs)
        labels = list(providers)
        samples = {label: timing.Samples() for label in labels}
        for r in range(reps):
            inputs = sets[r % len(sets)]
            shift = r % len(labels)
            for label in labels[shift:] + labels[:shift]:
                start = time.perf_counter()
                providers[label](**inputs)
                elapsed = (time.perf_counter() - start) * 1e3
                samples[label].event_ms.append(elapsed)
                samples[label].wall_ms.append(elapsed)
        return samples

    def _graph(self, providers, inputs) -> dict[str, Any]:
        from kernels import timing

        graph: dict[str, Any] = {}
        for label, fn in providers.items():
            try:
                graph[label] = timing.time_graph_replay(fn, inputs).summary()
            except Reject:
                raise
            except Exception as error:
                graph[label] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
        return graph

    def save(self, outputs: dict[str, Any], name: str) -> dict[str, str]:
        path = self.workdir / name
        self.torch.save(outputs, path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return {"path": str(path), "sha256": digest}


def main() -> None:
    protocol.die_with_parent()
    config = json.loads(sys.stdin.readline())
    fd, nonce = config["report_fd"], config["nonce"]
    _limit_resources(config)
    try:
        box = Sandbox(config)
        if config.get("mode") == "profile":  # one checked call at the first bench shape, under ncu
            box.load_candidate(Path(config["source_path"]).read_text())
            shape = tuple(config["bench"][0])
            box.call_checked(box.make(shape, config["bench_seeds"][0]), shape, "under ncu")
            protocol.send(fd, nonce, {"kind": "profiled"})
            sys.stdout.flush()
            os._exit(0)
        box.load_baseline()
        box.load_candidate(Path(config["source_path"]).read_text())
        phase1 = box.save(box.correctness(), "phase1.pt")
        protocol.send(fd, nonce, {"kind": "phase1", **phase1})
        if sys.stdin.readline().strip() != "continue":
            os._exit(0)
        outputs, timings = box.timing()
        phase2 = box.save(outputs, "phase2.pt")
        protocol.send(fd, nonce, {
            "kind": "final",
            **phase2,
            "timings": timings,
            "baseline": box.baseline_label,
            "baseline_note": config.get("baseline_note", ""),
            "resources": box.guards.STATE.kernels,
            "launches": box.guards.STATE.own_launches,
        })
    except Reject as reject:
        protocol.send(fd, nonce, {"kind": "reject", "status": reject.status, "message": reject.message})
    except BaseException as error:  # the harness itself failed; say so rather than pass
        detail = "".join(traceback.format_exception_only(type(error), error)).strip()
        protocol.send(fd, nonce, {"kind": "reject", "status": "runtime_error", "message": f"judge sandbox error: {detail[:1500]}"})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
