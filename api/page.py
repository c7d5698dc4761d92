"""The run page as one self-contained HTML document: no script, no external resource.

Everything that comes from a run (kernel sources, strategies, messages, notebook text, which an
LLM may have written) goes through ``esc`` before it reaches the markup, and the page is served
with a Content-Security-Policy that forbids scripts as a second line of defence.

It reads top-down as a person wants it: the summary (status, phase, progress, best with its
absolute time), the speedup curve (log-scale y axis, the 1x and goal lines), steering and the
notebook (attempts with their absolute times per shape), the diff against the seed, and last the
best kernel itself, collapsed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Optional, Sequence
from urllib.parse import quote

from api.page_plot import PlotPoint, speedup_svg
from api.page_values import ShapeTime, esc, ratio
from api.progress import reason_label, reason_words

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)


STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#1b1f24;max-width:1100px}
h1{font-size:1.4em;margin-bottom:4px}h2{font-size:1.1em;margin-top:24px}h3{font-size:1em;margin:12px 0 4px}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px}
.facts dt{color:#57606a}.facts dd{margin:0}
pre{background:#f6f8fa;padding:12px;overflow:auto;font-size:12px;line-height:1.4}
.scroll{max-height:420px;overflow:auto}
.diff .add{color:#116329;background:#dafbe1}.diff .del{color:#82071e;background:#ffebe9}
.diff .hunk{color:#0550ae}
table{border-collapse:collapse;font-size:13px}
td,th{border-bottom:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{position:sticky;top:0;background:#fff}
.times{font-variant-numeric:tabular-nums;white-space:nowrap}
svg text{font-size:11px;fill:#57606a}.attempt{fill:#0969da;opacity:.55}.failed{fill:#cf222e;opacity:.5}
.unconfirmed{fill:#fff;stroke:#0969da;stroke-width:1.5}.mark{color:#57606a;font-size:12px}
.best-line{fill:none;stroke:#1a7f37;stroke-width:2}.goal-line{stroke:#bf8700;stroke-dasharray:6 4}
.baseline-line{stroke:#8c959f;stroke-dasharray:2 3}.axis{stroke:#57606a}.grid{stroke:#eaeef2}
text.goal-label{fill:#bf8700}text.baseline-label{fill:#57606a}
details>summary{cursor:pointer;color:#0969da}
"""


@dataclass
class NotebookView:
    """Rows of what was tried, plus what the workflow's notebook adds when it answered."""

    rows: list[dict] = field(default_factory=list)
    lessons: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    failed_strategies: list[str] = field(default_factory=list)
    # (when, what) of each pause, resume, stop, goal change and hint, where the store keeps them.
    steering: list[tuple[str, str]] = field(default_factory=list)


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
    best_times: list[ShapeTime] = field(default_factory=list)
    # Lines on the run's progress: elapsed and estimated time left, candidates, a missing worker.
    progress: list[str] = field(default_factory=list)
    # The run this one continues ("continue") or was forked from ("fork").
    from_run: Optional[str] = None
    from_kind: Optional[str] = None
    # How busy the GPU was while the run's candidates were evaluated ("" when nothing was measured).
    gpu: str = ""
    # What the ratios are measured against (the judge report's baseline: "eager", "torch.compile").
    baseline: str = ""
    # "gpu" or "interpreter": an interpreter's timings are CPU timings, noisy, never GPU performance.
    timing_kind: str = ""


def diff_html(seed: str, best: str) -> str:
    lines = difflib.unified_diff(seed.splitlines(), best.splitlines(), "seed", "best", lineterm="")
    out = []
    for line in lines:
        if line.startswith(("+++", "---", "@@")):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        out.append(f'<span class="{kind}">{esc(line)}</span>')
    return "\n".join(out) if out else "(identical to the seed)"


def _times_cell(times: Sequence[ShapeTime]) -> str:
    return "<br>".join(esc(t.text()) for t in times)


def _parent_row(data: PageData) -> list[tuple[str, str]]:
    if not data.from_run:
        return []
    label = "Continues run" if data.from_kind == "continue" else "Forked from run"
    href = "/runs/" + quote(data.from_run, safe="") + "/page"
    link = f'<a id="parent-link" href="{esc(href)}">{esc(data.from_run)}</a>'
    return [(label, link)]


def _versus(data: PageData) -> str:
    """`` vs eager`` (the baseline every ratio on the page is measured against), or "" when unknown."""
    return f" vs {data.baseline}" if data.baseline else " vs the problem's baseline"


def _best_text(data: PageData) -> str:
    if data.best_speedup is None:
        return "none yet"
    text = f"{ratio(data.best_speedup)}{_versus(data)} (geomean, confirmed"
    if data.timing_kind and data.timing_kind != "gpu":
        text += f"; {data.timing_kind} timing on the CPU: noisy, not GPU performance"
    return text + ")"


