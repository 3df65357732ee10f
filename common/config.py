"""Frozen dataclass configs, saved as JSON beside every checkpoint.

Each component (encoder, decoder, trainer, data) has a frozen dataclass config; a run
config composes them. `to_dict` / `from_dict` round-trip nested dataclasses, so a run
directory says exactly how it was made and can rebuild the model.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import typing
from pathlib import Path
from typing import Any, TypeVar

from common.errors import UserError

C = TypeVar("C")


def to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a (nested) dataclass config."""
    return dataclasses.asdict(config)


def from_dict(cls: type[C], data: dict[str, Any]) -> C:
    """Rebuild a (nested) dataclass `cls` from `to_dict` output.

    Unknown keys are an error naming them, so a typo in a hand-edited config is caught.
    """
    if not isinstance(data, dict):
        raise UserError(f"expected a JSON object for {cls.__name__}, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UserError(
            f"unknown {cls.__name__} field(s): {', '.join(unknown)}; "
            f"expected some of: {', '.join(fields)}"
        )
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in data.items():
        kind = hints.get(name)
        if dataclasses.is_dataclass(kind) and isinstance(value, dict):
            value = from_dict(kind, value)
        elif isinstance(value, list) and (kind is tuple or typing.get_origin(kind) is tuple):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` so that a reader sees the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def save_json(path: str | os.PathLike, data: Any) -> None:
    """Atomically write `data` (a dict or a dataclass) as indented JSON."""
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = to_dict(data)
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n")


def load_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from None
