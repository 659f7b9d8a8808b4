"""porter's receiver typing (usage.py: assignments, annotations, registry singletons) against jedi's
inference, on the real plugin: which upstream class a method call's receiver has.

    .venv/bin/pip install jedi              # benchmark-only dependency
    .venv/bin/python bench/upgrade_receivers.py [--plugin DIR] [--upstream DIR] [--files N]

For every call `x.m(...)` / `self.a.m(...)` in the first N plugin files (sorted by path) whose
receiver is not a module or an upstream name: porter's receiver class (from its scan) and jedi's
(`Script.infer` at the receiver, the upstream tree on jedi's path), the time each took, where they
agree, and what each resolves that the other does not. Results: bench/results/upgrade_receivers.json.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def receiver_sites(source: str) -> list[tuple[int, int, str]]:
    """(line, column at the end of the receiver, method) of attribute calls on names / self attributes."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            value = node.func.value
            if isinstance(value, ast.Name) and value.id != "self" or (
                    isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self"):
                out.append((value.end_lineno, value.end_col_offset, node.func.attr))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugin", default="/work/cache/vllm-ascend-0.18.0")
    parser.add_argument("--upstream", default="/work/cache/vllm-0.22.1")
    parser.add_argument("--files", type=int, default=60)
    args = parser.parse_args()

    import jedi

    from porter.upgrade.usage import plugin_files, scan_source

    plugin, upstream = Path(args.plugin), Path(args.upstream)
    files = [(rel, path) for rel, path in plugin_files(plugin) if rel.startswith("vllm_ascend/")][: args.files]
    singletons = {"vllm.platforms.current_platform": "vllm.platforms.interface.Platform"}
    t0 = time.perf_counter()
    porter_types: dict[tuple[str, int, str], str] = {}
    for rel, path in files:
        usage = scan_source(rel, path.read_bytes(), ["vllm"], ["vllm_ascend"], singletons)
        for use in usage.uses:
            if use.kind == "call" and use.detail.get("via") in ("instance", "self"):
                porter_types[(rel, use.site.line, use.detail["method"])] = use.symbol.rsplit(".", 1)[0]
    porter_seconds = time.perf_counter() - t0

    project = jedi.Project(plugin, added_sys_path=[str(upstream)], smart_sys_path=False)
    t0 = time.perf_counter()
    jedi_types: dict[tuple[str, int, str], str] = {}
    sites = 0
    for rel, path in files:
        source = path.read_text(encoding="utf-8", errors="replace")
        script = jedi.Script(source, path=str(path), project=project)
        for line, column, method in receiver_sites(source):
            sites += 1
            try:
                names = script.infer(line, column)
            except Exception:  # noqa: BLE001 - jedi gives up on some constructs: count it as unresolved
                continue
            for name in names:
                full = name.full_name or ""
                if name.type == "instance" and full.startswith("vllm.") and not full.startswith("vllm_ascend"):
                    jedi_types[(rel, line, method)] = full
                    break
    jedi_seconds = time.perf_counter() - t0

    both = set(porter_types) & set(jedi_types)
    agree = sum(1 for k in both if porter_types[k].rsplit(".", 1)[-1] == jedi_types[k].rsplit(".", 1)[-1])
    result = {
        "files": len(files), "call_sites": sites,
        "porter": {"resolved": len(porter_types), "seconds": round(porter_seconds, 3)},
        "jedi": {"resolved": len(jedi_types), "seconds": round(jedi_seconds, 3)},
        "both": len(both), "agree": agree,
        "porter_only": sorted(f"{k[0]}:{k[1]} {k[2]} -> {porter_types[k]}" for k in set(porter_types) - set(jedi_types))[:40],
        "jedi_only": sorted(f"{k[0]}:{k[1]} {k[2]} -> {jedi_types[k]}" for k in set(jedi_types) - set(porter_types))[:40],
        "disagree": sorted(f"{k[0]}:{k[1]} {k[2]}: porter {porter_types[k]}, jedi {jedi_types[k]}" for k in both
                           if porter_types[k].rsplit(".", 1)[-1] != jedi_types[k].rsplit(".", 1)[-1])[:40],
    }
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "upgrade_receivers.json").write_text(json.dumps(result, indent=2))
    print(f"{len(files)} files, {sites} receiver call sites")
    print(f"porter: {len(porter_types)} typed in {porter_seconds:.2f} s; jedi: {len(jedi_types)} typed in {jedi_seconds:.2f} s")
    print(f"both: {len(both)}, same class: {agree}; porter only: {len(set(porter_types) - set(jedi_types))}; "
          f"jedi only: {len(set(jedi_types) - set(porter_types))}")


if __name__ == "__main__":
    main()
