"""What each judge tool tells the model, read from the judge's report. Only an allow-list of fields
is read (status, message, per-shape errors and tolerance, timings, resources, the ncu summary), so
nothing the judge keeps to itself (seeds, plan, fingerprint, isolation details) reaches a prompt."""

from __future__ import annotations

from typing import Any

MESSAGE_LIMIT = 2000
SHAPES_SHOWN = 8


def _verdict(report: Any) -> str:
    message = (report.message or "").strip()[:MESSAGE_LIMIT]
    return f"judge verdict: {report.status}" + (f": {message}" if message else "")


def _resources(report: Any) -> list[str]:
    lines = []
    for kernel, figures in sorted((report.resources or {}).items()):
        if not isinstance(figures, dict):
            continue
        if "error" in figures:
            lines.append(f"- {kernel}: {str(figures['error'])[:300]}")
            continue
        parts = [f"{key} {figures[key]}" for key in ("registers", "spills", "shared_bytes") if key in figures]
        lines.append(f"- {kernel}: " + (", ".join(parts) or "no figures"))
    return lines


def compile_answer(report: Any) -> tuple[bool, str]:
    lines = [_verdict(report)]
    resources = _resources(report)
    if resources:
        lines += ["compiled kernels (registers per thread, spilled registers, shared memory bytes):"] + resources
    elif report.device != "cuda":
        lines.append("sm_90 compile statistics (registers, spills, shared memory) are not available on this worker: "
                     "it runs the Triton interpreter, which compiles nothing for a GPU.")
    return report.status not in ("compile_error", "forbidden"), "\n".join(lines)


def run_answer(report: Any) -> tuple[bool, str]:
    lines = [_verdict(report), "error per output (relative RMS against the float64 reference; tolerance):"]
    shapes = sorted(report.shapes or [], key=lambda s: _size(s.get("dims")))
    for shape in shapes[:SHAPES_SHOWN]:
        errors = ", ".join(f"{check} {_number(value)}" for check, value in sorted((shape.get("errors") or {}).items()))
        lines.append(f"- {shape.get('shape')}: max {_number(shape.get('max_error'))} "
                     f"(tolerance {_number(shape.get('tolerance'))})" + (f"; {errors}" if errors else ""))
    if not shapes:
        lines.append("- no output was checked (the judgement stopped before)")
    return report.status == "ok", "\n".join(lines)


def time_answer(report: Any, index: int) -> tuple[bool, str]:
    timed = [s for s in report.shapes or [] if s.get("timing")]
    if not timed:
        return False, _verdict(report) + "\nno shape was timed"
    shape = timed[min(index, len(timed) - 1)]
    candidate, baseline = shape["timing"]["candidate"], shape["timing"]["baseline"]
    return report.status == "ok", "\n".join([
        _verdict(report),
        f"{shape.get('shape')} ({report.timing_kind} timing, shape {timed.index(shape)} of {len(timed)}): "
        f"candidate {candidate['median_ms']:.4f} ms, baseline {report.baseline or 'baseline'} "
        f"{baseline['median_ms']:.4f} ms, speedup {shape.get('speedup', 0.0):.3f}x",
    ])


def ncu_answer(report: Any) -> tuple[bool, str]:
    from kernels.judge.ncu import summary_text

    if not report.ncu:
        return False, _verdict(report) + f"\nno ncu profile: {report.ncu_reason}"
    return True, _verdict(report) + "\n" + summary_text(report.ncu)


def answer(name: str, report: Any, shape_index: int = 0) -> tuple[bool, str]:
    """(whether the call succeeded, the text the model reads) for judge tool ``name``."""
    if name == "compile":
        return compile_answer(report)
    if name == "run":
        return run_answer(report)
    if name == "time":
        return time_answer(report, shape_index)
    if name == "ncu":
        return ncu_answer(report)
    raise ValueError(f"no judge tool {name!r}")


def _size(dims: Any) -> int:
    total = 1
    for value in dims or []:
        total *= int(value) if isinstance(value, (int, float)) else 1
    return total


def _number(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else "-"
