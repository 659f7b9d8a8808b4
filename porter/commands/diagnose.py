"""`porter diagnose [FILE|-]`: match a trace or log against the knowledge base.

Exit codes: 0 a known cause was found, 1 unknown, 2 unusable input (missing file, directory,
empty input, bad --env).
"""

# no `from __future__ import annotations`: typer resolves the command's annotations in this
# module's globals, and typer (and typing) are imported only inside register() (porter.fastcli skips them)
import sys
from pathlib import Path


class _CountingReader:
    """Wraps a binary stream and counts bytes, so empty input is detected without buffering."""

    def __init__(self, raw: "BinaryIO") -> None:
        self.raw = raw
        self.bytes = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.bytes += len(data)
        return data


def open_input(source: str | None):
    from porter.errors import InputError

    if source in (None, "-"):
        if source is None and sys.stdin.isatty():
            raise InputError("no input: pass a trace file or pipe one into stdin", hint="porter diagnose trace.txt  or  ... | porter diagnose -")
        return "-", sys.stdin.buffer
    path = Path(source)
    if path.is_dir():
        raise InputError(f"{source} is a directory, not a trace file", hint="pass one log or trace file")
    try:
        return str(path), path.open("rb")
    except FileNotFoundError:
        raise InputError(f"{source}: no such file", hint="check the path, or use - to read stdin") from None
    except OSError as exc:
        raise InputError(f"{source}: cannot read: {exc.strerror or exc}", hint="check permissions") from None


def diagnose_defaults(raw: dict) -> dict:
    """`diagnose:` in porter.yaml: `top` (int) and `env` (list of package==version or files)."""
    from porter.errors import InputError

    section = raw.get("diagnose") or {}
    if not isinstance(section, dict):
        raise InputError("porter.yaml: `diagnose` must be a mapping", hint="e.g. diagnose: {top: 5, env: [torch_npu==2.7.1]}")
    unknown = sorted(set(section) - {"top", "env"})
    if unknown:
        raise InputError(f"porter.yaml: unknown key(s) under diagnose: {', '.join(map(str, unknown))}", hint="known: top, env")
    top = section.get("top", 3)
    env = section.get("env", [])
    if isinstance(env, str):
        env = [env]
    if not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= 20:
        raise InputError(f"porter.yaml: diagnose.top must be an integer 1..20, got {top!r}")
    if not isinstance(env, list) or not all(isinstance(x, str) for x in env):
        raise InputError("porter.yaml: diagnose.env must be a list of strings", hint="e.g. env: [torch_npu==2.7.1]")
    return {"top": top, "env": env}


def resolve_patterns_dir(cfg, kb: Path | None) -> tuple[Path, Path | None]:
    if kb is not None:
        patterns = kb / "patterns" if (kb / "patterns").is_dir() else kb
        return patterns, cfg.cache_dir
    return cfg.patterns_dir, cfg.cache_dir


def _history_reports(cfg, values: list[str], diag, text: str, facts: dict, top: int, issue: int | None = None) -> list[dict]:
    """`--history`: candidate fix commits per repository, next to the knowledge-base matches.
    `text`: the input's head and tail (porter.kb.history.sample), not the whole input.
    `issue`: the repository issue the trace came from (`--issue N`), whose fixing commit names it."""
    from porter.kb.history.lookup import analyse_diagnosis, resolve_sources

    return [analyse_diagnosis(src, diag, text, facts, cfg.cache_dir, top=top, issue=issue).to_dict()
            for src in resolve_sources(values, cfg.forks_file)]


def _render(console, payload: dict, explain: bool) -> None:
    from porter.kb.render import render_diagnosis

    render_diagnosis(console, payload, explain)
    if payload.get("history"):
        from porter.kb.history.render import render_history

        render_history(console, payload["history"])


def decoded_codes(patterns_dir: Path, diag, cache_dir: Path | None = None) -> list[dict]:
    """The trace's error codes with their meaning (knowledge/codes), read only when there are codes."""
    if not diag.signals.codes:
        return []
    from porter.kb.codes import codes_dir_for, decode_signals, load_tables

    tables, _ = load_tables(codes_dir_for(patterns_dir), cache_dir)
    return decode_signals(tables, diag.signals.codes)


