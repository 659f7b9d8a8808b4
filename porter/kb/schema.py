"""The knowledge-base entry schema (v1, see docs/kb-schema.md): typed records and validation.

`parse_entry` turns one YAML mapping into a `KBEntry` plus a list of `Problem`s; it never
raises on bad data, so `porter kb lint` can report every problem of every file at once.
"""

from __future__ import annotations

import re

from porter import rxcache
from porter.record import asdict, record

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import Any

SCHEMA_VERSION = 1

# layer directory -> id prefix
LAYERS: dict[str, str] = {
    "torch-npu": "TNPU",
    "cann": "CANN",
    "driver": "DRV",
    "hccl": "HCCL",
    "vllm-ascend": "VASC",
    "vllm": "VLLM",
    "triton-ascend": "TRITON",
    "bishengir": "BISHENG",
    "transformers": "HF",
    "mindspeed": "MSPEED",
    "ray": "RAY",
    "rl": "RL",
    "sglang": "SGL",
    "tilelang": "TILE",
    "container": "CTR",
    "host": "HOST",
    "packaging": "PKG",
    "python-env": "PYENV",
    "build": "BUILD",
    "mindie": "MINDIE",
    "llamafactory": "LMF",
    "ms-swift": "SWIFT",
}
KINDS = ("drift", "bug", "env", "config", "packaging", "build", "hardware", "network", "process")
SEVERITIES = ("error", "warning", "info")
MATCH_MODES = ("any", "all")
ID_RE = rxcache.compile(r"^(?P<prefix>[A-Z]+)-(?P<num>\d{3,4})$")

KNOWN_FIELDS = frozenset(
    {
        "id", "title", "layer", "kind", "severity", "signatures", "symptoms", "applies_to",
        "root_cause", "fix", "verify", "discriminators", "related", "references", "aliases",
        "examples", "notes", "causes", "downstream_of",
    }
)


@record(frozen=True)
class Problem:
    """One lint finding: where (file, field), what is wrong, and how to fix it."""

    file: str
    field: str
    problem: str
    fix: str = ""
    severity: str = "error"  # error | warning

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        text = f"{where}: {self.problem}"
        return f"{text} (fix: {self.fix})" if self.fix else text

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@record(frozen=True)
class Signature:
    kind: str  # how the matcher runs it: "literal" | "regex" | "code"
    pattern: str  # the literal, the regex (compiled from a structured form), or the code/range
    weight: float = 1.0
    required: bool = True  # only meaningful with match: all
    form: str = ""  # as written: literal | regex | code | template | exception | frame ("" = kind)
    spec: str = ""  # the structured form as written, for people ("ImportError: cannot import name '{symbol}'")

    @property
    def shown(self) -> str:
        return self.spec or self.pattern


@record(frozen=True)
class VersionRange:
    package: str
    versions: str


@record(frozen=True)
class KBEntry:
    id: str
    title: str
    layer: str
    kind: str
    severity: str
    match: str
    signatures: tuple[Signature, ...]
    symptoms: tuple[str, ...]
    applies_to: tuple[VersionRange, ...]
    root_cause: str
    fix: tuple[str, ...]
    verify: str
    discriminators: tuple[str, ...] = ()
    related: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()  # corpus cause slugs this entry's root cause is (kb eval)
    downstream_of: tuple[str, ...] = ()  # entries whose failure also prints this one's lines
    within: int = 0  # required signature hits must lie within this many lines (0: anywhere)
    path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "KBEntry":
        """Inverse of `to_dict` (used by the compiled-KB cache; data was validated when built)."""
        d = dict(data)
        d["signatures"] = tuple(_restore(Signature, s) for s in d["signatures"])
        d["applies_to"] = tuple(_restore(VersionRange, v) for v in d["applies_to"])
        for key in ("symptoms", "fix", "discriminators", "related", "references", "aliases", "examples", "causes", "downstream_of"):
            d[key] = tuple(d[key])
        return _restore(cls, d)


_FIELDS: dict[type, frozenset[str]] = {}


