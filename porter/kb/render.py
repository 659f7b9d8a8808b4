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


# -- rich rendering ------------------------------------------------------------------------------
def render_diagnosis(console, payload: dict[str, Any], explain: bool = False) -> None:
    from rich.markup import escape
    from rich.panel import Panel

    src = escape(payload["input"]["source"])
    causal = payload.get("causal_line") or {}
    if causal.get("text") and payload["status"] != "match":  # a match's panel lists its lines earliest first
        console.print(f"[bold]causal line[/] {causal['line']}: {escape(causal['text'][:300])}", soft_wrap=True)
    _render_codes(console, payload.get("codes") or [])
    if payload["status"] == "match":
        matches = payload["matches"]
        console.print(f"[bold green]diagnosis[/] for {src} ({payload['input']['lines']} lines): {len(matches)} match(es)")
        for m in matches:
            # confidence before the title: a long title is cut at the terminal width, the score must survive
            head = f"#{m['rank']} [bold]{m['id']}[/] confidence {m['confidence']:.2f} · {escape(m['title'])}  [dim]({m['layer']}, {m['method']})[/]"
            body: list[str] = []
            shown: set[tuple[int, str]] = set()  # several signatures may hit the same line: show it once
            for ml in m["matched_lines"]:
                if (ml["line"], ml["text"]) in shown or len(shown) >= 6:
                    continue
                shown.add((ml["line"], ml["text"]))
                where = f"line {ml['line']}" if ml["line"] else "fuzzy"
                body.append(f"[cyan]{where}[/]: {escape(ml['text'][:300])}")
            if m["rank"] == 1 or payload["close"]:
                body.append(f"\n[bold]cause[/]: {escape(m['root_cause'])}")
                body.append("[bold]fix[/]:")
                body.extend(f"  {i}. {escape(step)}" for i, step in enumerate(m["fix"], 1))
                body.append(f"[bold]verify[/]: {escape(m['verify'])}")
                if m["aliases"]:
                    body.append(f"[dim]aliases: {escape(', '.join(m['aliases']))}[/]")
            for note in m["version_notes"]:
                body.append(f"[yellow]version[/]: {escape(note)}")
            if explain and "explain" in m:
                body.append(f"[dim]score: {escape(str(m['explain']))}[/]")
            console.print(Panel("\n".join(body), title=head, title_align="left", expand=True))
        if payload["close"]:
            console.print("[yellow]the top matches are close[/]; tell them apart with:")
            for m in matches[:2]:
                for d in m["discriminators"] or ["(no discriminator recorded)"]:
                    console.print(f"  [bold]{m['id']}[/]: {escape(d)}")
        return

    console.print(f"[bold yellow]unknown[/]: no knowledge-base entry matches {src} ({payload['input']['lines']} lines)")
    tri = payload.get("triage") or {}
    if tri:
        console.print(f"[bold]triage[/]: layer {escape(tri['layer'] or '?')}; failing package {escape(tri['failing_package'] or '?')}"
                      + (f"; {escape(tri['reason'])}" if tri["reason"] else ""), soft_wrap=True)
        for cmd in tri["next_commands"]:
            console.print(f"  next: [bold]{escape(cmd)}[/]", soft_wrap=True)
    sig = payload["signals"]
    if sig["exceptions"]:
        console.print("[bold]exception chain[/]:")
        for exc in sig["exceptions"][-8:]:
            console.print(f"  line {exc['line']}: {escape(exc['type'])}: {escape(exc['message'][:300])}")
    if sig["codes"] and not payload.get("codes"):
        console.print("[bold]error codes[/]: " + escape(", ".join(f"{c['code']} ({c['family']})" for c in sig["codes"][:12])))
    if sig["packages"]:
        console.print("[bold]frame packages[/]: " + escape(", ".join(f"{p['package']}×{p['frames']}" for p in sig["packages"][:8])))
    if sig["layer_hints"]:
        console.print("[bold]layer hints[/]: " + ", ".join(sig["layer_hints"]))
    if not (sig["exceptions"] or sig["codes"] or sig["blocks"]):
        console.print("[dim]no error lines were found in the input[/]")
    elif sig["blocks"]:
        last = sig["blocks"][-1]
        console.print(f"[bold]last error block[/] (lines {last['start_line']}-{last['end_line']}):")
        for line in last["lines"][-15:]:
            console.print("  " + escape(line[:300]))
    if payload["near_misses"]:
        console.print("[bold]near misses[/] (below the match threshold):")
        for m in payload["near_misses"]:
            console.print(f"  {m['confidence']:.2f}  {m['id']}  {escape(m['title'])}  [dim]({m['method']})[/]")
            for note in m.get("version_notes", []):
                console.print(f"        [yellow]version[/]: {escape(note)}")
            if m.get("advice"):
                console.print(f"        [cyan]advice[/]: {escape(m['advice'])}")
            if explain and "explain" in m:
                console.print(f"        [dim]score: {escape(str(m['explain']))}[/]")


def _render_codes(console, codes: list[dict]) -> None:
    from rich.markup import escape

    decoded = [c for c in codes if c.get("meaning")]
    if not decoded:
        return
    console.print("[bold]error codes[/]:")
    for c in decoded[:8]:
        name = f" {c['name']}" if c.get("name") else ""
        how = "" if c.get("exact") else " [dim](by range)[/]"
        console.print(f"  [cyan]{escape(c['code'])}[/]{escape(name)} (line {c['line']}): {escape(c['meaning'])}{how}", soft_wrap=True)
        for step in c.get("first_steps", [])[:2]:
            console.print(f"      - {escape(step)}", soft_wrap=True)


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


