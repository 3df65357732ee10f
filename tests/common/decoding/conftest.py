"""Toy step functions for the decoding tests, each with an independent NumPy reference, in
`keras.ops` (the tests run on TensorFlow and on JAX).

Tokens: 0 `<pad>`, 1 `<start>`, 2 `<end>`, the rest words. No search emits `<pad>` or `<start>`,
so the references never do either (their scores are still the plain log-softmax). Three toys:

- `MarkovToy`: logits = W[example, previous token] + E[index]. The next-token distribution
  depends only on the previous token and the position, so every sequence's score can be
  computed in NumPy, the best ones found by brute force, and a plain-Python beam search
  (`reference_beam_search`) run over it.
- `HistoryToy`: the state is a nested dict `{"history": (N, T), "inner": {"hash": (N,)}}`.
  Logits depend on a hash of the whole path, and the step returns the token history itself as
  its attention, so a state that is not re-ordered with its hypothesis changes the scores, and
  the returned attention must spell out the returned tokens.
- `TableToy`: next-token probabilities written by hand, `{previous: {token: p}}` per example,
  for tests whose expected result is worked out in a comment. Its attention is the one-hot of
  the token fed, so attention row `t` of a hypothesis must name its token `t - 1`.
"""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
from keras import ops

# Graphs, XLA through `jit_compile` and SavedModels: TensorFlow's alone. Everything else here
# runs on either backend (`tests/jax/test_backend_neutral.py` runs it on JAX).
collect_ignore = ([] if keras.backend.backend() == "tensorflow"
                  else ["test_decoding_graph.py", "test_beam_size_as_tensor.py"])

PAD, START, END = 0, 1, 2
PRIME = 97
EMITTED_FROM = 2  # the first token id a search may emit: <end>, then the words
IMPOSSIBLE = -1e9  # the logit of a token a TableToy row leaves out


def concrete(value) -> int | None:
    """`value` as an int when it has one now (an eager tensor), None while it is traced."""
    try:
        return int(value)
    except Exception:
        return None


def record_step(calls: list, index) -> None:
    """Appends the step `index` a search runs to `calls`, as it runs: now when it is eager; on
    JAX, whose loops are always traced, when the compiled loop runs it (a debug callback);
    None where a TensorFlow graph traces it."""
    value = concrete(index)
    if value is None and keras.backend.backend() == "jax":
        import jax

        jax.debug.callback(lambda i: calls.append(int(i)), index, ordered=True)
        return
    calls.append(value)


def np_log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def gnmt_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


def repeats_ngram(tokens, token: int, n: int) -> bool:
    """Whether `token` after `tokens` completes an n-gram already in `tokens` (the rule of
    `no_repeat_ngram`: 0 bans nothing, and `<end>` is never banned)."""
    if n == 0 or token == END:
        return False
    sequence = [*tokens, token]
    last = sequence[-n:]
    return len(sequence) >= n and any(
        sequence[i : i + n] == last for i in range(len(sequence) - n)
    )


def has_repeated_ngram(tokens, n: int) -> bool:
    """Whether some n-gram of `tokens` occurs twice (`<end>` included in none)."""
    return any(repeats_ngram(tokens[:i], tokens[i], n) for i in range(len(tokens)))


