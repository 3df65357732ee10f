"""`check_vocabulary_settings`: a data setting the user gave that the run's vocabulary ignores
is refused in one line; a preset's own settings, and values the run would have anyway, are
not."""

import pytest

from common.errors import UserError
from seq2seq.config import DataConfig, check_vocabulary_settings
from seq2seq.presets import get_preset


def _spa_eng_cpu_data():
    return get_preset("spa-eng-cpu").for_arch("transformer")["data"]


@pytest.mark.parametrize("given, flag", [
    ({"vocab": "sentencepiece", "max_vocab": 5000}, "--max-vocab 5000"),
    ({"vocab": "sentencepiece", "min_count": 2}, "--min-count 2"),
    ({"vocab_size": 400}, "--vocab-size 400"),
    ({"vocab": "word", "sentencepiece_type": "bpe"}, "--sentencepiece-type bpe"),
])
def test_a_setting_the_vocabulary_ignores_is_refused(given, flag):
    with pytest.raises(UserError) as caught:
        check_vocabulary_settings(given)
    message = str(caught.value)
    assert message.startswith(f"{flag}: applies to ") and "\n" not in message


def test_a_presets_word_settings_do_not_stop_a_sentencepiece_run():
    preset = _spa_eng_cpu_data()
    assert preset["max_vocab"] is not None  # the preset sets it, the user did not
    check_vocabulary_settings({"vocab": "sentencepiece", "vocab_size": 4000}, preset)
    with pytest.raises(UserError, match="--max-vocab 9000"):
        check_vocabulary_settings({"vocab": "sentencepiece", "max_vocab": 9000}, preset)


def test_settings_of_the_vocabulary_chosen_and_default_values_pass():
    check_vocabulary_settings({"vocab": "word", "max_vocab": 100, "min_count": 2})
    check_vocabulary_settings({"vocab": "sentencepiece", "vocab_size": 100,
                               "sentencepiece_type": "bpe"})
    # A whole config.json as --config repeats every default, the other kind's too.
    defaults = vars(DataConfig())
    check_vocabulary_settings(dict(defaults))
    check_vocabulary_settings({**defaults, "vocab": "sentencepiece"})


@pytest.mark.parametrize("options, needle", [
    (["--vocab", "sentencepiece", "--max-vocab", "10"], "--max-vocab 10: applies to word"),
    (["--vocab-size", "10"], "--vocab-size 10: applies to sentencepiece"),
    (["--max-vocab", "2"], "max_vocab 2: a vocabulary holds the 4 special tokens"),
])
def test_the_command_line_refuses_them_before_anything_is_written(options, needle, tmp_path,
                                                                  capsys):
    """Through `seq2seq train`: the family's preset hook holds the options to the rule."""
    from seq2seq.cli import main

    out = tmp_path / "run"
    assert main(["train", "--dataset", "dates", "--arch", "transformer", "--out", str(out),
                 "--verbose", "0", *options]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err
    assert not out.exists()


def test_the_command_line_lets_a_presets_word_settings_pass(tmp_path):
    """spa-eng-cpu sets max_vocab; --vocab sentencepiece over it is not refused for that."""
    from seq2seq.family import FAMILY

    explicit = {"data": {"dataset": "dates", "vocab": "sentencepiece"},
                "model": {"arch": "transformer"}}
    layer = FAMILY.preset("spa-eng-cpu", explicit)
    assert layer["data"]["max_vocab"]  # the preset's own word setting is there, and passes
