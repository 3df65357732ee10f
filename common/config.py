"""Frozen dataclass configs, saved as JSON beside every checkpoint, and the one config merge.

Each component (encoder, decoder, trainer, data) has a frozen dataclass config; a run
config composes them. `to_dict` / `from_dict` round-trip nested dataclasses, so a run
directory says exactly how it was made and can rebuild the model.

Every family's run config is made the same way (`merge_config`): the dataclass defaults, then
the preset, then `--config FILE` (JSON nested like `config.json`), then the options given on
the command line. An option declares the config field it sets once, where it is added to the
parser (`add_config_option(group, "--layers", path="model.transformer.num_layers")`), and
`config_overrides(args)` turns the parsed options into nested overrides: no table per family.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import secrets
import stat
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from common.errors import UserError

C = TypeVar("C")


def to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a (nested) dataclass config."""
    return dataclasses.asdict(config)


def from_dict(cls: type[C], data: dict[str, Any], where: str = "") -> C:
    """Rebuild a (nested) dataclass `cls` from `to_dict` output.

    Unknown keys are an error naming them, so a typo in a hand-edited config is caught; so is
    a value not of its field's annotated type (`"0.1"` for a float, `"no"` for a bool, a NaN,
    a list of the wrong length), named by its dotted path from `where`.
    """
    if not isinstance(data, dict):
        at = f" at {where.rstrip('.')}" if where else ""
        raise UserError(f"expected a JSON object for {cls.__name__}{at}, got "
                        f"{type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UserError(
            f"unknown {cls.__name__} field(s): {', '.join(where + name for name in unknown)}; "
            f"expected some of: {', '.join(fields)}"
        )
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in data.items():
        kind = hints.get(name)
        if dataclasses.is_dataclass(kind):
            value = from_dict(kind, value, f"{where}{name}.")
        elif kind is not None:
            value = typed(value, kind, where + name)
        kwargs[name] = value
    return cls(**kwargs)


_MISMATCH = object()


def typed(value: Any, kind: Any, name: str) -> Any:
    """`value` as a field of annotated type `kind` holds it (a JSON list as a tuple, a whole
    float as an int), else a one-line `UserError` naming the field `name` and the type."""
    result = _as(value, kind)
    if result is _MISMATCH:
        raise UserError(f"{name}: expected {_type_name(kind)}, got {value!r:.60}")
    return result


def _as(value: Any, kind: Any) -> Any:
    """`typed`'s conversion, or `_MISMATCH`."""
    import math
    import types

    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for option in args:
            result = _as(value, option)
            if result is not _MISMATCH:
                return result
        return _MISMATCH
    if kind is type(None):
        return None if value is None else _MISMATCH
    if kind is bool:
        return value if isinstance(value, bool) else _MISMATCH
    if kind is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value if isinstance(value, int) and not isinstance(value, bool) else _MISMATCH
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok and math.isfinite(value) else _MISMATCH
    if kind is str:
        return value if isinstance(value, str) else _MISMATCH
    if kind is tuple or origin is tuple:
        if not isinstance(value, (list, tuple)):
            return _MISMATCH
        if not args:
            return tuple(value)
        kinds = [args[0]] * len(value) if args[-1] is Ellipsis else list(args)
        if len(kinds) != len(value):
            return _MISMATCH
        items = [_as(item, item_kind) for item, item_kind in zip(value, kinds)]
        return _MISMATCH if _MISMATCH in items else tuple(items)
    if kind is dict or origin is dict:
        return value if isinstance(value, dict) else _MISMATCH
    if kind is list or origin is list:
        return value if isinstance(value, list) else _MISMATCH
    return value  # a type this check does not know: the config's own checks see it


def _type_name(kind: Any) -> str:
    import types

    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(option) for option in args)
    if kind is type(None):
        return "null"
    if kind is tuple or origin is tuple:
        if args and args[-1] is Ellipsis:
            return f"a list of {_type_name(args[0])}s"
        if args:
            return f"a list of {len(args)} ({', '.join(_type_name(a) for a in args)})"
        return "a list"
    names = {bool: "true or false", int: "a whole number", float: "a finite number",
             str: "a string", dict: "a JSON object", list: "a list"}
    return names.get(kind, names.get(origin, getattr(kind, "__name__", str(kind))))


