"""scripts/benchmarks/benchmark_serving.py on a captioner: both sides give the same words, the
figures are medians of alternating rounds and the ratio is theirs; the signature's `n_best` 1
outputs (taken from the best caption's, not post-processed again) are those of the general path;
the graph's image reading skips the resize only where it changes nothing."""

import json

import numpy as np
import pytest
import tensorflow as tf

from captioner.inference import CaptionerRun, read_image
from common.decoding import make_strategy
from tests.helpers.benchmarks import check_serving_report, load_script


@pytest.mark.slow
def test_quick_run_compares_the_same_captions(trained_captioner, exported_captioner,
                                              shape_images, tmp_path):
    out = tmp_path / "serving.json"
    status = load_script("benchmark_serving").main([str(trained_captioner), "--export", str(exported_captioner),
                             "--image", str(shape_images[0]), "--beam-sizes", "1,2",
                             "--quick", "--out", str(out)])
    assert status == 0
    report = json.loads(out.read_text())
    assert report["family"] == "captioner" and report["image"] == str(shape_images[0])
    check_serving_report(report, [1, 2])
    run = CaptionerRun(trained_captioner)
    pixels = read_image(shape_images[0], run.image_size)[None]
    for row in report["results"]:  # the words of the run directory's own caption
        assert row["words"] == run.caption_batch(pixels, beam_size=row["beam_size"])[0].words


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 2])
def test_one_best_outputs_equal_the_general_n_best_path(trained_captioner, shape_images, beam):
    run = CaptionerRun(trained_captioner)
    module = run.module()
    pixels = tf.constant(np.stack([read_image(p, run.image_size) for p in shape_images[:3]]))
    strategy = make_strategy("greedy" if beam == 1 else "beam", beam_size=beam, n_best=1)
    search, rows = module.prepare(pixels)
    decoded = module._decode(search, strategy, 12)
    best = module._postprocess(type(decoded)(*(t[:, 0] for t in decoded)), rows)
    fast, general = module._one_best(decoded, best), module._n_best(decoded, rows)
    assert sorted(fast) == sorted(general)
    for name, value in general.items():
        np.testing.assert_array_equal(fast[name].numpy(), value.numpy(), err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("size", [(32, 32), (45, 60)])
def test_graph_reads_images_at_and_off_the_encoder_size_as_before(trained_captioner, tmp_path,
                                                                 size):
    """An image already at the encoder's 32x32 skips the resize: the pixels are those of the
    resize (and of Pillow's, the run directory's reader); other sizes are resized."""
    import io

    from PIL import Image

    run = CaptionerRun(trained_captioner)
    array = np.random.default_rng(sum(size)).integers(0, 256, (*size, 3)).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    got = run.module().read_inputs(tf.constant([buffer.getvalue()])).numpy()
    expected = tf.image.resize(array, run.image_size, method="bilinear", antialias=True)
    np.testing.assert_array_equal(got[0], expected.numpy())
    if size == run.image_size:
        np.testing.assert_array_equal(got[0], array.astype(np.float32))
        np.testing.assert_array_equal(got[0], read_image(buffer.getvalue(), run.image_size))
