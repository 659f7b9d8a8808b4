"""F7 new required attribute / F8 new required method: the member on every plugin subclass the finding
names, with a commented default, flagged for review."""

from __future__ import annotations

import ast
import keyword
from pathlib import Path
from typing import Any

from porter.shims.lookup import class_member
from porter.shims.model import MemberAdd, NewFile, ShimGroup, Unhandled
from porter.shims.render import render_python
from porter.shims.strategies.common import ShimContext, class_at, count, literal, signature_text, test_file_name
from porter.upgrade.models import DriftFamily, DriftRecord


def subclass_site(record: DriftRecord) -> tuple[str, str | None]:
    """(plugin file, plugin class name) of the subclass that lacks the member."""
    detail = record.detail
    cls = detail.get("subclass") or detail.get("plugin_class") or detail.get("class")
    path = detail.get("subclass_path") or detail.get("path")
    if not path and record.sites:
        path = record.sites[0].path
    if cls and "." in str(cls):
        cls = str(cls).rsplit(".", 1)[-1]
    return str(path or ""), (str(cls) if cls else None)


def _member_names(record: DriftRecord) -> list[str]:
    """Members the subclass lacks: `attributes` / `methods` lists, else a single `member` or the symbol tail."""
    detail = record.detail
    for key in ("attributes", "methods", "members"):
        value = detail.get(key)
        if isinstance(value, (list, tuple)) and value:
            return [str(v) for v in value]
    for key in ("member", "attribute", "method"):
        value = detail.get(key)
        if isinstance(value, str) and value:
            return [value]
    return [record.symbol.rsplit(".", 1)[-1]]


def _base_location(record: DriftRecord) -> tuple[str, str]:
    """(module, class) of the upstream base class: the record's symbol is the base class itself."""
    base = record.detail.get("base")
    if isinstance(base, str) and "." in base:
        module, _, name = base.rpartition(".")
        return module, name
    loc = record.new_location or record.old_location
    return loc.module, loc.qualname.split(".")[-1] if loc.qualname else record.symbol.rsplit(".", 1)[-1]


def plan_members(path: str, pairs: list[tuple[DriftRecord, Any]], ctx: ShimContext, taken: set[str]) -> tuple[ShimGroup | None, list[Unhandled]]:
    adds, rationale, review, required, skipped, kept = [], [], [], [], [], []
    for record, site, member in [(r, s, m) for r, s in pairs for m in _member_names(r)]:
        # The class defined at the site's line; the record's `plugin_class` names only the first subclass.
        cls = class_at(ctx.plugin_root, path, site.line) if site is not None else None
        cls = cls or subclass_site(record)[1]
        if not path or not cls or not member.isidentifier() or keyword.iskeyword(member):
            skipped.append(Unhandled(record, "porter cannot tell which plugin class needs the member: add it by hand",
                                     f"`{member}`"))
            continue
        base_module, base_name = _base_location(record)
        fact = class_member(ctx.new_tree, base_module, base_name, member)
        where = f"{base_module}.{base_name}.{member}"
        if record.family is DriftFamily.NEW_ATTRIBUTE:
            default = record.detail.get("default")
            if default is None and fact and fact[1] is not None and literal(fact[1]):
                default = fact[1]
            default = default if isinstance(default, str) and literal(default) else "None"
            uses = attribute_uses(ctx, member, base_name, _class_methods(ctx.plugin_root / path, cls))
            if default == "None" and uses:
                skipped.append(Unhandled(record, f"{ctx.upstream} {ctx.target} uses a new required attribute as a value "
                                                 "and its upstream default is not a literal (None would fail there): "
                                                 "set it by hand", f"`{cls}.{member}`, used at {uses[0]}"))
                continue
            if _mutable(default):
                # One object per instance (a class-level list would be shared by every instance).
                slot = f"_porter_{member}"
                code = (
                    f"# porter: {ctx.upstream} {ctx.target} reads `{member}` on every {base_name} ({where}).\n"
                    f"# A fresh {default} per instance, like the upstream default; REVIEW it for NPU correctness.\n"
                    f"{member} = property(lambda self: self.__dict__.setdefault({slot!r}, {default}),\n"
                    f"                    lambda self, value: self.__dict__.__setitem__({slot!r}, value))\n"
                )
            else:
                code = (
                    f"# porter: {ctx.upstream} {ctx.target} reads `{member}` on every {base_name} ({where}).\n"
                    f"# Default below mirrors the upstream default ({default}); REVIEW it for NPU correctness.\n"
                    f"{member} = {default}\n"
                )
            rationale.append(
                f"`{cls}` gains `{member} = {default}`: {ctx.upstream} {ctx.target} requires it on `{base_name}` "
                "subclasses; the default mirrors upstream and is flagged for review."
            )
        else:
            calls = method_calls(ctx, member)
            if calls:
                skipped.append(Unhandled(record, f"{ctx.upstream} {ctx.target} calls a new required method (a stub that "
                                                 "raises would break that path): implement it for the NPU",
                                         f"`{cls}.{member}()`, called at {calls[0]}"))
                continue
            params = fact[2] if fact and fact[0] == "method" else ()
            signature = signature_text(params) or "self, *args, **kwargs"
            code = (
                f"# porter: {ctx.upstream} {ctx.target} requires `{member}` on {base_name} subclasses ({where}).\n"
                "# REVIEW: no NPU implementation exists yet; this default fails loudly instead of silently skipping.\n"
                f"def {member}({signature}):\n"
                f"    raise NotImplementedError(\"{cls}.{member}: NPU implementation pending (added by porter, review)\")\n"
            )
            rationale.append(
                f"`{cls}` gains `{member}()` with the upstream signature: {ctx.upstream} {ctx.target} declares it "
                f"abstract / NotImplementedError on `{base_name}`; the body raises until someone writes the NPU version."
            )
        adds.append(MemberAdd(path, cls, member, code))
        review.append(record.key)
        expected = [p.name for p in fact[2]] if fact and fact[0] == "method" and signature_text(fact[2]) else None
        required.append((path, cls, member, expected))
        if record not in kept:
            kept.append(record)
    if not adds:
        return None, skipped
    test_path = test_file_name("members", path, ctx, taken)
    test = render_python(
        "test_members.py.j2", **ctx.template_vars(), test_path=test_path,
        depth=len(Path(test_path).parts) - 1, required=required,
    )
    families = {r.family for r in kept}
    return ShimGroup(
        name=f"members/{Path(path).stem}",
        family=families.pop() if len(families) == 1 else DriftFamily.NEW_ATTRIBUTE,
        strategy="member_default",
        records=tuple(kept),
        subject=f"{path}: add {count(adds, 'member')} {ctx.upstream} {ctx.target} requires (review defaults)",
        rationale=tuple(rationale),
        files=(NewFile(test_path, test, "test"),),
        member_adds=tuple(adds),
        review=tuple(dict.fromkeys(review)),
    ), skipped


