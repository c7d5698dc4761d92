"""``marathon problem check``: does a problem keep the contract of kernels/problem.py?

Each check says what it found; a failed one says exactly what is wrong and what to change. The
checks run on the CPU at the problem's ``cpu`` shapes and ``cpu_dtype``, so they need no GPU:

- load: the name or object path gives a ``Problem`` (and an entry point's name matches);
- name: lower case letters, digits and ``-``;
- shapes: ``verify``, ``bench`` and ``cpu`` present, non-empty, one positive size per dim;
- tolerance: an entry for ``gpu_dtype`` and ``cpu_dtype``, each in (0, 1);
- roofline: ``flops`` and ``bytes_moved`` positive and finite at every listed shape;
- inputs: ``make_inputs`` gives exactly ``input_names``, the same tensors for the same seed and
  different ones for different seeds, in every regime;
- reference: the right output shape, finite; it agrees with ``reference_check`` when one is given;
- baseline: the first baseline agrees with the reference within the tolerance;
- space: ``SPACE``, ``DEFAULT`` (inside ``SPACE``) and ``render``; ``render(DEFAULT)`` gives source;
- judge: the seed kernel (``render(DEFAULT)``) passes the judge on the CPU.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

SHAPE_SETS = ("verify", "bench", "cpu")
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
SEEDS = (0, 1)
# Two float64 formulations of one function, returned as float32, differ by float32 rounding:
# a tenth of the float32 tolerance leaves room for that and none for a real disagreement.
AGREEMENT_SHARE = 0.1


@dataclass
class Finding:
    check: str
    ok: bool
    message: str

    def render(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.check}: {self.message}"


def relative_rms(got: Any, want: Any) -> float:
    diff = (got.double() - want.double()).pow(2).mean().sqrt()
    scale = want.double().pow(2).mean().sqrt()
    return float(diff / scale) if float(scale) > 0 else float(diff)


def _tensors(inputs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in inputs.items() if hasattr(v, "shape")}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    if set(a) != set(b):
        return False
    for key in a:
        if hasattr(a[key], "shape"):
            if a[key].shape != b[key].shape or not torch.equal(a[key], b[key]):
                return False
        elif a[key] != b[key]:
            return False
    return True


def check_name(problem) -> list[str]:
    if NAME_PATTERN.fullmatch(problem.name):
        return []
    return [f"name {problem.name!r} must be lower case letters, digits and '-' (at most 64, starting with a "
            "letter or digit): it names runs, URLs and the entry point"]


def check_shapes(problem) -> list[str]:
    wrong = []
    for which in SHAPE_SETS:
        shapes = problem.shapes.get(which)
        if not shapes:
            wrong.append(f"shape set {which!r} is missing or empty (needed: {', '.join(SHAPE_SETS)})")
            continue
        for shape in shapes:
            if len(shape) != len(problem.dims) or not all(isinstance(n, int) and n > 0 for n in shape):
                wrong.append(f"{which} shape {tuple(shape)!r} must have {len(problem.dims)} positive integers "
                             f"({', '.join(problem.dims)})")
    return wrong


def check_tolerance(problem) -> list[str]:
    wrong = []
    for role, dtype in (("gpu_dtype", problem.gpu_dtype), ("cpu_dtype", problem.cpu_dtype)):
        if dtype not in problem.tolerance:
            wrong.append(f"no tolerance for {role} {dtype!r}: add tolerance[{dtype!r}] (relative RMS error, e.g. "
                         f"1e-2 for bfloat16, 1e-5 for float32)")
    for dtype, value in problem.tolerance.items():
        if not isinstance(value, (int, float)) or not 0 < value < 1 or math.isnan(value):
            wrong.append(f"tolerance[{dtype!r}] = {value!r} must be a relative error between 0 and 1")
    return wrong


def check_roofline(problem) -> list[str]:
    wrong = []
    for which in SHAPE_SETS:
        dtype = problem.cpu_dtype if which == "cpu" else problem.gpu_dtype
        for shape in problem.shapes.get(which, ()):
            # One convention (kernels/roofline.py): both formulas take (shape, dtype).
            for label, formula in (("flops", lambda s: problem.flops(s, dtype)),
                                   ("bytes_moved", lambda s: problem.bytes_moved(s, dtype))):
                try:
                    value = float(formula(tuple(shape)))
                except Exception as error:
                    wrong.append(f"{label}{tuple(shape)!r} raised {type(error).__name__}: {error}")
                    continue
                if not (value > 0 and math.isfinite(value)):
                    wrong.append(f"{label}{tuple(shape)!r} = {value!r}; it must be positive and finite")
    return wrong


def check_inputs(problem) -> list[str]:
    wrong = []
    for regime in problem.regimes + problem.held_out:
        for shape in problem.shapes.get("cpu", ()):
            args = (tuple(shape),)
            first, again, other = (problem.make_inputs(*args, seed, "cpu", problem.cpu_dtype, regime=regime)
                                   for seed in (SEEDS[0], SEEDS[0], SEEDS[1]))
            where = f"make_inputs{tuple(shape)!r} (regime {regime!r})"
            if list(first) != list(problem.input_names):
                wrong.append(f"{where} gives {list(first)}; input_names says {list(problem.input_names)} (same order)")
                return wrong
            if not _same(first, again):
                wrong.append(f"{where} gives different tensors for the same seed {SEEDS[0]}: draw from a "
                             "torch.Generator seeded with regime_seed(seed, regime), not the global RNG")
            if _same(_tensors(first), _tensors(other)):
                wrong.append(f"{where} gives the same tensors for seeds {SEEDS[0]} and {SEEDS[1]}: seed the "
                             "generator with the seed (regime_seed(seed, regime))")
    return wrong


def _agreement(label: str, fn: Callable[..., Any], problem, reference: Callable[..., Any], share: float) -> list[str]:
    if problem.cpu_dtype not in problem.tolerance:
        return []  # the tolerance check says what is missing
    from kernels.judge import outputs

    tolerance = problem.tolerance[problem.cpu_dtype] * share
    wrong = []
    for shape in problem.shapes.get("cpu", ()):
        inputs = problem.make_inputs(tuple(shape), SEEDS[0], "cpu", problem.cpu_dtype)
        count = len(problem.output_specs(tuple(shape), problem.cpu_dtype))
        pairs = zip(outputs.parts(fn(**inputs), count), outputs.parts(reference(**inputs), count))
        error = max(relative_rms(out.float(), ref.float()) for out, ref in pairs)
        if not error <= tolerance:
            wrong.append(f"{label} differs from the reference at {problem.describe_shape(shape)}: relative RMS "
                         f"error {error:.3g} > {tolerance:.3g}")
    return wrong


def check_reference(problem) -> list[str]:
    import torch

    from kernels.judge import outputs

    reference = problem.load_reference()
    wrong = []
    for shape in problem.shapes.get("cpu", ()):
        returned = reference(**problem.make_inputs(tuple(shape), SEEDS[0], "cpu", problem.cpu_dtype))
        specs = problem.output_specs(tuple(shape), problem.cpu_dtype)
        try:
            outs = outputs.parts(returned, len(specs))
        except outputs.OutputError as error:
            wrong.append(f"reference at {problem.describe_shape(shape)}: {error} (extra_outputs says so)")
            continue
        for (name, want, _), out in zip(specs, outs):
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(want):
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                said = "output() says" if len(specs) == 1 else f"the problem says {name} is"
                wrong.append(f"reference at {problem.describe_shape(shape)} gives {got}; {said} {tuple(want)}")
            elif not bool(torch.isfinite(out).all()):
                wrong.append(f"reference at {problem.describe_shape(shape)} has NaN or Inf in {name}")
    alternate = problem.load_reference_check()
    if not wrong and alternate is not None:
        wrong += _agreement(f"reference_check ({problem.reference_check})", alternate, problem, reference,
                            AGREEMENT_SHARE)
    return wrong


def check_baseline(problem) -> list[str]:
    baselines = problem.load_baselines("cpu")
    if not baselines:
        return ["baselines('cpu') is empty: give at least one PyTorch implementation"]
    label, first = next(iter(baselines.items()))
    return _agreement(f"baseline {label!r}", first, problem, problem.load_reference(), 1.0)


def check_space(problem) -> list[str]:
    space = problem.load_space()
    missing = [name for name in ("SPACE", "DEFAULT", "render") if not hasattr(space, name)]
    if missing:
        return [f"space module {problem.space} lacks {', '.join(missing)}"]
    wrong = [f"DEFAULT[{k!r}] = {v!r} is not one of SPACE[{k!r}] = {list(space.SPACE.get(k, ()))}"
             for k, v in space.DEFAULT.items() if v not in space.SPACE.get(k, ())]
    wrong += [f"DEFAULT lacks knob {k!r}" for k in space.SPACE if k not in space.DEFAULT]
    source = problem.seed_source()
    if not isinstance(source, str) or "def kernel" not in source:
        wrong.append("render(DEFAULT) must return the source of a module that defines kernel(**inputs)")
    return wrong


def check_seed_kernel(problem, name: str, insecure_no_isolation: bool) -> list[str]:
    from kernels.judge import judge

    report = judge(problem.seed_source(), name, device="cpu", insecure_no_isolation=insecure_no_isolation)
    if report.status != "ok":
        return [f"the seed kernel (render(DEFAULT)) does not pass the judge on the CPU: {report.status}: "
                f"{report.message}"]
    return []


# (name, check, the checks it needs to have passed: they run at the shapes and on the inputs)
CHECKS: tuple[tuple[str, Callable[..., list[str]], tuple[str, ...]], ...] = (
    ("name", check_name, ()),
    ("shapes", check_shapes, ()),
    ("tolerance", check_tolerance, ()),
    ("roofline", check_roofline, ("shapes",)),
    ("inputs", check_inputs, ("shapes",)),
    ("reference", check_reference, ("shapes", "inputs")),
    ("baseline", check_baseline, ("shapes", "inputs", "reference")),
    ("space", check_space, ()),
)


def check_problem(name: str, *, run_judge: bool = True, insecure_no_isolation: bool = False) -> list[Finding]:
    """Every check's finding, in order. A problem that cannot be loaded gives one failed finding;
    the seed kernel is judged only when every other check passed (and ``run_judge``)."""
    from kernels.registry import get_problem

    try:
        problem = get_problem(name)
    except Exception as error:
        return [Finding("load", False, f"{type(error).__name__}: {error}")]
    findings = [Finding("load", True, f"{problem.name}: {problem.title}")]
    passed = {"load"}
    for label, check, needs in CHECKS:
        blocked = [need for need in needs if need not in passed]
        if blocked:
            findings.append(Finding(label, False, f"not run: fix {', '.join(blocked)} first"))
            continue
        try:
            wrong = check(problem)
        except Exception as error:
            wrong = [f"raised {type(error).__name__}: {error}"]
        findings.append(Finding(label, not wrong, "; ".join(wrong) or "as the contract asks"))
        if not wrong:
            passed.add(label)
    if not run_judge:
        return findings
    if not all(f.ok for f in findings):
        findings.append(Finding("judge", False, "not run: fix the failures above first"))
        return findings
    try:
        wrong = check_seed_kernel(problem, name, insecure_no_isolation)
    except Exception as error:
        wrong = [f"the judge could not run: {type(error).__name__}: {error}"]
    findings.append(Finding("judge", not wrong, "; ".join(wrong) or "the seed kernel passes the judge on the CPU"))
    return findings
