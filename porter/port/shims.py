"""Stage 3 of a shim port: perform each planned ShimGroup in the worktree and commit it (one
commit per group, with porter's trailers), formatted with the plugin's own formatter settings.

The planning itself is porter.shims (pure); this module only applies and commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from porter import proc
from porter.port.plan import CommitInfo, checkpoint
from porter.port.worktree import Worktree, trailer_block


@dataclass(frozen=True)
class Committed:
    commits: tuple[CommitInfo, ...]
    changed: frozenset[str]  # every fork path a commit touched
    missed_moves: tuple  # (group, ImportMove) pairs whose import line was not a plain `from ... import`
    formatters: tuple[str, ...]  # the plugin's formatters porter ran on changed files


def commit_groups(wt: Worktree, groups: Sequence, *, identity: tuple[str, str] | None, upstream_ref: str, run_id: str,
                  status: Callable[[str], None] = lambda _m: None) -> Committed:
    from porter.shims.apply import apply_group

    formatters = plugin_formatters(wt.path)
    commits: list[CommitInfo] = []
    changed_all: set[str] = set()
    missed: list = []
    for index, group in enumerate(groups, 1):
        status(f"[{index}/{len(groups)}] {group.subject}")
        applied = apply_group(wt.path, group)
        missed.extend((group, move) for move in applied.missed_moves)
        run_formatters(wt.path, formatters, [p for p in applied.changed if p.endswith(".py")],
                       baseline=lambda path: _committed(wt, path))
        families = tuple(dict.fromkeys(r.family.value for r in group.records))
        missed_lines = tuple(f"not rewritten (not a plain `from ... import` line): {m.path} imports {m.module}.{m.name}"
                             for m in applied.missed_moves)
        message = f"{group.subject}\n\n" + "\n".join(f"- {line}" for line in group.rationale + todo_lines(group)
                                                       + missed_lines) + "\n\n" + \
            trailer_block(families, group.symbols, upstream_ref, run_id) + "\n"
        sha = wt.commit(applied.changed, message, identity)
        if sha is None:  # the baseline already holds exactly these files
            status(f"    already on the baseline: {group.name}")
            continue
        changed_all.update(applied.changed)
        # The PR material lists what a human must finish once, under "Needs a human": the commit's
        # rationale there carries only what the commit bridged.
        commits.append(CommitInfo(sha, group.subject, group.name, families, group.symbols, applied.changed,
                                  group.rationale))
        checkpoint(f"commit-{index}")
    return Committed(tuple(commits), frozenset(changed_all), tuple(missed), tuple(f[0] for f in formatters))


def todo_lines(group) -> tuple[str, ...]:
    """The commit message's lines for what the group leaves to a human (a stub, uses that still break)."""
    return tuple(f"TODO for a human: `{u.record.symbol}`: {u.reason}" + (f" ({u.detail})" if u.detail else "")
                 for u in group.todo)


def _committed(wt: Worktree, path: str) -> str | None:
    shown = wt.git("show", f"HEAD:{path}", check=False)
    return shown.stdout if shown.ok else None


# ---------------------------------------------------------------- the plugin's formatter


def plugin_formatters(root: Path) -> list[tuple[str, list[str]]]:
    """(name, argv reading stdin, writing stdout; `{path}` stands for the file's path) of the formatters
    the plugin configures (ruff, isort, yapf in its pyproject.toml / setup.cfg / own config files) that
    are installed; they find the plugin's settings from the path."""
    import shutil

    texts = {name: (root / name).read_text(encoding="utf-8", errors="replace") for name in
             ("pyproject.toml", "setup.cfg", ".isort.cfg", ".style.yapf", "ruff.toml", ".ruff.toml") if (root / name).is_file()}
    joined = "\n".join(texts.values())
    found: list[tuple[str, list[str]]] = []
    ruff = shutil.which("ruff") or _beside_python("ruff")
    if ruff and ("[tool.ruff" in joined or "ruff.toml" in texts or ".ruff.toml" in texts):
        # Only the import-order rules are fixed automatically: anything else is the maintainer's call.
        found.append(("ruff-isort", [ruff, "check", "--fix-only", "--select", "I", "--quiet", "--stdin-filename", "{path}", "-"]))
        if "[tool.ruff.format" in joined:
            found.append(("ruff-format", [ruff, "format", "--quiet", "--stdin-filename", "{path}", "-"]))
    isort = shutil.which("isort") or _beside_python("isort")
    if isort and ("[tool.isort" in joined or "[isort" in joined or ".isort.cfg" in texts):
        found.append(("isort", [isort, "--quiet", "--filename", "{path}", "-"]))
    yapf = shutil.which("yapf") or _beside_python("yapf")
    if yapf and ("[tool.yapf" in joined or "[yapf" in joined or ".style.yapf" in texts):
        found.append(("yapf", [yapf, "--style", str(root / ".style.yapf") if ".style.yapf" in texts else "pep8"]))
    return found


def _beside_python(tool: str) -> str | None:
    import sys

    candidate = Path(sys.executable).parent / tool
    return str(candidate) if candidate.is_file() else None


def _format_text(root: Path, argv: list[str], path: str, text: str) -> str | None:
    result = proc.run([a.replace("{path}", str(root / path)) for a in argv], cwd=root, input_text=text, timeout=120)
    return result.stdout if result.returncode in (0, 1) and result.stdout else None


def run_formatters(root: Path, formatters: Sequence[tuple[str, list[str]]], paths: Sequence[str],
                   baseline: Callable[[str], str | None] = lambda _p: None) -> list[str]:
    """Format `paths` in place with each formatter, but only files the formatter leaves unchanged at
    the baseline (`baseline(path)`: the committed text, None for a new file): where the plugin itself
    does not follow a tool, applying it would bury porter's edit under unrelated changes. Returns the
    paths formatted; a formatter that fails leaves the file as porter wrote it."""
    formatted = []
    for path in paths:
        target = root / path
        if not target.is_file():
            continue
        before = baseline(path)
        with open(target, encoding="utf-8", newline="") as handle:
            text = handle.read()
        changed = False
        for _name, argv in formatters:
            if before is not None and _format_text(root, argv, path, before) != before:
                continue  # the plugin's own file is not clean under this tool
            out = _format_text(root, argv, path, text)
            if out is not None and out != text:
                text, changed = out, True
        if changed:
            with open(target, "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
            formatted.append(path)
    return formatted
