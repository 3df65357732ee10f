"""A small trained Transformer translator shared by the export tests of several files."""

from pathlib import Path

import pytest

from seq2seq.cli import main


@pytest.fixture(scope="session")
def dates_transformer(tmp_path_factory) -> Path:
    """A `--preset tiny` dates Transformer (width 16) of a few hundred steps, so that beams end
    where the model is sure and translations differ between sentences (the CTranslate2 and
    int8 export tests)."""
    out = tmp_path_factory.mktemp("dates-transformer") / "dates"
    assert main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                 "--steps-per-epoch", "300", "--hidden-dim", "16", "--intermediate-dim", "32",
                 "--seed", "1", "--out", str(out), "--verbose", "0"]) == 0
    return out
