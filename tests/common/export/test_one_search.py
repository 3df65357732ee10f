"""An export compiles one beam search for every beam size above 1 and every `n_best` (and
greedy decoding for size 1), and `serving_default` calls the options signature's graph: the
SavedModel does not grow with the sizes exported, and each size and `n_best` gives what
in-process decoding compiled for that size alone gives (issue 39: nine searches, two per size,
made loading an export and its first call several times slower than the run directory)."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from tests.helpers.toy_export import EXAMPLES, LENGTH, RAW, ExportedToy, ToyModule


@pytest.fixture(scope="module")
def fewer(toy_module, tmp_path_factory):
    """An export of the toy with beam sizes 1-3 (the shared one has 1-5)."""
    return ToyModule(beam_sizes=(1, 2, 3), default_beam_size=toy_module.default_beam_size).save(
        tmp_path_factory.mktemp("one-search") / "fewer")


def _library(export) -> dict[str, int]:
    """Function name -> its nodes, over the SavedModel's function library."""
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((export / "saved_model.pb").read_bytes())
    library = proto.meta_graphs[0].graph_def.library.function
    return {f.signature.name: len(f.node_def) for f in library}


def test_the_graph_does_not_grow_with_the_beam_sizes(toy_export, fewer):
    every = toy_export
    assert sum(_library(every).values()) == sum(_library(fewer).values())
    # Each signature traced once (not once more by the save), serving_default a call of the
    # options signature's function: two functions by those names.
    names = [name for name in _library(every) if name.startswith("__inference__serve")]
    assert sorted(name.rsplit("_", 1)[0] for name in names) == [
        "__inference__serve_defaults", "__inference__serve_options"]


@pytest.fixture(scope="module")
def exported(toy_export):
    return ExportedToy(toy_export)


@pytest.mark.parametrize("beam_size, n_best", [(1, 1), (2, 2), (3, 1), (5, 1), (5, 4)])
def test_every_size_and_n_best_gives_the_in_process_hypotheses(toy_module, exported,
                                                               beam_size, n_best):
    # In process, each choice is a search of its own, its sizes Python ints (static shapes).
    got = exported._run(RAW, beam_size, LENGTH, n_best)
    features = tf.constant(list(range(EXAMPLES)), tf.int32)
    expected = toy_module.predict(features, None, beam_size, LENGTH, n_best=n_best)
    for name in ("texts", "tokens", "lengths", "finished", "n_best_texts", "n_best_tokens",
                 "n_best_lengths", "n_best_finished"):
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    for name in ("scores", "n_best_scores", "n_best_normalized_scores"):
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-6)


def test_the_sizes_find_different_hypotheses(exported):
    """The table is not so easy that every size finds the same (the test above would then
    not tell the sizes apart)."""
    texts = {tuple(exported._run(RAW, size, LENGTH, 1)["texts"]) for size in (1, 2, 5)}
    assert len(texts) > 1


def test_serving_default_is_the_options_signature_at_the_export_defaults(toy_module, exported):
    alone = exported.loaded.signatures["serving_default"](examples=tf.constant(RAW))
    options = exported._run(RAW, toy_module.default_beam_size, LENGTH, 1)
    assert sorted(alone) == sorted(ToyModule.OUTPUTS)
    for name, value in alone.items():
        np.testing.assert_array_equal(value.numpy(), options[name], err_msg=name)
