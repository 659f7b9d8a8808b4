"""Labelled trace corpora: the per-case YAML corpus (dev/test split by source thread) and the
older `index.yaml` corpora (seed traces, the regression corpus).

A case is one trace plus its label. The split of a per-case corpus is decided by the source
thread (`split_of`), before anyone writes entries from it, so a case's split can be checked
against its thread; `canonical_thread` turns any URL an entry cites into the same id, which
is how `porter kb eval` finds test cases whose thread an entry already cites.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from porter.errors import InputError

POSITIVE = "positive"
# kinds whose right answer is `unknown` (healthy look-alikes, failures with no established cause;
# `negative` / `unknown` are the names the index.yaml corpora use)
ABSTAIN_KINDS = ("healthy", "unexplained", "negative", "unknown")
SPLITS = ("dev", "test")


@dataclass(frozen=True)
class CorpusCase:
    id: str
    split: str  # dev | test, or the directory name of an index.yaml corpus
    kind: str  # positive | healthy | unexplained (| negative | unknown in index.yaml corpora)
    trace: Path
    thread: str = ""  # canonical source thread (see canonical_thread)
    source: str = ""
    layer: str = ""
    cause: str = ""  # kebab-case slug of the established cause
    expected: tuple[str, ...] = ()
    acceptable: tuple[str, ...] = ()

    @property
    def positive(self) -> bool:
        return self.kind == POSITIVE

    @property
    def wanted(self) -> set[str]:
        return set(self.expected) | set(self.acceptable)


# corpus directories that are held out by name: they score the KB and its calibration, never fit them
HELD_OUT_NAMES = ("test", "heldout")


def split_of(thread: str) -> str:
    """The corpus rule (docs in tests/data/corpus): one third of the threads, by hash, are test."""
    return "test" if int(hashlib.sha256(thread.encode()).hexdigest(), 16) % 3 == 0 else "dev"


_GITHUB_THREAD = re.compile(r"^github\.com/([^/]+)/([^/]+)/(?:issues|pull|pulls|discussions)/(\d+)")


def canonical_thread(url: str) -> str:
    """`github.com/<owner>/<repo>/issues/<n>` (pull requests too), else the URL without scheme,
    query, fragment and trailing slash."""
    text = url.strip().strip("<>\"'")
    text = re.sub(r"^[a-z][a-z0-9+.-]*://", "", text, flags=re.IGNORECASE)
    text = text.split("#", 1)[0].split("?", 1)[0].rstrip("/")
    if text.lower().startswith("www."):
        text = text[4:]
    m = _GITHUB_THREAD.match(text)
    if m:
        return f"github.com/{m.group(1)}/{m.group(2)}/issues/{m.group(3)}"
    return text


def _ids(value) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return ()
    return tuple(str(v).strip() for v in value if str(v).strip())


def _case_from_label(label_path: Path, split_dir: str | None) -> CorpusCase:
    from porter.yamlio import load_yaml_file

    doc = load_yaml_file(label_path)
    if not isinstance(doc, dict):
        raise InputError(f"{label_path}: a case label must be a mapping", hint="see tests/data/corpus/README.md")
    case_id = str(doc.get("id") or label_path.stem)
    trace = label_path.with_suffix(".txt")
    if not trace.is_file():
        raise InputError(f"{label_path}: its trace {trace.name} is missing", hint="each <id>.yaml sits next to <id>.txt")
    kind = str(doc.get("kind") or POSITIVE)
    if kind != POSITIVE and kind not in ABSTAIN_KINDS:
        raise InputError(f"{label_path}: kind {kind!r} is not positive, healthy or unexplained")
    thread = canonical_thread(str(doc.get("thread") or doc.get("source") or ""))
    split = str(doc.get("split") or split_dir or (split_of(thread) if thread else ""))
    return CorpusCase(
        id=case_id,
        split=split,
        kind=kind,
        trace=trace,
        thread=thread,
        source=str(doc.get("source") or ""),
        layer=str(doc.get("layer") or ""),
        cause=str(doc.get("cause") or "").strip(),
        expected=_ids(doc.get("expected")),
        acceptable=_ids(doc.get("acceptable")),
    )


def _index_cases(corpus: Path) -> list[CorpusCase]:
    from porter.yamlio import load_yaml_file

    index = corpus / "index.yaml"
    doc = load_yaml_file(index) or {}
    cases = doc.get("cases") if isinstance(doc, dict) else None
    if not isinstance(cases, list):
        raise InputError(f"{index}: expected a `cases:` list")
    out = []
    for i, case in enumerate(cases):
        if not isinstance(case, dict) or not case.get("file"):
            raise InputError(f"{index}: case {i} has no `file`")
        path = corpus / case["file"]
        if not path.is_file():
            raise InputError(f"{path}: listed in index.yaml but missing")
        source = str(case.get("source") or "")
        out.append(CorpusCase(
            id=str(case["file"]),
            split=corpus.name,
            kind=str(case.get("kind", POSITIVE)),
            trace=path,
            thread=canonical_thread(source) if source else "",
            source=source,
            expected=_ids(case.get("expected")),
            acceptable=_ids(case.get("acceptable")),
        ))
    return out


def load_corpus(corpus: Path) -> list[CorpusCase]:
    """Every case under `corpus`: an index.yaml corpus, a split directory of `<id>.yaml` labels,
    or a directory holding `dev/` and `test/` split directories."""
    corpus = Path(corpus)
    if not corpus.is_dir():
        raise InputError(f"{corpus}: not a directory", hint="pass a corpus directory such as tests/data/corpus")
    if (corpus / "index.yaml").is_file():
        return _index_cases(corpus)
    split_dirs = [corpus / s for s in SPLITS if (corpus / s).is_dir()]
    if not split_dirs:
        split_dirs = [corpus]
    cases: list[CorpusCase] = []
    for d in split_dirs:
        name = d.name if d.name in SPLITS else None
        for label in sorted(d.glob("*.yaml")):
            cases.append(_case_from_label(label, name))
    if not cases:
        raise InputError(f"{corpus}: no cases (neither index.yaml nor <id>.yaml labels)",
                         hint="see tests/data/corpus/README.md for the layout")
    seen: dict[str, Path] = {}
    for case in cases:
        if case.id in seen:
            raise InputError(f"{case.trace}: duplicate case id {case.id!r} (also {seen[case.id]})")
        seen[case.id] = case.trace
    return cases


def effective_split(case: CorpusCase) -> str:
    """The split the thread hashes to (a case filed under the wrong directory still counts there)."""
    if case.split in SPLITS and case.thread:
        return split_of(case.thread)
    return case.split


def split_problems(cases: list[CorpusCase]) -> list[str]:
    """Cases whose declared split disagrees with their thread's hash (a collection mistake)."""
    out = []
    for case in cases:
        if case.split in SPLITS and case.thread and split_of(case.thread) != case.split:
            out.append(f"{case.id}: split {case.split} but thread {case.thread} hashes to {split_of(case.thread)}")
    return out
