"""Benchmark `porter diagnose` with the full knowledge base.

Prints:
- per-trace latency in-process (p50/p95 over the seed corpus, KB already compiled);
- end-to-end CLI time of a fresh `porter diagnose FILE` process, without and with the
  compiled-KB cache (and `porter --version` as the CLI framework's own floor);
- throughput on a generated 50 MB log (noise, progress bars, warnings and a few real traces).

- CLI p95 warm with 4 `porter diagnose` processes running at once (shared compiled-KB cache);
- `porter diagnose` on 50 MB logs of three kinds, each in a fresh process: normal (the generated
  log above), crafted (unique lines packed with signature words and odd whitespace, the
  worst case of the whitespace-tolerant literal fallback) and long lines (1 MB unique lines):
  wall time and peak RSS of the process.

Targets (issue 2): p50 <= 20 ms per trace, CLI cold <= 300 ms, 50 MB <= 10 s.
With `--history REPO` (a clone with full history, e.g. of vllm-ascend), also:
- the `porter kb mine-history` index build for REPO into a fresh cache (time, size);
- the extra time `--history REPO` adds per trace with the index warm: in-process, and end-to-end
  (`porter diagnose FILE --history REPO` against `porter diagnose FILE`);
- the peak RSS of `porter diagnose` on a 30 MB log with and without --history (it keeps the ends only).
Targets (issue 14): <= 1 s extra per trace with a warm index, index build <= 2 min on 2 cores.
Usage: .venv/bin/python bench/diagnose.py [--mb 50] [--runs 7] [--history REPO [--history-only]] [--baseline OLD_TREE]
       [--skip-in-process] [--json]
Targets (issue 13): CLI p95 <= 150 ms warm with 4 concurrent processes; 50 MB of any content
<= 5 s and <= 100 MB RSS. Fresh processes report wall and CPU time (user + sys): on a shared
machine the wall time mostly measures the others' load, the CPU time what porter itself costs.
`--baseline TREE` (e.g. `git archive OLD porter knowledge pyproject.toml | tar -x -C /tmp/old`: without
pyproject.toml the tree is not a checkout and has no bundled KB) prints the same
fresh-process figures for that tree beside this checkout's (before | after).
Each 50 MB figure also gives the CPU of the command's process and of the helper it forks for a big
file (porter.kb.split): on 2 idle cores the wall time is about the larger of the two.
`--instructions` (needs valgrind): the instructions one warm `porter diagnose` executes, text and --json,
per tree; unlike wall or CPU time, the count does not depend on what else the machine runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from porter.kb.loader import load_entries  # noqa: E402
from porter.kb.matcher import diagnose_stream  # noqa: E402

SEEDS = ROOT / "tests" / "data" / "seed-traces"
PORTER = Path(sys.executable).parent / "porter"

NOISE = [
    "INFO 05-01 12:{m:02d}:{s:02d} [engine.py:{n}] Avg prompt throughput: {f:.1f} tokens/s, Avg generation throughput: {g:.1f} tokens/s",
    "(RayWorker pid={pid}) INFO 05-01 12:{m:02d}:{s:02d} [model_runner.py:{n}] Loading weights took {f:.2f} seconds",
    "[rank{r}]: step {n} loss={f:.4f} grad_norm={g:.3f} lr=1.0e-05",
    "(EngineCore_DP0 pid={pid}) WARNING 05-01 12:{m:02d}:{s:02d} [utils.py:{n}] Some warning about cache size {n}",
    "2026-05-01 12:{m:02d}:{s:02d},{n:03d} - INFO - trainer - epoch {r} iteration {n}/10000",
    "Processed prompts:  {p}%|#####     | {n}/1000 [00:{s:02d}<00:{m:02d}, {f:.2f}it/s]\r",
    "[W compiler_depend.ts:{n}] Warning: The operator 'aten::foo' is not currently supported on the NPU backend (function operator())",
    "Ignore import error when loading vllm_ascend.patch: No module named 'vllm'",
]


def child_env(source: Path | None = None, **extra: str) -> dict:
    """The environment of a measured `porter` process: porter's bytecode may be written (an
    installed porter has it; PYTHONDONTWRITEBYTECODE would recompile every module each run),
    and `source` (another checkout, for before/after) comes first on the path. The process runs
    in that tree (cwd = PYTHONPATH), so each tree reads its own knowledge/ as its bundled KB."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(source or ROOT)
    env.update(extra)
    return env


