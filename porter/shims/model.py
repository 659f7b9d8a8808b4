"""Records of the shim stage: what each strategy plans to write or edit in the fork.

Planning is pure (DriftRecords + upstream facts -> ShimGroups); `porter.shims.apply` performs
the plan on a worktree. One ShimGroup becomes one commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from porter.upgrade.models import DriftFamily, DriftRecord


@dataclass(frozen=True)
class NewFile:
    """A file the group creates in the fork (shim module or generated test)."""

    path: str  # relative to the fork root, POSIX separators
    content: str
    kind: str = "shim"  # "shim" | "test"


@dataclass(frozen=True)
class ImportMove:
    """`from <module> import <name>` in `path` must import `name` from `shim_module` instead."""

    path: str
    module: str
    name: str
    shim_module: str


@dataclass(frozen=True)
class MemberAdd:
    """Add `code` (a class-body statement with its comments) to class `class_name` in `path`."""

    path: str
    class_name: str
    member: str  # attribute or method name, for idempotence and the generated test
    code: str


@dataclass(frozen=True)
class ParamAdd:
    """Append parameters to the override `class_name.method` in `path` (the base now passes them)."""

    path: str
    class_name: str
    method: str
    params: tuple[tuple[str, str, str], ...]  # (name, default source, kind: positional | keyword_only)
    comment: str = ""
    body_prefix: str = ""  # statements put first in the body (the "not the default: raise" guards)


@dataclass(frozen=True)
class Unhandled:
    """A finding no strategy can bridge (or bridges only in part): work for a human in the PR material.

    `reason` says what to do in words that hold for every member of a class it applies to, so that
    hand-offs of one class for one reason share a line; `detail` is this finding's own fact (the value
    upstream passes and where, the names a call lacks), shown beside its member on that line."""

    record: DriftRecord
    reason: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.record.key, "symbol": self.record.symbol, "reason": self.reason, "detail": self.detail}


@dataclass(frozen=True)
class ShimGroup:
    """One reviewed unit of change: a compat module (or a set of member additions) and its test."""

    name: str  # e.g. "compat/fused_moe"
    family: DriftFamily
    strategy: str  # lazy_import_fallback | signature_adapter | rebuilt_subclass | todo_stub | member_default
    records: tuple[DriftRecord, ...]
    subject: str  # commit subject
    rationale: tuple[str, ...]  # one line per fix: what and why
    files: tuple[NewFile, ...] = ()
    import_moves: tuple[ImportMove, ...] = ()
    member_adds: tuple[MemberAdd, ...] = ()
    param_adds: tuple[ParamAdd, ...] = ()
    todo: tuple[Unhandled, ...] = ()  # findings the group bridges only in part (a stub, a name whose uses still break)
    review: tuple[str, ...] = ()  # record keys flagged for review (defaults chosen by porter)

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(r.symbol for r in self.records)

    @property
    def needs_human(self) -> tuple[str, ...]:
        """Keys of the findings a human must finish."""
        return tuple(dict.fromkeys(u.record.key for u in self.todo))

    @property
    def test_paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files if f.kind == "test")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family.value,
            "strategy": self.strategy,
            "symbols": list(self.symbols),
            "subject": self.subject,
            "rationale": list(self.rationale),
            "files": [f.path for f in self.files],
            "import_moves": [f"{m.path}: {m.module}.{m.name} -> {m.shim_module}" for m in self.import_moves],
            "member_adds": [f"{m.path}: {m.class_name}.{m.member}" for m in self.member_adds],
            "param_adds": [f"{p.path}: {p.class_name}.{p.method}({', '.join(n for n, _, _ in p.params)})" for p in self.param_adds],
            "needs_human": list(self.needs_human),
            "todo": [u.to_dict() for u in self.todo],
            "review": list(self.review),
        }


@dataclass(frozen=True)
class ShimPlan:
    groups: tuple[ShimGroup, ...]
    unhandled: tuple[Unhandled, ...] = ()
    convention: dict[str, Any] = field(default_factory=dict)

    @property
    def needs_human(self) -> tuple[str, ...]:
        keys = [k for g in self.groups for k in g.needs_human]
        keys += [u.record.key for u in self.unhandled]
        return tuple(dict.fromkeys(keys))

    @property
    def hand_offs(self) -> tuple[Unhandled, ...]:
        """One Unhandled per finding left to a human, in plan order: a finding a group bridges only in
        part with every reason the group gave, then those no strategy took."""
        merged: dict[str, Unhandled] = {}
        for item in [u for g in self.groups for u in g.todo] + list(self.unhandled):
            known = merged.get(item.record.key)
            if known is None:
                merged[item.record.key] = item
            else:  # one finding, several members or reasons (a class lacking two attributes): keep every detail
                reason = known.reason if item.reason in known.reason else f"{known.reason}; {item.reason}"
                details = [d for d in (known.detail, item.detail) if d]
                merged[item.record.key] = Unhandled(known.record, reason, "; ".join(dict.fromkeys(details)))
        return tuple(merged.values())

    @property
    def bridged(self) -> tuple[str, ...]:
        human = set(self.needs_human)
        return tuple(dict.fromkeys(r.key for g in self.groups for r in g.records if r.key not in human))

    def to_dict(self) -> dict[str, Any]:
        return {
            "convention": self.convention,
            "groups": [g.to_dict() for g in self.groups],
            "unhandled": [u.to_dict() for u in self.unhandled],
            "bridged": list(self.bridged),
            "needs_human": list(self.needs_human),
        }
