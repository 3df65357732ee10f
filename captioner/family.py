"""The captioner as a `common.family.Family`: its options, presets, training and metrics.

Keras-free to import (the command line reads it to build `--help`); the hooks import the
model, data and metrics when they run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from captioner.catalog import ENCODERS
from captioner.config import (
    ATTENTION_KINDS,
    ATTENTION_QUERIES,
    BEAM_SIZE,
    REWARDS,
    SCST_BASELINES,
    WEIGHTS,
    CaptionerRunConfig,
)
from captioner.datasets import DATASETS
from captioner.presets import PRESETS, get_preset
from common.catalog import SCORES
from common.cli import (
    ON_OFF,
    add_checkpoint_argument,
    add_no_repeat_ngram_argument,
    choose,
    non_negative_float,
    positive_int,
)
from common.config import add_config_option, from_dict
from common.errors import UserError
from common.family import Family
from common.training.capabilities import Capability
from common.training.run_dir import RunDir

# The keys every `evaluate --json` result holds: an existing file without them is not replaced.
RESULT_KEYS = ("images", "skipped_images", "run_state", "checkpoint", "split", "beam_size")


def _key_value(text: str) -> tuple[str, Any]:
    """argparse type: `KEY=VALUE`, the value read as JSON when it is JSON (`num_images=100`)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def add_data_arguments(parser: Any, add: Any = None) -> None:
    """`--data-dir` and `--data-option`; `add` is `add_config_option` when they set the
    config (`train`), else they are plain options (`evaluate`)."""
    def option(*flags, path, convert=None, **kwargs):
        if add is None:
            return parser.add_argument(*flags, **kwargs)
        return add(parser, *flags, path=path, convert=convert, **kwargs)

    option("--data-dir", path="data.data_dir", help="the dataset's folder (not needed by shapes)")
    option("--data-option", path="data.options", convert=dict, type=_key_value,
           action="append", default=None, metavar="KEY=VALUE",
           help="a dataset option, e.g. num_images=200 for shapes (repeatable)")


def warn_unfinished(run) -> dict[str, Any]:
    """Warn on stderr when the run did not finish; its state and checkpoint for a report."""
    from common.training import RunDir

    status = RunDir(run.run_dir).read_status() or {}
    state = status.get("state", "unknown")
    if state != "finished":
        print(f"captioner: warning: run {run.run_dir} is not finished (state {state!r}); "
              f"using {run.checkpoint}", file=sys.stderr)
    return {"run_state": state, "checkpoint": run.checkpoint}


