"""Live truth items of a replay case, mined from the commit's diff and checked in both vllm trees.

A *live* item is plugin code that runs at NEW (outside every `vllm_version_is` guard at the parent)
and that the maintainers changed because it breaks at NEW. This module proposes only items a
mechanical check in the OLD and NEW trees confirms, so every item carries its own evidence:

  * `import_removed` / `import_moved`: a deleted `from vllm.M import X` whose module provides X at OLD
    and not at NEW (module text read in both trees); moved when the commit imports X from another
    vllm module that provides it at NEW;
  * `name_removed`: a deleted statement reads an attribute / calls a function / passes a keyword X that
    the OLD tree defines (def, class, field, `self.X =`, parameter) and that no file of the NEW tree
    names at all (token count 0), and that the plugin does not define itself;
  * `signature_change`: a deleted statement calls F(...) in a way that binds to a definition of F in
    the OLD tree and to none in the NEW tree (positional count, keyword names, required parameters),
    for names F with at most MAX_DEFS definitions per tree (so the binding check is meaningful), called as
    a function or on a receiver whose class is known (self, super(), a class name).
Items are rebuilt by `mine.py --live` (ids a1, a2, ...); hand-written items (c*) are kept.
"""

from __future__ import annotations

import ast
import pickle
import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

GUARD_FN = "vllm_version_is"
MAX_DEFS = 3  # a name defined more often than this (forward, __init__) is too ambiguous to bind a call to
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SKIP_NAMES = {"self", "cls", "super", "print", "len", "getattr", "setattr", "hasattr", "isinstance", "dict", "list",
              "tuple", "set", "int", "str", "float", "bool", "range", "zip", "enumerate", "sorted", "min", "max", "any",
              "all", "type", "object", "torch", "np", "logger", "vllm_version_is"}


@dataclass(frozen=True)
class Sig:
    path: str
    line: int
    params: tuple[str, ...]  # positional-or-keyword, in order (self/cls stripped for methods)
    required: int  # how many of `params` have no default
    kwonly: tuple[str, ...]
    kwonly_required: tuple[str, ...]
    varargs: bool
    varkw: bool
    method: bool = False

    def binds(self, n_pos: int, keywords: set[str], star: bool, dstar: bool) -> bool:
        if star or dstar:
            return True  # *args / **kw at the call site: cannot decide
        if n_pos > len(self.params) and not self.varargs:
            return False
        names = set(self.params[n_pos:]) | set(self.kwonly)
        if keywords - names and not self.varkw:
            return False
        covered = set(self.params[:n_pos]) | keywords
        return all(p in covered for p in self.params[:self.required]) and all(k in covered for k in self.kwonly_required)

    def text(self) -> str:
        return f"{self.path}:{self.line} ({', '.join(self.params + tuple('*' + k for k in self.kwonly))})"


@dataclass
class TreeIndex:
    """What a vllm tree names and defines, for the mechanical checks."""

    root: Path
    tokens: Counter = field(default_factory=Counter)
    defined: dict[str, str] = field(default_factory=dict)  # name -> first "path:line" that defines it
    sigs: dict[str, list[Sig]] = field(default_factory=dict)


def _sig(fn: ast.FunctionDef | ast.AsyncFunctionDef, path: str, method: bool) -> Sig:
    a = fn.args
    pos = [x.arg for x in a.posonlyargs + a.args]
    if method and pos and pos[0] in ("self", "cls") and not any(
            isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list):
        pos = pos[1:]
    required = len(pos) - len(a.defaults)
    kwonly_required = tuple(k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None)
    return Sig(path, fn.lineno, tuple(pos), max(required, 0), tuple(k.arg for k in a.kwonlyargs), kwonly_required,
               a.vararg is not None, a.kwarg is not None, method)


def index_tree(root: Path, cache_dir: Path | None = None) -> TreeIndex:
    cache = cache_dir / f"live-index-{root.name}.pickle" if cache_dir else None
    if cache and cache.is_file():
        return pickle.loads(cache.read_bytes())
    idx = TreeIndex(root=root)
    for f in sorted((root / "vllm").rglob("*.py")):
        text = f.read_text(encoding="utf-8", errors="replace")
        idx.tokens.update(TOKEN.findall(text))
        rel = str(f.relative_to(root))
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        methods = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in c.body}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                idx.defined.setdefault(node.name, f"{rel}:{node.lineno}")
                idx.sigs.setdefault(node.name, []).append(_sig(node, rel, id(node) in methods))
                for arg in node.args.args + node.args.kwonlyargs:
                    idx.defined.setdefault(arg.arg, f"{rel}:{node.lineno}")
            elif isinstance(node, ast.ClassDef):
                idx.defined.setdefault(node.name, f"{rel}:{node.lineno}")
                for st in node.body:
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                        idx.defined.setdefault(st.target.id, f"{rel}:{st.lineno}")
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        idx.defined.setdefault(t.attr, f"{rel}:{node.lineno}")
                    elif isinstance(t, ast.Name) and node.col_offset == 0:
                        idx.defined.setdefault(t.id, f"{rel}:{node.lineno}")
    if cache:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes(pickle.dumps(idx))
    return idx


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def deleted_lines(repo: Path, parent: str, sha: str, path: str) -> set[int]:
    out: set[int] = set()
    for line in _git(repo, "diff", "-U0", parent, sha, "--", path).splitlines():
        m = HUNK.match(line)
        if m:
            start, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
            out.update(range(start, start + count))
    return out


