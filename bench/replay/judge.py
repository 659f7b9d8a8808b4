"""Judge porter's unmatched findings on the replay benchmark by reading the NEW vllm tree.

    python bench/replay/judge.py [--case ID ...] [--analyses bench/results/replay] [--trees /work/cache] [--write]

A finding that matches no truth item is either a real break at NEW that the commit did not change
(`known_real`) or a false alarm (`known_false`). This tool checks each such finding's claim against
the NEW tree with checks of its own (text and AST of the upstream files, not porter's index), and
records the verdict with the evidence as its reason (prefixed `judge.py:`; hand-written judgments
are kept). A claim it has no check for stays unjudged and keeps counting as a false alarm.

Checks, per kind of finding (read from the AST of the NEW tree; a local variable, a parameter or a
word in a log message of the same name is not a definition):
  * gone / moved / renamed / monkeypatch target gone: the name is not bound at module level (star
    imports followed; a module `__getattr__` counts only when it serves a literal table and raises
    AttributeError otherwise, else unjudged), or the class and its bases in the tree have no such
    member (class-body names, `self.x` set by any method; torch's nn.Module members known; another
    base outside the tree or a class `__getattr__`: unjudged) -> real; present -> false. A member the
    class lacked at OLD too -> false (the object is a subclass at run time; nothing was removed);
  * an override lacks a parameter the base gained: some call of that method in the NEW tree passes it
    by keyword (or more positionals than the override takes), or a `self.m(...)` call in the base's own
    module does not bind to the override (a positional now fills the slot a keyword names) -> real; the
    method passed by reference somewhere (`capture_graphs(self.capture_graph, **kwargs)`: its arguments
    are not seen) -> unjudged; none of these -> false. An override
    requires a parameter the base dropped: some NEW call of the method does not bind to the
    override's parameters -> real; all bind, or none exists -> false. `forward` / `__call__` are
    also reached through `module(...)`, which no call by name shows: only a call that does not fit
    decides (real); otherwise unjudged;
    A constructor override (`Class.__init__`) is checked against the calls of the class by name;
  * an override porter finds narrower than what a NEW file now passes (`override_new_callers`): the
    cited NEW call exists with a shape that does not bind to the override -> real, else unjudged;
  * a call no longer binds (new required parameter, keyword removed, too many positionals, positional
    shift): the NEW definition, read from its file (through re-exports), has that shape -> real;
  * a base class requires new methods (or an RPC the target sends): the NEW tree calls them -> real;
    never called -> false;
  * a base `__init__` sets new attributes: a method of that class other than `__init__` reads one
    (read from the NEW tree, not porter's detail) -> real, else false;
  * a base class's bases changed (no member missing): false (a refactor breaks nothing by itself);
  * an override of a hook the base no longer has (`hook_removed`): the class in the NEW tree lacks the
    member and no NEW file calls the method by name -> real; a NEW call of it, or the member still
    there -> false;
  * a return annotation changed: the site's statement (read from the plugin at the parent commit)
    unpacks a number of values NEW's annotated tuple does not have -> real; the site unpacks a value
    that is no longer a tuple -> real; the site
    ignores the value -> false; otherwise unjudged.
"""

from __future__ import annotations

import argparse
import ast
import json
import pickle
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from replay import CASES, DEFAULT_REPO, finding_matches, in_guard, load_case  # noqa: E402  (bench/replay.py)

PREFIX = "judge.py: "
PLAIN_BASES = {"object", "ABC", "Generic", "Protocol", "ABCMeta", "NamedTuple", "TypedDict"}  # add no members
MODULE_BASES = {"Module", "nn.Module"}  # torch.nn.Module: its public members are known
MODULE_MEMBERS = {"forward", "training", "parameters", "named_parameters", "buffers", "named_buffers", "children",
                  "named_children", "modules", "named_modules", "register_buffer", "register_parameter", "add_module",
                  "register_module", "state_dict", "load_state_dict", "to", "cuda", "cpu", "half", "float", "eval",
                  "train", "apply", "zero_grad", "requires_grad_", "extra_repr", "get_submodule", "get_parameter",
                  "type", "bfloat16", "double", "register_forward_hook", "register_forward_pre_hook", "_parameters",
                  "_buffers", "_modules", "__call__", "__init__"}
MAX_CALLERS = 30  # a method name called more often than this cannot be traced to one class by name


