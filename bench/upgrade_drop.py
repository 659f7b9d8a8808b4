"""Real drop runs: `porter upgrade vllm-ascend --drop OLD` on the parent of each maintainers' drop commit
(the replay cases of kind `drop`), compared with what the maintainers committed (not part of CI; needs
the vllm-ascend mirror and the vllm trees the replay benchmark uses).

    .venv/bin/python bench/upgrade_drop.py [--case ID ...] [--split dev|test] [--repo MIRROR]
                                           [--trees /work/cache] [--diffs DIR]

Per case: a clone of the parent commit (shared with the mirror), the porter run that writes
`ascend-port/vllm-drop-OLD` (worktree, validation, PR material: the path a user takes), then:
  * byte-compile: porter's own validation of the branch (every changed Python file compiles);
  * guard blocks: of the guards the maintainers collapsed or retargeted, how many porter edited the
    same way at the same place (`same_edit`), and how many guards the maintainers left alone porter
    edited anyway (`extra_edits`);
  * files: per file either side changed, line similarity (difflib ratio) of porter's result and of
    the parent against the maintainers' result, and whether porter's file is identical to theirs.
With --diffs DIR, `DIR/<case>/<path>.diff` holds porter's result against the maintainers' (dev
cases only: test cases are scored, not read; their missed guards are counted, not listed). Results: bench/results/upgrade_drop.json (per case and
per split); a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "bench" / "replay" / "cases"
RESULTS = ROOT / "bench" / "results"
CHANGED = ("collapse", "retarget")
PACKAGE = "vllm_ascend"


@dataclass
class FileScore:
    path: str
    identical: bool
    parent_vs_maintainers: float
    porter_vs_maintainers: float


@dataclass
class DropScore:
    case: str
    split: str
    title: str
    old: str
    new: str
    exit_code: int = 0
    error: str = ""
    branch: str | None = None
    byte_compiles: bool = False
    guard_blocks_changed: int = 0
    same_edit: int = 0
    extra_edits: int = 0  # porter collapsed/retargeted a guard the maintainers kept
    seconds: float = 0.0
    missed: list[str] = field(default_factory=list)
    files: list[FileScore] = field(default_factory=list)

    @property
    def identical_files(self) -> int:
        return sum(f.identical for f in self.files)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def show(repo: Path, ref: str, path: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), "show", f"{ref}:{path}"], capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else ""


def changed_files(repo: Path, a: str, b: str) -> set[str]:
    return {p for p in git(repo, "diff", "--name-only", a, b, "--", PACKAGE).splitlines()
            if p.endswith(".py") and "/tests/" not in p}


def ratio(a: str, b: str) -> float:
    return round(difflib.SequenceMatcher(None, a.splitlines(), b.splitlines(), autojunk=False).ratio(), 3)


def score_edits(case: dict[str, Any], edits: list[dict[str, Any]]) -> tuple[int, int, list[str]]:
    """(same edit, extra edits, missed labels): a guard matches an edit at its first line with its verdict,
    one edit per guard (two ternaries on one line need two edits: one never stands in for both)."""
    done: dict[tuple[str, int], list[str]] = {}
    for e in edits:
        if e["action"] in CHANGED:
            done.setdefault((e["path"], int(e["line"])), []).append(e["action"])
    same, missed = 0, []
    for g in case["guards"]:
        if g["verdict"] not in CHANGED:
            continue
        left = done.get((g["path"], int(g["line"])), [])
        if g["verdict"] in left:
            left.remove(g["verdict"])
            same += 1
        else:
            missed.append(f"{g['path']}:{g['line']} {g['guard'][:60]} ({g['verdict']}; porter: {left[0] if left else 'keep'})")
    kept = {(g["path"], int(g["line"])) for g in case["guards"] if g["verdict"] == "keep"}
    return same, sum(len(actions) for key, actions in done.items() if key in kept), missed


def run_case(case: dict[str, Any], repo: Path, trees: Path, diffs: Path | None) -> DropScore:
    old, new = case["old"], case["new"]
    score = DropScore(case=case["id"], split=case["split"], title=case.get("title", ""), old=old, new=new)
    work = Path(tempfile.mkdtemp(prefix="porter-drop-"))
    try:
        clone = work / "vllm-ascend"
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(repo), str(clone)], check=True)
        git(clone, "checkout", "-q", "-b", "work", case["parent"])
        git(clone, "config", "user.name", "bench")
        git(clone, "config", "user.email", "bench@example.invalid")
        env = dict(os.environ, PORTER_CACHE_DIR=str(work / "cache"), PORTER_OFFLINE="1", PYTHONPATH=str(ROOT))
        argv = [sys.executable, "-m", "porter", "upgrade", "vllm-ascend", "--to", new, "--from", old, "--drop", old,
                "--plugin-path", str(clone), "--upstream-path", f"{old}={trees}/vllm-{old}",
                "--upstream-path", f"{new}={trees}/vllm-{new}", "--json"]
        t0 = time.perf_counter()
        run = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
        score.seconds = round(time.perf_counter() - t0, 1)
        score.exit_code = run.returncode
        try:
            out = json.loads(run.stdout)
        except json.JSONDecodeError:
            score.error = (run.stderr or run.stdout).strip()[-400:]
            return score
        if "error" in out:
            score.error = str(out["error"].get("message"))
            return score
        port = out.get("port") or {}
        score.branch = port.get("branch")
        score.byte_compiles = any(c.get("name") == "byte-compile" and c.get("verdict") == "pass"
                                  for c in (port.get("validation") or {}).get("checks", []))
        score.guard_blocks_changed = sum(1 for g in case["guards"] if g["verdict"] in CHANGED)
        score.same_edit, score.extra_edits, missed = score_edits(case, (out.get("drop") or {}).get("edits", []))
        score.missed = missed if case["split"] == "dev" else [f"{len(missed)} (test: scored, not listed)"] if missed else []
        mine_ref = score.branch or "HEAD"
        paths = changed_files(clone, case["parent"], case["commit"]) | (
            changed_files(clone, case["parent"], mine_ref) if score.branch else set())
        for path in sorted(paths):
            parent, mine, theirs = (show(clone, ref, path) for ref in (case["parent"], mine_ref, case["commit"]))
            score.files.append(FileScore(path, mine == theirs, ratio(parent, theirs), ratio(mine, theirs)))
            if diffs is not None and case["split"] == "dev" and mine != theirs:
                target = diffs / case["id"] / f"{path}.diff"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text("".join(difflib.unified_diff(mine.splitlines(True), theirs.splitlines(True),
                                                               f"porter/{path}", f"maintainers/{path}", n=2)))
        return score
    finally:
        shutil.rmtree(work, ignore_errors=True)


def pct(num: int, den: int) -> str:
    return f"{100 * num / den:.0f} % ({num}/{den})" if den else "n/a"


def mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def totals(scores: list[DropScore]) -> dict[str, Any]:
    files = [f for s in scores for f in s.files]
    return {"cases": len(scores), "byte_compiles": sum(s.byte_compiles for s in scores),
            "guard_blocks_changed": sum(s.guard_blocks_changed for s in scores),
            "same_edit": sum(s.same_edit for s in scores), "extra_edits": sum(s.extra_edits for s in scores),
            "files": len(files), "identical_files": sum(f.identical for f in files),
            "porter_vs_maintainers": mean([f.porter_vs_maintainers for f in files]),
            "parent_vs_maintainers": mean([f.parent_vs_maintainers for f in files]),
            "errors": sum(1 for s in scores if s.error)}


def table(scores: list[DropScore], by_split: dict[str, dict[str, Any]]) -> str:
    rows = ["| case | split | OLD→NEW | guard blocks same edit | extra edits | byte-compiles | identical files | "
            "similarity porter (parent) | time |", "|---|---|---|---|---|---|---|---|---|"]
    for s in scores:
        sims = mean([f.porter_vs_maintainers for f in s.files]), mean([f.parent_vs_maintainers for f in s.files])
        rows.append(f"| {s.case[:10]} | {s.split} | {s.old}→{s.new} | {pct(s.same_edit, s.guard_blocks_changed)} | "
                    f"{s.extra_edits} | {'yes' if s.byte_compiles else 'NO'} | {s.identical_files}/{len(s.files)} | "
                    f"{sims[0]} ({sims[1]}) | {s.seconds:.0f} s{' ERROR ' + s.error[:60] if s.error else ''} |")
    rows += ["", "| split | cases | guard blocks same edit | extra edits | byte-compiles | identical files | "
                 "similarity porter (parent) |", "|---|---|---|---|---|---|---|"]
    for name, t in by_split.items():
        rows.append(f"| {name} | {t['cases']} | {pct(t['same_edit'], t['guard_blocks_changed'])} | {t['extra_edits']} | "
                    f"{t['byte_compiles']}/{t['cases']} | {t['identical_files']}/{t['files']} | "
                    f"{t['porter_vs_maintainers']} ({t['parent_vs_maintainers']}) |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", default=[], help="case id or prefix (repeatable); default: every drop case")
    parser.add_argument("--split", choices=["dev", "test"])
    parser.add_argument("--repo", type=Path, default=Path("/work/.mirror/vllm-project+vllm-ascend/repo"))
    parser.add_argument("--trees", type=Path, default=Path("/work/cache"))
    parser.add_argument("--diffs", type=Path, help="write porter-vs-maintainers diffs of dev cases here")
    parser.add_argument("--out", type=Path, default=RESULTS / "upgrade_drop.json")
    args = parser.parse_args(argv)
    cases = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(CASES.glob("*.json"))]
    cases = [c for c in cases if c.get("kind") == "drop"]
    if args.case:
        cases = [c for c in cases if any(c["id"].startswith(w) for w in args.case)]
    if args.split:
        cases = [c for c in cases if c["split"] == args.split]
    if not cases:
        print("no drop case selected", file=sys.stderr)
        return 2
    missing = [f"vllm-{v}" for c in cases for v in (c["old"], c["new"]) if not (args.trees / f"vllm-{v}" / "vllm").is_dir()]
    if missing:
        print(f"missing vllm trees under {args.trees}: {', '.join(sorted(set(missing)))}", file=sys.stderr)
        return 3
    scores = []
    for case in cases:
        print(f"{case['id']} ({case['split']}): porter --drop {case['old']} ...", file=sys.stderr, flush=True)
        scores.append(run_case(case, args.repo, args.trees, args.diffs))
    by_split = {name: totals([s for s in scores if s.split == name]) for name in ("dev", "test")
                if any(s.split == name for s in scores)}
    by_split["all"] = totals(scores)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": "porter.bench.upgrade_drop/2", "splits": by_split,
           "cases": [{**asdict(s), "identical_files": s.identical_files} for s in scores]}
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(table(scores, by_split))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
