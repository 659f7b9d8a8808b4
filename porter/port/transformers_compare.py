"""transformers between two versions, as an NPU consumer sees it (the "stage 0 fast path"):

1. the NPU integration files (`transformers/integrations/npu_*.py`): byte-identical? if not,
   AST-identical (comments and docstrings aside)? which top-level names appeared, vanished or
   changed signature?
2. the import chain of those files still gates on `is_torch_npu_available` and takes
   `npu_fusion_attention` from torch_npu;
3. the attention-function registry (`AttentionInterface._global_mapping` behind
   `ALL_ATTENTION_FUNCTIONS`): keys removed or added;
4. the consumer (vime): every `transformers...` name it imports and every attention key it
   names still exist at the target.

Outcome: A when nothing observable changed; A_WITH_NOTE when something changed that the consumer
does not use (new keys, new or changed NPU helpers, placeholders raising NotImplementedError);
C_PATCH when a consumer-used NPU helper broke (those files are ours to patch); C_REPORT when a
consumer-used key or core name broke (transformers core is report-only).
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from porter.upgrade.models import Outcome, OutcomeDecision

NPU_GLOB = "npu_*.py"
REGISTRY_FILES = ("modeling_utils.py",)
GATE = "is_torch_npu_available"


def package_root(tree: Path) -> Path:
    """`<tree>/transformers` or `<tree>/src/transformers` (a wheel vs a git checkout)."""
    for candidate in (tree / "transformers", tree / "src" / "transformers"):
        if (candidate / "__init__.py").is_file():
            return candidate
    from porter.errors import InputError

    raise InputError(f"{tree} holds no transformers package", hint="point at an unpacked wheel or a transformers checkout")


def _normalized_ast(text: str) -> str:
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            body.pop(0)  # docstrings do not change behaviour
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def _top_level(text: str) -> dict[str, str]:
    """Top-level name -> signature text (functions) or kind."""
    out: dict[str, str] = {}
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = f"({ast.unparse(node.args)})"
        elif isinstance(node, ast.ClassDef):
            out[node.name] = "class"
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = "assignment"
    return out


def _placeholders(text: str) -> list[str]:
    """Top-level functions whose body only raises NotImplementedError."""
    out = []
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0]):
                out.append(node.name)
    return out


def _imports(text: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            names.update(f"{node.module}.{a.name}" for a in node.names)
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


@dataclass(frozen=True)
class FileComparison:
    path: str  # relative to the transformers package
    status: str  # identical | ast-identical | changed | added | removed
    baseline_sha256: str = ""
    target_sha256: str = ""
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()  # signature changed
    placeholders: tuple[str, ...] = ()  # new at the target and raising NotImplementedError
    gate_ok: bool = True  # still imports is_torch_npu_available / npu_fusion_attention where it did

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def compare_npu_files(base_pkg: Path, target_pkg: Path) -> list[FileComparison]:
    out = []
    names = sorted({p.name for p in (base_pkg / "integrations").glob(NPU_GLOB)} |
                   {p.name for p in (target_pkg / "integrations").glob(NPU_GLOB)})
    for name in names:
        rel = f"integrations/{name}"
        old_path, new_path = base_pkg / rel, target_pkg / rel
        if not new_path.is_file():
            out.append(FileComparison(rel, "removed", hashlib.sha256(old_path.read_bytes()).hexdigest()))
            continue
        if not old_path.is_file():
            out.append(FileComparison(rel, "added", "", hashlib.sha256(new_path.read_bytes()).hexdigest()))
            continue
        old_bytes, new_bytes = old_path.read_bytes(), new_path.read_bytes()
        old_sha, new_sha = hashlib.sha256(old_bytes).hexdigest(), hashlib.sha256(new_bytes).hexdigest()
        if old_sha == new_sha:
            out.append(FileComparison(rel, "identical", old_sha, new_sha))
            continue
        old_text, new_text = old_bytes.decode("utf-8", "replace"), new_bytes.decode("utf-8", "replace")
        if _normalized_ast(old_text) == _normalized_ast(new_text):
            out.append(FileComparison(rel, "ast-identical", old_sha, new_sha))
            continue
        old_defs, new_defs = _top_level(old_text), _top_level(new_text)
        old_imports, new_imports = _imports(old_text), _imports(new_text)
        gate_ok = all(name in new_imports for name in (GATE, "npu_fusion_attention") if name in old_imports)
        added = tuple(sorted(set(new_defs) - set(old_defs)))
        out.append(FileComparison(
            rel, "changed", old_sha, new_sha, added=added, removed=tuple(sorted(set(old_defs) - set(new_defs))),
            changed=tuple(sorted(n for n in set(old_defs) & set(new_defs) if old_defs[n] != new_defs[n])),
            placeholders=tuple(n for n in _placeholders(new_text) if n in added), gate_ok=gate_ok,
        ))
    return out


def attention_keys(pkg: Path) -> set[str]:
    """Keys of the attention-function registry (`_global_mapping` dict literals in modeling_utils)."""
    keys: set[str] = set()
    for name in REGISTRY_FILES:
        path = pkg / name
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8", errors="replace"))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            if any((isinstance(t, ast.Name) and t.id == "_global_mapping") or (isinstance(t, ast.Attribute) and t.attr == "_global_mapping")
                   for t in targets) and isinstance(node.value, ast.Dict):
                keys.update(k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return keys


@dataclass(frozen=True)
class ConsumerUse:
    path: str
    line: int
    kind: str  # import | attribute | attention_key
    name: str
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def consumer_uses(consumer: Path, target_index: Any, keys: set[str]) -> list[ConsumerUse]:
    """Imports from transformers and attention keys the consumer names, checked against the target
    (`target_index`: porter.upgrade.index.TreeIndex; lazy `__getattr__` modules count as resolvable)."""
    uses: list[ConsumerUse] = []
    for path in sorted(consumer.rglob("*.py")):
        rel = path.relative_to(consumer).as_posix()
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "transformers" and not node.level:
                for alias in node.names:
                    ok = target_index.resolve(node.module, alias.name).ok or target_index.has_module(f"{node.module}.{alias.name}")
                    uses.append(ConsumerUse(rel, node.lineno, "import", f"{node.module}.{alias.name}", ok))
            elif isinstance(node, ast.Attribute) and _chain_root(node) == "transformers" and not isinstance(node.ctx, ast.Store):
                dotted = _chain(node)
                module, _, name = dotted.rpartition(".")
                if dotted.count(".") >= 1 and not name.startswith("__") and not _is_prefix_of_longer(node, parents):
                    ok = target_index.resolve(module, name).ok or target_index.has_module(dotted)
                    uses.append(ConsumerUse(rel, node.lineno, "attribute", dotted, ok))
            elif isinstance(node, ast.keyword) and node.arg in ("attn_implementation", "_attn_implementation") \
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                uses.append(ConsumerUse(rel, node.value.lineno, "attention_key", node.value.value,
                                        node.value.value in keys or node.value.value in ("eager",)))
    return uses


def _chain(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_chain(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else "?"


def _chain_root(node: ast.Attribute) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _is_prefix_of_longer(node: ast.Attribute, parents: dict) -> bool:
    """`transformers.utils` inside `transformers.utils.logging.x`: only the longest chain is checked."""
    return isinstance(parents.get(node), ast.Attribute)


@dataclass(frozen=True)
class TransformersComparison:
    baseline: str
    target: str
    files: tuple[FileComparison, ...]
    keys_added: tuple[str, ...]
    keys_removed: tuple[str, ...]
    uses: tuple[ConsumerUse, ...]
    outcome: OutcomeDecision
    evidence: tuple[str, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> int:
        return 0 if self.outcome.outcome in (Outcome.A, Outcome.A_WITH_NOTE) else 1

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "target": self.target, "outcome": self.outcome.to_dict(),
                "npu_files": [f.to_dict() for f in self.files], "attention_keys": {"added": list(self.keys_added),
                "removed": list(self.keys_removed)}, "consumer_uses": [u.to_dict() for u in self.uses],
                "evidence": list(self.evidence)}


def compare(baseline_tree: Path, target_tree: Path, consumer: Path | None, baseline: str = "baseline",
            target: str = "target") -> TransformersComparison:
    base_pkg, target_pkg = package_root(Path(baseline_tree)), package_root(Path(target_tree))
    files = compare_npu_files(base_pkg, target_pkg)
    old_keys, new_keys = attention_keys(base_pkg), attention_keys(target_pkg)
    from porter.upgrade.index import TreeIndex

    index = TreeIndex(target_pkg.parent, ["transformers"])
    uses = consumer_uses(Path(consumer), index, new_keys) if consumer else []
    evidence = [f"{f.path}: {f.status}" + (f" (sha256 {f.target_sha256[:12]})" if f.status == "identical" else "") for f in files]
    evidence.append(f"attention registry: {len(old_keys)} key(s) at {baseline}, {len(new_keys)} at {target}")
    evidence.append(f"consumer: {len(uses)} use(s) of transformers checked at {target}")
    outcome = _decide(files, old_keys, new_keys, uses)
    return TransformersComparison(baseline, target, tuple(files), tuple(sorted(new_keys - old_keys)),
                                  tuple(sorted(old_keys - new_keys)), tuple(uses), outcome, tuple(evidence))


def _decide(files: list[FileComparison], old_keys: set[str], new_keys: set[str], uses: list[ConsumerUse]) -> OutcomeDecision:
    broken = [u for u in uses if not u.ok]
    npu_broken = [u for u in broken if ".integrations.npu_" in u.name]
    core_broken = [u for u in broken if u not in npu_broken]
    gate_lost = [f.path for f in files if not f.gate_ok or f.status == "removed"]
    if core_broken:
        return OutcomeDecision(Outcome.C_REPORT, tuple(
            [f"consumer use {u.name} ({u.path}:{u.line}) does not exist at the target" for u in core_broken]
            + ["transformers core is report-only: file a blocker report upstream"]))
    if npu_broken or gate_lost:
        return OutcomeDecision(Outcome.C_PATCH, tuple(
            [f"consumer use {u.name} ({u.path}:{u.line}) is gone from the NPU integration" for u in npu_broken]
            + [f"{path}: NPU gate/import chain changed or file removed" for path in gate_lost]
            + ["src/transformers/integrations/npu_* is ours to patch"]))
    notes = []
    for f in files:
        if f.status == "changed":
            parts = [f"+{', '.join(f.added)}" if f.added else "", f"-{', '.join(f.removed)}" if f.removed else "",
                     f"~{', '.join(f.changed)}" if f.changed else ""]
            notes.append(f"{f.path} changed ({' '.join(p for p in parts if p)}); no consumer-used name broke")
            if f.placeholders:
                notes.append(f"{f.path}: new placeholder(s) raising NotImplementedError: {', '.join(f.placeholders)}")
        elif f.status == "added":
            notes.append(f"{f.path} is new at the target")
        elif f.status == "ast-identical":
            notes.append(f"{f.path} differs only in comments/docstrings")
    if new_keys - old_keys:
        notes.append(f"new attention keys: {', '.join(sorted(new_keys - old_keys))}")
    if old_keys - new_keys:
        notes.append(f"attention keys removed (not used by the consumer): {', '.join(sorted(old_keys - new_keys))}")
    if notes:
        return OutcomeDecision(Outcome.A_WITH_NOTE, tuple(notes))
    return OutcomeDecision(Outcome.A, ("NPU integration files byte-identical, attention registry unchanged, "
                                       "every consumer use resolves at the target",))


def to_markdown(result: TransformersComparison) -> str:
    lines = [f"# transformers {result.baseline} → {result.target}: NPU integration check", "", "## Outcome", "",
             f"**{result.outcome.outcome.value}**", ""]
    lines += [f"- {r}" for r in result.outcome.reasons]
    lines += ["", "## NPU integration files", "", "| file | status | added | removed | changed signature |", "|---|---|---|---|---|"]
    for f in result.files:
        lines.append(f"| `{f.path}` | {f.status} | {', '.join(f.added) or '—'} | {', '.join(f.removed) or '—'} | {', '.join(f.changed) or '—'} |")
    lines += ["", "## Attention registry", "", f"- added: {', '.join(result.keys_added) or 'none'}",
              f"- removed: {', '.join(result.keys_removed) or 'none'}", "", "## Consumer uses", ""]
    lines += [f"- {'ok' if u.ok else 'BROKEN'} `{u.name}` ({u.kind}, {u.path}:{u.line})" for u in result.uses] or ["- none"]
    lines += ["", "## Evidence", ""] + [f"- {e}" for e in result.evidence]
    return "\n".join(lines) + "\n"
