"""What `porter smoke --host local` costs over running the runtime directly.

Side by side in one run, alternating so machine load hits both alike:
  direct:  python -m vime.smoke --level L2 --json
  porter:  porter smoke --host local --level L2 --json   (CLI start, bundle, ship, run, store)
Prints the medians and the overhead (target <= 2 s) and writes bench/results/smoke.json.

  .venv/bin/python bench/smoke.py [--repeats 5] [--level L2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_OVERHEAD_S = 2.0


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-2000:] + done.stderr[-2000:])
        raise SystemExit(f"{' '.join(argv[:4])} ... failed with exit {done.returncode}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--level", default="L2", choices=("L0", "L1", "L2", "L3"))
    args = parser.parse_args()
    python = sys.executable
    porter = str(Path(python).parent / "porter")
    with tempfile.TemporaryDirectory(prefix="porter-bench-") as tmp:
        work = Path(tmp)
        (work / "porter.yaml").write_text("runs_dir: runs\n")
        env = dict(os.environ, XDG_CONFIG_HOME=str(work / "cfg"), XDG_CACHE_HOME=str(work / "cache"),
                   PORTER_CACHE_DIR=str(work / "cache"), TMPDIR=str(work), PYTHONPATH=str(ROOT))
        direct_argv = [python, "-m", "vime.smoke", "--level", args.level, "--json"]
        porter_argv = [porter, "-q", "smoke", "--host", "local", "--level", args.level, "--json"]
        timed(direct_argv, work, env)  # warm the page cache for both
        direct, wrapped = [], []
        for _ in range(args.repeats):
            direct.append(timed(direct_argv, work, env))
            wrapped.append(timed(porter_argv, work, env))
    result = {
        "level": args.level,
        "repeats": args.repeats,
        "direct_s": [round(x, 3) for x in direct],
        "porter_s": [round(x, 3) for x in wrapped],
        "direct_median_s": round(statistics.median(direct), 3),
        "porter_median_s": round(statistics.median(wrapped), 3),
        "cpu_count": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    result["overhead_s"] = round(result["porter_median_s"] - result["direct_median_s"], 3)
    result["target_s"] = TARGET_OVERHEAD_S
    result["within_target"] = result["overhead_s"] <= TARGET_OVERHEAD_S
    out = ROOT / "bench" / "results" / "smoke.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"level {args.level}, {args.repeats} repeats (load {result['load_avg_1m']} on {result['cpu_count']} CPUs)")
    print(f"  python -m vime.smoke         median {result['direct_median_s']:.2f} s  {result['direct_s']}")
    print(f"  porter smoke --host local    median {result['porter_median_s']:.2f} s  {result['porter_s']}")
    verdict = "within" if result["within_target"] else "OVER"
    print(f"  overhead {result['overhead_s']:.2f} s ({verdict} the {TARGET_OVERHEAD_S:g} s target); written to {out}")
    return 0 if result["within_target"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
