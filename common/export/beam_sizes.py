"""Beam size, maximum length and n-best as inputs of an exported signature, for both families.

An export compiles two searches whatever its `beam_sizes`: greedy decoding for size 1 and
one beam search taking the beam size and `n_best` as tensors for the others; `dispatch` picks
one at run time with a `tf.cond` (`decode(1)` and `decode(size)`). `max_length` is a tensor,
the output width. `dispatch_n_best` adds the `n_best` input, the hypotheses the search keeps.
`check_export_options` validates the choices at export time, `graph_checks` the inputs of each
call, `request_options` a client's choices against an export's `export_info.json`,
`check_n_best` an n-best request against the beam size (in-process runs use it too), and
`check_decoding_options` a command line's `--beam-size` and `--n-best` before any model loads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from common.errors import UserError

#: Beam search fills the n-best slots it has no distinct hypothesis for with ones scored about
#: -1e9 (`common.decoding.beam`); hypotheses scored at or below this are left out.
UNFILLED_SCORE = -1e8


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
                 max_length_limit: int, n_best: Any = None, no_repeat_ngram: Any = None) -> list:
    """Assertions (for `tf.control_dependencies`) that fail the call with a clear
    `InvalidArgumentError` for a `max_length` out of range, a beam size not exported, an
    `n_best` outside 1..beam_size or a negative `no_repeat_ngram`. Each message is one
    `tf.debugging.Assert` string, which `common.serving` returns alone (without TensorFlow's
    "assertion failed" wrapper)."""
    import tensorflow as tf

    def check(condition, template, *values):
        return tf.debugging.Assert(condition, [tf.strings.format(template, values)])

    checks = [check((max_length >= 1) & (max_length <= max_length_limit),
                    f"max_length must be 1..{max_length_limit}; got {{}}", max_length)]
    if not isinstance(beam_size, int):
        known = tf.reduce_any(tf.equal(tf.constant(beam_sizes, tf.int32), beam_size))
        checks.append(check(known, f"beam_size must be one of {list(beam_sizes)} (the "
                            "exported sizes); got {}", beam_size))
    if n_best is not None:
        checks.append(check((n_best >= 1) & (n_best <= beam_size),
                            "n_best must be 1..beam_size ({}); got {}", beam_size, n_best))
    if no_repeat_ngram is not None:
        checks.append(check(no_repeat_ngram >= 0,
                            "no_repeat_ngram must be >= 0 (0: off); got {}", no_repeat_ngram))
    return checks


def dispatch(beam_size: Any, beam_sizes: Sequence[int], decode: Callable[[Any], Any]) -> Any:
    """`decode(size)` for `beam_size` (a Python int or a scalar int32 tensor): greedy's
    `decode(1)` and one search for every exported size above 1, `decode(beam_size)` with the
    size as a tensor (a Python int when only one size is above 1), a `tf.cond` between them."""
    import tensorflow as tf

    if isinstance(beam_size, int):
        return decode(beam_size)
    wider = [size for size in beam_sizes if size > 1]
    if not wider:
        return decode(1)
    beam = (lambda: decode(wider[0])) if len(wider) == 1 else (lambda: decode(beam_size))
    if 1 not in beam_sizes:
        return beam()
    return tf.cond(tf.equal(beam_size, 1), lambda: decode(1), beam)


def dispatch_n_best(beam_size: Any, n_best: Any, beam_sizes: Sequence[int],
                    decode: Callable[[Any, Any], Any]) -> Any:
    """`decode(size, k)` (a nest of tensors `(B, k, ...)`, best first) for `size = beam_size`
    and `k = n_best`, through `dispatch`: one beam search keeping `n_best` hypotheses serves
    every size above 1 and every `n_best` (a search keeping one may stop as soon as the best
    hypothesis is certain; one keeping N waits for N), greedy decoding size 1.

    Exports before issue 39 compiled two searches per size (keeping 1 and keeping `size`, cut
    to `n_best`): nine for sizes 1-5, which made loading an export and its first call several
    times slower than the run directory's command.
    """
    return dispatch(beam_size, beam_sizes,
                    lambda size: decode(size, 1 if isinstance(size, int) and size == 1
                                        else n_best))


def check_n_best(n_best: int | None, beam_size: int) -> None:
    """A `UserError` unless `n_best` is None or 1..`beam_size` (a beam keeps no more)."""
    if n_best is None:
        return
    if n_best < 1:
        raise UserError(f"n-best {n_best}: expected a positive number of hypotheses")
    if n_best > beam_size:
        raise UserError(f"n-best {n_best} is more than the beam size {beam_size}; expected "
                        "at most the beam size, the hypotheses a beam keeps (or a larger "
                        "beam size)")


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


def check_decoding_options(beam_size: int, n_best: int | None,
                           info: Mapping[str, Any] | None = None) -> None:
    """A command line's `--beam-size` and `--n-best`, checked before its model loads (an
    export takes seconds to load; its `export_info.json` says what it takes): a one-line
    `UserError` naming the option that would do.

    Args:
        beam_size: the beam the command decodes with (its `--beam-size`, or the default).
        n_best: `--n-best` (None: not asked).
        info: an export's `export_info.json` (its `beam_sizes`); None for a run directory,
            which decodes with any beam size.

    Example:
    >>> check_decoding_options(1, 3, {"beam_sizes": [1, 2, 3, 4, 5]})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    common.errors.UserError: --n-best 3 needs a beam of at least 3 (got 1): add --beam-size 3 ...
    """
    sizes = sorted(int(b) for b in (info or {}).get("beam_sizes", ()))
    listed = f"this export has beam sizes {', '.join(map(str, sizes))}"
    if sizes and beam_size not in sizes:
        raise UserError(f"--beam-size {beam_size}: {listed} (chosen at export time: `export "
                        "--beam-sizes`)")
    if not n_best or n_best <= beam_size:
        return
    wide = [size for size in sizes if size >= n_best] if sizes else [n_best]
    if wide:
        raise UserError(f"--n-best {n_best} needs a beam of at least {n_best} (got "
                        f"{beam_size}): add --beam-size {wide[0]}"
                        + (f" ({listed})" if sizes else ""))
    raise UserError(f"--n-best {n_best} needs a beam of at least {n_best}; {listed}: ask for "
                    f"--n-best {sizes[-1]} or fewer, or export the run again with `--beam-sizes` "
                    f"up to {n_best}")
