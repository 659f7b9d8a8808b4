"""API index of an upstream source tree, built from source text with `ast` (nothing is imported).

A `TreeIndex` knows every module file of the tree but parses a module only when asked (the
analysis touches a few hundred modules of a thousand), caching each parsed module by content
hash in the tree's pack under `cache_dir/index/` (porter.upgrade.packs: one file per tree).
`prefetch()` parses many uncached modules in parallel.
`resolve(module, name)` follows re-exports, star imports (`__all__`), submodules and lazy module
`__getattr__` (names it may serve are "unknown", never "missing").
"""

from __future__ import annotations

import ast
import hashlib
import os
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from porter import gcpause

from porter.fsutil import atomic_write_bytes
from porter.upgrade.packs import Pack, pack_path

TYPE_CHECKING = False  # typing.TYPE_CHECKING: concurrent.futures (multiprocessing, ~20 ms) only when a run parses in parallel
if TYPE_CHECKING:
    from concurrent.futures import Executor

INDEX_VERSION = 12  # 12: parsed modules in one pack per tree (11: ModuleInfo.class_facts)
_PARALLEL_THRESHOLD = 48  # below this many uncached modules a process pool costs more than it saves
# Bases outside the tree that add no members a plugin reads off the class: a class deriving only from
# these (and from classes of the tree) has exactly the members the tree shows.
PLAIN_BASES = frozenset({"object", "ABC", "Generic", "Protocol", "NamedTuple", "TypedDict", "Enum", "IntEnum", "str", "int"})
# Outside bases whose members are known: torch.nn.Module's API (its __getattr__ serves only what an
# instance registers, `self.x = Parameter(...)` in a method, which the index reads as instance state).
_NN_MODULE = frozenset({
    "forward", "training", "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
    "modules", "named_modules", "register_buffer", "register_parameter", "add_module", "register_module", "state_dict",
    "load_state_dict", "to", "to_empty", "cuda", "cpu", "xpu", "npu", "half", "float", "double", "bfloat16", "type",
    "eval", "train", "apply", "zero_grad", "requires_grad_", "extra_repr", "get_submodule", "get_parameter", "get_buffer",
    "get_extra_state", "set_extra_state", "share_memory", "compile", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_full_backward_pre_hook", "register_backward_hook",
    "register_state_dict_pre_hook", "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook",
    "_parameters", "_buffers", "_modules", "_apply", "_call_impl", "_load_from_state_dict", "_save_to_state_dict",
    "_get_name", "__call__", "__init__", "__setattr__", "__getattr__", "__delattr__", "__dir__", "__setstate__",
})
KNOWN_OUTSIDE_BASES = {"torch.nn.Module": _NN_MODULE, "torch.nn.modules.module.Module": _NN_MODULE, "nn.Module": _NN_MODULE}


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # posonly | pos | varargs | kwonly | varkw
    has_default: bool

    @property
    def required(self) -> bool:
        return not self.has_default and self.kind in ("posonly", "pos", "kwonly")


@dataclass(frozen=True)
class Signature:
    params: tuple[Param, ...]
    returns: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.kind not in ("varargs", "varkw"))

    @property
    def has_varkw(self) -> bool:
        return any(p.kind == "varkw" for p in self.params)

    @property
    def has_varargs(self) -> bool:
        return any(p.kind == "varargs" for p in self.params)

    def accepts_keyword(self, name: str) -> bool:
        return self.has_varkw or any(p.name == name and p.kind in ("pos", "kwonly") for p in self.params)

    def positional_capacity(self) -> int | None:
        """How many positional arguments fit; None when *args takes any number."""
        if self.has_varargs:
            return None
        return sum(1 for p in self.params if p.kind in ("posonly", "pos"))

    def required_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.required)

    def render(self) -> str:
        parts: list[str] = []
        for p in self.params:
            prefix = "*" if p.kind == "varargs" else "**" if p.kind == "varkw" else ""
            parts.append(prefix + p.name + ("=…" if p.has_default and not prefix else ""))
        return "(" + ", ".join(parts) + ")" + (f" -> {self.returns}" if self.returns else "")

    def drop_first(self) -> "Signature":
        """The signature as seen through an instance or class (`self`/`cls` bound)."""
        if self.params and self.params[0].kind in ("posonly", "pos"):
            return Signature(self.params[1:], self.returns)
        return self


@dataclass(frozen=True)
class Definition:
    name: str
    kind: str  # class | function | variable | property
    line: int
    conditional: str = ""  # "" | "if" | "try" | "type_checking"
    signature: Signature | None = None
    bases: tuple[str, ...] = ()  # dotted, resolved through the module's imports where possible
    members: tuple["Definition", ...] = ()
    instance_attrs: tuple[str, ...] = ()  # self.x assigned in __init__
    abstract: tuple[str, ...] = ()  # abstractmethod or body raising NotImplementedError
    is_abstract: bool = False  # for a method: it is abstract / NotImplementedError
    shape: str = ""  # top-level statement kinds of the body: a cheap fingerprint for "same body"
    abstract_kind: str = ""  # "abstract" (@abstractmethod) | "not_implemented" (body raises it) | ""
    method_kind: str = ""  # for a function in a class body: "" | classmethod | staticmethod
    body_span: tuple[int, int] = ()  # for a function: first and last line of its body (docstring excluded)

    def member(self, name: str) -> "Definition | None":
        for m in self.members:
            if m.name == name:
                return m
        return None

    @property
    def member_names(self) -> frozenset[str]:
        return frozenset(m.name for m in self.members) | frozenset(self.instance_attrs)


@dataclass(frozen=True)
class ImportRef:
    module: str  # absolute module name
    name: str | None  # None: the local name is the module itself (`import a.b as c`)
    line: int
    conditional: str = ""


@dataclass
class ModuleInfo:
    name: str
    path: str  # relative to the tree root
    is_package: bool
    defs: dict[str, Definition] = field(default_factory=dict)
    imports: dict[str, ImportRef] = field(default_factory=dict)
    stars: tuple[str, ...] = ()
    all_names: tuple[str, ...] | None = None
    lazy: bool = False  # has a module-level __getattr__
    lazy_names: tuple[str, ...] = ()  # names the __getattr__ visibly serves (deprecation maps, lazy tables)
    lazy_closed: bool = False  # the __getattr__ serves only lazy_names and raises AttributeError otherwise
    syntax_error: str = ""
    # (class name, line) -> ClassFacts of each class statement of the file (the first of a name and
    # line, nested ones too), read while the file's syntax tree exists: asked of ~100 modules per
    # run, which the main process would otherwise parse again one after another
    class_facts: dict[tuple[str, int], "ClassFacts"] = field(default_factory=dict)

    def public_names(self) -> set[str]:
        if self.all_names is not None:
            return set(self.all_names)
        names = {n for n in self.defs if not n.startswith("_")}
        names |= {n for n in self.imports if not n.startswith("_")}
        return names


# ---------------------------------------------------------------- parsing one module


_AST = ast.AST
_VISIT_CONSTANT_SHIM = ast.NodeVisitor.visit_Constant
_LEGACY_CONSTANT_VISITS = ("visit_Num", "visit_Str", "visit_Bytes", "visit_NameConstant", "visit_Ellipsis")


# Leaf node types that no caller of walk() asks for: expression contexts (Name.ctx) and operators
# (BinOp.op, Compare.ops). They have no child nodes, so leaving them out of the walk keeps the
# order of every other node; they are about a third of the nodes of a module.
_LEAVES = frozenset(kind for base in (ast.expr_context, ast.operator, ast.boolop, ast.cmpop, ast.unaryop)
                    for kind in base.__subclasses__())
# Fields that never hold a node (names, identifiers, flags, a Constant's value): not read by the walks.
_PLAIN_FIELDS = frozenset({"id", "attr", "arg", "name", "module", "level", "kind", "type_comment", "is_async",
                           "conversion", "simple", "asname", "tag"})
_LEAF_FIELDS = frozenset({"ctx", "op", "ops"})  # fields that hold only leaf nodes
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}  # per node type: the fields walk() reads
_NODE_FIELDS: dict[type, tuple[str, ...]] = {}  # per node type: the fields that may hold a node (leaves too)


