"""CTranslate2 model directories written by this package: the marker, writing, loading.

CTranslate2 (OpenNMT's inference engine, `pip install -e .[ctranslate2]`) runs a model from a
directory of its own (`model.bin`, `config.json`, the vocabularies). A family that exports to
it fills a `ctranslate2.specs` model spec from its Keras weights (`seq2seq.ctranslate2_export`)
and `save` writes it, atomically, with one more file beside CTranslate2's:

- `export_info.json`: `{"kind": ..., "format": "ctranslate2", "quantization": ..., ...}`, the
  marker that tells this package's commands what the directory holds (as a SavedModel's
  `assets.extra/export_info.json` does), plus what the family needs to use it (its limits,
  defaults, tokenization).

Importing this module imports neither TensorFlow nor CTranslate2; `engine()` imports the
latter with a one-line error naming the extra when it is missing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from common.config import load_json, save_json
from common.errors import UserError

INFO_FILE = "export_info.json"
FORMAT = "ctranslate2"
#: The weight types `--quantization` offers (CTranslate2 has more: float16 and bfloat16 are
#: GPU types, int8_float16 too).
QUANTIZATIONS = ("int8", "int16", "float32")
INSTALL = "pip install -e .[ctranslate2]"


def engine() -> Any:
    """The `ctranslate2` module; a one-line `UserError` naming the extra when it is not
    installed."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(f"the CTranslate2 format needs the ctranslate2 package; install it "
                        f"({INSTALL})") from None
    return ctranslate2


def is_ctranslate2(path: str | os.PathLike) -> bool:
    """Whether `path` is a directory holding a CTranslate2 model (`model.bin`)."""
    return (Path(path) / "model.bin").is_file()


def read_info(path: str | os.PathLike) -> dict[str, Any]:
    """The directory's `export_info.json` ({} when absent or not an object)."""
    file = Path(path) / INFO_FILE
    if not file.is_file():
        return {}
    data = load_json(file)
    return data if isinstance(data, dict) else {}


def require_kind(path: str | os.PathLike, kind: str, what: str) -> dict[str, Any]:
    """The export info of a CTranslate2 directory written for `kind`.

    Raises:
        UserError: one line: not a CTranslate2 directory, one this package did not write, or
            one of another kind.
    """
    path = Path(path)
    if not is_ctranslate2(path):
        raise UserError(f"{path}: not a CTranslate2 model directory (no model.bin); expected "
                        f"{what}")
    info = read_info(path)
    if info.get("format") != FORMAT:
        raise UserError(f"{path}: a CTranslate2 model without this package's {INFO_FILE}; "
                        f"expected {what}")
    if info.get("kind") != kind:
        raise UserError(f"{path} is a CTranslate2 {info.get('kind')!r} model; expected {what} "
                        f"({kind!r})")
    return info


def check_target(out_dir: str | os.PathLike, overwrite: bool = False) -> None:
    """`common.export.savedmodel.check_target`, which also lets `--overwrite` replace an
    earlier CTranslate2 export of this package (and never any other directory)."""
    from common.export import savedmodel

    path = Path(os.path.abspath(out_dir))
    if overwrite and path.is_dir() and not path.is_symlink() and read_info(path).get(
            "format") == FORMAT and Path.cwd() != path and path not in Path.cwd().parents:
        return
    savedmodel.check_target(path, overwrite)


def save(spec: Any, out_dir: str | os.PathLike, kind: str, quantization: str,
         info: Mapping[str, Any], files: Mapping[str, bytes] | None = None,
         overwrite: bool = False) -> Path:
    """Writes a filled `ctranslate2.specs` model spec as a CTranslate2 model directory.

    The spec goes through CTranslate2's own converter steps (`validate`, `optimize` with the
    `quantization`: shared weights aliased once, weights quantized; `save`), into a staging
    directory beside `out_dir` that is renamed into place, so an interrupted export leaves no
    half-written directory.

    Args:
        spec: the model spec (say a `ctranslate2.specs.TransformerSpec`), weights set and
            vocabularies registered.
        out_dir: the directory to create.
        kind: the family marker written to `export_info.json`.
        quantization: the weight type, one of `QUANTIZATIONS`.
        info: more JSON-ready facts for `export_info.json`.
        files: more files to write beside the model (name -> contents).
        overwrite: replace an earlier export at `out_dir`.

    Returns:
        The directory written.
    """
    from common.export.savedmodel import _replace, _unwritable

    if quantization not in QUANTIZATIONS:
        raise UserError(f"quantization {quantization!r}; expected one of: "
                        f"{', '.join(QUANTIZATIONS)}")
    ctranslate2 = engine()
    out = Path(os.path.abspath(out_dir))
    check_target(out, overwrite)

    class _Converter(ctranslate2.converters.Converter):
        def _load(self):
            return spec

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        umask = os.umask(0)  # the mode `mkdir` gives, not mkdtemp's 0700 (another user serves)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)
    except OSError as exc:
        raise _unwritable(out, exc) from None
    try:
        _Converter().convert(str(staging), quantization=quantization, force=True)
        save_json(staging / INFO_FILE, {"kind": kind, "format": FORMAT,
                                        "ctranslate2_version": ctranslate2.__version__,
                                        "quantization": quantization, **dict(info)})
        for name, contents in (files or {}).items():
            (staging / name).write_bytes(contents)
        _replace(staging, out)
    except OSError as exc:
        raise _unwritable(out, exc) from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out


def load_translator(path: str | os.PathLike, intra_threads: int = 0,
                    inter_threads: int = 0) -> Any:
    """`ctranslate2.Translator` of a CTranslate2 directory on the CPU, its weights in the type
    they were saved in; a one-line `UserError` for a directory CTranslate2 cannot read.

    Args:
        path: the directory.
        intra_threads: the OpenMP threads of one translation (CTranslate2's
            `intra_threads`; 0: its default).
        inter_threads: the translations run at once (CTranslate2's `inter_threads`, each
            with `intra_threads`; 0: its default, 1).
    """
    for name, value in (("intra_threads", intra_threads), ("inter_threads", inter_threads)):
        if value < 0:
            raise UserError(f"{name} {value}: expected a number of threads >= 0 (0: "
                            "CTranslate2's default)")
    ctranslate2 = engine()
    try:
        return ctranslate2.Translator(str(path), device="cpu", compute_type="default",
                                      intra_threads=intra_threads,
                                      inter_threads=inter_threads or 1)
    except (RuntimeError, ValueError, OSError) as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise UserError(f"{path}: CTranslate2 cannot load this model ({reason}); expected a "
                        "complete export (export the run again)") from None
