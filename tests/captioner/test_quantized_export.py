"""`captioner export --quantization int8`: the decoder's Dense layers and word embedding in
int8 (Keras's `model.quantize`), the captions of the in-process model quantized the same way,
what stays float32, and the one-line refusal of another type."""

import pytest

from captioner.cli import main
from captioner.export import ExportedCaptioner
from captioner.inference import CaptionerRun
from common.config import load_json
from common.export import savedmodel
from common.export.quantization import quantize_model
from tests.helpers.isolated import inspect_isolated

# The decoder's layers Keras quantizes: its projections, attention score (with the fixture's
# coverage term) and embedding.
DECODER_LAYERS = ["decoder/L_h", "decoder/L_o", "decoder/L_z",
                  "decoder/attention/score/energy_dense", "decoder/attention/score/key_dense",
                  "decoder/attention/score/query_dense", "decoder/coverage", "decoder/embedding",
                  "decoder/gate", "decoder/init_c", "decoder/init_h"]


@pytest.fixture(scope="module")
def int8_export(trained_captioner):
    out = trained_captioner.parent / "export-int8"
    assert main(["export", str(trained_captioner), str(out), "--quantization", "int8",
                 "--beam-sizes", "1,2", "--beam-size", "2"]) == 0
    return out


@pytest.mark.slow
def test_int8_export_gives_the_quantized_models_captions(trained_captioner, int8_export,
                                                         shape_images):
    run = CaptionerRun(trained_captioner)
    assert quantize_model(run.model, "int8") == DECODER_LAYERS
    exported = ExportedCaptioner(int8_export)
    for beam_size in (1, 2):
        expected, _ = run.caption_files(shape_images, beam_size=beam_size)
        got, _ = exported.caption_files(shape_images, beam_size=beam_size)
        assert len({c.text for _, c in expected}) > 1, "the model is degenerate"
        for (_, e), (_, g) in zip(expected, got, strict=True):
            assert g.words == e.words and g.score == pytest.approx(e.score, abs=1e-4)
    info = load_json(int8_export / savedmodel.EXTRA_DIR / savedmodel.INFO_FILE)
    assert info["quantization"] == "int8" and info["quantized_layers"] == DECODER_LAYERS


@pytest.mark.slow
def test_the_encoder_and_the_lstm_stay_float32(int8_export):
    _, imported, variables = inspect_isolated(int8_export)
    assert imported == []
    dtypes = {}
    for name, dtype, _ in variables:
        dtypes.setdefault(name.split(":")[0], set()).add(dtype)
    assert {"int8"} == dtypes["embedding/embeddings"] == dtypes["L_o/kernel"]
    convolutions = [name for name in dtypes if "conv" in name and name.endswith("kernel")]
    assert convolutions and all(dtypes[name] == {"float32"} for name in convolutions)
    assert dtypes["decoder/lstm/kernel"] == dtypes["decoder/lstm/recurrent_kernel"] == {"float32"}


def test_another_type_is_refused_in_one_line(tmp_path, capsys):
    assert main(["export", str(tmp_path / "run"), str(tmp_path / "out"), "--quantization",
                 "int16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "argument --quantization: invalid choice: 'int16'" in err
    assert not (tmp_path / "out").exists()
