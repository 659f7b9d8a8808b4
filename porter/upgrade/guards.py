"""Evaluate the conditions a plugin's upstream use sits under, for a given target version.

A condition is stored as source text (so usage scans can be cached independent of the target)
and evaluated here in three-valued logic: True (branch taken), False (dead), None (unknown).
Recognised: `vllm_version_is("0.x")` style helpers, version tuple / `Version(...)` comparisons
on names the knowledge file lists (torch_npu's `CURRENT_VERSION`, `torch.__version__`),
`TYPE_CHECKING`, `hasattr(upstream_obj, "name")` (answered by the target index), and
`not`/`and`/`or` over those.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

from packaging.version import InvalidVersion, Version

from porter.upgrade.models import Guard, GuardKind


@dataclass(frozen=True)
class Condition:
    """One enclosing condition of a use: `kind`, the test's source, and whether the use is in the
    else-branch (negated)."""

    kind: str  # if | try | handler | suppress | type_checking
    source: str = ""
    negated: bool = False
    try_id: int = 0  # pairs a try body with its handlers
    line: int = 0  # of the `if` statement (its guard block), 0 when unknown

    def to_tuple(self) -> tuple:
        return (self.kind, self.source, self.negated, self.try_id)


@dataclass(frozen=True)
class GuardConventions:
    """How a plugin spells version checks (from knowledge/upstreams.yaml)."""

    version_functions: dict[str, str] = field(default_factory=dict)  # helper name -> upstream, e.g. vllm_version_is -> vllm
    version_names: dict[str, str] = field(default_factory=dict)  # CURRENT_VERSION -> torch
    packages: dict[str, str] = field(default_factory=dict)  # import name -> upstream (torch -> torch)


@dataclass(frozen=True)
class MainRef:
    """An upstream's development branch (the plugin's main lane): no release number, never equal to
    a release, and at least as new as `floor` (the newest release it is known to be past)."""

    floor: Version | None = None

    def __str__(self) -> str:
        return f"main (>= {self.floor})" if self.floor else "main"


@dataclass(frozen=True)
class TargetVersions:
    """The version of each upstream at the target; None = a git ref with no release number;
    MainRef = the development branch past a known release."""

    versions: dict[str, Version | MainRef | None] = field(default_factory=dict)

    def of(self, upstream: str) -> Version | MainRef | None:
        return self.versions.get(upstream)


HasAttr = Callable[[str, str], bool | None]  # (dotted object, attribute) -> exists at target?


def parse_version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


_VERSION_TEXT = re.compile(r"__version__|version", re.IGNORECASE)


class _Evaluator:
    def __init__(self, conventions: GuardConventions, target: TargetVersions, hasattr_fn: HasAttr | None, aliases: dict[str, str]):
        self.conv = conventions
        self.target = target
        self.hasattr_fn = hasattr_fn
        self.aliases = aliases  # local name -> dotted upstream name in the plugin file

    def eval(self, node: ast.expr) -> bool | None:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.eval(node.operand)
            return None if inner is None else not inner
        if isinstance(node, ast.BoolOp):
            values = [self.eval(v) for v in node.values]
            if isinstance(node.op, ast.And):
                if any(v is False for v in values):
                    return False
                return None if any(v is None for v in values) else True
            if any(v is True for v in values):
                return True
            return None if any(v is None for v in values) else False
        if isinstance(node, (ast.Name, ast.Attribute)):
            text = ast.unparse(node)
            if text.rsplit(".", 1)[-1] == "TYPE_CHECKING":
                return False
            return None
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self.compare(node.left, node.ops[0], node.comparators[0])
        return None

    def call(self, node: ast.Call) -> bool | None:
        func = ast.unparse(node.func).rsplit(".", 1)[-1]
        if func in self.conv.version_functions and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                wanted = parse_version(arg.value)
                have = self.target.of(self.conv.version_functions[func])
                if wanted is None:
                    return None
                if isinstance(have, MainRef):
                    return False  # a development build never equals a release
                return have is not None and have == wanted
        if func == "hasattr" and len(node.args) == 2 and self.hasattr_fn is not None:
            obj, attr = node.args
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                dotted = self.dotted(obj)
                if dotted:
                    return self.hasattr_fn(dotted, attr.value)
        return None

    def dotted(self, node: ast.expr) -> str | None:
        text = ast.unparse(node)
        head, _, rest = text.partition(".")
        if head in self.aliases:
            base = self.aliases[head]
            return f"{base}.{rest}" if rest else base
        return None

    def version_of(self, node: ast.expr) -> tuple[Version | None, bool] | None:
        """(version of the upstream this expression reads, as_tuple) or None if it is not a version read."""
        text = ast.unparse(node)
        upstream = None
        for name, up in self.conv.version_names.items():
            if re.search(rf"\b{re.escape(name)}\b", text):
                upstream = up
                break
        if upstream is None and _VERSION_TEXT.search(text):
            for package, up in self.conv.packages.items():
                if re.search(rf"\b{re.escape(package)}\b", text):
                    upstream = up
                    break
        if upstream is None:
            return None
        as_tuple = not isinstance(node, ast.Call) or "Version" not in text and "parse" not in text
        return self.target.of(upstream), as_tuple

    def literal_version(self, node: ast.expr) -> Version | None:
        if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Constant) and isinstance(e.value, int) for e in node.elts):
            return parse_version(".".join(str(e.value) for e in node.elts))  # type: ignore[union-attr]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return parse_version(node.value)
        if isinstance(node, ast.Call) and node.args:
            return self.literal_version(node.args[0])
        return None

    def compare(self, left: ast.expr, op: ast.cmpop, right: ast.expr) -> bool | None:
        lhs, rhs = self.version_of(left), self.literal_version(right)
        flipped = False
        if lhs is None or rhs is None:
            lhs, rhs = self.version_of(right), self.literal_version(left)
            flipped = True
        if lhs is None or rhs is None:
            return None
        have, as_tuple = lhs
        if have is None:
            return None  # a git ref without a release number: unknown
        if isinstance(have, MainRef):
            return _compare_main(have, op, rhs, flipped)
        if as_tuple and isinstance(right if not flipped else left, ast.Tuple):
            width = len((right if not flipped else left).elts)  # type: ignore[union-attr]
            have = parse_version(".".join(str(x) for x in have.release[:width]))
            if have is None:
                return None
        a, b = (have, rhs) if not flipped else (rhs, have)
        ops = {ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b, ast.Eq: a == b, ast.NotEq: a != b}
        return ops.get(type(op))


def _compare_main(have: MainRef, op: ast.cmpop, literal: Version, flipped: bool) -> bool | None:
    """`main OP literal` (or flipped) knowing only main >= floor: decided where monotonicity allows."""
    if flipped:  # literal OP main  ==  main OP' literal
        op = {ast.Lt: ast.Gt(), ast.LtE: ast.GtE(), ast.Gt: ast.Lt(), ast.GtE: ast.LtE()}.get(type(op), op)
    if isinstance(op, ast.Eq):
        return False
    if isinstance(op, ast.NotEq):
        return True
    if have.floor is None:
        return None
    if isinstance(op, (ast.Gt, ast.GtE)):
        return True if have.floor >= literal else None
    if isinstance(op, (ast.Lt, ast.LtE)):
        return False if have.floor >= literal else None
    return None


@lru_cache(maxsize=8192)
def parse_test(source: str) -> ast.expr | None:
    """A condition's test as an expression (None: not one). A file's conditions are evaluated once per
    use, thousands of times for a few hundred texts: each text is parsed once; the trees are only read."""
    try:
        return ast.parse(source, mode="eval").body
    except SyntaxError:
        return None


def evaluate_condition(
    cond: Condition,
    conventions: GuardConventions,
    target: TargetVersions,
    hasattr_fn: HasAttr | None = None,
    aliases: dict[str, str] | None = None,
) -> bool | None:
    if cond.kind == "type_checking":
        return cond.negated  # the TYPE_CHECKING body never runs; its else branch always does
    if cond.kind != "if":
        return True  # try bodies, handlers and suppress blocks run (their fate is decided by drift)
    expr = parse_test(cond.source)
    if expr is None:
        return None
    value = _Evaluator(conventions, target, hasattr_fn, aliases or {}).eval(expr)
    if value is None:
        return None
    return (not value) if cond.negated else value


def guard_kind(cond: Condition, conventions: GuardConventions) -> GuardKind:
    if cond.kind == "type_checking":
        return GuardKind.TYPE_CHECKING
    if cond.kind in ("try", "handler", "suppress"):
        return GuardKind.IMPORT_ERROR
    text = cond.source
    if "hasattr(" in text:
        return GuardKind.HASATTR
    if any(f in text for f in conventions.version_functions) or any(n in text for n in conventions.version_names):
        return GuardKind.VERSION
    if _VERSION_TEXT.search(text):
        return GuardKind.VERSION
    return GuardKind.NONE


def describe(cond: Condition) -> str:
    if cond.kind == "if":
        return f"not ({cond.source})" if cond.negated else cond.source
    if cond.kind == "type_checking":
        return "if TYPE_CHECKING" if not cond.negated else "not TYPE_CHECKING"
    caught = (cond.source or "ImportError").replace(",", ", ")
    if cond.kind == "try":
        return f"try: ... except ({caught})"
    if cond.kind == "handler":
        return "except ImportError: (fallback)"
    return f"contextlib.suppress({caught})"


def combine(
    conditions: tuple[Condition, ...],
    conventions: GuardConventions,
    target: TargetVersions,
    hasattr_fn: HasAttr | None = None,
    aliases: dict[str, str] | None = None,
) -> Guard:
    """The Guard of a use: dead if any enclosing condition is dead at the target; the reported
    kind and expression are those of the deciding (dead) condition, else of the innermost one."""
    if not conditions:
        return Guard()
    decisive: Condition | None = None
    live = True
    for cond in conditions:
        value = evaluate_condition(cond, conventions, target, hasattr_fn, aliases)
        if value is False:
            live = False
            decisive = cond
            break
    chosen = decisive or next((c for c in reversed(conditions) if guard_kind(c, conventions) != GuardKind.NONE), conditions[-1])
    expression = " and ".join(describe(c) for c in conditions)
    return Guard(kind=guard_kind(chosen, conventions), expression=expression, live=live)