# Fields of those names that do hold a node: TypeAlias.name (`type X = ...`, Python 3.12) is a Name.
_NODE_NAMED = frozenset({("TypeAlias", "name")})


def _fields_for(kind: type) -> tuple[str, ...]:
    fields = tuple(f for f in kind._fields if (f not in _PLAIN_FIELDS or (kind.__name__, f) in _NODE_NAMED)
                   and not (kind is ast.Constant and f == "value"))
    _NODE_FIELDS[kind] = fields
    _CHILD_FIELDS[kind] = child = tuple(f for f in fields if f not in _LEAF_FIELDS)
    return child


def walk(node: ast.AST):
    """ast.walk's breadth-first order without the leaf nodes in _LEAVES (contexts, operators), with
    the child loop inlined and per node type only the fields that can hold a node: about 2.5x as fast."""
    from collections import deque

    todo = deque([node])
    pop, push, extend = todo.popleft, todo.append, todo.extend
    fields_of, leaves = _CHILD_FIELDS.get, _LEAVES
    while todo:
        node = pop()
        kind = node.__class__
        fields = fields_of(kind)
        if fields is None:
            fields = _fields_for(kind)
        for name in fields:
            value = getattr(node, name, None)
            if value.__class__ is list:
                extend([item for item in value if isinstance(item, _AST) and item.__class__ not in leaves])
            elif isinstance(value, _AST) and value.__class__ not in leaves:
                push(value)
        yield node


# Nodes whose only child nodes are contexts (Name.ctx) or none at all (a Constant's value is not a
# node): their generic visit does nothing unless the visitor visits contexts, so it is skipped.
_CONTEXTS = (ast.Load, ast.Store, ast.Del)
_CHILDLESS = frozenset({ast.Name, ast.Constant, ast.alias, ast.Global, ast.Nonlocal})


def _noop(visitor: Any, node: ast.AST) -> None:
    return None


def _generic(visitor: Any, node: ast.AST) -> Any:
    return visitor.generic_visit(node)


