"""Validation of a port branch before its ref may move: byte-compile what changed, re-run the
drift analysis on the new tree, run the generated shim tests (and, where configured, the plugin's
own tests against the baseline and the target upstream trees).

All checks run inside porter's worktree with bytecode writing and pytest's cache switched off,
so validating leaves no file behind that could end up in a commit.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from porter import proc
from porter.upgrade.models import DriftRecord, Severity


@dataclass(frozen=True)
class Check:
    name: str
    verdict: str  # pass | fail | skip
    detail: str
    command: str = ""
    items: tuple[str, ...] = ()
    required: bool = False  # must pass: a skip (nothing ran) keeps the branch from moving

    @property
    def ok(self) -> bool:
        return self.verdict == "pass" if self.required else self.verdict != "fail"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "verdict": self.verdict, "detail": self.detail, "command": self.command,
                "items": list(self.items), "required": self.required}


@dataclass(frozen=True)
class Validation:
    checks: tuple[Check, ...]
    residual: tuple[DriftRecord, ...] = ()

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failing(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [c.to_dict() for c in self.checks],
                "residual": [r.key for r in self.residual]}


def byte_compile(root: Path, paths: Iterable[str]) -> Check:
    """Compile every changed Python file in memory (no .pyc is written into the worktree)."""
    errors, count = [], 0
    for rel in sorted(set(paths)):
        if not rel.endswith(".py") or not (root / rel).is_file():
            continue
        count += 1
        try:
            compile((root / rel).read_bytes(), rel, "exec", dont_inherit=True)
        except SyntaxError as exc:
            errors.append(f"{rel}:{exc.lineno}: {exc.msg}")
    if errors:
        return Check("byte-compile", "fail", f"{len(errors)} of {count} changed file(s) do not compile", items=tuple(errors),
                     required=True)
    return Check("byte-compile", "pass", f"{count} changed Python file(s) compile", required=True)


def residual_drift(records: Sequence[DriftRecord], allowed: Iterable[str]) -> tuple[Check, tuple[DriftRecord, ...]]:
    """Breakages left on the new branch must be exactly the ones the outcome hands to a human."""
    allowed = set(allowed)
    residual = tuple(r for r in records if r.severity is not Severity.NOTE)
    unexpected = [r for r in residual if r.key not in allowed]
    if unexpected:
        return Check("residual drift", "fail",
                     f"{len(unexpected)} breakage(s) remain that the outcome does not list for a human",
                     items=tuple(f"{r.key}: {r.message}" for r in unexpected)), residual
    if residual:
        return Check("residual drift", "pass",
                     f"{len(residual)} residual breakage(s), all listed as needing a human",
                     items=tuple(r.key for r in residual)), residual
    return Check("residual drift", "pass", "no breakage left at the target"), residual


_SUMMARY = re.compile(r"(\d+) (passed|failed|error|errors|skipped)")


def run_pytest(root: Path, targets: Sequence[str], *, name: str, pythonpath: Sequence[Path] = (),
               timeout: float = 300, python: str | None = None, isolated: bool = True) -> Check:
    """Run pytest on `targets` inside `root`; conftest files and the project's ini are ignored when
    `isolated` (generated tests need neither)."""
    if not targets:
        return Check(name, "skip", "nothing to run")
    python = python or sys.executable
    with tempfile.TemporaryDirectory(prefix="porter-pytest-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
        argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root)]
        if isolated:
            argv += ["--noconftest", "-c", str(ini)]
        argv += list(targets)
        # No bytecode in the worktree; no third-party pytest plugins of porter's own environment
        # (they cost seconds to load and mean nothing to the fork's tests).
        env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        paths = [str(p) for p in pythonpath] + [str(root)]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        result = proc.run(argv, cwd=root, extra_env=env, timeout=timeout)
    shown = f"python -m pytest -q {' '.join(targets)}" + (f"  (PYTHONPATH={os.pathsep.join(str(p) for p in pythonpath)})" if pythonpath else "")
    lines = (result.stdout + result.stderr).strip().splitlines()
    summary = lines[-1] if lines else ""
    if "No module named pytest" in result.stderr:
        return Check(name, "skip", "pytest is not installed in porter's environment", shown)
    if result.timed_out:
        return Check(name, "fail", f"timed out after {timeout:g} s", shown)
    counts = {kind: int(n) for n, kind in _SUMMARY.findall(summary)}
    if result.returncode == 0 and not counts.get("passed"):
        return Check(name, "skip", f"no test ran ({summary or 'no summary'})", shown)  # all skipped is not a pass
    if result.returncode == 0:
        return Check(name, "pass", summary or "passed", shown)
    if result.returncode == 5:
        return Check(name, "skip", "no tests collected", shown)
    failing = tuple(line for line in lines if line.startswith(("FAILED", "ERROR")))[:20]
    return Check(name, "fail", summary or f"pytest exit {result.returncode}", shown, items=failing or tuple(lines[-10:]))


def validate(
    root: Path,
    *,
    changed: Iterable[str],
    generated_tests: Sequence[str],
    reanalyze: Callable[[Path], Sequence[DriftRecord]] | None,
    needs_human: Iterable[str],
    plugin_tests: Sequence[str] = (),
    upstream_trees: dict[str, Path] | None = None,
) -> Validation:
    checks = [byte_compile(root, changed)]
    residual: tuple[DriftRecord, ...] = ()
    if reanalyze is not None:
        check, residual = residual_drift(reanalyze(root), needs_human)
        checks.append(check)
    else:
        checks.append(Check("residual drift", "skip", "no analysis available to re-run"))
    checks.append(replace(run_pytest(root, list(generated_tests), name="generated shim tests"), required=True))
    for label, tree in (upstream_trees or {}).items():
        if plugin_tests:
            checks.append(run_pytest(root, list(plugin_tests), name=f"plugin tests vs {label}", pythonpath=[tree],
                                     isolated=False))
    return Validation(tuple(checks), residual)
