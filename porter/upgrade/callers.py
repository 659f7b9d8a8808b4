"""How an upstream tree calls a name: the argument shapes of its call sites.

An override is called by upstream code, not by the plugin: whether it still fits is decided by what the
target's callers pass (how many positional arguments, which keywords), compared with what the
override accepts. One pass over the tree's text finds the files that call any of the names; only those
files are parsed.
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from porter.upgrade.index import _PARALLEL_THRESHOLD, Signature, TreeIndex, _annotated, walk


@dataclass(frozen=True)
class CallShape:
    """One way a file calls a name: positional count and keyword names (its first site that calls it so)."""

    positional: int
    keywords: frozenset[str]
    path: str  # relative to the tree root
    line: int
    # what the call's receiver is, as far as the calling function says (receiver_class in drift.py types it):
    # "self" (`self.m(...)`), "self.<attr>", "ann:<annotation>" (a parameter or local annotated with a
    # class), "name:<name>" (a name the function neither takes nor binds: module level), "expr:<text>" (another
    # expression, untyped), "" (unknown), "plain" (a call of a plain name, `f(...)`: no receiver)
    receiver: str = ""
    star: bool = False  # `*args` / `**kwargs`: how the arguments bind is unknown (only in CallSites.calls)

    def render(self) -> str:
        parts = [f"{self.positional} positional"] + [f"{k}=" for k in sorted(self.keywords)]
        return ", ".join(parts)


@dataclass(frozen=True)
class CallSites:
    shapes: dict[str, tuple[CallShape, ...]]  # name -> distinct (file, shape) pairs, in file order
    files: dict[str, int]  # name -> how many files call it (a name called everywhere is ambiguous)
    # name -> every call site (star calls too), each with its receiver: which calls can reach an override
    calls: dict[str, tuple[CallShape, ...]] = field(default_factory=dict)


def call_shapes(index: TreeIndex, methods: Iterable[str], constructors: Iterable[str] = ()) -> CallSites:
    """Shapes of `<expr>.m(...)` calls for each name in `methods` and of `C(...)` / `mod.C(...)` calls for
    each name in `constructors`. Calls with `*args` or `**kwargs` are left out of the shapes (their binding
    is unknown) and kept in `calls` (flagged `star`)."""
    return call_shapes_many([(index, methods, constructors)])[0]


def call_shapes_many(requests: list[tuple[TreeIndex, Iterable[str], Iterable[str]]]) -> list[CallSites]:
    """call_shapes() for each (index, methods, constructors), in one read of each tree's files: the
    files are searched and their matched functions parsed in the run's pool (every request's chunks
    are submitted before any answer is awaited), else here; the answers are the same either way
    (the same job function runs on the same files in the same order)."""
    return start_call_shapes_many(requests)()


def start_call_shapes_many(requests: list[tuple[TreeIndex, Iterable[str], Iterable[str]]]) -> Callable[[], list[CallSites]]:
    """call_shapes_many() in two steps: the jobs are submitted to the run's pool now (computed here
    without one); the returned function collects the answers. Each request's answer depends only on
    its own names and tree (a file's text is searched per request), not on the other requests of the
    batch, so a caller can start the searches it will likely ask for early and check later that it
    asks for the same names."""
    queries: dict[int, tuple[TreeIndex, list[tuple[bytes, tuple[str, ...], tuple[str, ...]]]]] = {}
    slots: list[tuple[int, int] | None] = []  # per request: (index id, position among its queries)
    for index, methods, constructors in requests:
        methods, constructors = set(methods), set(constructors)
        if not methods and not constructors:
            slots.append(None)
            continue
        pattern = _call_pattern(methods - constructors, constructors)
        own = queries.setdefault(id(index), (index, []))[1]
        slots.append((id(index), len(own)))
        own.append((pattern.pattern, tuple(sorted(methods)), tuple(sorted(constructors))))
    pending = [(index, todo, _start_calls(index, todo)) for index, todo in queries.values()]

    def collect() -> list[CallSites]:
        answers: dict[tuple[int, int], CallSites] = {}
        for index, todo, chunks in pending:
            files = [path for _, path in index._module_files()]
            per_query: list[list[tuple[int, list[Call] | None]]] = [[] for _ in todo]
            offset = 0
            for size, chunk in chunks:
                found = chunk.result() if hasattr(chunk, "result") else chunk
                for position, hits in enumerate(found):
                    per_query[position].extend((offset + i, calls) for i, calls in hits)
                offset += size
            for position, hits in enumerate(per_query):
                answers[(id(index), position)] = _sites(index, [(files[i], calls) for i, calls in hits])
        return [answers[slot] if slot is not None else CallSites({}, {}) for slot in slots]

    return collect


def _start_calls(index: TreeIndex, todo: list) -> list[tuple[int, object]]:
    """(chunk size, future or answer) per chunk of the tree's module files, in file order."""
    paths = [str(path) for _, path in index._module_files()]
    if index.pool is None or len(paths) < 4 * _PARALLEL_THRESHOLD:
        return [(len(paths), _calls_each(todo, paths))]
    size = max(64, len(paths) // 8)
    return [(len(paths[i: i + size]), index.pool.submit(_calls_each, todo, paths[i: i + size]))
            for i in range(0, len(paths), size)]


def _calls_each(queries: list[tuple[bytes, tuple[str, ...], tuple[str, ...]]], paths: list[str]) -> list[list[tuple[int, list[Call] | None]]]:
    """Per query (call pattern, methods, constructors): (position in `paths`, the file's calls or None
    when it does not parse) for each file whose text the pattern matches (a job for a worker: one
    read of each file for all queries, only compact tuples go back)."""
    compiled = [(re.compile(pattern), set(methods), set(constructors)) for pattern, methods, constructors in queries]
    out: list[list[tuple[int, list[Call] | None]]] = [[] for _ in compiled]
    for i, path in enumerate(paths):
        try:
            with open(path, "rb") as fh:
                text = fh.read()
        except OSError:
            continue
        for hits, (pattern, methods, constructors) in zip(out, compiled):
            if pattern.search(text):
                hits.append((i, _file_calls(text, pattern, methods, constructors)))
    return out


def _sites(index: TreeIndex, matched: list[tuple[Path, list[Call] | None]]) -> CallSites:
    """CallSites from the calls of each matched file (in file order; None: the file does not parse)."""
    shapes: dict[str, dict[tuple[str, int, frozenset[str]], CallShape]] = {}
    every: dict[str, list[CallShape]] = {}
    files: dict[str, int] = {}
    for path, calls in matched:
        if calls is None:
            continue
        try:
            rel = str(path.relative_to(index.root))
        except ValueError:
            rel = str(path)
        called: set[str] = set()
        for line, name, positional, keywords, receiver in sorted(calls, key=lambda c: c[0]):  # first site in file order
            star = positional < 0
            every.setdefault(name, []).append(CallShape(max(positional, 0), keywords, rel, line, receiver, star))
            if star:
                continue
            called.add(name)
            key = (rel, positional, keywords)
            shapes.setdefault(name, {}).setdefault(key, CallShape(positional, keywords, rel, line, receiver))
        for name in called:  # files that call it (definitions and mentions do not count)
            files[name] = files.get(name, 0) + 1
    return CallSites({n: tuple(s.values()) for n, s in shapes.items()}, files, {n: tuple(c) for n, c in every.items()})


# line, name called, positional count (-1: a call with *args / **kwargs), keyword names, receiver (CallShape)
Call = tuple[int, str, int, frozenset[str], str]


def _file_calls(text: bytes, pattern: re.Pattern[bytes], methods: set[str], constructors: set[str]) -> list[Call] | None:
    """The calls of one file's text to the names (None: it does not parse). Only the functions that hold
    a matched line are parsed (a large module is mostly other code); a match outside any function, or a
    function that does not parse on its own, parses the whole file instead."""
    if text.count(b"\r") != text.count(b"\r\n"):  # the parser also ends lines at a lone CR: so do we
        text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    lines = _match_lines(pattern, text)
    source = text.split(b"\n")
    segments = _function_segments(source, lines)
    if segments is not None:
        calls: list[Call] = []
        for first, last, indent in segments:
            piece = b"\n".join(_dedent(line, indent) for line in source[first - 1:last])
            try:
                tree = ast.parse(piece)
            except (SyntaxError, ValueError):
                break
            inner = [line - first + 1 for line in lines if first <= line <= last]
            calls.extend((line + first - 1, *rest) for line, *rest in _calls_in(tree, inner, methods, constructors))
        else:
            return list(dict.fromkeys(calls))  # nested functions are parsed with their outer one too
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    return _calls_in(tree, lines, methods, constructors)


def _calls_in(tree: ast.AST, lines: list[int], methods: set[str], constructors: set[str]) -> list[Call]:
    out: list[Call] = []
    functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []  # breadth first: an inner one after its outer one
    names: dict[int, tuple[dict[str, ast.expr | None], dict[str, ast.expr], set[str]]] = {}  # per function (_bindings)
    for node in _nodes_on_lines(tree, lines):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(node)
            continue
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and (func.attr in methods or func.attr in constructors):
            name = func.attr
        elif isinstance(func, ast.Name) and func.id in constructors:
            name = func.id
        else:
            continue
        star = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
        receiver = "plain"  # `C(...)`, `f(...)`: no receiver
        if isinstance(func, ast.Attribute):
            around = [f for f in functions if f.lineno <= node.lineno <= (f.end_lineno or f.lineno)]
            receiver = _receiver(func.value, around, names)
        out.append((node.lineno, name, -1 if star else len(node.args),
                    frozenset(k.arg for k in node.keywords if k.arg), receiver))
    return out


def _bindings(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[dict[str, ast.expr | None], dict[str, ast.expr], set[str]]:
    """(parameters -> annotation or None, locals -> the annotation of their first `x: Cls = ...` in
    ast.walk's order, every name the function's nodes store) of one function: one walk of it (index.walk:
    ast.walk's order without contexts and operators), which
    _receiver() reads for each call site inside it instead of walking the function per site."""
    params: dict[str, ast.expr | None] = {
        a.arg: a.annotation for a in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]}
    for star in (function.args.vararg, function.args.kwarg):
        if star is not None:
            params[star.arg] = None
    annotated: dict[str, ast.expr] = {}
    stored: set[str] = set()
    for node in walk(function):  # ast.walk's order: a local annotated (`x: Cls = ...`) or bound some other way
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            annotated.setdefault(node.target.id, node.annotation)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stored.add(node.id)
    return params, annotated, stored


def _receiver(value: ast.expr, functions: list[ast.FunctionDef | ast.AsyncFunctionDef],
              memo: dict[int, tuple[dict[str, ast.expr | None], dict[str, ast.expr], set[str]]] | None = None) -> str:
    """CallShape.receiver of a call `value.m(...)` made inside `functions` (outermost first; empty: at
    module or class level). A name is looked up from the innermost function out: the first that takes
    or binds it decides; `self` bound by none (a closure parsed on its own) is the method's. `memo`:
    each function's _bindings() by id, kept by the caller while the syntax tree lives."""
    head = value.value if isinstance(value, ast.Attribute) else value
    if not isinstance(head, ast.Name) or (head is not value and head.id != "self"):
        return f"expr:{ast.unparse(value)}"[:200]  # untyped; the text still tells one receiver from another
    for function in reversed(functions):
        known = memo.get(id(function)) if memo is not None else None
        if known is None:
            known = _bindings(function)
            if memo is not None:
                memo[id(function)] = known
        params, annotated, stored = known
        annotation = params.get(head.id) or annotated.get(head.id)
        bound = head.id in params or head.id in annotated or head.id in stored
        if not bound:
            continue
        positional = [*function.args.posonlyargs, *function.args.args]
        if head.id == "self" and positional and positional[0].arg == "self":
            return "self" if head is value else f"self.{value.attr}"  # type: ignore[attr-defined]
        if head is not value:
            return ""
        expr = _annotated(annotation) if annotation is not None else None
        return f"ann:{ast.unparse(expr)}" if expr is not None else ""
    if head.id == "self":
        return "self" if head is value else f"self.{value.attr}"  # type: ignore[attr-defined]
    return f"name:{head.id}" if head is value else ""


_DEF = re.compile(rb"([ \t]*)(?:async[ \t]+)?def[ \t]")


def _indent(line: bytes) -> int:
    return len(line) - len(line.lstrip(b" \t"))


def _function_segments(source: list[bytes], lines: list[int]) -> list[tuple[int, int, int]] | None:
    """(first line, last line, indent) of the innermost `def` around each matched line, or None when a
    line lies outside every function (module or class level: the caller parses the whole file). The
    def's end is the next code line indented no deeper than the `def` (closing brackets of a wrapped
    signature excepted); a wrong guess (a string or a bracket continued at a lower indent) fails to
    parse and sends the caller to the whole file."""
    segments: dict[tuple[int, int, int], None] = {}
    for line in lines:
        own = _indent(source[line - 1])
        for first in range(line, 0, -1):
            match = _DEF.match(source[first - 1])
            if match and (len(match.group(1)) < own or first == line):
                break
        else:
            return None
        indent = len(match.group(1))
        last = first
        for last in range(first + 1, len(source) + 1):
            code = source[last - 1].strip()
            if code and not code.startswith((b"#", b")", b"]", b"}")) and _indent(source[last - 1]) <= indent:
                last -= 1
                break
        else:
            last = len(source)
        if line > last:
            return None
        segments[(first, last, indent)] = None
    return list(segments)


def _dedent(line: bytes, indent: int) -> bytes:
    return line[min(indent, _indent(line)):]


def _match_lines(pattern: re.Pattern[bytes], text: bytes) -> list[int]:
    """The (1-based, sorted) lines where `pattern` matches in `text`."""
    lines, line, at = [], 1, 0
    for m in pattern.finditer(text):
        line += text.count(b"\n", at, m.start())
        at = m.start()
        lines.append(line)
    return lines


def _nodes_on_lines(tree: ast.AST, lines: list[int]):
    """The nodes of `tree` whose source span holds one of `lines`, in ast.walk's breadth-first order
    (walk() restricted to them): a call's span holds the line its `.m(` text is on, so only the
    paths down to the matched lines are visited instead of every node of a large module. A node
    without a position (arguments, comprehension, ...) is entered; a definition's span starts at
    its first decorator."""
    todo = deque([tree])
    pop, push = todo.popleft, todo.append
    while todo:
        node = pop()
        for child in ast.iter_child_nodes(node):
            lo, hi = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if lo is not None and hi is not None:
                decorators = getattr(child, "decorator_list", None)
                if decorators:
                    lo = min(lo, decorators[0].lineno)
                i = bisect_left(lines, lo)
                if i == len(lines) or lines[i] > hi:
                    continue
            push(child)
        yield node


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


def fits_base_calls(override: Signature, base: Signature) -> bool:
    """Whether some call written for `base` binds to `override` (both bound): each split of the base's
    parameters into leading positionals and keywords, passing all of the rest or only the required ones.
    False means no caller of the base could reach the override: where the plugin ran, upstream did not
    call it through the base (the plugin calls its own method with its own arguments)."""
    if override.has_varargs and override.has_varkw:
        return True
    slots = [p for p in base.params if p.kind in ("posonly", "pos")]
    kwonly = [p for p in base.params if p.kind == "kwonly"]
    first = sum(p.kind == "posonly" for p in slots)  # positional-only parameters cannot be passed by keyword
    for i in range(first, len(slots) + 1):
        rest = slots[i:] + kwonly
        for keywords in ({p.name for p in rest}, {p.name for p in rest if p.required}):
            if binds(base, i, keywords) and binds(override, i, keywords):
                return True
    return False


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