class Tree:
    """The NEW vllm tree, read lazily: module files, their text and AST, and every call by name."""

    def __init__(self, root: Path, cache_dir: Path | None = None):
        self.root = root
        self.cache_dir = cache_dir  # the call table of a tree is reused across cases and runs

    @lru_cache(maxsize=None)
    def text(self, rel: str) -> str:
        return (self.root / rel).read_text(encoding="utf-8", errors="replace")

    @lru_cache(maxsize=None)
    def files(self) -> tuple[str, ...]:
        return tuple(str(p.relative_to(self.root)) for p in sorted((self.root / "vllm").rglob("*.py")))

    def module_file(self, dotted: str) -> tuple[str | None, list[str]]:
        """The longest module prefix that is a file in the tree, and the parts after it."""
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            base = "/".join(parts[:i])
            for rel in (f"{base}.py", f"{base}/__init__.py"):
                if (self.root / rel).is_file():
                    return rel, parts[i:]
        return None, parts

    @lru_cache(maxsize=None)
    def calls(self) -> dict[str, list[tuple[str, int, int, frozenset[str]]]]:
        """method/function name -> (file, line, positional count, keywords) for every call in the tree."""
        cache = self.cache_dir / f"judge-calls-{self.root.name}.pickle" if self.cache_dir else None
        if cache and cache.is_file():
            return pickle.loads(cache.read_bytes())
        out = self._scan_calls()
        if cache:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_bytes(pickle.dumps(out))
        return out

    def _scan_calls(self) -> dict[str, list[tuple[str, int, int, frozenset[str]]]]:
        out: dict[str, list[tuple[str, int, int, frozenset[str]]]] = {}
        for rel in self.files():
            try:
                tree = ast.parse(self.text(rel))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                    if name:
                        out.setdefault(name, []).append((rel, node.lineno, len(node.args),
                                                         frozenset(k.arg for k in node.keywords if k.arg)))
        return out

    def defines(self, rel: str, name: str) -> int | None:
        """Line where the module file defines, assigns, imports or sets (self.name) `name`."""
        m = re.search(rf"^\s*(?:class|def|async def)\s+{name}\b|^\s*{name}\s*[:=]|self\.{name}\s*[:=]|\bimport\b[^\n]*\b{name}\b"
                      rf"|^\s+{name},?\s*(?:#.*)?$|[\"']{name}[\"']", self.text(rel), re.M)
        return self.text(rel)[:m.start()].count("\n") + 1 if m else None

    @lru_cache(maxsize=None)
    def module_ast(self, rel: str) -> ast.Module | None:
        try:
            return ast.parse(self.text(rel))
        except (SyntaxError, ValueError):
            return None

    @lru_cache(maxsize=None)
    def module_names(self, rel: str, depth: int = 0) -> dict[str, ast.stmt] | None:
        """Names a module binds at module level (defs, classes, assignments, imports, also inside
        if/try/with; star imports followed, by `__all__` where the module lists one; the names a
        closed module `__getattr__` serves from a literal table); None when it cannot be told (a
        `__getattr__` that may serve anything)."""
        tree = self.module_ast(rel)
        if tree is None:
            return None
        out: dict[str, ast.stmt] = {}
        literals: dict[str, ast.expr] = {}
        getattr_fn: ast.FunctionDef | None = None
        todo = list(tree.body)
        while todo:
            stmt = todo.pop(0)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if stmt.name == "__getattr__" and isinstance(stmt, ast.FunctionDef):
                    getattr_fn = stmt
                out.setdefault(stmt.name, stmt)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    for el in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                        if isinstance(el, ast.Name):
                            out.setdefault(el.id, stmt)
                            if stmt.value is not None:
                                literals[el.id] = stmt.value
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    if alias.name != "*":
                        out.setdefault(alias.asname or alias.name.split(".")[0], stmt)
                        continue
                    target, _ = self.imported_from(rel, stmt, "") if isinstance(stmt, ast.ImportFrom) else (None, "")
                    more = self.module_names(target, depth + 1) if target is not None and depth < 6 else None
                    if more is None:
                        return None
                    listed = self.all_names(target)
                    for name in more:
                        if (name in listed) if listed is not None else not name.startswith("_"):
                            out.setdefault(name, stmt)
            elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
                todo[:0] = [*stmt.body, *getattr(stmt, "orelse", []), *getattr(stmt, "finalbody", []),
                            *(h for hd in getattr(stmt, "handlers", []) for h in hd.body)]
        if getattr_fn is not None:
            served = _served_by_getattr(getattr_fn, literals)
            if served is None:
                return None
            for name in served:
                out.setdefault(name, getattr_fn)
        return out

    def all_names(self, rel: str) -> set[str] | None:
        tree = self.module_ast(rel)
        for stmt in tree.body if tree is not None else ():
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
                if isinstance(stmt.value, (ast.List, ast.Tuple)):
                    return {e.value for e in stmt.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        return None

    def imported_from(self, rel: str, stmt: ast.ImportFrom, name: str) -> tuple[str | None, str]:
        """(module file, name there) that `from X import name` in `rel` binds."""
        original = next((a.name for a in stmt.names if (a.asname or a.name) == name), name)
        if stmt.level:
            package = rel.rsplit("/", 1)[0].split("/") if not rel.endswith("__init__.py") else rel.split("/")[:-1]
            package = package[: len(package) - (stmt.level - 1)] if stmt.level > 1 else package
            dotted = ".".join(package + ([stmt.module] if stmt.module else []))
        else:
            dotted = stmt.module or ""
        target, rest = self.module_file(f"{dotted}.{original}")
        if target is not None and not rest:
            return None, original  # the name is a submodule
        target, rest = self.module_file(dotted)
        return (target, original) if target is not None and not rest else (None, original)

    def find_class(self, rel: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
        """The class `name` that module `rel` defines or imports (followed through re-exports)."""
        names = self.module_names(rel) or {}
        stmt = names.get(name)
        if isinstance(stmt, ast.ClassDef):
            return rel, stmt
        if isinstance(stmt, ast.ImportFrom) and depth < 6:
            target, original = self.imported_from(rel, stmt, name)
            if target is not None:
                return self.find_class(target, original, depth + 1)
        return None

    def class_members(self, rel: str, node: ast.ClassDef, depth: int = 0) -> tuple[set[str], bool]:
        """Members of a class and its bases in the tree (class-body names, `self.x` set by any method),
        and whether the set is closed (no `__getattr__`, every base found or known)."""
        members: set[str] = set()
        closed = True
        todo = list(node.body)
        while todo:  # the class body (and its if/try blocks): names; a method's locals are not members
            stmt = todo.pop()
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                members.add(stmt.name)
                if stmt.name == "__getattr__":
                    closed = False
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                members |= {el.id for t in targets for el in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
                            if isinstance(el, ast.Name)}
            elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
                todo += [*stmt.body, *getattr(stmt, "orelse", []), *getattr(stmt, "finalbody", []),
                         *(h for hd in getattr(stmt, "handlers", []) for h in hd.body)]
        for sub in ast.walk(node):  # what any method sets on self
            if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                members |= {el.attr for t in targets for el in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
                            if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name) and el.value.id == "self"}
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "setattr":
                closed = False  # setattr(self, name, ...): members named at run time
        for base in node.bases:
            name = ast.unparse(base.value if isinstance(base, ast.Subscript) else base)
            short = name.rsplit(".", 1)[-1]
            if short in PLAIN_BASES:
                continue
            if short in MODULE_BASES:
                members |= MODULE_MEMBERS
                continue
            found = self.find_class(rel, name) if "." not in name else None
            if found is None or depth > 12:
                closed = False
                continue
            more, more_closed = self.class_members(found[0], found[1], depth + 1)
            members |= more
            closed = closed and more_closed
        if any(isinstance(d, ast.Name) and d.id == "dataclass" or isinstance(d, ast.Call) for d in node.decorator_list):
            pass  # dataclass fields are annotated class-body names, already counted
        return members, closed

    def function(self, rel: str, qual: list[str]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The def of `Cls.method` / `function` (a class: its __init__) in a module file, followed
        through a re-export (`from .selector import get_attn_backend` in a package's __init__)."""
        names = self.module_names(rel) or {}
        stmt = names.get(qual[0]) if qual else None
        if isinstance(stmt, ast.ImportFrom):
            target, original = self.imported_from(rel, stmt, qual[0])
            if target is not None and target != rel:
                return self.function(target, [original, *qual[1:]])
        try:
            body = ast.parse(self.text(rel)).body
        except SyntaxError:
            return None
        node: ast.AST | None = None
        for part in qual:
            node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                         and n.name == part), None)
            if node is None:
                return None
            body = getattr(node, "body", [])
        if isinstance(node, ast.ClassDef):
            init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
            return init or self.dataclass_init(rel, node)
        return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None

    def dataclass_init(self, rel: str, node: ast.ClassDef, depth: int = 0) -> ast.FunctionDef | None:
        """The `__init__` a `@dataclass` generates, as a def: the annotated class-body fields of its
        dataclass bases in the tree, then its own (ClassVar and `field(init=False)` left out, a
        redeclared field keeps its place, `kw_only` fields after the others); None: not a dataclass."""
        if depth > 8 or not any(ast.unparse(d.func if isinstance(d, ast.Call) else d).endswith("dataclass")
                                for d in node.decorator_list):
            return None
        fields: dict[str, tuple[bool, bool]] = {}  # name -> (has a default, keyword-only)
        for base in node.bases:
            found = self.find_class(rel, ast.unparse(base)) if isinstance(base, ast.Name) else None
            inherited = self.dataclass_init(found[0], found[1], depth + 1) if found else None
            if inherited is not None:
                a = inherited.args
                first = len(a.args) - len(a.defaults)
                fields.update({x.arg: (i >= first, False) for i, x in enumerate(a.args[1:], 1)})
                fields.update({x.arg: (d is not None, True) for x, d in zip(a.kwonlyargs, a.kw_defaults)})
        kw_only = any(isinstance(d, ast.Call) and any(k.arg == "kw_only" and getattr(k.value, "value", False) for k in d.keywords)
                      for d in node.decorator_list)
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            kind = ast.unparse(stmt.annotation).split("[")[0].rsplit(".", 1)[-1]
            if kind == "ClassVar":
                continue
            if kind == "KW_ONLY":
                kw_only = True
                continue
            default, value = stmt.value is not None, stmt.value
            if isinstance(value, ast.Call) and ast.unparse(value.func).rsplit(".", 1)[-1] == "field":
                opts = {k.arg: k.value for k in value.keywords}
                if getattr(opts.get("init"), "value", True) is False:
                    continue
                default = "default" in opts or "default_factory" in opts
            fields[stmt.target.id] = (default, kw_only)
        pos = [n for n, (_, kw) in fields.items() if not kw]
        text = ", ".join(["self", *(f"{n}=None" if fields[n][0] else n for n in pos)]
                         + (["*", *(f"{n}=None" if d else n for n, (d, kw) in fields.items() if kw)]
                            if any(kw for _, kw in fields.values()) else []))
        try:
            return ast.parse(f"def __init__({text}): pass").body[0]  # type: ignore[return-value]
        except SyntaxError:
            return None  # a field without a default after one with: dataclasses refuses it too


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[str], set[str], bool]:
    a = fn.args
    pos = [x.arg for x in a.posonlyargs + a.args]
    if pos and pos[0] in ("self", "cls"):
        pos = pos[1:]
    n_required = len(a.posonlyargs + a.args) - len(a.defaults)
    required = {x.arg for x in (a.posonlyargs + a.args)[:n_required]} - {"self", "cls"}
    required |= {k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None}
    return pos + [k.arg for k in a.kwonlyargs], required, a.kwarg is not None



