"""A run's best kernel as an installable Python package: take the champion home.

``write_package`` turns what the API says of a run (``GET /runs/{id}`` and ``GET
/runs/{id}/best?format=json``) into a folder that ``pip install`` accepts:

    <out>/pyproject.toml                 marathon-kernel-<problem>, needs only torch and triton
    <out>/README.md                      the function, the measured table, where it came from
    <out>/<package>/__init__.py          <function>(<the problem's inputs>) and graphed(...)
    <out>/<package>/kernel.py            the judged source, byte for byte
    <out>/<package>/measured.json        device, baseline, ratios per shape, timing kind, date
    <out>/<package>/provenance.json      run id, attempt, problem, candidate sha256, judge and
                                         Marathon versions, the exporting checkout's commit
    <out>/<package>/cases.pt             inputs and float64 references at the problem's cpu
                                         shapes, at its cpu and its gpu dtype
    <out>/<package>/test_kernel.py       the reference test: python -m <package>.test_kernel

The reference test compares the kernel with the saved references by the rule the judge used
(exact for integer and bool outputs, relative RMS or allclose for floats), so the package needs
neither Marathon nor the problem's own package where it is installed. The problem is loaded
where the export runs, to draw those cases.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels import export_templates
from kernels.judge import compare
from kernels.problem import Problem

CASE_SEED = 0


@dataclass(frozen=True)
class Exported:
    folder: Path
    package: str
    function: str


def python_name(problem_name: str) -> str:
    """``mla-decode-paged`` -> ``mla_decode_paged``: a problem's name as a Python identifier."""
    name = re.sub(r"\W", "_", problem_name.replace("-", "_")).strip("_").lower() or "kernel"
    return name if not name[0].isdigit() else f"k_{name}"


def measured_table(report: dict[str, Any], attempt: dict[str, Any], exported_at: str) -> dict[str, Any]:
    """What the judge measured for the kernel, per shape and in all."""
    rows = []
    for shape in report.get("shapes") or []:
        timing = shape.get("timing") or {}
        rows.append({"shape": shape.get("shape"),
                     "candidate_ms": (timing.get("candidate") or {}).get("median_ms"),
                     "baseline_ms": (timing.get("baseline") or {}).get("median_ms"),
                     "speedup": shape.get("speedup"), "max_error": shape.get("max_error"),
                     "comparison": shape.get("comparison")})
    return {"device": report.get("device") or "", "timing_kind": report.get("timing_kind") or "",
            "baseline": report.get("baseline") or "", "speedup_geomean": report.get("speedup", attempt.get("speedup")),
            "roofline": report.get("roofline"), "judged_status": report.get("status", attempt.get("status")),
            "shapes": rows, "judged_at": attempt.get("created_at") or attempt.get("finished_at"),
            "exported_at": exported_at}


def checkout_commit() -> str:
    """The commit of the Marathon checkout doing the export, or ``"unknown"`` (an installed wheel)."""
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                                text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=Path(__file__).parent, capture_output=True,
                           text=True, timeout=10).stdout.strip() if result.returncode == 0 else ""
    return (result.stdout.strip() + ("+uncommitted" if dirty else "")) if result.returncode == 0 else "unknown"


def cases(problem: Problem) -> dict[str, Any]:
    """Inputs and references at the problem's cpu shapes, for each device's dtype, with the rule
    each is compared by: ``{"cpu": [...], "cuda": [...]}`` of ``{"shape", "inputs", "reference",
    "rule"}``."""
    import torch

    reference = problem.load_reference()
    saved: dict[str, Any] = {}
    for device, dtype in (("cpu", problem.cpu_dtype), ("cuda", problem.gpu_dtype)):
        rule = compare.problem_rule(problem, device, dtype)
        entries = []
        for shape in problem.shape_set("cpu"):
            inputs = problem.make_inputs(tuple(shape), CASE_SEED, "cpu", dtype)
            with torch.no_grad():
                ref = reference(**inputs).detach()
            entries.append({"shape": problem.describe_shape(tuple(shape)), "inputs": inputs,
                            "reference": ref if rule.kind == "exact" else ref.double(),
                            "rule": {"kind": rule.kind, "rms": rule.rms, "atol": rule.atol, "rtol": rule.rtol}})
        saved[device] = entries
    return saved


