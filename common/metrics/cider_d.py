"""CIDEr-D with document frequencies from a fixed corpus: the reward of self-critical training.

Vedantam et al. (2015), "CIDEr: Consensus-based Image Description Evaluation", in the form
pycocoevalcap's `cider_scorer.py` computes it (CIDEr-D): for n = 1..4, every n-gram of a caption
is weighted by its count times `log(N) - log(max(1, df))`, where `df` is the number of images
whose references hold it and `N` the number of images; a candidate's score against one
reference is, per n, the sum over the candidate's n-grams of `min(c, r) * r` (the candidate's
weight clipped by the reference's) over the product of the two vectors' norms, times the
length penalty `exp(-delta**2 / (2 * sigma**2))`, sigma = 6. The score is the mean over n,
averaged over the image's references, times 10. As in pycocoevalcap, `delta` is the difference
of the two captions' numbers of bigrams (its `length` counts the n-grams of index 1), and a
vector of norm 0 scores 0.

pycocoevalcap's `Cider` takes `df` and `N` from the references of the images it is asked to
score. `CiderD` takes them from the corpus it is built from (the training references), as
`CiderD(df="coco-train-idxs")` does in ruotianluo/self-critical.pytorch, so a candidate's
reward does not depend on the other images of its batch. Built from the references of exactly
the images scored, it gives pycocoevalcap's per-caption scores (to 1e-6, tested).

Everything about the references is computed once, in `__init__`: every n-gram gets an integer
id (an n-gram is its (n-1)-gram prefix's id and its last word's id: one `int64` key, found by
`np.searchsorted`), with its document frequency; every reference its norms and length; and
every (image, n-gram) of the corpus its weights in the image's references. `scores` maps the
candidates' words to ids in Python (one dictionary look-up a word) and does the rest in a fixed
number of NumPy calls over the whole batch, whatever its size: the candidates' n-gram ids and
vectors, each n-gram looked up among its image's, and the clipped dot products with the
references that hold it (`docs/benchmarks.md` says where the time goes).

Text is tokenized as the captioner's validation CIDEr tokenizes it
(`common.metrics.caption_metrics.simple_tokenize`: lowercase, punctuation removed), a token
list being joined by spaces first; `tokenize=False` takes captions as already tokenized (a
string is split on white space, as pycocoevalcap does, a token list used as it is).

Dimensions: `B` candidates, `P` (candidate, reference) pairs, `E` n-gram entries.

Example:
>>> cider = CiderD({"a": ["a red circle", "a red circle above a square"],
...                 "b": ["a blue square"], "c": ["two shapes"]})
>>> cider.scores(["a red circle", "a blue square", "a red circle"], ["a", "b", "b"]).round(3)
array([5.893, 7.5  , 0.207])
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from common.errors import UserError
from common.metrics.caption_metrics import _SIMPLE_PUNCTUATION as _PUNCTUATION

Caption = str | Sequence[str]

# An n-gram's key: its prefix's id above these bits, its last word's id below (room for 2**32
# words and 2**31 n-grams of an order).
_WORD_BITS = 32


def _tokens(caption: Caption, tokenize: bool, what: str) -> list[str]:
    """The words of `caption` (a string or a sequence of strings): `simple_tokenize(caption)
    .split()` (without its join and split again) or, without `tokenize`, as given."""
    if isinstance(caption, str):
        return _PUNCTUATION.sub(" ", caption.lower()).split() if tokenize else caption.split()
    if isinstance(caption, Sequence) and all(isinstance(w, str) for w in caption):
        if tokenize:
            return _PUNCTUATION.sub(" ", " ".join(caption).lower()).split()
        return list(caption)
    raise UserError(f"{what} is a {type(caption).__name__}; expected a caption string or a "
                    "list of word strings")


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`, without the loop."""
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    return np.repeat(starts - ends + lengths, lengths) + np.arange(total)


class _NGrams:
    """The n-grams of a set of captions: one entry per n-gram occurrence.

    Attributes:
        owner: `(E,)` the caption each occurrence is in.
        ids: `(E,)` the n-gram's id (corpus ids first, then ids of n-grams the corpus lacks).
        order: `(E,)` its n, from 1.
    """

    def __init__(self, owner: np.ndarray, ids: np.ndarray, order: np.ndarray) -> None:
        self.owner, self.ids, self.order = owner, ids, order


