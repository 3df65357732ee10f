"""The benchmarks' `keras-io` size is the keras-io example's model: its weights, its FLOPs.

The keras-io example ("English-to-Spanish translation with a sequence-to-sequence
Transformer") builds `MultiHeadAttention(num_heads=8, key_dim=256)` with `embed_dim = 256`:
heads of 256, not `256 / 8`. Its weight count is computed here from its definition, by hand,
and (when `../shared/peers` exists) from the transcribed example itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from keras import ops

from common.training.flops import transformer_training_flops
from seq2seq.config import TransformerConfig
from seq2seq.transformer import TransformerTranslator
from tests.helpers.benchmarks import benchmark_lib, load_script

REPO = Path(__file__).resolve().parents[2]
PEERS = REPO.parent / "shared" / "peers"

# The keras-io example's sizes (its module constants).
VOCAB, LENGTH, EMBED, LATENT, HEADS, KEY_DIM = 15000, 20, 256, 2048, 8, 256


def _script():
    return load_script("benchmark_training")


def _keras_mha(d: int, heads: int, key_dim: int) -> int:
    """Weights of `keras.layers.MultiHeadAttention(heads, key_dim)` on width `d`: query, key
    and value kernels `(d, heads, key_dim)` with biases, output kernel back to `d` with bias."""
    inner = heads * key_dim
    return 3 * (d * inner + inner) + inner * d + d


def keras_io_weights(key_dim: int = KEY_DIM) -> int:
    """The keras-io example's weight count, from its layer definitions."""
    d = EMBED
    positional_embedding = VOCAB * d + LENGTH * d
    feed_forward = d * LATENT + LATENT + LATENT * d + d
    norm = 2 * d
    encoder = _keras_mha(d, HEADS, key_dim) + feed_forward + 2 * norm
    decoder = 2 * _keras_mha(d, HEADS, key_dim) + feed_forward + 3 * norm
    output = d * VOCAB + VOCAB
    return 2 * positional_embedding + encoder + decoder + output


def build_keras_io_size():
    from seq2seq.models import build_model
    from seq2seq.train import make_run_config

    preset, overrides, vocab = _script().TRANSLATOR_SIZES["keras-io"]
    config = make_run_config("transformer", "dates", preset, overrides)
    model = build_model(config.model, vocab, vocab)
    model.build()
    return model


def test_the_hand_count_is_the_published_figure():
    assert keras_io_weights() == 19_960_216
    # heads of 32 (what the project's "keras-io size" used to be) give far fewer
    assert keras_io_weights(key_dim=32) == 14_439_064


def test_keras_io_size_has_the_keras_io_examples_weights():
    model = build_keras_io_size()
    # The same layers, except: the project's output projection has no bias (-VOCAB) and,
    # being pre-layer-norm, it ends encoder and decoder with a layer norm (+2 x 2D).
    assert model.count_params() == keras_io_weights() - VOCAB + 2 * 2 * EMBED
    assert model.count_params() == pytest.approx(keras_io_weights(), rel=1e-3)
    kernel = model.encoder_0.self_attention.weights[0]
    assert tuple(kernel.shape) == (EMBED, HEADS, KEY_DIM)


def test_the_transcribed_example_has_the_hand_count():
    peer = benchmark_lib("benchmark").load_peer("keras_io_nmt", PEERS)
    if peer is None:
        pytest.skip(f"no peer programs at {PEERS}")
    assert peer.Peer(num_pairs=200).transformer.count_params() == keras_io_weights()


def test_flops_count_every_kernel_with_wide_heads():
    """`transformer_training_flops` against the kernels of a model whose heads are wider
    than `D / H` (each weight x the tokens it meets, x 2 x 3, plus the attention terms)."""
    d, heads, head_dim, ff, vocab, s, t, batch = 8, 2, 6, 12, 30, 7, 5, 3
    sizes = TransformerConfig(num_layers=1, hidden_dim=d, num_heads=heads, intermediate_dim=ff,
                              head_dim=head_dim)
    model = TransformerTranslator(sizes, vocab, vocab)
    model({"source": ops.ones((1, s), "int32"), "target_in": ops.ones((1, t), "int32")})
    macs = 0
    for variable in model.trainable_variables:
        path = variable.path
        if path.endswith("reverse_embeddings"):
            macs += t * int(np.prod(variable.shape))
        elif path.endswith("kernel"):
            on_source = "/encoder_" in path or "cross_attention/key" in path \
                or "cross_attention/value" in path
            macs += (s if on_source else t) * int(np.prod(variable.shape))
    a = heads * head_dim
    attention = 2 * 2 * a * (s * s + t * t + t * s)  # QK^T and weights x V, 2 FLOPs each
    expected = 3 * batch * (2 * macs + attention)
    assert transformer_training_flops(1, d, ff, vocab, batch, s, t,
                                      attention_dim=a) == expected
    assert transformer_training_flops(1, d, ff, vocab, batch, s, t) < expected


def test_keras_io_flops_per_step_at_batch_64():
    """The issue's figures: 95.8 GFLOP per step with heads of 256, 51.9 with heads of 32."""
    flops = transformer_training_flops(1, EMBED, LATENT, VOCAB, 64, LENGTH, LENGTH,
                                       attention_dim=HEADS * KEY_DIM)
    assert round(flops / 1e9, 1) == 95.8
    assert round(transformer_training_flops(1, EMBED, LATENT, VOCAB, 64, LENGTH, LENGTH)
                 / 1e9, 1) == 51.9


def test_wide_heads_decode_with_the_cache_as_the_full_pass():
    model = TransformerTranslator(
        TransformerConfig(num_layers=2, hidden_dim=8, num_heads=2, intermediate_dim=16,
                          dropout=0.0, head_dim=6, max_length=8), 20, 25)
    rng = np.random.default_rng(0)
    source = ops.convert_to_tensor(rng.integers(3, 20, (2, 5)), "int32")
    target = ops.convert_to_tensor(rng.integers(3, 25, (2, 4)), "int32")
    full = ops.convert_to_numpy(model({"source": source, "target_in": target}))
    state = model.initial_state(source, max_length=4)
    keys, values = state["self_cache"][0]
    assert tuple(keys.shape) == tuple(values.shape) == (2, 4, 2, 6)
    step = model.make_step()
    for index in range(4):
        logits, state, _ = step(target[:, index], state, index)
        np.testing.assert_allclose(ops.convert_to_numpy(logits), full[:, index], atol=1e-5)
    clone = TransformerTranslator.from_config(model.get_config())
    assert clone.head_dim == 6


def test_a_learned_position_size_refuses_longer_sentences(capsys):
    status = _script().main(["--size", "keras-io", "--length", "32", "--steps", "1"])
    err = capsys.readouterr().err
    assert status == 2 and "at most 20 tokens" in err and len(err.strip().splitlines()) == 1
