"""Benchmark of `porter upgrade` on real wheels (not part of CI; needs PyPI and griffe).

    .venv/bin/pip install griffe            # benchmark-only dependency
    .venv/bin/python bench/upgrade.py [--plugin-version 0.11.0] [--later-plugin 0.13.0]
                                      [--baseline 0.11.0] [--target 0.13.0] [--repeat 1]

Steps: download wheels (`pip download --no-deps --only-binary=:all: --python-version 3.11
--platform manylinux_...`) into bench/.data/wheels, keep their Python sources in
bench/.data/trees, then measure
  * porter cold analysis (fresh cache: plugin scanned, both upstream trees indexed, drift computed),
  * porter warm analysis (same inputs, cache filled),
  * griffe's static load of the two upstream trees (each in a fresh process),
  * agreement of porter's "does this import resolve at the target?" with griffe's alias resolution,
  * findings by family, a sanity run of the plugin against its own upstream release, and
  * for every finding: what the later plugin release did with that use (changed? to where?).
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
DATA = ROOT / "bench" / ".data"
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

from porter.upgrade.sources import extract_archive  # noqa: E402

PLATFORMS = ["manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64"]


def download(name: str, version: str) -> Path:
    wheels = DATA / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    stem = name.replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-{version}-*.whl")) or sorted(wheels.glob(f"{name}-{version}-*.whl"))
    if found:
        return found[0]
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
            "-d", str(wheels), f"{name}=={version}"]
    for p in PLATFORMS:
        argv += ["--platform", p]
    subprocess.run(argv, check=True, capture_output=True)
    found = sorted(wheels.glob(f"{stem}-{version}-*.whl")) or sorted(wheels.glob(f"{name}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"no wheel for {name} {version}")
    return found[0]


def tree(name: str, version: str) -> Path:
    dest = DATA / "trees" / f"{name}-{version}"
    if not (dest / ".porter-complete").is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        extract_archive(download(name, version), dest)
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


GRIFFE_LOAD = """
import json, sys, time, griffe
t0 = time.perf_counter()
griffe.load("vllm", search_paths=[sys.argv[1]], allow_inspection=False)
print(json.dumps({"seconds": time.perf_counter() - t0}))
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


def griffe_load_seconds(path: Path) -> float:
    out = subprocess.run([sys.executable, "-c", GRIFFE_LOAD, str(path)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["seconds"]


def griffe_verdicts(path: Path, symbols: list[str]) -> dict[str, str]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(symbols, fh)
    try:
        out = subprocess.run([sys.executable, "-c", GRIFFE_VERDICTS, str(path), fh.name], check=True,
                             capture_output=True, text=True)
    finally:
        os.unlink(fh.name)
    return json.loads(out.stdout)


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
    parser.add_argument("--plugin-version", default="0.11.0")
    parser.add_argument("--later-plugin", default="0.13.0")
    parser.add_argument("--baseline", default="0.11.0")
    parser.add_argument("--target", default="0.13.0")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", default="upgrade.json", help="file name under bench/results/")
    args = parser.parse_args()

    t0 = time.perf_counter()
    plugin = tree("vllm-ascend", args.plugin_version)
    later = tree("vllm-ascend", args.later_plugin)
    base = tree("vllm", args.baseline)
    target = tree("vllm", args.target)
    prepare = time.perf_counter() - t0

    cold, warm, warm_modules, griffe_times = [], [], [], []
    report = None
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="porter-bench-") as cache:
            report, seconds = analyse(plugin, (args.baseline, base), (args.target, target), Path(cache))
            cold.append(seconds)
            for _ in range(2):
                _, seconds = analyse(plugin, (args.baseline, base), (args.target, target), Path(cache))
                warm.append(seconds)
            # Warm without the result cache: every module and file scan comes from its per-file cache.
            import shutil

            shutil.rmtree(Path(cache) / "results", ignore_errors=True)
            _, seconds = analyse(plugin, (args.baseline, base), (args.target, target), Path(cache))
            warm_modules.append(seconds)
            with tempfile.TemporaryDirectory(prefix="porter-bench-own-") as own_cache:
                own, _ = analyse(plugin, (args.baseline, base), (args.baseline, base), Path(own_cache))
        griffe_times.append(griffe_load_seconds(base) + griffe_load_seconds(target))
    assert report is not None
    symbols = [v.symbol for v in report.verdicts]
    agree = agreement(report, griffe_verdicts(target, symbols))
    by_family: dict[str, int] = {}
    for r in report.records:
        by_family[r.family.value] = by_family.get(r.family.value, 0) + 1
    notes_by_family: dict[str, int] = {}
    for r in report.notes:
        notes_by_family[r.family.value] = notes_by_family.get(r.family.value, 0) + 1
    later_rows = later_release_check(report, later)
    result = {
        "pair": {"plugin": f"vllm-ascend {args.plugin_version}", "baseline": f"vllm {args.baseline}",
                 "target": f"vllm {args.target}", "later_plugin": f"vllm-ascend {args.later_plugin}"},
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "prepare_seconds": round(prepare, 2),
        "porter_cold_seconds": [round(x, 3) for x in cold],
        "porter_warm_seconds": [round(x, 3) for x in warm],
        "porter_warm_without_result_cache_seconds": [round(x, 3) for x in warm_modules],
        "griffe_load_both_seconds": [round(x, 3) for x in griffe_times],
        "cold_over_griffe": round(min(cold) / min(griffe_times), 3),
        "modules": {"baseline": report.index_stats.get("baseline", {}).get("modules"),
                    "target": report.index_stats["target"]["modules"]},
        "usage": report.usage.to_dict(),
        "outcome": report.outcome.to_dict(),
        "findings_by_family": by_family,
        "notes_by_family": notes_by_family,
        "own_release_sanity": {"breaking": len(own.breaking), "records": len(own.records),
                               "symbols": [r.symbol for r in own.records][:20]},
        "agreement_with_griffe": agree,
        "later_release_check": later_rows,
        "records": [r.to_dict() for r in report.records],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(result, indent=2, default=str))
    print(f"## porter upgrade benchmark: vllm-ascend {args.plugin_version}, vllm {args.baseline} -> {args.target}\n")
    print(f"- cold analysis: {min(cold):.2f} s; warm: {min(warm):.2f} s (without the result cache: "
          f"{min(warm_modules):.2f} s); griffe load of both trees: "
          f"{min(griffe_times):.2f} s; cold/griffe = {result['cold_over_griffe']}")
    print(f"- findings by family: {by_family}; notes: {notes_by_family}; outcome {report.outcome.outcome.value}")
    print(f"- own-release sanity (vllm {args.baseline} -> {args.baseline}): {len(own.breaking)} breaking")
    print(f"- agreement with griffe: {agree['agree']}/{agree['compared']} = {agree['rate']} "
          f"(undetermined {agree['undetermined']})")
    for d in agree["disagreements"]:
        print(f"  - disagree: {d}")
    print("\n| family | symbol | porter new home | later release |\n|---|---|---|---|")
    for row in later_rows:
        print(f"| {row['family']} | `{row['symbol']}` | {row['porter_new_home'] or '—'} | {row['verdict']}"
              + (f" ({', '.join(row.get('later_same_name_imports', []))})" if row.get("later_same_name_imports") else "") + " |")


if __name__ == "__main__":
    main()
