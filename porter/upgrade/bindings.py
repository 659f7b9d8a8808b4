"""The names a guard branch binds and reads, so a lane move can follow what one guard's verdict
does to another: when a retargeted guard's main-lane branch stops running at the target, every
branch that reads a name only that branch binds (a class, a method, an import, `self.runner`)
breaks there too and must be retargeted with it.

Pure over AST statements. `self.x` / `cls.x` count as the name `self.x`; a function defined in a
branch binds both `f` and `self.f` (a method defined under a class-body guard).
"""

from __future__ import annotations

import ast
from typing import Iterable

_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
        return f"self.{node.attr}"
    return None


def _target_names(target: ast.AST) -> Iterable[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)
    else:
        attr = _self_attr(target)
        if attr:
            yield attr


def binds(stmts: Iterable[ast.stmt]) -> set[str]:
    """Names the statements bind in their own scope (not inside the functions or classes they define)."""
    out: set[str] = set()
    stack = list(stmts)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.update((stmt.name, f"self.{stmt.name}"))
            if stmt.name == "__init__":  # attributes a guarded __init__ sets are the class's
                out.update(n for s in ast.walk(stmt) if isinstance(s, (ast.Assign, ast.AnnAssign))
                           for t in (s.targets if isinstance(s, ast.Assign) else [s.target]) for n in _target_names(t)
                           if n.startswith("self."))
        elif isinstance(stmt, ast.ClassDef):
            out.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*")
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                out.update(_target_names(target))
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and stmt.value is not None:
            out.update(_target_names(stmt.target))
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            out.update(_target_names(stmt.target))
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            out.update(n for item in stmt.items if item.optional_vars is not None for n in _target_names(item.optional_vars))
        if not isinstance(stmt, _NESTED):
            for field in ("body", "orelse", "finalbody"):
                stack.extend(getattr(stmt, field, None) or [])
            for handler in getattr(stmt, "handlers", None) or []:
                stack.extend(handler.body)
    return out


def reads(nodes: Iterable[ast.AST]) -> set[str]:
    """Names read anywhere in the nodes (function bodies included: they run when called)."""
    out: set[str] = set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                out.add(sub.id)
            elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Load):
                attr = _self_attr(sub)
                if attr:
                    out.add(attr)
    return out


def branch_names(stmts: list[ast.stmt]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(bound, read) names of one branch, sorted (they are cached with the file's scan)."""
    bound = binds(stmts)
    return tuple(sorted(bound)), tuple(sorted(reads(stmts) - bound))
