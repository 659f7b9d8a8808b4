"""Command modules. Each exposes `register(app)` and keeps its heavy imports inside functions
so `porter --help` starts fast."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING: porter.fastcli imports porter.commands.diagnose without typer or typing
if TYPE_CHECKING:
    import typer

COMMAND_MODULES = (
    "diagnose",
    "kb",
    "status",
    "upgrade",
    "apply",
    "hosts",
    "smoke",
    "config_cmd",
)


def register_all(app: typer.Typer) -> None:
    import importlib
    import importlib.util

    for name in COMMAND_MODULES:
        qualified = f"{__name__}.{name}"
        if importlib.util.find_spec(qualified) is None:
            continue  # a command whose module is not in this checkout
        importlib.import_module(qualified).register(app)