def _facts(data: PageData) -> str:
    best = _best_text(data)
    rows = [
        ("Problem", esc(data.problem)),
        *_parent_row(data),
        (
            "Status",
            f'<span id="run-status">{esc(data.status)}</span>'
            + (f' (<span id="run-phase">{esc(data.phase)}</span>)' if data.phase else ""),
        ),
        ("Iteration", esc(data.iteration)),
        ("Goal", esc(data.goal_text)),
        ("Best speedup", f'<span id="best-speedup">{esc(best)}</span>'),
    ]
    if data.best_times:
        rows.append(
            ("Best time (ours vs baseline)",
             f'<span id="best-times" class="times">{_times_cell(data.best_times)}</span>')
        )
    if data.progress:
        progress = "<br>".join(esc(line) for line in data.progress)
        rows.append(("Progress", f'<span id="run-progress">{progress}</span>'))
    # Off the GPU (Triton's interpreter) there is no GPU to be busy: the row says what was measured.
    use_label = "Evaluation (no GPU)" if data.timing_kind and data.timing_kind != "gpu" else "GPU use"
    rows.append((use_label, f'<span id="gpu-use">{esc(data.gpu or "—")}</span>'))
    if data.stop_reason:
        label = reason_label(data.status)
        reason = f'<span id="stop-reason">{esc(reason_words(data.stop_reason))}</span>'
        rows.append((label[:1].upper() + label[1:], reason))
    rows.append(("Temporal", f'<a id="temporal-link" href="{esc(data.temporal_url)}">{esc(data.temporal_url)}</a>'))
    rows.append(("API", f'<a href="{esc(data.api_url)}">{esc(data.api_url)}</a>'))
    return '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _llm_link(row: dict) -> str:
    url = row.get("llm_url")
    return f' <a class="llm-link" href="{esc(url)}?format=text">LLM prompt and reply</a>' if url else ""


def _agent_steps(row: dict) -> str:
    steps = row.get("agent_steps") or []
    if not steps:
        return ""
    items = "".join(f"<li>{esc(step)}</li>" for step in steps)
    return f'<details class="agent-steps"><summary>{len(steps)} agent steps</summary><ol>{items}</ol></details>'


def _speedup_cell(row: dict) -> str:
    """The ratio with three significant figures, marked when it is the run's best (confirmed) or
    a first timing whose confirmation did not hold up."""
    text = esc(ratio(row["speedup"]))
    if row.get("is_best"):
        text += ' <span class="mark best-mark">★ best (confirmed)</span>'
    elif row.get("not_confirmed"):
        text += ' <span class="mark unconfirmed-mark">not confirmed</span>'
    return text


def _no_attempts(finished: bool) -> str:
    if finished:
        return '<p id="no-attempts">This run ended without recording an attempt (see why above).</p>'
    return '<p id="no-attempts">No attempts yet.</p>'


def _notebook(view: NotebookView, baseline: str = "", finished: bool = False) -> str:
    parts = []
    if view.steering:
        parts.append(
            '<h3>Steering</h3><ul id="steering">'
            + "".join(f"<li>{esc(when)}: {esc(what)}</li>" for when, what in view.steering)
            + "</ul>"
        )
    for title, items in (
        ("Hints", view.hints),
        ("Lessons", view.lessons),
        ("Strategies that failed", view.failed_strategies),
    ):
        if items:
            parts.append(f"<h3>{title}</h3><ul>" + "".join(f"<li>{esc(item)}</li>" for item in items) + "</ul>")
    header = (
        f"<tr><th>iteration</th><th>candidate</th><th>strategy</th><th>status</th>"
        f"<th>speedup vs {esc(baseline or 'baseline')}</th>"
        f"<th>time per shape (ours vs {esc(baseline or 'baseline')})</th><th>GPU busy / timing</th><th>note</th></tr>"
    )
    body = "".join(
        "<tr>"
        f"<td>{esc(row['iteration'])}</td><td>{esc(row['index'])}</td><td>{esc(row['strategy'])}</td>"
        f"<td>{esc(row['status'])}</td>"
        f'<td class="speedup">{_speedup_cell(row)}</td>'
        f'<td class="times">{_times_cell(row.get("times") or [])}</td>'
        f'<td class="gpu">{esc(row.get("gpu") or "—")}</td>'
        f"<td>{esc(row['note'])}{_llm_link(row)}{_agent_steps(row)}</td></tr>"
        for row in view.rows
    )
    table = (
        f'<h3>Attempts, newest first</h3><div class="scroll"><table id="notebook-entries">{header}{body}</table></div>'
        if view.rows
        else _no_attempts(finished)
    )
    return "".join(parts) + table


def render_run_page(data: PageData) -> str:
    refresh = f'<meta http-equiv="refresh" content="{data.refresh_s}">' if data.refresh_s else ""
    if data.best_source is None:
        kernel = "<p>No kernel has passed the judge yet.</p>"
        diff = "<p>No kernel has passed the judge yet.</p>"
    else:
        lines = data.best_source.count("\n") + 1
        kernel = (
            f'<details id="best-kernel"><summary>{esc(data.best_label)} ({lines} lines): show the source</summary>'
            f'<pre id="best-source"><code>{esc(data.best_source)}</code></pre></details>'
        )
        if data.seed_source is None:
            diff = f"<p>{esc(data.seed_note)}</p>"
        else:
            diff = (
                f'<pre id="best-diff" class="diff scroll"><code>{diff_html(data.seed_source, data.best_source)}'
                "</code></pre>"
            )
    return (
        "<!doctype html>"
        '<html lang="en"><head><meta charset="utf-8">'
        f"{refresh}<title>Marathon run {esc(data.run_id)}</title><style>{STYLE}</style></head><body>"
        f'<h1>Run {esc(data.run_id)}</h1><section id="summary">{_facts(data)}</section>'
        f'<section id="curve"><h2>Speedup{esc(_versus(data))} over iterations</h2>'
        f"{speedup_svg(data.points, data.goal_target)}</section>"
        f'<section id="steering-notebook"><h2>Steering and notebook</h2>'
        f'<div id="notebook">{_notebook(data.notebook, data.baseline, data.refresh_s is None)}</div></section>'
        f'<section id="diff"><h2>Diff against the seed</h2>{diff}</section>'
        f'<section id="kernel"><h2>Best kernel</h2>{kernel}</section>'
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