def _first_called(tree, names: str) -> str:
    """`name() (file:line)` for the first of the comma-separated `names` the NEW tree calls, else ''."""
    for name in (n.strip() for n in names.split(",")):
        hit = tree.calls().get(name)
        if hit:
            return f"{name}() ({_where(hit[0][0], hit[0][1])})"
    return ""

def _exists(tree: Tree, rel: str, qual: list[str]) -> tuple[str, str] | None:
    """Is `name` / `Cls.member` bound in module `rel` at NEW? Read from the AST: a class's members
    are its body's names, what any of its methods sets on self, and its bases' members (a local
    variable or a word in a log message of the same name does not count)."""
    names = tree.module_names(rel)
    if names is None:
        return None  # a module __getattr__ or a star import: cannot tell
    if qual[0] not in names:
        return "known_real", f"{PREFIX}{qual[0]} is not bound at module level in {rel} at NEW"
    if len(qual) == 1:
        return "known_false", f"{PREFIX}{qual[0]} is still bound in {_where(rel, names[qual[0]].lineno)} at NEW"
    if len(qual) > 2:
        return None
    found = tree.find_class(rel, qual[0])
    if found is None:
        return None  # bound to something that is not a class of the tree
    members, closed = tree.class_members(*found)
    if qual[1] in members:
        return "known_false", f"{PREFIX}{qual[0]}.{qual[1]} is still a member at NEW ({_where(found[0], found[1].lineno)} or its bases)"
    if not closed:
        return None  # a base outside the tree or a __getattr__ may provide it
    return "known_real", f"{PREFIX}{qual[0]} ({_where(found[0], found[1].lineno)}) and its bases have no member {qual[1]} at NEW"


