"""Benchmark of `porter upgrade` on real releases (not part of CI; needs the sdists and griffe).

    .venv/bin/pip install griffe            # benchmark-only dependency (or: pip install --target DIR griffe
                                            # and put DIR on PYTHONPATH; the griffe processes inherit it)
    .venv/bin/python bench/upgrade.py [--plugin-version 0.18.0] [--baseline 0.18.0] [--target 0.22.1]
                                      [--later-plugin 0.23.0.post1] [--repeat 1] [--out upgrade-load1-2.json]
                                      [--findings-out /tmp/findings.json] [--no-compile]

Sources: the sdists in the shared cache /work/cache/pypi (`<name>-<version>.tar.gz`; downloaded
there from pip's configured index when missing). Figures:
  * end to end, cold: `python -m porter upgrade vllm-ascend --from OLD --to NEW --plugin-path <sdist>
    --upstream-path OLD=<sdist> --upstream-path NEW=<sdist> --dry-run --json` with a fresh cache
    (a process of its own: source extraction, scan, index of what the plugin reaches, drift), against
    griffe end to end: a process that extracts the Python sources of both upstream sdists (porter's
    extractor, lean as porter unpacks an upstream: the same work) and loads both packages whole
    (static, no inspection);
  * end to end, warm: the same porter command again (result cache) and in-process `run_analysis`;
  * like for like: the same module set (every module porter's index read in that run), parsed in one
    process by porter's parser and by griffe's loader (`submodules=False`), both from extracted trees;
  * agreement of porter's "does this import resolve at the target?" with griffe's alias resolution,
    findings by family, and a sanity run of the plugin against its own release.
Before timing, porter's own modules are byte-compiled (`compileall`, as `pip install` does; the
griffe install has its bytecode too): with PYTHONDONTWRITEBYTECODE set, a source checkout would
otherwise compile every module on each start (about 0.15 s). `--no-compile` measures without.
Results: bench/results/upgrade.json and a Markdown summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SDISTS = Path(os.environ.get("PORTER_BENCH_SDISTS", "/work/cache/pypi"))
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

from porter.upgrade.sources import Sources, extract_archive  # noqa: E402


def sdist(name: str, version: str) -> Path:
    """`<name>-<version>.tar.gz` from the shared cache, downloaded (sha256 checked) when missing."""
    stem = name.replace("-", "_")
    for candidate in (SDISTS / f"{stem}-{version}.tar.gz", SDISTS / f"{name}-{version}.tar.gz"):
        if candidate.is_file():
            return candidate
    with tempfile.TemporaryDirectory() as cache:
        sources = Sources(Path(cache))
        files = sources.pypi_project(name)["releases"].get(version, [])
        SDISTS.mkdir(parents=True, exist_ok=True)
        got = sources._sdist_download(files, SDISTS)
    if got is None:
        raise SystemExit(f"no sdist of {name} {version} on the index")
    return got


def extracted(archive: Path, work: Path) -> Path:
    dest = work / archive.name.replace(".tar.gz", "")
    if not (dest / ".porter-complete").is_file():
        extract_archive(archive, dest)
    return dest


def analyse(plugin: Path, baseline: tuple[str, Path], target: tuple[str, Path], cache: Path):
    from porter.config import load_config
    from porter.upgrade.analyze import AnalysisRequest, run_analysis

    import dataclasses

    config = dataclasses.replace(load_config(cwd=ROOT), cache_dir=cache, offline=True)
    request = AnalysisRequest(plugin="vllm-ascend", target=target[0], baseline=baseline[0], plugin_path=plugin,
                              upstream_paths={baseline[0]: baseline[1], target[0]: target[1]}, config=config)
    t0 = time.perf_counter()
    report = run_analysis(request)
    return report, time.perf_counter() - t0


GRIFFE_E2E = """
import json, sys, tempfile, time
from pathlib import Path
t0 = time.perf_counter()
import griffe
from porter.upgrade.sources import LEAN_SKIPPED, extract_archive
work = Path(tempfile.mkdtemp())
for i, archive in enumerate(sys.argv[1:]):
    dest = work / str(i)
    extract_archive(Path(archive), dest, skip_top=LEAN_SKIPPED)  # what porter unpacks of an upstream
    griffe.load("vllm", search_paths=[str(dest)], allow_inspection=False)
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""

