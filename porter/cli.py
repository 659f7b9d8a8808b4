"""The porter entry point (`porter = porter.cli:main`).

`porter diagnose` is run many times in a row by scripts and CI steps, and building the typer
app (click, typer, every command module) costs more than a diagnosis: a plain diagnose
invocation takes the fast path in `porter.fastcli`, and so does a plain `porter upgrade ... --dry-run`
(a warm, cached dry run is mostly start-up); everything else (and any line a fast path does not
fully understand) goes to the typer app in `porter.cliapp`.
"""

from __future__ import annotations

import sys


def main() -> None:
    from porter import gcpause

    gcpause.pause()  # until the diagnose fast path has loaded its KB (porter.gcpause)
    from porter import rxcache
    from porter.fastcli import fast_diagnose, fast_upgrade

    rxcache.persist()  # the process's newly compiled regexes are kept for the next one (porter.rxcache)

    code = fast_diagnose(sys.argv[1:])
    gcpause.resume()
    if code is None:
        code = fast_upgrade(sys.argv[1:])
        if code is not None:
            gcpause.before_exit()  # no full collection over the analysis's survivors at exit
    if code is not None:
        sys.exit(code)
    from porter.cliapp import main as app_main

    app_main()


def __getattr__(name: str):  # `from porter.cli import app, PorterGroup` keeps working
    if name.startswith("__"):  # the import system probes `__path__` & co.: not the app's names
        raise AttributeError(name)
    from porter import cliapp

    return getattr(cliapp, name)


if __name__ == "__main__":
    main()
