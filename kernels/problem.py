"""The contract every problem fulfils: Marathon's public, stable interface for a kernel to optimize.

A problem is one ``Problem`` object. The built-in ones live in ``kernels/kda`` and
``kernels/mla`` (``definition.PROBLEM``); a problem of your own lives in your own package and
is found by an entry point (``[project.entry-points."marathon.problems"]``, name = the problem's
name, value = ``"your_package.definition:PROBLEM"``) or by its object path
``"your_package.definition:PROBLEM"`` (kernels/registry.py). ``examples/rmsnorm_residual`` is a
complete one; README.md ("Your own kernel") walks through it; ``marathon problem check NAME`` validates one.

The definition is data: names, shapes, tolerances and the formulas of the roofline. Everything
else (the judge, the benchmark, the search proposer, the API) reads it instead of repeating it.
What it promises, field by field, is in ``Problem``'s docstring; a field added later gets a
default, so a problem written against this version keeps working.

Nothing here imports torch or triton at module level, so the API and the CLI can list problems
cheaply; the callables import what they need when called. A definition module must do the same.
"""

from __future__ import annotations

import importlib
import inspect
import math
import random
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

Shape = tuple[int, ...]

DEFAULT_REGIME = "default"

ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# Every dtype an input or an output may have (``input_dtypes``, ``output``): the run's float
# dtypes and those of indices, targets, counts and masks.
DTYPE_BYTES = {**ELEMENT_BYTES, "float64": 8, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def dtype_name(dtype: Any) -> str:
    """``"bfloat16"`` for ``torch.bfloat16`` or ``"bfloat16"``; raises for dtypes problems do not take."""
    name = str(dtype).removeprefix("torch.")
    if name not in ELEMENT_BYTES:
        raise ValueError(f"unsupported dtype {dtype!r}; expected one of {sorted(ELEMENT_BYTES)}")
    return name


def any_dtype_name(dtype: Any) -> str:
    """``"int64"`` for ``torch.int64`` or ``"int64"``: any dtype of ``DTYPE_BYTES``; raises for others."""
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPE_BYTES:
        raise ValueError(f"unsupported dtype {dtype!r}; expected one of {sorted(DTYPE_BYTES)}")
    return name


def place_inputs(tensors: dict[str, Any], device: Any, dtype: Any, fixed: dict[str, str]) -> dict[str, Any]:
    """``tensors`` (drawn on the CPU) moved to ``device``, each cast to ``fixed[name]`` when the
    problem fixes that input's dtype (``Problem.input_dtypes``: a bool mask, int64 targets),
    else to the run's ``dtype``; values that are not tensors pass unchanged. Keeps the order.

    Casting every input to the run's dtype turns a mask into floats without a word; this is
    the one place a ``make_inputs`` needs to tell them apart."""
    import torch

    placed = {}
    for name, value in tensors.items():
        if isinstance(value, torch.Tensor):
            wanted = fixed.get(name) or dtype_name(dtype)
            value = value.to(device=device, dtype=getattr(torch, any_dtype_name(wanted)))
        placed[name] = value
    return placed


def check_regime(regime: str, known: tuple[str, ...]) -> str:
    """Return ``regime`` if it is one of ``known``; otherwise raise ValueError naming them."""
    if regime not in known:
        raise ValueError(f"unknown input regime {regime!r}; known regimes: {', '.join(known)}")
    return regime


def regime_seed(seed: int, regime: str) -> int:
    """The generator seed of ``(seed, regime)``: ``seed`` itself for the default regime (so it
    draws exactly what it always drew), a stable mix of both otherwise, so two regimes never
    share their random streams."""
    if regime == DEFAULT_REGIME:
        return int(seed)
    return (int(seed) * 1_000_003 + zlib.crc32(regime.encode())) % (2**63)


def input_generator(seed: int, regime: str, device: Any) -> tuple[Any, Any]:
    """``(generator, device)`` to draw a problem's inputs with: seeded from ``(seed, regime)``,
    on the GPU when ``device`` is one, else on the CPU.

    Drawn where they are used: the CPU draws about 100 M normal values a second on one thread
    (the judge's processes have one), which cost a kda judgement on the H200 most of its 136 s
    at its bench shapes (134 M values per tensor); the GPU draws them in milliseconds. A seed
    therefore gives the same values on every machine of one kind of device (CPU, or CUDA with
    one torch version), not across kinds: the judge's referee and the candidate's process
    always draw on the same device."""
    import torch

    where = torch.device(device)
    return torch.Generator(device=where).manual_seed(regime_seed(seed, regime)), where


def vary_length(n: int, rng: random.Random, spread: float = 0.25) -> int:
    """A length drawn uniformly from ``[ceil((1 - spread) n), floor((1 + spread) n)]``, at least 1."""
    low = max(1, math.ceil((1.0 - spread) * n))
    high = max(low, math.floor((1.0 + spread) * n))
    return rng.randint(low, high)


def load_object(path: str) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute."""
    module_name, _, attribute = path.partition(":")
    if not attribute:
        raise ValueError(f"object path {path!r} must look like 'package.module:attribute'")
    return getattr(importlib.import_module(module_name), attribute)


# A definition module's parts that ``Problem`` takes as they are, under the names every built-in
# definition gives them (field -> the module's name): one list, instead of the same seven
# keywords written out again in each definition.
STANDARD_PARTS = {"make_inputs": "make_inputs", "output": "output", "flops": "flops",
                  "bytes_moved": "bytes_moved", "regimes": "REGIMES", "held_out": "HELD_OUT",
                  "vary_shape": "vary_shape"}


def standard_parts(namespace: dict[str, Any]) -> dict[str, Any]:
    """The ``STANDARD_PARTS`` a definition module defines, read from its ``globals()``, as keyword
    arguments of ``Problem``. A part the module lacks is an error naming it: a definition that
    names its parts otherwise passes them to ``Problem`` itself."""
    missing = [name for name in STANDARD_PARTS.values() if name not in namespace]
    if missing:
        raise ValueError(f"definition module {namespace.get('__name__', '?')} defines no {', '.join(missing)}: "
                         "define them, or pass those fields to Problem yourself")
    return {field: namespace[name] for field, name in STANDARD_PARTS.items()}


@dataclass(frozen=True)
class CausalAxis:
    """Where time runs, for problems whose output at position t may only depend on inputs <= t.

    ``input_axes`` maps each tensor input to the index of its time axis; ``output_axis``
    is the time axis of the output. The judge perturbs inputs after a position and checks
    that outputs before it do not move.
    """

    dim: str
    input_axes: dict[str, int]
    output_axis: int


@dataclass(frozen=True)
class Problem:
    """One optimization target: the contract between a problem and Marathon.

    A candidate kernel is Python source defining ``kernel(**inputs)`` (keyword arguments named
    by ``input_names``) that returns one tensor; the judge checks it against ``reference`` and
    times it against the first of ``baselines``. A module's weights are inputs like any other
    (name them in ``input_names``, draw them in ``make_inputs``): draw values that matter (not
    all ones or zeros, which a kernel that ignores them passes). A function of several outputs
    is several problems, or one whose output is their concatenation: one tensor comes back.

    Attributes:
        name: registry key, e.g. ``"kda"``: lower case letters, digits and ``-`` (``problem check``
            checks it). For an entry point it must equal the entry point's name.
        title: one line for people.
        input_names: keyword arguments of ``kernel(**inputs)``, in order.
        dims: names of the shape tuple, e.g. ``("B", "T", "H", "D")``.
        shapes: named shape sets, all three required and non-empty: ``verify`` (correctness,
            ragged sizes included: sizes that are not multiples of any tile), ``bench``
            (timing, the shapes speedups are reported on), ``cpu`` (tiny, for the Triton
            interpreter, which runs a kernel about a million times slower than a GPU).
        tolerance: how close a float output must be to the float64 reference, keyed by the
            output's dtype name (``output(shape, dtype)[1]``), or by ``"cuda:<dtype>"`` /
            ``"cpu:<dtype>"`` for one device only (looked up first: TF32 ``tl.dot`` on a GPU is
            less exact than the interpreter). A value is either a number in (0, 1), the
            relative RMS error ``||out - ref|| / ||ref||``, or ``{"atol": a, "rtol": r}``, every
            element within ``a + r * |ref|`` (``torch.allclose``; KernelBench's ``atol=rtol=1e-2``
            is ``{"atol": 1e-2, "rtol": 1e-2}``). The outputs of ``gpu_dtype`` and ``cpu_dtype``
            must each have an entry, except integer and bool outputs: those are compared exactly,
            and need none (kernels/judge/compare.py).
        gpu_dtype / cpu_dtype: the dtype name float inputs take on the GPU and under the
            interpreter (some Triton versions compute bf16 ``tl.dot`` wrongly there).
        input_dtypes: inputs whose dtype does not follow the run's, by name: ``{"mask": "bool",
            "targets": "int64"}``. ``make_inputs`` gives them so at every dtype (``place_inputs``
            does the casting; ``problem check`` checks it); every other tensor input takes the
            ``dtype`` ``make_inputs`` is given.
        causal: the time axis, or None for non-causal problems.
        make_inputs: ``(shape, seed, device, dtype, regime="default") -> dict[name, Tensor | float]``;
            deterministic per ``(shape, seed, regime)`` (draw on the CPU from a
            ``torch.Generator`` seeded with ``regime_seed(seed, regime)``, then move to
            ``device``), different seeds giving different tensors. ``regime`` names the input
            distribution; an unknown one raises ValueError naming the known ones. The
            ``"default"`` regime is the realistic distribution (and never changes: stored
            results depend on it); the others stress what it leaves unchecked.
        reference: object path of ``reference(**inputs) -> Tensor``, computed in float64 (and
            returned as float32 or float64): the truth every candidate is compared with.
        reference_check: optional object path of a second, independently written formulation
            of the same function (``marathon problem check`` compares the two).
        output: ``(shape, dtype) -> (output shape, output dtype name)``; the dtype may differ
            from ``dtype`` (``"int64"`` for an argmin, ``"bool"`` for a mask) but not vary with
            the shape. It picks the comparison (``tolerance``).
        flops / bytes_moved: ``(shape, dtype) -> float`` for the roofline: positive for every
            shape; bytes at the ideal of each tensor touched once.
        baselines: object path of ``baselines(device) -> dict[label, callable]``, each callable
            taking the same keyword inputs as ``kernel``; the first entry is the primary
            baseline that speedups are reported against.
        ours: object path of our own Triton kernel's public function.
        space: object path of the module holding ``SPACE`` (knob -> tuple of values, neighbours
            similar), ``DEFAULT`` (the seed kernel's point), ``render(point) -> source`` and,
            optionally, ``KNOBS`` (knob -> one line), ``validate(point) -> list[str]`` and
            ``describe(point) -> str``. ``render(DEFAULT)`` is the seed kernel: it must pass
            the judge.
        regimes: the input distributions ``make_inputs`` accepts; ``"default"`` comes first.
            Every regime is judged at the verify shapes; every judgement draws its checked
            calls from these. Declare those a wrong kernel would fail and the default draw
            would not show: signs (an ELU without its negative branch passes inputs in
            [0, 1)), ties (which of equal minima an argmin returns), zeros (a division, a
            padded max), extremes (overflow, a softmax without its max).
        held_out: further regimes ``make_inputs`` accepts that an ordinary judgement never
            draws: the held-out family (off-distribution probes, say). Only a judgement that
            asks for it (``judge(..., confirm=True)``, a champion's confirmation; the plan's
            ``held_out`` flag) checks them, so a loop cannot fit a kernel to them.
        vary_shape: ``(listed shape, rng, spread=0.25) -> shape`` draws a member of the listed
            shape's family, or None when the listed shapes are the only ones. A family keeps
            fixed every dim the kernel is specialised for (head dims, widths it requires) and
            the batch/head counts, and varies the length dims (sequence, cache length)
            within +-``spread`` of the listed value, so ragged lengths the list lacks appear.
            Each problem's function documents its family. ``draw_shapes`` applies it; the
            judge also nudges its timed shapes with a small ``spread`` (a few tokens), so a
            kernel special-cased for the listed shapes shows. A function without the
            ``spread`` argument (written against an earlier version) is called without it.
        extra_outputs: ``(shape, dtype) -> ((name, shape, dtype name), ...)``, the outputs the
            kernel returns after the one ``output`` describes, or None for one output. With
            extra outputs, ``kernel`` (and the reference and the baselines) return the tuple
            ``(out, *extras)``; every one is checked against the reference within the
            tolerance of the working dtype (KDA's final state).
        notes / extra: free text for people and proposers; problem-specific data (e.g.
            ``launch_bound_shapes``: bench shapes also timed under CUDA-graph replay where the
            contract is host-inclusive; ``host_inclusive``: True when the per-call synchronized
            time, host launch path included, is what the problem promises: otherwise every bench
            shape is timed under CUDA-graph replay on a GPU and that GPU time decides).
    """

    name: str
    title: str
    input_names: tuple[str, ...]
    dims: tuple[str, ...]
    shapes: dict[str, tuple[Shape, ...]]
    tolerance: dict[str, float]
    make_inputs: Callable[..., dict[str, Any]]
    output: Callable[[Shape, str], tuple[Shape, str]]
    flops: Callable[[Shape, str], float]
    bytes_moved: Callable[[Shape, str], float]
    reference: str
    baselines: str
    ours: str
    space: str
    gpu_dtype: str = "bfloat16"
    cpu_dtype: str = "float32"
    causal: CausalAxis | None = None
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    regimes: tuple[str, ...] = (DEFAULT_REGIME,)
    vary_shape: Callable[..., Shape] | None = None
    reference_check: str | None = None
    input_dtypes: dict[str, str] = field(default_factory=dict)
    held_out: tuple[str, ...] = ()
    extra_outputs: Callable[[Shape, str], tuple[tuple[str, Shape, str], ...]] | None = None

    def __post_init__(self) -> None:
        if not self.regimes or self.regimes[0] != DEFAULT_REGIME or len(set(self.regimes)) != len(self.regimes):
            raise ValueError(f"problem {self.name!r}: regimes must be distinct and start with "
                             f"{DEFAULT_REGIME!r}, got {self.regimes!r}")
        if set(self.held_out) & set(self.regimes) or len(set(self.held_out)) != len(self.held_out):
            raise ValueError(f"problem {self.name!r}: held-out regimes must be distinct and not among the "
                             f"drawn ones {self.regimes!r}, got {self.held_out!r}")

    def shape_set(self, which: str) -> tuple[Shape, ...]:
        if which not in self.shapes:
            raise ValueError(f"problem {self.name!r} has no shape set {which!r}; known: {sorted(self.shapes)}")
        return self.shapes[which]

    def check_regime(self, regime: str) -> str:
        """Return ``regime`` if this problem knows it (drawn or held out); otherwise raise
        ValueError naming the known ones."""
        return check_regime(regime, self.regimes + self.held_out)

    def draw_shapes(self, which: str, rng: random.Random, spread: float | None = None) -> tuple[Shape, ...]:
        """``shape_set(which)`` with ``vary_shape`` applied to each shape, in order, drawing from
        ``rng`` (the listed shapes unchanged when ``vary_shape`` is None), within +-``spread``
        of each listed length (the family's own spread when None). Deterministic for a seeded
        ``rng``; the draws advance it."""
        listed = self.shape_set(which)
        if self.vary_shape is None:
            return listed
        if spread is None:
            return tuple(tuple(int(n) for n in self.vary_shape(shape, rng)) for shape in listed)
        if "spread" not in inspect.signature(self.vary_shape).parameters:
            return listed  # a family written before spreads existed: its shapes stay as listed
        return tuple(tuple(int(n) for n in self.vary_shape(shape, rng, spread=spread)) for shape in listed)

    def output_specs(self, shape: Shape, dtype: str) -> tuple[tuple[str, Shape, str], ...]:
        """Every output the kernel returns, in order: ``(name, shape, dtype name)``; the first is
        ``output``'s (named ``"out"``), the others ``extra_outputs``'."""
        out_shape, out_dtype = self.output(shape, dtype)
        extras = tuple(self.extra_outputs(shape, dtype)) if self.extra_outputs is not None else ()
        return (("out", tuple(out_shape), out_dtype),) + tuple((n, tuple(s), d) for n, s, d in extras)

    def describe_shape(self, shape: Shape) -> str:
        return ",".join(f"{d}={n}" for d, n in zip(self.dims, shape))

    def input_dtype(self, name: str, dtype: Any) -> str:
        """The dtype name input ``name`` takes when the run's dtype is ``dtype``."""
        return self.input_dtypes.get(name) or dtype_name(dtype)

    def load_reference(self) -> Callable[..., Any]:
        return load_object(self.reference)

    def load_reference_check(self) -> Callable[..., Any] | None:
        """The second formulation of the reference, or None when the problem gives none."""
        return load_object(self.reference_check) if self.reference_check else None

    def load_baselines(self, device: str) -> dict[str, Callable[..., Any]]:
        return load_object(self.baselines)(device)

    def load_ours(self) -> Callable[..., Any]:
        return load_object(self.ours)

    def load_space(self) -> Any:
        return importlib.import_module(self.space)

    def seed_source(self) -> str:
        """Source text of our own kernel at its default knobs: a valid candidate."""
        space = self.load_space()
        return space.render(dict(space.DEFAULT))

    def public(self) -> dict[str, Any]:
        """A JSON-ready summary for the API and the CLI."""
        return {
            "name": self.name,
            "title": self.title,
            "inputs": list(self.input_names),
            "dims": list(self.dims),
            "shapes": {k: [list(s) for s in v] for k, v in self.shapes.items()},
            "tolerance": dict(self.tolerance),
            "input_dtypes": dict(self.input_dtypes),
            "causal": self.causal is not None,
            "notes": self.notes,
            "regimes": list(self.regimes),
            "held_out": list(self.held_out),
            "vary_shape": self.vary_shape is not None,
            "extra_outputs": self.extra_outputs is not None,
        }