def run_diagnose(reporter, cfg, source: str | None, top: int | None, env: list[str], explain: bool,
                 kb: Path | None, history: list[str], issue: int | None = None) -> int:
    """The whole command after option parsing (shared by the typer command and porter.fastcli);
    returns the exit code. `cfg`: the loaded PorterConfig. `issue`: `--issue N` (with --history only)."""
    from porter.errors import InputError
    from porter.kb.env import parse_env
    from porter.kb.loader import load_kb
    from porter.kb.matcher import diagnose_stream
    from porter.kb.render import diagnose_payload

    defaults = diagnose_defaults(cfg.raw)
    top = top or defaults["top"]
    facts = parse_env([*defaults["env"], *env])
    name, stream = open_input(source)
    patterns_dir, cache_dir = resolve_patterns_dir(cfg, kb)
    loaded = load_kb(patterns_dir, cache_dir)
    if not loaded.entries:
        reporter.status(f"warning: no knowledge-base entries under {patterns_dir}; every trace will be unknown")
    elif loaded.problems:
        reporter.status(f"note: {len(loaded.problems)} knowledge-base problem(s); run `porter kb lint`")
    sample = None
    if history:  # the history search reads versions and banners again: keep the head and tail only
        from porter.kb.history.sample import HeadTailReader

        sample = HeadTailReader(stream)
    reader = _CountingReader(sample or stream)
    # a file read from its start may be scanned in two processes (porter.kb.split)
    fd = stream.fileno() if sample is None and stream is not sys.stdin.buffer else None
    from porter import gcpause

    try:
        compiled = loaded.compiled()
        gcpause.settle()  # the CLI's start-up is over: what it allocated stays (porter.gcpause)
        diag = diagnose_stream(compiled, reader, facts, top, fd)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if reader.bytes == 0:
        raise InputError(f"{name}: empty input, nothing to diagnose", hint="pass the file that holds the traceback or log")
    if issue is not None and not history:
        raise InputError("--issue needs --history: the issue's number is looked for in the fix commits' messages",
                         hint="e.g. porter diagnose trace.log --history vllm-ascend --issue 1234")
    kb_info = {"entries": len(loaded.entries), "patterns_dir": str(patterns_dir), "cached": loaded.from_cache}
    payload = diagnose_payload(diag, name, kb_info, explain, decoded_codes(patterns_dir, diag, cache_dir))
    if facts:
        payload["env"] = facts
    if history:
        payload["history"] = _history_reports(cfg, history, diag, sample.text(), facts, top, issue)
    plain = None
    if not history:
        from porter.kb.render import plain_diagnosis

        plain = lambda width: plain_diagnosis(payload, explain, width)  # noqa: E731 - rich's text, without rich
    reporter.emit("diagnose", payload, lambda console: _render(console, payload, explain), plain)
    return 0 if diag.status == "match" else 1


def register(app) -> None:
    from typing import List, Optional

    import typer

    from porter.cliutil import command_context, json_option

    @app.command("diagnose")
    def diagnose(
        ctx: typer.Context,
        source: Optional[str] = typer.Argument(None, metavar="[FILE|-]", help="Trace or log file; '-' or nothing reads stdin."),
        top: Optional[int] = typer.Option(None, "--top", "-k", min=1, max=20, help="How many matches to show (default 3, or `diagnose.top` in porter.yaml)."),
        env: List[str] = typer.Option([], "--env", help="Installed versions: package==version (repeatable) or a smoke-report JSON file."),
        explain: bool = typer.Option(False, "--explain", help="Show how each match was scored."),
        kb: Optional[Path] = typer.Option(None, "--kb", help="Knowledge directory (or its patterns/ folder) instead of the configured one."),
        history: List[str] = typer.Option([], "--history", help="Also look for upstream fix commits in this git history: a clone's path or a fork name from forks.yaml (repeatable)."),
        issue: Optional[int] = typer.Option(None, "--issue", min=1, help="With --history: the repository's issue number the trace came from; a commit that says it fixes it ranks first."),
        json_: bool = json_option(),
    ) -> None:
        """Diagnose a trace: known cause, fix and verify command, or `unknown` with the signals found.

        Exit 0 when a known cause matched, 1 when unknown, 2 for unusable input.
        """
        with command_context(ctx, "diagnose", json_) as (reporter, state):
            code = run_diagnose(reporter, state.config(), source, top, env, explain, kb, history, issue)
        raise typer.Exit(code)
