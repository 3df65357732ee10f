import dataclasses
import json

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
