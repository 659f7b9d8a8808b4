"""Replay benchmark: porter's upgrade analysis against what vllm-ascend's maintainers really changed.

    .venv/bin/python bench/replay.py [--case ID ...] [--split dev|test] [--trees /work/cache]
                                     [--repo MIRROR] [--cache DIR] [--porter-root DIR] [--rescore] [--verbose]

Each case in bench/replay/cases/*.json is one adaptation commit of vllm-ascend (2025-07 .. 2026-04):
the plugin at the parent commit, the vllm release it was validated on (OLD) and the release the
commit adapts to (NEW), and the truth:
  * `items`: plugin sites the maintainers changed because of the upgrade (an import moved or removed,
    a signature change, a new abstract method, an attribute ...), each checked in both vllm trees;
  * `guards`: every `vllm_version_is(...)` guard not on NEW at the parent, with the maintainers'
    verdict (`collapse`: the guard was removed, `retarget`: it now names NEW, `keep`: untouched);
  * `known_real` / `known_false`: porter findings the maintainers did not change, judged by reading
    the NEW tree (a real break elsewhere, or a false alarm).
The split (dev/test) is fixed per commit: test when int(sha256(commit sha), 16) % 3 == 0.

Per case: the plugin is materialised with `git archive` of the parent from the vllm-ascend mirror
(the `fetch` tool's bare clone), the vllm trees are unpacked sdists/wheels (`<trees>/vllm-X`, with
`vllm/` inside), and porter runs as a user runs it: `python -m porter upgrade vllm-ascend --from OLD
--to NEW --plugin-path P --upstream-path OLD=.. --upstream-path NEW=.. --dry-run --json`, offline,
with a fresh cache (cold) unless `--cache` names one.

Figures, per case and per split:
  recall          live truth items (all but the mined OLD-lane imports, which only score relocation) that
                  some finding (records, notes or copies) points at: a site in the same file within LINE_SLACK
                  lines of the statement, whose symbol or detail names one of the item's `names`
  live→breaking   truth items live at NEW (all but the mined OLD-lane imports) matched by a finding of
                  severity `breaking`
  reloc top-1     moved-import items whose matched finding's `new_location` is the item's new home
  false alarms    findings (`records`: breaking or risky) that match no truth item, lie in no guard the
                  maintainers retargeted and match no `known_real` entry (unjudged ones count: listed in
                  JSON); an entry that leaves its path or family open judges one finding only: one that
                  fits two unmatched findings of the case judges neither
  drop recall     changed guards (collapse/retarget) that `analysis.dead_guards` lists at the same place
                  with the same verdict, one entry per guard (`match_guards`: an entry at another truth
                  guard's line, or naming other versions, never stands in for this one; n/a while
                  porter has no `dead_guards`)
  time            wall seconds of the porter run
Results: bench/results/replay.json (figures), bench/results/replay/<case>.json (porter's analysis per
case, for judging alarms); a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "bench" / "replay" / "cases"
RESULTS = ROOT / "bench" / "results"
DEFAULT_REPO = Path("/work/.mirror/vllm-project+vllm-ascend/repo")
DEFAULT_TREES = Path("/work/cache")
LINE_SLACK = 2  # porter may report a multi-line statement at its first line or at the name's line
CHANGED = ("collapse", "retarget")


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class CodeItem:
    """A plugin site the maintainers changed because NEW differs from OLD."""

    id: str
    kind: str  # import_moved, import_removed, signature_change, new_abstract_method, attribute, ...
    path: str
    line: int  # at the parent commit (first line of the statement)
    end_line: int  # last line of the statement
    symbol: str  # the vllm symbol involved (dotted, as at OLD)
    names: tuple[str, ...]  # identifiers a finding about this item mentions
    also_lines: tuple[int, ...] = ()  # other lines a correct finding may name (the class of an overridden method)
    new_home: str = ""  # import_moved: the module that holds the symbol at NEW
    live: bool = True  # False: the site is in a branch that is dead at NEW (an OLD-lane import a collapse removes)
    evidence: str = ""  # how it was checked in the OLD and NEW trees


@dataclass(frozen=True)
class GuardItem:
    path: str
    line: int
    end_line: int
    guard: str
    verdict: str  # collapse | retarget | keep (the maintainers' choice)


@dataclass(frozen=True)
class Judged:
    """A porter finding the maintainers did not change, judged by reading the NEW tree."""

    symbol: str
    path: str = ""  # empty: any site
    reason: str = ""
    family: str = ""  # empty: any family (F1 ... F11)


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # upgrade | drop
    commit: str
    parent: str
    title: str
    old: str
    new: str
    split: str
    items: tuple[CodeItem, ...]
    guards: tuple[GuardItem, ...]
    known_real: tuple[Judged, ...]
    known_false: tuple[Judged, ...]

    @property
    def changed_guards(self) -> tuple[GuardItem, ...]:
        return tuple(g for g in self.guards if g.verdict in CHANGED)


@dataclass
class CaseScore:
    id: str
    split: str
    kind: str
    old: str
    new: str
    items: int = 0
    live_items: int = 0
    recalled: int = 0  # live items some finding points at (the headline recall)
    recalled_all: int = 0  # any item, the mined OLD-lane imports included
    live_breaking: int = 0
    moved: int = 0
    relocated: int = 0
    findings: int = 0
    false_alarms: int = 0
    false_alarms_unjudged: int = 0
    real_unchanged: int = 0  # findings judged real breaks that the commit did not change (known_real)
    guards_changed: int = 0
    guards_recalled: int | None = None  # None: porter reports no dead_guards
    guard_verdicts_wrong: int | None = None  # kept guards porter would collapse/retarget
    seconds: float = 0.0
    error: str = ""
    missed: list[str] = field(default_factory=list)
    not_breaking: list[str] = field(default_factory=list)
    wrong_home: list[str] = field(default_factory=list)
    alarms: list[dict[str, Any]] = field(default_factory=list)
    guards_missed: list[str] = field(default_factory=list)


def load_case(path: Path) -> Case:
    doc = json.loads(path.read_text(encoding="utf-8"))
    items = tuple(CodeItem(id=i["id"], kind=i["kind"], path=i["path"], line=int(i["line"]),
                           end_line=int(i.get("end_line") or i["line"]),
                           also_lines=tuple(int(x) for x in i.get("also_lines") or ()), symbol=i["symbol"],
                           names=tuple(i.get("names") or [i["symbol"].rsplit(".", 1)[-1]]),
                           new_home=i.get("new_home", ""), live=bool(i.get("live", True)),
                           evidence=i.get("evidence", "")) for i in doc.get("items", []))
    guards = tuple(GuardItem(path=g["path"], line=int(g["line"]), end_line=int(g["end_line"]), guard=g["guard"],
                             verdict=g["verdict"]) for g in doc.get("guards", []) if g["verdict"] in (*CHANGED, "keep"))
    judged = lambda key: tuple(Judged(symbol=j["symbol"], path=j.get("path", ""), reason=j.get("reason", ""),
                                      family=j.get("family", ""))
                               for j in doc.get(key, []))
    return Case(id=doc["id"], kind=doc.get("kind", "upgrade"), commit=doc["commit"], parent=doc["parent"],
                title=doc.get("title", ""), old=doc["old"], new=doc["new"], split=doc["split"], items=items,
                guards=guards, known_real=judged("known_real"), known_false=judged("known_false"))


# ---------------------------------------------------------------- matching (pure)


def _words(finding: dict[str, Any]) -> set[str]:
    """Identifiers a finding names: its symbol's parts and the names in its detail."""
    words = set(str(finding.get("symbol", "")).replace(":", ".").split("."))
    detail = finding.get("detail") or {}

    def walk(value: Any) -> None:
        if isinstance(value, str):
            words.update(value.replace("(", " ").replace(")", " ").replace(",", " ").replace(".", " ").split())
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    walk(detail)
    return {w.strip("*: =") for w in words if w}


