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


def test_the_bar_counts_sentences_as_chunks_finish_and_closes_when_stopped(monkeypatch):
    import types

    monkeypatch.setitem(__import__("sys").modules, "tqdm", types.SimpleNamespace(tqdm=_Bar))
    _Bar.made.clear()
    for _ in chunks(list(range(7)), 3, progress=True):
        assert not _Bar.made[0].closed
    assert (_Bar.made[0].total, _Bar.made[0].done, _Bar.made[0].closed) == (7, [3, 3, 1], True)
    stopped = chunks(list(range(7)), 3, progress=True)
    next(stopped)
    stopped.close()  # a caller that stops early (an error) still closes its bar
    assert (_Bar.made[1].done, _Bar.made[1].closed) == ([], True)
    assert list(chunks(list(range(7)), 3)) and len(_Bar.made) == 2  # no bar unless asked
