"""The captioner run config refuses settings that cannot work, whatever the entry point."""

import pytest

from captioner.cli import main
from captioner.config import CaptionerRunConfig, DataConfig, EncoderConfig
from captioner.presets import get_preset
from captioner.train import apply_overrides
from common.errors import UserError


@pytest.mark.parametrize("encoder, why", [
    (EncoderConfig("small-cnn", weights="imagenet"), "small-cnn trains from scratch"),
    (EncoderConfig("small-cnn", weights="none"), "small-cnn trains from scratch"),
    (EncoderConfig("vgg19", weights="none"), "--weights none leaves vgg19 untrained"),
])
def test_cached_features_of_an_untrained_encoder_are_refused(encoder, why):
    with pytest.raises(UserError, match=why):
        CaptionerRunConfig(encoder=encoder, data=DataConfig(cache_features=True))
    CaptionerRunConfig(encoder=encoder)  # training it end to end is fine


def test_a_pretrained_frozen_encoder_may_cache_its_features():
    config = CaptionerRunConfig(encoder=EncoderConfig("vgg19", weights="imagenet"),
                                data=DataConfig(cache_features=True))
    assert config.data.cache_features
    coco = apply_overrides(CaptionerRunConfig(), get_preset("coco"))
    assert coco.data.cache_features and coco.encoder.weights == "imagenet"
    with pytest.raises(UserError, match="--weights none"):  # the coco preset caches
        apply_overrides(coco, {"encoder": {"weights": "none"}})


@pytest.mark.parametrize("options", [
    ["--preset", "tiny", "--cache-features"],
    ["--preset", "coco", "--dataset", "shapes", "--weights", "none"],
    ["--dataset", "shapes", "--encoder", "resnet50", "--weights", "none", "--cache-features"],
])
def test_the_command_line_refuses_it_in_one_line(capsys, tmp_path, options):
    # Were it accepted, this would be a short run rather than hours of training.
    small = ["--epochs", "1", "--steps-per-epoch", "1", "--batch-size", "2", "--image-size",
             "32", "--data-option", "num_images=4", "--verbose", "0"]
    assert main(["train", *options, *small, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("captioner train: error: --cache-features")
    assert "random network" in err
    assert not (tmp_path / "run").exists()  # refused before anything is written
