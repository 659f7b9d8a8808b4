"""Run by porter.port.validate in a fresh interpreter (by path, never imported by porter): import
the plugin modules a port touched and its entry points against one upstream tree, and print one
JSON line with what happened.

argv[1] is a JSON object: tree (the upstream tree to put first on sys.path, "" = use the installed
upstream), plugin_root, upstream and plugin (top-level package names), modules, entry_points,
device (module prefixes that only exist with an NPU or a build: stood in), environment (top-level
names of declared dependencies that may be stood in when not installed) and version.

Stand-ins are modules whose every attribute is a permissive class; they are only created for names
no real finder could import, and each one is reported, so the verdict says what it relied on.
"""

import abc
import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import traceback
import types

CFG = json.loads(sys.argv[1])
STOOD = {"device": [], "environment": []}
STOOD_KIND = {}


class _Meta(abc.ABCMeta):  # ABCMeta: a stood-in base mixes with ABC bases without a metaclass conflict
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make(f"{cls.__qualname__}.{name}")

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __iter__(cls):
        return iter(())

    def __len__(cls):
        return 0


class StandIn(metaclass=_Meta):
    def __init__(self, *args, **kwargs):
        pass

    def __init_subclass__(cls, **kwargs):  # class X(msgspec.Struct, omit_defaults=True)
        pass

    def __or__(self, other):  # `Annotation | None` on a stood-in value
        return self

    __ror__ = __or__

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make(name)()

    def __call__(self, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else self  # decorators keep the function

    def __getitem__(self, item):
        return self

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __int__(self):
        return 0

    __index__ = __int__

    def __float__(self):
        return 0.0


def _asked_by_our_code():
    """True when the import comes from the upstream tree or the plugin, not from an installed library
    probing for an optional dependency (transformers asks find_spec('torchvision') and then reads its
    version: a stand-in there would send it down a path that exists on no real machine)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<frozen") or "importlib" in name or name == __file__):
            roots = [r.rstrip("/") + "/" for r in (CFG["tree"], CFG["plugin_root"]) if r]
            return any(name.startswith(r) for r in roots)
        frame = frame.f_back
    return False


def _make(qualname):
    return _Meta(qualname.rsplit(".", 1)[-1], (StandIn,), {"__qualname__": qualname, "__module__": "porter_standin"})


class StandInModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _make(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class LastResortFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Reached only when no real finder found the module (it sits last on sys.meta_path)."""

    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if any(name == p or name.startswith(p + ".") for p in CFG["device"]):
            kind = "device"
        elif top != name and isinstance(sys.modules.get(top), StandInModule):
            kind = STOOD_KIND.get(top, "environment")  # a submodule of a stood-in package
        elif top == name and top in CFG["environment"] and top not in sys.stdlib_module_names and _asked_by_our_code():
            # A declared dependency that is not installed here; never a stdlib module (code probes
            # `msvcrt` and the like with try/except), never a missing part of an installed package.
            kind = "environment"
        else:
            return None  # a missing upstream or plugin module is exactly what the smoke must report
        spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
        spec.porter_kind = kind
        return spec

    def create_module(self, spec):
        module = StandInModule(spec.name)
        module.__path__ = []
        module.__file__ = None
        module.__version__ = "0.0.0"  # version checks on a stood-in library take the oldest path
        return module

    def exec_module(self, module):
        kind = getattr(module.__spec__, "porter_kind", "environment")
        STOOD_KIND.setdefault(module.__name__.split(".")[0], kind)
        top = module.__name__ if kind == "device" else module.__name__.split(".")[0]
        if top not in STOOD[kind]:
            STOOD[kind].append(top)


def _standin_involved(exc):
    """A stand-in took part in the failure (a frame held one): the failure says nothing about the port."""
    tb = exc.__traceback__
    while tb is not None:
        for value in list(tb.tb_frame.f_locals.values()):
            if isinstance(value, (StandIn, StandInModule)) or isinstance(value, _Meta) or (
                    isinstance(value, tuple) and any(isinstance(v, _Meta) for v in value)):
                return True
        tb = tb.tb_next
    return False


def _where(exc):
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        if "smoke_child" not in frame.filename:
            return f"{_rel(frame.filename)}:{frame.lineno}"
    return ""


def _rel(path):
    for base, label in ((CFG["plugin_root"], ""), (CFG["tree"], f"{CFG['upstream']}@{CFG['version']}:")):
        if base and path.startswith(base.rstrip("/") + "/"):
            return label + path[len(base.rstrip("/")) + 1:]
    return path


def main():
    sys.path[:0] = [p for p in (CFG["tree"], CFG["plugin_root"]) if p]
    sys.meta_path.append(LastResortFinder())
    results = []
    for module in CFG["modules"]:
        try:
            importlib.import_module(module)
            results.append({"name": module, "ok": True})
        except BaseException as exc:  # noqa: BLE001 - any failure at import time is the finding
            results.append({"name": module, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:400],
                            "type": type(exc).__name__, "where": _where(exc), "standin": _standin_involved(exc)})
    for spec in CFG["entry_points"]:
        module, _, attr = spec.partition(":")
        try:
            value = importlib.import_module(module.strip())
            for part in attr.strip().split(".") if attr.strip() else ():
                value = getattr(value, part)
            results.append({"name": spec, "ok": True, "entry_point": True})
        except BaseException as exc:  # noqa: BLE001
            results.append({"name": spec, "ok": False, "entry_point": True, "error": f"{type(exc).__name__}: {exc}"[:400],
                            "type": type(exc).__name__, "where": _where(exc), "standin": _standin_involved(exc)})
    upstream = sys.modules.get(CFG["upstream"])
    origin = getattr(upstream, "__file__", None) or ""
    print("PORTER-SMOKE " + json.dumps({"results": results, "standins": STOOD, "upstream_file": _rel(origin),
                                        "upstream_version": str(getattr(upstream, "__version__", ""))}))


if __name__ == "__main__":
    main()
