"""A self-contained HTML report of stored smoke runs. It opens with each host's latest verdict
and what failed in it; then per host each check's verdict history, its measured values as
sparklines, and charts of the gate values over time (dates on the x axis, a value axis, the
limit as a dashed line). Inline SVG only: no scripts, no external files."""

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
.latest{display:flex;flex-wrap:wrap;gap:1em;margin:1em 0}.card{border:1px solid #ddd;border-left:6px solid #2e7d32;
padding:.6em 1em;min-width:18em;max-width:40em}.card.bad{border-left-color:#c62828}.card h3{margin:.1em 0 .3em;font-size:1.05em}
.verdict{font-weight:700}.verdict.ok{color:#2e7d32}.verdict.bad{color:#c62828}.card ul{margin:.3em 0;padding-left:1.2em}
.charts{display:flex;flex-wrap:wrap;gap:.8em}.chart{border:1px solid #eee;padding:.3em}code{overflow-wrap:anywhere}
"""
CHART_W, CHART_H = 420, 190
CHART_PAD = {"left": 62, "right": 38, "top": 22, "bottom": 46}  # room for the last date label


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


def _date(run: dict[str, Any]) -> str:
    """`2026-11-29 09:15` from the run's start (or its id, `20261129T091500Z`)."""
    started = str(run.get("started") or "")
    if len(started) >= 16 and started[4] == "-":
        return started[:10] + " " + started[11:16]
    rid = str(run.get("run_id") or "")
    if len(rid) >= 13 and rid[8] == "T":
        return f"{rid[:4]}-{rid[4:6]}-{rid[6:8]} {rid[9:11]}:{rid[11:13]}"
    return rid


def _failures(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in (run.get("report") or {}).get("results", []) if r.get("verdict") in ("fail", "error")]


def latest_section(by_host: dict[str, list[dict[str, Any]]]) -> str:
    """One card per host: the latest run's verdict, date, and each failure with its reason."""
    cards = []
    for host, runs in sorted(by_host.items()):
        run = runs[-1]
        failures = _failures(run)
        error = (run.get("error") or {}).get("message")
        ok = bool(run.get("ok")) and not failures and not error
        verdict = "OK" if ok else ("ERROR" if error else "FAILED")
        items = "".join(
            f"<li><b>{escape(str(r.get('gate')))}</b> {escape(str(r.get('verdict')))}: {escape(str(r.get('reason') or ''))}</li>"
            for r in failures)
        if error:
            items += f"<li><b>run</b>: {escape(str(error))}</li>"
        partial = " (partial: the run broke before the other checks)" if run.get("report_partial") else ""
        results = (run.get("report") or {}).get("results", [])
        counts = ", ".join(f"{n} {v}" for v, n in sorted(_count(r.get("verdict") for r in results).items()))
        cards.append(
            f'<div class="card{"" if ok else " bad"}" data-host="{escape(host)}" data-verdict="{verdict}">'
            f'<h3>{escape(host)}: <span class="verdict {"ok" if ok else "bad"}">{verdict}</span></h3>'
            f'<div class="small">latest run {escape(str(run.get("run_id")))} · {escape(_date(run))} UTC · '
            f'{escape(str(run.get("level", "")))} via {escape(str(run.get("transport", "")))} · {escape(counts or "no checks")}'
            f'{escape(partial)}</div>'
            + (f"<ul>{items}</ul>" if items else "") + "</div>")
    return f'<section id="latest"><h2>Latest runs</h2><div class="latest">{"".join(cards)}</div></section>'


def _count(values: Iterable[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return out


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi == lo:
        return [lo]
    return [lo + (hi - lo) * i / n for i in range(n + 1)]


def metric_chart(title: str, dates: list[str], values: list[float | None], verdicts: list[str | None],
                 limit: float | None = None) -> str:
    """An SVG line chart of one measured value over runs: x = run dates, y = value axis with
    ticks, points coloured by verdict, the limit as a dashed red line."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if not points:
        return ""
    numbers = [v for _, v in points] + ([limit] if limit is not None else [])
    lo, hi = min(numbers), max(numbers)
    if lo == hi:
        lo, hi = lo - (abs(lo) * 0.1 or 1.0), hi + (abs(hi) * 0.1 or 1.0)
    pad = (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad
    left, right, top, bottom = CHART_PAD["left"], CHART_PAD["right"], CHART_PAD["top"], CHART_PAD["bottom"]
    plot_w, plot_h = CHART_W - left - right, CHART_H - top - bottom
    n = len(values)

    def x(i: int) -> float:
        return round(left + (plot_w / 2 if n == 1 else i * plot_w / (n - 1)), 1)

    def y(v: float) -> float:
        return round(top + plot_h - (v - lo) / (hi - lo) * plot_h, 1)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="metric-chart" width="{CHART_W}" height="{CHART_H}" '
             f'viewBox="0 0 {CHART_W} {CHART_H}" role="img" aria-label="{escape(title)}">',
             f"<title>{escape(title)}</title>",
             f'<text x="{left}" y="14" font-size="12" font-weight="600">{escape(title)}</text>',
             f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#555"/>',
             f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#555"/>']
    for tick in _ticks(lo, hi):
        ty = y(tick)
        parts.append(f'<line x1="{left - 4}" y1="{ty}" x2="{left + plot_w}" y2="{ty}" stroke="#eee"/>'
                     f'<text class="ytick" x="{left - 6}" y="{ty + 4}" font-size="10" text-anchor="end">{escape(f"{tick:.3g}")}</text>')
    step = max(1, (n + 5) // 6)  # at most ~6 date labels
    for i in range(0, n, step):
        parts.append(f'<line x1="{x(i)}" y1="{top + plot_h}" x2="{x(i)}" y2="{top + plot_h + 4}" stroke="#555"/>'
                     f'<text class="xtick" x="{x(i)}" y="{top + plot_h + 16}" font-size="10" text-anchor="middle">'
                     f'{escape(dates[i][:10])}</text>'
                     f'<text x="{x(i)}" y="{top + plot_h + 28}" font-size="9" fill="#777" text-anchor="middle">'
                     f'{escape(dates[i][11:16])}</text>')
    if limit is not None:
        ly = y(limit)
        parts.append(f'<line class="limit" x1="{left}" y1="{ly}" x2="{left + plot_w}" y2="{ly}" stroke="#c62828" '
                     f'stroke-dasharray="6 4" stroke-width="1.5"/>'
                     f'<text x="{left + plot_w}" y="{ly - 4}" font-size="10" fill="#c62828" text-anchor="end">'
                     f'limit {escape(f"{limit:.4g}")}</text>')
    path = " ".join(f"{x(i)},{y(v)}" for i, v in points)
    parts.append(f'<polyline fill="none" stroke="#1565c0" stroke-width="1.5" points="{path}"/>')
    for i, v in points:
        colour = VERDICT_COLOURS.get(verdicts[i], "#1565c0")
        parts.append(f'<circle cx="{x(i)}" cy="{y(v)}" r="3.5" fill="{colour}">'
                     f"<title>{escape(dates[i])}: {escape(f'{v:.6g}')} ({escape(str(verdicts[i]))})</title></circle>")
    parts.append(f'<text x="{left + plot_w / 2}" y="{CHART_H - 4}" font-size="10" fill="#555" text-anchor="middle">'
                 f"run date (UTC)</text></svg>")
    return "".join(parts)


def _charts(runs: list[dict[str, Any]], gates: dict[str, list[dict[str, Any] | None]], order: list[str]) -> str:
    """One chart per numeric gate value that has a threshold or more than one point."""
    dates = [_date(r) for r in runs]
    charts = []
    for gate in order:
        history = gates[gate]
        latest = next((r for r in reversed(history) if r is not None), {})
        keys = sorted({k for r in history if r for k in (r.get("values") or {})})
        for key in keys:
            series = [numeric_value(((r or {}).get("values") or {}).get(key)) for r in history]
            limit = numeric_value((latest.get("thresholds") or {}).get(key))
            if sum(v is not None for v in series) < (1 if limit is not None else 2):
                continue
            chart = metric_chart(f"{gate} {key}", dates, series, [(r or {}).get("verdict") for r in history], limit)
            if chart:
                charts.append(f'<div class="chart">{chart}</div>')
    if not charts:
        return ""
    return f'<h3>Gate values over time</h3><div class="charts">{"".join(charts)}</div>'


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
        f"<tr><td>{escape(str(r.get('run_id')))}</td><td>{escape(_date(r))}</td><td>{escape(str(r.get('level')))}</td>"
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
        f"{_charts(runs, gates, order)}"
        "<details><summary>runs</summary><table><tr><th>run</th><th>date (UTC)</th><th>level</th><th>result</th><th>error</th>"
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
    for host in by_host:
        by_host[host].sort(key=lambda r: str(r.get("run_id")))
    sections = "".join(_host_section(host, items) for host, items in sorted(by_host.items()))
    if sections:
        sections = latest_section(by_host) + sections
    if not sections:
        sections = "<p>No stored smoke runs yet: run <code>porter smoke --host local</code>.</p>"
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1>{sections}</body></html>\n"
    )
