"""Real ports with `porter upgrade` (not part of CI): vllm-ascend releases from their PyPI sdists
imported into git repositories, ported to later vllm releases.

    .venv/bin/python bench/port.py                      # the four pairs below
    .venv/bin/python bench/port.py --pair 0.18.0:0.18.0:0.22.1

Needs the unpacked sdists (.py files and packaging metadata) in /work/cache/<name>-<version>
(`pip download --no-deps -d /work/cache/pypi vllm==X` etc., then unpack; --trees DIR to change).
Per pair: import `vllm_ascend/` plus setup.py / pyproject.toml / setup.cfg / requirements.txt of the
plugin release into a fresh repository (one commit), run porter in a subprocess with a private cache
and runs directory, and print: findings, bridged / handed-off counts, the imports-at-target verdict,
the generated tests, the validation checks, PR_MATERIAL.md lines against the plugin lines changed,
and five bridged fixes with the target source they rely on (for checking them by hand).
Results: bench/results/port.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAIRS = ("0.11.0:0.11.0:0.13.0", "0.13.0:0.13.0:0.18.0", "0.18.0:0.18.0:0.22.1", "0.23.0.post1:0.23.0:0.33.0")
IDENTITY = {"GIT_AUTHOR_NAME": "import", "GIT_AUTHOR_EMAIL": "import@bench.invalid",
            "GIT_COMMITTER_NAME": "import", "GIT_COMMITTER_EMAIL": "import@bench.invalid"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=repo, env={**os.environ, **IDENTITY},
                          check=True, capture_output=True, text=True).stdout


def import_release(source: Path, repo: Path, version: str) -> None:
    repo.mkdir(parents=True)
    shutil.copytree(source / "vllm_ascend", repo / "vllm_ascend")
    for name in ("setup.py", "pyproject.toml", "setup.cfg", "requirements.txt"):
        if (source / name).is_file():
            shutil.copy2(source / name, repo / name)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"vllm-ascend {version} (imported from the PyPI sdist)")


def numstat(repo: Path, base: str, tip: str) -> dict[str, int]:
    """Lines added+deleted: all files but PR_MATERIAL.md, and the plugin's pre-existing files only."""
    out = {"all": 0, "existing": 0, "pr_material": 0}
    created = set(git(repo, "diff", "--name-only", "--diff-filter=A", base, tip).split())
    for line in git(repo, "diff", "--numstat", base, tip).splitlines():
        added, deleted, path = line.split("\t")
        count = int(added) + int(deleted) if added != "-" else 0
        if path == "PR_MATERIAL.md":
            out["pr_material"] = int(added)
            continue
        out["all"] += count
        if path not in created:
            out["existing"] += count
    return out


