"""A JAX-trained translator, imported into TensorFlow and exported as a SavedModel, gives the
tokens the JAX model gives itself.

The JAX side decodes greedily with its own loop over the model's public step API
(`initial_state`, `make_step`: `worker.task_greedy`), knowing nothing of `common.decoding`
or of TensorFlow; the TensorFlow side is the exported SavedModel (`seq2seq export`), loaded
as any client would. Equal tokens mean the weights crossed backends intact and both decoders
agree.
"""

from __future__ import annotations

import shutil

import pytest

from tests.jax.conftest import requires_jax, run_worker

pytestmark = [requires_jax, pytest.mark.slow]
MAX_LENGTH = 12


def test_exported_jax_run_gives_the_jax_models_tokens(translation_folder, single_device_run,
                                                      tmp_path):
    from common.text import Vocabulary, tokenize_texts
    from common.training.cross_backend import import_jax_weights
    from common.training.prepare import load_prepared
    from seq2seq.export import ExportedTranslator, export_run

    run_dir = tmp_path / "run"
    shutil.copytree(single_device_run["run_dir"], run_dir)
    checkpoint = import_jax_weights(run_dir)
    assert checkpoint.endswith("checkpoints/ckpt-1")
    export_run(run_dir, tmp_path / "export", max_decode_length=MAX_LENGTH)

    prepared = load_prepared(translation_folder)
    lines = (translation_folder.parent / "pairs.tsv").read_text(encoding="utf-8").splitlines()
    texts = [line.split("\t")[0] for line in lines[:12]]
    source_vocab = Vocabulary.load(run_dir / prepared.vocab_files["source"])
    target = prepared.vocabularies["target"]
    tokens = tokenize_texts(texts, lowercase=bool(prepared.config["data"]["lowercase"]))
    jax_ids = run_worker("greedy", {"prepared": str(translation_folder),
                                    "run_dir": str(run_dir), "max_length": MAX_LENGTH,
                                    "sources": [source_vocab.encode(t) for t in tokens]})["ids"]
    exported = ExportedTranslator(tmp_path / "export").translate(texts, beam_size=1,
                                                                 max_length=MAX_LENGTH)
    assert any(ids for ids in jax_ids)  # something was said
    for text, ids, translation in zip(texts, jax_ids, exported):
        words = [target[i] for i in ids]
        # `<unk>` is replaced by the most attended source word on the TensorFlow side.
        assert len(translation.tokens) == len(words), text
        for jax_word, tf_word in zip(words, translation.tokens):
            assert jax_word == "<unk>" or jax_word == tf_word, (text, words, translation.tokens)
