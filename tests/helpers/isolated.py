"""Running an exported signature the way a stranger's machine would, for the export tests.

`run_signature_isolated` runs a signature in a fresh Python process that imports TensorFlow
and NumPy only (plus the op libraries it is told to, tensorflow_text for SentencePiece), and
reports which modules got imported: the test that an export needs nothing from this project
(nor Keras, keras-hub, nor tensorflow_text unless its ops are in the graph);
`run_signatures_isolated` makes several calls in one such process (`inspect_isolated` also
lists the variables the signatures read, with their dtypes). `saved_model_cli` runs
TensorFlow's own tool on an export; `run_signatures_and_saved_model_cli` runs several of its
commands after an isolated run's calls, in its process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Modules an isolated run must not import: the export has to stand on stock TensorFlow.
FORBIDDEN_MODULES = ("keras", "keras_hub", "tensorflow_text", "common", "seq2seq", "captioner")

# TensorFlow's `saved_model_cli` for each of `request["saved_model_cli"]` (an argv each), its
# `main` as the console script calls it, every flag back to its default before each (as in a
# new process): `printed`, a status and stdout per command, up to the first that fails.
_SAVED_MODEL_CLI_LOOP = r"""
printed = []
if request.get("saved_model_cli"):
    import contextlib, io, traceback

    from absl import flags
    from tensorflow.python.tools.saved_model_cli import main as saved_model_cli_main

    for argv in request["saved_model_cli"]:
        flags.FLAGS.unparse_flags()
        sys.argv = ["saved_model_cli", *argv]
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                saved_model_cli_main()
            status = 0
        except SystemExit as exc:  # absl's app.run ends with sys.exit
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:  # what the tool would end with: a traceback, status 1
            traceback.print_exc()
            status = 1
        printed.append({"status": status, "out": out.getvalue()})
        if status:
            break
"""

_ISOLATED_SCRIPT = r"""
import importlib.abc, json, sys

request = json.load(open(sys.argv[1], encoding="utf-8"))
blocked = set(request["forbidden"]) - set(request["allowed_with_tensorflow"])
blocked -= set(request["op_libraries"])


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"isolated run: importing {name} is not allowed")
        return None


sys.meta_path.insert(0, Block())
import importlib

import numpy as np
import tensorflow as tf

for name in request["op_libraries"]:  # the ops TensorFlow Serving links in (tensorflow_text)
    importlib.import_module(name)
# `import tensorflow` loads parts of Keras 3 by itself when it is installed; from now on
# nothing forbidden may be imported at all.
at_import = set(sys.modules)
blocked |= set(request["forbidden"]) - set(request["op_libraries"])
loaded = tf.saved_model.load(request["export_dir"])


def unwrap(value):  # {"b64": ...} -> bytes, as in TensorFlow Serving's JSON
    if isinstance(value, dict) and list(value) == ["b64"]:
        import base64
        return base64.b64decode(value["b64"])
    return [unwrap(v) for v in value] if isinstance(value, list) else value


for call in request["calls"]:
    fn = loaded.signatures[call["signature"]]
    specs = fn.structured_input_signature[1]
    inputs = {name: tf.constant(unwrap(value), dtype=specs[name].dtype)
              for name, value in call["inputs"].items()}
    outputs = {name: value.numpy() for name, value in fn(**inputs).items()}
    # Strings as fixed-width bytes ("S"), so that the parent reads them without pickle.
    outputs = {name: value.astype(bytes) if value.dtype == object else value
               for name, value in outputs.items()}
    np.savez(call["out"], **outputs)
prefixes = tuple(request["forbidden"])
imported = sorted(m for m in set(sys.modules) - at_import if m.split(".")[0] in prefixes)
variables = {id(v): [v.name, v.dtype.name, v.shape.as_list()]  # what the signatures read
             for fn in loaded.signatures.values() for v in fn.variables}
# Then TensorFlow's own tool, if asked: after the check above, with nothing forbidden importable.
""" + _SAVED_MODEL_CLI_LOOP + r"""
json.dump({"forbidden_imported": imported, "variables": list(variables.values()),
           "saved_model_cli": printed}, open(request["report"], "w"))
