"""Search over a step function: greedy decoding, beam search and sampling.

Decoding knows nothing about models. A model supplies
`step(tokens (N,), state, index) -> (logits (N, V), new_state, attention (N, A))` and calls one
of the functions below; each returns a `Decoded`. All are written with `tf.while_loop`, so they
run eagerly, inside `tf.function` and inside exported SavedModels.
"""

from common.decoding.beam_search import beam_search
from common.decoding.decoded import Decoded
from common.decoding.greedy import greedy_decode
from common.decoding.sampling import sample_decode

__all__ = ["Decoded", "beam_search", "greedy_decode", "sample_decode"]