def timed_process(argv: list[str], env: dict) -> tuple[float, float, int]:
    """(wall ms, CPU ms = user + sys, exit code) of one fresh process; the CPU time is what the
    process itself cost, whatever else the machine was running."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=env.get("PYTHONPATH", ROOT))
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - start) * 1000
    return wall, (usage.ru_utime + usage.ru_stime) * 1000, os.waitstatus_to_exitcode(status)


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return 0.0
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def per_trace_latency(kb, files: list[Path], runs: int) -> dict:
    payloads = [f.read_bytes() for f in files]
    for data in payloads:  # warm-up: lazy regex compilation, imports
        diagnose_stream(kb, io.BytesIO(data))
    samples = []
    for data in payloads:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            diagnose_stream(kb, io.BytesIO(data))
            times.append((time.perf_counter() - start) * 1000)
        samples.append(statistics.median(times))
    return {"traces": len(files), "p50_ms": round(percentile(samples, 0.5), 2), "p95_ms": round(percentile(samples, 0.95), 2),
            "max_ms": round(max(samples), 2)}


def cli_time(argv: list[str], env: dict, runs: int, before=None) -> dict:
    """Median and minimum wall time of a fresh process (the minimum is the least disturbed
    by other load on a shared machine)."""
    times = []
    for _ in range(runs):
        if before:
            before()
        start = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, cwd=env.get("PYTHONPATH", ROOT))
        times.append((time.perf_counter() - start) * 1000)
    return {"median_ms": round(statistics.median(times), 1), "min_ms": round(min(times), 1)}


def cli_latency(trace: Path, runs: int) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="porter-bench-cache-"))
    env = child_env(PORTER_CACHE_DIR=str(cache))
    try:
        floor = cli_time([str(PORTER), "--version"], env, runs)
        cold = cli_time([str(PORTER), "diagnose", str(trace)], env, runs, before=lambda: shutil.rmtree(cache, ignore_errors=True))
        subprocess.run([str(PORTER), "diagnose", str(trace)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, cwd=env.get("PYTHONPATH", ROOT))
        warm = cli_time([str(PORTER), "diagnose", str(trace)], env, runs)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {"trace": trace.name, "porter_version_ms": floor, "no_cache_ms": cold, "with_cache_ms": warm, "runs": runs}


def generate_log(path: Path, megabytes: int, traces: list[Path]) -> int:
    rng = random.Random(1234)
    target = megabytes * 1024 * 1024
    inserts = sorted(rng.sample(range(1, 1000), k=min(len(traces), 6)))
    written, step, next_insert = 0, 0, 0
    with path.open("wb") as fh:
        while written < target:
            step += 1
            tmpl = NOISE[rng.randrange(len(NOISE))]
            line = tmpl.format(m=rng.randrange(60), s=rng.randrange(60), n=rng.randrange(100000), f=rng.random() * 100,
                               g=rng.random() * 10, pid=rng.randrange(1000, 99999), r=rng.randrange(8), p=rng.randrange(100))
            data = (line if line.endswith("\r") else line + "\n").encode()
            if next_insert < len(inserts) and written >= target * inserts[next_insert] / 1000:
                data += traces[next_insert].read_bytes()
                next_insert += 1
            fh.write(data)
            written += len(data)
    return written


def throughput(kb, megabytes: int, traces: list[Path]) -> dict:
    with tempfile.TemporaryDirectory(prefix="porter-bench-") as tmp:
        path = Path(tmp) / "big.log"
        size = generate_log(path, megabytes, traces)
        start = time.perf_counter()
        with path.open("rb") as fh:
            diag = diagnose_stream(kb, fh)
        elapsed = time.perf_counter() - start
        return {"bytes": size, "lines": diag.signals.lines, "seconds": round(elapsed, 2),
                "mb_per_s": round(size / 1024 / 1024 / elapsed, 1), "status": diag.status,
                "top": [m.entry.id for m in diag.matches], "blocks_kept": len(diag.signals.blocks),
                "blocks_dropped": diag.signals.blocks_dropped}


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def history_big_input_rss(repo: Path, env: dict, trace: Path, mb: int = 30) -> dict:
    """Peak RSS of `porter diagnose BIG --history REPO` against the same without --history, BIG being
    `mb` MB of log around a real trace: --history keeps the input's ends only, so the two stay close."""
    big = Path(tempfile.mkdtemp(prefix="porter-bench-big-")) / "big.log"
    line = "INFO 01-01 00:00:00 [worker.py:1] step done, nothing to see here, tokens=128 latency_ms=12.5\n"
    with big.open("w") as fh:
        fh.write(line * (mb * 1024 * 1024 // 2 // len(line)))
        fh.write(trace.read_text(errors="replace"))
        fh.write(line * (mb * 1024 * 1024 // 2 // len(line)))

    def peak(argv: list[str]) -> float | None:
        # GNU time's own child: a child forked from this (large) process would inherit its RSS figure
        if not Path("/usr/bin/time").exists():
            return None
        out = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT, check=False)
        return round(int(out.stderr.strip().splitlines()[-1]) / 1024, 1)  # KiB

    try:
        plain = peak([str(PORTER), "diagnose", str(big)])
        with_history = peak([str(PORTER), "diagnose", str(big), "--history", str(repo)])
        return {"input_mb": round(big.stat().st_size / 1024 / 1024, 1), "plain": plain, "with_history": with_history}
    finally:
        shutil.rmtree(big.parent, ignore_errors=True)


def history_figures(repo: Path, runs: int) -> dict:
    """Index build (fresh cache) and the extra time of --history per trace with that index warm.
    The index is `porter kb mine-history`'s default: HEAD and the release branches (HEAD alone is timed too)."""
    from porter.kb.history import mine
    from porter.kb.history.lookup import HistorySource, analyse_diagnosis
    from porter.kb.matcher import diagnose_text

    cache = Path(tempfile.mkdtemp(prefix="porter-bench-history-"))
    try:
        start = time.perf_counter()
        head_index, head_path, _ = mine.build_index(repo, cache)
        head_build_s = time.perf_counter() - start
        start = time.perf_counter()
        index, path, _ = mine.build_index(repo, cache, mine.ALL_BRANCHES)
        build_s = time.perf_counter() - start
        key = mine.index_key(repo, mine.ALL_BRANCHES)[0]
        traces = sorted((ROOT / "bench" / "known_fixes" / "traces").glob("*.txt"))
        traces += sorted((ROOT / "tests" / "data" / "heldout").glob("h0*.txt"))[:4]
        kb = load_entries(ROOT / "knowledge" / "patterns").compiled()
        source = HistorySource(repo.name, repo)
        in_process, cpu = [], []
        for trace in traces:
            text = trace.read_text(errors="replace")
            diag = diagnose_text(kb, text)
            start, start_cpu = time.perf_counter(), time.process_time()
            loaded = mine.cached_index(cache, repo, mine.index_key(repo, mine.ALL_BRANCHES)[0])  # what each CLI run does
            analyse_diagnosis(source, diag, text, {}, cache, index=loaded)
            in_process.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)  # this process's CPU: what other load on the cores does not add
        env = {**os.environ, "PORTER_CACHE_DIR": str(cache)}
        trace = traces[0]
        plain = cli_time([str(PORTER), "diagnose", str(trace)], env, runs)
        with_history = cli_time([str(PORTER), "diagnose", str(trace), "--history", str(repo)], env, runs)
        return {
            "repo": str(repo), "commits": len(index.commits), "tags": len(index.tags),
            "index_build_s": round(build_s, 1), "index_bytes": path.stat().st_size, "index_key": key,
            "head_only": {"commits": len(head_index.commits), "index_build_s": round(head_build_s, 1),
                          "index_bytes": head_path.stat().st_size},
            "extra_per_trace_s": {"traces": len(in_process), "p50": round(statistics.median(in_process), 3),
                                  "p95": round(_p95(in_process), 3), "max": round(max(in_process), 3),
                                  "cpu_p50": round(statistics.median(cpu), 3), "cpu_max": round(max(cpu), 3),
                                  "load_average": round(os.getloadavg()[0], 2)},
            "cli": {"trace": trace.name, "plain_ms": plain, "with_history_ms": with_history,
                    "extra_ms": round(with_history["median_ms"] - plain["median_ms"], 1)},
            "big_input_peak_rss_mb": history_big_input_rss(repo, env, traces[0]),
        }
    finally:
        shutil.rmtree(cache, ignore_errors=True)
def concurrent_cli(trace: Path, processes: int = 4, runs: int = 10, source: Path | None = None, json_mode: bool = False) -> dict:
    """p50/p95 wall and CPU time of `porter diagnose` while `processes` loops run at once (warm
    cache), and how many compiled-KB cache files the runs left (1: nobody rebuilt it)."""
    import threading

    cache = Path(tempfile.mkdtemp(prefix="porter-bench-cache-"))
    env = child_env(source, PORTER_CACHE_DIR=str(cache))
    argv = [str(PORTER), "diagnose", str(trace), *(["--json"] if json_mode else [])]
    timed_process(argv, env)  # warm: the KB cache and porter's bytecode
    walls: list[float] = []
    cpus: list[float] = []
    lock = threading.Lock()

    def loop() -> None:
        for _ in range(runs):
            wall, cpu, _ = timed_process(argv, env)
            with lock:
                walls.append(wall)
                cpus.append(cpu)

    load_before = os.getloadavg()[0]
    threads = [threading.Thread(target=loop) for _ in range(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rebuilt = len(list((cache / "kb").glob("kb-*")))
    shutil.rmtree(cache, ignore_errors=True)
    return {"processes": processes, "calls": len(walls), "json": json_mode, "p50_ms": round(percentile(walls, 0.5), 1),
            "p95_ms": round(percentile(walls, 0.95), 1), "cpu_p50_ms": round(percentile(cpus, 0.5), 1),
            "cpu_p95_ms": round(percentile(cpus, 0.95), 1), "cache_files": rebuilt,
            "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def cache_reuse(trace: Path, calls: int = 15, source: Path | None = None) -> dict:
    """Sequential `porter diagnose --json` calls on one fresh cache: how many found the compiled
    KB cached (all but the first should)."""
    cache = Path(tempfile.mkdtemp(prefix="porter-bench-cache-"))
    env = child_env(source, PORTER_CACHE_DIR=str(cache))
    cached = 0
    try:
        for _ in range(calls):
            done = subprocess.run([str(PORTER), "diagnose", str(trace), "--json"], env=env, capture_output=True, text=True, cwd=env.get("PYTHONPATH", ROOT))
            cached += bool(json.loads(done.stdout).get("kb", {}).get("cached"))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {"calls": calls, "cached": cached, "rebuilt": calls - cached}


def instruction_count(argv: list[str], env: dict) -> int | None:
    """Instructions one run of `argv` executes (valgrind's cachegrind, cache simulation off), or
    None without valgrind. A count, not a time: the same on a busy machine as on a quiet one."""
    if not shutil.which("valgrind"):
        return None
    out = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", sys.executable, *argv],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False, cwd=env.get("PYTHONPATH", ROOT))
    for line in out.stderr.splitlines():
        if "I" in line and "refs:" in line:
            return int(line.split("refs:")[1].strip().replace(",", ""))
    return None


CODE_TRACE = SEEDS / "073-aclinit-507899-resource-busy.txt"  # shows an error code: the code tables are read


def cli_instructions(trace: Path, source: Path | None = None) -> dict:
    """Millions of instructions of one warm `porter diagnose TRACE` (cache and bytecode written), text and
    --json, and text on a trace that shows an error code (CODE_TRACE)."""
    cache = Path(tempfile.mkdtemp(prefix="porter-bench-cache-"))
    env = child_env(source, PORTER_CACHE_DIR=str(cache))
    try:
        out = {}
        for label, path, extra in (("text", trace, []), ("json", trace, ["--json"]), ("text_code_trace", CODE_TRACE, [])):
            argv = [str(PORTER), "diagnose", str(path), *extra]
            timed_process(argv, env)  # warm
            count = instruction_count(argv, env)
            out[label] = round(count / 1e6, 1) if count else None
        floor = instruction_count(["-c", "pass"], env)
        out["python_floor"] = round(floor / 1e6, 1) if floor else None
        return out
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def crafted_log(path: Path, megabytes: int, kb) -> int:
    """Unique lines made of signature words joined by double spaces and tabs (defeats the memo,
    sends every line through the index, and makes the whitespace-tolerant fallback work)."""
    words = sorted({w for e in kb.entries for s in e.signatures if s.kind == "literal" for w in s.pattern.split() if len(w) >= 4})
    rng = random.Random(7)
    target, written, n = megabytes * 1024 * 1024, 0, 0
    with path.open("wb") as fh:
        while written < target:
            n += 1
            picked = rng.sample(words, k=min(12, len(words)))
            line = f"[rank{n % 8}]: error {n}  " + "  \t".join(picked) + "\n"
            data = line.encode()
            fh.write(data)
            written += len(data)
    return written


def long_line_log(path: Path, megabytes: int) -> int:
    rng = random.Random(11)
    target, written = megabytes * 1024 * 1024, 0
    with path.open("wb") as fh:
        while written < target:
            chunk = " ".join(f"error{rng.randrange(1 << 30)}" for _ in range(60_000))[: 1 << 20] + "\n"
            data = chunk.encode()
            fh.write(data)
            written += len(data)
    return written


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        try:
            with open(f"/proc/{todo[0]}/task/{todo[0]}/children") as fh:
                kids = [int(x) for x in fh.read().split()]
        except OSError:
            kids = []
        todo = todo[1:] + kids
        out += kids
    return out


def _memory_sampler(root: int, stop, peak: dict) -> None:
    """Every 50 ms, the summed RSS and PSS (smaps_rollup, kB) of `root`'s descendants: the porter
    process and the helper it may fork (GNU time's figure is the larger of the two, not their sum)."""
    while not stop.is_set():
        pids, rss, pss = _descendants(root), 0, 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/smaps_rollup") as fh:
                    for line in fh:
                        key, _, value = line.partition(":")
                        if key == "Rss":
                            rss += int(value.split()[0])
                        elif key == "Pss":
                            pss += int(value.split()[0])
            except OSError:
                pass
        peak["rss"], peak["pss"] = max(peak.get("rss", 0), rss), max(peak.get("pss", 0), pss)
        peak["processes"] = max(peak.get("processes", 0), len(pids))
        stop.wait(0.05)


def cli_big(path: Path, source: Path | None = None) -> dict:
    """Wall time, CPU time and peak RSS of one fresh `porter diagnose` process on `path`. The RSS
    comes from GNU time's own child: a child forked from this (large) process may report ours."""
    env = child_env(source)
    argv = [str(PORTER), "diagnose", str(path)]
    timer = Path("/usr/bin/time").exists()
    start = time.perf_counter()
    proc = subprocess.Popen((["/usr/bin/time", "-f", "%M"] if timer else []) + argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE if timer else subprocess.DEVNULL, cwd=env.get("PYTHONPATH", ROOT))
    import threading

    stop, peak = threading.Event(), {}
    sampler = threading.Thread(target=_memory_sampler, args=(proc.pid if timer else os.getpid(), stop, peak), daemon=True)
    if timer and Path("/proc/self/smaps_rollup").exists():
        sampler.start()
    err = proc.stderr.read().decode(errors="replace") if timer else ""
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    stop.set()
    rss = int(err.strip().splitlines()[-1]) / 1024 if timer else usage.ru_maxrss / 1024
    out = {"seconds": round(elapsed, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "max_rss_mb": round(rss, 1),
           "exit": os.waitstatus_to_exitcode(status), "load_average": round(os.getloadavg()[0], 2)}
    if peak:
        out.update({"processes": peak["processes"], "all_rss_mb": round(peak["rss"] / 1024, 1), "all_pss_mb": round(peak["pss"] / 1024, 1)})
    return out


_SPLIT_CPU = """\
import atexit, resource, runpy, sys
def report():
    own, helper = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    sys.stderr.write(f"\\nPROCESS-CPU {own.ru_utime + own.ru_stime} {helper.ru_utime + helper.ru_stime}\\n")
atexit.register(report)
script, sys.argv = sys.argv[2], ["porter", "diagnose", sys.argv[1]]
runpy.run_path(script, run_name="__main__")
"""


def process_cpu(path: Path, source: Path | None = None) -> dict:
    """CPU time of the `porter diagnose` process itself and of the helper it forks for a big file
    (porter.kb.split), reported from inside one fresh process. The two run side by side, so on two
    idle cores the command's wall time is about the larger of the two (`critical_s`): the quiet
    machine's figure, estimated on a loaded one."""
    env = child_env(source)
    done = subprocess.run([sys.executable, "-c", _SPLIT_CPU, str(path), str(PORTER)], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, cwd=env.get("PYTHONPATH", ROOT), check=False)
    line = next((l for l in reversed(done.stderr.splitlines()) if l.startswith("PROCESS-CPU ")), None)
    if line is None:
        return {}
    own, helper = (float(v) for v in line.split()[1:])
    return {"main_cpu_s": round(own, 2), "helper_cpu_s": round(helper, 2), "critical_s": round(max(own, helper), 2)}


def big_logs(kb, megabytes: int, traces: list[Path], sources: dict[str, Path | None]) -> dict:
    """Each log kind once per source tree (`after`: this checkout; `before`: --baseline)."""
    out: dict = {}
    for source in sources.values():
        # the first call after a KB change rebuilds the compiled-KB cache: not what a big log costs
        timed_process([str(PORTER), "diagnose", str(traces[0])], child_env(source))
    with tempfile.TemporaryDirectory(prefix="porter-bench-") as tmp:
        for kind in ("normal", "crafted", "long_lines"):
            path = Path(tmp) / f"{kind}.log"
            if kind == "normal":
                size = generate_log(path, megabytes, traces)
            elif kind == "crafted":
                size = crafted_log(path, megabytes, kb)
            else:
                size = long_line_log(path, megabytes)
            out[kind] = {"mb": round(size / 1024 / 1024, 1)}
            for label, source in sources.items():
                out[kind][label] = cli_big(path, source)
            for label, source in sources.items():  # (after both timings: this is a second run per tree)
                out[kind][label].update(process_cpu(path, source))
            path.unlink()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=50, help="size of the generated log (default 50)")
    ap.add_argument("--runs", type=int, default=7, help="repetitions per measurement (median)")
    ap.add_argument("--history", type=Path, help="also measure `diagnose --history` against this git clone")
    ap.add_argument("--baseline", type=Path, help="another porter source tree (e.g. `git archive` of an older commit, with its "
                    "knowledge/): its CLI and 50 MB figures are printed beside this checkout's")
    ap.add_argument("--skip-in-process", action="store_true", help="only the fresh-process figures (CLI, concurrency, 50 MB logs)")
    ap.add_argument("--history-only", action="store_true", help="with --history: measure only the history figures")
    ap.add_argument("--instructions", action="store_true", help="also count the instructions of one warm CLI call per tree (valgrind)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.history_only:
        if not args.history:
            ap.error("--history-only needs --history REPO")
        figures = {"history": history_figures(args.history.resolve(), args.runs),
                   "load_average": os.getloadavg()[0], "cpus": os.cpu_count()}
        print(json.dumps(figures, indent=2))
        return 0

    start = time.perf_counter()
    loaded = load_entries(ROOT / "knowledge" / "patterns")
    kb = loaded.compiled()
    load_ms = (time.perf_counter() - start) * 1000
    files = sorted(SEEDS.glob("*.txt"))
    positives = [f for f in files if not f.name.startswith("neg-")]
    inserted = [positives[i] for i in (35, 13, 4, 44, 58, 72) if i < len(positives)]
    trace = SEEDS / "036-rmsnorm-bias-fused-split-qk-norm-traceback.txt"
    sources: dict[str, Path | None] = {"after": None}
    if args.baseline:
        sources["before"] = args.baseline.resolve()
    for source in sources.values():  # bytecode written once per tree, as an install has it
        timed_process([str(PORTER), "diagnose", str(trace)], child_env(source))
    result: dict = {"kb": {"entries": len(kb.entries), "signatures": len(kb.sigs), "parse_and_compile_ms": round(load_ms, 1)},
                    "load_average_start": round(os.getloadavg()[0], 2)}
    if not args.skip_in_process:
        result["per_trace"] = per_trace_latency(kb, files, args.runs)
        result["cli"] = cli_latency(trace, args.runs)
        result["big_log"] = throughput(kb, args.mb, inserted)
    result["cli_concurrent"] = {label: concurrent_cli(trace, 4, args.runs, source) for label, source in sources.items()}
    result["cli_concurrent_json"] = {label: concurrent_cli(trace, 4, args.runs, source, json_mode=True) for label, source in sources.items()}
    result["cache_reuse"] = {label: cache_reuse(trace, 15, source) for label, source in sources.items()}
    if args.instructions:
        result["cli_instructions_m"] = {label: cli_instructions(trace, source) for label, source in sources.items()}
    result["cli_big_logs"] = big_logs(kb, args.mb, inserted, sources)
    result["load_average"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    result["cpus"] = os.cpu_count()
    if args.history:
        result["history"] = history_figures(args.history.resolve(), args.runs)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    def fmt(m: dict) -> str:
        return f"{m['median_ms']} ms (min {m['min_ms']})"

    print(f"knowledge base: {result['kb']['entries']} entries, {result['kb']['signatures']} signatures, parse+compile {result['kb']['parse_and_compile_ms']} ms")
    if "per_trace" in result:
        pt, cli, big = result["per_trace"], result["cli"], result["big_log"]
        print(f"per trace (in-process, {pt['traces']} seed traces): p50 {pt['p50_ms']} ms, p95 {pt['p95_ms']} ms, max {pt['max_ms']} ms   [target p50 <= 20 ms]")
        print(f"CLI end-to-end, fresh process ({cli['trace']}, median of {cli['runs']}): no cache {fmt(cli['no_cache_ms'])}, "
              f"with compiled-KB cache {fmt(cli['with_cache_ms'])}; `porter --version` alone {fmt(cli['porter_version_ms'])}   [target cold <= 300 ms]")
        print(f"{big['bytes'] / 1024 / 1024:.0f} MB log in-process ({big['lines']} lines): {big['seconds']} s = {big['mb_per_s']} MB/s, "
              f"status {big['status']}, top {big['top']}, blocks kept {big['blocks_kept']} (dropped {big['blocks_dropped']})   [target <= 10 s]")
    if "history" in result:
        h = result["history"]
        ex, hc = h["extra_per_trace_s"], h["cli"]
        print(f"history index for {h['repo']}: {h['commits']} commits, {h['tags']} tags, built in {h['index_build_s']} s, "
              f"{h['index_bytes'] / 1e6:.1f} MB   [target <= 120 s on 2 cores]")
        print(f"--history extra per trace, warm index (load + search, {ex['traces']} traces): p50 {ex['p50']} s, p95 {ex.get('p95')} s, max {ex['max']} s "
              f"(CPU p50 {ex.get('cpu_p50')} s, max {ex.get('cpu_max')} s; load {ex.get('load_average')}); "
              f"CLI {hc['trace']}: {fmt(hc['plain_ms'])} without, {fmt(hc['with_history_ms'])} with "
              f"(+{hc['extra_ms']} ms)   [target <= 1 s]")
    for key, what in (("cli_concurrent", "text"), ("cli_concurrent_json", "--json")):
        for label, cc in result[key].items():
            print(f"[{label:6}] CLI {what} warm, {cc['processes']} concurrent processes ({cc['calls']} calls): wall p50 {cc['p50_ms']} ms, "
                  f"p95 {cc['p95_ms']} ms; CPU per process p50 {cc['cpu_p50_ms']} ms, p95 {cc['cpu_p95_ms']} ms; "
                  f"KB cache files {cc['cache_files']}; load {cc['load_average'][0]} -> {cc['load_average'][1]}   [target p95 <= 150 ms]")
    for label, cr in result["cache_reuse"].items():
        print(f"[{label:6}] {cr['calls']} sequential CLI calls on a fresh cache: {cr['cached']} used the cached KB, {cr['rebuilt']} built it   [expect 1 build]")
    for label, ic in result.get("cli_instructions_m", {}).items():
        print(f"[{label:6}] one warm CLI call: {ic['text']} M instructions (text), {ic['json']} M (--json), "
              f"{ic.get('text_code_trace')} M (text, {CODE_TRACE.name}); "
              f"`python -c pass` {ic['python_floor']} M   [load-independent]")
    for kind, m in result["cli_big_logs"].items():
        for label in sources:
            r = m[label]
            split = (f"; per process: main {r['main_cpu_s']} s + helper {r['helper_cpu_s']} s CPU, "
                     f"about {r['critical_s']} s wall on 2 idle cores") if "critical_s" in r else ""
            together = (f" (all {r['processes']} processes together: RSS {r['all_rss_mb']} MB, PSS {r['all_pss_mb']} MB, sampled)"
                        if "all_rss_mb" in r else "")
            print(f"[{label:6}] porter diagnose on {m['mb']:.0f} MB {kind} log: {r['seconds']} s wall, {r['cpu_s']} s CPU, peak RSS {r['max_rss_mb']} MB{together} "
                  f"(exit {r['exit']}, load {r['load_average']}){split}   [target <= 5 s, <= 100 MB]")
    print(f"load average {result['load_average_start']} at start, {result['load_average']} at the end, on {result['cpus']} CPUs (other processes share this machine)")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        # dropped for the measured processes (see child_env): an install has porter's bytecode
        print("note: PYTHONDONTWRITEBYTECODE is set here; the measured porter processes run without it (bytecode written once)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
