"""Signals in a trace: error blocks, the exception chain, error codes, frame packages.

`Extractor.feed()` sees every (de-prefixed) line once and keeps only bounded state: a short
window before each error-ish line, at most `MAX_BLOCKS` blocks (the first few and the latest),
and capped lists. That is what lets a 50 MB log stream through in constant memory.
"""

from __future__ import annotations

import re
from collections import Counter, deque

from porter import rxcache
from porter.kb.normalize import strip_prefix
from porter.record import field, record

MAX_BLOCKS_HEAD = 8
MAX_BLOCKS_TAIL = 24
MAX_BLOCK_LINES = 120
MAX_EXCEPTIONS = 60
MAX_CODES = 60
CONTEXT_BEFORE = 3

# Top-level package (as seen in a frame path) -> the KB layer it hints at.
PACKAGE_LAYER: dict[str, str] = {
    "torch_npu": "torch-npu",
    "vllm_ascend": "vllm-ascend",
    "vllm": "vllm",
    "triton": "triton-ascend",
    "triton_ascend": "triton-ascend",
    "bishengir": "bishengir",
    "transformers": "transformers",
    "mindspeed": "mindspeed",
    "mindspeed_llm": "mindspeed",
    "mindspeed_rl": "mindspeed",
    "megatron": "mindspeed",
    "ray": "ray",
    "verl": "rl",
    "easyr1": "rl",
    "slime": "rl",
    "vime": "rl",
    "miles": "rl",
    "openrlhf": "rl",
    "sglang": "sglang",
    "sgl_kernel_npu": "sglang",
    "sgl_kernel": "sglang",
    "tilelang": "tilelang",
    "tvm": "tilelang",
    "pip": "packaging",
    "setuptools": "build",
    "huggingface_hub": "transformers",
    "llamafactory": "llamafactory",
    "swift": "ms-swift",
    "mindie_llm": "mindie",
    "mindiebenchmark": "mindie",
}
_OTHER_PACKAGES = frozenset({"torch", "numpy", "accelerate", "deepspeed", "peft", "safetensors", "datasets", "apex", "flash_attn"})

_TRACEBACK = "Traceback (most recent call last)"
_CHAIN_MARKERS = (
    "During handling of the above exception, another exception occurred",
    "The above exception was the direct cause of the following exception",
)
_FRAME = rxcache.compile(r'^\s*File "(?P<path>[^"]{1,1000})", line (?P<line>\d+)')
# "pkg.mod.SomeError: message" at the start of a line (tracebacks end with one; one-line errors are one)
_EXCEPTION = rxcache.compile(
    r"^(?P<type>(?:[A-Za-z_][\w]{0,80}\.){0,8}[A-Za-z_]\w{0,80}"
    r"(?:Error|Exception|Exit|Interrupt|Failed|Fault|Invalid|NotFound|Timeout|Unavailable|Denied))"
    r"(?::\s?(?P<msg>.*))?$"
)
# Error-ish lines, decided from the line's word tokens (a set lookup) plus a few phrases:
# a case-insensitive regex alternation here cost 20 us per line, too slow for 50 MB logs.
_ERR_WORDS = (
    "error errors exception failed failure fatal abort aborted panic segmentation dumped cannot unable couldn"
    " unsupported denied refused unreachable timeout timed oom killed illegal invalid mismatch undefined errcode"
    " retcode traceback"
).split()
_ERR_TOKENS = frozenset(v for w in _ERR_WORDS for v in (w, w.capitalize(), w.upper()))
# One leading character class, then the rest: lets the regex engine skip most positions fast.
_ERR_PHRASES = rxcache.compile(r"[EeNnOoCcr](?:rrCode|etCode|et is|ot found|ot supported|o such file|ut of memory|an't|ould not|OT FOUND|UT OF MEMORY|[ZEIHJLK]\d{4}\b)")
_TOKEN = rxcache.compile(r"\w+")
_EXC_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt", "Failed", "Fault", "Invalid", "NotFound",
                 "Timeout", "Unavailable", "Denied")  # not "Warning": warnings are not part of the failure chain
_DMESG = rxcache.compile(r"^\[\s{0,8}\d{1,8}\.\d{3,9}\]|\b(?:uda_|devdrv_|davinci|hdc_|dms_)\w*")

