"""Rank the commits after the installed version that may have fixed the trace's bug.

Evidence, strongest first: the commit's message quotes the trace's exception (type and message
template, or the distinctive names in the message); it rewrote the exact failing line; it changed
the failing function; its diff changes the string that makes the error, or uses the error's code
names, or changes the plugin's override of a framework function that failed; it is a bug fix.
Pure: commits and frames in, candidates out.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from rapidfuzz import fuzz

from porter.kb.history.mine import code_names, fragment_key, is_code_name, line_key, message_fragments
from porter.kb.history.models import Candidate, CommitRecord, FileChange, Frame, OtherFrame, RaiseSite, TraceFacts

FRAME_WEIGHTS = (1.0, 0.7, 0.5, 0.35)  # by depth from the innermost plugin frame; deeper: the last
LINE_POINTS = 3.0  # rewrote the failing line
FUNC_POINTS = 1.5  # changed the failing function (scaled down for functions many commits change)
FILE_POINTS = 0.3
CODE_CAP = 5.0
TYPE_POINTS = 1.0  # the message names the exception type
QUOTE_POINTS = 4.0  # the message quotes the exception's message (values included)
TEMPLATE_POINTS = 1.0  # the message quotes the same kind of message (values blanked)
NAME_POINTS = 1.5  # per distinctive name of the exception message found in the commit's message
NAME_CAP = 3.0
EXTRA_HIT_POINTS = 0.25  # each further name found past the first: more of the error matches, past the cap too
PASTED_FRAME_POINTS = 4.0  # the message pastes a failing plugin frame (its function and source line): the PR met this trace
PASTED_DEPTH = 2  # the innermost plugin frames looked for among a message's pasted ones
ISSUE_POINTS = 6.0  # the message says it fixes the issue the user says the report came from (`Fixes #N`)
RARE_NAME_COMMITS = 3  # a name at most this many commit messages mention is rare
COMMON_NAME_COMMITS = 20
SUBJECT_POINTS = 0.5  # the title itself names the error's type or code names (more decisive than the body)
WHERE_POINTS = 1.0  # the message names the failing module or function (`fix X in qwen2_5_vl`)
FIX_POINTS = 1.0
DIFF_NAME_POINTS = (2.5, 1.0, 0.3)  # the diff's added/removed lines use a name of the error: rare, common, very common
DIFF_NAME_CAP = 2.5  # with a bug-fix title (3.5) just enough for a candidate on code evidence alone
FOREIGN_FUNC_POINTS = 1.0  # changed a function of the framework frames' name (the plugin's override or patch of it)
LITERAL_POINTS = (3.0, 1.5, 0.3)  # the diff changes a string holding the error's text: rare, common, very common
LITERAL_CAP = 3.0
TITLE_POINTS = 4.0  # the commit's title restates a short report (an issue title) that has no error line: times its coverage
TITLE_MIN_COVERAGE = 0.35  # the share of the report's information (idf-weighted words) the title must hold
TITLE_MIN_WORDS = 2
PHRASE_MIN_WORDS = 3  # this many content words in the same order in the report and the title: one phrase, not a bag
PHRASE_POINTS = 1.0  # (`low MTP acceptance rate` in both): the title names the same symptom
# a long report (an issue title of 12-15 content words) dilutes the idf-weighted coverage: a commit title holding this
# many of its words (a compound counts two) restates it whatever the share; few titles of a history hold five
TITLE_MANY_WORDS = 5
TITLE_MANY_POINTS = 1.0
ERROR_TITLE_MIN_WORDS = 3  # content words of the exception's message the fix's title holds (`tensor`, `same`, `device`)
ERROR_TITLE_POINTS = 2.5  # ... while its diff changes a failing frame's file: with a bug-fix title (3.5) a candidate on that alone
MASK_MIN = 20  # a message line this long that the trace contains (or one holding a trace line) is a quote
QUOTED_LINE_POINTS = LINE_POINTS  # rewrote a code line the report quotes in backticks (`x[i] = y[j]`): the failing line
NAMED_POINTS = FUNC_POINTS  # changed a function the report names as code (a trace without plugin frames); scaled like FUNC_POINTS
NAMED_CAP = FUNC_POINTS
NAMED_FILE_POINTS = 1.0  # ... and the change is in a file the report names by path: the function and its file, a frame in prose
MIN_NAME_COMPOUND = 8  # a shorter joined pair (`tpsize`) sits inside unrelated names by chance
# a joined pair inside a longer name stands for it only when it is most of it (`fusedkernel` is 11 of
# `usefusedkernel`'s 14 letters; `torchnpu` 8 of `istorchnpuavailable`'s 19, another function that mentions torch_npu)
COMPOUND_SHARE = 0.6
BODY_WORD_WEIGHT = 0.5  # a report word the commit's description (not its title) holds counts this much towards the coverage
SITE_POINTS = 2.5  # changed the function whose string prints the trace's error (raise_site.py; no plugin frame): damped like FUNC_POINTS
SITE_LINE_POINTS = 1.0  # and rewrote the very line that prints it
RELEASE_LINE_POINTS = 0.5  # a commit with evidence on the installed version's release branch (release_line.py): the user's next patch release has it
THRESHOLD = 3.5  # a candidate is proposed at this score
GUESSED_VERSION_PENALTY = 1.5  # a commit the version guessed from the frames already has: likely, not surely, in
GUESSED_WORK_FACTOR = 0.5  # the same for a commit that is no bug fix: it most likely wrote the code the trace shows
QUOTE_MIN = 90.0
TEMPLATE_MIN = 90.0
KEY_WORDS = 6  # the message's longest words, one of which a commit's text must hold before a fuzzy quote is tried
MIN_TEMPLATE_WORDS = 4  # a template of fewer real words ("Q object has no attribute Q") is too common
GENERIC_TYPES = frozenset({"RuntimeError", "Exception", "ValueError", "Error"})
# Python's own classes (`'NoneType' object`, `UserWarning`) name no code of the plugin. Its
# exceptions stay: a commit that names the trace's `ValueError` is about that error; a warning is
# not part of the failure.
BUILTIN_NAMES = frozenset(
    name for name, value in vars(__import__("builtins")).items()
    if isinstance(value, type) and (not issubclass(value, BaseException) or issubclass(value, Warning))
) | {"NoneType", "function", "method", "module", "builtin_function_or_method"}
_FUNC_EVIDENCE = re.compile(r"changes \S+\(\) in ")
# style-only work (formatters, linters, typos): it rewrites every line of a file without changing what the code does
# (tool names and style tags only: a `[BugFix] fix the output format` or a typo fix can change what the code does)
_MECHANICAL = re.compile(r"\[(?:lint|style|format)\]|\b(?:ruff|yapf|isort|flake8|mypy|codespell|pre-commit|reformat(?:ted)?|code style)\b", re.I)
_LOG_FIELD = re.compile(r"\b\w+=")  # `device_id=0, stream_id=512`: a log record's field names, not the failing code
_CODE_SPAN = re.compile(r"`([^`\n]{8,200})`")
_STATEMENT = re.compile(r"[\w\])]\s*(?:[-+*/]?=|\(|\[)|\w\.\w+\(")  # an assignment, a call or a subscript: a code line, not a name
_PATH = re.compile(r"\S*/\S*")
_QUALIFIER = re.compile(r"\b\w+::")
_SOURCE_LINE = re.compile(r"\b[\w.-]+\.(?:cpp|cc|cxx|c|h|hpp|ts|py|cu):\d+")  # `ascend_direct_transport.cpp:820]`: a log's place
_TOKEN = re.compile(r"[A-Za-z_][\w.-]*\w")
_QUOTED = re.compile(r"'[^']{0,200}'|\"[^\"]{0,200}\"")
_NUM = re.compile(r"\b0x[0-9a-fA-F]+\b|\b\d+(?:\.\d+)?\b")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]+(?:-[a-z0-9]+)+")
_COMMON_WORDS = frozenset(
    "self none nonetype object attribute argument arguments expected unexpected keyword positional given "
    "takes missing required module named import cannot from found support supported tensor tensors shape "
    "error failed value type must with should into than this that have when which size dtype device index "
    "list dict tuple call called function method class vllm pytorch".split()
)


# a stop-gap rather than the repair: `add a switch` to turn the failing feature off, `workaround`, `temporarily`
_WORKAROUND = re.compile(
    r"\b(?:workaround|work[- ]around|temporar(?:y|ily)|bypass|stop-?gap|(?:add|adds|added)\s+(?:a\s+|an\s+)?"
    r"(?:switch|toggle|env(?:ironment)?\s+var(?:iable)?))\b", re.I)


def is_workaround(subject: str) -> bool:
    """The title says the commit sidesteps the failure (a switch to disable it, a temporary workaround):
    where it ties with a commit that repairs it, the repair is the answer."""
    return bool(_WORKAROUND.search(subject))


def is_mechanical(subject: str) -> bool:
    """A formatting, lint or typo commit: it touches lines without changing what they do."""
    return bool(_MECHANICAL.search(subject))


def quoted_code_lines(text: str) -> tuple[str, ...]:
    """Code statements a report quotes in backticks (`sorted_bitmask[i] = grammar_bitmask[j]`):
    where no frame prints the failing line, the report often names it so."""
    out: dict[str, None] = {}
    for m in _CODE_SPAN.finditer(text):
        span = " ".join(m.group(1).split())
        if _STATEMENT.search(span) and line_key(span):
            out.setdefault(span, None)
    return tuple(list(out)[:6])


def template(message: str) -> str:
    """The message with its variable parts (quoted values, numbers) blanked: the error's template."""
    return " ".join(_NUM.sub("N", _QUOTED.sub("Q", message)).lower().split())