def _restore(cls: type, values: dict[str, Any]) -> Any:
    """A frozen record from its `asdict` form without running `__init__`: a frozen dataclass's
    __init__ sets each field through object.__setattr__, ~10 us per entry, and the compiled-KB
    cache restores ~900 records on every `porter diagnose`. The same object as `cls(**values)`
    when every field is given (asdict always gives every field); otherwise that call decides."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(cls.__record_fields__)
    if values.keys() != names:
        return cls(**values)
    obj = object.__new__(cls)
    obj.__dict__.update(values)
    return obj


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _str_list(data: dict, key: str, file: str, problems: list[Problem], required: bool = False) -> tuple[str, ...]:
    value = data.get(key)
    if value is None:
        if required:
            problems.append(Problem(file, key, "missing", f"add `{key}:` with at least one item"))
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        problems.append(Problem(file, key, f"must be a list of strings, got {type(value).__name__}", f"write `{key}:` as a YAML list (`- item`)"))
        return ()
    out: list[str] = []
    for i, item in enumerate(value):
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            item = str(item)
        if not isinstance(item, str) or not item.strip():
            problems.append(Problem(file, f"{key}[{i}]", "must be a non-empty string", "quote the item"))
            continue
        out.append(item.strip())
    if required and not out:
        problems.append(Problem(file, key, "is empty", f"add at least one item to `{key}`"))
    return tuple(out)


_SIG_KEYS = {"literal", "regex", "code", "template", "exception", "frame", "captures", "defined_in", "weight", "required"}


def _structured(item: dict, where: str, file: str, problems: list[Problem]) -> tuple[str, str, str, str] | None:
    """(kind, pattern, form, spec) of a code / template / exception / frame item (porter.kb.families)."""
    from porter.kb.families import FamilyError, code_regex, exception_regex, frame_regex, template_regex

    captures = item.get("captures") or {}
    if not isinstance(captures, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in captures.items()):
        problems.append(Problem(file, f"{where}.captures", "must map capture names to regexes", "write `captures: {module: 'vllm[\\w.]{0,80}'}`"))
        return None
    defined_in = item.get("defined_in") or {}
    if not isinstance(defined_in, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in defined_in.items()):
        problems.append(Problem(file, f"{where}.defined_in", "must map capture names to symbol tables", "write `defined_in: {api: vllm}` (knowledge/symbols/vllm.txt)"))
        return None
    values = {k: item[k] for k in ("code", "template", "exception", "frame") if k in item}
    for key, value in values.items():
        if not isinstance(value, str) or not value.strip():
            problems.append(Problem(file, f"{where}.{key}", "must be a non-empty string", "quote it"))
            return None
    try:
        if "code" in values:
            if len(values) > 1:
                raise FamilyError("`code` stands alone (no template/exception/frame in the same item)")
            code_regex(values["code"])
            return "code", values["code"].strip(), "code", values["code"].strip()
        if "frame" in values:
            if len(values) > 1:
                raise FamilyError("`frame` stands alone (put the exception into its own item)")
            return "regex", frame_regex(values["frame"].strip()), "frame", f"frame in {values['frame'].strip()}"
        template = values.get("template")
        if "exception" in values:
            exc = values["exception"].strip()
            spec = f"{exc}: {template}" if template else exc
            return "regex", exception_regex(exc, template, captures, defined_in), "exception", spec
        if template is not None and len(template.strip()) < 6:
            raise FamilyError("the template is too short to be specific (< 6 characters)")
        return "regex", template_regex(template, captures, defined_in), "template", template
    except FamilyError as exc:
        problems.append(Problem(file, where, str(exc), "see 'Structured signatures' in docs/kb-schema.md"))
        return None


def _signature(item: Any, where: str, file: str, problems: list[Problem]) -> Signature | None:
    if not isinstance(item, dict):
        problems.append(Problem(file, where, "must be a mapping with `literal` or `regex`", "write `- literal: \"...\"` with `weight:`"))
        return None
    unknown = sorted(set(item) - _SIG_KEYS)
    if unknown:
        problems.append(Problem(file, where, f"unknown key(s) {', '.join(unknown)}", f"allowed: {', '.join(sorted(_SIG_KEYS))}"))
    has_lit, has_re = "literal" in item, "regex" in item
    structured = any(k in item for k in ("code", "template", "exception", "frame"))
    if has_lit + has_re + structured != 1:
        problems.append(Problem(file, where, "needs exactly one form: `literal`, `regex`, `code`, `template`/`exception`, or `frame`",
                                "keep one of them; split into two items if you need both"))
        return None
    form = spec = ""
    if structured:
        compiled = _structured(item, where, file, problems)
        if compiled is None:
            return None
        kind, pattern, form, spec = compiled
    else:
        kind = "literal" if has_lit else "regex"
        pattern = item[kind]
        if not isinstance(pattern, str) or not pattern.strip():
            problems.append(Problem(file, f"{where}.{kind}", "must be a non-empty string", "quote the pattern"))
            return None
        if kind == "literal" and len(pattern.strip()) < 6:
            problems.append(Problem(file, f"{where}.literal", f"{pattern!r} is too short to be specific (< 6 characters)", "use a longer, distinctive fragment of the message"))
    weight = item.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not (0 < float(weight) <= 1):
        problems.append(Problem(file, f"{where}.weight", f"must be a number in (0, 1], got {weight!r}", "use e.g. `weight: 0.8`"))
        weight = 1.0
    required = item.get("required", True)
    if not isinstance(required, bool):
        problems.append(Problem(file, f"{where}.required", f"must be true or false, got {required!r}", "write `required: false`"))
        required = True
    return Signature(kind=kind, pattern=pattern, weight=float(weight), required=required, form=form, spec=spec)


def parse_entry(data: Any, file: str, layer_dir: str | None = None) -> tuple[KBEntry | None, list[Problem]]:
    """Validate one entry mapping. Returns (entry or None when unusable, problems).

    Checks that need other entries, the file system or the matcher (unique ids, related ids,
    example files, regex safety) live in `porter.kb.lint`.
    """
    problems: list[Problem] = []
    if not isinstance(data, dict):
        return None, [Problem(file, "", f"top level must be a mapping, got {type(data).__name__}", "start the file with `id: PREFIX-NNN`")]

    unknown = sorted(set(map(str, data)) - KNOWN_FIELDS)
    if unknown:
        problems.append(Problem(file, ", ".join(unknown), "unknown field(s)", f"allowed fields: {', '.join(sorted(KNOWN_FIELDS))}"))

    entry_id = _text(data.get("id")) or ""
    if not entry_id:
        problems.append(Problem(file, "id", "missing", "add `id: PREFIX-NNN` (see the layer table in docs/kb-schema.md)"))
    layer = _text(data.get("layer")) or ""
    if not layer:
        problems.append(Problem(file, "layer", "missing", f"add `layer:` (one of: {', '.join(LAYERS)})"))
    elif layer not in LAYERS:
        problems.append(Problem(file, "layer", f"unknown layer {layer!r}", f"use one of: {', '.join(LAYERS)}"))
    if entry_id:
        m = ID_RE.match(entry_id)
        if not m:
            problems.append(Problem(file, "id", f"{entry_id!r} is not of the form PREFIX-NNN", "use e.g. `VLLM-001` (upper-case prefix, dash, 3 digits)"))
        elif layer in LAYERS and m.group("prefix") != LAYERS[layer]:
            problems.append(Problem(file, "id", f"prefix {m.group('prefix')!r} does not match layer {layer!r}", f"ids in layer {layer} start with {LAYERS[layer]}-"))
    if layer_dir is not None and layer and layer != layer_dir:
        problems.append(Problem(file, "layer", f"is {layer!r} but the file is in directory {layer_dir!r}", f"move the file to knowledge/patterns/{layer}/ or fix `layer`"))

    title = _text(data.get("title")) or ""
    if not title:
        problems.append(Problem(file, "title", "missing", "add a one-line `title:` that names the cause"))
    elif "\n" in title:
        problems.append(Problem(file, "title", "must be one line", "shorten the title; put detail into root_cause"))

    kind = _text(data.get("kind")) or ""
    if kind not in KINDS:
        problems.append(Problem(file, "kind", f"{'missing' if not kind else repr(kind) + ' is not a kind'}", f"use one of: {', '.join(KINDS)}"))
    severity = _text(data.get("severity")) or "error"
    if severity not in SEVERITIES:
        problems.append(Problem(file, "severity", f"{severity!r} is not a severity", f"use one of: {', '.join(SEVERITIES)}"))

    match, signatures, within = "any", [], 0
    raw_sigs = data.get("signatures")
    if raw_sigs is None:
        if kind != "process":
            problems.append(Problem(file, "signatures", "missing", "add `signatures: {match: any, items: [{literal: ..., weight: ...}]}`"))
    elif not isinstance(raw_sigs, dict):
        problems.append(Problem(file, "signatures", "must be a mapping with `match` and `items`", "see docs/kb-schema.md"))
    else:
        extra = sorted(set(raw_sigs) - {"match", "items", "within"})
        if extra:
            problems.append(Problem(file, "signatures", f"unknown key(s) {', '.join(map(str, extra))}", "allowed: match, items, within"))
        within = raw_sigs.get("within", 0)
        if isinstance(within, bool) or not isinstance(within, int) or not 0 <= within <= 10_000:
            problems.append(Problem(file, "signatures.within", f"must be a number of lines (0 = anywhere), got {within!r}", "e.g. `within: 40`"))
            within = 0
        match = raw_sigs.get("match", "any")
        if match not in MATCH_MODES:
            problems.append(Problem(file, "signatures.match", f"{match!r} is not any/all", "use `match: any` or `match: all`"))
            match = "any"
        items = raw_sigs.get("items")
        if not isinstance(items, list) or (not items and kind != "process"):
            problems.append(Problem(file, "signatures.items", "must be a non-empty list", "add at least one `- literal: \"...\"` item"))
            items = []
        for i, item in enumerate(items):
            sig = _signature(item, f"signatures.items[{i}]", file, problems)
            if sig is not None:
                signatures.append(sig)
        if match == "all" and signatures and not any(s.required for s in signatures):
            problems.append(Problem(file, "signatures", "match: all but no item is required", "mark at least one item `required: true` or use `match: any`"))

    symptoms = _str_list(data, "symptoms", file, problems)

    applies: list[VersionRange] = []
    raw_applies = data.get("applies_to") or []
    if not isinstance(raw_applies, list):
        problems.append(Problem(file, "applies_to", "must be a list of {package, versions}", "see docs/kb-schema.md"))
        raw_applies = []
    for i, item in enumerate(raw_applies):
        where = f"applies_to[{i}]"
        if not isinstance(item, dict) or not _text(item.get("package")):
            problems.append(Problem(file, where, "needs `package:` and `versions:`", "write `- {package: torch_npu, versions: \">=2.7\"}`"))
            continue
        versions = item.get("versions")
        if isinstance(versions, (int, float)) and not isinstance(versions, bool):
            versions = str(versions)
        if not isinstance(versions, str) or not versions.strip():
            problems.append(Problem(file, f"{where}.versions", "missing or not a string", "quote the specifier, e.g. `versions: \">=0.13,<0.15\"`"))
            continue
        applies.append(VersionRange(package=item["package"].strip(), versions=versions.strip()))

    root_cause = _text(data.get("root_cause")) or ""
    if not root_cause:
        problems.append(Problem(file, "root_cause", "missing", "add a short paragraph saying why this happens"))
    fix = _str_list(data, "fix", file, problems, required=True)
    verify = _text(data.get("verify")) or ""
    if not verify:
        problems.append(Problem(file, "verify", "missing", "add one command that proves the fix"))

    entry = KBEntry(
        id=entry_id,
        title=title,
        layer=layer,
        kind=kind,
        severity=severity,
        match=match,
        signatures=tuple(signatures),
        symptoms=symptoms,
        applies_to=tuple(applies),
        root_cause=root_cause,
        fix=fix,
        verify=verify,
        discriminators=_str_list(data, "discriminators", file, problems),
        related=_str_list(data, "related", file, problems),
        references=_str_list(data, "references", file, problems),
        aliases=_str_list(data, "aliases", file, problems),
        examples=_str_list(data, "examples", file, problems, required=True),
        causes=_str_list(data, "causes", file, problems),
        downstream_of=_str_list(data, "downstream_of", file, problems),
        within=within,
        path=file,
    )
    usable = bool(entry_id and (signatures or symptoms))
    return (entry if usable else None), problems
