"""How often a `tf.function` is traced in a test, and whether TensorFlow warned of retracing.

`calls(monkeypatch, owner, name)` counts the calls of a method that a function's Python body
runs: that body runs only while the function is traced, so the count is the number of traces.
`retracing_warnings()` collects TensorFlow's "N out of the last N calls to ... triggered
tf.function retracing" warnings logged inside the block, counted from a fresh detector:
TensorFlow's own counts the traces of one Python function (its code, shared by every
`tf.function` made of it) over the whole process, and stops warning after two.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from typing import Any


def calls(monkeypatch: Any, owner: type, name: str) -> list[tuple]:
    """A list that gets one entry (the arguments) per call of `owner.name` from now on."""
    seen: list[tuple] = []
    method = getattr(owner, name)

    @functools.wraps(method)
    def counted(*args, **kwargs):
        seen.append(args)
        return method(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return seen


class _Collect(logging.Handler):
    def __init__(self, messages: list[str]):
        super().__init__(logging.WARNING)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "retracing" in message:
            self.messages.append(message)


@contextlib.contextmanager
def retracing_warnings() -> Iterator[list[str]]:
    """The retracing warnings TensorFlow logs inside the block (on the "tensorflow" logger)."""
    from tensorflow.python.eager.polymorphic_function import polymorphic_function

    messages: list[str] = []
    handler = _Collect(messages)
    logger = logging.getLogger("tensorflow")
    saved = polymorphic_function._frequent_tracing_detector_manager
    polymorphic_function._frequent_tracing_detector_manager = (
        polymorphic_function._FrequentTracingDetectorManager())
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        polymorphic_function._frequent_tracing_detector_manager = saved
