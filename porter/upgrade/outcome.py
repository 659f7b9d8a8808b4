"""Decide the outcome of an upgrade from the DriftRecords, by explicit rules.

Rules, first match wins (each outcome carries the reasons that decided it):
1. no breaking or risky record and no note                -> A
2. no breaking record (risky records or notes only)        -> A_WITH_NOTE
3. breaking records in a *released* plugin, and another release
   is known to pair with the target (compatibility table)  -> B   (pin that release: consumer-side only)
4. breaking records whose sites are all in paths we may
   patch (ownership map of the plugin)                     -> C_PATCH
5. otherwise (some fix belongs to a community upstream)    -> C_REPORT
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from porter.registry import Ownership
from porter.upgrade.models import DriftRecord, Outcome, OutcomeDecision, Severity


def decide_outcome(
    records: Iterable[DriftRecord],
    notes: Iterable[DriftRecord],
    ownership: Ownership,
    plugin_name: str = "plugin",
    known_pairs: Iterable[str] = (),
    analysed_plugin_version: str | None = None,
) -> OutcomeDecision:
    records = list(records)
    notes = list(notes)
    breaking = [r for r in records if r.severity == Severity.BREAKING]
    risky = [r for r in records if r.severity == Severity.RISKY]
    if not records and not notes:
        return OutcomeDecision(Outcome.A, ("no use of the upstream breaks at the target",))
    if not breaking:
        reasons = []
        if risky:
            reasons.append(f"{len(risky)} risky finding(s) to review: " + _families(risky))
        if notes:
            reasons.append(f"{len(notes)} note(s): breaks only under dead guards or inside except-ImportError fallbacks")
        return OutcomeDecision(Outcome.A_WITH_NOTE, tuple(reasons))
    summary = f"{len(breaking)} breaking finding(s): " + _families(breaking)
    # Pinning is an answer only for a released plugin (a fork checkout is what we patch instead).
    pairs = [p for p in known_pairs if p and p != analysed_plugin_version] if analysed_plugin_version else []
    if pairs:
        return OutcomeDecision(Outcome.B, (summary, f"released {plugin_name} {', '.join(pairs)} is validated with the target: "
                                           "pin it instead of patching (consumer-side change only)"))
    outside: list[str] = []
    for record in breaking:
        for site in record.sites:
            if ownership.decide(site.path) != "patch":
                outside.append(f"{site.path}:{site.line}")
    if not outside:
        return OutcomeDecision(Outcome.C_PATCH, (summary, f"every site is in {plugin_name} paths we may patch: "
                                                 "shim in the fork on an ascend-port/<slug> branch"))
    shown = ", ".join(sorted(set(outside))[:5]) + (" ..." if len(set(outside)) > 5 else "")
    return OutcomeDecision(Outcome.C_REPORT, (summary, f"{len(set(outside))} site(s) are in paths we only report on: {shown}",
                                              "file a blocker report with the owning upstream"))


def _families(records: list[DriftRecord]) -> str:
    counts = Counter(r.family.label for r in records)
    return ", ".join(f"{n} {label}" for label, n in counts.most_common())
