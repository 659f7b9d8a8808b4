"""Drop an old release lane from a plugin's source: collapse dead version guards (keep the branch
both lanes take), retarget the ones whose dead branch is the one that still resolves, and remove
imports that only the deleted branches used. A pure transform with libcst (formatting and
comments of everything kept survive): source text in, new source text and a record of edits out.

    result = drop_source(source, path, {line: GuardVerdict, ...}, version_functions={"vllm_version_is"})
    result.source, result.edits
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from porter.upgrade.lanes import GuardVerdict
from porter.upgrade.predicates import helper_renames, predicate_functions


@dataclass(frozen=True)
class DropEdit:
    """One change the drop made: a guard collapsed or retargeted, or an import removed."""

    path: str
    line: int
    end_line: int
    action: str  # collapse | retarget | remove_import | remove_unreachable
    guard: str = ""  # the test (guards) or the imported name (imports)
    kept: str = ""  # body | else (collapse of a guard) | predicate (a version predicate removed) | value (answer written)
    retarget_to: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in ("", None)}


@dataclass(frozen=True)
class DropResult:
    path: str
    source: str
    edits: tuple[DropEdit, ...]

    @property
    def changed(self) -> bool:
        return bool(self.edits)


class _Retarget(cst.CSTTransformer):
    """Rewrites the version literal of `vllm_version_is("OLD")` calls inside one test."""

    def __init__(self, functions: frozenset[str], version: str):
        self.functions = functions
        self.version = version

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        func = updated.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        if name in self.functions and updated.args and isinstance(updated.args[0].value, cst.SimpleString):
            literal = updated.args[0].value
            quote = literal.quote
            arg = updated.args[0].with_changes(value=literal.with_changes(value=f"{quote}{self.version}{quote}"))
            return updated.with_changes(args=[arg, *updated.args[1:]])
        return updated

    def leave_BooleanOperation(self, original: cst.BooleanOperation, updated: cst.BooleanOperation) -> cst.BaseExpression:
        # `is("0.10.1.1") or is("0.10.1")` retargeted names the new release twice: once is enough.
        if updated.left.deep_equals(updated.right):
            return updated.left.with_changes(lpar=updated.lpar, rpar=updated.rpar) if updated.lpar else updated.left
        return updated


DEFAULT_LINE_LENGTH = 79  # PEP 8 (yapf's and flake8's default): a project without a formatter setting
BOM = "\ufeff"  # some plugin files start with a byte-order mark (vllm-ascend's mtp_proposer.py)

# Expressions that need no parentheses wherever the ternary they replace stood (on one line, or inside
# their own brackets: a line break elsewhere needs the parentheses).
_BRACKETED = (cst.Dict, cst.List, cst.Set)
_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.SimpleString, cst.Integer, cst.Float,
          cst.FormattedString, *_BRACKETED)


def _normal(node: cst.BaseExpression) -> str:
    """An expression's source as `ast.unparse` writes it (how guard verdicts name a version check)."""
    try:
        return ast.unparse(ast.parse(cst.Module([]).code_for_node(node.with_changes(lpar=[], rpar=[])).strip(), mode="eval"))
    except SyntaxError:
        return ""


def _without_checks(test: cst.BaseExpression, decided: Mapping[str, bool]) -> cst.BaseExpression | None:
    """The test with the decided version checks taken out of its `and`/`or`/`not` (`x and not
    is("OLD")` with that check True -> `x`); None when it would be decided as a whole."""

    def simplify(node: cst.BaseExpression) -> tuple[bool | None, cst.BaseExpression | None]:
        text = _normal(node)
        if text in decided:
            return decided[text], None
        if isinstance(node, cst.BooleanOperation):
            is_or = isinstance(node.operator, cst.Or)
            (lk, left), (rk, right) = simplify(node.left), simplify(node.right)
            if lk is is_or or rk is is_or:
                return is_or, None  # `x or True` / `x and False`
            if lk is not None and rk is not None:
                return not is_or, None
            kept = right if lk is not None else left if rk is not None else None
            if kept is None:
                return None, node.with_changes(left=left, right=right)
            if node.lpar and not kept.lpar and not isinstance(kept, _ATOMS):
                kept = kept.with_changes(lpar=node.lpar, rpar=node.rpar)  # `(a or b) and check` keeps its group
            return None, kept
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            known, inner = simplify(node.expression)
            if known is not None:
                return not known, None
            if not inner.lpar and isinstance(node.operator.whitespace_after, cst.SimpleWhitespace) and \
                    not node.operator.whitespace_after.value:  # `not(a or b)` -> `not a`, never `nota`
                return None, node.with_changes(expression=inner, operator=cst.Not(whitespace_after=cst.SimpleWhitespace(" ")))
            return None, node.with_changes(expression=inner)
        return None, node

    known, rest = simplify(test)
    return None if known is not None else rest


def _indent_width(block: cst.BaseSuite) -> int:
    """Columns one level of the block's indentation takes (what a collapse removes); 0: not indented."""
    if not isinstance(block, cst.IndentedBlock):
        return 0
    return len(block.indent) if block.indent is not None else 4  # None: the module's default indentation


class _DedentDocstrings(cst.CSTTransformer):
    """The continuation lines of the docstrings in code a collapse moved one level left move with it
    (a docstring's indentation is not part of its text; other strings are left as they are)."""

    def __init__(self, width: int):
        self.width = width

    def _fixed(self, node: cst.CSTNode, body: cst.BaseSuite) -> cst.CSTNode:
        if not isinstance(body, cst.IndentedBlock) or not body.body:
            return node
        first = body.body[0]
        if not (isinstance(first, cst.SimpleStatementLine) and len(first.body) == 1 and isinstance(first.body[0], cst.Expr)
                and isinstance(first.body[0].value, cst.SimpleString)):
            return node
        string = first.body[0].value
        lines = string.value.split("\n")
        pad = " " * self.width
        if len(lines) < 2 or string.quote not in ('"""', "'''") or not all(
                line.startswith(pad) or not line.strip() for line in lines[1:]):
            return node
        text = "\n".join([lines[0], *(line[self.width:] if line.strip() else line for line in lines[1:])])
        new_first = first.with_changes(body=[first.body[0].with_changes(value=string.with_changes(value=text))])
        return node.with_changes(body=body.with_changes(body=[new_first, *body.body[1:]]))

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        return self._fixed(updated, updated.body)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        return self._fixed(updated, updated.body)


def _statements(block: cst.BaseSuite) -> list[cst.BaseStatement]:
    if isinstance(block, cst.IndentedBlock):
        return list(block.body)
    return [cst.SimpleStatementLine(body=list(block.body))]  # `if x: a; b` on one line