GRIFFE_MODULES = """
import json, sys, time
from pathlib import Path
import griffe
root = Path(sys.argv[1])
files = json.load(open(sys.argv[2]))  # module -> file, as porter's index found them
t0 = time.perf_counter()
failed = 0
for name, rel in files.items():
    # one module on its own, as porter's index parses it (loader.load("pkg.mod", submodules=False)
    # answers only the top package and fails on every submodule)
    path = root / rel
    try:
        griffe.visit(name.rsplit(".", 1)[-1], path, path.read_text(encoding="utf-8"))
    except Exception:
        failed += 1
print(json.dumps({"seconds": time.perf_counter() - t0, "failed": failed}))
"""

GRIFFE_VERDICTS = """
import json, sys, griffe
from griffe import AliasResolutionError, CyclicAliasError
pkg = griffe.load("vllm", search_paths=[sys.argv[1]], allow_inspection=False)
out = {}
for symbol in json.load(open(sys.argv[2])):
    rel = symbol.split(".", 1)[1] if "." in symbol else ""
    try:
        obj = pkg[rel] if rel else pkg
    except (KeyError, AliasResolutionError, CyclicAliasError):
        out[symbol] = "missing"
        continue
    if getattr(obj, "is_alias", False):
        try:
            obj.final_target
            out[symbol] = "present"
        except (AliasResolutionError, CyclicAliasError):
            target = getattr(obj, "target_path", "") or ""
            out[symbol] = "present-external" if not target.startswith("vllm") else "unresolved"
    else:
        out[symbol] = "present"
print(json.dumps(out))
"""


def _timed_process(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float, int, str, str]:
    """(wall seconds, CPU seconds of the process and its children, exit code, stdout, stderr)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return wall, usage.ru_utime + usage.ru_stime, proc.returncode, out.read().decode(), err.read().decode()


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _pythonpath() -> str:
    """This checkout first, then whatever PYTHONPATH brings (griffe may be installed outside the venv)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def griffe_e2e(*archives: Path) -> tuple[float, float]:
    """(wall, CPU) of griffe extracting and loading both trees in a process of its own."""
    env = dict(os.environ, PYTHONPATH=_pythonpath())
    wall, cpu, code, out, err = _timed_process([sys.executable, "-c", GRIFFE_E2E, *map(str, archives)], env)
    if code != 0:
        raise SystemExit(f"griffe run failed ({code}): {err[-2000:]}")
    return wall, cpu


def _griffe_script(script: str, path: Path, items):
    """Run a griffe script on `path` with `items` passed as a JSON file; its JSON answer."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(items, fh)
    try:
        out = subprocess.run([sys.executable, "-c", script, str(path), fh.name], check=True,
                             capture_output=True, text=True)
    finally:
        os.unlink(fh.name)
    return json.loads(out.stdout)


def griffe_modules_seconds(tree: Path, modules: list[str]) -> dict:
    from porter.upgrade.index import discover_modules

    files = discover_modules(tree, ["vllm"])
    return _griffe_script(GRIFFE_MODULES, tree, {m: str(files[m].relative_to(tree)) for m in modules if m in files})


def porter_modules_seconds(tree: Path, modules: list[str]) -> float:
    """porter's parser over the same modules, one process, no cache."""
    from porter.upgrade.index import discover_modules, parse_module

    files = discover_modules(tree, ["vllm"])
    t0 = time.perf_counter()
    for name in modules:
        path = files.get(name)
        if path is not None and path.is_file():
            parse_module(name, str(path.relative_to(tree)), path.read_bytes())
    return time.perf_counter() - t0


def stable_findings(cli_json: str) -> dict:
    """The CLI's --json without what legitimately differs between runs (timings, cache statistics,
    tree roots under the temporary cache, from_cache, the notices naming cache paths)."""
    doc = json.loads(cli_json)
    analysis = doc.get("analysis", doc)
    for key in ("timings", "index", "notices"):
        analysis.pop(key, None)
    for key in ("plugin_tree", "baseline", "target"):
        if isinstance(analysis.get(key), dict):
            for volatile in ("root", "from_cache"):
                analysis[key].pop(volatile, None)
    doc.pop("porter_version", None)
    return doc


def findings_digest(cli_json: str) -> str:
    """sha256 of stable_findings(): equal digests, equal findings."""
    import hashlib

    return hashlib.sha256(json.dumps(stable_findings(cli_json), sort_keys=True).encode()).hexdigest()


