"""The candidate's process: load it under guard and answer the caller's commands.

Started by ``runner.py`` inside the OS sandbox (``isolation.py``): its own namespaces, uid
65534, an empty environment, only its sandbox directory writable. Nothing here is trusted:
this process holds no reference output, no baseline, no seed of a call it has not been asked
to make, and it decides nothing. It answers one command at a time on a pipe — load the
candidate, make one checked call, warm up, time a batch, replay a graph — and sends every
output it made back on that pipe (raw bytes, sized by the plan). The caller checks what it
says: the referee compares every output of every call, checked or timed, and the times that
decide come from the caller's side (``cgroups.py``: the kernel's count of this box's CPU time,
the caller's clock); what this process reports about its own times is only compared with them.

Every call, checked, warm-up or timed, goes through the same ``invoke``: inputs built from a
seed the caller sends, output memory poisoned, every guard on, the same stack, the same copy
out. A candidate cannot tell a timed call from a checked one.

The Python guards (``guards.py``) are the first layer: they give an honest mistake a precise
message (torch compute, a forbidden import, a thread). They are not the security boundary.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from kernels.judge import protocol, rejections
from kernels.judge.rejections import Reject
from kernels.judge.sandbox_calls import Calls
from kernels.judge.sandbox_census import Census


def _limit_resources(config: dict[str, Any]) -> None:
    """Hard limits, set before any candidate code exists (no capability to raise them later)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    file_cap = int(config.get("max_file_bytes", 4 << 30))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_cap, file_cap))
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    cpu_seconds = int(config.get("max_cpu_seconds", 3600))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    if config.get("isolated") and not config.get("pids_cgroup"):
        # Counted per uid: under isolation that uid belongs to judge sandboxes only, and every
        # sandbox shares it (the weaker layer, used only without a pids cgroup; with one, the
        # box's pids.max bounds this judgement alone). Triton's compiler starts ptxas; CUDA and
        # torch start a few threads (threads count here too).
        resource.setrlimit(resource.RLIMIT_NPROC, (4096, 4096))
    memory_cap = config.get("max_memory_bytes")
    if memory_cap:  # CPU mode only: address-space limits break CUDA's reservations
        resource.setrlimit(resource.RLIMIT_AS, (int(memory_cap), int(memory_cap)))


class Sandbox(Calls, Census):
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
        self.flusher = None

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

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command.get("op")
        if op == "load":
            self.load_candidate(str(self.config["source"]))
            return {"kind": "loaded"}
        if op == "check":
            return self.check(command)
        if op == "warm":
            return self.warm(command)
        if op == "time":
            return self.time_batch(command)
        if op == "graph":
            return self.graph(command)
        if op in ("census_blank", "census_time"):
            return getattr(self, op)(command)
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
            reply = box.handle(command)
            payload = reply.pop("payload", None)
            protocol.send(fd, nonce, reply, payload)
    except Reject as reject:
        protocol.send(fd, nonce, {"kind": "reject", "status": reject.status, "message": reject.message})
    except BaseException as error:  # the harness itself failed; say so rather than pass
        detail = "".join(traceback.format_exception_only(type(error), error)).strip()
        protocol.send(fd, nonce, {"kind": "reject", "status": "runtime_error",
                                  "message": f"judge sandbox error: {detail[:1500]}"})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
