"""SentencePiece reads every character `str.split()` splits on as a space, in training and in
encoding (Python and graph alike), so no piece holds whitespace; its size errors name this
package's option."""

import pytest

from common.errors import UserError
from common.text import Vocabulary, tokenize_texts
from common.text.subwords import SubwordVocabulary, train_sentencepiece

# Every character Python calls whitespace (NEL U+0085, U+2028, NBSP, ...).
PYTHON_WHITESPACE = [chr(c) for c in range(0x110000) if chr(c).isspace()]
WORDS = ["the cat sat", "a dog ran", "we go home", "it is cold"] * 5


@pytest.fixture(scope="module")
def vocab():
    texts = WORDS + [f"wait{c} what{c}{c}now" for c in PYTHON_WHITESPACE] * 2
    return SubwordVocabulary(train_sentencepiece(texts, vocab_size=25))


def test_whitespace_is_what_str_split_splits_on():
    from common.text.subwords import WHITESPACE

    assert sorted(WHITESPACE) == PYTHON_WHITESPACE


def test_no_piece_holds_whitespace_after_training_on_every_kind(vocab):
    held = [piece for piece in vocab.tokens if piece != "".join(piece.split())]
    assert held == []
    Vocabulary(vocab.tokens)  # what a run does with them; raised for a "\x85" piece


@pytest.mark.parametrize("space", PYTHON_WHITESPACE, ids=lambda c: f"U+{ord(c):04X}")
def test_encoding_reads_whitespace_as_a_space(vocab, space):
    assert vocab.encode(f"wait{space}what") == vocab.encode("wait what")
    assert vocab.pieces(f"wait{space}what") == vocab.pieces("wait what")


def test_graph_encoding_matches_python_encoding(vocab):
    texts = [f"wait{c}what{c}" for c in PYTHON_WHITESPACE] + ["plain", "x\u200by"]
    assert vocab.encode_tf(texts).to_list() == [vocab.encode(t) for t in texts]


def test_words_and_subwords_split_at_the_same_whitespace(vocab):
    # The word tokenizer separates tokens at each of them too.
    texts = [f"wait{c}what" for c in PYTHON_WHITESPACE]
    assert tokenize_texts(texts) == [["wait", "what"]] * len(texts)
    assert {len(vocab.decode(vocab.encode(t)).split()) for t in texts} == {2}


def test_a_vocabulary_too_small_for_the_characters_names_the_size_needed():
    characters = len(set("".join(WORDS)))  # the space too
    with pytest.raises(UserError) as caught:
        train_sentencepiece(WORDS, vocab_size=6)
    message = str(caught.value)
    assert "character_coverage" not in message
    assert f"--vocab-size) of at least {characters + 4}" in message
    assert "\n" not in message


def test_a_vocabulary_too_large_for_the_text_names_the_most_it_can_have():
    with pytest.raises(UserError) as caught:
        train_sentencepiece(WORDS, vocab_size=4000)
    message = str(caught.value)
    assert "--vocab-size) of at most" in message
    assert "Please set it" not in message
