"""Redaction of secrets before anything is printed, stored or committed.

Line-oriented so it works on streams: `Redactor.line()` keeps state across the lines of a
PEM private-key block. `redact_text()` is the convenience for whole strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MASK = "[REDACTED]"

# Each pattern is anchored on a distinctive prefix and bounded, so matching stays linear.
_TOKEN_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),  # Hugging Face token
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub tokens
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"),  # GitLab
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),  # OpenAI-style keys
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),  # Slack
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),  # JWT
)
# key=value / key: value / "key": "value" where the key ends in a secret word (HF_TOKEN,
# db_password); `max_tokens` or `tokenizer` are not secrets and stay readable.
_ASSIGNMENT = re.compile(
    r"(?i)(?<![/.\w])((?:[A-Z0-9_]*_)?(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|auth[_-]?token)"
    r")\b(['\"]?\s*[=:]\s*)(['\"]?)([^\s'\",;]{1,512})"
)
# command-line flags that take the secret as the next word: `--password hunter2`, `--hf-token x`
_FLAG = re.compile(r"(?i)(?<![\w-])(--?(?:[a-z0-9]+-)*(?:password|passwd|secret|token|api-key|access-key))(\s+)(?!-)([^\s'\",;]{1,512})")
_BEARER = re.compile(r"(?i)\b(authorization\s*:\s*(?:bearer|basic|token)\s+)([A-Za-z0-9._~+/=-]{4,})")
_URL_CREDENTIALS = re.compile(r"\b([a-z][a-z0-9+.-]{1,15}://)([^\s/@:]{1,128}):([^\s/@]{1,256})@")
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----")


def _redact_line_fragments(line: str) -> str:
    for pat in _TOKEN_PATTERNS:
        line = pat.sub(MASK, line)
    line = _BEARER.sub(lambda m: m.group(1) + MASK, line)
    line = _URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", line)
    line = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{MASK}", line)
    line = _FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", line)
    return line


@dataclass
class Redactor:
    """Stateful line redactor (a PEM block spans lines). `line()` returns None for a dropped line."""

    in_private_key: bool = False
    redactions: int = 0

    def line(self, line: str) -> str | None:
        if self.in_private_key:
            if _PEM_END.search(line):
                self.in_private_key = False
            return None
        begin = _PEM_BEGIN.search(line)
        if begin:
            self.redactions += 1
            if not _PEM_END.search(line, begin.end()):
                self.in_private_key = True
            return line[: begin.start()] + MASK + " (private key removed)"
        out = _redact_line_fragments(line)
        if out != line:
            self.redactions += 1
        return out


def redact_text(text: str) -> str:
    """Redact a whole string; a private key block collapses to one marker line."""
    r = Redactor()
    out: list[str] = []
    for raw in text.splitlines(keepends=True):
        body = raw.rstrip("\r\n")
        red = r.line(body)
        if red is not None:
            out.append(red + raw[len(body):])
    return "".join(out)


def mask_private_key_lines(lines: list[str], inside: bool = False) -> bool:
    """Replace, in place, every line of a PEM private-key block (BEGIN..END) with the mask, keeping
    the line count, for consumers that keep lines one by one (porter diagnose). `inside` carries
    the state across batches; returns it for the next batch. A cheap substring test skips
    batches without keys."""
    if not inside and not any("PRIVATE KEY-----" in line for line in lines):
        return False
    for i, line in enumerate(lines):
        if inside:
            inside = not _PEM_END.search(line)
            lines[i] = MASK
        elif begin := _PEM_BEGIN.search(line):
            inside = not _PEM_END.search(line, begin.end())
            lines[i] = line[: begin.start()] + MASK + " (private key removed)"
    return inside
