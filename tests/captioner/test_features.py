"""The feature cache: training from cached annotations is training from the images."""

import numpy as np

from captioner.config import DecoderConfig, EncoderConfig
from captioner.datasets import load_split
from captioner.datasets.pipeline import build_vocabulary, make_dataset
from captioner.features import cache_features, load_features, make_feature_dataset
from captioner.model import ShowAttendTell


def test_first_step_loss_from_cache_equals_loss_from_images(tmp_path):
    split = load_split("shapes", "train", num_images=12)
    vocab = build_vocabulary(split)
    model = ShowAttendTell(len(vocab), EncoderConfig("mobilenet_v3_small", (64, 64), "none"),
                           DecoderConfig(embedding_dim=8, units=16, attention_units=8,
                                         dropout=0.0, max_length=30))
    path = cache_features(model.encoder, split, tmp_path, batch_size=5)
    features, missing = load_features(tmp_path, "train")
    assert path.exists() and missing == []
    assert features.shape == (12, model.encoder.num_regions, model.encoder.feature_dim)

    kwargs = dict(batch_size=8, shuffle=True, seed=4, max_length=30, pad_to_max_length=True)
    from_images = next(iter(make_dataset(split, vocab, image_size=64, **kwargs)))
    from_cache = next(iter(make_feature_dataset(features, split, vocab, **kwargs)))
    np.testing.assert_array_equal(from_images["caption_in"], from_cache["caption_in"])
    np.testing.assert_array_equal(from_images["caption_out"], from_cache["caption_out"])
    np.testing.assert_allclose(model.encoder(from_images["image"]), from_cache["features"],
                               rtol=1e-5, atol=1e-5)

    loss_images = model.loss_terms(from_images, training=False)
    loss_cache = model.loss_terms(from_cache, training=False)
    for key in ("loss_sum", "count", "accuracy"):
        np.testing.assert_allclose(float(loss_images[key]), float(loss_cache[key]), rtol=1e-5)


def test_cache_is_reused_for_the_same_encoder(tmp_path):
    split = load_split("shapes", "train", num_images=4, image_size=32)
    model = ShowAttendTell(10, EncoderConfig("small-cnn", (16, 16), "none", filters=(4,)),
                           DecoderConfig(embedding_dim=4, units=4, attention_units=4))
    path = cache_features(model.encoder, split, tmp_path, encoder_config={"name": "a"})
    stamp = path.stat().st_mtime_ns
    cache_features(model.encoder, split, tmp_path, encoder_config={"name": "a"})
    assert path.stat().st_mtime_ns == stamp
    cache_features(model.encoder, split, tmp_path, encoder_config={"name": "b"})
    assert path.stat().st_mtime_ns != stamp