def _ngrams(words: np.ndarray, lengths: np.ndarray, n: int,
            tables: list[np.ndarray] | None) -> tuple[_NGrams, list[np.ndarray]]:
    """Every 1..n-gram occurrence of the captions `words` (word ids, concatenated) of
    `lengths` words, with an id per distinct n-gram.

    An n-gram's key is its (n-1)-gram prefix's index in its order's table (the word's id for
    n = 1) shifted left by `_WORD_BITS`, or'ed with its last word's id. With `tables` (the
    corpus's sorted keys, one array per order), an n-gram found there gets its index plus the
    sizes of the lower orders' tables (its corpus id, below `G`, the tables' total size); the
    others get ids from `G` up, one per distinct n-gram. Without, the tables are made from
    these captions (the corpus), and returned.
    """
    owner = np.repeat(np.arange(len(lengths)), lengths)
    left = np.cumsum(lengths)[owner] - np.arange(len(words))  # words from here to the end
    offset, unseen = 0, sum(len(t) for t in tables or [])
    made: list[np.ndarray] = []
    owners, ids, orders = [], [], []
    at, local = np.arange(len(words)), words  # the k-grams' positions; their (k-1)-grams'
    for k in range(1, n + 1):
        if k > 1:
            keep = left[at] >= k
            at, prefix = at[keep], local[keep]
            keys = (prefix << _WORD_BITS) | words[at + k - 1]
        else:
            keys = words
        if tables is None:
            table, local = np.unique(keys, return_inverse=True)
            made.append(table)
            global_ids = local + offset
        else:
            table = tables[k - 1]
            local = np.searchsorted(table, keys)
            found = local < len(table)
            found[found] = table[local[found]] == keys[found]
            global_ids = local + offset
            if not found.all():
                new, inverse = np.unique(keys[~found], return_inverse=True)
                local[~found] = len(table) + inverse
                global_ids[~found] = unseen + inverse
                unseen += len(new)
        offset += len(table)
        owners.append(owner[at])
        ids.append(global_ids)
        orders.append(np.full(len(at), k, np.int8))
    cat = np.concatenate
    return _NGrams(cat(owners), cat(ids).astype(np.int64), cat(orders)), made