# -- the same text without rich (porter.plain), for output that is not a terminal -----------------
def plain_diagnosis(payload: dict[str, Any], explain: bool, width: int) -> str | None:
    """What `render_diagnosis` prints through a non-terminal rich Console of `width` columns,
    laid out by porter.plain; None when it cannot promise the same bytes (rich renders then)."""
    from porter.plain import PlainPage, Unrenderable

    try:
        page = PlainPage(width)
        _plain_diagnosis(page, payload, explain)
        return page.text()
    except Unrenderable:
        return None


def _bare(value: Any) -> str:
    """A value `render_diagnosis` interpolates without escape(): plain only without brackets."""
    from porter.plain import Unrenderable

    text = str(value)
    if "[" in text:
        raise Unrenderable(text[:40])
    return text


def _plain_diagnosis(page, payload: dict[str, Any], explain: bool) -> None:
    src = payload["input"]["source"]
    causal = payload.get("causal_line") or {}
    if causal.get("text") and payload["status"] != "match":
        page.print(f"causal line {_bare(causal['line'])}: {causal['text'][:300]}", soft_wrap=True)
    decoded = [c for c in payload.get("codes") or [] if c.get("meaning")]
    if decoded:
        page.print("error codes:")
        for c in decoded[:8]:
            name = f" {c['name']}" if c.get("name") else ""
            how = "" if c.get("exact") else " (by range)"
            page.print(f"  {c['code']}{name} (line {_bare(c['line'])}): {c['meaning']}{how}", soft_wrap=True)
            for step in c.get("first_steps", [])[:2]:
                page.print(f"      - {step}", soft_wrap=True)
    if payload["status"] == "match":
        matches = payload["matches"]
        page.print(f"diagnosis for {src} ({_bare(payload['input']['lines'])} lines): {len(matches)} match(es)")
        for m in matches:
            head = f"#{_bare(m['rank'])} {_bare(m['id'])} confidence {m['confidence']:.2f} · {m['title']}  ({_bare(m['layer'])}, {_bare(m['method'])})"
            body: list[str] = []
            shown: set[tuple[int, str]] = set()
            for ml in m["matched_lines"]:
                if (ml["line"], ml["text"]) in shown or len(shown) >= 6:
                    continue
                shown.add((ml["line"], ml["text"]))
                where = f"line {_bare(ml['line'])}" if ml["line"] else "fuzzy"
                body.append(f"{where}: {ml['text'][:300]}")
            if m["rank"] == 1 or payload["close"]:
                body.append(f"\ncause: {m['root_cause']}")
                body.append("fix:")
                body.extend(f"  {i}. {step}" for i, step in enumerate(m["fix"], 1))
                body.append(f"verify: {m['verify']}")
                if m["aliases"]:
                    body.append(f"aliases: {', '.join(m['aliases'])}")
            for note in m["version_notes"]:
                body.append(f"version: {note}")
            if explain and "explain" in m:
                body.append(f"score: {m['explain']}")
            page.panel(head, "\n".join(body))
        if payload["close"]:
            page.print("the top matches are close; tell them apart with:")
            for m in matches[:2]:
                for d in m["discriminators"] or ["(no discriminator recorded)"]:
                    page.print(f"  {_bare(m['id'])}: {d}")
        return

    page.print(f"unknown: no knowledge-base entry matches {src} ({_bare(payload['input']['lines'])} lines)")
    tri = payload.get("triage") or {}
    if tri:
        page.print(f"triage: layer {tri['layer'] or '?'}; failing package {tri['failing_package'] or '?'}"
                   + (f"; {tri['reason']}" if tri["reason"] else ""), soft_wrap=True)
        for cmd in tri["next_commands"]:
            page.print(f"  next: {cmd}", soft_wrap=True)
    sig = payload["signals"]
    if sig["exceptions"]:
        page.print("exception chain:")
        for exc in sig["exceptions"][-8:]:
            page.print(f"  line {_bare(exc['line'])}: {exc['type']}: {exc['message'][:300]}")
    if sig["codes"] and not payload.get("codes"):
        page.print("error codes: " + ", ".join(f"{c['code']} ({c['family']})" for c in sig["codes"][:12]))
    if sig["packages"]:
        page.print("frame packages: " + ", ".join(f"{p['package']}×{p['frames']}" for p in sig["packages"][:8]))
    if sig["layer_hints"]:
        page.print("layer hints: " + ", ".join(_bare(h) for h in sig["layer_hints"]))
    if not (sig["exceptions"] or sig["codes"] or sig["blocks"]):
        page.print("no error lines were found in the input")
    elif sig["blocks"]:
        last = sig["blocks"][-1]
        page.print(f"last error block (lines {_bare(last['start_line'])}-{_bare(last['end_line'])}):")
        for line in last["lines"][-15:]:
            page.print("  " + line[:300])
    if payload["near_misses"]:
        page.print("near misses (below the match threshold):")
        for m in payload["near_misses"]:
            page.print(f"  {m['confidence']:.2f}  {_bare(m['id'])}  {m['title']}  ({_bare(m['method'])})")
            for note in m.get("version_notes", []):
                page.print(f"        version: {note}")
            if m.get("advice"):
                page.print(f"        advice: {m['advice']}")
            if explain and "explain" in m:
                page.print(f"        score: {m['explain']}")