class FastVisitor(ast.NodeVisitor):
    """ast.NodeVisitor that visits the same nodes in the same order, with the `visit_<Type>` lookup
    cached per node type, leaf nodes (Load, operators) skipped unless visited explicitly, and the
    child loop inlined: the stdlib's per-node getattr and iter_fields are most of a scan's time."""

    _dispatch: dict[type, Callable[[Any, ast.AST], Any]]
    _fields_table: dict[type, tuple[str, ...]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._dispatch = {}
        # a visitor that visits no leaf type (contexts, operators) skips the fields holding only those
        visits_leaves = any(hasattr(cls, "visit_" + kind.__name__) for kind in _LEAVES)
        cls._fields_table = _NODE_FIELDS if visits_leaves else _CHILD_FIELDS

    def _method_for(self, kind: type) -> Callable[[Any, ast.AST], Any]:
        method = getattr(type(self), "visit_" + kind.__name__, None)
        if method is _VISIT_CONSTANT_SHIM and not any(hasattr(self, n) for n in _LEGACY_CONSTANT_VISITS):
            method = None  # a Constant has no child nodes: the shim would only call generic_visit
        if method is None:
            childless = kind in _CHILDLESS and not any(hasattr(self, f"visit_{c.__name__}") for c in _CONTEXTS)
            method = _generic if kind._fields and not childless else _noop
        type(self)._dispatch[kind] = method
        return method

    def visit(self, node: ast.AST) -> Any:
        method = self._dispatch.get(node.__class__)
        if method is None:
            method = self._method_for(node.__class__)
        return method(self, node)

    def generic_visit(self, node: ast.AST) -> None:
        dispatch, visit = self._dispatch, self.visit
        kind = node.__class__
        table = self._fields_table
        fields = table.get(kind)
        if fields is None:
            _fields_for(kind)
            fields = table[kind]
        for name in fields:  # the fields that may hold a node (a leaf's visit is _noop unless defined)
            value = getattr(node, name, None)
            if value.__class__ is list:
                for item in value:
                    if isinstance(item, _AST):
                        if dispatch.get(item.__class__) is not _noop:
                            visit(item)
            elif isinstance(value, _AST) and dispatch.get(value.__class__) is not _noop:
                visit(value)


def dotted_name(node: ast.AST) -> str | None:
    """`a.b.c` for a Name/Attribute chain, None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)] if level - 1 <= len(parts) else []
    base = ".".join(parts)
    if target:
        return f"{base}.{target}" if base else target
    return base


def signature_of(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Signature:
    a = fn.args
    params: list[Param] = []
    positional = [*a.posonlyargs, *a.args]
    first_default = len(positional) - len(a.defaults)
    for i, arg in enumerate(positional):
        kind = "posonly" if i < len(a.posonlyargs) else "pos"
        params.append(Param(arg.arg, kind, i >= first_default))
    if a.vararg:
        params.append(Param(a.vararg.arg, "varargs", True))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append(Param(arg.arg, "kwonly", default is not None))
    if a.kwarg:
        params.append(Param(a.kwarg.arg, "varkw", True))
    returns = None if fn.returns is None else _annotation_text(fn.returns)
    return Signature(tuple(params), returns)


def _annotation_text(node: ast.expr) -> str:
    """ast.unparse of an annotation; a plain or dotted name (most of them) without the unparser."""
    if node.__class__ is ast.Name:
        return node.id  # type: ignore[attr-defined]
    if node.__class__ is ast.Attribute:
        dotted = dotted_name(node)
        if dotted is not None:
            return dotted
    return ast.unparse(node)


def _shape(body: list[ast.stmt]) -> str:
    return "".join(type(s).__name__[:2] for s in body[:60])


def _raises_not_implemented(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # docstring
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc
    target = exc.func if isinstance(exc, ast.Call) else exc
    return dotted_name(target) in ("NotImplementedError", "builtins.NotImplementedError")


def _is_property(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for dec in fn.decorator_list:
        name = dotted_name(dec) or ""
        if name.rsplit(".", 1)[-1] in ("property", "cached_property") or name.endswith(".setter"):
            return True
    return False


def _abstract_kind(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    for dec in fn.decorator_list:
        name = dotted_name(dec)
        if name and name.rsplit(".", 1)[-1] in ("abstractmethod", "abstractproperty"):
            return "abstract"
    return "not_implemented" if _raises_not_implemented(fn) else ""


def _method_kind(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    for dec in fn.decorator_list:
        name = (dotted_name(dec) or "").rsplit(".", 1)[-1]
        if name in ("classmethod", "staticmethod"):
            return name
    return ""


def _class_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """A class body with the bodies of its if/try blocks inlined (members defined per version)."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.If):
            out.extend(_class_statements(stmt.body) + _class_statements(stmt.orelse))
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            out.extend(_class_statements(stmt.body) + _class_statements(stmt.orelse))  # type: ignore[attr-defined]
            for handler in stmt.handlers:  # type: ignore[attr-defined]
                out.extend(_class_statements(handler.body))
        else:
            out.append(stmt)
    return out


def body_span(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int]:
    """First and last line of a function's body, its docstring left out."""
    body = fn.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body[0].lineno, fn.end_lineno or body[-1].lineno


def body_text(lines: list[str], span: tuple[int, int] | tuple[()]) -> str:
    """The body's source lines, stripped, without blank and comment-only lines: comparable across
    indentation and comment edits, and cheap (no unparse)."""
    if not span:
        return ""
    out = []
    for line in lines[span[0] - 1: span[1]]:
        text = line.strip()
        if text and not text.startswith("#"):
            out.append(text)
    return "\n".join(out)


def _function_def(fn: ast.FunctionDef | ast.AsyncFunctionDef, conditional: str) -> Definition:
    kind = _abstract_kind(fn)
    return Definition(
        body_span=body_span(fn),
        method_kind=_method_kind(fn),
        name=fn.name,
        kind="property" if _is_property(fn) else "function",
        line=fn.lineno,
        conditional=conditional,
        signature=signature_of(fn),
        is_abstract=bool(kind),
        shape=_shape(fn.body),
        abstract_kind=kind,
    )


def _self_reads(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    if not fn.args.args:
        return set()
    self_name = fn.args.args[0].arg
    return {node.attr for node in walk(fn) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name) and node.value.id == self_name}


_BLOCK_NODES = (ast.stmt, ast.excepthandler, ast.match_case)  # what holds statements: expressions never do
# Statements with no statement list among their fields (most of a body): nothing under them to queue.
_SIMPLE_STATEMENTS = frozenset({
    ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Import, ast.ImportFrom, ast.Pass,
    ast.Break, ast.Continue, ast.Raise, ast.Global, ast.Nonlocal, ast.Delete, ast.Assert,
    *(getattr(ast, name) for name in ("TypeAlias",) if hasattr(ast, name)),
})


def statements(node: ast.AST):
    """The statements under `node` (nested functions and classes included) in ast.walk's order: the
    walk restricted to statements, handlers and match cases, whose order among themselves it keeps."""
    from collections import deque

    todo = deque([node])
    pop, extend = todo.popleft, todo.extend
    simple = _SIMPLE_STATEMENTS
    while todo:
        node = pop()
        if node.__class__ in simple:
            yield node
            continue
        for name in node._fields:
            value = getattr(node, name, None)
            if value.__class__ is list and value and isinstance(value[0], _BLOCK_NODES):
                extend(value)
        yield node


def _self_attrs(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    if not fn.args.args:
        return []
    self_name = fn.args.args[0].arg
    out: list[str] = []
    for node in statements(fn):  # assignments are statements
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            for el in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name) and el.value.id == self_name:
                    out.append(el.attr)
    return out


def qualify(info: ModuleInfo, expr: ast.expr) -> str:
    """Dotted name of a class expression (a base, an annotation, a constructor), resolved through the
    imports of the module it is written in."""
    if isinstance(expr, ast.Subscript):  # Generic[T], Base[int]
        expr = expr.value
    dotted = dotted_name(expr)
    if dotted is None:
        return ast.unparse(expr)
    head, _, rest = dotted.partition(".")
    ref = info.imports.get(head)
    if ref is not None:
        base = ref.module if ref.name is None else f"{ref.module}.{ref.name}"
        return f"{base}.{rest}" if rest else base
    if head in info.defs:
        return f"{info.name}.{dotted}"
    return dotted


def _annotated(expr: ast.expr | None) -> ast.expr | None:
    """The class expression an annotation names: `X`, `"X"`, `X | None`, `Optional[X]`; None for others."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        try:
            expr = ast.parse(expr.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
        for side in (expr.left, expr.right):
            if not (isinstance(side, ast.Constant) and side.value is None):
                return _annotated(side)
        return None
    if isinstance(expr, ast.Subscript) and (dotted_name(expr.value) or "").rsplit(".", 1)[-1] == "Optional":
        return _annotated(expr.slice)
    return expr if isinstance(expr, (ast.Name, ast.Attribute)) else None


def _is_class_name(dotted: str) -> bool:
    return dotted.rsplit(".", 1)[-1][:1].isupper()


def _attribute_types(info: ModuleInfo, init: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    """`self.x` -> the class its `__init__` gives it: `self.x: Cls = ...`, `self.x = Cls(...)`, or
    `self.x = param` with `param: Cls` (dotted through the module's imports)."""
    if not init.args.args:
        return {}
    self_name = init.args.args[0].arg
    params = {a.arg: a.annotation for a in [*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs]}
    out: dict[str, str] = {}
    for node in statements(init):  # assignments are statements: the walk's statements, in its order
        if isinstance(node, ast.AnnAssign):
            target, expr = node.target, _annotated(node.annotation)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            expr = (value.func if isinstance(value, ast.Call) else
                    _annotated(params.get(value.id)) if isinstance(value, ast.Name) else None)
        else:
            continue
        if expr is None or not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                                and target.value.id == self_name):
            continue
        dotted = qualify(info, expr)
        if _is_class_name(dotted):
            out.setdefault(target.attr, dotted)
    return out


def _dataclass_options(node: ast.ClassDef) -> dict[str, bool] | None:
    """`@dataclass` / `@dataclasses.dataclass(...)` / pydantic's: its init/kw_only options, else None."""
    for dec in node.decorator_list:
        func = dec.func if isinstance(dec, ast.Call) else dec
        if (dotted_name(func) or "").rsplit(".", 1)[-1] != "dataclass":
            continue
        options = {"init": True, "kw_only": False}
        for kw in dec.keywords if isinstance(dec, ast.Call) else ():
            if kw.arg in options and isinstance(kw.value, ast.Constant):
                options[kw.arg] = bool(kw.value.value)
        return options
    return None


def _dataclass_fields(node: ast.ClassDef, kw_only: bool) -> list[Param]:
    """The `__init__` parameters a dataclass body declares, in order (ClassVar and init=False left out)."""
    out: list[Param] = []
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        annotation = (dotted_name(stmt.annotation.value if isinstance(stmt.annotation, ast.Subscript) else stmt.annotation)
                      or "").rsplit(".", 1)[-1]
        if annotation == "ClassVar":
            continue
        if annotation == "KW_ONLY":
            kw_only = True
            continue
        value, has_default = stmt.value, stmt.value is not None
        if isinstance(value, ast.Call) and (dotted_name(value.func) or "").rsplit(".", 1)[-1] == "field":
            options = {k.arg: k.value for k in value.keywords}
            init = options.get("init")
            if isinstance(init, ast.Constant) and init.value is False:
                continue
            has_default = "default" in options or "default_factory" in options
            flag = options.get("kw_only")
            field_kw = bool(flag.value) if isinstance(flag, ast.Constant) else kw_only
        else:
            field_kw = kw_only
        out.append(Param(stmt.target.id, "kwonly" if field_kw else "pos", has_default))
    return out


@dataclass(frozen=True)
class ClassFacts:
    """What a class's source says beyond its Definition, read when its module is parsed."""

    attribute_types: tuple[tuple[str, str], ...] = ()  # (attr, dotted class) that __init__ gives self.attr
    dataclass_fields: tuple[Param, ...] | None = None  # a generated __init__'s own fields; None: not a dataclass


_NO_FACTS = ClassFacts()


class _ModuleVisitor:
    """Walks module-level statements (and the bodies of module-level if/try/with) into a ModuleInfo."""

    def __init__(self, info: ModuleInfo):
        self.info = info
        self.all_names: list[str] | None = None
        self.all_dynamic = False
        self.getattr_fn: ast.FunctionDef | None = None
        self.dict_literals: dict[str, list[str]] = {}

    def qualify(self, expr: ast.expr) -> str:
        return qualify(self.info, expr)

    def visit_body(self, body: list[ast.stmt], conditional: str) -> None:
        for stmt in body:
            self.visit(stmt, conditional)

    def visit(self, stmt: ast.stmt, conditional: str) -> None:
        info = self.info
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            info.defs[stmt.name] = _function_def(stmt, conditional)
            if stmt.name == "__getattr__":
                info.lazy = True
                self.getattr_fn = stmt  # type: ignore[assignment]
        elif isinstance(stmt, ast.ClassDef):
            info.defs[stmt.name] = self.class_def(stmt, conditional)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    info.imports[alias.asname] = ImportRef(alias.name, None, stmt.lineno, conditional)
                else:
                    head = alias.name.split(".")[0]
                    info.imports[head] = ImportRef(head, None, stmt.lineno, conditional)
        elif isinstance(stmt, ast.ImportFrom):
            source = _absolute(info.name, info.is_package, stmt.level, stmt.module)
            for alias in stmt.names:
                if alias.name == "*":
                    info.stars = (*info.stars, source)
                else:
                    info.imports[alias.asname or alias.name] = ImportRef(source, alias.name, stmt.lineno, conditional)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            self.assignment(stmt, conditional)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            self.all_mutation(stmt.value)
        elif isinstance(stmt, ast.If):
            test = ast.unparse(stmt.test)
            inner = "type_checking" if "TYPE_CHECKING" in test else (conditional or "if")
            self.visit_body(stmt.body, inner)
            self.visit_body(stmt.orelse, conditional or "if")
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            self.visit_body(stmt.body, conditional or "try")  # type: ignore[attr-defined]
            for handler in stmt.handlers:  # type: ignore[attr-defined]
                self.visit_body(handler.body, conditional or "try")
            self.visit_body(stmt.orelse, conditional or "try")  # type: ignore[attr-defined]
            self.visit_body(stmt.finalbody, conditional)  # type: ignore[attr-defined]
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            self.visit_body(stmt.body, conditional or "try")
        elif isinstance(stmt, (ast.For, ast.While)):
            self.visit_body(stmt.body, conditional or "if")

    def assignment(self, stmt: ast.Assign | ast.AnnAssign | ast.AugAssign, conditional: str) -> None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        value = stmt.value
        for target in targets:
            for el in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]):
                if not isinstance(el, ast.Name):
                    continue
                if el.id == "__all__":
                    self.all_assignment(value, augment=isinstance(stmt, ast.AugAssign))
                    continue
                if isinstance(value, ast.Dict):
                    keys = [k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
                    if len(keys) == len(value.keys):
                        self.dict_literals[el.id] = keys
                elif isinstance(value, (ast.List, ast.Tuple, ast.Set)):
                    names = _string_list(value)
                    if names is not None:
                        self.dict_literals[el.id] = names
                if isinstance(stmt, ast.AugAssign) and el.id in self.info.defs:
                    continue
                self.info.defs[el.id] = Definition(el.id, "variable", stmt.lineno, conditional)

    def all_assignment(self, value: ast.expr | None, augment: bool) -> None:
        names = _string_list(value)
        if names is None:
            self.all_dynamic = True
            return
        self.all_names = (self.all_names or []) + names if augment else names

    def all_mutation(self, call: ast.Call) -> None:
        if isinstance(call.func, ast.Attribute) and dotted_name(call.func.value) == "__all__":
            if call.func.attr == "extend" and call.args:
                names = _string_list(call.args[0])
                if names is None:
                    self.all_dynamic = True
                else:
                    self.all_names = (self.all_names or []) + names
            elif call.func.attr == "append" and call.args:
                arg = call.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    self.all_names = (self.all_names or []) + [arg.value]

    def class_def(self, node: ast.ClassDef, conditional: str) -> Definition:
        members: list[Definition] = []
        instance_attrs: list[str] = []
        for stmt in _class_statements(node.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                members.append(_function_def(stmt, ""))
                if stmt.name == "__init__":
                    instance_attrs.extend(_self_attrs(stmt))
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        members.append(Definition(t.id, "variable", stmt.lineno))
            elif isinstance(stmt, ast.ClassDef):
                members.append(Definition(stmt.name, "class", stmt.lineno))
        # Properties with setters appear twice: keep the first.
        seen: dict[str, Definition] = {}
        for m in members:
            seen.setdefault(m.name, m)
        is_protocol_like = any((dotted_name(b) or "").endswith(("ABC", "Protocol")) for b in node.bases)
        abstract = tuple(m.name for m in seen.values() if m.is_abstract)
        init = seen.get("__init__")
        return Definition(
            name=node.name,
            kind="class",
            line=node.lineno,
            conditional=conditional,
            signature=init.signature.drop_first() if init and init.signature else None,
            bases=tuple(self.qualify(b) for b in node.bases),
            members=tuple(seen.values()),
            instance_attrs=tuple(dict.fromkeys(instance_attrs)),
            abstract=abstract,
            is_abstract=is_protocol_like,
            shape=_shape(node.body),
        )

    def finish(self) -> None:
        info = self.info
        if self.all_names is not None and not self.all_dynamic:
            info.all_names = tuple(dict.fromkeys(self.all_names))
        if self.getattr_fn is not None:
            served: list[str] = []
            for node in walk(self.getattr_fn):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                    served.append(node.value)
                elif isinstance(node, ast.Name) and node.id in self.dict_literals:
                    served.extend(self.dict_literals[node.id])
            # Names listed in __all__ but not defined are what a lazy module serves.
            if info.all_names:
                served.extend(n for n in info.all_names if n not in info.defs and n not in info.imports)
            info.lazy_names = tuple(dict.fromkeys(served))
            info.lazy_closed = self._getattr_is_closed(self.getattr_fn)

    def _getattr_is_closed(self, fn: ast.FunctionDef) -> bool:
        """True for the common shape `if name in TABLE: ... / if name == "x": ... / raise AttributeError`,
        where every table is a literal of this module: then any other name is missing, not unknown."""
        if not fn.args.args:
            return False
        return self._closed_body(list(fn.body), fn.args.args[0].arg)

    def _closed_body(self, body: list[ast.stmt], param: str) -> bool:
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # docstring
        while body and isinstance(body[0], (ast.Import, ast.ImportFrom)):
            body = body[1:]  # `from importlib import import_module`
        if not body:
            return False
        last = body[-1]
        if not all(isinstance(stmt, ast.If) and self._tests_name_only(stmt.test, param) for stmt in body[:-1]):
            return False
        if isinstance(last, ast.If) and self._tests_name_only(last.test, param) and last.orelse:
            return self._closed_body(list(last.orelse), param)  # `if name in T: ... else: raise AttributeError`
        if not isinstance(last, ast.Raise) or last.exc is None:
            return False
        exc = last.exc
        return (dotted_name(exc.func if isinstance(exc, ast.Call) else exc) or "").rsplit(".", 1)[-1] == "AttributeError"

    def _tests_name_only(self, test: ast.expr, param: str) -> bool:
        if isinstance(test, ast.BoolOp):
            return all(self._tests_name_only(v, param) for v in test.values)
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name)
                and test.left.id == param):
            return False
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, ast.Eq):
            return isinstance(right, ast.Constant) and isinstance(right.value, str)
        if isinstance(op, ast.In):
            return (isinstance(right, ast.Name) and right.id in self.dict_literals) or _string_list(right) is not None
        return False