class _Folds:
    """The `True`/`False` a drop writes in place of a version test, and the `not`/`and`/`or` around it
    folded away. `answers` holds the names written by id (shared by the transformers of one file); it
    holds the names themselves too, so that no id is reused by a node made after one was discarded."""

    answers: dict[int, cst.Name]

    def _answer(self, value: bool, node: cst.BaseExpression) -> cst.Name:
        answer = cst.Name("True" if value else "False", lpar=node.lpar, rpar=node.rpar)
        self.answers[id(answer)] = answer
        return answer

    def leave_UnaryOperation(self, original: cst.UnaryOperation, updated: cst.UnaryOperation) -> cst.BaseExpression:
        if isinstance(updated.operator, cst.Not) and id(updated.expression) in self.answers:
            return self._answer(updated.expression.value != "True", updated)  # `not False` -> `True`
        return updated

    def leave_BooleanOperation(self, original: cst.BooleanOperation,
                               updated: cst.BooleanOperation) -> cst.BaseExpression:
        """`and`/`or` whose left operand the drop answered: `True or x` is `True`, `False and x` is `False`,
        `False or x` and `True and x` are `x`. Only the left side: Python never evaluates what follows
        a short-circuit, so nothing with side effects goes, and `x or False` is not `x` as a value."""
        if id(updated.left) not in self.answers:
            return updated
        left = updated.left.value == "True"
        if left == isinstance(updated.operator, cst.Or):  # True or x, False and x: the answer itself
            return self._answer(left, updated.with_changes(lpar=[], rpar=[]))  # a name needs no brackets
        right = updated.right  # binds at least as tightly as the operation it replaces: its own brackets stay
        if id(right) in self.answers or not updated.lpar or right.lpar:
            return right
        return right.with_changes(lpar=updated.lpar, rpar=updated.rpar)

    def _truthy(self, test: cst.BaseExpression) -> cst.BaseExpression:
        """A test read only for its truth (`if`, `while`, `assert`, a conditional, a comprehension filter)
        without the answers that decide nothing in it: `x and True` and `x or False` are `x` there (not
        as values, which is why `_Folds` leaves them). Operands of `and`/`or`/`not` are read for their
        truth too, so the fold goes down through them."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self._truthy(test.expression)
            return test if inner is test.expression else test.with_changes(expression=inner)
        if not isinstance(test, cst.BooleanOperation):
            return test
        left, right = self._truthy(test.left), self._truthy(test.right)
        neutral = "True" if isinstance(test.operator, cst.And) else "False"
        if id(right) in self.answers and right.value == neutral:
            return _without_brackets(left, test)
        if left is test.left and right is test.right:
            return test
        return test.with_changes(left=left, right=right)

    def _with_truthy_test(self, node: cst.CSTNodeT) -> cst.CSTNodeT:
        """`node` (an `if`, `while`, `assert`, conditional or comprehension filter) with its test folded by
        `_truthy`; the node itself when nothing in its test decided nothing."""
        test = self._truthy(node.test)
        return node if test is node.test else node.with_changes(test=test)

    def _answered(self, node: cst.BaseExpression) -> bool | None:
        """The answer a drop wrote for this test, or None when it is not one."""
        return node.value == "True" if id(node) in self.answers else None


def _without_brackets(node: cst.BaseExpression, outer: cst.BaseExpression) -> cst.BaseExpression:
    """`node` in the place of `outer`: the outer brackets stay only where they still hold more than one line."""
    if outer.lpar and not node.lpar and "\n" in cst.Module([]).code_for_node(node):
        return node.with_changes(lpar=outer.lpar, rpar=outer.rpar)
    return node


class _AnswerChecks(_Folds, cst.CSTTransformer):
    """Writes the answers of the decided version checks of an undecided predicate's value
    (`legacy = vllm_version_is("OLD") or envs.X` -> `legacy = envs.X`) and folds what they leave."""

    def __init__(self, decided: Mapping[str, bool], answers: dict[int, cst.Name]):
        self.decided = decided
        self.answers = answers

    def _decided(self, node: cst.BaseExpression) -> cst.BaseExpression:
        text = _normal(node)
        return self._answer(self.decided[text], node.with_changes(lpar=[], rpar=[])) if text in self.decided else node

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        return self._decided(updated)

    def leave_UnaryOperation(self, original: cst.UnaryOperation, updated: cst.UnaryOperation) -> cst.BaseExpression:
        node = self._decided(updated)  # `not vllm_version_is("OLD")` is one check
        return node if node is not updated else super().leave_UnaryOperation(original, updated)


class _DropTransformer(_Folds, cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, path: str, decisions: Mapping[int, GuardVerdict], functions: frozenset[str],
                 line_length: int = 79, values: Mapping[tuple[int, str], GuardVerdict] | None = None):
        self.path = path
        self.values = values or {}  # (line, version named) -> verdict of a version test used as a value
        self.line_length = line_length
        self.decisions = decisions
        self.functions = functions
        self.edits: list[DropEdit] = []
        self.elifs: set[int] = set()  # ids of If nodes that are another If's `elif`
        self.keep_predicates: set[int] = set()  # predicate lines whose name is still read after the drop
        self.depth = 0  # indented blocks open around the node being left (0: module level)
        self.lifted: set[int] = set()  # ids of module-level imports a collapse left where its guard was
        self.partial: set[int] = set()  # ... of those whose branch goes on with other code
        self.terminal: set[int] = set()  # ids of kept statements that end their block (return/raise/...)
        self.positions: dict[int, tuple[int, int]] = {}  # id of a statement as left -> its original lines
        self.removed_top: list[tuple[int, int]] = []  # lines of the module-level statements the drop deleted
        self.answers: dict[int, cst.Name] = {}  # by id, the `True`/`False` names written in place of version tests
        self.filled: dict[int, cst.SimpleStatementLine] = {}  # by id, the `pass` lines written into emptied blocks

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        self.depth += 1
        return True

    def _decision(self, node: cst.CSTNode) -> tuple[GuardVerdict | None, int, int]:
        pos = self.get_metadata(PositionProvider, node)
        return self.decisions.get(pos.start.line), pos.start.line, pos.end.line

    def visit_If(self, node: cst.If) -> bool:
        if isinstance(node.orelse, cst.If):
            self.elifs.add(id(node.orelse))
        return True

    def leave_If(self, original: cst.If, updated: cst.If):
        decision, line, end = self._decision(original)
        orelse = updated.orelse
        if isinstance(orelse, cst.Else) and isinstance(orelse.body, cst.IndentedBlock) and \
                len(orelse.body.body) == 1 and id(orelse.body.body[0]) in self.filled:
            updated = updated.with_changes(orelse=None)  # `else:` with nothing of its own left: no `else: pass`
        updated = self._with_truthy_test(updated)
        answer = self._answered(updated.test)
        if answer is not None:  # `if True:` (a value test answered inside it): the branch it takes, dedented
            return self._keep(original, updated, "body" if answer else "orelse")
        if decision is None or decision.kind in ("assign", "value") or decision.verdict not in ("collapse", "retarget"):
            return updated
        guard = cst.Module([]).code_for_node(original.test)
        if decision.verdict == "retarget":
            if not decision.retarget_to:
                return updated
            test = updated.test.visit(_Retarget(self.functions, decision.retarget_to))
            if test.deep_equals(updated.test):
                return updated  # the test reads a predicate: its assignment is what gets retargeted
            self.edits.append(DropEdit(self.path, line, end, "retarget", guard, retarget_to=decision.retarget_to))
            return updated.with_changes(test=test)
        if decision.kept == "test":  # only the version checks inside the test go
            test = _without_checks(updated.test, dict(decision.decided))
            if test is None or test.deep_equals(updated.test):
                return updated
            self.edits.append(DropEdit(self.path, line, end, "collapse", guard, kept="test"))
            return updated.with_changes(test=test)
        self.edits.append(DropEdit(self.path, line, end, "collapse", guard, kept=decision.kept))
        return self._keep(original, updated, decision.kept)

    def _keep(self, original: cst.If, updated: cst.If, branch: str):
        """The statements of the branch (`body` or `orelse`) an `if` always takes, in its place."""
        is_elif = id(original) in self.elifs
        if branch == "body":
            if is_elif:
                return cst.Else(body=updated.body)  # `elif dead_true:` -> `else:`
            kept = _statements(updated.body)
            width = _indent_width(updated.body)
        else:
            orelse = updated.orelse
            if is_elif:
                return orelse if orelse is not None else cst.RemovalSentinel.REMOVE
            if orelse is None:
                return cst.RemovalSentinel.REMOVE
            if isinstance(orelse, cst.If):  # `if dead: ... elif x: ...` -> `if x: ...`
                return orelse.with_changes(leading_lines=updated.leading_lines)
            kept = _statements(orelse.body)
            width = _indent_width(orelse.body)
        if not kept:
            return cst.RemovalSentinel.REMOVE
        kept = [k.visit(_DedentDocstrings(width)) if width else k for k in kept]
        first = kept[0]
        if hasattr(first, "leading_lines"):
            # Comments above the `if` stay above the code that replaces it (except those about the version
            # split itself); blank lines as a formatter keeps them.
            kept[0] = _at_most_two_blank(first.with_changes(
                leading_lines=[*_without_version_notes(updated.leading_lines), *first.leading_lines]),
                2 if self.depth == 0 else 1)
        if self.depth == 0:  # the imports a module-level branch starts with may join the import header
            lead = [k for k in kept[:next((n for n, k in enumerate(kept) if _import_module(k) is None), len(kept))]]
            self.lifted.update(id(k) for k in lead)
            if len(lead) < len(kept):
                self.partial.update(id(k) for k in lead)  # the comments above the guard stay with the code
        if self.depth > 0 and _ends_flow(kept[-1]):
            self.terminal.add(id(kept[-1]))  # what follows the `if` in its block no longer runs
        return cst.FlattenSentinel(kept)

    def leave_IfExp(self, original: cst.IfExp, updated: cst.IfExp):
        decision, line, end = self._decision(original)
        updated = self._with_truthy_test(updated)
        answer = self._answered(updated.test)
        if answer is not None:  # `a if True else b` -> `a`
            return self._kept_expression(updated, updated.body if answer else updated.orelse)
        if decision is None or decision.kind in ("assign", "value"):
            return updated
        guard = cst.Module([]).code_for_node(original.test)
        if decision.verdict == "retarget" and decision.retarget_to:
            self.edits.append(DropEdit(self.path, line, end, "retarget", guard, retarget_to=decision.retarget_to))
            return updated.with_changes(test=updated.test.visit(_Retarget(self.functions, decision.retarget_to)))
        if decision.verdict == "collapse" and decision.kept == "test":
            test = _without_checks(updated.test, dict(decision.decided))
            if test is None or test.deep_equals(updated.test):
                return updated
            self.edits.append(DropEdit(self.path, line, end, "collapse", guard, kept="test"))
            return updated.with_changes(test=test)
        if decision.verdict == "collapse":
            self.edits.append(DropEdit(self.path, line, end, "collapse", guard, kept=decision.kept))
            return self._kept_expression(updated, updated.body if decision.kept == "body" else updated.orelse)
        return updated

    @staticmethod
    def _kept_expression(updated: cst.IfExp, kept: cst.BaseExpression) -> cst.BaseExpression:
        """The operand of a conditional that always gets chosen, in the conditional's place."""
        if isinstance(kept, _ATOMS) and (isinstance(kept, _BRACKETED) or "\n" not in cst.Module([]).code_for_node(kept)):
            return kept  # `@(cache if old else deco)` -> `@deco`: parentheses around an atom say nothing
        return kept.with_changes(lpar=updated.lpar, rpar=updated.rpar) if updated.lpar else kept

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """A version test used as a value (`fn(legacy=vllm_version_is("0.10.0"))`): its answer at the
        target takes its place, or its version is retargeted."""
        updated = self._without_empty_unpacking(original, updated)
        pos = self.get_metadata(PositionProvider, original)
        line, end = pos.start.line, pos.end.line
        version = self._helper_version(original)
        decision = self.values.get((line, version)) if version is not None else None
        if decision is None:
            return updated
        guard = cst.Module([]).code_for_node(original)
        if decision.verdict == "retarget" and decision.retarget_to:
            self.edits.append(DropEdit(self.path, line, end, "retarget", guard, retarget_to=decision.retarget_to))
            return updated.visit(_Retarget(self.functions, decision.retarget_to))
        if decision.verdict != "collapse" or decision.value_at_target is None:
            return updated
        self.edits.append(DropEdit(self.path, line, end, "collapse", guard, kept="value"))
        return self._answer(decision.value_at_target, updated)

    @staticmethod
    def _without_empty_unpacking(original: cst.Call, updated: cst.Call) -> cst.Call:
        """`f(a, **{})` -> `f(a)` where the drop left the `{}` (`**({...} if old else {})`): unpacking
        nothing passes nothing. An empty unpacking that was in the source already stays."""
        if len(original.args) != len(updated.args):
            return updated
        args = list(updated.args)
        gone = [n for n, (was, arg) in enumerate(zip(original.args, args)) if _unpacks_nothing(arg)
                and not was.value.deep_equals(arg.value)]
        if not gone:
            return updated
        last, args = args[-1], [a for n, a in enumerate(args) if n not in gone]
        if args and len(updated.args) - 1 in gone:  # the last one went: the one now last ends as it did, not `f(a, )`
            kept = args[-1]
            comma = last.comma if isinstance(last.comma, cst.MaybeSentinel) or isinstance(kept.comma, cst.MaybeSentinel) \
                else _merged_comma(kept.comma, last.comma)
            args[-1] = kept.with_changes(comma=comma, whitespace_after_arg=last.whitespace_after_arg)
        return updated.with_changes(args=args)

    def _helper_version(self, call: cst.Call) -> str | None:
        """The version a version-helper call names (`vllm_version_is("0.10.0")` -> "0.10.0"), else None."""
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        if name not in self.functions or not call.args or not isinstance(call.args[0].value, cst.SimpleString):
            return None
        value = call.args[0].value.evaluated_value
        return value if isinstance(value, str) else None

    def leave_CompFor(self, original: cst.CompFor, updated: cst.CompFor) -> cst.CompFor:
        """A comprehension filter the drop answered `True` filters nothing: it goes."""
        ifs = [f for f in map(self._with_truthy_test, updated.ifs) if self._answered(f.test) is not True]
        return updated if len(ifs) == len(updated.ifs) and all(a is b for a, b in zip(ifs, updated.ifs)) \
            else updated.with_changes(ifs=ifs)

    def leave_While(self, original: cst.While, updated: cst.While):
        """`while False:` (its test answered) never runs its body: the loop goes, its `else:` stays."""
        updated = self._with_truthy_test(updated)
        if self._answered(updated.test) is not False:
            return updated
        if updated.orelse is None:
            return cst.RemovalSentinel.REMOVE
        kept = _statements(updated.orelse.body)
        width = _indent_width(updated.orelse.body)
        kept = [k.visit(_DedentDocstrings(width)) if width else k for k in kept]
        kept[0] = kept[0].with_changes(leading_lines=[*updated.leading_lines, *kept[0].leading_lines])
        return cst.FlattenSentinel(kept)

    def leave_Assert(self, original: cst.Assert, updated: cst.Assert):
        """`assert True` (its test answered) checks nothing: it goes; `assert x and True` is `assert x`."""
        updated = self._with_truthy_test(updated)
        return cst.RemovalSentinel.REMOVE if self._answered(updated.test) is True else updated

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine):
        """A version predicate (`is_legacy = vllm_version_is("0.10.0")`): dropped or retargeted, or (read as
        a value too) its answer at the target written in place of the test."""
        if not updated.body:  # its only statement went (`assert True`)
            return cst.RemovalSentinel.REMOVE
        if len(updated.body) != 1 or not isinstance(updated.body[0], cst.Assign):
            return updated
        decision, line, end = self._decision(original)
        if decision is None or decision.kind != "assign" or (decision.line in self.keep_predicates and decision.kept != "test"):
            return updated  # a predicate still read stays as it was, unless only its decided checks go
        assign = updated.body[0]
        guard = cst.Module([]).code_for_node(assign.value)
        if decision.verdict == "retarget" and decision.retarget_to:
            value = assign.value.visit(_Retarget(self.functions, decision.retarget_to))
            if value.deep_equals(assign.value):
                return updated
            self.edits.append(DropEdit(self.path, line, end, "retarget", guard, retarget_to=decision.retarget_to))
            return updated.with_changes(body=[assign.with_changes(value=value)])
        if decision.verdict == "collapse" and decision.kept == "test":  # only its decided checks go
            if decision.tested_only:  # read only as a guard test: `x and True` is `x` there
                value = _without_checks(assign.value, dict(decision.decided)) or assign.value
            else:  # read as a value too: the answers are written and folded only where that is exact
                value = assign.value.visit(_AnswerChecks(dict(decision.decided), self.answers))
            if value.deep_equals(assign.value):
                return updated
            self.edits.append(DropEdit(self.path, line, end, "collapse", guard, kept="test"))
            return updated.with_changes(body=[assign.with_changes(value=value)])
        if decision.verdict == "collapse" and decision.kept == "value":
            if decision.value_at_target is None:
                return updated
            self.edits.append(DropEdit(self.path, line, end, "collapse", guard, kept="value"))
            return updated.with_changes(body=[assign.with_changes(value=self._answer(decision.value_at_target, assign.value))])
        if decision.verdict == "collapse":
            self.edits.append(DropEdit(self.path, line, end, "collapse", guard, kept="predicate"))
            return cst.RemovalSentinel.REMOVE
        return updated

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        self.depth -= 1
        if not updated.body:  # every statement was a dead branch
            filler = cst.SimpleStatementLine(body=[cst.Pass()])
            self.filled[id(filler)] = filler  # an `else:` left with only this goes with it
            return updated.with_changes(body=[filler])
        end = next((i for i, stmt in enumerate(updated.body) if id(stmt) in self.terminal), None)
        if end is not None and end + 1 < len(updated.body):
            # The kept branch returned (or raised): the statements after the old `if` were the other lane's path.
            first, last = updated.body[end + 1], updated.body[-1]
            lines = [self.positions.get(id(first)), self.positions.get(id(last))]
            self.edits.append(DropEdit(self.path, lines[0][0] if lines[0] else 0, lines[1][1] if lines[1] else 0,
                                       "remove_unreachable", cst.Module([]).code_for_node(first).strip().split("\n")[0][:80]))
            return updated.with_changes(body=updated.body[:end + 1])
        return updated

    def on_leave(self, original_node: cst.CSTNode, updated_node):  # noqa: D102 - statement lines for the record above
        result = super().on_leave(original_node, updated_node)
        if isinstance(original_node, cst.BaseStatement):
            pos = self.get_metadata(PositionProvider, original_node, None)
            if pos is not None and isinstance(result, cst.BaseStatement):
                self.positions[id(result)] = (pos.start.line, pos.end.line)
            elif pos is not None and isinstance(result, cst.RemovalSentinel) and self.depth == 0:
                self.removed_top.append((pos.start.line, pos.end.line))
        return result

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        if self.removed_top:
            updated = _first_as_before(original, self._close_gaps(updated))
        if not self.lifted:
            return updated
        updated = _merge_lifted_imports(updated, self.lifted, self.path.split("/")[0], self.partial, self.line_length)
        return _drop_empty_isort_fences(updated, self.lifted)

    def _close_gaps(self, module: cst.Module) -> cst.Module:
        """Where a deleted module-level guard sat right after the imports, the imports and what follows
        are separated as isort and ruff separate them: one blank line, two before a class or function."""
        body = list(module.body)
        for i in range(1, len(body)):
            before, after = self.positions.get(id(body[i - 1])), self.positions.get(id(body[i]))
            if before is None or after is None or not _is_import_line(body[i - 1]):
                continue
            if not any(before[1] < lo and hi < after[0] for lo, hi in self.removed_top):
                continue
            lines = list(body[i].leading_lines)
            blank = next((n for n, line in enumerate(lines) if line.comment is not None), len(lines))  # blanks on top
            wanted = 2 if _is_definition(body[i]) else 1
            if blank > wanted:
                body[i] = body[i].with_changes(leading_lines=lines[blank - wanted:])
        return module.with_changes(body=body)


