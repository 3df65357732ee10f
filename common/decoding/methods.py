"""Decoding methods by name: `"greedy"`, `"beam"`, `"sample"`.

Importing this module does not import TensorFlow: the command lines read
`DECODING_METHODS.names()` for their choices. `make_strategy(name, **options)` imports the
strategy and builds it with the options it takes (see `common.decoding.strategy.Strategy`);
beam search's length penalty, when none is given, is `common.decoding.defaults.LENGTH_PENALTY`.

Example:
>>> DECODING_METHODS.names()
['greedy', 'beam', 'sample']
>>> beam = make_strategy("beam", beam_size=4, temperature=0.5)  # doctest: +SKIP
>>> beam.beam_size, beam.length_penalty == LENGTH_PENALTY, beam.n_best  # doctest: +SKIP
(4, True, 1)
"""

from __future__ import annotations

import importlib
from typing import Any

from common.decoding.defaults import LENGTH_PENALTY
from common.registry import Registry

#: name -> "module:class" of its `Strategy`, imported on first use.
DECODING_METHODS = Registry("decoding method")
DECODING_METHODS.add("greedy", "common.decoding.greedy:GreedySearch")
DECODING_METHODS.add("beam", "common.decoding.beam:BeamSearch")
DECODING_METHODS.add("sample", "common.decoding.sampling:Sampling")


def strategy_class(name: str) -> Any:
    """The `Strategy` subclass registered as `name` (`UnknownNameError` lists the names)."""
    module, attr = DECODING_METHODS.get(name).split(":")
    return getattr(importlib.import_module(module), attr)


def make_strategy(name: str, **options: Any) -> Any:
    """The strategy `name`, built with those of `options` it takes (`beam_size`,
    `length_penalty`, `n_best` for beam search; `temperature`, `top_k`, `seed` for sampling;
    `no_repeat_ngram` for all three; None means the strategy's default, and the length
    penalty's is `LENGTH_PENALTY`)."""
    if options.get("length_penalty") is None:
        options["length_penalty"] = LENGTH_PENALTY
    return strategy_class(name).from_options(**options)


def default_method(beam_size: int) -> str:
    """Greedy decoding for one beam, beam search for more."""
    return "greedy" if beam_size == 1 else "beam"