def _mutable(default: str) -> bool:
    text = default.strip()
    return text.startswith(("[", "{")) or text in ("list()", "dict()", "set()")


def _target_files(ctx: ShimContext, needle: str):
    """(relative path, text) of the target tree's source files containing `needle` (tests left out)."""
    root = ctx.new_tree.root
    if root is None:
        return
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "/tests/" in f"/{rel}" or rel.startswith(("tests/", "benchmarks/", "examples/")):
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if needle in text:
            yield rel, text


def _grep(ctx: ShimContext, pattern, needle: str) -> list[str]:
    """`file@version:line` of lines in the target tree matching `pattern` (tests left out)."""
    found: list[str] = []
    for rel, text in _target_files(ctx, needle):
        for number, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                found.append(f"{rel}@{ctx.target}:{number}")
                if len(found) >= 3:
                    return found
    return found


_ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _value_use(node: ast.Attribute, parent: ast.AST) -> str:
    """How `parent` uses `node` where a None in its place would fail: "strong" (indexed, an attribute
    read, called, iterated, `len()`), "operand" (arithmetic, ordering, membership, passed on as an
    argument by position, keyword or star), or "" (`is None`, `==`, a truth test, an assignment)."""
    if isinstance(parent, (ast.Subscript, ast.Attribute)):
        return "strong" if parent.value is node else ""
    if isinstance(parent, ast.Call):
        if parent.func is node or (isinstance(parent.func, ast.Name) and parent.func.id == "len" and node in parent.args):
            return "strong"
        return "operand" if node in parent.args else ""
    if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)):
        return "strong" if parent.iter is node else ""
    if isinstance(parent, (ast.keyword, ast.Starred, ast.BinOp, ast.AugAssign)):
        return "operand"
    if isinstance(parent, ast.UnaryOp):
        return "" if isinstance(parent.op, ast.Not) else "operand"
    if isinstance(parent, ast.Compare):
        operands = [parent.left, *parent.comparators]
        at = next(i for i, o in enumerate(operands) if o is node)
        ops = [parent.ops[i] for i in (at - 1, at) if 0 <= i < len(parent.ops)]
        if any(isinstance(op, _ORDERING) for op in ops) or (at > 0 and isinstance(parent.ops[at - 1], (ast.In, ast.NotIn))):
            return "operand"
    return ""


