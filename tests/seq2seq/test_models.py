"""Building models by name, presets and option overrides, checkpoint round trips."""

import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from common.training import restore_model
from common.training.checkpoints import model_entries
from seq2seq.config import ModelConfig
from seq2seq.models import ARCHS, build_model
from seq2seq.presets import PRESETS
from seq2seq.train import make_run_config

TOKENS = np.array([[4, 5, 6], [7, 0, 0]], np.int32)


def test_unknown_architecture_lists_the_choices():
    with pytest.raises(UserError, match="bahdanau, seq2seq-noattn, transformer"):
        build_model(ModelConfig(arch="rnn"), 10, 10)


def test_every_preset_has_both_architectures():
    assert {"tiny", "dates-demo", "spa-eng-cpu"} <= set(PRESETS.names())
    for name in PRESETS.names():
        for arch in ARCHS.names():
            config = make_run_config(arch, "dates", preset=name)
            assert config.model.arch == arch
            assert config.training["epochs"] >= 1


def test_explicit_options_override_the_preset():
    config = make_run_config("transformer", "dates", preset="dates-demo",
                             overrides={"layers": 3, "epochs": 9, "dropout": 0.3,
                                        "post_norm": True, "units": 7})
    assert config.model.transformer.num_layers == 3
    assert config.model.transformer.dropout == 0.3
    assert config.model.transformer.norm_first is False
    assert config.model.transformer.hidden_dim == 64  # from the preset
    assert config.model.bahdanau.units == 7
    assert config.training["epochs"] == 9
    assert config.preset == "dates-demo"


def test_bad_option_values_are_user_errors():
    with pytest.raises(UserError, match="score"):
        make_run_config("bahdanau", "dates", overrides={"score": "nope"})
    with pytest.raises(UserError, match="multiple of num_heads"):
        make_run_config("transformer", "dates", overrides={"hidden_dim": 10, "heads": 4})


@pytest.mark.parametrize("arch", ["bahdanau", "seq2seq-noattn", "transformer"])
def test_checkpoint_restores_every_weight(arch, tmp_path):
    config = make_run_config(arch, "dates", preset="tiny",
                             overrides={"cell": "lstm", "layers": 2}).model
    model = build_model(config, 10, 12)
    inputs = {"source": TOKENS, "target_in": TOKENS}
    expected = model(inputs)
    # Saved as the trainer saves (common.training.checkpoints.make_checkpoint).
    checkpoint = tf.train.Checkpoint(**model_entries(model))
    path = checkpoint.save(str(tmp_path / "ckpt"))
    clone = build_model(config, 10, 12)
    clone(inputs)
    assert not np.allclose(clone(inputs), expected)
    restore_model(clone, path)
    np.testing.assert_allclose(clone(inputs), expected, atol=1e-6)