def write_package(out: Path, run: dict[str, Any], best: dict[str, Any], problem: Problem,
                  marathon_version: str) -> Exported:
    """Write the package of ``best`` (the API's best-kernel JSON: ``source``, ``attempt``,
    ``report``) of ``run`` (the API's run JSON) under ``out``, which must not exist or be empty.
    Raises ValueError when there is nothing judged to export."""
    import torch

    source, attempt, report = best.get("source") or "", best.get("attempt") or {}, best.get("report") or {}
    if "def kernel" not in source:
        raise ValueError(f"run {run.get('id')}'s best kernel has no source defining kernel(**inputs)")
    if report.get("status", attempt.get("status")) != "ok":
        raise ValueError(f"run {run.get('id')}'s best kernel was not accepted by the judge "
                         f"(status {report.get('status', attempt.get('status'))!r}): nothing to export")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} exists and is not empty: choose a new folder (-o)")
    function = python_name(problem.name)
    package = f"marathon_{function}"
    exported_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    provenance = {"run_id": run.get("id"), "problem": problem.name, "problem_title": problem.title,
                  "attempt": {k: attempt.get(k) for k in ("id", "iteration", "index", "strategy", "knobs",
                                                         "source_sha", "report_sha")},
                  "candidate_sha256": report.get("candidate_sha256"), "judge_version": report.get("judge_version"),
                  "marathon_version": marathon_version, "exported_by_commit": checkout_commit(),
                  "exported_at": exported_at}
    measured = measured_table(report, attempt, exported_at)
    where = out / package
    where.mkdir(parents=True, exist_ok=True)
    (where / "kernel.py").write_text(source)
    (where / "measured.json").write_text(json.dumps(measured, indent=2) + "\n")
    (where / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
    torch.save(cases(problem), where / "cases.pt")
    fill = {"PACKAGE": package, "FUNCTION": function, "PROBLEM": problem.name, "TITLE": problem.title,
            "PARAMETERS": ", ".join(problem.input_names),
            "ARGUMENTS": ", ".join(f"{name}={name}" for name in problem.input_names),
            "VERSION": "0." + exported_at[:10].replace("-", ""), "RUN": str(run.get("id")),
            "TABLE": table_text(measured), "PROVENANCE": provenance_text(provenance)}
    for text, target in ((export_templates.INIT, where / "__init__.py"),
                         (export_templates.TEST, where / "test_kernel.py"),
                         (export_templates.PYPROJECT, out / "pyproject.toml"),
                         (export_templates.README, out / "README.md")):
        for key, value in fill.items():
            text = text.replace("{{" + key + "}}", value)
        target.write_text(text)
    return Exported(out, package, function)


def table_text(measured: dict[str, Any]) -> str:
    """The measured table as Markdown, the baseline named in its header."""
    kind = measured["timing_kind"]
    lines = [f"Measured on {measured['device'] or 'an unnamed device'} ({kind} timing) against "
             f"`{measured['baseline'] or 'the baseline'}`; exported {measured['exported_at']}.",
             ""]
    if kind == "interpreter":
        lines += ["These are Triton-interpreter timings on a CPU: they rank candidates, they are not GPU "
                  "performance.", ""]
    lines += ["| shape | kernel ms | baseline ms | speedup | max error |", "|---|---|---|---|---|"]
    for row in measured["shapes"]:
        lines.append(f"| {row['shape']} | {_figure(row['candidate_ms'])} | {_figure(row['baseline_ms'])} | "
                     f"{_figure(row['speedup'])}x | {_figure(row['max_error'])} |")
    lines += ["", f"Geometric mean speedup: {_figure(measured['speedup_geomean'])}x."]
    return "\n".join(lines)


def provenance_text(provenance: dict[str, Any]) -> str:
    attempt = provenance["attempt"]
    return (f"Run `{provenance['run_id']}` (problem `{provenance['problem']}`), iteration {attempt.get('iteration')}, "
            f"candidate {attempt.get('index')}; candidate sha256 `{provenance['candidate_sha256']}`; judge "
            f"{provenance['judge_version']}; exported by Marathon {provenance['marathon_version']} at commit "
            f"`{provenance['exported_by_commit']}`.")


def _figure(value: Any) -> str:
    return "n/a" if value is None else f"{float(value):.3g}"