def _is_guard(test: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and (getattr(n.func, "id", None) == GUARD_FN or getattr(n.func, "attr", None) == GUARD_FN)
               for n in ast.walk(test))


def guarded_lines(tree: ast.AST) -> set[int]:
    """Lines inside any version-guarded branch (drop territory, not live-at-NEW by construction)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp)) and _is_guard(node.test):
            out.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return out


def _statements(tree: ast.AST) -> list[tuple[int, int, ast.AST]]:
    """(first, last, node) per statement; a compound statement counts by its header only."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            header_end = body[0].lineno - 1
            decorators = getattr(node, "decorator_list", [])
            first = min([node.lineno] + [d.lineno for d in decorators])
            out.append((first, max(header_end, node.lineno), node))
        else:
            out.append((node.lineno, node.end_lineno or node.lineno, node))
    return out


def _header_nodes(node: ast.AST) -> list[ast.AST]:
    """The parts of a statement its header covers (test, iter, items, args), not its body."""
    if isinstance(node, (ast.If, ast.While)):
        return [node.test]
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [node.target, node.iter]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return list(node.items)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Try)):
        return []
    return [node]


def plugin_defined(repo: Path, commit: str, package: str) -> set[str]:
    """Names the plugin package defines itself (functions, classes, self.X attributes, module globals)."""
    names: set[str] = set()
    for path in _git(repo, "ls-tree", "-r", "--name-only", commit, package).splitlines():
        if not path.endswith(".py"):
            continue
        try:
            tree = ast.parse(_git(repo, "show", f"{commit}:{path}").lstrip("\ufeff"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for sub in ast.walk(t):  # self.X = ... defines X; other.X = ... writes an upstream attribute
                        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                            names.add(sub.attr)
                        elif isinstance(sub, ast.Name) and node.col_offset == 0:
                            names.add(sub.id)
    return names


def _module_text(root: Path, module: str) -> str | None:
    base = root.joinpath(*module.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f.read_text(encoding="utf-8", errors="replace")
    return None


def provides(root: Path, module: str, name: str) -> bool:
    """Whether `from module import name` can succeed in a tree (a definition, an import, a submodule)."""
    text = _module_text(root, module)
    if text is None:
        return False
    if _module_text(root, f"{module}.{name}") is not None:
        return True
    if re.search(r"^def __getattr__\(", text, re.M) and re.search(rf"""["']{name}["']""", text):
        return True  # served by the module's __getattr__ (a deprecation table)
    try:
        bound = _bound_names(ast.parse(text).body)
        return name in bound or "*" in bound  # a star import: what it brings is not followed
    except SyntaxError:
        pass
    return re.search(rf"^\s*(?:class|def|async def)\s+{name}\b|^\s*{name}\s*[:=]|\bimport\b[^\n]*\b{name}\b"
                     rf"|^\s+{name},?\s*(?:#.*)?$|^\s*from\s+\S+\s+import\s+\*", text, re.M) is not None


def _bound_names(body: list[ast.stmt]) -> set[str]:
    """Names a module body binds, in branches and try blocks too (`*` for a star import): every name of a
    multi-line `from m import (a, b)` counts, which a line pattern misses."""
    out: set[str] = set()
    for st in body:
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            out.update("*" if a.name == "*" else (a.asname or a.name).split(".")[0] for a in st.names)
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(st.name)
        elif isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in st.targets if isinstance(st, ast.Assign) else [st.target]:
                out.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(st, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for part in (st.body, getattr(st, "orelse", []), getattr(st, "finalbody", []),
                         *(h.body for h in getattr(st, "handlers", []))):
                out |= _bound_names(part)
    return out


def _known_receiver(node: ast.AST) -> bool:
    """self.f(), super().f(), Cls.f(): receivers whose methods come from the class the plugin extends or names."""
    if isinstance(node, ast.Name):
        return node.id == "self" or node.id[:1].isupper()
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _referenced(node: ast.AST, own: set[str]) -> list[tuple[str, str]]:
    """(name, how) for attributes read, functions called and keywords passed in a statement."""
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            out.append((sub.attr, "attribute"))
        elif isinstance(sub, ast.Call):
            name = _call_name(sub)
            if isinstance(sub.func, ast.Name):
                out.append((name, "call"))
            for kw in sub.keywords if name not in own else ():
                if kw.arg:
                    out.append((kw.arg, f"keyword of {name}()"))
    return out


def _names_used(tree: ast.AST, skip_lines: set[int]) -> set[str]:
    """Identifiers the code uses (not strings or comments), outside the given lines."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip_lines:
            continue
        if isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name)
    return out


def _commit_imports(tree: ast.AST) -> dict[str, str]:
    return {a.name: n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
            and n.module.split(".")[0] == "vllm" and not n.level for a in n.names}


def mine_live(repo: Path, parent: str, sha: str, old: TreeIndex, new: TreeIndex, package: str = "vllm_ascend") -> list[dict]:
    own = plugin_defined(repo, parent, package)
    changed = [p for p in _git(repo, "diff", "--name-only", "--diff-filter=M", parent, sha, "--", package).splitlines()
               if p.endswith(".py") and "tests" not in p.split("/")]
    items, seen = [], set()
    for path in changed:
        p_text = _git(repo, "show", f"{parent}:{path}").lstrip("\ufeff")
        c_text = _git(repo, "show", f"{sha}:{path}").lstrip("\ufeff")
        try:
            p_tree, c_tree = ast.parse(p_text), ast.parse(c_text)
        except SyntaxError:
            continue
        dead = guarded_lines(p_tree)
        gone = deleted_lines(repo, parent, sha, path) - dead
        if not gone:
            continue
        c_imports = _commit_imports(c_tree)
        c_dead = guarded_lines(c_tree)  # the commit keeps OLD-lane code under its guards: not a use at NEW
        still_used = _names_used(c_tree, c_dead)
        stmts = [(a, b, n) for a, b, n in _statements(p_tree) if set(range(a, b + 1)) & gone]
        for first, last, node in stmts:
            def add(kind: str, symbol: str, names: list[str], evidence: str, **extra) -> None:
                key = (path, first, names[0])
                if key not in seen:
                    seen.add(key)
                    items.append({"kind": kind, "path": path, "line": first, "end_line": last, "symbol": symbol,
                                  "names": names, "live": True, "evidence": f"auto (live.py): {evidence}", **extra})

            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "vllm" and not node.level:
                for alias in node.names:
                    if provides(old.root, node.module, alias.name) and not provides(new.root, node.module, alias.name):
                        home = c_imports.get(alias.name)
                        how = (f"{node.module} does not provide it at NEW" if _module_text(new.root, node.module)
                               else f"{node.module} no longer exists at NEW")
                        if home and home != node.module and provides(new.root, home, alias.name):
                            add("import_moved", f"{node.module}.{alias.name}", [alias.name],
                                f"{node.module} provides {alias.name} at OLD; {how}; the commit imports it from {home}, "
                                f"which provides it at NEW", new_home=home)
                        else:
                            add("import_removed", f"{node.module}.{alias.name}", [alias.name],
                                f"{node.module} provides {alias.name} at OLD; {how}")
                continue
            for part in _header_nodes(node):
                for name, how in _referenced(part, own):
                    if name in SKIP_NAMES or name in own or name.startswith("__"):
                        continue
                    if name in old.defined and new.tokens.get(name, 0) == 0 and name not in still_used:
                        add("name_removed", name, [name],
                            f"{how} {name}: defined at OLD ({old.defined[name]}), named nowhere in the NEW tree")
                for call in (s for s in ast.walk(part) if isinstance(s, ast.Call)):
                    name = _call_name(call)
                    if not name or name in SKIP_NAMES or name.startswith("__") or name in own:
                        continue
                    method = isinstance(call.func, ast.Attribute)  # obj.f(...) binds to methods, f(...) to functions
                    if method and not _known_receiver(call.func.value):
                        continue  # tensor.size(1): the receiver's class is unknown, any same-named method could be meant
                    o = [s for s in old.sigs.get(name, []) if s.method == method]
                    n = [s for s in new.sigs.get(name, []) if s.method == method]
                    if not o or not n or len(o) > MAX_DEFS or len(n) > MAX_DEFS:
                        continue
                    n_pos = sum(not isinstance(a, ast.Starred) for a in call.args)
                    star = any(isinstance(a, ast.Starred) for a in call.args)
                    kws = {k.arg for k in call.keywords if k.arg}
                    dstar = any(k.arg is None for k in call.keywords)
                    if any(s.binds(n_pos, kws, star, dstar) for s in o) and not any(s.binds(n_pos, kws, star, dstar) for s in n):
                        extra_kw = sorted(kws - {p for s in n for p in s.params + s.kwonly})
                        add("signature_change", name, [name, *extra_kw],
                            f"the call {name}({n_pos} positional, keywords {sorted(kws)}) binds to OLD "
                            f"{'; '.join(s.text() for s in o)} and to none of NEW {'; '.join(s.text() for s in n)}")
    return items
