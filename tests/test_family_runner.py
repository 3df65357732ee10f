"""Issue 15: one config merge for both families (defaults, preset, --config FILE, options),
run directory file names in `RunDir`, and `--help` choices read from the registries."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from captioner.cli import main as captioner_main
from captioner.cli import subcommands as captioner_subcommands
from common.cli import SubcommandParser
from common.config import save_json, to_dict
from common.registry import Registry
from common.training.config import TrainingConfig
from common.training.run_dir import RunDir
from seq2seq.cli import main as seq2seq_main
from seq2seq.cli import subcommands as seq2seq_subcommands


def captured(monkeypatch, module):
    seen = []
    monkeypatch.setattr(f"{module}.train", lambda config, *a, **k: seen.append(config) or [])
    return seen


def help_text(subcommands, name):
    (command,) = [c for c in subcommands() if c.name == name]
    parser = SubcommandParser(prog=name)
    command.add_arguments(parser)
    return " ".join(parser.format_help().split())


# -- choices from the registries ---------------------------------------------------------------

def test_every_listed_choice_is_its_registrys_names():
    from captioner.datasets import DATASETS as CAPTION_DATASETS
    from captioner.encoders import ENCODERS
    from captioner.presets import PRESETS as CAPTION_PRESETS
    from common.layers import SCORES
    from seq2seq.datasets import DATASETS as PAIR_DATASETS
    from seq2seq.models import ARCHS
    from seq2seq.presets import PRESETS as PAIR_PRESETS

    listed = {
        (captioner_subcommands, "train"): [CAPTION_DATASETS, ENCODERS, SCORES, CAPTION_PRESETS],
        (captioner_subcommands, "evaluate"): [CAPTION_DATASETS],
        (seq2seq_subcommands, "train"): [PAIR_DATASETS, ARCHS, SCORES, PAIR_PRESETS],
    }
    for (subcommands, name), registries in listed.items():
        text = help_text(subcommands, name)
        for registry in registries:
            assert ", ".join(registry.names()) in text, (name, registry)


@pytest.mark.parametrize("prog", ["captioner", "seq2seq"])
def test_train_help_imports_no_tensorflow(prog):
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", prog, "train", "--help"],
                         capture_output=True, text=True, check=True)
    assert "--config FILE" in out.stdout
    assert "tensorflow" not in out.stderr and "keras" not in out.stderr


def test_a_declared_name_is_listed_before_its_module_is_imported(tmp_path, monkeypatch):
    (tmp_path / "heavy_plugin.py").write_text(
        "from tests.test_family_runner import PLUGINS\n"
        "@PLUGINS.register('b')\nclass B: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    PLUGINS.declare("b", "heavy_plugin")
    PLUGINS.declare("c", "json")  # a module that does not register it
    assert PLUGINS.names() == ["a", "b", "c"] and "b" in PLUGINS
    assert "heavy_plugin" not in sys.modules
    assert PLUGINS.get("b").__name__ == "B" and PLUGINS.declared() == {"c": "json"}
    with pytest.raises(RuntimeError, match="declared in json"):
        PLUGINS.get("c")
    with pytest.raises(ValueError, match="already registered"):
        PLUGINS.add("b", object())


PLUGINS = Registry("plugin")
PLUGINS.add("a", 1)


def test_the_light_catalogs_declare_what_the_heavy_modules_register():
    from captioner.catalog import ENCODERS
    from common.catalog import SCORES
    from seq2seq.catalog import DATASETS

    for registry in (SCORES, ENCODERS, DATASETS):
        names = registry.names()
        registry.get(names[0])  # imports the module that registers them all
        assert registry.declared() == {} and registry.names() == names


# -- the run directory owns its file names ----------------------------------------------------

def test_the_run_directory_names_every_file(tmp_path):
    run = RunDir(tmp_path)
    assert (RunDir.config, RunDir.vocab, RunDir.source_vocab, RunDir.target_vocab) == (
        "config.json", "vocab.txt", "vocab.source.txt", "vocab.target.txt")
    assert run.features == tmp_path / "features" and run.status == tmp_path / "status.json"
    assert run.history == tmp_path / "history.jsonl" and run.checkpoints.name == "checkpoints"


# -- one merge: defaults <- preset <- --config FILE <- options --------------------------------

def test_captioner_config_file_sits_between_the_preset_and_the_options(monkeypatch, tmp_path):
    seen = captured(monkeypatch, "captioner.train")
    file = tmp_path / "mine.json"
    file.write_text(json.dumps({"decoder": {"units": 24, "dropout": 0.25},
                                "training": {"epochs": 2, "batch_size": 4}}))
    assert captioner_main(["train", "--preset", "tiny", "--config", str(file), "--epochs", "3",
                           "--out", str(tmp_path / "r")]) == 0
    (config,) = seen
    # tiny sets units 32 and epochs 1; the file 24 and 2; the option --epochs 3.
    assert (config.decoder.units, config.decoder.dropout) == (24, 0.25)
    assert (config.training["epochs"], config.training["batch_size"]) == (3, 4)
    assert config.encoder.filters == (8, 16) and config.data.options == {"num_images": 48}


def test_seq2seq_config_file_sits_between_the_preset_and_the_options(monkeypatch, tmp_path):
    seen = captured(monkeypatch, "seq2seq.train")
    file = tmp_path / "mine.json"
    file.write_text(json.dumps({"model": {"transformer": {"num_layers": 3, "hidden_dim": 12,
                                                          "fused_projections": True}}}))
    assert seq2seq_main(["train", "--dataset", "dates", "--arch", "transformer", "--preset",
                         "tiny", "--config", str(file), "--hidden-dim", "16", "--post-norm",
                         "--dropout", "0.2", "--attention-dropout", "0",
                         "--activation-dropout", "0.05", "--out", str(tmp_path / "r")]) == 0
    (config,) = seen
    t = config.model.transformer
    assert (t.num_layers, t.hidden_dim, t.num_heads, t.norm_first, t.dropout,
            t.attention_dropout, t.activation_dropout,
            t.fused_projections) == (3, 16, 2, False, 0.2, 0.0, 0.05, True)
    assert config.model.bahdanau.dropout == 0.1  # --dropout is the chosen architecture's
    assert config.preset == "tiny" and config.training["steps_per_epoch"] == 3


# What only an experiment or the GPU lab sets: a config file, not an option of `train`.
LAB_OPTIONS = ("--fused-projections", "--no-fused-projections", "--dropout-rng",
               "--logical-cpus")


@pytest.mark.parametrize("main, subcommands, new_run", [
    (seq2seq_main, seq2seq_subcommands, ["--dataset", "dates", "--arch", "transformer"]),
    (captioner_main, captioner_subcommands, []),
], ids=["seq2seq", "captioner"])
def test_the_lab_settings_are_a_config_files_not_train_options(
        main, subcommands, new_run, monkeypatch, tmp_path, capsys):
    for name in ("train", "prepare"):
        text = help_text(subcommands, name)
        assert not [option for option in LAB_OPTIONS if option in text], name
    for option, value in (("--dropout-rng", "keras"), ("--logical-cpus", "2")):
        assert main(["train", "--preset", "tiny", *new_run, option, value,
                     "--out", str(tmp_path / "refused")]) == 2
        assert f"unrecognized arguments: {option}" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    family = "seq2seq" if main is seq2seq_main else "captioner"
    seen = captured(monkeypatch, f"{family}.train")
    file = tmp_path / "lab.json"
    lab = {"training": {"logical_cpus": 2, "dropout_rng": "keras"}}
    if family == "seq2seq":
        lab["model"] = {"transformer": {"fused_projections": True}}
    file.write_text(json.dumps(lab))
    assert main(["train", "--preset", "tiny", *new_run, "--config", str(file),
                 "--out", str(tmp_path / "r")]) == 0
    (config,) = seen
    assert (config.training["logical_cpus"], config.training["dropout_rng"]) == (2, "keras")
    if family == "seq2seq":
        assert config.model.transformer.fused_projections is True


@pytest.mark.parametrize("arch, flags, expected", [
    ("transformer", [], True),  # spa-eng-cpu ties the Transformer's embeddings
    ("transformer", ["--no-tie-embeddings"], False),
    ("transformer", ["--no-tie-embeddings", "--tie-embeddings"], True),  # the last one given
    ("bahdanau", [], True),  # and feeds Bahdanau's inputs
    ("bahdanau", ["--no-input-feeding"], False),
])
def test_a_flag_the_preset_turns_on_can_be_turned_off(monkeypatch, tmp_path, arch, flags,
                                                      expected):
    seen = captured(monkeypatch, "seq2seq.train")
    assert seq2seq_main(["train", "--dataset", "dates", "--arch", arch, "--preset",
                         "spa-eng-cpu", *flags, "--out", str(tmp_path / "r")]) == 0
    (config,) = seen
    model = config.model
    on = model.transformer.tie_embeddings if arch == "transformer" else model.bahdanau.input_feeding
    assert on is expected


@pytest.mark.parametrize("arch", ["transformer", "bahdanau"])
def test_spa_eng_cpu_keeps_no_best_checkpoint_unless_asked(monkeypatch, tmp_path, arch):
    # Its runs' default checkpoint is the last (docs/results.md: the noisy best scored lower).
    seen = captured(monkeypatch, "seq2seq.train")
    for flags, expected in (([], None), (["--best-metric", "auto"], "auto")):
        assert seq2seq_main(["train", "--dataset", "dates", "--arch", arch, "--preset",
                             "spa-eng-cpu", *flags, "--out", str(tmp_path / "r")]) == 0
        config = seen.pop()
        assert config.training["best_metric"] == expected
        assert TrainingConfig(**config.training).best_metric == expected


def test_a_no_flag_clears_what_the_config_file_set(monkeypatch, tmp_path):
    seen = captured(monkeypatch, "captioner.train")
    file = tmp_path / "mine.json"
    file.write_text(json.dumps({"training": {"deterministic": True}}))
    assert captioner_main(["train", "--preset", "tiny", "--config", str(file),
                           "--no-deterministic", "--out", str(tmp_path / "r")]) == 0
    (config,) = seen
    assert config.training["deterministic"] is False


@pytest.mark.parametrize("main, content, needle", [
    (captioner_main, {"decoder": {"unitz": 3}}, "unknown key 'decoder.unitz'"),
    (seq2seq_main, {"model": {"transformer": {"layers": 3}}},
     "unknown key 'model.transformer.layers'"),
    (seq2seq_main, {"trainng": {}}, "unknown key 'trainng'"),
])
def test_an_unknown_key_in_the_config_file_is_one_line(main, content, needle, tmp_path, capsys):
    file = tmp_path / "bad.json"
    file.write_text(json.dumps(content))
    argv = ["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
            "--config", str(file), "--out", str(tmp_path / "r")]
    if main is captioner_main:
        argv[1:5] = ["--dataset", "shapes"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and str(file) in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("main, module, argv, kept, changed", [
    (captioner_main, "captioner.train", ["--dataset", "shapes", "--preset", "tiny"],
     lambda c: c.decoder.units, lambda c: c.training["epochs"]),
    (seq2seq_main, "seq2seq.train",
     ["--dataset", "dates", "--arch", "transformer", "--preset", "tiny"],
     lambda c: c.model.transformer.hidden_dim, lambda c: c.training["epochs"]),
])
def test_resume_keeps_the_model_and_data_and_takes_new_training_settings(
        main, module, argv, kept, changed, monkeypatch, tmp_path, capsys):
    seen = captured(monkeypatch, module)
    out = ["--out", str(tmp_path / "r")]
    assert main(["train", *argv, *out]) == 0
    save_json(RunDir(tmp_path / "r").config, to_dict(seen[0]))
    assert main(["train", *argv, *out, "--resume", "--epochs", "7"]) == 0
    first, resumed = seen
    assert kept(resumed) == kept(first) and changed(resumed) == 7
    assert to_dict(resumed)["data"] == to_dict(first)["data"]
    # A model option that differs from the run's is refused in one line, not dropped.
    size = "--units" if main is captioner_main else "--hidden-dim"
    assert main(["train", *argv, *out, "--resume", size, "64", "--epochs", "7"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--resume keeps the run's model and data" in err
    assert "64 (the run has" in err and len(seen) == 2


def test_resume_holds_a_preset_to_the_run_and_reads_options_against_it(monkeypatch, tmp_path,
                                                                         capsys):
    # The captioner's config does not record its preset: another preset is compared by what
    # it would set. `--dropout` on a resumed Bahdanau run is Bahdanau's, without --arch.
    seen = captured(monkeypatch, "captioner.train")
    out = ["--out", str(tmp_path / "c")]
    assert captioner_main(["train", "--dataset", "shapes", "--preset", "tiny", *out]) == 0
    save_json(RunDir(tmp_path / "c").config, to_dict(seen[0]))
    assert captioner_main(["train", "--preset", "demo", "--resume", *out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "(the run has" in err
    assert captioner_main(["train", "--preset", "tiny", "--resume", *out]) == 0
    seen = captured(monkeypatch, "seq2seq.train")
    out = ["--out", str(tmp_path / "s")]
    assert seq2seq_main(["train", "--dataset", "dates", "--arch", "bahdanau", "--preset", "tiny",
                         "--dropout", "0.2", *out]) == 0
    save_json(RunDir(tmp_path / "s").config, to_dict(seen[0]))
    assert seq2seq_main(["train", "--resume", "--dropout", "0.2", *out]) == 0
    assert seq2seq_main(["train", "--resume", "--dropout", "0.3", *out]) == 2
    assert "model.bahdanau.dropout 0.3 (the run has 0.2)" in capsys.readouterr().err
