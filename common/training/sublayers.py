"""The layers under a Keras layer, found through public API only.

Keras 3 lists a model's own layers (`keras.Model.layers`) but has no public walk over a whole
tree of layers (its `_flatten_layers` is private and changes between releases), and a plain
`keras.Layer` does not list its sublayers at all. `sublayers` walks what layers expose instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def sublayers(layer: Any) -> list:
    """Every layer under `layer` (not `layer` itself), each once, depth first.

    A model's layers are its `layers`; any layer's are those held in its public attributes,
    directly or in lists, tuples and dicts (`self.encoder`, `self.blocks = [...]`). A layer kept
    only in a private attribute (`self._dense`, as some Keras layers keep theirs) is not found.

    Args:
        layer: a `keras.Layer` (a model too).

    Returns:
        The `keras.Layer`s under it, parents before their children.

    Example:
    >>> import keras
    >>> inner = keras.Sequential([keras.layers.Dense(2, name="d")], name="inner")
    >>> [x.name for x in sublayers(keras.Sequential([inner], name="outer"))]
    ['inner', 'd']
    """
    import keras

    found: dict[int, Any] = {}

    def held(value: Any) -> Iterator[Any]:
        """The layers `value` is or contains (in lists, tuples, dicts)."""
        if isinstance(value, keras.Layer):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                yield from held(item)
        elif isinstance(value, dict):
            for item in value.values():
                yield from held(item)

    def children(parent: Any) -> Iterator[Any]:
        if isinstance(parent, keras.Model):
            yield from parent.layers
        for name, value in vars(parent).items():
            if not name.startswith("_"):
                yield from held(value)

    stack = list(reversed(list(children(layer))))
    while stack:
        current = stack.pop()
        if current is layer or id(current) in found:
            continue
        found[id(current)] = current
        stack.extend(reversed(list(children(current))))
    return list(found.values())