@contextlib.contextmanager
def replacing(path: str | os.PathLike, prefix: str | None = None) -> Iterator[Path]:
    """A new file beside `path` to write; once the block ends it is fsynced, given the
    permissions the replaced file should keep and moved over `path`, so a reader sees the old
    file or the new one, never half; if the block raises, it is removed and `path` untouched.

    The permissions: `path`'s own when it exists, else those a new file gets (0666 less the
    umask; `tempfile.mkstemp`'s 0600 would leave a config, a status or a log unreadable to other
    users), set only after the writing, so that a read-only file can still be replaced. The
    copy is named `prefix` (default "." + the name) and a random part, so readers that list the
    folder skip it.
    """
    path = Path(path)
    stem = f".{path.name}." if prefix is None else prefix
    for _ in range(100):
        tmp = path.parent / f"{stem}{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(f"no free temporary name beside {path}")
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)  # a new file's: the umask applied
        os.fchmod(fd, 0o600)  # writable while it is written, whatever the umask
        os.close(fd)
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            pass
        yield tmp
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` so that a reader sees the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def save_json(path: str | os.PathLike, data: Any) -> None:
    """Atomically write `data` (a dict or a dataclass) as indented JSON."""
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = to_dict(data)
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n")


def read_text(path: str | os.PathLike, what: str = "a text file",
              error: type[UserError] = UserError, encoding: str = "utf-8-sig") -> str:
    """The text of `path` (UTF-8; with the default `encoding` a byte order mark dropped), else
    a one-line `error` naming the file and `what` it should hold: missing, a folder,
    unreadable, not UTF-8."""
    path = Path(path)
    try:
        return path.read_text(encoding=encoding)
    except FileNotFoundError:
        raise error(f"{path}: no such file; expected {what}") from None
    except IsADirectoryError:
        raise error(f"{path}: a folder; expected {what}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); expected "
                    f"{what}") from None
    except OSError as exc:  # no permission, an I/O error
        raise error(f"{path}: cannot be read ({exc.strerror or exc}); expected {what}") from None


def load_json(path: str | os.PathLike, what: str = "a JSON file",
              error: type[UserError] = UserError) -> Any:
    """The JSON value in `path` (UTF-8, a byte order mark dropped), else a one-line `error`
    naming the file and `what` it should hold: missing, a folder, unreadable, not UTF-8, not
    JSON, nested too deep for Python's parser or with a number of thousands of digits."""
    path = Path(path)
    text = read_text(path, what, error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column "
                    f"{exc.colno}); expected {what}") from None
    except RecursionError:  # Python's parser recurses once per bracket
        raise error(f"{path}: JSON nested too deeply to read; expected {what}") from None
    except ValueError as exc:  # a number of thousands of digits
        raise error(f"{path}: not readable JSON ({str(exc).split(';')[0]}); expected "
                    f"{what}") from None


# -- the one config merge ----------------------------------------------------------------------

# A config path: "model.transformer.num_layers", several of them, or a function of the config
# merged so far that returns one (`--dropout` sets the chosen architecture's dropout).
ConfigPath = str | tuple[str, ...] | Callable[[dict[str, Any]], str]
OPTIONS_DEST = "_config_options"  # where the parsed namespace keeps the declarations


def deep_merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` applied: nested dicts merge key by key, anything else replaces."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def differing_paths(a: Any, b: Any, prefix: str = "") -> list[str]:
    """The dotted paths at which two nested JSON-like values differ ("config" for the whole)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return [path for key in sorted(set(a) | set(b), key=str)
                for path in differing_paths(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [] if a == b else [prefix[:-1] or "config"]


def nested(path: str, value: Any) -> dict[str, Any]:
    """`{"a": {"b": value}}` for the path "a.b"."""
    tree: Any = value
    for key in reversed(path.split(".")):
        tree = {key: tree}
    return tree


@dataclasses.dataclass(frozen=True)
class ConfigOption:
    """A command-line option that sets config fields: its `dest`, the `path`(s) it sets, and
    `convert`, applied to the parsed value first (`--image-size 64` -> `(64, 64)`)."""

    dest: str
    path: ConfigPath
    convert: Callable[[Any], Any] | None = None

    def overrides(self, value: Any, merged: dict[str, Any]) -> dict[str, Any]:
        if self.convert is not None:
            value = self.convert(value)
        paths = self.path(merged) if callable(self.path) else self.path
        result: dict[str, Any] = {}
        for path in (paths,) if isinstance(paths, str) else paths:
            result = deep_merge(result, nested(path, value))
        return result


def add_config_option(group: Any, *flags: str, path: ConfigPath,
                      convert: Callable[[Any], Any] | None = None, **kwargs: Any
                      ) -> argparse.Action:
    """`group.add_argument(*flags, **kwargs)` for an option that sets the config at `path`.

    The option's default is None (not given: the preset's or the default value stands).
    """
    kwargs.setdefault("default", None)
    action = group.add_argument(*flags, **kwargs)
    declared = group.get_default(OPTIONS_DEST) or ()
    group.set_defaults(**{OPTIONS_DEST: (*declared, ConfigOption(action.dest, path, convert))})
    return action


def config_overrides(args: argparse.Namespace | Mapping[str, Any],
                     options: tuple[ConfigOption, ...] | None = None,
                     base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The nested overrides of the options given (not None), in the order declared.

    Args:
        args: a parsed namespace (its declarations come with it), or a mapping of option
            names (`dest`) to values with `options` given.
        options: the declarations; by default those `add_config_option` left in `args`.
        base: the config merged so far, which a path function reads (with what the options
            before it set).
    """
    values = dict(vars(args)) if isinstance(args, argparse.Namespace) else dict(args)
    if options is None:
        options = values.get(OPTIONS_DEST) or ()
    known = {option.dest for option in options}
    unknown = sorted(set(values) - known - {OPTIONS_DEST}) if not isinstance(
        args, argparse.Namespace) else []
    if unknown:
        raise UserError(f"unknown option(s): {', '.join(unknown)}; expected some of: "
                        f"{', '.join(sorted(known))}")
    overrides: dict[str, Any] = {}
    for option in options:
        value = values.get(option.dest)
        if value is not None:
            merged = deep_merge(base or {}, overrides)
            overrides = deep_merge(overrides, option.overrides(value, merged))
    return overrides