def distinctive_names(message: str) -> list[str]:
    """Identifiers in an exception message that point at code (snake_case, CamelCase, dotted), and
    command-line flags (`--enable-prompt-tokens-details`): an option's name is as specific as code's."""
    out: dict[str, None] = dict.fromkeys(_FLAG.findall(message))
    for m in _NAME.finditer(message):
        name = m.group()
        if _hyphenated(message, m.start(), m.end()):
            continue  # a part of `LLaMA-Factory`, `DeepSeek-V3`: a product's name (no identifier holds a hyphen)
        low = name.lower()
        if low in _COMMON_WORDS or name in BUILTIN_NAMES or (name.startswith("__") and name.endswith("__")):
            continue  # dunders (`__init__`) name a protocol every class has, not this code
        if "_" in name or (any(c.isupper() for c in name[1:]) and any(c.islower() for c in name)):
            out.setdefault(name, None)
    return list(out)[:8]


def _hyphenated(text: str, start: int, end: int) -> bool:
    """The word at text[start:end] is joined to another by a hyphen (`LLaMA-Factory`, `torch-npu`)."""
    after = text[end:end + 2]
    before = text[max(start - 2, 0):start]
    return (len(after) == 2 and after[0] == "-" and after[1].isalnum()) \
        or (len(before) == 2 and before[1] == "-" and before[0].isalnum())


_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.]*[A-Za-z0-9]")
_TAG = re.compile(r"^\s*(?:\[[^\]]{0,40}\]\s*:?\s*)+")
_PR_REF = re.compile(r"\(#\d+\)\s*$")
_REPORT_STOP = frozenset(
    "the and for with from when that this into not are was were has have had can could cannot does doesn "
    "after before while during use using used fix fixes fixed bug bugfix issue error errors fail fails failed "
    "failure crash crashes support add adds added update make makes run runs running how why what which "
    # keyword values (`bitcast=True`; not `None`: `x is None` is a symptom) and the reporter's stance or version (`weird`,
    # `triton latest`): no words of the failure
    "true false weird strange unexpected unexpectedly latest".split()
)


def _stem(word: str) -> str:
    w = name_form(word).rstrip(".")  # `gather_v3` ~ `GatherV3`
    for suffix in ("ing", "ed", "es", "s"):
        if len(w) > len(suffix) + 3 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


@functools.lru_cache(maxsize=16384)
def title_sequence(title: str) -> tuple[str, ...]:
    """The content words of a title or one-line report in the order it writes them, stemmed
    (`outputs` ~ `output`), without its `[Tag]` prefixes, its `(#PR)` suffix and the words every
    bug title has (fix, error, ...)."""
    text = _PR_REF.sub("", _TAG.sub("", title))
    return tuple(w for w in (_stem(_last_part(t)) for t in _WORD.findall(text)) if len(w) >= 3 and w not in _REPORT_STOP)


_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def _last_part(word: str) -> str:
    """A dotted name's own name: a report writes `tl.constexpr`, `core.extern_elementwise`, a fix title
    `constexpr`, `extern elementwise`. File names (`utils.py`) and versions (`v0.9.1`) stay whole."""
    if _DOTTED.fullmatch(word):
        last = word.rsplit(".", 1)[1]
        if len(last) >= 3:
            return last
    return word


