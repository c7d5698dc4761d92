"""How one output is compared with its reference: the rule a problem's ``tolerance`` names.

Three rules, chosen by the output's dtype and the problem's ``tolerance`` (kernels/problem.py):

- ``exact``: integer and bool outputs (an index, a count, a mask) must equal the reference
  element for element, in the output's own dtype; no tolerance applies.
- ``rms``: a number: the relative RMS error ``||out - ref|| / ||ref||`` must not exceed it
  (one bad element among millions hides in it; it suits long reductions whose error spreads).
- ``allclose``: ``{"atol": a, "rtol": r}``: every element must satisfy
  ``|out - ref| <= a + r * |ref|``, as ``torch.allclose`` (what KernelBench and most test
  suites say).

The entry is looked up by the output's dtype name, first as ``"<device>:<dtype>"`` (``"cuda:float32"``:
TF32 ``tl.dot`` on a GPU is less exact than the interpreter) and then as ``"<dtype>"``.

The referee also needs, for its causality check, how far a passing output can be
from its reference in relative RMS: ``Rule.relative_bound``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

EXACT_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64")
# Equal integer outputs give equal float64 projections up to the summation's rounding.
EXACT_ROUNDING = 1e-9


def is_exact_dtype(dtype: Any) -> bool:
    return str(dtype).removeprefix("torch.") in EXACT_DTYPES


@dataclass(frozen=True)
class Rule:
    """``kind`` is ``exact``, ``rms`` (``rms`` set) or ``allclose`` (``atol``, ``rtol`` set)."""

    kind: str
    rms: float = 0.0
    atol: float = 0.0
    rtol: float = 0.0

    def describe(self) -> str:
        if self.kind == "exact":
            return "exact"
        if self.kind == "allclose":
            return f"allclose atol={self.atol:.1e} rtol={self.rtol:.1e}"
        return f"relative RMS {self.rms:.1e}"

    def relative_bound(self, ref_rms: float) -> float:
        """The largest relative RMS error an output passing this rule can have against a
        reference of RMS ``ref_rms``: for allclose, ``rtol + atol / ref_rms`` (the triangle
        inequality on ``atol + rtol |ref|``), at most 1."""
        if self.kind == "exact":
            return EXACT_ROUNDING
        if self.kind == "allclose":
            return min(1.0, self.rtol + self.atol / max(ref_rms, 1e-30))
        return self.rms


def tolerance_entry(tolerance: Mapping[str, Any], device: str, dtype: str) -> Optional[Any]:
    """``tolerance["<device>:<dtype>"]``, else ``tolerance["<dtype>"]``, else None."""
    for key in (f"{device}:{dtype}", dtype):
        if key in tolerance:
            return tolerance[key]
    return None


def entry_problem(key: str, value: Any) -> Optional[str]:
    """What is wrong with one tolerance entry, or None: a number in (0, 1), or a dict of
    ``atol`` and ``rtol``, each >= 0 and < 1, not both 0."""
    if isinstance(value, Mapping):
        if set(value) != {"atol", "rtol"}:
            return f"tolerance[{key!r}] = {dict(value)!r} must have exactly the keys 'atol' and 'rtol'"
        numbers = [value["atol"], value["rtol"]]
        if not all(isinstance(v, (int, float)) and not math.isnan(v) and 0 <= v < 1 for v in numbers) \
                or not any(numbers):
            return (f"tolerance[{key!r}] = {dict(value)!r}: atol and rtol must each be >= 0 and < 1, "
                    "not both 0 (an exact comparison is for integer and bool outputs)")
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) or not 0 < value < 1:
        return f"tolerance[{key!r}] = {value!r} must be a relative error between 0 and 1 (or {{'atol': a, 'rtol': r}})"
    return None


def rule_for(tolerance: Mapping[str, Any], device: str, output_dtype: str) -> Rule:
    """The rule for an output of ``output_dtype`` on ``device`` (``"cpu"`` or ``"cuda"``);
    raises ValueError naming the key to add when a float output has no entry."""
    dtype = str(output_dtype).removeprefix("torch.")
    if is_exact_dtype(dtype):
        return Rule("exact")
    value = tolerance_entry(tolerance, device, dtype)
    if value is None:
        raise ValueError(f"no tolerance for a {dtype} output on {device}: add tolerance[{dtype!r}] (or "
                         f"tolerance['{device}:{dtype}']): a relative RMS error such as 1e-5, or "
                         "{'atol': ..., 'rtol': ...}")
    wrong = entry_problem(dtype, value)
    if wrong:
        raise ValueError(wrong)
    if isinstance(value, Mapping):
        return Rule("allclose", atol=float(value["atol"]), rtol=float(value["rtol"]))
    return Rule("rms", rms=float(value))


def output_dtype(problem, dtype: str) -> str:
    """The name of ``problem``'s output dtype when its inputs take ``dtype``: ``problem.output``
    at the first verify shape (it must not depend on the shape)."""
    shape = tuple(problem.shape_set("verify")[0])
    return str(problem.output(shape, dtype)[1]).removeprefix("torch.")


def problem_rule(problem, device: str, dtype: str) -> Rule:
    """The rule for ``problem``'s output when its inputs take ``dtype`` on ``device``."""
    return rule_for(problem.tolerance, device, output_dtype(problem, dtype))


