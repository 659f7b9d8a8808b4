"""Structured signatures: one entry for a family of messages.

An entry's signature item may be, besides a `literal` or a `regex`:
- `code: EZ9999` or a range `code: 161000-161999` / `EI0001-EI9999` (an error code anywhere in a line);
- `template: "{library}: cannot open shared object file"` (a message with named captures), optionally
  with `exception: OSError` (the line is that exception, any module prefix), or `exception` alone;
- `frame: vllm_ascend` (a traceback frame inside that package).

Each compiles to a bounded regex (so the scanner, the index and the regex-safety check treat it
like any other regex) or, for codes, to a regex plus a numeric range. Named captures fill
`{name}` in the entry's fix, verify and root cause text.
"""

from __future__ import annotations

import re

from porter import rxcache
from porter.kb.regexsafety import structural_problem

# Capture name -> the bounded pattern it matches by default (an item's `captures:` overrides).
CAPTURE_PATTERNS: dict[str, str] = {
    "op": r"[A-Za-z_][\w.:]{0,120}",
    "dtype": r"[A-Za-z_][\w.]{0,40}",
    "library": r"[\w.+-]{1,120}\.so(?:\.[\w.]{1,40})?",
    "symbol": r"[^\s'\"`]{1,300}",
    "module": r"[A-Za-z_][\w.]{0,200}",
    "package": r"[A-Za-z_][\w.-]{0,80}",
    "env": r"[A-Z_][A-Z0-9_]{1,80}",
    "env_var": r"[A-Z_][A-Z0-9_]{1,80}",
    "name": r"[A-Za-z_][\w.]{0,120}",
    "attribute": r"[A-Za-z_]\w{0,120}",
    "path": r"[^\s'\"]{1,400}",
    "number": r"-?\d{1,12}",
    "code": r"[A-Z]{0,3}\d{1,8}",
    "soc": r"[\w.-]{1,60}",
    "version": r"[\w.+-]{1,40}",
    "device": r"[\w:.-]{1,40}",
}
DEFAULT_CAPTURE = r"[^\s'\"]{1,200}"
# what a quoted message puts where it left a value out: an ellipsis, after at most one space
ELIDED = r"[ \t]?(?:\.\.\.|\u2026)"
_ELISION_LEAD = rxcache.compile(r"[:=][ \t]*$")  # the separator before a value, elided with it
_PLACEHOLDER = rxcache.compile(r"\{(\*|[A-Za-z_]\w{0,40})\}")
_CODE_RANGE = rxcache.compile(r"^(?P<prefix>[A-Za-z_]{0,6})(?P<lo>\d{1,8})(?:-(?P=prefix)?(?P<hi>\d{1,8}))?$")
_FRAME_PACKAGE = rxcache.compile(r"^[A-Za-z_][\w.]{0,80}$")
EXCEPTION_TYPE = rxcache.compile(r"^(?:[A-Za-z_]\w{0,80}\.){0,6}[A-Za-z_]\w{0,80}$")
FORMS = ("literal", "regex", "code", "template", "exception", "frame")
IN_TABLE = "__in_"  # a capture group `api__in_vllm`: the captured name must be in knowledge/symbols/vllm.txt
_TABLE_NAME = rxcache.compile(r"^[a-z][a-z0-9_]{0,40}$")
_TABLES: dict[str, frozenset[str]] = {}
_LINE_BREAKS = "\r\v\f\x1c\x1d\x1e"  # the ASCII line boundaries str.splitlines knows besides "\n"
_OTHER_SPACE = " \t\x1f"  # the rest of the ASCII whitespace str.strip removes


def symbols_dir():
    from porter.config import bundled_root

    return bundled_root() / "knowledge" / "symbols"


def _names(text: str) -> frozenset[str]:
    """The stripped lines of `text` that are neither empty nor comments ("#" first)."""
    body = _plain_body(text)
    if body is not None:  # the same set, without a Python step per line
        return frozenset(filter(None, body.split("\n")))
    return frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def _plain_body(text: str) -> str | None:
    """`text` after its leading comment lines when the rest is one name a line: ASCII, "\n" line ends,
    no whitespace and no "#" at all (so no line needs stripping and none is a comment); else None."""
    if not text.isascii() or any(c in text for c in _LINE_BREAKS):
        return None
    start = 0
    while text.startswith("#", start):
        end = text.find("\n", start)
        if end < 0:
            return ""
        start = end + 1
    body = text[start:]
    if "#" in body or any(c in body for c in _OTHER_SPACE):
        return None
    return body