def porter_cli(args: list[str], cache: Path, keep: Path | None = None) -> tuple[float, float, str]:
    """(wall, CPU with children, findings digest) of one `porter` CLI run in a process of its own;
    `keep`: where to write its stable findings (indented JSON, to diff two porter versions)."""
    env = dict(os.environ, PORTER_CACHE_DIR=str(cache), PORTER_OFFLINE="1", PYTHONPATH=_pythonpath())
    wall, cpu, code, out, err = _timed_process([sys.executable, "-m", "porter", *args], env, cwd=ROOT)
    if code not in (0, 1):
        raise SystemExit(f"porter failed ({code}): {err[-2000:]}")
    if keep is not None:
        keep.write_text(json.dumps(stable_findings(out), sort_keys=True, indent=1) + "\n", encoding="utf-8")
    return wall, cpu, findings_digest(out)


class ModuleRecorder:
    """Which modules each TreeIndex reads during one analysis (the like-for-like module set)."""

    def __init__(self):
        from porter.upgrade import index as index_mod

        self.index_mod = index_mod
        self.seen: dict[str, set[str]] = {}

    def __enter__(self):
        cls = self.index_mod.TreeIndex
        self.original = (cls.module, self.index_mod.prefetch_many)
        recorder = self

        def module(index, name):
            info = recorder.original[0](index, name)
            if info is not None and name in index.files and index.files[name].is_file():
                recorder.seen.setdefault(str(index.root), set()).add(name)
            return info

        def prefetch_many(requests, progress=None, workers=None, **options):
            requests = [(index, list(names)) for index, names in requests]
            for index, names in requests:
                recorder.seen.setdefault(str(index.root), set()).update(
                    n for n in names if n in index.files and index.files[n].is_file())
            return recorder.original[1](requests, progress, workers, **options)

        cls.module, self.index_mod.prefetch_many = module, prefetch_many
        return self

    def __exit__(self, *exc):
        self.index_mod.TreeIndex.module, self.index_mod.prefetch_many = self.original


def griffe_verdicts(path: Path, symbols: list[str]) -> dict[str, str]:
    return _griffe_script(GRIFFE_VERDICTS, path, symbols)


def agreement(report, griffe: dict[str, str]) -> dict:
    compared = agree = 0
    disagreements = []
    undetermined = 0
    for v in report.verdicts:
        g = griffe.get(v.symbol)
        if g is None or g == "unresolved":
            undetermined += 1
            continue
        porter_ok = v.status in ("found", "external", "unknown")
        griffe_ok = g in ("present", "present-external")
        if v.status == "unknown":
            undetermined += 1
            continue
        compared += 1
        if porter_ok == griffe_ok:
            agree += 1
        else:
            disagreements.append({"symbol": v.symbol, "porter": v.status, "griffe": g})
    return {"compared": compared, "agree": agree, "rate": round(agree / compared, 4) if compared else None,
            "undetermined": undetermined, "disagreements": disagreements}