def _referenced(tree: "Tree", method: str) -> str | None:
    """`file:line` of a NEW use of `.method` as a value, not called (`capture_graphs(self.capture_graph, **kw)`,
    `cb = obj.method`): the arguments it is called with are not in the calls table; None when there is none."""
    needle = re.compile(rf"\.{re.escape(method)}\b(?!\s*\()")
    for rel in tree.files():
        text = tree.text(rel)
        if f".{method}" not in text:
            continue
        for m in needle.finditer(text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            head = text[line_start:m.start()]
            if re.match(r"\s*(?:def|class|from|import)\b", head) or "#" in head:
                continue
            return f"{rel}:{text.count(chr(10), 0, m.start()) + 1}"
    return None


def _binds(positional: list[str], names: set[str], required: set[str], varargs: bool, varkw: bool,
           n_pos: int, keywords: frozenset[str]) -> bool:
    """Whether a call with n_pos positionals and these keywords binds to a def's parameters."""
    if n_pos > len(positional) and not varargs:
        return False
    filled = set(positional[:n_pos])
    if keywords & filled:
        return False  # a positional and a keyword for one parameter
    if not varkw and keywords - names:
        return False
    return required <= (filled | keywords)


def _served_by_getattr(fn: ast.FunctionDef, literals: dict[str, ast.expr]) -> set[str] | None:
    """Names a module `__getattr__` serves when it only answers `if name in TABLE:` (a dict, set,
    list or tuple literal of the module) and raises AttributeError otherwise; None: it may serve anything."""
    if not any(isinstance(n, ast.Raise) and "AttributeError" in ast.unparse(n) for n in ast.walk(fn)):
        return None
    served: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In) \
                and isinstance(node.comparators[0], ast.Name):
            table = literals.get(node.comparators[0].id)
            keys = table.keys if isinstance(table, ast.Dict) else table.elts if isinstance(table, (ast.Set, ast.List, ast.Tuple)) else None
            if keys is None:
                return None
            served |= {k.value for k in keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return served


def _unpacked_at(plugin, sites: list[dict]) -> int | None:
    """How many names the first site's statement unpacks a call's value into (`a, b = f(...)`)."""
    if not sites:
        return None
    try:
        module = ast.parse(plugin(sites[0]["path"]))
    except (SyntaxError, ValueError, OSError):
        return None
    for node in ast.walk(module):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], (ast.Tuple, ast.List))
                and isinstance(node.value, ast.Call) and node.value.lineno <= sites[0]["line"] <= (node.value.end_lineno or 0)
                and not any(isinstance(e, ast.Starred) for e in node.targets[0].elts)):
            return len(node.targets[0].elts)
    return None


