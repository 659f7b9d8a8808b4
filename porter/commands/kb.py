"""`porter kb list|show|search|lint|eval`: browse and check the knowledge base."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from porter.cliutil import command_context, json_option

kb_app = typer.Typer(help="Browse and check the knowledge base (knowledge/patterns/<layer>/<ID>.yaml).", no_args_is_help=True)

KB_OPTION_HELP = "Knowledge directory (or its patterns/ folder) instead of the configured one."


def _patterns_dir(state, kb: Optional[Path]) -> Path:
    if kb is not None:
        return kb / "patterns" if (kb / "patterns").is_dir() else kb
    return state.config().patterns_dir


def _load(state, kb: Optional[Path]):
    from porter.kb.loader import load_kb

    return load_kb(_patterns_dir(state, kb), state.config().cache_dir)


@kb_app.command("list")
def kb_list(
    ctx: typer.Context,
    layer: Optional[str] = typer.Option(None, "--layer", "-l", help="Only this layer (e.g. vllm-ascend)."),
    kb: Optional[Path] = typer.Option(None, "--kb", help=KB_OPTION_HELP),
    json_: bool = json_option(),
) -> None:
    """List entries: id, layer, kind and title."""
    with command_context(ctx, "kb.list", json_) as (reporter, state):
        from porter.errors import UsageError
        from porter.kb.render import entry_summary
        from porter.kb.schema import LAYERS

        if layer is not None and layer not in LAYERS:
            raise UsageError(f"unknown layer {layer!r}", hint=f"layers: {', '.join(LAYERS)}")
        entries = sorted((e for e in _load(state, kb).entries if layer is None or e.layer == layer), key=lambda e: (e.layer, e.id))
        payload = {"layer": layer, "count": len(entries), "entries": [entry_summary(e) for e in entries]}

        def render(console) -> None:
            from rich.markup import escape
            from rich.table import Table

            table = Table(title=f"knowledge base: {len(entries)} entries" + (f" in {layer}" if layer else ""), title_justify="left")
            for col in ("id", "layer", "kind", "title"):
                table.add_column(col, overflow="fold")
            for e in entries:
                table.add_row(e.id, e.layer, e.kind, escape(e.title))
            console.print(table)

        reporter.emit("kb.list", payload, render)


@kb_app.command("show")
def kb_show(
    ctx: typer.Context,
    entry_id: str = typer.Argument(..., metavar="ID", help="Entry id (e.g. VLLM-001) or an alias (e.g. NPU-CP-002)."),
    kb: Optional[Path] = typer.Option(None, "--kb", help=KB_OPTION_HELP),
    json_: bool = json_option(),
) -> None:
    """Show one entry: signatures, cause, fix, verify, discriminators."""
    with command_context(ctx, "kb.show", json_) as (reporter, state):
        from porter.errors import InputError
        from porter.kb.render import entry_detail, render_entry

        entries = _load(state, kb).entries
        wanted = entry_id.strip()
        entry = next((e for e in entries if e.id.upper() == wanted.upper()), None)
        if entry is None:
            by_alias = [e for e in entries if wanted in e.aliases]
            if len(by_alias) == 1:
                entry = by_alias[0]
            elif by_alias:
                raise InputError(f"{wanted!r} is an alias of several entries: {', '.join(e.id for e in by_alias)}", hint="show one of them by id")
        if entry is None:
            raise InputError(f"no entry {wanted!r}", hint=f"try `porter kb search {wanted}` or `porter kb list`")
        reporter.emit("kb.show", {"entry": entry_detail(entry)}, lambda console: render_entry(console, entry))


@kb_app.command("search")
def kb_search(
    ctx: typer.Context,
    text: str = typer.Argument(..., help="Words or an error message to look for."),
    limit: int = typer.Option(10, "--limit", "-n", min=1, max=100, help="How many results."),
    kb: Optional[Path] = typer.Option(None, "--kb", help=KB_OPTION_HELP),
    json_: bool = json_option(),
) -> None:
    """Fuzzy search over ids, aliases, titles, symptoms and literal signatures (paste an error line)."""
    with command_context(ctx, "kb.search", json_) as (reporter, state):
        from porter.errors import UsageError
        from porter.kb.render import entry_summary
        from porter.kb.search import search_entries

        # an empty query would "match" every entry through the substring rule and hide the mistake
        if not text.strip():
            raise UsageError("empty search text", hint="give words or an error line, e.g. `porter kb search 'EZ9999'`; `porter kb list` lists every entry")
        results = search_entries(_load(state, kb).entries, text, limit)
        payload = {"query": text, "results": [{**entry_summary(e), "score": s} for e, s in results]}

        def render(console) -> None:
            from rich.markup import escape
            from rich.table import Table

            if not results:
                console.print("no entry matches")
                return
            table = Table(title=f"search: {escape(text)}", title_justify="left")
            for col in ("score", "id", "layer", "title"):
                table.add_column(col, overflow="fold")
            for e, s in results:
                table.add_row(f"{s:.0f}", e.id, e.layer, escape(e.title))
            console.print(table)

        reporter.emit("kb.search", payload, render)


def _render_eval(console, ev: dict) -> None:
    from rich.markup import escape

    console.print(
        f"[bold]corpus[/] {escape(ev['corpus'])}: top-1 {ev['top1']:.1%} ({ev['top1_correct']}/{ev['positives']}), "
        f"top-3 {ev['top3']:.1%} ({ev['top3_correct']}/{ev['positives']}); "
        f"negatives/unknown wrongly matched: {len(ev['false_positives'])}/{ev['negatives_and_unknown']}",
        soft_wrap=True,
    )
    for c in ev["false_positives"]:
        console.print(f"  [red]false positive[/] {escape(c['id'])} ({c['kind']}): got {', '.join(c['got'])}", soft_wrap=True)
    for c in ev["misses"]:
        got = ", ".join(c["got"]) or "unknown"
        mark = "top-3 only" if c["top3"] else "miss"
        console.print(f"  [yellow]{mark}[/] {escape(c['id'])}: expected {', '.join(c['expected'])}, got {escape(got)}", soft_wrap=True)


@kb_app.command("lint")
def kb_lint(
    ctx: typer.Context,
    corpus: Optional[Path] = typer.Option(None, "--corpus", help="Also score a labelled corpus directory (index.yaml + traces)."),
    no_examples: bool = typer.Option(False, "--no-examples", help="Skip diagnosing every entry's example files."),
    kb: Optional[Path] = typer.Option(None, "--kb", help=KB_OPTION_HELP),
    json_: bool = json_option(),
) -> None:
    """Validate every entry: schema, ids, safe regexes, version ranges, related ids, examples top-1.

    Exit 1 when there are errors (warnings alone pass). With --corpus, misses and false positives
    on the corpus also fail the lint.
    """
    with command_context(ctx, "kb.lint", json_) as (reporter, state):
        from porter.kb.lint import lint

        patterns = _patterns_dir(state, kb)
        report = lint(patterns, check_examples=not no_examples, display_base=Path.cwd())
        payload = {"lint": report.to_dict()}
        failed = not report.ok
        ev = None
        if corpus is not None:
            from porter.kb.evaluate import evaluate
            from porter.kb.loader import load_entries

            ev = evaluate(load_entries(patterns).compiled(), corpus).to_dict()
            payload["corpus"] = ev
            failed = failed or bool(ev["false_positives"] or ev["misses"])

        def render(console) -> None:
            from rich.markup import escape

            for p in report.problems:
                colour = "red" if p.severity == "error" else "yellow"
                console.print(f"[{colour}]{p.severity}[/] {escape(str(p))}", soft_wrap=True)
            verdict = "[green]clean[/]" if report.ok else f"[red]{len(report.errors)} error(s)[/]"
            console.print(
                f"kb lint: {report.entries} entries in {report.files} files, {report.regexes_checked} regexes, "
                f"{report.examples_checked} examples checked: {verdict}, {len(report.warnings)} warning(s)"
            )
            if ev is not None:
                _render_eval(console, ev)

        reporter.emit("kb.lint", payload, render)
        raise typer.Exit(1 if failed else 0)


def _render_splits(console, payload: dict, show_cases: bool) -> None:
    from rich.markup import escape
    from rich.table import Table

    for problem in payload["split_problems"]:
        console.print(f"[red]split problem[/] {escape(problem)}", soft_wrap=True)
    for name, ev in payload["splits"].items():
        hi = ev["high_confidence"]
        precision = f"{hi['precision']:.1%}" if hi["precision"] is not None else "n/a"
        console.print(
            f"[bold]{escape(name)}[/]: top-1 {ev['top1']:.1%} ({ev['top1_correct']}/{ev['positives']}), "
            f"top-3 {ev['top3']:.1%} ({ev['top3_correct']}/{ev['positives']}), unknown on {ev['unknown_on_positives']} positives; "
            f"confidence >= {hi['threshold']:g} right {precision} ({hi['right']}/{hi['answers']}); "
            f"false diagnoses on healthy/unexplained {ev['false_diagnoses']}/{ev['negatives_and_unknown']} "
            f"(healthy {ev['false_diagnoses_healthy']}/{ev['healthy']})",
            soft_wrap=True,
        )
        reach = ev.get("reach")
        if reach and ev["positives"]:
            named = f"{reach['top1_named']:.1%}" if reach["top1_named"] is not None else "n/a"
            console.print(
                f"  reach: {reach['named']} positives named by an entry of the KB they were diagnosed with "
                f"(top-1 {named}, {reach['top1_named_correct']}/{reach['named']}); {reach['own']} named only by the "
                f"entries written from them; {reach['none']} by no entry",
                soft_wrap=True,
            )
            why = reach.get("named_misses") or {}
            if any(why.values()):
                console.print("  named misses: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in why.items()), soft_wrap=True)
        table = Table(title=f"{name}: reliability per confidence bucket", title_justify="left")
        for col in ("confidence", "answers", "right", "accuracy", "mean confidence"):
            table.add_column(col)
        for b in ev["reliability"]:
            acc = f"{b['accuracy']:.0%}" if b["accuracy"] is not None else "-"
            mean = f"{b['mean_confidence']:.2f}" if b["mean_confidence"] is not None else "-"
            table.add_row(b["bucket"], str(b["answers"]), str(b["right"]), acc, mean)
        console.print(table)
        if ev["excluded"]:
            console.print(f"  not counted ({len(ev['excluded'])} cases: an entry cites their thread):")
            for x in ev["excluded"]:
                console.print(f"    {escape(x['id'])}  {escape(x['thread'])}  cited by {', '.join(x['cited_by'])}", soft_wrap=True)
        if show_cases:
            _render_eval(console, ev)


@kb_app.command("eval")
def kb_eval(
    ctx: typer.Context,
    corpus: Optional[Path] = typer.Argument(None, help="Corpus directory: dev/ and test/ with <id>.yaml labels (default tests/data/corpus), a split directory, or an index.yaml corpus such as tests/data/seed-traces."),
    split: list[str] = typer.Option([], "--split", help="Only this split (dev, test; repeatable)."),
    cases: bool = typer.Option(False, "--cases", help="List every miss and false diagnosis per split."),
    leave_source_out: bool = typer.Option(False, "--leave-source-out", help="Diagnose each case without the entries written from it (an example copied from its trace, a reference to its thread): the generalisation figure for the dev split."),
    env: list[str] = typer.Option([], "--env", help="Installed versions: package==version or a smoke-report JSON file."),
    kb: Optional[Path] = typer.Option(None, "--kb", help=KB_OPTION_HELP),
    json_: bool = json_option(),
) -> None:
    """Score the knowledge base on a labelled corpus, per split: top-1/top-3, precision of answers
    with confidence >= 0.9, false diagnoses on healthy/unexplained logs, reliability per bucket.

    Test cases whose thread an entry cites are listed and not counted. Exit 1 when any counted
    case is wrong.
    """
    with command_context(ctx, "kb.eval", json_) as (reporter, state):
        from porter.errors import UsageError
        from porter.kb.env import parse_env
        from porter.kb.evaluate import evaluate_splits

        if corpus is None:
            corpus = Path("tests/data/corpus")
            if not corpus.is_dir():
                raise UsageError("no corpus given and tests/data/corpus does not exist here", hint="porter kb eval PATH/TO/CORPUS")
        payload = evaluate_splits(_load(state, kb).compiled(), corpus, parse_env(env), tuple(split), leave_source_out)
        wrong = any(ev["false_positives"] or ev["misses"] for ev in payload["splits"].values())
        reporter.emit("kb.eval", payload, lambda console: _render_splits(console, payload, cases))
        raise typer.Exit(1 if wrong else 0)


@kb_app.command("calibrate")
def kb_calibrate(
    ctx: typer.Context,
    corpus: Path = typer.Argument(Path("tests/data/corpus"), help="Labelled corpus; only its dev split is used."),
    write: bool = typer.Option(False, "--write", help="Write the fitted model to knowledge/calibration.json next to the patterns."),
    also: list[Path] = typer.Option([], "--also", help="More labelled corpora to fit on (index.yaml corpora such as tests/data/seed-traces); never a test split: cases whose thread hashes to test are left out, and a corpus named test or heldout is refused (exit 2)."),
    kb: Optional[Path] = typer.Option(None, "--kb", help=KB_OPTION_HELP),
    json_: bool = json_option(),
) -> None:
    """Fit calibrated confidence on the dev split (leave-source-out: each case is diagnosed without
    the entries written from it). Never reads the test split."""
    with command_context(ctx, "kb.calibrate", json_) as (reporter, state):
        from porter.fsutil import atomic_write_bytes
        from porter.kb.calibrate import (MIN_SAMPLES_TO_CHOOSE_L2, calibration_path, fit_model, leave_source_out_samples,
                                         out_of_fold, reliability)
        from porter.kb.corpus import effective_split, load_corpus
        from porter.kb.loader import load_entries

        from porter.errors import InputError
        from porter.kb.corpus import HELD_OUT_NAMES, split_of

        patterns = _patterns_dir(state, kb)
        cases = [c for c in load_corpus(corpus) if effective_split(c) == "dev"]
        for extra in also:
            # a held-out corpus (its directory says so) scores the fit; fitting on it would make
            # its score say nothing. Any other corpus: its cases whose source thread hashes to the
            # test split are left out too, like a test split of the labelled corpus.
            if Path(extra).resolve().name in HELD_OUT_NAMES:
                raise InputError(f"{extra}: a held-out corpus cannot be fitted on",
                                 hint="fit on the dev split (and dev-like corpora such as tests/data/seed-traces) only")
            cases += [c for c in load_corpus(extra) if effective_split(c) != "test" and not (c.thread and split_of(c.thread) == "test")]
        samples, records = leave_source_out_samples(load_entries(patterns).entries, cases)
        groups = [r["thread"] for r in records if r["answer"] is not None]  # the samples' threads, in order
        model = fit_model(samples, f"{corpus} dev{''.join(' + ' + str(a) for a in also)}, leave-source-out", groups)
        # what the confidence is worth on threads the fit did not see (folds by source thread)
        held_out = reliability(out_of_fold(samples, groups, model.l2)) if len(samples) >= MIN_SAMPLES_TO_CHOOSE_L2 else []
        payload = {"calibration": model.to_dict(), "cases": len(cases), "answered": len(samples),
                   "right": sum(y for _, y, _ in samples), "cross_validated_reliability": held_out, "records": records}
        if write:
            path = calibration_path(patterns)
            atomic_write_bytes(path, (json.dumps(model.to_dict(), indent=2) + "\n").encode())
            payload["written"] = str(path)

        def render(console) -> None:
            console.print(f"dev cases {len(cases)}, answered without their own entries {len(samples)}, right {payload['right']}")
            cv = ", ".join(f"{l2:g}: {loss:.4f}" for l2, loss in model.cv_log_loss)
            console.print(f"L2 penalty {model.l2:g}" + (f" (cross-validated log loss per penalty: {cv})" if cv else ""))
            if held_out:
                console.print("cross-validated reliability (folds by source thread): " + "; ".join(
                    f"{b['bucket']} {b['right']}/{b['answers']}" for b in held_out if b["answers"]))
            console.print("weights: " + ", ".join(f"{k}={v:+.3f}" for k, v in zip(model.to_dict()["features"], model.weights)))
            if write:
                console.print(f"written to {payload['written']}")

        reporter.emit("kb.calibrate", payload, render)


@kb_app.command("mine-history")
def kb_mine_history(
    ctx: typer.Context,
    repo: str = typer.Argument(..., metavar="REPO", help="A git clone with full history (path), or a fork name from forks.yaml."),
    ref: str = typer.Option("", "--ref", help="Index this branch only (its tip's commit id keys the cache); default: HEAD and every release branch."),
    all_branches: bool = typer.Option(False, "--all-branches", help="HEAD and every release branch (their cherry-picks too): the default unless --ref is given."),
    json_: bool = json_option(),
) -> None:
    """Build the offline index `porter diagnose --history` uses: per commit, the functions it
    changed, its bug-fix flag, the error strings its message quotes and the first tag containing it.

    By default HEAD and every release branch (a name with a version: `releases/v0.13.0`, `v0.9.1-dev`) are
    indexed, so a fix cherry-picked onto a release line is found; feature and bot branches are not.
    Cached by the tips' commit ids; with --ref, an index of an older tip is extended with the new commits only.
    Exit 3 when the repository cannot be read.
    """
    with command_context(ctx, "kb.mine-history", json_) as (reporter, state):
        import time

        from porter.errors import EnvironmentProblem
        from porter.kb.history.lookup import availability_problem, resolve_sources
        from porter.kb.history.mine import ALL_BRANCHES, build_index

        cfg = state.config()
        source = resolve_sources([repo], cfg.forks_file)[0]
        problem = availability_problem(source)
        if problem and "shallow" not in problem:
            raise EnvironmentProblem(problem, hint="clone the repository with its full history, then run this again")
        started = time.perf_counter()
        if all_branches or not ref:
            ref = ALL_BRANCHES
        index, path, built = build_index(source.repo, cfg.cache_dir, ref)
        payload = {
            "repo": str(source.repo), "ref": ref, "head": index.head, "commits": len(index.commits),
            "fixes": sum(1 for c in index.commits if c.is_fix), "tags": len(index.tags), "index": str(path),
            "bytes": path.stat().st_size, "built": built, "seconds": round(time.perf_counter() - started, 2),
            "note": problem or "",
        }

        def render(console) -> None:
            from rich.markup import escape

            verb = "built" if built else "already cached"
            at = "HEAD and its release branches" if ref == ALL_BRANCHES else index.head[:12]
            console.print(f"history index for {escape(payload['repo'])} at {at} {verb}: {payload['commits']} commits "
                          f"({payload['fixes']} bug fixes), {payload['tags']} tags, {payload['bytes'] / 1e6:.1f} MB in "
                          f"{payload['seconds']:.1f} s -> {escape(str(path))}", soft_wrap=True)
            if problem:
                console.print(f"[yellow]note[/]: {escape(problem)}", soft_wrap=True)

        reporter.emit("kb.mine-history", payload, render)


def register(app: typer.Typer) -> None:
    app.add_typer(kb_app, name="kb")
