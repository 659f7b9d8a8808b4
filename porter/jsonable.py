"""The one conversion of porter's objects to JSON-like data: records with `to_dict()`, dataclasses,
paths and sets. Used by the JSON renderer and by redaction, so both see the same data."""

from __future__ import annotations

import dataclasses
from typing import Any


def plain(obj: Any) -> Any:
    """JSON-like data for `obj`; TypeError when porter has no plain form for it."""
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "__fspath__"):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
