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