def _unpacks_nothing(arg: cst.Arg) -> bool:
    """`**{}`, `*()`, `*[]`."""
    value = arg.value
    if arg.star == "**":
        return isinstance(value, cst.Dict) and not value.elements
    return arg.star == "*" and isinstance(value, (cst.Tuple, cst.List)) and not value.elements


_FLOW_ENDS = (cst.Return, cst.Raise, cst.Continue, cst.Break)


_VERSION_NOTE = re.compile(r"version|compat|\bv?\d+\.\d+(?:\.\d+)*\b", re.IGNORECASE)


def _without_version_notes(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """The lines above a collapsed guard without the comment block right above it when that block
    talks about versions (`# Import specific patches for different versions`): once one lane is left
    it describes a split that is gone. Other comments, and blank lines, stay."""
    lines = list(lines)
    start = len(lines)
    while start > 0 and lines[start - 1].comment is not None:
        start -= 1
    block = lines[start:]
    if block and any(_VERSION_NOTE.search(line.comment.value) for line in block if line.comment is not None):
        return lines[:start] + [line for line in block if _isort_mark(line)]  # fences stay for the fence check
    return lines


def _ends_flow(stmt: cst.CSTNode) -> bool:
    """Does control never pass this statement (`return`, `raise`, `continue`, `break` as its last part)?"""
    return isinstance(stmt, cst.SimpleStatementLine) and bool(stmt.body) and isinstance(stmt.body[-1], _FLOW_ENDS)


def _import_module(stmt: cst.CSTNode) -> str | None:
    """`from a.b import c` or `import a.b` alone on its line -> "a.b" (absolute imports only)."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        node = stmt.body[0]
        if isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None:
            return cst.Module([]).code_for_node(node.module)
        if isinstance(node, cst.Import) and len(node.names) == 1:
            return cst.Module([]).code_for_node(node.names[0].name)
    return None


def _import_key(stmt: cst.CSTNode) -> tuple[int, str]:
    """isort's and ruff's order within a section: `import a` lines before `from a import b` lines, each by module."""
    plain = isinstance(stmt, cst.SimpleStatementLine) and bool(stmt.body) and isinstance(stmt.body[0], cst.Import)
    return (0 if plain else 1, (_import_module(stmt) or "").lower())


def _is_import_line(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and bool(stmt.body) and \
        all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


def _is_definition(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, (cst.FunctionDef, cst.ClassDef))  # decorators belong to the node


def _is_header(stmt: cst.CSTNode) -> bool:
    """Statements of a module's import header: imports, the docstring, `if TYPE_CHECKING:`, try-imports."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return all(isinstance(s, (cst.Import, cst.ImportFrom)) or (isinstance(s, cst.Expr) and isinstance(s.value, cst.SimpleString))
                   for s in stmt.body)
    if isinstance(stmt, cst.If):
        return cst.Module([]).code_for_node(stmt.test).rsplit(".", 1)[-1] == "TYPE_CHECKING"
    if isinstance(stmt, cst.Try):
        return all(isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)
                   for s in stmt.body.body)
    return False