# Error codes: (family, pattern, group). Each pattern starts with literal characters, which lets
# the regex engine jump between candidate positions (one combined alternation was 6x slower).
_CODES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cann", rxcache.compile(r"E[A-Z]\d{4}(?!\w)")),  # EZ9999, EE1001, EI0006, EJ0001, EL0005
    ("cann", rxcache.compile(r"ERR\d{5}(?!\w)")),
    ("cann", rxcache.compile(r"[Ee](?:rror[ _]?[Cc]ode|rrCode|rrcode|rr_code|rror)(?:\s+is)?\s*[=:]?\s*\[?(\d{6})(?!\d)")),  # 507899, 161002
    ("cann", rxcache.compile(r"507\d{3}(?!\d)")),  # runtime 507xxx codes are distinctive even without "code"
    ("cann", rxcache.compile(r"retCode=0x[0-9a-fA-F]+")),
    ("cann", rxcache.compile(r"\bresult\s?=\s?(\d{6})(?!\d)")),  # "build op model failed, result = 500001"
    ("hccl", rxcache.compile(r"HCCL function error: [^\n]{0,300}?error code is (\d{1,2})(?!\d)")),
    ("driver", rxcache.compile(r"drvRetCode=\d+")),
    ("driver", rxcache.compile(r"ret is (-?\d{1,6})(?!\d)")),
    ("driver", rxcache.compile(r"dcmi\b[^\n]{0,80}?\bret(?:urn)?(?: code)?\s*[=:]\s*(-?\d{1,6})(?!\d)")),
    # DCMI's -80NN without the word dcmi (a device plugin: "failed to get device health:ret code: -8010")
    ("driver", rxcache.compile(r"\bret code\s?[=:]\s?(-80\d{2})(?!\d)")),
    # an ACL call wrapper's "api=aclrtMallocHost, code=107002" (six digits: the ACL/runtime code ranges)
    ("cann", rxcache.compile(r"\bcode=(\d{6})(?!\d)")),
)
_CODE_GATE = rxcache.compile(r"\d{4}|0x|RetCode|HCCL function")  # a line without any of these yields no code (see _GATE_IMPLIED)
# Per pattern, a substring every match contains ("" = none short enough): a busy log's lines
# with numbers pass the gate above, and one `in` test is far cheaper than one regex scan each.
_CODE_LITERALS = ("", "ERR", "rr", "507", "retCode=0x", "result", "HCCL function error", "drvRetCode=", "ret is ", "dcmi",
                  "ret code", "code=")
# Pattern text -> a regex every match's text (from its second character) also matches: the
# `[Ee]rror...` pattern tries every "e" of a line, and a log whose lines say "error <n>" (under
# six digits) paid ~7 us a line for it; this one starts at a literal "rr" and costs ~2 us.
# Keyed by the pattern's text: a pattern edited, added or moved above has no pretest (never a wrong one).
_CODE_PRETESTS: dict[str, re.Pattern[str]] = {
    r"[Ee](?:rror[ _]?[Cc]ode|rrCode|rrcode|rr_code|rror)(?:\s+is)?\s*[=:]?\s*\[?(\d{6})(?!\d)":
        rxcache.compile(r"rr(?:or[ _]?[Cc]ode|Code|code|_code|or)(?:\s+is)?\s*[=:]?\s*\[?\d{6}(?!\d)"),
}
# Patterns every match of which also matches _CODE_GATE (four digits, "0x", "RetCode" or "HCCL function"
# inside the match), by pattern text: for them the gate decides nothing and is not run. The others
# ("ret is -3", dcmi's "ret = 8") find a code only on a line the gate passes. An edited pattern is gated.
_GATE_IMPLIED = frozenset({
    r"E[A-Z]\d{4}(?!\w)", r"ERR\d{5}(?!\w)",
    r"[Ee](?:rror[ _]?[Cc]ode|rrCode|rrcode|rr_code|rror)(?:\s+is)?\s*[=:]?\s*\[?(\d{6})(?!\d)", r"507\d{3}(?!\d)",
    r"retCode=0x[0-9a-fA-F]+", r"\bresult\s?=\s?(\d{6})(?!\d)", r"HCCL function error: [^\n]{0,300}?error code is (\d{1,2})(?!\d)",
    r"drvRetCode=\d+", r"\bret code\s?[=:]\s?(-80\d{2})(?!\d)", r"\bcode=(\d{6})(?!\d)",
})


def _code_plan(pretests: dict, implied: frozenset[str] = _GATE_IMPLIED) -> tuple:
    """Per code pattern: (family, pattern, literal, pretest or None, gated, whether a match right
    after a letter or digit is part of a longer word, whether the code is group 1). One tuple a
    pattern, walked once per error line; _CODE_GATE runs only for a gated pattern whose literal is
    in the line (run first on every line, it cost more than the tests it spared: a crafted log's
    lines all have four digits)."""
    return tuple((family, pattern, literal, pretests.get(pattern.pattern), pattern.pattern not in implied,
                  pattern.pattern[0] in "E5", bool(pattern.groups))
                 for (family, pattern), literal in zip(_CODES, _CODE_LITERALS))


