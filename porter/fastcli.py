"""`porter diagnose` without the typer app: the same command, parsed by hand.

Building the typer app (click, typer, every command module) costs ~100 ms of CPU per process,
more than loading the cached KB and diagnosing a trace. `fast_diagnose` recognises only plain
diagnose lines (the options of `porter diagnose --help` and the global --json, --format
text|json, -q, --config, --trust-project); for anything else, including every malformed or
unusual line, it returns None and the typer app parses it, so usage errors, help and the other
options keep their one implementation. Recognised lines run `commands.diagnose.run_diagnose`,
the function the typer command calls.
"""

from __future__ import annotations

from pathlib import Path

from porter.record import field, record

_FLAGS = {"--json", "--explain", "-q", "--quiet", "--trust-project"}
_VALUED = {"--top", "-k", "--env", "--kb", "--config", "--format"}


@record
class DiagnoseArgs:
    source: str | None = None
    top: int | None = None
    env: list[str] = field(default_factory=list)
    explain: bool = False
    kb: Path | None = None
    json_mode: bool = False
    quiet: bool = False
    config: Path | None = None
    trust_project: bool = False


def parse(argv: list[str]) -> DiagnoseArgs | None:
    """The arguments of a plain `porter [global options] diagnose [FILE|-] [options]`, or None."""
    if "diagnose" not in argv:
        return None
    args = DiagnoseArgs()
    seen_command = False
    fmt = "text"
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "diagnose" and not seen_command:
            seen_command = True
            i += 1
            continue
        name, eq, inline = token.partition("=")
        if token.startswith("--") and eq:
            if name not in _VALUED or not inline:
                return None
            value, width = inline, 1
        elif token in _VALUED:
            if i + 1 >= len(argv):
                return None
            value, width = argv[i + 1], 2
        elif token in _FLAGS:
            value, width = None, 1
        elif token == "-" or not token.startswith("-"):
            if not seen_command or args.source is not None:
                return None  # another subcommand, or a second file: the typer app explains
            args.source = token
            i += 1
            continue
        else:
            return None  # --help, -v, --history, --version, `--`, short clusters, typos
        if not seen_command and name not in ("--json", "-q", "--quiet", "--config", "--trust-project", "--format"):
            return None  # a command option before the command
        if seen_command and name in ("--config", "--trust-project"):
            return None  # root-only options (porter.cliargs hoists only -q, -v, --json, --format)
        if name == "--json":
            args.json_mode = True
        elif name == "--explain":
            args.explain = True
        elif name in ("-q", "--quiet"):
            args.quiet = True
        elif name == "--trust-project":
            args.trust_project = True
        elif name in ("--top", "-k"):
            if not value.isdigit() or not 1 <= int(value) <= 20:  # typer owns the usage error
                return None
            args.top = int(value)
        elif name == "--env":
            args.env.append(value)
        elif name == "--kb":
            args.kb = Path(value)
        elif name == "--config":
            args.config = Path(value)
        elif name == "--format":
            fmt = value.lower()
            if fmt not in ("text", "json"):
                return None  # CI formats: the typer app says diagnose has none
        i += width
    if not seen_command:
        return None
    args.json_mode = args.json_mode or fmt == "json"
    return args


def _run_command(command: str, json_mode: bool, quiet: bool, body) -> int:
    """`body(reporter)`'s exit code, with the typer app's error rules: a PorterError is rendered
    with its code, Ctrl-C is reported as Interrupted (nothing half-written), anything else is a porter bug (exit 4)."""
    from porter.cliutil import CommandExit, internal_error, reported
    from porter.output import Reporter

    reporter = Reporter(format="json" if json_mode else "text", quiet=quiet)
    try:
        with reported(reporter, command):
            return body(reporter)
    except CommandExit as exc:
        return exc.code
    except KeyboardInterrupt:  # outside the command's own handling, as in porter.cliapp.main
        from porter.errors import Interrupted

        stopped = Interrupted("interrupted: nothing was left half-written")
        Reporter(json_mode=json_mode).error(stopped, command)
        return int(stopped.exit_code)
    except Exception:  # noqa: BLE001 - the typer app's rule: a porter bug, exit 4
        return internal_error()


