"""Real-world check of `porter upgrade` without --dry-run (not part of CI).

    .venv/bin/python bench/port.py [--plugin 0.11.0] [--baseline 0.11.0] [--target 0.13.0] [--later-plugin 0.13.0]

Needs the unpacked wheels that bench/upgrade.py leaves in bench/.data/trees (vllm-ascend-<v>,
vllm-<v>). Steps: import the vllm-ascend release into a fresh git repository (one commit), run
`porter upgrade vllm-ascend --to TARGET --from BASELINE --plugin-path REPO --upstream-path ...` in
a subprocess with a private cache, then report how many findings were bridged automatically, how
many were handed to a human, the validation, and, for every moved/renamed name porter bridged,
whether the later plugin release imports the new name from the module porter chose.
Results: bench/results/port.json and a Markdown summary on stdout.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREES = ROOT / "bench" / ".data" / "trees"
RESULTS = ROOT / "bench" / "results"


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "import", "GIT_AUTHOR_EMAIL": "import@bench.invalid",
           "GIT_COMMITTER_NAME": "import", "GIT_COMMITTER_EMAIL": "import@bench.invalid"}
    subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=repo, env=env, check=True, capture_output=True)


def imports_of(root: Path, name: str) -> set[str]:
    """Modules the plugin tree imports `name` from (single-line, parenthesised and backslash forms)."""
    modules: set[str] = set()
    pattern = re.compile(r"from\s+(vllm[\w.]*)\s+import\s+(\([^)]*\)|(?:[^\n\\]|\\\n)*)")
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if name not in text:
            continue
        for match in pattern.finditer(text):
            if re.search(rf"\b{re.escape(name)}\b", match.group(2)):
                modules.add(match.group(1))
    return modules


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugin", default="0.11.0")
    parser.add_argument("--baseline", default="0.11.0")
    parser.add_argument("--target", default="0.13.0")
    parser.add_argument("--later-plugin", default="0.13.0")
    args = parser.parse_args(argv)
    plugin_tree = TREES / f"vllm-ascend-{args.plugin}"
    later_tree = TREES / f"vllm-ascend-{args.later_plugin}"
    trees = {v: TREES / f"vllm-{v}" for v in (args.baseline, args.target)}
    missing = [str(p) for p in (plugin_tree, later_tree, *trees.values()) if not p.is_dir()]
    if missing:
        print(f"missing unpacked wheels: {', '.join(missing)}; run bench/upgrade.py first", file=sys.stderr)
        return 3

    work = Path(tempfile.mkdtemp(prefix="porter-bench-port-"))
    try:
        repo = work / "vllm-ascend"
        shutil.copytree(plugin_tree / "vllm_ascend", repo / "vllm_ascend")
        git(repo, "init", "-q")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"vllm-ascend {args.plugin} (imported from the PyPI wheel)")
        argv_porter = [sys.executable, "-m", "porter", "upgrade", "vllm-ascend", "--to", args.target, "--from", args.baseline,
                       "--plugin-path", str(repo), "--json"]
        for version, tree in trees.items():
            argv_porter += ["--upstream-path", f"{version}={tree}"]
        env = {**os.environ, "PORTER_CACHE_DIR": str(work / "cache"), "PYTHONPATH": str(ROOT)}
        started = time.perf_counter()
        run = subprocess.run(argv_porter, cwd=work, env=env, capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - started
        doc = json.loads(run.stdout)
        if "error" in doc:
            print(json.dumps(doc["error"], indent=2), file=sys.stderr)
            return run.returncode
        port, records = doc["port"], {r["key"]: r for r in doc["analysis"]["records"]}
        rows, verdicts = [], collections.Counter()
        for key in port["bridged"]:
            record = records[key]
            if record["family"] not in ("F2", "F2r") or not record["new_location"]:
                continue
            new = record["new_location"]
            name = new["qualname"].split(".")[-1]
            theirs = imports_of(later_tree / "vllm_ascend", name)
            verdict = "same module" if new["module"] in theirs else ("not imported" if not theirs else "different module")
            verdicts[verdict] += 1
            rows.append((record["symbol"], f"{new['module']}.{name}", verdict, ", ".join(sorted(theirs)) or "—"))
        summary = {
            "pair": f"vllm-ascend {args.plugin} on vllm {args.baseline} -> {args.target}",
            "wall_s": round(wall, 1),
            "exit_code": run.returncode,
            "findings": len(records),
            "by_family": dict(collections.Counter(r["family"] for r in records.values())),
            "bridged": len(port["bridged"]),
            "needs_human": len(port["needs_human"]),
            "needs_human_by_family": dict(collections.Counter(k.split(":")[0] for k in port["needs_human"])),
            "commits": len(port["commits"]),
            "validation": [(c["name"], c["verdict"], c["detail"]) for c in port["validation"]["checks"]],
            "moves_vs_later_release": dict(verdicts),
            "rows": rows,
        }
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "port.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        print(f"## {summary['pair']}\n")
        print(f"- findings: {summary['findings']} {summary['by_family']}")
        print(f"- bridged automatically: {summary['bridged']}; needs a human: {summary['needs_human']} "
              f"{summary['needs_human_by_family']}")
        print(f"- {summary['commits']} shim commits + PR_MATERIAL.md, {summary['wall_s']} s wall, exit {run.returncode}")
        for name, verdict, detail in summary["validation"]:
            print(f"- validation {name}: {verdict} ({detail})")
        print(f"\n### moved/renamed names vs vllm-ascend {args.later_plugin}: {dict(verdicts)}\n")
        print("| plugin used | porter's new home | verdict | later release imports it from |")
        print("|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(f"`{c}`" if i < 2 else c for i, c in enumerate(row)) + " |")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
