"""Payloads (the `--json` schemas) and rich renderings for diagnose and kb commands.

Every string that came from a trace passes through `porter.redact` here, so neither the JSON
nor the tables can print a secret that was in the input.
"""

from __future__ import annotations


from porter.kb.matcher import Diagnosis, Match
from porter.kb.schema import KBEntry
from porter.redact import redact_text

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import Any

MAX_BLOCKS_SHOWN = 6
MAX_BLOCK_LINES_SHOWN = 40


def _r(text: str) -> str:
    return redact_text(text) if text else text


def entry_summary(entry: KBEntry) -> dict[str, Any]:
    return {"id": entry.id, "title": entry.title, "layer": entry.layer, "kind": entry.kind, "severity": entry.severity, "path": entry.path}


def entry_detail(entry: KBEntry) -> dict[str, Any]:
    d = entry.to_dict()
    d["signatures"] = {"match": entry.match, "items": [
        {s.kind: s.pattern, "weight": s.weight, **({"required": s.required} if entry.match == "all" else {}),
         **({"form": s.form, "spec": s.spec} if s.spec else {})} for s in entry.signatures
    ]}
    d.pop("match", None)
    return d


def match_payload(rank: int, m: Match, explain: bool) -> dict[str, Any]:
    from porter.kb.families import capture_names, fill

    e = m.entry
    names = capture_names(e.signatures)
    caps = {k: _r(v) for k, v in m.captures.items()}

    def f(text: str) -> str:
        return fill(text, caps, names)

    out: dict[str, Any] = {
        "rank": rank,
        "id": e.id,
        "title": f(e.title),
        "layer": e.layer,
        "kind": e.kind,
        "severity": e.severity,
        "confidence": m.confidence,
        "method": m.method,
        "aliases": list(e.aliases),
        "matched_lines": [{**ml.to_dict(), "text": _r(ml.text)} for ml in m.lines],
        "captures": caps,
        "root_cause": f(e.root_cause),
        "fix": [f(step) for step in e.fix],
        "verify": f(e.verify),
        "discriminators": list(e.discriminators),
        "related": list(e.related),
        "references": list(e.references),
        "version_notes": list(m.version_notes),
    }
    if explain:
        out["explain"] = m.explain
    return out


def near_payload(m: Match, explain: bool) -> dict[str, Any]:
    out = {"id": m.entry.id, "title": m.entry.title, "layer": m.entry.layer, "confidence": m.confidence, "method": m.method,
           "matched_lines": [{**ml.to_dict(), "text": _r(ml.text)} for ml in m.lines[:3]],
           "version_notes": list(m.version_notes)}  # why a strong signature hit was demoted below the threshold
    if m.explain.get("advice"):
        out["advice"] = m.explain["advice"]  # a warning entry on a log that shows no failure
    if explain:
        out["explain"] = m.explain
    return out


def signals_payload(diag: Diagnosis, full: bool) -> dict[str, Any]:
    s = diag.signals.to_dict()
    for exc in s["exceptions"]:
        exc["message"] = _r(exc["message"])
    blocks = s["blocks"] if full else s["blocks"][-2:]
    s["blocks"] = [{**b, "lines": [_r(line) for line in b["lines"][:MAX_BLOCK_LINES_SHOWN]]} for b in blocks[-MAX_BLOCKS_SHOWN:]]
    return s


def diagnose_payload(diag: Diagnosis, source: str, kb_info: dict[str, Any], explain: bool = False,
                     codes: list[dict] | None = None) -> dict[str, Any]:
    """`codes`: the trace's error codes decoded from knowledge/codes (porter.kb.codes.decode_signals)."""
    from porter.kb.causal import first_line, triage

    codes = [{**c, "text": _r(c["text"])} if "text" in c else c for c in (codes or [])]
    if diag.top is not None:
        line = first_line(diag.top)
        text = next((ml.text for ml in diag.top.lines if ml.line == line), "")
        causal = {"line": line if line < (1 << 30) else 0, "text": _r(text)}
        tri = None
    else:
        t = triage(diag.signals, codes).to_dict()
        t["causal_line"]["text"] = _r(t["causal_line"]["text"])
        t["next_commands"] = [_r(c) for c in t["next_commands"]]
        causal, tri = t["causal_line"], t
    return {
        "input": {"source": source, "lines": diag.signals.lines},
        "status": diag.status,
        "causal_line": causal,
        "triage": tri,
        "codes": codes,
        "matches": [match_payload(i, m, explain) for i, m in enumerate(diag.matches, 1)],
        "close": diag.close,
        "near_misses": [near_payload(m, explain) for m in diag.near_misses],
        "signals": signals_payload(diag, full=diag.status == "unknown"),
        "kb": kb_info,
    }


