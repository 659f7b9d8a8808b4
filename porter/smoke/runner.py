"""One smoke run: ship the runtime, run `python -m vime.smoke` on the host, collect and classify.

Everything that can go wrong on the way (cannot connect, cannot authenticate, no python, the
run timed out or was killed, the output stopped half way) becomes an EnvironmentProblem with
a message naming the host and the stage; the run record and the partial log are stored first,
and the remote process group is killed before porter returns.
"""

from __future__ import annotations

import json
import re
import secrets
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from porter.errors import EnvironmentProblem, PorterError
from porter.hosts import HostProfile, has_secret
from porter.proc import run, run_streaming
from porter.smoke.bundle import ENV_FILE, STACK_FILE, build_bundle
from porter.smoke.store import LOG_FILE, LogWriter, RunStore
from porter.transports import make_transport
from porter.transports import script as sh
from vime.results import SMOKE_SCHEMA, GateResult, SmokeReport

RESULT_SCHEMA = "porter.smoke-run/1"
SHIP_TIMEOUT_S = 120.0
CLEANUP_TIMEOUT_S = 30.0
# The host's own `timeout` fires first; porter's local deadline is the backstop.
LOCAL_GRACE_S = 20.0


@dataclass
class SmokeRequest:
    profile: HostProfile
    level: str = "L3"
    gates: list[str] = field(default_factory=list)
    stack: dict[str, Any] = field(default_factory=dict)
    timeout_s: float | None = None
    keep_remote: bool = False
    ship_extra: list[tuple[Path, str]] = field(default_factory=list)


@dataclass
class SmokeRun:
    host: str
    run_id: str
    started: str
    transport: str
    level: str
    gates: list[str]
    stack: dict[str, Any]
    report: SmokeReport | None = None
    error: PorterError | None = None
    diagnoses: dict[str, dict[str, Any]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    remote_dir: str = ""
    path: Path | None = None
    remote_exit: int | None = None
    report_partial: bool = False  # the report holds only the checks that finished before the run broke

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return int(self.error.exit_code)
        return 0 if self.report is not None and self.report.ok else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": RESULT_SCHEMA,
            "host": self.host,
            "run_id": self.run_id,
            "started": self.started,
            "transport": self.transport,
            "level": self.level,
            "gates": self.gates,
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "stack": self.stack,
            "report": self.report.to_dict() if self.report else None,
            "report_partial": self.report_partial,
            "error": self.error.to_dict() if self.error else None,
            "diagnoses": self.diagnoses,
            "timings": self.timings,
            "remote_dir": self.remote_dir,
            "remote_exit": self.remote_exit,
            "run_dir": str(self.path) if self.path else None,
            "log": str(self.path / LOG_FILE) if self.path else None,
        }


def smoke_argv(level: str, gates: list[str], expect_device: str | None) -> list[str]:
    argv = ["-m", "vime.smoke", "--level", level, "--json", "--stack", STACK_FILE]
    if gates:
        argv += ["--gates", ",".join(gates)]
    if expect_device:
        argv += ["--expect-device", expect_device]
    return argv


# after its time limit and the kill grace, a run that still holds the host lock is overdue
LOCK_GRACE_S = 60.0


def lock_path(profile: HostProfile) -> str:
    """One smoke run per host workdir at a time (profiles that split a host's chips between
    them and may run together give each its own `workdir`)."""
    return f"{profile.workdir}/.porter-lock"


