"""`seq2seq.inference.chunks`: the batches every translator (run directory, SavedModel,
CTranslate2) decodes in, and their progress bar."""

import pytest

from seq2seq.inference import chunks


@pytest.mark.parametrize("count, size", [(0, 4), (3, 4), (8, 4), (9, 4), (5, 1)])
def test_chunks_cover_the_indices_in_order(count, size):
    indices = list(range(10, 10 + count))
    got = list(chunks(indices, size))
    assert [i for chunk in got for i in chunk] == indices
    assert all(len(chunk) == size for chunk in got[:-1])
    assert all(0 < len(chunk) <= size for chunk in got)


class _Bar:
    made: list["_Bar"] = []

    def __init__(self, total, **_):
        self.total, self.done, self.closed = total, [], False
        _Bar.made.append(self)

    def update(self, n):
        self.done.append(n)

    def close(self):
        self.closed = True


def test_with_lengths_the_longest_go_first_ties_in_order():
    lengths = [3, 9, 1, 9, 4, 3]
    got = list(chunks([0, 1, 2, 3, 4, 5], 4, lengths=lengths))
    assert got == [[1, 3, 4, 0], [5, 2]]
    assert list(chunks([0, 2, 5], 2, lengths=lengths)) == [[0, 5], [2]]  # only those given


def test_the_bar_counts_sentences_as_chunks_finish_and_closes_when_stopped(monkeypatch):
    from common import progress

    monkeypatch.setattr(progress, "progress_bar", lambda total, *_, **__: _Bar(total))
    _Bar.made.clear()
    for _ in chunks(list(range(7)), 3, progress=True):
        assert not _Bar.made[0].closed
    assert (_Bar.made[0].total, _Bar.made[0].done, _Bar.made[0].closed) == (7, [3, 3, 1], True)
    stopped = chunks(list(range(7)), 3, progress=True)
    next(stopped)
    stopped.close()  # a caller that stops early (an error) still closes its bar
    assert (_Bar.made[1].done, _Bar.made[1].closed) == ([], True)
    assert list(chunks(list(range(7)), 3)) and len(_Bar.made) == 2  # no bar unless asked
