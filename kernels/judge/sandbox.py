"""The candidate's process: load it under guard and answer the caller's commands.

Started by ``runner.py`` inside the OS sandbox (``isolation.py``): its own namespaces, uid
65534, an empty environment, only its sandbox directory writable. Nothing here is trusted:
this process holds no reference output, no baseline, no seed of a call it has not been asked
to make, and it decides nothing. It answers one command at a time on a pipe — load the
candidate, make one checked call and save its output, warm up, time a batch (digesting every
output), replay a graph — and the caller checks what it says: the referee compares every
output of the plan, the caller's clock bounds every reported time.

The Python guards (``guards.py``) are the first layer: they give an honest mistake a precise
message (torch compute, a forbidden import, a thread). They are not the security boundary.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from kernels.judge import outputs, protocol, rejections
from kernels.judge.rejections import Reject


def _limit_resources(config: dict[str, Any]) -> None:
    """Hard limits, set before any candidate code exists (no capability to raise them later)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    file_cap = int(config.get("max_file_bytes", 4 << 30))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_cap, file_cap))
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    cpu_seconds = int(config.get("max_cpu_seconds", 3600))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    if config.get("isolated"):
        # Counted per uid: under isolation that uid belongs to judge sandboxes only. Triton's
        # compiler starts ptxas; CUDA and torch start a few threads (threads count here too).
        resource.setrlimit(resource.RLIMIT_NPROC, (4096, 4096))
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
        sys.path.extend(root for root in config.get("import_roots", ()) if root not in sys.path)
        self.problem = get_problem(config["problem"])
        self.device = config["device"]
        self.dtype = config["dtype"]
        self.workdir = Path(config["workdir"])
        self.candidate_file = str(self.workdir / "candidate.py")
        self.kernel = None
        self.snapshot: dict[str, int] = {}
        self.group = ""
        self.kept: dict[str, dict[str, Any]] = {}
        self.bench_index: int | None = None
        self.sets: list[dict[str, Any]] = []
        self.pristine: list[dict[str, Any]] = []
        self.holds = [0, 1]
        self.flusher = None
        self.saved = 0

    # loading -------------------------------------------------------------------
    def load_candidate(self, source: str) -> None:
        import types

        Path(self.candidate_file).write_text(source)
        try:
            code = compile(source, self.candidate_file, "exec")
        except SyntaxError as error:
            text = (error.text or "").strip()
            raise Reject("compile_error", f"line {error.lineno}: SyntaxError: {error.msg}: {text}") from None
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
        candidate that asks for device properties in host code must not be charged with it.
        The same for torch: until ``torch.cuda.init()``, ``torch.cuda.get_device_properties``
        counts devices through NVML with ctypes (seen on the H200: an honest mla-decode
        candidate of the search space, which sizes its grid by the SM count, was refused for
        ``ctypes.dlopen``); initialised here, it asks the CUDA runtime."""
        try:
            import torch

            torch.cuda.init()
            torch.cuda.get_device_properties(torch.cuda.current_device())
        except Exception:  # no usable GPU: the candidate's first call says so
            pass
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
            raise Reject("forbidden", f"the candidate replaced {', '.join(changed)} ({when}): "
                         "timer and harness patches are not allowed")

    def classify(self, error: BaseException, when: str) -> Reject:
        state = self.guards.STATE
        if state.violations:
            return Reject("forbidden", f"{state.violations[0]} ({when})")
        return rejections.classify(error, when, self.candidate_file)

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
        clones = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        for _, out_shape, out_dtype in self.problem.output_specs(shape, self.dtype):
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
            raise Reject("forbidden",
                         f"no Triton kernel of the candidate was launched ({when}): the work must run in Triton")
        try:
            got = outputs.check(self.problem, shape, self.dtype, out, self.device)
        except outputs.OutputError as error:
            raise Reject("incorrect", f"{error} ({when})") from None
        for name, clone in clones.items():
            if not torch.equal(inputs[name], clone):
                raise Reject("incorrect", f"the call modified its input '{name}' ({when}): inputs must stay unchanged")
        return outputs.packed(tuple(part.detach().to("cpu", copy=True) for part in got))

    # commands ------------------------------------------------------------------
    # The caller streams the plan one call at a time; this process never holds the rest of it.
    def check(self, command: dict[str, Any]) -> dict[str, Any]:
        """One checked call: build its inputs, call under every guard, save the output."""
        from kernels.judge import plan

        call = plan.Call(**command["call"])
        group = call.key.partition("/")[0]
        if group != self.group:  # inputs are kept only while their shape is being checked
            self.group, self.kept = group, {}
        inputs = plan.inputs_of(self.problem, call, self.device, self.dtype)
        if call.reuse:
            # Same buffers, new contents: a result cached by address shows here.
            target = self.kept[call.reuse]
            for name, value in inputs.items():
                if isinstance(value, self.torch.Tensor):
                    target[name].copy_(value)
                else:
                    target[name] = value
            inputs = target
        out = self.call_checked(inputs, tuple(call.shape), call.when or call.key)
        if not call.key.startswith("b"):
            self.kept[call.key] = inputs
        return {"kind": "output", "key": call.key, **self.save({call.key: out}, f"out-{self.saved}.pt")}

    def bench_inputs(self, bench: dict[str, Any]) -> list[dict[str, Any]]:
        """The two input slots of a bench shape (and pristine copies of both seeds' inputs)."""
        from kernels.judge import plan

        if self.bench_index != bench["index"]:
            self.bench_index = bench["index"]
            self.pristine = [
                plan.make_inputs(self.problem, bench["shape"], seed, bench["regime"], self.device, self.dtype)
                for seed in bench["seeds"]
            ]
            self.sets = [{k: v.clone() if isinstance(v, self.torch.Tensor) else v for k, v in inputs.items()}
                         for inputs in self.pristine]
            self.holds = [0, 1]
        return self.sets

    def warm(self, command: dict[str, Any]) -> dict[str, Any]:
        """Untimed calls on both input slots (compilation, autotuning) under every guard."""
        bench = command["bench"]
        shape = tuple(bench["shape"])
        for inputs in self.bench_inputs(bench):
            for _ in range(command["calls"]):
                self.call_checked(inputs, shape, f"warming up at {self.problem.describe_shape(shape)}")
        return {"kind": "warmed"}

    def refill(self, slot: int, holds: int) -> None:
        """Make input slot ``slot`` hold bench seed ``holds``, in its own buffers."""
        if self.holds[slot] == holds:
            return
        target = self.sets[slot]
        for name, value in self.pristine[holds].items():
            if isinstance(value, self.torch.Tensor):
                target[name].copy_(value)
            else:  # scalars travel by value
                target[name] = value
        self.holds[slot] = holds

    def time_batch(self, command: dict[str, Any]) -> dict[str, Any]:
        """``calls`` timed calls on one input slot; every output is digested after its call.

        The digest seed arrives with the command, so an output can be fingerprinted only once
        it exists; the caller's own clock around this command bounds the times reported here.
        A ``guarded`` batch is a spot check: one call under every guard, digested, not timed.
        """
        from kernels.judge import plan

        bench, batch = command["bench"], command["batch"]
        shape = tuple(bench["shape"])
        label = self.problem.describe_shape(shape)
        self.bench_inputs(bench)
        slot = batch["slot"]
        self.refill(slot, batch["holds"])
        inputs = self.sets[slot]
        state = self.guards.STATE
        event_ms, wall_ms, digests = [], [], []
        timer = self.timer()
        for index in range(batch["calls"]):
            if batch.get("switch_at") is not None and index == batch["switch_at"]:
                self.refill(slot, 1 - self.holds[slot])
            launches, threads = state.own_launches, threading.active_count()
            if batch.get("guarded"):
                when = f"in a spot-checked timed call at {label}"
                try:
                    with self.guards.guarded():
                        out = self.kernel(**inputs)
                    if self.device == "cuda":
                        self.torch.cuda.synchronize()
                except BaseException as error:
                    self.check_policy(when)
                    raise self.classify(error, when) from None
                self.check_policy(when)
            else:
                try:
                    out, event, wall = timer(lambda: self.guards.call_watched(self.kernel, inputs))
                except Reject:
                    raise
                except BaseException as error:
                    raise self.classify(error, f"while timing {label}") from None
                event_ms.append(event)
                wall_ms.append(wall)
            if threading.active_count() != threads:
                raise Reject("forbidden", f"a timed call started threads at {label}")
            if state.own_launches == launches:
                raise Reject("forbidden", f"a timed call launched no Triton kernel of the candidate at {label}")
            try:
                out = outputs.packed(outputs.check(self.problem, shape, self.dtype, out, self.device))
            except outputs.OutputError as error:
                raise Reject("incorrect", f"a timed call at {label}: {error}") from None
            digests.append(plan.digest(out, batch["digest_seed"], command["digests"]))
            del out
        self.check_policy(f"while timing {label}")
        return {"kind": "timed", "event_ms": event_ms, "wall_ms": wall_ms, "digests": digests}

    def timer(self):
        """Times one call: (output, event ms, synchronized wall ms); L2 flushed first on a GPU."""
        from kernels import timing

        if self.device == "cuda" and self.flusher is None:
            self.flusher = timing.L2Flusher()
        return lambda fn: timing.timed_call(fn, self.device, self.flusher)

    def graph(self, command: dict[str, Any]) -> dict[str, Any]:
        from kernels import timing

        inputs = self.bench_inputs(command["bench"])[0]
        try:
            return {"kind": "graph", "graph": timing.time_graph_replay(self.kernel, inputs).summary()}
        except Reject:
            raise
        except Exception as error:
            return {"kind": "graph", "graph": {"error": f"{type(error).__name__}: {str(error)[:300]}"}}

    def save(self, outputs: dict[str, Any], name: str) -> dict[str, str]:
        path = self.workdir / name
        self.torch.save(outputs, path)
        self.saved += 1
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return {"path": str(path), "sha256": digest}

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command.get("op")
        if op == "load":
            self.load_candidate(Path(self.config["source_path"]).read_text())
            return {"kind": "loaded"}
        if op == "check":
            return self.check(command)
        if op == "warm":
            return self.warm(command)
        if op == "time":
            return self.time_batch(command)
        if op == "graph":
            return self.graph(command)
        if op == "finish":
            return {"kind": "finished", "resources": self.guards.STATE.kernels,
                    "launches": self.guards.STATE.own_launches}
        raise ValueError(f"unknown command {op!r}")


def main() -> None:
    protocol.die_with_parent()
    config = json.loads(sys.stdin.readline())
    fd, nonce = config["report_fd"], config["nonce"]
    _limit_resources(config)
    try:
        box = Sandbox(config)
        protocol.send(fd, nonce, {"kind": "started"})
        for line in sys.stdin:
            command = json.loads(line)
            if command.get("op") == "exit":
                break
            protocol.send(fd, nonce, box.handle(command))
    except Reject as reject:
        protocol.send(fd, nonce, {"kind": "reject", "status": reject.status, "message": reject.message})
    except BaseException as error:  # the harness itself failed; say so rather than pass
        detail = "".join(traceback.format_exception_only(type(error), error)).strip()
        protocol.send(fd, nonce, {"kind": "reject", "status": "runtime_error",
                                  "message": f"judge sandbox error: {detail[:1500]}"})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