def _near(site: dict[str, Any], item: CodeItem) -> bool:
    line = int(site.get("line", -999))
    if site.get("path") != item.path:
        return False
    return item.line - LINE_SLACK <= line <= item.end_line + LINE_SLACK or line in item.also_lines


def finding_matches(finding: dict[str, Any], item: CodeItem) -> bool:
    if not any(_near(s, item) for s in finding.get("sites") or []):
        return False
    return bool(set(item.names) & _words(finding))


def home_of(finding: dict[str, Any]) -> str:
    loc = finding.get("new_location") or {}
    return str(loc.get("dotted") or ".".join(x for x in (loc.get("module"), loc.get("qualname")) if x))


def relocated(finding: dict[str, Any], item: CodeItem) -> bool:
    home = home_of(finding)
    return bool(home) and (home == item.new_home or home.startswith(item.new_home + ".")
                           or home.rsplit(".", 1)[0] == item.new_home)


def in_guard(site: dict[str, Any], guard: GuardItem) -> bool:
    return site.get("path") == guard.path and guard.line <= int(site.get("line", -1)) <= guard.end_line


def _judges(j: Judged, finding: dict[str, Any]) -> bool:
    if j.family and finding.get("family") != j.family:
        return False
    return finding.get("symbol") == j.symbol and (not j.path or any(s.get("path") == j.path for s in finding.get("sites") or []))


