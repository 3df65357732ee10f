"""scripts/benchmarks/profile_translator.py: op kinds grouped as the table says; a tiny profile runs."""

from __future__ import annotations

import json

import pytest

from tests.helpers import benchmarks


def load_script():
    return benchmarks.load_script("profile_translator")


@pytest.mark.parametrize("name, op_type, group", [
    ("gradient_tape/transformer/encoder_0/ffn_inner/MatMul", "_MklMatMul", "matrix products"),
    ("transformer/decoder_0/self_attention/einsum/Einsum", "_MklBatchMatMulV2",
     "matrix products"),
    ("adam/Sqrt_3", "Sqrt", "optimizer update (Adam, clipping)"),
    ("adam/AssignAddVariableOp_4", "AssignAddVariableOp", "optimizer update (Adam, clipping)"),
    ("transformer/encoder_0/ffn_norm/moments/mean", "Mean", "layer norm"),
    ("LogSoftmax", "LogSoftmax", "softmax and cross-entropy"),
    ("transformer/dropout/stateless_random_uniform", "StatelessRandomUniformV2",
     "dropout (random numbers)"),
    ("gradient_tape/transformer/source_embedding/UnsortedSegmentSum", "UnsortedSegmentSum",
     "embedding lookup and gradient"),
    ("transformer/decoder_0/Cast", "Cast", "casts (mixed precision)"),
    ("transformer/add", "AddV2", "element-wise and other"),
])
def test_op_groups(name, op_type, group):
    assert load_script().classify(name, op_type) == group


def test_a_tiny_profile_sums_its_groups(tmp_path, capsys):
    out = tmp_path / "profile.json"
    assert load_script().main(["--size", "tiny", "--steps", "1", "--warmup", "1",
                               "--attention", "fused,keras", "--out", str(out)]) == 0
    fused, result = json.loads(out.read_text())["results"]
    assert (fused["attention"], result["attention"]) == ("fused", "keras")
    groups = result["groups"]
    assert groups and "matrix products" in groups
    assert sum(g["share"] for g in groups.values()) == pytest.approx(1.0)
    assert sum(g["ms_per_step"] for g in groups.values()) == pytest.approx(
        result["op_ms_per_step"])
    assert result["wall_ms_per_step"] > 0 and 0 <= result["backward_share"] <= 1
    assert "ms per step (wall)" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--size", "huge"], "unknown size"),
    (["--attention", "flash"], "--attention takes fused"),
])
def test_bad_options_are_one_line_user_errors(argv, message, capsys):
    assert load_script().main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
