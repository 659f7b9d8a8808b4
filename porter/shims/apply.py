"""Perform a ShimGroup on a fork tree (a porter worktree, never the user's checkout).

Plugin code is edited with libcst so formatting and comments survive: import lines are split
when they mix moved and unmoved names, and class members are appended to the class body.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from libcst.helpers import get_full_name_for_node

from porter.errors import InputError
from porter.fsutil import atomic_write_text
from porter.shims.model import ImportMove, MemberAdd, ParamAdd, ShimGroup


@dataclass(frozen=True)
class AppliedGroup:
    group: ShimGroup
    changed: tuple[str, ...]  # fork paths written, sorted
    rewritten_imports: int  # import statements rewritten
    missed_moves: tuple[ImportMove, ...]  # sites that were not a plain `from X import name` line


class _ImportRewriter(cst.CSTTransformer):
    def __init__(self, moves: dict[tuple[str, str], str]):
        self.moves = moves
        self.modules = {module for module, _ in moves}
        # The same upstream name imported through another path of the same package (a re-export).
        self.by_name = {name: (module.split(".")[0], module, shim) for (module, name), shim in moves.items()}
        self.done: set[tuple[str, str]] = set()
        self.count = 0

    def _shim_for(self, module: str, name: str) -> tuple[str, str] | None:
        """(shim module, the move's module) for `from module import name`, or None."""
        if (module, name) in self.moves:
            return self.moves[(module, name)], module
        hit = self.by_name.get(name)
        if hit and module.split(".")[0] == hit[0]:
            return hit[2], hit[1]
        return None

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine):
        if len(updated.body) != 1 or not isinstance(updated.body[0], cst.ImportFrom):
            return updated
        node = updated.body[0]
        if node.relative or node.module is None:
            return updated
        module = get_full_name_for_node(node.module) or ""
        if module not in self.modules and module.split(".")[0] not in {v[0] for v in self.by_name.values()}:
            return updated
        if isinstance(node.names, cst.ImportStar):
            # `from m import *` still brings the unmoved names; the moved ones come from the shims.
            shims: dict[str, list[str]] = defaultdict(list)
            for (mod, name), shim in sorted(self.moves.items()):
                if mod == module:
                    shims[shim].append(name)
                    self.done.add((mod, name))
            extra = [cst.parse_statement(f"from {shim} import {', '.join(names)}\n") for shim, names in shims.items()]
            self.count += 1
            return cst.FlattenSentinel([updated, *extra])
        kept: list[cst.ImportAlias] = []
        moved: dict[str, list[str]] = defaultdict(list)
        for alias in node.names:
            name = get_full_name_for_node(alias.name) or ""
            hit = self._shim_for(module, name)
            if hit is None:
                kept.append(alias)
                continue
            shim, move_module = hit
            asname = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
            moved[shim].append(f"{name} as {asname}" if asname and asname != name else name)
            self.done.add((move_module, name))
        if not moved:
            return updated
        self.count += 1
        new = [cst.parse_statement(_import_line(shim, names)) for shim, names in moved.items()]
        if kept:
            kept[-1] = kept[-1].with_changes(comma=node.names[-1].comma)
            first = updated.with_changes(body=[node.with_changes(names=kept)])
            return cst.FlattenSentinel([first, *new])
        # Every name moved: the shim import takes the original line's comments.
        new[0] = new[0].with_changes(leading_lines=updated.leading_lines, trailing_whitespace=updated.trailing_whitespace)
        return cst.FlattenSentinel(new)


def _import_line(module: str, names: list[str], limit: int = 79) -> str:
    """`from module import a, b`, wrapped in parentheses one name a line when longer than `limit`."""
    line = f"from {module} import {', '.join(names)}\n"
    if len(line) <= limit + 1 or len(names) < 2:
        return line
    return f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")\n"


def rewrite_imports(source: str, moves: dict[tuple[str, str], str]) -> tuple[str, int, set[tuple[str, str]]]:
    """Rewrite `from M import name` for each (M, name) in `moves` to import from the shim module.

    Returns the new source, the number of statements rewritten and the (M, name) pairs done.
    """
    module = cst.parse_module(source)
    rewriter = _ImportRewriter(moves)
    return module.visit(rewriter).code, rewriter.count, rewriter.done


