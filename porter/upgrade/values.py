"""Version tests used as values: a version-helper call that is no `if` / conditional-expression test
and no version predicate's assignment (`fn(legacy=vllm_version_is("0.10.0"))`, a comprehension
filter, `self.legacy = vllm_version_is(...)`, `return vllm_version_is(...)` in a method). Each is a
guard block of kind `value`: once both lanes answer it alike, the drop writes the answer in its place.

Pure over one module's AST.
"""

from __future__ import annotations

import ast
import re

from porter.upgrade.index import walk  # ast.walk's nodes, about twice as fast (every use here is order-free)
from porter.upgrade.predicates import Predicates, predicate_functions

_HELPER = re.compile(r"version", re.IGNORECASE)  # the lanes check the name against the plugin's conventions


def _helper_call(node: ast.AST, renames: dict[str, str]) -> bool:
    """`vllm_version_is("0.10.0")` (or a renamed helper, or `utils.vllm_version_is(...)`) with a literal."""
    if not isinstance(node, ast.Call) or not node.args or node.keywords:
        return False
    arg = node.args[0]
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return bool(_HELPER.search(renames.get(name, name)))


def _claimed(tree: ast.Module, predicates: Predicates) -> set[int]:
    """ids of the nodes that already belong to a guard block: `if`/`elif` and ternary tests, the tests
    version predicates hold, and the bodies of predicate functions."""
    out: set[int] = set()
    spans = {(p.line, p.end_line) for p in predicates.found}
    functions = set(predicate_functions(tree))
    for node in walk(tree):
        if isinstance(node, (ast.If, ast.IfExp)):
            out.update(id(n) for n in walk(node.test))
        elif isinstance(node, ast.Assign) and (node.lineno, node.end_lineno or node.lineno) in spans and \
                (not isinstance(node.value, ast.Call) or _helper_call(node.value, predicates.renames)):
            # a predicate's test; not `runner = Runner(legacy=vllm_version_is(...))`, whose call is no test
            out.update(id(n) for n in walk(node.value))
        elif isinstance(node, ast.FunctionDef) and node.name in functions and node in tree.body:
            out.update(id(n) for n in walk(node))
    return out


# What a helper call's callee looks like in the text: a name holding "version" (any case, as _HELPER)
# and then, before its "(", only blanks, line continuations and comments (inside brackets a call may
# run over lines: `vllm_version_is  # why\n    ("0.10.0")`). A comment runs to its line's end (CR, LF
# or both, as the parser ends lines): no two ways to match one text, no backtracking blow-up on `####`.
_CALLEE_GAP = rb"(?:\s|\\|#[^\r\n]*[\r\n])*\("
_VERSION_CALL = re.compile(rb"version\w*" + _CALLEE_GAP, re.IGNORECASE)


def may_call_helper(source: bytes, renames: dict[str, str]) -> bool:
    """Whether `source` can hold a call _helper_call() accepts: a callee named with "version", or a
    local name a version helper was imported as, followed by its "(". False only when no such text is
    there (exact for ASCII sources; a non-ASCII one may spell a name that Python's NFKC normalisation
    turns into "version", so it always answers True)."""
    if not source.isascii():
        return True
    if _VERSION_CALL.search(source):
        return True
    local = [name for name, helper in renames.items() if _HELPER.search(helper)]
    return bool(local) and re.search(rb"(?<!\w)(?:" + b"|".join(re.escape(n.encode()) for n in local) + rb")" + _CALLEE_GAP,
                                     source) is not None


def value_calls(tree: ast.Module, predicates: Predicates, source: bytes | None = None) -> list[ast.Call]:
    """The module's version-helper calls that sit in no guard test and no predicate, in source order.
    `source`: the module's text; when it cannot hold such a call (may_call_helper) the tree is not walked."""
    renames = predicates.renames
    if source is not None and not may_call_helper(source, renames):
        return []
    calls = [n for n in walk(tree) if _helper_call(n, renames)]
    if not calls:
        return []
    claimed = _claimed(tree, predicates)
    return sorted((c for c in calls if id(c) not in claimed), key=lambda c: (c.lineno, c.col_offset))