class MarkovToy:
    """logits (N, V) = W[example, previous token] + E[index] + bias[example]."""

    def __init__(
        self,
        vocab: int,
        max_length: int,
        examples: int = 1,
        seed: int = 0,
        scale: float = 1.5,
        bias: np.ndarray | None = None,
    ):
        rng = np.random.default_rng(seed)
        self.vocab, self.max_length, self.examples = vocab, max_length, examples
        self.W = (rng.normal(size=(examples, vocab, vocab)) * scale).astype(np.float32)
        self.E = (rng.normal(size=(max_length, vocab)) * 0.5).astype(np.float32)
        self.bias = np.zeros((examples, vocab), np.float32) if bias is None else bias

    def initial_state(self) -> dict:
        return {"example": ops.arange(self.examples, dtype="int32"),
                "bias": ops.convert_to_tensor(self.bias)}

    def step(self, tokens, state, index):
        table = ops.reshape(ops.convert_to_tensor(self.W), (-1, self.vocab))
        logits = ops.take(table, state["example"] * self.vocab + tokens, axis=0)
        logits = logits + ops.take(ops.convert_to_tensor(self.E), index, axis=0)[None]
        return logits + state["bias"], state, ops.zeros((ops.shape(tokens)[0], 0))

    def log_probs(self, example: int, previous: int, index: int) -> np.ndarray:
        return np_log_softmax(self.W[example, previous] + self.E[index] + self.bias[example])

    def greedy(self, example: int, no_repeat_ngram: int = 0) -> tuple[list[int], float, bool]:
        """A plain greedy loop over the tokens a search may emit, none that `repeats_ngram`
        bans: (tokens, score, finished)."""
        tokens, score, previous = [], 0.0, START
        for index in range(self.max_length):
            lp = self.log_probs(example, previous, index)
            allowed = [t for t in range(EMITTED_FROM, self.vocab)
                       if not repeats_ngram(tokens, t, no_repeat_ngram)]
            previous = max(allowed, key=lambda t: lp[t])
            tokens.append(previous)
            score += lp[previous]
            if previous == END:
                return tokens, score, True
        return tokens, score, False

    def all_sequences(self, example: int, alpha: float, no_repeat_ngram: int = 0) -> list[tuple]:
        """Every hypothesis up to max_length (none with a repeated n-gram, for
        `no_repeat_ngram` n), best first: (normalized, score, tokens, finished)."""
        found = []
        for length in range(1, self.max_length + 1):
            for seq in itertools.product(range(EMITTED_FROM, self.vocab), repeat=length):
                if END in seq[:-1] or has_repeated_ngram(list(seq), no_repeat_ngram):
                    continue
                finished = seq[-1] == END
                if not finished and length < self.max_length:
                    continue
                score, previous = 0.0, START
                for index, token in enumerate(seq):
                    score += self.log_probs(example, previous, index)[token]
                    previous = token
                found.append((score / gnmt_penalty(length, alpha), score, list(seq), finished))
        return sorted(found, key=lambda item: -item[0])

    def n_best(self, example: int, alpha: float, n: int, no_repeat_ngram: int = 0) -> list[tuple]:
        """What beam search with every hypothesis in its beam returns: the finished ones best
        first, then the unfinished ones best first, `n` in all (fewer when fewer exist)."""
        found = self.all_sequences(example, alpha, no_repeat_ngram)
        return ([item for item in found if item[3]] + [item for item in found if not item[3]])[:n]

    def beam(self, example: int, beam_size: int, alpha: float, n: int, **kwargs) -> list[tuple]:
        """`reference_beam_search` over this toy's example: (normalized, score, tokens, finished)."""
        return reference_beam_search(
            lambda previous, index: self.log_probs(example, previous, index),
            self.vocab, self.max_length, beam_size, alpha, n, **kwargs,
        )


def reference_beam_search(
    log_probs, vocab: int, max_length: int, beam_size: int, alpha: float, n_best: int,
    end_ranks: int | None = None, no_repeat_ngram: int = 0,
) -> list[tuple]:
    """A plain-Python beam search, run for all `max_length` steps: (normalized, score, tokens,
    finished) of its answer, `n_best` in all, as `MarkovToy.n_best` gives them.

    `log_probs(previous, index)` gives the `(V,)` next-token log-probabilities. Each step ranks
    every extension of the alive hypotheses by score and takes the `2K` best; those that end and
    rank below `end_ranks` (default `2K`, tensor2tensor's rule; `K` is fairseq's) are finished,
    the `K` best that do not end stay alive. The answer: the finished ones best first by
    normalized score, then the alive ones. There is no early stop, so a search that stops early
    must lose nothing by it.

    With `no_repeat_ngram` n, an extension that `repeats_ngram` bans scores `IMPOSSIBLE` more:
    it is ranked below every allowed one (and, ending, never finishes), as the search masks it;
    such fillers only fill the answer's slots that no allowed hypothesis reaches.
    """
    end_ranks = 2 * beam_size if end_ranks is None else end_ranks
    alive, finished = [((), 0.0)], []
    for index in range(max_length):
        candidates = []
        for tokens, score in alive:
            row = log_probs(tokens[-1] if tokens else START, index)
            candidates += [
                (tokens + (t,), score + row[t]
                 + (IMPOSSIBLE if repeats_ngram(list(tokens), t, no_repeat_ngram) else 0.0))
                for t in range(EMITTED_FROM, vocab)
            ]
        top = sorted(candidates, key=lambda item: -item[1])[: 2 * beam_size]
        for rank, (tokens, score) in enumerate(top):
            if tokens[-1] == END and rank < end_ranks and score > IMPOSSIBLE / 2:
                finished.append((score / gnmt_penalty(len(tokens), alpha), score, list(tokens), True))
        alive = [item for item in top if item[0][-1] != END][:beam_size]
    unfinished = [(s / gnmt_penalty(max_length, alpha), s, list(t), False) for t, s in alive]
    return (sorted(finished, key=lambda item: -item[0]) + unfinished)[:n_best]


