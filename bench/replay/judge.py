"""Judge porter's unmatched findings on the replay benchmark by reading the NEW vllm tree.

    python bench/replay/judge.py [--case ID ...] [--analyses bench/results/replay] [--trees /work/cache] [--write]

A finding that matches no truth item is either a real break at NEW that the commit did not change
(`known_real`) or a false alarm (`known_false`). This tool checks each such finding's claim against
the NEW tree with checks of its own (text and AST of the upstream files, not porter's index), and
records the verdict with the evidence as its reason (prefixed `judge.py:`; hand-written judgments
are kept). A claim it has no check for stays unjudged and keeps counting as a false alarm.

Checks, per kind of finding:
  * gone / moved / renamed / monkeypatch target gone: the name is absent from its module (and class)
    in the NEW tree -> real; present -> false;
  * an override lacks a parameter the base gained: some call of that method in the NEW tree passes it
    by keyword -> real; none does -> false;  an override requires a parameter the base dropped: the NEW
    tree calls the method without it -> real;
  * a call no longer binds (new required parameter, keyword removed, too many positionals, positional
    shift): the NEW definition, read from its file, has that shape -> real;
  * a base class requires new methods (or an RPC the target sends): the NEW tree calls them -> real;
    never called -> false;
  * a base `__init__` sets new attributes: read by upstream methods -> real, else false;
  * a base class's bases changed (no member missing): false (a refactor breaks nothing by itself);
  * a return annotation changed: the site unpacks a value that is no longer a tuple -> real; the site
    ignores the value -> false; otherwise unjudged.
"""

from __future__ import annotations

import argparse
import ast
import json
import pickle
import re
import sys
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from replay import CASES, finding_matches, in_guard, load_case  # noqa: E402  (bench/replay.py)

PREFIX = "judge.py: "
MAX_CALLERS = 30  # a method name called more often than this cannot be traced to one class by name


