"""What gets called with what: the judgement's plan, drawn in the caller from a secret RNG.

The plan is the one list of calls whose outputs the referee must see; the referee refuses a
verdict while any of them is missing. The caller holds it and streams it to the candidate's
process one call at a time, so that process never learns the seeds, regimes, cuts or shapes
of calls still to come, and nothing it says can add, drop or rename a check.

Checked calls (``Call``), per verify shape ``j``:
- ``v{j}/seed{i}``: seed i, in a regime drawn from the problem's input regimes;
- ``v{j}/ptr``: the buffers of ``v{j}/seed0`` refilled with seed 1's values (caching by
  address); reference: seed 1;
- ``v{j}/causal{k}``: seed 0 with every causal input at and after a random cut replaced by
  another draw; the whole output is compared with the reference of those perturbed inputs,
  and the part before the cut with the candidate's own ``v{j}/seed0`` (information must not
  flow backwards, up to rounding);
- ``b{j}/recheck``: bench shape j, called after its timing (state drift).

Timed calls (``Bench``): per bench shape, batches alternate between the candidate and the
trusted baseline. Every timed call gets inputs drawn from a seed of its own (the process has
never seen them and learns them only when its batch starts), its output is poisoned before
the call, and every output of every timed call is compared by the referee with the reference
of its own inputs at the problem's tolerance (``b{j}/t{k}/{i}``): a timed call is made exactly
as a checked one is, so nothing the candidate can observe tells them apart.

The timed shapes are the listed ones nudged by a few tokens per judgement (``BENCH_SPREAD`` of
each length, through the problem's family), so a kernel special-cased for the listed shapes
shows; a shape's speed must hold when its layout shifts by a token.

The held-out family: with ``held_out=True`` (a champion's confirmation) the checked calls also
draw from the problem's ``held_out`` regimes (off-distribution probes), which an ordinary
judgement never draws, so a loop never sees them until its champion is confirmed.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from kernels.problem import Problem

PERTURBATIONS = 2   # causality cuts per verify shape
BATCH_CALLS = 5     # timed calls per batch (per provider)
BENCH_SPREAD = 0.01  # timed lengths within +-1 % of the listed ones: T = 8192 becomes 8111..8273


@dataclass
class Call:
    """One checked call of the candidate; ``key`` names its output."""

    key: str
    shape: list[int]
    seed: int
    regime: str = "default"
    reuse: str | None = None          # refill the input buffers of this earlier call
    perturb: dict[str, Any] | None = None  # {"cut": t, "seed": s, "regime": r}
    base: str | None = None           # causality: the call whose outputs before the cut must hold
    when: str = ""                    # for messages: what this call checks

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Batch:
    """Timed calls back to back, each on fresh inputs drawn from its own seed. ``index`` is the
    batch's number within its bench shape; the outputs are keyed ``b{bench}/t{index}/{call}``."""

    index: int
    seeds: list[int]
    candidate_first: bool

    @property
    def calls(self) -> int:
        return len(self.seeds)

    def keys(self, bench_index: int) -> list[str]:
        return [f"b{bench_index}/t{self.index}/{i}" for i in range(self.calls)]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Bench:
    index: int
    shape: list[int]
    seeds: list[int]
    regime: str
    batches: list[Batch]
    recheck: Call
    graph: bool = False
    census: list[int] = field(default_factory=list)  # seeds of the census session's timed calls

    def census_keys(self) -> list[str]:
        """The census batch's output keys (``b{j}/tc/{i}``); its batch index is ``"c"``."""
        return [f"b{self.index}/tc/{i}" for i in range(len(self.census))]

    def census_batch(self) -> dict[str, Any]:
        """The census batch as the sandbox's ``time_batch`` reads it (its keys: ``census_keys``)."""
        return {"index": "c", "seeds": list(self.census), "candidate_first": True}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Plan:
    checks: list[Call]
    bench: list[Bench]
    warmup: int

    @property
    def expected_keys(self) -> list[str]:
        timed = [key for b in self.bench for batch in b.batches for key in batch.keys(b.index)]
        return [c.key for c in self.checks] + [b.recheck.key for b in self.bench] + timed

    def timed_calls(self) -> dict[str, "Call"]:
        """Every timed call as a ``Call`` (its key, shape, seed, regime): what the referee checks."""
        calls = {}
        for b in self.bench:
            for batch in b.batches:
                for key, seed in zip(batch.keys(b.index), batch.seeds):
                    calls[key] = Call(key, list(b.shape), seed, b.regime, when=f"in a timed call ({key})")
            for key, seed in zip(b.census_keys(), b.census):
                calls[key] = Call(key, list(b.shape), seed, b.regime, when=f"in a census call ({key})")
        return calls

    def to_dict(self) -> dict[str, Any]:
        return {"checks": [c.to_dict() for c in self.checks], "bench": [b.to_dict() for b in self.bench],
                "warmup": self.warmup}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Plan":
        bench = []
        for item in data["bench"]:
            item = dict(item)
            item["batches"] = [Batch(**b) for b in item["batches"]]
            item["recheck"] = Call(**item["recheck"])
            bench.append(Bench(**item))
        return cls(checks=[Call(**c) for c in data["checks"]], bench=bench, warmup=data["warmup"])


def regimes_of(problem: Problem) -> tuple[str, ...]:
    return tuple(getattr(problem, "regimes", None) or ("default",))


def held_out_of(problem: Problem) -> tuple[str, ...]:
    return tuple(getattr(problem, "held_out", None) or ())


