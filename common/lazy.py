"""Names of a package imported on first use (PEP 562), written once for every package.

A package whose modules need TensorFlow or Keras lists where each public name lives; importing
the package imports none of them, so a command line can read the light parts (registries,
configs) and `--help` stays fast.

Example (a package's `__init__.py`):
>>> __getattr__ = lazy_getattr(__name__, {"Trainer": "common.training.trainer"})  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: `homes` maps each name to its module's full name.

    A name is imported from its module on first use and then set on the package, so later
    uses are plain attribute reads.
    """

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(homes[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
