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

from porter import rxcache
from porter.kb.extract import NO_LAYER_CODES as _NO_LAYER_CODES, PACKAGE_LAYER, Signals, package_of
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
_FROM_MODULE = rxcache.compile(r"""(?:from|module) '(?P<module>[A-Za-z_][\w.]{0,200})'|No module named '(?P<missing>[A-Za-z_][\w.]{0,200})'""")
_FRAME = rxcache.compile(r'^\s*File "(?P<path>[^"]{1,1000})", line \d+')
_HOST_LAYERS = ("driver", "container", "host", "hccl", "cann")
# in a causal line: a file path (absolute, or relative like torch_npu/csrc/x.cpp), or a dotted module
# name at a word start (`torch_npu.npu`)
_NAMED = rxcache.compile(r"""(?P<path>(?<![\w./-])(?:/|[A-Za-z_][\w.-]{0,40}/)[^\s'"`,;:()\[\]]{1,400})|(?<![\w./-])(?P<module>[A-Za-z_]\w{1,40})(?=\.[A-Za-z_])""")
# an Ascend install directory (/usr/local/Ascend/<rest>, $HOME/Ascend/<rest>)
_ASCEND_INSTALL = rxcache.compile(r"[/\\]Ascend[/\\](?P<rest>[\w.-]{1,80})")
CAUSAL_CODE_LINES = 2  # a code this many lines after the causal exception still belongs to its message
# a causal line that is one operator call failing (aclnnX / a named operator): the op library refused the inputs
# or the kernel failed; that is the calling framework's shapes/dtypes/config or an op bug, not the host
_OPERATOR_CALL = rxcache.compile(r"call (?P<api>aclnn\w{1,80}) failed|Failed to execute operator (?P<op>[\w.-]{1,120})")
# ...unless the reason printed after it says the op library itself is missing or does not fit the installed
# CANN/driver (no kernel binary, unparsable kernel config): then it is an installation fault after all
_OPERATOR_ENV_REASON = rxcache.compile(r"(?i)cannot find (?:the )?bin|cannot find binary|kernel config fail|kernel package|"
                                  r"not installed|version (?:mismatch|does not match|is lower)|\bopp\b")


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
    """File paths of the traceback frames in the block that holds `line`, outermost first."""
    for block in signals.blocks:
        if block.kind == "traceback" and block.start <= line <= block.end + 1:
            return [m.group("path") for m in map(_FRAME.match, block.lines[: max(0, line - block.start)]) if m]
    return []


def path_layer(path: str) -> str:
    """The layer a file belongs to: its package's (site-packages/vllm/... -> vllm), else the Ascend
    install it lives in (.../Ascend/driver -> driver, .../Ascend/mindie or atb-models -> mindie, any
    other .../Ascend/... such as the toolkit's te/tbe python -> cann); "" when neither."""
    layer = PACKAGE_LAYER.get(package_of(path) or "", "")
    if layer:
        return layer
    m = _ASCEND_INSTALL.search(path)
    if not m:
        return ""
    rest = m.group("rest").lower()
    return "driver" if rest.startswith("driver") else "mindie" if rest.startswith(("mindie", "atb")) else "cann"


def _layers_named(text: str) -> list[str]:
    """Layers of what the causal line itself names, in order: file paths in it, a module-qualified
    exception type or module name (`torch_npu.utils.X`, `from 'vllm.config'`)."""
    seen: dict[str, None] = {}
    for m in _NAMED.finditer(text):
        layer = path_layer(m.group("path")) if m.group("path") else PACKAGE_LAYER.get(m.group("module"), "")
        if layer:
            seen.setdefault(layer, None)
    return list(seen)


def causal_layer(frame_paths: list[str], text: str) -> str:
    """The layer of the causal line: its innermost frame with a layer (a pydantic or contextlib frame
    under vllm's config code is vllm's failure), else what the line itself names; "" when neither."""
    for path in reversed(frame_paths):
        layer = path_layer(path)
        if layer:
            return layer
    named = _layers_named(text)
    return named[0] if named else ""


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
    frame_paths = _frames_before(signals, line) if line else []
    frames = [pkg for pkg in map(package_of, frame_paths) if pkg]
    failing = frames[-1] if frames else (signals.packages[0][0] if signals.packages else "")
    layer = causal_layer(frame_paths, text)
    coded = [c for c in decoded_codes if c.get("layer") and c.get("code") not in _NO_LAYER_CODES]
    # a code the causal line itself carries (or the lines of its message right after) says which layer
    # failed better than the Python caller's frames (transformers calling torch.arange -> aclnnArange EZ9999)
    own = [c["layer"] for c in coded if line and line <= int(c.get("line") or 0) <= line + CAUSAL_CODE_LINES]
    code_layers = [c["layer"] for c in coded]
    if own and layer not in _HOST_LAYERS:
        layer = own[0]
    elif code_layers and (not layer or layer in ("torch-npu", "vllm-ascend")):
        layer = code_layers[0]
    if not layer:  # the causal line says nothing: the package with most frames in the log, else any hint
        layer = next((PACKAGE_LAYER[p] for p, _ in signals.packages if PACKAGE_LAYER.get(p)), "")
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
    op = _OPERATOR_CALL.search(text) if text else None
    host_table = any(c.get("table") in ("dcmi", "acl-runtime") for c in decoded_codes)
    if op and _OPERATOR_ENV_REASON.search(_lines_after(signals, line, 6)):
        op = None
    if op and not host_table and layer in ("cann", "torch-npu", "vllm-ascend", "sglang", ""):
        name = op.group("api") or op.group("op")
        reason = reason or (f"operator {name} failed inside the CANN op library: check the shapes, dtypes and "
                            f"options the calling framework passed (the lines after it name the check that failed); "
                            f"rerun with ASCEND_LAUNCH_BLOCKING=1 to pin the call")
    elif layer in _HOST_LAYERS or host_table:
        commands += ["porter hosts check", "npu-smi info"]
        reason = reason or "device, driver or environment fault: check the host first"
    if text:
        commands.append(f"porter kb search {_shell_quote(text[:80])}")
    return Triage(layer, line, text, failing, tuple(dict.fromkeys(commands)), reason)


def _lines_after(signals: Signals, line: int, count: int) -> str:
    """The `count` lines after `line` in the block that holds it (the reason CANN prints after the call)."""
    for block in signals.blocks:
        if block.start <= line <= block.end:
            i = line - block.start
            return "\n".join(block.lines[i + 1 : i + 1 + count])
    return ""


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