def _counts(grams: _NGrams, space: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct n-grams of each caption: `(keys, owner, ids, order, tf)`, sorted by
    `keys = owner * space + ids` (`space`: more than the largest id)."""
    keys = grams.owner.astype(np.int64) * space + grams.ids
    keys, first, tf = np.unique(keys, return_index=True, return_counts=True)
    return keys, keys // space, keys % space, grams.order[first], tf


class CiderD:
    """CIDEr-D against a fixed corpus of reference captions, for many candidates at once.

    Args:
        references: `{image_id: [caption, ...]}`, the corpus (the training references); each
            caption a string or a list of words, at least one per image (an empty caption is
            allowed, as pycocoevalcap allows it). The document frequencies are counted over
            these images, and `N` is their number.
        n: the longest n-gram (4).
        sigma: the length penalty's standard deviation (6.0).
        tokenize: tokenize as the captioner's validation does (`simple_tokenize`); False takes
            captions as already tokenized (see the module docstring).

    Raises:
        UserError: no images, an image without references, a caption that is not text, or
            `n` or `sigma` out of range.
    """

    def __init__(self, references: Mapping[Hashable, Sequence[Caption]], n: int = 4,
                 sigma: float = 6.0, tokenize: bool = True) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise UserError(f"n must be an integer >= 1, got {n!r}")
        if not sigma > 0:
            raise UserError(f"sigma must be > 0, got {sigma!r}")
        if not isinstance(references, Mapping) or not references:
            got = "none" if isinstance(references, Mapping) else type(references).__name__
            raise UserError("references: expected a non-empty {image_id: [caption, ...]} "
                            f"mapping, got {got}")
        self.n, self.sigma, self.tokenize = n, float(sigma), tokenize
        self._images = {image: index for index, image in enumerate(references)}
        per_image = []
        for image, captions in references.items():
            if isinstance(captions, str) or not isinstance(captions, Sequence) or not captions:
                raise UserError(f"image {image!r} has no list of reference captions; expected "
                                "at least one caption")
            per_image.append(len(captions))
        refs = [_tokens(c, tokenize, f"a reference of image {image!r}")
                for image, captions in references.items() for c in captions]
        self._vocabulary: dict[str, int] = {}
        for words in refs:
            for word in words:
                self._vocabulary.setdefault(word, len(self._vocabulary))
        words, lengths = self._word_ids(refs)
        grams, self._tables = _ngrams(words, lengths, n, None)
        self._size = sum(len(t) for t in self._tables)  # G: the corpus's distinct n-grams
        # Each reference's vector: its distinct n-grams (sorted by reference, then id).
        _, owner, ids, order, tf = _counts(grams, self._size)
        self._image_refs = np.concatenate([[0], np.cumsum(per_image)]).astype(np.int64)
        image = np.repeat(np.arange(len(per_image)), per_image)[owner]
        # The same entries by (image, n-gram), a reference's slot in its image last (a stable
        # sort keeps the reference order): `_union_keys` (image * G + id, sorted, distinct)
        # and, for each, its entries `_union_ptr[u]:_union_ptr[u + 1]`.
        keys = image * self._size + ids
        by_image = np.argsort(keys, kind="stable")
        keys = keys[by_image]
        first = np.ones(len(keys), bool)
        first[1:] = keys[1:] != keys[:-1]
        self._union_keys = keys[first]
        self._union_ptr = np.append(np.flatnonzero(first), len(keys)).astype(
            np.int32 if len(keys) < 2**31 else np.int64)
        # Document frequencies: the images whose references hold each n-gram.
        df = np.bincount(self._union_keys % self._size, minlength=self._size)
        self.log_n = math.log(float(len(per_image)))
        self._weight = self.log_n - np.log(np.maximum(1.0, df))
        self._df = df
        values = tf * self._weight[ids]  # tf * idf
        slot = owner - self._image_refs[image]
        self._slot = slot[by_image].astype(np.min_scalar_type(max(per_image)))
        self._values = values[by_image]
        self._ref_norms = self._norms(owner, order, values, len(refs))  # (R, n)
        self._ref_lengths = np.maximum(lengths - 1, 0)  # bigrams, as pycocoevalcap counts

    def __len__(self) -> int:
        """The number of images in the corpus."""
        return len(self._images)

    def document_frequency(self, ngram: Sequence[str]) -> int:
        """How many of the corpus's images have `ngram` (a tuple of words) in a reference."""
        ids = [self._vocabulary.get(w, -1) for w in ngram]
        if not 1 <= len(ids) <= self.n or min(ids) < 0:
            return 0
        index = ids[0]  # the 1-gram table holds every word id: its index is the id
        for k, word in enumerate(ids[1:], start=1):
            table = self._tables[k]
            key = (index << _WORD_BITS) | word
            index = int(np.searchsorted(table, key))
            if index >= len(table) or table[index] != key:
                return 0
        return int(self._df[index + sum(len(t) for t in self._tables[: len(ids) - 1])])

    def _word_ids(self, captions: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
        """The word ids of `captions`, concatenated, and each caption's length. A word the
        corpus lacks gets an id after the vocabulary's (one per distinct word)."""
        flat = list(itertools.chain.from_iterable(captions))
        ids = np.fromiter(map(self._vocabulary.get, flat, itertools.repeat(-1)), np.int64,
                          count=len(flat))
        missing = np.flatnonzero(ids < 0)
        if len(missing):
            unknown: dict[str, int] = {}
            size = len(self._vocabulary)
            ids[missing] = [unknown.setdefault(flat[i], size + len(unknown)) for i in missing]
        return ids, np.fromiter(map(len, captions), np.int64, count=len(captions))

    def _norms(self, owner: np.ndarray, order: np.ndarray, values: np.ndarray,
               count: int) -> np.ndarray:
        """`(count, n)`: each caption's vector norm per order."""
        squares = np.bincount(owner * self.n + order.astype(np.int64) - 1, weights=values**2,
                              minlength=count * self.n)
        return np.sqrt(squares).reshape(count, self.n)

    def _candidates(self, words: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
        """The vectors of the candidates of word ids `words` (concatenated; `_word_ids`) and
        `lengths` `(B,)`: their distinct n-grams (`owner`, `ids`, `order`, `values`: tf * idf),
        norms `(B, n)` and lengths in bigrams `(B,)`."""
        grams, _ = _ngrams(words, lengths, self.n, self._tables)
        space = int(grams.ids.max(initial=0)) + 1  # past every id
        _, owner, ids, order, tf = _counts(grams, space)
        seen = ids < self._size
        weight = np.full(len(ids), self.log_n)  # an n-gram no image has: df 0, idf log N
        weight[seen] = self._weight[ids[seen]]
        values = tf * weight
        return {"owner": owner, "ids": ids, "order": order.astype(np.int64), "values": values,
                "norms": self._norms(owner, order, values, len(lengths)),
                "lengths": np.maximum(lengths - 1, 0)}

    def _images_of(self, image_ids: Sequence[Hashable], count: int) -> np.ndarray:
        if len(image_ids) != count:
            raise UserError(f"{count} candidates but {len(image_ids)} image ids; expected one "
                            "image id per candidate")
        try:
            return np.fromiter((self._images[i] for i in image_ids), np.int64, count=count)
        except (KeyError, TypeError):
            bad = next(i for i in image_ids if not _hashable_in(i, self._images))
            raise UserError(f"image id {bad!r} is not in the corpus; expected one of the "
                            f"{len(self._images)} images CiderD was built from") from None

    def _similarity(self, cand: dict[str, np.ndarray], images: np.ndarray) -> np.ndarray:
        """`(B,)` CIDEr-D of the candidates `cand` (`_candidates`) against the references of
        `images`."""
        count = len(images)
        per_image = self._image_refs[images + 1] - self._image_refs[images]
        pair_cand = np.repeat(np.arange(count), per_image)  # (P,)
        pair_ref = _ranges(self._image_refs[images], per_image)
        first_pair = np.cumsum(per_image) - per_image  # (B,)
        # Each candidate n-gram the corpus has, looked up among its image's (image, n-gram)s.
        seen = np.flatnonzero(cand["ids"] < self._size)
        keys = images[cand["owner"][seen]] * self._size + cand["ids"][seen]
        at = np.searchsorted(self._union_keys, keys)
        hit = at < len(self._union_keys)
        hit[hit] = self._union_keys[at[hit]] == keys[hit]
        start, stop = self._union_ptr[at[hit]], self._union_ptr[at[hit] + 1]
        matched = _ranges(start, stop - start)  # (E,) reference entries of those n-grams
        mine = np.repeat(seen[hit], stop - start)  # (E,) the candidate n-gram of each
        theirs = self._values[matched]
        clipped = np.minimum(cand["values"][mine], theirs) * theirs  # pycocoevalcap's clipping
        pair = first_pair[cand["owner"][mine]] + self._slot[matched]
        dots = np.bincount(pair * self.n + cand["order"][mine] - 1, weights=clipped,
                           minlength=len(pair_ref) * self.n)
        dots = dots.reshape(len(pair_ref), self.n).astype(np.float64)  # empty: int64
        norms = cand["norms"][pair_cand] * self._ref_norms[pair_ref]
        cosine = np.divide(dots, norms, out=dots.copy(), where=norms != 0)
        delta = (cand["lengths"][pair_cand] - self._ref_lengths[pair_ref]).astype(np.float64)
        penalty = np.exp(-(delta**2) / (2 * self.sigma**2))
        total = np.bincount(pair_cand, weights=cosine.mean(axis=1) * penalty, minlength=count)
        return 10.0 * total / np.maximum(per_image, 1)

    def scores(self, candidates: Sequence[Caption], image_ids: Sequence[Hashable]
               ) -> np.ndarray:
        """CIDEr-D of each candidate against its image's references (pycocoevalcap's scale).

        Args:
            candidates: `B` captions, each a string or a list of words.
            image_ids: `B` image ids of the corpus, one per candidate; an image may come
                several times (SCST: K samples and the greedy caption of each image).

        Returns:
            `(B,)` float64 scores.

        Raises:
            UserError: the two lengths differ, an image id is not in the corpus, or a
                candidate is not text.
        """
        if isinstance(candidates, str):
            raise UserError("candidates is one string; expected a list of captions, one per "
                            "image id")
        images = self._images_of(image_ids, len(candidates))
        if not len(images):
            return np.zeros(0)
        captions = [_tokens(c, self.tokenize, f"candidate {i}") for i, c in enumerate(candidates)]
        return self._similarity(self._candidates(*self._word_ids(captions)), images)


def _hashable_in(key: object, mapping: Mapping) -> bool:
    try:
        return key in mapping
    except TypeError:
        return False
