"""Stage 4 of a port: validation of the branch before its ref may move. Byte-compile what changed,
re-run the drift analysis on the new tree, import every touched plugin module and the plugin's
entry points against the materialised target tree (in a subprocess, the tree first on sys.path,
stand-ins only for modules that cannot exist there, each reported), run the generated shim tests
(and, where configured, the plugin's own tests against the baseline and the target upstream trees).

A check marked `required` must pass: a skip there (nothing ran) keeps the branch from moving.

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
    smoke: dict[str, Any] | None = None  # the import smoke's verdict (imports_verdict)

    def imports_verdict(self) -> dict[str, Any]:
        return dict(self.smoke or {"verdict": "not run", "line": "imports at the target: not checked"})

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failing(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [c.to_dict() for c in self.checks],
                "residual": [r.key for r in self.residual], "imports_at_target": self.imports_verdict()}


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
               timeout: float = 300, python: str | None = None, isolated: bool = True, pythonpath_label: str = "") -> Check:
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
    # Shown in the PR material: no local paths, the tree is named by what it is.
    shown = f"python -m pytest -q {' '.join(targets)}" + (f"  (PYTHONPATH=<{pythonpath_label or 'upstream tree'}>)" if pythonpath else "")
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


# ---------------------------------------------------------------- import smoke

# Modules that exist only with an NPU, its drivers, or a compiled build: stood in on a CPU machine.
DEVICE_PACKAGES = ("torch_npu", "torchair", "acl", "tbe", "te", "npu_bridge", "mindie_turbo", "mindspore", "aclnn",
                   "triton_ascend", "mooncake", "torch_atb", "atb_llm", "cpu_binding", "ascend_transport")
# Compiled extensions (`vllm._C`, `vllm_ascend.vllm_ascend_C`) and files a build generates (`_build_info`).
_COMPILED = re.compile(r"(^|\.)(_C|_\w+_C|\w+_C|_build_info)$")
SMOKE_CHILD = Path(__file__).resolve().parent / "smoke_child.py"


def device_modules(upstream: str, plugin: str, roots: Sequence[Path]) -> list[str]:
    """Stand-in candidates: the device packages, plus the compiled extensions (`*_C`) that the
    upstream and the plugin import, which a source tree never contains."""
    names = set(DEVICE_PACKAGES) | {f"{plugin}._build_info", f"{upstream}._C"}
    pattern = re.compile(rf"\b((?:{re.escape(upstream)}|{re.escape(plugin)})(?:\.\w+)*)")
    for root in roots:
        for path in _py_files(root):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if "_C" not in text and "_build_info" not in text:
                continue
            names.update(m.group(1) for m in pattern.finditer(text) if _COMPILED.search(m.group(1)))
    return sorted(names)


# Distribution name -> import name where they differ (the rest: lowercase, `-` -> `_`).
_IMPORT_NAMES = {"pyzmq": "zmq", "pillow": "PIL", "protobuf": "google", "pyyaml": "yaml", "py-cpuinfo": "cpuinfo",
                 "opencv-python-headless": "cv2", "opencv-python": "cv2", "python-json-logger": "pythonjsonlogger",
                 "lm-format-enforcer": "lmformatenforcer", "scikit-learn": "sklearn", "msgpack-python": "msgpack",
                 "opentelemetry-sdk": "opentelemetry", "opentelemetry-api": "opentelemetry",
                 "opentelemetry-exporter-otlp": "opentelemetry", "beautifulsoup4": "bs4", "attrs": "attr"}
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9_.\-]*)")


def declared_dependencies(roots: Sequence[Path]) -> list[str]:
    """Import names of what the upstream and the plugin declare they need (requirements*.txt,
    requirements/*.txt, pyproject dependencies): the only third-party modules the smoke may stand in."""
    names: set[str] = set()
    for root in roots:
        files = [*root.glob("requirements*.txt"), *(root / "requirements").glob("*.txt")] if root.is_dir() else []
        lines: list[str] = []
        for path in files:
            lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
        pyproject = root / "pyproject.toml"
        if pyproject.is_file():
            text = pyproject.read_text(encoding="utf-8", errors="replace")
            block = re.search(r"(?ms)^dependencies\s*=\s*\[(.*?)\]", text)
            if block:
                lines += [item.strip().strip("'\",") for item in block.group(1).splitlines()]
        for line in lines:
            match = _REQUIREMENT.match(line)
            if not match or line.lstrip().startswith(("#", "-")):
                continue
            dist = match.group(1).split("[")[0].lower()
            names.add(_IMPORT_NAMES.get(dist, dist.replace("-", "_").replace(".", "_")))
    return sorted(names)


def _py_files(root: Path) -> Iterable[Path]:
    return root.rglob("*.py") if root.is_dir() else ()


def touched_modules(root: Path, changed: Iterable[str], plugin_root: str = "") -> list[str]:
    """Dotted names of the changed plugin modules (generated tests and files outside packages left out)."""
    base = (root / plugin_root) if plugin_root else root
    out = []
    for rel in sorted(set(changed)):
        path = root / rel
        if not rel.endswith(".py") or not path.is_file():
            continue
        try:
            parts = list(path.relative_to(base).with_suffix("").parts)
        except ValueError:
            continue
        if not parts or parts[0] in ("tests", "test") or not (base / parts[0] / "__init__.py").is_file():
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append(".".join(parts))
    return out


def entry_points_of(root: Path) -> list[str]:
    """`module:attr` entry points the plugin declares (setup.py, setup.cfg, pyproject.toml)."""
    found: list[str] = []
    spec = re.compile(r"=\s*([A-Za-z_][\w.]*)\s*:\s*([A-Za-z_][\w.]*)")
    for name in ("setup.py", "setup.cfg", "pyproject.toml"):
        path = root / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        section = text[text.find("entry_points"):] if name == "setup.py" and "entry_points" in text else \
            text if "entry" in text else ""
        for match in spec.finditer(section):
            value = f"{match.group(1)}:{match.group(2)}"
            if value not in found and not match.group(1).startswith(("os.", "sys.")):
                found.append(value)
    return found


def run_smoke(root: Path, *, tree: Path | None, upstream: str, plugin: str, version: str, modules: Sequence[str],
              entry_points: Sequence[str], device: Sequence[str], environment: Sequence[str] = (), plugin_root: str = "",
              timeout: float = 600, python: str | None = None) -> dict[str, Any]:
    """One smoke subprocess against `tree` (None: the installed upstream). Returns its JSON document,
    or {"error": ...} when the child did not report (crash, timeout)."""
    import json

    config = {"tree": str(tree) if tree else "", "plugin_root": str((root / plugin_root) if plugin_root else root),
              "upstream": upstream, "plugin": plugin, "version": version, "modules": list(modules),
              "entry_points": list(entry_points), "device": list(device), "environment": list(environment)}
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", f"{upstream.upper()}_VERSION": version,
           "PYTHONPATH": ""}
    result = proc.run([python or sys.executable, str(SMOKE_CHILD), json.dumps(config)], cwd=root, extra_env=env,
                      timeout=timeout)
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("PORTER-SMOKE "):
            return json.loads(line[len("PORTER-SMOKE "):])
    tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
    return {"error": "timed out" if result.timed_out else f"exit {result.returncode}: {' | '.join(tail)}"}


def installed_upstream(upstream: str, version: str, python: str | None = None) -> bool:
    """True when the environment has the real upstream at `version` installed (then it is used)."""
    probe = ("import importlib.metadata as m, sys\n"
             f"try:\n    sys.exit(0 if m.version({upstream!r}) == {version!r} else 1)\nexcept Exception:\n    sys.exit(1)\n")
    return proc.run([python or sys.executable, "-c", probe], timeout=60).returncode == 0


def import_smoke(root: Path, *, modules: Sequence[str], entry_points: Sequence[str], upstream: str, plugin: str,
                 target_tree: Path | None, target_version: str, target_label: str, baseline_tree: Path | None = None,
                 baseline_version: str = "", needs_human: Iterable[str] = (), human_symbols: Iterable[str] = (),
                 plugin_root: str = "", control_root: Path | None = None) -> tuple[Check, dict[str, Any]]:
    """Import the touched modules and entry points at the target. A module failing at the target
    but importing at the baseline is the port's failure; failing at both is a limit of this
    machine (stand-ins), listed but not counted. Failures explained by a finding handed to a human
    are expected; any other failure fails the check."""
    if not modules and not entry_points:
        verdict = {"verdict": "not run", "line": "imports at the target: nothing to import (no plugin module changed)"}
        return Check("imports at the target", "skip", verdict["line"]), verdict
    use_installed = installed_upstream(upstream, target_version)
    tree = None if use_installed else target_tree
    if tree is None and not use_installed:
        verdict = {"verdict": "not run", "line": f"imports at the target: no {target_label} tree to import against"}
        return Check("imports at the target", "skip", verdict["line"]), verdict
    roots = [p for p in (root / plugin_root if plugin_root else root, tree) if p]
    device = device_modules(upstream, plugin, roots)
    environment = declared_dependencies(roots + ([baseline_tree] if baseline_tree else []))
    at_target = run_smoke(root, tree=tree, upstream=upstream, plugin=plugin, version=target_version, modules=modules,
                          entry_points=entry_points, device=device, environment=environment, plugin_root=plugin_root)
    if "error" in at_target:
        verdict = {"verdict": "no", "line": f"imports at the target: no, the import smoke itself failed ({at_target['error']})",
                   "failed": [], "standins": {}}
        return Check("imports at the target", "fail", verdict["line"], required=True), verdict
    failing = [r for r in at_target["results"] if not r["ok"]]
    at_baseline: dict[str, Any] = {}
    if failing and control_root is not None:
        # The unedited plugin at the same target: a failure it shares is not the edits' doing.
        at_baseline = run_smoke(control_root, tree=tree, upstream=upstream, plugin=plugin, version=target_version,
                                modules=[r["name"] for r in failing if not r.get("entry_point")],
                                entry_points=[r["name"] for r in failing if r.get("entry_point")], device=device,
                                environment=environment, plugin_root=plugin_root)
    elif failing and baseline_tree is not None:
        at_baseline = run_smoke(root, tree=baseline_tree, upstream=upstream, plugin=plugin, version=baseline_version,
                                modules=[r["name"] for r in failing if not r.get("entry_point")],
                                entry_points=[r["name"] for r in failing if r.get("entry_point")], device=device,
                                environment=environment, plugin_root=plugin_root)
    base_ok = {r["name"] for r in at_baseline.get("results", []) if r["ok"]}
    symbols = [s for s in human_symbols if s]
    port_fail, expected, machine = [], [], []
    for r in failing:
        if at_baseline and r["name"] not in base_ok:
            machine.append(r)  # fails with the baseline upstream as well: not the port's doing
        elif r.get("standin") or _third_party_missing(r.get("error", ""), upstream, plugin):
            machine.append(r)  # a library this machine lacks, or a stand-in in the way: not the port's doing
        elif any(_mentions(r.get("error", ""), s) for s in symbols):
            expected.append(r)
        else:
            port_fail.append(r)
    mode = f"installed {upstream} {target_version}" if use_installed else f"{target_label} source tree"
    standins = at_target.get("standins", {})
    total = len(modules) + len(entry_points)
    answer = "no" if port_fail or expected else ("partly" if machine else "yes")
    why = "; ".join(f"{r['name']}: {r['error']}" + (f" ({r['where']})" if r.get("where") else "")
                    for r in (port_fail + expected)[:3])
    if answer == "no":
        line = f"imports at {target_label}: no - {len(port_fail) + len(expected)} of {total} fail: {why}"
    elif answer == "partly":
        line = (f"imports at {target_label}: yes for {total - len(machine)} of {total} touched modules and entry points; "
                f"{len(machine)} not provable on this machine (a library missing here, or failing at the baseline too)")
    else:
        line = f"imports at {target_label}: yes ({len(modules)} touched module(s), {len(entry_points)} entry point(s))"
    verdict = {"verdict": answer, "line": line, "mode": mode, "modules": list(modules), "entry_points": list(entry_points),
               "failed": port_fail, "expected": expected, "not_provable": machine, "standins": standins,
               "upstream_file": at_target.get("upstream_file", "")}
    items = tuple(f"{r['name']}: {r['error']}" + (f" at {r['where']}" if r.get("where") else "") for r in port_fail) + \
        tuple(f"(needs a human) {r['name']}: {r['error']}" for r in expected) + \
        tuple(f"(fails at the baseline too) {r['name']}: {r['error']}" for r in machine)
    verdict_text = "fail" if port_fail else "pass"
    detail = line + f" [{mode}; stand-ins: device {', '.join(standins.get('device', [])) or 'none'}; " \
        f"missing here {', '.join(standins.get('environment', [])) or 'none'}]"
    return Check("imports at the target", verdict_text, detail, items=items, required=True), verdict


def _third_party_missing(error: str, upstream: str, plugin: str) -> bool:
    """A library outside the upstream and the plugin is missing here, also when a compat shim's
    ImportError carries it for the candidate it tried (`tried a.b (ModuleNotFoundError: No module
    named 'uvloop')`): the target path exists, this machine cannot import it."""
    return any(name.split(".")[0] not in (upstream, plugin)
               for name in re.findall(r"ModuleNotFoundError: No module named '([\w.]+)'", error))


def _mentions(error: str, symbol: str) -> bool:
    """The error names the finding's symbol (`cannot import name 'X' from 'a.b'`, `No module named 'a.b'`)."""
    module, _, name = symbol.rpartition(".")
    return bool(name) and (f"'{name}'" in error and (not module or module in error or "cannot import name" in error)) \
        or f"'{symbol}'" in error


def validate(
    root: Path,
    *,
    changed: Iterable[str],
    generated_tests: Sequence[str] | None,
    reanalyze: Callable[[Path], Sequence[DriftRecord]] | None,
    needs_human: Iterable[str],
    plugin_tests: Sequence[str] = (),
    upstream_trees: dict[str, Path] | None = None,
    target_tree: Path | None = None,
    target_label: str = "",
    upstream_package: str = "",
    entry_points: Sequence[str] = (),
    plugin_root: str = "",
    baseline_tree: Path | None = None,
    human_symbols: Sequence[str] = (),
    control_root: Path | None = None,
) -> Validation:
    changed = list(changed)
    needs_human = list(needs_human)
    checks = [byte_compile(root, changed)]
    residual: tuple[DriftRecord, ...] = ()
    if reanalyze is not None:
        check, residual = residual_drift(reanalyze(root), needs_human)
        checks.append(check)
    else:
        checks.append(Check("residual drift", "skip", "no analysis available to re-run"))
    smoke = None
    if upstream_package and checks[0].ok:
        modules = touched_modules(root, changed, plugin_root)
        plugin = modules[0].split(".")[0] if modules else ""
        points = list(entry_points) or entry_points_of(root / plugin_root if plugin_root else root)
        points = [p for p in points if not plugin or p.split(":")[0].split(".")[0] == plugin]
        label, version = (target_label.rpartition(" ")[2], target_label) if target_label else ("", "")
        check, smoke = import_smoke(root, modules=modules, entry_points=points, upstream=upstream_package, plugin=plugin,
                                    target_tree=target_tree, target_version=label, target_label=version,
                                    baseline_tree=baseline_tree, baseline_version=_baseline_version(upstream_trees, target_label),
                                    needs_human=needs_human, human_symbols=human_symbols, plugin_root=plugin_root,
                                    control_root=control_root)
        checks.append(check)
    if generated_tests is not None:  # None: this kind of run generates no tests (edits); [] for shims is a failure
        checks.append(replace(run_pytest(root, list(generated_tests), name="generated shim tests"), required=True))
    for label, tree in (upstream_trees or {}).items():
        if plugin_tests:
            checks.append(run_pytest(root, list(plugin_tests), name=f"plugin tests vs {label}", pythonpath=[tree],
                                     isolated=False, pythonpath_label=f"{label} tree"))
    return Validation(tuple(checks), residual, smoke)


def _baseline_version(trees: dict[str, Path] | None, target_label: str) -> str:
    for label in trees or {}:
        if label != target_label:
            return label.rpartition(" ")[2]
    return ""
