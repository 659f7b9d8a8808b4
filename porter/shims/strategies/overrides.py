"""F3 signature changed under an override: when the base method only gained trailing parameters, the
override accepts them with the upstream default (adaptation pattern 1)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Sequence

from porter.shims.lookup import class_member
from porter.shims.model import NewFile, ParamAdd, ShimGroup, Unhandled
from porter.shims.render import render_python
from porter.shims.strategies.common import ShimContext, class_at, count, literal, test_file_name
from porter.shims.strategies.signature import changes_of
from porter.upgrade.models import DriftFamily, DriftRecord


def is_override(record: DriftRecord) -> bool:
    return any("override" in str(c.get("change") or "") for c in changes_of(record))


def override_fixes(record: DriftRecord, ctx: ShimContext) -> tuple[list[tuple[str, ParamAdd, list[str]]], Unhandled | None]:
    """Adaptation pattern 1: the base method gained trailing parameters -> the override accepts
    them with the upstream default. Anything else (removed, reordered or inserted parameters) is
    pattern 13, two guarded definitions, for a human (the Unhandled says why)."""
    human = Unhandled(record, "the plugin overrides a method whose upstream signature changed: write guarded "
                              "definitions for both signatures (adaptation pattern 13)")
    changes = [c for c in changes_of(record) if "override" in str(c.get("change") or "")]
    if any(c.get("removed") for c in changes) or not all(c.get("added") for c in changes):
        return [], human
    method = str(changes[0].get("method") or record.symbol.rsplit(".", 1)[-1])
    base = record.symbol[: -len(method) - 1] if record.symbol.endswith("." + method) else record.symbol
    module, _, cls = base.rpartition(".")
    old_cls, new_cls = ctx.old_tree.find(module, cls), ctx.new_tree.find(module, cls)
    old_m = class_member(ctx.old_tree, old_cls.module, old_cls.name, method) if old_cls else None
    new_m = class_member(ctx.new_tree, new_cls.module, new_cls.name, method) if new_cls else None
    if not old_m or not new_m or old_m[0] != "method" or new_m[0] != "method":
        return [], human
    plain = lambda params: [p for p in params if p.kind not in ("var_positional", "var_keyword")]  # noqa: E731
    old_names, new_params = [p.name for p in plain(old_m[2])], plain(new_m[2])
    if [p.name for p in new_params[: len(old_names)]] != old_names:
        return [], human  # parameters inserted or reordered: positions would shift
    tail = new_params[len(old_names):]
    base_positional = [p.name for p in new_params if p.kind in ("positional_only", "positional_or_keyword")]
    passed = _passed_non_default(ctx, method, [(p.name, p.default) for p in tail], base_positional)
    if passed:
        return [], Unhandled(record, f"{ctx.upstream} {ctx.target} passes a new parameter to the overridden method: the "
                                     "override must handle it (accepting and ignoring it would drop it silently; raising "
                                     "would break that call)", f"{passed[0][0]} at {passed[0][1]}")
    added = [(p.name, p.default if p.has_default and literal(p.default) else "None",
              "keyword_only" if p.kind == "keyword_only" else "positional") for p in tail]
    fixes = []
    for site in record.sites:
        cls_name = class_at(ctx.plugin_root, site.path, site.line)
        override = _method_params(ctx.plugin_root / site.path, cls_name, method) if cls_name else None
        if override is None:
            return [], human
        positional, keyword_only, has_var = override
        if has_var or positional != old_names[: len(positional)] or len(positional) != len(old_names):
            return [], human  # the override's own parameters do not line up with the base's
        if keyword_only and any(k == "positional" for _, _, k in added):
            return [], human  # a new positional parameter cannot follow the override's keyword-only ones
        comment = (f"porter: {ctx.upstream} {ctx.target} passes {', '.join(n for n, _, _ in added)} to {cls}.{method}; "
                   "accepted; any value but the upstream default raises until the NPU override handles it (REVIEW)")
        expected = positional + [n for n, _, k in added if k == "positional"] + keyword_only + \
            [n for n, _, k in added if k == "keyword_only"]
        fixes.append((site.path, ParamAdd(site.path, cls_name, method, tuple(added), comment,
                                          _guards(cls_name, method, added, ctx)), expected))
    return fixes, None


def _passed_non_default(ctx: ShimContext, method: str, params, positional: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(`name=value`, file@version:line) where the target's own code calls `.method(...)` with one of the
    new parameters set to something other than its default, by keyword or by position (vllm 0.33's
    `self._get_logits(hidden_states, lm_head, embedding_bias, skip_gather)`): the override then sees it
    on a real path. `positional` names the base method's positional parameters, `self` first."""
    root = ctx.new_tree.root
    if root is None or not params:
        return []
    index = {name: i - 1 for i, name in enumerate(positional)}  # position after `self`
    found = []
    for path in sorted(root.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if f".{method}(" not in text:
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for call in ast.walk(tree):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == method):
                continue
            keywords = {k.arg: k.value for k in call.keywords if k.arg}
            for name, default in params:
                value = keywords.get(name)
                at = index.get(name, -1)
                if value is None and 0 <= at < len(call.args) and \
                        not any(isinstance(a, ast.Starred) for a in call.args[: at + 1]):
                    value = call.args[at]
                shown = ast.unparse(value) if value is not None else ""
                if value is not None and shown != (default or "None"):
                    found.append((f"{name}={shown}", f"{path.relative_to(root).as_posix()}@{ctx.target}:{call.lineno}"))
    return found