def _string_list(value: ast.expr | None) -> list[str] | None:
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        out = []
        for el in value.elts:
            if not (isinstance(el, ast.Constant) and isinstance(el.value, str)):
                return None
            out.append(el.value)
        return out
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        left, right = _string_list(value.left), _string_list(value.right)
        return None if left is None or right is None else left + right
    return None


def parse_module(name: str, relpath: str, source: bytes) -> ModuleInfo:
    with gcpause.paused():  # the syntax tree is freed when _parse_module returns, before the collector resumes
        return _parse_module(name, relpath, source)


def _parse_module(name: str, relpath: str, source: bytes) -> ModuleInfo:
    is_package = relpath.endswith(("__init__.py", "__init__.pyi"))
    info = ModuleInfo(name=name, path=relpath, is_package=is_package)
    try:
        tree = ast.parse(source, filename=relpath)
    except (SyntaxError, ValueError) as exc:
        info.syntax_error = f"{type(exc).__name__}: {exc}"
        return info
    visitor = _ModuleVisitor(info)
    visitor.visit_body(tree.body, "")
    visitor.finish()
    if b"class" in source:  # no class statement without the keyword (an ASCII word in any source encoding)
        info.class_facts = _class_facts_of(info, tree)
    return info


def _class_facts_of(info: ModuleInfo, tree: ast.Module) -> dict[tuple[str, int], ClassFacts]:
    """ClassFacts per class statement (by name and line, the first in ast.walk's order, as classes
    are statements and statements() keeps that order among them); a class with no facts is left out."""
    out: dict[tuple[str, int], ClassFacts] = {}
    for node in statements(tree):
        if isinstance(node, ast.ClassDef) and (node.name, node.lineno) not in out:
            out[(node.name, node.lineno)] = _class_facts(info, node)
    return {key: facts for key, facts in out.items() if facts != _NO_FACTS}


