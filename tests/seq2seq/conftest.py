"""A small trained Transformer translator shared by the export tests of several files."""

from pathlib import Path

import pytest

from seq2seq.cli import main


@pytest.fixture(scope="session")
def dates_transformer(tmp_path_factory) -> Path:
    """A dates Transformer trained until it is sure (`dates-demo` at width 32, one epoch of
    600 steps: every one of the first 64 held-out dates exact), so that beams end where the
    model is sure, translations differ between sentences, and int8 arithmetic, which rounds
    differently on each instruction set, rarely meets a near tie (the CTranslate2 and int8
    export tests). About 25 s on 2 cores."""
    out = tmp_path_factory.mktemp("dates-transformer") / "dates"
    assert main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "dates-demo",
                 "--epochs", "1", "--steps-per-epoch", "600", "--hidden-dim", "32",
                 "--intermediate-dim", "64", "--seed", "1", "--out", str(out),
                 "--verbose", "0"]) == 0
    return out
