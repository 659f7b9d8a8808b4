"""Redaction of secrets before anything is printed, stored or committed.

The rule: secrets are masked on *values*, before any serialisation (JSON, YAML, HTML, Markdown,
tables, logs), so every output keeps its syntax. `redact_data()` walks a payload (dicts, lists,
strings, objects with `to_dict()`); a dict value whose key names a secret is masked whole, any
other string goes through `redact_text()`. `redact_text()` is line-safe: a PEM private-key block
becomes one marker and the text around it on the same line is kept (and redacted). `Redactor`
does the same on a stream of lines, carrying a PEM block across them. `sanitize_terminal()`
neutralises control sequences from untrusted output (an OSC 52 clipboard write, cursor moves)
before display or logging.

The pattern set follows the prefixes the public secret-scanning rule sets agree on (gitleaks,
GitHub's partner patterns, detect-secrets' keyword plugin) plus the Huawei Cloud / ModelArts
forms our users meet (`*_AK`, `*_SK`, `X-Auth-Token`). Patterns are anchored on a distinctive
prefix or a key name and have no nested quantifiers, so matching stays linear; values are not
length-bounded, so a long secret is masked whole. detect-secrets itself was not used: its
entropy scan is line-by-line Python over every plugin and is far from our 50 MB-in-5 s budget.
"""

from __future__ import annotations

import re

from porter.jsonable import plain
from porter.lazyre import LazyPattern
from porter.record import record

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import Any

MASK = "[REDACTED]"
PEM_MASK = "[REDACTED PRIVATE KEY]"

# Patterns compile on first use (porter.lazyre): the literal gates in `_redact_fragments` leave
# most of them unused on most text.

