"""Causal order of candidate diagnoses, and the triage of a trace no entry explains.

A failure prints its cause first and its consequences after it: Python prints the first
exception of a chain first, the first rank to fail logs first, a library that did not load is
logged before the plugin-activation warning and the engine that then failed to start. So among
candidates of comparable strength, the one whose evidence starts earliest is the cause, and an
entry that declares itself `downstream_of` another ranks after it whenever both match.

Triage (when nothing matched) names the layer, the causal line (the first exception, else the
first error line), the package whose frames raised it, and the next command to run.
"""

from __future__ import annotations

import re

from porter.kb.extract import PACKAGE_LAYER, Signals, package_of
from porter.record import record

CAUSAL_MARGIN = 0.2  # an earlier candidate this close in (severity-adjusted) confidence is the cause
# Within one error block the specific reason follows the generic code (CANN prints `EE1001 ...`
# then `Reason: ...`): only an error this many lines earlier is a separate, earlier failure.
SAME_EVENT_LINES = 12

# a plugin's package in frames -> its `porter upgrade` name; the upstreams it follows
PLUGINS: dict[str, tuple[str, tuple[str, ...]]] = {
    "vllm_ascend": ("vllm-ascend", ("vllm",)),
    "torch_npu": ("torch-npu", ("torch",)),
    "triton_ascend": ("triton-ascend", ("triton",)),
    "vime": ("vime", ("transformers", "torch", "vllm")),
}
_DRIFT_TYPES = ("ImportError", "ModuleNotFoundError", "AttributeError", "TypeError")
_FROM_MODULE = re.compile(r"""(?:from|module) '(?P<module>[A-Za-z_][\w.]{0,200})'|No module named '(?P<missing>[A-Za-z_][\w.]{0,200})'""")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]{1,1000})", line \d+')
_HOST_LAYERS = ("driver", "container", "host", "hccl", "cann")


def first_line(match) -> int:
    lines = [m.line for m in match.lines if m.line]
    return min(lines) if lines else 1 << 30


def causal_order(matches: list, effective) -> list:
    """Reorder confidence-sorted `matches`: a declared-downstream entry goes after its cause, and
    an earlier failure (SAME_EVENT_LINES before) within CAUSAL_MARGIN of the leader takes the lead. `effective(m)` is the
    severity-adjusted confidence the ranking uses."""
    if len(matches) < 2:
        return matches
    ordered = list(matches)
    ids = {m.entry.id for m in ordered}
    # downstream entries whose cause also matched move behind the last of their causes
    for m in list(ordered):
        causes = [c for c in m.entry.downstream_of if c in ids and c != m.entry.id]
        if causes:
            ordered.remove(m)
            last = max(i for i, x in enumerate(ordered) if x.entry.id in causes)
            ordered.insert(last + 1, m)
    lead = ordered[0]
    best = effective(lead)
    for m in ordered[1:]:
        if lead.entry.id in m.entry.downstream_of:
            continue
        weaker_kind = m.entry.severity != "error" and lead.entry.severity == "error"
        earlier_event = first_line(m) + SAME_EVENT_LINES < first_line(lead)
        if effective(m) >= best - CAUSAL_MARGIN and earlier_event and not weaker_kind:
            lead = m
    if lead is not ordered[0]:
        ordered.remove(lead)
        ordered.insert(0, lead)
    return ordered


@record(frozen=True)
class Triage:
    layer: str
    causal_line: int
    causal_text: str
    failing_package: str
    next_commands: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict:
        return {"layer": self.layer, "causal_line": {"line": self.causal_line, "text": self.causal_text},
                "failing_package": self.failing_package, "next_commands": list(self.next_commands), "reason": self.reason}


def _frames_before(signals: Signals, line: int) -> list[str]:
    """Packages of the traceback frames in the block that holds `line`, outermost first."""
    for block in signals.blocks:
        if block.kind == "traceback" and block.start <= line <= block.end + 1:
            pkgs = []
            for text in block.lines[: max(0, line - block.start)]:
                m = _FRAME.match(text)
                if m:
                    pkg = package_of(m.group("path"))
                    if pkg:
                        pkgs.append(pkg)
            return pkgs
    return []


def causal_exception(signals: Signals):
    """The first exception of the log (Python prints the first of a chain first)."""
    return min(signals.exceptions, key=lambda e: e.line) if signals.exceptions else None


def triage(signals: Signals, decoded_codes: list[dict] | None = None) -> Triage:
    decoded_codes = decoded_codes or []
    exc = causal_exception(signals)
    line, text = (exc.line, exc.text) if exc else (0, "")
    if not text:
        for block in signals.blocks:
            from porter.kb.extract import is_errorish

            hit = next(((block.start + i, t) for i, t in enumerate(block.lines) if is_errorish(t)), None)
            if hit:
                line, text = hit
                break
    frames = _frames_before(signals, line) if line else []
    failing = frames[-1] if frames else (signals.packages[0][0] if signals.packages else "")
    layer = PACKAGE_LAYER.get(failing, "") if failing else ""
    code_layers = [c.get("layer") for c in decoded_codes if c.get("layer")]
    if code_layers and (not layer or layer in ("torch-npu", "vllm-ascend")):
        layer = code_layers[0]
    if not layer and signals.layer_hints:
        layer = signals.layer_hints[0]

    commands: list[str] = []
    reason = ""
    if exc and exc.type.rsplit(".", 1)[-1] in _DRIFT_TYPES:
        m = _FROM_MODULE.search(exc.message)
        module = (m.group("module") or m.group("missing")) if m else ""
        top = module.split(".", 1)[0] if module else ""
        for pkg in reversed(frames or [p for p, _ in signals.packages]):
            plugin = PLUGINS.get(pkg)
            if plugin and top in plugin[1]:
                commands.append(f"porter upgrade {plugin[0]} --dry-run")
                reason = (f"{exc.type} for {module} raised inside {pkg}: the plugin uses an API of {top} that the "
                          f"installed {top} does not have (API drift)")
                layer = "vllm" if top == "vllm" else layer
                break
    if layer in _HOST_LAYERS or any(c.get("table") in ("dcmi", "acl-runtime") for c in decoded_codes):
        commands += ["porter hosts check", "npu-smi info"]
        reason = reason or "device, driver or environment fault: check the host first"
    if text:
        commands.append(f"porter kb search {_shell_quote(text[:80])}")
    return Triage(layer, line, text, failing, tuple(dict.fromkeys(commands)), reason)


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