def fast_diagnose(argv: list[str]) -> int | None:
    """Run a plain diagnose line and return its exit code; None: not one, use the typer app."""
    args = parse(argv)
    if args is None:
        return None
    from porter.commands.diagnose import run_diagnose
    from porter.config import load_config
    from porter.record import replace

    def body(reporter) -> int:
        cfg = replace(load_config(explicit=args.config), trust_project=args.trust_project)
        return run_diagnose(reporter, cfg, args.source, args.top, args.env, args.explain, args.kb, [])

    return _run_command("diagnose", args.json_mode, args.quiet, body)


# `porter upgrade NAME --to REF --dry-run`: a warm run (result cache) is ~0.3 s, a third of it typer.
_UP_VALUED = {"--from", "--to", "--plugin-path", "--upstream-path", "--upstream"}
_UP_FLAGS = {"--dry-run", "--json", "--offline", "--summary", "-q", "--quiet"}


@record
class UpgradeArgs:
    name: str = ""
    to: str | None = None
    from_: str | None = None
    plugin_path: Path | None = None
    upstream_paths: list[str] = field(default_factory=list)
    upstream: str | None = None
    dry_run: bool = False
    json_mode: bool = False
    offline: bool = False
    summary: bool = False
    quiet: bool = False


def parse_upgrade(argv: list[str]) -> UpgradeArgs | None:
    """The arguments of a plain `porter [--json|-q] upgrade NAME --to REF --dry-run [options]`, or None.

    Only the options above are understood, each once (--upstream-path repeatable), values non-empty;
    anything else (--drop, --html, --config, -v, --format, --help, a missing --to or --dry-run, ...)
    returns None and the typer app parses the line."""
    try:
        at = argv.index("upgrade")
    except ValueError:
        return None
    args = UpgradeArgs()
    for token in argv[:at]:  # root options before the command
        if token == "--json":
            args.json_mode = True
        elif token in ("-q", "--quiet"):
            args.quiet = True
        else:
            return None
    rest = argv[at + 1:]
    if not rest or rest[0].startswith("-"):
        return None
    args.name = rest[0]
    seen: set[str] = set()
    i = 1
    while i < len(rest):
        name, eq, inline = rest[i].partition("=")
        if name in _UP_VALUED and rest[i].startswith("--"):
            if eq:
                value, width = inline, 1
            elif i + 1 < len(rest):
                value, width = rest[i + 1], 2
            else:
                return None
            if not value or value.startswith("-") or (name in seen and name != "--upstream-path"):
                return None
        elif rest[i] in _UP_FLAGS:
            value, width = None, 1
        else:
            return None
        seen.add(name)
        if name == "--from":
            args.from_ = value
        elif name == "--to":
            args.to = value
        elif name == "--plugin-path":
            args.plugin_path = Path(value)
        elif name == "--upstream-path":
            args.upstream_paths.append(value)
        elif name == "--upstream":
            args.upstream = value
        elif name == "--dry-run":
            args.dry_run = True
        elif name == "--json":
            args.json_mode = True
        elif name == "--offline":
            args.offline = True
        elif name == "--summary":
            args.summary = True
        else:
            args.quiet = True
        i += width
    if not args.dry_run or args.to is None:
        return None
    return args


def fast_upgrade(argv: list[str]) -> int | None:
    """Run a plain upgrade dry run and return its exit code; None: not one, use the typer app."""
    args = parse_upgrade(argv)
    if args is None:
        return None
    from porter.commands.upgrade_dry import dry_run_analysis, parse_upstream_paths
    from porter.config import load_config
    from porter.record import replace
    from porter.upgrade.analyze import AnalysisRequest

    def body(reporter) -> int:
        cfg = replace(load_config(explicit=None), trust_project=False)
        request = AnalysisRequest(
            offline=True if args.offline else None, plugin=args.name, target=args.to, baseline=args.from_,
            plugin_path=args.plugin_path, upstream_paths=parse_upstream_paths(args.upstream_paths),
            upstream=args.upstream, config=cfg)
        return dry_run_analysis(reporter, request, args.summary)

    return _run_command("upgrade", args.json_mode, args.quiet, body)
