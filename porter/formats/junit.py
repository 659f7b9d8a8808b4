"""JUnit XML for `porter smoke`: one testsuite per run, one testcase per check and gate, the
measured values and thresholds as testcase properties, failures and errors with their reason.

The element and attribute set is the common subset Jenkins, GitLab and GitHub test reporters
read (the Ant/Jenkins JUnit schema). Input is the `porter.smoke/1` JSON document."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

from porter.errors import UsageError


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return "" if value is None else str(value)


def _xml_safe(text: str) -> str:
    """XML 1.0 refuses most control characters; host output may carry them."""
    return "".join(ch if ch in "\t\n\r" or ord(ch) >= 0x20 else "\ufffd" for ch in text)


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: Any) -> ET.Element:
    node = ET.SubElement(parent, tag, {k: _xml_safe(_text(v)) for k, v in attrs.items() if v is not None})
    if text:
        node.text = _xml_safe(text)
    return node


def _testcase(suite: ET.Element, result: dict[str, Any]) -> str:
    level = str(result.get("level", ""))
    gate = str(result.get("gate", ""))
    name = f"{gate} {result.get('name')}" if result.get("name") and result.get("name") != gate else gate
    case = _sub(suite, "testcase", name=name, classname=f"vime.smoke.{level}" if level else "vime.smoke",
                time=f"{float(result.get('duration_s') or 0.0):.3f}")
    values = result.get("values") or {}
    thresholds = result.get("thresholds") or {}
    props = _sub(case, "properties")
    _sub(props, "property", name="gate", value=gate)
    _sub(props, "property", name="device", value=result.get("device"))
    _sub(props, "property", name="dtype", value=result.get("dtype"))
    for key, value in values.items():
        _sub(props, "property", name=f"value.{key}", value=value)
    for key, value in thresholds.items():
        _sub(props, "property", name=f"threshold.{key}", value=value)
    verdict = str(result.get("verdict", ""))
    reason = str(result.get("reason") or "")
    measured = "; ".join(f"{k}={_text(v)}" + (f" (limit {_text(thresholds[k])})" if k in thresholds else "")
                         for k, v in values.items() if not isinstance(v, (dict, list)))
    if verdict == "fail":
        _sub(case, "failure", "\n".join(x for x in (measured, result.get("traceback") or "") if x),
             message=reason or f"{gate} failed", type="fail")
    elif verdict == "error":
        _sub(case, "error", result.get("traceback") or reason, message=reason or f"{gate} raised", type="error")
    elif verdict == "skip":
        _sub(case, "skipped", message=reason or "skipped")
    if measured:
        _sub(case, "system-out", measured)
    return verdict


def smoke_junit(doc: dict[str, Any]) -> str:
    run = doc.get("run")
    if not isinstance(run, dict):
        raise UsageError("--format junit needs a smoke run: pass --host NAME",
                         hint="`--compare` and `--report` alone make no test results; use --format json for them")
    report = run.get("report") or {}
    results = list(report.get("results") or [])
    root = ET.Element("testsuites", name="porter smoke")
    suite = _sub(root, "testsuite", name=f"porter smoke {run.get('host')} {run.get('level')}",
                 timestamp=str(run.get("started", "")).rstrip("Z") or None, hostname=run.get("host"))
    props = _sub(suite, "properties")
    for key in ("host", "run_id", "transport", "level", "exit_code", "run_dir"):
        if run.get(key) is not None:
            _sub(props, "property", name=key, value=run.get(key))
    from porter.stack import summary

    try:
        pins = summary(run.get("stack") or {})
    except (AttributeError, TypeError):
        pins = []
    for line in pins:
        _sub(props, "property", name="stack", value=line)
    verdicts = [_testcase(suite, r) for r in results]
    error = run.get("error")
    if isinstance(error, dict):
        # The run itself broke (timeout, unreachable host, killed): one testcase says so, next to
        # the checks that finished before it.
        case = _sub(suite, "testcase", name="run", classname="porter.smoke",
                    time=f"{float((run.get('timings') or {}).get('run_s') or 0.0):.3f}")
        _sub(case, "error", "\n".join(x for x in (error.get("message"), error.get("hint")) if x),
             message=error.get("message"), type=str((error.get("details") or {}).get("failure") or error.get("kind") or "error"))
        verdicts.append("error")
    total_time = float(report.get("duration_s") or sum(float(r.get("duration_s") or 0) for r in results))
    suite.set("tests", str(len(verdicts)))
    suite.set("failures", str(verdicts.count("fail")))
    suite.set("errors", str(verdicts.count("error")))
    suite.set("skipped", str(verdicts.count("skip")))
    suite.set("time", f"{total_time:.3f}")
    for key in ("tests", "failures", "errors", "skipped", "time"):
        root.set(key, suite.get(key) or "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
