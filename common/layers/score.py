"""The attention score interface, its registry and `get_score`.

Dimensions: `B` batch, `T` target (query) steps, `S` source (key) steps, `Dq` query features,
`Dk` key features.

A score maps queries and keys to unnormalised logits `(B, T, S)`. Work that depends only on the
keys is split out into `project_keys`, so that a step-by-step decoder projects its source once
and scores each new query against the projected keys.
"""

from __future__ import annotations

from typing import Any

import keras

from common.catalog import SCORES  # noqa: F401  (declared there, registered here)
from common.errors import UserError


class Score(keras.layers.Layer):
    """Base class of the attention scores: `call(query, keys) -> logits (B, T, S)`.

    Subclasses override `score` and, when some work depends only on the keys, `project_keys`.
    Weights are created lazily by `project_keys` / `score` the first time they run, or all at
    once by `build(query_shape, keys_shape)`, so a decoder may use a score without `__call__`.

    Call arguments:
        query: `(B, T, Dq)` queries (decoder states).
        keys: `(B, S, Dk)` keys (encoder states or image regions).

    Returns:
        logits: `(B, T, S)` unnormalised attention logits.
    """

    def build(self, query_shape, keys_shape):
        self.built = True

    def project_keys(self, keys):
        """`(B, S, Dk)` keys -> projected keys; run once per source. Identity by default."""
        return keys

    def score(self, query, projected_keys):
        """`(B, T, Dq)` queries and projected keys -> `(B, T, S)` logits."""
        raise NotImplementedError

    @property
    def query_kernel(self):
        """The kernel of a linear, bias-free map the score applies to the query first, or None.

        A decoder may then apply it itself (fused with its other matrices of the same input)
        and call `score_projected`; `score(q, k) == score_projected(q @ query_kernel, k)`.
        """
        return None

    def score_projected(self, projected_query, projected_keys):
        """`score` for a query already multiplied by `query_kernel` (the same as `score` when
        there is none)."""
        return self.score(projected_query, projected_keys)

    def call(self, query, keys):
        return self.score(query, self.project_keys(keys))

    def compute_output_shape(self, query_shape, keys_shape):
        return (query_shape[0], query_shape[1], keys_shape[1])

    def _build_on_first_use(self, query, projected_keys):
        """Builds on first use when the score is used without `__call__`."""
        if not self.built:
            self.build(tuple(query.shape), tuple(projected_keys.shape))

    def _check_same_size(self, query_shape, keys_shape):
        """Scores that compare queries with keys directly need `Dq == Dk`."""
        query_dim, key_dim = query_shape[-1], keys_shape[-1]
        if query_dim is not None and key_dim is not None and query_dim != key_dim:
            raise UserError(
                f"the {self.registered_score_name()!r} attention score needs queries and keys "
                f"of the same size; received query size {query_dim} and key size {key_dim} "
                "(use 'general' or 'additive' for different sizes)"
            )

    @classmethod
    def registered_score_name(cls) -> str:
        for name in SCORES:
            if SCORES.get(name) is cls:
                return name
        return cls.__name__


def get_score(name: str, **kwargs: Any) -> Score:
    """Builds the attention score registered as `name` (see `SCORES.names()`).

    Args:
        name: one of `additive`, `dot`, `scaled_dot`, `general`, `cosine`, `location`.
        **kwargs: the score's own arguments (`units` for additive, `max_positions` for
            location) and base layer arguments such as `name` and `dtype`.

    Returns:
        A `Score` layer.

    Raises:
        UnknownNameError: `name` is not registered; the message lists the valid names.

    Example:
    >>> score = get_score("additive", units=16)
    >>> score(np.ones((2, 3, 8)), np.ones((2, 5, 4))).shape
    (2, 3, 5)
    """
    return SCORES.get(name)(**kwargs)
