"""A self-contained HTML report of stored smoke runs: per host, each check's verdict history
and its measured values over time as inline SVG sparklines. No scripts, no external files."""

from __future__ import annotations

import math
from collections import defaultdict
from html import escape
from typing import Any, Iterable

from porter.smoke.compare import numeric_value

VERDICT_COLOURS = {"pass": "#2e7d32", "skip": "#9e9e9e", "fail": "#c62828", "error": "#6a1b9a", None: "#ffffff"}
CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .6em;border-bottom:1px solid #eee;text-align:left;
font-size:.9em;vertical-align:middle}th{background:#f5f5f5}.pass{color:#2e7d32}.fail,.error{color:#c62828}
.skip{color:#777}.num{font-family:ui-monospace,monospace}.small{color:#666;font-size:.8em}
"""


def sparkline(values: list[float | None], width: int = 140, height: int = 28) -> str:
    """An inline SVG polyline of the values (gaps for missing points), min/max in the tooltip."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if not points:
        return ""
    lo = min(v for _, v in points)
    hi = max(v for _, v in points)
    span = hi - lo
    step = width / max(len(values) - 1, 1)

    def y(v: float) -> float:
        return height / 2 if span == 0 else height - 3 - (v - lo) / span * (height - 6)

    coords = [(round(i * step if len(values) > 1 else width / 2, 1), round(y(v), 1)) for i, v in points]
    path = " ".join(f"{x},{y}" for x, y in coords)
    last_x, last_y = coords[-1]
    title = escape(f"min {lo:.4g}, max {hi:.4g}, last {points[-1][1]:.4g} ({len(points)} runs)")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        f"<title>{title}</title>"
        f'<polyline fill="none" stroke="#1565c0" stroke-width="1.5" points="{path}"/>'
        f'<circle cx="{last_x}" cy="{last_y}" r="2.5" fill="#1565c0"/></svg>'
    )


def verdict_strip(verdicts: list[str | None], cell: int = 10) -> str:
    rects = "".join(
        f'<rect x="{i * (cell + 2)}" y="0" width="{cell}" height="{cell}" fill="{VERDICT_COLOURS.get(v, "#ffffff")}"'
        f' stroke="#ccc"><title>{escape(str(v or "absent"))}</title></rect>'
        for i, v in enumerate(verdicts)
    )
    width = max(len(verdicts) * (cell + 2), cell)
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{cell}">{rects}</svg>'


def _host_section(host: str, runs: list[dict[str, Any]]) -> str:
    gates: dict[str, list[dict[str, Any] | None]] = {}
    order: list[str] = []
    for index, run in enumerate(runs):
        for result in (run.get("report") or {}).get("results", []):
            gate = result.get("gate")
            if gate not in gates:
                gates[gate] = [None] * len(runs)
                order.append(gate)
            gates[gate][index] = result
    rows = []
    for gate in order:
        history = gates[gate]
        latest = next((r for r in reversed(history) if r is not None), {})
        metrics: dict[str, list[float | None]] = defaultdict(lambda: [None] * len(runs))
        for index, result in enumerate(history):
            for key, value in ((result or {}).get("values") or {}).items():
                number = numeric_value(value)
                if number is not None and math.isfinite(number):
                    metrics[key][index] = number
        metric_cells = "".join(
            f'<div><span class="small">{escape(key)}</span> {sparkline(series)} '
            f'<span class="num">{escape(_fmt(next((v for v in reversed(series) if v is not None), None)))}</span>'
            f'{_threshold(latest, key)}</div>'
            for key, series in sorted(metrics.items())
        )
        verdict = latest.get("verdict", "")
        rows.append(
            f"<tr><td>{escape(str(latest.get('level', '')))}</td><td>{escape(str(gate))}</td>"
            f'<td class="{escape(verdict)}">{escape(verdict)}</td>'
            f"<td>{verdict_strip([(r or {}).get('verdict') for r in history])}</td><td>{metric_cells}</td>"
            f"<td class=\"small\">{escape(str(latest.get('reason', '')))}</td></tr>"
        )
    run_rows = "".join(
        f"<tr><td>{escape(str(r.get('run_id')))}</td><td>{escape(str(r.get('level')))}</td>"
        f"<td class=\"{'pass' if r.get('ok') else 'fail'}\">{'ok' if r.get('ok') else 'failed'}</td>"
        f"<td class=\"small\">{escape(str((r.get('error') or {}).get('message', '')))}</td>"
        f"<td class=\"small\">{escape(', '.join(_stack_lines(r.get('stack') or {})))}</td></tr>"
        for r in reversed(runs)
    )
    return (
        f"<h2>{escape(host)} <span class=\"small\">{len(runs)} run(s), latest {escape(str(runs[-1].get('run_id')))}"
        f" via {escape(str(runs[-1].get('transport', '')))}</span></h2>"
        "<table><tr><th>level</th><th>check</th><th>latest</th><th>history (old → new)</th>"
        f"<th>measured values</th><th>reason</th></tr>{''.join(rows)}</table>"
        "<details><summary>runs</summary><table><tr><th>run</th><th>level</th><th>result</th><th>error</th>"
        f"<th>stack</th></tr>{run_rows}</table></details>"
    )


def _stack_lines(stack: dict[str, Any]) -> list[str]:
    from porter.stack import summary

    try:
        return summary(stack)
    except (AttributeError, TypeError):
        return []


def _threshold(result: dict[str, Any], key: str) -> str:
    bound = (result.get("thresholds") or {}).get(key)
    return f' <span class="small">(threshold {escape(_fmt(bound))})</span>' if bound is not None else ""


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def render_html(runs: Iterable[dict[str, Any]], title: str = "porter smoke report") -> str:
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        by_host[str(run.get("host"))].append(run)
    sections = "".join(
        _host_section(host, sorted(items, key=lambda r: str(r.get("run_id")))) for host, items in sorted(by_host.items())
    )
    if not sections:
        sections = "<p>No stored smoke runs yet: run <code>porter smoke --host local</code>.</p>"
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1>{sections}</body></html>\n"
    )
