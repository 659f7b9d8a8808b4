"""The HTML reports in a real headless browser (Debian's chromium): the smoke report opens with
the latest verdict and its failures and draws gate charts with axes, dates and the limit; the
upgrade report has a table of contents, breaking findings first, and no horizontal overflow at
2200 px (nor at 1280 px). Screenshots go to $PORTER_SCREENSHOT_DIR when it is set (CI keeps them)."""

from __future__ import annotations

import html as htmllib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.formats.test_ci_formats import invoke, upgrade_args

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--disable-dev-shm-usage"]

# Measures the laid-out page and writes the figures into the DOM, which --dump-dom returns.
PROBE = """<script>
window.addEventListener('load', function () {
  var doc = document.documentElement, out = {};
  out.scrollWidth = doc.scrollWidth; out.innerWidth = window.innerWidth;
  var blocks = Array.prototype.slice.call(document.querySelectorAll('h1, h2, h3, section, nav, table, .card'));
  out.order = blocks.map(function (e) { return {tag: e.tagName, id: e.id || '', text: (e.textContent || '').slice(0, 80),
    top: Math.round(e.getBoundingClientRect().top)}; });
  out.charts = Array.prototype.slice.call(document.querySelectorAll('svg.metric-chart')).map(function (svg) {
    var r = svg.getBoundingClientRect();
    return {w: Math.round(r.width), h: Math.round(r.height), limit: svg.querySelectorAll('line.limit').length,
            xticks: Array.prototype.map.call(svg.querySelectorAll('text.xtick'), function (t) { return t.textContent; }),
            yticks: svg.querySelectorAll('text.ytick').length, points: svg.querySelectorAll('circle').length}; });
  out.overflowing = Array.prototype.slice.call(document.querySelectorAll('td, th')).filter(function (c) {
    return c.scrollWidth > c.clientWidth + 1; }).length;
  out.tocLinks = Array.prototype.map.call(document.querySelectorAll('nav.toc a'), function (a) {
    return [a.getAttribute('href'), !!document.querySelector(a.getAttribute('href'))]; });
  var pre = document.createElement('pre'); pre.id = 'porter-probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "HOME": str(tmp_path)})


def measure(tmp_path: Path, page: str, width: int, height: int = 1400) -> dict:
    probe = tmp_path / f"probe-{width}.html"
    probe.write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    done = _chromium(tmp_path, f"--window-size={width},{height}", "--virtual-time-budget=3000", "--dump-dom",
                     probe.as_uri())
    start = done.stdout.find('<pre id="porter-probe">')
    assert start >= 0, done.stderr[-2000:]
    body = done.stdout[start + len('<pre id="porter-probe">'):].split("</pre>", 1)[0]
    return json.loads(htmllib.unescape(body))


def screenshot(tmp_path: Path, page_path: Path, name: str, width: int, height: int) -> Path:
    out = tmp_path / f"{name}.png"
    done = _chromium(tmp_path, f"--window-size={width},{height}", f"--screenshot={out}", page_path.as_uri())
    assert out.is_file() and out.stat().st_size > 10_000, done.stderr[-2000:]
    keep = os.environ.get("PORTER_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(keep) / out.name)
    return out


def _result(gate, verdict, level="L3", reason="", thresholds=None, **values):
    return {"gate": gate, "name": gate, "level": level, "verdict": verdict, "values": values,
            "thresholds": thresholds or {}, "duration_s": 0.5, "reason": reason}


def _run(host, run_id, results, error=None):
    stamp = f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}T{run_id[9:11]}:{run_id[11:13]}:{run_id[13:15]}Z"
    ok = error is None and all(r["verdict"] in ("pass", "skip") for r in results)
    return {"schema": "porter.smoke-run/1", "host": host, "run_id": run_id, "started": stamp, "transport": "ssh a3",
            "level": "L3", "ok": ok, "exit_code": 0 if ok else 1, "stack": {},
            "report": {"schema": "vime.smoke/1", "level": "L3", "results": results}, "error": error}


def test_smoke_report_opens_with_the_latest_verdict_and_charts(tmp_path):
    from porter.smoke.report import render_html

    runs = [_run("a3", f"202611{day:02d}T0915{day:02d}Z",
                 [_result("G1", "pass" if day < 29 else "fail", thresholds={"max_abs_diff": 0.05},
                          reason="" if day < 29 else "max_abs_diff 0.31 > 0.05", max_abs_diff=0.001 * day if day < 29 else 0.31),
                  _result("G4", "pass", thresholds={"rel_err": 1e-3}, rel_err=2e-4 + day * 1e-6)])
            for day in range(24, 30)]
    runs.append(_run("local", "20261129T100000Z", [_result("L2.matmul", "pass", level="L2", max_rel_err=3e-7)]))
    page = render_html(runs)
    path = tmp_path / "smoke.html"
    path.write_text(page, encoding="utf-8")
    found = measure(tmp_path, page, 1280)
    order = found["order"]
    first_h2 = next(b for b in order if b["tag"] == "H2")
    assert first_h2["text"] == "Latest runs"
    cards = [b for b in order if "card" in b["tag"].lower() or b["tag"] == "DIV"]
    latest_top = next(b["top"] for b in order if b["id"] == "latest")
    first_table_top = min(b["top"] for b in order if b["tag"] == "TABLE")
    assert latest_top < first_table_top  # the verdict comes before any table
    assert any("a3: FAILED" in b["text"] for b in order) and any("local: OK" in b["text"] for b in order)
    assert cards is not None
    charts = found["charts"]
    g1 = charts[0]
    assert g1["w"] > 300 and g1["h"] > 100 and g1["limit"] == 1 and g1["yticks"] >= 3 and g1["points"] == 6
    assert g1["xticks"][0] == "2026-11-24"
    assert found["scrollWidth"] <= found["innerWidth"]
    assert screenshot(tmp_path, path, "smoke-report", 1280, 900)


def test_upgrade_report_toc_breaking_first_no_overflow(upgrade_project, trees, tmp_path):
    out = tmp_path / "upgrade.html"
    result = invoke(*upgrade_args(trees), "--html", str(out))
    assert result.exit_code == 1, result.output
    page = out.read_text(encoding="utf-8")
    for width in (2200, 1280):
        found = measure(tmp_path, page, width)
        assert found["scrollWidth"] <= found["innerWidth"], (width, found["scrollWidth"])
        assert found["overflowing"] == 0, width
    links = found["tocLinks"]
    assert links and all(ok for _, ok in links)
    headings = [b["text"] for b in found["order"] if b["tag"] == "H2"]
    families = [h.split(" ")[0] for h in headings if "·" in h]
    # breaking families first: every family heading before the first risky-only one has a breaking row
    doc = json.loads(invoke(*upgrade_args(trees), "--json").stdout)["analysis"]
    breaking = {r["family"] for r in doc["records"] if r["severity"] == "breaking"}
    flags = [f in breaking for f in families]
    assert flags == sorted(flags, reverse=True) and flags[0]
    nav_top = next(b["top"] for b in found["order"] if b["tag"] == "NAV")
    assert nav_top < min(b["top"] for b in found["order"] if b["tag"] == "H2" and "·" in b["text"])
    assert screenshot(tmp_path, out, "upgrade-report-2200", 2200, 1400)