def judged_as(finding: dict[str, Any], judged: tuple[Judged, ...], among: list[dict[str, Any]] | None = None) -> Judged | None:
    """The entry that judges this finding. An entry that leaves its path or family open (any site, any
    family) stands for one finding: `among` (the case's other unmatched findings) given, such an entry
    that also fits another of them is ambiguous and judges neither (a verdict on one claim about a
    symbol is not one on a different claim, or on another plugin site, about it)."""
    for j in judged:
        if not _judges(j, finding):
            continue
        if among is not None and (not j.path or not j.family) \
                and any(other is not finding and _judges(j, other) for other in among):
            continue
        return j
    return None


_VERSION = re.compile(r"""["']v?(\d+(?:\.\d+)*[\w.+-]*)["']""")


def guard_versions(text: str) -> frozenset[str]:
    """The version strings a guard's text names (quotes and a leading v do not matter)."""
    return frozenset(_VERSION.findall(text))


def _near_guard(d: dict[str, Any], guard: GuardItem) -> bool:
    line = int(d.get("line", -999))
    return abs(line - guard.line) <= 1 or line <= guard.line <= int(d.get("end_line", -1))


def match_guards(guards: tuple[GuardItem, ...], dead: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Truth guard index -> the `dead_guards` entry that is porter's verdict on that guard, one to one.

    An entry at a guard's own first line that names the same versions is that guard's (another
    guard on that line, `if a and vllm_version_is("X")` ... `else B if vllm_version_is("Y")`, has its
    own entry). Only a guard with no such entry may take a
    nearby one (a line off, or an entry whose block encloses the guard: a statement porter reports
    at its first line), and only an entry that no other guard owns, that names the same versions,
    and that lies at no other truth guard's line: otherwise the verdict on a neighbouring or
    enclosing guard would be credited to this one."""
    claimed: dict[int, int] = {}  # id(entry) -> guard index
    out: dict[int, dict[str, Any]] = {}
    truth_lines = {(g.path, g.line) for g in guards}
    for i, g in enumerate(guards):
        for d in dead:
            if (id(d) not in claimed and d.get("path") == g.path and int(d.get("line", -999)) == g.line
                    and guard_versions(str(d.get("guard", ""))) == guard_versions(g.guard)):
                claimed[id(d)], out[i] = i, d
                break
    for i, g in enumerate(guards):
        if i in out:
            continue
        for d in sorted(dead, key=lambda d: abs(int(d.get("line", -999)) - g.line)):
            if (id(d) in claimed or d.get("path") != g.path or not _near_guard(d, g)
                    or (d.get("path"), int(d.get("line", -999))) in truth_lines
                    or guard_versions(str(d.get("guard", ""))) != guard_versions(g.guard)):
                continue
            claimed[id(d)], out[i] = i, d
            break
    return out


def score_case(case: Case, analysis: dict[str, Any], seconds: float) -> CaseScore:
    records = [r for r in analysis.get("records") or [] if r.get("severity") in ("breaking", "risky")]
    # copies (a plugin body copied from upstream whose original changed, with the upstream diff) are
    # findings porter reports apart from the records: they count for recall like notes, never as alarms
    everything = records + list(analysis.get("notes") or []) + list(analysis.get("copies") or [])
    score = CaseScore(id=case.id, split=case.split, kind=case.kind, old=case.old, new=case.new,
                      items=len(case.items), findings=len(records), seconds=round(seconds, 2))
    for item in case.items:
        hits = [f for f in everything if finding_matches(f, item)]
        label = f"{item.id} {item.kind} {item.path}:{item.line} {item.symbol}"
        if hits:
            score.recalled_all += 1
            score.recalled += item.live
        else:
            score.missed.append(label)
        if item.live:
            score.live_items += 1
            if any(f.get("severity") == "breaking" for f in hits):
                score.live_breaking += 1
            else:
                score.not_breaking.append(label)
        if item.kind == "import_moved":
            score.moved += 1
            if any(relocated(f, item) for f in hits):
                score.relocated += 1
            else:
                score.wrong_home.append(f"{label} -> {item.new_home} (porter: {[home_of(f) for f in hits] or 'no finding'})")
    changed = case.changed_guards
    retargeted = tuple(g for g in changed if g.verdict == "retarget")
    unmatched = [f for f in records if not any(finding_matches(f, item) for item in case.items)
                 and not any(in_guard(s, g) for s in f.get("sites") or [] for g in retargeted)]
    for finding in records:
        sites = finding.get("sites") or []
        if any(finding_matches(finding, item) for item in case.items):
            continue
        if any(in_guard(s, g) for s in sites for g in retargeted):
            continue  # inside a guard the maintainers retargeted: the break at NEW is why they did
        if judged_as(finding, case.known_real, unmatched):
            score.real_unchanged += 1
            continue
        false = judged_as(finding, case.known_false)
        score.false_alarms += 1
        if false is None:
            score.false_alarms_unjudged += 1
        score.alarms.append({"key": finding.get("key"), "severity": finding.get("severity"),
                             "sites": [f"{s.get('path')}:{s.get('line')}" for s in sites[:3]],
                             "judged": false.reason if false else "unjudged"})
    score.guards_changed = len(changed)
    dead = analysis.get("dead_guards")
    if isinstance(dead, list):
        score.guards_recalled = 0
        score.guard_verdicts_wrong = 0
        listed_by = match_guards(case.guards, dead)
        for i, guard in enumerate(case.guards):
            listed = listed_by.get(i)
            verdict = (listed or {}).get("verdict", "keep")
            if guard.verdict in CHANGED:
                if verdict == guard.verdict:
                    score.guards_recalled += 1
                else:
                    score.guards_missed.append(f"{guard.path}:{guard.line} {guard.guard} ({guard.verdict}; porter: {verdict})")
            elif verdict in CHANGED:
                score.guard_verdicts_wrong += 1
    return score


# ---------------------------------------------------------------- I/O


def materialise_plugin(repo: Path, commit: str, dest: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit],
                             check=True, capture_output=True).stdout
    archive_path = dest.parent / "plugin.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(dest, filter="data")
    archive_path.unlink()
    return dest


def vllm_tree(trees: Path, version: str) -> Path:
    tree = trees / f"vllm-{version}"
    if not (tree / "vllm" / "__init__.py").is_file():
        raise SystemExit(f"no vllm {version} tree at {tree} (unpack the sdist or wheel there: {tree}/vllm/...)")
    return tree


def run_porter(case: Case, plugin: Path, trees: Path, cache: Path, porter_root: Path) -> tuple[dict[str, Any], float, str]:
    argv = [sys.executable, "-m", "porter", "upgrade", "vllm-ascend", "--from", case.old, "--to", case.new,
            "--plugin-path", str(plugin), "--upstream-path", f"{case.old}={vllm_tree(trees, case.old)}",
            "--upstream-path", f"{case.new}={vllm_tree(trees, case.new)}", "--dry-run", "--json"]
    env = dict(os.environ, PORTER_CACHE_DIR=str(cache), PORTER_OFFLINE="1", PYTHONPATH=str(porter_root))
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=porter_root, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {}, seconds, f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}"
    if "error" in doc:
        return {}, seconds, f"exit {proc.returncode}: {doc['error'].get('message')}"
    return doc.get("analysis") or {}, seconds, ""


def replay(case: Case, repo: Path, trees: Path, cache: Path | None, porter_root: Path = ROOT) -> tuple[CaseScore, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="porter-replay-") as tmp:
        plugin = materialise_plugin(repo, case.parent, Path(tmp) / "plugin")
        analysis, seconds, error = run_porter(case, plugin, trees, cache or Path(tmp) / "cache", porter_root)
    score = score_case(case, analysis, seconds)
    score.error = error
    return score, analysis


# ---------------------------------------------------------------- figures


def pct(num: int, den: int) -> str:
    return f"{100 * num / den:.0f} % ({num}/{den})" if den else "n/a"


def totals(scores: list[CaseScore]) -> dict[str, Any]:
    s = lambda attr: sum(getattr(x, attr) for x in scores)
    with_guards = [x for x in scores if x.guards_recalled is not None]
    return {
        "cases": len(scores),
        "items": s("items"), "recalled_all": s("recalled_all"), "recalled": s("recalled"), "live_items": s("live_items"), "live_breaking": s("live_breaking"),
        "moved": s("moved"), "relocated": s("relocated"),
        "false_alarms": s("false_alarms"), "false_alarms_unjudged": s("false_alarms_unjudged"),
        "real_unchanged": s("real_unchanged"),
        "false_alarms_per_case": round(s("false_alarms") / len(scores), 2) if scores else None,
        "guards_changed": s("guards_changed"),
        "guards_recalled": sum(x.guards_recalled for x in with_guards) if with_guards else None,
        "guards_scored": sum(x.guards_changed for x in with_guards) if with_guards else None,
        "seconds_per_case": round(s("seconds") / len(scores), 2) if scores else None,
        "errors": sum(1 for x in scores if x.error),
    }


def table(scores: list[CaseScore], by_split: dict[str, dict[str, Any]]) -> str:
    head = ("| case | split | kind | OLD→NEW | recall | live→breaking | reloc top-1 | false alarms | drop recall | time |\n"
            "|---|---|---|---|---|---|---|---|---|---|")
    rows = [head]
    for x in scores:
        drop = pct(x.guards_recalled, x.guards_changed) if x.guards_recalled is not None else f"n/a ({x.guards_changed})"
        rows.append(f"| {x.id[:10]} | {x.split} | {x.kind} | {x.old}→{x.new} | {pct(x.recalled, x.live_items)} | "
                    f"{pct(x.live_breaking, x.live_items)} | {pct(x.relocated, x.moved)} | {x.false_alarms} | {drop} | "
                    f"{x.seconds:.1f} s{' ERROR ' + x.error[:60] if x.error else ''} |")
    rows += ["", "| split | cases | recall | live→breaking | reloc top-1 | false alarms / case | drop recall | time / case |",
             "|---|---|---|---|---|---|---|---|"]
    for name, t in by_split.items():
        drop = pct(t["guards_recalled"], t["guards_scored"]) if t["guards_recalled"] is not None else f"n/a ({t['guards_changed']} guards)"
        rows.append(f"| {name} | {t['cases']} | {pct(t['recalled'], t['live_items'])} | {pct(t['live_breaking'], t['live_items'])} | "
                    f"{pct(t['relocated'], t['moved'])} | {t['false_alarms_per_case']} ({t['false_alarms_unjudged']} unjudged) | "
                    f"{drop} | {t['seconds_per_case']} s |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", action="append", default=[], help="case id (or a prefix of it); repeatable")
    ap.add_argument("--split", choices=["dev", "test"])
    ap.add_argument("--repo", type=Path, default=DEFAULT_REPO, help="vllm-ascend git mirror (bare is fine)")
    ap.add_argument("--trees", type=Path, default=DEFAULT_TREES, help="folder with vllm-X/ source trees")
    ap.add_argument("--cache", type=Path, help="porter cache to reuse (warm runs); default: a fresh one per case")
    ap.add_argument("--verbose", action="store_true", help="list missed items and alarms per case")
    ap.add_argument("--rescore", action="store_true",
                    help="score porter's analyses saved by the last run (bench/results/replay/<case>.json) without rerunning porter")
    ap.add_argument("--porter-root", type=Path, default=ROOT,
                    help="checkout whose porter runs (default: this one), e.g. another branch's worktree")
    args = ap.parse_args(argv)
    cases = [load_case(p) for p in sorted(CASES.glob("*.json"))]
    if args.case:
        cases = [c for c in cases if any(c.id.startswith(w) or c.commit.startswith(w) for w in args.case)]
    if args.split:
        cases = [c for c in cases if c.split == args.split]
    if not cases:
        print("no case selected", file=sys.stderr)
        return 2
    if not (args.repo / "HEAD").exists() and not (args.repo / ".git").exists():
        print(f"no vllm-ascend mirror at {args.repo} (fetch github:vllm-project/vllm-ascend)", file=sys.stderr)
        return 3
    scores, raw = [], {}
    previous = RESULTS / "replay.json"
    timed = ({c["id"]: c.get("seconds", 0.0) for c in json.loads(previous.read_text(encoding="utf-8")).get("cases", [])}
             if args.rescore and previous.is_file() else {})
    for case in cases:
        print(f"{case.id}: porter {case.old} -> {case.new} ...", file=sys.stderr, flush=True)
        saved = RESULTS / "replay" / f"{case.id}.json"
        if args.rescore:
            if not saved.is_file():
                print(f"no saved analysis {saved} (run without --rescore first)", file=sys.stderr)
                return 2
            analysis = json.loads(saved.read_text(encoding="utf-8"))
            score = score_case(case, analysis, timed.get(case.id, 0.0))  # the run's time, not the rescore's
        else:
            score, analysis = replay(case, args.repo, args.trees, args.cache, args.porter_root.resolve())
        scores.append(score)
        raw[case.id] = {"summary": analysis.get("summary"), "dead_guards": analysis.get("dead_guards")}
        if not args.rescore:  # porter's whole analysis, for judging alarms and --rescore
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_text(json.dumps(analysis, indent=1) + "\n", encoding="utf-8")
        if args.verbose:
            for label in score.missed:
                print(f"  missed: {label}", file=sys.stderr)
            for label in score.not_breaking:
                print(f"  not breaking: {label}", file=sys.stderr)
            for alarm in score.alarms:
                print(f"  alarm: {alarm}", file=sys.stderr)
            for label in score.guards_missed:
                print(f"  guard missed: {label}", file=sys.stderr)
    by_split = {name: totals([s for s in scores if s.split == name]) for name in ("dev", "test")
                if any(s.split == name for s in scores)}
    by_split["all"] = totals(scores)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"schema": "porter.bench.replay/1", "cases": [asdict(s) for s in scores], "splits": by_split, "porter": raw}
    (RESULTS / "replay.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(table(scores, by_split))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
