"""The attention family: scores, soft, hard, local and multi-head attention, kernel pooling;
`Dropout` with a choice of random-bit generator on JAX, and `LayerNormalization` with a
closed-form gradient as a switch.

Importing this package registers every score in `SCORES`.
"""

from common.layers.additive_score import AdditiveScore
from common.layers.attention import Attention
from common.layers.cosine_score import CosineScore
from common.layers.dot_score import DotScore
from common.layers.dropout import DROPOUT_RNGS, Dropout, dropout_rng
from common.layers.general_score import GeneralScore
from common.layers.hard_attention import HardAttention
from common.layers.kernel_pooling import KERNELS, KernelPooling
from common.layers.layer_norm import LayerNormalization, layer_norm
from common.layers.local_attention import LocalAttention
from common.layers.location_score import LocationScore
from common.layers.masking import (
    causal_mask,
    expand_key_mask,
    masked_log_softmax,
    masked_softmax,
)
from common.layers.multi_head_attention import MultiHeadAttention
from common.layers.scaled_dot_score import ScaledDotScore
from common.layers.score import SCORES, Score, get_score

__all__ = [
    "DROPOUT_RNGS",
    "KERNELS",
    "SCORES",
    "AdditiveScore",
    "Attention",
    "CosineScore",
    "DotScore",
    "Dropout",
    "GeneralScore",
    "HardAttention",
    "KernelPooling",
    "LayerNormalization",
    "LocalAttention",
    "LocationScore",
    "MultiHeadAttention",
    "ScaledDotScore",
    "Score",
    "causal_mask",
    "dropout_rng",
    "expand_key_mask",
    "get_score",
    "layer_norm",
    "masked_log_softmax",
    "masked_softmax",
]
