"""The JAX benchmark's analytic FLOP count against the model's own kernels."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from keras import ops

from seq2seq.config import TransformerConfig
from seq2seq.transformer import TransformerTranslator

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "benchmark_transformer_jax.py"


def _script():
    spec = importlib.util.spec_from_file_location("benchmark_transformer_jax", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_weight_macs_match_the_kernels_each_token_meets():
    bench = _script()
    size = dict(num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=24, vocab=40)
    source_len, target_len = 7, 5
    sizes = TransformerConfig(num_layers=size["num_layers"], hidden_dim=size["hidden_dim"],
                              num_heads=size["num_heads"],
                              intermediate_dim=size["intermediate_dim"])
    model = TransformerTranslator(sizes, size["vocab"], size["vocab"])
    model({"source": ops.ones((1, source_len), "int32"),
           "target_in": ops.ones((1, target_len), "int32")})
    macs = 0
    for variable in model.trainable_variables:
        path = variable.path
        if path.endswith("reverse_embeddings"):
            macs += target_len * int(np.prod(variable.shape))
        elif path.endswith("kernel"):
            on_source = "/encoder_" in path or "cross_attention/key" in path \
                or "cross_attention/value" in path
            macs += (source_len if on_source else target_len) * int(np.prod(variable.shape))
    counted = bench.matmul_macs_per_example(size, source_len, target_len)
    assert counted["weights"] == macs
    d, n = size["hidden_dim"], size["num_layers"]
    pairs = source_len**2 + target_len**2 + source_len * target_len
    assert counted["attention"] == 2 * d * n * pairs
    assert bench.model_flops_per_step(size, 3, source_len, target_len) == \
        6 * 3 * (macs + 2 * d * n * pairs)


def test_peak_is_taken_from_the_device_name():
    bench = _script()
    assert bench.default_peak(["NVIDIA H200"]) == 989.0
    assert bench.default_peak(["NVIDIA H100 PCIe"]) == 756.0  # the project's table, not SXM's
    assert bench.default_peak(["cpu"]) is None


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989.0), ("NVIDIA H100 PCIe", 756.0), ("NVIDIA H100 NVL", 835.0),
    ("NVIDIA H200", 989.0), ("NVIDIA H200 NVL", 835.0), ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA L40S", 362.0), ("NVIDIA L40", 181.0), ("NVIDIA L4", 121.0), ("cpu", None),
])
def test_peak_of_each_gpu_name_is_its_own_not_a_prefix_match(name, peak):
    """Names that contain another's ("NVIDIA L40" holds "L4", "H100 PCIe" holds "H100") get
    their own dense bf16 peak (NVIDIA's data sheets, half the sparsity figures)."""
    from common.training.flops import peak_tflops

    assert peak_tflops(name) == peak
