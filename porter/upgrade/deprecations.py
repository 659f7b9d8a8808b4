"""Names a module's `__getattr__` serves only with a deprecation warning, and where they live now.

vllm moves a helper and leaves the old import working for a release through a module `__getattr__`
(`vllm.utils.get_open_port` at 0.11.2: a `_DEPRECATED_MAPPINGS` table names the submodule
`network_utils`; `vllm.transformers_utils.tokenizer.get_tokenizer` at 0.12.0: an `if name == ...`
branch that imports it from `vllm.tokenizers`). The index says such a name is "served by module
__getattr__", which is found: the import still works, but the maintainers move it to the new home.
This reads the `__getattr__` that serves the name and returns the homes it names, for the caller to
check in the tree.
"""

from __future__ import annotations

import ast

_WARN_CALLS = {"warn", "warning", "warning_once", "warn_once"}


def _mentions_deprecation(nodes: list[ast.stmt]) -> bool:
    for stmt in nodes:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
                if name in _WARN_CALLS:
                    return True
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "deprecat" in node.value.lower():
                return True
            elif isinstance(node, ast.Name) and node.id == "DeprecationWarning":
                return True
    return False


def _tests_name(test: ast.expr, param: str, name: str, tables: dict[str, dict[str, str]]) -> tuple[bool, str | None]:
    """(the test selects `name`, the table it looked the name up in)."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) and test.left.id == param:
        right, op = test.comparators[0], test.ops[0]
        if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and right.value == name:
            return True, None
        if isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
            return any(isinstance(e, ast.Constant) and e.value == name for e in right.elts), None
        if isinstance(op, ast.In) and isinstance(right, ast.Name) and right.id in tables:
            return name in tables[right.id], right.id
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        for value in test.values:
            hit, table = _tests_name(value, param, name, tables)
            if hit:
                return hit, table
    return False, None


def _string_tables(tree: ast.Module) -> dict[str, dict[str, str]]:
    """Module-level `NAME = {"old": "submodule", ...}` literals (string keys and string values)."""
    out: dict[str, dict[str, str]] = {}
    for stmt in tree.body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else \
            stmt.target if isinstance(stmt, ast.AnnAssign) else None
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(target, ast.Name) and isinstance(value, ast.Dict):
            table = {k.value: v.value for k, v in zip(value.keys, value.values)
                     if isinstance(k, ast.Constant) and isinstance(k.value, str)
                     and isinstance(v, ast.Constant) and isinstance(v.value, str)}
            if table:
                out[target.id] = table
    return out


def _branch_homes(body: list[ast.stmt], package: str, imports: dict[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """Homes a branch names: `from M import X` inside it whose X it returns, else the module-level import
    of the name it returns."""
    local: dict[str, tuple[str, str]] = {}
    returned: list[str] = []
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(node.module or "", node.level, package)
                for alias in node.names:
                    local[alias.asname or alias.name] = (base, alias.name)
            elif isinstance(node, ast.Return) and isinstance(node.value, ast.Name):
                returned.append(node.value.id)
    return [local.get(r) or imports[r] for r in returned if r in local or r in imports]


def _absolute(module: str, level: int, package: str) -> str:
    """`from ..m import x` read in `package` (the module itself for an `__init__`, else its parent)."""
    if not level:
        return module
    parts = package.split(".")
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, module] if module else parts)


def deprecated_homes(source: str, module: str, name: str, is_package: bool) -> list[tuple[str, str]]:
    """(module, name) pairs the module's `__getattr__` names as the home of the deprecated `name`;
    [] when no `__getattr__` branch that warns serves it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    fn = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "__getattr__"), None)
    if fn is None or not fn.args.args:
        return []
    param = fn.args.args[0].arg
    tables = _string_tables(tree)
    here = module if is_package else module.rpartition(".")[0]
    imports: dict[str, tuple[str, str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            base = _absolute(stmt.module or "", stmt.level, here)
            for alias in stmt.names:
                imports[alias.asname or alias.name] = (base, alias.name)
    for stmt in fn.body:
        if not isinstance(stmt, ast.If):
            continue
        hit, table = _tests_name(stmt.test, param, name, tables)
        if not hit or not _mentions_deprecation(stmt.body):
            continue
        if table is not None:
            value = tables[table][name]
            if "." in value and value.split(".")[0] == module.split(".")[0]:
                return [(value, name)]
            return [(f"{here}.{value}", name), (f"{module}.{value}", name), (value, name)]
        return _branch_homes(stmt.body, here, imports)
    return []
