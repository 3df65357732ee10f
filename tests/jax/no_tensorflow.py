"""A pytest plugin for the JAX runs of backend-neutral tests (`-p tests.jax.no_tensorflow`):
importing TensorFlow raises, as on the GPU machine, which has none; so a test that passes
there needs no TensorFlow."""

from __future__ import annotations

import importlib.abc
import sys


class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ImportError(f"this process may not import TensorFlow ({name})")
        return None


sys.meta_path.insert(0, _Block())