def _tuple_arity(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).rsplit(".", 1)[-1] in ("tuple", "Tuple"):
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return None if any(isinstance(e, ast.Constant) and e.value is Ellipsis for e in elts) else len(elts)
    return None


def _self_reads_outside_init(node: ast.ClassDef) -> set[str]:
    out: set[str] = set()
    for fn in node.body:
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name != "__init__":
            out |= {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)
                    and isinstance(n.value, ast.Name) and n.value.id == "self"}
    return out


def _where(rel: str, line: int | None) -> str:
    return f"{rel}:{line}" if line else rel


def judge(record: dict, tree: Tree, old: Tree | None = None, plugin=None) -> tuple[str, str] | None:
    """(known_real | known_false, reason) or None when no check applies. `old`, the OLD tree, tells
    a member that was removed from one the declared class never had (the object is a subclass).
    `plugin(path)`, the plugin file's text at the parent commit, shows how a call site uses a value."""
    msg, symbol, detail = record.get("message", ""), record.get("symbol", ""), record.get("detail") or {}
    change = detail.get("change")
    rel, qual = tree.module_file(symbol)
    if change == "hook_removed":
        # the override is dead only if the class lost the hook and nothing in the NEW tree calls it by name
        verdict = _exists(tree, rel, qual) if rel is not None and len(qual) == 2 else None
        if verdict is None:
            return None
        if verdict[0] == "known_false":
            return verdict
        called = _first_called(tree, qual[1])
        if called:
            return "known_false", f"{PREFIX}the NEW tree still calls {called}: upstream may reach the override"
        return "known_real", (f"{PREFIX}{qual[0]} has no {qual[1]} at NEW and no NEW file calls {qual[1]}(): "
                              "upstream never runs the plugin's override")
    if re.search(r" is gone at the target| is missing at the target| moved to | renamed to |does not exist at |monkeypatch target .* is gone", msg):
        if rel is None:
            return "known_real", f"{PREFIX}no module of {symbol} exists in the NEW tree"
        if not qual:
            return "known_false", f"{PREFIX}{symbol} is a module of the NEW tree ({rel})"
        verdict = _exists(tree, rel, qual)
        if verdict and verdict[0] == "known_real" and len(qual) == 2 and old is not None and "is gone at the target" in msg:
            old_rel, old_qual = old.module_file(symbol)
            before = _exists(old, old_rel, old_qual) if old_rel is not None and old_qual else None
            if before and before[0] == "known_real":
                return "known_false", (f"{PREFIX}{qual[0]} has no member {qual[1]} at OLD either: the object the plugin "
                                       "reads it from is a subclass at run time, nothing was removed")
        return verdict
    method = symbol.rsplit(".", 1)[-1]
    if method == "__init__" and symbol.count(".") >= 2:
        method = symbol.rsplit(".", 2)[-2]  # a constructor override: its callers call the class by name
    if change == "override_new_callers":
        rendered = str(detail.get("override_signature", ""))
        shape = _override_shape(rendered[1:rendered.find(")")] if rendered.startswith("(") else rendered)
        for where in detail.get("calls") or []:
            path, _, line = str(where).rpartition(":")
            hit = next(((f, l, n, k) for f, l, n, k in tree.calls().get(method, []) if f == path and str(l) == line), None)
            if hit and not _binds(*shape, hit[2], hit[3]):
                return "known_real", (f"{PREFIX}the NEW tree calls {method} at {_where(path, hit[1])} with {hit[2]} positional "
                                      f"argument(s) and keywords {sorted(hit[3])}, which do not bind to the override {rendered.split(' ->')[0]}")
        return None
    if change == "override_mismatch" or "that the override" in msg:
        if len(tree.calls().get(method, [])) > MAX_CALLERS and not symbol.endswith(".__init__"):
            return None  # too many unrelated callers to tell which one reaches this class (a class name is unambiguous)
        # forward is reached through module(...) too, which no call by name shows: a call that does not
        # fit still proves the break, finding none proves nothing
        unseen = method in ("forward", "__call__")
        gained = re.search(r"gained parameter\(s\) ([\w, ]+?) that the override does not accept", msg)
        override = re.search(r"\(override [\w.]+\(([^)]*)\)", msg)
        if gained and override:
            params = [p.strip() for p in override.group(1).split(",") if p.strip() and p.strip() not in ("self", "cls")]
            if any(p.startswith("*") for p in params):
                return "known_false", f"{PREFIX}the override takes *args/**kwargs: whatever NEW passes binds"
            capacity = sum(1 for p in params if not p.startswith("*"))
            hit = next(((f, l) for f, l, n_pos, _ in tree.calls().get(method, []) if n_pos > capacity), None)
            if hit:
                return "known_real", f"{PREFIX}the NEW tree calls {method} with more positional arguments than the override takes at {_where(*hit)}"
        if gained:
            for param in (p.strip() for p in gained.group(1).split(",")):
                hit = next(((f, l) for f, l, _, kws in tree.calls().get(method, []) if param in kws), None)
                if hit:
                    return "known_real", f"{PREFIX}the NEW tree calls {method}(..., {param}=...) at {_where(*hit)}; the override does not accept it"
            both = re.search(r"dropped parameter\(s\)", msg)  # decided below, from every call
            if override and rel is not None and not both:
                # the base's own module calling `self.m(...)` (the base's code reaching the override; `super().m`
                # there is another class's)
                # with a call written for the new signature that does not bind at all: a positional now fills the
                # slot a keyword names (calls elsewhere may be another class's method of that name)
                shape = _override_shape(override.group(1))
                lines = tree.text(rel).split("\n")
                self_call = lambda l: bool(re.search(rf"\bself\s*\.\s*{re.escape(method)}\s*\(", lines[l - 1] if 0 < l <= len(lines) else ""))
                hit = next(((f, l, n, k) for f, l, n, k in tree.calls().get(method, [])
                            if f == rel and self_call(l) and not _binds(*shape, n, k)), None)
                if hit:
                    return "known_real", (f"{PREFIX}the base's module calls {method} at {_where(hit[0], hit[1])} with {hit[2]} positional "
                                          f"argument(s) and keywords {sorted(hit[3])}, which do not bind to the override")
            if not both and _referenced(tree, method):
                return None  # passed as a value (`f(self.m, **kwargs)`): the arguments it is called with are not seen
        dropped = re.search(r"dropped parameter\(s\) ([\w, ]+?) that the override requires", msg)
        if dropped and override:
            # a NEW call of the method that does not bind to the override's parameters fails when it reaches the plugin's class
            shape = _override_shape(override.group(1))
            hit = next(((f, l) for f, l, n_pos, kws in tree.calls().get(method, []) if not _binds(*shape, n_pos, kws)), None)
            if hit:
                return "known_real", f"{PREFIX}the NEW tree calls {method} at {_where(*hit)} with arguments that do not bind to the override (it requires {dropped.group(1)})"
            if unseen:
                return None
            if tree.calls().get(method):
                return "known_false", f"{PREFIX}every call of {method} in the NEW tree binds to the override's parameters"
            return "known_false", f"{PREFIX}nothing in the NEW tree calls {method}"
        if gained and not dropped and not unseen:
            return "known_false", f"{PREFIX}no call of {method} in the NEW tree passes {gained.group(1)} by keyword"
        return None
    if change in ("new_required_parameter", "missing_required_parameter", "keyword_removed", "positional_removed",
                  "positional_shift"):
        if rel is None:
            return None
        fn = tree.function(rel, qual)
        if fn is None:
            return None
        names, required, varkw = _params(fn)
        shape = f"{'.'.join(qual)}({', '.join(names)}) at {_where(rel, fn.lineno)}"
        param = detail.get("parameter", "")
        if change in ("new_required_parameter", "missing_required_parameter") and param in required:
            return "known_real", f"{PREFIX}NEW defines {shape}: '{param}' has no default and the call does not pass it"
        if change == "keyword_removed" and param not in names and not varkw:
            return "known_real", f"{PREFIX}NEW defines {shape}: no parameter '{param}', no **kwargs"
        if change == "positional_removed" and not fn.args.vararg:
            return "known_real", f"{PREFIX}NEW defines {shape}: fewer positional parameters than the call passes"
        if change == "positional_shift":
            return "known_real", f"{PREFIX}NEW defines {shape}: the positional slots the call fills hold other parameters"
        return "known_false", f"{PREFIX}NEW defines {shape}, which does not have the claimed shape"
    rpc = re.search(r"calls collective_rpc\(([^)]*)\)", msg)
    if rpc:
        names = re.findall(r"'(\w+)'", rpc.group(1))
        for name in names:
            for f in tree.files():
                m = re.search(rf"collective_rpc\(\s*[\"']{name}[\"']", tree.text(f))
                if m:
                    return "known_real", f"{PREFIX}the NEW tree sends collective_rpc('{name}') ({f}); the plugin's worker does not define it"
        return "known_false", f"{PREFIX}no collective_rpc({', '.join(names)}) in the NEW tree"
    requires = re.search(r"now requires method\(s\) ([\w, ]+?) that", msg)
    if requires:
        called = _first_called(tree, requires.group(1))
        if called:
            return "known_real", f"{PREFIX}the NEW tree calls {called}; the plugin class does not define it"
        return "known_false", f"{PREFIX}nothing in the NEW tree calls {requires.group(1)}"
    sets = re.search(r"__init__ now sets ([\w, ]+?);", msg)
    if sets:
        found = tree.find_class(rel, qual[0]) if rel is not None and len(qual) == 1 else None
        if found is None:
            return None
        attrs = {a.strip() for a in sets.group(1).split(",")}
        read = sorted(_self_reads_outside_init(found[1]) & attrs)  # read from the NEW tree, not porter's detail
        if read:
            return "known_real", f"{PREFIX}methods of {qual[0]} ({_where(found[0], found[1].lineno)}) read {', '.join(read)}, which the plugin's __init__ never sets"
        return "known_false", f"{PREFIX}no method of {qual[0]} other than __init__ reads {sets.group(1)} (the plugin's class never needs them)"
    if "bases changed from" in msg and "now requires" not in msg and "lacks" not in msg:
        return "known_false", f"{PREFIX}a refactor of the base's bases; no member the plugin class relies on is reported missing"
    stand_in = re.search(r"lacks its new member\(s\) ([\w, ]+)", msg)
    if stand_in:
        called = _first_called(tree, stand_in.group(1))
        if called:
            return "known_real", f"{PREFIX}the NEW tree calls {called}; the stand-in lacks it"
        return "known_false", f"{PREFIX}nothing in the NEW tree calls {stand_in.group(1)}"
    if change == "return_annotation":
        code = (record.get("sites") or [{}])[0].get("code", "")
        new = detail.get("new_returns", "")
        fn = tree.function(rel, qual) if rel is not None and qual else None
        arity = _tuple_arity(fn.returns) if fn is not None and fn.returns is not None else None
        names = _unpacked_at(plugin, record.get("sites") or []) if plugin is not None else None
        if names is not None and arity is not None and arity != names:
            return "known_real", (f"{PREFIX}the site unpacks {names} values (read from the plugin at the parent); NEW's "
                                  f"{'.'.join(qual)} ({_where(rel, fn.lineno)}) returns {ast.unparse(fn.returns)}")
        if re.match(r"^\s*[\w.]+\s*,\s*[\w.]+.*=", code) and not new.startswith(("tuple", "Tuple")):
            return "known_real", f"{PREFIX}the site unpacks the result; NEW returns {new}"
        if re.match(r"^\s*(?:self\.)?[\w.]+\(", code):
            return "known_false", f"{PREFIX}the site ignores the returned value ({code[:60]})"
        return None
    return None


