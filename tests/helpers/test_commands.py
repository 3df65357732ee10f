"""`run_commands`: each command as `python -m` runs it (status, output at the file
descriptors), in one process, with its watched folders fingerprinted before and after it."""

import sys

import pytest

from tests.helpers.commands import run_commands

# A stand-in for a family's package: `python -m tool WORD ...`.
TOOL = '''
import os, sys
from pathlib import Path

word, *rest = sys.argv[1:]
if word == "write":
    Path(rest[0]).write_text(rest[1])
elif word == "say":
    print("out", flush=True)
    os.write(2, b"native stderr\\n")
elif word == "exit":
    sys.exit(int(rest[0]))
elif word == "raise":
    raise ValueError("boom")
'''


@pytest.fixture
def tool(tmp_path):
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "__init__.py").write_text("")
    (tmp_path / "tool" / "__main__.py").write_text(TOOL)
    return tmp_path


def test_each_command_gets_its_status_output_and_watched_files(tool):
    folder = tool / "watched"
    folder.mkdir()
    (folder / "kept.txt").write_text("kept")
    results = run_commands("tool", [
        ["say"],
        {"argv": ["write", folder / "new.txt", "x"], "watch": [folder]},
        {"argv": ["exit", "2"], "watch": [folder]},
        ["raise"],
        ["exit", "0"],
    ], cwd=tool)
    said, wrote, refused, raised, fine = results
    assert (said.status, said.out, said.err) == (0, "out\n", "native stderr\n")
    assert wrote.status == 0 and not wrote.unchanged(folder)
    assert set(wrote.before[str(folder)]) == {"kept.txt"}
    assert set(wrote.after[str(folder)]) == {"kept.txt", "new.txt"}
    assert refused.status == 2 and refused.unchanged(folder) and refused.out == ""
    assert raised.status == 1 and "ValueError: boom" in raised.err
    assert fine.status == 0 and fine.err == ""


def test_a_process_that_cannot_start_is_an_error(tool):
    with pytest.raises(RuntimeError, match="the command process failed"):
        run_commands("tool", [["say"]], cwd=tool, env={"PATH": "", "PYTHONHOME": "/nowhere"})


def test_the_child_runs_this_interpreter(tool):
    (tool / "which").mkdir()
    (tool / "which" / "__init__.py").write_text("")
    (tool / "which" / "__main__.py").write_text("import sys\nprint(sys.executable)\n")
    (result,) = run_commands("which", [[]], cwd=tool)
    assert result.out.strip() == sys.executable
