"""The candidate's calls, inside its process: one way of calling it, whatever the call is for.

A checked call, a warm-up call and a timed call are made by the same ``invoke``: inputs built
from the seed the caller sent (timed calls too: every one gets inputs the process has never
seen), output-sized memory poisoned with NaN, every guard on, the same stack depth, the output
copied out and sent back as raw bytes. What differs is only what the caller does around the
command (its clock, the box's CPU counter), which this process cannot observe or change.
Nothing here is trusted: the referee judges every output, the caller's side keeps the time.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kernels.judge import outputs
from kernels.judge.rejections import Reject


class Calls:
    """Mixed into ``Sandbox``: needs ``torch``, ``guards``, ``problem``, ``device``, ``dtype``,
    ``kernel``, ``kept``, ``group``, ``flusher``, ``check_policy`` and ``classify``."""

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

    def prepare(self, inputs: dict[str, Any], shape: tuple[int, ...]) -> dict[str, Any]:
        """The harness's work before a call: input clones, poisoned output memory, L2 flushed.
        Shared by ``invoke`` and the census's blank calls (``sandbox_census.py``), so that both
        launch the same harness kernels."""
        torch = self.torch
        clones = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        for _, out_shape, out_dtype in self.problem.output_specs(shape, self.dtype):
            self.poison(out_shape, out_dtype)
        if self.device == "cuda":
            if self.flusher is None:
                from kernels import timing

                self.flusher = timing.L2Flusher()
            self.flusher()
            torch.cuda.synchronize()
        return clones

    def collect(self, out, inputs: dict[str, Any], clones: dict[str, Any], shape: tuple[int, ...], when: str):
        """The harness's work after a call: outputs checked, inputs unchanged, a CPU copy out."""
        torch = self.torch
        try:
            got = outputs.check(self.problem, shape, self.dtype, out, self.device)
        except outputs.OutputError as error:
            raise Reject("incorrect", f"{error} ({when})") from None
        for name, clone in clones.items():
            if not torch.equal(inputs[name], clone):
                raise Reject("incorrect", f"the call modified its input '{name}' ({when}): inputs must stay unchanged")
        return tuple(part.detach().to("cpu", copy=True) for part in got)

    def invoke(self, inputs: dict[str, Any], shape: tuple[int, ...], when: str):
        """Call the candidate under every guard; (a CPU copy of its output, the call's ms).

        On a GPU the L2 cache is flushed after the inputs were written, so a call cannot find
        them there; the ms are this process's own account, compared with the caller's clock."""
        torch = self.torch
        clones = self.prepare(inputs, shape)
        launches = self.guards.STATE.own_launches
        threads = threading.active_count()
        started = time.perf_counter()
        try:
            with self.guards.guarded():
                out = self.kernel(**inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()
        except BaseException as error:
            self.check_policy(when)
            raise self.classify(error, when) from None
        call_ms = (time.perf_counter() - started) * 1e3
        self.check_policy(when)
        if threading.active_count() != threads:
            raise Reject("forbidden", f"the candidate started threads ({when})")
        if self.guards.STATE.own_launches == launches:
            raise Reject("forbidden",
                         f"no Triton kernel of the candidate was launched ({when}): the work must run in Triton")
        return self.collect(out, inputs, clones, shape, when), call_ms

    def raw(self, outs) -> bytes:
        """The outputs' bytes back to back, as the referee reads them (dtypes and shapes known
        from the plan)."""
        return outputs.raw(self.torch, outs)

    # commands ------------------------------------------------------------------
    # The caller streams the plan one call at a time; this process never holds the rest of it.
    def check(self, command: dict[str, Any]) -> dict[str, Any]:
        """One checked call: build its inputs, call, send the output."""
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
        out, _ = self.invoke(inputs, tuple(call.shape), call.when or call.key)
        if not call.key.startswith("b"):
            self.kept[call.key] = inputs
        return {"kind": "output", "key": call.key, "payload": self.raw(out)}

    def warm(self, command: dict[str, Any]) -> dict[str, Any]:
        """Untimed calls on the bench shape's two warm-up seeds (compilation, autotuning)."""
        from kernels.judge import plan

        bench = command["bench"]
        shape = tuple(bench["shape"])
        for seed in bench["seeds"]:
            for _ in range(command["calls"]):
                inputs = plan.make_inputs(self.problem, shape, seed, bench["regime"], self.device, self.dtype)
                self.invoke(inputs, shape, f"warming up at {self.problem.describe_shape(shape)}")
        return {"kind": "warmed"}

    def time_batch(self, command: dict[str, Any]) -> dict[str, Any]:
        """Timed calls back to back, each on fresh inputs from its own seed; every output sent.

        ``call_ms`` and ``batch_ms`` are this process's account of its own time. The caller
        compares them with its clock and the box's CPU counter; they never decide a speedup.
        """
        from kernels.judge import plan

        started = time.perf_counter()
        bench, batch = command["bench"], command["batch"]
        shape = tuple(bench["shape"])
        label = self.problem.describe_shape(shape)
        call_ms, sent, payload = [], [], bytearray()
        for index, seed in enumerate(batch["seeds"]):
            inputs = plan.make_inputs(self.problem, shape, seed, bench["regime"], self.device, self.dtype)
            out, ms = self.invoke(inputs, shape, f"in a timed call at {label}")
            data = self.raw(out)
            call_ms.append(ms)
            sent.append({"key": f"b{bench['index']}/t{batch['index']}/{index}", "nbytes": len(data)})
            payload += data
            del out, inputs
        return {"kind": "timed", "call_ms": call_ms, "outputs": sent,
                "batch_ms": (time.perf_counter() - started) * 1e3, "payload": bytes(payload)}

    def graph(self, command: dict[str, Any]) -> dict[str, Any]:
        from kernels import timing
        from kernels.judge import plan

        bench = command["bench"]
        inputs = plan.make_inputs(self.problem, bench["shape"], bench["seeds"][0], bench["regime"], self.device,
                                  self.dtype)
        try:
            replay = timing.time_graph_replay(self.kernel, inputs, round_ms=timing.JUDGE_ROUND_MS)
            return {"kind": "graph", "graph": replay.summary()}
        except Reject:
            raise
        except Exception as error:
            return {"kind": "graph", "graph": {"error": f"{type(error).__name__}: {str(error)[:300]}"}}