class _MemberAdder(cst.CSTTransformer):
    def __init__(self, adds: list[MemberAdd]):
        self.adds = adds
        self.applied: set[tuple[str, str]] = set()

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef):
        # First class of that name wins; plugin class names are unique per file in practice.
        wanted = [a for a in self.adds if a.class_name == updated.name.value and (a.class_name, a.member) not in self.applied]
        if not wanted:
            return updated
        body = updated.body
        if not isinstance(body, cst.IndentedBlock):  # `class X: pass` on one line
            body = cst.IndentedBlock(body=[cst.SimpleStatementLine(body=list(body.body))])
        existing = _member_names(body)
        statements = list(body.body)
        for add in wanted:
            self.applied.add((add.class_name, add.member))
            if add.member in existing:
                continue
            stmt = cst.parse_statement(add.code)
            stmt = stmt.with_changes(leading_lines=[cst.EmptyLine(indent=False), *stmt.leading_lines])
            statements.append(stmt)
        return updated.with_changes(body=body.with_changes(body=statements))


def _member_names(body: cst.IndentedBlock) -> set[str]:
    names: set[str] = set()
    for stmt in body.body:
        if isinstance(stmt, cst.FunctionDef):
            names.add(stmt.name.value)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    names.update(t.target.value for t in small.targets if isinstance(t.target, cst.Name))
                elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    names.add(small.target.value)
    return names


class _ParamAdder(cst.CSTTransformer):
    def __init__(self, adds: list[ParamAdd]):
        self.adds = {(a.class_name, a.method): a for a in adds}
        self.classes: list[str] = []
        self.applied: set[tuple[str, str]] = set()

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.classes.append(node.name.value)
        return True

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef):
        self.classes.pop()
        return updated

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef):
        if not self.classes:
            return updated
        add = self.adds.get((self.classes[-1], updated.name.value))
        if add is None or (add.class_name, add.method) in self.applied:
            return updated
        self.applied.add((add.class_name, add.method))
        params = updated.params
        present = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
        positional, keyword = list(params.params), list(params.kwonly_params)
        originals = len(positional)
        for name, default, kind in add.params:
            if name in present:
                continue
            param = cst.Param(cst.Name(name), default=cst.parse_expression(default), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
            if kind == "keyword_only" or not isinstance(params.star_arg, cst.MaybeSentinel):
                keyword.append(param)
            else:
                positional.append(param)
        # One with_changes: libcst validates each step, and a bare `*` without keyword-only
        # parameters after it is invalid on its own.
        star = cst.ParamStar() if keyword and isinstance(params.star_arg, cst.MaybeSentinel) else params.star_arg
        new_params = params.with_changes(params=_commas(positional, originals), star_arg=star,
                                         kwonly_params=_commas(keyword, len(params.kwonly_params)))
        comment = cst.EmptyLine(comment=cst.Comment(f"# {add.comment}")) if add.comment else None
        leading = [*updated.leading_lines, comment] if comment else list(updated.leading_lines)
        body = updated.body
        if add.body_prefix and isinstance(body, cst.IndentedBlock):
            prefix = list(cst.parse_module(add.body_prefix).body)
            statements = list(body.body)
            at = 1 if statements and _is_docstring(statements[0]) else 0
            body = body.with_changes(body=[*statements[:at], *prefix, *statements[at:]])
        return updated.with_changes(params=new_params, leading_lines=leading, body=body)


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.SimpleString))


def _commas(params: list[cst.Param], originals: int) -> list[cst.Param]:
    """Separate appended parameters like the existing ones: a one-per-line list with a trailing
    comma stays one-per-line, comments stay on the lines they were on."""
    if len(params) == originals:
        return params
    last_comma = params[originals - 1].comma if originals else cst.MaybeSentinel.DEFAULT
    multiline = (originals >= 2 and isinstance(last_comma, cst.Comma)
                 and isinstance(last_comma.whitespace_after, cst.ParenthesizedWhitespace)
                 and isinstance(params[originals - 2].comma, cst.Comma)
                 and isinstance(params[originals - 2].comma.whitespace_after, cst.ParenthesizedWhitespace))
    if not multiline:
        inner = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        return [p.with_changes(comma=inner) if originals - 1 <= i < len(params) - 1 else p for i, p in enumerate(params)]
    inner_ws = params[originals - 2].comma.whitespace_after
    param_indent = (inner_ws.indent, inner_ws.last_line)
    closing_indent = (last_comma.whitespace_after.indent, last_comma.whitespace_after.last_line)

    def line_break(indent: tuple[bool, cst.SimpleWhitespace], keep: cst.ParenthesizedWhitespace | None = None) -> cst.Comma:
        first = keep.first_line if keep is not None else cst.TrailingWhitespace()
        return cst.Comma(whitespace_after=cst.ParenthesizedWhitespace(first_line=first, indent=indent[0], last_line=indent[1]))

    out = list(params[:originals - 1])
    out.append(params[originals - 1].with_changes(comma=line_break(param_indent, last_comma.whitespace_after)))
    added = params[originals:]
    for index, param in enumerate(added):
        out.append(param.with_changes(comma=line_break(closing_indent if index == len(added) - 1 else param_indent)))
    return out


