"""`common.viz.paths`: one output file keeps its name, several are numbered by input position,
and a path that cannot be written is a one-line `UserError` before any work."""

import pytest

from common.errors import UserError
from common.viz import check_output_path, numbered_paths


def test_one_input_keeps_the_name_several_are_numbered(tmp_path):
    assert numbered_paths(tmp_path / "a.png", 1) == [tmp_path / "a.png"]
    assert numbered_paths(tmp_path / "a.png", 3) == [tmp_path / f"a-{i}.png" for i in (1, 2, 3)]


@pytest.mark.parametrize("name, message", [
    ("missing/out.png", "does not exist"), ("out.jpg", "ending in .png"), ("dir.png", "directory"),
])
def test_unwritable_paths_are_user_errors(tmp_path, name, message):
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(UserError, match=message):
        check_output_path(tmp_path / name, ".png", "--plot")


def test_a_writable_path_comes_back_as_a_path(tmp_path):
    assert check_output_path(str(tmp_path / "out.HTML"), ".html", "--html") == tmp_path / "out.HTML"
