"""Small, source-only facts about one upstream tree that the shim strategies need: what kind of
object a name is, a class's bases, a function's parameters and source text.

The drift analysis (porter.upgrade) owns the full API index; this module answers the few
questions a template needs about a single definition, following one level of re-export.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # positional_only | positional_or_keyword | var_positional | keyword_only | var_keyword
    has_default: bool
    default: str | None = None  # source text of the default


@dataclass(frozen=True)
class Definition:
    module: str
    name: str
    kind: str  # class | function | assignment
    bases: tuple[str, ...] = ()  # dotted, resolved through the module's imports where possible
    params: tuple[Param, ...] = ()
    source: str = ""
    trivial_body: bool = False  # class body is only a docstring / pass / ... / plain assignments
    value: str | None = None  # source of an assignment's value
    decorated: bool = False  # a function under decorators (its `source` starts at `def`, without them)


class UpstreamTree:
    """Read-only view of an upstream source tree (a checkout, an unpacked wheel)."""

    def __init__(self, root: Path | str | None):
        self.root = Path(root) if root else None

    def module_file(self, module: str) -> Path | None:
        if self.root is None:
            return None
        base = self.root.joinpath(*module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def has_module(self, module: str) -> bool:
        return self.module_file(module) is not None

    def find(self, module: str, name: str, _depth: int = 0) -> Definition | None:
        path = self.module_file(module)
        if path is None or _depth > 3:
            return None
        tree, text = _parse(path)
        if tree is None:
            return None
        imports = _import_map(tree, module, path.name == "__init__.py")
        local = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
        scope = {n: f"{module}.{n}" for n in local} | imports
        for node in tree.body:
            found = _definition(node, module, name, scope, text)
            if found is not None:
                return found
        # One level of re-export: `from x import name` inside the module.
        if name in imports:
            target = imports[name]
            mod, _, attr = target.rpartition(".")
            if mod:
                return self.find(mod, attr, _depth + 1)
        return None

    def exists(self, dotted: str) -> bool:
        module, _, name = dotted.rpartition(".")
        return bool(module) and self.find(module, name) is not None


@lru_cache(maxsize=512)
def _parse(path: Path) -> tuple[ast.Module | None, str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        return ast.parse(text), text
    except (OSError, SyntaxError, ValueError):
        return None, ""


def _import_map(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    """Local name -> dotted origin for the module's top-level imports."""
    out: dict[str, str] = {}
    package = module if is_package else module.rpartition(".")[0]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(p for p in (*parts, base) if p)
            for alias in node.names:
                if alias.name != "*":
                    out[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                # `import a.b` binds `a`; `import a.b as c` binds `c` to `a.b`.
                out[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
    return out


def _dotted(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        head = _dotted(expr.value)
        return f"{head}.{expr.attr}" if head else None
    if isinstance(expr, ast.Subscript):  # Generic[T] -> Generic
        return _dotted(expr.value)
    return None


def _resolve_base(expr: ast.expr, scope: dict[str, str]) -> str:
    """Dotted origin of a base class expression; `scope` maps local names to their origin."""
    dotted = _dotted(expr) or ast.unparse(expr)
    head, _, rest = dotted.partition(".")
    if head in scope:
        return scope[head] + (f".{rest}" if rest else "")
    return dotted  # builtins (object, Exception) or unknown


def params_of(args: ast.arguments) -> tuple[Param, ...]:
    """The parameters of a parsed `def`, in order, with whether each has a default."""
    out: list[Param] = []
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for index, (arg, default) in enumerate(zip(positional, defaults)):
        kind = "positional_only" if index < len(args.posonlyargs) else "positional_or_keyword"
        out.append(Param(arg.arg, kind, default is not None, ast.unparse(default) if default is not None else None))
    if args.vararg:
        out.append(Param(args.vararg.arg, "var_positional", False))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        out.append(Param(arg.arg, "keyword_only", default is not None, ast.unparse(default) if default is not None else None))
    if args.kwarg:
        out.append(Param(args.kwarg.arg, "var_keyword", False))
    return tuple(out)


def _is_trivial(body: list[ast.stmt]) -> bool:
    for stmt in body:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring or `...`
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            continue
        return False
    return True


def _is_overload(decorator: ast.expr) -> bool:
    return (_dotted(decorator) or "").rpartition(".")[2] == "overload"


def _definition(node: ast.stmt, module: str, name: str, imports: dict[str, str], text: str) -> Definition | None:
    if isinstance(node, ast.ClassDef) and node.name == name:
        bases = tuple(_resolve_base(b, imports) for b in node.bases)
        return Definition(
            module, name, "class", bases=bases, source=ast.get_source_segment(text, node) or "",
            trivial_body=_is_trivial(node.body),
        )
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
        if any(_is_overload(d) for d in node.decorator_list):
            return None  # a typing.overload stub (`def f(x: T) -> T: ...`): the implementation follows it
        return Definition(module, name, "function", params=params_of(node.args), source=ast.get_source_segment(text, node) or "",
                          decorated=bool(node.decorator_list))
    if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
        return Definition(module, name, "assignment", value=ast.unparse(node.value), source=ast.get_source_segment(text, node) or "")
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
        value = ast.unparse(node.value) if node.value is not None else None
        return Definition(module, name, "assignment", value=value, source=ast.get_source_segment(text, node) or "")
    if isinstance(node, ast.If):  # conditional definitions: first branch that defines it
        for branch in (node.body, node.orelse):
            for inner in branch:
                found = _definition(inner, module, name, imports, text)
                if found is not None:
                    return found
    if isinstance(node, ast.Try):
        for inner in [*node.body, *[s for h in node.handlers for s in h.body]]:
            found = _definition(inner, module, name, imports, text)
            if found is not None:
                return found
    return None


def class_member(tree: UpstreamTree, module: str, class_name: str, member: str) -> tuple[str, str | None, tuple[Param, ...]] | None:
    """(kind, default value source, params) of `member` in a class body or its `__init__`."""
    path = tree.module_file(module)
    if path is None:
        return None
    parsed, _ = _parse(path)
    if parsed is None:
        return None
    for node in ast.walk(parsed):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == member:
                    return "method", None, params_of(stmt.args)
                if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == member for t in stmt.targets):
                    return "attribute", ast.unparse(stmt.value), ()
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == member:
                    return "attribute", ast.unparse(stmt.value) if stmt.value is not None else None, ()
            for stmt in node.body:
                if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
                    for sub in ast.walk(stmt):
                        if isinstance(sub, (ast.Assign, ast.AnnAssign)):
                            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                            for t in targets:
                                if isinstance(t, ast.Attribute) and t.attr == member and isinstance(t.value, ast.Name) and t.value.id == "self":
                                    value = sub.value
                                    return "attribute", ast.unparse(value) if value is not None else None, ()
    return None
