"""Named captioner run settings: `captioner train --preset NAME`.

A preset is a nested dict of overrides for `captioner.config.CaptionerRunConfig`
(`encoder`, `decoder`, `data`, `training`); options given on the command line override it.
Its dataset options (`data.options`) apply to its own dataset only (see `get_preset`).

- `demo`: the `shapes` dataset, `small-cnn` with one context conv, an LSTM of 128 whose
  attention also sees the word it reads (`query="hidden+word"`) and how much attention each
  region has had (`coverage`), no doubly stochastic penalty (λ = 0), soft attention (with
  `--attention hard --no-coverage`: REINFORCE with the reward-to-go, the expected context on
  every caption at first, falling to the paper's 50% over 1000 steps), 3000 steps of 64
  captions: about 6 minutes on 2 CPU cores. `scripts/demo.sh` follows it with
  `demo-scst-facts`.
  The README gives the figures it reaches on the test split.
- `demo-scst`: the demo's model and data, trained by self-critical sequence training
  (`captioner.scst`: CIDEr-D reward, greedy baseline, 5 samples per image, 16 images a step,
  no cross-entropy mixed in: from a full `demo` run the mix cost CIDEr and objects for little
  relation accuracy on validation) at a fine-tuning learning rate; for `--init-from` a `demo`
  run (docs/scst.md).
- `demo-scst-facts`: `demo-scst` whose reward adds what each caption states checked against
  the image's scene (`scst.fact_weight` 10: +10 for naming exactly its objects, -10 for each
  false relation and for naming an object twice, +1.5 for each true relation:
  `relation_bonus` 0.15), 8 epochs, the best checkpoint by the validation's `facts` (chosen
  on the validation split, docs/scst.md); `scripts/demo.sh`'s second stage.
- `tiny`: seconds; for tests and smoke runs only (learns nothing useful).
- `coco`: the paper's VGG-19 set-up (pretrained encoder, frozen, features cached).
"""

from __future__ import annotations

import copy
from typing import Any

from common.registry import Registry

PRESETS = Registry("preset")

PRESETS.add("demo", {
    "encoder": {"name": "small-cnn", "image_size": (64, 64), "weights": "none",
                "filters": (16, 32, 64), "context_convs": 1, "coordinates": True},
    "decoder": {"embedding_dim": 64, "units": 128, "attention_units": 128, "dropout": 0.2,
                "attention": "soft", "query": "hidden+word", "penalty_weight": 0.0,
                "reward": "to-go", "expected_context_warmup": 1000, "max_length": 28,
                "coverage": True},
    "data": {"dataset": "shapes", "max_length": 28},
    "training": {"epochs": 6, "steps_per_epoch": 500, "batch_size": 64, "learning_rate": 2e-3,
                 "log_every": 50},
    "cosine_decay": True,
})

PRESETS.add("demo-scst", {
    **{section: copy.deepcopy(PRESETS.get("demo")[section])
       for section in ("encoder", "decoder", "data")},
    "training": {"epochs": 4, "steps_per_epoch": 125, "batch_size": 16, "learning_rate": 1e-4,
                 "log_every": 20},
    "scst": {"enabled": True, "samples": 5, "baseline": "greedy", "xe_weight": 0.0},
})

PRESETS.add("demo-scst-facts", {
    **copy.deepcopy(PRESETS.get("demo-scst")),
    "training": {**PRESETS.get("demo-scst")["training"], "epochs": 8, "best_metric": "facts"},
    "scst": {**PRESETS.get("demo-scst")["scst"], "fact_weight": 10.0, "relation_bonus": 0.15},
})

PRESETS.add("tiny", {
    "encoder": {"name": "small-cnn", "image_size": (32, 32), "weights": "none",
                "filters": (8, 16), "coordinates": True},
    "decoder": {"embedding_dim": 16, "units": 32, "attention_units": 16, "dropout": 0.0,
                "max_length": 12},
    "data": {"dataset": "shapes", "max_length": 12,
             "options": {"num_images": 48}},
    "training": {"epochs": 1, "steps_per_epoch": 3, "batch_size": 8, "learning_rate": 1e-3},
})

PRESETS.add("coco", {
    "encoder": {"name": "vgg19", "image_size": (224, 224), "weights": "imagenet"},
    "decoder": {"embedding_dim": 512, "units": 1024, "attention_units": 512, "dropout": 0.5,
                "max_length": 20},
    "data": {"dataset": "coco", "max_length": 20, "min_count": 5, "cache_features": True},
    "training": {"epochs": 20, "batch_size": 64, "learning_rate": 1e-3},
})


def get_preset(name: str, dataset: str | None = None) -> dict[str, Any]:
    """A deep copy of the preset's overrides (raises `UnknownNameError` for a wrong name).

    Args:
        name: a name in `PRESETS`.
        dataset: the dataset the run reads, when it is chosen apart from the preset
            (`--dataset coco --preset tiny`). A preset's dataset options and data folder
            belong to its own dataset's loader (`tiny`'s `num_images` is a `shapes` option),
            so they are left out when `dataset` is another one; its other settings stay.
    """
    preset = copy.deepcopy(PRESETS.get(name))
    data = preset.get("data", {})
    if dataset is not None and dataset != data.get("dataset", dataset):
        data.pop("options", None)
        data.pop("data_dir", None)
    return preset
