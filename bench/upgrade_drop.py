"""A real drop run: `porter upgrade vllm-ascend --drop OLD` on the parent of a maintainers' drop commit,
compared with what the maintainers committed (not part of CI; needs the vllm-ascend mirror and the
vllm trees the replay benchmark uses).

    .venv/bin/python bench/upgrade_drop.py [--case f12f76d7ba] [--repo MIRROR] [--trees /work/cache]

Per replay drop case: a clone of the parent commit (shared with the mirror), the porter run that
writes `ascend-port/vllm-drop-OLD`, then: does the branch byte-compile (porter's own validation),
how many of the guard blocks the maintainers collapsed or retargeted porter edited the same way,
and per changed file how close porter's result is to the maintainers' (line similarity; identical
files counted). Results: bench/results/upgrade_drop.json.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "bench" / "replay" / "cases"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def show(repo: Path, ref: str, path: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), "show", f"{ref}:{path}"], capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="f12f76d7ba")
    parser.add_argument("--repo", default="/work/.mirror/vllm-project+vllm-ascend/repo")
    parser.add_argument("--trees", default="/work/cache")
    args = parser.parse_args()
    case_file = next(CASES.glob(f"{args.case}*.json"))
    case = json.loads(case_file.read_text())
    old, new = case["old"], case["new"]
    work = Path(tempfile.mkdtemp(prefix="porter-drop-"))
    clone = work / "vllm-ascend"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", args.repo, str(clone)], check=True)
    git(clone, "checkout", "-q", "-b", "work", case["parent"])
    git(clone, "config", "user.name", "bench")
    git(clone, "config", "user.email", "bench@example.invalid")
    env = dict(os.environ, PORTER_CACHE_DIR=str(work / "cache"), PORTER_OFFLINE="1")
    run = subprocess.run([sys.executable, "-m", "porter", "upgrade", "vllm-ascend", "--to", new, "--from", old,
                          "--drop", old, "--plugin-path", str(clone), "--upstream-path", f"{old}={args.trees}/vllm-{old}",
                          "--upstream-path", f"{new}={args.trees}/vllm-{new}", "--json"],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    out = json.loads(run.stdout)
    port = out.get("port", {})
    edits = {(e["path"], e["line"]): e["action"] for e in out["drop"]["edits"]}
    truth = [g for g in case["guards"] if g["verdict"] in ("collapse", "retarget")]
    same = [g for g in truth if edits.get((g["path"], g["line"])) == g["verdict"]]
    files = []
    for path in sorted({g["path"] for g in truth}):
        parent, mine, theirs = (show(clone, ref, path) for ref in (case["parent"], port.get("branch", "HEAD"), case["commit"]))
        files.append({"path": path, "identical": mine == theirs,
                      "parent_vs_maintainers": round(difflib.SequenceMatcher(None, parent.splitlines(), theirs.splitlines()).ratio(), 3),
                      "porter_vs_maintainers": round(difflib.SequenceMatcher(None, mine.splitlines(), theirs.splitlines()).ratio(), 3)})
    result = {"case": case["id"], "exit_code": run.returncode, "branch": port.get("branch"), "branch_moved": port.get("branch_moved"),
              "validation": port.get("validation"), "guard_blocks_changed": len(truth), "same_edit": len(same),
              "missed": [f"{g['path']}:{g['line']} {g['verdict']}" for g in truth if g not in same],
              "files": files, "identical_files": sum(f["identical"] for f in files)}
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "upgrade_drop.json").write_text(json.dumps(result, indent=2))
    print(f"{case['id']} ({case['title']}): branch {result['branch']} moved={result['branch_moved']}, "
          f"byte-compile {'pass' if (port.get('validation') or {}).get('ok') else 'FAIL'}")
    print(f"guard blocks the maintainers changed: {len(truth)}; porter made the same edit: {len(same)} "
          f"({100 * len(same) / max(len(truth), 1):.0f} %)")
    print(f"files: {len(files)}, identical to the maintainers' result: {result['identical_files']}; "
          f"mean line similarity porter {sum(f['porter_vs_maintainers'] for f in files) / max(len(files), 1):.3f} "
          f"(parent {sum(f['parent_vs_maintainers'] for f in files) / max(len(files), 1):.3f})")


if __name__ == "__main__":
    main()
