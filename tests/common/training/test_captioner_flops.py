"""The captioner's FLOP count follows the attention query's real size."""

import pytest

from captioner.config import DecoderConfig, EncoderConfig
from captioner.model import ShowAttendTell
from common.training.flops import captioner_training_flops

B, T = 4, 7


def _model(query):
    return ShowAttendTell(20, EncoderConfig("small-cnn", (16, 16), "none", filters=(4, 6)),
                          DecoderConfig(embedding_dim=8, units=16, attention_units=8,
                                        query=query))


def _query_kernel(model):
    (kernel,) = [w for w in model.decoder.attention.weights if "query_dense/kernel" in w.path]
    return tuple(kernel.shape)


@pytest.mark.parametrize("query", ["hidden", "hidden+word"])
def test_the_query_projection_is_counted_from_its_kernel(query):
    model, paper = _model(query), _model("hidden")
    rows, units = _query_kernel(model)
    paper_rows, _ = _query_kernel(paper)
    extra = captioner_training_flops(model, B, T, True) - captioner_training_flops(
        paper, B, T, True)
    # 3 x (forward) x 2 FLOPs per multiply-add, once per step and caption.
    assert extra == pytest.approx(3 * 2 * B * T * (rows - paper_rows) * units)
    assert (rows > paper_rows) == (query == "hidden+word")


def test_the_encoder_convolutions_are_counted_as_by_hand():
    """small-cnn on 16x16 images: 3x3 convs of 3->4 channels (16x16), 4->6 (8x8, after a
    pooling) and one context conv 6->6 (4x4); batch norms, activations and poolings add none."""
    from common.training.flops import conv_forward_flops

    model = ShowAttendTell(20, EncoderConfig("small-cnn", (16, 16), "none", filters=(4, 6),
                                             context_convs=1),
                           DecoderConfig(embedding_dim=8, units=16, attention_units=8))
    by_hand = 2 * (16 * 16 * 3 * 3 * 3 * 4 + 8 * 8 * 3 * 3 * 4 * 6 + 4 * 4 * 3 * 3 * 6 * 6)
    assert conv_forward_flops(model.encoder.backbone) == by_hand
    # Trained from scratch, the encoder counts forward and backward (x 3) per image.
    cached, computed = (captioner_training_flops(model, B, T, cached) for cached in (True, False))
    assert computed - cached == 3 * B * by_hand


def test_the_tutorial_captioner_is_counted_from_its_layers_as_by_hand():
    """The peer's decoder (2 layers, width 8, 2 heads of 8, 12-wide features on a 2x3 grid)
    against a hand count of its multiply-adds."""
    import numpy as np
    import tensorflow as tf

    from common.training.flops import tutorial_captioner_training_flops
    from tests.helpers.benchmarks import benchmark_lib

    peer = benchmark_lib("benchmark").load_peer("tf_captioning")
    if peer is None:
        pytest.skip("no peer programs folder")
    captions = ["a b c", "b c d e"]
    tokenizer = tf.keras.layers.TextVectorization(max_tokens=50, standardize=peer.standardize,
                                                  ragged=True)
    tokenizer.adapt(captions)
    vocab = tokenizer.vocabulary_size()
    output = peer.TokenOutput(tokenizer)
    output.bias = np.zeros(vocab, "float32")
    model = peer.Captioner(tokenizer, feature_extractor=None, output_layer=output, units=8,
                           num_layers=2, num_heads=2, max_length=10)
    steps, regions, features = 5, 6, 12
    model((np.zeros((1, 2, 3, features), "float32"), np.ones((1, steps), "int64")))
    d, h, k = 8, 2, 8
    self_attention = steps * 4 * d * h * k + steps * steps * h * 2 * k
    cross_attention = (steps * 2 * d * h * k + regions * 2 * features * h * k
                       + steps * regions * h * 2 * k)
    feed_forward = steps * (d * 2 * d + 2 * d * d)
    per_caption = 2 * (self_attention + cross_attention + feed_forward) + steps * d * vocab
    assert tutorial_captioner_training_flops(model, B, steps, regions) == pytest.approx(
        3 * 2 * B * per_caption)