def _override_shape(rendered: str) -> tuple[list[str], set[str], set[str], bool, bool]:
    """(positional names, all names, required names, *args, **kwargs) of the override from porter's
    rendering `(self, a, b=…, *args, c, **kw)`."""
    positional: list[str] = []
    names: set[str] = set()
    required: set[str] = set()
    varargs = varkw = kwonly = False
    for raw in (p.strip() for p in rendered.split(",")):
        name = raw.split("=")[0].split(":")[0].strip()
        if not name or name in ("self", "cls", "/"):
            continue
        if name == "*":
            kwonly = True
        elif name.startswith("**"):
            varkw = True
        elif name.startswith("*"):
            varargs = kwonly = True
        else:
            names.add(name)
            if not kwonly:
                positional.append(name)
            if "=" not in raw:
                required.add(name)
    return positional, names, required, varargs, varkw


def unmatched(case, analysis: dict) -> list[dict]:
    retargeted = [g for g in case.guards if g.verdict == "retarget"]
    out = []
    for r in analysis.get("records") or []:
        if r.get("severity") not in ("breaking", "risky"):
            continue
        if any(finding_matches(r, item) for item in case.items):
            continue
        if any(in_guard(s, g) for s in r.get("sites") or [] for g in retargeted):
            continue
        out.append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--analyses", type=Path, default=ROOT / "bench" / "results" / "replay")
    ap.add_argument("--trees", type=Path, default=Path("/work/cache"))
    ap.add_argument("--write", action="store_true", help="store the verdicts in the case files")
    ap.add_argument("--repo", type=Path, default=DEFAULT_REPO, help="vllm-ascend git mirror (the plugin at the parent commit)")
    ap.add_argument("--index-cache", type=Path, default=Path("/tmp/porter-replay-index"))
    args = ap.parse_args(argv)
    totals = {"known_real": 0, "known_false": 0, "unjudged": 0}
    trees: dict[str, Tree] = {}
    for path in sorted(CASES.glob("*.json")):
        case = load_case(path)
        if args.case and not any(case.id.startswith(c) for c in args.case):
            continue
        saved = args.analyses / f"{case.id}.json"
        if not saved.is_file():
            continue
        tree = trees.setdefault(case.new, Tree(args.trees / f"vllm-{case.new}", args.index_cache))
        old = trees.setdefault(case.old, Tree(args.trees / f"vllm-{case.old}", args.index_cache))
        plugin = lru_cache(maxsize=None)(lambda path, parent=case.parent: subprocess.run(
            ["git", "-C", str(args.repo), "show", f"{parent}:{path}"], capture_output=True, text=True).stdout)
        doc = json.loads(path.read_text(encoding="utf-8"))
        verdicts: dict[str, list[dict]] = {"known_real": [], "known_false": []}
        for r in unmatched(case, json.loads(saved.read_text(encoding="utf-8"))):
            got = judge(r, tree, old, plugin)
            if got is None:
                totals["unjudged"] += 1
                print(f"{case.id[:10]} unjudged {r['key']}: {r['message'][:140]}", file=sys.stderr)
                continue
            label, reason = got
            totals[label] += 1
            site = (r.get("sites") or [{}])[0].get("path", "")
            verdicts[label].append({"symbol": r["symbol"], "path": site, "family": r["family"], "reason": reason})
        for label, found in verdicts.items():
            hand = [j for j in doc.get(label, []) if not j.get("reason", "").startswith(PREFIX)]
            doc[label] = hand + found
        if args.write:
            path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(totals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
