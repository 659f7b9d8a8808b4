"""`porter smoke`: verify the vime stack on a host and keep the verdict.

  porter smoke --host NAME [--level L0..L3] [--gates G1,G4] [--stack FILE] [--timeout S] [--json]
  porter smoke --compare PREVIOUS [--host NAME]     what changed (new failures, metric drift)
  porter smoke --compare HOST                       HOST's latest run against the one before it
  porter smoke --report FILE.html                   gate values over time, per host

Exit codes: 0 every check passed or skipped; 1 a check failed, or --compare found a regression;
2 bad options; 3 the host could not be reached or the run broke (timeout, killed, no python).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import typer

from porter.cliutil import command_context, json_option

_GATE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}$")
LEVEL_NAMES = ("L0", "L1", "L2", "L3")
EXIT_INTERRUPTED = 130


class _Interrupted(Exception):
    """Ctrl-C/TERM during a run, after the runner killed the remote group and stored the record."""

    def __init__(self, run):
        super().__init__("interrupted")
        self.run = run


def parse_gates(text: str | None) -> list[str]:
    from porter.errors import UsageError

    gates = [g.strip() for g in (text or "").split(",") if g.strip()]
    bad = [g for g in gates if not _GATE.match(g)]
    if bad:
        raise UsageError(f"invalid gate id(s): {', '.join(bad)}", hint="gate ids look like G1, G4 (comma-separated)")
    known = _known_gates()
    unknown = [g for g in gates if known and g not in known]
    if unknown:
        raise UsageError(f"unknown gate(s): {', '.join(unknown)}", hint=f"the shipped runtime has {', '.join(known)}")
    return gates


def _known_gates() -> list[str]:
    """The gate ids of the runtime smoke ships (its registry imports no torch); [] if it has none."""
    try:
        from vime.gates import GATES
    except Exception:  # noqa: BLE001 - a broken registry is reported by the run itself, as L3.gates
        return []
    return list(GATES)


def register(app: typer.Typer) -> None:
    @app.command("smoke")
    def smoke(
        ctx: typer.Context,
        host: Optional[str] = typer.Option(None, "--host", help="Host profile to run on (`porter hosts list`)."),
        level: str = typer.Option("L3", "--level", help="Highest level: L0 env, L1 imports, L2 device ops, L3 vime gates."),
        gates: Optional[str] = typer.Option(None, "--gates", help="Only these L3 gates, comma-separated (implies L3)."),
        stack: Optional[Path] = typer.Option(None, "--stack", help="Stack file to ship and verify (default vime/stack.yaml)."),
        timeout: Optional[float] = typer.Option(None, "--timeout", help="Time limit on the host in seconds (default: profile)."),
        compare: Optional[str] = typer.Option(
            None, "--compare", help="A previous run (directory, result.json, HOST/RUN_ID or HOST) to compare with; "
            "HOST without --host compares its two latest runs."
        ),
        drift: float = typer.Option(0.10, "--drift", help="Relative change of a measured value reported as drift."),
        report: Optional[Path] = typer.Option(None, "--report", help="Write a self-contained HTML report of stored runs."),
        keep_remote: bool = typer.Option(False, "--keep-remote", help="Keep the run directory on the host."),
        json_: bool = json_option(),
    ) -> None:
        """Run the vime smoke levels on a host; compare runs; write the HTML history."""
        with command_context(ctx, "smoke", json_) as (reporter, state):
            from porter.errors import InputError, UsageError

            if level not in LEVEL_NAMES:
                raise UsageError(f"unknown level {level!r}", hint="use one of L0, L1, L2, L3")
            gate_list = parse_gates(gates)
            if gate_list:
                level = "L3"
            if timeout is not None and timeout <= 0:
                raise UsageError("--timeout must be a positive number of seconds")
            if not drift >= 0:
                raise UsageError("--drift must be a relative change >= 0", hint="for example 0.05 for 5 %")
            if report is not None and (report.is_dir() or not report.parent.is_dir()):
                # checked before the run; a typo in a directory name never becomes a new directory tree
                why = "it is a directory" if report.is_dir() else f"directory {report.parent} does not exist"
                raise InputError(f"cannot write the HTML report {report}: {why}",
                                 hint="pass --report a file path in an existing, writable directory")
            if not host and not compare and not report:
                raise UsageError("nothing to do", hint="pass --host NAME to run, --compare PREVIOUS, or --report FILE.html")
            config = state.config()
            from porter.smoke.store import RunStore

            store = RunStore(config.runs_dir)
            previous, latest = _compare_pair(store, compare, running=bool(host))
            payload: dict[str, Any] = {}
            exit_code = 0
            run = None
            interrupted = False
            if host:
                try:
                    run = _run(reporter, config, store, host, level, gate_list, stack, timeout, keep_remote)
                except _Interrupted as stopped:
                    run, interrupted = stopped.run, True  # stored and killed; still say so in one document
                payload["run"] = run.to_dict()
                if run.error is not None:
                    payload["error"] = run.error.to_dict()  # where every porter command puts it
                exit_code = EXIT_INTERRUPTED if interrupted else run.exit_code
            comparison = None
            if previous is not None and not interrupted:
                newer = run.to_dict() if run is not None else (latest or _latest_after(store, previous))
                from porter.smoke.compare import compare_runs

                comparison = compare_runs(previous.data, newer, tolerance=drift)
                payload["comparison"] = comparison.to_dict()
                if comparison.regressed and exit_code == 0:
                    exit_code = 1
            if report is not None and not interrupted:
                import os

                from porter.fsutil import atomic_write_text, shared_file_mode
                from porter.smoke.report import render_html

                try:
                    mode = shared_file_mode(report)  # a report is for sharing, not mkstemp's 0600
                    atomic_write_text(report, render_html(r.data for r in store.runs()))
                    os.chmod(report, mode)
                except OSError as exc:
                    raise InputError(f"cannot write the HTML report {report}: {exc.strerror or exc}",
                                     hint="pass --report a file path in a writable directory") from None
                payload["report_file"] = str(report)
            payload["exit_code"] = exit_code

            def render(console) -> None:
                if run is not None:
                    _render_run(console, run)
                    if keep_remote:
                        from rich.markup import escape

                        console.print(f"run directory kept on {escape(run.host)}: {escape(run.remote_dir)}")
                if comparison is not None:
                    _render_comparison(console, comparison)
                if report is not None and not interrupted:
                    console.print(f"HTML report written to {report}")

            reporter.emit("smoke", payload, render)
            if run is not None and run.error is not None and not reporter.json_mode:
                reporter.error(run.error, "smoke")
            if exit_code:
                raise typer.Exit(exit_code)


def _compare_pair(store, ref: str | None, running: bool):
    """(previous run, newer record or None). A bare HOST without a run to make compares that
    host's latest run with the one before it; every other form picks the previous run only."""
    from porter.errors import InputError

    if not ref:
        return None, None
    is_run_path = Path(ref).is_file() or (Path(ref) / "result.json").is_file()  # resolve() reads those first
    if not running and "/" not in ref and not is_run_path and (store.root / ref).is_dir():
        runs = store.runs(ref)
        if len(runs) == 1:
            raise InputError(f"host {ref} has only one stored run ({runs[0].run_id}); nothing to compare it with",
                             hint=f"run `porter smoke --host {ref} --compare {ref}` to make a new one and compare")
        if runs:
            return runs[-2], runs[-1].data
    return store.resolve(ref), None


