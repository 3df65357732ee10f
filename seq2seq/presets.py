"""Named starting points for `seq2seq train --preset NAME`, one set of sizes per architecture.

A preset gives overrides of the model, data and training configs for each architecture;
options given explicitly on the command line override the preset in turn.

| preset | what for |
|---|---|
| `tiny` | tests: a model of a few thousand weights, a handful of steps |
| `dates-demo` | the dates task (≥ 98% exact match held out, ≤ 5 minutes on 2 CPU cores) |
| `spa-eng-cpu` | English→Spanish (Tatoeba pairs, a `train.tsv`/`valid.tsv` folder), ≤ 60 minutes on 2 cores |
| `spa-eng-compare` | the equal-budget comparison of `seq2seq-noattn`, `bahdanau` and `transformer` (same steps, batch and data; about 10 minutes each on 2 cores) |

Measured on 2 shared CPU cores (other jobs running, so times are inflated): `dates-demo`
reaches 100% exact match on the 1,000 held-out test dates with the Transformer, 99.8% with
Bahdanau's best checkpoint by validation (100% with its last), Bahdanau training in 0.7x the
Transformer's time (docs/records/results/dates_demo.json). `spa-eng-cpu`, the average of the
last 5 checkpoints (`seq2seq average RUN --last 5`), beam 4: the Transformer (10,000 steps; seed
1 took 31.7 minutes) 43.66 ± 0.36 BLEU on `test.tsv` over 3 seeds; Bahdanau (12,000 steps; seed
1 took 31.8 minutes) 37.94 ± 0.71 over 3 seeds (docs/results.md).
Use `--data data/spa-eng` (the folder made as the README shows, so `valid.tsv` gives a BLEU per epoch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common.registry import Registry

PRESETS = Registry("preset")


@dataclass(frozen=True)
class Preset:
    """Overrides per architecture: `{"bahdanau": {"model": {...}, "data": {...},
    "training": {...}}, "transformer": {...}}`.

    `model` keys are `ModelConfig` fields, except that the architecture's own sizes go under
    `model["bahdanau"]` or `model["transformer"]`.
    """

    name: str
    description: str
    overrides: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def for_arch(self, arch: str) -> dict[str, dict[str, Any]]:
        """The overrides for `arch`; `seq2seq-noattn` without its own takes Bahdanau's (the
        same recurrent sizes, only the attention differs)."""
        if arch not in self.overrides and arch == "seq2seq-noattn":
            arch = "bahdanau"
        return self.overrides.get(arch, {})


def get_preset(name: str) -> Preset:
    """The preset called `name` (an `UnknownNameError` listing the presets otherwise)."""
    return PRESETS.get(name)


def _add(name: str, description: str, sizes: dict[str, dict[str, Any]],
         model: dict[str, Any] | None = None, training: dict[str, Any] | None = None,
         data: dict[str, Any] | None = None,
         per_arch: dict[str, dict[str, dict[str, Any]]] | None = None) -> None:
    """Register a preset from each architecture's sizes (`{"bahdanau": {...},
    "transformer": {...}}`) and what the architectures share (`model`, `training`, `data`);
    `per_arch` adds an architecture's own `model`/`training` values."""
    overrides: dict[str, dict[str, dict[str, Any]]] = {}
    for arch, arch_sizes in sizes.items():
        own = (per_arch or {}).get(arch, {})
        overrides[arch] = {"model": {arch: arch_sizes, **(model or {}), **own.get("model", {})}}
        if data is not None:
            overrides[arch]["data"] = data
        overrides[arch]["training"] = {**(training or {}), **own.get("training", {})}
    PRESETS.add(name, Preset(name, description, overrides))


# The Transformer's label smoothing of the spa-eng presets (Vaswani et al. 2017 use 0.1).
_SMOOTHED = {"transformer": {"model": {"label_smoothing": 0.1}}}

_add(
    "tiny", "for tests: tiny models, a few steps",
    {"bahdanau": {"embedding_dim": 8, "units": 8, "attention_units": 8, "dropout": 0.0},
     "transformer": {"num_layers": 1, "hidden_dim": 8, "num_heads": 2, "intermediate_dim": 16,
                     "dropout": 0.0, "max_length": 32, "warmup_steps": 2}},
    model={"max_decode_length": 16},
    training={"epochs": 1, "steps_per_epoch": 3, "batch_size": 8, "learning_rate": 1e-2,
              "log_every": 1, "checkpoint_every": 0},
)

_add(
    "dates-demo",
    "the dates task: >= 98% exact match on the held-out split in <= 5 minutes on 2 CPU cores",
    {"bahdanau": {"embedding_dim": 32, "units": 64, "attention_units": 64, "dropout": 0.0,
                  "cell": "gru"},
     "transformer": {"num_layers": 2, "hidden_dim": 64, "num_heads": 4, "intermediate_dim": 128,
                     "dropout": 0.0, "max_length": 32, "warmup_steps": 200}},
    model={"max_decode_length": 16},
    training={"steps_per_epoch": 200, "batch_size": 64, "clip_norm": 5.0, "log_every": 50,
              "checkpoint_every": 0},
    per_arch={"bahdanau": {"training": {"epochs": 6, "learning_rate": 3e-3}},
              "transformer": {"training": {"epochs": 4, "learning_rate": 2e-3}}},
)

_add(
    "spa-eng-cpu", "English->Spanish (Tatoeba) in <= 60 minutes on 2 cores",
    {"bahdanau": {"embedding_dim": 128, "units": 192, "attention_units": 128, "dropout": 0.2,
                  "cell": "gru", "input_feeding": True},
     "transformer": {"num_layers": 3, "hidden_dim": 192, "num_heads": 4, "intermediate_dim": 512,
                     "dropout": 0.1, "max_length": 48, "warmup_steps": 1000,
                     "tie_embeddings": True}},
    # The length penalty 1.0 was chosen on valid.tsv for both (the average of the last 5
    # checkpoints: Transformer 43.59 BLEU against 43.46 at 0.6, Bahdanau 38.48 against 38.33;
    # docs/records/translators.md, "The spa-eng recipe").
    model={"max_decode_length": 40, "length_penalty": 1.0},
    data={"max_vocab": 12000, "min_count": 2, "max_length": 30},
    # No best checkpoint is kept (validation still reports BLEU each epoch), so `evaluate`,
    # `translate` and `export` take the last: the best by 200 greedy validation pairs scored
    # below the last on valid.tsv in every measured recipe, by 0.1-0.7 BLEU on average over 3
    # seeds and up to 2 for one seed (docs/records/translators.md, rows 1 and 1b).
    training={"steps_per_epoch": 500, "batch_size": 64, "learning_rate": 1e-3, "clip_norm": 5.0,
              "log_every": 100, "checkpoint_every": 500, "keep_checkpoints": 5,
              "best_metric": None},
    per_arch={"bahdanau": {"training": {"epochs": 24}},
              "transformer": {**_SMOOTHED["transformer"], "training": {"epochs": 20}}},
)

# The comparison of issue #9 (Bahdanau et al. 2015, figure 2): the three architectures see the
# same pairs in the same batches for the same number of steps; seq2seq-noattn takes Bahdanau's
# recurrent sizes (`Preset.for_arch`), so the two differ only by the attention.
_add(
    "spa-eng-compare",
    "equal budgets for seq2seq-noattn, bahdanau and transformer on spa-eng (~10 min each)",
    {"bahdanau": {"embedding_dim": 128, "units": 128, "attention_units": 128, "dropout": 0.1,
                  "cell": "gru"},
     "transformer": {"num_layers": 2, "hidden_dim": 128, "num_heads": 4, "intermediate_dim": 256,
                     "dropout": 0.1, "max_length": 48, "warmup_steps": 300,
                     "tie_embeddings": True}},
    model={"max_decode_length": 40},
    data={"max_vocab": 8000, "min_count": 2, "max_length": 30},
    training={"epochs": 5, "steps_per_epoch": 400, "batch_size": 64, "clip_norm": 5.0,
              "log_every": 100, "checkpoint_every": 400, "learning_rate": 2e-3},
    per_arch=_SMOOTHED,
)
