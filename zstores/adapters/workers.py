"""Worker threads for the zarr-python 3 adapter's blocking calls, many per hand-off.

zarr-python 3 awaits store calls from its event loop; a blocking store's
call (disk, network) must run in a thread.  ``asyncio.to_thread`` wakes a
thread for each call and the loop again for each result: with zarr's
``async.concurrency`` chunks in flight that is two wake-ups per chunk.
``Workers`` pays them once per batch: calls queued in one turn of the loop
go to the threads together, and results of quick calls come back together.
Measured against ``asyncio.to_thread`` in one process, side by side
(docs/benchmarks.md, "The zarr 3 adapter's worker threads"): 64 gathered
gets of 64 KiB values from a DirectoryStore or SQLiteStore take about half
the time, which is why the adapter keeps this module rather than
``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .._concurrency import ADAPTER_THREADS

__all__ = ["WORKERS", "Workers"]

T = TypeVar("T")

Queued = tuple[Callable[[], Any], "asyncio.Future[Any]"]  # (call, future)
Outcome = tuple["asyncio.Future[Any]", bool, Any]  # (future, succeeded, result or error)


class Workers:
    """Worker threads that run blocking calls, many per hand-off.

    ``run`` queues a call; the first call queued in a turn of the event loop
    schedules a flush for the next turn, which wakes at most one thread per
    queued call; the threads take calls from the shared queue until it is
    empty.  Results of quick calls travel back to the loop together, at most
    ``_HOLD_SECONDS`` after the first of them; a slow call's result goes back
    at once.  A hand-off each way costs a thread wake-up; batching pays it
    once for up to ``async.concurrency`` chunks where ``asyncio.to_thread``
    pays it for each.
    """

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._queued: dict[asyncio.AbstractEventLoop, list[Queued]] = {}

    def _executor(self) -> ThreadPoolExecutor:
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._threads,
                                                    thread_name_prefix="zstores-zarr")
                pool = self._pool
        return pool

    def after_fork(self) -> None:
        # The parent's threads do not exist in a forked child.
        self._lock = threading.Lock()
        self._pool = None
        self._queued = {}

    def run(self, call: Callable[[], T]) -> asyncio.Future[T]:
        """Queue ``call`` for a worker thread; await the returned future for its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        queued = self._queued.get(loop)
        if queued is None:
            queued = self._queued[loop] = []
            loop.call_soon(self._flush, loop)
        queued.append((call, future))
        return future

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        queued = self._queued.pop(loop, [])
        work = deque(queued)
        pool = self._executor()
        for _ in range(min(len(queued), self._threads)):
            pool.submit(_drain, loop, work)


# How long a worker holds results of quick calls to send them in one wake-up.
_HOLD_SECONDS = 0.0002


def _drain(loop: asyncio.AbstractEventLoop, work: deque[Queued]) -> None:
    outcomes: list[Outcome] = []
    first_held = 0.0
    while True:
        try:
            call, future = work.popleft()
        except IndexError:
            break
        started = time.monotonic()
        try:
            outcomes.append((future, True, call()))
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting task
            outcomes.append((future, False, error))
        now = time.monotonic()
        if len(outcomes) == 1:
            first_held = now
        if now - started >= _HOLD_SECONDS or now - first_held >= _HOLD_SECONDS:
            _send(loop, outcomes)
            outcomes = []
    if outcomes:
        _send(loop, outcomes)


def _send(loop: asyncio.AbstractEventLoop, outcomes: list[Outcome]) -> None:
    try:
        loop.call_soon_threadsafe(_settle, outcomes)
    except RuntimeError:
        pass  # the loop has closed: nobody awaits these any more


def _settle(outcomes: list[Outcome]) -> None:
    for future, succeeded, value in outcomes:
        if future.done():  # cancelled meanwhile
            continue
        if succeeded:
            future.set_result(value)
        else:
            future.set_exception(value)


# As many threads as asyncio's default executor, which LocalStore uses.
WORKERS = Workers(ADAPTER_THREADS)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WORKERS.after_fork)
