"""``marathon problem check``: does a problem keep the contract of kernels/problem.py?

Each check says what it found; a failed one says exactly what is wrong and what to change. The
checks run on the CPU at the problem's ``cpu`` shapes and ``cpu_dtype``, so they need no GPU:

- load: the name or object path gives a ``Problem`` (and an entry point's name matches);
- name: lower case letters, digits and ``-``;
- shapes: ``verify``, ``bench`` and ``cpu`` present, non-empty, one positive size per dim;
- tolerance: an entry for the output of ``gpu_dtype`` on the GPU and of ``cpu_dtype`` on the
  CPU (none for integer and bool outputs: compared exactly), each valid (kernels/judge/compare.py);
- roofline: ``flops`` and ``bytes_moved`` positive and finite at every listed shape;
- inputs: ``make_inputs`` gives exactly ``input_names``, the same tensors for the same seed and
  different ones for different seeds, in every regime; ``input_dtypes`` kept at every dtype;
- reference: the right output shape and dtype, finite; it agrees with ``reference_check`` when given;
- baseline: the first baseline agrees with the reference within the tolerance;
- space: ``SPACE``, ``DEFAULT`` (inside ``SPACE``) and ``render``; ``validate``, ``render`` and
  ``describe`` at many points of the space, not only DEFAULT (kernels/space_check.py);
- bench build: the bench shapes' inputs and references built once (not run), bounded in time
  and memory (kernels/scale_check.py);
- judge: the seed kernel (``render(DEFAULT)``) passes the judge on the CPU.

Warnings do not fail the check: a problem with no input regime beyond ``default`` (wrong
kernels that the default draw cannot tell apart pass), an input that holds one value everywhere
(a kernel that ignores it passes).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from kernels import scale_check, space_check
from kernels.judge import compare
from kernels.problem import DTYPE_BYTES

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
    warning: bool = False

    def render(self) -> str:
        return f"{'warn' if self.warning else 'ok  ' if self.ok else 'FAIL'}  {self.check}: {self.message}"


SUGGESTED_REGIMES = ("signs", "ties", "zeros", "extremes")


def relative_rms(got: Any, want: Any) -> float:
    diff = (got.double() - want.double()).pow(2).mean().sqrt()
    scale = want.double().pow(2).mean().sqrt()
    return float(diff / scale) if float(scale) > 0 else float(diff)


def _output_dtype(problem, dtype: str) -> str:
    """The output's dtype name at ``dtype``; the run's dtype when ``output`` cannot say (the
    shapes check reports broken shapes)."""
    try:
        return compare.output_dtype(problem, dtype)
    except Exception:
        return dtype


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
    for role, dtype, device in (("gpu_dtype", problem.gpu_dtype, "cuda"), ("cpu_dtype", problem.cpu_dtype, "cpu")):
        out = _output_dtype(problem, dtype)
        if not compare.is_exact_dtype(out) and compare.tolerance_entry(problem.tolerance, device, out) is None:
            wrong.append(f"no tolerance for {role} {dtype!r} (its output is {out}): add tolerance[{out!r}] "
                         f"(relative RMS error, e.g. 1e-2 for bfloat16, 1e-5 for float32; or "
                         "{'atol': ..., 'rtol': ...})")
    for key, value in problem.tolerance.items():
        device, _, dtype = key.rpartition(":")
        if device not in ("", "cpu", "cuda") or dtype not in DTYPE_BYTES:
            wrong.append(f"tolerance key {key!r} must be a dtype name or 'cpu:<dtype>' / 'cuda:<dtype>'")
        failure = compare.entry_problem(key, value)
        if failure:
            wrong.append(failure)
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
    return wrong + _input_dtype_failures(problem)


def _input_dtype_failures(problem) -> list[str]:
    """Each input named in ``input_dtypes`` has that dtype at both the CPU's and the GPU's dtype."""
    wrong = []
    unknown = sorted(set(problem.input_dtypes) - set(problem.input_names))
    if unknown:
        wrong.append(f"input_dtypes names {unknown}, which are not inputs ({list(problem.input_names)})")
    shape = tuple(problem.shapes["cpu"][0])
    for dtype in dict.fromkeys((problem.cpu_dtype, problem.gpu_dtype)):
        inputs = problem.make_inputs(shape, SEEDS[0], "cpu", dtype)
        for name, want in problem.input_dtypes.items():
            got = str(getattr(inputs.get(name), "dtype", type(inputs.get(name)).__name__)).removeprefix("torch.")
            if got != want:
                wrong.append(f"make_inputs(dtype={dtype!r}) gives {name!r} as {got}; input_dtypes says {want}: "
                             "cast with kernels.problem.place_inputs(tensors, device, dtype, input_dtypes)")
    return wrong


def _agreement(label: str, fn: Callable[..., Any], problem, reference: Callable[..., Any], share: float) -> list[str]:
    from kernels.judge import outputs

    rule = compare.problem_rule(problem, "cpu", problem.cpu_dtype)
    rule = compare.Rule(rule.kind, rule.rms * share, rule.atol * share, rule.rtol * share)
    wrong = []
    for shape in problem.shapes.get("cpu", ()):
        inputs = problem.make_inputs(tuple(shape), SEEDS[0], "cpu", problem.cpu_dtype)
        count = len(problem.output_specs(tuple(shape), problem.cpu_dtype))
        pairs = zip(outputs.parts(fn(**inputs), count), outputs.parts(reference(**inputs), count))
        for got, want in pairs:
            want = compare.as_reference(want, rule)
            got, unusable = compare.unusable(got, rule)
            ok, error, why = (False, float("inf"), unusable) if unusable else compare.compare(got, want, rule)
            if not ok:
                wrong.append(f"{label} differs from the reference at {problem.describe_shape(shape)}: "
                             + (f"relative RMS error {error:.3g} > {rule.rms:.3g}" if rule.kind == "rms" else why))
                break
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
        for (name, want, dtype), out in zip(specs, outs):
            said = "output() says" if len(specs) == 1 else f"the problem says {name} is"
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(want):
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                wrong.append(f"reference at {problem.describe_shape(shape)} gives {got}; {said} {tuple(want)}")
            elif compare.is_exact_dtype(dtype) != compare.is_exact_dtype(out.dtype):
                wrong.append(f"reference at {problem.describe_shape(shape)} gives {out.dtype}; {said} {dtype} "
                             "(integer and bool outputs are compared exactly: the reference returns that dtype)")
            elif out.is_floating_point() and not bool(torch.isfinite(out).all()):
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
    if wrong:
        return wrong
    failures, checked, sound = space_check.check_points(space)
    return failures or ([], f"validate, render and describe at {checked} points ({sound} without a failure)")


def check_bench_build(problem, name: str) -> list[str] | tuple[list[str], str]:
    failures, notes = scale_check.check_bench_build(name)
    return failures or ([], "inputs and reference built once at each bench shape on the CPU: " + "; ".join(notes))


def warn_regimes(problem) -> list[str]:
    if tuple(problem.regimes) != ("default",):
        return []
    return [f"no input regime beyond 'default': a wrong kernel that only the default draw cannot tell apart "
            f"passes (an ELU without its negative branch on inputs in [0, 1), an argmin that takes the last of "
            f"equal minima). Declare regimes such as {', '.join(SUGGESTED_REGIMES)} (Problem.regimes; "
            "examples/rmsnorm_residual shows them)"]


def warn_constant_inputs(problem) -> list[str]:
    """Inputs (weights, scales) that hold one value everywhere: a kernel that ignores them passes."""
    shape = tuple(problem.shapes["cpu"][0])
    inputs = problem.make_inputs(shape, SEEDS[0], "cpu", problem.cpu_dtype)
    return [f"input {name!r} holds one value everywhere ({float(value.flatten()[0]):g}) at "
            f"{problem.describe_shape(shape)}: a kernel that ignores it passes; draw varied values (weights are "
            "inputs)" for name, value in _tensors(inputs).items()
            if value.numel() > 1 and bool((value == value.flatten()[0]).all())]


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
    ("bench build", check_bench_build, ("shapes", "inputs", "reference")),
)
# (name, warning, the checks it needs): said, never failed.
WARNINGS: tuple[tuple[str, Callable[..., list[str]], tuple[str, ...]], ...] = (
    ("regimes", warn_regimes, ()),
    ("input values", warn_constant_inputs, ("shapes", "inputs")),
)


def _run(check: Callable[..., Any], problem, name: str) -> tuple[list[str], str]:
    """A check's failures and what it says when there are none (the bench build loads the
    problem by the ``name`` it was asked for, in a process of its own)."""
    try:
        result = check(problem, name) if check is check_bench_build else check(problem)
    except Exception as error:
        return [f"raised {space_check.last_lines(error)}"], ""
    if isinstance(result, tuple):
        return result
    return result, "as the contract asks"


def check_problem(name: str, *, run_judge: bool = True, insecure_no_isolation: bool = False,
                  build_bench: bool = True) -> list[Finding]:
    """Every check's finding, in order, then the warnings. A problem that cannot be loaded gives
    one failed finding; the bench shapes are built only when ``build_bench``; the seed kernel is
    judged only when every other check passed (and ``run_judge``)."""
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
        if label == "bench build" and not build_bench:
            findings.append(Finding(label, True, "not run (asked not to build the bench shapes)", warning=True))
            continue
        wrong, said = _run(check, problem, name)
        findings.append(Finding(label, not wrong, "; ".join(wrong) or said))
        if not wrong:
            passed.add(label)
    for label, warn, needs in WARNINGS:
        if all(need in passed for need in needs):
            said = _run(warn, problem, name)[0]
            findings += [Finding(label, True, message, warning=True) for message in said]
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