def _imports_only(stmt: cst.CSTNode) -> bool:
    """A statement that only imports (`import a`, or an `if`/`try` whose every branch only imports):
    nothing the module defines, so no import placed after it can depend on it."""
    if isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        return all(isinstance(s, (cst.Import, cst.ImportFrom, cst.Pass)) for s in stmt.body)
    if isinstance(stmt, cst.IndentedBlock):
        return all(_imports_only(s) for s in stmt.body)
    if isinstance(stmt, (cst.If, cst.Else)):
        return _imports_only(stmt.body) and (getattr(stmt, "orelse", None) is None or _imports_only(stmt.orelse))
    if isinstance(stmt, cst.Try):
        return all(_imports_only(part.body) for part in (stmt, *stmt.handlers, *(x for x in (stmt.orelse, stmt.finalbody) if x)))
    return False


def _without_isort_marks(lines) -> list[cst.EmptyLine]:
    return [line for line in lines if not _isort_mark(line)]


def _mergeable(stmt: cst.CSTNode) -> bool:
    """`from m import a, b` alone on its line with no comment anywhere in it (its names can be combined)."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.ImportFrom)):
        return False
    node = stmt.body[0]
    return not isinstance(node.names, cst.ImportStar) and stmt.trailing_whitespace.comment is None and \
        "#" not in cst.Module([]).code_for_node(node)


def _isort_key(name: str) -> tuple[int, str]:
    """isort's and ruff's order of imported names (order-by-type): CONSTANTS, Classes, the rest."""
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return kind, name.lower() if kind == 2 else name


def _with_names(stmt: cst.SimpleStatementLine, extra: cst.SimpleStatementLine, line_length: int,
                module: cst.Module) -> cst.SimpleStatementLine:
    """`stmt` with the names of `extra` (same module) added, sorted and laid out as the statement was:
    one line when it fits, else the wrapped style it (or the module's other imports) uses."""
    node, other = stmt.body[0], extra.body[0]
    code = lambda n: cst.Module([]).code_for_node(n)  # noqa: E731
    aliases = {code(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip() for a in [*node.names, *other.names]}
    names = sorted(aliases, key=lambda a: _isort_key(a.split(" as ")[0]))
    head = f"from {code(node.module)} import "
    flat = head + ", ".join(names)
    if len(flat) <= line_length:
        return stmt.with_changes(body=[cst.parse_statement(flat + "\n").body[0]])
    text = code(node)
    wrapped_imports = (code(s) for s in module.body if _is_import_line(s) and "(" in code(s) and "\n" in code(s).strip())
    style = text if "(" in text else next(wrapped_imports, "(\n")
    if "(\n" in style:  # one name a line, trailing comma (black, ruff format)
        wrapped = head + "(\n" + "".join(f"    {n},\n" for n in names) + ")"
    else:  # isort's grid: names after the parenthesis, continuation lines under the first name
        pad = " " * (len(head) + 1)
        lines, line = [], head + "("
        for n in names:
            piece = n + ","
            if line.endswith("(") or len(line) + 1 + len(piece) <= line_length:
                line += piece if line.endswith("(") else " " + piece
            else:
                lines.append(line)
                line = pad + piece
        wrapped = "\n".join([*lines, line[:-1] + ")"])
    return stmt.with_changes(body=[cst.parse_statement(wrapped + "\n").body[0]])


def _blank_top(lines: Sequence[cst.EmptyLine]) -> int:
    return next((n for n, line in enumerate(lines) if line.comment is not None), len(lines))


def _merge_lifted_imports(module: cst.Module, lifted: set[int], own_package: str = "",
                          partial: set[int] | frozenset[int] = frozenset(), line_length: int = 79) -> cst.Module:
    """The imports a collapsed module-level guard left (the ones its kept branch starts with) join the
    header's run of imports from the same top-level package, in module order (where the plugin's
    isort or ruff would put them); `# isort: off/on` marks that fenced the guard go with it. One left
    further down the module moves up too, unless it imports the plugin's own package below code of the
    module (placed late, perhaps, against a circular import; below nothing but imports, as in a patch
    package's `__init__`, isort moves it); the code after it keeps the comments above the old guard."""
    body = list(module.body)
    header_end = 0
    while header_end < len(body) and (_is_header(body[header_end]) or id(body[header_end]) in lifted):
        header_end += 1
    placed = [j for j in range(header_end) if id(body[j]) not in lifted and _import_module(body[j]) is not None]
    before: dict[int, list[cst.BaseStatement]] = {}  # header import -> lifted imports that go just above it
    after: dict[int, list[cst.BaseStatement]] = {}  # ... just below it (the last of its package)
    moved: set[int] = set()
    staying: set[int] = set()  # moved imports whose comments stay with the code after them
    for i in range(len(body)):
        name = _import_module(body[i]) if id(body[i]) in lifted else None
        if name is None or (i >= header_end and name.split(".")[0] == own_package
                            and not all(_imports_only(stmt) for stmt in body[header_end:i])):
            continue
        same = [j for j in placed if (_import_module(body[j]) or "").split(".")[0] == name.split(".")[0]]
        if not same:
            continue  # no import of its package in the header: leave it where the guard was
        keep = [line for line in _without_isort_marks(body[i].leading_lines) if line.comment is not None]
        stays = i >= header_end or id(body[i]) in partial  # its comments stay where the guard was
        stmt = body[i].with_changes(leading_lines=[] if stays else keep)
        twin = next((j for j in same if _import_module(body[j]) == name and _mergeable(body[j])), None)
        earlier = next(((group, n) for group in (*before.values(), *after.values()) for n, s in enumerate(group)
                        if _import_module(s) == name and _mergeable(s)), None) if _mergeable(body[i]) and not keep else None
        if twin is not None and _mergeable(body[i]) and not keep:
            # `from m import b` joins the header's `from m import (a, c)`, as isort combines them.
            body[twin] = _with_names(body[twin], body[i], line_length, module)
        elif earlier is not None:
            # Two collapsed guards both left `from m import b`: one import, as isort combines them.
            group, n = earlier
            group[n] = _with_names(group[n], stmt, line_length, module)
        else:
            successor = next((j for j in same if _import_key(body[j]) > _import_key(body[i])), None)
            (after.setdefault(same[-1], []) if successor is None else before.setdefault(successor, [])).append(stmt)
        moved.add(i)
        if stays:
            staying.add(i)
    if not moved:
        return module
    key = _import_key
    out: list[cst.BaseStatement] = []
    carried = 0  # blank lines above the imports that moved: they now separate what was around them
    notes: list[cst.EmptyLine] = []  # comments above a guard far below the header: they stay with its code
    for i, stmt in enumerate(body):
        if i in moved:
            carried = max(carried, _blank_top(body[i].leading_lines))
            if i in staying:
                notes += [line for line in body[i].leading_lines[_blank_top(body[i].leading_lines):] if not _isort_mark(line)]
            continue
        if carried or notes:
            # The gap the moved imports leave is as wide as the widest gap around them, not their sum.
            lines = list(stmt.leading_lines)
            own = _blank_top(lines)
            gap = max(carried, own)
            stmt = _at_most_two_blank(stmt.with_changes(leading_lines=[cst.EmptyLine()] * gap + notes + lines[own:]))
            carried, notes = 0, []
        if i in before:
            inserted = sorted(before[i], key=key)
            if all(line.comment is None for line in stmt.leading_lines):  # the blank lines above stay above
                inserted[0] = inserted[0].with_changes(leading_lines=[*stmt.leading_lines, *inserted[0].leading_lines])
                stmt = stmt.with_changes(leading_lines=[])
            out += inserted
        out.append(stmt)
        out += sorted(after.get(i, []), key=key)
    return module.with_changes(body=out)


def _isort_mark(line: cst.EmptyLine) -> str:
    text = line.comment.value.replace(" ", "") if line.comment else ""
    return "off" if "isort:off" in text else "on" if "isort:on" in text else ""


def _has_import(stmt: cst.CSTNode) -> bool:
    """Does the statement import anything, at any depth (`if x:` / `try:` blocks with imports count)?"""
    return bool(m.findall(stmt, m.Import() | m.ImportFrom()))


def _drop_empty_isort_fences(module: cst.Module, lifted: set[int] | frozenset[int] = frozenset()) -> cst.Module:
    """`# isort: off` ... `# isort: on` around no import any more (the guard they fenced is gone), or around
    nothing but the plain imports a collapsed guard left (`lifted`: the fence kept isort off the `if`/`else`,
    which is gone; one import line needs no fence), and an `# isort: on` left without its `off`: the marks go.
    A fence that still holds an `if`/`try` with imports in it stays."""
    body = list(module.body)
    opened: int | None = None
    for i, stmt in enumerate(body):
        lines = list(getattr(stmt, "leading_lines", ()))
        marks = [_isort_mark(line) for line in lines]
        if "on" in marks:
            fenced = body[opened:i] if opened is not None else []
            if opened is None or not any(_has_import(s) for s in fenced) or \
                    all(id(s) in lifted and _is_import_line(s) for s in fenced):
                if opened is not None:
                    body[opened] = _at_most_two_blank(body[opened].with_changes(leading_lines=[
                        line for line in body[opened].leading_lines if _isort_mark(line) != "off"]))
                body[i] = stmt = _at_most_two_blank(stmt.with_changes(
                    leading_lines=[line for line in lines if _isort_mark(line) != "on"]))
            opened = None
        if "off" in [_isort_mark(line) for line in getattr(stmt, "leading_lines", ())]:
            opened = i
    return module.with_changes(body=body)


def _at_most_two_blank(stmt: cst.BaseStatement, most: int = 2) -> cst.BaseStatement:
    """PEP 8: no more than two blank lines in a row above a module-level statement (`most`=1: inside a
    class or function, as black and ruff keep them)."""
    lines, out, run = list(getattr(stmt, "leading_lines", ())), [], 0
    for line in lines:
        run = run + 1 if line.comment is None else 0
        if run <= most:
            out.append(line)
    return stmt.with_changes(leading_lines=out) if len(out) != len(lines) else stmt


def _literals(test: str) -> list[str]:
    """The string literals a version test passes its helper (`vllm_version_is('0.10.0')` -> ["0.10.0"])."""
    try:
        expr = ast.parse(test, mode="eval").body
    except SyntaxError:
        return []
    return [n.args[0].value for n in ast.walk(expr) if isinstance(n, ast.Call) and n.args
            and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)]


def _predicate_names(decisions: Mapping[int, GuardVerdict], source: str) -> dict[int, str]:
    """line -> name of each version predicate assignment the drop removes."""
    wanted = {line for line, d in decisions.items() if d.kind == "assign" and d.verdict == "collapse" and d.kept != "value"}
    if not wanted:
        return {}
    out: dict[int, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and node.lineno in wanted and isinstance(node.targets[0], ast.Name):
            out[node.lineno] = node.targets[0].id
    return out


def _referenced_names(source: str, loads_only: bool = False) -> set[str] | None:
    """Every name a module reads or binds (plus string constants, for `__all__` and annotations);
    `loads_only`: the names it reads."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if loads_only and not isinstance(node.ctx, ast.Load):
                continue
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.update(part for part in node.value.replace("[", " ").replace("]", " ").replace(".", " ").split()
                         if part.isidentifier())
    return names


def _loaded_names(source: str) -> set[str] | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    return _tree_loads(tree)


def _tree_loads(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _comma_comment(comma: cst.Comma | cst.MaybeSentinel) -> cst.Comment | None:
    """The comment after a comma that ends its line (`a,  # noqa`)."""
    after = comma.whitespace_after if isinstance(comma, cst.Comma) else None
    return after.first_line.comment if isinstance(after, cst.ParenthesizedWhitespace) else None


def _merged_comma(kept: cst.Comma | cst.MaybeSentinel, gone: cst.Comma) -> cst.Comma:
    """The comma of a name that became the last of a one-name-a-line import: the dropped last name's
    trailing comma (its line break and the indentation of the closing parenthesis), with the kept
    name's own comment."""
    comment = _comma_comment(kept)
    after = gone.whitespace_after
    if comment is not None and isinstance(after, cst.ParenthesizedWhitespace) and isinstance(kept, cst.Comma) and \
            isinstance(kept.whitespace_after, cst.ParenthesizedWhitespace):
        after = after.with_changes(first_line=kept.whitespace_after.first_line)
    return gone.with_changes(whitespace_before=kept.whitespace_before if isinstance(kept, cst.Comma) else gone.whitespace_before,
                             whitespace_after=after)


class _RemoveImports(cst.CSTTransformer):
    """Drops `from m import a` / `import m as a` names that are in `unused` (never a bare `import m`:
    it may be imported for its side effects)."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, path: str, unused: set[str], line_length: int = DEFAULT_LINE_LENGTH):
        self.path = path
        self.unused = unused
        self.line_length = line_length
        self.edits: list[DropEdit] = []
        self.line_comments: dict[int, cst.Comment] = {}  # id of a joined import -> the comment its line ends with

    def _bound(self, alias: cst.ImportAlias) -> str | None:
        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
            return alias.asname.name.value
        return alias.name.value if isinstance(alias.name, cst.Name) else None

    def _filter(self, original: cst.CSTNode, names: Sequence[cst.ImportAlias], require_asname: bool):
        keep: list[cst.ImportAlias] = []
        pos = self.get_metadata(PositionProvider, original)
        for alias in names:
            bound = self._bound(alias)
            if bound in self.unused and (alias.asname is not None or not require_asname):
                self.edits.append(DropEdit(self.path, pos.start.line, pos.end.line, "remove_import", bound))
                continue
            keep.append(alias)
        return keep

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom):
        if isinstance(updated.names, cst.ImportStar):
            return updated
        keep = self._filter(original, updated.names, require_asname=False)
        if not keep:
            return cst.RemovalSentinel.REMOVE
        if len(keep) == len(updated.names):
            return updated
        comment = None
        if keep[-1] is not updated.names[-1]:  # the last name went: the new last one ends the list
            last_comma, gone_comma = keep[-1].comma, updated.names[-1].comma
            if isinstance(gone_comma, cst.Comma):  # a trailing comma (one name a line): the layout stays
                keep[-1] = keep[-1].with_changes(comma=_merged_comma(last_comma, gone_comma))
            else:
                comment = _comma_comment(last_comma)
                keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        new = updated.with_changes(names=keep)
        flat = self._one_line(original, new)
        if comment is None:
            return flat
        if flat is not new:  # the comment that sat on the dropped comma ends the joined line
            self.line_comments[id(flat)] = comment
            return flat
        # Still wrapped: the comma stays (a trailing comma inside parentheses), with its comment.
        return updated.with_changes(names=[*keep[:-1], keep[-1].with_changes(comma=last_comma)])

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine):
        comment = next((self.line_comments.pop(id(s)) for s in updated.body if id(s) in self.line_comments), None)
        if comment is None or updated.trailing_whitespace.comment is not None:
            return updated
        return updated.with_changes(trailing_whitespace=updated.trailing_whitespace.with_changes(
            whitespace=cst.SimpleWhitespace("  "), comment=comment))

    def _one_line(self, original: cst.ImportFrom, updated: cst.ImportFrom) -> cst.ImportFrom:
        """A wrapped `from m import (a, b,\n c)` that fits on one line after the removal is written on
        one line, as the plugin's formatter (isort, ruff, yapf) would; never when a comment sits among
        the names kept (one on the last kept name's comma is the caller's: it moves to the line's end)."""
        names = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for a in updated.names]
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        code = cst.Module([]).code_for_node(updated)
        if ("\n" not in code and updated.lpar is None) or "#" in code:
            return updated
        flat = updated.with_changes(names=names, lpar=None, rpar=None)
        column = self.get_metadata(PositionProvider, original).start.column
        return flat if column + len(cst.Module([]).code_for_node(flat)) <= self.line_length else updated

    def leave_Import(self, original: cst.Import, updated: cst.Import):
        keep = self._filter(original, updated.names, require_asname=True)
        if not keep:
            return cst.RemovalSentinel.REMOVE
        if len(keep) == len(updated.names):
            return updated
        keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(names=keep)

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        if not updated.body:
            return updated.with_changes(body=[cst.SimpleStatementLine(body=[cst.Pass()])])
        return updated

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return _first_as_before(original, updated)


def _first_as_before(original: cst.Module, updated: cst.Module) -> cst.Module:
    """The statement that became the module's first sits where the first one sat: right below the
    module header (its license comment), with the blank lines the old first statement had above it."""
    if not original.body or not updated.body or not hasattr(updated.body[0], "leading_lines"):
        return updated
    if updated.body[0].deep_equals(original.body[0]):
        return updated
    first = updated.body[0]
    lines = list(first.leading_lines)
    blank = next((n for n, line in enumerate(lines) if line.comment is not None), len(lines))
    wanted = next((n for n, line in enumerate(original.body[0].leading_lines) if line.comment is not None),
                  len(original.body[0].leading_lines))
    if blank <= wanted:
        return updated
    return updated.with_changes(body=[first.with_changes(leading_lines=lines[blank - wanted:]), *updated.body[1:]])


def drop_source(source: str, path: str, decisions: Mapping[int, GuardVerdict] | Iterable[GuardVerdict],
                version_functions: Iterable[str] = ("vllm_version_is",), line_length: int = DEFAULT_LINE_LENGTH,
                read_elsewhere: Callable[[str], bool] | None = None) -> DropResult:
    """Apply the collapse/retarget verdicts (keyed by the guard's first line) to one file's source;
    `line_length`: the plugin's formatter limit (an import left short enough is joined on one line);
    `read_elsewhere(name)`: does another module of the plugin read `name` (a predicate function the
    drop left unread here is deleted when it does not; without it only `_private` ones are)."""
    listed = list(decisions.values()) if isinstance(decisions, Mapping) else list(decisions)
    # Version tests used as values may share a line (`f(a=is("0.9"), b=is("0.10"))`): keyed by line and version.
    values = {(d.line, v): d for d in listed if d.kind == "value" and d.verdict in ("collapse", "retarget")
              for v in _literals(d.guard)}
    decisions = {d.line: d for d in listed if d.kind != "value"}
    wanted = {line: d for line, d in decisions.items() if d.verdict in ("collapse", "retarget")}
    wanted.update({line: d for (line, _), d in values.items() if line not in wanted})
    if not wanted:
        return DropResult(path, source, ())
    if source.startswith(BOM):  # neither ast nor libcst parses a str that starts with one; the file keeps it
        result = drop_source(source[len(BOM):], path, decisions, version_functions, line_length)
        return DropResult(path, BOM + result.source, result.edits)
    module = cst.parse_module(source)
    # A helper imported under another name (`vllm_version_is as is_vllm`) is retargeted by that name.
    renamed = {local for local, name in helper_renames(list(ast.walk(ast.parse(source)))).items() if name in version_functions}
    version_functions = frozenset(version_functions) | renamed
    transformer = _DropTransformer(path, wanted, frozenset(version_functions), line_length, values)
    new_source = MetadataWrapper(module).visit(transformer).code
    predicates = _predicate_names(wanted, source)
    loaded = _loaded_names(new_source)
    # A result that does not parse keeps every predicate; one that parses but reads nothing keeps none.
    still_read = {line for line, name in predicates.items() if loaded is None or name in loaded}
    if still_read:  # a guard that reads the predicate stays: so does the predicate
        transformer = _DropTransformer(path, wanted, frozenset(version_functions), line_length, values)
        transformer.keep_predicates = still_read
        new_source = MetadataWrapper(module).visit(transformer).code
    edits = list(transformer.edits)
    new_source = _remove_dead_definitions(source, new_source, path, read_elsewhere, edits)
    before, after = _referenced_names(source), _referenced_names(new_source)
    if before is not None and after is not None:
        # Imported names the module read before the drop and reads nowhere now: only deleted branches used them.
        unused = (_import_bound_names(new_source) - after) & before
        if unused:
            remover = _RemoveImports(path, unused, line_length)
            new_source = MetadataWrapper(cst.parse_module(new_source)).visit(remover).code
            edits.extend(remover.edits)
    if new_source != source:
        new_source = _tidy_import_gaps(module, new_source)
    return DropResult(path, new_source, tuple(sorted(edits, key=lambda e: (e.line, e.action))))


def _bare(stmt: cst.CSTNode) -> str:
    """A statement's code without the blank lines and comments above it."""
    return cst.Module([]).code_for_node(stmt.with_changes(leading_lines=[]) if hasattr(stmt, "leading_lines") else stmt)


def _tidy_import_gaps(original: cst.Module, source: str) -> str:
    """Where the drop made an import line the neighbour of a statement it did not border before (the guard
    or import between them went), they are separated as isort and ruff separate them: no blank line between
    two imports of the same top-level package, at most one between other imports, and at most one between
    the last import and the code after it (two before a class or function). Neighbours the drop did not
    make keep the plugin's own spacing."""
    new = cst.parse_module(source)
    body, old = list(new.body), list(original.body)
    where: dict[str, list[int]] = {}
    for n, stmt in enumerate(old):
        where.setdefault(_bare(stmt), []).append(n)
    changed = False
    for i in range(1, len(body)):
        above, stmt = body[i - 1], body[i]
        if not _is_import_line(above) or not hasattr(stmt, "leading_lines") or \
                "isort:" in (_bare(above) + _bare(stmt)).replace(" ", ""):  # `# isort: skip` lines keep their place
            continue
        found = where.get(_bare(stmt), [])
        if len(found) == 1 and found[0] > 0:
            before = old[found[0] - 1]  # what stood above it: the same import (perhaps less a name it lost)
            if _bare(before) == _bare(above) or (_is_import_line(before) and _import_module(before) is not None
                                                 and _import_module(before) == _import_module(above)):
                continue
        lines = list(stmt.leading_lines)
        blank = _blank_top(lines)
        if _is_import_line(stmt):
            top, other = (_import_module(x) for x in (above, stmt))
            most = 0 if top is not None and other is not None and top.split(".")[0] == other.split(".")[0] else 1
        else:
            most = 2 if _is_definition(stmt) else 1
        if blank > most:
            body[i] = stmt.with_changes(leading_lines=lines[blank - most:])
            changed = True
    return new.with_changes(body=body).code if changed else source


def _remove_dead_definitions(source: str, new_source: str, path: str,
                             read_elsewhere: Callable[[str], bool] | None, edits: list[DropEdit]) -> str:
    """Module-level definitions the module read before the drop and reads nowhere after it go with the
    branches that used them, until none is left: predicate functions (`def is_legacy(): return
    vllm_version_is("0.10.0")`, action `collapse`, kept `predicate`) and `_private` functions, classes and
    plain assignments (`_orig = Base.__init__`, `def _patched_init(...)` once the guarded
    `Base.__init__ = _patched_init` is gone; action `remove_dead`). Never a decorated definition or an
    assignment whose value calls something (either may do work at import), nor a name another module of
    the plugin names (`read_elsewhere`; unknown: predicate functions stay unless `_private`)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return new_source
    predicates = predicate_functions(tree)
    before = _tree_loads(tree)  # the tree parsed above: the source is not parsed twice

    def removable(name: str) -> bool:
        if name not in predicates and not name.startswith("_") or name.startswith("__"):
            return False
        if read_elsewhere is not None:
            return not read_elsewhere(name)
        return name.startswith("_")

    candidates = {name for name in _side_effect_free_definitions(tree) if name in before and removable(name)}
    # Each candidate's lines in the source before the drop (edits name those, as the guard edits do: the
    # orphaned-module check reads a removed definition's imports by them).
    spans = {(stmt.name if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else
              getattr(stmt.targets[0], "id", "") if isinstance(stmt, ast.Assign) else ""): (stmt.lineno, stmt.end_lineno or stmt.lineno)
             for stmt in tree.body}
    removed: set[str] = set()
    while candidates - removed:
        after = _referenced_names(new_source, loads_only=True)  # with strings: `__all__`, annotations
        if after is None:
            break
        dead = {name for name in candidates - removed if name not in after}
        if not dead:
            break
        remover = _RemoveDefinitions(path, dead, predicates, spans)
        new_source = MetadataWrapper(cst.parse_module(new_source)).visit(remover).code
        edits.extend(remover.edits)
        removed |= dead
    return new_source


def _side_effect_free_definitions(tree: ast.Module) -> set[str]:
    """Names the module binds at top level with an undecorated def/class or a one-name assignment whose
    value calls nothing, bound exactly once."""
    out: list[str] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not stmt.decorator_list:
            out.append(stmt.name)
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and not any(isinstance(n, (ast.Call, ast.Await, ast.Yield, ast.NamedExpr)) for n in ast.walk(stmt.value)):
            out.append(stmt.targets[0].id)
    stores = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))]
    stores += [s.name for s in ast.walk(tree) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return {name for name in out if stores.count(name) == 1}


class _RemoveDefinitions(cst.CSTTransformer):
    """Deletes the module-level definitions (def, class, one-name assignment) named in `names`; the
    comments above one go with it, its blank lines pass to the next statement when that one has fewer
    (the two lines black keeps after a class stay)."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, path: str, names: set[str], predicates: Mapping[str, str],
                 spans: Mapping[str, tuple[int, int]] | None = None):
        self.path, self.names, self.predicates = path, names, predicates
        self.spans = spans or {}  # name -> its lines in the source before the drop
        self.edits: list[DropEdit] = []

    def visit_Module(self, node: cst.Module) -> bool:
        return False  # only the module's own statements are looked at, in leave_Module

    @staticmethod
    def _name(stmt: cst.CSTNode) -> tuple[str, str] | None:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            return stmt.name.value, f"{'def' if isinstance(stmt, cst.FunctionDef) else 'class'} {stmt.name.value}"
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign) \
                and len(stmt.body[0].targets) == 1 and isinstance(stmt.body[0].targets[0].target, cst.Name):
            return stmt.body[0].targets[0].target.value, cst.Module([]).code_for_node(stmt.body[0])[:80]
        return None

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        body: list[cst.CSTNode] = []
        blank: list[cst.EmptyLine] = []  # leading blank lines of the statements just removed
        for stmt in original.body:
            named = self._name(stmt)
            if named is not None and named[0] in self.names:
                name, text = named
                pos = self.get_metadata(PositionProvider, stmt)
                start, end = self.spans.get(name, (pos.start.line, pos.end.line))
                if name in self.predicates:
                    self.edits.append(DropEdit(self.path, start, end, "collapse", self.predicates[name], kept="predicate"))
                else:
                    self.edits.append(DropEdit(self.path, start, end, "remove_dead", text))
                lines = [line for line in stmt.leading_lines if line.comment is None]
                blank = lines if len(lines) > len(blank) else blank
                continue
            own = next((n for n, line in enumerate(stmt.leading_lines) if line.comment is not None), len(stmt.leading_lines))
            if own < len(blank):  # blank lines above the statement (or its comment) as many as above the removed one
                stmt = stmt.with_changes(leading_lines=[*blank[:len(blank) - own], *stmt.leading_lines])
            blank = []
            body.append(stmt)
        return updated.with_changes(body=body)


def _import_bound_names(source: str) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            out.update(a.asname or a.name for a in node.names if a.name != "*")
        elif isinstance(node, ast.Import):
            out.update(a.asname for a in node.names if a.asname)
    return out
