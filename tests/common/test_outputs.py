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


# -- attention in --json output: four decimals ----------------------------------------------

def _weights(shape, seed=0):
    """Softmax rows in float32, as a model returns them."""
    import numpy as np

    logits = np.random.default_rng(seed).normal(size=shape)
    return (np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)).astype(np.float32)


def _decimals(text: str) -> int:
    """The most digits after the point of any number in a JSON text."""
    import re

    return max(len(m) for m in re.findall(r"\.(\d+)", text))


@pytest.mark.parametrize("family", ["captioner", "seq2seq"])
def test_json_attention_is_written_to_four_decimals(family):
    # One 7-word caption over 14x14 regions took 11.6 KB: float32 values written with
    # float64's 17 digits (`0.003060000017285347`).
    import json

    import numpy as np

    weights = _weights((8, 196))
    if family == "captioner":
        from captioner.inference import Caption

        result = Caption("a b c d e f g", list("abcdefg"), -1.5, weights, True).to_json((14, 14))
    else:
        from seq2seq.inference import Translation

        result = Translation(source="x", text="a b", tokens=["a", "b"], source_tokens=["x"],
                             score=-1.5, finished=True, attention=weights)
        result = result.as_json()
    text = json.dumps(result["attention"])
    written = np.asarray(json.loads(text))
    assert np.abs(written - weights.astype(np.float64)).max() <= 0.5e-4 + 1e-12
    assert _decimals(text) <= 4
    assert len(text) < 8 * 196 * 8  # "0.0051, " at most, mostly shorter
