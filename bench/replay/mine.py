"""Draft a replay case from a vllm-ascend adaptation commit (a tool for whoever writes the truth).

    python bench/replay/mine.py COMMIT OLD NEW [--repo MIRROR] [--kind upgrade|drop] [--write]

Prints (or with --write stores in bench/replay/cases/<id>.json, keeping any hand-written `items`,
`known_real` and `known_false` already there):
  * the split (test when int(sha256(commit sha).hexdigest(), 16) % 3 == 0, else dev), fixed by the
    commit alone, before anyone looks at porter's figures;
  * every `vllm_version_is(...)` guard in the plugin package at the parent whose version is not NEW,
    with the maintainers' verdict read from the commit's diff: `collapse` (the guard line is deleted
    and no replacement names NEW), `retarget` (replaced by a guard on NEW), `keep` (untouched);
  * the commit's diff of the plugin package, for the hand-written code items;
  * with --live, the live items `live.py` confirms mechanically in both trees (ids a1, a2, ...: an
    import the NEW tree no longer provides, a name the NEW tree no longer has, a call that binds only
    at OLD), each with its evidence.
Other code items (new abstract methods, changed attributes, runtime breaks) are written by hand after
checking both vllm trees (ids c1, c2, ...); this tool never guesses them.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_REPO = Path("/work/.mirror/vllm-project+vllm-ascend/repo")
PACKAGE = "vllm_ascend"
GUARD_FN = "vllm_version_is"
SKIP_PARTS = {"tests"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def split_of(commit_sha: str) -> str:
    return "test" if int(hashlib.sha256(commit_sha.encode()).hexdigest(), 16) % 3 == 0 else "dev"


def normalise_version(text: str) -> str:
    return text[1:] if text.startswith("v") else text


def guard_versions(node: ast.AST) -> list[str]:
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            name = sub.func.id if isinstance(sub.func, ast.Name) else getattr(sub.func, "attr", "")
            if name == GUARD_FN and sub.args and isinstance(sub.args[0], ast.Constant) and isinstance(sub.args[0].value, str):
                out.append(normalise_version(sub.args[0].value))
    return out


def guards_in_source(path: str, text: str) -> list[dict]:
    """Every if-statement / conditional expression / other expression testing vllm_version_is."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    found, claimed = [], set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp)):
            versions = guard_versions(node.test)
            if versions:
                found.append({"path": path, "line": node.lineno, "end_line": node.end_lineno,
                              "test_line": node.test.lineno, "test_end_line": node.test.end_lineno,
                              "form": "if" if isinstance(node, ast.If) else "ifexp",
                              "guard": ast.get_source_segment(text, node.test) or "", "versions": versions})
                claimed.update(id(s) for s in ast.walk(node.test))
    for node in ast.walk(tree):  # vllm_version_is used outside any if test (assignments, arguments)
        if isinstance(node, ast.Call) and id(node) not in claimed and guard_versions(node) and \
                (getattr(node.func, "id", None) == GUARD_FN or getattr(node.func, "attr", None) == GUARD_FN):
            found.append({"path": path, "line": node.lineno, "end_line": node.end_lineno, "test_line": node.lineno,
                          "test_end_line": node.end_lineno, "form": "expr",
                          "guard": ast.get_source_segment(text, node) or "", "versions": guard_versions(node)})
    return sorted(found, key=lambda g: (g["line"], g["form"]))


HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def diff_hunks(repo: Path, parent: str, commit: str, path: str) -> list[tuple[set[int], list[str]]]:
    """(parent lines deleted, lines added) per hunk of `git diff -U0`."""
    text = git(repo, "diff", "-U0", parent, commit, "--", path)
    hunks: list[tuple[set[int], list[str]]] = []
    for line in text.splitlines():
        m = HUNK.match(line)
        if m:
            start, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
            hunks.append((set(range(start, start + count)), []))
        elif hunks and line.startswith("+") and not line.startswith("+++"):
            hunks[-1][1].append(line[1:])
    return hunks


def verdict(guard: dict, hunks, new: str, file_gone: bool) -> str:
    if file_gone:
        return "file_removed"
    lines = set(range(guard["test_line"], guard["test_end_line"] + 1))
    for deleted, added in hunks:
        if lines & deleted:
            names_new = any(GUARD_FN in a and re.search(rf"""["']v?{re.escape(new)}["']""", a) for a in added)
            return "retarget" if names_new else "collapse"
    return "keep"


def _imports(stmts: list[ast.stmt]) -> dict[str, tuple[str, int]]:
    """name -> (module, line) for `from vllm... import name` statements directly in a branch."""
    out = {}
    for st in stmts:
        if isinstance(st, ast.ImportFrom) and st.module and st.module.split(".")[0] == "vllm" and not st.level:
            for alias in st.names:
                out[alias.asname or alias.name] = (st.module, alias.name, st.lineno)
    return out


