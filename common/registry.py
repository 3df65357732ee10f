"""One small registry type, so that anything chosen by name is chosen the same way.

Attention scores, encoders, datasets, architectures and presets are each kept in a
`Registry`. The command-line `--help` and the error for a wrong name both read the same
`names()`, so they can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj

    def get(self, name: str) -> Any:
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise UnknownNameError(
                f"Unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}"
            ) from None

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