def _class_facts(info: ModuleInfo, node: ast.ClassDef) -> ClassFacts:
    types: dict[str, str] = {}
    for stmt in _class_statements(node.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "__init__":
            types = _attribute_types(info, stmt)  # the last __init__ of the body, as at run time
    options = _dataclass_options(node)
    fields = (tuple(_dataclass_fields(node, options["kw_only"])) if options is not None and options["init"] else None)
    return ClassFacts(tuple(types.items()), fields)


def _names_matching(pattern: bytes, flags: int, paths: list[str], needles: tuple[bytes, ...] = ()) -> list[set[str]]:
    """The texts of the last group `pattern` matched, per file (an unreadable file: none)."""
    return _names_matching_each([(pattern, flags)], paths, needles)[0]


def _names_matching_each(patterns: list[tuple[bytes, int]], paths: list[str],
                         needles: tuple[bytes, ...] = ()) -> list[list[set[str]]]:
    """_names_matching for several patterns in one read of each file: per pattern, per file.
    `needles`: byte strings one of which every match of every pattern contains; a file that holds
    none is not searched (a substring test runs at memory speed, a pattern that opens with `\b` or
    an alternation is tried at every position: 0.27 s of CPU over vllm 0.22.1 for two names)."""
    compiled = [re.compile(pattern, flags) for pattern, flags in patterns]
    out: list[list[set[str]]] = [[] for _ in compiled]
    for path in paths:
        try:
            with open(path, "rb") as fh:
                text = b"\n" + fh.read()  # every line, the first too, follows a newline (_DEFINITION_LINES)
        except OSError:
            text = b""
        if needles and not any(needle in text for needle in needles):
            text = b""
        for found, regex in zip(out, compiled):
            found.append({m.group(m.lastindex or 0).decode() for m in regex.finditer(text)} if len(text) > 1 else set())
    return out


# Every module-level definition line (`def f`, `class C`, `name =`, `name: T`): the name-specific
# pattern of find_definitions matches exactly these lines' names that it lists (for ASCII names;
# `\w` of a bytes pattern is ASCII), so one pass, started early, serves any set of names. Written
# as a newline followed by the line rather than `^` under re.MULTILINE (the same matches: the text
# searched starts with a newline, and no match ends at a line start): a pattern that opens with a
# literal lets the regex engine jump from newline to newline instead of trying every position,
# 3x faster over a tree (0.25 -> 0.085 s of CPU on vllm 0.22.1's 24 MB).
_DEFINITION_LINES = (rb"\n(?:(?:(?:async\s+)?def|class)\s+([A-Za-z_]\w*)|([A-Za-z_]\w*)\s*[:=])", 0)


def _parse_job(job: tuple[str, str, str]) -> tuple[str, bytes]:
    """Parse one module (in a worker): the pickled ModuleInfo, which the parent loads and packs."""
    name, relpath, abspath = job
    source = Path(abspath).read_bytes()
    return name, pickle.dumps(parse_module(name, relpath, source), protocol=pickle.HIGHEST_PROTOCOL)


# ---------------------------------------------------------------- the tree


@dataclass(frozen=True)
class Resolution:
    status: str  # found | missing | unknown | external
    module: str
    name: str
    definition: Definition | None = None
    defined_in: str | None = None  # module of the definition after following re-exports
    chain: tuple[str, ...] = ()  # dotted hops followed (re-exports)
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status != "missing"


_CODE_HASH: str | None = None


def _code_hash() -> str:
    """Hash of this file: a parser or search change never reads entries cached by an older porter."""
    global _CODE_HASH
    if _CODE_HASH is None:
        _CODE_HASH = hashlib.blake2b(Path(__file__).read_bytes(), digest_size=4).hexdigest()
    return _CODE_HASH


def discover_modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Module name -> file for every package in `packages` under `root` (or `root/src`)."""
    found: dict[str, Path] = {}
    for package in packages:
        for base in (root, root / "src", root / "python"):
            pkg_dir = base / package
            if pkg_dir.is_dir():
                _walk_package(pkg_dir, package, found)
                break
            single = base / f"{package}.py"
            if single.is_file():
                found[package] = single
                break
    return found


def _walk_package(directory: Path, dotted: str, found: dict[str, Path]) -> None:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    files = {e.name: e for e in entries if e.is_file()}
    init = files.get("__init__.py") or files.get("__init__.pyi")
    if init is not None:
        found[dotted] = directory / init.name  # a child path: cheaper than parsing entry.path whole
    elif dotted not in found:
        found.setdefault(dotted, directory)  # namespace package: a directory without __init__
    for name, entry in files.items():
        if name.startswith("__init__."):
            continue
        stem, dot, ext = name.rpartition(".")
        if ext == "py" or (ext == "pyi" and f"{stem}.py" not in files):
            if stem.isidentifier():
                found[f"{dotted}.{stem}"] = directory / name
    for entry in entries:
        if entry.is_dir() and entry.name.isidentifier() and not entry.name.startswith("."):
            _walk_package(directory / entry.name, f"{dotted}.{entry.name}", found)


class TreeIndex:
    """The API of one upstream tree (one version), parsed lazily and cached by content hash."""

    def __init__(self, root: Path, packages: Iterable[str], cache_dir: Path | None = None, label: str = "",
                 pool: Executor | None = None):
        self.root = Path(root)
        self.pool = pool  # the run's worker processes (shared with the plugin scan), else None
        self.packages = tuple(packages)
        self.label = label or str(root)
        self.cache_dir = Path(cache_dir) / "index" / f"v{INDEX_VERSION}-{_code_hash()}" if cache_dir else None
        self._pack = Pack(pack_path(self.cache_dir, self.root))  # parsed modules by content key
        self.files = discover_modules(self.root, self.packages)
        self.extension_modules = self._extension_modules()
        self._modules: dict[str, ModuleInfo | None] = {}
        self._memo: dict[tuple[str, str], Resolution] = {}
        self._reads: dict[tuple[str, str, int], frozenset[str]] = {}  # class_reads() answers
        self._class_sources: dict[str, dict[tuple[str, int], ast.ClassDef]] = {}  # class_facts(): parsed class bodies
        self._planning: set[str] | None = None  # set while unparsed_reach() runs
        self._misses = 0  # while planning: how often resolution met a module not loaded yet
        self._tainted: set[tuple[str, str]] | None = None  # while planning: memo entries computed with a miss
        self._splits: dict[str, tuple[str, tuple[str, ...]]] = {}  # split_dotted() answers (the file set is fixed)
        # resolve_dotted() and mro() answers outside planning (the checks ask each dotted name ~9 times,
        # each class's ancestry ~30 times); an mro entry keeps its class, so its id cannot be reused
        self._dotted: dict[str, Resolution] = {}
        self._mros: dict[tuple[int, str], tuple[Definition, tuple[tuple[Definition, str], ...]]] = {}
        self.stats = {"parsed": 0, "cached": 0}
        self.hit_counts: dict[str, int] = {}
        self._passes: dict[tuple[bytes, int], Any] = {}  # pattern -> matches() answer, or the chunk futures computing it
        self._stats: dict[str, os.stat_result] | None = None  # file_stats()
        self._listed: list[tuple[str, Path]] | None = None  # _module_files()

    def _extension_modules(self) -> frozenset[str]:
        manifest = self.root / ".porter-extensions.txt"
        if manifest.is_file():
            return frozenset(manifest.read_text(encoding="utf-8").split())
        return frozenset()

    # -- module access

    def has_module(self, name: str) -> bool:
        return name in self.files or name in self.extension_modules

    def is_upstream(self, module: str) -> bool:
        return module.split(".")[0] in self.packages

    def _cache_key(self, name: str, source: bytes, relpath: str = "") -> str:
        digest = hashlib.blake2b(digest_size=20)
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(relpath.encode())  # is_package depends on the file name, not only the text
        digest.update(b"\0")
        digest.update(source)
        return digest.hexdigest()

    def _relpath(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def _load(self, name: str, blob: bytes) -> bool:
        """Load a packed module (False: a damaged record, to be parsed again)."""
        try:
            self._modules[name] = pickle.loads(blob)
        except Exception:  # noqa: BLE001
            return False
        self.stats["cached"] += 1
        return True

    def save(self) -> None:
        """Write the modules parsed since the pack was read into it (one file for the tree; records
        of edited files go once the pack holds twice as many as the tree has modules)."""
        self._pack.save(keep=2 * len(self.files))

    def module(self, name: str) -> ModuleInfo | None:
        if name in self._modules:
            return self._modules[name]
        path = self.files.get(name)
        if self._planning is not None and path is not None and not path.is_dir():
            self._planning.add(name)  # unparsed_reach(): note the module, parse nothing
            self._misses += 1
            return None
        if path is None or path.is_dir():
            info = None if path is None else ModuleInfo(name=name, path=str(path), is_package=True)
            self._modules[name] = info
            return info
        source = path.read_bytes()
        relpath = self._relpath(path)
        key = self._cache_key(name, source, relpath)
        blob = self._pack.get(key)
        if blob is not None and self._load(name, blob):
            return self._modules[name]
        info = parse_module(name, relpath, source)
        self.stats["parsed"] += 1
        if self._pack.path is not None:  # packed by the next save()
            self._pack.put(key, pickle.dumps(info, protocol=pickle.HIGHEST_PROTOCOL))
        self._modules[name] = info
        return info

    def prefetch(self, names: Iterable[str], progress: Callable[[int], None] | None = None, workers: int | None = None) -> None:
        """Load `names` (unknown names are skipped), parsing uncached ones in parallel (in the
        run's shared pool when the index has one, else in a pool of its own)."""
        prefetch_many([(self, names)], progress, workers)

    def _wanted(self, names: Iterable[str]) -> list[str]:
        """Those of `names` that are module files of this tree not loaded yet."""
        files, loaded = self.files, self._modules
        return [n for n in dict.fromkeys(names) if n not in loaded and n in files and files[n].is_file()]

    def unparsed_reach(self, dotted_names: Iterable[str]) -> set[str]:
        """Module files not loaded yet that resolving `dotted_names` (and the bases of the classes
        they name) would parse next. Resolution runs on the loaded modules only, with a memo of its
        own, so nothing it concludes is kept: it only says which modules to parse in the next wave."""
        return self.plan_reach(dotted_names)[0]

    def plan_reach(self, dotted_names: Iterable[str]) -> tuple[set[str], list[str]]:
        """unparsed_reach(), and the names whose resolution met a module not loaded yet (directly or
        through a memo entry that did). The others resolved on loaded modules alone: once more
        modules are loaded they resolve the same way and plan nothing, so the next wave asks only
        about these (after the first wave most names are settled: 0.025 -> ~0.005 s a wave)."""
        planned: set[str] = set()
        unsettled: list[str] = []
        memo, self._memo, self._planning, self._tainted = self._memo, {}, planned, set()
        try:
            for dotted in dotted_names:
                before = self._misses
                res = self.resolve_dotted(dotted)
                if res.status == "found" and res.definition is not None and res.definition.kind == "class":
                    self.mro(res.definition, res.defined_in or res.module)
                if self._misses != before:
                    unsettled.append(dotted)
        finally:
            self._memo, self._planning, self._tainted = memo, None, None
        return planned, unsettled

    # -- resolution

    def split_dotted(self, dotted: str) -> tuple[str, list[str]]:
        """Longest module prefix of `dotted` present in the tree, and the remaining attribute parts."""
        known = self._splits.get(dotted)
        if known is None:
            known = self._splits[dotted] = self._split_dotted(dotted)
        return known[0], list(known[1])

    def _split_dotted(self, dotted: str) -> tuple[str, tuple[str, ...]]:
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            candidate = ".".join(parts[:i])
            if self.has_module(candidate):
                return candidate, tuple(parts[i:])
        return "", tuple(parts)

    def resolve(self, module: str, name: str, _depth: int = 0) -> Resolution:
        key = (module, name)
        tainted = self._tainted
        if key in self._memo:
            if tainted is not None and key in tainted:
                self._misses += 1  # planning: this answer depended on a module not loaded yet
            return self._memo[key]
        if tainted is None:
            result = self._memo[key] = self._resolve(module, name, _depth)
            return result
        before = self._misses
        result = self._resolve(module, name, _depth)
        self._memo[key] = result
        if self._misses != before:
            tainted.add(key)
        return result

    def _resolve(self, module: str, name: str, depth: int) -> Resolution:
        if not self.is_upstream(module):
            return Resolution("external", module, name, reason="outside this upstream")
        if module in self.extension_modules:
            return Resolution("unknown", module, name, reason="compiled extension module")
        if depth > 12:
            return Resolution("unknown", module, name, reason="re-export chain too deep")
        info = self.module(module)
        if info is None:
            parent, _, last = module.rpartition(".")
            return Resolution("missing", module, name, reason=f"module {module} does not exist")
        if info.syntax_error:
            return Resolution("unknown", module, name, reason=f"{info.path}: {info.syntax_error}")
        if name in info.defs:
            return Resolution("found", module, name, info.defs[name], module)
        ref = info.imports.get(name)
        if ref is not None:
            if ref.name is None:
                return self._module_resolution(ref.module, module, name)
            if self.has_module(f"{ref.module}.{ref.name}") and self.is_upstream(ref.module):
                return Resolution("found", module, name, None, f"{ref.module}.{ref.name}", (f"{ref.module}.{ref.name}",))
            inner = self.resolve(ref.module, ref.name, depth + 1)
            if inner.status == "missing" and ref.conditional:
                return Resolution("unknown", module, name, reason=f"conditional import from {ref.module}", chain=(f"{ref.module}.{ref.name}",))
            return Resolution(inner.status, module, name, inner.definition, inner.defined_in,
                              (f"{ref.module}.{ref.name}", *inner.chain), inner.reason)
        if self.has_module(f"{module}.{name}"):
            return Resolution("found", module, name, None, f"{module}.{name}")
        for star in info.stars:
            if not self.is_upstream(star):
                continue
            star_info = self.module(star)
            if star_info is None:
                continue
            if name in star_info.public_names() or (star_info.all_names is None and star_info.stars):
                inner = self.resolve(star, name, depth + 1)
                if inner.status != "missing":
                    return Resolution(inner.status, module, name, inner.definition, inner.defined_in,
                                      (f"{star}.*", *inner.chain), inner.reason)
        if any(not self.is_upstream(s) for s in info.stars):
            return Resolution("unknown", module, name, reason="star import from another package")
        if info.lazy:
            if name in info.lazy_names:
                return Resolution("found", module, name, None, module, reason="served by module __getattr__")
            if info.lazy_closed:
                return Resolution("missing", module, name,
                                  reason=f"{name} is not defined in {module} (its __getattr__ serves only {len(info.lazy_names)} listed names)")
            return Resolution("unknown", module, name, reason="module has a __getattr__ that may serve it")
        return Resolution("missing", module, name, reason=f"{name} is not defined in {module}")

    def _module_resolution(self, target: str, module: str, name: str) -> Resolution:
        if not self.is_upstream(target) or self.has_module(target):
            return Resolution("found" if self.is_upstream(target) else "external", module, name, None, target)
        return Resolution("missing", module, name, reason=f"module {target} does not exist")

    def resolve_dotted(self, dotted: str) -> Resolution:
        """Resolve `pkg.mod.Name.attr`: the module prefix, then a name, then class members."""
        if self._planning is not None:  # unparsed_reach(): answers from the loaded modules only, not kept
            return self._resolve_dotted(dotted)
        known = self._dotted.get(dotted)
        if known is None:
            known = self._dotted[dotted] = self._resolve_dotted(dotted)
        return known

    def _resolve_dotted(self, dotted: str) -> Resolution:
        module, rest = self.split_dotted(dotted)
        if not module:
            if not self.is_upstream(dotted):
                return Resolution("external", dotted, "")
            return Resolution("missing", dotted.split(".")[0], "", reason="package not in this tree")
        if not rest:
            return Resolution("found", module, "", None, module)
        res = self.resolve(module, rest[0])
        if res.status != "found" or len(rest) == 1:
            return res
        definition = res.definition
        for attr in rest[1:]:
            if definition is None or definition.kind != "class":
                return Resolution("unknown", res.module, res.name, reason="attribute of a non-class value")
            member = self.class_member(definition, res.defined_in or res.module, attr)
            if member is None:
                why = self.open_members(definition, res.defined_in or res.module)
                if why is not None:
                    return Resolution("unknown", res.module, res.name, reason=why)
                return Resolution("missing", res.module, f"{res.name}.{attr}",
                                  reason=f"{res.name} has no member {attr}")
            definition = member
        return Resolution("found", res.module, res.name, definition, res.defined_in, res.chain)

    def class_of(self, dotted: str) -> tuple[Definition, str] | None:
        res = self.resolve_dotted(dotted)
        if res.status == "found" and res.definition is not None and res.definition.kind == "class":
            return res.definition, res.defined_in or res.module
        return None

    def mro(self, cls: Definition, module: str, _seen: frozenset[str] = frozenset()) -> list[tuple[Definition, str]]:
        """The class and its upstream ancestors, depth first (good enough for member lookup)."""
        if _seen or self._planning is not None:
            return self._mro(cls, module, _seen)
        known = self._mros.get((id(cls), module))
        if known is None or known[0] is not cls:
            known = self._mros[(id(cls), module)] = (cls, tuple(self._mro(cls, module, _seen)))
        return list(known[1])

    def _mro(self, cls: Definition, module: str, _seen: frozenset[str]) -> list[tuple[Definition, str]]:
        out = [(cls, module)]
        key = f"{module}.{cls.name}"
        if key in _seen or len(_seen) > 40:
            return out
        for base in cls.bases:
            found = self.class_of(base) if self.is_upstream(base) else None
            if found is not None:
                out.extend(self.mro(found[0], found[1], _seen | {key}))
        return out

    def class_member(self, cls: Definition, module: str, attr: str) -> Definition | None:
        for klass, _ in self.mro(cls, module):
            member = klass.member(attr)
            if member is not None:
                return member
            if attr in klass.instance_attrs:
                return Definition(attr, "variable", klass.line)
            if any(attr in KNOWN_OUTSIDE_BASES.get(b, ()) for b in klass.bases):
                return Definition(attr, "function", klass.line)  # nn.Module.register_parameter and the like
        return None

    def open_members(self, cls: Definition, module: str) -> str | None:
        """Why a member the class and its ancestors in the tree do not define may still exist at run
        time, or None when they are all there is: some class of its MRO defines `__getattr__`, derives
        from a class outside the tree that is neither a plain base nor one whose members are known
        (torch.nn.Module's are: `class_member` answers them), or from an upstream name that is not a
        class of the tree."""
        for klass, _ in self.mro(cls, module):
            if klass.member("__getattr__") is not None:
                return f"{klass.name} defines __getattr__"
            for base in klass.bases:
                if base.rsplit(".", 1)[-1] in PLAIN_BASES or base in KNOWN_OUTSIDE_BASES:
                    continue
                if not self.is_upstream(base):
                    return f"{klass.name} derives from {base}, a class outside the tree"
                if self.class_of(base) is None:
                    return f"{klass.name} derives from {base}, which is not a class of the tree"
        return None

    def class_facts(self, cls: Definition, module: str) -> ClassFacts:
        """Facts read from the class's own source when its module was parsed (ModuleInfo.class_facts)."""
        info = self.module(module)
        return _NO_FACTS if info is None else info.class_facts.get((cls.name, cls.line), _NO_FACTS)

    def _class_nodes(self, module: str) -> dict[tuple[str, int], ast.ClassDef]:
        """The class statements of a module's source by (name, line), the first of each: parsed once
        per module however many of its classes are asked about (the first in ast.walk's order, as
        classes are statements and statements() keeps that order among them)."""
        nodes = self._class_sources.get(module)
        if nodes is None:
            nodes = self._class_sources[module] = {}
            path = self.files.get(module)
            tree = None
            if path is not None and path.is_file():
                try:
                    tree = ast.parse(path.read_bytes(), filename=str(path))
                except (SyntaxError, ValueError):
                    tree = None
            for node in statements(tree) if tree is not None else ():
                if isinstance(node, ast.ClassDef):
                    nodes.setdefault((node.name, node.lineno), node)
        return nodes

    def class_reads(self, cls: Definition, module: str) -> frozenset[str]:
        """`self.<attr>` read by the class's methods other than `__init__`. Walking every method body
        of every indexed class would cost a third of the index and only the new-attribute check asks,
        for a few classes: their module is parsed again here, once per module."""
        key = (module, cls.name, cls.line)
        if key not in self._reads:
            node = self._class_nodes(module).get((cls.name, cls.line))
            reads: set[str] = set()
            if node is not None and self.module(module) is not None:
                for stmt in _class_statements(node.body):
                    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name != "__init__":
                        reads |= _self_reads(stmt)
            self._reads[key] = frozenset(reads)
        return self._reads[key]

    def attribute_class(self, cls: Definition, module: str, attr: str) -> tuple[Definition, str] | None:
        """The class of `instance.attr` as the `__init__` of the class or of an ancestor sets it."""
        for klass, where in self.mro(cls, module):
            dotted = dict(self.class_facts(klass, where).attribute_types).get(attr)
            if dotted is not None:
                return self.class_of(dotted) if self.is_upstream(dotted) else None
        return None

    def dataclass_init(self, cls: Definition, module: str) -> Signature | None:
        """The `__init__` a dataclass generates (fields of its dataclass ancestors first, a field
        redeclared keeps its first place), or None: not a dataclass, or it defines `__init__` itself."""
        if cls.member("__init__") is not None or self.class_facts(cls, module).dataclass_fields is None:
            return None
        order: dict[str, Param] = {}
        for klass, where in reversed(self.mro(cls, module)):
            for param in self.class_facts(klass, where).dataclass_fields or ():
                order[param.name] = param
        params = list(order.values())
        # Keyword-only fields go after the positional ones, as dataclasses orders them.
        return Signature(tuple([p for p in params if p.kind == "pos"] + [p for p in params if p.kind == "kwonly"]))

    # -- search for a symbol's new home

    def find_definitions(
        self, names: Iterable[str], hints: dict[str, str] | None = None, limit: int = 12
    ) -> dict[str, list[tuple[str, Definition]]]:
        """Where each name is defined at module level anywhere in the tree. A regex pass over the
        file text picks the files worth parsing; for a name found in more than `limit` files
        (`logger`), only the `limit` modules closest to `hints[name]` (its old module) are parsed.
        `self.hit_counts[name]` keeps how many files matched."""
        from rapidfuzz import fuzz

        names = sorted({n for n in names if n.isidentifier()})
        hints = hints or {}
        out: dict[str, list[tuple[str, Definition]]] = {n: [] for n in names}
        if not names:
            return out
        cache_path = None
        if self.cache_dir is not None:
            key_text = "\0".join(f"{n}={hints.get(n, '')}" for n in names) + f"\0{limit}\0" + self.fingerprint()
            key = hashlib.blake2b(key_text.encode(), digest_size=20).hexdigest()
            cache_path = self.cache_dir / "search" / key[:2] / f"{key}.pkl"
            if cache_path.is_file():
                try:
                    out, self.hit_counts = pickle.loads(cache_path.read_bytes())
                    return out
                except Exception:  # noqa: BLE001 - damaged entry: search again
                    out = {n: [] for n in names}
        hit_modules: dict[str, list[str]] = {n: [] for n in names}
        if all(n.isascii() for n in names):
            wanted = set(names)
            for module, _, found in self.matches(re.compile(*_DEFINITION_LINES)):
                for name in found & wanted:
                    hit_modules[name].append(module)
        else:
            alternation = "|".join(re.escape(n) for n in names)
            pattern = re.compile(
                rf"^(?:(?:async\s+)?def|class)\s+({alternation})\b|^({alternation})\s*[:=]".encode(), re.MULTILINE
            )
            for module, _, found in self.matches(pattern):
                for name in found:
                    hit_modules[name].append(module)
        self.hit_counts = {n: len(m) for n, m in hit_modules.items()}
        for name, modules in hit_modules.items():
            if len(modules) > limit:
                hint = hints.get(name, "")
                # Modules named after the symbol (`vllm.logger` for `logger`) first, then the closest paths.
                modules = sorted(modules, key=lambda m: (m.rsplit(".", 1)[-1] != name, -fuzz.ratio(hint, m), m))[:limit]
            for module in modules:
                info = self.module(module)
                definition = info.defs.get(name) if info is not None else None
                if definition is not None:
                    out[name].append((module, definition))
        if cache_path is not None:
            atomic_write_bytes(cache_path, pickle.dumps((out, self.hit_counts), protocol=pickle.HIGHEST_PROTOCOL), durable=False)
        return out

    def _module_files(self) -> list[tuple[str, Path]]:
        """The module files (namespace package directories left out), listed once per index."""
        if self._listed is None:
            self._listed = [(module, path) for module, path in self.files.items() if not path.is_dir()]
        return self._listed

    def matches(self, pattern: re.Pattern[bytes], needles: Iterable[str] = ()) -> list[tuple[str, Path, set[str]]]:
        """(module, file, texts of the last group `pattern` matched) for each module file of the
        tree where it matches, in file order. One pass over the tree's text, in the run's pool when
        there is one (such passes are the longest steps after the parallel parse), else here; a
        pattern passed to start_passes() before is answered by the pass it started. `needles`:
        strings one of which every match contains (the words of `\b(a|b)\b`): only the files that
        hold one are searched (the same answer, found faster)."""
        key = (pattern.pattern, pattern.flags)
        answer = self._passes.get(key)
        literal = tuple(n.encode() for n in needles)
        if answer is None:
            self.start_passes([pattern], literal)
            answer = self._passes.get(key)
        if answer is None:  # no pool: one pass here
            files = self._module_files()
            found = _names_matching(pattern.pattern, pattern.flags, [str(path) for _, path in files], literal)
            answer = self._passes[key] = [(module, path, names) for (module, path), names in zip(files, found) if names]
        if answer.__class__ is tuple:  # (files, pattern's position, chunk futures): collect them
            files, position, futures = answer
            found = [names for future in futures for names in future.result()[position]]
            answer = self._passes[key] = [(module, path, names) for (module, path), names in zip(files, found) if names]
        return answer

    def start_definition_search(self, also: Iterable[re.Pattern[bytes]] = ()) -> None:
        """Start find_definitions()'s pass over the tree in the run's pool (with `also`, patterns
        matches() will be asked for, in the same read of each file), so it runs while the caller
        does other work instead of keeping it waiting later."""
        self.start_passes([re.compile(*_DEFINITION_LINES), *also])

    def start_passes(self, patterns: list[re.Pattern[bytes]], needles: tuple[bytes, ...] = ()) -> None:
        """Submit one pass over the tree's text for the `patterns` not passed yet (one read of each
        file for all of them) to the run's pool; a no-op without a pool or for a small tree.
        `needles`: as for matches(), shared by all the patterns."""
        todo = list(dict.fromkeys((p.pattern, p.flags) for p in patterns if (p.pattern, p.flags) not in self._passes))
        files = self._module_files() if todo and self.pool is not None else []
        if len(files) < 4 * _PARALLEL_THRESHOLD:
            return
        paths = [str(path) for _, path in files]
        size = max(64, len(paths) // 8)
        futures = [self.pool.submit(_names_matching_each, todo, paths[i: i + size], needles)
                   for i in range(0, len(paths), size)]
        for position, key in enumerate(todo):
            self._passes[key] = (files, position, futures)

    def file_stats(self) -> dict[str, os.stat_result]:
        """os.stat of each module's path (a namespace package's directory too; unreadable ones left
        out), taken once: the fingerprint and the patch-release test both read them."""
        if self._stats is None:
            self._stats = {}
            for module, path in self.files.items():
                try:
                    self._stats[module] = path.stat()
                except OSError:
                    continue
        return self._stats

    def fingerprint(self) -> str:
        """Identity of the tree's files (name, size, mtime): a cheap key for whole-tree searches."""
        if getattr(self, "_fingerprint", None) is None:
            digest = hashlib.blake2b(digest_size=20)
            digest.update(str(self.root.resolve()).encode())
            stats = self.file_stats()
            for module in sorted(stats):
                st = stats[module]
                digest.update(f"{module}:{st.st_size}:{st.st_mtime_ns}\n".encode())
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    def module_last_parts(self, last: str) -> list[str]:
        return [m for m in self.files if m.rsplit(".", 1)[-1] == last]


def prefetch_many(requests: Iterable[tuple[TreeIndex, Iterable[str]]], progress: Callable[[int], None] | None = None,
                  workers: int | None = None, persist: bool = True) -> None:
    """Load the modules each index of `requests` wants in one batch: pack hits here, the rest
    parsed in parallel (the first index's shared pool, else a pool of its own; a few here). A
    module whose file is byte-identical in two trees (same name, path and text: one cache key) is
    parsed once. `persist`: write each index's pack at the end (prefetch_reach writes once, after
    its last wave)."""
    jobs: dict[str, tuple[str, str, str]] = {}  # cache key -> parse job
    waiting: list[tuple[TreeIndex, str, str]] = []  # (index, module, cache key)
    requests = list(requests)
    pool = None
    for index, names in requests:
        pool = pool or index.pool
        for name in index._wanted(names):
            path = index.files[name]
            relpath = index._relpath(path)
            key = index._cache_key(name, path.read_bytes(), relpath)
            blob = None if key in jobs else index._pack.get(key)
            if blob is None or not index._load(name, blob):
                jobs.setdefault(key, (name, relpath, str(path)))
                waiting.append((index, name, key))
                continue
            if progress:
                progress(1)
    workers = workers or min(4, os.cpu_count() or 1)
    keys = list(jobs)
    waiters: dict[str, list[tuple[TreeIndex, str]]] = {}
    for index, name, key in waiting:
        waiters.setdefault(key, []).append((index, name))
    own = None
    if len(jobs) < _PARALLEL_THRESHOLD or (workers < 2 and pool is None):
        answers: Iterable[tuple[str, bytes]] = (_parse_job(jobs[k]) for k in keys)  # here, one after another
    else:
        if pool is None:
            from concurrent.futures import ProcessPoolExecutor

            own = ProcessPoolExecutor(max_workers=workers)
        answers = (own or pool).map(_parse_job, [jobs[k] for k in keys], chunksize=8)
    try:
        # Each result is loaded as it arrives, while the workers parse the rest.
        for key, (_, blob) in zip(keys, answers):
            for i, (index, name) in enumerate(waiters[key]):
                index._modules[name] = pickle.loads(blob)
                index._pack.put(key, blob)
                index.stats["parsed" if i == 0 else "cached"] += 1  # the same file of the other tree: parsed once
                if progress:
                    progress(1)
    finally:
        if own is not None:
            own.shutdown()
    if persist:
        for index in {id(index): index for index, _ in requests}.values():
            index.save()


def prefetch_reach(indexes: Iterable[TreeIndex], modules: Iterable[str], symbols: Iterable[str],
                   progress: Callable[[int], None] | None = None, waves: int = 4) -> None:
    """Load what resolving `symbols` in each index needs, in parallel waves: first `modules` (the
    modules the plugin names), then, wave by wave, the modules its re-exports, star imports and
    base classes lead to. What no wave reached is still parsed on demand by `module()`."""
    indexes = list(indexes)
    modules, symbols = sorted(set(modules)), sorted(set(symbols))
    prefetch_many([(index, modules) for index in indexes], progress, persist=False)
    unsettled = [symbols for _ in indexes]  # per index: the names a wave may still lead further
    for _ in range(waves):
        batch = []
        for i, index in enumerate(indexes):
            planned, unsettled[i] = index.plan_reach(unsettled[i])
            batch.append((index, sorted(planned)))
        if not any(names for _, names in batch):
            break
        prefetch_many(batch, persist=False)
    for index in indexes:  # one write of each tree's pack, after the last wave
        index.save()
