"""Writing and checking exported SavedModels, for both families.

An export directory is a plain SavedModel (`saved_model.pb`, `variables/`, `assets/`) plus two
JSON files under `assets.extra/`, which TensorFlow Serving copies along and ignores:

- `export_info.json`: `{"kind": "seq2seq.translator" | "captioner" | ..., "format": 2, ...}`,
  the marker that lets a command line refuse a SavedModel of the other family with one line,
  plus whatever the family wants to remember (vocabulary sizes, the longest input, ...).
- `serving_input_defaults.json`: values for the scalar (per-request) inputs of a signature,
  read by `common.serving` so a request may leave them out.

and, from a `DecodingModule`, TensorFlow Serving's `tf_serving_warmup_requests`
(`common.export.warmup`), which TensorFlow Serving and `common.serving` replay on loading.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from common.config import load_json, save_json
from common.errors import UserError

EXTRA_DIR = "assets.extra"
INFO_FILE = "export_info.json"
DEFAULTS_FILE = "serving_input_defaults.json"
#: 2: `serving_default` takes the inputs alone; the options are in a second signature, named
#: by `options_signature` in `export_info.json` (format 1 had them in `serving_default`).
FORMAT_VERSION = 2

def save(
    module: Any,
    export_dir: str | os.PathLike,
    signatures: Mapping[str, Any],
    kind: str,
    info: Mapping[str, Any] | None = None,
    input_defaults: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    extra_files: Mapping[str, bytes] | None = None,
    warmup_requests: Sequence[Any] = (),
) -> Path:
    """`tf.saved_model.save` plus the `assets.extra/` files, written atomically.

    The SavedModel is written to a temporary sibling directory and renamed into place, so an
    interrupted export never leaves a half-written `export_dir`.

    Args:
        module: the `tf.Module` to save (it must track every variable and lookup table).
        export_dir: the directory to create.
        signatures: signature name -> concrete function (or a `tf.function` with an
            input signature).
        kind: the family marker written to `export_info.json` (e.g. `"seq2seq.translator"`).
        info: more JSON-ready facts for `export_info.json`.
        input_defaults: defaults for scalar signature inputs (`serving_input_defaults.json`).
        overwrite: replace an existing `export_dir`; otherwise it is a `UserError`.
        extra_files: more `assets.extra/` files for clients (name -> contents).
        warmup_requests: `common.export.warmup.WarmupRequest`s, written as TensorFlow
            Serving's `assets.extra/tf_serving_warmup_requests` (none: no such file).

    Returns:
        The export directory.
    """
    import tensorflow as tf

    export_dir = Path(os.path.abspath(export_dir))  # "." has itself as parent; this has not
    check_target(export_dir, overwrite)
    try:
        export_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{export_dir.name}.", dir=export_dir.parent))
        # mkdtemp's 0700 would stay the export's: a server running as another user (TensorFlow
        # Serving in a container) could not read it. The mode `mkdir` gives, as the umask says.
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)
    except OSError as exc:
        raise _unwritable(export_dir, exc) from None
    try:
        root = _saved_root(module, signatures.values())
        tf.saved_model.save(root, str(staging), signatures=dict(signatures))
        extra = staging / EXTRA_DIR
        extra.mkdir(exist_ok=True)
        save_json(extra / INFO_FILE, {"kind": kind, "format": FORMAT_VERSION, **dict(info or {})})
        if input_defaults:
            save_json(extra / DEFAULTS_FILE, dict(input_defaults))
        for name, contents in (extra_files or {}).items():
            (extra / name).write_bytes(contents)
        if warmup_requests:
            from common.export import warmup

            warmup.write(extra / warmup.WARMUP_FILE, warmup_requests)
        _replace(staging, export_dir)
    except (OSError, tf.errors.OpError) as exc:  # TensorFlow's file errors: a full disk
        raise _unwritable(export_dir, exc) from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return export_dir


def _replace(staging: Path, export_dir: Path) -> None:
    """Move `staging` to `export_dir`; an earlier export there is renamed aside first and
    removed only once the new one is in place, or put back if the move fails (deleting it
    first lost it when the deletion or the move failed half-way)."""
    if not export_dir.exists():
        os.replace(staging, export_dir)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{export_dir.name}.old.", dir=export_dir.parent))
    aside.rmdir()  # a free name beside it, for the rename
    os.replace(export_dir, aside)
    try:
        os.replace(staging, export_dir)
    except BaseException:
        os.replace(aside, export_dir)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _unwritable(export_dir: Path, exc: Exception) -> UserError:
    reason = getattr(exc, "strerror", None) or getattr(exc, "message", None) or str(exc)
    reason = " ".join(str(reason).split())[:300]
    return UserError(f"{export_dir}: cannot be written ({reason})")


def check_target(export_dir: str | os.PathLike, overwrite: bool = False) -> None:
    """Refuses, in one line, an `export_dir` that `save` must not write or replace.

    A new path is fine. An existing one needs `overwrite`, and even then only an earlier
    export (a `saved_model.pb` with this package's `export_info.json`) or an empty directory is
    replaced: never a file, a run directory, or any other directory, whose files `--overwrite`
    would delete.

    Raises:
        UserError: naming the path and why.
    """
    export_dir = Path(os.path.abspath(export_dir))
    if Path.cwd() == export_dir or export_dir in Path.cwd().parents:
        raise UserError(f"{export_dir} holds the current directory; expected a directory "
                        "elsewhere for the export")
    for parent in export_dir.parents:
        if parent.exists() and not parent.is_dir():
            raise UserError(f"{export_dir}: {parent} is a file, not a directory")
    if not export_dir.exists() and not export_dir.is_symlink():
        return
    if not overwrite:
        raise UserError(f"{export_dir} already exists; expected a new directory (or --overwrite)")
    if not export_dir.is_dir() or export_dir.is_symlink():
        raise UserError(f"{export_dir} is not a directory; --overwrite replaces only an earlier "
                        "export")
    if any(export_dir.iterdir()) and not (
            is_saved_model(export_dir) and (export_dir / EXTRA_DIR / INFO_FILE).is_file()):
        raise UserError(f"{export_dir} holds files but no export (saved_model.pb and "
                        f"{EXTRA_DIR}/{INFO_FILE}); --overwrite replaces only an earlier export "
                        "or an empty directory")


def _saved_root(module: Any, functions: Any) -> Any:
    """What `save` writes for `module`: its children and `tf.function`s without its Keras
    layers and variables, and a `variables` list of every tf.Variable, each once.

    A Keras 3 variable wraps a tf.Variable, and each of the two is a checkpointed object that
    writes the same value: a module holding a Keras model and the wrapped variables stored every
    weight twice (`model/...` and `_export_variables/N`, bitwise equal). The wrapped
    variables are the ones to keep: the signatures read them, and with the wrappers alone
    TensorFlow 1 style loaders (TensorFlow Serving, `saved_model_cli run`) fail with "Could
    not find variable ..." (keras-team/keras#20095). So the root saved is, as in Keras's own
    `ExportArchive`, a plain trackable holding the tf.Variables (`loaded.variables`), the
    module's functions and its other resources (lookup tables), and no Keras object. The
    module itself is not changed.
    """
    import keras
    import tensorflow as tf

    def is_keras(obj: Any) -> bool:  # a Keras object, or a list or dict holding one
        if isinstance(obj, (keras.Layer, keras.Variable)):
            return True
        if isinstance(obj, Mapping):
            return any(is_keras(value) for value in obj.values())
        if isinstance(obj, (list, tuple)):
            return any(is_keras(value) for value in obj)
        return False

    def keras_variables(obj: Any) -> list:
        if isinstance(obj, keras.Layer):
            return list(obj.weights)  # (not seed generators' states, which Keras saves neither)
        if isinstance(obj, keras.Variable):
            return [obj]
        values = obj.values() if isinstance(obj, Mapping) else obj
        return [v for value in values for v in keras_variables(value)]

    root = tf.__internal__.tracking.AutoTrackable()
    dropped: list = []
    # Checkpoint dependencies (attributes holding trackables); no function is traced here.
    for name, child in tf.train.TrackableView(module).children(module).items():
        if is_keras(child):
            dropped.extend(keras_variables(child))
        else:
            setattr(root, name, child)
    for name in dir(module):  # the `tf.function`s, as `tf.saved_model.save` finds them
        if name.startswith("__"):
            continue
        try:
            value = getattr(module, name, None)
        except Exception:  # an attribute whose accessor fails is no function
            continue
        if isinstance(value, (tf.types.experimental.PolymorphicFunction,
                              tf.types.experimental.ConcreteFunction)):
            setattr(root, name, value)
    root.variables = _tf_variables([*dropped, *getattr(module, "variables", ())], functions)
    return root


def _tf_variables(candidates: Sequence[Any], functions: Any) -> list:
    """The tf.Variables among `candidates` and those `functions` capture, Keras ones
    unwrapped, each once, in that order."""
    import keras
    import tensorflow as tf

    candidates = list(candidates)
    for fn in functions:
        if hasattr(fn, "get_concrete_function"):  # a `tf.function`: what its trace captures
            fn = fn.get_concrete_function()
        candidates.extend(getattr(fn, "variables", ()))
    found: dict[int, Any] = {}
    for v in candidates:
        if isinstance(v, keras.Variable):
            v = v.value  # the TensorFlow backend's tf.Variable (a tensor when autocast)
        if isinstance(v, tf.Variable):
            found.setdefault(id(v), v)
    return list(found.values())


def load(export_dir: str | os.PathLike) -> Any:
    """`tf.saved_model.load`, after importing the `op_libraries` its `export_info.json` lists
    (`tensorflow_text` for SentencePiece: ops outside core TensorFlow, which TensorFlow
    Serving links in)."""
    import importlib

    import tensorflow as tf

    for name in read_info(export_dir).get("op_libraries", ()):
        try:
            importlib.import_module(name)
        except ImportError:
            raise UserError(f"{export_dir}: the SavedModel needs the {name} package's ops; "
                            f"install it (pip install {name.replace('_', '-')})") from None
    try:
        return tf.saved_model.load(str(export_dir))
    except (OSError, ValueError, IndexError, tf.errors.OpError) as exc:
        # A truncated saved_model.pb or variables/ file: protobuf's "Wire format was
        # corrupt", TensorSliceReader's "Unsuccessful", "Read less bytes than requested".
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise UserError(f"{export_dir}: corrupt or incomplete SavedModel ({reason}); "
                        "expected a complete export (export the run again)") from None


def is_saved_model(path: str | os.PathLike) -> bool:
    """Whether `path` is a directory holding a `saved_model.pb`."""
    return (Path(path) / "saved_model.pb").is_file()


def model_versions(path: str | os.PathLike) -> dict[int, Path]:
    """The SavedModels a server loads from `path`, by version, lowest first.

    `path` is either an export directory (served as version 1) or TensorFlow Serving's
    model base path: a directory whose numeric subdirectories `1/`, `2/`, ... each hold a
    SavedModel (other entries are ignored, as TensorFlow Serving ignores them).

    Raises:
        UserError: `path` is neither, or a version directory holds no SavedModel.
    """
    path = Path(path)
    if is_saved_model(path):
        return {1: path}
    versions: dict[int, Path] = {}
    children = sorted(path.iterdir()) if path.is_dir() else []
    for child in children:
        if not (child.is_dir() and re.fullmatch(r"[0-9]+", child.name)):
            continue
        if not is_saved_model(child):
            raise UserError(f"{child}: a version directory without saved_model.pb; expected "
                            "a SavedModel there (or no such directory)")
        version = int(child.name)
        if version in versions:
            raise UserError(f"{versions[version]} and {child} are both version {version}; "
                            "expected one directory per version")
        versions[version] = child
    if not versions:
        raise UserError(f"{path}: not a SavedModel directory (no saved_model.pb) nor a model "
                        "base path (no version subdirectories 1/, 2/, ... holding one)")
    return dict(sorted(versions.items()))


def read_info(export_dir: str | os.PathLike) -> dict[str, Any]:
    """`assets.extra/export_info.json` of an export ({} when the file is absent)."""
    path = Path(export_dir) / EXTRA_DIR / INFO_FILE
    if not path.is_file():
        return {}
    data = load_json(path)
    return data if isinstance(data, dict) else {}


def require_kind(export_dir: str | os.PathLike, kind: str, what: str) -> dict[str, Any]:
    """The export's info, after checking it is a SavedModel of `kind`.

    Args:
        export_dir: the directory given by the user.
        kind: the expected marker, e.g. `"seq2seq.translator"`.
        what: how to name the expected thing in the error, e.g. `"an exported translator"`.

    Raises:
        UserError: one line naming what was found and what was expected.
    """
    export_dir = Path(export_dir)
    if not is_saved_model(export_dir):
        raise UserError(f"{export_dir}: not a SavedModel directory (no saved_model.pb); "
                        f"expected {what}")
    found = read_info(export_dir).get("kind")
    if found != kind:
        shown = f"a {found!r} SavedModel" if found else "a SavedModel without an export marker"
        raise UserError(f"{export_dir} is {shown}; expected {what} ({kind!r})")
    return read_info(export_dir)


def save_decoding_module(module: Any, export_dir: str | os.PathLike, kind: str,
                         options_signature: str, overwrite: bool = False) -> Path:
    """`save` for a captioner's or translator's export module.

    The module has `serving_default` (the inputs alone, decoded with the export-time beam
    size and length: what a TensorFlow Serving client that sends only the image or the text
    gets), an `options_signature` method taking the inputs plus `beam_size`, `max_length`,
    `n_best` and `no_repeat_ngram`, the export-time `default_beam_size` and
    `max_decode_length`, and `info()`;
    they become the two signatures, the recorded input defaults (which `common.serving`
    fills into requests to the second signature) and the export info.
    """
    # The `tf.function`s themselves, not concrete functions traced here: `tf.saved_model.save`
    # traces a module's functions again inside its save context (another cache key), and a
    # signature traced outside it would be saved a second time beside them.
    signatures = {"serving_default": module.serving_default,
                  options_signature: getattr(module, options_signature)}
    defaults = {"beam_size": module.default_beam_size, "max_length": module.max_decode_length,
                "n_best": 1, "no_repeat_ngram": 0}
    info = {**module.info(), "options_signature": options_signature}
    return save(module, export_dir, signatures, kind, info=info, input_defaults=defaults,
                extra_files=module.extra_files(), warmup_requests=module.warmup_requests(),
                overwrite=overwrite)


def options_signature(info: Mapping[str, Any]) -> str:
    """The name of an export's signature with the decoding options (`serving_default` in
    exports of format 1, which had no other)."""
    return str(info.get("options_signature", "serving_default"))
