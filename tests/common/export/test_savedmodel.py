"""`common.export.savedmodel`: atomic saving, the kind marker, isolated runs, saved_model_cli."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from common.export import savedmodel
from tests.helpers.isolated import (
    run_signature_isolated,
    run_signatures_isolated,
    saved_model_cli,
)


class Shout(tf.Module):
    """Upper-cases a batch of strings, repeated `times` (a per-request scalar) times."""

    def __init__(self):
        super().__init__()
        self.bias = tf.Variable(1, dtype=tf.int32)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text"),
                                  tf.TensorSpec([], tf.int32, name="times")])
    def serve(self, text, times):
        upper = tf.strings.upper(text)
        return {"shouted": tf.strings.reduce_join(
                    tf.repeat(upper[:, None], times, axis=1), axis=1, separator=" "),
                "length": tf.strings.length(upper) + self.bias}


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    module = Shout()
    out = tmp_path_factory.mktemp("sm") / "shout"
    savedmodel.save(module, out, {"serving_default": module.serve.get_concrete_function()},
                    kind="test.shout", info={"note": "hi"}, input_defaults={"times": 2})
    return out


def test_save_writes_the_marker_and_the_defaults(export_dir):
    assert savedmodel.is_saved_model(export_dir)
    info = json.loads((export_dir / "assets.extra" / "export_info.json").read_text())
    assert info == {"kind": "test.shout", "format": savedmodel.FORMAT_VERSION, "note": "hi"}
    defaults = json.loads((export_dir / "assets.extra" / "serving_input_defaults.json").read_text())
    assert defaults == {"times": 2}
    # no staging directory left next to it
    assert [p.name for p in export_dir.parent.iterdir()] == ["shout"]


def test_save_refuses_an_existing_directory_unless_told(export_dir):
    module = Shout()
    sig = {"serving_default": module.serve.get_concrete_function()}
    with pytest.raises(UserError, match="already exists"):
        savedmodel.save(module, export_dir, sig, kind="test.shout")
    other = export_dir.parent / "again"
    other.mkdir()
    savedmodel.save(module, other, sig, kind="test.other", overwrite=True)
    assert savedmodel.read_info(other)["kind"] == "test.other"


def test_require_kind_names_what_was_found_and_expected(export_dir, tmp_path):
    assert savedmodel.require_kind(export_dir, "test.shout", "a shouter")["note"] == "hi"
    with pytest.raises(UserError) as info:
        savedmodel.require_kind(export_dir, "seq2seq.translator", "an exported translator")
    message = str(info.value)
    assert "'test.shout'" in message and "an exported translator" in message
    assert "\n" not in message
    with pytest.raises(UserError, match="not a SavedModel directory"):
        savedmodel.require_kind(tmp_path, "test.shout", "a shouter")
    assert savedmodel.read_info(tmp_path) == {}


def test_isolated_run_gives_the_outputs_and_imports_nothing_else(export_dir):
    outputs, imported = run_signature_isolated(
        export_dir, {"text": ["abc", "héllo"], "times": 2})
    assert imported == []
    assert outputs["shouted"].tolist() == [b"ABC ABC", "HéLLO HéLLO".encode()]
    np.testing.assert_array_equal(outputs["length"], [4, 7])  # bytes, + the variable


def test_isolated_calls_give_each_its_own_outputs_in_order(export_dir):
    # One process for several calls: each call's outputs, not the last call's for all.
    outputs, imported = run_signatures_isolated(
        export_dir, [("serving_default", {"text": ["ab"], "times": 3}),
                     ("serving_default", {"text": ["x", "yz"], "times": 1})])
    assert imported == []
    assert [o["shouted"].tolist() for o in outputs] == [[b"AB AB AB"], [b"X", b"YZ"]]
    assert [o["length"].tolist() for o in outputs] == [[3], [2, 3]]


def test_isolated_run_refuses_forbidden_modules(export_dir):
    # The check can fail: with TensorFlow itself forbidden the child cannot even start.
    with pytest.raises(RuntimeError, match="importing tensorflow is not allowed"):
        run_signature_isolated(export_dir, {"text": ["a"], "times": 1},
                                          forbidden=("tensorflow",))


def test_isolated_run_failure_is_reported(export_dir):
    with pytest.raises(RuntimeError, match="isolated run failed"):
        run_signature_isolated(export_dir, {"text": ["a"], "times": 1},
                                          signature="nope")


def test_saved_model_cli_shows_string_inputs(export_dir):
    shown = saved_model_cli("show", "--dir", str(export_dir), "--all")
    assert "signature_def['serving_default']" in shown
    assert "dtype: DT_STRING" in shown and "name: serving_default_text:0" in shown


class KerasInside(tf.Module):
    """A Keras 3 model held by a tf.Module: its variables must be restorable by TF1 loaders."""

    def __init__(self):
        import keras

        super().__init__()
        self.net = keras.Sequential([keras.layers.Dense(3), keras.layers.Dense(2)])
        self.net(np.zeros((1, 4), np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"y": self.net(x)}


def test_keras_variables_restore_in_saved_model_cli_run(tmp_path):
    # Without tracking the wrapped tf.Variables, TensorFlow Serving and `saved_model_cli run`
    # fail with "Could not find variable sequential/dense_1/bias".
    module = KerasInside()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    expected = module.net(x).numpy()
    savedmodel.save(module, tmp_path / "k", {"serving_default": module.serve.get_concrete_function()},
                    kind="test.keras")
    np.save(tmp_path / "x.npy", x)
    printed = saved_model_cli(
        "run", "--dir", str(tmp_path / "k"), "--tag_set", "serve", "--signature_def",
        "serving_default", "--inputs", f"x={tmp_path / 'x.npy'}", "--outdir", str(tmp_path / "o"))
    assert "y.npy" in printed or (tmp_path / "o" / "y.npy").exists()
    np.testing.assert_allclose(np.load(tmp_path / "o" / "y.npy"), expected, rtol=1e-5, atol=1e-6)


def test_model_versions_reads_tensorflow_serving_base_paths(export_dir, tmp_path):
    assert savedmodel.model_versions(export_dir) == {1: export_dir}  # a plain export
    base = tmp_path / "base"
    base.mkdir()
    for version in ("10", "2"):
        (base / version).symlink_to(export_dir, target_is_directory=True)
    (base / "notes").mkdir()  # not a number: not a version (TensorFlow Serving skips it too)
    (base / "3.txt").write_text("x")
    versions = savedmodel.model_versions(base)
    assert versions == {2: base / "2", 10: base / "10"} and list(versions) == [2, 10]
    (base / "11").mkdir()
    with pytest.raises(UserError, match=r"11: a version directory without saved_model.pb"):
        savedmodel.model_versions(base)
    (base / "11").rmdir()
    (base / "010").symlink_to(export_dir, target_is_directory=True)
    with pytest.raises(UserError, match="are both version 10"):
        savedmodel.model_versions(base)
    with pytest.raises(UserError, match="not a SavedModel directory .* nor a model base path"):
        savedmodel.model_versions(base / "notes")
    with pytest.raises(UserError, match="not a SavedModel directory"):
        savedmodel.model_versions(tmp_path / "missing")


def test_overwrite_replaces_only_an_earlier_export_or_an_empty_directory(export_dir, tmp_path):
    module = Shout()
    sig = {"serving_default": module.serve.get_concrete_function()}
    run = tmp_path / "run"  # a training run: --overwrite must not delete its files
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me")
    for target, message in ((run, "holds files but no export"), (tmp_path, "no export"),
                            (a_file, "not a directory"), (a_file / "out", "is a file")):
        with pytest.raises(UserError, match=message) as info:
            savedmodel.save(module, target, sig, kind="test.shout", overwrite=True)
        assert "\n" not in str(info.value)
    assert sorted(p.name for p in run.rglob("*")) == ["checkpoints", "config.json"]
    assert a_file.read_text() == "keep me"
    # An earlier export is replaced; so is an empty directory.
    again = tmp_path / "again"
    shutil.copytree(export_dir, again)
    savedmodel.save(module, again, sig, kind="test.other", overwrite=True)
    assert savedmodel.read_info(again)["kind"] == "test.other"
    (tmp_path / "empty").mkdir()
    savedmodel.save(module, tmp_path / "empty", sig, kind="test.other", overwrite=True)
    assert savedmodel.is_saved_model(tmp_path / "empty")


def test_an_unwritable_place_is_one_line():
    module = Shout()
    sig = {"serving_default": module.serve.get_concrete_function()}
    target = Path("/proc/no-such-folder/out")  # no one may create folders in /proc, root either
    if not Path("/proc").is_dir():
        pytest.skip("no /proc on this system")
    with pytest.raises(UserError, match="cannot be written") as info:
        savedmodel.save(module, target, sig, kind="test.shout")
    assert "\n" not in str(info.value) and str(target) in str(info.value)


def test_the_current_directory_or_one_holding_it_is_refused(export_dir, tmp_path, monkeypatch):
    module = Shout()
    sig = {"serving_default": module.serve.get_concrete_function()}
    inside = tmp_path / "earlier"
    shutil.copytree(export_dir, inside)
    monkeypatch.chdir(inside)  # `export RUN . --overwrite` from inside an earlier export
    for target in (".", ".."):
        with pytest.raises(UserError, match="holds the current directory"):
            savedmodel.save(module, target, sig, kind="test.shout", overwrite=True)
    assert savedmodel.is_saved_model(inside)  # untouched


def _shout_signatures():
    module = Shout()
    return module, {"serving_default": module.serve.get_concrete_function()}


def test_an_overwrite_that_fails_keeps_the_earlier_export(export_dir, tmp_path, monkeypatch):
    """The earlier export was deleted before the new one moved in: a move (or deletion) that
    failed half-way lost both, and --overwrite then refused the half-deleted folder."""
    module, sig = _shout_signatures()
    target = tmp_path / "earlier"
    shutil.copytree(export_dir, target)
    before = sorted(str(p.relative_to(target)) for p in target.rglob("*"))
    real = savedmodel.os.replace

    def failing(source, destination):
        name = Path(source).name  # the new export moving in (not the old one moving back)
        if name.startswith(".earlier.") and ".old." not in name and Path(destination) == target:
            raise OSError(28, "No space left on device")
        return real(source, destination)

    monkeypatch.setattr(savedmodel.os, "replace", failing)
    with pytest.raises(UserError, match="cannot be written .No space left on device"):
        savedmodel.save(module, target, sig, kind="test.other", overwrite=True)
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == before
    assert savedmodel.read_info(target)["kind"] == "test.shout"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["earlier"]  # nothing left aside


def test_a_full_disk_inside_tensorflow_is_one_line(tmp_path, monkeypatch):
    """TensorFlow's own file errors (not OSError) were a traceback."""
    module, sig = _shout_signatures()

    def no_space(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(
            None, None, f"{tmp_path}/.out.x/saved_model.pb.tmp; No space left on device")

    monkeypatch.setattr(tf.saved_model, "save", no_space)
    with pytest.raises(UserError, match=r"out: cannot be written .*No space left on device"):
        savedmodel.save(module, tmp_path / "out", sig, kind="test.shout")
    assert list(tmp_path.iterdir()) == []


def test_an_export_is_readable_by_other_users_as_the_umask_says(tmp_path):
    """mkdtemp's 0700 stayed the export's mode: a server running as another user could not
    read it."""
    import os

    module, sig = _shout_signatures()
    old = os.umask(0o022)
    try:
        out = savedmodel.save(module, tmp_path / "out", sig, kind="test.shout")
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o755
