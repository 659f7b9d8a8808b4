"""`porter hosts list|show NAME|check NAME`: the host profiles smoke runs on.

`check` connects with the profile's transport, runs its setup lines and pipes vime's
environment probe into the profile's python: reachable, python, torch/torch_npu/CANN versions,
devices and the processes occupying them.
Exit codes: 0 ok; 1 the host answers but has a problem (no torch, device kind differs, a
visible device is busy); 2 unknown host or bad profile; 3 unreachable or no python.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

import typer

from porter.cliutil import command_context, json_option

CHECK_TIMEOUT_S = 60.0


def _probe_source() -> str:
    import vime.envfacts

    return Path(vime.envfacts.__file__).read_text(encoding="utf-8")


PROBE_EOF = "PORTER_PROBE_EOF"


def check_host(profile, timeout_s: float = CHECK_TIMEOUT_S) -> dict[str, Any]:
    """Probe a host; raises EnvironmentProblem when it cannot be reached or has no python."""
    from porter.errors import EnvironmentProblem
    from porter.proc import run
    from porter.transports import make_transport
    from porter.transports import script as sh

    transport = make_transport(profile)
    # The setup lines (which may carry a secret) and the probe travel on stdin, never in argv:
    # one brace group, so bash has read all of it before a setup line could read stdin itself.
    lines = sh.setup_lines(profile.setup)
    lines.append(
        f"command -v {sh.q(profile.python)} >/dev/null 2>&1 || "
        f"{{ echo {sh.q('porter: python not found on the host: ' + profile.python)} >&2; exit {sh.EXIT_PYTHON_MISSING}; }}"
    )
    lines.append(f"exec {sh.q(profile.python)} - --json <<'{PROBE_EOF}'\n{_probe_source().rstrip()}\n{PROBE_EOF}")
    argv = transport.runtime_argv("exec bash -s\n", transport.runtime_env(profile.workdir), profile.workdir)
    start = time.perf_counter()
    done = run(argv, input_text="{\n" + "\n".join(lines) + "\n}\n", timeout=timeout_s)
    elapsed = round(time.perf_counter() - start, 3)
    if done.timed_out:
        raise EnvironmentProblem(f"host {profile.name} did not answer within {timeout_s:g} s",
                                 hint="check the network path and the profile's setup lines",
                                 details={"failure": "timeout"})
    failure = transport.failure(done.returncode, done.stderr, "checking the host")
    if failure is not None:
        raise failure
    said = [l[len("porter: "):] for l in done.stderr.splitlines() if l.startswith("porter: ")]
    if done.returncode == sh.EXIT_PYTHON_MISSING:
        raise EnvironmentProblem(f"{said[-1] if said else 'python not found'} (host {profile.name})",
                                 hint="set `python:` in the host profile, or extend PATH in `setup:`",
                                 details={"failure": "python_missing"})
    if done.returncode == sh.EXIT_SETUP_FAILED:
        raise EnvironmentProblem(f"{said[-1] if said else 'setup failed'} (host {profile.name})",
                                 hint="fix the profile's `setup:` lines", details={"failure": "setup"})
    facts = None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            try:
                facts = json.loads(line)
            except json.JSONDecodeError:
                pass
            break
    if done.returncode != 0 or not isinstance(facts, dict):
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise EnvironmentProblem(f"the environment probe failed on host {profile.name} (exit {done.returncode}): {tail}",
                                 hint=f"is {profile.python} a python 3 interpreter?", details={"failure": "probe"})
    return {"reachable": True, "elapsed_s": elapsed, "facts": facts, "problems": host_problems(profile, facts)}


def manual_commands(profile) -> dict[str, str]:
    """The commands porter runs, to try by hand when a host misbehaves: the ssh connection and,
    for containers, the engine command (with `bash` in place of the run script)."""
    import shlex

    from porter.transports.container import engine_argv
    from porter.transports.ssh import ssh_base_argv

    if not profile.is_remote:
        return {}
    out = {"connect": shlex.join([*ssh_base_argv(profile), "--", profile.address])}
    if profile.container is not None:
        from porter.transports import make_transport

        env = make_transport(profile).runtime_env(f"{profile.workdir}/RUN")
        argv = engine_argv(profile, "bash", env, f"{profile.workdir}/RUN")
        argv = argv[:-2]  # `bash -c SCRIPT` -> `bash`, with a terminal: an interactive shell there
        argv[argv.index("-i")] = "-it"
        out["engine"] = shlex.join(argv)
    return out


def host_problems(profile, facts: dict[str, Any]) -> list[str]:
    problems = []
    packages = facts.get("packages") or {}
    if not packages.get("torch"):
        problems.append(f"torch is not installed for {profile.python}")
    devices = facts.get("devices") or {}
    kind = devices.get("kind", "cpu")
    if profile.device_family != "cpu" and kind != profile.device_family:
        problems.append(f"profile says {profile.device_kind} but the host shows {kind}")
    if profile.device_family == "npu" and not packages.get("torch_npu"):
        problems.append("torch_npu is not installed")
    if profile.device_family == "npu" and not (facts.get("cann") or {}).get("version"):
        problems.append("no CANN version found: add `source .../set_env.sh` to the profile's setup")
    busy = sorted({p.get("device") for p in devices.get("processes", [])})
    wanted = set(profile.visible_devices)
    clash = sorted(d for d in busy if d in wanted)
    if clash:
        problems.append(f"visible device(s) {clash} are occupied by other processes")
    return problems


def register(app: typer.Typer) -> None:
    hosts_app = typer.Typer(help="Host profiles for `porter smoke`: list, show, check.", no_args_is_help=True)
    app.add_typer(hosts_app, name="hosts")

    @hosts_app.command("list")
    def list_hosts(ctx: typer.Context, json_: bool = json_option()) -> None:
        """List the host profiles (bundled `local`, ~/.config/porter/hosts.yaml, porter.yaml)."""
        with command_context(ctx, "hosts.list", json_) as (reporter, state):
            from porter.hosts import load_host_table

            table = load_host_table(state.config())
            hosts = table.hosts
            invalid = [{"name": name or None, "error": exc.message, "hint": exc.hint}
                       for name, exc in sorted(table.invalid.items())]
            payload = {"hosts": [h.to_dict() for h in hosts.values()], "invalid": invalid}

            def render(console) -> None:
                from rich.markup import escape
                from rich.table import Table

                from porter.output import print_whole

                table = Table(title="hosts")
                for column in ("name", "transport", "address", "device", "source"):
                    table.add_column(column, no_wrap=True, overflow="ignore")
                for h in hosts.values():
                    target = h.address
                    if h.container is not None:
                        target += f" + {h.container.engine_name} {h.container.name or h.container.image}"
                    table.add_row(h.name, h.transport, escape(target or "-"), h.device_kind, escape(h.source))
                print_whole(console, table)
                for bad in invalid:
                    console.print(f"[red]invalid[/red] {escape(bad['name'] or 'hosts file')}: {escape(bad['error'])}"
                                  + (f" ({escape(bad['hint'])})" if bad["hint"] else ""), soft_wrap=True)

            reporter.emit("hosts.list", payload, render)
            if invalid:
                raise typer.Exit(1)  # a profile porter cannot use is a failed check (exit 1), the others still listed

    @hosts_app.command("show")
    def show_host(ctx: typer.Context, name: str = typer.Argument(..., help="Host name."), json_: bool = json_option()) -> None:
        """Show one host profile with every field resolved."""
        with command_context(ctx, "hosts.show", json_) as (reporter, state):
            from porter.hosts import get_host
            from porter.transports import make_transport

            profile = get_host(state.config(), name)
            commands = manual_commands(profile)
            payload = {"host": profile.to_dict(), "transport": make_transport(profile).describe(), "commands": commands}

            def render(console) -> None:
                from rich.markup import escape
                from rich.table import Table

                from porter.output import print_whole

                table = Table(title=f"host {name}", show_header=False)
                table.add_column("field", no_wrap=True)
                table.add_column("value", no_wrap=True, overflow="ignore")  # commands to copy: never cut
                for key, value in profile.to_dict().items():
                    if value in (None, "", [], {}, ()):
                        continue
                    table.add_row(key, escape(json.dumps(value) if isinstance(value, (dict, list)) else str(value)))
                for key, command in commands.items():
                    table.add_row(f"{key} command", escape(command))
                print_whole(console, table)

            reporter.emit("hosts.show", payload, render)

    @hosts_app.command("add")
    def add_host(
        ctx: typer.Context,
        name: str = typer.Argument(..., help="Name of the new host (`porter smoke --host NAME`)."),
        address: Optional[str] = typer.Option(None, "--address", help="ssh destination: host, user@host or a ~/.ssh/config alias."),
        device_kind: Optional[str] = typer.Option(None, "--device-kind", help="cpu, cuda, npu-a2, npu-a3 or npu-a5."),
        container: bool = typer.Option(False, "--container", help="The runtime runs in a container on the host (ssh+container)."),
        json_: bool = json_option(),
    ) -> None:
        """Write a profile for NAME into your hosts.yaml (never a project file), the fields to fill marked FILL IN."""
        with command_context(ctx, "hosts.add", json_) as (reporter, state):
            from porter.hosts import add_user_host

            path, block = add_user_host(state.config(), name, address=address, device_kind=device_kind,
                                        transport="ssh+container" if container else "ssh")
            todo = [line.strip() for line in block.splitlines() if "FILL IN" in line]
            payload = {"host": name, "file": str(path), "profile": block, "to_fill": todo}

            def render(console) -> None:
                from rich.markup import escape

                console.print(f"added host {escape(name)} to {escape(str(path))}:", soft_wrap=True)
                console.print(escape(block.rstrip()), soft_wrap=True)
                if todo:
                    console.print(f"fill in the lines marked FILL IN, then: porter hosts check {escape(name)}", soft_wrap=True)

            reporter.emit("hosts.add", payload, render)

    @hosts_app.command("check")
    def check(
        ctx: typer.Context,
        name: str = typer.Argument(..., help="Host name."),
        timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds to wait for the host."),
        json_: bool = json_option(),
    ) -> None:
        """Reach the host and report python, torch/torch_npu/CANN versions, devices and who occupies them."""
        with command_context(ctx, "hosts.check", json_) as (reporter, state):
            from porter.errors import UsageError
            from porter.hosts import get_host

            if timeout is not None and timeout <= 0:
                raise UsageError("--timeout must be a positive number of seconds")
            profile = get_host(state.config(), name)
            reporter.status(f"checking {name} ...")
            outcome = check_host(profile, timeout or CHECK_TIMEOUT_S)
            from porter.hosts import SSH_DERIVED

            if profile.source == SSH_DERIVED:  # a `Host` of ~/.ssh/config: remember what it has
                outcome["probed_device_kind"] = _probed_kind(outcome["facts"])
                if outcome["probed_device_kind"]:
                    from porter.ssh_hosts import remember_kind

                    remember_kind(state.config().user_config_dir, name, outcome["probed_device_kind"])
            payload = {"host": name, **outcome}

            def render(console) -> None:
                _render_check(console, name, outcome)

            reporter.emit("hosts.check", payload, render)
            if outcome["problems"]:
                raise typer.Exit(1)


def _probed_kind(facts: dict[str, Any]) -> str | None:
    """The profile device kind for what the probe saw: cpu, cuda, or npu-aN from the chip name."""
    devices = facts.get("devices") or {}
    kind = devices.get("kind")
    if kind in ("cpu", "cuda"):
        return kind
    if kind == "npu":
        names = " ".join(str(d.get("name", "")) for d in devices.get("devices", []) if isinstance(d, dict)).lower()
        # npu-smi chip names: 910B* on A2, 910_93* on A3, 950* on A5
        for marker, profile_kind in (("910_93", "npu-a3"), ("910b", "npu-a2"), ("950", "npu-a5")):
            if marker in names:
                return profile_kind
        return None  # an NPU of unknown generation: set device_kind by hand
    return None


def _render_check(console, name: str, outcome: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    facts = outcome["facts"]
    packages = facts.get("packages") or {}
    devices = facts.get("devices") or {}
    table = Table(title=f"host {name}: reachable in {outcome['elapsed_s']:.2f} s", show_header=False)
    table.add_row("host", escape(f"{facts.get('hostname')} ({facts.get('platform')})"))
    table.add_row("python", escape(f"{facts['python']['version']} {facts['python']['executable']}"))
    for pkg in ("torch", "torch_npu", "transformers", "vllm", "vllm_ascend", "triton"):
        table.add_row(pkg, escape(packages.get(pkg) or "-"))
    table.add_row("CANN", escape((facts.get("cann") or {}).get("version") or "-"))
    table.add_row("driver", escape((facts.get("driver") or {}).get("version") or "-"))
    table.add_row("devices", escape(f"{devices.get('kind')} x{len(devices.get('devices', []))} (via {devices.get('tool') or 'none'})"))
    occupied = devices.get("processes") or []
    table.add_row(
        "occupied by",
        escape("; ".join(f"device {p.get('device')}: pid {p.get('pid')} {p.get('process')} ({p.get('memory_mb')} MB)"
                         for p in occupied) or "nobody"),
    )
    console.print(table)
    for problem in outcome["problems"]:
        console.print(f"[red]problem:[/] {escape(problem)}")