_CODE_PLAN = _code_plan(_CODE_PRETESTS)


# Substrings that make a line worth a full look by the extractor (a superset of what `feed`
# reacts to when idle). The scanner finds them chunk-wise with str.find and skips other lines.
EXTRACT_NEEDLES: tuple[str, ...] = (
    *sorted(_ERR_TOKENS),
    "rrCode", "etCode", "et is", "ot found", "ot supported", "o such file", "ut of memory", "an't", "ould not",
    "OT FOUND", "UT OF MEMORY",
    *_EXC_SUFFIXES,
    _TRACEBACK, 'File "', *_CHAIN_MARKERS, "uda_", "devdrv", "davinci", "hdc_", "dms_",
)
# CANN codes (EZ9999, EI0006 ...) make a line worth a look even without an error word; one regex
# pass over the chunk is cheaper than a str.find per code prefix.
CODE_LINE = rxcache.compile(r"E[ZEIHJLK]\d{4}")
_CODE_LAYER_HINT = {"cann": "cann", "driver": "driver", "hccl": "hccl"}
# codes that say nothing about the failing layer: torch_npu prints ERR99999 after any exception
# raised outside torch_npu (the application's, vllm's, a library's) while it was loaded
NO_LAYER_CODES = frozenset({"ERR99999"})