class TableToy:
    """Hand-written next-token probabilities; `tables[b][previous] = {token: probability}`.

    A row may leave tokens out (probability 0, logit -1e9); a missing row means the token is
    never fed. Attention `(N, V)` is the one-hot of the token fed. `calls` records the index of
    every step run (eagerly; None where the step is traced, as JAX's loops always are).
    """

    def __init__(self, vocab: int, *tables: dict[int, dict[int, float]]):
        self.vocab, self.calls = vocab, []
        self.logits = np.full((len(tables), vocab, vocab), IMPOSSIBLE, np.float32)
        for b, table in enumerate(tables):
            for previous, row in table.items():
                assert abs(sum(row.values()) - 1) < 1e-6, (previous, row)
                for token, p in row.items():
                    self.logits[b, previous, token] = np.log(p)

    def initial_state(self) -> dict:
        return {"example": ops.arange(len(self.logits), dtype="int32")}

    def step(self, tokens, state, index):
        record_step(self.calls, index)
        table = ops.reshape(ops.convert_to_tensor(self.logits), (-1, self.vocab))
        logits = ops.take(table, state["example"] * self.vocab + tokens, axis=0)
        return logits, state, ops.one_hot(tokens, self.vocab)


def check_table_attention(toy: TableToy, out) -> None:
    """Attention row t of every returned hypothesis is the one-hot of the token fed at t."""
    tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
    for b in range(tokens.shape[0]):
        for k in range(tokens.shape[1]):
            fed = [START, *tokens[b, k, : lengths[b, k] - 1]]
            expected = np.zeros((tokens.shape[2], toy.vocab), np.float32)
            expected[np.arange(len(fed)), fed] = 1.0
            np.testing.assert_array_equal(np.asarray(out.attention)[b, k], expected)


class HistoryToy:
    """State `{"history": (N, T) int32, "inner": {"hash": (N,) int32}}`; attention = history."""

    def __init__(self, vocab: int, max_length: int, examples: int = 1, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.vocab, self.max_length, self.examples = vocab, max_length, examples
        self.W = (rng.normal(size=(PRIME, vocab)) * 2.0).astype(np.float32)

    def initial_state(self) -> dict:
        return {
            "history": ops.zeros((self.examples, self.max_length), "int32"),
            "inner": {"hash": ops.arange(self.examples, dtype="int32") * 13 + 5},
        }

    def step(self, tokens, state, index):
        new_hash = (state["inner"]["hash"] * 31 + tokens + 7) % PRIME
        column = ops.cast(ops.arange(self.max_length) == index, "int32")[None]
        history = state["history"] * (1 - column) + tokens[:, None] * column
        logits = ops.take(ops.convert_to_tensor(self.W), new_hash, axis=0)
        new_state = {"history": history, "inner": {"hash": new_hash}}
        return logits, new_state, ops.cast(history, "float32")

    def replay(self, example: int, tokens: np.ndarray, length: int) -> tuple[float, np.ndarray]:
        """Runs the toy in NumPy along `tokens[:length]`: (score, attention (T, T))."""
        hash_, history, previous, score = example * 13 + 5, np.zeros(self.max_length), START, 0.0
        attention = np.zeros((self.max_length, self.max_length), np.float32)
        for index in range(length):
            hash_ = (hash_ * 31 + previous + 7) % PRIME
            history[index] = previous
            attention[index] = history
            score += np_log_softmax(self.W[hash_])[tokens[index]]
            previous = tokens[index]
        return score, attention


def check_against_replay(toy: HistoryToy, out) -> None:
    """Every returned hypothesis: score, attention and padding agree with a NumPy replay."""
    tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
    for b in range(tokens.shape[0]):
        for k in range(tokens.shape[1]):
            length = lengths[b, k]
            assert length >= 1
            score, attention = toy.replay(b, tokens[b, k], length)
            np.testing.assert_allclose(np.asarray(out.scores)[b, k], score, rtol=1e-4, atol=1e-4)
            np.testing.assert_array_equal(np.asarray(out.attention)[b, k], attention)
            assert (tokens[b, k, length:] == PAD).all()
            assert np.asarray(out.finished)[b, k] == (tokens[b, k, length - 1] == END)
            assert END not in tokens[b, k, : length - 1]
            assert not np.isin(tokens[b, k, :length], [PAD, START]).any()


@pytest.fixture
def toys():
    """The toy classes and helpers, for tests (conftest modules are not importable)."""
    return type(
        "Toys",
        (),
        {
            "MarkovToy": MarkovToy,
            "HistoryToy": HistoryToy,
            "TableToy": TableToy,
            "check_against_replay": staticmethod(check_against_replay),
            "check_table_attention": staticmethod(check_table_attention),
            "record_step": staticmethod(record_step),
            "gnmt_penalty": staticmethod(gnmt_penalty),
            "repeats_ngram": staticmethod(repeats_ngram),
            "has_repeated_ngram": staticmethod(has_repeated_ngram),
            "reference_beam_search": staticmethod(reference_beam_search),
            "np_log_softmax": staticmethod(np_log_softmax),
            "PAD": PAD,
            "START": START,
            "END": END,
        },
    )
