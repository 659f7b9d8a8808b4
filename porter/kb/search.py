"""`porter kb search`: fuzzy lookup over ids, aliases, titles, symptoms and literal signatures."""

from __future__ import annotations

from typing import Iterable

from porter.kb.schema import KBEntry

MIN_SCORE = 55.0


def search_entries(entries: Iterable[KBEntry], query: str, limit: int = 10) -> list[tuple[KBEntry, float]]:
    from rapidfuzz import fuzz

    q = query.strip()
    ql = q.lower()
    scored: list[tuple[KBEntry, float]] = []
    for entry in entries:
        names = {entry.id.lower(), *(a.lower() for a in entry.aliases)}
        if ql in names:
            scored.append((entry, 100.0))
            continue
        best = 0.0
        literals = (sig.pattern for sig in entry.signatures if sig.kind == "literal")
        for text in (entry.title, *entry.symptoms, *entry.aliases, *literals):
            t = text.lower()
            if ql in t:
                best = max(best, 95.0)
                continue
            best = max(best, fuzz.token_set_ratio(ql, t) * 0.9, fuzz.partial_ratio(ql, t) * 0.85 if len(ql) >= 4 else 0.0)
        if best >= MIN_SCORE:
            scored.append((entry, round(best, 1)))
    scored.sort(key=lambda pair: (-pair[1], pair[0].id))
    return scored[:limit]
