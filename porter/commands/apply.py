"""`porter apply BRANCH_OR_VERSION --to vime`: record a stack pin in vime/stack.yaml.

  porter apply transformers==5.4.0 --to vime          an upstream release
  porter apply ascend-port/vllm-main --to vime        a fork branch at its current commit
  porter apply vllm-main --to vime --fork-repo PATH   the same, naming the fork clone

A fork branch is looked up in the fork clones listed in forks/forks.yaml (or the one given by
--fork-repo); the stack records the branch and the commit it points at, so a later smoke run
reports exactly what it verified. Exit codes: 0 recorded; 2 bad spec or unknown branch; 3 git failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

import typer

from porter.cliutil import command_context, json_option

TARGETS = ("vime",)


def _fork_candidates(forks_file: Path) -> list[tuple[str, Path]]:
    """(plugin name, clone path) pairs from the fork registry, tolerant of its layout."""
    from porter.yamlio import load_yaml_file

    if not forks_file.is_file():
        return []
    data = load_yaml_file(forks_file) or {}
    items: Iterable[Any]
    forks = data.get("forks", data) if isinstance(data, dict) else data
    if isinstance(forks, dict):
        items = [{"name": k, **(v if isinstance(v, dict) else {})} for k, v in forks.items()]
    elif isinstance(forks, list):
        items = forks
    else:
        return []
    found = []
    for item in items:
        if not isinstance(item, dict):
            continue
        name = str(item.get("name") or item.get("plugin") or "")
        for key in ("clone", "path", "local_path", "worktree", "repo_path"):
            value = item.get(key)
            if isinstance(value, str) and value:
                path = Path(value).expanduser()
                if not path.is_absolute():
                    path = forks_file.parent.parent / path
                found.append((name or path.name, path))
                break
    return found


def resolve_branch(repo: Path, branch: str) -> str | None:
    from porter.proc import run

    if not (repo / ".git").exists() and not (repo / "HEAD").exists():
        return None
    done = run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}"], timeout=30)
    return done.stdout.strip() if done.ok and done.stdout.strip() else None


def register(app: typer.Typer) -> None:
    @app.command("apply")
    def apply(
        ctx: typer.Context,
        spec: str = typer.Argument(..., help="`upstream==version`, `ascend-port/<slug>` or `<slug>`."),
        to: str = typer.Option(..., "--to", help="What the pin applies to (only `vime`: its stack file)."),
        fork_repo: Optional[Path] = typer.Option(None, "--fork-repo", help="The fork clone holding the branch."),
        plugin: Optional[str] = typer.Option(None, "--plugin", help="Plugin name to record (default: from the registry)."),
        stack_file: Optional[Path] = typer.Option(None, "--stack", help="Stack file to update (default vime/stack.yaml)."),
        json_: bool = json_option(),
    ) -> None:
        """Record an upstream version or a fork branch (at its commit) in the stack smoke verifies."""
        with command_context(ctx, "apply", json_) as (reporter, state):
            from porter.errors import InputError, UsageError
            from porter.stack import (
                ForkPin, apply_fork, apply_pin, branch_of, default_stack_path, empty_stack, load_stack, now_utc, parse_pin,
                save_stack, split_slug, summary,
            )

            if to not in TARGETS:
                raise UsageError(f"cannot apply to {to!r}", hint=f"supported: {', '.join(TARGETS)}")
            path = stack_file or default_stack_path()
            stack = load_stack(path) if path.is_file() else empty_stack()
            pin = parse_pin(spec)
            recorded: dict[str, Any]
            if pin is not None:
                stack = apply_pin(stack, *pin)
                recorded = {"kind": "upstream", "upstream": pin[0], "version": pin[1]}
            else:
                branch = branch_of(spec)
                slug = branch.split("/", 1)[1]
                if not slug:
                    raise UsageError(f"{spec!r} names no branch", hint="use ascend-port/<slug>, e.g. ascend-port/vllm-main")
                upstream, target = split_slug(slug)
                candidates = [(plugin or fork_repo.name, fork_repo)] if fork_repo else _fork_candidates(state.config().forks_file)
                hits = [(name, repo, sha) for name, repo in candidates if (sha := resolve_branch(repo, branch))]
                if not hits:
                    where = str(fork_repo) if fork_repo else f"the clones in {state.config().forks_file}"
                    raise InputError(f"branch {branch} not found in {where}",
                                     hint="create it with `porter upgrade`, or pass --fork-repo PATH to the clone that has it")
                if len(hits) > 1 and not plugin:
                    raise InputError(f"branch {branch} exists in several forks: {', '.join(h[0] for h in hits)}",
                                     hint="choose one with --plugin NAME or --fork-repo PATH")
                name, repo, sha = next((h for h in hits if not plugin or h[0] == plugin), hits[0])
                fork = ForkPin(plugin=plugin or name, branch=branch, commit=sha, upstream=upstream, target=target,
                               repo=str(repo), applied=now_utc())
                stack = apply_fork(stack, fork)
                recorded = {"kind": "fork", "plugin": fork.plugin, **fork.to_dict()}
            save_stack(path, stack)
            payload = {"stack_file": str(path), "recorded": recorded, "stack": stack}

            def render(console) -> None:
                from rich.markup import escape

                what = (f"{recorded['upstream']}=={recorded['version']}" if recorded["kind"] == "upstream"
                        else f"{recorded['plugin']} @ {recorded['branch']} {recorded['commit'][:12]}")
                console.print(f"recorded {escape(what)} in {escape(str(path))}")
                for line in summary(stack):
                    console.print(f"  {escape(line)}")

            reporter.emit("apply", payload, render)
