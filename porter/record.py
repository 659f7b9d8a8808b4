"""Typed records for the `porter diagnose` start-up path, without importing `dataclasses`.

`import dataclasses` pulls in `inspect` (ast, dis, tokenize, ...), and each `@dataclass` then
generates and compiles its methods: together ~140 M instructions for the 19 records a warm
`porter diagnose` creates, a third of the whole call. `@record` builds the same kind of class
(typed fields in annotation order, defaults and default factories, keyword or positional
construction, `__repr__`, `__eq__`, hashing and immutability when frozen, `__post_init__`)
from closures, without compiling anything. The classes stay dataclasses to every other module:
`dataclasses.fields`, `asdict`, `replace` and `is_dataclass` work on them, through a
`__dataclass_fields__` that imports `dataclasses` only when something asks for it.
`asdict` and `replace` here are the cheap equivalents for the hot path.
"""

from __future__ import annotations

_MISSING = object()


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record (as dataclasses.FrozenInstanceError)."""


class _Field:
    __slots__ = ("default", "default_factory", "repr")

    def __init__(self, default, default_factory, repr: bool) -> None:  # noqa: A002 - dataclasses' name
        self.default, self.default_factory, self.repr = default, default_factory, repr


def field(*, default=_MISSING, default_factory=_MISSING, repr: bool = True):  # noqa: A002
    """A field with a default factory or without a repr (the `dataclasses.field` options records use)."""
    return _Field(default, default_factory, repr)


def _is_classvar(annotation) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return text.startswith(("ClassVar", "typing.ClassVar"))


class _DataclassFields:
    """`__dataclass_fields__` made on first access, so `dataclasses` itself works on records."""

    def __init__(self, spec: list[tuple[str, object, object, object, bool]]) -> None:
        self.spec, self.made = spec, None

    def __get__(self, obj, owner):
        if self.made is None:
            import dataclasses

            made = {}
            for name, annotation, default, factory, shown in self.spec:
                kwargs = {"repr": shown}
                if default is not _MISSING:
                    kwargs["default"] = default
                if factory is not _MISSING:
                    kwargs["default_factory"] = factory
                f = dataclasses.field(**kwargs)
                f.name, f.type = name, annotation
                f._field_type = dataclasses._FIELD  # type: ignore[attr-defined] - what @dataclass sets
                made[name] = f
            self.made = made
        return self.made


def record(cls=None, /, *, frozen: bool = False):
    """Decorator: `cls` as a record (see the module docstring); `@record` or `@record(frozen=True)`."""

    def wrap(cls):
        spec = []
        for base in reversed(cls.__mro__[1:]):
            spec.extend(base.__dict__.get("__record_spec__", ()))
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            if _is_classvar(annotation):
                continue
            value = cls.__dict__.get(name, _MISSING)
            default, factory, shown = value, _MISSING, True
            if isinstance(value, _Field):
                default, factory, shown = value.default, value.default_factory, value.repr
                if default is _MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, default)
            spec = [s for s in spec if s[0] != name]
            spec.append((name, annotation, default, factory, shown))
        _build(cls, spec, frozen)
        return cls

    return wrap if cls is None else wrap(cls)


def _build(cls, spec, frozen: bool) -> None:
    names = tuple(s[0] for s in spec)
    known = frozenset(names)
    defaults = [(s[0], s[2], s[3]) for s in spec]
    shown = tuple(s[0] for s in spec if s[4])
    post_init = getattr(cls, "__post_init__", None)
    title = cls.__qualname__

    def __init__(self, *args, **kwargs):
        if len(args) > len(names):
            raise TypeError(f"{title}.__init__() takes {len(names) + 1} positional arguments but {len(args) + 1} were given")
        for key in kwargs:
            if key not in known:
                raise TypeError(f"{title}.__init__() got an unexpected keyword argument {key!r}")
        values = {}
        for i, (name, default, factory) in enumerate(defaults):
            if i < len(args):
                if name in kwargs:
                    raise TypeError(f"{title}.__init__() got multiple values for argument {name!r}")
                values[name] = args[i]
            elif name in kwargs:
                values[name] = kwargs[name]
            elif default is not _MISSING:
                values[name] = default
            elif factory is not _MISSING:
                values[name] = factory()
            else:
                raise TypeError(f"{title}.__init__() missing required argument: {name!r}")
        self.__dict__.update(values)
        if post_init is not None:
            post_init(self)

    def __repr__(self):
        return f"{type(self).__qualname__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in shown) + ")"

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)
        return NotImplemented

    cls.__init__, cls.__repr__, cls.__eq__ = __init__, __repr__, __eq__
    cls.__record_spec__ = tuple(spec)
    cls.__record_fields__ = names
    cls.__match_args__ = names
    cls.__dataclass_fields__ = _DataclassFields(list(spec))
    if frozen:
        def __setattr__(self, name, value):
            if type(self) is cls or name in known:
                raise FrozenInstanceError(f"cannot assign to field {name!r}")
            object.__setattr__(self, name, value)

        def __delattr__(self, name):
            if type(self) is cls or name in known:
                raise FrozenInstanceError(f"cannot delete field {name!r}")
            object.__delattr__(self, name)

        def __hash__(self):
            return hash(tuple(getattr(self, n) for n in names))

        cls.__setattr__, cls.__delattr__, cls.__hash__ = __setattr__, __delattr__, __hash__
    elif "__hash__" not in cls.__dict__ or cls.__dict__["__hash__"] is None:
        cls.__hash__ = None  # eq without frozen: unhashable, as a dataclass


def is_record(obj) -> bool:
    return hasattr(type(obj), "__record_fields__") and not isinstance(obj, type)


def _plain(value):
    if is_record(value):
        return {name: _plain(getattr(value, name)) for name in value.__record_fields__}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_plain(v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return value
    if hasattr(type(value), "__dataclass_fields__") and not isinstance(value, type):
        import dataclasses

        return dataclasses.asdict(value)
    import copy

    return copy.deepcopy(value)


def asdict(obj) -> dict:
    """`dataclasses.asdict` for a record: nested records, lists, tuples and dicts converted alike."""
    if not is_record(obj):
        raise TypeError("asdict() should be called on record instances")
    return _plain(obj)


def replace(obj, /, **changes):
    """`dataclasses.replace` for a record."""
    values = {name: getattr(obj, name) for name in obj.__record_fields__}
    values.update(changes)
    return type(obj)(**values)
