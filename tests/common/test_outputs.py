"""`common.outputs`: output paths checked before any work, each refusal one line."""

import os

import pytest

from common.errors import UserError
from common.outputs import check_output_file, check_output_folder


def test_an_output_folder_may_exist_or_be_made(tmp_path):
    assert check_output_folder(tmp_path, "--out-dir") == tmp_path
    assert check_output_folder(tmp_path / "a" / "b", "--out-dir") == tmp_path / "a" / "b"
    assert not (tmp_path / "a").exists()  # nothing is created by the check


def test_an_output_folder_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match=r"^--out-dir .*f: is a file; expected a folder$"):
        check_output_folder(tmp_path / "f", "--out-dir")
    with pytest.raises(UserError, match=r"f is a file, not a folder$"):
        check_output_folder(tmp_path / "f" / "sub", "--out-dir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_output_folder_under_a_read_only_one_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(UserError, match="is not writable"):
        check_output_folder(locked / "new", "--out-dir")


def test_an_output_file_in_a_missing_folder_is_refused(tmp_path):
    with pytest.raises(UserError, match=r"the folder .*missing does not exist; create it"):
        check_output_file(tmp_path / "missing" / "x.json", "--json")
    with pytest.raises(UserError, match="is a folder; expected a file name"):
        check_output_file(tmp_path, "--json")
