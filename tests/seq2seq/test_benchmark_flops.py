"""The JAX benchmark's analytic FLOP count against the model's own kernels."""

import numpy as np
import pytest
from keras import ops

from seq2seq.config import TransformerConfig
from seq2seq.transformer import TransformerTranslator
from tests.helpers.benchmarks import load_script


def _script():
    return load_script("benchmark_transformer_jax")


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


HLO = """HloModule jit_train_step, is_scheduled=true

%fused_computation.11 (param_0: bf16[4,8]) -> pred[4,8] {
  %param_0 = bf16[4,8]{1,0} parameter(0)
  %compare.1 = pred[4,8]{1,0} compare(%param_0, %param_0), direction=LT, metadata={op_name="jit(train_step)/jvp(transformer_translator)/encoder_0/dropout/lt"}
  ROOT %and.2 = pred[4,8]{1,0} and(%compare.1, %compare.1), metadata={op_name="jit(train_step)/jvp(transformer_translator)/encoder_0/dropout/and"}
}

ENTRY %main.9 (p: bf16[4,8]) -> f32[] {
  %p = bf16[4,8]{1,0} parameter(0)
  %loop_compare_fusion.11 = pred[4,8]{1,0} fusion(%p), kind=kLoop, calls=%fused_computation.11
  %input_reduce_fusion = f32[4]{0} fusion(%p), kind=kInput, calls=%fused_computation.2, metadata={op_name="jit(train_step)/transpose(jvp(transformer_translator))/decoder_0/ffn_norm/reduce_sum"}
  %multiply_add_fusion.37 = f32[2]{0} fusion(%p), kind=kLoop, calls=%fused_computation.3, metadata={op_name="jit(train_step)/adam/add"}
  %reduce_max.4 = f32[4]{0} reduce(%p), metadata={op_name="jit(train_step)/reduce_max"}
  %copy.5 = f32[4]{0} copy(%reduce_max.4)
  ROOT %tuple = (f32[]) tuple(%copy.5)
}
"""


def test_profile_kernels_are_attributed_to_the_part_of_the_model_they_compute():
    """`hlo_op_names` reads each instruction's op_name (a fusion without its own takes its
    computation's), keyed as a GPU names its kernel (`.` as `_`); `attribute_kernels` sums
    the profile's kernel times by part, library kernels by their names."""
    bench = _script()
    names = bench.hlo_op_names(HLO)
    assert names["loop_compare_fusion_11"].endswith("encoder_0/dropout/lt")  # most common: tie
    assert names["input_reduce_fusion"].endswith("decoder_0/ffn_norm/reduce_sum")
    assert "copy_5" not in names
    by_kernel = [["loop_compare_fusion_11", 1.0], ["input_reduce_fusion", 2.0],
                 ["multiply_add_fusion_37", 0.5], ["reduce_max.4", 0.25], ["copy.5", 0.125],
                 ["nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT", 4.0],
                 ["cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16", 3.0]]
    attributed = bench.attribute_kernels(by_kernel, names)
    assert attributed["ms_per_step"] == {
        "matrix products (cuBLAS)": 4.0, "attention (cuDNN)": 3.0,
        "layer norm, backward": 2.0, "dropout": 1.0, "optimizer": 0.5,
        "other (loss, casts, copies)": 0.25, "unattributed (copies: no op_name)": 0.125}
    assert [k[0] for k in attributed["kernels"]] == [k[0] for k in by_kernel]
