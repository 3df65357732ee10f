"""Copying source tokens: the pointer-generator's extended vocabulary and output distribution.

Paper: See, Liu and Manning, "Get To The Point: Summarization with Pointer-Generator
Networks", ACL 2017 (https://arxiv.org/abs/1704.04368), §2.2; the idea of copying through the
attention weights goes back to Vinyals et al. 2015 (pointer networks) and Gu et al. 2016.

A translator with copying ends each step with

    P(w) = p_gen · P_vocab(w) + (1 - p_gen) · Σ_{s : copy_id[s] = w} α_s

over an extended vocabulary of `V + S` ids: the `V` target-vocabulary ids, then one slot per
source position. `copy_ids (B, S)` says where each source token's attention goes:

- a source token that the target vocabulary holds adds its weight to that target id (so
  "Tom" attended to raises P("Tom") whether it is generated or copied);
- a source token that the target vocabulary lacks adds its weight to the slot `V + s0`, with
  `s0` its first position in the sentence (so repeated words share one slot);
- padding (id 0) never receives weight (its attention is zero).

Training targets use the same ids (`extend_target_ids`): a target token outside the target
vocabulary that appears in the source becomes `V + s0`, else `<unk>`. The decoder's input
embeds only the `V` real ids, so an extended id fed back becomes `<unk>` (`embeddable`).
Decoded ids `>= V` are mapped back to the source token they point to (`extended_words`). The same
ids are computed from strings in Python (`copy_ids`) and in TensorFlow (`copy_ids_tf`, used by
the exported SavedModel), so both give the same tokens.

Dimensions: `B` batch, `T` target steps, `S` source steps, `V` target vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from keras import ops

from common.text.specials import UNK_ID

if TYPE_CHECKING:  # the vocabulary is a tf.Module; the model code stays backend-agnostic
    from common.text import Vocabulary

# The smallest probability taken the log of: slots no source token points to get log(TINY)
# (about -69), finite, so that beam search never adds -inf.
TINY = 1e-30


def copy_ids(source_tokens: Sequence[str], target_vocab: Vocabulary) -> list[int]:
    """Where each source token's attention goes in the extended vocabulary (see module doc).

    Example:
    >>> vocab = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "Tom", "is"])
    >>> copy_ids(["Caecilius", "is", "Caecilius", "Tom"], vocab)
    [6, 5, 6, 4]
    """
    size = len(target_vocab)
    ids = target_vocab.encode(list(source_tokens))
    first: dict[str, int] = {}
    out = []
    for position, (token, token_id) in enumerate(zip(source_tokens, ids)):
        first.setdefault(token, position)
        out.append(size + first[token] if token_id == target_vocab.unk_id else token_id)
    return out


def extend_target_ids(
    target_tokens: Sequence[str], source_tokens: Sequence[str], target_vocab: Vocabulary
) -> list[int]:
    """Target ids over the extended vocabulary: an out-of-vocabulary target token that the
    source holds becomes `V + its first source position`; any other stays `<unk>`.

    Example:
    >>> vocab = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "Tom", "is"])
    >>> extend_target_ids(["Caecilius", "is", "Marcus"], ["Tom", "Caecilius"], vocab)
    [7, 5, 3]
    """
    size = len(target_vocab)
    first: dict[str, int] = {}
    for position, token in enumerate(source_tokens):
        first.setdefault(token, position)
    ids = target_vocab.encode(list(target_tokens))
    return [
        size + first[token] if token_id == target_vocab.unk_id and token in first else token_id
        for token, token_id in zip(target_tokens, ids)
    ]


def extended_words(
    ids: Sequence[int], source_tokens: Sequence[str], target_vocab: Vocabulary
) -> list[str]:
    """The tokens of extended ids: vocabulary tokens (specials kept), and for an id `>= V`
    the source token it points to (`<unk>` past the end of the source).

    Example:
    >>> vocab = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "Tom", "is"])
    >>> extended_words([4, 5, 7, 2], ["Tom", "Caecilius"], vocab)
    ['Tom', 'is', 'Caecilius', '<end>']
    """
    size = len(target_vocab)
    words = target_vocab.decode([target_vocab.unk_id if int(i) >= size else int(i) for i in ids],
                                strip_special=False)
    for t, token_id in enumerate(ids):
        position = int(token_id) - size
        if 0 <= position < len(source_tokens):
            words[t] = source_tokens[position]
    return words


def copy_ids_tf(source_tokens, target_vocab: Vocabulary):
    """`copy_ids` in TensorFlow: `source_tokens (B, S)` tf.string padded with "" -> `(B, S)`
    int32 (0 at padding). Runs inside SavedModels (the vocabulary's lookup table)."""
    import tensorflow as tf

    ids = target_vocab.encode_tf(source_tokens)
    same = tf.equal(source_tokens[:, :, None], source_tokens[:, None, :])  # (B, S, S)
    first = tf.argmax(tf.cast(same, tf.int32), axis=-1, output_type=tf.int32)  # first match
    extended = tf.where(tf.equal(ids, target_vocab.unk_id), len(target_vocab) + first, ids)
    return tf.where(tf.equal(source_tokens, ""), 0, extended)


def embeddable(tokens, vocab_size: int):
    """Extended ids `>= vocab_size` become `<unk>`, the id the decoder embeds for them."""
    return ops.where(ops.greater_equal(tokens, vocab_size), UNK_ID, tokens)


def pointer_generator_log_probs(vocab_logits, p_gen, alpha, source_copy):
    """The pointer-generator's log-probabilities over the extended vocabulary.

    Args:
        vocab_logits: `(B, T, V)` the generator's logits.
        p_gen: `(B, T)` the probability of generating, in [0, 1].
        alpha: `(B, T, S)` attention weights over the source (zero on padding).
        source_copy: `(B, S)` int the extended id of each source position (`copy_ids`).

    Returns:
        `(B, T, V + S)` float32 `log(max(P, TINY))`, `P` as in the module doc; each row of `P`
        sums to 1.
    """
    vocab_probs = ops.softmax(ops.cast(vocab_logits, "float32"), axis=-1)
    alpha = ops.cast(alpha, "float32")
    p_gen = ops.cast(p_gen, "float32")[..., None]
    source_len = ops.shape(alpha)[-1]
    size = ops.shape(vocab_probs)[-1] + source_len
    generated = ops.pad(vocab_probs, [[0, 0], [0, 0], [0, source_len]])
    # Σ_s α_s [copy_id[s] = w] as a product with the one-hot copy ids: (B, T, S) x (B, S, V+S).
    pointed = ops.matmul(alpha, ops.one_hot(ops.cast(source_copy, "int32"), size))
    return ops.log(ops.maximum(p_gen * generated + (1.0 - p_gen) * pointed, TINY))