def _latest_after(store, previous) -> dict[str, Any]:
    from porter.errors import InputError

    runs = [r for r in store.runs(previous.host) if r.run_id > previous.run_id]
    if not runs:
        raise InputError(
            f"no run of host {previous.host} newer than {previous.run_id}",
            hint=f"run `porter smoke --host {previous.host} --compare {previous.host}/{previous.run_id}`",
        )
    return runs[-1].data


def _run(reporter, config, store, host_name, level, gates, stack_path, timeout, keep_remote):
    from rich.markup import escape

    from porter.hosts import get_host
    from porter.smoke.diagnosis import Diagnoser
    from porter.smoke.runner import SmokeRequest, SmokeRunner
    from porter.stack import load_stack, ship_sources

    profile = get_host(config, host_name)
    stack = load_stack(stack_path)
    extras = ship_sources(stack, stack_path)
    runner = SmokeRunner(
        store,
        on_line=lambda line: reporter.status(escape(line)),  # host output is text, never rich markup
        diagnoser_factory=lambda env: Diagnoser(config.patterns_dir, config.cache_dir, env),
    )
    request = SmokeRequest(profile=profile, level=level, gates=gates, stack=stack, timeout_s=timeout,
                           keep_remote=keep_remote, ship_extra=extras)
    try:
        with _termination_as_interrupt():
            return runner.execute(request)
    except KeyboardInterrupt:
        if runner.last_run is None:
            raise
        raise _Interrupted(runner.last_run) from None