def as_reference(out: Any, rule: Rule) -> Any:
    """A reference as the comparison keeps it: float32 for float rules, its own dtype for exact."""
    out = out.detach()
    return out if rule.kind == "exact" else out.float()


def relative_rms(out: Any, ref: Any) -> float:
    """``||out - ref|| / ||ref||``: in the float dtype they have (float32 for a float rule: a kda
    bench output holds 134 M values), in float64 for integer or bool ones."""
    if not (out.is_floating_point() and ref.is_floating_point()):
        out, ref = out.double(), ref.double()
    scale = float(ref.pow(2).mean().sqrt())
    return float((out - ref).pow(2).mean().sqrt()) / max(scale, 1e-30)


def unusable(out: Any, rule: Rule) -> tuple[Any, Optional[str]]:
    """``(output ready for comparison, why it cannot be compared)``: an exact output must have
    an integer or bool dtype; a float output must hold no NaN or Inf."""
    import torch

    if rule.kind == "exact":
        if out.is_floating_point() or out.is_complex():
            return out, (f"output dtype {str(out.dtype).removeprefix('torch.')}: this output is compared exactly "
                         "and must be an integer or bool tensor")
        return out, None
    out = out.float()
    bad = int((~torch.isfinite(out)).sum())
    if bad:
        return out, f"{bad} of {out.numel()} output values are NaN/Inf"
    return out, None


def compare(out: Any, ref: Any, rule: Rule) -> tuple[bool, float, str]:
    """``(ok, relative RMS error, why not)`` of an output already through ``unusable`` against
    ``ref`` (same shape). The error is reported for every rule; the rule decides."""

    if rule.kind == "exact":
        wrong = int((out != ref).sum()) if out.dtype == ref.dtype else int((out.long() != ref.long()).sum())
        error = relative_rms(out, ref)
        if wrong:
            return False, error, f"{wrong} of {out.numel()} values differ from the reference (compared exactly)"
        return True, error, ""
    error = relative_rms(out, ref)
    if rule.kind == "rms":
        if not error <= rule.rms:
            return False, error, f"relative RMS error {error:.3e} > tolerance {rule.rms:.1e}"
        return True, error, ""
    allowed = rule.atol + rule.rtol * ref.abs()
    excess = (out - ref).abs() - allowed
    worst = int(excess.argmax()) if excess.numel() else 0
    wrong = int((excess > 0).sum())
    if wrong:
        at = tuple(int(i) for i in _unravel(worst, tuple(ref.shape)))
        return False, error, (f"{wrong} of {out.numel()} values outside |out - ref| <= {rule.atol:.1e} + "
                              f"{rule.rtol:.1e}|ref| (worst at {at}: {float(out.flatten()[worst]):.6g} vs "
                              f"{float(ref.flatten()[worst]):.6g})")
    return True, error, ""


def _unravel(index: int, shape: tuple[int, ...]) -> list[int]:
    place = []
    for size in reversed(shape):
        place.append(index % size)
        index //= size
    return list(reversed(place))