def shared_phrase(report: Sequence[str], title: Sequence[str]) -> tuple[str, ...]:
    """The longest run of words both sequences hold one after the other."""
    best: tuple[str, ...] = ()
    for i in range(len(report)):
        for j in range(len(title)):
            n = 0
            while i + n < len(report) and j + n < len(title) and report[i + n] == title[j + n]:
                n += 1
            if n > len(best):
                best = tuple(report[i:i + n])
    return best


@functools.lru_cache(maxsize=16384)  # pure; the df count and the scoring read every title of the index
def title_words(title: str) -> frozenset[str]:
    """title_sequence() as a set."""
    return frozenset(title_sequence(title))


@functools.lru_cache(maxsize=16384)
def title_compounds(title: str) -> frozenset[str]:
    """Two adjacent words of the title written as one: the form a code name takes in a report
    (`extern_elementwise`, folded `externelementwise`, for a title's `extern elementwise`)."""
    seq = title_sequence(title)
    return frozenset(a + b for a, b in zip(seq, seq[1:]))


def title_match(report: frozenset[str], title: str) -> tuple[frozenset[str], int]:
    """The report's words the title holds, as words or as a compound of two of them, and how many
    of the title's words that is (a compound is two)."""
    words = report & title_words(title)
    joined = title_compounds(title)
    # a report's option or code name holds the title's two words with more around them (`use_fused_kernels`,
    # folded `usefusedkernel`, for a title's `fused kernels`): the same name with its prefix or suffix
    inside = [j for j in joined if len(j) >= MIN_NAME_COMPOUND]
    # ... and the two words must be most of that name: `torch npu` is no spelling of `is_torch_npu_available`
    compounds = {w for w in report - words
                 if w in joined or any(j in w and len(j) >= COMPOUND_SHARE * len(w) for j in inside)}
    return words | compounds, len(words) + 2 * len(compounds)


def where_free(message: str) -> str:
    """The message without the places it prints: file paths (`torch_npu/csrc/.../CopyKernel.cpp:274`),
    source lines a log record names (`compiler_depend.ts:117`) and C++ namespace qualifiers
    (`c10_npu::acl::`) say where the code lives, not what failed; every error of that library prints them."""
    return _QUALIFIER.sub("", _SOURCE_LINE.sub(" ", _PATH.sub(" ", message)))


def specific_tokens(message: str) -> tuple[str, ...]:
    """The message's parts that tell one instance of an error form from another: code names,
    file and library names (`libhccl.so`, `ascend_transport.so`), codes mixing letters and digits
    (`EZ1001`), quoted values other than Python's type names. Numbers alone are left out (sizes
    and addresses vary from run to run). Lowercase."""
    out: dict[str, None] = {}
    for m in _QUOTED.finditer(message):
        value = m.group(0)[1:-1].strip()
        if value and value not in BUILTIN_NAMES and not _NUM.fullmatch(value) and len(value) <= 80:
            out.setdefault(value.lower(), None)
    for tok in _TOKEN.findall(_QUOTED.sub(" ", message)):
        tok = tok.rstrip(".-")
        if tok in BUILTIN_NAMES or len(tok) < 4:
            continue
        if is_code_name(tok) or any(c.isdigit() for c in tok) or re.search(r"[A-Za-z]\.[A-Za-z]", tok):
            out.setdefault(tok.lower(), None)
    return tuple(out)


def covers(quote: str, tokens: Sequence[str]) -> bool:
    """The quote holds every specific token: it quotes this error, not another of the same form."""
    low = quote.lower()
    return all(t in low for t in tokens)


@dataclass(frozen=True)
class _Query:
    frames: tuple[Frame, ...]
    keys: tuple[str | None, ...]  # line_key() of each frame's source line
    exc_type: str
    message: str
    template: str
    names: tuple[str, ...]
    places: tuple[str, ...]  # the innermost frame's module stem and function (when distinctive)
    words: tuple[str, ...]  # the message's longest words (lowercase): a cheap test before fuzzy matching
    diff_names: tuple[str, ...] = ()  # code names of the error and the plugin's failing lines, looked for in the diffs
    other_funcs: tuple[str, ...] = ()  # framework functions of the causal traceback, innermost first
    literals: tuple[tuple[str, str], ...] = ()  # (fragment, fragment_key) of the error text's fixed parts
    other_names: tuple[str, ...] = ()  # code names of the innermost framework line: count with a change to its function
    specific: tuple[str, ...] = ()  # specific_tokens() of the message: a quote must hold them all
    report: frozenset[str] = frozenset()  # title_words() of a short report without an error line (an issue title)
    quoted: tuple[tuple[str, str], ...] = ()  # (code line, line_key) of statements the report quotes in backticks
    report_words: tuple[str, ...] = ()  # title_sequence() of the same report
    named: tuple[str, ...] = ()  # functions the report names as code (named.named_functions), when no frame is the plugin's
    sites: tuple[RaiseSite, ...] = ()  # where the plugin prints the error's text (raise_site.raise_sites), when no frame is the plugin's
    named_files: frozenset[str] = frozenset()  # repository files the report names by path, when it names functions too


def _query(facts: TraceFacts, extra_text: str = "", report: str = "", quoted: Sequence[str] = (),
           named: Sequence[str] = (), sites: Sequence[RaiseSite] = (), named_files: Sequence[str] = ()) -> _Query:
    frames = facts.frames
    tpl = template(facts.exception_message)
    words = [w for w in tpl.split() if w not in ("q", "n") and len(w) > 2]
    # a message without code names (`list index out of range`): the error lines around it may name the code
    exc_name = facts.exception_type.rsplit(".", 1)[-1]
    names = tuple(distinctive_names(where_free(facts.exception_message))
                  or [n for n in distinctive_names(_LOG_FIELD.sub(" ", where_free(extra_text))) if n != exc_name])
    titled = bool(report) and (not facts.exception_message or prose_title(report, facts, names))
    return _Query(frames, tuple(line_key(f.source) if f.source else None for f in frames),
                  facts.exception_type.rsplit(".", 1)[-1], " ".join(facts.exception_message.lower().split()),
                  tpl if len(words) >= MIN_TEMPLATE_WORDS else "",
                  names, _places(frames), _keys(facts.exception_message),
                  _diff_names(names, [f.source for f in frames[:2]]), _other_funcs(facts.other_frames),
                  _literals(facts.exception_message or extra_text),
                  _diff_names((), [o.source for o in facts.other_frames[:1]]), specific_tokens(facts.exception_message),
                  title_words(report) if titled else frozenset(),
                  tuple((line, key) for line in quoted if (key := line_key(line))),
                  title_sequence(report) if titled else (),
                  () if frames else tuple(named),  # a frame says where it failed better than the prose does
                  () if frames else tuple(sites),
                  frozenset() if frames or not named else frozenset(named_files))


