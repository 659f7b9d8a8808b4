"""Plugin modules a drop orphans: imported before the drop, imported by nothing after it (the
`patch_0_10_0/` package only the deleted `if vllm_version_is("0.10.0"):` branch loaded). The
maintainers delete them with the guards; so does `--drop`.

Pure over {path: source} before and after. Every import counts, the plugin's tests included, and a
string constant naming the module (an `importlib.import_module("pkg.mod")`) keeps it too; comments
and docs do not.
"""

from __future__ import annotations

import ast
from typing import Mapping, Sequence

from porter.upgrade.index import _absolute
from porter.upgrade.usage import module_of


def _prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _references(path: str, source: str, prefix: str = "") -> list[tuple[int, str]] | None:
    """(line, module) for every module a file's imports load (`import a.b` loads `a` and `a.b`),
    and for dotted string constants; None when the file does not parse."""
    try:
        tree = ast.parse(source.removeprefix("\ufeff"))  # a byte-order mark: ast rejects it in a str
    except (SyntaxError, ValueError):
        return None
    module, is_package = module_of(path)
    if prefix:
        module = f"{prefix}.{module}" if module else prefix
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.extend((line, m) for m in _prefixes(alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module) if node.level else node.module or ""
            if base:
                out.extend((line, m) for m in _prefixes(base))
                out.extend((line, f"{base}.{a.name}") for a in node.names if a.name != "*")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value \
                and all(p.isidentifier() for p in node.value.split(".")):
            out.extend((line, m) for m in _prefixes(node.value))
    return out


def referenced_modules(path: str, source: str, prefix: str = "",
                       skip: Sequence[tuple[int, int]] = ()) -> set[str] | None:
    """Every module a file's imports load, and dotted string constants; nodes on lines inside a
    `skip` span are left out."""
    refs = _references(path, source, prefix)
    return None if refs is None else _outside(refs, skip)


def _outside(refs: list[tuple[int, str]], skip: Sequence[tuple[int, int]] = ()) -> set[str]:
    return {m for line, m in refs if not any(lo <= line <= hi for lo, hi in skip)}


def orphaned(before: Mapping[str, str], after: Mapping[str, str], deleted: Mapping[str, Sequence[tuple[int, int]]],
             prefix: str = "") -> list[str]:
    """Paths (keys of `before`) of the modules that only the `deleted` spans (line ranges of the
    collapsed guards, per path) imported: none imports them after the drop. An import outside those
    spans keeps its module even when the drop removed it as unused (the version helper's module);
    a module imported only by orphaned modules is orphaned too. A file that does not parse (before
    or after) keeps everything: nothing is removed on a guess."""
    def module_name(path: str) -> str:
        name = module_of(path)[0]
        return f"{prefix}.{name}" if prefix and name else (prefix or name)

    path_of = {module_name(p): p for p in before}
    refs_before: dict[str, set[str]] = {}
    refs_after: dict[str, set[str]] = {}
    for path in before:
        refs = _references(path, before[path], prefix)  # the baseline file, parsed once for both uses
        if refs is None:
            return []
        old = _outside(refs)
        new = referenced_modules(path, after[path], prefix) if path in after else set(old)
        if new is None:
            return []
        if path in deleted:
            new |= _outside(refs, deleted[path])
        refs_before[path], refs_after[path] = old - {module_name(path)}, new - {module_name(path)}
    imported_before = set().union(*refs_before.values()) if refs_before else set()
    # What stays is what the drop cannot have orphaned (files nothing imported: scripts, tests, entry
    # points; top-level modules) and everything they reach through imports and parent packages.
    stack = [p for p in before if module_name(p) not in imported_before or "." not in module_name(p)]
    reached = set(stack)
    while stack:
        path = stack.pop()
        for module in (*refs_after[path], *_prefixes(module_name(path))[:-1]):
            target = path_of.get(module)
            if target is not None and target not in reached:
                reached.add(target)
                stack.append(target)
    return sorted(path_of[m] for m in imported_before if m in path_of and path_of[m] not in reached)