class Tree:
    """The NEW vllm tree, read lazily: module files, their text and AST, and every call by name."""

    def __init__(self, root: Path, cache_dir: Path | None = None):
        self.root = root
        self.cache_dir = cache_dir  # the call table of a tree is reused across cases and runs

    @lru_cache(maxsize=None)
    def text(self, rel: str) -> str:
        return (self.root / rel).read_text(encoding="utf-8", errors="replace")

    @lru_cache(maxsize=None)
    def files(self) -> tuple[str, ...]:
        return tuple(str(p.relative_to(self.root)) for p in sorted((self.root / "vllm").rglob("*.py")))

    def module_file(self, dotted: str) -> tuple[str | None, list[str]]:
        """The longest module prefix that is a file in the tree, and the parts after it."""
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            base = "/".join(parts[:i])
            for rel in (f"{base}.py", f"{base}/__init__.py"):
                if (self.root / rel).is_file():
                    return rel, parts[i:]
        return None, parts

    @lru_cache(maxsize=None)
    def calls(self) -> dict[str, list[tuple[str, int, int, frozenset[str]]]]:
        """method/function name -> (file, line, positional count, keywords) for every call in the tree."""
        cache = self.cache_dir / f"judge-calls-{self.root.name}.pickle" if self.cache_dir else None
        if cache and cache.is_file():
            return pickle.loads(cache.read_bytes())
        out = self._scan_calls()
        if cache:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_bytes(pickle.dumps(out))
        return out

    def _scan_calls(self) -> dict[str, list[tuple[str, int, int, frozenset[str]]]]:
        out: dict[str, list[tuple[str, int, int, frozenset[str]]]] = {}
        for rel in self.files():
            try:
                tree = ast.parse(self.text(rel))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                    if name:
                        out.setdefault(name, []).append((rel, node.lineno, len(node.args),
                                                         frozenset(k.arg for k in node.keywords if k.arg)))
        return out

    def defines(self, rel: str, name: str) -> int | None:
        """Line where the module file defines, assigns, imports or sets (self.name) `name`."""
        m = re.search(rf"^\s*(?:class|def|async def)\s+{name}\b|^\s*{name}\s*[:=]|self\.{name}\s*[:=]|\bimport\b[^\n]*\b{name}\b"
                      rf"|^\s+{name},?\s*(?:#.*)?$|[\"']{name}[\"']", self.text(rel), re.M)
        return self.text(rel)[:m.start()].count("\n") + 1 if m else None

    def function(self, rel: str, qual: list[str]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The def of `Cls.method` / `function` (a class: its __init__) in a module file."""
        try:
            body = ast.parse(self.text(rel)).body
        except SyntaxError:
            return None
        node: ast.AST | None = None
        for part in qual:
            node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                         and n.name == part), None)
            if node is None:
                return None
            body = getattr(node, "body", [])
        if isinstance(node, ast.ClassDef):
            return next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[str], set[str], bool]:
    a = fn.args
    pos = [x.arg for x in a.posonlyargs + a.args]
    if pos and pos[0] in ("self", "cls"):
        pos = pos[1:]
    n_required = len(a.posonlyargs + a.args) - len(a.defaults)
    required = {x.arg for x in (a.posonlyargs + a.args)[:n_required]} - {"self", "cls"}
    required |= {k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None}
    return pos + [k.arg for k in a.kwonlyargs], required, a.kwarg is not None



def _first_called(tree, names: str) -> str:
    """`name() (file:line)` for the first of the comma-separated `names` the NEW tree calls, else ''."""
    for name in (n.strip() for n in names.split(",")):
        hit = tree.calls().get(name)
        if hit:
            return f"{name}() ({_where(hit[0][0], hit[0][1])})"
    return ""

def _where(rel: str, line: int | None) -> str:
    return f"{rel}:{line}" if line else rel


def judge(record: dict, tree: Tree) -> tuple[str, str] | None:
    """(known_real | known_false, reason) or None when no check applies."""
    msg, symbol, detail = record.get("message", ""), record.get("symbol", ""), record.get("detail") or {}
    change = detail.get("change")
    rel, qual = tree.module_file(symbol)
    if re.search(r" is gone at the target| is missing at the target| moved to | renamed to |does not exist at |monkeypatch target .* is gone", msg):
        if rel is None:
            return "known_real", f"{PREFIX}no module of {symbol} exists in the NEW tree"
        if not qual:
            return "known_false", f"{PREFIX}{symbol} is a module of the NEW tree ({rel})"
        container = rel
        if len(qual) > 1:  # Cls.member: look inside the class's file only
            if tree.defines(rel, qual[0]) is None:
                return "known_real", f"{PREFIX}{qual[0]} is not defined in {rel} at NEW"
        line = tree.defines(container, qual[-1])
        if line is None:
            return "known_real", f"{PREFIX}{qual[-1]} appears nowhere in {rel} at NEW"
        return "known_false", f"{PREFIX}{qual[-1]} is still named in {_where(rel, line)} at NEW"
    method = symbol.rsplit(".", 1)[-1]
    if change == "override_mismatch" or "that the override" in msg:
        if len(tree.calls().get(method, [])) > MAX_CALLERS:
            return None  # forward, __call__: too many unrelated callers to tell which one reaches this class
        gained = re.search(r"gained parameter\(s\) ([\w, ]+?) that the override does not accept", msg)
        override = re.search(r"\(override [\w.]+\(([^)]*)\)", msg)
        if gained and override:
            params = [p.strip() for p in override.group(1).split(",") if p.strip() and p.strip() not in ("self", "cls")]
            if any(p.startswith("*") for p in params):
                return "known_false", f"{PREFIX}the override takes *args/**kwargs: whatever NEW passes binds"
            capacity = sum(1 for p in params if not p.startswith("*"))
            hit = next(((f, l) for f, l, n_pos, _ in tree.calls().get(method, []) if n_pos > capacity), None)
            if hit:
                return "known_real", f"{PREFIX}the NEW tree calls {method} with more positional arguments than the override takes at {_where(*hit)}"
        if gained:
            for param in (p.strip() for p in gained.group(1).split(",")):
                hit = next(((f, l) for f, l, _, kws in tree.calls().get(method, []) if param in kws), None)
                if hit:
                    return "known_real", f"{PREFIX}the NEW tree calls {method}(..., {param}=...) at {_where(*hit)}; the override does not accept it"
        dropped = re.search(r"dropped parameter\(s\) ([\w, ]+?) that the override requires", msg)
        if dropped:
            params = [p.strip() for p in dropped.group(1).split(",")]
            slots = [p.strip().split("=")[0] for p in override.group(1).split(",") if p.strip() not in ("self", "cls")] if override else []
            # a NEW call leaves the required parameter unbound: not by keyword, and too few positionals to reach its slot
            reach = min((slots.index(p) for p in params if p in slots), default=0)
            hit = next(((f, l) for f, l, n_pos, kws in tree.calls().get(method, [])
                        if not set(params) & kws and n_pos <= reach), None)
            if hit:
                return "known_real", f"{PREFIX}the NEW tree calls {method} without {', '.join(params)} at {_where(*hit)}; the override requires it"
        if gained and not dropped:
            return "known_false", f"{PREFIX}no call of {method} in the NEW tree passes {gained.group(1)} by keyword"
        return None
    if change in ("new_required_parameter", "keyword_removed", "positional_removed", "positional_shift"):
        if rel is None:
            return None
        fn = tree.function(rel, qual)
        if fn is None:
            return None
        names, required, varkw = _params(fn)
        shape = f"{'.'.join(qual)}({', '.join(names)}) at {_where(rel, fn.lineno)}"
        param = detail.get("parameter", "")
        if change == "new_required_parameter" and param in required:
            return "known_real", f"{PREFIX}NEW defines {shape}: '{param}' has no default and the call does not pass it"
        if change == "keyword_removed" and param not in names and not varkw:
            return "known_real", f"{PREFIX}NEW defines {shape}: no parameter '{param}', no **kwargs"
        if change == "positional_removed" and not fn.args.vararg:
            return "known_real", f"{PREFIX}NEW defines {shape}: fewer positional parameters than the call passes"
        if change == "positional_shift":
            return "known_real", f"{PREFIX}NEW defines {shape}: the positional slots the call fills hold other parameters"
        return "known_false", f"{PREFIX}NEW defines {shape}, which does not have the claimed shape"
    rpc = re.search(r"calls collective_rpc\(([^)]*)\)", msg)
    if rpc:
        names = re.findall(r"'(\w+)'", rpc.group(1))
        for name in names:
            for f in tree.files():
                m = re.search(rf"collective_rpc\(\s*[\"']{name}[\"']", tree.text(f))
                if m:
                    return "known_real", f"{PREFIX}the NEW tree sends collective_rpc('{name}') ({f}); the plugin's worker does not define it"
        return "known_false", f"{PREFIX}no collective_rpc({', '.join(names)}) in the NEW tree"
    requires = re.search(r"now requires method\(s\) ([\w, ]+?) that", msg)
    if requires:
        called = _first_called(tree, requires.group(1))
        if called:
            return "known_real", f"{PREFIX}the NEW tree calls {called}; the plugin class does not define it"
        return "known_false", f"{PREFIX}nothing in the NEW tree calls {requires.group(1)}"
    sets = re.search(r"__init__ now sets ([\w, ]+?);", msg)
    if sets:
        read = detail.get("read_by_upstream") or []
        if read:
            return "known_real", f"{PREFIX}upstream methods read {', '.join(read)}, which the plugin's __init__ never sets"
        return "known_false", f"{PREFIX}no upstream method reads {sets.group(1)} (the plugin's class never needs them)"
    if "bases changed from" in msg and "now requires" not in msg and "lacks" not in msg:
        return "known_false", f"{PREFIX}a refactor of the base's bases; no member the plugin class relies on is reported missing"
    stand_in = re.search(r"lacks its new member\(s\) ([\w, ]+)", msg)
    if stand_in:
        called = _first_called(tree, stand_in.group(1))
        if called:
            return "known_real", f"{PREFIX}the NEW tree calls {called}; the stand-in lacks it"
        return "known_false", f"{PREFIX}nothing in the NEW tree calls {stand_in.group(1)}"
    if change == "return_annotation":
        code = (record.get("sites") or [{}])[0].get("code", "")
        new = detail.get("new_returns", "")
        if re.match(r"^\s*[\w.]+\s*,\s*[\w.]+.*=", code) and not new.startswith(("tuple", "Tuple")):
            return "known_real", f"{PREFIX}the site unpacks the result; NEW returns {new}"
        if re.match(r"^\s*(?:self\.)?[\w.]+\(", code):
            return "known_false", f"{PREFIX}the site ignores the returned value ({code[:60]})"
        return None
    return None


def unmatched(case, analysis: dict) -> list[dict]:
    retargeted = [g for g in case.guards if g.verdict == "retarget"]
    out = []
    for r in analysis.get("records") or []:
        if r.get("severity") not in ("breaking", "risky"):
            continue
        if any(finding_matches(r, item) for item in case.items):
            continue
        if any(in_guard(s, g) for s in r.get("sites") or [] for g in retargeted):
            continue
        out.append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--analyses", type=Path, default=ROOT / "bench" / "results" / "replay")
    ap.add_argument("--trees", type=Path, default=Path("/work/cache"))
    ap.add_argument("--write", action="store_true", help="store the verdicts in the case files")
    ap.add_argument("--index-cache", type=Path, default=Path("/tmp/porter-replay-index"))
    args = ap.parse_args(argv)
    totals = {"known_real": 0, "known_false": 0, "unjudged": 0}
    trees: dict[str, Tree] = {}
    for path in sorted(CASES.glob("*.json")):
        case = load_case(path)
        if args.case and not any(case.id.startswith(c) for c in args.case):
            continue
        saved = args.analyses / f"{case.id}.json"
        if not saved.is_file():
            continue
        tree = trees.setdefault(case.new, Tree(args.trees / f"vllm-{case.new}", args.index_cache))
        doc = json.loads(path.read_text(encoding="utf-8"))
        verdicts: dict[str, list[dict]] = {"known_real": [], "known_false": []}
        for r in unmatched(case, json.loads(saved.read_text(encoding="utf-8"))):
            got = judge(r, tree)
            if got is None:
                totals["unjudged"] += 1
                print(f"{case.id[:10]} unjudged {r['key']}: {r['message'][:140]}", file=sys.stderr)
                continue
            label, reason = got
            totals[label] += 1
            site = (r.get("sites") or [{}])[0].get("path", "")
            verdicts[label].append({"symbol": r["symbol"], "path": site, "family": r["family"], "reason": reason})
        for label, found in verdicts.items():
            hand = [j for j in doc.get(label, []) if not j.get("reason", "").startswith(PREFIX)]
            doc[label] = hand + found
        if args.write:
            path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(totals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