# a short paste's first line that is output, not a title: a traceback's header or frame, a log record (level, `pid=`,
# a clock time), a test runner's verdict, an import statement
_TRACE_LINE = re.compile(
    r"^\s*(?:Traceback\b|File \"|During handling\b|The above exception\b|FAILED\b|PASSED\b|ERROR\b|\[\s*(?:RUN|OK|FAILED)\b"
    r"|\[?\s*(?:ERROR|WARNING|WARN|INFO|DEBUG|CRITICAL)\b|from\s+[\w.]+\s+import\b|import\s+\w)"
    r"|\bpid=\d|\b\d\d:\d\d:\d\d\b")


def prose_title(report: str, facts: TraceFacts, names: Sequence[str]) -> bool:
    """A report's title in its own words above an error that names no code (`tl.cast(bitcast=True) errors on dtype
    passed as tl.constexpr` over `AttributeError: 'constexpr' object has no attribute 'scalar'`): the title says what
    failed, and a fix's title may restate it. Not when the title is the error line itself (a one-line paste: its
    words are the error's, which the quote rules read), a line of the trace or log (`Traceback (most recent call
    last):`, `(Worker pid=1) ERROR ...`: no title at all), or when the error names code (those names are the evidence)."""
    if names or distinctive_names(where_free(facts.exception_message)) or _TRACE_LINE.search(report):
        return False
    exc = facts.exception_type.rsplit(".", 1)[-1]
    head = " ".join(facts.exception_message.split())[:40].lower()
    low = " ".join(report.split()).lower()
    return not (exc and exc in report) and not (head and head in low)


def _literals(text: str) -> tuple[tuple[str, str], ...]:
    frags = dict.fromkeys(message_fragments(text[:2000]))
    return tuple((f, fragment_key(f)) for f in list(frags)[:8])


def _diff_names(names: Sequence[str], sources: Sequence[str]) -> tuple[str, ...]:
    """The error's code names, then those of the given failing source lines."""
    out: dict[str, None] = dict.fromkeys(n for n in names if is_code_name(n))
    for src in sources:
        for n in code_names(src):
            out.setdefault(n, None)
    return tuple(list(out)[:10])


def _other_funcs(others: Sequence[OtherFrame]) -> tuple[str, ...]:
    # short or dunder names (`_run`, `__init__`) match too many unrelated overrides
    return tuple(dict.fromkeys(o.function for o in others if len(o.function) >= 8 and not o.function.startswith("__")))[:4]


def _longest_first(word: str) -> tuple[int, str]:
    return -len(word), word