class CaptionerFamily(Family):
    name = "captioner"
    vocabularies = (RunDir.vocab,)
    resume_fields = ("encoder.fine_tune",)
    # `captioner.validation`'s (the last three on shapes only: `SHAPES_VALIDATION`).
    validation_metrics = ("cider", "bleu_4", "object_accuracy", "relation_accuracy", "facts")
    # Self-critical training (`captioner.scst`), however it is turned on; `--no-scst` is none.
    capabilities = {"scst": Capability(
        ("tensorflow",), lambda section: section.get("enabled") is not False,
        why="its CIDEr-D reward runs in NumPy inside the TensorFlow step", section="")}
    description = """\
Show, Attend and Tell image captioning (Xu et al. 2015) with soft or hard attention.

Typical use:
  captioner train --dataset shapes --preset demo --out runs/demo
  captioner evaluate runs/demo --dataset shapes --split test
  captioner caption runs/demo assets/samples/*.png
  captioner export runs/demo export/demo
  captioner caption export/demo photo.jpg --json
  captioner serve export/demo --port 8501
"""
    config_class = CaptionerRunConfig
    presets = PRESETS
    datasets = DATASETS
    output = "caption"
    export_signature = "caption_with_options"
    export_beam_size = BEAM_SIZE
    export_module = "captioner.export"
    serve_model_name = "captioner"
    serve_instances = "images"
    serve_max_batch_size = 16
    train_help = "train a captioner into a run directory"
    evaluate_help = "score a trained run with the COCO caption metrics"

    def add_train_arguments(self, p: argparse.ArgumentParser) -> None:
        add = add_config_option
        add(p, "--dataset", path="data.dataset", **choose(DATASETS,
            "dataset name: {names}"))
        add_data_arguments(p, add)
        add(p, "--cache-features", path="data.cache_features", action=ON_OFF,
            help="compute the frozen encoder's features once and train from them")
        g = p.add_argument_group("model")
        add(g, "--encoder", path="encoder.name", **choose(ENCODERS, "encoder: {names}"))
        add(g, "--image-size", path="encoder.image_size", convert=lambda n: (n, n),
            type=positive_int, help="square input size in pixels")
        add(g, "--weights", path="encoder.weights", choices=WEIGHTS,
            help="encoder weights (default imagenet; downloads once)")
        add(g, "--fine-tune", path="encoder.fine_tune", type=int, metavar="N",
            help="train the encoder's top N weighted layers (0: frozen)")
        add(g, "--attention", path="decoder.attention", choices=ATTENTION_KINDS,
            help="soft or hard attention")
        add(g, "--score", path="decoder.score", **choose(SCORES,
            "attention score: {names}"))
        add(g, "--attention-query", path="decoder.query", choices=ATTENTION_QUERIES,
            help="what the attention is asked with: the LSTM state h_{t-1} (the paper's) or "
                 "that and the word just read (after 'red', look for red)")
        add(g, "--coverage", path="decoder.coverage", action=ON_OFF,
            help="the attention also sees how much of it each region has had so far (soft, "
                 "additive score): a second red object is told from the one named")
        add(g, "--embedding-dim", path="decoder.embedding_dim", type=positive_int,
            help="word embedding size")
        add(g, "--units", path="decoder.units", type=positive_int, help="LSTM units")
        add(g, "--attention-units", path="decoder.attention_units", type=positive_int,
            help="the attention score's hidden size")
        add(g, "--dropout", path="decoder.dropout", type=non_negative_float,
            help="the decoder's dropout rate")
        for flag, field, what in (
                ("--penalty-weight", "penalty_weight", "λ of the doubly stochastic attention "
                 "penalty"),
                ("--penalty-tau", "penalty_tau", "τ of the penalty (default: caption length / "
                 "regions)"),
                ("--entropy-weight", "entropy_weight", "hard attention only")):
            add(g, flag, path=f"decoder.{field}", type=non_negative_float, help=what)
        add(g, "--expected-context-warmup", path="decoder.expected_context_warmup", type=int,
            metavar="STEPS", help="hard attention: over the first STEPS steps the share of "
            "captions trained on the expected context falls from 1 to 0.5")
        add(g, "--reward", path="decoder.reward", choices=REWARDS,
            help="hard attention's REINFORCE reward: the caption log-likelihood (the paper's) "
                 "or, per step, that of the words still to come (less variance)")
        add(g, "--max-length", path=("decoder.max_length", "data.max_length"),
            type=positive_int, help="longest caption, in tokens")
        g = p.add_argument_group("self-critical training (docs/scst.md)")
        add(g, "--scst", path="scst.enabled", action=ON_OFF,
            help="train on the CIDEr-D of sampled captions (Rennie et al. 2017), usually "
                 "from a cross-entropy run: --init-from RUN_DIR; --batch-size counts images")
        add(g, "--scst-samples", path="scst.samples", type=int, metavar="K",
            help="captions sampled per image and step (default 5)")
        add(g, "--scst-baseline", path="scst.baseline", choices=SCST_BASELINES,
            help="each sample's reward is compared with its image's greedy caption's (the "
                 "default) or with the mean of its image's other samples")
        add(g, "--scst-xe-weight", path="scst.xe_weight", type=float, metavar="W",
            help="loss = (1 - W) SCST + W cross-entropy of the images' reference captions, "
                 "0 <= W < 1 (default 0: SCST alone)")
        add(g, "--scst-fact-weight", path="scst.fact_weight", type=float, metavar="W",
            help="reward = CIDEr-D + W facts: +1 for naming exactly the image's objects, -1 "
                 "for each false relation and for naming an object twice (shapes only; "
                 "default 0: CIDEr-D alone)")
        add(g, "--scst-relation-bonus", path="scst.relation_bonus", type=float, metavar="B",
            help="with --scst-fact-weight: each stated relation that holds adds B to the "
                 "facts (default 0: only false ones count, and the policy states few)")

    def preset(self, name: str | None, explicit: dict[str, Any]) -> dict[str, Any]:
        dataset = explicit.get("data", {}).get("dataset")
        if name is None:
            if not dataset:
                raise UserError("--dataset is required (or a --preset that names one); got "
                                "neither")
            return {}
        return get_preset(name, dataset)

    def prepare(self, config, out_dir: Path) -> Path:
        from captioner.prepared import prepare_captions

        return prepare_captions(config, out_dir)

    def prepared_layout(self):
        from captioner.prepared import LAYOUT

        return LAYOUT

    def build_model(self, config: dict[str, Any], vocab_sizes: dict[str, int]):
        from captioner.train import build_model

        return build_model(from_dict(CaptionerRunConfig, config), vocab_sizes["words"])

    def learning_rate(self, config: dict[str, Any], training, steps_per_epoch: int):
        """`captioner.train.learning_rate`: cosine decay where `cosine_decay` is set."""
        from captioner.train import learning_rate

        return learning_rate(from_dict(CaptionerRunConfig, config), training, steps_per_epoch)

    def validation(self, config: dict[str, Any], prepared, examples: int):
        """`captioner.validation` of the prepared folder's first `examples` images."""
        from captioner.validation import images_from_prepared, make_validation

        if not examples or "valid" not in prepared.splits:
            return None
        run = from_dict(CaptionerRunConfig, config)
        return make_validation(run, images_from_prepared(run, prepared, examples),
                               prepared.vocabularies["words"])

    def train(self, config, run_dir: Path, resume: bool, verbose: int, init_from=None):
        from captioner.train import train

        return train(config, run_dir, resume=resume, verbose=verbose, init_from=init_from)

    def train_summary(self, records, run_dir) -> str | None:
        if not records:
            return None
        last = records[-1]
        # (A run resumed after its epoch's last step, before the epoch's end, trains no step
        # in that epoch: its record has no loss.)
        loss = f": loss {last['loss']:.4f}" if "loss" in last else ""
        return f"trained {last['step']} steps into {run_dir}{loss}"

    def add_evaluate_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("run_dir", metavar="RUN_DIR")
        p.add_argument("--dataset", **choose(DATASETS,
                       "dataset name, one of: {names} (default: the run's)"))
        add_data_arguments(p)
        p.add_argument("--split", default="test", help="train, valid or test")
        p.add_argument("--beam-size", type=positive_int, default=BEAM_SIZE,
                       help="hypotheses kept per image (1: greedy decoding)")
        add_no_repeat_ngram_argument(p, "caption")
        p.add_argument("--batch-size", type=positive_int, default=32,
                       help="images decoded together")
        p.add_argument("--json", metavar="OUT", help="also write the scores to this JSON file")
        add_checkpoint_argument(p)

    def evaluate(self, run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
        from captioner.evaluate import evaluate, format_results
        from captioner.inference import load_run
        from common.config import save_json
        from common.outputs import check_output_file, reported_write

        if args.json:
            # Before the model loads: only an earlier result is replaced (`RESULT_KEYS`).
            check_output_file(args.json, "--json", result_keys=RESULT_KEYS)
        run = load_run(args.run_dir, args.checkpoint)
        info = warn_unfinished(run)
        options = dict(args.data_option) if args.data_option else None
        results = evaluate(run, args.dataset, args.split, args.data_dir, args.beam_size,
                           args.batch_size, options, no_repeat_ngram=args.no_repeat_ngram)
        print(format_results(results))
        if args.json:
            with reported_write(args.json, "--json"):
                save_json(args.json, {**results, **info, "split": args.split,
                                      "beam_size": args.beam_size,
                                      "no_repeat_ngram": args.no_repeat_ngram})
        return results

    def open_model(self, path, checkpoint: str | None = None):
        """A run directory (its `checkpoint`; a warning when unfinished) or a SavedModel."""
        from captioner.inference import CaptionerRun, open_model

        model = open_model(path, checkpoint)
        if isinstance(model, CaptionerRun):
            warn_unfinished(model)
        return model

    def predict(self, model, inputs, batch_size: int = 16, **options):
        done, failed = model.caption_files(inputs, batch_size, **options)
        return [caption for _path, caption in done]

    def add_export_arguments(self, p: argparse.ArgumentParser) -> None:
        from common.export.quantization import add_quantization_argument

        add_quantization_argument(p, more_help="; for a captioner, its decoder's Dense layers "
                                  "and word embedding (not the LSTM cell nor the encoder)")

    def export_options(self, args: argparse.Namespace) -> dict[str, Any]:
        return {"quantization": args.quantization}

    def add_serve_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--max-image-pixels", type=positive_int, default=25_000_000,
                       help="images whose header declares more pixels are refused unread")

    def serve_options(self, args: argparse.Namespace) -> dict[str, Any]:
        return {"max_image_pixels": args.max_image_pixels, "screen_images": True}


FAMILY = CaptionerFamily()