class _Uses(ast.NodeVisitor):
    """`.member` value uses in one file, with the class and method they sit in, and per class which
    of its methods each method calls on `self` (to tell whether a private helper still runs)."""

    def __init__(self, member: str, accepts_none=lambda _node, _parent: False):
        self.member, self.found, self.accepts_none = member, [], accepts_none
        self.classes: list[ast.ClassDef] = []
        self.functions: list[str] = []
        self.calls: dict[tuple[str, str], set[str]] = {}  # (class, method) -> methods it calls on self
        self.methods: dict[str, set[str]] = {}  # class -> the methods it defines

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(node)
        self.generic_visit(node)
        self.classes.pop()

    def visit_FunctionDef(self, node) -> None:
        if self.classes and node in self.classes[-1].body:
            self.methods.setdefault(self.classes[-1].name, set()).add(node.name)
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and self.classes and self.functions \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
            self.calls.setdefault((self.classes[-1].name, self.functions[-1]), set()).add(node.func.attr)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Attribute) and child.attr == self.member:
                kind = _value_use(child, node)
                if kind == "operand" and isinstance(node, (ast.Call, ast.keyword)) and self.accepts_none(child, node):
                    kind = ""  # the callee's parameter defaults to None: passing None on is no failure
                if kind:
                    on_self = isinstance(child.value, ast.Name) and child.value.id == "self"
                    cls = self.classes[-1] if self.classes else None
                    bases = {_base_name(b) for b in (cls.bases if cls else ())}
                    self.found.append((kind, on_self, cls.name if cls else "", bases,
                                       self.functions[-1] if self.functions else "", child.lineno))
        super().generic_visit(node)


def _none_param_check(ctx: ShimContext, tree: ast.Module, rel: str):
    """A check `(argument, call or keyword) -> bool`: whether the parameter the argument binds defaults
    to None (vllm's `cpu_all_reduce_(tensor, group, self.cpu_timeout)`, `timeout=None`), for a callee
    defined at the top of this file or imported by name from the target tree."""
    from porter.shims.lookup import Param, params_of

    local = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    imported = {a.asname or a.name: (n.module, a.name) for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module and not n.level for a in n.names}
    calls = {id(k): c for c in ast.walk(tree) if isinstance(c, ast.Call) for k in c.keywords}

    def params(func: ast.expr) -> tuple[Param, ...]:
        name = func.id if isinstance(func, ast.Name) else ""
        if name in local:
            return params_of(local[name].args)
        if name in imported:
            found = ctx.new_tree.find(*imported[name])
            return found.params if found is not None and found.kind == "function" else ()
        return ()

    def check(node: ast.expr, parent: ast.AST) -> bool:
        call = calls.get(id(parent)) if isinstance(parent, ast.keyword) else parent
        if not isinstance(call, ast.Call):
            return False
        found = params(call.func)
        if isinstance(parent, ast.keyword):
            bound = next((q for q in found if q.name == parent.arg), None)
        else:
            at = call.args.index(node)
            plain = [q for q in found if q.kind in ("positional_only", "positional_or_keyword")]
            bound = plain[at] if at < len(plain) and not any(isinstance(a, ast.Starred) for a in call.args[:at]) else None
        return bound is not None and bound.default == "None"

    return check


def _base_name(node: ast.expr) -> str:
    """`Base` of `Base`, `mod.Base` or `Base[T]`."""
    if isinstance(node, ast.Subscript):
        node = node.value
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def attribute_uses(ctx: ShimContext, member: str, base: str = "", overridden: frozenset[str] = frozenset()) -> list[str]:
    """`file@version:line` where the target uses `.member` as a value, at most 3. A strong use (index,
    attribute, call, iteration) counts on any receiver, as it always did. An operand use (arithmetic,
    ordering, membership, an argument) counts where it surely reaches the plugin's object: on `self`
    in `base` (or a class naming it as a base), in a method the plugin class does not override."""
    found: list[str] = []
    for rel, text in _target_files(ctx, f".{member}"):
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        uses = _Uses(member, _none_param_check(ctx, tree, rel))
        uses.visit(tree)
        for kind, on_self, cls, bases, function, line in uses.found:
            if kind == "operand" and not (on_self and base and (cls == base or base in bases)
                                          and function in _still_run(uses, cls, overridden)):
                continue
            found.append(f"{rel}@{ctx.target}:{line}")
            if len(found) >= 3:
                return found
    return found


def _still_run(uses: _Uses, cls: str, overridden: frozenset[str]) -> set[str]:
    """Methods of upstream class `cls` that still run on the plugin's object: the public ones it does
    not override, and the private helpers (`_name`) those call on `self`, transitively. A helper only
    the overridden methods called (vllm's `_build_fi_prefill_wrappers`, called from `build`) is dead."""
    methods = uses.methods.get(cls, set())
    running = {m for m in methods if m not in overridden and (not m.startswith("_") or m.startswith("__"))}
    frontier = list(running)
    while frontier:
        for callee in uses.calls.get((cls, frontier.pop()), ()):
            if callee in methods and callee not in running and callee not in overridden:
                running.add(callee)
                frontier.append(callee)
    return running


def _class_methods(path: Path, class_name: str) -> frozenset[str]:
    """Names of the methods `class_name` defines in the plugin file `path` (its overrides)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    return frozenset(stmt.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == class_name
                     for stmt in node.body if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)))


def method_calls(ctx: ShimContext, member: str) -> list[str]:
    import re

    return _grep(ctx, re.compile(rf"\.{re.escape(member)}\("), f".{member}(")