def _keys(message: str) -> tuple[str, ...]:
    """The message's longest words: the three longest and every word as long as the third (at most KEY_WORDS, ties
    in alphabetical order). A set sorted by length alone and cut at three kept a different tie from one interpreter
    run to the next (the hash seed), and with it whether a commit's text held one."""
    words = sorted({w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{3,}", _QUOTED.sub(" ", message))}, key=_longest_first)
    if not words:  # a message of quoted values only: its values are the words
        words = sorted({w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{3,}", message)}, key=_longest_first)
    if len(words) <= 3:
        return tuple(words)
    return tuple(w for w in words if len(w) >= len(words[2]))[:KEY_WORDS]


def _places(frames: Sequence[Frame]) -> tuple[str, ...]:
    if not frames:
        return ()
    f = frames[0]
    stem = f.repo_path.rsplit("/", 1)[-1].removesuffix(".py")
    out = [p for p in (stem, f.function) if len(p) >= 8 and p not in ("__init__", "forward", "__call__", "utils")]
    return tuple(dict.fromkeys(out))


def _quote_ratio(message: str, quoted: str) -> float:
    """How well a string the commit quotes reproduces the trace's message. A short quote inside a
    long message (`RuntimeError`, an error code) is no quote of it: it must cover half of it."""
    if len(quoted) < len(message) and len(quoted) < max(24, len(message) // 2):
        return 0.0
    return fuzz.partial_ratio(message, quoted)


def _damped(points: float, changing: int) -> float:
    """`points` for changing a function, less the more commits since the version change one of that
    name (`forward` is in every other diff; a rare function is evidence)."""
    return points / (1.0 + math.log(max(changing, 1)))


def _weight(depth: int) -> float:
    return FRAME_WEIGHTS[min(depth, len(FRAME_WEIGHTS) - 1)]


def function_popularity(commits: Iterable[CommitRecord], frames: Sequence[Frame]) -> dict[tuple[str, str], int]:
    """How many of the commits changed each frame's function: a function every commit touches
    (execute_model, forward) is weak evidence, a rarely touched one is strong."""
    wanted = {(f.repo_path, f.function) for f in frames}
    counts: dict[tuple[str, str], int] = {k: 0 for k in wanted}
    for c in commits:
        for ch in c.changes:
            for key in ((ch.path, fn) for fn in ch.functions):
                if key in counts:
                    counts[key] += 1
    return counts


def site_popularity(commits: Iterable[CommitRecord], sites: Sequence[RaiseSite],
                    paths: Mapping[str, set[str]]) -> dict[tuple[str, str], int]:
    """How many of the commits changed each raise site's function (in its file, under any of its names)."""
    counts: dict[tuple[str, str], int] = {}
    for site in sites:
        names = paths.get(site.path, {site.path})
        counts[(site.path, site.function)] = sum(1 for c in commits if any(_edits_site(ch, site, names) for ch in c.changes))
    return counts


def _edits_site(ch: FileChange, site: RaiseSite, names: set[str]) -> bool:
    """The change edits the site's function in the site's file (under any name the file had)."""
    return (ch.path in names or ch.old_path in names) and site.function in ch.functions


def commit_frequency(commits: Iterable[CommitRecord], keys: Iterable[str], view: Callable[[CommitRecord], Any],
                     hit: Callable[[Any, str], bool]) -> dict[str, int]:
    """How many commits hold each key: `view` reads a commit once, `hit` tests one key against it."""
    counts = {k: 0 for k in keys}
    if not counts:
        return counts
    for c in commits:
        seen = view(c)
        for k in counts:
            if hit(seen, k):
                counts[k] += 1
    return counts


def _keyed_frequency(commits: Iterable[CommitRecord], keys: Iterable[str], field: str) -> dict[str, int]:
    """How many commits have each key in one of their changes' " k1 k2 " fields (FileChange.names,
    .literals): the fields of a commit's files joined once, then one substring test per key (the
    same counts as FileChange.touches / .quotes per file, without a call per file and key)."""
    wanted = [(k, f" {k} ") for k in dict.fromkeys(keys)]
    counts = {k: 0 for k, _ in wanted}
    if not counts:
        return counts
    for c in commits:
        text = "".join(getattr(ch, field) for ch in c.changes)  # " a b " + " c " keeps every key space-delimited
        if text:
            for k, pattern in wanted:
                if pattern in text:
                    counts[k] += 1
    return counts


def diff_name_frequency(commits: Iterable[CommitRecord], names: Sequence[str]) -> dict[str, int]:
    """How many of the commits' diffs use each name on an added or removed line."""
    return _keyed_frequency(commits, names, "names")

def function_name_popularity(commits: Iterable[CommitRecord], funcs: Sequence[str]) -> dict[str, int]:
    """How many commits changed a function of each name, in any file."""
    return commit_frequency(commits, funcs, lambda c: {fn for ch in c.changes for fn in ch.functions},
                            lambda changed, fn: fn in changed)

def literal_frequency(commits: Iterable[CommitRecord], literals: Sequence[tuple[str, str]]) -> dict[str, int]:
    """How many of the commits' diffs change a string literal holding each error-text fragment."""
    return _keyed_frequency(commits, (k for _, k in literals), "literals")

def _literal_points(df: int) -> float:
    return LITERAL_POINTS[0] if df <= RARE_NAME_COMMITS else LITERAL_POINTS[1] if df <= COMMON_NAME_COMMITS else LITERAL_POINTS[2]


def _diff_name_points(df: int) -> float:
    return DIFF_NAME_POINTS[0] if df <= RARE_NAME_COMMITS else DIFF_NAME_POINTS[1] if df <= COMMON_NAME_COMMITS else DIFF_NAME_POINTS[2]


def _norm(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class QuoteMask:
    """The trace's own text: message lines that quote it are left out of a commit's message
    (the benchmark's ablation for fixes whose pull request pasted the very trace)."""

    text: str  # the whole trace, whitespace-normalised
    lines: tuple[str, ...]  # its lines of MASK_MIN characters or more, normalised

    @classmethod
    def of(cls, trace: str) -> "QuoteMask":
        lines = [_norm(x) for x in trace.splitlines()]
        return cls(_norm(trace), tuple(dict.fromkeys(x for x in lines if len(x) >= MASK_MIN)))

    def keeps(self, line: str) -> bool:
        n = _norm(line)
        if len(n) >= MASK_MIN and n in self.text:
            return False
        return not any(t in n for t in self.lines)


def name_form(text: str) -> str:
    """Case and underscores folded: a CANN log's `gather_v3` is the `GatherV3` a commit names."""
    return text.lower().replace("_", "")


def names_in(name: str, text: str, folded: str) -> bool:
    """The text names it, as written or, for a snake_case name (an inner underscore), in another
    casing (`gather_v3` ~ `GatherV3`). A name without one is matched as written: folding `_builder`
    or `blockIdx` would match the English word or another variable."""
    if name in text:
        return True
    core = name.strip("_")
    return "_" in core and len(core) >= 6 and name_form(core) in folded


def message_text(commit: CommitRecord, mask: QuoteMask | None = None) -> str:
    text = f"{commit.subject}\n{commit.body}\n" + "\n".join(commit.error_strings)
    if mask is None:
        return text
    return "\n".join(line for line in text.split("\n") if mask.keeps(line))


def _name_points(df: int) -> float:
    return NAME_CAP if df <= RARE_NAME_COMMITS else NAME_POINTS if df <= COMMON_NAME_COMMITS else NAME_POINTS / 3


def name_frequency(commits: Iterable[CommitRecord], names: Sequence[str]) -> dict[str, int]:
    """How many commit messages mention each name."""
    return commit_frequency(commits, names, lambda c: (t := message_text(c), name_form(t)),
                            lambda texts, n: names_in(n, *texts))

@dataclass(frozen=True)
class Frequencies:
    """How common each piece of the query's evidence is among the commits: rare evidence weighs more."""

    names: Mapping[str, int]  # commit messages naming each of the error's names
    diff_names: Mapping[str, int]  # diffs using each code name on an added or removed line
    functions: Mapping[str, int]  # commits changing a function of each framework frame's name
    literals: Mapping[str, int]  # diffs changing a string literal with each error-text fragment
    title_df: Mapping[str, int] | None = None  # commit titles holding each word of the report
    commits: int = 1

    def idf(self, word: str) -> float:
        return math.log((self.commits + 1) / (1 + (self.title_df or {}).get(word, 0)))


NO_FREQUENCIES = Frequencies({}, {}, {}, {})


def frequencies(commits: Sequence[CommitRecord], after: Sequence[CommitRecord], q: _Query, use_message: bool) -> Frequencies:
    """Message names over every commit; the code evidence over the commits after the version."""
    report = q.report if use_message else frozenset()
    return Frequencies(name_frequency(commits, q.names) if use_message else {},
                       diff_name_frequency(after, (*q.diff_names, *q.other_names)),
                       function_name_popularity(after, (*q.other_funcs, *q.named)), literal_frequency(after, q.literals),
                       commit_frequency(commits, report, lambda c: (title_words(c.subject), title_compounds(c.subject)),
                                        lambda seen, w: w in seen[0] or w in seen[1]),
                       max(len(commits), 1))


def score(commit: CommitRecord, q: _Query, popularity: Mapping[tuple[str, str], int], paths: Mapping[str, set[str]],
          use_message: bool = True, freq: Frequencies = NO_FREQUENCIES,
          mask: QuoteMask | None = None, issue: tuple[int, frozenset[str]] | None = None) -> tuple[float, list[str]]:
    """`issue`: (number, the commits that say they fix it) of the issue the user says the report came from."""
    evidence: list[str] = []
    code = 0.0
    mechanical = is_mechanical(commit.subject)
    for frame, key in zip(q.frames, q.keys):
        names = paths.get(frame.repo_path, {frame.repo_path})
        best, why = 0.0, ""
        for ch in commit.changes:
            if ch.path not in names and ch.old_path not in names:
                continue
            w = _weight(frame.depth)
            if mechanical:  # a formatter rewrote the line; the code stayed what it was
                pts, text = FILE_POINTS * w, f"changes {ch.path}"
            elif key and ch.removes(key):
                pts, text = LINE_POINTS * w, f"rewrites the failing line {frame.repo_path}:{frame.line} `{frame.source[:120]}`"
            elif frame.function in ch.functions:
                n = popularity.get((frame.repo_path, frame.function), 1)
                pts = _damped(FUNC_POINTS * w, n)
                text = f"changes {frame.function}() in {frame.repo_path} ({n} commit(s) since your version do)"
            else:
                pts, text = FILE_POINTS * w, f"changes {ch.path}"
            if pts > best:
                best, why = pts, text
        if best:
            code += best
            if why not in evidence:
                evidence.append(why)
    frame_code = code  # evidence from the failing frames' own files
    if not mechanical:
        line = next((line for line, key in q.quoted if any(ch.removes(key) for ch in commit.changes)), None)
        if line:
            code += QUOTED_LINE_POINTS
            evidence.append(f"rewrites the failing line the report quotes `{line[:120]}`")
    named = [n for n in q.named if any(n in ch.functions for ch in commit.changes)] if not mechanical else []
    if named:
        # where the report says the bug is: weighed like a failing frame's function, by how many commits change one
        code += min(sum(_damped(NAMED_POINTS, freq.functions.get(n, 1)) for n in named), NAMED_CAP)
        evidence.append("its diff changes " + ", ".join(f"`{n}`" for n in named[:3]) + ", which the report names")
        # ... in the very file the report names (`Error Location: verl/utils/debug/metrics.py`): a frame in prose
        where = next((ch.path for ch in commit.changes if ch.path in q.named_files and any(n in ch.functions for n in named)), None)
        if where:
            code += NAMED_FILE_POINTS
            evidence.append(f"it changes that function in {where}, the file the report names")
    code += _site_points(commit, q.sites, popularity, paths, mechanical, evidence)
    overrides = False
    for depth, fn in enumerate(q.other_funcs):
        if any(fn in ch.functions for ch in commit.changes):
            n = freq.functions.get(fn, 1)
            code += _damped(FOREIGN_FUNC_POINTS * _weight(depth), n)
            evidence.append(f"its diff changes a {fn}() (the trace failed in the framework's {fn}; {n} commit(s) change one)")
            overrides = True
            break  # the innermost one it changed: further frames add little
    # the files' " k1 k2 " fields joined once: one substring test per key (see _keyed_frequency)
    literal_text = "".join(ch.literals for ch in commit.changes) if q.literals else ""
    quoted = [(f, k) for f, k in q.literals if f" {k} " in literal_text]
    if quoted:
        code += min(sum(_literal_points(freq.literals.get(k, 1)) for _, k in quoted), LITERAL_CAP)
        evidence.append(f"its diff changes the string that makes this error (`{quoted[0][0][:80]}`)")
    # a framework line's names say which code only where the commit changed the plugin's version of that function
    names = (*q.diff_names, *(n for n in q.other_names if n not in q.diff_names)) if overrides else q.diff_names
    names_text = "".join(ch.names for ch in commit.changes) if names else ""
    hits = [n for n in names if f" {n} " in names_text]
    if hits:
        code += min(sum(_diff_name_points(freq.diff_names.get(n, 1)) for n in hits), DIFF_NAME_CAP) + EXTRA_HIT_POINTS * (len(hits) - 1)
        evidence.append("its diff uses " + ", ".join(f"`{n}`" for n in hits[:4]) + " of the error or failing line")
    code = min(code, CODE_CAP)
    text = message_text(commit, mask) if use_message else ""
    msg = 0.0
    if q.exc_type and q.exc_type not in GENERIC_TYPES and q.exc_type in text:
        msg += TYPE_POINTS
        evidence.append(f"message names {q.exc_type}")
    low = text.lower()
    # the longest words of the message must be in the commit's text before a fuzzy quote can match
    quotable = use_message and any(w in low for w in q.words)
    # under the quote mask, an error string or title that quotes the trace is left out like the message lines
    quoted = [t for t in (*commit.error_strings, commit.subject)
              if len(t) >= 10 and (mask is None or mask.keeps(t))] if quotable else []
    if q.message and len(q.message) >= 12 and quoted:
        best, best_text = max((_quote_ratio(q.message, " ".join(t.lower().split())), t) for t in quoted)
        # a near quote that lacks the trace's library, name or code quotes another error of the same form
        if best >= QUOTE_MIN and covers(best_text, q.specific):
            msg += QUOTE_POINTS * (best - 70.0) / 30.0
            evidence.append(f"message quotes the error ({best:.0f}% match)")
        elif q.template:
            best_t = max(fuzz.partial_ratio(q.template, template(t)) for t in quoted)
            if best_t >= TEMPLATE_MIN:
                msg += TEMPLATE_POINTS
                evidence.append(f"message quotes an error of the same form ({best_t:.0f}% template match)")
    folded = name_form(text)
    hits = [n for n in q.names if names_in(n, text, folded)]
    if hits:
        # a name few commits mention (`decode_hs_or_q_c`) says more than one many do (`torch_npu`)
        msg += min(sum(_name_points(freq.names.get(n, 1)) for n in hits), NAME_CAP) + EXTRA_HIT_POINTS * (len(hits) - 1)
        evidence.append("message names " + ", ".join(f"`{n}`" for n in hits[:4]))
    if q.report and use_message and (mask is None or mask.keeps(commit.subject)):
        shared, matched = title_match(q.report, commit.subject)
        if matched >= TITLE_MIN_WORDS:
            # the rest of the report's words in the description count too, less than in the title
            body = commit.body if mask is None else "\n".join(x for x in commit.body.split("\n") if mask.keeps(x))
            described = (q.report - shared) & title_words(body) if body else frozenset()
            coverage = (sum(freq.idf(w) for w in shared) + BODY_WORD_WEIGHT * sum(freq.idf(w) for w in described)) \
                / sum(freq.idf(w) for w in q.report)
            if coverage >= TITLE_MIN_COVERAGE:
                msg += TITLE_POINTS * coverage
                evidence.append(f"its title restates the report ({', '.join(sorted(shared)[:5])}; {coverage:.0%} of its words)")
                phrase = shared_phrase(q.report_words, title_sequence(commit.subject)) if len(shared) >= PHRASE_MIN_WORDS else ()
                if len(phrase) >= PHRASE_MIN_WORDS:
                    msg += PHRASE_POINTS
                    evidence.append(f"its title has the report's phrase `{' '.join(phrase)}`")
                if matched >= TITLE_MANY_WORDS:
                    msg += TITLE_MANY_POINTS
                    evidence.append(f"its title holds {matched} of the report's words")
    # the title restates the exception's message in its own words (`fix tensor not same device in X` for `Expected all
    # tensors to be on the same device`) and the diff changes a failing frame's file: no quote, the same failure there
    if frame_code and q.message and use_message and not mechanical and (mask is None or mask.keeps(commit.subject)):
        said = title_words(q.message) & title_words(commit.subject)
        if len(said) >= ERROR_TITLE_MIN_WORDS:
            msg += ERROR_TITLE_POINTS
            evidence.append(f"its title restates the error ({', '.join(sorted(said)[:5])}) and it changes the failing file")
    # the fix's description pastes the traceback it fixes (below the sections the body keeps): the same
    # failing function with the same source line is this trace's frame, not another error of its kind.
    # Not under the quote mask: a pasted frame is a quote of the trace.
    pasted = next((f for f, key in zip(q.frames[:PASTED_DEPTH], q.keys) if key and use_message and mask is None
                   and commit.pasted and commit.pastes(f.function, key)), None)
    if pasted is not None:
        msg += PASTED_FRAME_POINTS * _weight(pasted.depth)
        evidence.append(f"message pastes the failing frame {pasted.function}() `{pasted.source[:100]}`")
    if issue and use_message and commit.sha in issue[1]:
        msg += ISSUE_POINTS
        evidence.append(f"its message says it fixes issue #{issue[0]}, the report's")
    if code and use_message:
        where = next((w for w in q.places if w in text), None)
        if where:
            msg += WHERE_POINTS
            evidence.append(f"message names `{where}`, where the trace failed")
    if not code and msg < QUOTE_POINTS * 0.5:
        return 0.0, []  # neither the code of the trace nor its error: unrelated
    if msg and use_message and (mask is None or mask.keeps(commit.subject)) \
            and any(n in commit.subject for n in (*q.names, *q.places, q.exc_type) if n):
        msg += SUBJECT_POINTS
        evidence.append("its title names it")
    total = code + msg
    if commit.is_fix:
        total += FIX_POINTS
        evidence.append("bug-fix title")
    return total, evidence


def _site_points(commit: CommitRecord, sites: Sequence[RaiseSite], popularity: Mapping[tuple[str, str], int],
                 paths: Mapping[str, set[str]], mechanical: bool, evidence: list[str]) -> float:
    """A change to the function that prints the trace's error (the best of the sites). Not anchored:
    the literal may also be printed where the code is fine (a log line of the same words)."""
    if mechanical:
        return 0.0
    best, why = 0.0, ""
    for site in sites:
        names = paths.get(site.path, {site.path})
        key = line_key(site.source)
        for ch in commit.changes:
            if not _edits_site(ch, site, names):
                continue
            pts = SITE_POINTS
            text = f"its diff edits {site.function}() of {site.path}, where the plugin prints `{site.literal[:80]}`"
            if key and ch.removes(key):
                pts += SITE_LINE_POINTS
                text += f" (it rewrites that line, {site.path}:{site.line})"
            if pts > best:
                best, why = pts, text
    if best:
        evidence.append(why)
    return best


def is_test_path(path: str) -> bool:
    parts = path.split("/")
    name = parts[-1]
    return any(p in ("tests", "test", ".github") for p in parts[:-1]) or name.startswith("test_") or name.endswith("_test.py") \
        or name == "conftest.py"


def changes_only_tests(commit: CommitRecord) -> bool:
    """The commit changed test files only (as far as the index saw: its .py files)."""
    return bool(commit.changes) and all(is_test_path(ch.path) for ch in commit.changes)


def anchored(evidence: Sequence[str]) -> bool:
    """Evidence that ties a commit to this very trace, not to the kind of error: it rewrote the
    failing line, changed a failing frame's function, or its message quotes the error (with the
    trace's own names and values, see covers())."""
    return any(e.startswith(("rewrites the failing line", "message quotes the error", "its message says it fixes issue",
                             "message pastes the failing frame"))
               or _FUNC_EVIDENCE.match(e) for e in evidence)


def rank(commits: Sequence[CommitRecord], facts: TraceFacts, first_tag: Mapping[str, str], contained: set[str] | None,
         paths: Mapping[str, set[str]], top: int = 3, strict: bool = False,
         use_message: bool = True, error_text: str = "", guessed: bool = False,
         mask: QuoteMask | None = None, report: str = "", quoted: Sequence[str] = (),
         issue: tuple[int, frozenset[str]] | None = None, named: Sequence[str] = (),
         sites: Sequence[RaiseSite] = (), line: tuple[str | None, frozenset[str]] = (None, frozenset()),
         named_files: Sequence[str] = ()) -> tuple[list[Candidate], list[Candidate]]:
    """(candidates after the installed version, best fixes already contained in it), each best first.
    `use_message=False` ranks on code evidence alone (an ablation for the benchmark). `error_text`:
    the trace's error lines, whose code names count when the exception carries no message.
    `guessed`: the installed version was guessed from the frames' code (the same lines live in many
    releases): commits it contains stay candidates, ranked lower, instead of being ruled out.
    `mask`: leave out the lines of each commit message that quote the trace (a benchmark ablation).
    `report`: the first line of a short input without an error line (an issue title): a commit
    whose title restates it (idf-weighted word overlap) gains up to TITLE_POINTS.
    `quoted`: code statements the report quotes (quoted_code_lines): a commit that rewrote one
    rewrote the failing line.
    `issue`: (number, shas) of the issue the report came from, when the user names it, and the commits
    whose message says they fix it (issues.fixing_commits): each gains ISSUE_POINTS.
    `named`: functions the report names as code (named.named_functions): without plugin frames, a commit
    that changed one gains up to NAMED_CAP (not anchored: the report's blame is no failing frame).
    `sites`: where the plugin's source prints the error's text (raise_site.raise_sites): without plugin frames,
    a commit that changed one of those functions gains up to SITE_POINTS (not anchored).
    `named_files`: repository files the report names by path: a change to a `named` function in one of them gains
    NAMED_FILE_POINTS more.
    `line`: (branch, shas) of the installed version's release line after it (release_line.release_line_commits):
    a commit there with any evidence gains RELEASE_LINE_POINTS (the fix the user's next patch release ships).
    `strict`: the trace looks like an environment fault (lookup.environment_verdict): only
    anchored() candidates that change more than tests are proposed.

    `commits` newest first; `contained` the shas the installed version has (None: unknown, so every
    commit counts as after it); `paths` maps a repository path to all names it had."""
    q = _query(facts, error_text, report, quoted, named, sites, named_files)
    if not (q.frames or q.message or q.other_funcs or q.names or q.literals or q.report or q.quoted or issue or q.named or q.sites):
        return [], []
    after = [c for c in commits if contained is None or c.sha not in contained]
    popularity = function_popularity(after, q.frames)
    if q.sites:
        popularity.update(site_popularity(after, q.sites, paths))
    freq = frequencies(commits, after, q, use_message)
    threshold = THRESHOLD
    scored: list[tuple[float, int, Candidate]] = []
    inside: list[tuple[float, int, Candidate]] = []
    for age, c in enumerate(commits):
        s, ev = score(c, q, popularity, paths, use_message, freq, mask, issue)
        if s and c.sha in line[1]:
            s += RELEASE_LINE_POINTS
            ev = [*ev, f"on your release line ({line[0]})"]
        if s < threshold:
            continue
        if strict and not (anchored(ev) and not changes_only_tests(c)):
            # the trace looks like an environment fault: names and diff words are not enough, and a
            # commit that only changed the project's tests worked around the same fault in its CI
            continue
        is_in = contained is not None and c.sha in contained
        if is_in and guessed:
            # work before the tag whose code the trace shows most likely built that code: a fix there may be the one
            s = s - GUESSED_VERSION_PENALTY if c.is_fix else s * GUESSED_WORK_FACTOR
            if s < threshold:
                continue
            ev = [*ev, "may already be in your version (guessed from the frames' code)"]
            is_in = False
        cand = Candidate(c.sha, c.subject, c.pr, first_tag.get(c.sha), s, tuple(ev), is_in)
        # ties: a bug fix before other work, then the oldest commit after the version (the first
        # fix is the one that fixed it)
        (inside if is_in else scored).append((s, age, cand))
    fixes = {c.sha for c in commits if c.is_fix}
    by_sha = {c.sha: c for c in commits}
    # ties: a bug fix before other work, a repair before a workaround (an earlier `add a switch` for the same
    # error), a release line's copy after the change it copies, then the oldest
    scored.sort(key=lambda t: (-t[0], t[2].sha not in fixes, is_workaround(t[2].subject), is_backport(by_sha[t[2].sha]), -t[1]))
    inside.sort(key=lambda t: (-t[0], is_backport(by_sha[t[2].sha]), t[1]))
    after_cands, inside_cands = merge_backports([c for _, _, c in scored], [c for _, _, c in inside], by_sha)
    return after_cands[:top], inside_cands[:1]


# a release line's tag in a title (`[v0.13.0]`, `[0.20.2rc]`, `[releases/v0.24.0rc]`) or a cherry-pick marker
_RELEASE_TAG = re.compile(r"\[\s*(?:v?\d+\.\d+(?:\.\d+)?(?:rc\d*|\.?post\d+|\.?dev\d*)?|releases?/[^\]]{1,40}|cherry[- ]?pick(?:ed)?|backport)\s*\]", re.I)
_FROM_PR = re.compile(r"\s*\((?:from|cherry[- ]picked from|backport of)\s+#?\d+\)", re.I)
_LEADING_TAGS = re.compile(r"^\s*(?:\[[^\]]{0,40}\]\s*:?\s*)+")
MIN_CHANGE_KEY = 16  # a shorter title ("fix ci", "update readme") is written for many unrelated changes


def is_backport(commit: CommitRecord) -> bool:
    """The commit copies a change onto a release line: its title carries a release tag or a
    cherry-pick marker, or git's `cherry picked from commit` line is in its message."""
    return bool(_RELEASE_TAG.search(commit.subject) or _FROM_PR.search(commit.subject)
                or "cherry picked from commit" in commit.body)


def change_key(subject: str) -> str:
    """The title without its tags, release markers and PR number: a change and its cherry-picks share it."""
    s = _FROM_PR.sub("", _PR_REF.sub("", subject.strip()))
    s = _LEADING_TAGS.sub("", _RELEASE_TAG.sub("", s))
    key = " ".join(s.lower().rstrip(". ").split())
    return key if len(key) >= MIN_CHANGE_KEY else ""


def merge_backports(after: Sequence[Candidate], inside: Sequence[Candidate],
                    commits: Mapping[str, CommitRecord]) -> tuple[list[Candidate], list[Candidate]]:
    """One answer per change: a cherry-pick onto a release line (is_backport) and the change it
    copies (the same change_key) are one candidate, the better ranked one first, the other in `also`.
    When the installed version holds either copy, it holds the fix: the change is no candidate."""
    def key(c: Candidate) -> str:
        return change_key(c.subject)

    def group(cands: Sequence[Candidate]) -> dict[str, list[Candidate]]:
        out: dict[str, list[Candidate]] = {}
        for c in cands:
            if k := key(c):
                out.setdefault(k, []).append(c)
        return out

    # a key joins copies only where one of them is a release line's copy: two unrelated changes may share a title
    def copies(members: Sequence[Candidate]) -> bool:
        return len(members) > 1 and any(is_backport(commits[m.sha]) for m in members) \
            and any(not is_backport(commits[m.sha]) for m in members)

    both = group([*after, *inside])
    joined = {k for k, members in both.items() if copies(members)}
    held = {key(c) for c in inside} & joined
    merged_after: list[Candidate] = []
    placed: set[str] = set()
    for c in after:
        k = key(c)
        if k in held:
            continue  # the installed version has a copy of this change
        if k in joined:
            if k in placed:
                continue
            placed.add(k)
            others = [m for m in both[k] if m.sha != c.sha and not m.contained]
            c = replace(c, also=tuple((m.sha, m.first_tag) for m in others))
        merged_after.append(c)
    merged_inside: list[Candidate] = []
    for c in inside:
        k = key(c)
        if k in joined:
            if k in placed:
                continue
            placed.add(k)
            others = [m for m in both[k] if m.sha != c.sha]
            c = replace(c, also=tuple((m.sha, m.first_tag) for m in others))
        merged_inside.append(c)
    return merged_after, merged_inside