def _guards(cls_name: str, method: str, added, ctx: ShimContext) -> str:
    """No silent drop: a value other than the upstream default reaches code that would ignore it, so
    the override raises with a message naming it (at the default, behaviour is the baseline's)."""
    lines = []
    for name, default, _kind in added:
        test = f"{name} is not None" if default == "None" else f"{name} != {default}"
        lines.append(f"if {test}:\n    raise NotImplementedError(\n"
                     f"        f\"{cls_name}.{method}: {ctx.upstream} {ctx.target} passed {name}={{{name}!r}}, which this "
                     f"NPU override does not handle yet (parameter added by porter)\")\n")
    return "".join(lines)


def _method_params(path: Path, class_name: str, method: str) -> tuple[list[str], list[str], bool] | None:
    """(positional names, keyword-only names, has *args/**kwargs) of `class_name.method` in a file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == method:
                    args = stmt.args
                    return ([a.arg for a in (*args.posonlyargs, *args.args)], [a.arg for a in args.kwonlyargs],
                            bool(args.vararg or args.kwarg))
    return None


def plan_overrides(path: str, fixes: list[tuple[DriftRecord, ParamAdd, list[str]]], ctx: ShimContext,
                    taken: set[str]) -> ShimGroup:
    test_path = test_file_name("overrides", path, ctx, taken)
    required = [(path, fix.class_name, fix.method, expected) for _, fix, expected in fixes]
    test = render_python("test_members.py.j2", **ctx.template_vars(), test_path=test_path,
                         depth=len(Path(test_path).parts) - 1, required=required)
    records = list({record.key: record for record, _, _ in fixes}.values())
    rationale = tuple(
        f"`{fix.class_name}.{fix.method}` accepts {', '.join(f'`{n}={d}`' for n, d, _ in fix.params)}: {ctx.upstream} "
        f"{ctx.target} appends them to the base signature (adaptation pattern 1); any other value than the default "
        "raises NotImplementedError naming it (no silent drop), review that."
        for _, fix, _ in fixes
    )
    return ShimGroup(
        name=f"overrides/{Path(path).stem}",
        family=DriftFamily.SIGNATURE,
        strategy="override_params",
        records=tuple(records),
        subject=f"{path}: accept the parameters {ctx.upstream} {ctx.target} passes to {count(fixes, 'override')}",
        rationale=rationale,
        files=(NewFile(test_path, test, "test"),),
        param_adds=tuple(fix for _, fix, _ in fixes),
        review=tuple(dict.fromkeys(r.key for r in records)),
    )