def symbol_table(upstream: str) -> frozenset[str]:
    """The names of knowledge/symbols/<upstream>.txt (bundled; empty when there is none), read once.
    A plain table (`_plain_body`, as the bundled ones are) is split in C: hashing ~5,700 names
    through a per-line strip was ~3 % of a warm `porter diagnose` whose trace names an attribute."""
    table = _TABLES.get(upstream)
    if table is None:
        try:
            text = (symbols_dir() / f"{upstream}.txt").read_text(encoding="utf-8")
        except OSError:
            text = ""
        table = _TABLES[upstream] = _names(text)
    return table


def constrained_groups(groupindex) -> tuple[tuple[str, str, str], ...]:
    """(group, capture name, table) for each `name__in_table` group of a compiled regex."""
    out = []
    for group in groupindex:
        if IN_TABLE in group:
            name, _, table = group.partition(IN_TABLE)
            out.append((group, name, table))
    return tuple(out)


def defined(value: str, table: str) -> bool:
    """Is a captured name (`Foo`, `Foo.__init__`, `mod.Foo.bar`) defined in the table? Any dotted
    part counts: a call prints `Class.method()`, an import error the bare name."""
    names = symbol_table(table)
    return any(part in names for part in value.split("."))


class FamilyError(ValueError):
    """A structured signature that cannot be compiled; the message says what to change."""


def template_regex(template: str, captures: dict[str, str] | None = None, defined_in: dict[str, str] | None = None,
                   elide: bool = True, prefix: str = "") -> str:
    """A message template -> a regex with one named group per `{name}`; `{*}` is a bounded gap.
    Whitespace in the template matches any run of spaces or tabs. `defined_in` maps a capture to
    an upstream's symbol table (knowledge/symbols/<upstream>.txt): its group is named
    `<name>__in_<upstream>` and a line hits only when the captured name is in that table.
    `elide`: a value may be left out as `...` (below); when those alternatives would make `prefix` + the
    pattern fail the regex-safety check (too many backtracking paths), the template compiles without them."""
    captures = captures or {}
    defined_in = defined_in or {}
    template = template.strip()
    while template.startswith("{*}") or template.endswith("{*}"):  # search is unanchored anyway
        template = (template[3:] if template.startswith("{*}") else template[:-3]).strip()
    out: list[str] = []
    pos = 0
    seen: set[str] = set()
    for m in _PLACEHOLDER.finditer(template):
        before = template[pos : m.start()]
        name = m.group(1)
        if name == "*":
            out.append(_literal(before))
            out.append(r".{0,200}?")
        elif name in seen:
            out.append(_literal(before))
            out.append(f"(?P={name}{IN_TABLE}{defined_in[name]})" if name in defined_in else f"(?P={name})")
        else:
            seen.add(name)
            group = f"{name}{IN_TABLE}{defined_in[name]}" if name in defined_in else name
            value = f"(?P<{group}>{captures.get(name) or CAPTURE_PATTERNS.get(name, DEFAULT_CAPTURE)})"
            if name in defined_in or not elide:  # the evidence is the name itself: an elided one says nothing
                out.append(_literal(before))
                out.append(value)
            else:
                # a report that quotes the message with the value elided ("Current device type ... does
                # not match"): `...` or `…` stands for the value and the `: ` / `=` that introduced it
                lead = _ELISION_LEAD.search(before) if before else None
                cut = lead.start() if lead and lead.start() > 0 else len(before)
                out.append(_literal(before[:cut]))
                out.append(f"(?:{_literal(before[cut:])}{value}|{ELIDED})")
        pos = m.end()
    out.append(_literal(template[pos:]))
    unused = sorted(set(captures) - seen)
    if unused:
        raise FamilyError(f"captures {', '.join(unused)} are not placeholders of the template")
    unused = sorted(set(defined_in) - seen)
    if unused:
        raise FamilyError(f"defined_in names {', '.join(unused)}, not a placeholder of the template")
    for upstream in defined_in.values():
        if not isinstance(upstream, str) or not _TABLE_NAME.match(upstream):
            raise FamilyError(f"defined_in: {upstream!r} is not a symbol table name (knowledge/symbols/<name>.txt)")
    pattern = "".join(out)
    if template[:1] == "{":
        pattern = r"(?<![\w.+-])" + pattern  # a leading capture starts at a word start: no retry inside words
    if len(_PLACEHOLDER.sub("", template).strip()) < 4:
        raise FamilyError("the template has no literal text (4+ characters besides placeholders): it would match almost any line")
    if elide and seen and structural_problem(prefix + pattern):
        # the elision alternatives multiply the paths of a template with many values and gaps: matching the
        # elided quote is a nicety, a pattern the safety check refuses would cost the entry itself
        return template_regex(template, captures, defined_in, elide=False)
    return pattern


def _literal(text: str) -> str:
    # one space per whitespace run: the matcher also tries the line with its runs squeezed
    return re.escape(re.sub(r"[ \t]+", " ", text))


