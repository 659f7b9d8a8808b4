"""Benchmark for `porter diagnose --history`: is the commit that fixed a real trace's bug found?

    python bench/known_fixes.py build --repo vllm-ascend=/path/to/clone [--repo triton-ascend=...]
    python bench/known_fixes.py score --repo vllm-ascend=/path/to/clone [--split dev|test|all] [--no-message] [--head-only]

`build` writes bench/known_fixes/index.yaml from
  * the plugin-bug cases of tests/data/corpus (their `fixed_by` PR or commit) and the traces under
    bench/known_fixes/traces/ (OWN_CASES below), each fix resolved to a commit of the repository's
    branches (main first; `on_main` tells; fixes found nowhere are listed with the reason, unscored);
  * environment-fault cases (the KB's territory, no plugin fix): tests/data/heldout, the corpus
    cases of environment layers that no plugin commit fixed, and OWN_ENV_CASES below.
The split is by thread, fixed before any tuning: test when sha256(thread) % 3 == 0.
A case is `leaky` when most of its trace lines appear verbatim in the fixing commit's message
(traces quoted from the PR description itself): reported apart, never only together.

`score` prints top-1 / top-3 "fixing commit found" per split (bug cases), the share of environment
faults that got any candidate, and timings (index load, extra time per trace with a warm index).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

BENCH = ROOT / "bench" / "known_fixes"
INDEX = BENCH / "index.yaml"
ENV_LAYERS = {"cann", "driver", "hccl", "container", "packaging", "python-env", "host", "build"}


GITHUB = {"vllm-ascend": "vllm-project/vllm-ascend", "verl": "verl-project/verl"}


def _issue_cases(batch: str, rows: list[tuple[int, int, str]], repo: str = "vllm-ascend") -> list[dict]:
    """Issue threads whose fixing PR names them (or that name it): (issue, PR, what the trace holds)."""
    return [{"id": f"{repo}-{n}", "trace": f"bench/known_fixes/traces/{repo}-{n}.txt", "repo": repo,
             "thread": f"github.com/{GITHUB[repo]}/issues/{n}",
             "fixed_by": f"https://github.com/{GITHUB[repo]}/pull/{pr}", "batch": batch, "note": note}
            for n, pr, note in rows]


# Traces collected for this benchmark (bench/known_fixes/traces/): thread, the fix the thread names.
OWN_CASES = [
    {"id": "vllm-ascend-2033", "trace": "bench/known_fixes/traces/vllm-ascend-2033.txt", "repo": "vllm-ascend",
     "thread": "github.com/vllm-project/vllm-ascend/issues/2033", "fixed_by": "https://github.com/vllm-project/vllm-ascend/pull/2022",
     "note": "worker frames from the issue; its title holds the failing statement (the commit says Fix #2033)"},
    {"id": "vllm-ascend-1369", "trace": "bench/known_fixes/traces/vllm-ascend-1369.txt", "repo": "vllm-ascend",
     "thread": "github.com/vllm-project/vllm-ascend/issues/1369", "fixed_by": "https://github.com/vllm-project/vllm-ascend/pull/1844",
     "note": "error line of the issue title; the fixing commit names #1369"},
    {"id": "vllm-ascend-872", "trace": "bench/known_fixes/traces/vllm-ascend-872.txt", "repo": "vllm-ascend",
     "thread": "github.com/vllm-project/vllm-ascend/issues/872", "fixed_by": "https://github.com/vllm-project/vllm-ascend/pull/867",
     "note": "vllm frames of the issue; the error line is the issue title (the fixing commit names #872)"},
    {"id": "vllm-ascend-1572", "trace": "bench/known_fixes/traces/vllm-ascend-1572.txt", "repo": "vllm-ascend",
     "thread": "github.com/vllm-project/vllm-ascend/issues/1572", "fixed_by": "https://github.com/vllm-project/vllm-ascend/pull/1573",
     "note": "CI failure; vllm frames only; the fixing commit names #1572"},
    # Collected in session 3 from issue threads whose fix names the issue (or the issue names the fix);
    # split by thread hash when added, before any of them was scored (`batch` tells them apart).
    *_issue_cases("issues-s3", [
        (625, 639, "engine frames and error line of the issue (the fix says fix #625)"),
        (3096, 3113, "error line and engine frames of the issue (the fix says Fixes #3096)"),
        (1760, 1803, "error line and CLI frames of the issue (the fix names #1760)"),
        (1276, 1803, "error line of the issue title (a maintainer closed it by pull/1803)"),
        (10628, 10645, "API-server frames and the issue title; no exception line (the fix says Fixes #10628)"),
        (7996, 7683, "the issue's description of the failure, no trace (the fix says fix #7996)"),
        (10305, 10307, "the issue's description of the failure, no trace (the fix says Fixes #10305)"),
        (11588, 11589, "the issue's failure description and server log line (the fix says Fixes #11588)"),
        (9816, 9818, "the issue's description of the failure, no trace (the fix says Fixes #9816)"),
        (10322, 10369, "the issue title, the crash's only text there (the fix says Fixes #10322)"),
        (11284, 11282, "the issue's observed behaviour, a hang without trace (the fix says Fixes #11284)"),
        (10640, 11337, "worker frames of the issue, no exception line (the fix says Fixes #10640)"),
        (11885, 11886, "the issue's description with the code it blames (the fix says Fixes #11885)"),
        (11553, 11491, "the issue title (the fix says fixes #11553)"),
        (5445, 5444, "the issue's description of the failure (the fix says Closes .../issues/5445)"),
    ]),
    # Session 4: the same search for issues whose fix says `Fix #N` / `Fixes #N`; split by thread hash
    # when added (2 dev, 2 test), before any of them was scored.
    *_issue_cases("issues-s4", [
        (11395, 11405, "the issue title, its only description of the failure (the fix says Fix #11395)"),
        (10242, 10241, "the issue title (the fix's PR description says Fixes #10242)"),
        (5524, 6151, "the issue title (the fix says Fix .../issues/5524)"),
        (10045, 10043, "the issue title and the log lines it quotes (the fix names #10045)"),
    ]),
    # Session 5: issue threads found in the `issues` corpus for commits of the mirrors that say `Fix(es) #N` /
    # `Closes .../issues/N`, or whose issue a maintainer closed naming the PR; the issue's own text as the
    # search excerpt showed it. Split by thread hash when added, before any of them was scored.
    *_issue_cases("issues-s5", [
        (9790, 9791, "the issue's title and description of the failure (the fix says Fixes #9790)"),
        (6992, 8251, "the issue title and its one line (a maintainer: Solved #8251)"),
        (1038, 1416, "the issue title and the operator assert a maintainer pasted (the fix says Fix #1038)"),
        (1324, 1416, "the issue title and its error lines (a maintainer: closing as fixed by pull/1416)"),
        (1533, 1582, "the issue title, versions and the log's start; no error line (the fix says Fixes .../issues/1533)"),
        (3891, 3897, "the issue title (the error message) and worker frames (the fix says Fix #3891)"),
        (7308, 7427, "the issue's description of the failure with the log values it quotes (the fix says Fix .../issues/7308)"),
        (10684, 10775, "the issue's description of the failure (the fix says Fixes #10684)"),
        (473, 476, "the issue title and its install log up to the cut; no error line (the fix says Closes .../issues/473)"),
        (9891, 9911, "the issue title and its serve flags (the fix says Fixes #9891)"),
    ]),
    *_issue_cases("issues-s5", [
        (6289, 6290, "the issue's summary and the exception it quotes (the fix says Closes #6289)"),
        (5214, 5200, "the issue title and the Ray worker frames it pastes, no exception line (the fix says Fixes .../issues/5214)"),
        (6233, 6246, "the issue's reproduction: the socket path, the files and functions it blames (the fix says Closes #6233)"),
    ], repo="verl"),
    # Session 6: issue threads found in the `issues` corpus for commits of the mirrors (main and release branches)
    # that say `Fix(es) #N` / name the issue; the issue's own text as the search excerpt showed it. Split by
    # thread hash when added, before any of them was scored: 3 test (vllm-ascend #8686, verl #6027, #4996), 7 dev.
    *_issue_cases("issues-s6", [
        (6820, 6823, "the issue title and the worker's error lines (the fix, on releases/v0.13.0, names #6820)"),
        (1396, 1831, "the issue title (the assert) and the environment it lists (the fix, on v0.9.1-dev, says Related fixes: .../issues/1396)"),
        (8686, 8729, "the issue's title and description of the failure (the fix, on releases/v0.13.0, says Fixes #8686)"),
    ]),
    *_issue_cases("issues-s6", [
        (5342, 5348, "the issue title and the versions it lists (the fix says fix .../issues/5342)"),
        (5959, 5961, "the issue title, versions and the Ray frames it pastes (the fix's PR names #5959)"),
        (6027, 6089, "the issue's description and the exception it quotes (the fix says fixes #6027)"),
        (4996, 5002, "the issue's description and its frames (the fix names #4996)"),
        (4737, 4776, "the issue title (the error) and its frames (the fix names #4737)"),
        (6152, 6149, "the issue's description and stack trace (the fix says Fixes #6152)"),
        (4568, 4703, "the issue's summary of the failure, no trace (the fix says Fixes #4568)"),
    ], repo="verl"),
    # Session 7: issue threads found in the `issues` corpus for commits of the mirrors (main and release branches) that
    # say `Fix(es) #N` / name the issue; the issue's own text as the search excerpt showed it. Split by thread hash when
    # each was added, before any of them was scored: 2 test (vllm-ascend #7769, verl #5607), 6 dev.
    *_issue_cases("issues-s7", [
        (14306, 14236, "the issue title; its excerpt held npu-smi output only (the fix says Fixes #14306)"),
        (4430, 4553, "the issue title and the worker frames of its server log (the fix, on v0.11.0-dev, names issues/4430)"),
        (3548, 3549, "the issue title and the worker log it pastes, no error line (the fix names issues/3548)"),
        (449, 452, "the issue title (the assert), its environment and the frames it pastes (the fix names issues/449)"),
        (7769, 7789, "the issue title and the environment it lists (the fix names issue 7769)"),
    ]),
    *_issue_cases("issues-s7", [
        (2968, 2985, "the issue title (the ImportError) and the Ray frames it pastes (the fix says Fixes #2968)"),
        (3787, 3810, "the issue title, description and frames, cut before the error line (the fix says Fixes #3787)"),
        (5607, 5609, "the issue title and its analysis with the code it blames, a hang without trace (the fix says Fixes #5607)"),
    ], repo="verl"),
    # Session 8: verl issue threads found in the `issues` corpus for commits of the mirror that say `Fix(es) #N` /
    # `close #N` / `Closes #N` / name the issue; the issue's own text as the search excerpt showed it. Split by thread
    # hash when each was added, before any of them was scored: 3 test (#1412, #7198, #7289), 5 dev.
    *_issue_cases("issues-s8", [
        (2216, 2217, "the issue title (the TypeError), the rest of its excerpt empty (the fix says Fix .../issues/2216)"),
        (3137, 3141, "the issue title and its description with the code it blames (the fix says Fix #3137)"),
        (1420, 1846, "the issue title and the NCCL watchdog log it pastes (the fix says close #1420)"),
        (6365, 6405, "the issue's title, versions and bug description (the fix says Fixes #6365)"),
        (1376, 1400, "the issue title and description, the config it sets, no trace (the fix says fix .../issues/1376)"),
        (1412, 1423, "the issue title and description with the start of its Hydra error (the fix says fix .../issues/1412)"),
        (7198, 7199, "the issue's title and description, no trace (the fix says Fixes #7198)"),
        (7289, 7413, "the issue's title and analysis with the KeyError and the code it blames (the fix says Closes #7289)"),
    ], repo="verl"),
    # Session 9: verl issue threads found in the `issues` corpus for commits of the mirror that say `Fix(es) #N` /
    # `Close .../issues/N`; the issue's own text as the search excerpt showed it. Split by thread hash when each was
    # added, before any of them was scored: 2 test (#6609, #3855, added untouched), 6 dev.
    *_issue_cases("issues-s9", [
        (7156, 7157, "the issue's title, system info and reproduction naming the function it blames (the fix says Fixes #7156)"),
        (5859, 5860, "the issue's title, versions, error message and the code it blames (the fix says Fixes #5859)"),
        (7278, 7300, "the issue's title, versions and reproduction script, cut (the fix says Fixes #7278)"),
        (6733, 6738, "the issue's title and summary with the code it blames (the fix says Fixes #6733)"),
        (7191, 7193, "the issue's title, versions and current behaviour (the fix says Fixes #7191)"),
        (6821, 6842, "the issue title; its excerpt held the training script only (the fix says Fixes #6821)"),
        (6609, 6836, "the issue's title, summary, environment and symptom (the fix names issue 6609)"),
        (3855, 3856, "the issue's title and its description of the doc error (the fix says Fixes #3855)"),
    ], repo="verl"),
    # Session 9: upstream Triton issue threads whose fix is a commit of triton-ascend's history (its frontend is
    # Triton's, `python/triton/...`), found in the `issues` corpus for commits that say `Fix(es) #N`; split by thread
    # hash when added: 2 test (#5439, #6376, added untouched), 3 dev.
    *[{"id": f"triton-{n}", "trace": f"bench/known_fixes/traces/triton-{n}.txt", "repo": "triton-ascend",
       "thread": f"github.com/triton-lang/triton/issues/{n}", "fixed_by": sha, "batch": "issues-s9", "note": note}
      for n, sha, note in [
          (5364, "4d2e9e5de96a5d6ea163f2de04ae5c5b6be45825", "the issue's title, error line and reproduction, cut (the fix says Fixes #5364)"),
          (4879, "ef614882219f690a613cbfcad8f11136b45a8052", "the issue's title and one sentence; its error is a screenshot (the fix says Fixes #4879)"),
          (7921, "243be2573183569fac13c5b4e4574da1bb593ce8", "the issue's title, analysis and reproduction, cut (the fix says Fix #7921)"),
          (5439, "a52c88aa128eb5459e35c1809c3443bf9c7bd566", "the issue's title and reproduction with its wrong output (the fix names #5439)"),
          (6376, "a5e485f284b932659cc1da6aabb8c94bf6386ea5", "the issue's title and reproduction, cut (the fix says Fixes #6376)"),
      ]],
    # Session 10: verl issue threads and one upstream Triton thread found in the `issues` corpus for commits of the mirrors
    # that say `Fix(es) #N` / `close #N` / `This PR fixes #N` (or a maintainer's "fixed by #N"); the issue's own text as the
    # search excerpt showed it. Split by thread hash when each was added, before any of them was scored: 4 test (#4457,
    # #4620, #4147, #3050, added untouched), 7 dev.
    *_issue_cases("issues-s10", [
        (4049, 4051, "the issue's title (the GraphRecursionError), system info and reproduction (the fix says This PR fixes #4049)"),
        (4457, 4706, "the issue's title and description, no trace (the fix says Fixes #4457)"),
        (4620, 4695, "the issue's title (the AttributeError), error log and analysis naming the files it blames (the fix says Fixes #4620)"),
        (4147, 4248, "the issue's title and analysis with the code it blames, no trace (the fix says Closes #4147)"),
        (5325, 5326, "the issue's title, reproduction and expected behaviour, no trace (the fix says Fixes: #5325)"),
        (3050, 5326, "the issue title and the line it links, no trace (a maintainer: fixed by #5326, whose message says Related: #3050)"),
        (6454, 6688, "the issue's title, versions, the CUDA error and reproduction, cut (the fix says Fixes #6454)"),
        (6698, 6699, "the issue's title, summary naming the code it blames and setup (the fix says Fixes #6698)"),
        (6068, 6268, "the issue title and the expected behaviour its excerpt held, no trace (the fix says Fixes #6068)"),
        (5159, 5160, "the issue's title, versions, reproduction and the code line it blames (the fix says Fixes #5159)"),
    ], repo="verl"),
    # Session 11: vllm-ascend issue threads found in the `issues` corpus for release-line commits of the mirror that say
    # `Fixes #N`; the issue's title and description as the search excerpt showed it. Split by thread hash when each was
    # added, before any of them was scored: 1 test (#13501, added untouched), 1 dev.
    *_issue_cases("issues-s11", [
        (13863, 13865, "the issue's title, environment and description of the symptom, no trace (the fix, on releases/v0.23.0, says Fixes #13863)"),
        (13501, 13518, "the issue's title, environment and summary, no trace (the fix, on releases/v0.23.0, names #13501)"),
    ]),
    # Session 16: verl issue threads found in the `issues` corpus for commits of the mirror that say `fix #N`; the issue's
    # own text as the search excerpt showed it. The split of each thread was computed from its URL before its text was read.
    *_issue_cases("issues-s16", [
        (1534, 1536, "the issue's title, description and worker frames, cut before the error line (the fix says fix #1534)"),
    ], repo="verl"),
    {"id": "triton-6176", "trace": "bench/known_fixes/traces/triton-6176.txt", "repo": "triton-ascend",
     "thread": "github.com/triton-lang/triton/issues/6176", "fixed_by": "1748b81063da6e0dbc42e6e9d9dff51b35c99d31",
     "batch": "issues-s10", "note": "the issue title; its excerpt held a later comment only (the fix says Fix #6176)"},
    {"id": "vllm-ascend-3236", "trace": "tests/data/corpus/test/vllm-ascend-3236.txt", "repo": "vllm-ascend",
     "thread": "github.com/vllm-project/vllm-ascend/issues/3236", "batch": "issues-s3",
     "fixed_by": "https://github.com/vllm-project/vllm-ascend/pull/3234",
     "note": "a corpus case (no fixed_by there); the fixing commit says close .../issues/3236"},
]


# Environment faults collected for this benchmark (no plugin commit fixed them): thread, layer.
OWN_ENV_CASES = [
    {"id": "vllm-ascend-1356", "trace": "bench/known_fixes/traces/vllm-ascend-1356.txt",
     "thread": "github.com/vllm-project/vllm-ascend/issues/1356", "layer": "python-env", "batch": "issues-s5",
     "note": "a package the user's environment lacks (the issue is labelled question; no fix)"},
    {"id": "vllm-ascend-5635", "trace": "bench/known_fixes/traces/vllm-ascend-5635.txt",
     "thread": "github.com/vllm-project/vllm-ascend/issues/5635", "layer": "cann", "batch": "issues-s5",
     "note": "Mooncake KV transfer fails; a maintainer: needs CANN newer than 8.3RC1 and use_ascend_direct in the connector config"},
]


def split_of(thread: str) -> str:
    return "test" if int(hashlib.sha256(thread.encode()).hexdigest(), 16) % 3 == 0 else "dev"


def _repos(values: list[str]) -> dict[str, Path]:
    out = {}
    for v in values:
        name, _, path = v.partition("=")
        out[name] = Path(path).resolve()
    return out


def _git(repo: Path, *args: str) -> str:
    from porter import proc

    return proc.run(["git", *args], cwd=repo, timeout=300, check=True).stdout


def _pr_map(repo: Path) -> dict[int, str]:
    """PR number -> commit whose subject ends with (#N) (the squash merge), main first, then the
    other local branches (release lines)."""
    import re

    out: dict[int, str] = {}
    log = _git(repo, "log", "HEAD", "--format=%H\t%s") + _git(repo, "log", "--branches", "--not", "HEAD", "--format=%H\t%s")
    for line in log.splitlines():
        sha, _, subject = line.partition("\t")
        m = re.search(r"\(#(\d+)\)\s*$", subject)
        if m:
            out.setdefault(int(m.group(1)), sha)
    return out


def _norm(text: str) -> str:
    return " ".join(text.split())


def _leaky(trace: str, message: str) -> bool:
    from porter.kb.normalize import strip_prefix

    lines = [_norm(strip_prefix(x)) for x in trace.splitlines()]
    lines = [x for x in lines if len(x) >= 20]
    if not lines:
        return False
    msg = _norm(message)
    return sum(1 for x in lines if x in msg) * 2 >= len(lines)


def _repo_of(meta: dict) -> str | None:
    fb = str(meta.get("fixed_by", ""))
    if "vllm-project/vllm-ascend" in fb:
        return "vllm-ascend"
    if meta.get("layer") == "triton-ascend" and len(fb) == 40:
        return "triton-ascend"
    if "verl-project/verl" in fb:
        return "verl"
    return None


def build(repos: dict[str, Path]) -> None:
    pr_maps = {name: _pr_map(path) for name, path in repos.items()}
    cases, skipped = [], []
    bug_sources = list(OWN_CASES)
    corpus = ROOT / "tests" / "data" / "corpus"
    for meta_file in sorted(corpus.glob("*/*.yaml")):
        meta = yaml.safe_load(meta_file.read_text())
        trace = meta_file.with_suffix(".txt")
        if not trace.is_file():
            continue
        rel = str(trace.relative_to(ROOT))
        fb = meta.get("fixed_by")
        if fb and meta.get("kind") == "positive":
            bug_sources.append({"id": meta["id"], "trace": rel, "repo": _repo_of(meta), "thread": meta["thread"],
                                "fixed_by": str(fb), "layer": meta.get("layer")})
        elif not fb and meta.get("kind") == "positive" and meta.get("layer") in ENV_LAYERS:
            cases.append({"id": meta["id"], "kind": "env", "trace": rel, "thread": meta["thread"], "layer": meta["layer"],
                          "split": split_of(meta["thread"])})
    for c in OWN_ENV_CASES:
        cases.append({"id": c["id"], "kind": "env", "trace": c["trace"], "thread": c["thread"], "layer": c["layer"],
                      "split": split_of(c["thread"]), "batch": c["batch"], "note": c["note"]})
    heldout = ROOT / "tests" / "data" / "heldout"
    for c in yaml.safe_load((heldout / "index.yaml").read_text())["cases"]:
        thread = c["source"].split("://", 1)[-1]
        cases.append({"id": "heldout-" + c["file"].split("-", 1)[0], "kind": "env", "trace": f"tests/data/heldout/{c['file']}",
                      "thread": thread, "layer": "kb:" + ",".join(c.get("expected") or ["unknown"]), "split": split_of(thread)})
    for src in bug_sources:
        repo = src.get("repo")
        if repo not in repos:
            skipped.append({"id": src["id"], "reason": f"no history for {repo or 'its repository'} here"})
            continue
        fb = src["fixed_by"]
        sha = fb if len(fb) == 40 else pr_maps[repo].get(int(fb.rstrip("/").rsplit("/", 1)[-1]))
        from porter import proc

        if not sha or proc.run(["git", "cat-file", "-t", sha], cwd=repos[repo], timeout=60).stdout.strip() != "commit":
            skipped.append({"id": src["id"], "reason": f"fix {fb} is not a commit of {repo}'s branches"})
            continue
        on_main = proc.run(["git", "merge-base", "--is-ancestor", sha, "HEAD"], cwd=repos[repo], timeout=60).ok
        message = _git(repos[repo], "log", "-1", "--format=%B", sha)
        trace_text = (ROOT / src["trace"]).read_text(errors="replace")
        cases.append({"id": src["id"], "kind": "bug", "trace": src["trace"], "thread": src["thread"], "repo": repo,
                      "fixed_by": fb, "fix_sha": sha, "fix_subject": message.splitlines()[0], "on_main": on_main,
                      "leaky": _leaky(trace_text, message), "split": split_of(src["thread"]),
                      **({"batch": src["batch"]} if src.get("batch") else {}),
                      **({"note": src["note"]} if src.get("note") else {})})
    doc = {"version": 1, "repos": {n: "main" for n in repos}, "cases": cases, "skipped": skipped}
    INDEX.write_text("# Generated by `python bench/known_fixes.py build`; see the script's docstring.\n"
                     + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=140))
    bugs = [c for c in cases if c["kind"] == "bug"]
    print(f"{len(bugs)} bug cases ({sum(c['leaky'] for c in bugs)} leaky), "
          f"{len(cases) - len(bugs)} environment cases, {len(skipped)} skipped -> {INDEX}")


def issue_number(case: dict) -> int | None:
    """The number of the case's issue thread in its own repository (github.com/<owner>/<repo>/issues/N)."""
    import re

    m = re.search(r"/([\w.-]+)/issues/(\d+)$", case.get("thread", ""))
    return int(m.group(2)) if m and m.group(1) == case.get("repo", "vllm-ascend") else None


def score(repos: dict[str, Path], split: str, use_message: bool, verbose: bool, cache: Path, all_branches: bool = False,
          mask_quotes: bool = False, issue_given: bool = False) -> dict:
    from porter.kb.history import mine
    from porter.kb.history.lookup import HistorySource, analyse_diagnosis
    from porter.kb.loader import load_kb
    from porter.kb.matcher import diagnose_text

    doc = yaml.safe_load(INDEX.read_text())
    kb = load_kb(ROOT / "knowledge" / "patterns", None).compiled()
    indexes, load_s = {}, {}
    ref = mine.ALL_BRANCHES if all_branches else "HEAD"
    for name, path in repos.items():
        mine.build_index(path, cache, ref)
        t = time.perf_counter()
        indexes[name] = mine.cached_index(cache, path, mine.index_key(path, ref)[0])
        load_s[name] = time.perf_counter() - t
    rows, times = [], []
    for case in doc["cases"]:
        if split != "all" and case["split"] != split:
            continue
        repo = case.get("repo", "vllm-ascend")
        if repo not in repos:
            continue
        text = (ROOT / case["trace"]).read_text(errors="replace")
        diag = diagnose_text(kb, text)
        src = HistorySource(repo, repos[repo], packages=(repo,))
        t = time.perf_counter()
        rep = analyse_diagnosis(src, diag, text, {}, cache, index=indexes[repo], use_message=use_message,
                                mask_quotes=mask_quotes, issue=issue_number(case) if issue_given else None)
        times.append(time.perf_counter() - t)
        # a candidate names its cherry-picks too (Candidate.also): the case's fix is found as either copy
        shas = [{c.sha, *(sha for sha, _ in c.also)} for c in rep.candidates]
        row = {"id": case["id"], "kind": case["kind"], "split": case["split"], "leaky": case.get("leaky", False),
               "batch": case.get("batch", ""), "on_main": case.get("on_main", True),
               "status": rep.status, "frames": len(rep.frames), "installed": rep.installed.ref,
               "rank": next((i + 1 for i, group in enumerate(shas) if case.get("fix_sha") in group), None),
               "contained": any(c.sha == case.get("fix_sha") for c in rep.contained),
               "top": [f"{c.sha[:10]} {c.score:.1f} {c.subject[:70]}" for c in rep.candidates]}
        rows.append(row)
        if verbose:
            want = f" want {case['fix_sha'][:10]} {case.get('fix_subject', '')[:60]}" if case.get("fix_sha") else ""
            print(f"{row['id']:28} {row['kind']:3} {row['split']:4} rank={row['rank']} frames={row['frames']} "
                  f"inst={row['installed']}{want}")
            for line in row["top"]:
                print(f"      {line}")

    def figures(sel: list[dict]) -> dict:
        n = len(sel)
        return {"n": n, "top1": sum(1 for r in sel if r["rank"] == 1), "top3": sum(1 for r in sel if r["rank"] and r["rank"] <= 3)}

    out: dict = {"use_message": use_message, "mask_quotes": mask_quotes, "issue_given": issue_given, "all_branches": all_branches, "index_load_s": {k: round(v, 3) for k, v in load_s.items()}, "splits": {}}
    for sp in (["dev", "test"] if split == "all" else [split]):
        bugs = [r for r in rows if r["kind"] == "bug" and r["split"] == sp]
        env = [r for r in rows if r["kind"] == "env" and r["split"] == sp]
        out["splits"][sp] = {
            "bug_all": figures(bugs),
            "bug_not_leaky": figures([r for r in bugs if not r["leaky"]]),
            "bug_with_frames": figures([r for r in bugs if r["frames"]]),
            "bug_issues_s3": figures([r for r in bugs if r["batch"] == "issues-s3"]),
            "bug_issues_s4": figures([r for r in bugs if r["batch"] == "issues-s4"]),
            "bug_issues_s5": figures([r for r in bugs if r["batch"] == "issues-s5"]),
            "bug_before_s5": figures([r for r in bugs if r["batch"] not in ("issues-s5", "issues-s6")]),
            "bug_issues_s6": figures([r for r in bugs if r["batch"] == "issues-s6"]),
            "bug_before_s6": figures([r for r in bugs if r["batch"] not in ("issues-s6", "issues-s7")]),
            "bug_issues_s7": figures([r for r in bugs if r["batch"] == "issues-s7"]),
            "bug_before_s7": figures([r for r in bugs if r["batch"] not in ("issues-s7", "issues-s8")]),
            "bug_issues_s8": figures([r for r in bugs if r["batch"] == "issues-s8"]),
            "bug_before_s8": figures([r for r in bugs if r["batch"] not in ("issues-s8", "issues-s9")]),
            "bug_issues_s9": figures([r for r in bugs if r["batch"] == "issues-s9"]),
            "bug_before_s9": figures([r for r in bugs if r["batch"] not in ("issues-s9", "issues-s10")]),
            "bug_issues_s10": figures([r for r in bugs if r["batch"] == "issues-s10"]),
            "bug_before_s10": figures([r for r in bugs if r["batch"] not in ("issues-s10", "issues-s11")]),
            "bug_issues_s11": figures([r for r in bugs if r["batch"] == "issues-s11"]),
            "bug_before_s11": figures([r for r in bugs if r["batch"] != "issues-s11"]),
            "bug_release_only": figures([r for r in bugs if not r["on_main"]]),
            "env": {"n": len(env), "with_candidate": sum(1 for r in env if r["top"])},
            "env_before_s5": {"n": sum(1 for r in env if r["batch"] != "issues-s5"),
                              "with_candidate": sum(1 for r in env if r["top"] and r["batch"] != "issues-s5")},
        }
    env_all = [r for r in rows if r["kind"] == "env"]
    out["env_all"] = {"n": len(env_all), "with_candidate": sum(1 for r in env_all if r["top"])}
    if times:
        out["per_trace_s"] = {"mean": round(statistics.mean(times), 3), "max": round(max(times), 3),
                              "p50": round(statistics.median(times), 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=["build", "score"])
    ap.add_argument("--repo", action="append", default=[], help="NAME=PATH of a git clone with full history")
    ap.add_argument("--split", default="dev", choices=["dev", "test", "all"])
    ap.add_argument("--no-message", action="store_true", help="rank on code evidence only (ablation)")
    ap.add_argument("--mask-quotes", action="store_true",
                    help="leave out the parts of each commit message that quote the trace: lines, mined error strings, title (scores what a never-quoted trace would get)")
    ap.add_argument("--issue-given", action="store_true",
                    help="pass each issue-thread case's issue number (`diagnose --issue N`): checks that mechanism; "
                         "no headline figure, the issue cases were collected by the very references it reads")
    ap.add_argument("--head-only", action="store_true",
                    help="index HEAD's branch only (before session 6 the default), not every branch with its release lines")
    ap.add_argument("--all-branches", action="store_true", help=argparse.SUPPRESS)  # the default since session 6
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "porter"), help="porter cache dir for the index")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    repos = _repos(args.repo)
    if not repos:
        ap.error("pass --repo vllm-ascend=/path/to/clone")
    if args.action == "build":
        build(repos)
        return 0
    res = score(repos, args.split, not args.no_message, args.verbose, Path(args.cache), not args.head_only, args.mask_quotes,
                args.issue_given)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        for sp, f in res["splits"].items():
            b, nl, wf, e, new, s5 = (f["bug_all"], f["bug_not_leaky"], f["bug_with_frames"], f["env"], f["bug_issues_s3"],
                                     f["bug_issues_s5"])
            print(f"[{sp}] fixing commit found: top-1 {b['top1']}/{b['n']}, top-3 {b['top3']}/{b['n']} "
                  f"(not leaky: {nl['top1']}/{nl['n']}, {nl['top3']}/{nl['n']}; with plugin frames: {wf['top1']}/{wf['n']}, "
                  f"{wf['top3']}/{wf['n']}; issue threads of session 3: {new['top1']}/{new['n']}, {new['top3']}/{new['n']}; "
                  f"of session 5: {s5['top1']}/{s5['n']}, {s5['top3']}/{s5['n']}; "
                  f"of session 6: {f['bug_issues_s6']['top1']}/{f['bug_issues_s6']['n']}, {f['bug_issues_s6']['top3']}/{f['bug_issues_s6']['n']}; "
                  f"of session 7: {f['bug_issues_s7']['top1']}/{f['bug_issues_s7']['n']}, {f['bug_issues_s7']['top3']}/{f['bug_issues_s7']['n']}; "
                  f"of session 8: {f['bug_issues_s8']['top1']}/{f['bug_issues_s8']['n']}, {f['bug_issues_s8']['top3']}/{f['bug_issues_s8']['n']}; "
                  f"of session 9: {f['bug_issues_s9']['top1']}/{f['bug_issues_s9']['n']}, {f['bug_issues_s9']['top3']}/{f['bug_issues_s9']['n']}; "
                  f"of session 10: {f['bug_issues_s10']['top1']}/{f['bug_issues_s10']['n']}, {f['bug_issues_s10']['top3']}/{f['bug_issues_s10']['n']}; "
                  f"cases before session 10: {f['bug_before_s10']['top1']}/{f['bug_before_s10']['n']}, {f['bug_before_s10']['top3']}/{f['bug_before_s10']['n']}; "
                  f"fixed on a release branch only: {f['bug_release_only']['top1']}/{f['bug_release_only']['n']}, {f['bug_release_only']['top3']}/{f['bug_release_only']['n']}); "
                  f"environment faults with a candidate: {e['with_candidate']}/{e['n']}")
        print(f"index load {res['index_load_s']} s; extra time per trace (warm index): {res.get('per_trace_s')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
