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
from typing import Iterable

from porter.upgrade.callers import binds, bound
from porter.upgrade.index import Signature, TreeIndex, signature_of

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


def method_signatures(index: TreeIndex, names: Iterable[str]) -> dict[str, list[Signature]]:
    """name -> the signatures of every method so named in a class body of the tree (not bound)."""
    names = sorted(set(names))
    out: dict[str, list[Signature]] = {name: [] for name in names}
    if not names:
        return out
    # `def <name>(` for any of the names, as one search (a literal prefix the regex engine scans for)
    # instead of one substring search of the whole text per name
    needles = re.compile(b"def (?:" + b"|".join(re.escape(n.encode()) for n in names) + rb")\(")
    pattern = re.compile(rb"\n[ \t]+(?:async[ \t]+)?def[ \t]+(" + b"|".join(re.escape(n.encode()) for n in names) + rb")[ \t]*\(")
    for _, path in index._module_files():
        try:
            with open(path, "rb") as fh:
                text = b"\n" + fh.read()
        except OSError:
            continue
        if needles.search(text) is None:
            continue
        for m in pattern.finditer(text):
            params = _header_params(text, m.end() - 1)
            if params is None:
                continue
            try:
                fn = ast.parse(b"def f(" + params + b"\n): pass").body[0]
            except (SyntaxError, ValueError):
                continue
            out[m.group(1).decode()].append(signature_of(fn))  # type: ignore[arg-type]
    return out


def share_fitting(signatures: list[Signature], positional: int, keywords: Iterable[str]) -> float:
    """The share of these (unbound) method signatures a bound call with this shape binds to."""
    keywords = tuple(keywords)
    return sum(binds(bound(s), positional, keywords) for s in signatures) / len(signatures) if signatures else 0.0


def interface_break(old: list[Signature], new: list[Signature], positional: int, keywords: Iterable[str]) -> bool:
    """Whether the call fitted the baseline's namesakes and fits (almost) none of the target's."""
    if len(old) < MIN_DEFINITIONS or len(new) < MIN_DEFINITIONS:
        return False
    return share_fitting(old, positional, keywords) >= AGREE and share_fitting(new, positional, keywords) <= DISAGREE
