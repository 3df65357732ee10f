import dataclasses
import json
from pathlib import Path

import pytest

from common.config import from_dict, load_json, save_json, to_dict
from common.errors import UserError


@dataclasses.dataclass(frozen=True)
class Inner:
    units: int = 4
    sizes: tuple = (1, 2)


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str = "x"
    inner: Inner = dataclasses.field(default_factory=Inner)


def test_nested_dataclass_round_trips_through_json(tmp_path):
    config = Outer(name="run", inner=Inner(units=8, sizes=(3, 4)))
    save_json(tmp_path / "config.json", config)
    assert from_dict(Outer, load_json(tmp_path / "config.json")) == config
    assert json.loads((tmp_path / "config.json").read_text())["inner"]["units"] == 8


def test_unknown_field_is_named():
    data = to_dict(Outer())
    data["inner"]["unitz"] = 3
    with pytest.raises(UserError, match="unitz"):
        from_dict(Outer, data)


def test_corrupt_json_is_a_user_error(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_json(tmp_path / "bad.json")
    with pytest.raises(UserError, match="no such file"):
        load_json(tmp_path / "missing.json")


@pytest.mark.parametrize("content, needle", [
    (b"[" * 100_000, "nested too deeply"),            # RecursionError in Python's parser
    (b"[" + b"9" * 5000 + b"]", "not readable JSON"),  # int() of over 4300 digits
    ('{"a": "été"}'.encode("latin-1"), "not UTF-8"),
])
def test_json_python_cannot_read_is_a_user_error(tmp_path, content, needle):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(UserError, match=needle):
        load_json(path)


def test_failed_write_leaves_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    save_json(path, {"a": 1})

    class Unserializable:
        pass

    with pytest.raises(TypeError):
        save_json(path, {"a": Unserializable()})
    assert load_json(path) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_atomic_writes_keep_a_files_permissions_and_give_new_files_the_umasks(tmp_path):
    import os

    from common.config import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "new.json", "{}")
        assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600
        (tmp_path / "new.json").chmod(0o640)
        atomic_write_text(tmp_path / "new.json", "[]")
        assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
    assert [p.name for p in tmp_path.iterdir()] == ["new.json"]


def _as_an_ordinary_user(code: str, folder):
    """Run `code` in a Python that is not root (root ignores permission bits)."""
    import os
    import shutil
    import subprocess
    import sys

    command = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv to drop it")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root}
    probe = subprocess.run([*command[:-1], "import common.config"], capture_output=True,
                           cwd=folder, env=env)
    if probe.returncode != 0:
        pytest.skip("the ordinary user cannot read this checkout or its Python")
    return subprocess.run(command, capture_output=True, text=True, cwd=folder, env=env)


def test_a_read_only_file_is_replaced_and_stays_read_only(tmp_path):
    import os
    import tempfile

    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        folder.chmod(0o777)
        code = ("import os; from pathlib import Path; from common.config import atomic_write_text;"
                "p = Path('config.json'); p.write_text('old'); p.chmod(0o444);"
                "atomic_write_text(p, 'new');"
                "print(p.read_text(), oct(p.stat().st_mode & 0o777));"
                "os.umask(0o222); atomic_write_text(Path('fresh.json'), 'x');"
                "print(oct(Path('fresh.json').stat().st_mode & 0o777))")
        done = _as_an_ordinary_user(code, folder)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split() == ["new", "0o444", "0o444"]
        assert sorted(os.listdir(folder)) == ["config.json", "fresh.json"]
    finally:
        import shutil

        shutil.rmtree(folder)


@pytest.mark.parametrize("family, content, needle", [
    ("seq2seq", {"model": {"transformer": {"dropout": "0.1"}}},
     "model.transformer.dropout: expected a finite number, got '0.1'"),
    ("seq2seq", {"model": {"length_penalty": float("nan")}},
     "model.length_penalty: expected a finite number, got nan"),
    ("seq2seq", {"data": {"reverse": "no"}}, "data.reverse: expected true or false"),
    ("seq2seq", {"data": {"max_vocab": 2.5}}, "data.max_vocab: expected a whole number or null"),
    ("seq2seq", {"training": {"epochs": "3"}}, "training.epochs: expected a whole number"),
    ("seq2seq", {"family": "captioner"}, "a 'captioner' config; expected a 'seq2seq' one"),
    ("captioner", {"encoder": {"coordinates": "false"}}, "encoder.coordinates: expected true"),
    ("captioner", {"encoder": {"image_size": 64}},
     "encoder.image_size: expected a list of 2 (a whole number, a whole number), got 64"),
    ("captioner", {"encoder": {"filters": [32, "64"]}}, "encoder.filters: expected a list of"),
])
def test_a_config_file_value_of_the_wrong_type_is_named(family, content, needle, tmp_path):
    """A value is checked against its field's type when the file is read, not left to fail
    (or be misread: `bool("false")` is True) where the model is built."""
    import importlib

    from common.config import load_config_file

    config_class = importlib.import_module(f"{family}.family").FAMILY.config_class
    path = tmp_path / "c.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(UserError) as info:
        load_config_file(path, config_class)
    assert str(info.value).startswith(f"{path}: ") and needle in str(info.value)


def test_whole_floats_and_lists_are_read_as_their_fields_types():
    from captioner.config import EncoderConfig

    encoder = from_dict(EncoderConfig, {"image_size": [64, 64.0], "fine_tune": 2.0})
    assert encoder.image_size == (64, 64) and isinstance(encoder.image_size[1], int)
    assert encoder.fine_tune == 2 and isinstance(encoder.fine_tune, int)