@record(frozen=True)
class ExceptionInfo:
    type: str
    message: str
    line: int

    @property
    def text(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@record
class Block:
    kind: str  # traceback | error | dmesg
    start: int
    lines: list[str] = field(default_factory=list)
    prefixed: list[int] = field(default_factory=list, repr=False)  # context lines not yet de-prefixed

    @property
    def end(self) -> int:
        return self.start + len(self.lines) - 1

    def to_dict(self) -> dict:
        return {"kind": self.kind, "start_line": self.start, "end_line": self.end, "lines": list(self.lines)}


@record
class Signals:
    exceptions: list[ExceptionInfo]
    codes: list[tuple[str, str, int]]  # (code, family, line)
    packages: list[tuple[str, int]]  # (package, frame count), most frequent first
    layer_hints: list[str]
    blocks: list[Block]
    blocks_dropped: int
    error_lines: int
    lines: int
    # numbers of lines the program labelled a warning outside their de-prefixed text: in the stripped
    # log prefix, or (matched lines) on the line above that a wrap cut them from (porter.kb.matcher.scan)
    warning_lines: set[int] = field(default_factory=set)

    @property
    def empty(self) -> bool:
        return not (self.exceptions or self.codes or self.blocks)

    def error_texts(self, limit: int = 40) -> list[str]:
        """Distinct texts worth fuzzy-matching: exception lines, then error-ish block lines."""
        seen: dict[str, None] = {}
        for exc in self.exceptions:
            seen.setdefault(exc.text, None)
        for block in self.blocks:
            for line in block.lines:
                if block.kind != "traceback" and is_errorish(line):
                    seen.setdefault(line.strip(), None)
        return [t for t in seen if len(t) >= 12][:limit]

    def to_dict(self) -> dict:
        return {
            "exceptions": [{"type": e.type, "message": e.message, "line": e.line} for e in self.exceptions],
            "codes": [{"code": c, "family": f, "line": n} for c, f, n in self.codes],
            "packages": [{"package": p, "frames": n, "layer": PACKAGE_LAYER.get(p)} for p, n in self.packages],
            "layer_hints": list(self.layer_hints),
            "blocks": [b.to_dict() for b in self.blocks],
            "blocks_dropped": self.blocks_dropped,
            "error_lines": self.error_lines,
            "lines": self.lines,
        }


def package_of(path: str) -> str | None:
    parts = [p for p in re.split(r"[\\/]", path) if p]
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            i = len(parts) - 1 - parts[::-1].index(marker)
            if i + 1 < len(parts):
                name = parts[i + 1]
                name = name[:-3] if name.endswith(".py") else name
                return name.split("-")[0] or None
    for part in parts[:-1]:
        if part in PACKAGE_LAYER or part in _OTHER_PACKAGES:
            return part
    return None


def _may_be_dmesg(text: str) -> bool:
    """A substring test for what `_DMESG` needs (a leading `[` or a driver word), before its scan."""
    return text[:1] == "[" or "uda_" in text or "devdrv_" in text or "davinci" in text or "hdc_" in text or "dms_" in text


def is_errorish(text: str, tokens=None) -> bool:
    if tokens is None:
        tokens = _TOKEN.findall(text)
    return not _ERR_TOKENS.isdisjoint(tokens) or _ERR_PHRASES.search(text) is not None


def _looks_like_exception(text: str) -> bool:
    """Cheap gate before the full regex: `Type: ...` or a bare `Type` ending in a known suffix."""
    head = text.split(":", 1)[0] if ":" in text else text
    return len(head) < 300 and " " not in head and head.endswith(_EXC_SUFFIXES)


class Extractor:
    """Feed de-prefixed lines in order; `signals()` summarises what was seen."""

    def __init__(self) -> None:
        self._before: deque[tuple[int, str]] = deque(maxlen=CONTEXT_BEFORE)
        self._head: list[Block] = []
        self._tail: deque[Block] = deque(maxlen=MAX_BLOCKS_TAIL)
        self._blocks_seen = 0
        self._current: Block | None = None
        self._state = ""  # "", "tb" (inside a traceback), "exc" (just after its exception line)
        self._after_frame = False  # the previous traceback line was a `File "..."` frame
        self._last = 0  # number of the last fed line
        self._gap = 0
        self._exceptions: dict[tuple[str, str], ExceptionInfo] = {}
        self._codes: dict[str, tuple[str, str, int]] = {}
        self._packages: Counter[str] = Counter()
        self._error_lines = 0
        self._lines = 0

    @property
    def idle(self) -> bool:
        """Not inside a traceback: a line without error-ish content cannot change the state.

        An open error/dmesg block does not count: it is closed lazily when the next fed line
        shows that lines in between were skipped.
        """
        return not self._state

    def note(self, raw: str) -> None:
        """Remember a skipped (clean, still prefixed) line as context for a block that may open
        next; its prefix is stripped only if a block actually uses it."""
        self._before.append((-1, raw))

    def seen(self, lines: int) -> None:
        self._lines = max(self._lines, lines)

    # -- block bookkeeping -------------------------------------------------
    def _open(self, kind: str, number: int, text: str, with_context: bool) -> None:
        self._close()
        start_lines = list(self._before) if with_context else []
        start = number - len(start_lines)
        # skipped context lines keep their prefix for now: most blocks of a big log are
        # dropped again, so `_finish` strips only the ones that are kept
        self._current = Block(kind, start, [t for _, t in start_lines] + [text])
        self._current.prefixed = [i for i, (n, _) in enumerate(start_lines) if n < 0]
        self._gap = 0

    def _append(self, text: str) -> None:
        block = self._current
        if block is not None and len(block.lines) < MAX_BLOCK_LINES:
            block.lines.append(text)

    def _close(self) -> None:
        block = self._current
        if block is None:
            return
        self._current = None
        self._state = ""
        while block.lines and not block.lines[-1].strip():
            block.lines.pop()
        self._blocks_seen += 1
        if len(self._head) < MAX_BLOCKS_HEAD:
            self._head.append(block)
        else:
            self._tail.append(block)

    def _record_exception(self, number: int, text: str) -> bool:
        if not _looks_like_exception(text):
            return False
        m = _EXCEPTION.match(text)
        if not m:
            return False
        key = (m.group("type"), (m.group("msg") or "").strip())
        if key not in self._exceptions and len(self._exceptions) < MAX_EXCEPTIONS:
            self._exceptions[key] = ExceptionInfo(key[0], key[1], number)
        return True

    def _record_codes(self, number: int, text: str) -> None:
        codes = self._codes
        if len(codes) >= MAX_CODES:
            return
        gate = None  # _CODE_GATE on this line, once a gated pattern needs it
        for family, pattern, literal, pretest, gated, joined, grouped in _CODE_PLAN:
            if literal not in text:
                continue
            if gated:
                if gate is None:
                    gate = _CODE_GATE.search(text) is not None
                if not gate:
                    continue
            if pretest is not None and pretest.search(text) is None:
                continue
            for m in pattern.finditer(text):
                start = m.start()
                if start and (joined and text[start - 1].isalnum()):
                    continue  # "xEZ9999" / "1507899": part of a longer word or number
                code = m.group(1) if grouped else m.group()
                if family == "hccl":
                    code = f"HCCL:{code}"  # HcclResult values are small integers: keep them apart
                if code not in self._codes and len(self._codes) < MAX_CODES:
                    self._codes[code] = (code, family, number)

    # -- the state machine -------------------------------------------------
    def feed(self, number: int, text: str, tokens=None, errorish: bool | None = None) -> None:
        """`tokens`: the line's word tokens when the caller already has them (saves a pass);
        `errorish`: `is_errorish(text, tokens)` when the caller computed it (the helper process
        of a two-process scan, porter.kb.split)."""
        try:
            self._feed(number, text, tokens, errorish)
        finally:
            self._last = number

    def _feed(self, number: int, text: str, tokens, errorish: bool | None = None) -> None:
        self._lines = number
        stripped = text.strip()
        if stripped.startswith(_TRACEBACK):
            if self._state in ("tb", "exc") and self._current is not None and self._current.kind == "traceback":
                self._append(text)  # a chained traceback continues the block
            else:
                self._open("traceback", number, text, with_context=False)
            self._state = "tb"
            self._error_lines += 1
            return
        if self._state == "tb":
            frame = _FRAME.match(text)
            if frame:
                pkg = package_of(frame.group("path"))
                if pkg:
                    self._packages[pkg] += 1
                self._append(text)
                self._after_frame = True
                return
            if not stripped or text[:1].isspace() or stripped.startswith(("^", "~", "...", "[Previous line repeated")):
                self._append(text)  # source lines, carets, elisions
                self._after_frame = False
                return
            if self._after_frame and not _looks_like_exception(stripped):
                # a source line that lost its indentation (pasted or re-logged tracebacks)
                self._append(text)
                self._after_frame = False
                return
            self._append(text)
            self._record_exception(number, stripped)
            self._record_codes(number, text)
            self._error_lines += 1
            self._state, self._gap = "exc", 0
            return
        if self._state == "exc":
            if stripped.startswith(_CHAIN_MARKERS):
                self._append(text)
                self._state = "tb"
                return
            if not stripped:
                self._append(text)
                return
            if self._gap < 4 and not _looks_like_exception(stripped):
                self._gap += 1
                self._append(text)  # continuation of a multi-line exception message
                if errorish if errorish is not None else is_errorish(text, tokens):
                    self._error_lines += 1
                    self._record_codes(number, text)
                return
            self._close()
        # outside a traceback
        if text.lstrip().startswith('File "') and _FRAME.match(text):
            # an excerpt that lost its "Traceback" header: treat the frames as a traceback
            self._open("traceback", number, text, with_context=False)
            pkg = package_of(_FRAME.match(text).group("path"))
            if pkg:
                self._packages[pkg] += 1
            self._state = "tb"
            self._before.append((number, text))
            return
        if self._current is not None and number > self._last + 1:
            self._gap += number - self._last - 1  # lines the scanner skipped: not error-ish
            if self._gap > 1:
                self._close()
        if errorish is None:
            errorish = is_errorish(text, tokens)
        is_exc = bool(stripped) and self._record_exception(number, stripped)
        dmesg = bool(_DMESG.search(text)) if (errorish or "uda_" in text or "devdrv" in text) and _may_be_dmesg(text) else False
        if errorish or is_exc or dmesg:
            self._error_lines += 1
            self._record_codes(number, text)
            kind = "dmesg" if dmesg else "error"
            if self._current is not None and self._current.kind == kind and self._gap <= 1:
                self._append(text)
                self._gap = 0
            else:
                self._open(kind, number, text, with_context=True)
        elif self._current is not None:
            self._gap += 1
            if self._gap > 1:
                self._close()
            else:
                self._append(text)
        self._before.append((number, text))

    @staticmethod
    def _finish(block: Block) -> Block:
        for i in block.prefixed:
            block.lines[i] = strip_prefix(block.lines[i])
        block.prefixed = []
        return block

    def signals(self) -> Signals:
        self._close()
        blocks = [self._finish(b) for b in self._head + list(self._tail)]
        hints: Counter[str] = Counter()
        for pkg, count in self._packages.items():
            layer = PACKAGE_LAYER.get(pkg)
            if layer:
                hints[layer] += count
        for code, family, _ in self._codes.values():
            layer = _CODE_LAYER_HINT.get(family) if code not in NO_LAYER_CODES else None
            if layer:
                hints[layer] += 2
        if any(b.kind == "dmesg" for b in blocks):
            hints["driver"] += 1
        return Signals(
            exceptions=list(self._exceptions.values()),
            codes=list(self._codes.values()),
            packages=self._packages.most_common(12),
            layer_hints=[layer for layer, _ in hints.most_common()],
            blocks=blocks,
            blocks_dropped=self._blocks_seen - len(blocks),
            error_lines=self._error_lines,
            lines=self._lines,
        )
