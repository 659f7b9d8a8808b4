"""Where porter's user cache lives, for the modules that read it before a config is loaded
(the compiled-regex store, the YAML and pyproject memos): standard library only, no import cost."""

from __future__ import annotations

import os


def cache_home() -> str:
    """PORTER_CACHE_DIR, else $XDG_CACHE_HOME/porter, else ~/.cache/porter (the config's default)."""
    home = os.environ.get("PORTER_CACHE_DIR")
    if home:
        return home
    xdg = os.environ.get("XDG_CACHE_HOME")
    return os.path.join(xdg or os.path.join(os.path.expanduser("~"), ".cache"), "porter")
