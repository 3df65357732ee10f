"""A small asynchronous batcher: requests that arrive together share one model call.

Each request is a `Job`: a dict of input arrays whose leading dimension is its number of
instances, and a merge key. The batcher's single worker takes the first waiting job, gathers
the jobs with the same key that arrive within `batch_timeout_ms` (up to `max_batch_size`
instances in all), concatenates their inputs, runs the model once in a thread executor (so the
event loop keeps serving) and slices the outputs back. Jobs with different keys (another
signature, other extra inputs such as `beam_size`) run in later rounds, never merged.

When a merged batch fails with a `UserError` (one bad image among good ones), the batch is
split in halves and each half retried, so every good request is still answered and only the
bad one gets the error.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from common.errors import UserError

Arrays = dict[str, np.ndarray]


@dataclasses.dataclass
class Job:
    """One request waiting for the model.

    Args:
        key: jobs are merged only with jobs of an equal key; `None` never merges.
        context: passed to `run` with the inputs (say, the signature name); jobs of an
            equal key must have an equal context.
        inputs: name -> array; arrays named in `batched` have leading dimension `size`.
        size: the number of instances.
        batched: the input names that are concatenated when jobs merge; the others are
            the same in every job of a key and are passed once.
        future: resolved with the job's outputs (name -> array) or its exception.
    """

    key: Hashable | None
    context: Any
    inputs: Arrays
    size: int
    batched: frozenset[str]
    future: asyncio.Future


@dataclasses.dataclass
class BatchStats:
    """Counters for monitoring and tests."""

    requests: int = 0  # jobs submitted
    calls: int = 0  # model calls, retries included
    merged_calls: int = 0  # model calls that served more than one job
    retries: int = 0  # model calls made again after a merged batch failed


class Batcher:
    """Merges concurrent jobs into one call of `run`.

    Args:
        run: `run(context, inputs) -> outputs`, both name -> array; called in `executor`. It
            raises a
            `UserError` for bad input, which fails only the job(s) that caused it.
        max_batch_size: the most instances merged into one call (a larger job runs alone).
        batch_timeout_ms: how long the first job of a batch waits for others; 0 merges only
            jobs that are already waiting.
        executor: where `run` runs; one worker thread by default.

    Example:
    >>> batcher = Batcher(lambda ctx, x: {"y": x["x"] * ctx}, max_batch_size=8, batch_timeout_ms=2)
    >>> async def main():
    ...     batcher.start()
    ...     out = await batcher.submit({"x": np.arange(3)}, size=3, key="k", context=2)
    ...     await batcher.stop()
    ...     return out["y"].tolist()
    >>> asyncio.run(main())
    [0, 2, 4]
    """

    def __init__(
        self,
        run: Callable[[Any, Arrays], Arrays],
        max_batch_size: int = 32,
        batch_timeout_ms: float = 5.0,
        executor: concurrent.futures.Executor | None = None,
    ):
        if max_batch_size < 1:
            raise UserError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if not batch_timeout_ms >= 0:
            raise UserError(f"batch_timeout_ms must be >= 0, got {batch_timeout_ms}")
        self._run = run
        self.max_batch_size = int(max_batch_size)
        self.batch_timeout_s = float(batch_timeout_ms) / 1000.0
        self._own_executor = executor is None
        self._executor = executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="model"
        )
        self._queue: asyncio.Queue[Job] | None = None
        self._held: collections.deque[Job] = collections.deque()
        self._worker: asyncio.Task | None = None
        self.stats = BatchStats()

    def start(self) -> None:
        """Start the worker on the running event loop."""
        self._queue = asyncio.Queue()
        self._worker = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        """Stop the worker, fail the jobs still waiting, and shut the executor down."""
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        waiting = list(self._held)
        while self._queue is not None and not self._queue.empty():
            waiting.append(self._queue.get_nowait())
        for job in waiting:
            if not job.future.done():
                job.future.set_exception(RuntimeError("the server is shutting down"))
        if self._own_executor:
            self._executor.shutdown(wait=True)

    async def submit(
        self,
        inputs: Arrays,
        size: int,
        key: Hashable | None,
        context: Any = None,
        batched: frozenset[str] | None = None,
    ) -> Arrays:
        """Queue a job and wait for its outputs (name -> array with leading dimension `size`,
        or the model's own outputs when the job ran alone)."""
        if self._queue is None:
            raise RuntimeError("Batcher.start() has not been called")
        future = asyncio.get_running_loop().create_future()
        batched = frozenset(inputs) if batched is None else batched
        self.stats.requests += 1
        await self._queue.put(Job(key, context, inputs, int(size), batched, future))
        return await future

    async def _next(self) -> Job:
        if self._held:
            return self._held.popleft()
        return await self._queue.get()

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            first = await self._next()
            jobs, size = [first], first.size
            deadline = loop.time() + self.batch_timeout_s
            # Jobs held back from an earlier round are considered first, in arrival order.
            held, self._held = self._held, collections.deque()
            candidates = collections.deque(held)
            while first.key is not None and size < self.max_batch_size:
                if candidates:
                    job = candidates.popleft()
                else:
                    remaining = deadline - loop.time()
                    try:
                        if remaining <= 0:
                            job = self._queue.get_nowait()
                        else:
                            job = await asyncio.wait_for(self._queue.get(), remaining)
                    except (TimeoutError, asyncio.QueueEmpty):
                        break
                if job.key == first.key and size + job.size <= self.max_batch_size:
                    jobs.append(job)
                    size += job.size
                else:
                    self._held.append(job)
            self._held.extend(candidates)
            await self._execute(jobs)

    async def _execute(self, jobs: list[Job]) -> None:
        jobs = [job for job in jobs if not job.future.done()]  # a client may have gone
        if not jobs:
            return
        loop = asyncio.get_running_loop()
        total = sum(job.size for job in jobs)
        if len(jobs) == 1:
            inputs = jobs[0].inputs
        else:
            inputs = dict(jobs[0].inputs)
            for name in jobs[0].batched:
                inputs[name] = np.concatenate([job.inputs[name] for job in jobs], axis=0)
        self.stats.calls += 1
        self.stats.merged_calls += len(jobs) > 1
        try:
            outputs = await loop.run_in_executor(
                self._executor, self._run, jobs[0].context, inputs
            )
            if len(jobs) > 1 and any(np.shape(v)[:1] != (total,) for v in outputs.values()):
                raise UserError("outputs without a batch dimension cannot be split")
        except UserError as exc:
            if len(jobs) == 1:
                _resolve(jobs[0].future, exception=exc)
                return
            # Find the job(s) at fault by halving; the others are answered normally.
            self.stats.retries += 1
            half = len(jobs) // 2
            await self._execute(jobs[:half])
            await self._execute(jobs[half:])
            return
        except Exception as exc:  # a bug or a resource error: every job gets it
            for job in jobs:
                _resolve(job.future, exception=exc)
            return
        if len(jobs) == 1:
            _resolve(jobs[0].future, result=outputs)
            return
        start = 0
        for job in jobs:
            stop = start + job.size
            _resolve(job.future, result={k: v[start:stop] for k, v in outputs.items()})
            start = stop


def _resolve(future: asyncio.Future, result: Any = None, exception: BaseException | None = None):
    if future.done():
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)
