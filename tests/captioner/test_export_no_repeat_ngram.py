"""`no_repeat_ngram` in a captioner export's options signature: the conftest's export (made
once per session), against the run directory it came from."""

import json

import pytest

from captioner.cli import main
from captioner.export import ExportedCaptioner
from captioner.inference import CaptionerRun


def _repeats(words, n):
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(set(grams)) < len(grams)


@pytest.mark.slow
def test_the_options_signature_takes_no_repeat_ngram_and_decodes_as_the_run(
        trained_captioner, exported_captioner, shape_images, capsys):
    exported = ExportedCaptioner(exported_captioner)
    assert "no_repeat_ngram" in exported.signature.structured_input_signature[1]
    defaults = json.loads(
        (exported_captioner / "assets.extra" / "serving_input_defaults.json").read_text())
    assert defaults["no_repeat_ngram"] == 0
    run = CaptionerRun(trained_captioner)
    for beam_size in (1, 2):
        plain, _ = exported.caption_files(shape_images, beam_size=beam_size)
        assert any(_repeats(c.words, 1) for _, c in plain)  # "a ... a": a word twice
        for n in (0, 1, 2):
            got, failed = exported.caption_files(shape_images, beam_size=beam_size,
                                                 no_repeat_ngram=n)
            expected, _ = run.caption_files(shape_images, beam_size=beam_size,
                                            no_repeat_ngram=n)
            assert not failed
            assert [c.text for _, c in got] == [c.text for _, c in expected], (beam_size, n)
            if n == 0:
                assert [c.text for _, c in got] == [c.text for _, c in plain]
            else:
                assert not any(_repeats(c.words, n) for _, c in got)
    # The command line, on the export.
    assert main(["caption", str(exported_captioner), *map(str, shape_images), "--json",
                 "--no-repeat-ngram", "1"]) == 0
    assert not any(_repeats(a["words"], 1) for a in json.loads(capsys.readouterr().out))
