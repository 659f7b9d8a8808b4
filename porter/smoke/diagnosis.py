"""Failed smoke steps run through the KB matcher. The one place porter.smoke touches porter.kb,
imported lazily: a missing or broken KB degrades to "no diagnosis", never to a failed smoke."""

from __future__ import annotations

from typing import Any, Mapping

TOP = 3


def kb_env(environment: Mapping[str, Any]) -> dict[str, str]:
    """Installed versions from an L0 environment, for the matcher's version filter."""
    from porter.kb.env import version_facts

    return version_facts(environment.get("packages"), environment.get("cann"))


class Diagnoser:
    """Loads the KB once per smoke run and matches each failed step's text against it."""

    def __init__(self, patterns_dir, cache_dir=None, environment: Mapping[str, Any] | None = None):
        self.available = False
        self.reason = ""
        self._kb = None
        self._env: dict[str, str] = {}
        try:
            from porter.kb.loader import load_kb

            self._kb = load_kb(patterns_dir, cache_dir).compiled()
            self._env = kb_env(environment or {})
            self.available = True
        except Exception as exc:  # noqa: BLE001 - diagnosis is best effort by design
            self.reason = f"knowledge base unavailable: {type(exc).__name__}: {exc}"[:300]

    def diagnose(self, text: str, top: int = TOP) -> dict[str, Any]:
        if not text.strip():
            return {"status": "no-trace", "matches": []}
        if not self.available:
            return {"status": "unavailable", "reason": self.reason, "matches": []}
        from porter.kb.matcher import diagnose_text

        try:
            found = diagnose_text(self._kb, text, self._env, top)
        except Exception as exc:  # noqa: BLE001
            return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:300], "matches": []}
        return {
            "status": found.status,
            "matches": [
                {
                    "id": m.entry.id,
                    "title": m.entry.title,
                    "layer": m.entry.layer,
                    "confidence": round(float(m.confidence), 3),
                    "method": m.method,
                    "fix": list(m.entry.fix)[:3],
                    "verify": m.entry.verify,
                }
                for m in found.matches[:top]
            ],
        }
