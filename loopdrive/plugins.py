"""Objects named by import path (``"package.module:attribute"``): a user's agent, reward or metric.

Every layer that lets a config name user code resolves it here, so the rules and the error
messages are the same everywhere: the spec must have one colon, the module must import, the
attribute must exist, and a failure says which of the three went wrong.
"""

from __future__ import annotations

import importlib
from typing import Any


def load_object(spec: str, what: str = "object", error: type[Exception] = ValueError) -> Any:
    """The attribute ``attr`` of module ``module`` named by ``spec = "module:attr"``.

    ``what`` names the kind of thing in error messages ("reward term", "agent", ...); ``error`` is
    the exception type raised (a caller's own ``ValueError`` subclass).
    """
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise error(f"{what} {spec!r}: not an import path like 'my_pkg.module:name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise error(f"{what} {spec!r}: cannot import module {module_name!r}: {e}") from None
    try:
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise error(f"{what} {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    return obj


def load_callable(spec: str, what: str = "object", error: type[Exception] = ValueError) -> Any:
    """``load_object`` that also insists on something callable."""
    obj = load_object(spec, what, error)
    if not callable(obj):
        raise error(f"{what} {spec!r}: {type(obj).__name__} is not callable")
    return obj


class Registry(dict):
    """Named objects of one kind (reward terms, metrics, frame rewards, service rewards): built-ins
    register by name with ``@registry.register()``, a user's are named by import path in configs.

    A ``dict`` from name to object, so it reads as one; ``resolve(spec)`` is the registered object of
    that name, else the callable at ``"module:function"``, else an ``error`` naming what is known.
    """

    def __init__(self, kind: str, error: type[Exception] = ValueError) -> None:
        super().__init__()
        self.kind, self.error = kind, error

    def register(self, name: str | None = None):
        """Decorator: register the function under ``name`` (default: its own name)."""

        def wrap(obj):
            key = name or obj.__name__
            if key in self and self[key] is not obj:
                raise self.error(f"{self.kind} {key!r} is already registered")
            self[key] = obj
            return obj

        return wrap

    def resolve(self, spec: str):
        if spec in self:
            return self[spec]
        if ":" not in spec:
            raise self.error(
                f"unknown {self.kind} {spec!r}: not registered (known: {sorted(self)}) "
                "and not an import path like 'my_pkg.module:name'"
            )
        return load_callable(spec, self.kind, self.error)
