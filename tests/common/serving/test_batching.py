"""The batcher merges concurrent jobs, keeps different keys apart, and isolates bad jobs."""

import asyncio
import threading

import numpy as np
import pytest

from common.errors import UserError
from common.serving.batching import Batcher


class Recorder:
    """A fake model: y = x * 10 (+ offset from context); fails on any negative x."""

    def __init__(self):
        self.batches = []
        self.threads = set()

    def __call__(self, context, inputs):
        self.threads.add(threading.get_ident())
        x = inputs["x"]
        self.batches.append(x.tolist())
        if (x < 0).any():
            raise UserError(f"negative input in {x.tolist()}")
        return {"y": x * 10 + context}


async def _submit_all(batcher, specs):
    """Submit (values, key, context) jobs at once; results or exceptions, in order."""
    batcher.start()
    try:
        tasks = [
            batcher.submit({"x": np.array(v)}, size=len(v), key=k, context=c) for v, k, c in specs
        ]
        return await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await batcher.stop()


def test_concurrent_jobs_share_one_call_and_get_their_own_rows():
    run = Recorder()
    batcher = Batcher(run, max_batch_size=16, batch_timeout_ms=50)
    specs = [([1, 2], "k", 0), ([3], "k", 0), ([4, 5, 6], "k", 0)]
    results = asyncio.run(_submit_all(batcher, specs))
    assert [r["y"].tolist() for r in results] == [[10, 20], [30], [40, 50, 60]]
    assert run.batches == [[1, 2, 3, 4, 5, 6]]
    assert batcher.stats.calls == 1 and batcher.stats.merged_calls == 1
    assert threading.get_ident() not in run.threads  # the model ran off the event loop


def test_different_keys_and_unmergeable_jobs_run_separately():
    run = Recorder()
    batcher = Batcher(run, max_batch_size=16, batch_timeout_ms=50)
    specs = [([1], "a", 0), ([2], "b", 100), ([3], "a", 0), ([4], None, 0), ([5], None, 0)]
    results = asyncio.run(_submit_all(batcher, specs))
    assert [r["y"].tolist() for r in results] == [[10], [120], [30], [40], [50]]
    assert sorted(map(sorted, run.batches)) == [[1, 3], [2], [4], [5]]


def test_max_batch_size_is_respected():
    run = Recorder()
    batcher = Batcher(run, max_batch_size=3, batch_timeout_ms=50)
    specs = [([i], "k", 0) for i in range(7)] + [([7, 8, 9, 10], "k", 0)]
    results = asyncio.run(_submit_all(batcher, specs))
    assert [r["y"].tolist() for r in results] == [[10 * i] for i in range(7)] + [[70, 80, 90, 100]]
    assert all(len(b) <= 3 for b in run.batches[:-1]) and run.batches[-1] == [7, 8, 9, 10]
    assert sorted(x for b in run.batches for x in b) == list(range(11))


def test_a_bad_job_fails_alone_and_the_others_are_answered():
    run = Recorder()
    batcher = Batcher(run, max_batch_size=16, batch_timeout_ms=50)
    specs = [([1], "k", 0), ([2, 3], "k", 0), ([-1], "k", 0), ([4], "k", 0), ([5], "k", 0)]
    results = asyncio.run(_submit_all(batcher, specs))
    assert isinstance(results[2], UserError) and "-1" in str(results[2])
    good = [r["y"].tolist() for i, r in enumerate(results) if i != 2]
    assert good == [[10], [20, 30], [40], [50]]
    assert run.batches[0] == [1, 2, 3, -1, 4, 5] and batcher.stats.retries >= 1
    # Each good value ran successfully exactly once after the failed merged call.
    answered = [x for b in run.batches[1:] if -1 not in b for x in b]
    assert sorted(answered) == [1, 2, 3, 4, 5]


def test_a_bug_in_the_model_reaches_every_job():
    def broken(context, inputs):
        raise RuntimeError("bug")

    batcher = Batcher(broken, max_batch_size=8, batch_timeout_ms=20)
    results = asyncio.run(_submit_all(batcher, [([1], "k", 0), ([2], "k", 0)]))
    assert all(isinstance(r, RuntimeError) for r in results)


def test_zero_timeout_still_answers_every_job():
    run = Recorder()
    batcher = Batcher(run, max_batch_size=4, batch_timeout_ms=0)
    results = asyncio.run(_submit_all(batcher, [([i], "k", 0) for i in range(6)]))
    assert [r["y"].tolist() for r in results] == [[10 * i] for i in range(6)]


@pytest.mark.parametrize("kwargs", [{"max_batch_size": 0}, {"batch_timeout_ms": -1}])
def test_bad_settings_are_user_errors(kwargs):
    with pytest.raises(UserError):
        Batcher(Recorder(), **kwargs)