def check_keys(data: Any, reference: Any, where: str, prefix: str = "") -> None:
    """Raise `UserError` naming the first key of `data` that `reference` (a config as a dict)
    does not have. A dict that is empty in `reference` (training settings, dataset options)
    takes any keys: what reads it checks them."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected a JSON object{f' at {prefix}' if prefix else ''}, "
                        f"got {type(data).__name__}")
    for key, value in data.items():
        name = f"{prefix}{key}"
        if key not in reference:
            raise UserError(f"{where}: unknown key {name!r}; expected one of: "
                            f"{', '.join(prefix + k for k in reference)}")
        if isinstance(reference[key], dict) and reference[key]:
            check_keys(value, reference[key], where, name + ".")


def load_config_file(path: str | os.PathLike, config_class: type) -> dict[str, Any]:
    """`--config FILE`: a JSON object nested like `config.json`, its keys checked."""
    data = load_json(path)
    defaults = to_dict(config_class())
    check_keys(data, defaults, str(path))
    try:
        from_dict(config_class, deep_merge(defaults, data))  # the types of its values
        if isinstance(data.get("training"), dict):
            from common.training.config import TrainingConfig

            from_dict(TrainingConfig, data["training"], "training.")
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    family = defaults.get("family")
    if family is not None and data.get("family", family) != family:
        raise UserError(f"{path}: a {data['family']!r} config; expected a {family!r} one")
    return data


def merge_config(config_class: type[C], *layers: Mapping[str, Any] | None) -> C:
    """`config_class` from its defaults with each layer of nested overrides applied in turn
    (the preset, `--config FILE`, the options; None layers are skipped)."""
    data = to_dict(config_class())
    for layer in layers:
        if layer:
            data = deep_merge(data, layer)
    return from_dict(config_class, data)