def later_release_check(report, later_plugin: Path) -> list[dict]:
    """What the later plugin release did with each finding's use."""
    from porter.upgrade.usage import scan_plugin

    files = scan_plugin(later_plugin, ["vllm"])
    uses = [u for f in files for u in f.uses]
    imported = {u.symbol for u in uses if u.kind in ("import", "module", "attribute", "monkeypatch")}
    unguarded = {u.symbol for u in uses if u.kind in ("import", "module", "attribute", "monkeypatch") and not u.conditions}
    names = {u.symbol.rsplit(".", 1)[-1] for u in uses if u.kind == "import"}
    subclasses = [u for u in uses if u.kind == "subclass"]
    calls = [u for u in uses if u.kind == "call"]
    rows = []
    for rec in report.records:
        row = {"family": rec.family.value, "symbol": rec.symbol,
               "porter_new_home": rec.new_location.dotted if rec.new_location else None}
        fam = rec.family.value
        if fam in ("F1", "F2", "F2r", "F11"):
            still = rec.symbol in imported
            new = rec.new_location.dotted if rec.new_location else None
            uses_new = bool(new and (new in imported or any(s.startswith(new + ".") for s in imported)))
            replacement = sorted(s for s in imported if s.rsplit(".", 1)[-1] == rec.symbol.rsplit(".", 1)[-1] and s != rec.symbol)
            row.update(still_used=still, later_uses_porter_home=uses_new, later_same_name_imports=replacement[:3],
                       verdict=("changed to porter's home" if uses_new and not still else
                                "changed elsewhere" if not still and replacement else
                                "use dropped" if not still and rec.symbol.rsplit(".", 1)[-1] not in names else
                                "kept behind a guard/try, new home also used" if still and uses_new else
                                "kept behind a guard/try" if still and rec.symbol not in unguarded else
                                "still used unguarded (not fixed)"))
        elif fam == "F3" and rec.detail.get("change") == "override_mismatch":
            cls, method = rec.detail.get("plugin_class"), rec.detail.get("method")
            added = set(rec.detail.get("added", []))
            match = [u for u in subclasses if u.detail.get("cls") == cls and method in u.detail.get("methods", {})]
            if not match:
                row.update(verdict="override removed or class gone")
            else:
                sig = match[0].detail["methods"][method]
                ok = all(sig.accepts_keyword(p) for p in added) if added else True
                row.update(verdict="override adapted" if ok else "override unchanged")
        elif fam == "F3":
            param = rec.detail.get("parameter")
            same = [u for u in calls if u.symbol == rec.symbol]
            if not same:
                row.update(verdict="call removed or moved")
            elif rec.detail.get("change") == "keyword_removed":
                row.update(verdict="call adapted" if all(param not in u.detail.get("keywords", []) for u in same) else "call unchanged")
            elif rec.detail.get("change") == "new_required_parameter":
                row.update(verdict="call adapted" if all(param in u.detail.get("keywords", []) or u.detail.get("positional", 0) > 1 or u.detail.get("star_kwargs") for u in same) else "call unchanged")
            else:
                row.update(verdict="call still present")
        elif fam == "F4":
            same = [u for u in calls if u.symbol == rec.symbol]
            row.update(verdict="call still present (check how the result is used)" if same else "call removed or moved")
        elif fam in ("F7", "F8"):
            cls = rec.detail.get("plugin_class")
            wanted = set(rec.detail.get("attributes") or rec.detail.get("methods") or [])
            match = [u for u in subclasses if u.detail.get("cls") == cls and u.symbol == rec.symbol]
            if not match:
                row.update(verdict="subclass removed or rebased")
            else:
                have = set(match[0].detail.get("methods", {})) | set(match[0].detail.get("attrs", []))
                fixed = wanted <= have or (fam == "F7" and match[0].detail.get("calls_super_init"))
                row.update(verdict="adapted" if fixed else "unchanged")
        else:
            match = [u for u in subclasses if u.symbol == rec.symbol]
            row.update(verdict="subclass kept" if match else "subclass removed")
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugin-version", default="0.18.0")
    parser.add_argument("--later-plugin", default="0.23.0.post1", help="'' to skip the later-release check")
    parser.add_argument("--baseline", default="0.18.0")
    parser.add_argument("--target", default="0.22.1")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", default="upgrade.json", help="a bare file name lands under bench/results/ (say the load: upgrade-load1-2.json); a path is used as given")
    parser.add_argument("--findings-out", type=Path, default=None,
                        help="write the first cold run's --json findings here (stable parts, indented) to diff two porter versions")
    parser.add_argument("--no-compile", action="store_true",
                        help="do not byte-compile porter first (a checkout under PYTHONDONTWRITEBYTECODE compiles on each start)")
    args = parser.parse_args()
    if not args.no_compile:  # as installed: bytecode next to the sources (__pycache__ is git-ignored)
        import compileall

        compileall.compile_dir(str(ROOT / "porter"), quiet=1, force=False)

    t0 = time.perf_counter()
    plugin_a, base_a, target_a = sdist("vllm-ascend", args.plugin_version), sdist("vllm", args.baseline), sdist("vllm", args.target)
    work = Path(tempfile.mkdtemp(prefix="porter-bench-trees-"))
    plugin, base, target = extracted(plugin_a, work), extracted(base_a, work), extracted(target_a, work)
    later = extracted(sdist("vllm-ascend", args.later_plugin), work) if args.later_plugin else None
    prepare = time.perf_counter() - t0
    cli = ["upgrade", "vllm-ascend", "--from", args.baseline, "--to", args.target, "--plugin-path", str(plugin_a),
           "--upstream-path", f"{args.baseline}={base_a}", "--upstream-path", f"{args.target}={target_a}", "--dry-run", "--json"]

    e2e_cold, e2e_warm, griffe_runs, cold, warm = [], [], [], [], []
    cold_cpu, warm_cpu, griffe_cpu, digests, pairs = [], [], [], set(), []
    report = None
    for _ in range(args.repeat):
        # porter and griffe back to back, so each pair ran under about the same load
        load_before = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="porter-bench-") as cache:
            wall, cpu, digest = porter_cli(cli, Path(cache), args.findings_out if not pairs else None)
            e2e_cold.append(wall)
            cold_cpu.append(cpu)
            digests.add(digest)
            wall_warm, cpu_warm, digest_warm = porter_cli(cli, Path(cache))
            e2e_warm.append(wall_warm)
            warm_cpu.append(cpu_warm)
            digests.add(digest_warm)
        g_wall, g_cpu = griffe_e2e(base_a, target_a)
        griffe_runs.append(g_wall)
        griffe_cpu.append(g_cpu)
        pairs.append({"porter_cold_s": round(wall, 3), "porter_cold_cpu_s": round(cpu, 3), "porter_warm_s": round(wall_warm, 3),
                      "porter_warm_cpu_s": round(cpu_warm, 3), "griffe_s": round(g_wall, 3),
                      "griffe_cpu_s": round(g_cpu, 3), "ratio": round(wall / g_wall, 3),
                      "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)]})
        print(f"  run {len(pairs)}: porter cold {wall:.2f} s (CPU {cpu:.2f} s), griffe {g_wall:.2f} s "
              f"(CPU {g_cpu:.2f} s): {wall / g_wall:.3f}; load {load_before:.2f} -> {os.getloadavg()[0]:.2f}",
              flush=True)
        with tempfile.TemporaryDirectory(prefix="porter-bench-") as cache:
            with ModuleRecorder() as recorder:
                report, seconds = analyse(plugin, (args.baseline, base), (args.target, target), Path(cache))
            cold.append(seconds)
            for _ in range(2):
                _, seconds = analyse(plugin, (args.baseline, base), (args.target, target), Path(cache))
                warm.append(seconds)
    assert report is not None
    with tempfile.TemporaryDirectory(prefix="porter-bench-own-") as own_cache:
        own, _ = analyse(plugin, (args.baseline, base), (args.baseline, base), Path(own_cache))

    like: dict[str, dict] = {}
    for label, tree_root in (("baseline", base), ("target", target)):
        modules = sorted(recorder.seen.get(str(tree_root.resolve()), set()) | recorder.seen.get(str(tree_root), set()))
        g = griffe_modules_seconds(tree_root, modules)
        like[label] = {"modules": len(modules), "porter_seconds": round(porter_modules_seconds(tree_root, modules), 3),
                       "griffe_seconds": round(g["seconds"], 3), "griffe_failed": g["failed"]}
    like_porter = sum(v["porter_seconds"] for v in like.values())
    like_griffe = sum(v["griffe_seconds"] for v in like.values())

    symbols = [v.symbol for v in report.verdicts]
    agree = agreement(report, griffe_verdicts(target, symbols))
    by_family: dict[str, int] = {}
    for r in report.records:
        by_family[r.family.value] = by_family.get(r.family.value, 0) + 1
    notes_by_family: dict[str, int] = {}
    for r in report.notes:
        notes_by_family[r.family.value] = notes_by_family.get(r.family.value, 0) + 1
    later_rows = later_release_check(report, later) if later is not None else []
    result = {
        "pair": {"plugin": f"vllm-ascend {args.plugin_version}", "baseline": f"vllm {args.baseline}",
                 "target": f"vllm {args.target}", "later_plugin": f"vllm-ascend {args.later_plugin}" if later else None},
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "porter_bytecode": not args.no_compile,
        "prepare_seconds": round(prepare, 2),
        "end_to_end": {"porter_cold_cli_seconds": [round(x, 3) for x in e2e_cold],
                       "porter_cold_cli_cpu_seconds": [round(x, 3) for x in cold_cpu],
                       "porter_warm_cli_seconds": [round(x, 3) for x in e2e_warm],
                       "porter_warm_cli_cpu_seconds": [round(x, 3) for x in warm_cpu],
                       "griffe_extract_and_load_both_seconds": [round(x, 3) for x in griffe_runs],
                       "griffe_cpu_seconds": [round(x, 3) for x in griffe_cpu],
                       "ratio": round(min(e2e_cold) / min(griffe_runs), 3),
                       "ratio_median_of_pairs": round(sorted(p["ratio"] for p in pairs)[len(pairs) // 2], 3),
                       "cpu_ratio": round(min(cold_cpu) / min(griffe_cpu), 3),
                       "cpu_ratio_median_of_pairs": round(_median([p["porter_cold_cpu_s"] / p["griffe_cpu_s"] for p in pairs]), 3),
                       "porter_cold_median_s": round(_median(e2e_cold), 3), "griffe_median_s": round(_median(griffe_runs), 3),
                       "pairs": pairs,
                       "findings_digests": sorted(digests)},
        "in_process": {"porter_cold_seconds": [round(x, 3) for x in cold], "porter_warm_seconds": [round(x, 3) for x in warm],
                       "timings": {k: round(v, 3) for k, v in report.timings.items()}},
        "like_for_like": {**like, "ratio": round(like_porter / like_griffe, 3) if like_griffe else None,
                          "processes": 1},
        "usage": report.usage.to_dict(),
        "outcome": report.outcome.to_dict(),
        "findings_by_family": by_family,
        "notes_by_family": notes_by_family,
        "guards": {v: sum(1 for g in report.dead_guards if g.verdict == v) for v in ("collapse", "retarget", "keep")},
        "own_release_sanity": {"breaking": len(own.breaking), "records": len(own.records),
                               "symbols": [r.symbol for r in own.records][:20]},
        "agreement_with_griffe": agree,
        "later_release_check": later_rows,
        "records": [r.to_dict() for r in report.records],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    (out if out.parent != Path(".") else RESULTS / out).write_text(json.dumps(result, indent=2, default=str))
    e2e = result["end_to_end"]
    print(f"## porter upgrade benchmark: vllm-ascend {args.plugin_version}, vllm {args.baseline} -> {args.target}\n")
    print(f"- machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"- end to end (sdists in, fresh cache, own process each): porter cold {min(e2e_cold):.2f} s, "
          f"griffe extract + load of both trees {min(griffe_runs):.2f} s: ratio {e2e['ratio']} "
          f"(median of {len(pairs)} back-to-back pairs {e2e['ratio_median_of_pairs']}; CPU {min(cold_cpu):.2f} s vs "
          f"{min(griffe_cpu):.2f} s: {e2e['cpu_ratio']}, median of pairs {e2e['cpu_ratio_median_of_pairs']}); "
          f"medians: porter {e2e['porter_cold_median_s']:.2f} s, griffe {e2e['griffe_median_s']:.2f} s")
    print(f"- findings: {len(digests)} distinct --json digest(s) over all porter CLI runs: {', '.join(d[:16] for d in sorted(digests))}")
    print(f"- warm: porter CLI {min(e2e_warm):.2f} s (CPU {min(warm_cpu):.2f} s; process start included); in-process {min(warm):.3f} s; "
          f"in-process cold {min(cold):.2f} s")
    print(f"- like for like (same {like['baseline']['modules']} + {like['target']['modules']} modules, one process each): "
          f"porter {like_porter:.2f} s, griffe {like_griffe:.2f} s: ratio {result['like_for_like']['ratio']}")
    print(f"- findings by family: {by_family}; notes: {notes_by_family}; guards {result['guards']}; "
          f"outcome {report.outcome.outcome.value}")
    print(f"- own-release sanity (vllm {args.baseline} -> {args.baseline}): {len(own.breaking)} breaking")
    print(f"- agreement with griffe: {agree['agree']}/{agree['compared']} = {agree['rate']} "
          f"(undetermined {agree['undetermined']})")
    for d in agree["disagreements"]:
        print(f"  - disagree: {d}")
    if later_rows:
        print("\n| family | symbol | porter new home | later release |\n|---|---|---|---|")
    for row in later_rows:
        print(f"| {row['family']} | `{row['symbol']}` | {row['porter_new_home'] or '—'} | {row['verdict']}"
              + (f" ({', '.join(row.get('later_same_name_imports', []))})" if row.get("later_same_name_imports") else "") + " |")
    import shutil

    shutil.rmtree(work, ignore_errors=True)  # the extracted trees (~100 MB) serve only this run


if __name__ == "__main__":
    main()
