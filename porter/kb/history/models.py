"""Records for the history search: frames, mined commits, the index, candidates, the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

INDEX_SCHEMA = 9
REPORT_SCHEMA = 1


@dataclass(frozen=True)
class Frame:
    """One traceback frame that lies in the plugin's repository."""

    path: str  # as printed in the trace
    repo_path: str  # the same file inside the repository
    line: int
    function: str
    source: str  # the source line the trace printed under the frame ("" when absent)
    depth: int  # 0 = innermost plugin frame of the causal traceback

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OtherFrame:
    """A frame of the causal traceback outside the repository (the framework the plugin patches)."""

    path: str
    function: str
    source: str


@dataclass(frozen=True)
class TraceFacts:
    frames: tuple[Frame, ...]  # innermost first
    exception_type: str
    exception_message: str
    other_frames: tuple[OtherFrame, ...] = ()  # the causal segment's frames outside the repository, innermost first


@dataclass(frozen=True)
class RaiseSite:
    """A function of the plugin whose string literal holds a fixed part of the trace's error text."""

    path: str
    function: str
    line: int
    source: str  # the source line holding the literal, stripped
    literal: str  # the fixed part of the error text found there


@dataclass(slots=True)  # not frozen: an index holds ~20k of them and frozen __init__ is slow to load
class FileChange:
    path: str  # after the commit
    old_path: str  # before it (differs on renames; "" for new files)
    functions: tuple[str, ...]  # functions/classes whose body the diff touched
    removed: str  # " k1 k2 ... ": line_key() of every removed (or rewritten) line; one string loads fast
    names: str = ""  # " n1 n2 ... ": code names (snake_case, CamelCase) on the added and removed lines
    literals: str = ""  # " k1 k2 ... ": fragment_key() of the error-text fragments in their string literals

    def removes(self, key: str) -> bool:
        return f" {key} " in self.removed

    def touches(self, name: str) -> bool:
        return f" {name} " in self.names

    def quotes(self, key: str) -> bool:
        return f" {key} " in self.literals

    def to_list(self) -> list[Any]:
        return [self.path, self.old_path, list(self.functions), self.removed, self.names, self.literals]

    @classmethod
    def from_list(cls, raw: list[Any]) -> "FileChange":
        return cls(raw[0], raw[1], tuple(raw[2]), raw[3], raw[4] if len(raw) > 4 else "", raw[5] if len(raw) > 5 else "")


@dataclass(slots=True)
class CommitRecord:
    sha: str
    time: int  # committer time, epoch seconds
    subject: str
    pr: int | None
    is_fix: bool
    error_strings: tuple[str, ...]  # error texts quoted in the message
    changes: tuple[FileChange, ...]
    body: str = ""  # the message after the subject, trimmed
    pasted: str = ""  # " f:k ... ": function and line_key() of each traceback frame the whole message pastes

    def pastes(self, function: str, key: str) -> bool:
        return f" {function}:{key} " in self.pasted

    def to_dict(self) -> dict[str, Any]:
        return {"sha": self.sha, "time": self.time, "subject": self.subject, "pr": self.pr, "is_fix": self.is_fix,
                "error_strings": list(self.error_strings), "body": self.body, "pasted": self.pasted,
                "changes": [c.to_list() for c in self.changes]}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "CommitRecord":
        return cls(raw["sha"], int(raw["time"]), raw["subject"], raw.get("pr"), bool(raw["is_fix"]),
                   tuple(raw.get("error_strings", ())), tuple(FileChange.from_list(c) for c in raw.get("changes", ())),
                   raw.get("body", ""), raw.get("pasted", ""))


@dataclass
class HistoryIndex:
    """Per-commit facts of one branch of a repository, newest first; cached by the tip's commit id."""

    head: str
    ref: str
    commits: list[CommitRecord]
    first_tag: dict[str, str]  # sha -> first tag (in version order) that contains it
    tags: list[str]  # version order, oldest first
    files: list[str]  # .py files at the tip (to map trace paths into the repository)
    schema: int = INDEX_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "head": self.head, "ref": self.ref, "tags": self.tags, "files": self.files,
                "first_tag": self.first_tag, "commits": [c.to_dict() for c in self.commits]}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "HistoryIndex":
        return cls(raw["head"], raw["ref"], [CommitRecord.from_dict(c) for c in raw["commits"]], dict(raw["first_tag"]),
                   list(raw["tags"]), list(raw["files"]), int(raw.get("schema", INDEX_SCHEMA)))


@dataclass(frozen=True)
class Installed:
    version: str | None
    ref: str | None  # the tag (or commit) that holds the installed code
    source: str  # env | trace | frames | unknown

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Candidate:
    sha: str
    subject: str
    pr: int | None
    first_tag: str | None
    score: float
    evidence: tuple[str, ...]
    contained: bool = False  # already in the installed version
    also: tuple[tuple[str, str | None], ...] = ()  # (sha, first tag) of the same change on other branches (cherry-picks)

    @property
    def headline(self) -> str:
        pr = f" (#{self.pr})" if self.pr and f"(#{self.pr})" not in self.subject else ""
        where = f", first in {self.first_tag}" if self.first_tag else ", in no tag yet"
        if self.also:
            where += "; also " + ", ".join(f"{sha[:12]}" + (f" (first in {tag})" if tag else "") for sha, tag in self.also)
        if self.contained:
            return f"your version already contains this fix: {self.sha[:12]} {self.subject}{pr}{where}"
        return f"possibly fixed upstream by {self.sha[:12]} {self.subject}{pr}{where}"

    def to_dict(self) -> dict[str, Any]:
        return {"sha": self.sha, "subject": self.subject, "pr": self.pr, "first_tag": self.first_tag,
                "score": round(self.score, 3), "evidence": list(self.evidence), "contained": self.contained,
                "also": [{"sha": sha, "first_tag": tag} for sha, tag in self.also], "headline": self.headline}


@dataclass
class HistoryReport:
    repo: str
    status: str  # candidates | none | no-frames | unavailable
    installed: Installed
    frames: list[Frame] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    contained: list[Candidate] = field(default_factory=list)
    note: str = ""  # what history would need, when unavailable
    index_used: bool = False
    commits_considered: int = 0
    elapsed_s: float = 0.0
    gate: str = ""  # why only candidates tied to the trace itself count (it looks like an environment fault)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": REPORT_SCHEMA, "gate": self.gate, "repo": self.repo, "status": self.status, "installed": self.installed.to_dict(),
                "frames": [f.to_dict() for f in self.frames], "candidates": [c.to_dict() for c in self.candidates],
                "contained": [c.to_dict() for c in self.contained], "note": self.note, "index_used": self.index_used,
                "commits_considered": self.commits_considered, "elapsed_s": round(self.elapsed_s, 3)}