"""


def run_signature_isolated(
    export_dir: str | os.PathLike,
    inputs: Mapping[str, Any],
    signature: str = "serving_default",
    python: str | None = None,
    forbidden: Sequence[str] = FORBIDDEN_MODULES,
    allowed_with_tensorflow: Sequence[str] = ("keras",),
    timeout: float = 300.0,
    op_libraries: Sequence[str] = (),
) -> tuple[dict[str, Any], list[str]]:
    """Run one signature in a subprocess that imports only TensorFlow and NumPy.

    The subprocess starts with `-I` (isolated mode: no user site, no current directory on
    `sys.path`, no `PYTHON*` variables) from a temporary working directory, and an import
    hook refuses every `forbidden` module (an `ImportError`, so loading fails loudly if the
    SavedModel needs one). `import tensorflow` itself loads parts of Keras 3 when Keras is
    installed, so the modules in `allowed_with_tensorflow` are refused only after TensorFlow
    is imported, and `imported` lists the forbidden modules that appeared after that.

    Args:
        export_dir: the SavedModel directory.
        inputs: input name -> JSON-ready value (lists of `str` for `tf.string`, or of
            `{"b64": ...}` for binary strings such as encoded images).
        signature: the signature to call.
        python: the interpreter (default: this one).
        forbidden: top-level module names the child may not import.
        allowed_with_tensorflow: those of `forbidden` that `import tensorflow` may load.
        timeout: seconds before the child is killed.
        op_libraries: those of `forbidden` the child imports right after TensorFlow, for a
            SavedModel with ops outside core TensorFlow (`tensorflow_text` for a SentencePiece
            export: its `export_info.json` lists them under `op_libraries`); only these.

    Returns:
        `(outputs, imported)`: output name -> NumPy array (strings as `bytes` objects), and
        the forbidden modules the child had imported (empty when the export is standalone).

    Raises:
        RuntimeError: the child failed; the message holds the end of its stderr.
    """
    outputs, imported = run_signatures_isolated(
        export_dir, [(signature, inputs)], python=python, forbidden=forbidden,
        allowed_with_tensorflow=allowed_with_tensorflow, timeout=timeout,
        op_libraries=op_libraries)
    return outputs[0], imported


def run_signatures_isolated(
    export_dir: str | os.PathLike,
    calls: Sequence[tuple[str, Mapping[str, Any]]],
    python: str | None = None,
    forbidden: Sequence[str] = FORBIDDEN_MODULES,
    allowed_with_tensorflow: Sequence[str] = ("keras",),
    timeout: float = 300.0,
    op_libraries: Sequence[str] = (),
) -> tuple[list[dict[str, Any]], list[str]]:
    """`run_signature_isolated` for several calls, in order, in one such subprocess: one
    process start and one SavedModel load for all of them.

    Args:
        export_dir: the SavedModel directory.
        calls: `(signature, inputs)` pairs, as `run_signature_isolated` takes them.
        python, forbidden, allowed_with_tensorflow, timeout, op_libraries: as
            `run_signature_isolated` takes them (`timeout` is for the whole process).

    Returns:
        `(outputs, imported)`: one output name -> NumPy array mapping per call, in the order
        of `calls`, and the forbidden modules the child had imported by the end.

    Raises:
        RuntimeError: the child failed; the message holds the end of its stderr.
    """
    outputs, report = _run_isolated(export_dir, calls, python, forbidden,
                                    allowed_with_tensorflow, timeout, op_libraries)
    return outputs, report["forbidden_imported"]


def inspect_isolated(
    export_dir: str | os.PathLike,
    calls: Sequence[tuple[str, Mapping[str, Any]]] = (),
    **options: Any,
) -> tuple[list[dict[str, Any]], list[str], list[tuple[str, str, list[int]]]]:
    """`run_signatures_isolated`, plus the variables the loaded signatures read, as plain
    TensorFlow sees them: `(outputs, imported, variables)`, each variable as `(name, dtype,
    shape)` (names are the layers' own, not unique).

    Example:
    >>> _, _, variables = inspect_isolated("export/dates-int8")  # doctest: +SKIP
    >>> {dtype for _, dtype, _ in variables}  # doctest: +SKIP
    {'float32', 'int8'}
    """
    outputs, report = _run_isolated(export_dir, calls, **options)
    return outputs, report["forbidden_imported"], [tuple(v) for v in report["variables"]]


def run_signatures_and_saved_model_cli(
    export_dir: str | os.PathLike,
    calls: Sequence[tuple[str, Mapping[str, Any]]],
    commands: Sequence[Sequence[str]],
    **options: Any,
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """`run_signatures_isolated`, then TensorFlow's `saved_model_cli` for each of `commands`
    (an argv each; the tool's `main` as its console script calls it, every flag back to its
    default before each) in the same process, after its check of what got imported and with
    nothing forbidden importable still: one process for every check of an export.
    `(outputs, imported, printed)`, `printed` what each command printed on stdout.

    Example:
    >>> _, _, (shown,) = run_signatures_and_saved_model_cli(
    ...     "export/dates", [], [["show", "--dir", "export/dates", "--all"]])  # doctest: +SKIP

    Raises:
        RuntimeError: the child or a command failed; the message holds the end of its stderr.
    """
    outputs, report = _run_isolated(export_dir, calls, **options, saved_model_cli=commands)
    _check_printed(report["saved_model_cli"], commands, report["stderr"])
    return outputs, report["forbidden_imported"], [p["out"] for p in report["saved_model_cli"]]


def _run_isolated(
    export_dir: str | os.PathLike,
    calls: Sequence[tuple[str, Mapping[str, Any]]],
    python: str | None = None,
    forbidden: Sequence[str] = FORBIDDEN_MODULES,
    allowed_with_tensorflow: Sequence[str] = ("keras",),
    timeout: float = 300.0,
    op_libraries: Sequence[str] = (),
    saved_model_cli: Sequence[Sequence[str]] = (),
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The subprocess of `run_signatures_isolated`: `(outputs, report)` (the report with the
    child's `stderr`); `saved_model_cli`: the tool's commands to run after the calls."""
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="isolated-") as tmp:
        tmp_path = Path(tmp)
        request = {
            "export_dir": str(Path(export_dir).resolve()),
            "calls": [{"signature": signature, "inputs": dict(inputs),
                       "out": str(tmp_path / f"outputs-{i}.npz")}
                      for i, (signature, inputs) in enumerate(calls)],
            "report": str(tmp_path / "report.json"),
            "forbidden": list(forbidden),
            "allowed_with_tensorflow": list(allowed_with_tensorflow),
            "op_libraries": list(op_libraries),
            "saved_model_cli": [list(map(str, c)) for c in saved_model_cli],
        }
        (tmp_path / "request.json").write_text(json.dumps(request), encoding="utf-8")
        (tmp_path / "run.py").write_text(_ISOLATED_SCRIPT, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        proc = subprocess.run(
            [python or sys.executable, "-I", str(tmp_path / "run.py"),
             str(tmp_path / "request.json")],
            cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the isolated run failed ({proc.returncode}): "
                               f"{proc.stderr[-2000:]}")
        outputs = []
        for call in request["calls"]:
            with np.load(call["out"], allow_pickle=False) as data:
                outputs.append({name: data[name].astype(object) if data[name].dtype.kind == "S"
                                else data[name] for name in data.files})
        report = json.loads((tmp_path / "report.json").read_text())
    return outputs, {**report, "stderr": proc.stderr}


def saved_model_cli(*args: str, timeout: float = 300.0) -> str:
    """Run TensorFlow's `saved_model_cli` (next to this interpreter) and return its stdout.

    Example:
    >>> print(saved_model_cli("show", "--dir", "export/dates", "--all"))  # doctest: +SKIP
    """
    tool = Path(sys.executable).parent / "saved_model_cli"
    command = [str(tool)] if tool.is_file() else [sys.executable, "-m",
                                                  "tensorflow.python.tools.saved_model_cli"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"saved_model_cli {' '.join(args[:1])} failed: {proc.stderr[-2000:]}")
    return proc.stdout


def _check_printed(printed: list[dict], commands: Sequence[Sequence[str]], stderr: str) -> None:
    """A `RuntimeError` naming the first of `commands` that failed (or did not run)."""
    if len(printed) == len(commands) and not any(p["status"] for p in printed):
        return
    failed = commands[len(printed) - 1] if printed else commands[0]
    raise RuntimeError(f"saved_model_cli {' '.join(map(str, failed[:1]))} (command "
                       f"{max(len(printed), 1)} of {len(commands)}) failed: {stderr[-2000:]}")
