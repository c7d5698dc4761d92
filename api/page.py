"""The run page as one self-contained HTML document: no script, no external resource.

Everything that comes from a run (kernel sources, strategies, messages, notebook text, which an
LLM may have written) goes through ``esc`` before it reaches the markup, and the page is served
with a Content-Security-Policy that forbids scripts as a second line of defence.
"""

from __future__ import annotations

import difflib
import html
from dataclasses import dataclass, field
from typing import Optional, Sequence

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)

PLOT_WIDTH, PLOT_HEIGHT = 760, 320
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 16, 16, 40

STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#1b1f24;max-width:1100px}
h1{font-size:1.4em;margin-bottom:4px}h2{font-size:1.1em;margin-top:28px}h3{font-size:1em}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px}
.facts dt{color:#57606a}.facts dd{margin:0}
pre{background:#f6f8fa;padding:12px;overflow:auto;font-size:12px;line-height:1.4}
.diff .add{color:#116329;background:#dafbe1}.diff .del{color:#82071e;background:#ffebe9}
.diff .hunk{color:#0550ae}
table{border-collapse:collapse;font-size:13px}td,th{border-bottom:1px solid #d0d7de;padding:3px 8px;text-align:left}
svg text{font-size:11px;fill:#57606a}.attempt{fill:#0969da;opacity:.55}.failed{fill:#cf222e;opacity:.5}
.best-line{fill:none;stroke:#1a7f37;stroke-width:2}.goal-line{stroke:#bf8700;stroke-dasharray:6 4}
.baseline-line{stroke:#8c959f;stroke-dasharray:2 3}.axis{stroke:#57606a}
"""


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


@dataclass
class PlotPoint:
    iteration: int
    index: int
    status: str
    speedup: Optional[float]


@dataclass
class NotebookView:
    """Rows of what was tried, plus what the workflow's notebook adds when it answered."""

    rows: list[dict] = field(default_factory=list)
    lessons: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    failed_strategies: list[str] = field(default_factory=list)


@dataclass
class PageData:
    run_id: str
    problem: str
    status: str
    iteration: int
    goal_text: str
    goal_target: Optional[float]
    best_speedup: Optional[float]
    stop_reason: str
    phase: str
    temporal_url: str
    api_url: str
    points: list[PlotPoint]
    best_source: Optional[str]
    best_label: str
    seed_source: Optional[str]
    seed_note: str
    notebook: NotebookView
    refresh_s: Optional[int] = None


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    step = (high - low) / (count - 1) if high > low else 1.0
    return [low + i * step for i in range(count)]


def _line(css_class: str, x1: float, x2: float, y1: float, y2: float) -> str:
    return f'<line class="{css_class}" x1="{x1:.1f}" x2="{x2:.1f}" y1="{y1:.1f}" y2="{y2:.1f}"/>'


def speedup_svg(points: Sequence[PlotPoint], goal_target: Optional[float]) -> str:
    """Speedup of every attempt (dots; failures as red dots on the axis) and the best so far (line)."""
    scored = [p for p in points if p.speedup is not None]
    iterations = [p.iteration for p in points] or [0]
    x_low, x_high = min(iterations), max(max(iterations), min(iterations) + 1)
    y_high = max([p.speedup for p in scored] + [goal_target or 0.0, 1.0]) * 1.1
    inner_w = PLOT_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    inner_h = PLOT_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def x(iteration: float) -> float:
        return MARGIN_LEFT + (iteration - x_low) / (x_high - x_low) * inner_w

    def y(speedup: float) -> float:
        return MARGIN_TOP + inner_h - speedup / y_high * inner_h

    parts = [
        f'<svg id="speedup-plot" xmlns="http://www.w3.org/2000/svg" width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" '
        f'viewBox="0 0 {PLOT_WIDTH} {PLOT_HEIGHT}" role="img" aria-label="speedup over iterations">',
        "<title>Speedup over iterations</title>",
        _line("axis", MARGIN_LEFT, PLOT_WIDTH - MARGIN_RIGHT, MARGIN_TOP + inner_h, MARGIN_TOP + inner_h),
        _line("axis", MARGIN_LEFT, MARGIN_LEFT, MARGIN_TOP, MARGIN_TOP + inner_h),
    ]
    for value in _ticks(0.0, y_high):
        parts.append(f'<text x="{MARGIN_LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.2f}x</text>')
    for value in _ticks(float(x_low), float(x_high)):
        parts.append(f'<text x="{x(value):.1f}" y="{PLOT_HEIGHT - 22}" text-anchor="middle">{value:.0f}</text>')
    parts.append(
        f'<text x="{MARGIN_LEFT + inner_w / 2:.1f}" y="{PLOT_HEIGHT - 4}" text-anchor="middle">iteration</text>'
    )
    parts.append(_line("baseline-line", MARGIN_LEFT, PLOT_WIDTH - MARGIN_RIGHT, y(1.0), y(1.0)))
    if goal_target:
        parts.append(
            f'<line class="goal-line" x1="{MARGIN_LEFT}" x2="{PLOT_WIDTH - MARGIN_RIGHT}" '
            f'y1="{y(goal_target):.1f}" y2="{y(goal_target):.1f}"><title>goal {goal_target:g}x</title></line>'
        )
    best: Optional[float] = None
    steps: list[str] = []
    for point in points:
        if point.speedup is None:
            parts.append(
                f'<circle class="failed" cx="{x(point.iteration):.1f}" cy="{y(0):.1f}" r="2.5">'
                f"<title>iteration {point.iteration}, candidate {point.index}: {esc(point.status)}</title></circle>"
            )
            continue
        parts.append(
            f'<circle class="attempt" cx="{x(point.iteration):.1f}" cy="{y(point.speedup):.1f}" r="3">'
            f"<title>iteration {point.iteration}, candidate {point.index}: "
            f"{point.speedup:.3f}x ({esc(point.status)})</title></circle>"
        )
        if point.status == "ok" and (best is None or point.speedup > best):
            if best is not None:
                steps.append(f"{x(point.iteration):.1f},{y(best):.1f}")
            best = point.speedup
            steps.append(f"{x(point.iteration):.1f},{y(best):.1f}")
    if best is not None:
        steps.append(f"{x(x_high):.1f},{y(best):.1f}")
        parts.append(f'<polyline class="best-line" points="{" ".join(steps)}"/>')
    parts.append("</svg>")
    return "".join(parts)


def diff_html(seed: str, best: str) -> str:
    lines = difflib.unified_diff(seed.splitlines(), best.splitlines(), "seed", "best", lineterm="")
    out = []
    for line in lines:
        if line.startswith(("+++", "---")):
            kind = "hunk"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        out.append(f'<span class="{kind}">{esc(line)}</span>')
    return "\n".join(out) if out else "(identical to the seed)"


def _facts(data: PageData) -> str:
    best = "none yet" if data.best_speedup is None else f"{data.best_speedup:.3f}x"
    rows = [
        ("Problem", esc(data.problem)),
        (
            "Status",
            f'<span id="run-status">{esc(data.status)}</span>' + (f" ({esc(data.phase)})" if data.phase else ""),
        ),
        ("Iteration", esc(data.iteration)),
        ("Goal", esc(data.goal_text)),
        ("Best speedup", f'<span id="best-speedup">{esc(best)}</span>'),
    ]
    if data.stop_reason:
        rows.append(("Stopped because", esc(data.stop_reason)))
    rows.append(("Temporal", f'<a id="temporal-link" href="{esc(data.temporal_url)}">{esc(data.temporal_url)}</a>'))
    rows.append(("API", f'<a href="{esc(data.api_url)}">{esc(data.api_url)}</a>'))
    return '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _llm_link(row: dict) -> str:
    url = row.get("llm_url")
    return f' <a class="llm-link" href="{esc(url)}?format=text">LLM prompt and reply</a>' if url else ""


def _notebook(view: NotebookView) -> str:
    parts = []
    for title, items in (
        ("Hints", view.hints),
        ("Lessons", view.lessons),
        ("Strategies that failed", view.failed_strategies),
    ):
        if items:
            parts.append(f"<h3>{title}</h3><ul>" + "".join(f"<li>{esc(item)}</li>" for item in items) + "</ul>")
    header = (
        "<tr><th>iteration</th><th>candidate</th><th>strategy</th><th>status</th><th>speedup</th><th>note</th></tr>"
    )
    body = "".join(
        "<tr>"
        f"<td>{esc(row['iteration'])}</td><td>{esc(row['index'])}</td><td>{esc(row['strategy'])}</td>"
        f"<td>{esc(row['status'])}</td>"
        f"<td>{'' if row['speedup'] is None else esc(format(row['speedup'], '.3f'))}</td>"
        f"<td>{esc(row['note'])}{_llm_link(row)}</td></tr>"
        for row in view.rows
    )
    table = f'<table id="notebook-entries">{header}{body}</table>' if view.rows else "<p>No attempts yet.</p>"
    return "".join(parts) + table


def render_run_page(data: PageData) -> str:
    refresh = f'<meta http-equiv="refresh" content="{data.refresh_s}">' if data.refresh_s else ""
    if data.best_source is None:
        best = "<p>No kernel has passed the judge yet.</p>"
        diff = ""
    else:
        best = f'<p>{esc(data.best_label)}</p><pre id="best-source"><code>{esc(data.best_source)}</code></pre>'
        if data.seed_source is None:
            diff = f"<p>{esc(data.seed_note)}</p>"
        else:
            diff = (
                f'<pre id="best-diff" class="diff"><code>{diff_html(data.seed_source, data.best_source)}</code></pre>'
            )
    return (
        "<!doctype html>"
        '<html lang="en"><head><meta charset="utf-8">'
        f"{refresh}<title>Marathon run {esc(data.run_id)}</title><style>{STYLE}</style></head><body>"
        f"<h1>Run {esc(data.run_id)}</h1>{_facts(data)}"
        f"<h2>Speedup over iterations</h2>{speedup_svg(data.points, data.goal_target)}"
        f"<h2>Best kernel</h2>{best}"
        f"<h2>Diff against the seed</h2>{diff}"
        f'<h2>Notebook</h2><div id="notebook">{_notebook(data.notebook)}</div>'
        "</body></html>"
    )


def render_message_page(title: str, message: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{esc(title)}</h1><p>{esc(message)}</p></body></html>"
    )


def render_login_page(next_path: str, message: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Marathon: sign in</title><style>{STYLE}</style></head><body>"
        f"<h1>Marathon</h1><p>{esc(message)}</p>"
        '<form method="post" action="/login">'
        f'<input type="hidden" name="next" value="{esc(next_path)}">'
        "<label>API token (from <code>&lt;home&gt;/api-token</code>) "
        '<input type="password" name="token" autocomplete="off" required></label> '
        '<button type="submit">Open</button></form></body></html>'
    )