def draw_shapes(problem: Problem, which: str, rng: random.Random,
                spread: float | None = None) -> tuple[tuple[int, ...], ...]:
    """The named shape set, each shape drawn from its family where the problem has one
    (within +-``spread`` of each listed length when given)."""
    draw = getattr(problem, "draw_shapes", None)
    if draw is not None and getattr(problem, "vary_shape", None) is not None:
        drawn = draw(which, rng) if spread is None else draw(which, rng, spread=spread)
        return tuple(tuple(int(n) for n in s) for s in drawn)
    return tuple(tuple(s) for s in problem.shape_set(which))


def causal_length(problem: Problem, shape: tuple[int, ...]) -> int | None:
    if problem.causal is None:
        return None
    return shape[problem.dims.index(problem.causal.dim)]


def _seed(rng: random.Random) -> int:
    return rng.randrange(1, 2**62)


def graph_timed(spec) -> tuple[tuple[int, ...], ...]:
    """The bench shapes also timed under CUDA-graph replay on a GPU: every one, because graph
    replay's GPU time decides there (``scoring.graph_decides``); for a problem whose contract is
    host-inclusive (``extra["host_inclusive"]``), only its ``launch_bound_shapes``, beside."""
    if spec.extra.get("host_inclusive"):
        return tuple(tuple(s) for s in spec.extra.get("launch_bound_shapes", []))
    return tuple(tuple(s) for s in spec.shape_set("bench"))


def build(problem: Problem, *, cpu: bool, seeds: int, reps: int, warmup: int, rng: random.Random,
          graph_shapes: tuple[tuple[int, ...], ...] = (), held_out: bool = False, census: int = 0) -> Plan:
    """Draw a judgement's plan: shapes, seeds, regimes, cuts, batches and a seed per timed call;
    with ``held_out``, the checked calls' regimes include the problem's held-out family; with
    ``census`` > 0, that many more timed calls per bench shape for a census session (``census_run.py``)."""
    regimes = regimes_of(problem) + (held_out_of(problem) if held_out else ())
    offset = rng.randrange(len(regimes))
    verify = draw_shapes(problem, "cpu" if cpu else "verify", rng)
    listed_bench = tuple(tuple(s) for s in problem.shape_set("cpu" if cpu else "bench"))
    bench_shapes = draw_shapes(problem, "cpu" if cpu else "bench", rng, spread=BENCH_SPREAD)
    checks: list[Call] = []
    turn = 0
    for j, shape in enumerate(verify):
        label = problem.describe_shape(shape)
        shape_list = list(shape)
        drawn = []
        for i in range(max(seeds, 2)):
            regime = regimes[(offset + turn) % len(regimes)]
            turn += 1
            call = Call(f"v{j}/seed{i}", shape_list, _seed(rng), regime, when=f"at {label}, {regime} inputs")
            drawn.append(call)
            checks.append(call)
        first, second = drawn[0], drawn[1]
        checks.append(Call(f"v{j}/ptr", shape_list, second.seed, second.regime, reuse=first.key,
                           when=f"at {label}, {first.key}'s buffers refilled with new inputs: cached by address?"))
        length = causal_length(problem, shape)
        if length is not None and length >= 2:
            cuts = sorted({rng.randrange(1, length) for _ in range(PERTURBATIONS)})
            for k, cut in enumerate(cuts):
                checks.append(Call(f"v{j}/causal{k}", shape_list, first.seed, first.regime,
                                   perturb={"cut": cut, "seed": _seed(rng), "regime": first.regime},
                                   base=first.key,
                                   when=f"at {label}, inputs at {problem.causal.dim} >= {cut} changed"))
    bench: list[Bench] = []
    batch_count = max(1, -(-reps // BATCH_CALLS))
    for j, shape in enumerate(bench_shapes):
        seeds_j = [_seed(rng), _seed(rng)]
        batches = []
        left = reps
        for b in range(batch_count):
            calls = min(BATCH_CALLS, left)
            left -= calls
            batches.append(Batch(b, [_seed(rng) for _ in range(calls)], candidate_first=bool(b % 2)))
        label = problem.describe_shape(shape)
        recheck = Call(f"b{j}/recheck", list(shape), seeds_j[0], "default",
                       when=f"at {label}, called again after timing: correct before, wrong after?")
        bench.append(Bench(j, list(shape), seeds_j, "default", batches, recheck,
                           graph=listed_bench[j] in graph_shapes, census=[_seed(rng) for _ in range(census)]))
    return Plan(checks, bench, warmup)


def make_inputs(problem: Problem, shape, seed: int, regime: str, device: str, dtype: str) -> dict[str, Any]:
    """The problem's inputs, passing the regime only where the problem knows regimes."""
    if regime == "default" and regimes_of(problem) == ("default",):
        return problem.make_inputs(tuple(shape), seed, device, dtype)
    return problem.make_inputs(tuple(shape), seed, device, dtype, regime=regime)


def inputs_of(problem: Problem, call: Call, device: str, dtype: str) -> dict[str, Any]:
    """The inputs of a checked call, perturbation included (the same in both processes)."""
    inputs = make_inputs(problem, call.shape, call.seed, call.regime, device, dtype)
    if call.perturb:
        other = make_inputs(problem, call.shape, call.perturb["seed"], call.perturb["regime"], device, dtype)
        perturb_after(problem, inputs, other, call.perturb["cut"])
    return inputs


def perturb_after(problem: Problem, inputs: dict[str, Any], other: dict[str, Any], cut: int) -> None:
    """Overwrite, in place, every causal input at positions >= ``cut`` with ``other``'s values."""
    for name, axis in problem.causal.input_axes.items():
        tensor = inputs[name]
        length = tensor.shape[axis] - cut
        tensor.narrow(axis, cut, length).copy_(other[name].narrow(axis, cut, length))
