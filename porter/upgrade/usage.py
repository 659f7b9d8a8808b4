"""What a plugin takes from an upstream, found in the plugin's source text (nothing is imported).

Per file: imports of the upstream packages, attribute chains on imported names, subclasses of
upstream classes (with the methods they override and the attributes they set), monkeypatch
targets (`mod.attr = ...`, `setattr(mod, "attr", ...)`), calls to upstream callables with their
keyword arguments (including `super().__init__(...)` into an upstream base). Each use carries
the conditions it sits under as source text; guards.py evaluates them for a target later, so a
file's scan is cached by content hash alone.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import os
import pickle
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from porter.fsutil import atomic_write_bytes
from porter.upgrade.guards import Condition
from porter.upgrade.index import Signature, dotted_name, signature_of
from porter.upgrade.models import Site

USAGE_VERSION = 3
DEFAULT_EXCLUDES = ("tests/*", "*/tests/*", "test/*", "benchmarks/*", "examples/*", "docs/*", "build/*", ".*")

_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "AttributeError", "Exception", "BaseException"}


@dataclass(frozen=True)
class Use:
    kind: str  # import | module | attribute | subclass | monkeypatch | call
    symbol: str  # dotted upstream name
    site: Site
    conditions: tuple[Condition, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def upstream_package(self) -> str:
        return self.symbol.split(".")[0]

    def to_dict(self) -> dict[str, Any]:
        detail = {k: (v.render() if isinstance(v, Signature) else v) for k, v in self.detail.items() if k != "methods"}
        if "methods" in self.detail:
            detail["methods"] = {k: v.render() for k, v in self.detail["methods"].items()}
        return {"kind": self.kind, "symbol": self.symbol, "site": self.site.to_dict(),
                "conditions": [c.to_tuple() for c in self.conditions], "detail": detail}


@dataclass
class FileUsage:
    path: str
    uses: list[Use]
    aliases: dict[str, str]  # local name -> dotted upstream name
    syntax_error: str = ""


@dataclass
class UsageSummary:
    files_scanned: int
    files_using: int
    uses: int
    by_kind: dict[str, int]
    modules: int
    symbols: int
    syntax_errors: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "files_scanned": self.files_scanned,
            "files_using": self.files_using,
            "uses": self.uses,
            "by_kind": self.by_kind,
            "distinct_modules": self.modules,
            "distinct_symbols": self.symbols,
            "syntax_errors": self.syntax_errors,
        }


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((dotted_name(t) or "").rsplit(".", 1)[-1] in _IMPORT_ERRORS for t in types)


def _caught_names(handlers: list[ast.ExceptHandler]) -> str:
    """Comma-separated exception names the handlers catch ("*" for a bare except)."""
    names: list[str] = []
    for handler in handlers:
        if handler.type is None:
            names.append("*")
            continue
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        names.extend((dotted_name(t) or "?").rsplit(".", 1)[-1] for t in types)
    return ",".join(dict.fromkeys(names))


def _is_suppress_import(item: ast.withitem) -> bool:
    expr = item.context_expr
    if isinstance(expr, ast.Call) and (dotted_name(expr.func) or "").endswith("suppress"):
        return any((dotted_name(a) or "").rsplit(".", 1)[-1] in _IMPORT_ERRORS for a in expr.args)
    return False


class _AliasCollector(ast.NodeVisitor):
    def __init__(self, packages: frozenset[str]):
        self.packages = packages
        self.aliases: dict[str, str] = {}

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] in self.packages:
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    self.aliases[head] = head

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module or node.module.split(".")[0] not in self.packages:
            return
        for alias in node.names:
            if alias.name != "*":
                self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"


class _UseVisitor(ast.NodeVisitor):
    def __init__(self, path: str, lines: list[str], packages: frozenset[str], aliases: dict[str, str]):
        self.path = path
        self.lines = lines
        self.packages = packages
        self.aliases = aliases
        self.uses: list[Use] = []
        self.conditions: list[Condition] = []
        self.try_counter = 0
        self.class_bases: list[str | None] = []  # upstream base of each enclosing class

    # -- helpers

    def site(self, node: ast.AST) -> Site:
        line = getattr(node, "lineno", 0)
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return Site(self.path, line, code[:200])

    def add(self, kind: str, symbol: str, node: ast.AST, **detail: Any) -> None:
        self.uses.append(Use(kind, symbol, self.site(node), tuple(self.conditions), detail))

    def upstream_dotted(self, node: ast.AST) -> str | None:
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        base = self.aliases.get(head)
        if base is None:
            return None
        return f"{base}.{rest}" if rest else base

    def visit_block(self, body: list[ast.stmt], cond: Condition | None) -> None:
        if cond is not None:
            self.conditions.append(cond)
        for stmt in body:
            self.visit(stmt)
        if cond is not None:
            self.conditions.pop()

    # -- conditions

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        source = ast.unparse(node.test)
        kind = "type_checking" if source.rsplit(".", 1)[-1] == "TYPE_CHECKING" else "if"
        self.visit_block(node.body, Condition(kind, source, False))
        if node.orelse:
            self.visit_block(node.orelse, Condition(kind, source, True))

    def visit_Try(self, node: ast.Try) -> None:
        guarded = any(_catches_import_error(h) for h in node.handlers)
        self.try_counter += 1
        tid = self.try_counter
        caught = _caught_names([h for h in node.handlers if _catches_import_error(h)])
        self.visit_block(node.body, Condition("try", caught, False, tid) if guarded else None)
        for handler in node.handlers:
            self.visit_block(handler.body, Condition("handler", "", False, tid) if _catches_import_error(handler) else None)
        self.visit_block(node.orelse, None)
        self.visit_block(node.finalbody, None)

    visit_TryStar = visit_Try

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            self.visit(item.context_expr)
        suppress = [i for i in node.items if _is_suppress_import(i)]
        caught = ",".join((dotted_name(a) or "?").rsplit(".", 1)[-1] for i in suppress for a in i.context_expr.args)  # type: ignore[attr-defined]
        self.visit_block(node.body, Condition("suppress", caught) if suppress else None)

    # -- imports

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] in self.packages:
                self.add("module", alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module or node.module.split(".")[0] not in self.packages:
            return
        for alias in node.names:
            if alias.name == "*":
                self.add("module", node.module, node, star=True)
            else:
                self.add("import", f"{node.module}.{alias.name}", node, module=node.module, name=alias.name)

    # -- classes, calls, attributes, monkeypatches

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for dec in node.decorator_list:
            self.visit(dec)
        upstream_base = None
        for base in node.bases:
            target = base.value if isinstance(base, ast.Subscript) else base
            dotted = self.upstream_dotted(target)
            if dotted:
                upstream_base = upstream_base or dotted
                methods: dict[str, Signature] = {}
                attrs: list[str] = []
                calls_super_init = False
                for stmt in node.body:
                    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        methods[stmt.name] = signature_of(stmt)
                        for sub in ast.walk(stmt):
                            if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and dotted_name(sub.value) == "self":
                                attrs.append(sub.attr)
                            if (stmt.name == "__init__" and isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
                                    and sub.func.attr == "__init__"):
                                calls_super_init = True
                    elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                        for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]):
                            if isinstance(t, ast.Name):
                                attrs.append(t.id)
                self.add("subclass", dotted, node, cls=node.name, methods=methods, attrs=sorted(set(attrs)),
                         defines_init="__init__" in methods, calls_super_init=calls_super_init)
            else:
                self.visit(base)
        self.class_bases.append(upstream_base)
        for stmt in node.body:
            self.visit(stmt)
        self.class_bases.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        # A nested class body or function resets the "enclosing upstream class" for super() calls.
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        callee = self.upstream_dotted(func)
        if callee is None and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
            inner = func.value
            if isinstance(inner.func, ast.Name) and inner.func.id == "super" and self.class_bases and self.class_bases[-1]:
                base = self.class_bases[-1]
                callee = base if func.attr == "__init__" else f"{base}.{func.attr}"
                self.record_call(callee, node, via_super=True, method=func.attr)
                for arg in (*node.args, *(k.value for k in node.keywords)):
                    self.visit(arg)
                return
        if callee is None and isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) >= 2:
            target = self.upstream_dotted(node.args[0])
            attr = node.args[1]
            if target and isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                self.add("monkeypatch", f"{target}.{attr.value}", node, via="setattr")
        if callee is not None:
            self.record_call(callee, node)
        self.generic_visit(node)

    def record_call(self, callee: str, node: ast.Call, via_super: bool = False, method: str = "") -> None:
        keywords = [k.arg for k in node.keywords if k.arg is not None]
        star_kwargs = any(k.arg is None for k in node.keywords)
        star_args = any(isinstance(a, ast.Starred) for a in node.args)
        positional = sum(1 for a in node.args if not isinstance(a, ast.Starred))
        self.add("call", callee, node, keywords=keywords, positional=positional, star_args=star_args,
                 star_kwargs=star_kwargs, via_super=via_super, method=method)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self.upstream_dotted(node)
        if dotted is not None and "." in dotted_name(node):  # type: ignore[operator]
            kind = "monkeypatch" if isinstance(node.ctx, ast.Store) else "attribute"
            self.add(kind, dotted, node)
            return  # the inner prefix of the chain is not a separate use
        self.generic_visit(node)


def scan_source(path: str, source: bytes, packages: Iterable[str]) -> FileUsage:
    packages = frozenset(packages)
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        return FileUsage(path, [], {}, f"{type(exc).__name__}: {exc}")
    collector = _AliasCollector(packages)
    collector.visit(tree)
    if not collector.aliases and not any(p.encode() in source for p in packages):
        return FileUsage(path, [], {})
    lines = source.decode("utf-8", errors="replace").splitlines()
    visitor = _UseVisitor(path, lines, packages, collector.aliases)
    visitor.visit(tree)
    return FileUsage(path, visitor.uses, collector.aliases)


def plugin_files(root: Path, excludes: Iterable[str] = DEFAULT_EXCLUDES) -> list[tuple[str, Path]]:
    excludes = tuple(excludes)
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__"
                             and not any(fnmatch.fnmatch(f"{rel_dir}/{d}/x".lstrip("/"), pat) for pat in excludes))
        for name in sorted(filenames):
            if name.endswith(".py"):
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if not any(fnmatch.fnmatch(rel, pat) for pat in excludes):
                    out.append((rel, Path(dirpath) / name))
    return out


_PARALLEL_THRESHOLD = 48  # uncached files below which a process pool costs more than it saves


def _scan_job(job: tuple[str, str, tuple[str, ...]]) -> bytes:
    rel, path, packages = job
    return pickle.dumps(scan_source(rel, Path(path).read_bytes(), packages), protocol=pickle.HIGHEST_PROTOCOL)


def scan_plugin(
    root: Path,
    packages: Iterable[str],
    cache_dir: Path | None = None,
    excludes: Iterable[str] = DEFAULT_EXCLUDES,
    progress: Callable[[int], None] | None = None,
    workers: int | None = None,
) -> list[FileUsage]:
    """Scan every Python file of the plugin tree (read only), caching each file's scan by content
    hash; many uncached files are scanned in parallel processes."""
    packages = tuple(sorted(set(packages)))
    code = hashlib.blake2b(Path(__file__).read_bytes() + Path(__file__).with_name("index.py").read_bytes(),
                           digest_size=4).hexdigest()  # a scanner change never reads older entries
    cache_root = Path(cache_dir) / "usage" / f"v{USAGE_VERSION}-{code}" if cache_dir else None
    results: dict[str, FileUsage] = {}
    pending: list[tuple[str, Path, Path | None]] = []
    order: list[str] = []
    for rel, path in plugin_files(Path(root), excludes):
        order.append(rel)
        source = path.read_bytes()
        digest = hashlib.blake2b(digest_size=20)
        for part in (rel, ",".join(packages)):
            digest.update(part.encode())
            digest.update(b"\0")
        digest.update(source)
        key = digest.hexdigest()
        cache_path = cache_root / key[:2] / f"{key}.pkl" if cache_root else None
        if cache_path is not None and cache_path.is_file():
            try:
                results[rel] = pickle.loads(cache_path.read_bytes())
                if progress:
                    progress(1)
                continue
            except Exception:  # noqa: BLE001 - damaged cache entry: scan again
                pass
        pending.append((rel, path, cache_path))
    workers = workers or min(4, os.cpu_count() or 1)
    if len(pending) >= _PARALLEL_THRESHOLD and workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:
            jobs = [(rel, str(path), packages) for rel, path, _ in pending]
            blobs = list(pool.map(_scan_job, jobs, chunksize=8))
    else:
        blobs = [None] * len(pending)
    for (rel, path, cache_path), blob in zip(pending, blobs):
        if blob is None:
            usage = scan_source(rel, path.read_bytes(), packages)
            blob = pickle.dumps(usage, protocol=pickle.HIGHEST_PROTOCOL)
        else:
            usage = pickle.loads(blob)
        if cache_path is not None:
            atomic_write_bytes(cache_path, blob)
        results[rel] = usage
        if progress:
            progress(1)
    return [results[rel] for rel in order]


def summarize(files: list[FileUsage]) -> UsageSummary:
    uses = [u for f in files for u in f.uses]
    return UsageSummary(
        files_scanned=len(files),
        files_using=sum(1 for f in files if f.uses),
        uses=len(uses),
        by_kind=dict(sorted(Counter(u.kind for u in uses).items())),
        modules=len({u.symbol if u.kind == "module" else u.detail.get("module", u.symbol.rsplit(".", 1)[0]) for u in uses}),
        symbols=len({u.symbol for u in uses}),
        syntax_errors=[f"{f.path}: {f.syntax_error}" for f in files if f.syntax_error],
    )