# -- one layout of a diagnosis, drawn by rich and by porter.plain ---------------------------------
# `_diagnosis_layout` says once what a diagnosis shows: lines of parts, and panels. A part is a
# str the layout wrote (never markup), `_Esc` (text from the trace or the KB: rich escapes it),
# `_Raw` (a number or identifier rich prints as it is: the plain back-end declines one holding
# a bracket, which rich would read as markup) or `_Style` (a rich style around parts). rich
# draws the parts as markup (`render_diagnosis`); porter.plain draws their text with rich's exact
# bytes for a non-terminal console (`plain_diagnosis`).
class _Esc:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class _Raw:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Style:
    __slots__ = ("style", "parts")

    def __init__(self, style: str, *parts: Any) -> None:
        self.style, self.parts = style, parts


def _bold(*parts: Any) -> _Style:
    return _Style("bold", *parts)


def _diagnosis_layout(payload: dict[str, Any], explain: bool) -> list[tuple]:
    """("line", parts, soft_wrap) and ("panel", title parts, [body line parts]) in print order."""
    out: list[tuple] = []

    def line(*parts: Any, soft_wrap: bool = False) -> None:
        out.append(("line", parts, soft_wrap))

    source, lines = _Esc(payload["input"]["source"]), _Raw(payload["input"]["lines"])
    causal = payload.get("causal_line") or {}
    if causal.get("text") and payload["status"] != "match":  # a match's panel lists its lines earliest first
        line(_bold("causal line"), " ", _Raw(causal["line"]), ": ", _Esc(causal["text"][:300]), soft_wrap=True)
    decoded = [c for c in payload.get("codes") or [] if c.get("meaning")]
    if decoded:
        line(_bold("error codes"), ":")
        for c in decoded[:8]:
            name = f" {c['name']}" if c.get("name") else ""
            how = () if c.get("exact") else (" ", _Style("dim", "(by range)"))
            line("  ", _Style("cyan", _Esc(c["code"])), _Esc(name), " (line ", _Raw(c["line"]), "): ", _Esc(c["meaning"]), *how,
                 soft_wrap=True)
            for step in c.get("first_steps", [])[:2]:
                line("      - ", _Esc(step), soft_wrap=True)
    if payload["status"] == "match":
        matches = payload["matches"]
        line(_Style("bold green", "diagnosis"), " for ", source, " (", lines, " lines): ", str(len(matches)), " match(es)")
        for m in matches:
            # confidence before the title: a long title is cut at the terminal width, the score must survive
            head = ("#", _Raw(m["rank"]), " ", _bold(_Raw(m["id"])), f" confidence {m['confidence']:.2f} · ", _Esc(m["title"]),
                    "  ", _Style("dim", "(", _Raw(m["layer"]), ", ", _Raw(m["method"]), ")"))
            body: list[tuple] = []
            shown: set[tuple[int, str]] = set()  # several signatures may hit the same line: show it once
            for ml in m["matched_lines"]:
                if (ml["line"], ml["text"]) in shown or len(shown) >= 6:
                    continue
                shown.add((ml["line"], ml["text"]))
                where = ("line ", _Raw(ml["line"])) if ml["line"] else ("fuzzy",)
                body.append((_Style("cyan", *where), ": ", _Esc(ml["text"][:300])))
            if m["rank"] == 1 or payload["close"]:
                body.append(("\n", _bold("cause"), ": ", _Esc(m["root_cause"])))
                body.append((_bold("fix"), ":"))
                body.extend((f"  {i}. ", _Esc(step)) for i, step in enumerate(m["fix"], 1))
                body.append((_bold("verify"), ": ", _Esc(m["verify"])))
                if m["aliases"]:
                    body.append((_Style("dim", "aliases: ", _Esc(", ".join(m["aliases"]))),))
            for note in m["version_notes"]:
                body.append((_Style("yellow", "version"), ": ", _Esc(note)))
            if explain and "explain" in m:
                body.append((_Style("dim", "score: ", _Esc(str(m["explain"]))),))
            out.append(("panel", head, body))
        if payload["close"]:
            line(_Style("yellow", "the top matches are close"), "; tell them apart with:")
            for m in matches[:2]:
                for d in m["discriminators"] or ["(no discriminator recorded)"]:
                    line("  ", _bold(_Raw(m["id"])), ": ", _Esc(d))
        return out

    line(_Style("bold yellow", "unknown"), ": no knowledge-base entry matches ", source, " (", lines, " lines)")
    tri = payload.get("triage") or {}
    if tri:
        reason = ("; ", _Esc(tri["reason"])) if tri["reason"] else ()
        line(_bold("triage"), ": layer ", _Esc(tri["layer"] or "?"), "; failing package ", _Esc(tri["failing_package"] or "?"), *reason,
             soft_wrap=True)
        for cmd in tri["next_commands"]:
            line("  next: ", _bold(_Esc(cmd)), soft_wrap=True)
    sig = payload["signals"]
    if sig["exceptions"]:
        line(_bold("exception chain"), ":")
        for exc in sig["exceptions"][-8:]:
            line("  line ", _Raw(exc["line"]), ": ", _Esc(exc["type"]), ": ", _Esc(exc["message"][:300]))
    if sig["codes"] and not payload.get("codes"):
        line(_bold("error codes"), ": ", _Esc(", ".join(f"{c['code']} ({c['family']})" for c in sig["codes"][:12])))
    if sig["packages"]:
        line(_bold("frame packages"), ": ", _Esc(", ".join(f"{p['package']}×{p['frames']}" for p in sig["packages"][:8])))
    if sig["layer_hints"]:
        line(_bold("layer hints"), ": ", _Raw(", ".join(sig["layer_hints"])))
    if not (sig["exceptions"] or sig["codes"] or sig["blocks"]):
        line(_Style("dim", "no error lines were found in the input"))
    elif sig["blocks"]:
        last = sig["blocks"][-1]
        line(_bold("last error block"), " (lines ", _Raw(last["start_line"]), "-", _Raw(last["end_line"]), "):")
        for text in last["lines"][-15:]:
            line("  ", _Esc(text[:300]))
    if payload["near_misses"]:
        line(_bold("near misses"), " (below the match threshold):")
        for m in payload["near_misses"]:
            line(f"  {m['confidence']:.2f}  ", _Raw(m["id"]), "  ", _Esc(m["title"]), "  ", _Style("dim", "(", _Raw(m["method"]), ")"))
            for note in m.get("version_notes", []):
                line("        ", _Style("yellow", "version"), ": ", _Esc(note))
            if m.get("advice"):
                line("        ", _Style("cyan", "advice"), ": ", _Esc(m["advice"]))
            if explain and "explain" in m:
                line("        ", _Style("dim", "score: ", _Esc(str(m["explain"]))))
    return out