def run_pair(spec: str, trees: Path, work: Path) -> dict:
    plugin, baseline, target = spec.split(":")
    source, base_tree, target_tree = (trees / f"vllm-ascend-{plugin}", trees / f"vllm-{baseline}", trees / f"vllm-{target}")
    missing = [str(p) for p in (source, base_tree, target_tree) if not p.is_dir()]
    if missing:
        return {"pair": spec, "error": f"missing unpacked sdists: {', '.join(missing)}"}
    repo = work / f"vllm-ascend-{plugin}"
    import_release(source, repo, plugin)
    argv = [sys.executable, "-m", "porter", "upgrade", "vllm-ascend", "--to", target, "--from", baseline,
            "--plugin-path", str(repo), "--upstream-path", f"{baseline}={base_tree}",
            "--upstream-path", f"{target}={target_tree}", "--json"]
    env = {**os.environ, "PORTER_CACHE_DIR": str(work / f"cache-{plugin}"), "XDG_DATA_HOME": str(work / "data"),
           "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    run = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - started
    doc = json.loads(run.stdout)
    if "error" in doc:
        details = doc["error"].get("details") or {}
        record = Path(details["record_dir"]) / "run.json" if details.get("record_dir") else None
        if record is None or not record.is_file():
            return {"pair": spec, "exit_code": run.returncode, "error": doc["error"]["message"]}
        port = json.loads(record.read_text())
        records = port["analysis"]["records"]
    else:
        port, records = doc["port"], doc["analysis"]["records"]
    tip = port.get("tip")
    sizes = numstat(repo, port["base_sha"], tip) if tip else {}
    generated = next((c for c in port["validation"].get("checks", []) if c["name"] == "generated shim tests"), {})
    by_key = {r["key"]: r for r in records}
    groups = {r: g for g in port.get("plan", {}).get("groups", []) for r in g["symbols"]}
    sample = random.Random(spec).sample(port["bridged"], min(5, len(port["bridged"])))
    return {
        "pair": f"vllm-ascend {plugin}: vllm {baseline} -> {target}",
        "exit_code": run.returncode,
        "wall_s": round(wall, 1),
        "branch_moved": port.get("branch_moved"),
        "failed_branch": port.get("failed_branch"),
        "findings": port.get("total_findings"),
        "by_family": dict(collections.Counter(r["family"] for r in records if r["severity"] != "note")),
        "bridged": len(port["bridged"]),
        "handed_off": len(port["needs_human"]),
        "handed_off_by_family": dict(collections.Counter(k.split(":")[0] for k in port["needs_human"])),
        "imports_at_target": port.get("imports_at_target", {}).get("line"),
        "standins": port.get("imports_at_target", {}).get("standins"),
        "generated_tests": generated.get("detail"),
        "validation": [(c["name"], c["verdict"]) for c in port["validation"].get("checks", [])],
        "commits": len(port.get("commits", [])),
        "lines_changed": sizes,
        "pr_material_ratio": round(sizes["pr_material"] / sizes["all"], 2) if sizes.get("all") else None,
        "pr_material_ratio_existing_files": round(sizes["pr_material"] / sizes["existing"], 2) if sizes.get("existing") else None,
        "sample_bridged": [{"key": k, "strategy": next((g["strategy"] for s, g in groups.items() if k.endswith(s)), ""),
                            "new_location": (by_key.get(k) or {}).get("new_location")} for k in sample],
        "bridged_all": [_bridged_entry(k, by_key.get(k) or {}, port.get("plan", {}).get("groups", []), baseline, target)
                        for k in port["bridged"]],
        "repo": str(repo),
        "tip": tip,
    }


def _where(location: dict | None, version: str) -> str:
    if not location or not (location.get("file") or location.get("module")):
        return ""
    path = location.get("file") or location["module"].replace(".", "/") + ".py"
    return f"{path}@{version}:{location.get('line') or 1}"


def _bridged_entry(key: str, record: dict, groups: list[dict], baseline: str, target: str) -> dict:
    """A bridged finding with the upstream code its shim relies on: the target location when the
    name lives on there, else the baseline one (a rebuilt removal copies the baseline body or value;
    a member default follows the base class). The group is the one of the finding's own family."""
    family, _, symbol = key.partition(":")
    mine = [g for g in groups if symbol in g["symbols"]]
    group = next((g for g in mine if g.get("family") == family), mine[0] if mine else {})
    return {"key": key, "strategy": group.get("strategy", ""), "relies_on": _where(record.get("new_location"), target)
            or _where(record.get("old_location"), baseline)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", action="append", help="PLUGIN:BASELINE:TARGET (repeatable)")
    parser.add_argument("--trees", type=Path, default=Path("/work/cache"))
    parser.add_argument("--keep", action="store_true", help="keep the imported repositories (for checking by hand)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="porter-bench-port-"))
    results = []
    try:
        for spec in args.pair or PAIRS:
            result = run_pair(spec, args.trees, work)
            results.append(result)
            print(f"## {result['pair']}")
            if "error" in result and "bridged" not in result:
                print(f"- error: {result['error']}\n")
                continue
            print(f"- exit {result['exit_code']}, {result['wall_s']} s; branch moved: {result['branch_moved']}"
                  + (f"; kept on {result['failed_branch']}" if result["failed_branch"] else ""))
            print(f"- findings {result['findings']} {result['by_family']}")
            print(f"- bridged {result['bridged']}; handed off {result['handed_off']} {result['handed_off_by_family']}")
            print(f"- {result['imports_at_target']}")
            print(f"- generated tests: {result['generated_tests']}")
            print(f"- validation: {', '.join(f'{n} {v}' for n, v in result['validation'])}")
            print(f"- PR_MATERIAL.md {result['lines_changed'].get('pr_material')} lines; changed lines "
                  f"{result['lines_changed'].get('all')} (pre-existing plugin files {result['lines_changed'].get('existing')}); "
                  f"ratio {result['pr_material_ratio']} ({result['pr_material_ratio_existing_files']} vs pre-existing files)")
            print("- bridged fixes and the upstream code each relies on (check by hand):")
            for item in result["bridged_all"]:
                print(f"  - {item['key']} [{item['strategy']}] -> {item['relies_on'] or '-'}")
            print()
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "port.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        return 0 if all("bridged" in r for r in results) else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept: {work}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