def add_params(source: str, adds: list[ParamAdd]) -> tuple[str, set[tuple[str, str]]]:
    module = cst.parse_module(source)
    adder = _ParamAdder(adds)
    return module.visit(adder).code, adder.applied


def add_members(source: str, adds: list[MemberAdd]) -> tuple[str, set[tuple[str, str]]]:
    module = cst.parse_module(source)
    adder = _MemberAdder(adds)
    return module.visit(adder).code, adder.applied


def apply_group(root: Path, group: ShimGroup) -> AppliedGroup:
    """Write the group's files and edit the plugin under `root`. Raises InputError on conflicts."""
    changed: set[str] = set()
    for new_file in group.files:
        target = root / new_file.path
        if target.exists() and target.read_text(encoding="utf-8", errors="replace") != new_file.content:
            raise InputError(
                f"{new_file.path} already exists in the fork with other content",
                hint="porter never overwrites a file it did not plan; rename or remove it on the baseline",
            )
        changed.update(_ensure_packages(root, new_file.path))
        atomic_write_text(target, new_file.content)
        changed.add(new_file.path)

    by_file: dict[str, dict[tuple[str, str], str]] = defaultdict(dict)
    for move in group.import_moves:
        by_file[move.path][(move.module, move.name)] = move.shim_module
    rewritten = 0
    missed: list[ImportMove] = []
    for path, moves in sorted(by_file.items()):
        text = _read(root, path)
        try:
            new_text, count, done = rewrite_imports(text, moves)
        except cst.ParserSyntaxError as exc:
            raise InputError(f"{path}: cannot parse for rewriting: {exc}") from exc
        missed.extend(m for m in group.import_moves if m.path == path and (m.module, m.name) not in done)
        rewritten += count
        if new_text != text:
            atomic_write_text(root / path, new_text)
            changed.add(path)

    _edit_each_file(
        root, group.member_adds, add_members, lambda a: (a.class_name, a.member), changed,
        lambda path, a: InputError(f"{path}: class {a.class_name} not found for member {a.member}",
                                   hint="the drift record points at a class that is not in this file"),
    )
    _edit_each_file(
        root, group.param_adds, add_params, lambda a: (a.class_name, a.method), changed,
        lambda path, a: InputError(f"{path}: method {a.class_name}.{a.method} not found",
                                   hint="the drift record points at an override that is not in this file"),
    )
    return AppliedGroup(group, tuple(sorted(changed)), rewritten, tuple(missed))


def _edit_each_file(root: Path, edits, apply_edits, key_of, changed: set[str], not_found) -> None:
    """Group `edits` by plugin file, apply them with `apply_edits(text, edits) -> (text, applied keys)`,
    refuse when one found no target (`not_found(path, edit)`), and write only files that changed."""
    by_file: dict[str, list] = defaultdict(list)
    for edit in edits:
        by_file[edit.path].append(edit)
    for path, file_edits in sorted(by_file.items()):
        text = _read(root, path)
        new_text, applied = apply_edits(text, file_edits)
        lost = [e for e in file_edits if key_of(e) not in applied]
        if lost:
            raise not_found(path, lost[0])
        if new_text != text:
            atomic_write_text(root / path, new_text)
            changed.add(path)


def _read(root: Path, path: str) -> str:
    try:  # newline="": a CRLF file stays CRLF (universal newlines would rewrite every line of it)
        with open(root / path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read plugin file: {exc}") from exc


def _ensure_packages(root: Path, path: str) -> list[str]:
    """Create missing `__init__.py` files on the way to a new shim inside the plugin package
    (not for test directories: pytest finds those by path)."""
    parts = Path(path).parts[:-1]
    (root.joinpath(*parts)).mkdir(parents=True, exist_ok=True)
    if not parts or parts[0] in {"tests", "test"} or not (root / parts[0] / "__init__.py").exists():
        return []
    created = []
    for depth in range(2, len(parts) + 1):
        init = root.joinpath(*parts[:depth], "__init__.py")
        if not init.exists():
            atomic_write_text(init, '"""Compatibility shims (see PR_MATERIAL.md on the porter branch that added them)."""\n')
            created.append(Path(*parts[:depth], "__init__.py").as_posix())
    return created
