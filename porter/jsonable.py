"""The one conversion of porter's objects to JSON-like data: records with `to_dict()`, dataclasses,
paths and sets. Used by the JSON renderer and by redaction, so both see the same data."""

from __future__ import annotations


from porter.record import asdict, is_record

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import Any


def plain(obj: Any) -> Any:
    """JSON-like data for `obj`; TypeError when porter has no plain form for it."""
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if is_record(obj):
        return asdict(obj)
    if hasattr(type(obj), "__dataclass_fields__") and not isinstance(obj, type):
        import dataclasses  # imported here: the diagnose path has records only (porter.record)

        return dataclasses.asdict(obj)
    if hasattr(obj, "__fspath__"):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