def _module_text(tree: Path, module: str) -> str | None:
    base = tree.joinpath(*module.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f.read_text(encoding="utf-8", errors="replace")
    return None


def _defines(text: str | None, name: str) -> bool:
    return text is not None and re.search(rf"^\s*(?:class|def|async def)\s+{name}\b|^\s*{name}\s*[:=]|\bimport\b[^\n]*\b{name}\b"
                                          rf"|^\s+{name},?\s*$", text, re.M) is not None


def moved_imports(path: str, text: str, guard: dict, new_tree: Path) -> list[dict]:
    """Imports that a collapsed guard switches between two homes: the dead branch imports a name from a
    module that lacks it at NEW, the live branch the same name from a module that has it at NEW."""
    node = next((n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.If) and n.lineno == guard["line"]), None)
    if node is None or not node.orelse:
        return []
    negated = isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
    dead, live = (node.orelse, node.body) if negated else (node.body, node.orelse)
    out = []
    for local, (old_mod, name, line) in _imports(dead).items():
        target = _imports(live).get(local)
        if not target or target[0] == old_mod or target[1] != name:
            continue
        old_text = _module_text(new_tree, old_mod)
        if _defines(_module_text(new_tree, target[0]), name) and not _defines(old_text, name):
            alias = old_text is not None and re.search(rf"""["']{name}["']""", old_text) is not None
            how = (f"{old_mod} names it only as a string (a deprecation table served by its module __getattr__)"
                   if alias else f"{old_mod} does not" if old_text is not None else f"{old_mod} no longer exists")
            out.append({"kind": "import_moved", "path": path, "line": line, "symbol": f"{old_mod}.{name}",
                        "names": [name], "new_home": target[0], "live": False,
                        "evidence": f"auto (mine.py): at NEW {target[0]} defines or re-exports {name} and "
                                    f"{how} (module text checked in the NEW tree); the guard at line "
                                    f"{guard['line']} switches between the two imports and the commit collapses it"})
    return out


def mine(repo: Path, commit: str, old: str, new: str, new_tree: Path | None = None) -> dict:
    sha = git(repo, "rev-parse", commit).strip()
    parent = git(repo, "rev-parse", f"{sha}^").strip()
    files = [f for f in git(repo, "ls-tree", "-r", "--name-only", parent, PACKAGE).splitlines()
             if f.endswith(".py") and not SKIP_PARTS & set(f.split("/"))]
    after = set(git(repo, "ls-tree", "-r", "--name-only", sha, PACKAGE).splitlines())
    changed = set(git(repo, "diff", "--name-only", parent, sha, "--", PACKAGE).splitlines())
    guards, moved = [], []
    for path in files:
        text = git(repo, "show", f"{parent}:{path}").lstrip("\ufeff")  # some files start with a BOM
        if GUARD_FN not in text:
            continue
        found = [g for g in guards_in_source(path, text) if any(v != new for v in g["versions"])]
        if not found:
            continue
        hunks = diff_hunks(repo, parent, sha, path) if path in changed else []
        for g in found:
            g["verdict"] = verdict(g, hunks, new, path not in after)
            guards.append(g)
            if new_tree and g["verdict"] == "collapse" and g["form"] == "if":
                moved += moved_imports(path, text, g, new_tree)
    meta = git(repo, "show", "-s", "--format=%cs%n%s", sha).splitlines()
    return {"commit": sha, "parent": parent, "date": meta[0], "title": meta[1], "old": old, "new": new,
            "split": split_of(sha), "guards": guards, "moved": moved}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("commit"), ap.add_argument("old"), ap.add_argument("new")
    ap.add_argument("--repo", type=Path, default=DEFAULT_REPO)
    ap.add_argument("--kind", choices=["upgrade", "drop"], default="upgrade")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--trees", type=Path, default=Path("/work/cache"), help="folder with vllm-X/ trees (moved imports)")
    ap.add_argument("--diff", action="store_true", help="print the commit's diff of the plugin package")
    ap.add_argument("--live", action="store_true", help="add the live items live.py confirms in the OLD and NEW trees")
    ap.add_argument("--index-cache", type=Path, default=Path("/tmp/porter-replay-index"),
                    help="where the per-tree name indexes of --live are cached")
    args = ap.parse_args(argv)
    new_tree = args.trees / f"vllm-{args.new}"
    case = mine(args.repo, args.commit, args.old, args.new, new_tree if (new_tree / "vllm").is_dir() else None)
    case_id = f"{case['commit'][:10]}-{args.old}-to-{args.new}"
    case = {"id": case_id, "kind": args.kind, **case}
    path = HERE / "cases" / f"{case_id}.json"
    if path.exists():
        kept = json.loads(path.read_text())
        for key in ("items", "known_real", "known_false", "notes", "kind"):
            if key in kept:
                case[key] = kept[key]
    case.setdefault("items", []), case.setdefault("known_real", []), case.setdefault("known_false", [])
    hand = [i for i in case["items"] if i["id"][0] not in "ma"]  # m*, a*: mined items, rebuilt each run
    case["items"] = hand + [{"id": f"m{n}", **m} for n, m in enumerate(case.pop("moved"), 1)]
    if args.live:
        from live import index_tree, mine_live  # a sibling module: bench/replay is on sys.path as the script's folder

        old_index = index_tree(args.trees / f"vllm-{args.old}", args.index_cache)
        new_index = index_tree(new_tree, args.index_cache)
        covered = {(i["path"], n) for i in hand for n in i.get("names", [])}
        live = [i for i in mine_live(args.repo, case["parent"], case["commit"], old_index, new_index)
                if (i["path"], i["names"][0]) not in covered]
        case["items"] += [{"id": f"a{n}", **i} for n, i in enumerate(live, 1)]
        print(f"{len(live)} live items", file=sys.stderr)
    for g in case["guards"]:
        print(f"{g['verdict']:12} {g['path']}:{g['line']}-{g['end_line']} {g['form']:5} {g['guard'][:90]}")
    print(f"{case_id}: split {case['split']}, {len(case['guards'])} guards, "
          f"{sum(g['verdict'] in ('collapse', 'retarget') for g in case['guards'])} changed", file=sys.stderr)
    if args.diff:
        print(git(args.repo, "show", "--format=", case["commit"], "--", PACKAGE))
    if args.write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(case, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
