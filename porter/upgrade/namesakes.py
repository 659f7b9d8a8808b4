"""Methods of one name across a tree: the interface an object of unknown class most likely answers.

`self.model = get_model(...)`, then `self.model.compute_logits(h, None)`: the object comes from
upstream, but the factory's return annotation (`nn.Module`) does not say which class it is. When
every upstream class that defines the method agreed with the call at the baseline and (almost) none
does at the target, the method's interface changed across the tree (vllm 0.11 dropped
`sampling_metadata` from every model's `compute_logits`): whichever class the object is, the call
breaks. drift.py asks this only for calls whose receiver is such an upstream-made, untyped object.

The signatures come from the method headers alone (`def name(...)` indented in a class body), found
by a substring test and a regex over the tree's files and parsed one header at a time, so no module
is parsed whole (a name like `compute_logits` is defined in ~140 model files)."""

from __future__ import annotations

import ast
import re
from typing import Callable, Iterable

from porter.upgrade.callers import binds, bound
from porter.upgrade.index import _PARALLEL_THRESHOLD, Signature, TreeIndex, signature_of

MIN_DEFINITIONS = 3  # fewer namesakes say nothing about an interface
AGREE = 0.8  # share of the baseline's namesakes the call must fit
DISAGREE = 0.2  # share of the target's namesakes the call may still fit


def _header_params(text: bytes, open_paren: int) -> bytes | None:
    """The text between the `(` at `open_paren` and its matching `)` (strings skipped roughly)."""
    depth, i, quote = 0, open_paren, b""
    while i < len(text):
        c = text[i:i + 1]
        if quote:
            if c == b"\\":
                i += 2
                continue
            if c == quote:
                quote = b""
        elif c in (b"'", b'"'):
            quote = c
        elif c in (b"(", b"[", b"{"):
            depth += 1
        elif c in (b")", b"]", b"}"):
            depth -= 1
            if depth == 0:
                return text[open_paren + 1:i]
        elif c == b"#":
            end = text.find(b"\n", i)
            i = len(text) if end < 0 else end
            continue
        i += 1
    return None


def _signatures_each(names: tuple[str, ...], paths: list[str]) -> list[tuple[str, Signature]]:
    """(name, signature) of each method header of `names` in the files, in file and text order (a
    job for a worker: one read of each file). A file is searched only when it holds `def <name>`
    followed by `(` for one of the names (the header pattern's own core, tried from its literal
    `def`: one scan of the text instead of a substring test per name), so what a name gets does not
    depend on which other names are asked with it."""
    alternation = b"|".join(re.escape(n.encode()) for n in names)
    core = re.compile(rb"def[ \t]+(?:" + alternation + rb")[ \t]*\(")
    pattern = re.compile(rb"\n[ \t]+(?:async[ \t]+)?def[ \t]+(" + alternation + rb")[ \t]*\(")
    out: list[tuple[str, Signature]] = []
    for path in paths:
        try:
            with open(path, "rb") as fh:
                text = b"\n" + fh.read()
        except OSError:
            continue
        if core.search(text) is None:
            continue
        for m in pattern.finditer(text):
            params = _header_params(text, m.end() - 1)
            if params is None:
                continue
            try:
                fn = ast.parse(b"def f(" + params + b"\n): pass").body[0]
            except (SyntaxError, ValueError):
                continue
            out.append((m.group(1).decode(), signature_of(fn)))  # type: ignore[arg-type]
    return out


_CHUNKS = 8  # pool jobs per tree (as index.start_passes splits a pass)


def start_method_signatures(index: TreeIndex, names: Iterable[str]) -> Callable[[], dict[str, list[Signature]]]:
    """Start method_signatures() in the run's pool (chunks of the tree's files, submitted now, so the
    pass runs while the caller does other work); returns the function that collects the answer. Without
    a pool, or for a small tree, the answer is computed when collected. The answer is the same either
    way: the chunks are concatenated in file order."""
    names = sorted(set(names))
    paths = [str(path) for _, path in index._module_files()] if names else []
    pool = getattr(index, "pool", None)
    if pool is not None and len(paths) >= 4 * _PARALLEL_THRESHOLD:
        size = max(64, len(paths) // _CHUNKS)
        futures = [pool.submit(_signatures_each, tuple(names), paths[i: i + size]) for i in range(0, len(paths), size)]
        parts: Callable[[], list[list[tuple[str, Signature]]]] = lambda: [f.result() for f in futures]
    else:
        parts = lambda: [_signatures_each(tuple(names), paths)] if names else []

    def collect() -> dict[str, list[Signature]]:
        out: dict[str, list[Signature]] = {name: [] for name in names}
        for part in parts():
            for name, sig in part:
                out[name].append(sig)
        return out

    return collect


def method_signatures(index: TreeIndex, names: Iterable[str]) -> dict[str, list[Signature]]:
    """name -> the signatures of every method so named in a class body of the tree (not bound)."""
    return start_method_signatures(index, names)()


def share_fitting(signatures: list[Signature], positional: int, keywords: Iterable[str]) -> float:
    """The share of these (unbound) method signatures a bound call with this shape binds to."""
    keywords = tuple(keywords)
    return sum(binds(bound(s), positional, keywords) for s in signatures) / len(signatures) if signatures else 0.0


def interface_break(old: list[Signature], new: list[Signature], positional: int, keywords: Iterable[str]) -> bool:
    """Whether the call fitted the baseline's namesakes and fits (almost) none of the target's."""
    if len(old) < MIN_DEFINITIONS or len(new) < MIN_DEFINITIONS:
        return False
    return share_fitting(old, positional, keywords) >= AGREE and share_fitting(new, positional, keywords) <= DISAGREE