# Tokens recognisable by their own prefix, wherever they stand.
_TOKEN_PATTERNS: tuple[tuple[tuple[str, ...], LazyPattern], ...] = (  # (literals one of which every match holds, pattern)
    (("hf_",), LazyPattern(r"\bhf_[A-Za-z0-9]{20,}")),  # Hugging Face
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), LazyPattern(r"\bgh[pousr]_[A-Za-z0-9]{20,}")),  # GitHub classic tokens
    (("github_pat_",), LazyPattern(r"\bgithub_pat_[A-Za-z0-9_]{20,}")),  # GitHub fine-grained
    (("gl",), LazyPattern(r"\bgl(?:pat|ptt|dt|rt|soat|cbt|imt|oas|ffct)-[A-Za-z0-9_-]{20,}")),  # GitLab
    (("sk-",), LazyPattern(r"\bsk-[A-Za-z0-9_-]{20,}")),  # OpenAI / Anthropic style keys
    (("_live_", "_test_"), LazyPattern(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}")),  # Stripe
    (("xox",), LazyPattern(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),  # Slack
    (("https://hooks.slack.com/services/",), LazyPattern(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]{20,}")),  # Slack webhook
    (("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA"),
     LazyPattern(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b")),  # AWS key ids
    (("AIza",), LazyPattern(r"\bAIza[0-9A-Za-z_-]{35}")),  # Google API key
    (("npm_",), LazyPattern(r"\bnpm_[A-Za-z0-9]{36}")),  # npm
    (("pypi-AgEIcHlwaS5vcmc",), LazyPattern(r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{20,}")),  # PyPI upload token
    (("eyJ",), LazyPattern(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),  # JWT
)
# every literal of every token rule: a line without any of them skips the rules' own gates
_ANY_TOKEN_LITERAL = LazyPattern("|".join(re.escape(lit) for literals, _ in _TOKEN_PATTERNS for lit in literals))

# Key names that hold a secret: snake, kebab, camel or upper case, any prefix (PGPASSWORD,
# db_password, accessKeySecret, HUAWEICLOUD_SDK_SK, OBS_AK, ak, sk). `max_tokens`, `tokenizer`
# and `task` are not secrets: the secret word must end the key.
_SECRET_WORDS = (
    r"password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?"
    r"|secret[_-]?key|private[_-]?key|client[_-]?secret|credentials?|cookie|session[_-]?id|auth"
)
# every alternative of _SECRET_WORDS contains one of these (lower case); the ak/sk keys are apart
_SECRET_LITERALS = ("pass", "pwd", "secret", "token", "key", "credential", "cookie", "session", "auth")
_KEY = LazyPattern(rf"(?i)^(?:[a-z0-9_.-]*?)(?:{_SECRET_WORDS})$|^(?:[a-z0-9_-]*[_-])?(?:ak|sk)$")
# tokenizer vocabulary and counters that end in a secret word but are plain values
_NOT_SECRET_KEY = LazyPattern(r"(?i)(?:^|[_-])(?:pad|eos|bos|unk|sep|cls|mask|special|image|audio|video|start|end)[_-]?token$"
                             r"|^(?:use|with|has|no|skip)[_-]?(?:auth|token|cookie)$|^tokens$|^auth$|^(?:old)?pwd$")

# key = value / key: value / "key": "value" in free text; quoted values may hold spaces.
_ASSIGNMENT = LazyPattern(
    rf"(?i)(?<![/\w.-])(?P<key>[a-z0-9_.-]*?(?:{_SECRET_WORDS})|(?:[a-z0-9_-]*[_-])?(?:ak|sk))"
    r"(?P<sep>\\?['\"]?\s*(?:=|:(?!//))\s*)"
    r"(?:(?P<q>\\?['\"])(?P<qval>.*?)(?P<close>(?P=q)|$)|(?P<val>[^\s'\",;&)}\]]+))"
)
# command-line flags that take the secret as the next word: `--password hunter2`, `--api_key x`
_FLAG = LazyPattern(
    rf"(?i)(?<![\w-])(?P<flag>--?[a-z0-9_-]*?(?:{_SECRET_WORDS}))(?P<sep>\s+)(?!-)(?P<val>[^\s'\",;]+)"
)
# HTTP headers, also inside a dict repr: 'Authorization': 'Bearer x', X-Auth-Token: x, Cookie: a=b
_HEADER = LazyPattern(
    r"(?i)(?P<name>\b(?:proxy-)?authorization|\bx-(?:auth|subject|api|access)-(?:token|key)|\bset-cookie|\bcookie)"
    r"(?P<sep>['\"]?\s*:\s*['\"]?)(?P<val>[^'\"\r\n]+)"
)
_BEARER = LazyPattern(r"(?i)\b(?P<scheme>bearer\s+)(?P<val>[A-Za-z0-9._~+/=-]{8,})")
# URL userinfo: greedy up to the last '@' before the host, so '@' inside a password is covered.
_URL_USERINFO = LazyPattern(r"(?i)\b(?P<scheme>[a-z][a-z0-9+.-]{1,15}://)(?P<info>[^\s/?#'\"<>]*)@(?=[\w\[])")
_PEM_BEGIN = LazyPattern(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----")
_PEM_END = LazyPattern(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----")
_PEM_INLINE = LazyPattern(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----|\Z)", re.S)
# C0/C1 control characters other than tab and newline: ESC starts every terminal sequence
# (colours, cursor moves, OSC 52 clipboard writes), a lone CR overwrites the line shown
_CONTROLS = LazyPattern(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _may_hold_secret_word(text: str, short: bool) -> bool:
    """False only when no case-insensitive secret word (`short`: nor ak/sk) can match in `text`
    (ASCII text; other text may case-fold into a word, so it answers True)."""
    if not text.isascii():
        return True
    folded = text.lower()
    return any(w in folded for w in _SECRET_LITERALS) or (short and ("ak" in folded or "sk" in folded))


def is_secret_key(key: str) -> bool:
    """A mapping key or variable name whose value is a secret (HF_TOKEN, accessKeySecret, OBS_SK)."""
    if not _may_hold_secret_word(key, short=True):
        return False
    return bool(_KEY.match(key)) and not _NOT_SECRET_KEY.search(key)


def _userinfo(m: re.Match[str]) -> str:
    info = m.group("info")
    user, colon, password = info.partition(":")
    if colon:
        return f"{m.group('scheme')}{user}:{MASK}@" if password else m.group(0)
    # a bare user that is really a token (https://<token>@github.com)
    if len(user) >= 16 and re.search(r"\d", user) and re.search(r"[A-Za-z]", user):
        return f"{m.group('scheme')}{MASK}@"
    return m.group(0)


def _assignment(m: re.Match[str]) -> str:
    if not is_secret_key(m.group("key")):
        return m.group(0)
    if m.group("q") is not None:
        if not m.group("qval"):
            return m.group(0)
        return f"{m.group('key')}{m.group('sep')}{m.group('q')}{MASK}{m.group('close')}"
    value = m.group("val")
    if value in {"None", "null", "true", "false", "True", "False"} or value.startswith(("$", "[REDACTED")):
        return m.group(0)  # already masked, empty, or a reference to another variable
    return f"{m.group('key')}{m.group('sep')}{MASK}"


def _flag(m: re.Match[str]) -> str:
    if _NOT_SECRET_KEY.search(m.group("flag").lstrip("-")):
        return m.group(0)
    return f"{m.group('flag')}{m.group('sep')}{MASK}"


def _redact_fragments(line: str) -> str:
    """Every rule but the PEM block, on text without a private key."""
    # each rule runs only when the line holds a literal every match of it contains (the same
    # result as running it: a rule that cannot match leaves the line as it is)
    if _ANY_TOKEN_LITERAL.search(line):  # one scan for all literals; without one no rule below can match
        for literals, pat in _TOKEN_PATTERNS:
            if any(lit in line for lit in literals):
                line = pat.sub(MASK, line)
    folded = line.lower() if line.isascii() else None  # None: case-folding may differ, run every rule
    if folded is None or "authorization" in folded or "x-" in folded or "cookie" in folded:
        line = _HEADER.sub(lambda m: f"{m.group('name')}{m.group('sep')}{MASK}", line)
        folded = line.lower() if line.isascii() else None
    if folded is None or "bearer" in folded:
        line = _BEARER.sub(lambda m: m.group("scheme") + MASK, line)
    if "://" in line and "@" in line:
        line = _URL_USERINFO.sub(_userinfo, line)
    if ("=" in line or ":" in line) and _may_hold_secret_word(line, short=True):
        line = _ASSIGNMENT.sub(_assignment, line)
    if "-" in line and _may_hold_secret_word(line, short=False):
        line = _FLAG.sub(_flag, line)
    return line


def _redact_inline_pem(text: str) -> str:
    """Mask complete (or unterminated) PEM blocks inside `text`, redacting what stands around them."""
    if "PRIVATE KEY-----" not in text:
        return _redact_fragments(text)
    out: list[str] = []
    pos = 0
    for m in _PEM_INLINE.finditer(text):
        out.append(_redact_fragments(text[pos:m.start()]))
        out.append(PEM_MASK)
        pos = m.end()
    out.append(_redact_fragments(text[pos:]))
    return "".join(out)


@record
class Redactor:
    """Stateful line redactor (a PEM block spans lines). `line()` returns None for a line that lies
    wholly inside a private-key block; text before BEGIN and after END on a line is kept."""

    in_private_key: bool = False
    redactions: int = 0

    def line(self, line: str) -> str | None:
        original = line
        prefix = ""
        if self.in_private_key:
            end = _PEM_END.search(line)
            if not end:
                return None
            self.in_private_key = False
            prefix, line = PEM_MASK, line[end.end():]
        begin = _PEM_BEGIN.search(line)
        if begin and not _PEM_END.search(line, begin.end()):
            # an open block: mask to the end of the line and drop lines until END
            self.in_private_key = True
            out = prefix + _redact_inline_pem(line[: begin.start()]) + PEM_MASK
        else:
            out = prefix + _redact_inline_pem(line)
        if out != original:
            self.redactions += 1
        return out


def redact_text(text: str) -> str:
    """Redact a whole string; a multi-line private-key block collapses to one marker."""
    if "\n" not in text and "\r" not in text:
        return _redact_inline_pem(text)
    r = Redactor()
    out: list[str] = []
    for raw in text.splitlines(keepends=True):
        body = raw.rstrip("\r\n")
        red = r.line(body)
        if red is not None:
            out.append(red + raw[len(body):])
    return "".join(out)


def redact_data(value: Any) -> Any:
    """A copy of `value` (JSON-like data, dataclasses, objects with `to_dict()`) with every secret
    masked; call it on a payload before serialising it, in any format."""
    return _redact_value(value, {}, {})


def _redact_value(value: Any, memo: dict[str, str], keys: dict[str, bool]) -> Any:
    """redact_data with memos: each distinct string is redacted once (`memo`) and each distinct
    mapping key judged once (`keys`): a report repeats its keys and symbols thousands of times,
    and redact_text and is_secret_key are pure functions of the string."""
    if isinstance(value, str):
        out_text = memo.get(value)
        if out_text is None:
            out_text = memo[value] = redact_text(value)
        return out_text
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, str):
                secret = keys.get(key)
                if secret is None:
                    secret = keys[key] = is_secret_key(key)
                if secret and isinstance(item, (str, int, float)) and not isinstance(item, bool) and item not in ("", MASK):
                    out[key] = MASK
                    continue
                out[_redact_value(key, memo, keys)] = _redact_value(item, memo, keys)
            else:
                out[key] = _redact_value(item, memo, keys)
        return out
    if isinstance(value, (list, tuple)):
        return [_redact_value(v, memo, keys) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_redact_value(v, memo, keys) for v in value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    try:
        converted = plain(value)
    except TypeError:
        return value  # left for the serialiser to refuse
    return _redact_value(converted, memo, keys)


def sanitize_terminal(text: str) -> str:
    """Untrusted output made safe for a terminal and a log: escape sequences and control
    characters become visible `\\xNN` text (tab, newline and carriage-return-newline stay)."""
    if not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r\n", "\n"))


def mask_private_key_lines(lines: list[str], inside: bool = False) -> bool:
    """Replace, in place, every line of a PEM private-key block (BEGIN..END) with the mask, keeping
    the line count, for consumers that keep lines one by one (porter diagnose). `inside` carries
    the state across batches; returns it for the next batch. A cheap substring test skips
    batches without keys. Text before BEGIN and after END on their lines is kept."""
    if not inside and not any("PRIVATE KEY-----" in line for line in lines):
        return False
    for i, line in enumerate(lines):
        if inside:
            end = _PEM_END.search(line)
            if end is None:
                lines[i] = MASK
                continue
            inside = False
            rest = line[end.end():]
            lines[i] = PEM_MASK + rest
            line = lines[i]
        begin = _PEM_BEGIN.search(line)
        if begin:
            inside = not _PEM_END.search(line, begin.end())
            lines[i] = _PEM_INLINE.sub(PEM_MASK, line) if not inside else line[: begin.start()] + PEM_MASK
    return inside
