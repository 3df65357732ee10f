"""Beam size and maximum length as inputs of an exported signature, for both families.

Beam search needs a Python beam size, so an export compiles one search per size in
`beam_sizes` and `dispatch` picks one at run time with nested `tf.cond`s (size 1 being
greedy decoding, or whatever `decode(1)` builds). `max_length` is a tensor, the output width.
`check_export_options` validates the choices at export time, `graph_checks` the inputs of each
call, and `request_options` a client's choices against an export's `export_info.json`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from common.errors import UserError


def check_export_options(beam_sizes: Sequence[int], default_beam_size: int,
                         max_decode_length: int, max_length_limit: int) -> tuple[int, ...]:
    """The sorted, unique beam sizes after checking them; `UserError` for a bad choice."""
    sizes = tuple(sorted(set(int(b) for b in beam_sizes)))
    if not sizes or sizes[0] < 1:
        raise UserError(f"beam sizes must be positive integers, got {list(sizes)}")
    if default_beam_size not in sizes:
        raise UserError(f"the default beam size {default_beam_size} is not among the "
                        f"exported ones {list(sizes)}")
    if not 1 <= max_decode_length <= max_length_limit:
        raise UserError(f"max decode length {max_decode_length}: expected 1.."
                        f"{max_length_limit} for this model")
    return sizes


def graph_checks(beam_size: Any, max_length: Any, beam_sizes: Sequence[int],
                 max_length_limit: int) -> list:
    """Assertions (for `tf.control_dependencies`) that fail the call with a clear
    `InvalidArgumentError` for a `max_length` out of range or a beam size not exported."""
    import tensorflow as tf

    message = f"max_length must be 1..{max_length_limit}"
    checks = [tf.debugging.assert_greater_equal(max_length, 1, message=message),
              tf.debugging.assert_less_equal(max_length, max_length_limit, message=message)]
    if not isinstance(beam_size, int):
        known = tf.reduce_any(tf.equal(tf.constant(beam_sizes, tf.int32), beam_size))
        checks.append(tf.debugging.Assert(known, [
            f"beam_size must be one of {list(beam_sizes)} (exported sizes); got", beam_size]))
    return checks


def dispatch(beam_size: Any, beam_sizes: Sequence[int], decode: Callable[[int], Any]) -> Any:
    """`decode(size)` for the exported size equal to `beam_size` (a Python int or a scalar
    int32 tensor; nested `tf.cond`s for a tensor, the last size when none matches)."""
    import tensorflow as tf

    if isinstance(beam_size, int):
        return decode(beam_size)
    if len(beam_sizes) == 1:
        return decode(beam_sizes[0])
    return tf.cond(tf.equal(beam_size, beam_sizes[0]),
                   lambda: decode(beam_sizes[0]),
                   lambda: dispatch(beam_size, beam_sizes[1:], decode))


def request_options(info: Mapping[str, Any], beam_size: int | None,
                    max_length: int | None) -> tuple[int, int]:
    """A client's `(beam_size, max_length)`, defaults filled from `export_info.json`; a
    `UserError` naming the exported choices otherwise."""
    sizes = list(info["beam_sizes"])
    beam_size = beam_size or int(info["default_beam_size"])
    if beam_size not in sizes:
        raise UserError(f"beam size {beam_size}: this export has beam sizes {sizes} "
                        "(choose at export time: --beam-sizes)")
    max_length = max_length or int(info["max_decode_length"])
    limit = int(info["max_length_limit"])
    if not 1 <= max_length <= limit:
        raise UserError(f"max decode length {max_length}: expected 1..{limit} for this model")
    return beam_size, max_length
