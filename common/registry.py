"""One small registry type, so that anything chosen by name is chosen the same way.

Attention scores, encoders, datasets, architectures and presets are each kept in a
`Registry`. The command-line `--help` and the error for a wrong name both read the same
`names()`, so they can never disagree.

A registry whose entries live in modules that import Keras is created in a light module with
its names *declared* (`declare(name, module)`): `names()` and `in` answer without importing
anything, `get(name)` imports the module, whose `register`/`add` then fills the entry. So the
command lines list their choices without importing TensorFlow, and `--help` stays fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from common.errors import UserError

T = TypeVar("T")


class UnknownNameError(UserError, ValueError):
    """Raised for a name that is not in a registry; the message lists the valid names."""


class Registry:
    """A name -> object mapping with a helpful error for unknown names.

    Args:
        kind: what the registry holds, used in error messages ("attention score").

    Example:
    >>> SCORES = Registry("attention score")
    >>> @SCORES.register("dot")
    ... class DotScore: ...
    >>> SCORES.get("dot") is DotScore
    True
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Any] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that registers its argument under `name` and returns it unchanged."""

        def decorator(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, obj: Any) -> None:
        """Register `obj` as `name`; a name `declare`d before is filled, not refused."""
        if name in self._entries and not isinstance(self._entries[name], _Declared):
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj

    def declare(self, name: str, module: str) -> None:
        """Make `name` known now; importing `module` registers its object (on first `get`)."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = _Declared(module)

    def get(self, name: str) -> Any:
        try:
            entry = self._entries[name]
        except (KeyError, TypeError):
            raise UnknownNameError(
                f"Unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}"
            ) from None
        if isinstance(entry, _Declared):
            importlib.import_module(entry.module)
            entry = self._entries[name]
            if isinstance(entry, _Declared):
                raise RuntimeError(f"{self.kind} {name!r} is declared in {entry.module}, "
                                   "which does not register it")
        return entry

    def declared(self) -> dict[str, str]:
        """The names whose module is not imported yet, and that module."""
        return {name: entry.module for name, entry in self._entries.items()
                if isinstance(entry, _Declared)}

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"


@dataclass(frozen=True)
class _Declared:
    """A registry entry known by name whose object the module `module` registers."""

    module: str
