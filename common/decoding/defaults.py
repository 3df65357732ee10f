"""The decoding defaults, in one place: every command, export, preset and library call that
is not told otherwise reads them from here (a family's own, where it differs, sits beside its
config: `captioner.config.BEAM_SIZE`, `captioner.config.MAX_LENGTH`,
`seq2seq.config.ModelConfig.max_decode_length`).

Imports nothing, so the command lines' `--help` formats them in without TensorFlow.
`tests/common/decoding/test_defaults.py` fails on a default typed in anywhere else in the
packages.
"""

from __future__ import annotations

#: `alpha` of beam search's GNMT length penalty, `lp(n) = ((5 + n) / 6) ** alpha` (Wu et al.
#: 2016's 0.6): the captioner's, a new translator run's (`ModelConfig.length_penalty`), and
#: `make_strategy`'s when none is given.
LENGTH_PENALTY = 0.6

#: The beam size when a family says none: 1, greedy decoding (the translators' `evaluate`,
#: `translate` and `export`; `DecodingModule`'s `serving_default`). The captioner's is
#: `captioner.config.BEAM_SIZE`.
BEAM_SIZE = 1

#: The beam sizes an export compiles in (`PROG export --beam-sizes`), each one search.
EXPORT_BEAM_SIZES = (1, 2, 3, 4, 5)

#: The longest `max_length` a captioner export accepts at least (more when the run decodes
#: longer captions); a translator's limit is its model's (the Transformer's positions).
MAX_LENGTH_LIMIT = 100