def parse_report(stdout: str) -> SmokeReport | None:
    """The report is the last stdout line that is a vime.smoke JSON document."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            return None  # the last JSON-looking line is cut: partial output
        if isinstance(doc, dict) and doc.get("schema") == SMOKE_SCHEMA:
            try:
                return SmokeReport.from_dict(doc)
            except (TypeError, ValueError, KeyError, AttributeError):
                return None  # a report of the right schema but the wrong shape: no usable result
    return None


_PROGRESS = re.compile(r"^vime\.smoke: (?P<gate>\S+) (?P<verdict>pass|fail|error|skip)"
                       r"(?: \((?P<secs>[0-9.]+) s\))?(?: - (?P<reason>.*))?$")


def partial_report(progress_lines: list[str], level: str) -> SmokeReport | None:
    """The checks that finished before a run broke (timeout, kill, cut output), from vime.smoke's
    progress lines on stderr: `vime.smoke: G1 pass (2.10 s) - reason`. None when none finished."""
    results: dict[str, GateResult] = {}
    for line in progress_lines:
        found = _PROGRESS.match(line.strip())
        if found is None:
            continue
        gate = found["gate"]
        check_level = gate.split(".", 1)[0] if re.match(r"^L[0-3]\.", gate) else "L3"
        results[gate] = GateResult(gate=gate, name=gate, level=check_level, verdict=found["verdict"],
                                   duration_s=float(found["secs"] or 0.0), reason=found["reason"] or "")
    if not results:
        return None
    return SmokeReport(level=level, results=list(results.values()),
                       duration_s=round(sum(r.duration_s for r in results.values()), 4))


def _porter_line(stderr: str) -> str:
    lines = [l for l in stderr.splitlines() if l.startswith("porter: ")]
    return lines[-1][len("porter: "):] if lines else ""


def classify_exit(
    profile: HostProfile, transport, returncode: int, stderr: str, report: SmokeReport | None,
    timeout_s: float, elapsed_s: float = 0.0,
) -> EnvironmentProblem | None:
    """Why a run produced no usable report (None when the report is usable)."""
    failure = transport.failure(returncode, stderr, "running the smoke")
    if failure is not None:
        return failure
    where = f"host {profile.name}"
    said = _porter_line(stderr)
    if returncode == sh.EXIT_PYTHON_MISSING:
        return EnvironmentProblem(
            f"{said or 'python not found'} ({where})",
            hint="set `python:` in the host profile to an interpreter with torch, or fix PATH via `setup:`",
            details={"failure": "python_missing"},
        )
    if returncode == sh.EXIT_SETUP_FAILED:
        return EnvironmentProblem(f"{said} ({where})", hint="fix the profile's `setup:` lines (paths, set_env.sh)",
                                  details={"failure": "setup"})
    if returncode == sh.EXIT_HOST_BUSY:
        return EnvironmentProblem(
            f"{where} is busy: another porter smoke run holds its devices",
            hint="wait for that run to finish; profiles on disjoint chips can run together with their own `workdir`",
            details={"failure": "busy"},
        )
    if returncode in (sh.EXIT_TOOLS_MISSING, sh.EXIT_WORKDIR_MISSING):
        return EnvironmentProblem(f"{said} ({where})", details={"failure": "host_tools"})
    # `timeout` exits 124 after TERM worked, 137 when it had to KILL: the clock tells them apart.
    timed_out = returncode == sh.EXIT_TIMEOUT or (returncode == 128 + signal.SIGKILL and elapsed_s >= timeout_s)
    if report is None and timed_out:
        return EnvironmentProblem(
            f"the smoke run on {where} timed out after {timeout_s:g} s; its process group was killed",
            hint="raise --timeout (or the profile's `timeout:`), or run fewer levels/gates",
            details={"failure": "timeout"},
        )
    if report is not None:
        return None
    if returncode < 0 or returncode > 128:
        signo = -returncode if returncode < 0 else returncode - 128
        try:
            name = signal.Signals(signo).name
        except ValueError:
            name = f"signal {signo}"
        # A negative status is a local child: for remote hosts that is the ssh client, not the run.
        what = f"the ssh client for {where} was killed by {name} on this machine" if returncode < 0 and profile.is_remote \
            else f"the smoke run on {where} was killed by {name}"
        return EnvironmentProblem(
            f"{what} before the run reported (partial output kept)",
            hint="look at the log for the last step; an OOM killer or a crashing native op is the usual cause",
            details={"failure": "killed", "signal": signo},
        )
    return EnvironmentProblem(
        f"the smoke run on {where} ended (exit {returncode}) without a complete result: partial output kept",
        hint="see the log's last lines; the runtime may have crashed while printing its report",
        details={"failure": "partial_output", "returncode": returncode},
    )


class SmokeRunner:
    """Runs one request against one host and stores the record; see `execute`."""

    def __init__(
        self,
        store: RunStore,
        *,
        on_line: Callable[[str], None] | None = None,
        diagnoser_factory: Callable[[dict[str, Any]], Any] | None = None,
    ):
        self.store = store
        self.on_line = on_line or (lambda line: None)
        self.diagnoser_factory = diagnoser_factory
        self.last_run: SmokeRun | None = None  # the stored record, also when execute() was interrupted

    def execute(self, request: SmokeRequest) -> SmokeRun:
        """Run and store. Returns the run (report or error set); never leaves the remote group alive."""
        profile = request.profile
        transport = make_transport(profile)
        started = datetime.now(timezone.utc)
        run_id, run_path = self.store.create(profile.name, started)
        remote_dir = f"{profile.workdir}/{profile.name}-{run_id}-{secrets.token_hex(3)}"
        timeout_s = float(request.timeout_s or profile.timeout)
        result = SmokeRun(
            host=profile.name, run_id=run_id, started=started.strftime("%Y-%m-%dT%H:%M:%SZ"),
            transport=transport.describe(), level=request.level, gates=list(request.gates),
            stack=request.stack, remote_dir=remote_dir, path=run_path,
        )
        self.last_run = result
        log = LogWriter(run_path / LOG_FILE)

        def note(line: str) -> None:
            shown = log.line("porter: " + line)
            if shown is not None:
                self.on_line(shown)

        progress: list[str] = []  # vime.smoke's per-check lines: what finished, should the run break

        def relay(stream: str, line: str) -> None:
            shown = log.line(line)  # what reaches the terminal is redacted like the stored log
            if stream == "stderr" and shown is not None and shown.startswith("vime.smoke: "):
                progress.append(shown)
            if stream == "stderr" and shown is not None:
                self.on_line(shown)

        shipped = False
        try:
            t0 = time.perf_counter()
            # Secrets never go on a command line: secret env values, and the setup lines when any of
            # them carries a secret, travel in the bundle's 0600 env file, sourced by the run script.
            secrets_env = transport.secret_env()
            setup_in_bundle = any(has_secret(line) for line in profile.setup)
            bundled = sh.export_lines(secrets_env) + (sh.setup_lines(profile.setup) if setup_in_bundle else [])
            bundle = build_bundle(request.stack, request.ship_extra,
                                  env_file="\n".join(bundled) + "\n" if bundled else None)
            note(f"shipping the runtime ({len(bundle) // 1024} KiB) to {profile.name}:{remote_dir} via {transport.describe()}")
            shipped = True  # from here on the run directory may exist on the host
            shipped_run = run_streaming(transport.ship_argv(remote_dir), input_bytes=bundle, on_line=relay,
                                        timeout=SHIP_TIMEOUT_S)
            result.timings["ship_s"] = round(time.perf_counter() - t0, 3)
            if not shipped_run.ok:
                failure = transport.failure(shipped_run.returncode, shipped_run.stderr, "shipping the runtime")
                shipped = failure is None  # never reached the host: nothing to clean up there
                raise failure or EnvironmentProblem(
                    f"shipping the runtime to host {profile.name} failed "
                    f"({'timed out' if shipped_run.timed_out else 'exit ' + str(shipped_run.returncode)}): "
                    + " | ".join(shipped_run.stderr.strip().splitlines()[-3:]),
                    hint=f"check that {profile.workdir} is writable on the host and `tar` is installed",
                    details={"failure": "ship"},
                )
            expect = profile.device_family if profile.device_family != "cpu" else None
            script = sh.run_script(setup=() if setup_in_bundle else profile.setup, cwd=remote_dir, python=profile.python,
                                   argv=smoke_argv(request.level, request.gates, expect), timeout_s=timeout_s,
                                   remove_after=not request.keep_remote, env_file=ENV_FILE if bundled else None)
            argv = transport.runtime_argv(script, transport.runtime_env(remote_dir), remote_dir,
                                          lock=lock_path(profile), lock_hold_s=timeout_s + LOCK_GRACE_S)
            note(f"running vime.smoke {request.level} on {profile.name} (time limit {timeout_s:g} s)")
            t1 = time.perf_counter()
            try:
                done = run_streaming(argv, on_line=relay, timeout=timeout_s + LOCAL_GRACE_S)
            except KeyboardInterrupt:
                note("interrupted: killing the remote process group")
                self._kill(transport, remote_dir, note)
                raise
            result.timings["run_s"] = round(time.perf_counter() - t1, 3)
            result.remote_exit = done.returncode
            report = parse_report(done.stdout)
            if done.timed_out:
                note("no answer before the local deadline: killing the remote process group")
                self._kill(transport, remote_dir, note)
                raise EnvironmentProblem(
                    f"the smoke run on host {profile.name} timed out after {timeout_s:g} s; its process group was killed",
                    hint="raise --timeout (or the profile's `timeout:`), or run fewer levels/gates",
                    details={"failure": "timeout"},
                )
            problem = classify_exit(profile, transport, done.returncode, done.stderr, report, timeout_s,
                                    result.timings["run_s"])
            if problem is not None:
                if problem.details.get("failure") in ("unreachable", "ssh", "killed", "partial_output"):
                    self._kill(transport, remote_dir, note)  # the connection may have dropped mid-run
                raise problem
            result.report = report
            result.stack = report.stack or request.stack
            self._diagnose(result)
        except PorterError as exc:
            result.error = exc
            log.line(f"porter: error: {exc.message}")  # the CLI shows it once, with the hint
            self._keep_finished(result, progress)
            self._diagnose_error(result)
        except KeyboardInterrupt:
            result.error = EnvironmentProblem(f"smoke run on host {profile.name} interrupted; partial log kept",
                                              details={"failure": "interrupted"})
            self._keep_finished(result, progress)
            self._finish(result, log, transport, remote_dir, shipped, request.keep_remote)
            raise
        self._finish(result, log, transport, remote_dir, shipped, request.keep_remote)
        return result

    # -- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _keep_finished(result: SmokeRun, progress: list[str]) -> None:
        """A broken run keeps the checks that finished, so --compare and --report still see them."""
        if result.report is None:
            result.report = partial_report(progress, result.level)
            result.report_partial = result.report is not None
    def _kill(self, transport, remote_dir: str, note: Callable[[str], None]) -> None:
        try:
            killed = run(transport.kill_argv(remote_dir), timeout=CLEANUP_TIMEOUT_S)
            if not killed.ok:
                note(f"could not confirm the remote kill (exit {killed.returncode}): {killed.stderr.strip()[-200:]}")
        except PorterError as exc:
            note(f"could not reach the host to kill the remote process group: {exc.message}")

    def _finish(self, result: SmokeRun, log: LogWriter, transport, remote_dir: str, shipped: bool, keep: bool) -> None:
        # After a normal end the run script removed its directory itself.
        if shipped and not keep and result.error is not None:
            try:
                run(transport.cleanup_argv(remote_dir), timeout=CLEANUP_TIMEOUT_S)
            except PorterError:
                pass  # a leftover directory is harmless; a leftover process would not be
        log.close()
        assert result.path is not None
        try:
            self.store.save(result.path, result.to_dict())
        except OSError:
            # no record without its result.json (a full disk, a read-only runs dir): --compare and
            # --report would trip over the half; the error names the path
            import shutil

            shutil.rmtree(result.path, ignore_errors=True)
            raise

    def _diagnoser(self, environment: dict[str, Any]):
        return self.diagnoser_factory(environment) if self.diagnoser_factory else None

    def _diagnose(self, result: SmokeRun) -> None:
        assert result.report is not None
        failed = [r for r in result.report.results if r.verdict in ("fail", "error")]
        if not failed:
            return
        diagnoser = self._diagnoser(result.report.environment)
        if diagnoser is None:
            return
        for item in failed:
            text = item.traceback or item.reason
            result.diagnoses[item.gate] = diagnoser.diagnose(text)

    def _diagnose_error(self, result: SmokeRun) -> None:
        diagnoser = self._diagnoser({})
        if diagnoser is None or result.path is None:
            return
        try:
            tail = (result.path / LOG_FILE).read_text(encoding="utf-8").splitlines()[-60:]
        except OSError:
            return
        found = diagnoser.diagnose("\n".join(tail))
        if found.get("matches"):
            result.diagnoses["run"] = found
