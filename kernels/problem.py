"""The contract every problem folder fulfils.

A problem folder (``kernels/kda``, ``kernels/mla``) exposes ``PROBLEM`` in its
``definition.py``. The definition is data: names, shapes, tolerances and the
formulas of the roofline. Everything else (tests, the benchmark, the judge, the
search proposer) reads it instead of repeating it.

Nothing here imports torch or triton at module level, so the API and the CLI can
list problems cheaply; the callables import what they need when called.
"""

from __future__ import annotations

import importlib
import math
import random
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

Shape = tuple[int, ...]

DEFAULT_REGIME = "default"

ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def dtype_name(dtype: Any) -> str:
    """``"bfloat16"`` for ``torch.bfloat16`` or ``"bfloat16"``; raises for dtypes problems do not take."""
    name = str(dtype).removeprefix("torch.")
    if name not in ELEMENT_BYTES:
        raise ValueError(f"unsupported dtype {dtype!r}; expected one of {sorted(ELEMENT_BYTES)}")
    return name


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
    """One optimization target.

    Attributes:
        name: registry key, e.g. ``"kda"``.
        title: one line for people.
        input_names: keyword arguments of ``kernel(**inputs)``, in order.
        dims: names of the shape tuple, e.g. ``("B", "T", "H", "D")``.
        shapes: named shape sets: ``verify`` (correctness, ragged sizes included),
            ``bench`` (timing), ``cpu`` (small, for the Triton interpreter).
        tolerance: relative RMS error allowed against the fp32/fp64 reference, keyed by
            the output dtype name (``"bfloat16"``, ``"float32"``).
        gpu_dtype / cpu_dtype: the dtype name inputs take on the GPU and under the
            interpreter (some Triton versions compute bf16 ``tl.dot`` wrongly there).
        causal: the time axis, or None for non-causal problems.
        make_inputs: ``(shape, seed, device, dtype, regime="default") -> dict[name, Tensor | float]``;
            deterministic per ``(shape, seed, regime)``. ``regime`` names the input
            distribution; an unknown one raises ValueError naming the known ones. The
            ``"default"`` regime is the realistic distribution (and never changes: stored
            results depend on it); the others stress what it leaves unchecked.
        reference: object path of ``reference(**inputs) -> Tensor`` (high precision).
        output: ``(shape, dtype) -> (output shape, output dtype name)``.
        flops / bytes_moved: ``(shape, dtype) -> float`` for the roofline.
        baselines: object path of ``baselines(device) -> dict[label, callable]``; the
            first entry is the primary baseline that speedups are reported against.
        ours: object path of our own Triton kernel's public function.
        space: object path of the module holding ``SPACE``, ``DEFAULT`` and ``render``.
        regimes: the input distributions ``make_inputs`` accepts; ``"default"`` comes first.
        vary_shape: ``(listed shape, rng) -> shape`` draws a member of the listed shape's
            family, or None when the listed shapes are the only ones. A family keeps fixed
            every dim the kernel is specialised for (head dims, widths it requires) and
            the batch/head counts, and varies the length dims (sequence, cache length)
            around the listed value, so ragged lengths the list lacks appear. Each
            problem's function documents its family. ``draw_shapes`` applies it.
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
    vary_shape: Callable[[Shape, random.Random], Shape] | None = None

    def __post_init__(self) -> None:
        if not self.regimes or self.regimes[0] != DEFAULT_REGIME or len(set(self.regimes)) != len(self.regimes):
            raise ValueError(f"problem {self.name!r}: regimes must be distinct and start with "
                             f"{DEFAULT_REGIME!r}, got {self.regimes!r}")

    def shape_set(self, which: str) -> tuple[Shape, ...]:
        if which not in self.shapes:
            raise ValueError(f"problem {self.name!r} has no shape set {which!r}; known: {sorted(self.shapes)}")
        return self.shapes[which]

    def check_regime(self, regime: str) -> str:
        """Return ``regime`` if this problem knows it; otherwise raise ValueError naming the known ones."""
        return check_regime(regime, self.regimes)

    def draw_shapes(self, which: str, rng: random.Random) -> tuple[Shape, ...]:
        """``shape_set(which)`` with ``vary_shape`` applied to each shape, in order, drawing from
        ``rng`` (the listed shapes unchanged when ``vary_shape`` is None). Deterministic for a
        seeded ``rng``; the draws advance it."""
        listed = self.shape_set(which)
        if self.vary_shape is None:
            return listed
        return tuple(tuple(int(n) for n in self.vary_shape(shape, rng)) for shape in listed)

    def describe_shape(self, shape: Shape) -> str:
        return ",".join(f"{d}={n}" for d, n in zip(self.dims, shape))

    def load_reference(self) -> Callable[..., Any]:
        return load_object(self.reference)

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
            "causal": self.causal is not None,
            "notes": self.notes,
            "regimes": list(self.regimes),
            "vary_shape": self.vary_shape is not None,
        }
