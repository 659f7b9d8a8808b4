"""SARIF 2.1.0 for `porter upgrade` findings: one rule per drift family, one result per finding
with its plugin sites as physical locations (for GitHub code scanning and other SARIF viewers).

Input is the `porter.upgrade/1` JSON document (`analysis.records[]`, `analysis.notes[]`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
PLUGIN_ROOT = "PLUGIN_ROOT"
LEVELS = {"breaking": "error", "risky": "warning", "note": "note"}

# id -> (name, short text, help text). Names follow SARIF's PascalCase convention for rule names.
FAMILY_RULES: dict[str, tuple[str, str, str]] = {
    "F1": ("RemovedSymbol", "A symbol the plugin uses is gone at the target",
           "The upstream removed the symbol and porter found no new home for it. Replace the use, vendor "
           "the old code into the fork, or guard it by version (docs/upgrade.md, docs/port.md)."),
    "F2": ("MovedSymbol", "A symbol the plugin uses moved to another module",
           "The symbol still exists under the same name in another module. Import it from its new home "
           "(a lazy compat shim keeps both versions working)."),
    "F2r": ("RenamedSymbol", "A symbol the plugin uses was renamed",
            "The symbol exists under a new name. Import the new name, or alias it in a compat shim."),
    "F3": ("SignatureChanged", "A called or overridden function changed its parameters",
           "The parameters changed in a way that breaks the plugin's calls or overrides: adapt the call "
           "sites or the override's signature (a signature adapter shim can serve both versions)."),
    "F4": ("ReturnChanged", "A function's return shape or type changed",
           "Callers that unpack or use the return value must follow the new shape."),
    "F7": ("NewRequiredAttribute", "A base class now requires an attribute the plugin's subclass lacks",
           "Add the attribute to the subclass (with the base's default where there is one)."),
    "F8": ("NewRequiredMethod", "A base class gained an abstract or NotImplementedError method",
           "Implement the method in the plugin's subclass, or delegate to the base where it is safe."),
    "F9": ("BinaryDrift", "A compiled extension or ABI the plugin depends on changed",
           "Rebuild the plugin's native parts against the target; Python shims cannot fix an ABI change."),
    "F10": ("BaseClassChanged", "The bases of a class the plugin subclasses changed",
            "Check the subclass's overrides and super() calls against the new hierarchy."),
    "F11": ("MonkeypatchTargetGone", "A monkeypatch target is gone or no longer intercepts",
            "The plugin patches an attribute that no longer exists or is no longer looked up there; "
            "patch the new home or drop the patch."),
    "other": ("OtherDrift", "Another change that affects the plugin", "See the finding's message and evidence."),
}


def _rule(family: str, label: str) -> dict[str, Any]:
    name, short, help_text = FAMILY_RULES.get(family, FAMILY_RULES["other"])
    return {
        "id": family,
        "name": name,
        "shortDescription": {"text": short},
        "fullDescription": {"text": f"Drift family {family} ({label}): {short}."},
        "help": {"text": help_text, "markdown": f"**{family} {label}**: {help_text}"},
        "defaultConfiguration": {"level": "error"},
        "properties": {"tags": ["porter", "upgrade-drift", family]},
    }


def _fingerprint(record: dict[str, Any], site: dict[str, Any] | None) -> str:
    where = f"{site.get('path')}" if site else ""
    return hashlib.sha256(f"{record.get('key')}|{where}".encode()).hexdigest()[:32]


def _result(record: dict[str, Any], rule_index: int) -> dict[str, Any]:
    severity = str(record.get("severity", "breaking"))
    sites = [s for s in record.get("sites") or [] if s.get("path")]
    symbol = str(record.get("symbol", ""))
    text = record.get("message") or f"{symbol}: {record.get('family_label', record.get('family'))}"
    if record.get("new_location"):
        text += f" (new home: {record['new_location'].get('dotted')})"
    logical = [{"fullyQualifiedName": symbol, "kind": "member"}] if symbol else []
    locations = []
    for site in sites:
        region: dict[str, Any] = {"startLine": max(int(site.get("line") or 1), 1)}
        if site.get("code"):
            region["snippet"] = {"text": str(site["code"])}
        location: dict[str, Any] = {
            "physicalLocation": {
                "artifactLocation": {"uri": Path(str(site["path"])).as_posix(), "uriBaseId": PLUGIN_ROOT},
                "region": region,
            }
        }
        if logical:
            location["logicalLocations"] = logical
        locations.append(location)
    result: dict[str, Any] = {
        "ruleId": str(record.get("family", "other")),
        "ruleIndex": rule_index,
        "level": LEVELS.get(severity, "warning"),
        "message": {"text": text},
        "locations": locations[:1] or ([{"logicalLocations": logical}] if logical else []),
        "partialFingerprints": {"porterFinding/v1": _fingerprint(record, sites[0] if sites else None)},
        "properties": {
            "severity": severity,
            "symbol": symbol,
            "family": record.get("family"),
            "suggestedStrategy": record.get("suggested_strategy") or None,
            "newLocation": (record.get("new_location") or {}).get("dotted"),
            "confidence": record.get("confidence"),
            "guard": record.get("guard"),
        },
    }
    if len(locations) > 1:  # every other use of the symbol, so a viewer lists each file:line
        result["relatedLocations"] = [dict(loc, id=i) for i, loc in enumerate(locations[1:], start=1)]
    result["properties"] = {k: v for k, v in result["properties"].items() if v is not None}
    return result


def upgrade_sarif(doc: dict[str, Any]) -> dict[str, Any]:
    """The SARIF log (a dict) for one `porter upgrade` document."""
    analysis = doc.get("analysis") or {}
    findings = list(analysis.get("records") or []) + list(analysis.get("notes") or [])
    families: list[str] = []
    labels: dict[str, str] = {}
    for record in findings:
        family = str(record.get("family", "other"))
        if family not in labels:
            families.append(family)
            labels[family] = str(record.get("family_label", family))
    order = list(FAMILY_RULES)
    families.sort(key=lambda f: order.index(f) if f in order else len(order))
    rules = [_rule(f, labels[f]) for f in families]
    index = {f: i for i, f in enumerate(families)}
    results = [_result(r, index[str(r.get("family", "other"))]) for r in findings]
    plugin_root = (analysis.get("plugin_tree") or {}).get("root")
    run: dict[str, Any] = {
        "tool": {"driver": {
            "name": "porter",
            "version": str(doc.get("porter_version", "")) or "0",
            "rules": rules,
        }},
        "results": results,
        "columnKind": "unicodeCodePoints",
        "invocations": [{"executionSuccessful": True}],
        "properties": {
            "plugin": analysis.get("plugin"),
            "upstream": analysis.get("upstream"),
            "baseline": (analysis.get("baseline") or {}).get("label"),
            "target": (analysis.get("target") or {}).get("label"),
            "outcome": (analysis.get("outcome") or {}).get("outcome"),
            "outcomeReasons": (analysis.get("outcome") or {}).get("reasons", []),
        },
    }
    if plugin_root:
        root_uri = Path(plugin_root).resolve().as_uri().rstrip("/") + "/"
        run["originalUriBaseIds"] = {PLUGIN_ROOT: {"uri": root_uri, "description": {"text": "the plugin tree scanned"}}}
    return {"$schema": SARIF_SCHEMA_URI, "version": SARIF_VERSION, "runs": [run]}


def upgrade_sarif_text(doc: dict[str, Any]) -> str:
    return json.dumps(upgrade_sarif(doc), indent=2, ensure_ascii=False) + "\n"
