"""How an upstream tree calls a name: the argument shapes of its call sites.

An override is called by upstream code, not by the plugin: whether it still fits is decided by what the
target's callers pass (how many positional arguments, which keywords), compared with what the
override accepts. One pass over the tree's text finds the files that call any of the names; only those
files are parsed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterable

from porter.upgrade.index import Signature, TreeIndex, walk


@dataclass(frozen=True)
class CallShape:
    """One way a file calls a name: positional count and keyword names (its first site that calls it so)."""

    positional: int
    keywords: frozenset[str]
    path: str  # relative to the tree root
    line: int

    def render(self) -> str:
        parts = [f"{self.positional} positional"] + [f"{k}=" for k in sorted(self.keywords)]
        return ", ".join(parts)


@dataclass(frozen=True)
class CallSites:
    shapes: dict[str, tuple[CallShape, ...]]  # name -> distinct (file, shape) pairs, in file order
    files: dict[str, int]  # name -> how many files call it (a name called everywhere is ambiguous)


def call_shapes(index: TreeIndex, methods: Iterable[str], constructors: Iterable[str] = ()) -> CallSites:
    """Shapes of `<expr>.m(...)` calls for each name in `methods` and of `C(...)` / `mod.C(...)` calls for
    each name in `constructors`. Calls with `*args` or `**kwargs` are skipped: their binding is unknown."""
    methods, constructors = set(methods), set(constructors)
    names = methods | constructors
    if not names:
        return CallSites({}, {})
    pattern = _call_pattern(methods - constructors, constructors)
    shapes: dict[str, dict[tuple[str, int, frozenset[str]], CallShape]] = {}
    files: dict[str, int] = {}
    for _, path, _found in index.matches(pattern):
        try:
            tree = ast.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        try:
            rel = str(path.relative_to(index.root))
        except ValueError:
            rel = str(path)
        called: set[str] = set()
        for node in walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and (func.attr in methods or func.attr in constructors):
                name = func.attr
            elif isinstance(func, ast.Name) and func.id in constructors:
                name = func.id
            else:
                continue
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                continue
            called.add(name)
            key = (rel, len(node.args), frozenset(k.arg for k in node.keywords if k.arg))
            shapes.setdefault(name, {}).setdefault(key, CallShape(key[1], key[2], rel, node.lineno))
        for name in called:  # files that call it (definitions and mentions do not count)
            files[name] = files.get(name, 0) + 1
    return CallSites({n: tuple(s.values()) for n, s in shapes.items()}, files)


def _call_pattern(methods: set[str], constructors: set[str]) -> re.Pattern[bytes]:
    """The text a file must hold to call one of the names: `.m(` for a method (only attribute calls
    count, so the many files that merely define `def forward(` are not parsed), `C(` for a class."""
    def alternation(names: set[str]) -> bytes:
        return b"|".join(re.escape(n.encode()) for n in sorted(names))

    parts = []
    if methods:
        parts.append(rb"\.[\s\\]*(?:" + alternation(methods) + rb")\(")
    if constructors:
        parts.append(rb"\b(?:" + alternation(constructors) + rb")\(")
    return re.compile(b"|".join(parts))


def bound(sig: Signature) -> Signature:
    """The signature a caller sees: `self` / `cls` bound (a staticmethod has neither)."""
    if sig.params and sig.params[0].kind in ("posonly", "pos") and sig.params[0].name in ("self", "cls"):
        return sig.drop_first()
    return sig


def binds(sig: Signature, positional: int, keywords: Iterable[str]) -> bool:
    """Whether a call with `positional` arguments and these keywords binds to `sig` (already bound)."""
    slots = [p for p in sig.params if p.kind in ("posonly", "pos")]
    if positional > len(slots) and not sig.has_varargs:
        return False
    filled = {p.name for p in slots[:positional]}
    keywords = set(keywords)
    for k in keywords:
        if k in filled or not (sig.has_varkw or any(p.name == k and p.kind in ("pos", "kwonly") for p in sig.params)):
            return False
    covered = filled | keywords
    return all(p.name in covered for p in sig.params if p.required)


def narrower(override: Signature, base: Signature) -> bool:
    """Some call that fits `base` may not fit `override` (both bound): fewer positional slots, a keyword
    the override does not take, or a parameter only the override requires."""
    if override.has_varargs and override.has_varkw:
        return False
    cap, base_cap = override.positional_capacity(), base.positional_capacity()
    if cap is not None and (base_cap is None or base_cap > cap):
        return True
    if any(p.kind in ("pos", "kwonly") and not override.accepts_keyword(p.name) for p in base.params):
        return True
    return bool(set(override.required_names()) - set(base.names))
