"""`precision="auto"` and `jit_compile=None` resolved for the devices at hand."""

import pytest

from common.training.config import TrainingConfig, resolve_auto


@pytest.mark.parametrize("gpus, precision, jit", [
    ([], "float32", False),
    ([(9, 0)], "mixed_bfloat16", True),
    ([(8, 0), (8, 6)], "mixed_bfloat16", True),
    ([(7, 0)], "mixed_float16", True),
    ([(8, 0), (7, 5)], "mixed_float16", True),  # the oldest GPU decides
    ([(6, 1)], "float32", True),
])
def test_auto_follows_the_devices(gpus, precision, jit):
    resolved = resolve_auto(TrainingConfig(), gpus)
    assert (resolved.precision, resolved.jit_compile) == (precision, jit)


def test_explicit_settings_are_kept():
    config = TrainingConfig(precision="float32", jit_compile=False)
    assert resolve_auto(config, [(9, 0)]) == config


def test_this_machine_without_gpus_trains_in_float32_without_xla():
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("a GPU is visible")
    resolved = resolve_auto(TrainingConfig())
    assert (resolved.precision, resolved.jit_compile) == ("float32", False)
