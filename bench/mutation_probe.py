"""Mutation probe over porter's core: do the tests fail when the code is wrong?

    .venv/bin/python bench/mutation_probe.py [--per-target 3] [--only redact,slug] [--list]

For each target (a module and the functions in it that implement a rule: redaction, slugs,
version guards, drift, version ranges, the branch move, exit codes, the host lock, merge
conflict keys), the probe makes small AST mutants (a comparison flipped, `and`/`or` swapped, a
condition negated, a constant changed, a returned value replaced, an element dropped from a
pattern table), applies each to a copy of the tree, runs the tests that cover that module, and
calls the mutant killed when they fail (or time out). Mutants are chosen deterministically
(seeded) so two runs compare. Results: a table on stdout and bench/results/mutation_probe.json.

Not part of CI: a run takes minutes. The survivors are the list to read: each is either a test
gap (write the test) or an equivalent mutant (say why in the note).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Target:
    name: str
    module: str  # path relative to the repository root
    functions: tuple[str, ...]  # top-level functions or Class.method names whose bodies are mutated
    tests: tuple[str, ...]  # pytest node ids / paths that cover them


TARGETS = (
    Target("redact", "porter/redact.py",
           ("is_secret_key", "_userinfo", "_assignment", "_flag", "_redact_fragments", "_redact_inline_pem",
            "Redactor.line", "redact_data", "sanitize_terminal", "_TOKEN_PATTERNS"),
           ("tests/test_secrets.py", "tests/test_foundation.py")),
    Target("slug", "porter/slug.py", ("slugify", "port_branch"), ("tests/test_foundation.py", "tests/upgrade")),
    Target("guards", "porter/upgrade/guards.py", ("*",), ("tests/upgrade",)),
    Target("drift", "porter/upgrade/drift.py", ("*",), ("tests/upgrade",)),
    Target("outcome", "porter/upgrade/outcome.py", ("*",), ("tests/upgrade",)),
    Target("version-ranges", "porter/kb/matcher.py", ("_version_check",), ("tests/kb",)),
    Target("env-facts", "porter/kb/env.py", ("parse_env", "version_facts", "normalise_package"), ("tests/kb",)),
    Target("exit-codes", "porter/cliutil.py", ("command_context", "storage_problem"),
           ("tests/test_foundation.py", "tests/test_secrets.py")),
    Target("host-lock", "porter/transports/script.py", ("lock_lines", "run_script", "kill_script"),
           ("tests/smoke/test_smoke_local_runs.py", "tests/hosts/test_hosts_transports.py")),
    Target("yaml-budget", "porter/yamlio.py", ("_check_alias_budget", "load_yaml_text"), ("tests/test_secrets.py",)),
    Target("branch-move", "porter/port/publish.py", ("*",), ("tests/port",)),
    Target("conflict-keys", "porter/port/fork_merge.py", ("conflict_key", "*resolution*"), ("tests/port",)),
)


# --- mutation operators -----------------------------------------------------------------------
_CMP_SWAP = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE,
             ast.GtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}


@dataclass(frozen=True)
class Mutant:
    target: str
    function: str
    line: int
    kind: str
    description: str


def _function_nodes(tree: ast.Module, wanted: tuple[str, ...]) -> list[tuple[str, ast.AST]]:
    """(qualified name, node) of the functions to mutate; '*' takes every function, 'x*' a prefix
    pattern; a module-level assignment of that name (a pattern table) counts too."""
    found: list[tuple[str, ast.AST]] = []

    def matches(name: str) -> bool:
        for w in wanted:
            if w == "*" or w == name or (w.startswith("*") and w.endswith("*") and w.strip("*") in name):
                return True
        return False

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and matches(node.name):
            found.append((node.name, node))
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and matches(f"{node.name}.{item.name}"):
                    found.append((f"{node.name}.{item.name}", item))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in wanted:
                    found.append((t.id, node))
    return found


def _candidates(node: ast.AST) -> list[tuple[ast.AST, str, str]]:
    """(node, kind, description) of every place one operator applies inside `node`."""
    out: list[tuple[ast.AST, str, str]] = []
    # type annotations are not run (`from __future__ import annotations`): mutating them only
    # makes equivalent mutants
    skip: set[int] = set()
    for sub in ast.walk(node):
        notes = [getattr(sub, "returns", None), getattr(sub, "annotation", None)]
        for note in notes:
            if isinstance(note, ast.AST):
                skip.update(id(n) for n in ast.walk(note))
    for sub in ast.walk(node):
        if id(sub) in skip:
            continue
        if isinstance(sub, ast.Compare) and type(sub.ops[0]) in _CMP_SWAP:
            out.append((sub, "compare", f"{type(sub.ops[0]).__name__} -> {_CMP_SWAP[type(sub.ops[0])].__name__}"))
        elif isinstance(sub, ast.BoolOp):
            out.append((sub, "boolop", "and <-> or"))
        elif isinstance(sub, ast.If):
            out.append((sub, "negate-if", "if c -> if not c"))
        elif isinstance(sub, ast.Return) and sub.value is not None and not (
                isinstance(sub.value, ast.Constant) and sub.value.value is None):
            out.append((sub, "return-none", "return x -> return None"))
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, int) and not isinstance(sub.value, bool):
            out.append((sub, "constant", f"{sub.value} -> {sub.value + 1}"))
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, bool):
            out.append((sub, "bool", f"{sub.value} -> {not sub.value}"))
        elif isinstance(sub, (ast.Tuple, ast.List)) and len(sub.elts) >= 2 and isinstance(getattr(sub, "ctx", None), ast.Load):
            out.append((sub, "drop-element", f"drop element 1 of {len(sub.elts)}"))
    return out


def _apply(sub: ast.AST, kind: str) -> None:
    if kind == "compare":
        sub.ops[0] = _CMP_SWAP[type(sub.ops[0])]()
    elif kind == "boolop":
        sub.op = ast.Or() if isinstance(sub.op, ast.And) else ast.And()
    elif kind == "negate-if":
        sub.test = ast.UnaryOp(op=ast.Not(), operand=sub.test)
    elif kind == "return-none":
        sub.value = ast.Constant(value=None)
    elif kind == "constant":
        sub.value = sub.value + 1
    elif kind == "bool":
        sub.value = not sub.value
    elif kind == "drop-element":
        del sub.elts[0]


def plan_mutants(target: Target, per_function: int, seed: int) -> list[tuple[Mutant, str]]:
    """Mutants of one target as (description, mutated module source)."""
    path = ROOT / target.module
    if not path.is_file():
        return []
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    rng = random.Random(f"{seed}:{target.name}")
    out: list[tuple[Mutant, str]] = []
    for qual, fn in _function_nodes(tree, target.functions):
        cands = _candidates(fn)
        rng.shuffle(cands)
        # logic mutants first; a function replaced by `return None` is the weakest test of a suite
        cands.sort(key=lambda c: c[1] == "return-none")
        for index in range(min(per_function, len(cands))):
            mutated = ast.parse(source)
            # find the same node again in a fresh tree: same position, same kind
            node, kind, description = cands[index]
            twin = next((n for n in ast.walk(mutated) if type(n) is type(node)
                         and getattr(n, "lineno", None) == getattr(node, "lineno", None)
                         and getattr(n, "col_offset", None) == getattr(node, "col_offset", None)), None)
            if twin is None:
                continue
            _apply(twin, kind)
            try:
                text = ast.unparse(ast.fix_missing_locations(mutated))
            except Exception:  # noqa: BLE001 - an operator that made invalid code is skipped
                continue
            out.append((Mutant(target.name, qual, getattr(node, "lineno", 0), kind, description), text))
    return out


def run_tests(tree: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[bool, float]:
    """True when the tests fail (the mutant is killed)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                              cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s)
        killed = done.returncode != 0
    except subprocess.TimeoutExpired:
        killed = True  # a mutant that hangs the tests is caught by them
    return killed, time.perf_counter() - start


def copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "bench", "*.egg-info", "runs", ".hypothesis")
    shutil.copytree(ROOT, dest, ignore=ignore, dirs_exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-function", type=int, default=1, help="mutants per mutated function (default 1)")
    ap.add_argument("--max-per-target", type=int, default=6, help="mutants per target at most (default 6)")
    ap.add_argument("--only", default="", help="comma-separated target names")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per test run")
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    args = ap.parse_args(argv)
    wanted = {t for t in args.only.split(",") if t}
    targets = [t for t in TARGETS if not wanted or t.name in wanted]

    planned: list[tuple[Target, Mutant, str]] = []
    for target in targets:
        mutants = plan_mutants(target, args.per_function, args.seed)
        rng = random.Random(f"{args.seed}:{target.name}:pick")
        rng.shuffle(mutants)
        for mutant, text in mutants[: args.max_per_target]:
            planned.append((target, mutant, text))
    if args.list:
        for _, m, _ in planned:
            print(f"{m.target:15} {m.function:28} line {m.line:4} {m.kind:13} {m.description}")
        print(f"{len(planned)} mutants")
        return 0

    results = []
    with tempfile.TemporaryDirectory(prefix="porter-mutants-") as tmp:
        tree = Path(tmp) / "tree"
        copy_tree(tree)
        for i, (target, mutant, text) in enumerate(planned, 1):
            path = tree / target.module
            original = path.read_text(encoding="utf-8")
            path.write_text(text, encoding="utf-8")
            try:
                killed, seconds = run_tests(tree, target.tests, args.timeout)
            finally:
                path.write_text(original, encoding="utf-8")
            results.append({**asdict(mutant), "killed": killed, "seconds": round(seconds, 1)})
            print(f"[{i}/{len(planned)}] {'killed  ' if killed else 'SURVIVED'} {mutant.target}:{mutant.function} "
                  f"line {mutant.line} {mutant.kind} ({mutant.description}) {seconds:.0f}s", flush=True)

    killed = sum(r["killed"] for r in results)
    print()
    print("| target | mutants | killed |")
    print("|---|---|---|")
    for target in targets:
        rows = [r for r in results if r["target"] == target.name]
        if rows:
            print(f"| {target.name} | {len(rows)} | {sum(r['killed'] for r in rows)} |")
    rate = killed / len(results) if results else 0.0
    print(f"\nkill rate: {killed}/{len(results)} = {rate:.1%}")
    for r in results:
        if not r["killed"]:
            print(f"survivor: {r['target']}:{r['function']} line {r['line']} {r['kind']} ({r['description']})")
    out = ROOT / "bench" / "results" / "mutation_probe.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"kill_rate": rate, "killed": killed, "total": len(results), "mutants": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