def exception_regex(exc_type: str, template: str | None, captures: dict[str, str] | None = None,
                    defined_in: dict[str, str] | None = None) -> str:
    """`Type: message` at a word start of a (de-prefixed) line, the type with any module prefix."""
    if not EXCEPTION_TYPE.match(exc_type):
        raise FamilyError(f"{exc_type!r} is not an exception type name")
    head = exc_type.rsplit(".", 1)[-1]
    # at a word start (a module prefix such as `torch.` is fine), not only the line start, so traces
    # quoted in prose count too; the literal comes first so the regex engine can search for it fast,
    # and the lookbehind after it checks the character before the type name
    prefix = re.escape(head) + r"(?<!\w" + re.escape(head) + ")"
    if template is None:
        return prefix + r"(?::|$)"
    head_rx = prefix + r":[ \t]{0,4}"
    return head_rx + template_regex(template, captures, defined_in, prefix=head_rx)


def frame_regex(package: str) -> str:
    if not _FRAME_PACKAGE.match(package):
        raise FamilyError(f"{package!r} is not a package name")
    path = re.escape(package.replace(".", "/"))
    return r'File "[^"]{0,400}[/\\]' + path + r'[/\\"]'


def parse_code(spec: str) -> tuple[str, int, int, int]:
    """`EZ9999` / `161000-161999` / `EI0001-EI9999` -> (prefix, digits, lo, hi)."""
    m = _CODE_RANGE.match(spec.strip())
    if not m:
        raise FamilyError(f"{spec!r} is not a code or a range like 161000-161999 / EI0001-EI0099")
    lo_s, hi_s = m.group("lo"), m.group("hi") or m.group("lo")
    if len(lo_s) != len(hi_s):
        raise FamilyError(f"{spec!r}: both ends of a range need the same number of digits")
    lo, hi = int(lo_s), int(hi_s)
    if lo > hi:
        raise FamilyError(f"{spec!r}: the range is empty (low end above high end)")
    return m.group("prefix"), len(lo_s), lo, hi


def code_regex(spec: str) -> str:
    prefix, digits, lo, hi = parse_code(spec)
    # the digits both ends share form the literal anchor (161000-161999 -> "161")
    lo_s, hi_s = f"{lo:0{digits}d}", f"{hi:0{digits}d}"
    common = 0
    while common < digits and lo_s[common] == hi_s[common]:
        common += 1
    head = re.escape(prefix) + lo_s[:common]
    rest = digits - common
    body = head + (rf"\d{{{rest}}}" if rest else "")
    guard = "[A-Za-z0-9]" if prefix else r"\d"
    after = r"(?![\w])" if prefix else r"(?!\d)"
    if head:
        # the literal head first, then "not preceded by {guard}" as a lookbehind over guard + head: the same
        # matches as `(?<!guard)(?P<code>body)`, but the regex engine can jump between occurrences of the
        # head instead of trying the lookbehind at every position (a busy line paid ~5 us for each code item)
        return rf"(?P<code>{head}(?<!{guard}{head}){body[len(head):]}){after}"
    return rf"(?<!{guard})(?P<code>{body}){after}"


def code_needle(spec: str) -> str:
    prefix, digits, lo, hi = parse_code(spec)
    lo_s, hi_s = f"{lo:0{digits}d}", f"{hi:0{digits}d}"
    common = 0
    while common < digits and lo_s[common] == hi_s[common]:
        common += 1
    return prefix + lo_s[:common]


def code_in_range(spec: str, found: str) -> bool:
    prefix, digits, lo, hi = parse_code(spec)
    tail = found[len(prefix):]
    return tail.isdigit() and len(tail) == digits and lo <= int(tail) <= hi


def fill(text: str, captures: dict[str, str], names: set[str] | frozenset[str] = frozenset()) -> str:
    """Replace `{name}` by its captured value; a capture of the entry (`names`) that did not fire
    shows as `<name>`. Other braces (shell, awk, JSON) stay as they are."""
    if "{" not in text or not (captures or names):
        return text

    def one(m: re.Match) -> str:
        name = m.group(1)
        if name in captures:
            return captures[name]
        return f"<{name}>" if name in names else m.group(0)

    return _PLACEHOLDER.sub(one, text)


def capture_names(signatures) -> frozenset[str]:
    """Names the entry's structured signatures capture (codes capture `code`)."""
    names: set[str] = set()
    for sig in signatures:
        if sig.kind == "code":
            names.add("code")
        elif sig.kind == "regex" and "(?P<" in sig.pattern:
            names.update(n.partition(IN_TABLE)[0] for n in re.findall(r"\(\?P<(\w+)>", sig.pattern))
    return frozenset(names)


def placeholder_names(text: str) -> set[str]:
    return {m.group(1) for m in _PLACEHOLDER.finditer(text) if m.group(1) != "*"}