@contextmanager
def _termination_as_interrupt():
    """SIGTERM/SIGHUP (a cancelled CI job, a closed terminal) take the Ctrl-C path, which kills
    the remote process group and stores the partial record before porter exits."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signo, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


MAX_SHOWN_VALUES = 3


def _fmt_scalar(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _fmt_measured(values: dict[str, Any], thresholds: dict[str, Any]) -> str:
    """`key=value (limit L)` for the first few scalar values; the rest are in --json."""
    scalars = [(k, v) for k, v in values.items() if not isinstance(v, (list, dict)) and v is not None]
    # Values that have a threshold say the most: show them first.
    scalars.sort(key=lambda kv: kv[0] not in thresholds)
    parts = []
    for key, value in scalars[:MAX_SHOWN_VALUES]:
        limit = thresholds.get(key)
        text = f"{key}={_fmt_scalar(value)}"
        if limit is not None and not isinstance(limit, (list, dict)):
            text += f" (limit {_fmt_scalar(limit)})"
        parts.append(text)
    if len(scalars) > MAX_SHOWN_VALUES:
        parts.append(f"+{len(scalars) - MAX_SHOWN_VALUES} more")
    return ", ".join(parts)


def _render_run(console, run) -> None:
    from rich.markup import escape
    from rich.table import Table

    from porter.stack import summary

    state = "[green]OK[/]" if run.exit_code == 0 else ("[red]FAILED[/]" if run.exit_code == 1 else "[red]ERROR[/]")
    console.print(f"smoke {escape(run.level)} on [bold]{escape(run.host)}[/] via {escape(run.transport)}: {state}")
    stack_lines = summary(run.stack or {})
    console.print("stack: " + (escape(", ".join(stack_lines)) if stack_lines else "no pins (vime/stack.yaml is empty)"))
    if run.report is not None:
        table = Table(show_lines=False)
        table.add_column("check", no_wrap=True)
        table.add_column("verdict", no_wrap=True)
        table.add_column("measured (limit)")
        table.add_column("time", justify="right", no_wrap=True)
        colours = {"pass": "green", "fail": "red", "error": "magenta", "skip": "dim"}
        for r in run.report.results:
            measured = _fmt_measured(r.values, r.thresholds)
            if r.reason:
                measured = f"{r.reason}; {measured}" if measured and r.verdict != "pass" else (measured or r.reason)
            table.add_row(escape(r.gate), f"[{colours.get(r.verdict, 'white')}]{r.verdict}[/]", escape(measured),
                          f"{r.duration_s:.2f}s")
        console.print(table)
    traced = {r.gate for r in run.report.results if r.traceback} if run.report is not None else set()
    for gate, found in run.diagnoses.items():
        matches = found.get("matches") or []
        if matches:
            console.print(f"[bold]{escape(gate)}[/] likely cause:")
            for m in matches:
                console.print(f"  {escape(m['id'])} ({m['confidence']:.2f}) {escape(m['title'])}")
        elif gate in traced:  # a failed measurement already says why; only a traceback needs the pointer
            console.print(f"[bold]{escape(gate)}[/]: no known cause ({escape(found.get('status', 'unknown'))}); "
                          f"see `porter diagnose {escape(str(run.path))}/log.txt`")
    if run.path is not None:
        console.print(f"[dim]run stored in {escape(str(run.path))}[/]")


def _render_comparison(console, comparison) -> None:
    from rich.markup import escape

    console.print(f"compared {escape(comparison.old_run)} -> {escape(comparison.new_run)}: "
                  + ("[red]regressed[/]" if comparison.regressed else "[green]no new failures[/]"))
    for label, items in (("new failures", comparison.new_failures), ("fixed", comparison.fixed),
                         ("still failing", comparison.still_failing), ("new checks", comparison.added),
                         ("gone", comparison.removed), ("not reached (the run broke first)", comparison.not_reached)):
        if items:
            console.print(f"  {label}: {escape(', '.join(items))}")
    if comparison.error_change:
        console.print(f"  run-level error: {comparison.error_change}")
    for d in comparison.drift:
        change = "new non-zero" if d.rel_change in (float("inf"), float("-inf")) else f"{d.rel_change:+.1%}"
        console.print(f"  drift {escape(d.gate)}.{escape(d.metric)}: {d.old:.4g} -> {d.new:.4g} ({change})")