def _markup(parts) -> str:
    """The parts as rich markup."""
    from rich.markup import escape

    out = []
    for part in parts:
        if type(part) is str:
            out.append(part)
        elif type(part) is _Esc:
            out.append(escape(part.text))
        elif type(part) is _Raw:
            out.append(str(part.value))
        else:
            out.append(f"[{part.style}]{_markup(part.parts)}[/]")
    return "".join(out)


def _plain(parts) -> str:
    """The parts' text, as rich prints their markup; Unrenderable for a raw value with a bracket."""
    from porter.plain import Unrenderable

    out = []
    for part in parts:
        if type(part) is str:
            out.append(part)
        elif type(part) is _Esc:
            out.append(part.text)
        elif type(part) is _Raw:
            text = str(part.value)
            if "[" in text:
                raise Unrenderable(text[:40])
            out.append(text)
        else:
            out.append(_plain(part.parts))
    return "".join(out)


def render_diagnosis(console, payload: dict[str, Any], explain: bool = False) -> None:
    from rich.panel import Panel

    for item in _diagnosis_layout(payload, explain):
        if item[0] == "panel":
            body = "\n".join(_markup(parts) for parts in item[2])
            console.print(Panel(body, title=_markup(item[1]), title_align="left", expand=True))
        elif item[2]:
            console.print(_markup(item[1]), soft_wrap=True)
        else:
            console.print(_markup(item[1]))


def plain_diagnosis(payload: dict[str, Any], explain: bool, width: int) -> str | None:
    """What `render_diagnosis` prints through a non-terminal rich Console of `width` columns,
    laid out by porter.plain; None when it cannot promise the same bytes (rich renders then)."""
    from porter.plain import PlainPage, Unrenderable

    try:
        page = PlainPage(width)
        for item in _diagnosis_layout(payload, explain):
            if item[0] == "panel":
                page.panel(_plain(item[1]), "\n".join(_plain(parts) for parts in item[2]))
            else:
                page.print(_plain(item[1]), soft_wrap=item[2])
        return page.text()
    except Unrenderable:
        return None


def render_entry(console, entry: KBEntry) -> None:
    from rich.markup import escape

    console.print(f"[bold]{entry.id}[/] {escape(entry.title)}  [dim]{entry.layer} · {entry.kind} · {entry.severity} · {escape(entry.path)}[/]")
    console.print(f"\n[bold]signatures[/] (match: {entry.match})")
    for s in entry.signatures:
        req = "" if entry.match == "any" else (" required" if s.required else " optional")
        console.print(f"  {(s.form or s.kind):9} w={s.weight:.2f}{req}  {escape(s.shown)}")
    sections = [("symptoms", entry.symptoms), ("fix", entry.fix), ("discriminators", entry.discriminators),
                ("related", entry.related), ("references", entry.references), ("aliases", entry.aliases), ("examples", entry.examples)]
    if entry.applies_to:
        console.print("\n[bold]applies to[/]: " + ", ".join(f"{v.package} {v.versions}" for v in entry.applies_to))
    console.print(f"\n[bold]root cause[/]\n  {escape(entry.root_cause)}")
    for name, items in sections:
        if items:
            console.print(f"\n[bold]{name}[/]")
            for i, item in enumerate(items, 1):
                console.print(f"  {i if name == 'fix' else '-'}{'.' if name == 'fix' else ''} {escape(item)}")
    console.print(f"\n[bold]verify[/]\n  {escape(entry.verify)}")
